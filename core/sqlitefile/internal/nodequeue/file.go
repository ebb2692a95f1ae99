package nodequeue

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
	"github.com/tirastore/tirastore/core/tuning"
)

// # One gate file per process and database
//
// POSIX record locks belong to the process, and closing any descriptor of
// a file drops all of the process's locks on it. So the Queues of one
// process on one database share one descriptor of the gate file (a
// sharedGate, registered by name): each Queue holds one reference (a
// gateRef, whose Close gives it back), and only the last one closes the
// descriptor, at a time when no Queue of the process holds or waits for a
// byte of it (an abandoned wait still blocked in the kernel keeps its
// Queue's reference until it returns). Only then can "nobody is queued"
// be judged by taking every byte (F_GETLK and F_SETLK do not see the
// process's own locks), and the file removed.

// sharedGate is the process's open gate file of one database.
type sharedGate struct {
	*os.File
	dir  *nodelocal.Dir
	name string
	refs int // under gates.mu
	// mapped is the process's mapping of the file's head and wake words
	// (wake_linux.go); nil: waits block in F_SETLKW on a goroutine of
	// their own, and the head is read and written by pread and pwrite.
	mapped *gateMap
}

// ReadAt reads the file's head through the mapping when there is one (see
// wake_linux.go), else by pread.
func (sg *sharedGate) ReadAt(b []byte, off int64) (int, error) {
	if sg.mapped.read(b, off) {
		return len(b), nil
	}
	return sg.File.ReadAt(b, off)
}

// writeHead writes the fairness state or the progress word through the
// mapping when there is one, else by pwrite. The ticket counters are
// written by WriteAt (see wake_linux.go, "The head through the mapping").
func (sg *sharedGate) writeHead(b []byte, off int64) {
	if !sg.mapped.write(b, off) {
		_, _ = sg.File.WriteAt(b, off)
	}
}

// gateRef is one Queue's reference to a sharedGate: ReadAt, WriteAt and Fd
// are the file's, Close gives the reference back (once).
type gateRef struct {
	*sharedGate
	once sync.Once
}

// Close gives this reference back; the last one closes the file.
func (r *gateRef) Close() error {
	r.once.Do(r.sharedGate.release)
	return nil
}

var gates = struct {
	sync.Mutex
	m map[string]*sharedGate // by name
}{m: map[string]*sharedGate{}}

// acquireGate returns a new reference to the gate file of lockPath,
// opening (creating) the file if this process has none open. The error is
// a *nodelocal.Problem when a file that fails the checks is in the way.
func acquireGate(lockPath string) (*gateRef, error) {
	dir, err := nodelocal.Private()
	if err != nil {
		return nil, err
	}
	name := nodelocal.Name(nodelocal.GatePrefix, lockPath)
	gates.Lock()
	defer gates.Unlock()
	if sg := gates.m[name]; sg != nil {
		if ok, err := nodelocal.Linked(sg.File); err == nil && ok {
			sg.refs++
			return &gateRef{sharedGate: sg}, nil
		}
		// Removed by another process's last Queue while nobody was queued:
		// its holders here keep it, newcomers queue in the new file
		// together with the node's other newcomers.
		delete(gates.m, name)
	}
	f, _, err := dir.Open(name, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	sg := &sharedGate{File: f, dir: dir, name: name, refs: 1}
	sg.mapped, _ = mapGate(f)
	gates.m[name] = sg
	return &gateRef{sharedGate: sg}, nil
}

// release gives one reference back. The last one closes the file, after
// removing it if nobody is queued (the ticket byte and every slot can be
// taken at once: a process blocked on a byte implies another holding it),
// so that temporary databases leave no gate files behind, and then the
// private directory if it is empty. A process that opened the file just
// before may then queue on the removed inode while newcomers make a new
// one: two queues for a while, which costs fairness, never exclusion.
func (sg *sharedGate) release() {
	gates.Lock()
	defer gates.Unlock()
	if sg.refs--; sg.refs > 0 {
		return
	}
	if gates.m[sg.name] == sg {
		delete(gates.m, sg.name)
	}
	fd := sg.Fd()
	idle := unix.FcntlFlock(fd, unix.F_SETLK, byteLock(unix.F_WRLCK, ticketByte)) == nil &&
		unix.FcntlFlock(fd, unix.F_SETLK, queueLine.all(unix.F_WRLCK)) == nil &&
		unix.FcntlFlock(fd, unix.F_SETLK, laneLine.all(unix.F_WRLCK)) == nil
	removed := idle && sg.dir.Remove(sg.name, sg.File) == nil
	sg.mapped.unmap()
	sg.mapped = nil
	sg.File.Close()
	if removed {
		sg.dir.RemoveIfEmpty()
	}
}

// Sweep removes the gate file name (nodelocal.GatePrefix) from dir if it is
// a leftover: not open in this process, unchanged for tuning.StaleGateAge
// and without any lock of any process (nobody queued). It is for the first
// store of a process to clear what killed processes of this user left; a
// process that has the file open without being queued queues on the
// removed inode, as after release.
func Sweep(dir *nodelocal.Dir, name string) {
	gates.Lock()
	defer gates.Unlock()
	if gates.m[name] != nil {
		return
	}
	st, err := dir.Lstat(name)
	if err != nil || time.Since(time.Unix(st.Mtim.Unix())) < tuning.StaleGateAge {
		return
	}
	f, _, err := dir.Open(name, os.O_RDWR)
	if err != nil {
		return // a file that fails the checks is reported by the store that uses it
	}
	// Not open elsewhere in this process (gates.mu is held), so closing
	// this descriptor drops no lock of ours.
	if unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}) == nil {
		_ = dir.Remove(name, f)
	}
	f.Close()
}
