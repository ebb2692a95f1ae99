package lock

import (
	"fmt"
	"path/filepath"

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

// dirOf is the directory that holds the lock and the claims.
func dirOf(lockPath string) string { return filepath.Dir(lockPath) }
