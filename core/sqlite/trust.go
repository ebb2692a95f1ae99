package sqlite

// # The database's directory is shared
//
// The directory of a database is often writable by every user (the
// original made it 1777), so anyone can create <db>-journal before SQLite
// looks at it. SQLite rolls back any journal it finds, whoever wrote it
// (that is how a crashed writer's half-done transaction is undone), so a
// user who cannot write a 0644 database could still rewrite its records by
// planting a journal built from a modified copy. And a FIFO at that name
// blocks SQLite's open forever, with the hard-link lock held.
//
// So the VFS (vfs.c) opens nothing that can block or follow a link: the
// unix VFS's open system call is replaced by one that adds O_NONBLOCK and
// refuses FIFOs, sockets and block devices, and journals are opened
// non-blocking and fstat'ed. A journal this connection did not create is
// rolled back only if the journal rule trusts it (tira_journal_verdict,
// the one definition of the rule, called from here too):
//
//   - a regular file with one link (not a second name of another file);
//   - no more writable by others than the database (group and other write
//     bits of the journal are a subset of the database's);
//   - written by a user who could have written the database's pages
//     directly: the database's owner, the caller, root; anyone when the
//     database is writable by everyone (the original's 0666 files, where a
//     mixed fleet of users rolls back each other's crashed writers); a
//     member of the database's group when it is group-writable (the
//     journal has that group, in a directory not writable by everyone).
//
// Anything else is refused: the open fails with refusedCode, nothing of
// the file is read, and the store reports a *JournalError naming the file,
// its owner and mode, and the rule it breaks. tirastore check reports such
// a journal as foreign; check --repair moves aside what cannot be a crashed
// writer's, and a hot journal is applied (AdoptJournal) or moved aside only
// when the operator says which (core/operator/check.go). docs/COMPAT.md and docs/lock-protocol.md state
// the rule for operators.

/*
int tira_journal_verdict(unsigned jMode, unsigned long jNlink, unsigned jUid, unsigned jGid,
                         unsigned dbMode, unsigned dbUid, unsigned dbGid, unsigned dirMode,
                         unsigned euid);
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	sqlite3 "github.com/mattn/go-sqlite3"
	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/shareddir"
)

// refusedCode is the extended result code of an open that the VFS refused
// (TIRA_REFUSED in vfs.c): SQLITE_CANTOPEN with a code of our own.
var refusedCode = sqlite3.ErrNoExtended(int(sqlite3.ErrCantOpen) | 64<<8)

// IsRefused reports an SQLite error caused by the VFS refusing a file of
// the database's directory (a FIFO or link at the journal's name, an
// untrusted journal): InspectJournal says which and why.
func IsRefused(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.ExtendedCode == refusedCode
}

// Verdicts of the journal rule (TIRA_JOURNAL_* in vfs.c).
const (
	JournalTrusted    = 0 // may be rolled back
	JournalNotRegular = 1 // a FIFO, a symbolic link, a directory, ...
	JournalLinks      = 2 // a second name of another file
	JournalMode       = 3 // writable by users who cannot write the database
	JournalOwner      = 4 // written by a user who could not write the database
)

// JournalPath is SQLite's rollback journal of the database at dbPath.
func JournalPath(dbPath string) string { return dbPath + "-journal" }

// Journal is what is at a database's journal name, judged by the rule.
type Journal struct {
	Path    string
	Dev     uint64
	Ino     uint64
	Kind    string // "a regular file", "a FIFO", ...
	UID     uint32
	Mode    uint32 // permission bits
	Nlink   uint64
	Size    int64
	Hot     bool // a regular file whose header is not zeroed: SQLite would roll it back
	Verdict int  // JournalTrusted, ...
	// Of the database, for the message.
	DBUID  uint32
	DBMode uint32
}

// Trusted reports whether the journal rule lets it be rolled back.
func (j *Journal) Trusted() bool { return j.Verdict == JournalTrusted }

// Why says, in a sentence, why the rule refuses the journal ("" if it
// does not).
func (j *Journal) Why() string {
	switch j.Verdict {
	case JournalNotRegular:
		return fmt.Sprintf("it is %s owned by %s, not a journal", j.Kind, identity.Owner(j.UID))
	case JournalLinks:
		return fmt.Sprintf("it has %d hard links: a journal is never a second name of another file", j.Nlink)
	case JournalMode:
		return fmt.Sprintf("its mode %04o lets users write it who cannot write the database (mode %04o)", j.Mode, j.DBMode)
	case JournalOwner:
		return fmt.Sprintf("it is owned by %s, who can neither write the database (owned by %s, mode %04o) nor is you",
			identity.Owner(j.UID), identity.Owner(j.DBUID), j.DBMode)
	}
	return ""
}

// InspectJournal looks at the journal name of the database at dbPath
// without following a link or blocking: nil when nothing is there.
func InspectJournal(dbPath string) (*Journal, error) {
	path := JournalPath(dbPath)
	var st, db, dir unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if err == unix.ENOENT {
			return nil, nil
		}
		return nil, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	if err := unix.Stat(dbPath, &db); err != nil {
		return nil, &os.PathError{Op: "stat", Path: dbPath, Err: err}
	}
	dirMode := uint32(0o777) // unknown: the group case is off, as in vfs.c
	if unix.Stat(filepath.Dir(dbPath), &dir) == nil {
		dirMode = dir.Mode & 0o7777
	}
	j := &Journal{
		Path: path, Dev: uint64(st.Dev), Ino: st.Ino, Kind: shareddir.Kind(st.Mode), UID: st.Uid, Mode: st.Mode & 0o777,
		Nlink: uint64(st.Nlink), Size: st.Size, DBUID: db.Uid, DBMode: db.Mode & 0o777,
	}
	j.Verdict = int(C.tira_journal_verdict(C.unsigned(st.Mode), C.ulong(st.Nlink), C.unsigned(st.Uid), C.unsigned(st.Gid),
		C.unsigned(db.Mode&0o777), C.unsigned(db.Uid), C.unsigned(db.Gid), C.unsigned(dirMode), C.unsigned(os.Geteuid())))
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size > 0 {
		if f, _, err := shareddir.Open(path, os.O_RDONLY); err == nil {
			var b [1]byte
			if n, err := f.ReadAt(b[:], 0); (err == nil || err == io.EOF) && n == 1 {
				j.Hot = b[0] != 0
			}
			f.Close()
		}
	}
	return j, nil
}

// JournalError is a journal the store refused to roll back (or a name at
// the journal's place that is no journal): the database was left as it
// is.
type JournalError struct {
	Journal *Journal
	DBPath  string
}

// Error names the journal, whose it is and why it was refused, and what
// to do.
func (e *JournalError) Error() string {
	j := e.Journal
	if j.Verdict == JournalNotRegular {
		return fmt.Sprintf("%s is %s owned by %s, not a journal: the database cannot be used while it is there "+
			"(another user may have planted it). `tirastore check --repair %s` moves it aside, or its owner "+
			"or root removes it", j.Path, j.Kind, identity.Owner(j.UID), e.DBPath)
	}
	if j.Hot && (j.Verdict == JournalMode || j.Verdict == JournalOwner) {
		return fmt.Sprintf("%s was not rolled back into %s: %s. The database was left as it is and cannot be used "+
			"while the journal is there. If it is a crashed writer's journal (a worker that went on writing after the "+
			"database was chmod'ed or chown'ed), the database is half-written without it: once the database's owner "+
			"has vetted it, `tirastore check --apply-journal %s` rolls it back. If another user planted it to rewrite "+
			"records, `tirastore check --discard-journal %s` moves it aside", j.Path, e.DBPath, j.Why(), e.DBPath, e.DBPath)
	}
	return fmt.Sprintf("%s was not rolled back into %s: %s (another user may have planted it to rewrite records). "+
		"The database was left as it is; `tirastore check --repair %s` moves the journal aside. If it is a crashed "+
		"writer's journal that you trust, give it to the database's owner (chown) with the database's mode and "+
		"the next open rolls it back", j.Path, e.DBPath, j.Why(), e.DBPath)
}

// AdoptJournal makes the journal j that the rule refused (a regular file
// with one link, judged by InspectJournal) one that it trusts, so that the
// database's next open rolls it back: what an operator does once the
// database's owner has vetted it as a crashed writer's journal (a worker
// of another user that kept writing after a chmod, say). Its bytes are
// copied into a new journal created by this user with the database's mode
// (and owner, as root), and the refused file itself is kept at aside. The
// caller holds the database's lock, so that nothing opens the database
// between the two renames; a file at the journal's name that is no longer
// the one judged is left alone (an error).
func AdoptJournal(dbPath string, j *Journal, aside string) error {
	if j.Verdict != JournalMode && j.Verdict != JournalOwner {
		return fmt.Errorf("%s cannot be applied: %s", j.Path, j.Why())
	}
	f, st, err := shareddir.Open(j.Path, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	if uint64(st.Dev) != j.Dev || st.Ino != j.Ino || st.Nlink != 1 {
		return fmt.Errorf("%s changed since it was judged: nothing was applied", j.Path)
	}
	var db unix.Stat_t
	if err := unix.Stat(dbPath, &db); err != nil {
		return &os.PathError{Op: "stat", Path: dbPath, Err: err}
	}
	tmp := fmt.Sprintf("%s.adopting-%d", j.Path, os.Getpid())
	out, err := shareddir.Create(tmp, os.O_WRONLY, db.Mode&0o777)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, f)
	if err == nil && os.Geteuid() == 0 && (db.Uid != uint32(os.Geteuid()) || db.Gid != uint32(os.Getegid())) {
		err = out.Chown(int(db.Uid), int(db.Gid))
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if err = os.Rename(j.Path, aside); err == nil {
			if err = os.Rename(tmp, j.Path); err != nil && os.Rename(aside, j.Path) != nil {
				err = fmt.Errorf("%w; the journal is at %s, its trusted copy at %s", err, aside, tmp)
				return err
			}
		}
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(dbPath)); err == nil {
		d.Sync() // the new journal's name survives a power loss, as SQLite's would
		d.Close()
	}
	return nil
}
