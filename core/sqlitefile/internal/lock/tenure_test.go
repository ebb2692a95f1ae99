package lock

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/mono"
)

// fakeFence records what a Lock tells its fence.
type fakeFence struct {
	mu        sync.Mutex
	deadlines []int64
	lost      int
}

func (f *fakeFence) Extend(d int64) { f.mu.Lock(); f.deadlines = append(f.deadlines, d); f.mu.Unlock() }
func (f *fakeFence) Lose()          { f.mu.Lock(); f.lost++; f.mu.Unlock() }

func (f *fakeFence) last() (int64, int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.deadlines) == 0 {
		return 0, 0, f.lost
	}
	return f.deadlines[len(f.deadlines)-1], len(f.deadlines), f.lost
}

// TestTenureFollowsConfirmations: an acquisition starts a tenure of
// heartbeatGrace/2, the heartbeat renews it, Release ends it (deadline 0).
func TestTenureFollowsConfirmations(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	f := &fakeFence{}
	opt.StaleTimeout, opt.HeartbeatInterval, opt.Fence = 3*time.Second, 50*time.Millisecond, f
	l := New(path, opt)
	defer l.Close()
	before := mono.Now()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	d, n, _ := f.last()
	want := int64(heartbeatGrace(50*time.Millisecond, 3*time.Second) / 2)
	if n != 1 || d < before+want || d > mono.Now()+want {
		t.Fatalf("after Acquire: %d extensions, deadline %d, want one about %d ns ahead", n, d-before, want)
	}
	time.Sleep(300 * time.Millisecond)
	d2, n2, lost := f.last()
	if n2 < 3 || d2 <= d || lost != 0 {
		t.Errorf("the heartbeat did not renew the tenure: %d extensions, deadline moved %d ns, lost %d", n2, d2-d, lost)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if d3, _, _ := f.last(); d3 != 0 {
		t.Errorf("Release left a tenure until %d", d3)
	}
}

// TestConfirmFindsBrokenLock: once another process has replaced the lock,
// Confirm reports a *LostError naming the new holder, the fence is lost,
// and Release reports the same. Negative control: while the lock is ours,
// Confirm succeeds.
func TestConfirmFindsBrokenLock(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	f := &fakeFence{}
	opt.HeartbeatInterval, opt.Fence = -1, f // no heartbeat: only our calls
	l := New(path, opt)
	defer l.Close()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Confirm(); err != nil {
		t.Fatalf("the lock is ours, Confirm: %v", err)
	}
	// A breaker removes it and another holder takes it.
	os.Remove(path)
	writeLockFile(t, path, `{"hostname": "node9", "pid": 4242, "timestamp": 1.5}`)
	err := l.Confirm()
	var le *LostError
	if !errors.As(err, &le) || !errors.Is(err, ErrLockLost) {
		t.Fatalf("Confirm after the break: %v", err)
	}
	if le.Holder == nil || le.Holder.Hostname != "node9" || !strings.Contains(err.Error(), "now held by host node9 pid 4242") {
		t.Errorf("the error does not name the new holder: %v", err)
	}
	if _, _, lost := f.last(); lost != 1 {
		t.Errorf("fence lost %d times, want 1", lost)
	}
	if err := l.Release(); !errors.As(err, &le) {
		t.Errorf("Release after the break: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Release removed the new holder's lock: %v", err)
	}
}
