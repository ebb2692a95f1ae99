package sqlitefile

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// # The database directory's mode
//
// The original made the database's directory 1777 (everyone may create
// files, only owners may remove theirs) whenever it created a database, so
// that every user's lock ticket files can be created beside the lock. Doing
// that to an existing directory opens a project directory to everyone, so this
// engine sets 1777 only on a directory it created itself (COMPAT.md lists the
// difference), and otherwise leaves the mode alone and says, once, when other
// users could not create lock ticket files there and so could not use the
// database. The mode is set through a descriptor opened without following a
// link and checked to be a directory of ours, never by path.

// shareDir gives a directory this store created the original's mode 1777,
// or returns a notice when an existing one keeps other users out ("" when
// it does not).
func (s *Backend) shareDir() string {
	dir := filepath.Dir(s.path)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return ""
	}
	if s.madeDir {
		if int(st.Uid) == os.Geteuid() {
			_ = unix.Fchmod(fd, 0o777|unix.S_ISVTX) // best effort, as the original
		}
		return ""
	}
	perm := st.Mode & 0o7777
	if perm&0o002 != 0 {
		return ""
	}
	who := "its owner"
	if perm&0o020 != 0 {
		who = "its owner and group"
	}
	return fmt.Sprintf("the directory %s (mode %04o) does not let other users create lock ticket files "+
		"beside %s: only %s can use the database (the original library made it 1777; "+
		"this one leaves an existing directory's mode alone: chmod 1777 it to share the database)",
		dir, perm, filepath.Base(s.path), who)
}
