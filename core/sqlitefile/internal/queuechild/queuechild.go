// Package queuechild is test support shared by the lock's and the node
// queue's tests: a child process (the test binary itself, re-executed)
// that holds this node's queue of a lock path, as a stopped or a live
// process ahead of the test would, and a temporary directory with its
// links resolved.
package queuechild

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The child's environment: the lock path whose queue it holds, and how
// long it shows progress before it leaves (unset: it sleeps, making none).
const (
	EnvLockPath = "TIRASTORE_TEST_GATE_LOCK"
	EnvProgress = "TIRASTORE_TEST_GATE_PROGRESS_MS"
)

// Hold is the child's side, the body of a test binary's
// TestGateHolderChild: take the place at the head of the queue of
// $TIRASTORE_TEST_GATE_LOCK (hold), say "held", then either sleep (a
// stalled head) or note progress every 50 ms for the time
// $TIRASTORE_TEST_GATE_PROGRESS_MS says and leave (a live head). It skips
// in a normal run.
func Hold(t *testing.T, hold func(lockPath string) (progress, leave func())) {
	path := os.Getenv(EnvLockPath)
	if path == "" {
		t.Skip("helper for the node queue tests")
	}
	progress, leave := hold(path)
	os.Stdout.WriteString("held\n")
	if ms, err := strconv.Atoi(os.Getenv(EnvProgress)); err == nil {
		for end := time.Now().Add(time.Duration(ms) * time.Millisecond); time.Now().Before(end); {
			progress()
			time.Sleep(50 * time.Millisecond)
		}
		leave()
		return
	}
	time.Sleep(time.Hour)
}

// Start runs the test binary's TestGateHolderChild on lockPath and returns
// once the child holds the queue; the test's end kills it.
func Start(t *testing.T, lockPath string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGateHolderChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), EnvLockPath+"="+lockPath)
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
	t.Fatal("queue holder did not start")
	return nil
}

// PhysTempDir is a temporary directory with symlinks resolved (e.g. macOS
// /var -> /private/var), so that paths the code derives compare equal.
func PhysTempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}
