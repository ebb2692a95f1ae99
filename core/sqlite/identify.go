package sqlite

import (
	"io"
	"os"
)

// Companion is a file SQLite keeps beside a database, and what it is.
type Companion struct {
	Path, What string
}

// Companions are the files SQLite may keep beside the database at dbPath:
// the rollback journal this engine uses (JournalPath), and the
// write-ahead log and its shared-memory index of a database that another
// tool switched to WAL. The output check (core/outfile) never writes a
// file over one of them.
func Companions(dbPath string) []Companion {
	return []Companion{
		{JournalPath(dbPath), "the journal"},
		{dbPath + "-wal", "the write-ahead log"},
		{dbPath + "-shm", "the shared-memory index"},
	}
}

// fileHeader starts every SQLite database file (its first 16 bytes).
const fileHeader = "SQLite format 3\x00"

// HasHeader reports whether the open file f starts with SQLite's header:
// whether it is a database file, whatever its tables.
func HasHeader(f io.ReaderAt) (bool, error) {
	b := make([]byte, len(fileHeader))
	n, err := f.ReadAt(b, 0)
	if n < len(b) {
		if err == io.EOF {
			err = nil
		}
		return false, err
	}
	return string(b) == fileHeader, nil
}

// FileInfo is what Identify read in a database file.
type FileInfo struct {
	// TiraStore: it has the tables of a TiraStore database (db_meta,
	// programs, records: HasTables); Meta is then its db_meta rows.
	TiraStore bool
	Meta      map[string]string
}

// Identify reads which tables the SQLite file at path has and, for a
// TiraStore database, its db_meta rows. It opens the file read-only and
// immutable (SQLite neither locks it nor looks at a journal beside it)
// through the engine's VFS (no link followed, nothing that blocks), so it
// writes nothing and never rolls anything back; a file being written
// meanwhile may read as an error, which the caller counts as "cannot tell".
func Identify(path string) (*FileInfo, error) {
	if _, err := os.Lstat(path); err != nil {
		return nil, err // SQLite would name a missing file less clearly
	}
	d, err := openDSN("file:" + uriPath(path) + "?mode=ro&immutable=1&vfs=" + VFSName)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	info := &FileInfo{}
	if info.TiraStore, err = d.HasTables(); err != nil || !info.TiraStore {
		return info, err
	}
	rows, err := d.query("SELECT key, value FROM db_meta")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	info.Meta = map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		info.Meta[k] = v
	}
	return info, rows.Err()
}
