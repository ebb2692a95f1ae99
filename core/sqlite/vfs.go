// # The tirastore VFS
//
// Connections use "tirastore" ([VFSName]), a small SQLite VFS written in C
// (vfs.c) over SQLite's built-in "unix-none" VFS: the unix VFS without POSIX
// advisory locks, which protect nothing across the nodes of a cluster
// filesystem (the hard-link lock, held around every use of a connection, is
// what serializes). It exists for speed on Lustre and NFS, where every
// path-based metadata operation (open, create, stat, unlink, ...) is a round
// trip to the metadata server while I/O on an open descriptor is cheap. With
// one connection kept open across operations, unix-none makes these
// path-based calls per write transaction:
//
//	stat(<db>-journal)   hot-journal check
//	stat(<db>-wal)       is there a WAL to open?
//	stat(<db>)           findCreateFileMode: copy the database's mode to the journal
//	open(<db>-journal, O_CREAT)
//	open(<dir>)          + fsync + close: make the new journal's name durable
//	unlink(<db>-journal) commit (journal_mode=DELETE)
//
// and stat(<db>-journal) and stat(<db>-wal) per read transaction. The
// tirastore VFS keeps only stat, open and unlink of the journal for a write
// and stat of the journal for a read. Each removal, and why it is safe:
//
//   - stat(<db>-wal): xAccess answers "no -wal file" for any name ending in
//     "-wal" without a system call. A database opened through this VFS can
//     never be in WAL mode: its file methods have no shared memory (no
//     xShmMap, as in unix-none), so SQLite cannot open a WAL; a database whose
//     header says WAL (bytes 18/19 = 2) fails with SQLITE_CANTOPEN at its
//     first transaction, before any page is trusted, whether or not a -wal
//     file exists. A -wal file next to a rollback-journal database (header
//     bytes 1) is always stale: SQLite checkpoints and deletes the WAL before
//     it rewrites the header from WAL to rollback mode, and sets the header to
//     WAL before it writes any WAL frame. The engine must still refuse WAL
//     files up front with [CheckHeader] (the engine reads the header through a descriptor it keeps), for a clear message
//     instead of "unable to open database file". This coupling is deliberate:
//     TiraStore needs journal_mode=DELETE (COMPAT.md), WAL's shared memory
//     does not work across nodes, and this VFS depends on the header check.
//   - stat(<db>): the database's mode and owner are read by fstat of a
//     read-only descriptor on the database that the connection opens at its
//     first journal and keeps (no name lookup), at every journal open. A new
//     journal gets exactly the database's permission bits of that moment
//     whatever the umask (fchmod on the new descriptor, only when they
//     differ) and, when running as root, the database's owner and group
//     (fchown, only when they differ): SQLite's own policy, so that any
//     process that can write the 0666 database can also roll back and delete
//     a journal left by a crash, and a journal left after the owner tightened
//     the database to 0644 is no more writable than the database and is
//     trusted (and rolled back) by the next open. A database that cannot be
//     opened for reading is stat'ed by name instead.
//   - open(<dir>)+fsync+close: with synchronous=FULL SQLite fsyncs the
//     directory once after creating a journal, so that the journal's name
//     survives a power loss (otherwise a crash could lose the hot journal and
//     leave a half-written database). The VFS opens the directory once per
//     connection, at the first journal, and fsyncs that descriptor at the same
//     point. fsync on a directory descriptor flushes the directory, whichever
//     descriptor it is, so durability is the same; the descriptor follows the
//     directory inode, which is the one holding the database the connection
//     has open. If the directory cannot be opened, the VFS falls back to
//     SQLite's open+fsync+close each time, and like SQLite it ignores a failed
//     directory fsync (some systems cannot).
//
// The journal itself is implemented by the VFS with plain POSIX calls on its
// descriptor (pread/pwrite loops, ftruncate, fsync or fdatasync, fstat), with
// unixOpen's open flags and error codes, the unix VFS's sector size and device
// characteristics, and no locks (as unix-none). The hot-journal check is
// unchanged: a journal left by a crashed writer, whichever SQLite wrote it
// (this VFS, standard SQLite in an old Python worker, another node), is
// found by stat and rolled back before anything is read, and a journal this
// VFS leaves is an ordinary SQLite journal that standard SQLite rolls back.
// Main database files, temporary files, xDelete and everything else are
// unix-none's.
//
// The C code declares the few public SQLite functions it calls itself
// (vfs_sqlite3.h); they resolve at link time to the amalgamation that
// go-sqlite3 compiles into the same binary or shared library.
package sqlite

/*
int tirastore_vfs_register(void);
*/
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
)

// VFSName is the name under which the tirastore VFS is registered; Open
// selects it with vfs=tirastore in the connection URI.
const VFSName = "tirastore"

var (
	registerOnce sync.Once
	registerErr  error
)

// RegisterVFS registers the tirastore VFS with SQLite (not as the default
// VFS). It runs once, from this package's init, so the VFS exists before the
// first Open; later calls return the first call's result.
func RegisterVFS() error {
	registerOnce.Do(func() {
		if rc := C.tirastore_vfs_register(); rc != 0 {
			registerErr = fmt.Errorf("sqlite: cannot register the %s VFS (SQLite result code %d)", VFSName, int(rc))
		}
	})
	return registerErr
}

func init() { _ = RegisterVFS() }

// HeaderSize is the size of the SQLite database header that CheckHeader reads.
const HeaderSize = 100

// ErrWALMode is matched (errors.Is) by the error CheckHeader returns for a
// database in WAL mode.
var ErrWALMode = errors.New("database is in WAL mode")

// WALModeError reports a database file whose header says WAL mode.
type WALModeError struct{ Path string }

func (e *WALModeError) Error() string {
	return fmt.Sprintf("%s is an SQLite database in WAL mode (header bytes 18-19 = 2); "+
		"TiraStore needs a rollback-journal database (journal_mode=DELETE): "+
		"convert it with `sqlite3 %s 'PRAGMA journal_mode=DELETE'` while nothing else uses it", e.Path, e.Path)
}

// Is makes errors.Is(err, ErrWALMode) true.
func (e *WALModeError) Is(target error) bool { return target == ErrWALMode }

var sqliteMagic = []byte("SQLite format 3\x00")

// CheckHeader checks the first bytes of the database file at path (up to
// HeaderSize; fewer when the file is shorter) and returns a *WALModeError
// when the header says WAL mode (file format write or read version, bytes
// 18 and 19, equal to 2). The tirastore VFS relies on this check (see the
// package documentation). Anything else is left to SQLite: an empty file is
// a new database, and a file that is not an SQLite database at all fails
// with SQLITE_NOTADB when it is opened.
func CheckHeader(path string, hdr []byte) error {
	if len(hdr) < 20 || !bytes.HasPrefix(hdr, sqliteMagic) {
		return nil
	}
	if hdr[18] == 2 || hdr[19] == 2 {
		return &WALModeError{Path: path}
	}
	return nil
}
