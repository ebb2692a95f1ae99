package core

import (
	"os"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/sqlite"
)

// resultCache serves repeated lookups of one process without the lock.
//
// Every entry (a record, or "absent") was read under the lock, and the cache
// remembers the database generation (see generation) read right after it,
// still under the lock. A lookup that finds its key here reads the header
// through the kept descriptor (one pread, no metadata round trip) and
// checks that the file still has a name; if the generation is unchanged, no
// transaction has committed since the entry was read, so the entry is still
// what a locked read would return, and it is served. Otherwise the entries
// are dropped and the lookup takes the lock.
//
// Why a lock-free header read cannot make us serve a stale entry: a writer
// increments the change counter in page 1 during its commit, before the
// commit is acknowledged; so a lookup that starts after another process's
// record() returned reads the new counter. A writer that crashed mid-commit
// may leave page 1 changed (the lookup then takes the lock, whose next
// holder rolls back) or unchanged with other pages already written (the
// committed content is still the old one, which the entry reflects). A
// rollback restores the old header and the old content together.
//
// Only the lock-free check is new; a Store on a filesystem that needs fresh
// connections (NFS) never uses it (see conn).
//
// # Whole programs
//
// An autoscheduler asks about many schedules of one program. When a locked
// lookup finds that nothing has committed since this store's previous
// locked operation (a read-mostly phase: the generation read when the lock
// was taken is still the cache's), it loads every record of the program at
// once (up to prefetchLimit of them) and marks the program complete: later
// lookups of that program, hits and misses alike, are answered from memory
// until something commits. While others write, generations change at
// every operation and no prefetch happens, so writers never pay for it.
type resultCache struct {
	mu      sync.Mutex
	hdr     *os.File // nil: no lock-free reads (no kept connection)
	gen     generation
	entries map[string]*sqlite.Record // nil value: known to be absent
	// complete: programs (by hash) all of whose records are in entries;
	// tooBig: programs found to have more than prefetchLimit records at gen.
	complete, tooBig map[string]bool
	// atAcquire is the generation read when the lock was last taken (see
	// conn.checkConn), before this operation could change anything;
	// genSince is when this store first saw gen (monotonic).
	atAcquire generation
	genSince  time.Time
	// synced: sync ran in the current locked operation (reset when the
	// lock is taken), so that finish need not read the header again.
	synced bool
}

// prefetchLimit bounds a program prefetch: loading 10,000 records takes
// about 20 ms here and some megabytes. quietBeforePrefetch is how long the
// database must have stayed unchanged, as seen by this store's locked
// operations, before it loads a program: while others write (a commit
// every few milliseconds under load) it never does, and a store that gets
// the lock twice in a row between two commits is not fooled.
//
// prefetchMaxPages bounds the database a prefetch may scan. The original
// schema has no index on records.program_hash, so loading one program reads
// the whole records table under the lock: about 1.2 µs per page here on top
// of about 3 µs per record loaded (a 1,900-record program took 5-10 ms in a
// 930-page database, 8-14 ms in a 3,700-page one, after another process's
// commit), more on a cold Lustre client. Above 4,096 pages (16 MiB with the
// original's 4 KiB pages, about 40,000 records; some 5 ms of scanning, the
// lock time of a hundred locked lookups) there is no prefetch, and lookups
// go key by key through the primary-key index, as they do while others
// write.
const (
	prefetchLimit       = 10000
	quietBeforePrefetch = 20 * time.Millisecond
)

var prefetchMaxPages uint32 = 4096 // a variable for tests

// maxCached bounds the cache; when full it starts over (lookups of an
// autoscheduler are mostly of new schedules, so recency buys little).
const maxCached = 1 << 16

// setFile points lock-free reads at a new header descriptor (nil: none) and
// forgets every entry.
func (c *resultCache) setFile(hdr *os.File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hdr = hdr
	c.reset()
}

// reset forgets every entry (the caller holds c.mu).
func (c *resultCache) reset() {
	c.entries, c.complete, c.tooBig = nil, nil, nil
}

// get returns the entry for key of program progHash if the database is
// provably unchanged since it was read; ok is false otherwise (take the
// lock). An absent key of a complete program is a known miss.
func (c *resultCache) get(progHash, key string) (rec *sqlite.Record, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, ok = c.entries[key]
	if !ok && c.complete[progHash] {
		rec, ok = nil, true
	}
	if !ok || c.hdr == nil {
		return nil, false
	}
	if failpoint.Enabled(failpoint.CacheTrust) {
		return rec, true
	}
	if !c.unchanged() {
		c.reset()
		return nil, false
	}
	return rec, true
}

// noteAcquire remembers the generation read when the lock was taken.
func (c *resultCache) noteAcquire(g generation) {
	c.mu.Lock()
	c.atAcquire, c.synced = g, false
	c.mu.Unlock()
}

// shouldPrefetch: a quiet phase (nothing committed since this store's
// previous locked operation, which left entries, nor for
// quietBeforePrefetch before that) and progHash neither complete nor known
// to be too big. The caller holds the lock.
func (c *resultCache) shouldPrefetch(progHash string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pages, ok := c.atAcquire.pages(); !ok || pages > prefetchMaxPages {
		return false
	}
	return c.hdr != nil && progHash != "" && len(c.entries) > 0 && c.atAcquire == c.gen &&
		time.Since(c.genSince) >= quietBeforePrefetch && !c.complete[progHash] && !c.tooBig[progHash]
}

// putProgram remembers every record of a program (complete) or that it has
// too many to prefetch (recs nil). The caller holds the lock and has called
// sync since the read.
func (c *resultCache) putProgram(progHash string, recs []*sqlite.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hdr == nil {
		return
	}
	if recs == nil {
		if c.tooBig == nil {
			c.tooBig = map[string]bool{}
		}
		c.tooBig[progHash] = true
		return
	}
	if c.entries == nil || len(c.entries)+len(recs) > maxCached {
		c.reset()
		c.entries = make(map[string]*sqlite.Record, len(recs))
	}
	for _, r := range recs {
		c.entries[r.Key] = r
	}
	if c.complete == nil {
		c.complete = map[string]bool{}
	}
	c.complete[progHash] = true
}

// unchanged: the file still has a name and the same generation.
func (c *resultCache) unchanged() bool {
	if ok, err := linked(c.hdr); err != nil || !ok {
		return false
	}
	h, err := readHeader(c.hdr)
	return err == nil && h.generation() == c.gen
}

// sync re-reads the generation, under the lock, after a read whose result
// is about to be put. Entries survive only if nothing committed since they
// were read.
func (c *resultCache) sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncLocked()
}

// finish ends every successful locked operation: the generation it left
// behind (a write changed it), unless a sync in the operation read it
// already.
func (c *resultCache) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced {
		c.syncLocked()
	}
}

func (c *resultCache) syncLocked() {
	if c.hdr == nil {
		return
	}
	c.synced = true
	h, err := readHeader(c.hdr)
	if err != nil {
		c.reset()
		return
	}
	if g := h.generation(); g != c.gen || c.genSince.IsZero() {
		c.gen, c.genSince = g, time.Now()
		c.reset()
	}
}

// put remembers what a locked read returned for key (nil: absent). The
// caller holds the lock and has called sync since the read.
func (c *resultCache) put(key string, rec *sqlite.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hdr == nil {
		return
	}
	if c.entries == nil || len(c.entries) >= maxCached {
		c.reset()
		c.entries = make(map[string]*sqlite.Record)
	}
	c.entries[key] = rec
}
