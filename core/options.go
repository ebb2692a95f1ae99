package core

import (
	"context"
	"time"

	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// Options are the constructor parameters of the original TiraStore, plus the
// lock wait limit. The zero value gives the original's defaults.
//
// The two timeouts mean the same from Go, C (tirastore_open's options) and
// Python (TiraStore(...)); nil here is JSON null and Python's None:
//
//	                    nil / None / null   0                negative          positive
//	StaleLockTimeout    600 s               ValueError       ValueError        seconds
//	LockTimeout         600 s               try once         wait forever      seconds
//
// This file is the one place that says what nil, 0 and negative mean; the
// default figures are core/tuning's (StaleLockTimeout, LockTimeout), which
// the lock below core uses as well.
type Options struct {
	// SourceProject is stored on every record this store writes.
	SourceProject string
	// CPUModel is both the value written into a new database and the local
	// value compared with an existing one; "" means detect (cpu.Model).
	CPUModel string
	// SlurmCPUs works like CPUModel for SLURM_CPUS_PER_TASK; "" means detect.
	SlurmCPUs string
	// AllowCPUMismatch keeps writes enabled when the CPU check fails.
	AllowCPUMismatch bool
	// MustExist opens an existing database only: a missing one is an
	// error (FileNotFoundError), not a new empty database and directory,
	// so that an operator's typo in a path never creates one.
	MustExist bool
	// Sharing is who may use a database file this open creates (the zero
	// value is the original's: everyone); PersistentCache chooses it by
	// its rules (configplace.go).
	Sharing storage.Sharing
	// SharingAsked says that Sharing was chosen rather than left at its
	// default (storage.Config.SharingAsked).
	SharingAsked bool
	// StaleLockTimeout is how long a lock may stay unconfirmed before
	// other processes count its holder as dead and break it (nil: 600 s,
	// as in the original; it must be positive).
	StaleLockTimeout *time.Duration
	// LockTimeout bounds the wait for the lock; past it an operation fails
	// with a timeout error naming the holder (nil: 600 s; 0: try once;
	// negative: wait forever).
	LockTimeout *time.Duration
	// Interruptible, when set, wraps every wait for the lock: it returns a
	// context that the host cancels when the user interrupts (Ctrl-C), and
	// a stop function called when the wait ends. The C layer sets it so
	// that a Python caller blocked on a contended lock gets
	// KeyboardInterrupt instead of waiting out the lock timeout.
	Interruptible func(ctx context.Context) (context.Context, func())
	// Tools are the versions of the caller's tools (a compiler, Tiramisu)
	// stored in the run context of every record this store writes
	// (core/runctx; at most runctx.MaxTools).
	Tools map[string]string
	// Match are the fingerprint rules of this store's lookups (match.go):
	// run-context field -> "exact", "any" or "family"; nil: every record
	// matches, as in the original.
	Match map[string]string
}

// Seconds is a convenience for the optional durations of Options.
func Seconds(s float64) *time.Duration {
	d := time.Duration(s * float64(time.Second))
	return &d
}

// DefaultStaleLockTimeout and DefaultLockTimeout are what nil means for
// the two timeouts: the original's figures, written once in core/tuning.
const (
	DefaultStaleLockTimeout = tuning.StaleLockTimeout
	DefaultLockTimeout      = tuning.LockTimeout
)

// LockTimeouts resolves the timeouts into what a backend gets, or says
// which one is out of range: Open's, and an operator's command's that uses
// the lock without opening the database (core/operator).
func (o Options) LockTimeouts() (stale, wait time.Duration, err error) {
	stale, wait = DefaultStaleLockTimeout, DefaultLockTimeout
	if o.StaleLockTimeout != nil {
		if stale = *o.StaleLockTimeout; stale <= 0 {
			return 0, 0, newError(KindValue, "stale_lock_timeout must be a positive number of seconds, got %g", stale.Seconds())
		}
	}
	if o.LockTimeout != nil {
		switch wait = *o.LockTimeout; {
		case wait == 0:
			wait = storage.TryOnce
		case wait < 0:
			wait = storage.WaitForever
		}
	}
	return stale, wait, nil
}
