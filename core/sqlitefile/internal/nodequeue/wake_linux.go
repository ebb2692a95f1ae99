//go:build linux

package nodequeue

import (
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
)

// # Waiting on the calling thread
//
// A wait for a byte used to block in fcntl(F_SETLKW) on a goroutine of its
// own while the caller waited on a channel. In a process that calls the
// library from C (Python), the caller's goroutine is locked to its thread:
// every such wait then handed the thread's P to another thread and back,
// and ended by waking the runtime's monitor (sysmon) out of its deep sleep
// into a burst of polling: on a node with more processes than cores, a
// large share of their CPU (docs/performance.md, "Throughput").
//
// So a waiter now sleeps on the calling thread, in futex(2) on a word of
// the gate file shared by every process that maps it, for at most
// tuning.QueueWaitSlice at a time (under the 10 ms after which the runtime
// takes a P back from a thread blocked in a system call), and tries the
// byte (F_SETLK) each time it wakes. Whoever unlocks a byte bumps its word
// and wakes its sleepers. The byte locks still decide who goes: the words
// only say when to look again. So nothing depends on them being right:
//
//   - a process that dies holding a byte wakes nobody (the kernel drops
//     its locks); its successor finds the byte free at the end of its
//     slice;
//   - a process of an older version (which blocks in F_SETLKW and wakes
//     nobody) is seen at the end of a slice in the same way;
//   - bytes share words (wakeBuckets per line): a wake of a word wakes all
//     its sleepers, and those whose byte is still taken sleep again.
//
// The words lie after the queue's counters in the file (wakeOffset), which
// grows to hold them; the file stays of this user and private
// (internal/nodelocal). A file shrunk under a process that maps it (by
// this user, since nobody else can write it) faults at the next access of
// a word: the fault is recovered, and the queue then waits as before.
//
// # The head through the mapping
//
// The mapping starts at the file's first byte, so that the head of the
// file (the ticket counters, the fairness state, the progress word) is
// read, and the state and progress word written, in memory instead of by
// pread and pwrite: six system calls of a record. The mapping and the
// descriptor see the same pages, so processes of an older version, which
// use pread and pwrite, see the same values. The ticket counters are
// still written by pwrite, under the ticket byte: that keeps the file's
// modification time moving with every ticket, which Sweep reads as a sign
// of use (through a mapping of a tmpfs file, only the first write to each
// page changes it). A fault on the head falls back to the descriptor.

const (
	// wakeOffset is where the words start in the gate file, after the
	// head (see queue.go), a page into the mapping.
	wakeOffset = 4096
	// wakeBuckets is how many words each line has; slot s of a line
	// uses word s mod wakeBuckets.
	wakeBuckets = 1024
	// wakeMapLen is the mapped length: a word for the ticket byte, then
	// each line's, each word 8 bytes (sequence, sleepers).
	wakeMapLen = (1 + 2*wakeBuckets) * 8
)

// futex(2) operations (linux/futex.h).
const (
	futexWait = 0
	futexWake = 1
)

// gateMap is the process's mapping of a gate file: its head, then its
// wake words at wakeOffset.
type gateMap struct {
	mem []byte
}

// mapGate maps f's head and words, growing f to hold them first (never
// shrinking it). On an error the queue waits as before (no words), and
// reads and writes its head by pread and pwrite.
func mapGate(f *os.File) (*gateMap, error) {
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size < wakeOffset+wakeMapLen {
		if err := unix.Ftruncate(fd, wakeOffset+wakeMapLen); err != nil {
			return nil, err
		}
	}
	mem, err := unix.Mmap(fd, 0, wakeOffset+wakeMapLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &gateMap{mem: mem}, nil
}

// read copies the head's bytes at off into b; false: no mapping, or it
// faulted (the file shrunk), and the caller reads the file.
func (w *gateMap) read(b []byte, off int64) bool { return w.copyHead(b, off, false) }

// write copies b into the head at off; false as for read.
func (w *gateMap) write(b []byte, off int64) bool { return w.copyHead(b, off, true) }

// copyHead copies between b and the mapped head at off (into the head if
// store), unless the bytes are not all in the head.
func (w *gateMap) copyHead(b []byte, off int64, store bool) bool {
	if w == nil || off < 0 || off+int64(len(b)) > wakeOffset {
		return false
	}
	m := w.mem[off : off+int64(len(b))]
	return faultFree(func() {
		if store {
			copy(m, b)
		} else {
			copy(b, m)
		}
	})
}

// faultFree runs f, which accesses the mapping, and reports whether it
// completed: false if an access faulted (the file shrunk under the
// mapping, which only this user can do), which is recovered.
func faultFree(f func()) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	f()
	return true
}

// unmap releases the mapping (the last reference to the gate file).
func (w *gateMap) unmap() {
	if w != nil {
		_ = unix.Munmap(w.mem)
	}
}

// word is the sequence word of byte at, and its sleepers' count after it.
func (w *gateMap) word(at int64) (seq, sleepers *uint32) {
	i := int64(0)
	switch {
	case at >= laneLine.slots:
		i = 1 + wakeBuckets + (at-laneLine.slots)%wakeBuckets
	case at >= queueLine.slots:
		i = 1 + (at-queueLine.slots)%wakeBuckets
	}
	p := unsafe.Pointer(&w.mem[wakeOffset+i*8])
	return (*uint32)(p), (*uint32)(unsafe.Add(p, 4))
}

// wake tells the sleepers on byte at (if any) that it was unlocked. A fault
// on the words (the file shrunk) is ignored: waiters look again at the end
// of their slice.
func (w *gateMap) wake(at int64) {
	if w == nil {
		return
	}
	faultFree(func() {
		seq, sleepers := w.word(at)
		atomic.AddUint32(seq, 1)
		if atomic.LoadUint32(sleepers) != 0 {
			futex(seq, futexWake, 1<<30, nil)
		}
	})
}

// sleep tries byte at with try, and if it is taken sleeps on its word for at
// most d, on the calling thread. It returns try's outcome (nil: the byte
// is taken; unix.EAGAIN: still taken after the sleep), or errNoWords when
// the words could not be used (a fault): the caller then waits as before.
func (w *gateMap) sleep(at int64, d time.Duration, try func() error) error {
	var err error
	if !faultFree(func() {
		seq, sleepers := w.word(at)
		atomic.AddUint32(sleepers, 1)
		defer atomic.AddUint32(sleepers, ^uint32(0))
		// The sleeper is counted, then reads the sequence, then tries:
		// an unlock after the try bumps the sequence after the read, so
		// the futex returns at once, and one before it lets the try
		// through.
		v := atomic.LoadUint32(seq)
		if err = try(); err == nil || !taken(err) {
			return
		}
		ts := unix.NsecToTimespec(d.Nanoseconds())
		futex(seq, futexWait, v, &ts)
		err = unix.EAGAIN
	}) {
		return errNoWords
	}
	return err
}

// Sleepers is how many waits are asleep on the wake words of the gate file
// of lockPath (this node and user): a wait in its lines shows there, not
// in /proc/locks, so that tests can tell when a process has queued. A
// process that has the file open counts through its own mapping: opening
// and closing another descriptor of it would drop its locks.
func Sleepers(lockPath string) (int, error) {
	gates.Lock()
	defer gates.Unlock()
	if sg := gates.m[nodelocal.Name(nodelocal.GatePrefix, lockPath)]; sg != nil && sg.mapped != nil {
		return sg.mapped.sleepers()
	}
	f, err := os.Open(File(lockPath))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size < wakeOffset+wakeMapLen {
		return 0, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, wakeOffset+wakeMapLen, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(mem)
	return (&gateMap{mem: mem}).sleepers()
}

// sleepers sums the sleepers' counts of every word.
func (w *gateMap) sleepers() (int, error) {
	n := 0
	if !faultFree(func() {
		for i := wakeOffset; i+8 <= len(w.mem); i += 8 {
			n += int(atomic.LoadUint32((*uint32)(unsafe.Pointer(&w.mem[i+4]))))
		}
	}) {
		return 0, errNoWords
	}
	return n, nil
}

// futex is futex(2) on a word shared between processes (no
// FUTEX_PRIVATE_FLAG); its outcome (woken, timed out, interrupted, value
// changed) does not matter to callers, who look at the byte again.
func futex(addr *uint32, op int, val uint32, ts *unix.Timespec) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(op), uintptr(val),
		uintptr(unsafe.Pointer(ts)), 0, 0)
}
