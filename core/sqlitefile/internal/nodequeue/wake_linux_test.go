//go:build linux

package nodequeue

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/queuechild"
	"github.com/tirastore/tirastore/core/tuning"
)

// How the holder ahead of a waiter leaves (lockBehindChild).
const (
	leaveByUnlock = iota // Unlock, which wakes the byte's sleepers
	leaveQuietly         // F_UNLCK alone, as a library without wake words
	leaveKilled          // SIGKILL: the kernel drops its locks
)

// envQuietHolder names the lock path whose queue TestGateQuietHolderChild
// holds.
const envQuietHolder = "TIRASTORE_TEST_GATE_QUIET"

// TestGateQuietHolderChild holds the queue of $TIRASTORE_TEST_GATE_QUIET,
// says "held", and at a line on its stdin gives its byte back as a library
// without wake words would (F_UNLCK, nobody woken), says "released" and
// lives on (so that no SIGCHLD reaches the waiter); it does nothing in a
// normal run.
func TestGateQuietHolderChild(t *testing.T) {
	path := os.Getenv(envQuietHolder)
	if path == "" {
		t.Skip("helper for TestWakeLetsWaiterThrough")
	}
	g := openGate(path)
	if g == nil {
		t.Fatal("no gate")
	}
	if err := g.Lock(context.Background(), time.Time{}, false, nil, nil); err != nil {
		t.Fatal(err)
	}
	fmt.Println("held")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	_ = unix.FcntlFlock(g.f.Fd(), unix.F_SETLK, byteLock(unix.F_UNLCK, g.queueSlot))
	fmt.Println("released")
	time.Sleep(time.Hour)
}

// quietHolder starts TestGateQuietHolderChild on lockPath once it holds
// the queue; release makes it give its byte back quietly and returns once
// it has.
func quietHolder(t *testing.T, lockPath string) (release func()) {
	t.Helper()
	c := queuechild.Run(t, "TestGateQuietHolderChild", envQuietHolder+"="+lockPath)
	return func() {
		io.WriteString(c.In, "release\n")
		if !c.Await("released") {
			t.Error("quiet holder: no \"released\"")
		}
	}
}

// lockBehindChild queues a read behind a child holding the queue of a
// fresh lock path, which leaves as how says (once this process sleeps in
// the queue, or after 300 ms for leaveByUnlock), and returns what Lock
// returned, with deadline after limit, this process's sleeps at most slice
// each.
func lockBehindChild(t *testing.T, slice, limit time.Duration, how int) error {
	t.Helper()
	old := queueWaitSlice
	queueWaitSlice = slice
	defer func() { queueWaitSlice = old }()
	path := newTestPath(t)
	var leave func()
	switch how {
	case leaveByUnlock:
		t.Setenv(queuechild.EnvProgress, "300")
		queuechild.Start(t, path)
	case leaveQuietly:
		leave = quietHolder(t, path)
	case leaveKilled:
		holder := queuechild.Start(t, path)
		leave = func() { holder.Process.Kill() }
	}
	g := openGate(path)
	if g == nil || g.f.mapped == nil {
		t.Skip("no gate with wake words here")
	}
	defer g.Close()
	if leave != nil {
		go func() {
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if n, _ := Sleepers(path); n > 0 {
					time.Sleep(200 * time.Millisecond) // past its try, into its sleep
					leave()
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
// through as soon as the holder unlocks, because the unlock wakes it.
// Negative control: a holder that gives its byte back without waking
// anyone (as a library without wake words) leaves the same waiter asleep
// until its deadline. With the normal slice, a waiter gets through behind
// such a holder and behind a killed one (nothing depends on the words).
func TestWakeLetsWaiterThrough(t *testing.T) {
	if err := lockBehindChild(t, time.Hour, 20*time.Second, leaveByUnlock); err != nil {
		t.Fatalf("behind a holder that unlocks: %v, want through (woken)", err)
	}
	// A waiter that had not reached its sleep when the byte came free
	// (a machine so loaded that 200 ms were not enough) gets through,
	// which is not the fault this control is about: up to 3 tries.
	var err error
	for try := 0; try < 3 && !errors.Is(err, ErrTimeout); try++ {
		err = lockBehindChild(t, time.Hour, 2*time.Second, leaveQuietly)
	}
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("negative control, behind a quiet holder with hour-long sleeps: %v, want ErrTimeout", err)
	}
	if err := lockBehindChild(t, tuning.QueueWaitSlice, 20*time.Second, leaveQuietly); err != nil {
		t.Fatalf("behind a quiet holder: %v, want through at the end of a slice", err)
	}
	if err := lockBehindChild(t, tuning.QueueWaitSlice, 20*time.Second, leaveKilled); err != nil {
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
	if g == nil || g.f.mapped == nil {
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
		seq, _ := g.f.mapped.word(queueLine.slots)
		atomic.AddUint32(seq, 1)
		return false
	}()
	if !faulted {
		t.Fatal("negative control: a word of the shrunk file did not fault")
	}
	g.f.mapped.wake(queueLine.slots) // must not crash
	if err := g.f.mapped.sleep(queueLine.slots, time.Millisecond, func() error { return unix.EAGAIN }); err != errNoWords {
		t.Fatalf("sleep on a shrunk file: %v, want errNoWords", err)
	}
	go func() { time.Sleep(100 * time.Millisecond); holder.Process.Kill() }()
	if err := g.Lock(context.Background(), time.Now().Add(20*time.Second), false, nil, nil); err != nil {
		t.Fatalf("a wait without usable words: %v", err)
	}
	g.Unlock()
}

// headSink keeps the negative control's read of the head from being
// optimized away.
var headSink byte

// TestHeadThroughMapping: the head of the gate file read and written
// through the mapping is the file's (what pread and pwrite of an older
// version see, at the same offsets); a ticket still moves the file's
// modification time, which Sweep reads as a sign of use; and a file shrunk
// under the mapping falls back to pread (a short read: no state) instead
// of crashing. Negative control: the shrunk file's head does fault.
func TestHeadThroughMapping(t *testing.T) {
	path := newTestPath(t)
	g := openGate(path)
	if g == nil || g.f.mapped == nil {
		t.Skip("no mapped gate here")
	}
	defer g.Close()
	g.setState(gateState{streak: 7, foreignAt: 42})
	g.NoteProgress()
	var b [48]byte
	if _, err := g.f.File.ReadAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
	if st := (gateState{streak: binary.LittleEndian.Uint64(b[stateOffset:]), foreignAt: int64(binary.LittleEndian.Uint64(b[stateOffset+8:]))}); st != (gateState{7, 42}) {
		t.Fatalf("pread sees state %+v after a mapped write", st)
	}
	if p := binary.LittleEndian.Uint64(b[progressOffset:]); p == 0 || p != g.progress() {
		t.Fatalf("progress word: pread %d, mapping %d", p, g.progress())
	}
	binary.LittleEndian.PutUint64(b[:8], 99)
	if _, err := g.f.File.WriteAt(b[:8], stateOffset); err != nil {
		t.Fatal(err)
	}
	if st := g.state(); st.streak != 99 {
		t.Fatalf("mapped read sees state %+v after a pwrite", st)
	}

	// The first write to a page of the mapping moves the time too: a
	// ticket before the clock is set back has written to every page the
	// second one writes to.
	for _, back := range []time.Duration{0, time.Hour} {
		old := time.Now().Add(-back)
		if err := os.Chtimes(File(path), old, old); err != nil {
			t.Fatal(err)
		}
		if err := g.Lock(context.Background(), time.Now().Add(10*time.Second), false, nil, nil); err != nil {
			t.Fatal(err)
		}
		g.Unlock()
	}
	if fi, err := os.Stat(File(path)); err != nil || fi.ModTime().Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("a ticket left the gate's modification time at %v (%v)", fi.ModTime(), err)
	}

	if err := os.Truncate(File(path), 0); err != nil {
		t.Fatal(err)
	}
	faulted := func() (f bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { f = recover() != nil }()
		headSink = g.f.mapped.mem[stateOffset]
		return false
	}()
	if !faulted {
		t.Fatal("negative control: the head of the shrunk file did not fault")
	}
	if st := g.state(); st != (gateState{}) {
		t.Fatalf("state of a shrunk file: %+v", st)
	}
	g.NoteAcquired() // falls back to pwrite, which grows the file again
}
