package core

import (
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/storage"
)

// The table in options.go: what each value of the two timeouts becomes.
func TestOptionsTimeoutTable(t *testing.T) {
	t.Parallel()
	d := func(s float64) *time.Duration { return Seconds(s) }
	for _, c := range []struct {
		name        string
		stale, wait *time.Duration
		wantStale   time.Duration
		wantWait    time.Duration
		wantErr     bool
	}{
		{"defaults", nil, nil, DefaultStaleLockTimeout, DefaultLockTimeout, false},
		{"seconds", d(5), d(0.5), 5 * time.Second, 500 * time.Millisecond, false},
		{"try once", nil, d(0), DefaultStaleLockTimeout, storage.TryOnce, false},
		{"forever", nil, d(-1), DefaultStaleLockTimeout, storage.WaitForever, false},
		{"stale zero", d(0), nil, 0, 0, true},
		{"stale negative", d(-3), nil, 0, 0, true},
	} {
		stale, wait, err := Options{StaleLockTimeout: c.stale, LockTimeout: c.wait}.LockTimeouts()
		if (err != nil) != c.wantErr || (err != nil && KindOf(err) != KindValue) {
			t.Errorf("%s: err %v, want error %v of kind ValueError", c.name, err, c.wantErr)
			continue
		}
		if err == nil && (stale != c.wantStale || wait != c.wantWait) {
			t.Errorf("%s: stale %v wait %v, want %v and %v", c.name, stale, wait, c.wantStale, c.wantWait)
		}
	}
}

// lock_timeout 0 tries once: with the lock held elsewhere, an operation
// fails with a timeout at once instead of waiting the default 600 s.
func TestLockTimeoutZeroTriesOnce(t *testing.T) {
	t.Parallel()
	holder := openTemp(t, Options{CPUModel: "X"})
	st, err := Open(ctx, holder.Path(), Options{CPUModel: "X", LockTimeout: Seconds(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Hold the lock through the other store for the duration of the call.
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_ = holder.Backend().View(ctx, "hold", func(storage.Reader) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	defer close(release)
	start := time.Now()
	_, err = st.Count(ctx)
	if KindOf(err) != KindTimeout {
		t.Fatalf("count with the lock held: %v, want a timeout", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("try-once waited %v", el)
	}
}
