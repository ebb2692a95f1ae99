package lock

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/shareddir"
	"github.com/tirastore/tirastore/core/tuning"
)

// # Advice
//
// An operator meets a stuck lock in three places: tirastore lock status,
// tirastore check, and the error of a waiter that timed out. Each says
// which command removes it, and that command must then do so
// (tests/python/test_lock_advice.py runs every one): the advice follows
// the judgement of inspect.go and Break, so it lives beside them.
//
//   - a dead holder, a stale one, or a file that is not a record and has
//     not changed for the stale timeout: lock break (or check --repair)
//     removes it;
//   - an overdue heartbeat holder: the same, after watching it;
//   - a file that is not a record and changed recently: it may be a lock
//     being written; lock break removes it once it has stayed unchanged
//     for the stale timeout, lock break --force at once;
//   - a holder that may be alive: no advice (waiting is right; lock
//     break's refusal says what --force would do).
//
// When this user cannot remove the file (another user's lock in a sticky
// directory, a directory it cannot write), the advice says who can.

// Commands are the command lines an advice names for one database: the
// status, the plain break, the forced one, and check's repair.
type Commands struct {
	Status, Break, Force, Repair string
}

// CommandsFor are the commands for the database dbPath, judged with the
// stale timeout stale: a timeout other than the default is repeated in
// them, so that the command judges the lock as the advice did.
func CommandsFor(dbPath string, stale time.Duration) Commands {
	opt := ""
	if stale != tuning.StaleLockTimeout {
		opt = " --stale-lock-timeout " + strconv.FormatFloat(stale.Seconds(), 'g', -1, 64)
	}
	db := " " + ShellQuote(dbPath)
	return Commands{
		Status: "tirastore lock status" + opt + db,
		Break:  "tirastore lock break" + opt + db,
		Force:  "tirastore lock break --force" + opt + db,
		Repair: "tirastore check --repair" + opt + db,
	}
}

// Advice says which command removes the lock s describes, or "" when none
// should (free, a live holder, a holder that may be alive). remove is the
// command that breaks what one look proves abandoned (Commands.Break for
// lock status, Commands.Repair for check).
func Advice(s *Status, c Commands, remove string) string {
	if s == nil || !s.Held || s.Alive {
		return ""
	}
	var a string
	switch {
	case s.Dead || s.Stale:
		a = fmt.Sprintf("`%s` removes it", remove)
	case s.Overdue:
		a = fmt.Sprintf("`%s` removes it if it stays unchanged while watched for %s", remove, s.Watch)
	case s.Holder == nil:
		a = fmt.Sprintf("it is not a lock record and changed %s ago, less than the stale timeout %s (it may be a lock "+
			"being written): `%s` removes it once it has stayed unchanged that long, `%s` at once if no worker can be "+
			"taking the lock", s.Age.Round(time.Second), s.StaleTimeout, c.Break, c.Force)
	default:
		return ""
	}
	if who := RemovableBy(s.Path); who != "" {
		a += " (run by " + who + ")"
	}
	return a
}

// Unreadable says, of a lock file at path that this user cannot read
// (mode 0000, another user's 0600), whose it is and which commands work,
// run by whom: reading it is what every judgement of the lock starts with,
// so both must be run by a user who can. "" when path cannot be stat'ed.
func Unreadable(path string, c Commands) string {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return ""
	}
	who := "its owner " + identity.Owner(st.Uid) + " (after a chmod) or root"
	if st.Uid == 0 {
		who = "root"
	}
	return fmt.Sprintf("the lock file is owned by %s, mode %04o, and this user cannot read it: `%s`, run by %s, "+
		"shows its holder, and `%s`, run by them, removes it if its holder is gone",
		identity.Owner(st.Uid), st.Mode&0o7777, c.Status, who, c.Break)
}

// RemovableBy names who can remove the file at path when this process
// cannot (remove means rename it aside, as a break does): its directory
// is not writable to us, or is sticky and neither the file nor the
// directory is ours. It is "" when we can (root always can).
func RemovableBy(path string) string {
	if os.Geteuid() == 0 {
		return ""
	}
	dir := filepath.Dir(path)
	var fst, dst unix.Stat_t
	if unix.Lstat(path, &fst) != nil || unix.Stat(dir, &dst) != nil {
		return ""
	}
	if shareddir.MayCreateIn(dir) != nil {
		return fmt.Sprintf("a user who may write the directory %s (owned by %s, mode %04o), or root",
			dir, identity.Owner(dst.Uid), dst.Mode&0o7777)
	}
	me := uint32(os.Geteuid())
	if dst.Mode&unix.S_ISVTX != 0 && fst.Uid != me && dst.Uid != me {
		owner := "its owner " + identity.Owner(fst.Uid) + " or root"
		if fst.Uid == 0 {
			owner = "root"
		}
		return fmt.Sprintf("%s: in the sticky directory %s only they can remove it", owner, dir)
	}
	return ""
}

// shellSafe is what a shell reads as one plain word.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// ShellQuote is s as one shell word, so that an advice can be pasted.
func ShellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}
