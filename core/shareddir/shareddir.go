// Package shareddir opens and creates the files of a directory that other
// users can write: the database's own directory, which the original made
// mode 1777 and which users keep so to share the database.
//
// Anyone can create a name there before we do: a FIFO (an open(2) for
// reading blocks until a writer comes, past every timeout and Ctrl-C), a
// symbolic link (our create or open lands on a file the planter chose), a
// file of theirs. So every file of the database's directory that the
// library opens goes through this package:
//
//   - Open never follows a link at the last component (O_NOFOLLOW) and
//     never blocks (O_NONBLOCK, cleared once the descriptor is checked); it
//     checks the descriptor with fstat and refuses anything but a regular
//     file, with a *Refused error naming the file, what it is and whose;
//   - Create makes a new file with O_CREAT|O_EXCL|O_NOFOLLOW relative to a
//     descriptor on its directory, and sets its mode through the new
//     descriptor (fchmod), never by path: nothing planted at the name is
//     ever opened, written or chmod'ed.
//
// The SQLite opens (the database, its journal) follow the same rules inside
// the VFS (core/sqlite/vfs.c); the links of a path are vetted when it is
// resolved (core/pypath: only links of the caller or root are followed).
// docs/lock-protocol.md, "The database directory", lists every name.
package shareddir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/identity"
)

// Refused is a name in the directory that the library will not use: it is
// not a regular file (a FIFO, a symbolic link, a directory, ...). Callers
// report it as such; nothing was read, written or changed through it.
type Refused struct {
	Path string // the name, as a path
	What string // what it is, e.g. "a FIFO owned by uid 65534 (nobody)"
}

// Error is "<path> is <what>, not a regular file: ...".
func (r *Refused) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file: refused (another user may have planted it; "+
		"its owner or root must remove it)", r.Path, r.What)
}

// trusting reports whether the checks are off: only the SharedDirTrust
// switch of a failpoints build turns them off, for the negative controls of
// the tests that plant FIFOs and links beside a database.
func trusting() bool { return failpoint.Enabled(failpoint.SharedDirTrust) }

// Open opens the regular file at path with flag (os.O_RDONLY, os.O_RDWR,
// ...; no O_CREAT: see Create) without following a link at its last
// component and without blocking, and checks it with fstat: anything but a
// regular file is a *Refused. It returns the file and its fstat.
func Open(path string, flag int) (*os.File, *unix.Stat_t, error) {
	trust := trusting()
	flags := flag | unix.O_CLOEXEC
	if !trust {
		flags |= unix.O_NOFOLLOW | unix.O_NONBLOCK
	}
	fd, err := openRetry(path, flags, 0)
	if err != nil {
		if err == unix.ELOOP && !trust {
			if st, lerr := Lstat(path); lerr == nil {
				return nil, nil, &Refused{Path: path, What: Describe(st)}
			}
		}
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if !trust {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return nil, nil, &Refused{Path: path, What: Describe(&st)}
		}
		if err := SetBlocking(fd); err != nil {
			unix.Close(fd)
			return nil, nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
		}
	}
	return os.NewFile(uintptr(fd), path), &st, nil
}

// Create makes the new regular file path (flag: os.O_RDWR or os.O_WRONLY)
// with mode perm exactly, whatever the umask: O_CREAT|O_EXCL|O_NOFOLLOW in
// a descriptor of its directory opened without following a link, then
// fchmod through the new descriptor. An existing name, whatever it is,
// fails with an error matching fs.ErrExist and is left alone.
func Create(path string, flag int, perm uint32) (*os.File, error) {
	return create(path, flag, perm, true)
}

// CreateUmask is Create with the mode open(2) gives: perm less the
// process's umask, as for a file the user writes with any tool (an export,
// a plot); nothing is chmod'ed.
func CreateUmask(path string, flag int, perm uint32) (*os.File, error) {
	return create(path, flag, perm, false)
}

// create is Create, setting the mode to perm exactly when exact.
func create(path string, flag int, perm uint32, exact bool) (*os.File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	dfd, err := openRetry(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	flags := flag | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	var fd int
	for {
		fd, err = unix.Openat(dfd, base, flags, perm)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil && exact && uint32(st.Mode)&0o7777 != perm {
		err = unix.Fchmod(fd, perm)
	}
	if err == nil {
		err = SetBlocking(fd)
	}
	if err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fchmod", Path: path, Err: err}
	}
	return f, nil
}

// openRetry is open(2) retried on EINTR.
func openRetry(path string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags, perm)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// Lstat is lstat(2) of path.
func Lstat(path string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return &st, nil
}

// SetBlocking clears O_NONBLOCK, which an open needed only so as never to
// block on a FIFO planted at the name: reads and writes of the checked
// regular file then behave as usual on every filesystem.
func SetBlocking(fd int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK == 0 {
		return err
	}
	_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	return err
}

// Describe says what st is and whose, for errors: "a FIFO owned by uid
// 65534 (nobody)".
func Describe(st *unix.Stat_t) string {
	return Kind(uint32(st.Mode)) + " owned by " + identity.Owner(st.Uid)
}

// Kind names the file type in mode: "a regular file", "a FIFO", ...
func Kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("a file of type %#o", mode&unix.S_IFMT)
}

// IsRefused reports whether err is (or wraps) a *Refused.
func IsRefused(err error) bool {
	var r *Refused
	return errors.As(err, &r)
}

// MayCreateIn reports, as an error when not, whether this process may
// create files in the directory dir (search and write permission, by the
// effective ids, as open(2) judges them; a read-only filesystem refuses).
func MayCreateIn(dir string) error {
	return unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS)
}
