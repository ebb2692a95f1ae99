package core

import (
	"errors"
	"fmt"
)

// Kind classifies an error by what the caller should do about it. The C
// layer turns each kind into a status code and the Python layer into the
// exception class the original library raised in the same situation, so a
// kind is part of the public contract: add new ones, never renumber.
type Kind int

// The error kinds. Their names say which Python exception they become.
const (
	KindInternal    Kind = iota // a bug in the engine (RuntimeError)
	KindValue                   // a bad value: invalid schedule, NaN, NUL byte (ValueError)
	KindType                    // an argument of the wrong type (TypeError)
	KindPermission              // writes disabled by the CPU check (PermissionError)
	KindTimeout                 // the lock was not obtained in time (TimeoutError)
	KindOS                      // a filesystem error: EACCES, ENOSPC, EROFS... (OSError)
	KindNotFound                // a file that must exist does not (FileNotFoundError)
	KindClosed                  // the store was closed (ValueError, as for a closed file)
	KindDatabase                // not a database, corrupt, newer schema (sqlite3.DatabaseError)
	KindOperational             // SQLite could not run a statement (sqlite3.OperationalError)
	KindInterrupted             // the caller cancelled a wait (KeyboardInterrupt upstream)
	// KindLockLost: the lock was broken while this call held it (the
	// process stalled past stale_lock_timeout): tirastore.LockLostError, a
	// subclass of sqlite3.OperationalError, which the original raised when
	// a write failed.
	KindLockLost
)

var kindNames = map[Kind]string{
	KindInternal:    "RuntimeError",
	KindValue:       "ValueError",
	KindType:        "TypeError",
	KindPermission:  "PermissionError",
	KindTimeout:     "TimeoutError",
	KindOS:          "OSError",
	KindNotFound:    "FileNotFoundError",
	KindClosed:      "ValueError",
	KindDatabase:    "sqlite3.DatabaseError",
	KindOperational: "sqlite3.OperationalError",
	KindInterrupted: "KeyboardInterrupt",
	KindLockLost:    "LockLostError",
}

// PythonName is the exception class the original library raised for this
// kind; the C layer sends it so the Python layer needs no table of its own.
func (k Kind) PythonName() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return "RuntimeError"
}

// Error is the one error type the engine returns to its callers. Message is
// complete on its own (it names the file, the lock holder or the bad schedule
// segment); Err keeps the underlying cause for errors.Is/As.
type Error struct {
	Kind    Kind
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Message }

// Unwrap exposes the cause (an *os.PathError, a sqlite3.Error, ...).
func (e *Error) Unwrap() error { return e.Err }

func newError(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

func wrapError(kind Kind, err error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), Err: err}
}

// KindOf reports the kind of any error the engine returned; errors that did
// not come from the engine are internal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindInternal
}

// ErrClosed is returned by every method of a closed Store.
var ErrClosed = &Error{Kind: KindClosed, Message: "cannot operate on a closed TiraStore"}
