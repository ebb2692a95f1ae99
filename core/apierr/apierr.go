// Package apierr is the one error table of TiraStore: every way a call can
// fail, with the status code the C ABI returns for it, the macro that names
// that code in include/tirastore.h, and the exception class the Python
// package raises. The engine, the C layer, the header generator and the
// Python mapping all read this table; none keeps a list of its own.
//
// A kind is part of the public contract through its status code: add new
// rows at the end, never renumber a code.
package apierr

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Kind classifies an error by what the caller should do about it.
type Kind int

// The kinds. The engine returns all but Handle, Misuse and Forked, which
// only the C layer can detect.
const (
	KindInternal    Kind = iota // a bug in the engine
	KindValue                   // a bad value: invalid schedule, NaN, NUL byte
	KindType                    // an argument of the wrong type
	KindPermission              // writes disabled by the CPU check, or EACCES/EROFS
	KindTimeout                 // the lock was not obtained in time
	KindOS                      // another filesystem error: ENOSPC, EIO...
	KindNotFound                // a file that must exist does not
	KindClosed                  // the store was closed
	KindDatabase                // not a database, corrupt, newer schema
	KindOperational             // SQLite could not run a statement
	KindInterrupted             // the caller cancelled a wait (Ctrl-C)
	KindHandle                  // C: an unknown or already closed handle
	KindMisuse                  // C: a NULL pointer, invalid JSON, unknown method
	KindForked                  // C: a call in a child of fork()
	// KindLockLost: the lock was broken while this call held it (the
	// process stalled past stale_lock_timeout).
	KindLockLost
	// KindNoProgram: a write by program_hash whose program is not
	// stored (another database at the path, or the program was
	// removed): the caller sends the write again with the source.
	KindNoProgram
)

// Entry is one row of the table.
type Entry struct {
	Kind Kind
	// Status is the C status code (0 is TIRASTORE_OK, never an error).
	Status int
	// CName is the header's macro for Status.
	CName string
	// Python is the exception class the Python package raises: a builtin
	// name, "sqlite3.<name>", or a class of tirastore.errors.
	Python string
	// Doc is the header's comment on the macro.
	Doc string
}

// Table lists every kind, in status order. The Python classes are those the
// original library raised in the same situation.
var Table = []Entry{
	{KindInternal, 1, "TIRASTORE_ERR_INTERNAL", "RuntimeError", "a bug in the library"},
	{KindValue, 2, "TIRASTORE_ERR_VALUE", "ValueError", "a bad value: invalid schedule, NaN, NUL"},
	{KindType, 3, "TIRASTORE_ERR_TYPE", "TypeError", "an argument of the wrong JSON type"},
	{KindPermission, 4, "TIRASTORE_ERR_PERMISSION", "PermissionError", "writes disabled, or EACCES/EROFS"},
	{KindTimeout, 5, "TIRASTORE_ERR_TIMEOUT", "TimeoutError", "the lock was not obtained in time"},
	{KindOS, 6, "TIRASTORE_ERR_OS", "OSError", "another filesystem error, e.g. ENOSPC"},
	{KindNotFound, 7, "TIRASTORE_ERR_NOT_FOUND", "FileNotFoundError", "a file that must exist does not"},
	{KindClosed, 8, "TIRASTORE_ERR_CLOSED", "ValueError", "the store was closed"},
	{KindDatabase, 9, "TIRASTORE_ERR_DATABASE", "sqlite3.DatabaseError", "not a database, corrupt, or newer schema"},
	{KindOperational, 10, "TIRASTORE_ERR_OPERATIONAL", "sqlite3.OperationalError", "SQLite could not run a statement"},
	{KindInterrupted, 11, "TIRASTORE_ERR_INTERRUPTED", "KeyboardInterrupt", "a lock wait was interrupted"},
	{KindHandle, 12, "TIRASTORE_ERR_HANDLE", "ValueError", "unknown or already closed handle"},
	{KindMisuse, 13, "TIRASTORE_ERR_MISUSE", "ValueError", "NULL pointer, invalid JSON, unknown method"},
	{KindForked, 14, "TIRASTORE_ERR_FORKED", "RuntimeError", "called in a child of fork(): this copy's Go runtime is gone"},
	{KindLockLost, 15, "TIRASTORE_ERR_LOCK_LOST", "LockLostError", "the lock was broken while the call held it, after a stall"},
	{KindNoProgram, 16, "TIRASTORE_ERR_NO_PROGRAM", "ProgramNotStoredError", "a write by program_hash whose program is not stored: send the source"},
}

// byKind indexes Table.
var byKind = func() map[Kind]*Entry {
	m := make(map[Kind]*Entry, len(Table))
	for i := range Table {
		m[Table[i].Kind] = &Table[i]
	}
	return m
}()

// entry is k's row; an unknown kind is internal.
func (k Kind) entry() *Entry {
	if e, ok := byKind[k]; ok {
		return e
	}
	return byKind[KindInternal]
}

// Status is the C status code of k.
func (k Kind) Status() int { return k.entry().Status }

// PythonName is the exception class the Python package raises for k.
func (k Kind) PythonName() string { return k.entry().Python }

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

// New is an error of kind with a formatted message.
func New(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Wrap is New keeping err as the cause.
func Wrap(kind Kind, err error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), Err: err}
}

// As finds the *Error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Classified is what a backend's classification of err starts with: nil
// stays nil, and an error a lower layer already classified is its *Error,
// passed on as it is (done); any other error is the backend's to classify.
func Classified(err error) (classified error, done bool) {
	if err == nil {
		return nil, true
	}
	if e, ok := As(err); ok {
		return e, true
	}
	return nil, false
}

// Prefix is err with its message prefixed (e.g. "schedules[3]: "), kind
// and cause kept; errors not from the engine become internal ones.
func Prefix(prefix string, err error) *Error {
	e, ok := As(err)
	if !ok {
		return Wrap(KindInternal, err, "%s%v", prefix, err)
	}
	return &Error{Kind: e.Kind, Message: prefix + e.Message, Err: e.Err}
}

// KindOf reports the kind of any error the engine returned; errors that did
// not come from the engine are internal.
func KindOf(err error) Kind {
	if e, ok := As(err); ok {
		return e.Kind
	}
	return KindInternal
}

// ErrClosed is returned by every method of a closed store.
var ErrClosed = &Error{Kind: KindClosed, Message: "cannot operate on a closed TiraStore"}

// OSKind classifies a filesystem error the way Python's OSError subclasses
// do (FileNotFoundError, PermissionError, OSError); ok is false for errors
// that do not come from the operating system.
func OSKind(err error) (Kind, bool) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return KindNotFound, true
	case errors.Is(err, fs.ErrPermission):
		return KindPermission, true
	}
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	var errno syscall.Errno
	if errors.As(err, &pe) || errors.As(err, &le) || errors.As(err, &se) || errors.As(err, &errno) {
		return KindOS, true
	}
	return KindInternal, false
}
