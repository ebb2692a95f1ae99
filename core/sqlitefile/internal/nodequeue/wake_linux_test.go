//go:build linux

package nodequeue

import (
	"context"
	"errors"
	"os"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/queuechild"
	"github.com/tirastore/tirastore/core/tuning"
)

// lockBehindChild queues a read behind a child holding the queue of a
// fresh lock path and returns what Lock returned, with deadline after
// limit, this process's waits sleeping slice at a time. leaveAfter > 0: the
// child leaves by Unlock (which wakes) after that long; 0: the test kills
// it (the kernel drops its locks and wakes nobody) once this process
// sleeps in the queue.
func lockBehindChild(t *testing.T, slice, limit, leaveAfter time.Duration) error {
	t.Helper()
	old := queueWaitSlice
	queueWaitSlice = slice
	t.Cleanup(func() { queueWaitSlice = old })
	path := newTestPath(t)
	if leaveAfter > 0 {
		t.Setenv(queuechild.EnvProgress, strconv.FormatInt(leaveAfter.Milliseconds(), 10))
	}
	holder := queuechild.Start(t, path)
	g := openGate(path)
	if g == nil || g.f.words == nil {
		t.Skip("no gate with wake words here")
	}
	defer g.Close()
	if leaveAfter == 0 {
		go func() {
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if n, _ := Sleepers(path); n > 0 {
					// Past its try, into its sleep.
					time.Sleep(200 * time.Millisecond)
					holder.Process.Kill()
					return
				}
			}
		}()
	}
	err := g.Lock(context.Background(), time.Now().Add(limit), false, nil, nil)
	if err == nil {
		g.Unlock()
	}
	return err
}

// TestWakeLetsWaiterThrough: a waiter whose sleeps are an hour long gets
// through as soon as the holder unlocks, because the unlock wakes it;
// negative control: a holder killed (the kernel frees its byte, nobody
// wakes) leaves the same waiter asleep until its deadline. With the
// normal slice, a waiter behind a killed holder gets through all the same
// (nothing depends on the words).
func TestWakeLetsWaiterThrough(t *testing.T) {
	if err := lockBehindChild(t, time.Hour, 20*time.Second, 300*time.Millisecond); err != nil {
		t.Fatalf("behind a holder that unlocks: %v, want through (woken)", err)
	}
	if err := lockBehindChild(t, time.Hour, 2*time.Second, 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("negative control, behind a killed holder with hour-long sleeps: %v, want ErrTimeout", err)
	}
	if err := lockBehindChild(t, tuning.QueueWaitSlice, 20*time.Second, 0); err != nil {
		t.Fatalf("behind a killed holder: %v, want through at the end of a slice", err)
	}
}

// TestWakeWordsFault: a gate file shrunk under a process that maps its
// words (by this user: nobody else can write it) makes a word's access
// fault; wake and sleep recover, and a wait then blocks as without words
// and gets through. Negative control: the access does fault.
func TestWakeWordsFault(t *testing.T) {
	path := newTestPath(t)
	holder := queuechild.Start(t, path)
	g := openGate(path)
	if g == nil || g.f.words == nil {
		t.Skip("no gate with wake words here")
	}
	defer g.Close()
	// Shrunk to the counters: the words are past its end.
	if err := os.Truncate(File(path), wakeOffset); err != nil {
		t.Fatal(err)
	}
	faulted := func() (f bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { f = recover() != nil }()
		seq, _ := g.f.words.word(queueLine.slots)
		atomic.AddUint32(seq, 1)
		return false
	}()
	if !faulted {
		t.Fatal("negative control: a word of the shrunk file did not fault")
	}
	g.f.words.wake(queueLine.slots) // must not crash
	if err := g.f.words.sleep(queueLine.slots, time.Millisecond, func() error { return unix.EAGAIN }); err != errNoWords {
		t.Fatalf("sleep on a shrunk file: %v, want errNoWords", err)
	}
	go func() { time.Sleep(100 * time.Millisecond); holder.Process.Kill() }()
	if err := g.Lock(context.Background(), time.Now().Add(20*time.Second), false, nil, nil); err != nil {
		t.Fatalf("a wait without usable words: %v", err)
	}
	g.Unlock()
}
