package sqlitefile_test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/lock"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodequeue"
	"github.com/tirastore/tirastore/core/tuning"
)

// envLaneWaiter names the database in whose node queue TestLaneWaiterChild
// waits in the writers' lane.
const envLaneWaiter = "TIRASTORE_TEST_LANE_WAITER"

// TestLaneWaiterChild is a write of another process waiting in the lane of
// $TIRASTORE_TEST_LANE_WAITER's node queue (without the lock), for as long
// as it lives; it does nothing in a normal run.
func TestLaneWaiterChild(t *testing.T) {
	t.Parallel()
	db := os.Getenv(envLaneWaiter)
	if db == "" {
		t.Skip("helper for TestLoadWhileWritesWait")
	}
	lp, err := lock.PathFor(db)
	if err != nil {
		t.Fatal(err)
	}
	q, err := nodequeue.Open(lp)
	if err != nil || q == nil {
		t.Fatal("no node queue:", err)
	}
	if _, err := q.HoldLaneSlot(); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	time.Sleep(time.Hour)
}

// TestLoadWhileWritesWait: while a write of another process of the node
// waits in the lane (as under steady writes it always does), a reader's
// locked misses still read its program's load a chunk at a time, and the
// program, once complete, is answered without the lock. It fails with the
// old policy (no chunk read while a write waits: every first lookup of a
// key took the lock).
func TestLoadWhileWritesWait(t *testing.T) {
	t.Parallel()
	w, r := twoStores(t)
	n := 2*tuning.LoadChunkRows + 10
	recordProgram(t, w, "big", n)
	child := exec.Command(os.Args[0], "-test.run=^TestLaneWaiterChild$", "-test.count=1", "-test.v")
	child.Env = append(os.Environ(), envLaneWaiter+"="+r.Path())
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	held := false
	for sc := bufio.NewScanner(out); !held && sc.Scan(); {
		held = strings.TrimSpace(sc.Text()) == "held"
	}
	if !held || !sqlitefile.WritesWaiting(r.Backend()) {
		t.Fatal("the reader does not see the other process's write waiting in the lane")
	}
	for i := 0; complete(r, "big") == "" && i < 10; i++ {
		lookupIn(t, r, "big", n+i, n) // an absent key: a locked miss
	}
	if complete(r, "big") == "" {
		t.Fatalf("not loaded after 10 locked misses while a write waits: %+v", sqlitefile.Counters(r.Backend()))
	}
	before := r.LockStats().Acquired
	for i := 0; i < n+20; i += 7 {
		lookupIn(t, r, "big", i, n)
	}
	if got := r.LockStats().Acquired - before; got != 0 {
		t.Fatalf("%d lock acquisitions for a loaded program, want 0", got)
	}
}
