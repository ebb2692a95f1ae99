// Package wait holds the waiting helpers that the lock, the claims' wait
// and the PostgreSQL backend's retries share.
package wait

import (
	"context"
	"time"

	"github.com/tirastore/tirastore/core/tuning"
)

// Sleep sleeps d, returning early with ctx.Err() when ctx is done. ctx is
// also polled every tuning.CtxPoll, in case its Done channel is not the
// only signal (a caller that cancels it from a signal handler).
func Sleep(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return ctx.Err()
		}
		t := time.NewTimer(min(left, tuning.CtxPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Deadline is a channel that fires at deadline (nil, never, for the zero
// time) and the function that stops its timer.
func Deadline(deadline time.Time) (<-chan time.Time, func()) {
	if deadline.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(deadline))
	return t.C, func() { t.Stop() }
}
