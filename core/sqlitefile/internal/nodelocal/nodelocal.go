// Package nodelocal is the per-user private directory for node-local files
// and the checked opens of the files in it.
//
// The node queue's gate files (internal/nodequeue), the group-commit spools
// (internal/spool) and the change logs (internal/changelog) live in
// node-local memory, /dev/shm (else os.TempDir(); $TIRASTORE_NODE_DIR
// moves them), which every user of the node shares and where
// fs.protected_symlinks may be 0. Another user can plant
// a predictable name there before we create it: a symlink makes us write
// into (or change the mode of) some file of ours elsewhere, a file of
// theirs on which they hold locks stalls our queue until lock_timeout, a
// FIFO blocks our open. So all of a user's node-local files live in one
// directory of that user, <base>/tirastore-<euid> (PrivatePath), mode
// 0700, in which nobody else can create anything; and since that name is
// predictable too, the directory and everything in it is opened with
// checks:
//
//   - no open follows a symlink (O_NOFOLLOW) or blocks (O_NONBLOCK,
//     cleared once the descriptor has been checked), and files are opened
//     relative to the directory's descriptor (openat, mkdirat, unlinkat,
//     renameat), so that no path is resolved again after the directory
//     was checked;
//   - a new file is created with O_CREAT|O_EXCL (mode 0600; a directory
//     with mkdirat, mode 0700), else the existing one is opened;
//   - every descriptor is checked with fstat before anything reads,
//     writes, locks or fchmods through it: a regular file (or a
//     directory), owned by geteuid(), mode exactly 0600 (0700), one link
//     (files). Only what this process has just created is fchmod'ed
//     (through its descriptor, never by path), when the umask narrowed its
//     mode; nothing is ever widened beyond 0600 (0700).
//
// A name that fails a check is returned as a *Problem and left alone
// (never used, changed or removed): the caller switches off the speed-up
// that the file serves and warns once (core.Store.Notices). Everything in
// node-local memory is an optimisation: without it the stores of a node
// work as those of different nodes do.
//
// The last user of a file removes it, and the directory is removed when it
// is empty (RemoveIfEmpty). A process whose directory was removed under it
// recreates it, once, when an operation finds it gone.
package nodelocal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/environ"
	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/shareddir"
)

// Problem is a node-local name that failed a check: something other than
// this user's own private file or directory is there. Callers do not use
// it, and say so once, naming Path and What.
type Problem struct {
	Path string // the name, as a path
	What string // what is wrong, e.g. "owned by uid 65534, not 0"
}

// Error is "<path>: <what is wrong>".
func (p *Problem) Error() string { return p.Path + ": " + p.What }

const (
	filePerm = 0o600
	dirPerm  = 0o700
)

// trusting reports whether the checks are off: only the NodeLocalTrust
// switch of a failpoints build turns them off (and the negative controls
// of this package's tests, which replace the function).
var trusting = func() bool { return failpoint.Enabled(failpoint.NodeLocalTrust) }

// EnvBase names the environment variable that moves the private
// directories out of /dev/shm: to another node-local directory when a
// stranger squats this user's name there, and for a test run that must
// share nothing with the other processes of the machine. Every process
// of a node that shares a database should see the same value (with
// different values they wait and commit as processes of different nodes
// do: correct, without the speed-ups between them).
const EnvBase = "TIRASTORE_NODE_DIR"

// Base is where private directories live: $TIRASTORE_NODE_DIR if set (made
// absolute), else /dev/shm (memory, node-local) if it is a directory, else
// os.TempDir().
func Base() string {
	if d := environ.Get(EnvBase); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			return abs
		}
		return d
	}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// PrivatePath is this user's private directory on this node,
// Base()/tirastore-<euid>: the euid, since it owns what a process creates.
func PrivatePath() string {
	return filepath.Join(Base(), "tirastore-"+strconv.Itoa(os.Geteuid()))
}

var private struct {
	mu  sync.Mutex
	dir *Dir
}

// Private is this process's handle on PrivatePath, opened (and created if
// missing) at the first call and shared by every user in the process; it
// is never closed. A failure (a *Problem: a directory of another user or a
// symlink planted at the name) is not remembered: the next call tries
// again, so that removing the culprit helps without a restart.
func Private() (*Dir, error) {
	private.mu.Lock()
	defer private.mu.Unlock()
	p := PrivatePath()
	if d := private.dir; d != nil && d.path == p {
		return d, nil
	}
	d, err := OpenDir(p)
	if err != nil {
		return nil, err
	}
	private.dir = d
	return d, nil
}

// Dir is a checked directory, kept open while it is used: the files in it
// are opened relative to its descriptor. Its methods are safe for
// concurrent use.
type Dir struct {
	path   string
	parent *Dir   // nil: opened by path (OpenDir)
	name   string // in parent
	mu     sync.Mutex
	f      *os.File // the directory; nil once closed
}

// OpenDir opens the private directory at path, creating it (mode 0700) if
// it does not exist. It must be a directory of this user (geteuid) of mode
// 0700, else the error is a *Problem.
func OpenDir(path string) (*Dir, error) {
	d := &Dir{path: path}
	f, err := d.open(true)
	if err != nil {
		return nil, err
	}
	d.f = f
	return d, nil
}

// Subdir opens the private directory name in d, creating it (mode 0700)
// if it does not exist; checked as OpenDir's.
func (d *Dir) Subdir(name string) (*Dir, error) {
	sd := &Dir{path: d.Join(name), parent: d, name: name}
	f, err := sd.open(true)
	if err != nil {
		return nil, err
	}
	sd.f = f
	return sd, nil
}

// open opens and checks the directory itself, creating it (and its
// parents) if missing and create is set.
func (d *Dir) open(create bool) (*os.File, error) {
	if d.parent == nil {
		f, _, err := openChecked(unix.AT_FDCWD, d.path, d.path, unix.O_RDONLY, unix.S_IFDIR, create, false)
		return f, err
	}
	var f *os.File
	err := d.parent.do(create, func(fd int) (err error) {
		f, _, err = openChecked(fd, d.name, d.path, unix.O_RDONLY, unix.S_IFDIR, create, false)
		return err
	})
	return f, err
}

// Path is the directory's path, for messages (nothing is opened by it but
// the directory itself).
func (d *Dir) Path() string { return d.path }

// Join is the path of name in d, for messages and tests.
func (d *Dir) Join(name string) string { return filepath.Join(d.path, name) }

// Open opens the regular file name in d. flag is os.O_RDONLY, os.O_WRONLY
// or os.O_RDWR, plus os.O_CREATE to create the file (mode 0600) if it does
// not exist and os.O_EXCL to create only a new one. It returns the file's
// status as checked, so that callers need no fstat of their own. A name
// that fails the checks is a *Problem; a missing one fs.ErrNotExist.
func (d *Dir) Open(name string, flag int) (*os.File, unix.Stat_t, error) {
	var f *os.File
	var st unix.Stat_t
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	create := flag&os.O_CREATE != 0
	err := d.do(create, func(fd int) (err error) {
		f, st, err = openChecked(fd, name, d.Join(name), acc, unix.S_IFREG, create, flag&os.O_EXCL != 0)
		return err
	})
	return f, st, err
}

// openFD opens the regular file name in d with access acc, creating a new
// one (O_EXCL) if create, checked as Open's: its bare descriptor (still
// O_NONBLOCK) and status, for the whole-file calls below.
func (d *Dir) openFD(name string, acc int, create bool) (fd int, st unix.Stat_t, err error) {
	err = d.do(create, func(dirfd int) (err error) {
		fd, st, err = openCheckedFD(dirfd, name, d.Join(name), acc, unix.S_IFREG, create, create)
		return err
	})
	return fd, st, err
}

// ReadFile returns the content of the regular file name in d, opened and
// checked as Open's. It reads through the bare descriptor, as many bytes as
// the checked status gives: a file that is written whole before it gets its
// name (internal/spool) is read with one read and no fcntl. A missing name
// is fs.ErrNotExist.
func (d *Dir) ReadFile(name string) ([]byte, error) {
	fd, st, err := d.openFD(name, unix.O_RDONLY, false)
	if err != nil {
		return nil, err
	}
	if uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG {
		// Only with the checks switched off (failpoint SharedDirTrust):
		// read it as Open's callers would, blocking and to its end.
		if err := shareddir.SetBlocking(fd); err != nil {
			unix.Close(fd)
			return nil, pathError("fcntl", d.Join(name), err)
		}
		f := os.NewFile(uintptr(fd), d.Join(name))
		defer f.Close()
		return io.ReadAll(f)
	}
	defer unix.Close(fd)
	b := make([]byte, st.Size)
	for got := 0; got < len(b); {
		n, err := unix.Read(fd, b[got:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, pathError("read", d.Join(name), err)
		case n == 0:
			return b[:got], nil
		}
		got += n
	}
	return b, nil
}

// WriteNew creates the regular file name in d (it must not exist; mode
// 0600, checked as Open's) and writes b to it through the bare descriptor.
// A file it created but could not write whole is removed again.
func (d *Dir) WriteNew(name string, b []byte) error {
	fd, st, err := d.openFD(name, unix.O_WRONLY, true)
	if err != nil {
		return err // nothing created
	}
	for len(b) > 0 && err == nil {
		n, werr := unix.Write(fd, b)
		switch {
		case werr == unix.EINTR:
		case werr != nil:
			err = werr
		case n == 0:
			err = io.ErrShortWrite
		default:
			b = b[n:]
		}
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		d.remove(name, &st)
		return pathError("write", d.Join(name), err)
	}
	return nil
}

// Lstat is the status of name in d (a symlink's own).
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := d.do(false, func(fd int) error { return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	return st, pathError("lstat", d.Join(name), err)
}

// errReplaced: the name no longer is the file that was to be removed.
var errReplaced = errors.New("nodelocal: replaced meanwhile")

// Remove removes the file name from d; if f is not nil, only while name
// still is f's file, not one that another process created since.
func (d *Dir) Remove(name string, f *os.File) error {
	if f == nil {
		return d.remove(name, nil)
	}
	var want unix.Stat_t
	if err := control(f, func(fd int) error { return unix.Fstat(fd, &want) }); err != nil {
		return err
	}
	return d.remove(name, &want)
}

// remove removes the file name from d; if want is not nil, only while name
// is still that file (device and inode).
func (d *Dir) remove(name string, want *unix.Stat_t) error {
	return pathError("remove", d.Join(name), d.do(false, func(fd int) error {
		if want != nil {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
			if st.Dev != want.Dev || st.Ino != want.Ino {
				return errReplaced
			}
		}
		return unix.Unlinkat(fd, name, 0)
	}))
}

// Rename renames from to to in d, replacing to.
func (d *Dir) Rename(from, to string) error {
	return pathError("rename", d.Join(from), d.do(false, func(fd int) error { return unix.Renameat(fd, from, fd, to) }))
}

// Names lists the names in d. A directory that was removed meanwhile is
// opened again (recreated) first, so that names another process created
// in its new instance are seen.
func (d *Dir) Names() ([]string, error) {
	f, err := d.current()
	if err != nil {
		return nil, err
	}
	if removed(f) {
		if nf := d.revive(f, true); nf != nil {
			f = nf
		}
	}
	var names []string
	err = control(f, func(fd int) error {
		dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		df := os.NewFile(uintptr(dfd), d.path)
		defer df.Close()
		names, err = df.Readdirnames(-1)
		return err
	})
	return names, pathError("readdir", d.path, err)
}

// RemoveIfEmpty removes the directory if it is empty (the last user of a
// node to close calls it; harmless while other files are there). The
// handle stays usable: the next operation that needs the directory
// recreates it.
func (d *Dir) RemoveIfEmpty() {
	f, err := d.current()
	if err != nil {
		return
	}
	var st unix.Stat_t
	if control(f, func(fd int) error { return unix.Fstat(fd, &st) }) != nil || st.Nlink == 0 {
		return
	}
	same := func(cur *unix.Stat_t) bool { return cur.Dev == st.Dev && cur.Ino == st.Ino }
	if d.parent == nil {
		var cur unix.Stat_t
		if unix.Lstat(d.path, &cur) == nil && same(&cur) {
			_ = unix.Rmdir(d.path)
		}
		return
	}
	_ = d.parent.do(false, func(fd int) error {
		var cur unix.Stat_t
		if err := unix.Fstatat(fd, d.name, &cur, unix.AT_SYMLINK_NOFOLLOW); err != nil || !same(&cur) {
			return err
		}
		return unix.Unlinkat(fd, d.name, unix.AT_REMOVEDIR)
	})
}

// Close closes the directory's descriptor, once its user is done with it
// (a handle of Subdir or OpenDir; Private's stays open).
func (d *Dir) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f != nil {
		d.f.Close()
		d.f = nil
	}
}

func (d *Dir) current() (*os.File, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return nil, os.ErrClosed
	}
	return d.f, nil
}

// do runs fn on the directory's descriptor. If fn fails with ENOENT
// because the directory was removed meanwhile (its last user removed it
// when empty), do opens the directory again (another process may have
// made it anew; create: recreating it if not) and runs fn once more.
func (d *Dir) do(create bool, fn func(fd int) error) error {
	f, err := d.current()
	if err != nil {
		return err
	}
	err = control(f, fn)
	if !errors.Is(err, unix.ENOENT) {
		return err
	}
	nf := d.revive(f, create)
	if nf == nil {
		return err
	}
	return control(nf, fn)
}

// revive replaces f, the descriptor an operation used, if its directory
// has been removed: it opens the directory again, recreating it if create.
// It returns the descriptor to use now, or nil if f's directory is still
// there (or cannot be had again).
func (d *Dir) revive(f *os.File, create bool) *os.File {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.f == nil:
		return nil
	case d.f != f:
		return d.f // revived by another operation meanwhile
	case !removed(f):
		return nil
	}
	nf, err := d.open(create)
	if err != nil {
		return nil
	}
	d.f = nf
	f.Close() // operations still using it keep it open until they finish
	return nf
}

// Linked reports whether the file open as f still has a name: one that a
// store removed (the last to close, or a sweep) has none, and processes
// that find it so open the name afresh instead of using a file nobody
// else can reach.
func Linked(f *os.File) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, err
	}
	return st.Nlink > 0, nil
}

// removed reports whether f's directory has been removed (it has no
// links left).
func removed(f *os.File) bool {
	var st unix.Stat_t
	err := control(f, func(fd int) error { return unix.Fstat(fd, &st) })
	return err == nil && st.Nlink == 0
}

// control runs fn on f's descriptor, which stays open meanwhile: a
// concurrent Close takes effect once fn has returned.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// openChecked opens name, relative to the directory dirfd (or a path, with
// AT_FDCWD), as a regular file with access acc (typ S_IFREG) or as a
// directory (S_IFDIR), creating it first if create (only a new one if
// excl), and checks it (see the package comment). path names it in errors.
func openChecked(dirfd int, name, path string, acc int, typ uint32, create, excl bool) (*os.File, unix.Stat_t, error) {
	fd, st, err := openCheckedFD(dirfd, name, path, acc, typ, create, excl)
	if err != nil {
		return nil, st, err
	}
	if err := shareddir.SetBlocking(fd); err != nil {
		unix.Close(fd)
		return nil, st, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), st, nil
}

// openCheckedFD is openChecked's descriptor before it becomes an *os.File:
// still O_NONBLOCK, which a read or write of a regular file ignores.
func openCheckedFD(dirfd int, name, path string, acc int, typ uint32, create, excl bool) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	trust := trusting()
	perm := uint32(filePerm)
	flags := acc | unix.O_NONBLOCK | unix.O_CLOEXEC
	if typ == unix.S_IFDIR {
		perm, flags = dirPerm, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC
	}
	if !trust {
		flags |= unix.O_NOFOLLOW
	}
	for attempt := 0; ; attempt++ {
		fd, created, err := openOrCreate(dirfd, name, flags, perm, typ, create, excl)
		if err != nil {
			return -1, st, describe(dirfd, name, path, typ, perm, err)
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, st, &os.PathError{Op: "fstat", Path: path, Err: err}
		}
		if !trust {
			if st.Nlink == 0 {
				// Removed between the open and the fstat (its last user
				// closed): look at the name again.
				unix.Close(fd)
				if attempt < 3 {
					continue
				}
				return -1, st, &os.PathError{Op: "open", Path: path, Err: unix.ENOENT}
			}
			if what := check(&st, typ, perm, created); what != "" {
				unix.Close(fd)
				return -1, st, &Problem{Path: path, What: what}
			}
			if created && uint32(st.Mode)&0o7777 != perm {
				// The umask narrowed the mode of what we have just created.
				err := unix.Fchmod(fd, perm)
				if err == nil {
					err = unix.Fstat(fd, &st)
				}
				if err != nil {
					unix.Close(fd)
					return -1, st, &os.PathError{Op: "fchmod", Path: path, Err: err}
				}
			}
		}
		return fd, st, nil
	}
}

// openOrCreate opens name with flags, first creating it if create (a new
// file with O_CREAT|O_EXCL, a directory with mkdirat), and reports whether
// it created it. Without excl an existing name is opened instead.
func openOrCreate(dirfd int, name string, flags int, perm, typ uint32, create, excl bool) (int, bool, error) {
	for attempt := 0; ; attempt++ {
		created := false
		if create {
			if typ == unix.S_IFDIR {
				switch err := unix.Mkdirat(dirfd, name, perm); {
				case err == nil:
					created = true
				case err != unix.EEXIST || excl:
					return -1, false, err
				}
			} else {
				fd, err := unix.Openat(dirfd, name, flags|unix.O_CREAT|unix.O_EXCL, perm)
				if err == nil {
					return fd, true, nil
				}
				if err != unix.EEXIST || excl {
					return -1, false, err
				}
			}
		}
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err == unix.ENOENT && create && !created && attempt < 3 {
			continue // removed since we found it: create it after all
		}
		if err != nil {
			return -1, false, err
		}
		return fd, created, nil
	}
}

// describe turns a failed open of name into a *Problem if something that
// fails the checks is there (a symlink, a FIFO, another user's file, ...),
// else into the plain error (a missing name, no space, no descriptors).
func describe(dirfd int, name, path string, typ, perm uint32, err error) error {
	if err != unix.ENOENT {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if what := check(&st, typ, perm, false); what != "" {
				return &Problem{Path: path, What: what}
			}
		}
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// check says what is wrong with st for a private file (typ S_IFREG, perm
// 0600) or directory (S_IFDIR, 0700) of this user, or "". What this
// process has just created (created) may have a narrower mode (umask),
// which the caller then sets right.
func check(st *unix.Stat_t, typ, perm uint32, created bool) string {
	if t := uint32(st.Mode) & unix.S_IFMT; t != typ {
		return shareddir.Kind(t) + ", not " + shareddir.Kind(typ)
	}
	if euid := uint32(os.Geteuid()); st.Uid != euid {
		return fmt.Sprintf("owned by uid %d, not %d", st.Uid, euid)
	}
	if m := uint32(st.Mode) & 0o7777; m != perm && !(created && m&^perm == 0) {
		return fmt.Sprintf("mode %04o, not %04o", m, perm)
	}
	if typ == unix.S_IFREG && st.Nlink != 1 {
		return fmt.Sprintf("%d hard links, not 1", st.Nlink)
	}
	return ""
}

// pathError names path in err (an errno from a call relative to a
// descriptor), keeping it matchable (errors.Is(err, fs.ErrNotExist)).
func pathError(op, path string, err error) error {
	if errno, ok := err.(unix.Errno); ok {
		return &os.PathError{Op: op, Path: path, Err: errno}
	}
	return err
}
