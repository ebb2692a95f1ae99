//go:build unix

package lock

import (
	"os"

	"golang.org/x/sys/unix"
)

// fileID identifies an inode: two names of one file have the same fileID.
// Inode numbers are reused as soon as a file is freed, so fileID alone only
// proves identity while we keep the inode alive (our own ticket); see stamp.
type fileID struct{ dev, ino uint64 }

// stamp identifies one inode at one moment: fileID plus size, mtime and
// ctime. ctime changes whenever the inode's link count, name or content
// changes, so a reused inode number (a stale lock freed, a new ticket created
// and linked) has a new ctime; mtime and size change with the content only
// (rename does not touch them), which is what sameContentAs compares after
// moving a lock aside.
type stamp struct {
	id               fileID
	size             int64
	mtimeSec, mtimeN int64
	ctimeSec, ctimeN int64
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{
		id:       fileID{uint64(st.Dev), uint64(st.Ino)},
		size:     int64(st.Size),
		mtimeSec: int64(st.Mtim.Sec),
		mtimeN:   int64(st.Mtim.Nsec),
		ctimeSec: int64(st.Ctim.Sec),
		ctimeN:   int64(st.Ctim.Nsec),
	}
}

// sameContentAs: same inode, and neither written nor resized since o was
// taken, ignoring ctime (which a rename or a new link changes).
func (s stamp) sameContentAs(o stamp) bool {
	return s.id == o.id && s.size == o.size && s.mtimeSec == o.mtimeSec && s.mtimeN == o.mtimeN
}

func fstatStamp(f *os.File) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return stamp{}, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return stampOf(&st), nil
}

func lstatStamp(path string) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return stamp{}, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return stampOf(&st), nil
}

func fstatID(f *os.File) (fileID, error) {
	s, err := fstatStamp(f)
	return s.id, err
}

func lstatID(path string) (fileID, error) {
	s, err := lstatStamp(path)
	return s.id, err
}

func linkCount(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return uint64(st.Nlink), nil
}
