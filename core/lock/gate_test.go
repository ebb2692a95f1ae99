package lock

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	if err := g.lock(context.Background(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	time.Sleep(time.Hour)
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

// TestGateFileMode: the gate file is usable by every user of the database.
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
	if fi.Mode().Perm() != 0o666 {
		t.Errorf("gate mode %v, want 0666", fi.Mode().Perm())
	}
	if filepath.Dir(g.f.Name()) != gateDir() {
		t.Errorf("gate in %s", filepath.Dir(g.f.Name()))
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
