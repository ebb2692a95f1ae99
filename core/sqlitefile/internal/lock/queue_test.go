package lock

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodequeue"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/queuechild"
)

// The Lock with a node queue (Options.Queue). The queue itself (its order,
// its lanes, its file) is tested in internal/nodequeue.

// newLock is New with a node queue of its own on the lock path, as the
// store gives its Lock (core/sqlitefile): none when the queue is switched
// off or cannot be used. The queue is closed when the test ends, after the
// Lock's Close.
func newLock(t testing.TB, path string, opt Options) *Lock {
	t.Helper()
	q, _ := nodequeue.Open(path)
	if q != nil {
		t.Cleanup(q.Close)
	}
	opt.Queue = q
	return New(path, opt)
}

// TestGateHolderChild holds the node queue of a lock path (without the
// lock itself) for the queue tests (internal/queuechild); it does
// nothing in a normal run.
func TestGateHolderChild(t *testing.T) {
	t.Parallel()
	queuechild.Hold(t, func(path string) (progress, leave func()) {
		q, err := nodequeue.Open(path)
		if q == nil {
			t.Fatalf("no gate: %v", err)
		}
		if err := q.Lock(context.Background(), time.Time{}, false, nil, nil); err != nil {
			t.Fatal(err)
		}
		return q.NoteProgress, q.Unlock
	})
}

// TestGateStalledHeadIsPassed: a process at the head of the node queue that
// makes no progress (here: holds its place and sleeps, as a stopped one
// would) is passed after StaleTimeout, like an abandoned lock, and later
// acquisitions skip the queue until its place is gone. A head that shows
// progress is waited for, however long it takes. Negative control: without
// the stall check the waiter stays blocked until its Timeout.
func TestGateStalledHeadIsPassed(t *testing.T) {
	path, opt := newTestLock(t)
	opt.StaleTimeout, opt.Timeout = time.Second, 20*time.Second
	holder := queuechild.Start(t, path)
	l := newLock(t, path, opt)
	defer l.Close()
	start := time.Now()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < opt.StaleTimeout || waited > 4*opt.StaleTimeout {
		t.Errorf("passed the stalled head after %v, want StaleTimeout (%v) plus a small margin", waited, opt.StaleTimeout)
	}
	if n := l.Counters().Bypassed; n != 1 {
		t.Errorf("Bypassed = %d, want 1", n)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > opt.StaleTimeout/2 {
		t.Errorf("the second acquisition waited %v behind the same stalled head", waited)
	}
	l.Release()
	holder.Process.Kill()
	holder.Wait()

	// Negative control: no stall check.
	path2, opt2 := newTestLock(t)
	opt2.StaleTimeout, opt2.Timeout = time.Second, 3*time.Second
	queuechild.Start(t, path2)
	testNoStallCheck = true
	defer func() { testNoStallCheck = false }()
	l2 := newLock(t, path2, opt2)
	defer l2.Close()
	var te *TimeoutError
	if err := l2.Acquire(context.Background()); !errors.As(err, &te) || te.Queue == 0 {
		t.Fatalf("without the stall check the waiter should time out in the queue, got %v", err)
	}
}

// TestGateLiveHeadIsWaitedFor: a head that shows progress is not passed,
// even when it keeps its place for several StaleTimeouts.
func TestGateLiveHeadIsWaitedFor(t *testing.T) {
	path, opt := newTestLock(t)
	opt.StaleTimeout, opt.Timeout = 500*time.Millisecond, 20*time.Second
	t.Setenv(queuechild.EnvProgress, "2000")
	queuechild.Start(t, path)
	l := newLock(t, path, opt)
	defer l.Close()
	start := time.Now()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if waited := time.Since(start); waited < 1500*time.Millisecond {
		t.Errorf("went through after %v while the head was alive and in progress", waited)
	}
	if n := l.Counters().Bypassed; n != 0 {
		t.Errorf("Bypassed = %d, want 0: a live head was passed", n)
	}
}

// TestGateQueuesAndKilledHolderFreesIt: while another process of this node
// is at the head of the queue, Acquire waits there without touching the
// lock file (no link attempt), times out naming that process, and goes
// through as soon as the process is killed (the kernel drops its lock).
func TestGateQueuesAndKilledHolderFreesIt(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	holder := queuechild.Start(t, path)
	opt.Timeout = 200 * time.Millisecond
	l := newLock(t, path, opt)
	defer l.Close()
	err := l.Acquire(context.Background())
	var te *TimeoutError
	if !errors.As(err, &te) || te.Queue != holder.Process.Pid {
		t.Fatalf("want a timeout naming queue holder pid %d, got %v", holder.Process.Pid, err)
	}
	if !strings.Contains(err.Error(), "queued behind pid") {
		t.Errorf("message does not say where it waited: %v", err)
	}
	if n := l.Counters().Links; n != 0 {
		t.Errorf("%d link attempts while queued, want 0 (the queue must keep waiters off the filesystem)", n)
	}
	// Cancellation while queued.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	l.opt.Timeout = time.Minute
	if err := l.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel while queued: %v", err)
	}
	// The holder dies: the next Acquire gets through at once.
	done := make(chan error, 1)
	go func() { done <- l.Acquire(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	holder.Process.Kill()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a killed queue holder still blocks the queue")
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestGateSwitchedOff: with TIRASTORE_NODE_QUEUE=0 (and, equally, when the
// gate file cannot be opened) the store gives its Lock no queue
// (nodequeue.Open: nil), and Acquire polls the lock file directly.
func TestGateSwitchedOff(t *testing.T) {
	path, opt := newTestLock(t)
	queuechild.Start(t, path)
	t.Setenv("TIRASTORE_NODE_QUEUE", "0")
	l := newLock(t, path, opt)
	defer l.Close()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("with the queue off, a queue holder must not matter: %v", err)
	}
	l.Release()
	if l.queue != nil {
		t.Error("queue opened although switched off")
	}
}

// TestPlantedGateNotUsed: a symlink at the gate's name (a file of ours
// elsewhere behind it) is reported as a Problem, not opened: the Lock
// polls without the queue, and the file behind the link is unchanged.
func TestPlantedGateNotUsed(t *testing.T) {
	// A node directory of its own (so not parallel): in a shared one, the
	// last store of another process (another package's tests, or this
	// package's contenders) removes the empty private directory between
	// Private() and the planting.
	t.Setenv(nodelocal.EnvBase, t.TempDir())
	path, opt := newTestLock(t)
	if _, err := nodelocal.Private(); err != nil {
		t.Skip(err)
	}
	canary := queuechild.PhysTempDir(t) + "/canary"
	if err := os.WriteFile(canary, []byte("canary canary canary canary canary canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(canary, nodequeue.File(path)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(nodequeue.File(path)) })
	var p *nodelocal.Problem
	q, err := nodequeue.Open(path)
	if !errors.As(err, &p) || q != nil {
		t.Fatalf("nodequeue.Open on a symlink: %v, %v; want a Problem", q, err)
	}
	opt.Queue = q
	l := New(path, opt)
	defer l.Close()
	for i := 0; i < 3; i++ {
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		l.Release()
	}
	if l.queue != nil {
		t.Error("the Lock uses a planted gate")
	}
	if b, _ := os.ReadFile(canary); string(b) != "canary canary canary canary canary canary" {
		t.Errorf("the file behind the symlink changed: %q", b)
	}
	if fi, _ := os.Stat(canary); fi.Mode().Perm() != 0o644 {
		t.Errorf("the file behind the symlink has mode %v", fi.Mode().Perm())
	}
}
