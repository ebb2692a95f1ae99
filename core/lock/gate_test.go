package lock

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/internal/proclocks"
	"github.com/tirastore/tirastore/core/nodelocal"
	"github.com/tirastore/tirastore/core/tuning"
)

const envGateChild = "TIRASTORE_TEST_GATE_LOCK"

// TestGateHolderChild holds the gate of the lock path in $TIRASTORE_TEST_GATE_LOCK
// (without the lock itself) until killed; it does nothing in a normal run.
func TestGateHolderChild(t *testing.T) {
	path := os.Getenv(envGateChild)
	if path == "" {
		t.Skip("helper for the gate tests")
	}
	g := openGate(path)
	if g == nil {
		t.Fatal("no gate")
	}
	if err := g.lock(context.Background(), time.Time{}, false, nil, nil); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	if ms, err := strconv.Atoi(os.Getenv(envGateProgress)); err == nil {
		// A live head: it shows progress every 50 ms for ms, then leaves.
		for end := time.Now().Add(time.Duration(ms) * time.Millisecond); time.Now().Before(end); {
			g.noteProgress()
			time.Sleep(50 * time.Millisecond)
		}
		g.unlock()
		return
	}
	time.Sleep(time.Hour)
}

// envGateProgress makes TestGateHolderChild a live head for that many ms.
const envGateProgress = "TIRASTORE_TEST_GATE_PROGRESS_MS"

// TestGateStalledHeadIsPassed: a process at the head of the node queue that
// makes no progress (here: holds its place and sleeps, as a stopped one
// would) is passed after StaleTimeout, like an abandoned lock, and later
// acquisitions skip the queue until its place is gone. A head that shows
// progress is waited for, however long it takes. Negative control: without
// the stall check the waiter stays blocked until its Timeout.
func TestGateStalledHeadIsPassed(t *testing.T) {
	path, opt := newTestLock(t)
	opt.StaleTimeout, opt.Timeout = time.Second, 20*time.Second
	holder := gateHolder(t, path)
	l := New(path, opt)
	defer l.Close()
	start := time.Now()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < opt.StaleTimeout || waited > 4*opt.StaleTimeout {
		t.Errorf("passed the stalled head after %v, want StaleTimeout (%v) plus a small margin", waited, opt.StaleTimeout)
	}
	if n := l.Stats().Bypassed; n != 1 {
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
	gateHolder(t, path2)
	testNoStallCheck = true
	defer func() { testNoStallCheck = false }()
	l2 := New(path2, opt2)
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
	t.Setenv(envGateProgress, "2000")
	gateHolder(t, path)
	l := New(path, opt)
	defer l.Close()
	start := time.Now()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if waited := time.Since(start); waited < 1500*time.Millisecond {
		t.Errorf("went through after %v while the head was alive and in progress", waited)
	}
	if n := l.Stats().Bypassed; n != 0 {
		t.Errorf("Bypassed = %d, want 0: a live head was passed", n)
	}
}

const (
	envGateOrder = "TIRASTORE_TEST_GATE_ORDER"    // "read|write <name> <file>"
	envWriteLull = "TIRASTORE_TEST_WRITE_LULL_MS" // tuning.WriteLull in the child
)

// TestGateOrderChild queues on the gate of $TIRASTORE_TEST_GATE_LOCK as a
// read or a write, appends its name to a file when it reaches the head,
// and leaves; it does nothing in a normal run.
func TestGateOrderChild(t *testing.T) {
	spec := strings.Fields(os.Getenv(envGateOrder))
	if len(spec) != 3 {
		t.Skip("helper for TestGateWritersLane")
	}
	if ms, err := strconv.Atoi(os.Getenv(envWriteLull)); err == nil {
		tuning.WriteLull = time.Duration(ms) * time.Millisecond
	}
	g := openGate(os.Getenv(envGateChild))
	if g == nil {
		t.Fatal("no gate")
	}
	if err := g.lock(context.Background(), time.Time{}, spec[0] == "write", nil, nil); err != nil {
		t.Fatal(err)
	}
	appendOrder(t, spec[2], spec[1])
	time.Sleep(20 * time.Millisecond)
	g.unlock()
}

// appendOrder appends name to the order file, as a process reaches the head.
func appendOrder(t *testing.T, order, name string) {
	t.Helper()
	f, err := os.OpenFile(order, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(name + " "); err != nil {
		t.Fatal(err)
	}
}

// readOrder is the order file's names, space-separated.
func readOrder(t *testing.T, order string) string {
	t.Helper()
	b, err := os.ReadFile(order)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// orderChild starts TestGateOrderChild queueing on lockPath's gate as mode
// ("read" or "write") under name, with extra environment env, and waits
// until the gate file has at least blocked blocked requests (this child's
// and those of the children started before it); with blocked 0, until the
// child holds a byte of the gate (a write at the head of the lane, waiting
// for a lull).
func orderChild(t *testing.T, lockPath, mode, name, order string, blocked int, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGateOrderChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), envGateChild+"="+lockPath, envGateOrder+"="+mode+" "+name+" "+order), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	ready := func() bool {
		if blocked == 0 {
			return holds(t, gatePath(lockPath), cmd.Process.Pid)
		}
		return blockedOn(t, gatePath(lockPath)) >= blocked
	}
	for !ready() {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%s never blocked in the queue", name)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return cmd
}

// blockedOn counts the blocked lock requests on the file that /proc/locks
// lists (lines "N: -> POSIX ..." naming its device and inode).
func blockedOn(t *testing.T, path string) int {
	t.Helper()
	return len(blockedBytes(t, path))
}

// holds reports whether process pid holds a lock on the file.
func holds(t *testing.T, path string, pid int) bool {
	t.Helper()
	ok, err := proclocks.Holds(path, pid)
	if err != nil {
		t.Skip(err)
	}
	return ok
}

// blockedBytes lists the first byte of every blocked lock request on the
// file in /proc/locks.
func blockedBytes(t *testing.T, path string) []string {
	t.Helper()
	starts, err := proclocks.Blocked(path)
	if err != nil {
		t.Skip(err)
	}
	return starts
}

// TestGateFIFO: five reads that arrive while the queue is held come out in
// their order of arrival, because each waits on a byte of its own (its
// predecessor's slot), so that a release wakes exactly the next one. (With
// every waiter blocked on one byte, a release woke them all and the first
// to run went first, which made a lookup's p99 wait many holds long: see
// tests/bench/README.md, "Figures cited by the code".)
func TestGateFIFO(t *testing.T) {
	path, _ := newTestLock(t)
	holder := gateHolder(t, path)
	order := filepath.Join(t.TempDir(), "order")
	var kids []*exec.Cmd
	names := []string{"R1", "R2", "R3", "R4", "R5"}
	for i, name := range names {
		kids = append(kids, orderChild(t, path, "read", name, order, i+1))
	}
	seen := map[string]bool{}
	for _, at := range blockedBytes(t, gatePath(path)) {
		if seen[at] {
			t.Errorf("two waiters blocked on byte %s: a release would wake both", at)
		}
		seen[at] = true
	}
	holder.Process.Kill()
	for _, k := range kids {
		if err := k.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := readOrder(t, order), strings.Join(names, " "); got != want {
		t.Errorf("order %q, want %q", got, want)
	}
}

// TestGateWritersLane: with the queue held, three processes arrive in the
// order write W1, write W2, read R. A write waits in the writers' lane
// until it reaches the head, so R passes W2; with the reads-first lull,
// the write at the head of the lane (W1) also waits for the queue to
// empty, so R passes both: R W1 W2. Without the lull (tuning.WriteLull 0) the
// order is W1 R W2. When the same three arrive as reads, the queue is FIFO:
// W1 W2 R (which also shows that the test sees the order it checks).
func TestGateWritersLane(t *testing.T) {
	for _, tc := range []struct {
		writes bool
		lull   bool
		want   string
	}{{true, true, "R W1 W2"}, {true, false, "W1 R W2"}, {false, false, "W1 W2 R"}} {
		path, _ := newTestLock(t)
		holder := gateHolder(t, path)
		order := filepath.Join(t.TempDir(), "order")
		env := []string{envWriteLull + "=0"}
		if tc.lull {
			env = []string{envWriteLull + "=60000"}
		}
		var kids []*exec.Cmd
		blocked := 0
		for _, name := range []string{"W1", "W2", "R"} {
			mode := "read"
			if tc.writes && name != "R" {
				mode = "write"
			}
			// Each waits (blocked on one byte, or W1 in its lull holding
			// the lane) before the next arrives.
			if name != "W1" || !tc.lull {
				blocked++
			}
			kids = append(kids, orderChild(t, path, mode, name, order, blocked, env...))
		}
		holder.Process.Kill()
		for _, k := range kids {
			if err := k.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		if got := readOrder(t, order); got != tc.want {
			t.Errorf("writes=%v lull=%v: order %q, want %q", tc.writes, tc.lull, got, tc.want)
		}
	}
}

// TestGateLullBounded: a write waits for a lull in the queue at most
// tuning.WriteLull; while another process holds the queue for good, it joins the
// queue after that (blocked behind the holder) and goes through once the
// holder is gone.
func TestGateLullBounded(t *testing.T) {
	path, _ := newTestLock(t)
	holder := gateHolder(t, path)
	order := filepath.Join(t.TempDir(), "order")
	w := orderChild(t, path, "write", "W", order, 0, envWriteLull+"=50")
	deadline := time.Now().Add(30 * time.Second)
	for blockedOn(t, gatePath(path)) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the write never joined the queue: its wait for a lull is not bounded")
		}
		time.Sleep(2 * time.Millisecond)
	}
	holder.Process.Kill()
	if err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := readOrder(t, order); got != "W" {
		t.Errorf("order %q", got)
	}
}

// gateHolder starts a process that holds the gate of lockPath.
func gateHolder(t *testing.T, lockPath string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGateHolderChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envGateChild+"="+lockPath)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "held" {
			return cmd
		}
	}
	t.Fatal("gate holder did not start")
	return nil
}

// TestGateQueuesAndKilledHolderFreesIt: while another process of this node
// is at the head of the queue, Acquire waits there without touching the
// lock file (no link attempt), times out naming that process, and goes
// through as soon as the process is killed (the kernel drops its lock).
func TestGateQueuesAndKilledHolderFreesIt(t *testing.T) {
	path, opt := newTestLock(t)
	holder := gateHolder(t, path)
	opt.Timeout = 200 * time.Millisecond
	l := New(path, opt)
	defer l.Close()
	err := l.Acquire(context.Background())
	var te *TimeoutError
	if !errors.As(err, &te) || te.Queue != holder.Process.Pid {
		t.Fatalf("want a timeout naming queue holder pid %d, got %v", holder.Process.Pid, err)
	}
	if !strings.Contains(err.Error(), "queued behind pid") {
		t.Errorf("message does not say where it waited: %v", err)
	}
	if n := l.Stats().Links; n != 0 {
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
// gate file cannot be opened) Acquire polls the lock file directly.
func TestGateSwitchedOff(t *testing.T) {
	path, opt := newTestLock(t)
	gateHolder(t, path)
	t.Setenv("TIRASTORE_NODE_QUEUE", "0")
	l := New(path, opt)
	defer l.Close()
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("with the queue off, a queue holder must not matter: %v", err)
	}
	l.Release()
	if l.gate != nil {
		t.Error("gate opened although switched off")
	}
}

// TestGateFileMode: the gate file is private to its user (mode 0600) and
// lives in the user's private directory (mode 0700), under the name the
// documented rule gives.
func TestGateFileMode(t *testing.T) {
	path, _ := newTestLock(t)
	g := openGate(path)
	if g == nil {
		t.Skip("no gate directory here")
	}
	defer g.close()
	fi, err := os.Stat(g.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("gate mode %v, want 0600", fi.Mode().Perm())
	}
	if filepath.Dir(g.f.Name()) != gateDir() || g.f.Name() != GateFile(path) {
		t.Errorf("gate at %s, want %s in %s", g.f.Name(), GateFile(path), gateDir())
	}
	sum := sha256.Sum256([]byte(path))
	if want := filepath.Join(nodelocal.Base(), "tirastore-"+strconv.Itoa(os.Geteuid()), "gate-"+hex.EncodeToString(sum[:])[:24]); g.f.Name() != want {
		t.Errorf("gate at %s, want %s (the documented rule)", g.f.Name(), want)
	}
	if fi, err := os.Stat(gateDir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("private directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
}

// TestGateFileRemovedWhenIdle: closing the last Lock removes the gate file
// when nobody is queued, and keeps it while another process is.
func TestGateFileRemovedWhenIdle(t *testing.T) {
	path, opt := newTestLock(t)
	l := New(path, opt)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if _, err := os.Stat(gatePath(path)); err != nil {
		t.Fatalf("gate file missing while the Lock is open: %v", err)
	}
	l.Close()
	if _, err := os.Stat(gatePath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("gate file left after the last Close: %v", err)
	}
	// Another process holds the gate: closing ours must leave the file.
	gateHolder(t, path)
	g := openGate(path)
	g.close()
	if _, err := os.Stat(gatePath(path)); err != nil {
		t.Fatalf("gate file removed while another process holds it: %v", err)
	}
}

// TestGateLaneTurnstile: a write that releases the lock and writes again at
// once queues behind the write waiting in the lane (W1), instead of taking
// the lane back before W1, woken by the release, gets to run.
func TestGateLaneTurnstile(t *testing.T) {
	path, _ := newTestLock(t)
	g := openGate(path)
	if g == nil {
		t.Skip("no gate directory here")
	}
	defer g.close()
	if err := g.lock(context.Background(), time.Time{}, true, nil, nil); err != nil {
		t.Fatal(err)
	}
	order := filepath.Join(t.TempDir(), "order")
	cmd := orderChild(t, path, "write", "W1", order, 1)
	g.unlock()
	if err := g.lock(context.Background(), time.Time{}, true, nil, nil); err != nil {
		t.Fatal(err)
	}
	appendOrder(t, order, "again")
	g.unlock()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := readOrder(t, order); got != "W1 again" {
		t.Errorf("order %q, want %q (the releaser took the lane back first)", got, "W1 again")
	}
}
