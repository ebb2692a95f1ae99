package changelog

import (
	"os"

	"golang.org/x/sys/unix"
)

// Holder marks the log as used by one store for as long as the store is
// open, so that the last store of the node to close removes the file and
// the others never have to find their log gone (they would reopen it by
// name, but the entries logged in between would be lost to them).
//
// The mark is a shared open-file-description lock on the file's first
// byte: it belongs to this descriptor rather than to the process (a classic
// POSIX lock of the process would be dropped when the process closed any
// other descriptor of the file, its reader's or writer's), and the kernel
// drops it when the holder dies.
type Holder struct {
	f    *os.File
	path string
}

// Hold opens (creating if needed) the log at path and marks it used; nil
// when that fails, which only means that the file may be removed while
// this store still follows it.
func Hold(path string) *Holder {
	f, _, err := open(path, true)
	if err != nil {
		return nil
	}
	if unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_RDLCK, Len: 1}) != nil {
		f.Close()
		return nil
	}
	return &Holder{f: f, path: path}
}

// Release drops the mark and removes the log if no other store of the node
// holds it.
func (h *Holder) Release() {
	if h == nil {
		return
	}
	if unix.FcntlFlock(h.f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Len: 1}) == nil {
		if ok, err := linkedFile(h.f); err == nil && ok {
			_ = os.Remove(h.path)
		}
	}
	h.f.Close()
}
