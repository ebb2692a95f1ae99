// Package mono is CLOCK_MONOTONIC in nanoseconds: the clock of the lock
// holder's tenure, which the VFS reads in C.
package mono

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now is CLOCK_MONOTONIC in nanoseconds. It is read once, and followed from
// then on by Go's monotonic clock, which on Linux is the same
// CLOCK_MONOTONIC read through the vDSO: no system call per use.
func Now() int64 { return base + int64(time.Since(baseTime)) }

var base, baseTime = func() (int64, time.Time) {
	var ts unix.Timespec
	t := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail on Linux
	return ts.Nano(), t
}()
