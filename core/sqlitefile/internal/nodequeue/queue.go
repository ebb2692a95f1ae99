// Package nodequeue is the node queue: it orders the processes of one node
// (of one user) that wait for the hard-link lock of a database
// (internal/lock), so that only the process at its head polls the shared
// filesystem, in the order they came, writes in a lane of their own. It
// only orders: the lock excludes. A Lock takes a Queue as an option
// (lock.Options.Queue); the store opens it (Open) and closes it. The
// queue's file lives in this user's private directory on the node
// (internal/nodelocal); the lock protocol is in docs/lock-protocol.md.
package nodequeue

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/internal/wait"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/mono"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
	"github.com/tirastore/tirastore/core/tuning"
)

// # The node-local queue (gate)
//
// Polling link() with backoff is the only way to wait for the lock across
// nodes, but it is unfair and loads the metadata server: 32 processes of one
// node that all poll convoy behind whichever process happens to retry when
// the lock is free, and each poll is a round trip. So the processes of one
// node first queue on a node-local file lock, and only the process at the
// head of that queue runs the link protocol. Waiting in the queue is a
// sleep in the kernel on the waiter's own thread (futex(2): see "Waiting
// on the calling thread", wake_linux.go), and a release wakes the next
// waiter at once, in the order they arrived (see "A FIFO of byte locks"
// below).
//
// The queue is only an optimisation. The hard-link lock stays the one that
// excludes (processes of other nodes, of other containers, old Python
// workers never see the gate), so anything that goes wrong with the gate
// falls back to plain link polling:
//
//   - the gate file is gate-<hash> in this user's private directory on
//     the node, <base>/tirastore-<euid> with base /dev/shm, else $TMPDIR
//     (internal/nodelocal; <hash> and the names of the spool and the change
//     log: nodelocal.Name), mode 0600. It is opened through the directory's
//     descriptor, without following symlinks, and checked (a regular file
//     of this user, mode 0600, one link) before it is used: a file that
//     fails the checks means no gate, and the store warns about it; no
//     usable directory at all (no /dev/shm and no writable $TMPDIR) means
//     no gate either. The Queues of a process on the database share one
//     descriptor of it (file.go), and the last of them removes the file
//     when nobody is queued;
//   - the queue is per user: users who share a database do not share its
//     queue, since a file that another user can open is one they can
//     stall ours with (plant it before us, lock it and never let go). What
//     that costs: processes of different users on one node wait for the
//     lock as processes of different nodes do (the head of each user's
//     queue polls the lock file), and fairness between users is the
//     fairness between nodes (below); within a user nothing changes;
//   - classic POSIX record locks belong to the process: the kernel drops
//     them when it dies (a killed process never blocks the queue), and a
//     fork()ed child does not inherit them (open file description locks
//     would be inherited, and a child living on after its parent was killed
//     would block the node forever);
//   - any error of the byte locks means: go on without the gate. A wait
//     that blocks in F_SETLKW (without the wake words) also gets EDEADLK
//     when the kernel sees two processes each queued on a database while
//     at the head of another's queue; a wait on the wake words, which only
//     tries the byte, leaves such a cycle by its stall check or deadline;
//   - TIRASTORE_NODE_QUEUE=0 switches it off (for comparisons:
//     nodelocal.QueueEnabled).
//
// Waiting for the gate honours ctx and the Acquire deadline: a wait looks
// at them between its sleeps (at most tuning.QueueWaitSlice each), and one
// that is abandoned leaves a blocking call on a goroutine of its own that
// gives its place up as soon as its turn comes. Two Locks of one process
// on the same database share one owner (the process), so they pass the
// gate together; the hard-link lock still orders them.

// Queue is one Lock's place in its database's node queue: a reference to
// the process's descriptor of the gate file and the bytes of it that this
// Lock holds. It serves one Lock (lock.Options.Queue), whose in-process
// mutex serializes Lock and Unlock; WritesWaiting may be called at any
// time while it is open.
type Queue struct {
	// f is this Queue's reference to the process's one descriptor of the
	// gate file (see file.go); its Close gives the reference back.
	f *gateRef
	// queueSlot, laneSlot: the slot bytes this process holds in the queue
	// and in the writers' lane while it holds the gate (-1: none).
	queueSlot, laneSlot int64

	mu      sync.Mutex
	pending int  // abandoned waits still blocked in the kernel
	closed  bool // Close was called; the last pending wait closes f
	// settled is closed when the last abandoned wait has finished (nil
	// while none is pending): a process must not join a line again while
	// its abandoned place is still in it (see join).
	settled chan struct{}
	// stalled: a wait was abandoned because the line did not move (see
	// "Stalled places"); until settled, this process does not queue.
	stalled bool
}

// Errors of Queue.Lock; on each of them nothing is held.
var (
	// ErrHandedOver: another process of this node did the write (see
	// Handover); the lock is not to be taken.
	ErrHandedOver = errors.New("nodequeue: the write was done by another process of this node")
	// ErrTimeout: the deadline passed in the queue.
	ErrTimeout = errors.New("nodequeue: timed out in the node-local queue")
	// ErrUnavailable: the queue cannot be used now (e.g. EDEADLK); the
	// caller proceeds without it, since it only orders.
	ErrUnavailable = errors.New("nodequeue: node-local queue unavailable")
	// ErrStalled: the line did not move for too long (see "Stalled
	// places"); this acquisition goes on without the queue.
	ErrStalled = errors.New("nodequeue: the node-local queue is stalled")
)

// Handover is a write that another process of this node may do on the
// caller's behalf, in its own transaction (group commit: see internal/spool).
type Handover interface {
	// Publish is called before waiting, only when another process of
	// this node holds or waits for the writers' lane; it makes the write
	// available to them and reports whether it did.
	Publish() bool
	// Done is called once the published write's process holds the lane:
	// true means another process did the write, so the lock is not taken.
	Done() bool
}

// # Stalled places
//
// The kernel frees a place in a line only when its process releases it or
// dies. A process that is stopped (SIGSTOP, Slurm's suspend), paused or
// hung keeps its place, and everyone behind it would wait until
// lock_timeout, although its lock counts as abandoned on other nodes after
// stale_lock_timeout. So a waiter that has been blocked in a line for a
// while (StallCheck.Every) looks, at that interval, whether the line is
// moving, and leaves it, abandoning its place as on a timeout, when
//
//   - the progress word of the gate file (progressOffset) has not changed
//     for StaleTimeout (StallCheck.Patience) as seen here: the head of the
//     queue writes it (NoteProgress) before every attempt at the lock file
//     while it polls and at every heartbeat while it holds the lock, so a
//     head that stopped or hung stops changing it, whatever it was doing;
//     or
//   - it waits for the ticket byte, which its holder keeps for microseconds,
//     for longer than StallCheck.Every times 16.
//
// From the first check that finds the progress word unchanged, the waiter
// also reads the lock file at each check (StallCheck.Watch), as it would
// outside the queue, so that its count of how long the lock stayed
// unchanged starts while it is still queued and it can break a stopped
// holder's lock as soon as it is out. A lock that is merely breakable (a dead
// holder, a stale one on another node) is no reason to leave: the head, which
// is alive, breaks it (leaving then cost fairness: the waiter polled beside a
// queue that hands the lock on without a gap). While the line moves, waiters
// read nothing.
//
// It then runs the link protocol without the queue, as a process of
// another node would, and a stopped holder on the same node is judged by
// the same heartbeat rule as one elsewhere. Until its abandoned place has
// been passed (settled), its later acquisitions skip the queue too.

// StallCheck is how a Lock's waits in the queue notice a line that does not
// move (see "Stalled places"); the Lock derives it from its StaleTimeout
// (internal/lock, tenure.go).
type StallCheck struct {
	// Every is how often a blocked wait looks whether the line moves.
	Every time.Duration
	// Patience: a line whose progress word stayed unchanged this long, as
	// seen here, is stalled.
	Patience time.Duration
	// Watch, if not nil, is called at each check that finds the progress
	// word unchanged since the previous check, with the time of the check.
	Watch func(now time.Time)
}

// stall is one acquisition's stall check: its StallCheck and the progress
// word it last read, shared by its waits in the lane and in the queue.
type stall struct {
	*StallCheck
	last  uint64    // the progress word last read
	since time.Time // when it was first read with that value
}

// newStall is the state of one acquisition's stall check (nil: none).
func newStall(sc *StallCheck) *stall {
	if sc == nil || sc.Every <= 0 {
		return nil
	}
	return &stall{StallCheck: sc}
}

// moved reports, at a check, whether the line is still moving (false:
// leave it).
func (st *stall) moved(q *Queue) bool {
	now := time.Now()
	if p := q.progress(); st.since.IsZero() || p != st.last {
		st.last, st.since = p, now
		return true
	}
	// The line has not moved since the last check: the caller watches
	// the lock file too, so that once out of the queue it can judge it at
	// once (its count of how long the lock stayed unchanged starts now,
	// not when it leaves).
	if st.Watch != nil {
		st.Watch(now)
	}
	return now.Sub(st.since) < st.Patience
}

// moving reports, at a check of a wait for byte at that has lasted waited,
// whether to go on waiting: the ticket byte for up to 16 checks (its holder
// keeps it for microseconds), a slot while its line moves.
func (st *stall) moving(q *Queue, at int64, waited time.Duration) bool {
	if at == ticketByte {
		return waited < 16*st.Every
	}
	return st.moved(q)
}

// gateDir is where gate files live: this user's private directory on the
// node (nodelocal.PrivatePath), in /dev/shm (memory, node-local) or else
// the temporary directory.
func gateDir() string { return nodelocal.PrivatePath() }

// File is the node queue's file for the lock at lockPath (tools and tests
// read its lock state in /proc/locks). The last Queue to close removes it
// when nobody is queued (see sharedGate.release).
func File(lockPath string) string {
	return filepath.Join(gateDir(), nodelocal.Name(nodelocal.GatePrefix, lockPath))
}

// Open returns a Queue on the process's descriptor of the gate file of the
// lock at lockPath (opening, creating and checking the file if this process
// has none open: acquireGate), for one Lock, as long as its store lives.
// The store opens it when it opens, so that it learns at once whether the
// queue can be used (a file planted at its name switches it off, and the
// store warns when it opens rather than at its first operation). Open
// returns nil, nil when the queue is switched off (TIRASTORE_NODE_QUEUE=0,
// nodelocal.QueueEnabled); an error means that the Lock polls without the
// queue, and a *nodelocal.Problem that a file that fails the checks is in
// the way (the store should say so).
func Open(lockPath string) (*Queue, error) {
	if !nodelocal.QueueEnabled() {
		return nil, nil
	}
	ref, err := acquireGate(lockPath)
	if err != nil {
		return nil, err
	}
	return &Queue{f: ref, queueSlot: -1, laneSlot: -1}, nil
}

// # A FIFO of byte locks
//
// A POSIX lock hands nothing over: its release wakes every process blocked
// on it, and whichever runs first takes it. Waiters that all block on one
// byte are therefore served in random order, and with 25 of them a waiter's
// 99th-percentile wait is some 110 turns of others, where a first-come,
// first-served line makes it wait at most 24.
// So every waiter blocks on a byte of its own predecessor (the CLH queue
// lock): it draws a ticket t from a counter in the file, locks slot byte t,
// and waits for slot byte t-1, which its predecessor holds until it
// releases the gate. Exactly one process waits on each byte, so each
// release wakes exactly the next in line. A process that dies releases its
// slot, which lets its successor through as a release would; a wait
// abandoned on timeout keeps the slot until the predecessor's turn has
// passed, then gives both up, so the line stays in order. The counters are
// read and incremented under ticketByte, held for microseconds.
//
// Slots wrap around after nSlots tickets, far more than processes on a
// node; a slot still held when its number comes round again (nSlots
// waiters) sends the newcomer to the link protocol without the gate. A
// process that gave up a wait queues again only once its old place's turn
// has passed (see join).
const (
	ticketByte    = 0  // guards the ticket counters
	stateOffset   = 8  // the fairness state, 16 bytes (see below)
	ticketsOffset = 24 // the queue's next ticket, then the lane's (8 bytes each)
	queueSlots    = 1 << 20
	laneSlots     = 2 << 20
	nSlots        = 1 << 16
)

// line is one FIFO in the gate file: the queue proper or the writers' lane.
type line struct {
	slots, counter int64 // its first slot byte, its ticket counter's offset
}

var (
	queueLine = line{slots: queueSlots, counter: ticketsOffset}
	laneLine  = line{slots: laneSlots, counter: ticketsOffset + 8}
)

// all is a lock (typ) of every slot of ln.
func (ln line) all(typ int16) *unix.Flock_t {
	return &unix.Flock_t{Type: typ, Whence: 0, Start: ln.slots, Len: nSlots}
}

// # The writers' lane
//
// A write holds the lock several times longer than a read (its commit
// waits for four fsyncs, a read for none), and in a plain FIFO a read
// waits for every write queued ahead of it: with dozens of processes on a
// node, a lookup's p99 wait became several writes long (docs/performance.md,
// "Figures the code cites", has the hold times). So a write first
// waits in a line of its own, the lane, and keeps its place at the lane's
// head until it releases the lock: at most one write is in the queue proper
// or at its head, and a read waits for at most that one, besides the reads
// ahead of it. Writes wait for one another in the lane instead. No
// operation starves: both lines are FIFO, and a write in the queue is
// passed by nobody.
//
// # Reads first
//
// Autoschedulers wait for lookups on their critical path, while a record
// follows a measurement of seconds: the reads are the ones to serve first.
// So the write at the head of the lane, when other writes wait in the
// lane behind it, also waits, before it joins the queue, until the queue
// is empty, for at most tuning.WriteLull: while reads keep the queue busy,
// writes gather in the lane and are committed together (group commit,
// internal/spool), one transaction and one set of fsyncs for all, and the
// database changes less often, so readers' caches (SQLite's pages, the
// store's entries) stay valid longer. Under load this raised throughput
// and lowered lookups' p99, while records wait longer. A write alone in
// the lane has nothing to gather: it joins the queue at once and waits
// only for the reads ahead of it. Otherwise a process that keeps the
// queue busy with reads (a lookup loop over more programs than the
// result cache holds) made a neighbour's every record wait for one of
// the queue's rare gaps, three times a record's own time.
// A write at the head of the lane may also find that another process has
// done it meanwhile: it then leaves without entering the queue.
// `make bench` shows what writes pay (throughput section: "all p99" and
// "worst op").

// byteLock is a write lock (typ F_WRLCK) or an unlock (F_UNLCK) of one byte.
func byteLock(typ int16, at int64) *unix.Flock_t {
	return &unix.Flock_t{Type: typ, Whence: 0, Start: at, Len: 1}
}

// Lock waits until this process is at the head of the queue, ctx is done
// (ctx.Err()) or deadline passes (ErrTimeout); a write (write true) first
// waits in the writers' lane, which Unlock gives back, then for a lull in
// the queue (awaitLull). A write with a handover h (nil: none) publishes it
// if another process of this node holds or waits for the lane; if, once it
// is at the head of the lane, h reports that another process did its work,
// it gives its place back and returns ErrHandedOver. sc (nil: none) makes
// a wait leave a line that does not move (ErrStalled; see "Stalled
// places"). On error nothing is held. ErrUnavailable and ErrStalled mean
// the caller should proceed without the queue; a closed Queue is
// unavailable.
func (q *Queue) Lock(ctx context.Context, deadline time.Time, write bool, h Handover, stallCheck *StallCheck) error {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return ErrUnavailable
	}
	var done func() bool
	if write && h != nil && q.laneBusy() && h.Publish() {
		done = h.Done
	}
	sc := newStall(stallCheck)
	q.queueSlot, q.laneSlot = -1, -1
	if write {
		slot, err := q.join(ctx, deadline, laneLine, sc)
		if err != nil {
			return err
		}
		if done != nil && done() {
			q.unlockByte(slot)
			return ErrHandedOver
		}
		q.laneSlot = slot
		if err := q.awaitLull(ctx, deadline); err != nil {
			q.unlockByte(slot)
			q.laneSlot = -1
			return err
		}
	}
	slot, err := q.join(ctx, deadline, queueLine, sc)
	if err != nil {
		if q.laneSlot >= 0 {
			q.unlockByte(q.laneSlot)
			q.laneSlot = -1
		}
		return err
	}
	q.queueSlot = slot
	return nil
}

// awaitLull waits, up to tuning.WriteLull (and deadline), until no other
// process of this node is in the queue, or no other write in the lane (see
// "Reads first").
func (q *Queue) awaitLull(ctx context.Context, deadline time.Time) error {
	until := time.Now().Add(tuning.WriteLull)
	if !deadline.IsZero() && deadline.Before(until) {
		until = deadline
	}
	for q.laneBusy() && q.queueBusy() && time.Now().Before(until) {
		if err := wait.Sleep(ctx, tuning.LullPoll); err != nil {
			return err
		}
	}
	return nil
}

// queueBusy reports whether another process of this node is in the queue
// (at its head or waiting).
func (q *Queue) queueBusy() bool {
	_, busy := q.inLine(queueLine)
	return busy
}

// join takes a ticket in ln and waits until this process is at its head;
// it returns the slot byte it then holds.
//
// A process whose earlier wait was abandoned and is still in a line waits
// until that place's turn has passed before it joins again. Otherwise its
// new place would pass the old one (the old slot is its own, so waiting for
// it returns at once) and with it everyone queued in between.
func (q *Queue) join(ctx context.Context, deadline time.Time, ln line, sc *stall) (int64, error) {
	q.mu.Lock()
	settled, stalled := q.settled, q.stalled
	q.mu.Unlock()
	if settled != nil {
		if stalled {
			return 0, ErrStalled
		}
		if err := waitChan(ctx, deadline, settled); err != nil {
			return 0, err
		}
	}
	if err := q.wait(ctx, deadline, ticketByte, -1, sc); err != nil {
		return 0, err
	}
	var b [8]byte
	if n, err := q.f.ReadAt(b[:], ln.counter); err != nil && n != 0 {
		q.unlockByte(ticketByte)
		return 0, ErrUnavailable
	}
	t := binary.LittleEndian.Uint64(b[:])
	binary.LittleEndian.PutUint64(b[:], t+1)
	if _, err := q.f.WriteAt(b[:], ln.counter); err != nil {
		q.unlockByte(ticketByte)
		return 0, ErrUnavailable
	}
	mine := ln.slots + int64(t%nSlots)
	err := unix.FcntlFlock(q.f.Fd(), unix.F_SETLK, byteLock(unix.F_WRLCK, mine))
	q.unlockByte(ticketByte)
	if err != nil {
		return 0, ErrUnavailable // a slot still held nSlots tickets later
	}
	pred := ln.slots + int64((t+nSlots-1)%nSlots)
	if err := q.wait(ctx, deadline, pred, mine, sc); err != nil {
		if errors.Is(err, ErrUnavailable) {
			q.unlockByte(mine)
		}
		return 0, err
	}
	q.unlockByte(pred)
	return mine, nil
}

// wait takes the byte at, blocking as Lock describes. If the wait is
// abandoned (ctx, deadline, a stalled line: sc), the byte is given back
// once it comes, together with the byte also (if not -1): a place in a
// line is kept until the predecessor's turn has passed. On
// ErrUnavailable nothing was taken.
func (q *Queue) wait(ctx context.Context, deadline time.Time, at, also int64, sc *stall) error {
	// The common uncontended case costs one non-blocking call.
	switch err := q.try(at); {
	case err == nil:
		return nil
	case !taken(err):
		return ErrUnavailable
	}
	if q.f.mapped != nil {
		if err := q.sleepFor(ctx, deadline, at, also, sc); err != errNoWords {
			return err
		}
	}
	done := q.block(at)
	timeout, stop := wait.Deadline(deadline)
	defer stop()
	poll := time.NewTicker(tuning.CtxPoll)
	defer poll.Stop()
	var check <-chan time.Time
	started := time.Now()
	if sc != nil {
		t := time.NewTicker(sc.Every)
		defer t.Stop()
		check = t.C
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				return ErrUnavailable
			}
			return nil
		case <-check:
			if sc.moving(q, at, time.Since(started)) {
				continue
			}
			q.abandon(done, at, also, true)
			return ErrStalled
		case <-ctx.Done():
			q.abandon(done, at, also, false)
			return ctx.Err()
		case <-timeout:
			q.abandon(done, at, also, false)
			return ErrTimeout
		case <-poll.C:
			if err := ctx.Err(); err != nil {
				q.abandon(done, at, also, false)
				return err
			}
		}
	}
}

// try takes byte at if it is free (F_SETLK).
func (q *Queue) try(at int64) error {
	return unix.FcntlFlock(q.f.Fd(), unix.F_SETLK, byteLock(unix.F_WRLCK, at))
}

// queueWaitSlice is tuning.QueueWaitSlice, a variable for the tests that
// show that a waiter gets through because it is woken.
var queueWaitSlice = tuning.QueueWaitSlice

// errNoWords: the gate file's wake words cannot be used (wake_linux.go).
var errNoWords = errors.New("nodequeue: no wake words")

// taken reports whether err of a try means that another process holds the
// byte.
func taken(err error) bool { return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) }

// block takes byte at in F_SETLKW on a goroutine of its own; the channel
// gets its outcome.
func (q *Queue) block(at int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			err := unix.FcntlFlock(q.f.Fd(), unix.F_SETLKW, byteLock(unix.F_WRLCK, at))
			if !errors.Is(err, unix.EINTR) {
				done <- err
				return
			}
		}
	}()
	return done
}

// sleepFor is wait on the calling thread (see "Waiting on the calling
// thread", wake_linux.go): it sleeps on byte at's wake word in slices of
// tuning.QueueWaitSlice, tries the byte at each wake, and looks at ctx,
// the deadline and the stall check between slices, abandoning the place
// as wait does. errNoWords: the words failed before anything was decided,
// and the caller waits as before.
func (q *Queue) sleepFor(ctx context.Context, deadline time.Time, at, also int64, sc *stall) error {
	started := time.Now()
	var nextCheck time.Time
	if sc != nil {
		nextCheck = started.Add(sc.Every)
	}
	for {
		now := time.Now()
		switch {
		case ctx.Err() != nil:
			q.abandon(q.block(at), at, also, false)
			return ctx.Err()
		case !deadline.IsZero() && !now.Before(deadline):
			q.abandon(q.block(at), at, also, false)
			return ErrTimeout
		case sc != nil && !now.Before(nextCheck):
			nextCheck = now.Add(sc.Every)
			if !sc.moving(q, at, now.Sub(started)) {
				q.abandon(q.block(at), at, also, true)
				return ErrStalled
			}
		}
		d := queueWaitSlice
		if !deadline.IsZero() {
			d = min(d, deadline.Sub(now))
		}
		if sc != nil {
			d = min(d, nextCheck.Sub(now))
		}
		switch err := q.f.mapped.sleep(at, max(d, time.Microsecond), func() error { return q.try(at) }); {
		case err == nil, err == errNoWords:
			return err
		case !taken(err):
			return ErrUnavailable
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
// When the streak reaches tuning.FairShare while such contention was seen
// within tuning.ForeignMemory, the next head steps back once, for a random
// time up to the heads' polling interval, so that a polling head elsewhere
// can take the lock. A node alone never yields. The Lock at the head tells
// the queue what it sees (NoteAcquired, NoteForeign) and asks it whether
// to step back (YieldIfDue).

// gateState is the node's shared fairness state (see above); only the
// process holding the main byte reads or writes it.
type gateState struct {
	streak    uint64
	foreignAt int64 // unix nanoseconds; 0: never
}

func (q *Queue) state() gateState {
	var b [16]byte
	if n, _ := q.f.ReadAt(b[:], stateOffset); n < len(b) {
		return gateState{}
	}
	return gateState{streak: binary.LittleEndian.Uint64(b[:8]), foreignAt: int64(binary.LittleEndian.Uint64(b[8:]))}
}

func (q *Queue) setState(st gateState) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], st.streak)
	binary.LittleEndian.PutUint64(b[8:], uint64(st.foreignAt))
	q.f.writeHead(b[:], stateOffset)
}

// progressOffset is where the head of the queue keeps its progress word
// (8 bytes after the ticket counters; see "Stalled places").
const progressOffset = ticketsOffset + 16

// NoteProgress is the head's sign of life: a new progress word (its
// CLOCK_MONOTONIC time, which differs at every call). Waiters compare it
// only with what they read before, so neither torn reads nor clocks
// matter. The Lock at the head calls it before every attempt at the lock
// file and at every heartbeat.
func (q *Queue) NoteProgress() {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(mono.Now()))
	q.f.writeHead(b[:], progressOffset)
}

// progress reads the progress word (0 if unreadable).
func (q *Queue) progress() uint64 {
	var b [8]byte
	if n, _ := q.f.ReadAt(b[:], progressOffset); n < len(b) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[:])
}

// NoteAcquired counts one more acquisition in the node's streak (the head
// took the lock).
func (q *Queue) NoteAcquired() {
	st := q.state()
	st.streak++
	q.setState(st)
}

// NoteForeign records that a process outside the queue holds the lock (the
// head found it held by a process not queued here).
func (q *Queue) NoteForeign() {
	q.setState(gateState{streak: 0, foreignAt: time.Now().UnixNano()})
}

// YieldIfDue steps back once, for a random time up to min(maxBackoff,
// tuning.QueuedMaxBackoff), if the node has had its fair share while
// others wanted the lock; the head calls it before its first attempt.
func (q *Queue) YieldIfDue(ctx context.Context, maxBackoff time.Duration) error {
	st := q.state()
	if st.streak < tuning.FairShare || st.foreignAt == 0 || time.Since(time.Unix(0, st.foreignAt)) > tuning.ForeignMemory {
		return nil
	}
	st.streak = 0
	q.setState(st)
	return wait.Sleep(ctx, rand.N(min(maxBackoff, tuning.QueuedMaxBackoff)+1))
}

// waitChan waits until ch is closed, ctx is done or deadline passes
// (ErrTimeout).
func waitChan(ctx context.Context, deadline time.Time, ch <-chan struct{}) error {
	timeout, stop := wait.Deadline(deadline)
	defer stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return ErrTimeout
	}
}

// abandon lets a pending wait for byte at finish on its own and give the
// byte back, with also (if not -1) whatever the outcome; stalled: it is
// abandoned because the line did not move (see join).
func (q *Queue) abandon(done <-chan error, at, also int64, stalled bool) {
	q.mu.Lock()
	if q.pending++; q.pending == 1 {
		q.settled = make(chan struct{})
	}
	q.stalled = q.stalled || stalled
	q.mu.Unlock()
	go func() {
		err := <-done
		q.mu.Lock()
		defer q.mu.Unlock()
		if err == nil {
			q.unlockByte(at)
		}
		if also >= 0 {
			q.unlockByte(also)
		}
		if q.pending--; q.pending == 0 {
			close(q.settled)
			q.settled, q.stalled = nil, false
		}
		if q.closed && q.pending == 0 {
			q.f.Close()
		}
	}()
}

// Unlock lets the next process of this node through: the next in the
// queue, and the next write in the lane if this one was a write.
func (q *Queue) Unlock() {
	if q.queueSlot >= 0 {
		q.unlockByte(q.queueSlot)
	}
	if q.laneSlot >= 0 {
		q.unlockByte(q.laneSlot)
	}
	q.queueSlot, q.laneSlot = -1, -1
}

func (q *Queue) unlockByte(at int64) {
	_ = unix.FcntlFlock(q.f.Fd(), unix.F_SETLK, byteLock(unix.F_UNLCK, at))
	q.f.mapped.wake(at)
}

// laneBusy reports whether another process of this node is in the writers'
// lane (at its head or waiting): a write that starts now would wait.
func (q *Queue) laneBusy() bool {
	_, busy := q.inLine(laneLine)
	return busy
}

// HoldLaneSlot takes a byte of the writers' lane that no ticket reaches
// in a short run, as a write waiting in the lane holds its slot, so that
// the other processes' WritesWaiting report true (a process does not see
// its own locks): for tests of the packages above, which need a write
// waiting without one. release gives the byte back.
func (q *Queue) HoldLaneSlot() (release func(), err error) {
	at := laneLine.slots + nSlots/2
	if err := unix.FcntlFlock(q.f.Fd(), unix.F_SETLK, byteLock(unix.F_WRLCK, at)); err != nil {
		return nil, err
	}
	return func() { q.unlockByte(at) }, nil
}

// WritesWaiting reports whether a write of another process of this node
// holds or waits for the writers' lane, i.e. whether the database is about
// to change (the result cache asks it under the lock). A nil Queue (no
// node queue) reports false.
func (q *Queue) WritesWaiting() bool {
	return q != nil && q.laneBusy()
}

// Holder is the pid of a process that holds the gate (0 if none or
// unknown), for timeout messages.
func (q *Queue) Holder() int {
	pid, _ := q.inLine(queueLine)
	return pid
}

// inLine reports whether another process of this node holds a slot of ln
// (F_GETLK sees only other processes' locks), and the pid of one of them.
func (q *Queue) inLine(ln line) (pid int, busy bool) {
	lk := ln.all(unix.F_WRLCK)
	if err := unix.FcntlFlock(q.f.Fd(), unix.F_GETLK, lk); err != nil || lk.Type == unix.F_UNLCK {
		return 0, false
	}
	return int(lk.Pid), true
}

// Close gives this Queue's reference to the gate file back, or leaves that
// to the last abandoned wait still blocked on it (abandon closes q.f). The
// process's last reference closes the descriptor, and removes the file if
// nobody is queued (sharedGate.release): before, other Queues of this
// process may still hold or wait for bytes of it, and closing a descriptor
// would drop their locks. Its Lock must not hold the queue (close the Lock
// first). A nil Queue is closed already.
func (q *Queue) Close() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	if q.pending > 0 {
		return
	}
	q.f.Close()
}
