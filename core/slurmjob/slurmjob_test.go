package slurmjob

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// newTestAsker is an Asker on a fresh directory.
func newTestAsker(t *testing.T, interval, timeout time.Duration) (*Asker, string) {
	dir := t.TempDir()
	return New(Options{Dir: dir, Interval: interval, Timeout: timeout}), dir
}

func TestEndedFromSqueue(t *testing.T) {
	f := newFakes(t)
	f.set("squeue", squeueEnded, "", 0)
	a, dir := newTestAsker(t, time.Hour, 5*time.Second)
	got := a.Ended(context.Background(), testCluster, []string{"16", "17", "22"})
	if !reflect.DeepEqual(got, map[string]string{"22": "TIMEOUT"}) {
		t.Fatalf("Ended = %v", got)
	}
	sq := f.calls("squeue")
	if len(f.calls("sacct")) != 1 || len(sq) != 1 {
		t.Fatalf("sacct %v, squeue %v", f.calls("sacct"), sq)
	}
	if want := "-h -a -t all -j 16,17,22 -o %A|%T"; sq[0].args != want {
		t.Fatalf("squeue %q, want %q", sq[0].args, want)
	}
	// The answers are in the file, for the node's other processes.
	b, err := os.ReadFile(filepath.Join(dir, fileName(testCluster)))
	if err != nil {
		t.Fatal(err)
	}
	d := parseDoc(b)
	if d.Querier != nil || d.Jobs["22"].State != "TIMEOUT" || d.Jobs["16"].State != "RUNNING" {
		t.Fatalf("file: %s", b)
	}
	st, _ := os.Stat(filepath.Join(dir, fileName(testCluster)))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	// Within the interval, no other query: the answer comes from the file.
	a2 := New(Options{Dir: dir, Interval: time.Hour})
	if got := a2.Ended(context.Background(), testCluster, []string{"22", "16"}); !reflect.DeepEqual(got, map[string]string{"22": "TIMEOUT"}) {
		t.Fatalf("second asker: %v", got)
	}
	if len(f.calls("squeue")) != 1 {
		t.Fatal("a second query within the interval")
	}
}

func TestSacctFirst(t *testing.T) {
	f := newFakes(t)
	f.set("sacct", "101|CANCELLED by 0\n102|RUNNING\n", "", 0)
	f.set("squeue", "103|COMPLETED\n", "", 0)
	a, _ := newTestAsker(t, time.Hour, 5*time.Second)
	got := a.Ended(context.Background(), testCluster, []string{"101", "102", "103"})
	if !reflect.DeepEqual(got, map[string]string{"101": "CANCELLED", "103": "COMPLETED"}) {
		t.Fatalf("Ended = %v", got)
	}
	sa, sq := f.calls("sacct"), f.calls("squeue")
	if len(sa) != 1 || sa[0].args != "-X -n -P -j 101,102,103 --starttime now-2days -o JobIDRaw,State" {
		t.Fatalf("sacct %v", sa)
	}
	// squeue is asked only about what sacct did not list.
	if len(sq) != 1 || !strings.Contains(sq[0].args, "-j 103 ") {
		t.Fatalf("squeue %v", sq)
	}
}

func TestPurged(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()

	// The real squeue leaves a forgotten job (1) out of a list.
	f.set("squeue", squeueEnded, "", 0)
	a, _ := newTestAsker(t, time.Hour, 5*time.Second)
	got := a.Ended(ctx, testCluster, []string{"1", "16", "17", "22"})
	if !reflect.DeepEqual(got, map[string]string{"1": Purged, "22": "TIMEOUT"}) {
		t.Fatalf("list: %v", got)
	}

	// Asked about it alone, it fails.
	f.set("squeue", "", squeuePurgedOne, 1)
	a, _ = newTestAsker(t, time.Hour, 5*time.Second)
	if got := a.Ended(ctx, testCluster, []string{"1"}); !reflect.DeepEqual(got, map[string]string{"1": Purged}) {
		t.Fatalf("one: %v", got)
	}

	// With PrivateData=jobs, another user's running job is missing
	// alike: nothing is inferred.
	f.set("scontrol", scontrolPrivate, "", 0)
	f.set("squeue", squeueEnded, "", 0)
	a, _ = newTestAsker(t, time.Hour, 5*time.Second)
	if got := a.Ended(ctx, testCluster, []string{"1", "22"}); !reflect.DeepEqual(got, map[string]string{"22": "TIMEOUT"}) {
		t.Fatalf("PrivateData=jobs: %v", got)
	}
	f.set("squeue", "", squeuePurgedOne, 1)
	a, _ = newTestAsker(t, time.Hour, 5*time.Second)
	if got := a.Ended(ctx, testCluster, []string{"1"}); got != nil {
		t.Fatalf("PrivateData=jobs, one: %v", got)
	}

	// scontrol failing: nothing inferred either.
	f.set("scontrol", "", "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n", 1)
	f.set("squeue", squeueEnded, "", 0)
	a, _ = newTestAsker(t, time.Hour, 5*time.Second)
	if got := a.Ended(ctx, testCluster, []string{"1", "22"}); !reflect.DeepEqual(got, map[string]string{"22": "TIMEOUT"}) {
		t.Fatalf("scontrol failing: %v", got)
	}
	f.set("scontrol", scontrolNone, "", 0)

	// A line that does not parse, or a complaint on stderr, and squeue's
	// silence about a job proves nothing.
	for _, c := range []struct{ out, errText string }{
		{"JOBID|STATE\n22|TIMEOUT\n", ""},
		{"22|TIMEOUT\n", "squeue: error: something odd\n"},
	} {
		f.set("squeue", c.out, c.errText, 0)
		a, _ = newTestAsker(t, time.Hour, 5*time.Second)
		if got := a.Ended(ctx, testCluster, []string{"1", "22"}); !reflect.DeepEqual(got, map[string]string{"22": "TIMEOUT"}) {
			t.Fatalf("%q %q: %v", c.out, c.errText, got)
		}
	}
}

// A squeue that fails a whole list for one unknown job (as another version
// might): each job is then asked about alone.
func TestSqueueOneByOne(t *testing.T) {
	f := newFakes(t)
	f.write("squeue", `#!/bin/sh
echo "0 $*" >> '`+f.dir+`/squeue.log'
case "$*" in
*"-j 5 "*) echo '5|CANCELLED' ;;
*"-j 6 "*) echo '6|RUNNING' ;;
*) echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1 ;;
esac
`, 0o755)
	a, _ := newTestAsker(t, time.Hour, 5*time.Second)
	got := a.Ended(context.Background(), testCluster, []string{"5", "6", "7"})
	if !reflect.DeepEqual(got, map[string]string{"5": "CANCELLED", "7": Purged}) {
		t.Fatalf("Ended = %v", got)
	}
	if n := len(f.calls("squeue")); n != 4 {
		t.Fatalf("%d squeue calls, want 1 + 3", n)
	}
}

// A failing or missing command is "unknown", never "ended".
func TestFailuresAreUnknown(t *testing.T) {
	f := newFakes(t)
	ctx := context.Background()
	f.set("squeue", "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n", 1)
	a, _ := newTestAsker(t, time.Hour, 5*time.Second)
	if got := a.Ended(ctx, testCluster, []string{"1", "2"}); got != nil {
		t.Fatalf("failing squeue: %v", got)
	}
	for _, name := range []string{"sacct", "squeue", "scontrol"} {
		os.Remove(filepath.Join(f.dir, name))
	}
	a, _ = newTestAsker(t, time.Hour, 5*time.Second)
	if got := a.Ended(ctx, testCluster, []string{"1", "2"}); got != nil {
		t.Fatalf("no commands: %v", got)
	}
}

// Only the local cluster's jobs, and only valid ids, are asked about.
func TestNothingAsked(t *testing.T) {
	f := newFakes(t)
	f.set("squeue", "1|CANCELLED\n", "", 0)
	a, _ := newTestAsker(t, 0, 0)
	ctx := context.Background()
	if got := a.Ended(ctx, "other", []string{"1"}); got != nil {
		t.Fatalf("other cluster: %v", got)
	}
	if got := a.Ended(ctx, "", []string{"1"}); got != nil {
		t.Fatalf("no cluster: %v", got)
	}
	if got := a.Ended(ctx, testCluster, []string{"12x", "-j", "0", "007", "1;true", "1,2", "12_3", ""}); got != nil {
		t.Fatalf("invalid ids: %v", got)
	}
	t.Setenv("SLURM_CLUSTER_NAME", "")
	if got := a.Ended(ctx, "", []string{"1"}); got != nil {
		t.Fatalf("outside Slurm: %v", got)
	}
	if n := len(f.calls("sacct")) + len(f.calls("squeue")); n != 0 {
		t.Fatalf("%d commands run", n)
	}
}

// A hung command is killed at the timeout, with its children, and counts
// as unknown; the next query comes an interval later.
func TestHungSqueue(t *testing.T) {
	f := newFakes(t)
	f.flag("squeue.hang", true)
	f.set("squeue", "1|CANCELLED\n", "", 0)
	const timeout = 500 * time.Millisecond
	a, _ := newTestAsker(t, time.Second, timeout)
	t0 := time.Now()
	got := a.Ended(context.Background(), testCluster, []string{"1"})
	if el := time.Since(t0); el > timeout+2*time.Second {
		t.Fatalf("Ended took %v", el)
	}
	if got != nil {
		t.Fatalf("hung squeue: %v", got)
	}
	pids := f.hungPIDs()
	if len(pids) != 1 {
		t.Fatalf("hung pids %v", pids)
	}
	for deadline := time.Now().Add(2 * time.Second); running(pids[0]); {
		if time.Now().After(deadline) {
			t.Fatalf("the hung fake's child %d still runs", pids[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.flag("squeue.hang", false)
	time.Sleep(time.Second)
	// The next query answers; on a loaded machine the fake itself may
	// outlast the 500 ms timeout once, so ask again for a few seconds.
	var after map[string]string
	for deadline := time.Now().Add(10 * time.Second); after == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		after = a.Ended(context.Background(), testCluster, []string{"1"})
	}
	if !reflect.DeepEqual(after, map[string]string{"1": "CANCELLED"}) {
		t.Fatalf("after the hang: %v", after)
	}
}

// A cancelled context kills the query at once.
func TestContextCancel(t *testing.T) {
	f := newFakes(t)
	f.flag("squeue.hang", true)
	a, _ := newTestAsker(t, time.Hour, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if got := a.Ended(ctx, testCluster, []string{"1"}); got != nil {
		t.Fatalf("Ended = %v", got)
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Fatalf("Ended took %v", el)
	}
}

// Many goroutines and several processes asking at once make one query.
func TestOneQueryPerNode(t *testing.T) {
	f := newFakes(t)
	f.set("squeue", "7|CANCELLED\n8|RUNNING\n9|PENDING\n", "", 0)
	dir := t.TempDir()
	const interval = 3 * time.Second
	start := time.Now().Add(700 * time.Millisecond) // the children have started by then
	ids := []string{"7", "8", "9"}
	kids := startChildren(t, 6, 8, dir, interval, 10*time.Second, ids, start, time.Second)
	a := New(Options{Dir: dir, Interval: interval, Timeout: 10 * time.Second})
	time.Sleep(time.Until(start))
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]string{}
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for end := start.Add(time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
				for id, s := range a.Ended(context.Background(), testCluster, ids) {
					mu.Lock()
					seen[id] = s
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	res := append(kids.wait(), seen)
	if n, m := len(f.calls("squeue")), len(f.calls("sacct")); n != 1 || m != 1 {
		t.Fatalf("%d squeue and %d sacct calls, want 1 each: %v", n, m, f.calls("squeue"))
	}
	for i, r := range res {
		if !reflect.DeepEqual(r, map[string]string{"7": "CANCELLED"}) {
			t.Errorf("process %d saw %v", i, r)
		}
	}
}

// Asking on and on, the node makes one query per interval, however many
// ask: the children ask until the node has queried four times (however
// long a loaded machine takes to run the fake), and the queries are no
// more than one per interval over their span. The span, not each gap:
// the fake logs a query when its shell gets to run, which a loaded
// machine delays by a varying part of a second, and only the delays at
// the span's two ends count there (one query too many exceeds it by an
// interval).
func TestQueryRate(t *testing.T) {
	f := newFakes(t)
	f.set("squeue", "8|RUNNING\n", "", 0)
	dir := t.TempDir()
	const interval = time.Second
	const lateness = 400 * time.Millisecond // of the fake's log, at both ends together
	stop := filepath.Join(t.TempDir(), "stop")
	kids := startChildren(t, 4, 4, dir, interval, 10*time.Second, []string{"8"}, time.Now(), 0, "SLURMJOB_STOP="+stop)
	for deadline := time.Now().Add(time.Minute); len(f.calls("squeue")) < 4; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			os.WriteFile(stop, nil, 0o644)
			t.Fatalf("%d queries in a minute at one per %v", len(f.calls("squeue")), interval)
		}
	}
	// Asked for two intervals more, they may query twice more, never
	// more often.
	time.Sleep(2 * interval)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	kids.wait()
	calls := f.calls("squeue")
	span := calls[len(calls)-1].at.Sub(calls[0].at)
	if time.Duration(len(calls)-1)*interval > span+lateness {
		t.Fatalf("%d queries in %v at one per %v: %v", len(calls), span, interval, calls)
	}
}

// A querier that stopped (SIGSTOP) holds the others off for about twice
// the timeout; one that was killed, not at all.
func TestStoppedOrKilledQuerier(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			f := newFakes(t)
			f.set("squeue", "7|CANCELLED\n", "", 0)
			f.flag("squeue.blockable", true)
			dir := t.TempDir()
			const timeout = time.Second
			// The child becomes the querier, and its squeue hangs.
			kid := startChildren(t, 1, 1, dir, 50*time.Millisecond, time.Minute, []string{"7"}, time.Now(), 0, "FAKE_BLOCK=1")
			path := filepath.Join(dir, fileName(testCluster))
			pid := kid.cmds[0].Process.Pid
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				b, _ := os.ReadFile(path)
				if q := parseDoc(b).Querier; q != nil && q.PID == pid && len(f.hungPIDs()) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the child never became the querier")
				}
			}
			marked := time.Now()
			kid.cmds[0].Process.Signal(sig)
			if sig == syscall.SIGKILL {
				kid.cmds[0].Wait()
			}
			a := New(Options{Dir: dir, Interval: 50 * time.Millisecond, Timeout: timeout})
			var got map[string]string
			// A stopped querier's upper bound leaves a loaded machine (the
			// race detector, other tests on two cores) seconds of slack:
			// what must hold exactly is that it is not replaced early. A
			// killed one's stays below the stopped one's lower bound, so
			// that the two cases are told apart.
			for deadline := time.Now().Add(2*timeout + 5*time.Second); got == nil; time.Sleep(10 * time.Millisecond) {
				got = a.Ended(context.Background(), testCluster, []string{"7"})
				if time.Now().After(deadline) {
					t.Fatal("no answer seconds after the querier's wait")
				}
			}
			el := time.Since(marked)
			if !reflect.DeepEqual(got, map[string]string{"7": "CANCELLED"}) {
				t.Fatalf("Ended = %v", got)
			}
			if sig == syscall.SIGSTOP && (el < 2*timeout-300*time.Millisecond || el > 2*timeout+3*time.Second) {
				t.Fatalf("a stopped querier replaced after %v, want about %v", el, 2*timeout)
			}
			if sig == syscall.SIGKILL && el > timeout {
				t.Fatalf("a dead querier replaced after %v", el)
			}
			kid.cmds[0].Process.Kill()
		})
	}
}

// A process stopped while it holds the flock does not stop the others
// for longer than about twice the timeout: they then ask on their own.
func TestFlockHeldTooLong(t *testing.T) {
	f := newFakes(t)
	f.set("squeue", "7|CANCELLED\n", "", 0)
	const timeout = 300 * time.Millisecond
	a, dir := newTestAsker(t, 50*time.Millisecond, timeout)
	fd, err := openFile(filepath.Join(dir, fileName(testCluster)), fileFlags)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFile(fd)
	if ok, err := tryLock(fd); !ok || err != nil {
		t.Fatal(ok, err)
	}
	t0 := time.Now()
	var got map[string]string
	for got == nil && time.Since(t0) < 2*timeout+5*time.Second {
		got = a.Ended(context.Background(), testCluster, []string{"7"})
		if got == nil && len(f.calls("squeue")) > 0 {
			t.Fatal("queried without its answer")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if el := time.Since(t0); got == nil || el < 2*timeout || el > 2*timeout+3*time.Second {
		t.Fatalf("answer %v after %v, want one after %v", got, el, 2*timeout)
	}
}

// Outside a job (no SLURM_CLUSTER_NAME: a login node's dashboard), the
// cluster is scontrol's ClusterName: asked at most once per interval while
// scontrol fails, never again once it answered; that cluster's jobs are
// then asked about, and no other's.
func TestClusterOutsideAJob(t *testing.T) {
	f := newFakes(t)
	t.Setenv("SLURM_CLUSTER_NAME", "")
	f.set("scontrol", "", "slurm_load_ctl_conf error: Unable to contact slurm controller\n", 1)
	f.set("squeue", "22|CANCELLED\n", "", 0)
	ctx := context.Background()
	a, _ := newTestAsker(t, time.Hour, 5*time.Second)
	if c := a.Cluster(ctx); c != "" {
		t.Fatalf("Cluster = %q with scontrol failing", c)
	}
	if got := a.Ended(ctx, testCluster, []string{"22"}); got != nil {
		t.Fatalf("Ended = %v without a known cluster", got)
	}
	if n := len(f.calls("scontrol")); n != 1 {
		t.Fatalf("scontrol asked %d times within the interval", n)
	}
	if n := len(f.calls("sacct")) + len(f.calls("squeue")); n != 0 {
		t.Fatalf("%d queries without a known cluster", n)
	}

	f.set("scontrol", scontrolNone+"ClusterName             = "+testCluster+"\n", "", 0)
	b, _ := newTestAsker(t, time.Hour, 5*time.Second)
	if got := b.Ended(ctx, testCluster, []string{"22"}); !reflect.DeepEqual(got, map[string]string{"22": "CANCELLED"}) {
		t.Fatalf("Ended = %v on the login node of %s", got, testCluster)
	}
	if got := b.Ended(ctx, "other", []string{"22"}); got != nil {
		t.Fatalf("another cluster's job: %v", got)
	}
	n := len(f.calls("scontrol"))
	b.interval = 0
	if c := b.Cluster(ctx); c != testCluster || len(f.calls("scontrol")) != n {
		t.Fatalf("Cluster = %q, scontrol asked again (%d, %d) after it answered", c, n, len(f.calls("scontrol")))
	}
}
