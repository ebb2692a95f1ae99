package sqlitefile

import (
	"context"

	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// Hooks for the package's external tests, which open stores through core.

// SetMaxCached sets the cache's bound on entries and returns a function
// that restores the old one.
func SetMaxCached(n int) (restore func()) {
	old := tuning.MaxCached
	tuning.MaxCached = n
	return func() { tuning.MaxCached = old }
}

// SetMaxCachedBytes is SetMaxCached for the cache's bound on bytes.
func SetMaxCachedBytes(n int) (restore func()) {
	old := tuning.MaxCachedBytes
	tuning.MaxCachedBytes = n
	return func() { tuning.MaxCachedBytes = old }
}

// Counters are b's cache counters.
func Counters(b storage.Backend) CacheCounters { return b.(*Backend).CacheCounters() }

// ReadWhole reads program whole into b's cache, under the lock, as a
// burst's lookup does (resultCache.loadProgram), and returns its rows.
func ReadWhole(b storage.Backend, program string) (int, error) {
	s := b.(*Backend)
	err := s.withDB(context.Background(), "read whole", func(db *sqlite.DB) error {
		_, err := s.cache.loadProgram(db, program, "")
		return err
	})
	return int(s.cache.rows[program]), err
}
