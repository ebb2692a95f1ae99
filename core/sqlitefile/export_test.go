package sqlitefile

import (
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

// Counters are b's cache counters.
func Counters(b storage.Backend) CacheCounters { return b.(*Backend).CacheCounters() }
