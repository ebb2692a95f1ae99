package sqlitefile_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/lock"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodequeue"
)

// The group-commit tests run real processes: a holder that keeps the
// node's writers' lane (and the lock) until its stdin closes, and record
// children that queue behind it.

const (
	envLaneHolder  = "TIRASTORE_TEST_LANE_HOLDER"  // database path
	envRecordChild = "TIRASTORE_TEST_RECORD_CHILD" // "<db> <project> <schedule> <lock timeout ms>"
	// envRecordByHash makes the record child record by the hash of this
	// source (core.ProgramRef), without sending it.
	envRecordByHash = "TIRASTORE_TEST_RECORD_BY_HASH"
)

// TestLaneHolderChild takes the lock of $TIRASTORE_TEST_LANE_HOLDER as a
// write (so it holds the lane and the queue), says "held", and releases it
// when its stdin closes; it does nothing in a normal run.
func TestLaneHolderChild(t *testing.T) {
	t.Parallel()
	db := os.Getenv(envLaneHolder)
	if db == "" {
		t.Skip("helper for the group-commit tests")
	}
	lp, err := lock.PathFor(db)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := nodequeue.Open(lp) // as a store would: none if unavailable
	l := lock.New(lp, lock.Options{Queue: q})
	if err := l.AcquireWrite(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Println("held")
	io.Copy(io.Discard, os.Stdin)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	q.Close()
}

// TestRecordChild opens the store that $TIRASTORE_TEST_RECORD_CHILD names,
// says "open", records one measurement as it says once a line arrives on
// stdin, and prints "written <ok>" or "error <kind>"; it does nothing in a
// normal run.
func TestRecordChild(t *testing.T) {
	t.Parallel()
	spec := strings.Fields(os.Getenv(envRecordChild))
	if len(spec) != 4 {
		t.Skip("helper for the group-commit tests")
	}
	ms, _ := strconv.Atoi(spec[3])
	st, err := core.Open(context.Background(), spec[0], core.Options{SourceProject: spec[1], CPUModel: "Test CPU",
		LockTimeout: core.Seconds(float64(ms) / 1000)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fmt.Println("open")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	prog := core.ProgramRef{Source: src}
	if by, ok := os.LookupEnv(envRecordByHash); ok {
		prog = core.ProgramRef{Hash: core.ProgramHash(by), ByHash: true}
	}
	ok, err := st.RecordRef(context.Background(), "blur", prog, core.Measurement{Schedule: spec[2], IsLegal: true,
		ExecutionTimes: []pyjson.Number{"1.5"}}, false)
	var e *core.Error
	switch {
	case errors.As(err, &e):
		fmt.Printf("error %s\n", e.Kind.PythonName())
	case err != nil:
		t.Fatal(err)
	default:
		fmt.Printf("written %v\n", ok)
	}
}

// laneHolder starts TestLaneHolderChild on db; closing the returned writer
// makes it release.
func laneHolder(t *testing.T, db string) io.WriteCloser {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLaneHolderChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envLaneHolder+"="+db)
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
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "held" {
			go io.Copy(io.Discard, out)
			return in
		}
	}
	t.Fatal("lane holder did not start")
	return nil
}

// recordChild is a running TestRecordChild whose store is open.
type recordChild struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	said strings.Builder
}

func startRecordChild(t *testing.T, env []string, db, project, schedule string, timeout time.Duration) *recordChild {
	t.Helper()
	c := &recordChild{cmd: exec.Command(os.Args[0], "-test.run=^TestRecordChild$", "-test.count=1", "-test.v")}
	c.cmd.Env = append(append(os.Environ(), env...),
		fmt.Sprintf("%s=%s %s %s %d", envRecordChild, db, project, schedule, timeout.Milliseconds()))
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cmd.Process.Kill(); c.cmd.Wait() })
	c.out = bufio.NewScanner(out)
	if c.line() != "open" {
		t.Fatalf("record child did not open its store:\n%s", c.said.String())
	}
	return c
}

// line is the child's next line of output that is not test chatter.
func (c *recordChild) line() string {
	for c.out.Scan() {
		l := strings.TrimSpace(c.out.Text())
		c.said.WriteString(l + "\n")
		if l == "open" || strings.HasPrefix(l, "written ") || strings.HasPrefix(l, "error ") {
			return l
		}
	}
	return ""
}

// record lets the child record.
func (c *recordChild) record(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(c.in, "go\n"); err != nil {
		t.Fatal(err)
	}
}

// result waits for the child and returns its verdict line.
func (c *recordChild) result(t *testing.T) string {
	t.Helper()
	l := c.line()
	if err := c.cmd.Wait(); err != nil || l == "" {
		t.Fatalf("record child: %v\n%s", err, c.said.String())
	}
	return l
}

// waitBlocked waits until n waits are asleep in the node queue of db
// (nodequeue.Sleepers: each queued process sleeps on one byte's word).
func waitBlocked(t *testing.T, db string, n int) {
	t.Helper()
	lp, err := lock.PathFor(db)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		blocked, err := nodequeue.Sleepers(lp)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Skip(err)
		}
		if blocked >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes asleep in the queue, want %d", blocked, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// changeCounter is the database header's file change counter: SQLite
// increments it once per committed write transaction.
func changeCounter(t *testing.T, db string) uint32 {
	t.Helper()
	f, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [4]byte
	if _, err := f.ReadAt(b[:], 24); err != nil {
		t.Fatal(err)
	}
	return binary.BigEndian.Uint32(b[:])
}

// newGroupDB creates a database for the group-commit tests.
func newGroupDB(t *testing.T) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "cache.db")
	st, err := core.Open(ctx, db, core.Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	return db
}

// openAndRecord opens a store on db, closed when the test ends, and
// records through it one measurement of blur's schedule sched.
func openAndRecord(t *testing.T, db, sched string) *core.Store {
	t.Helper()
	st, err := core.Open(ctx, db, core.Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Record(ctx, "blur", src, core.Measurement{Schedule: sched, IsLegal: true,
		ExecutionTimes: []pyjson.Number{"1"}}, false); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGroupCommit: four processes that record while another write of the
// node holds the lane are committed in one transaction (the change counter
// moves once), each with its own source project, and each learns that its
// record was written. With TIRASTORE_GROUP_COMMIT=0 (the negative control)
// the same four commit one by one.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     []string
		commits uint32
	}{{"on", nil, 1}, {"off", []string{"TIRASTORE_GROUP_COMMIT=0"}, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			db := newGroupDB(t)
			var kids []*recordChild
			for i := 0; i < 4; i++ {
				kids = append(kids, startRecordChild(t, tc.env, db, fmt.Sprintf("proj%d", i),
					fmt.Sprintf("U(L0,%d,comps=['c1'])", i+2), time.Minute))
			}
			holder := laneHolder(t, db)
			for i, k := range kids {
				k.record(t)
				waitBlocked(t, db, i+1)
			}
			before := changeCounter(t, db)
			holder.Close()
			for i, k := range kids {
				if got := k.result(t); got != "written true" {
					t.Errorf("child %d: %s", i, got)
				}
			}
			if n := changeCounter(t, db) - before; n != tc.commits {
				t.Errorf("%d transactions for 4 records, want %d", n, tc.commits)
			}
			c, err := sql.Open("sqlite3", "file:"+db+"?mode=ro")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := 0; i < 4; i++ {
				var project, host, user string
				err := c.QueryRow("SELECT source_project, hostname, username FROM records WHERE schedule = ?",
					fmt.Sprintf("U(L0,%d,comps=['c1'])", i+2)).Scan(&project, &host, &user)
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if want := fmt.Sprintf("proj%d", i); project != want || host == "" || user == "" {
					t.Errorf("record %d written as project %q host %q user %q, want project %q", i, project, host, user, want)
				}
			}
		})
	}
}

// TestGroupCommitByHashOfMissingProgram: in one group, a record by the
// hash of a program the database does not have fails alone, with
// KindNoProgram and nothing written; the group's other records, one by the
// hash of a stored program among them, are written. (Were the program
// row inserted for a write by hash, or the group failed for all, a child
// would say otherwise.)
func TestGroupCommitByHashOfMissingProgram(t *testing.T) {
	t.Parallel()
	db := newGroupDB(t)
	st := openAndRecord(t, db, "U(L0,1,comps=['c1'])")
	const missing = "void never_stored() {}"
	kids := []struct {
		env  []string
		want string
	}{
		{nil, "written true"},
		{[]string{envRecordByHash + "=" + missing}, "error " + core.KindNoProgram.PythonName()},
		{[]string{envRecordByHash + "=" + src}, "written true"},
		{nil, "written true"},
	}
	var children []*recordChild
	for i, k := range kids {
		children = append(children, startRecordChild(t, k.env, db, fmt.Sprintf("proj%d", i),
			fmt.Sprintf("U(L0,%d,comps=['c1'])", i+2), time.Minute))
	}
	holder := laneHolder(t, db)
	for i, c := range children {
		c.record(t)
		waitBlocked(t, db, i+1)
	}
	holder.Close()
	for i, c := range children {
		if got := c.result(t); got != kids[i].want {
			t.Errorf("child %d: %s, want %s", i, got, kids[i].want)
		}
	}
	for i := range kids {
		sched := fmt.Sprintf("U(L0,%d,comps=['c1'])", i+2)
		ok, err := st.Contains(ctx, "blur", src, sched)
		if err != nil {
			t.Fatal(err)
		}
		found, err := st.ContainsByHash(ctx, "blur", core.ProgramHash(missing), sched)
		if err != nil || found {
			t.Fatalf("a record by the missing program's hash was written (%v)", err)
		}
		if want := kids[i].want == "written true"; ok != want {
			t.Errorf("child %d's record stored: %v, want %v", i, ok, want)
		}
	}
	if s, err := st.GetProgramSource(ctx, "blur"); err != nil || len(s) != 1 {
		t.Errorf("programs named blur: %v (%v), want only the stored one", s, err)
	}
}

// TestGroupCommitWithdrawOnTimeout: a record whose wait times out while its
// request waits to be handed over takes it back: it reports the timeout,
// and the next committer does not write it. (Without the withdrawal, the
// parent's record below commits it.)
func TestGroupCommitWithdrawOnTimeout(t *testing.T) {
	t.Parallel()
	db := newGroupDB(t)
	late := startRecordChild(t, nil, db, "late", "U(L0,7,comps=['c1'])", 300*time.Millisecond)
	holder := laneHolder(t, db)
	late.record(t)
	if got := late.result(t); got != "error "+core.KindTimeout.PythonName() {
		t.Fatalf("timed-out record: %s", got)
	}
	holder.Close()
	// A writer that now holds the lock commits whatever is handed over.
	st := openAndRecord(t, db, "U(L0,8,comps=['c1'])")
	if ok, err := st.Contains(ctx, "blur", src, "U(L0,7,comps=['c1'])"); err != nil || ok {
		t.Fatalf("the timed-out record was written (contains=%v, %v)", ok, err)
	}
}
