package lock

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/environ"
)

// # The node-local queue (gate)
//
// Polling link() with backoff is the only way to wait for the lock across
// nodes, but it is unfair and loads the metadata server: 32 processes of one
// node that all poll convoy behind whichever process happens to retry when
// the lock is free, and each poll is a round trip. So the processes of one
// node first queue on a node-local file lock, and only the process at the
// head of that queue runs the link protocol. Waiting in the queue is a
// blocking fcntl(F_SETLKW) in the kernel: no polling at all, and a release
// wakes the waiters at once (see the turnstile below for the order).
//
// The queue is only an optimisation. The hard-link lock stays the one that
// excludes (processes of other nodes, of other containers, old Python
// workers never see the gate), so anything that goes wrong with the gate
// falls back to plain link polling:
//
//   - the gate file is /dev/shm/tirastore-gate-<sha256(lock path)>, mode
//     0666 so that all users of a shared database queue together (removed
//     by the last Lock that closes while nobody is queued); if it
//     cannot be opened read-write (another user's file with a stricter
//     mode, no /dev/shm and no writable $TMPDIR), there is no gate;
//   - classic POSIX record locks belong to the process: the kernel drops
//     them when it dies (a killed process never blocks the queue), and a
//     fork()ed child does not inherit them (open file description locks
//     would be inherited, and a child living on after its parent was killed
//     would block the node forever);
//   - EDEADLK (the kernel's deadlock detector sees two processes each
//     queued on a database while at the head of another's queue) and any
//     other error mean: go on without the gate;
//   - TIRASTORE_NODE_QUEUE=0 switches it off (for comparisons).
//
// Waiting for the gate honours ctx and the Acquire deadline: the blocking
// call runs on its own goroutine, and one that is abandoned releases the
// gate as soon as it gets it. Two Locks of one process on the same database
// share one owner (the process), so they pass the gate together; the
// hard-link lock still orders them.
type gate struct {
	f    *os.File
	path string
	lane bool // this process's last lock took the writers' lane (see lock)

	mu      sync.Mutex
	pending int  // abandoned waits still blocked in the kernel
	closed  bool // close was called; the last pending wait closes f
}

var (
	errGateTimeout     = errors.New("lock: timed out in the node-local queue")
	errGateUnavailable = errors.New("lock: node-local queue unavailable")
)

// gateDir is where gate files live: /dev/shm (memory, node-local), else
// the temporary directory.
func gateDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// gatePath is the gate file of lockPath. The last Lock to close removes it
// when nobody is queued (see close).
func gatePath(lockPath string) string {
	sum := sha256.Sum256([]byte(lockPath))
	return filepath.Join(gateDir(), "tirastore-gate-"+hex.EncodeToString(sum[:12]))
}

// openGate opens (creating if needed) the gate file of lockPath, or returns
// nil when there is none to use.
func openGate(lockPath string) *gate {
	if environ.Get("TIRASTORE_NODE_QUEUE") == "0" {
		return nil
	}
	f, err := os.OpenFile(gatePath(lockPath), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil
	}
	// The umask may have narrowed the mode; other users must be able to
	// open the file read-write to queue. Only the owner can widen it.
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm() != 0o666 {
		_ = f.Chmod(0o666)
	}
	return &gate{f: f, path: f.Name()}
}

// The gate file's two one-byte ranges: a turnstile in front of the queue
// proper. A waiter takes entry, then main, then gives entry back; the head
// of the queue holds main. A process that releases main and wants it again
// at once must first take entry, which the next waiter holds while it waits
// for main: so the releaser queues behind it instead of barging ahead of the
// waiters the kernel has just woken (which on a loaded node are not running
// yet). Without the turnstile one process could re-acquire many times in a
// row while others wait, the convoy that made single waits long.
const (
	entryByte = 0
	mainByte  = 1
	laneByte  = 2 // the writers' lane, see below
	laneEntry = 3 // the lane's own turnstile
)

// # The writers' lane
//
// A write holds the lock several times longer than a read (its commit
// waits for four fsyncs: about 1.6 ms against 0.2 ms with 32 processes on
// one node here), and in a plain FIFO a read waits for every write queued
// ahead of it: that made a lookup's p99 wait at 32 processes about 100 ms.
// So a write first takes one more byte, the lane, and keeps it until it
// releases the lock: at most one write is in the queue proper or at its
// head, and a read waits for at most that one, besides the reads ahead of
// it. Writes wait for one another in the lane instead. No operation
// starves: the lane and the queue both hand over in order, and a write in
// the queue is passed by nobody. Giving the lane back as soon as the write
// reached the head would let the next write, woken in the lane, barge into
// the turnstile before a read that the same release woke (POSIX locks hand
// nothing over: a woken waiter must try again). The lane has a turnstile of
// its own in front, for the same reason as the queue's: a process that
// releases the lock and writes again at once would otherwise take the lane
// back before the write it just woke, again and again (a record's worst
// wait at 32 processes went up to 0.77 s).
//
// Autoschedulers wait for lookups on their critical path, while a record
// follows a measurement of seconds: the reads are the ones to serve first.
// `make bench` shows what writes pay (throughput section: "all p99" and
// "worst op").

// byteLock is a write lock (typ F_WRLCK) or an unlock (F_UNLCK) of one byte.
func byteLock(typ int16, at int64) *unix.Flock_t {
	return &unix.Flock_t{Type: typ, Whence: 0, Start: at, Len: 1}
}

// lock waits until this process is at the head of the queue, ctx is done
// (ctx.Err()) or deadline passes (errGateTimeout); a write (write true)
// first waits in the writers' lane, which unlock gives back. On error
// nothing is held. errGateUnavailable means the caller should proceed
// without the gate.
func (g *gate) lock(ctx context.Context, deadline time.Time, write bool) (err error) {
	g.lane = false
	if write {
		if err := g.wait(ctx, deadline, laneEntry); err != nil {
			return err
		}
		err := g.wait(ctx, deadline, laneByte)
		g.unlockByte(laneEntry)
		if err != nil {
			return err
		}
		defer func() {
			if g.lane = err == nil; !g.lane {
				g.unlockByte(laneByte)
			}
		}()
	}
	if err := g.wait(ctx, deadline, entryByte); err != nil {
		return err
	}
	err = g.wait(ctx, deadline, mainByte)
	g.unlockByte(entryByte)
	return err
}

// wait takes the byte at, blocking as lock describes.
func (g *gate) wait(ctx context.Context, deadline time.Time, at int64) error {
	// The common uncontended case costs one non-blocking call.
	switch err := unix.FcntlFlock(g.f.Fd(), unix.F_SETLK, byteLock(unix.F_WRLCK, at)); {
	case err == nil:
		return nil
	case !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES):
		return errGateUnavailable
	}
	done := make(chan error, 1)
	go func() {
		for {
			err := unix.FcntlFlock(g.f.Fd(), unix.F_SETLKW, byteLock(unix.F_WRLCK, at))
			if !errors.Is(err, unix.EINTR) {
				done <- err
				return
			}
		}
	}()
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	poll := time.NewTicker(ctxPoll)
	defer poll.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return errGateUnavailable
			}
			return nil
		case <-ctx.Done():
			g.abandon(done, at)
			return ctx.Err()
		case <-timeout:
			g.abandon(done, at)
			return errGateTimeout
		case <-poll.C:
			if err := ctx.Err(); err != nil {
				g.abandon(done, at)
				return err
			}
		}
	}
}

// # Fairness between nodes
//
// The queue hands the lock from one process of a node to the next without a
// gap, while the heads of other nodes' queues sleep between polls: left
// alone, a busy node would keep the lock as long as it has waiters, and the
// other nodes would starve. So the processes of a node keep, in the gate
// file, how many times in a row the node has taken the lock (streak) and
// when its head last found the lock held by a process outside the queue
// (foreignAt: another node, or a process that does not use the queue).
// When the streak reaches fairShare while such contention was seen within
// foreignMemory, the next head steps back once, for a random time up to the
// heads' polling interval, so that a polling head elsewhere can take the
// lock. A node alone never yields.
const (
	fairShare       = 8
	foreignMemory   = 2 * time.Second
	gatedMaxBackoff = 100 * time.Millisecond
	stateOffset     = 8 // after the two lock bytes
)

// gateState is the node's shared fairness state (see above); only the
// process holding the main byte reads or writes it.
type gateState struct {
	streak    uint64
	foreignAt int64 // unix nanoseconds; 0: never
}

func (g *gate) state() gateState {
	var b [16]byte
	if n, _ := g.f.ReadAt(b[:], stateOffset); n < len(b) {
		return gateState{}
	}
	return gateState{streak: binary.LittleEndian.Uint64(b[:8]), foreignAt: int64(binary.LittleEndian.Uint64(b[8:]))}
}

func (g *gate) setState(st gateState) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], st.streak)
	binary.LittleEndian.PutUint64(b[8:], uint64(st.foreignAt))
	_, _ = g.f.WriteAt(b[:], stateOffset)
}

// noteAcquired counts one more acquisition in the node's streak.
func (g *gate) noteAcquired() {
	st := g.state()
	st.streak++
	g.setState(st)
}

// noteForeign records that a process outside the queue holds the lock.
func (g *gate) noteForeign() {
	g.setState(gateState{streak: 0, foreignAt: time.Now().UnixNano()})
}

// yieldIfDue steps back once if the node has had its fair share while
// others wanted the lock.
func (g *gate) yieldIfDue(ctx context.Context, maxBackoff time.Duration) error {
	st := g.state()
	if st.streak < fairShare || st.foreignAt == 0 || time.Since(time.Unix(0, st.foreignAt)) > foreignMemory {
		return nil
	}
	st.streak = 0
	g.setState(st)
	return sleepCtx(ctx, rand.N(min(maxBackoff, gatedMaxBackoff)+1))
}

// abandon lets a pending wait for byte at finish on its own and give the
// byte back.
func (g *gate) abandon(done <-chan error, at int64) {
	g.mu.Lock()
	g.pending++
	g.mu.Unlock()
	go func() {
		err := <-done
		g.mu.Lock()
		defer g.mu.Unlock()
		if err == nil {
			g.unlockByte(at)
		}
		g.pending--
		if g.closed && g.pending == 0 {
			g.f.Close()
		}
	}()
}

// unlock lets the next process of this node through: the next in the
// queue, and the next write in the lane if this one was a write.
func (g *gate) unlock() {
	g.unlockByte(mainByte)
	if g.lane {
		g.lane = false
		g.unlockByte(laneByte)
	}
}

func (g *gate) unlockByte(at int64) {
	_ = unix.FcntlFlock(g.f.Fd(), unix.F_SETLK, byteLock(unix.F_UNLCK, at))
}

// holder is the pid of a process that holds the gate (0 if none or unknown),
// for timeout messages.
func (g *gate) holder() int {
	lk := byteLock(unix.F_WRLCK, mainByte)
	if err := unix.FcntlFlock(g.f.Fd(), unix.F_GETLK, lk); err != nil || lk.Type == unix.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}

// close releases the descriptor (and with it this process's gate lock), or
// leaves that to the last abandoned wait still blocked on it. If nobody is
// queued (all four bytes can be taken at once: a process blocked on a byte
// implies another holding it), the file is removed too, so that temporary
// databases do not leave gate files behind. A process that opened the file
// just before may then queue on the removed inode while newcomers make a
// new one: two queues for a while, which costs fairness, never exclusion.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.pending > 0 {
		return
	}
	fd := g.f.Fd()
	if unix.FcntlFlock(fd, unix.F_SETLK, byteLock(unix.F_WRLCK, entryByte)) == nil &&
		unix.FcntlFlock(fd, unix.F_SETLK, byteLock(unix.F_WRLCK, mainByte)) == nil &&
		unix.FcntlFlock(fd, unix.F_SETLK, byteLock(unix.F_WRLCK, laneByte)) == nil &&
		unix.FcntlFlock(fd, unix.F_SETLK, byteLock(unix.F_WRLCK, laneEntry)) == nil {
		os.Remove(g.path)
	}
	g.f.Close()
}
