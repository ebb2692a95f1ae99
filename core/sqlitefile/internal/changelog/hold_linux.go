package changelog

import (
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
)

// Mark marks the log as used by one store for as long as the store is
// open, so that the last store of the node to close removes the file and
// the others never have to find their log gone (they would reopen it by
// name, but the entries logged in between would be lost to them).
//
// The mark is a shared open-file-description lock on the file's first
// byte: it belongs to this descriptor rather than to the process (a classic
// POSIX lock of the process would be dropped when the process closed any
// other descriptor of the file, its reader's or writer's), and the kernel
// drops it when the holder dies.
type Mark struct {
	f    *os.File
	dir  *nodelocal.Dir
	name string
}

// MarkUsed opens (creating if needed) the log name in dir and marks it used.
// It fails with a *nodelocal.Problem when something that fails the checks
// is at the name (the caller should then not use the log at all); any
// other failure only means that the file may be removed while this store
// still follows it (the Mark is nil, and Release does nothing).
func MarkUsed(dir *nodelocal.Dir, name string) (*Mark, error) {
	f, _, err := open(dir, name, true)
	if err != nil {
		return nil, err
	}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_RDLCK, Len: 1}); err != nil {
		f.Close()
		return nil, err
	}
	return &Mark{f: f, dir: dir, name: name}, nil
}

// Release drops the mark and removes the log if no other store of the node
// holds it.
func (h *Mark) Release() {
	if h == nil {
		return
	}
	if unix.FcntlFlock(h.f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Len: 1}) == nil {
		if ok, err := nodelocal.Linked(h.f); err == nil && ok {
			_ = h.dir.Remove(h.name, h.f)
		}
	}
	h.f.Close()
}

// staleAge is how long a log must have been unchanged before Sweep removes
// it (a store opening it holds it a moment after creating it).
const staleAge = 10 * time.Second

// Sweep removes the log name in dir if nobody holds it and it has not
// changed for staleAge: one that a killed process left. The first store of
// a process calls it for every log of its user on the node.
func Sweep(dir *nodelocal.Dir, name string) {
	st, err := dir.Lstat(name)
	if err != nil || time.Since(time.Unix(st.Mtim.Unix())) < staleAge {
		return
	}
	f, _, err := dir.Open(name, os.O_RDWR)
	if err != nil {
		return
	}
	defer f.Close()
	// An open-file-description lock: it conflicts with every holder's,
	// this process's included, and closing f drops no other lock of ours.
	if unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Len: 1}) == nil {
		_ = dir.Remove(name, f)
	}
}
