package core

import (
	"github.com/tirastore/tirastore/core/apierr"
)

// Kind classifies an error by what the caller should do about it; the table
// of kinds, status codes and Python classes is core/apierr.
type Kind = apierr.Kind

// The error kinds the engine returns (see apierr.Table).
const (
	KindInternal    = apierr.KindInternal
	KindValue       = apierr.KindValue
	KindType        = apierr.KindType
	KindPermission  = apierr.KindPermission
	KindTimeout     = apierr.KindTimeout
	KindOS          = apierr.KindOS
	KindNotFound    = apierr.KindNotFound
	KindClosed      = apierr.KindClosed
	KindDatabase    = apierr.KindDatabase
	KindOperational = apierr.KindOperational
	KindInterrupted = apierr.KindInterrupted
	KindLockLost    = apierr.KindLockLost
	KindNoProgram   = apierr.KindNoProgram
)

// Error is the one error type the engine returns (apierr.Error).
type Error = apierr.Error

var (
	newError  = apierr.New
	wrapError = apierr.Wrap
)

// KindOf reports the kind of any error the engine returned; errors that did
// not come from the engine are internal.
func KindOf(err error) Kind { return apierr.KindOf(err) }

// ErrClosed is returned by every method of a closed Store.
var ErrClosed = apierr.ErrClosed
