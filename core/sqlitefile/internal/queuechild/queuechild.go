// Package queuechild is test support shared by the lock's and the node
// queue's tests: a child process (the test binary itself, re-executed)
// that holds this node's queue of a lock path, as a stopped or a live
// process ahead of the test would, and a temporary directory with its
// links resolved.
package queuechild

import (
	"bufio"
	"io"
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
	return Run(t, "TestGateHolderChild", EnvLockPath+"="+lockPath).Cmd
}

// Child is a child process running one test of the test binary (a helper
// such as TestGateHolderChild), which the test talks to through its stdin
// and reads line by line.
type Child struct {
	*exec.Cmd
	In io.WriteCloser // the child's stdin
	sc *bufio.Scanner // its stdout
}

// Run starts the test binary's test named test with env added to its
// environment and returns once it has said "held"; the test's end kills
// it.
func Run(t *testing.T, test string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := &Child{Cmd: cmd, In: in, sc: bufio.NewScanner(out)}
	if !c.Await("held") {
		t.Fatalf("%s did not start", test)
	}
	return c
}

// Await reads the child's output up to a line that is word, and reports
// whether one came (false: the child's output ended first).
func (c *Child) Await(word string) bool {
	for c.sc.Scan() {
		if strings.TrimSpace(c.sc.Text()) == word {
			return true
		}
	}
	return false
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
