package sqlitefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tirastore/tirastore/core/shareddir"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/lock"
)

// CompanionName says what the file at path is when its name is one a
// database keeps beside it, whatever database: a name of the lock's family
// (<db>.lock, its break lock, a ticket), or the journal (-wal, -shm) of an
// existing database file; "" otherwise. Neither an output nor a new
// database is ever made at such a name: a database created at another's
// lock file holds that lock for good, one at its journal makes it
// unusable.
func CompanionName(path string) string {
	dir, base := filepath.Split(path)
	// The lock a name of the family would belong to: <...>.db.lock.
	lp := filepath.Join(dir, ".db.lock")
	if i := strings.Index(base, ".db.lock"); i >= 0 {
		lp = filepath.Join(dir, base[:i+len(".db.lock")])
	}
	if what := lock.NameOf(lp, base); what != "" {
		return what + " of a TiraStore database in " + filepath.Clean(dir) + " (a name of the lock protocol)"
	}
	for _, suffix := range []string{"-journal", "-wal", "-shm"} {
		db, ok := strings.CutSuffix(path, suffix)
		if !ok {
			continue
		}
		if isDB, err := HasSQLiteHeader(db); err == nil && isDB {
			for _, f := range sqlite.Companions(db) {
				if f.Path == path {
					return f.What + " of the database " + db
				}
			}
		}
	}
	return ""
}

// HasSQLiteHeader reports whether the regular file at path starts with
// SQLite's header; a missing file or another kind of file is not a
// database. It opens without following a link or blocking (core/shareddir).
func HasSQLiteHeader(path string) (bool, error) {
	f, _, err := shareddir.Open(path, os.O_RDONLY)
	switch {
	case errors.Is(err, fs.ErrNotExist) || shareddir.IsRefused(err):
		return false, nil
	case err != nil:
		return false, err
	}
	defer f.Close()
	return sqlite.HasHeader(f)
}
