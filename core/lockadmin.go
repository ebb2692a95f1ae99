package core

import (
	"errors"
	"math"

	"github.com/tirastore/tirastore/core/lock"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/sqlitefile"
)

// # The lock, for operators
//
// tirastore lock status and lock break look at a database's hard-link lock
// without opening the database (opening takes the lock, which may be the
// very thing that is stuck). See core/lock/inspect.go for what one look
// can prove.

// LockStatus is what one look at a database's lock file says.
type LockStatus struct {
	lock.Status
	// Broken: LockBreak removed the lock.
	Broken bool
}

// PyJSON gives {lock_path, held, holder, unreadable, stale_lock_timeout,
// broken}; holder is null when free, else {hostname, pid, timestamp,
// age_seconds, heartbeat_interval, on_this_host, alive, dead, stale,
// overdue, watch_seconds} (alive null when the holder is on another host;
// watch_seconds: how long lock_break watches an overdue holder).
func (s *LockStatus) PyJSON() any {
	o := pyjson.NewObjectCap(6)
	o.Set("lock_path", s.Path)
	o.Set("held", s.Held)
	if h := s.Holder; h != nil {
		ho := pyjson.NewObjectCap(10)
		ho.Set("hostname", h.Hostname)
		ho.Set("pid", h.PID)
		if math.IsNaN(h.Timestamp) || math.IsInf(h.Timestamp, 0) {
			ho.Set("timestamp", nil)
		} else {
			ho.Set("timestamp", h.Timestamp)
		}
		ho.Set("age_seconds", s.Age.Seconds())
		ho.Set("heartbeat_interval", s.Heartbeat.Seconds())
		ho.Set("on_this_host", s.OnThisHost)
		if s.OnThisHost {
			ho.Set("alive", s.Alive)
		} else {
			ho.Set("alive", nil)
		}
		ho.Set("dead", s.Dead)
		ho.Set("stale", s.Stale)
		ho.Set("overdue", s.Overdue)
		ho.Set("watch_seconds", s.Watch.Seconds())
		o.Set("holder", ho)
	} else {
		o.Set("holder", nil)
	}
	if s.Unreadable != nil {
		o.Set("unreadable", s.Unreadable.Error())
	} else {
		o.Set("unreadable", nil)
	}
	o.Set("stale_lock_timeout", s.StaleTimeout.Seconds())
	o.Set("broken", s.Broken)
	return o
}

// operatorLock is the lock of the database at dbPath as an operator's
// command uses it: opts' stale timeout, this host's name.
func operatorLock(dbPath string, opts Options) (l *lock.Lock, abs string, err error) {
	if err := checkText("db_path", dbPath); err != nil {
		return nil, "", err
	}
	if postgres.IsURL(dbPath) {
		return nil, "", newError(KindValue, "%s is a database on a PostgreSQL server: it has no lock file "+
			"(the server locks rows itself)", postgres.Redact(dbPath))
	}
	stale, wait, err := opts.lockConfig()
	if err != nil {
		return nil, "", err
	}
	if abs, err = resolvePath("database path", dbPath); err != nil {
		return nil, "", err
	}
	if err := sqlitefile.Existing(abs); err != nil { // a lock beside a typo is no lock
		return nil, "", err
	}
	lp, err := lock.PathFor(abs)
	if err != nil {
		return nil, "", wrapError(KindOS, err, "cannot derive the lock path of %s: %v", abs, err)
	}
	return lock.New(lp, lock.Options{StaleTimeout: stale, Timeout: wait}), abs, nil
}

// InspectLock looks at the lock of the database at dbPath once, without
// opening the database or changing anything.
func InspectLock(dbPath string, opts Options) (*LockStatus, error) {
	l, _, err := operatorLock(dbPath, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	st, err := l.Inspect()
	if err != nil {
		return nil, readError(err, "lock", l.Path())
	}
	return &LockStatus{Status: *st}, nil
}

// BreakLock removes the lock of the database at dbPath if its holder is
// dead on this host, stale, or overdue and silent while watched; with
// force, also a holder that may be alive elsewhere, but never a live
// process of this host (lock.Lock.Break). A refusal is a PermissionError
// naming the holder.
func BreakLock(dbPath string, opts Options, force bool) (*LockStatus, error) {
	l, _, err := operatorLock(dbPath, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	st, broken, err := l.Break(force)
	var refused *lock.RefusedError
	switch {
	case errors.As(err, &refused):
		return nil, wrapError(KindPermission, err, "%v", err)
	case err != nil:
		return nil, readError(err, "lock", l.Path())
	}
	return &LockStatus{Status: *st, Broken: broken}, nil
}
