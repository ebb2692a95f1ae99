package lock

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/mono"
)

// # The holder's tenure
//
// A holder that stalls (SIGSTOP, a paused VM, a hung NFS call) for longer
// than its waiters' patience has its lock broken, and must not write after
// that: see "Fencing" in core/sqlite. It knows it may still write from its
// tenure: a span of time that starts each time it confirms the lock, that
// is, each time it
//
//  1. noted the time T (CLOCK_MONOTONIC, which runs on during a SIGSTOP);
//  2. changed the lock file (the pwrite before the link of an acquisition,
//     or a heartbeat's pwrite);
//  3. saw that the lock path is still its ticket (the link succeeded, or an
//     lstat after the heartbeat found its inode).
//
// A waiter breaks a live holder's lock only once it has seen the file
// unchanged for heartbeatGrace (a timestamp that looks old) or
// StaleTimeout, on its own clock, and it can first see the new state only
// after step 2, so no Go waiter with the same StaleTimeout breaks the lock
// before T + heartbeatGrace. The tenure ends halfway there, T + tenure with
// tenure = heartbeatGrace/2 (StaleTimeout/2 without heartbeats); the
// heartbeat confirms every HeartbeatInterval, well within it, so a holder
// that is not stalled never needs a confirmation of its own. A holder that
// finds its tenure over (after a stall) confirms again before it writes
// (Confirm); if the lock is no longer its ticket, the lock is lost: Release
// and every later Confirm report a *LostError, and the fence refuses all
// writes until the next acquisition.
//
// What the tenure cannot cover: a waiter configured with a shorter
// StaleTimeout than the holder's, an old Python waiter whose wall clock
// runs ahead (it judges by the timestamp), a pause that the holder's own
// CLOCK_MONOTONIC does not see (a suspended kernel; a hypervisor that
// hides a VM pause from the guest's clock: the next heartbeat's
// confirmation finds the loss then), and a write stalled between the check
// and its system call (see core/sqlite).

// Fence receives a Lock's tenure (core/sqlite.Fence implements it): Extend
// with the deadline (CLOCK_MONOTONIC nanoseconds) until which writes need
// no confirmation, 0 when the lock is released, and Lose once the lock is
// known to be someone else's.
type Fence interface {
	Extend(deadline int64)
	Lose()
}

// endlessTenure is the deadline of a lock that is never broken (StaleTimeout <
// 0).
const endlessTenure = math.MaxInt64

// tenureFor is how long after a confirmation the holder may write without
// confirming again (see above); 0 for a lock that is never broken.
func tenureFor(opt Options, every time.Duration) time.Duration {
	switch {
	case opt.StaleTimeout < 0:
		return 0
	case every > 0:
		return heartbeatGrace(every, opt.StaleTimeout) / 2
	default:
		return opt.StaleTimeout / 2
	}
}

// LostError is what Release and Confirm report when the lock was broken
// while this process held it: which lock, how long ago the holder last
// confirmed it, and who holds it now, so that the user can find the stall.
// errors.Is(err, ErrLockLost) is true.
type LostError struct {
	Path string
	// Confirmed is how long before the error the holder last confirmed the
	// lock (the start of its last tenure).
	Confirmed time.Duration
	// Stale is the StaleTimeout this holder's waiters were assumed to use.
	Stale time.Duration
	// Holder is who holds the lock now; nil if nobody or unreadable.
	Holder *Holder
	// Cause is set when the lock could not be confirmed for another reason
	// than being someone else's (the heartbeat's write or the lstat
	// failed); the lock may still be ours, but nothing proves it.
	Cause error

	now time.Time
}

// Error names the lock, the holder's silence and the new holder.
func (e *LostError) Error() string {
	what := "was broken by another process while this process held it"
	if e.Cause != nil {
		what = fmt.Sprintf("could not be confirmed (%v)", e.Cause)
	}
	s := fmt.Sprintf("lock %s %s: last confirmed %.1fs ago, a stall longer than the holder's tenure "+
		"(stale_lock_timeout %.1fs; a stopped, suspended or hung process)", e.Path, what,
		e.Confirmed.Seconds(), e.Stale.Seconds())
	if e.Cause != nil {
		return s
	}
	if e.Holder == nil {
		return s + "; it is free now"
	}
	now := e.now
	if now.IsZero() {
		now = time.Now()
	}
	return s + fmt.Sprintf("; now held by host %s pid %d for %.1fs", e.Holder.Hostname, e.Holder.PID,
		unixSeconds(now)-e.Holder.Timestamp)
}

// Is makes errors.Is(err, ErrLockLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLockLost }

// Unwrap exposes the cause of a failed confirmation.
func (e *LostError) Unwrap() error { return e.Cause }

// lostError describes the loss of the lock l held (l.mu held), with the
// current holder if it can be read.
func (l *Lock) lostError(cause error) *LostError {
	e := &LostError{Path: l.path, Confirmed: time.Duration(mono.Now() - l.confirmedAt), Stale: l.opt.StaleTimeout,
		Cause: cause, now: l.clock()}
	if cause == nil {
		if h, err := ReadHolder(l.path); err == nil {
			e.Holder = h
		}
	}
	return e
}

// startTenure begins the tenure of an acquisition whose lock file was
// written at t (monoNow before the pwrite that preceded the link). l.mu held.
func (l *Lock) startTenure(t int64) {
	l.confirmedAt, l.lost = t, nil
	l.extendTenure(t)
}

// extendTenure tells the fence that writes need no confirmation until
// t + tenure. l.mu held.
func (l *Lock) extendTenure(t int64) {
	if l.opt.Fence == nil {
		return
	}
	if l.tenure <= 0 {
		l.opt.Fence.Extend(endlessTenure)
		return
	}
	l.opt.Fence.Extend(t + int64(l.tenure))
}

// Confirm proves again that this process holds the lock, and renews its
// tenure: it rewrites the lock file (a heartbeat, so that waiters start
// their count over) and checks by path that the lock is still its ticket.
// The fence calls it when a write finds the tenure over (after a stall);
// the heartbeat does the same every HeartbeatInterval. It returns
// ErrNotHeld if the lock is not held, and a *LostError if it was broken
// or cannot be confirmed.
func (l *Lock) Confirm() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.confirmLocked()
}

// confirmLocked is Confirm with l.mu held.
func (l *Lock) confirmLocked() error {
	c := l.ticket
	if c == nil {
		return ErrNotHeld
	}
	if l.lost != nil {
		return l.lost
	}
	t := mono.Now()
	if err := c.beat(l.clock()); err != nil {
		return l.lostError(fmt.Errorf("rewriting the lock file failed: %w", err))
	}
	switch id, err := lstatID(l.path); {
	case err == nil && id == c.id:
		l.confirmedAt = t
		l.extendTenure(t)
		return nil
	case err == nil || errors.Is(err, os.ErrNotExist):
		l.lost = l.lostError(nil)
		if l.opt.Fence != nil {
			l.opt.Fence.Lose()
		}
		return l.lost
	default:
		return l.lostError(fmt.Errorf("checking the lock file failed: %w", err))
	}
}
