package operator

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/sqlitefile"
	"github.com/tirastore/tirastore/core/storage"
)

// # The lock, for operators
//
// tirastore lock status and lock break look at a database's hard-link lock
// without opening the database (opening takes the lock, which may be the
// very thing that is stuck). See core/sqlitefile/internal/lock/inspect.go for
// what one look can prove; core/sqlitefile (admin.go) hands the lock over.

// LockStatus is what one look at a database's lock file says.
type LockStatus struct {
	sqlitefile.LockStatus
	// Broken: LockBreak removed the lock.
	Broken bool
	// Advice names the command that removes the lock, when one look proves
	// it abandoned or it is not a lock record (sqlitefile.LockAdvice); ""
	// otherwise.
	Advice string
}

// Abandoned reports what one look proves: the holder is dead on this
// host, stale, overdue, or the file is not a record and has not changed
// for the stale timeout; lock break removes it without force.
func (s *LockStatus) Abandoned() bool { return s.Held && (s.Dead || s.Stale || s.Overdue) }

// statusOf is the LockStatus of st for the database abs, with the advice
// an operator's command gives (naming remove as the plain break).
func statusOf(st *sqlitefile.LockStatus, abs string, broken bool, remove func(sqlitefile.LockCommands) string) *LockStatus {
	ls := &LockStatus{LockStatus: *st, Broken: broken}
	if !broken {
		c := sqlitefile.LockCommandsFor(abs, st.StaleTimeout)
		ls.Advice = sqlitefile.LockAdvice(st, c, remove(c))
	}
	return ls
}

// breakCmd and repairCmd pick the plain break of lock status and of check.
func breakCmd(c sqlitefile.LockCommands) string  { return c.Break }
func repairCmd(c sqlitefile.LockCommands) string { return c.Repair }

// operatorLock is the lock of the database at dbPath as an operator's
// command uses it: opts' stale timeout, this host's name.
func operatorLock(dbPath string, opts core.Options) (l *sqlitefile.Lock, abs string, err error) {
	if err := input.Text("db_path", dbPath); err != nil {
		return nil, "", err
	}
	if storage.IsServerURL(dbPath) {
		return nil, "", apierr.New(apierr.KindValue, "%s is a database on a server: it has no lock file "+
			"(the server locks rows itself)", postgres.Redact(dbPath))
	}
	stale, wait, err := opts.LockTimeouts()
	if err != nil {
		return nil, "", err
	}
	if abs, err = input.Path("database path", dbPath); err != nil {
		return nil, "", err
	}
	if err := sqlitefile.Existing(abs); err != nil { // a lock beside a typo is no lock
		return nil, "", err
	}
	lp, err := sqlitefile.LockPathFor(abs)
	if err != nil {
		return nil, "", apierr.Wrap(apierr.KindOS, err, "cannot derive the lock path of %s: %v", abs, err)
	}
	return sqlitefile.NewLock(lp, stale, wait), abs, nil
}

// lockReadError is the error of an operator's command that could not read
// the lock of the database abs: when this user may not read it, a
// PermissionError saying whose it is and which commands work, run by whom.
func lockReadError(err error, l *sqlitefile.Lock, abs string) error {
	if errors.Is(err, fs.ErrPermission) {
		c := sqlitefile.LockCommandsFor(abs, l.StaleTimeout())
		if a := sqlitefile.LockUnreadable(l.Path(), c); a != "" {
			return apierr.Wrap(apierr.KindPermission, err, "cannot read the lock %s: %s", l.Path(), a)
		}
	}
	return input.ReadError(err, "lock", l.Path())
}

// InspectLock looks at the lock of the database at dbPath once, without
// opening the database or changing anything.
func InspectLock(dbPath string, opts core.Options) (*LockStatus, error) {
	l, abs, err := operatorLock(dbPath, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	st, err := l.Inspect()
	if err != nil {
		return nil, lockReadError(err, l, abs)
	}
	return statusOf(st, abs, false, breakCmd), nil
}

// BreakLock removes the lock of the database at dbPath if its holder is
// dead on this host, stale, or overdue and silent while watched, or it is
// not a record and unchanged for the stale timeout; with force, also a
// holder that may be alive elsewhere, but never a live process of this
// host (the lock's Break). A refusal is a PermissionError naming the holder
// and, when force would break it, the command that forces; a lock this
// user may not remove, a PermissionError saying who may.
func BreakLock(dbPath string, opts core.Options, force bool) (*LockStatus, error) {
	l, abs, err := operatorLock(dbPath, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	st, broken, err := l.Break(force)
	c := sqlitefile.LockCommandsFor(abs, l.StaleTimeout())
	var refused *sqlitefile.LockRefusedError
	switch {
	case errors.As(err, &refused) && refused.Force:
		return nil, apierr.Wrap(apierr.KindPermission, err, "%v (force: `%s`)", err, c.Force)
	case errors.As(err, &refused):
		return nil, apierr.Wrap(apierr.KindPermission, err, "%v", err)
	case err != nil && st != nil:
		// Judged breakable, but the removal failed (a rename refused).
		k, ok := apierr.OSKind(err)
		if !ok {
			k = apierr.KindOS
		}
		msg := fmt.Sprintf("cannot remove the lock %s: %v", l.Path(), err)
		if who := sqlitefile.RemovableBy(l.Path()); who != "" {
			msg += fmt.Sprintf("; `%s`, run by %s, removes it", c.Break, who)
		}
		return nil, apierr.Wrap(k, err, "%s", msg)
	case err != nil:
		return nil, lockReadError(err, l, abs)
	}
	return statusOf(st, abs, broken, breakCmd), nil
}
