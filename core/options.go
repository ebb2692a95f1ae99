package core

import (
	"context"
	"time"
)

// Options are the constructor parameters of the original TiraStore, plus the
// lock wait limit. The zero value gives the original's defaults.
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
	// StaleLockTimeout is the age after which another holder's lock is
	// considered abandoned and broken (default 600 s, as in the original).
	StaleLockTimeout time.Duration
	// LockTimeout bounds the wait for the lock; past it an operation fails
	// with a timeout error naming the holder. 0 means 600 s; negative waits
	// forever.
	LockTimeout time.Duration
	// Interruptible, when set, wraps every wait for the lock: it returns a
	// context that the host cancels when the user interrupts (Ctrl-C), and
	// a stop function called when the wait ends. The C layer sets it so
	// that a Python caller blocked on a contended lock gets
	// KeyboardInterrupt instead of waiting out the lock timeout.
	Interruptible func(ctx context.Context) (context.Context, func())
}

// DefaultStaleLockTimeout and DefaultLockTimeout are the original's figures:
// it broke locks after 10 minutes and gave up after about as long.
const (
	DefaultStaleLockTimeout = 600 * time.Second
	DefaultLockTimeout      = 600 * time.Second
)

func (o Options) withDefaults() Options {
	if o.StaleLockTimeout <= 0 {
		o.StaleLockTimeout = DefaultStaleLockTimeout
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	return o
}
