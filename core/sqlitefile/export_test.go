package sqlitefile

import (
	"maps"
	"os"

	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// Hooks for the package's external tests, which open stores through core.

// SetPrefetchMaxPages sets the prefetch bound (0: leave it) and returns a
// function that restores the old one.
func SetPrefetchMaxPages(n uint32) (restore func()) {
	old := tuning.PrefetchMaxPages
	if n != 0 {
		tuning.PrefetchMaxPages = n
	}
	return func() { tuning.PrefetchMaxPages = old }
}

// HeaderPages is the database size the header of the file at path records.
func HeaderPages(path string) (uint32, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	h, err := readHeader(f)
	if err != nil {
		return 0, false, err
	}
	n, ok := h.generation().pages()
	return n, ok, nil
}

// CachedPrograms are the programs b's cache holds complete, and those it
// found too big to load.
func CachedPrograms(b storage.Backend) (complete, tooBig map[string]bool) {
	s := b.(*Backend)
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	complete = map[string]bool{}
	for h, p := range s.cache.progs {
		if p.complete {
			complete[h] = true
		}
	}
	return complete, maps.Clone(s.cache.tooBig)
}

// SetIndexed makes b's cache believe the records table has (or lacks) the
// program_hash index.
func SetIndexed(b storage.Backend, ok bool) { b.(*Backend).cache.setIndexed(ok) }

// SetMaxCached sets the cache's bound on entries and returns a function
// that restores the old one.
func SetMaxCached(n int) (restore func()) {
	old := tuning.MaxCached
	tuning.MaxCached = n
	return func() { tuning.MaxCached = old }
}

// Counters are b's cache counters.
func Counters(b storage.Backend) CacheCounters { return b.(*Backend).CacheCounters() }

// WritesWaiting reports whether b sees a write of another process of this
// node waiting for the lock (what a locked lookup asks before a load).
func WritesWaiting(b storage.Backend) bool { return b.(*Backend).local.queue.WritesWaiting() }
