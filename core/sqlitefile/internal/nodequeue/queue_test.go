package nodequeue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/proclocks"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/queuechild"
	"github.com/tirastore/tirastore/core/tuning"
)

// newTestPath returns a lock path in a fresh directory (nothing is created
// there: the queue's file is in the private directory, and removed when
// the test ends).
func newTestPath(t *testing.T) string {
	t.Helper()
	path := filepath.Join(queuechild.PhysTempDir(t), "cache.db.lock")
	t.Cleanup(func() { os.Remove(File(path)) })
	return path
}

// openGate is Open for the tests: nil when there is no queue to use.
func openGate(lockPath string) *Queue {
	q, err := Open(lockPath)
	if err != nil {
		return nil
	}
	return q
}

// envGateChild names the lock path of the queue tests' children.
const envGateChild = queuechild.EnvLockPath

// TestGateHolderChild holds the gate of a lock path (without the lock
// itself) for the queue tests (internal/queuechild); it does nothing
// in a normal run.
func TestGateHolderChild(t *testing.T) {
	t.Parallel()
	queuechild.Hold(t, func(path string) (progress, leave func()) {
		g := openGate(path)
		if g == nil {
			t.Fatal("no gate")
		}
		if err := g.Lock(context.Background(), time.Time{}, false, nil, nil); err != nil {
			t.Fatal(err)
		}
		return g.NoteProgress, g.Unlock
	})
}

const (
	envGateOrder = "TIRASTORE_TEST_GATE_ORDER"    // "read|write <name> <file>"
	envWriteLull = "TIRASTORE_TEST_WRITE_LULL_MS" // tuning.WriteLull in the child
)

// TestGateOrderChild queues on the gate of $TIRASTORE_TEST_GATE_LOCK as a
// read or a write, appends its name to a file when it reaches the head,
// and leaves; it does nothing in a normal run.
func TestGateOrderChild(t *testing.T) {
	t.Parallel()
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
	if spec[0] == "follower" {
		// A write waiting in the lane, as another process's would, on a
		// slot byte that no ticket of the test reaches; held until killed.
		if _, err := g.HoldLaneSlot(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
	}
	if err := g.Lock(context.Background(), time.Time{}, spec[0] == "write", nil, nil); err != nil {
		t.Fatal(err)
	}
	appendOrder(t, spec[2], spec[1])
	time.Sleep(20 * time.Millisecond)
	g.Unlock()
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
			return holds(t, File(lockPath), cmd.Process.Pid)
		}
		return blockedOn(t, lockPath) >= blocked
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

// blockedOn counts the waits asleep in the queue of lockPath (Sleepers).
func blockedOn(t *testing.T, lockPath string) int {
	t.Helper()
	n, err := Sleepers(lockPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Skip(err)
	}
	return n
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

// TestGateFIFO: five reads that arrive while the queue is held come out in
// their order of arrival, because each waits on a byte of its own (its
// predecessor's slot), so that a release wakes exactly the next one. (With
// every waiter blocked on one byte, a release woke them all and the first
// to run went first, which made a lookup's p99 wait many holds long.)
func TestGateFIFO(t *testing.T) {
	t.Parallel()
	path := newTestPath(t)
	holder := queuechild.Start(t, path)
	order := filepath.Join(t.TempDir(), "order")
	var kids []*exec.Cmd
	names := []string{"R1", "R2", "R3", "R4", "R5"}
	for i, name := range names {
		kids = append(kids, orderChild(t, path, "read", name, order, i+1))
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
// order write W1, write W2, read R, while another write (a follower,
// holding a byte of the lane) waits in the lane. A write waits in the
// writers' lane until it reaches the head, so R passes W2; with the
// reads-first lull, the write at the head of the lane (W1), having writes
// behind it, also waits for the queue to empty, so R passes both: R W1 W2.
// Without the lull (tuning.WriteLull 0) the order is W1 R W2. A write alone
// in the lane (no follower) does not wait for a lull: W1 R W2 too. When the
// same three arrive as reads, the queue is FIFO: W1 W2 R (which also shows
// that the test sees the order it checks).
func TestGateWritersLane(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		writes, lull, follower bool
		want                   string
	}{
		{true, true, true, "R W1 W2"},
		{true, false, true, "W1 R W2"},
		{true, true, false, "W1 R W2"},
		{false, false, false, "W1 W2 R"},
	} {
		path := newTestPath(t)
		holder := queuechild.Start(t, path)
		order := filepath.Join(t.TempDir(), "order")
		env := []string{envWriteLull + "=0"}
		if tc.lull {
			env = []string{envWriteLull + "=60000"}
		}
		if tc.follower {
			f := orderChild(t, path, "follower", "F", order, 0)
			t.Cleanup(func() { f.Process.Kill(); f.Wait() })
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
			if name != "W1" || !(tc.lull && tc.follower) {
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
			t.Errorf("writes=%v lull=%v follower=%v: order %q, want %q", tc.writes, tc.lull, tc.follower, got, tc.want)
		}
	}
}

// TestGateLullBounded: a write waits for a lull in the queue at most
// tuning.WriteLull; while another process holds the queue for good, it joins
// the queue after that (blocked behind the holder) and goes through once the
// holder is gone. Another write waits in the lane (a follower), so that W
// waits for a lull at all.
func TestGateLullBounded(t *testing.T) {
	t.Parallel()
	path := newTestPath(t)
	holder := queuechild.Start(t, path)
	order := filepath.Join(t.TempDir(), "order")
	f := orderChild(t, path, "follower", "F", order, 0)
	t.Cleanup(func() { f.Process.Kill(); f.Wait() })
	w := orderChild(t, path, "write", "W", order, 0, envWriteLull+"=50")
	deadline := time.Now().Add(30 * time.Second)
	for blockedOn(t, path) < 1 {
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

// TestGateSwitchedOff: with TIRASTORE_NODE_QUEUE=0 Open gives no queue
// (nil, nil: the Lock then polls the lock file directly) and creates no
// gate file.
func TestGateSwitchedOff(t *testing.T) {
	path := newTestPath(t)
	t.Setenv("TIRASTORE_NODE_QUEUE", "0")
	q, err := Open(path)
	if q != nil || err != nil {
		t.Fatalf("Open with the queue off: %v, %v; want nil, nil", q, err)
	}
	if _, err := os.Stat(File(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gate file created although switched off: %v", err)
	}
	q.Close() // a nil Queue is closed already
	if q.WritesWaiting() {
		t.Error("a nil Queue reports writes waiting")
	}
}

// TestGateFileMode: the gate file is private to its user (mode 0600) and
// lives in the user's private directory (mode 0700), under the name the
// documented rule gives.
func TestGateFileMode(t *testing.T) {
	t.Parallel()
	path := newTestPath(t)
	g := openGate(path)
	if g == nil {
		t.Skip("no gate directory here")
	}
	defer g.Close()
	fi, err := os.Stat(g.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("gate mode %v, want 0600", fi.Mode().Perm())
	}
	if filepath.Dir(g.f.Name()) != gateDir() || g.f.Name() != File(path) {
		t.Errorf("gate at %s, want %s in %s", g.f.Name(), File(path), gateDir())
	}
	sum := sha256.Sum256([]byte(path))
	if want := filepath.Join(nodelocal.Base(), "tirastore-"+strconv.Itoa(os.Geteuid()), "gate-"+hex.EncodeToString(sum[:])[:24]); g.f.Name() != want {
		t.Errorf("gate at %s, want %s (the documented rule)", g.f.Name(), want)
	}
	if fi, err := os.Stat(gateDir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("private directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
}

// TestGateFileRemovedWhenIdle: closing the last Queue removes the gate file
// when nobody is queued, and keeps it while another process is.
func TestGateFileRemovedWhenIdle(t *testing.T) {
	t.Parallel()
	path := newTestPath(t)
	g := openGate(path)
	if g == nil {
		t.Skip("no gate directory here")
	}
	if err := g.Lock(context.Background(), time.Time{}, false, nil, nil); err != nil {
		t.Fatal(err)
	}
	g.Unlock()
	if _, err := os.Stat(File(path)); err != nil {
		t.Fatalf("gate file missing while the Queue is open: %v", err)
	}
	g.Close()
	if _, err := os.Stat(File(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("gate file left after the last Close: %v", err)
	}
	// Another process holds the gate: closing ours must leave the file.
	queuechild.Start(t, path)
	g = openGate(path)
	g.Close()
	if _, err := os.Stat(File(path)); err != nil {
		t.Fatalf("gate file removed while another process holds it: %v", err)
	}
}

// TestGateLaneTurnstile: a write that releases the lock and writes again at
// once queues behind the write waiting in the lane (W1), instead of taking
// the lane back before W1, woken by the release, gets to run.
func TestGateLaneTurnstile(t *testing.T) {
	t.Parallel()
	path := newTestPath(t)
	g := openGate(path)
	if g == nil {
		t.Skip("no gate directory here")
	}
	defer g.Close()
	if err := g.Lock(context.Background(), time.Time{}, true, nil, nil); err != nil {
		t.Fatal(err)
	}
	order := filepath.Join(t.TempDir(), "order")
	cmd := orderChild(t, path, "write", "W1", order, 1)
	g.Unlock()
	if err := g.Lock(context.Background(), time.Time{}, true, nil, nil); err != nil {
		t.Fatal(err)
	}
	appendOrder(t, order, "again")
	g.Unlock()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := readOrder(t, order); got != "W1 again" {
		t.Errorf("order %q, want %q (the releaser took the lane back first)", got, "W1 again")
	}
}
