package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

// Environment of the child processes started by runChildren.
const (
	envChildDir    = "TIRASTORE_LOCK_CHILD_DIR"    // set: act as a child, in this directory
	envChildCycles = "TIRASTORE_LOCK_CHILD_CYCLES" // increments to perform
	envChildNoLock = "TIRASTORE_LOCK_CHILD_NOLOCK" // "1": skip the lock (negative control)
	envChildStats  = "TIRASTORE_LOCK_CHILD_STATS"  // "1": default backoff; write waits to stats.<pid>.json
	// envTestDirs: "M1:M2:...", the same directory mounted several times
	// (tests/fusebed, or one directory of a cluster file system seen from
	// several nodes' mounts); Test64Contenders then spreads its children
	// over the mounts.
	envTestDirs = "TIRASTORE_LOCK_TEST_DIRS"
)

// childStats is what a child with envChildStats reports: per acquisition,
// the wait in nanoseconds and the link() attempts it took.
type childStats struct {
	Waits []int64 `json:"waits"`
	Links []int   `json:"links"`
}

// TestLockChildProcess is the body of one child process; it does nothing in a
// normal run.
func TestLockChildProcess(t *testing.T) {
	t.Parallel()
	dir := os.Getenv(envChildDir)
	if dir == "" {
		t.Skip("helper for the multi-process tests")
	}
	cycles, _ := strconv.Atoi(os.Getenv(envChildCycles))
	noLock := os.Getenv(envChildNoLock) == "1"
	withStats := os.Getenv(envChildStats) == "1"
	opt := Options{MinBackoff: 50 * time.Microsecond, MaxBackoff: 2 * time.Millisecond, Timeout: 5 * time.Minute}
	if withStats {
		opt = Options{Timeout: 5 * time.Minute} // production backoff
	}
	l := New(filepath.Join(dir, "cache.db.lock"), opt)
	var st childStats
	if withStats {
		// Start together: report ready, wait for the parent's "go".
		os.WriteFile(filepath.Join(dir, "ready."+strconv.Itoa(os.Getpid())), nil, 0o644)
		for {
			if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		defer func() {
			b, _ := json.Marshal(st)
			if err := os.WriteFile(filepath.Join(dir, "stats."+strconv.Itoa(os.Getpid())+".json"), b, 0o644); err != nil {
				t.Error(err)
			}
		}()
	}
	for i := 0; i < cycles; i++ {
		if !noLock {
			start, links := time.Now(), l.stats.links.Load()
			if err := l.Acquire(context.Background()); err != nil {
				t.Fatalf("acquire: %v", err)
			}
			st.Waits = append(st.Waits, int64(time.Since(start)))
			st.Links = append(st.Links, int(l.stats.links.Load()-links))
		}
		if err := criticalSection(dir, !noLock); err != nil {
			t.Fatal(err)
		}
		if !noLock {
			if err := l.Release(); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// criticalSection is a deliberately slow read-modify-write of a counter file.
// With strict set it also proves exclusivity with an O_EXCL marker file.
func criticalSection(dir string, strict bool) error {
	marker := filepath.Join(dir, "inside")
	if strict {
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("two processes inside the critical section: %w", err)
		}
		f.Close()
	}
	counter := filepath.Join(dir, "counter")
	data, err := os.ReadFile(counter)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil && strict {
		return fmt.Errorf("counter %q: %w", data, err)
	}
	time.Sleep(100 * time.Microsecond)
	if err := os.WriteFile(counter, []byte(strconv.Itoa(n+1)), 0o644); err != nil {
		return err
	}
	if strict {
		return os.Remove(marker)
	}
	return nil
}

// runChildren runs n copies of this test binary as TestLockChildProcess plus
// the extra commands, all at once, and returns the final counter.
func runChildren(t *testing.T, dir string, n, cycles int, noLock bool, extra ...*exec.Cmd) int {
	t.Helper()
	return runChildrenCmds(t, dir, n, cycles, noLock, nil, nil, extra)
}

func runChildrenEnv(t *testing.T, dir string, n, cycles int, noLock bool, env []string, views ...string) int {
	t.Helper()
	return runChildrenCmds(t, dir, n, cycles, noLock, env, views, nil)
}

// runChildrenCmds runs the children with extra environment and, if views is
// not empty, child i working in views[i%len(views)] (the same directory
// through another mount) instead of dir.
func runChildrenCmds(t *testing.T, dir string, n, cycles int, noLock bool, env, views []string, extra []*exec.Cmd) int {
	t.Helper()
	startTogether := false
	for _, e := range env {
		startTogether = startTogether || e == envChildStats+"=1"
	}
	if err := os.WriteFile(filepath.Join(dir, "counter"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLockChildProcess$", "-test.count=1", "-test.timeout=10m")
		cdir := dir
		if len(views) > 0 {
			cdir = views[i%len(views)]
		}
		cmd.Env = append(os.Environ(),
			envChildDir+"="+cdir, envChildCycles+"="+strconv.Itoa(cycles))
		if noLock {
			cmd.Env = append(cmd.Env, envChildNoLock+"=1")
		}
		cmd.Env = append(cmd.Env, env...)
		cmds = append(cmds, cmd)
	}
	cmds = append(cmds, extra...)
	outs := make([]*strings.Builder, len(cmds))
	for i, cmd := range cmds {
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if startTogether {
		// Children that wait for "go" (envChildStats) say they are ready.
		for {
			ready, _ := filepath.Glob(filepath.Join(dir, "ready.*"))
			if len(ready) >= n {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %d (%s): %v\n%s", i, filepath.Base(cmd.Path), err, outs[i])
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return got
}

// fleetSize is the number of processes and of locked increments each makes
// in the mutual-exclusion test and its negative control: 4 x 50 in the fast
// tier (-short), which the control still shows losing increments, and
// 8 x 200 in the soak tier.
func fleetSize() (procs, cycles int) {
	if testing.Short() {
		return 4, 50
	}
	return 8, 200
}

// TestMultiProcessMutualExclusion: processes each making locked increments
// of one counter file lose none.
func TestMultiProcessMutualExclusion(t *testing.T) {
	t.Parallel()
	procs, cycles := fleetSize()
	dir := physTempDir(t)
	start := time.Now()
	got := runChildren(t, dir, procs, cycles, false)
	if got != procs*cycles {
		t.Fatalf("counter = %d, want %d", got, procs*cycles)
	}
	t.Logf("%d processes x %d cycles in %v", procs, cycles, time.Since(start))
	if cs := tickets(t, dir); len(cs) != 0 {
		t.Errorf("tickets left: %v", cs)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache.db.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left: %v", err)
	}
}

// Test64Contenders: 64 processes with the production backoff each take the
// lock contendCycles times around a tiny critical section. It checks only
// correctness (the exact counter, exclusivity) and progress (everyone
// finishes, within the Acquire timeout of 5 minutes); the wait figures are
// reported, not asserted, since they depend on the machine.
func Test64Contenders(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-process test")
	}
	const procs, contendCycles = 64, 10
	dir := physTempDir(t)
	var views []string
	if v := os.Getenv(envTestDirs); v != "" {
		// One directory seen through several mounts ("nodes"): the children
		// use the views in turn.
		name := "contenders." + strconv.Itoa(os.Getpid())
		for _, m := range strings.Split(v, ":") {
			views = append(views, filepath.Join(m, name))
		}
		if err := os.Mkdir(views[0], 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(views[0]) })
		dir = views[0]
	}
	start := time.Now()
	got := runChildrenEnv(t, dir, procs, contendCycles, false, []string{envChildStats + "=1"}, views...)
	elapsed := time.Since(start)
	if got != procs*contendCycles {
		t.Fatalf("counter = %d, want %d", got, procs*contendCycles)
	}
	var waits []time.Duration
	links, firstTry, perProcWorst := 0, 0, time.Duration(0)
	files, _ := filepath.Glob(filepath.Join(dir, "stats.*.json"))
	if len(files) != procs {
		t.Fatalf("%d stats files, want %d", len(files), procs)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var st childStats
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		var total time.Duration
		for i, w := range st.Waits {
			waits = append(waits, time.Duration(w))
			links += st.Links[i]
			total += time.Duration(w)
			if st.Links[i] == 1 {
				firstTry++
			}
		}
		perProcWorst = max(perProcWorst, total)
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	n := len(waits)
	var sum time.Duration
	for _, w := range waits {
		sum += w
	}
	line := fmt.Sprintf("64 contenders x %d: %d acquisitions in %v; wait median %v, p99 %v, worst %v, mean %v; "+
		"link() per acquisition %.2f, %d%% at the first try; slowest process waited %v in total",
		contendCycles, n, elapsed.Round(time.Millisecond), waits[n/2].Round(time.Microsecond),
		waits[n*99/100].Round(time.Microsecond), waits[n-1].Round(time.Microsecond),
		(sum / time.Duration(n)).Round(time.Microsecond), float64(links)/float64(n), firstTry*100/n, perProcWorst.Round(time.Millisecond))
	t.Log(line)
	fmt.Println(line)
	if cs := tickets(t, dir); len(cs) != 0 {
		t.Errorf("tickets left: %v", cs)
	}
}

// TestMultiProcessNegativeControl: the same run without the lock must lose
// increments; otherwise the test above proves nothing.
func TestMultiProcessNegativeControl(t *testing.T) {
	t.Parallel()
	procs, cycles := fleetSize()
	dir := physTempDir(t)
	got := runChildren(t, dir, procs, cycles, true)
	t.Logf("without locking: counter = %d of %d", got, procs*cycles)
	if got >= procs*cycles {
		t.Fatalf("negative control did not lose increments (counter %d): the critical section is too narrow to test anything", got)
	}
}

// pyWorker follows the original library's protocol as COMPAT.md describes it
// (mkstemp ticket, json.dump, link, backoff with jitter, stale breaking by
// timestamp, release = unlink lock then ticket) around the same critical
// section, so Go and "old Python" workers can be run against each other.
const pyWorker = `
import json, os, random, socket, sys, tempfile, time

def acquire(lock_path, stale=600.0):
    d = os.path.dirname(lock_path)
    host = socket.gethostname()
    delay = 0.00005
    while True:
        fd, tmp = tempfile.mkstemp(prefix=".lock_%s_%d_" % (host, os.getpid()), dir=d)
        with os.fdopen(fd, "w") as f:
            json.dump({"hostname": host, "pid": os.getpid(), "timestamp": time.time()}, f)
        try:
            os.link(tmp, lock_path)
            return tmp
        except FileExistsError:
            os.unlink(tmp)
        try:
            with open(lock_path) as f:
                info = json.load(f)
            if time.time() - info["timestamp"] > stale:
                os.unlink(lock_path)
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(random.uniform(0, delay))
        delay = min(delay * 2, 0.002)

def release(lock_path, tmp):
    os.unlink(lock_path)
    os.unlink(tmp)

d, cycles = sys.argv[1], int(sys.argv[2])
lock_path = os.path.join(d, "cache.db.lock")
marker = os.path.join(d, "inside")
counter = os.path.join(d, "counter")
for _ in range(cycles):
    tmp = acquire(lock_path)
    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    with open(counter) as f:
        n = int(f.read())
    time.sleep(0.0001)
    with open(counter, "w") as f:
        f.write(str(n + 1))
    os.unlink(marker)
    release(lock_path, tmp)
`

// TestMixedGoAndPythonWorkers: Go processes and as many Python processes
// using the original protocol exclude each other (2 + 2 x 50 increments in
// the fast tier, 4 + 4 x 150 in the soak tier).
func TestMixedGoAndPythonWorkers(t *testing.T) {
	t.Parallel()
	pytest.Python(t)
	each, cycles := 4, 150
	if testing.Short() {
		each, cycles = 2, 50
	}
	dir := physTempDir(t)
	var extra []*exec.Cmd
	for i := 0; i < each; i++ {
		extra = append(extra, pytest.Command(t, pyWorker, dir, strconv.Itoa(cycles)))
	}
	if got, want := runChildren(t, dir, each, cycles, false, extra...), 2*each*cycles; got != want {
		t.Fatalf("counter = %d, want %d", got, want)
	}
	if cs := tickets(t, dir); len(cs) != 0 {
		t.Errorf("tickets left: %v", cs)
	}
}

// TestPythonHeldLock: a lock taken by a Python worker is respected, its
// holder record is readable, and once stale it is broken by Go.
func TestPythonHeldLock(t *testing.T) {
	t.Parallel()
	pytest.Python(t)
	dir := physTempDir(t)
	path := filepath.Join(dir, "cache.db.lock")
	script := `
import json, os, socket, sys, tempfile, time
d, age = sys.argv[1], float(sys.argv[2])
fd, tmp = tempfile.mkstemp(prefix=".lock_%s_%d_" % (socket.gethostname(), os.getpid()), dir=d)
with os.fdopen(fd, "w") as f:
    json.dump({"hostname": socket.gethostname(), "pid": os.getpid(), "timestamp": time.time() - age}, f)
os.link(tmp, os.path.join(d, "cache.db.lock"))
print(os.getpid())
`
	out := pytest.Run(t, script, nil, dir, "0")
	pypid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	l := New(path, Options{Timeout: 100 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	err := l.Acquire(context.Background())
	var te *TimeoutError
	if !errors.As(err, &te) || te.Holder == nil || te.Holder.PID != pypid {
		t.Fatalf("want timeout naming python pid %d, got %v", pypid, err)
	}
	// Clean up the live one (a dead Python process left ticket and lock).
	for _, c := range tickets(t, dir) {
		os.Remove(filepath.Join(dir, c))
	}
	os.Remove(path)

	pytest.Run(t, script, nil, dir, "700")
	// A generous timeout: breaking takes a few steps, and a busy machine
	// must not turn "broken" into "timed out".
	l.opt.Timeout = 30 * time.Second
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("stale Python lock not broken: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}
