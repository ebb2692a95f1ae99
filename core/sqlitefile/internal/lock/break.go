package lock

import (
	"crypto/sha256"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/shareddir"
)

// Test hooks, called (when set) at the points of breakLock where another
// process can overtake a breaker; tests block in them to force the races.
// Only tests set them, while no Lock that could reach them is running.
var (
	testHookBeforeCheck     func(*Lock) // judged stale; before the lstat re-check
	testHookBeforeBreakLock func(*Lock) // cheap re-check passed; before taking the break lock
	testHookBeforeRename    func(*Lock) // break lock held, re-check passed; before rename
	testHookBeforePutBack   func(*Lock) // moved file is not the judged one; before link back

	// testNoBreakLock makes breakLock skip the break lock, so that tests
	// can show what it prevents (two breakers between re-check and rename)
	// and exercise the put-back that remains as a second line of defence.
	testNoBreakLock bool
)

func callHook(h func(*Lock), l *Lock) {
	if h != nil {
		h(l)
	}
}

// verdict is a waiter's judgement of the current lock file.
type verdict int

const (
	verdictLive  verdict = iota // respect it
	verdictStale                // breakable: unchanged too long (see isStale)
	verdictDead                 // breakable: its process is gone from this host
)

// observe records that a file (the lock, or the break lock) is in state st
// at monotonic time now and returns how long it has been in exactly that
// state as seen here: the time since this Lock first saw st, 0 if st is
// new. The memory survives Acquire calls (one Acquire timing out does not
// restart the count for the next) and is cleared when this Lock takes the
// lock (or removes the break lock).
func (o *observation) observe(st lockState, now time.Time) time.Duration {
	if o.valid && o.state == st {
		return now.Sub(o.since)
	}
	o.valid, o.state, o.since = true, st, now
	return 0
}

// judge decides what to do about holder h, whose record has stayed
// unchanged for the given time as seen here.
func (l *Lock) judge(h *Holder, unchanged time.Duration, wall time.Time) verdict {
	// The original never breaks a lock whose timestamp is NaN or infinite
	// (its age comparison is false), so it is as good as unparseable: no
	// real holder writes one.
	if l.opt.StaleTimeout < 0 || math.IsNaN(h.Timestamp) || math.IsInf(h.Timestamp, 0) {
		return verdictLive
	}
	if l.deadOnThisHost(h) {
		return verdictDead
	}
	if l.isStale(h, unchanged, wall) {
		return verdictStale
	}
	return verdictLive
}

// isStale is the staleness rule (see "Staleness" in docs/lock-protocol.md):
//
//   - a record unchanged for StaleTimeout, as measured on this node's
//     monotonic clock, is stale, whatever its timestamp says;
//   - a record whose timestamp is older than StaleTimeout by our wall clock
//     (the original rule, evaluated in float seconds) is stale at once if
//     it does not promise heartbeats (written by Python, or by Go with
//     heartbeats off), and otherwise only once it has also missed its
//     heartbeats: unchanged here for heartbeatGrace.
//
// So a heartbeating holder is never stale, however skewed the clocks.
func (l *Lock) isStale(h *Holder, unchanged time.Duration, wall time.Time) bool {
	t := l.opt.StaleTimeout
	if unchanged >= t {
		return true
	}
	if !(unixSeconds(wall)-h.Timestamp > t.Seconds()) {
		return false
	}
	if h.every <= 0 {
		return true
	}
	return unchanged >= heartbeatGrace(h.every, t)
}

// heartbeatGrace is how long a waiter must see no heartbeat from a holder
// that promised one every `every` before its old timestamp counts: three
// periods (two missed beats are tolerated: a slow fsync, a stalled node)
// plus a second for the waiter's own polling, at most StaleTimeout.
func heartbeatGrace(every, staleTimeout time.Duration) time.Duration {
	return min(staleTimeout, 3*every+time.Second)
}

// deadOnThisHost is the dead-holder rule (core/liveness): the holder ran
// on this host, under this very kernel (boot_id) and in our pid namespace
// (pid_ns), and its pid is gone or now belongs to a process that started
// at another time (pid reuse). A record without boot_id or pid_ns (Python,
// or a Go holder without /proc) is never judged this way.
func (l *Lock) deadOnThisHost(h *Holder) bool {
	return liveness.GoneFromThisHost(l.opt.Hostname, h.Hostname, h.PID, h.proc)
}

// breakLock (Acquire step 4 in docs/lock-protocol.md) removes the lock file
// if, and only if, it is still the file judged breakable: same inode, same
// size, mtime and content. It reports whether the lock path is now free
// (removed by us or by anyone), i.e. whether retrying at once makes sense.
//
// Breakers are serialized by the break lock (takeBreakLock): of several
// waiters that judged the same abandoned lock, one moves it while the
// others go back to waiting, and each re-checks the lock path only once it
// holds the break lock. Without it, a breaker overtaken between its
// re-check and its rename (another breaker removed the judged lock and a
// newcomer took the free path) moves the newcomer's live lock; the put-back
// then loses the lock path to yet another newcomer often enough that the
// torture run caught two processes inside the lock (see "Breaking a lock"
// in docs/lock-protocol.md).
func (l *Lock) breakLock(judged lockState) bool {
	callHook(testHookBeforeCheck, l)
	// Cheap re-check: most races are lost here, without taking anything.
	cur, err := lstatStamp(l.path)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	if cur != judged.stamp {
		return false
	}
	callHook(testHookBeforeBreakLock, l)
	if !testNoBreakLock {
		if !l.takeBreakLock() {
			return false
		}
		defer l.dropBreakLock()
	}
	if !l.moveAsideIfJudged(l.path, judged) {
		return false
	}
	l.stats.breaks.Add(1)
	return true
}

// moveAsideIfJudged removes the file at path if it is still the one
// judged. Under the break lock only a holder's own release (or an old
// Python worker) can change the lock path, so the re-check is what decides
// for a dead holder; the rename and verification guard the rest. It
// reports whether the path is now free.
//
// The file is first moved aside with rename, which moves exactly one
// directory entry atomically, then checked under its private name, and
// only then unlinked. A moved file that is not the judged one (a fresh lock
// that replaced it, or the judged lock rewritten by a heartbeat) is linked
// back to path. See "Breaking a lock" in docs/lock-protocol.md.
func (l *Lock) moveAsideIfJudged(path string, judged lockState) bool {
	cur, err := lstatStamp(path)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	if cur != judged.stamp {
		return false
	}
	callHook(testHookBeforeRename, l)
	aside := asideName(path, l.opt.Hostname)
	if err := os.Rename(path, aside); err != nil {
		// An NFS RENAME retransmitted after a lost reply fails with ENOENT
		// although the first one moved the file: look before giving up.
		if _, serr := os.Lstat(aside); serr != nil {
			if !errors.Is(err, os.ErrNotExist) {
				l.breakErr = err
			}
			return errors.Is(err, os.ErrNotExist)
		}
	}
	if movedIsJudged(aside, judged) {
		if err := os.Remove(aside); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false
		}
		return true
	}
	callHook(testHookBeforePutBack, l)
	l.putBack(aside, path)
	return false
}

// BreakSuffix is appended to the lock path to name the break lock, which a
// waiter holds while it removes an abandoned lock (see takeBreakLock).
const BreakSuffix = ".break"

// takeBreakLock makes this waiter the only one removing abandoned locks of
// this lock path, by linking its ticket (which already holds its record) to
// <lock>.break, as the lock itself is taken. A break takes a few metadata
// operations, so a break lock that is in the way is normally released a
// moment later: the waiter goes back to waiting, and by its next attempt
// the lock path is free or holds a fresh lock. A break lock whose holder
// died on this host (the dead-holder rule), or which has stayed unchanged
// for breakGrace, is moved aside and removed like an abandoned lock; the
// waiter takes the break lock at a later attempt.
func (l *Lock) takeBreakLock() bool {
	bp := l.path + BreakSuffix
	c, err := l.ownTicket()
	if err != nil {
		l.breakErr = err
		return false
	}
	if c.flushed.IsZero() {
		// Never written (a test calling breakLock directly; Acquire
		// writes before every attempt): the break lock names its holder.
		if err := c.write(l.clock()); err != nil {
			l.breakErr = err
			return false
		}
	}
	// As the lock itself is taken, lost NFS replies included.
	held, err := tryLink(c, bp)
	if err != nil {
		l.breakErr = err
		return false
	}
	if held {
		return true
	}
	h, st, rerr := readHolder(bp)
	if rerr != nil {
		if errors.Is(rerr, os.ErrNotExist) {
			return false // released since: the next attempt may take it
		}
		// Unreadable (another user's, or an empty file of a crashed
		// writer): judge it by how long it has stayed unchanged alone. A
		// name that is no lock at all (a FIFO, a link: planted) is also
		// what a timeout reports, since it is what keeps the lock.
		if shareddir.IsRefused(rerr) {
			l.breakErr = rerr
		}
		ls, lerr := lstatStamp(bp)
		if lerr != nil {
			return false
		}
		st = lockState{stamp: ls}
	}
	unchanged := l.seenBreak.observe(st, time.Now())
	if (h != nil && l.deadOnThisHost(h)) || unchanged >= breakGrace(l.opt.StaleTimeout) {
		if l.moveAsideIfJudged(bp, st) {
			l.seenBreak.valid = false
		}
	}
	return false
}

// dropBreakLock removes the break lock if it is still our ticket's (by
// path, as Release decides).
func (l *Lock) dropBreakLock() {
	bp := l.path + BreakSuffix
	if id, err := lstatID(bp); err == nil && id == l.own.id {
		os.Remove(bp)
	}
}

// breakGrace is how long a break lock must stay unchanged before a waiter
// counts its holder as gone (killed on another host, or stopped): a break
// takes milliseconds, so 10 s is long for a live breaker, and it is never
// more than StaleTimeout, which tests set low.
func breakGrace(staleTimeout time.Duration) time.Duration {
	return min(staleTimeout, 10*time.Second)
}

// asideName is a fresh private name for moving the lock at lockPath aside:
// "<lock>.stale.<host>.<pid>.<random>", shortened if that would exceed the
// 255-byte name limit (a rename to a too-long name would fail and the lock
// could never be broken).
func asideName(lockPath, host string) string {
	dir, base := filepath.Split(lockPath)
	tail := "." + strconv.Itoa(os.Getpid()) + "." + randomName(8)
	suffix := ".stale." + host + tail
	if len(base)+len(suffix) > maxNameLen {
		suffix = ".stale" + tail
		if over := len(base) + len(suffix) - maxNameLen; over > 0 {
			base = base[:len(base)-over]
		}
	}
	return dir + base + suffix
}

// maxNameLen is NAME_MAX on Linux, NFS and Lustre.
const maxNameLen = 255

// movedIsJudged reports whether the file now named aside is the one judged:
// same inode, size and mtime (rename changes only its ctime) and the same
// bytes. A judgement without bytes (sum zero: a break lock that could not
// be read) is verified by the inode's stamp alone.
func movedIsJudged(aside string, judged lockState) bool {
	if judged.sum == ([sha256.Size]byte{}) {
		st, err := lstatStamp(aside)
		return err == nil && st.sameContentAs(judged.stamp)
	}
	_, st, err := readHolder(aside)
	return err == nil && st.sameContentAs(judged.stamp) && st.sum == judged.sum
}

// putBack restores a lock that breakLock moved aside by mistake. link does
// not replace an existing name, so if a newcomer has taken the free lock
// path meanwhile, the newcomer keeps it and the displaced holder will get
// ErrLockLost from Release: this is the one way a Go breaker can still cost
// a live holder its lock (see "Remaining holes" in docs/lock-protocol.md).
func (l *Lock) putBack(aside, path string) {
	l.stats.putBacks.Add(1)
	if err := os.Link(aside, path); err != nil {
		a, aerr := lstatID(aside)
		p, perr := lstatID(path)
		if aerr != nil || perr != nil || a != p { // not an NFS lost reply
			l.stats.displaced.Add(1)
		}
	}
	os.Remove(aside)
}
