package sqlitefile

import (
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/lock"
	"github.com/tirastore/tirastore/core/storage"
)

// # What the layers above see of the file backend's files
//
// The hard-link lock (internal/lock) is this backend's own: the API layer (core), the
// operator's tools (core/operator) and the output check (core/outfile) never
// import them. What they need to know of them is exported here, by name, with
// why: the lock's path and the names of its files (so that no output is written
// over one), one look at the lock and its break (tirastore lock status, lock
// break, check), the advice naming the command that removes a stuck lock, and
// the lock's counters (make bench).

// Lock is a database's hard-link lock as an operator's command handles
// it without opening the database (opening takes the lock, which may be
// the very thing that is stuck): Inspect, Break, Leftovers, Sweep, and
// Acquire and Release around what check --repair does under it.
type Lock = lock.Lock

// LockStatus is what one look at a lock file says (lock status, check).
type LockStatus = lock.Status

// LockCommands are the command lines an advice names for one database:
// the plain break, the forced one, and check's repair.
type LockCommands = lock.Commands

// LockRefusedError is Lock.Break's refusal of a holder that may be alive;
// its Force says whether lock break --force would break it.
type LockRefusedError = lock.RefusedError

// LockCounters are the counters of a store's lock (Store.LockStats), which
// make bench reports.
type LockCounters = storage.LockCounters

// LockBreakSuffix ends the name of the lock's break lock (<lock>.break),
// a file of the lock protocol that no output may replace.
const LockBreakSuffix = lock.BreakSuffix

// LockPathFor is the lock path of the database at db, as the original
// computes it (COMPAT: <db>.with_suffix(".db.lock")): where an operator's
// command finds the lock, and a name the output check refuses.
func LockPathFor(db string) (string, error) { return lock.PathFor(db) }

// NewLock is the lock at lockPath for an operator's command: this host's name, judged with the stale timeout stale and waited
// for up to wait (when check --repair takes it).
func NewLock(lockPath string, stale, wait time.Duration) *Lock {
	return lock.New(lockPath, lock.Options{StaleTimeout: stale, Timeout: wait})
}

// LockCommandsFor are the commands that remove a lock of the database
// db, judged with the stale timeout stale, for the advice of lock status,
// lock break and check.
func LockCommandsFor(db string, stale time.Duration) LockCommands { return lock.CommandsFor(db, stale) }

// LockAdvice says which command removes the lock st describes (remove is
// the plain break of the command that looked), or "" when none should.
func LockAdvice(st *LockStatus, c LockCommands, remove string) string {
	return lock.Advice(st, c, remove)
}

// LockUnreadable says whose the lock file at lockPath is and which of c
// work, run by whom, when this user cannot read it.
func LockUnreadable(lockPath string, c LockCommands) string { return lock.Unreadable(lockPath, c) }

// RemovableBy names who can remove the lock file (or another file of the
// lock's directory) at path when this process cannot; "" when it can. An
// operator's message that cannot remove a lock says who can.
func RemovableBy(path string) string { return lock.RemovableBy(path) }

// ShellQuote is s as one shell word, so that a command an advice names
// (check's, for a stale claim) can be pasted as the lock's advice can.
func ShellQuote(s string) string { return lock.ShellQuote(s) }

// LockNameOf says what the file name base is to the lock at lockPath when
// it is in the lock's directory ("the lock file", "the break lock", "a
// lock moved aside by a breaker", "a lock ticket file"), or "": the output
// check refuses these names.
func LockNameOf(lockPath, base string) string { return lock.NameOf(lockPath, base) }
