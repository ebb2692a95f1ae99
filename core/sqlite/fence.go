package sqlite

// # Fencing
//
// A holder of the hard-link lock can stall for longer than
// stale_lock_timeout: Slurm suspends jobs with SIGSTOP, VMs pause, an NFS
// call hangs. Its waiters then break the lock, as they must, and the next
// holder rolls the stalled transaction's hot journal back and writes. If
// the stalled process then resumed writing, it would write pages into a
// database that another process is changing, or delete that process's
// journal at its own "commit": lost records and a corrupt index. So a
// connection's writes are fenced by its holder's tenure of the lock.
//
// The tenure (core/sqlitefile/internal/lock, tenure.go) starts when the lock is
// taken or its holder last confirmed it: rewrote its lock file (a heartbeat)
// and saw, by path, that the lock is still its ticket. No waiter can judge the
// lock abandoned before it has stayed unchanged for a while after that moment,
// so until a deadline (a fraction of that while, on CLOCK_MONOTONIC, which a
// SIGSTOP does not stop) writes are safe. The VFS (vfs.c) checks the deadline
// before every write, truncate and sync of the database and its journal, before
// opening the journal and before deleting it (the commit): a clock read in the
// steady state, where the heartbeat renews the tenure. Past the deadline it
// calls back into Go (tirastoreFenceRenew), which confirms the lock again; if
// that fails, the fence is lost: every later write of the connection is
// refused, its rollback included (the next holder already rolled the hot
// journal back, or will), until the lock is taken again. The store then
// discards the connection and reports the lost lock.
//
// What remains: a write that passes the check and is then stalled before
// its system call completes (a SIGSTOP between the two, a hung NFS WRITE)
// lands after the deadline. No client-side fence can close that window;
// it is one system call wide instead of a whole transaction.

/*
#include <stdint.h>
void *tira_fence_new(uintptr_t h);
void tira_fence_free(void *f);
void tira_fence_set(void *f, long long deadline);
void tira_fence_lose(void *f);
int tira_fence_lost(void *f);
unsigned long long tira_fence_writes(void *f);
*/
import "C"

import (
	"runtime/cgo"
	"strconv"
	"unsafe"
)

// Fence is one store's tenure of its lock, as the VFS sees it: shared
// by the store's successive connections (Open's fence argument), set by the
// lock at every confirmation (Extend) and checked by the VFS before every
// write. Its methods are safe from any goroutine.
type Fence struct {
	c unsafe.Pointer // the C struct TiraFence (vfs.c); C memory
	h cgo.Handle     // the renewer, for tirastoreFenceRenew
}

// NewFence returns a fence with no tenure yet, whose renewals call renew:
// it must confirm the lock and Extend the tenure, or report false.
func NewFence(renew func() bool) *Fence {
	h := cgo.NewHandle(renew)
	c := C.tira_fence_new(C.uintptr_t(h))
	if c == nil {
		h.Delete()
		panic("sqlite: out of memory allocating a fence")
	}
	return &Fence{c: c, h: h}
}

// Extend starts a new tenure: writes need no renewal until deadline
// (CLOCK_MONOTONIC nanoseconds), and a lost fence is usable again. A
// deadline of 0 ends the tenure (the lock was released).
func (f *Fence) Extend(deadline int64) { C.tira_fence_set(f.c, C.longlong(deadline)) }

// Lose refuses every write until the next Extend: the lock is known to be
// someone else's.
func (f *Fence) Lose() { C.tira_fence_lose(f.c) }

// Lost reports whether the fence refused a write (or was lost) since its
// last Extend.
func (f *Fence) Lost() bool { return C.tira_fence_lost(f.c) != 0 }

// Writes counts the writes and truncates of the database file that the
// fence let through, on every connection using it: a count unchanged
// across an operation proves the operation left the file as it found it
// (no commit, no rollback of a crashed writer's hot journal), so the
// header read when the lock was taken still describes it.
func (f *Fence) Writes() uint64 { return uint64(C.tira_fence_writes(f.c)) }

// Free releases the fence; no connection that uses it may be open.
func (f *Fence) Free() {
	if f.c != nil {
		C.tira_fence_free(f.c)
		f.h.Delete()
		f.c = nil
	}
}

// uriParam is the connection URI's parameter that names the fence.
func (f *Fence) uriParam() string {
	if f == nil {
		return ""
	}
	return "&tirafence=" + strconv.FormatUint(uint64(uintptr(f.c)), 10)
}

//export tirastoreFenceRenew
func tirastoreFenceRenew(h C.uintptr_t) C.int {
	if cgo.Handle(h).Value().(func() bool)() {
		return 1
	}
	return 0
}
