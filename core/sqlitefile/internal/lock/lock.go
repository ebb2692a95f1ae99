// Package lock implements TiraStore's cross-node mutex: a lock file created
// with link(2), which is atomic on NFS and Lustre where fcntl/flock are not
// trustworthy. A contender writes its holder record (the original's JSON
// {"hostname", "pid", "timestamp"}, plus extras) into a ticket file of its
// own beside the database and links the ticket to the lock path; the lock is
// held while that second name exists. It speaks the original Python
// TiraStore's protocol, so old Python workers and new Go workers exclude
// each other on the same database during a migration.
//
// What it adds on a cluster: a heartbeat, so that a live holder never looks
// abandoned; staleness measured on the waiter's own monotonic clock, so that
// clock skew cannot break a live Go holder; dead holders on the same host
// broken at once; breaking by rename-and-verify under a break lock, so that
// a breaker only ever removes the very file it judged abandoned; a tenure
// that fences a holder stalled past its waiters' patience (tenure.go). The
// protocol step by step, the
// argument for each guarantee and the remaining holes are in
// docs/lock-protocol.md.
package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/internal/wait"
	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/mono"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// ErrNotHeld is returned by Release when this Lock is not held, which is a
// programming error in the caller.
var ErrNotHeld = errors.New("lock: not held")

// ErrLockLost is returned by Release when the lock file was no longer ours
// (broken as stale by another process, possibly re-acquired by it): the
// critical section may not have been exclusive, which callers may want to log.
var ErrLockLost = errors.New("lock: lock file was broken by another process before release")

// Options tune a Lock; the zero value gives the original's behaviour plus
// heartbeats and the dead-holder rule.
type Options struct {
	// StaleTimeout: a lock that stayed unchanged this long is broken; so is
	// one whose timestamp is older and that does not heartbeat (the
	// original rule). See "Staleness" in docs/lock-protocol.md. 0 means
	// tuning.StaleLockTimeout; a negative value never breaks any lock, not
	// even a dead holder's.
	StaleTimeout time.Duration
	// Timeout: how long Acquire waits before returning *TimeoutError.
	// 0 means tuning.LockTimeout; a negative value waits forever.
	Timeout time.Duration
	// Hostname written into the ticket; default: the host name.
	Hostname string
	// Backoff bounds between attempts; defaults tuning.MinBackoff and
	// tuning.MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// HeartbeatInterval: while held, the lock file's timestamp is rewritten
	// this often. 0 means min(StaleTimeout/4, tuning.MaxHeartbeat) (the
	// latter if StaleTimeout is negative); a negative value turns heartbeats
	// off, which makes the lock look like a Python holder's (broken by its
	// timestamp).
	HeartbeatInterval time.Duration
	// Fence, if set, receives the holder's tenure (tenure.go): the deadline
	// until which it may write without confirming the lock again.
	Fence Fence
}

// Lock is the hard-link lock on one lock path. One Lock is meant to be shared
// by all goroutines of a process that use the same store.
type Lock struct {
	path string
	opt  Options
	rec  *holderRecord
	// clock is the wall clock for timestamps and ages; tests skew it.
	clock func() time.Time

	sem chan struct{} // in-process mutex; a channel so waiting honours ctx

	mu        sync.Mutex // guards ticket, heldSince, confirmedAt and lost, and the ticket's record while held
	ticket    *ticket    // non-nil while held
	heldSince time.Time  // when the current hold began (monotonic), for Counters.Held
	// confirmedAt is when the current tenure began (monoNow, see tenure.go);
	// lost is set once the lock was found broken while held.
	confirmedAt int64
	lost        *LostError
	tenure      time.Duration // see tenureFor; fixed at New
	beat        *heartbeat    // the heartbeat goroutine, from the first Acquire to Close (owned by the sem holder)

	// own is this process's ticket file, created by the first Acquire and
	// reused by every later one until Close; it belongs to whoever holds
	// sem.
	own *ticket

	// The rest belongs to whoever holds sem (the one goroutine running
	// acquireFile).
	seen, seenBreak observation // the lock file's, the break lock's
	stats           stats
	// breakErr is why the last attempt to break a stale lock failed (e.g.
	// EPERM: another user's lock in a sticky directory), for TimeoutError.
	breakErr error
	swept    bool // sweepTickets has run
}

// observation is a file's state last seen while waiting, and since when.
type observation struct {
	valid bool
	state lockState
	since time.Time // monotonic: when first seen
}

// stats are counters for tests, benchmarks and monitoring (Lock.Counters).
// They are atomic so that Counters may read them while another goroutine waits.
type stats struct {
	acquired  atomic.Int64 // Acquire successes
	links     atomic.Int64 // link() attempts
	breaks    atomic.Int64 // locks removed as stale or dead
	putBacks  atomic.Int64 // locks moved aside by mistake and linked back
	displaced atomic.Int64 // ... of which the lock path had been taken meanwhile
	swept     atomic.Int64 // dead processes' tickets removed by sweepTickets
	heldNS    atomic.Int64 // total time held, Acquire's return to Release
}

// Counters is a snapshot of a Lock's counters. Links per Acquired is how hard
// this process polled the shared filesystem's metadata server for the lock;
// Breaks counts locks it removed as abandoned. Held per Acquired is the
// mean critical section; Held summed over every process of a database and
// divided by the elapsed time is how busy the lock was, which is what
// bounds the throughput of all of them together.
type Counters = storage.LockCounters

// Counters returns the counters since New; safe to call at any time.
func (l *Lock) Counters() Counters {
	return Counters{Acquired: l.stats.acquired.Load(), Links: l.stats.links.Load(), Breaks: l.stats.breaks.Load(),
		Held: time.Duration(l.stats.heldNS.Load())}
}

// New returns a Lock for lockPath (normally PathFor(dbPath)); nothing is
// touched on disk until Acquire.
func New(lockPath string, opt Options) *Lock {
	if opt.StaleTimeout == 0 {
		opt.StaleTimeout = tuning.StaleLockTimeout
	}
	if opt.Timeout == 0 {
		opt.Timeout = tuning.LockTimeout
	}
	if opt.Hostname == "" {
		opt.Hostname = identity.Hostname()
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = tuning.MinBackoff
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = tuning.MaxBackoff
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = opt.MinBackoff
	}
	if opt.HeartbeatInterval == 0 {
		opt.HeartbeatInterval = tuning.MaxHeartbeat
		if opt.StaleTimeout > 0 {
			opt.HeartbeatInterval = min(opt.StaleTimeout/4, tuning.MaxHeartbeat)
		}
	}
	if opt.HeartbeatInterval > 0 && opt.HeartbeatInterval < tuning.MinHeartbeat {
		opt.HeartbeatInterval = tuning.MinHeartbeat
	}
	rec := &holderRecord{hostname: opt.Hostname, pid: os.Getpid(), proc: liveness.Self()}
	if opt.HeartbeatInterval > 0 {
		rec.every = opt.HeartbeatInterval
	}
	return &Lock{path: lockPath, opt: opt, rec: rec, clock: time.Now, sem: make(chan struct{}, 1),
		tenure: tenureFor(opt, rec.every)}
}

// Path returns the lock file path, for messages.
func (l *Lock) Path() string { return l.path }

// StaleTimeout is the stale timeout this Lock judges holders by.
func (l *Lock) StaleTimeout() time.Duration { return l.opt.StaleTimeout }

// Acquire blocks until the lock is held, ctx is done (returning ctx.Err()),
// or Options.Timeout has passed (returning *TimeoutError). Other errors are
// I/O failures that retrying will not fix, such as a missing directory.
// Like sync.Mutex it is not reentrant: a goroutine that already holds the
// lock and calls Acquire again waits for itself until Timeout.
func (l *Lock) Acquire(ctx context.Context) error {
	start := time.Now()
	var deadline time.Time
	if l.opt.Timeout > 0 {
		deadline = start.Add(l.opt.Timeout)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.lockLocal(ctx, start, deadline); err != nil {
		return err
	}
	c, wrote, err := l.acquireFile(ctx, start, deadline)
	if err != nil {
		<-l.sem
		return err
	}
	if l.rec.every > 0 && l.beat == nil {
		l.beat = l.startHeartbeat()
	}
	if !l.swept {
		l.swept = true
		l.sweepTickets()
	}
	l.mu.Lock()
	l.ticket, l.heldSince = c, time.Now()
	l.startTenure(wrote)
	l.mu.Unlock()
	return nil
}

// lockLocal takes the in-process mutex.
func (l *Lock) lockLocal(ctx context.Context, start, deadline time.Time) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	default:
	}
	timeout, stop := wait.Deadline(deadline)
	defer stop()
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		h, _ := ReadHolder(l.path)
		return &TimeoutError{Path: l.path, Holder: h, Waited: time.Since(start), now: l.clock()}
	}
}

// acquireFile runs the file protocol; it returns the ticket that is now the
// lock and when (monoNow) its record was written before the link that made
// it the lock, the start of the holder's tenure; or an error.
func (l *Lock) acquireFile(ctx context.Context, start, deadline time.Time) (*ticket, int64, error) {
	c, err := l.ownTicket()
	if err != nil {
		return nil, 0, err
	}
	var (
		last      *Holder
		readErr   error
		unchanged time.Duration
	)
	l.breakErr = nil
	quick := 0 // consecutive retries without sleeping
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		wrote := mono.Now()
		if err := c.write(l.clock()); err != nil {
			return nil, 0, err
		}
		l.stats.links.Add(1)
		held, err := tryLink(c, l.path)
		if err != nil && errors.Is(err, os.ErrNotExist) && c.gone() {
			// Someone deleted our ticket file: make a new one.
			c.f.Close()
			if l.own, err = newTicket(dirOf(l.path), l.rec, l.flushEvery()); err != nil {
				return nil, 0, err
			}
			c = l.own
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		if held {
			l.stats.acquired.Add(1)
			l.seen.valid = false
			return c, wrote, nil
		}
		retryNow := false
		h, st, rerr := readHolder(l.path)
		switch {
		case rerr == nil:
			last = h
			unchanged = l.seen.observe(st, time.Now())
			if l.judge(h, unchanged, l.clock()) != verdictLive {
				// A failed break (say, EPERM in a sticky directory) is
				// not fatal: keep waiting, as for a live holder.
				retryNow = l.breakLock(st)
			}
		case errors.Is(rerr, os.ErrNotExist):
			retryNow = true // released between our link and our read
		default:
			readErr = rerr // e.g. another user's 0600 lock file
		}
		now := time.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return nil, 0, &TimeoutError{Path: l.path, Holder: last, Waited: now.Sub(start), Unchanged: unchanged,
				ReadErr: readErr, BreakErr: l.breakErr, now: l.clock()}
		}
		// Bounded, so that odd states (a dangling symlink at the lock path,
		// a lock that keeps being replaced) cannot spin.
		if retryNow && quick < 3 {
			quick++
			continue
		}
		quick = 0
		d := l.backoff(attempt)
		if !deadline.IsZero() {
			d = min(d, deadline.Sub(now))
		}
		if err := wait.Sleep(ctx, d); err != nil {
			return nil, 0, err
		}
	}
}

// ownTicket returns this Lock's ticket, creating it (empty: the first write
// fills it) at the first Acquire.
func (l *Lock) ownTicket() (*ticket, error) {
	if l.own == nil {
		c, err := newTicket(dirOf(l.path), l.rec, l.flushEvery())
		if err != nil {
			return nil, err
		}
		l.own = c
	}
	return l.own, nil
}

// backoff is "full jitter": uniform in [0, min(MaxBackoff, MinBackoff*2^n)],
// so that 64 waiters spread out instead of retrying in lockstep.
func (l *Lock) backoff(attempt int) time.Duration {
	ceil := l.opt.MaxBackoff
	if attempt < 30 {
		if d := l.opt.MinBackoff << attempt; d > 0 && d < ceil {
			ceil = d
		}
	}
	return rand.N(ceil + 1)
}

// heartbeat is the goroutine that keeps a held lock fresh.
type heartbeat struct {
	stop chan struct{}
	done chan struct{}
}

// startHeartbeat starts this Lock's heartbeat: one goroutine for the
// Lock's life (until Close), which every HeartbeatInterval rewrites the
// record through the ticket's open descriptor while the lock is held and
// checks that the lock is still its ticket, which renews the holder's tenure
// (Confirm, tenure.go). One
// goroutine per Lock rather than per acquisition: starting and joining a
// goroutine at every operation cost cross-thread wake-ups on the hot path.
// A beat runs under l.mu, so Release waits for a beat in progress and no
// beat touches the ticket once Release has taken it back. A failed beat is
// retried at the next tick; only if beats keep failing for StaleTimeout can
// the lock be broken.
func (l *Lock) startHeartbeat() *heartbeat {
	hb := &heartbeat{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(hb.done)
		t := time.NewTicker(l.rec.every)
		defer t.Stop()
		for {
			select {
			case <-hb.stop:
				return
			case <-t.C:
				l.mu.Lock()
				if l.ticket != nil {
					_ = l.confirmLocked() // a loss is reported by Release
				}
				l.mu.Unlock()
			}
		}
	}()
	return hb
}

// Release gives the lock up: the tenure ends, the lock file is unlinked
// only if it is still our ticket (the ticket itself stays for the next
// Acquire). It returns ErrNotHeld if the lock is not held, and a *LostError
// (errors.Is ErrLockLost) if the lock had been broken by someone else
// meanwhile, or could not be confirmed after a stall: the critical section
// may not have been exclusive. The in-process mutex is released in all
// cases.
func (l *Lock) Release() error {
	l.mu.Lock()
	c, since, lost := l.ticket, l.heldSince, l.lost
	l.ticket = nil
	if c != nil && l.opt.Fence != nil {
		l.opt.Fence.Extend(0)
	}
	l.mu.Unlock()
	if c == nil {
		return ErrNotHeld
	}
	defer func() {
		l.stats.heldNS.Add(int64(time.Since(since)))
		<-l.sem
	}()
	// Unlink the lock path only if it is still our inode. This must look
	// the path up: an fstat of our ticket is not enough. Some filesystems
	// (FUSE ones among them, our test bed included) answer fstat by a path
	// of the inode rather than by the inode itself, and after a break that
	// path may be the lock path, now someone else's lock, with two links.
	switch id, err := lstatID(l.path); {
	case err == nil && id == c.id:
		if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if lost != nil {
			return lost // put back by a breaker since, but broken meanwhile
		}
		return nil
	case err == nil || errors.Is(err, os.ErrNotExist):
		if lost != nil {
			return lost
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.lostError(nil)
	default:
		return err
	}
}

// Close removes this Lock's ticket file and closes its descriptors. The Lock
// must not be held; a later Acquire starts over with a new ticket. Processes
// that exit without Close leave their ticket behind: sweepTickets removes it
// at the next Acquire of a process on the same host.
func (l *Lock) Close() error {
	l.sem <- struct{}{}
	defer func() { <-l.sem }()
	if hb := l.beat; hb != nil {
		l.beat = nil
		close(hb.stop)
		<-hb.done
	}
	var err error
	if l.own != nil {
		err = l.own.remove()
		l.own = nil
	}
	return err
}

// flushEvery is how often write fsyncs the ticket: the heartbeat interval,
// which bounds how old a record other nodes may see.
func (l *Lock) flushEvery() time.Duration {
	if l.rec.every > 0 {
		return l.rec.every
	}
	if l.opt.StaleTimeout > 0 {
		return min(l.opt.StaleTimeout/4, tuning.MaxHeartbeat)
	}
	return tuning.MaxHeartbeat
}

// TimeoutError says who held the lock when Acquire gave up, because "timed
// out" alone sends users hunting for the culprit across 64 nodes.
type TimeoutError struct {
	Path   string
	Holder *Holder // nil if the lock file could not be read or parsed
	Waited time.Duration
	// Unchanged is how long the lock file had stayed exactly as it was, as
	// seen from this process (0 if unknown). A live Go holder rewrites it
	// every HeartbeatInterval; a large value means a Python holder, or a
	// holder that stopped heartbeating.
	Unchanged time.Duration
	// ReadErr is why the lock file could not be read (nil if it could), and
	// BreakErr why it was judged abandoned but could not be removed: both
	// typically "permission denied" for another user's lock.
	ReadErr, BreakErr error

	now time.Time // wall clock when it was made; zero: time.Now()
}

// Error names the lock, the holder, how long it has held the lock by its
// timestamp, and how long the lock had not changed.
func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("timed out after %.1fs waiting for lock %s", e.Waited.Seconds(), e.Path)
	if e.Holder == nil {
		if e.ReadErr != nil && isParseError(e.ReadErr) {
			// Waiters never break it; the store's error adds what does
			// (Advice).
			return s + fmt.Sprintf(" (holder unknown: the lock file is not a lock record: %v)", e.ReadErr)
		}
		if e.ReadErr != nil {
			// The store's error adds whose it is and what works
			// (Unreadable).
			return s + fmt.Sprintf(" (holder unknown: cannot read the lock file: %v)", e.ReadErr)
		}
		return s + " (holder unknown)"
	}
	now := e.now
	if now.IsZero() {
		now = time.Now()
	}
	age := unixSeconds(now) - e.Holder.Timestamp
	s += fmt.Sprintf(" held by host %s pid %d for %.1fs", e.Holder.Hostname, e.Holder.PID, age)
	if e.Unchanged > 0 {
		s += fmt.Sprintf(" (lock file unchanged for %.1fs as seen here)", e.Unchanged.Seconds())
	}
	if e.BreakErr != nil {
		s += fmt.Sprintf("; it is abandoned but could not be removed: %v (remove it as its owner or an administrator)", e.BreakErr)
	}
	return s
}

// unixSeconds is Python's time.time() for t.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
