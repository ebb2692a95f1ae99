package sqlite

import (
	"fmt"

	"github.com/mattn/go-sqlite3"
)

// Backup is SQLite's online backup of one database into a new file, in
// steps (sqlite3_backup_step): the caller holds the database's lock for
// each step only, so that writers are not kept out for the whole copy.
// SQLite restarts the copy at the next step when another connection
// changed the source since the last one, so the finished copy is one
// consistent state of the database.
type Backup struct {
	src, dst *DB
	bk       *sqlite3.SQLiteBackup
}

// StartBackup prepares the copy of the database at srcPath into destPath,
// an empty file that the caller created (core/shareddir: never a name
// planted in a shared directory), through a connection of its own (the
// store's kept one may be replaced between steps). Both are opened through
// the engine's VFS, which creates nothing it did not check.
func StartBackup(srcPath, destPath string) (*Backup, error) {
	src, err := Open(srcPath, nil) // reads only, under the caller's lock
	if err != nil {
		return nil, err
	}
	dst, err := Open(destPath, nil)
	if err != nil {
		src.Close()
		return nil, err
	}
	b := &Backup{src: src, dst: dst}
	err = dst.conn.Raw(func(dc any) error {
		return src.conn.Raw(func(sc any) error {
			d, ok1 := dc.(*sqlite3.SQLiteConn)
			s, ok2 := sc.(*sqlite3.SQLiteConn)
			if !ok1 || !ok2 {
				return fmt.Errorf("sqlite: unexpected driver connections %T, %T", dc, sc)
			}
			b.bk, err = d.Backup("main", s, "main")
			return err
		})
	})
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Step copies up to pages pages (-1: all that remain) and reports whether
// the copy is complete, with the pages remaining and the source's size.
func (b *Backup) Step(pages int) (done bool, remaining, total int, err error) {
	err = b.src.conn.Raw(func(any) error {
		done, err = b.bk.Step(pages)
		remaining, total = b.bk.Remaining(), b.bk.PageCount()
		return err
	})
	return done, remaining, total, err
}

// Close ends the backup and closes both connections (again: nothing);
// the destination file holds the whole copy only if the last Step
// reported done.
func (b *Backup) Close() error {
	if b.src == nil {
		return nil // closed already
	}
	var err error
	if b.bk != nil {
		err = b.bk.Finish()
		b.bk = nil
	}
	if cerr := b.dst.Close(); err == nil {
		err = cerr
	}
	b.src.Close()
	b.src, b.dst = nil, nil
	return err
}
