package mono

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNowIsClockMonotonic: the deadlines Go computes are on the clock the
// VFS reads in C (CLOCK_MONOTONIC).
func TestNowIsClockMonotonic(t *testing.T) {
	time.Sleep(20 * time.Millisecond)
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	if d := Now() - ts.Nano(); d < 0 || d > int64(time.Millisecond) {
		t.Errorf("Now is %v off CLOCK_MONOTONIC", time.Duration(d))
	}
}
