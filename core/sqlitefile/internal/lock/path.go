package lock

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tirastore/tirastore/core/pypath"
)

// PathFor returns the lock path of a database, as the original computes it:
// Path(db).resolve().with_suffix(".db.lock"). It must agree byte for byte,
// or Go and Python workers would lock different files for the same database.
//
// cache.db -> cache.db.lock, cache.sqlite -> cache.db.lock,
// cache -> cache.db.lock, a.b.c -> a.b.db.lock, .hidden -> .hidden.db.lock.
// The path is first made absolute with symlinks of its existing prefix
// resolved, like Python's non-strict resolve(); the database need not exist.
func PathFor(dbPath string) (string, error) {
	p, err := pypath.Resolve(dbPath)
	if err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	return pypath.WithSuffix(p, ".db.lock")
}

// dirOf is the directory that holds the lock and the tickets.
func dirOf(lockPath string) string { return filepath.Dir(lockPath) }

// NameOf says what the file name base is to the lock at lockPath when it is
// in the lock's directory: "the lock file", "the break lock", "a lock moved
// aside by a breaker" (the names asideName makes, shortened ones included)
// or "a lock ticket file"
// (TicketPrefix: the tickets of every database of the directory share the
// ".lock_" start). It is "" for a name the protocol does not use. The
// output check (core/outfile) refuses these names, so that no export or
// backup is ever written over a file of the lock (docs/lock-protocol.md,
// "Files").
func NameOf(lockPath, base string) string {
	lb := filepath.Base(lockPath)
	switch {
	case base == lb:
		return "the lock file"
	case base == lb+BreakSuffix:
		return "the break lock"
	case strings.HasPrefix(base, ticketStart):
		return "a lock ticket file"
	case strings.HasPrefix(base, lb+".stale.") || strings.HasPrefix(base, lb+BreakSuffix+".stale."):
		return "a lock moved aside by a breaker"
	}
	// asideName's shortened form, at the name limit: a prefix of the lock's
	// (or the break lock's) name, then ".stale.<pid>.<random>".
	if i := strings.LastIndex(base, ".stale."); i > 0 && len(base) == maxNameLen &&
		strings.HasPrefix(lb+BreakSuffix, base[:i]) {
		return "a lock moved aside by a breaker"
	}
	return ""
}
