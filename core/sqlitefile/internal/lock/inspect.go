package lock

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/liveness"
)

// # An operator's view of a lock
//
// Waiters judge a lock over time: a record that stays unchanged for
// StaleTimeout on their own monotonic clock is abandoned, whatever its
// timestamp says. An operator's command (tirastore lock status / break)
// looks once, so it can only use what one look proves: a holder on this
// host whose process is gone is dead; a record whose timestamp is older
// than StaleTimeout by this host's clock, from a holder that promised no
// heartbeat (the original's Python workers), is stale, as the original
// judged it. Anything else is a holder that may be alive: breaking it
// needs force, the operator's word that it is dead.
//
// A lock file that is not a holder record (garbage, a planted file, a
// record whose bytes are not visible yet) proves nothing by its contents,
// and waiters never break it (neither did the original). It may be an old
// Python worker's lock read before its record reached this node, so one
// look proves it abandoned only by its inode: unchanged (mtime and ctime,
// which no user can set back) for longer than the stale timeout by this
// host's clock, the rule the sweep applies to leftover tickets. Such a file
// is Stale, and Break (tirastore lock break, check --repair) removes it
// without force; a younger one needs force.

// Status is what one look at the lock file says.
type Status struct {
	// Path is the lock file; Held is false when there is none.
	Path string
	Held bool
	// Holder is its record (nil when free, or when the file is not a
	// holder record: Unreadable says why).
	Holder     *Holder
	Unreadable error
	// Age is how old the record's timestamp is by this host's clock (a
	// heartbeating holder rewrites it: its age stays small); for a file
	// that is not a record, how long ago it last changed (mtime, ctime).
	Age time.Duration
	// Heartbeat is the rewrite period the holder promised (0: none, a
	// holder of the original's Python library).
	Heartbeat time.Duration
	// OnThisHost: the holder ran under this very kernel in our pid
	// namespace, so Alive is known; elsewhere Alive is false and unknown.
	OnThisHost, Alive bool
	// Dead: its process is gone from this host. Stale: its timestamp is
	// older than the stale timeout and it promised no heartbeat, or it is
	// not a record and has not changed for longer than that. Overdue:
	// it promised heartbeats, and its timestamp is older than the stale
	// timeout: dead or stalled, or its clock is behind ours; Break watches
	// it for the waiters' grace before it believes that.
	Dead, Stale, Overdue bool
	// Watch is how long Break watches an overdue holder before it breaks
	// it (0 when not overdue).
	Watch time.Duration
	// StaleTimeout is the timeout the judgement used.
	StaleTimeout time.Duration
}

// Inspect looks at the lock file once; it never changes anything.
func (l *Lock) Inspect() (*Status, error) {
	st, _, err := l.inspect()
	return st, err
}

func (l *Lock) inspect() (*Status, lockState, error) {
	s := &Status{Path: l.path, StaleTimeout: l.opt.StaleTimeout}
	h, state, err := readHolder(l.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, state, nil
	case err != nil && !isParseError(err):
		return nil, state, err
	}
	s.Held = true
	if err != nil {
		// Judged by its inode alone, as an unreadable break lock is.
		s.Unreadable = err
		var st unix.Stat_t
		if lerr := unix.Lstat(l.path, &st); lerr != nil {
			return nil, state, &os.PathError{Op: "lstat", Path: l.path, Err: lerr}
		}
		now := l.clock()
		s.Age = now.Sub(lastChange(&st))
		s.Stale = l.provablyOld(&st, now)
		return s, lockState{stamp: stampOf(&st)}, nil
	}
	s.Holder, s.Heartbeat = h, h.every
	if !math.IsNaN(h.Timestamp) && !math.IsInf(h.Timestamp, 0) {
		s.Age = time.Duration((unixSeconds(l.clock()) - h.Timestamp) * float64(time.Second))
	}
	s.OnThisHost = liveness.OnThisHost(l.opt.Hostname, h.Hostname, h.proc)
	if s.OnThisHost {
		s.Dead = liveness.Gone(h.PID, h.proc.StartTime)
		s.Alive = !s.Dead
	}
	old := !s.Alive && s.Age > l.opt.StaleTimeout
	s.Stale, s.Overdue = old && h.every <= 0, old && h.every > 0
	if s.Overdue {
		s.Watch = heartbeatGrace(h.every, l.opt.StaleTimeout)
	}
	return s, state, nil
}

// isParseError: the file exists and was read, but is not a holder record.
func isParseError(err error) bool {
	var pe *os.PathError
	return !errors.As(err, &pe) && !errors.Is(err, os.ErrNotExist)
}

// RefusedError is Break's answer when the lock may belong to a live
// holder: it says who, and what would make the break go ahead.
type RefusedError struct {
	Status *Status
	Why    string
	// Force: a break with force would remove it (never a live process of
	// this host, nor a lock that changed under the look).
	Force bool
}

func (e *RefusedError) Error() string { return fmt.Sprintf("%s: not broken: %s", e.Status.Path, e.Why) }

// Break removes the lock if its holder is dead on this host, or stale, or
// overdue and still unchanged after the waiters' grace (see Status), or
// with force if it is held by anyone but a live process on this host,
// which is never broken. The removal is the waiters' own (breakLock): it
// removes the very file judged, under the break lock, so it can never
// remove a lock taken meanwhile. broken says whether it removed one; a
// refusal is a *RefusedError naming the holder. Close the Lock afterwards
// (the break lock's ticket file).
func (l *Lock) Break(force bool) (s *Status, broken bool, err error) {
	s, judged, err := l.inspect()
	if err != nil || !s.Held {
		return s, false, err
	}
	if s.Overdue && !force {
		// The waiters' rule: an overdue heartbeat holder is abandoned once
		// its record stays unchanged for the grace, on our own clock.
		time.Sleep(s.Watch)
		again, state, err := l.inspect()
		if err != nil || !again.Held {
			return again, false, err
		}
		if state != judged {
			return again, false, &RefusedError{again, "the lock changed while it was watched (its holder is alive, or it was taken again)", false}
		}
	}
	switch {
	case s.Alive:
		return s, false, &RefusedError{s, fmt.Sprintf("held by process %d on this host, which is alive", s.Holder.PID), false}
	case s.Dead, s.Stale, s.Overdue, force:
	case s.Holder == nil:
		return s, false, &RefusedError{s, fmt.Sprintf("the file is not a lock record (%v) and changed %s ago, less than "+
			"the stale timeout %s: it may be a lock being written; it is broken once it has stayed unchanged that long, "+
			"or at once with force if no worker can be taking the lock", s.Unreadable, s.Age.Round(time.Second), s.StaleTimeout), true}
	case s.Heartbeat > 0:
		return s, false, &RefusedError{s, fmt.Sprintf("held by %s pid %d, whose heartbeat rewrote it %s ago; "+
			"it may be alive on another host: force breaks it (the holder's writes are fenced)",
			s.Holder.Hostname, s.Holder.PID, s.Age.Round(time.Second)), true}
	default:
		return s, false, &RefusedError{s, fmt.Sprintf("held by %s pid %d for %s, less than the stale timeout %s; "+
			"force breaks it if that process is gone", s.Holder.Hostname, s.Holder.PID,
			s.Age.Round(time.Second), s.StaleTimeout), true}
	}
	if !l.breakLock(judged) {
		if l.breakErr != nil {
			return s, false, l.breakErr
		}
		return s, false, &RefusedError{s, "the lock changed while it was being broken (taken or released meanwhile); look again", false}
	}
	return s, true, nil
}
