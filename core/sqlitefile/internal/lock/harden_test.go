package lock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/internal/pytest"
	"github.com/tirastore/tirastore/core/liveness"
)

// goRecord is the record a Go holder with the given identity would write.
func goRecord(t *testing.T, host string, pid int, ts float64, proc liveness.Process, every time.Duration) string {
	t.Helper()
	r := &holderRecord{hostname: host, pid: pid, proc: proc, every: every}
	size, _ := r.recordSize()
	b, err := r.padded(ts, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// setHook installs a test hook for the rest of the test.
func setHook(t *testing.T, hook *func(*Lock), f func(*Lock)) {
	t.Helper()
	*hook = f
	t.Cleanup(func() { *hook = nil })
}

// pauser blocks the first call from one Lock until resumed.
type pauser struct {
	who     *Lock
	once    sync.Once
	paused  chan struct{}
	resumed chan struct{}
}

func newPauser(who *Lock) *pauser {
	return &pauser{who: who, paused: make(chan struct{}), resumed: make(chan struct{})}
}

func (p *pauser) hook(l *Lock) {
	if l != p.who {
		return
	}
	p.once.Do(func() {
		close(p.paused)
		<-p.resumed
	})
}

// mustTimeout acquires with a short timeout and requires a *TimeoutError.
func mustTimeout(t *testing.T, l *Lock, what string) *TimeoutError {
	t.Helper()
	err := l.Acquire(context.Background())
	var te *TimeoutError
	if !errors.As(err, &te) {
		if err == nil {
			l.Release()
		}
		t.Fatalf("%s: want a timeout (lock respected), got %v", what, err)
	}
	return te
}

// oldBreakStale is the check-then-unlink this package used before the
// rename scheme, with a pause between its check and its unlink: the
// negative control for TestTwoBreakersFreshLockSurvives.
func oldBreakStale(path string, judged stamp, pause func()) bool {
	cur, err := lstatStamp(path)
	if err != nil || cur != judged {
		return false
	}
	pause()
	return os.Remove(path) == nil
}

// noBreakLock switches the break lock off for the rest of the test, so
// that two breakers can be inside a break at once: what the put-back, the
// second line of defence, is for (a break lock judged abandoned).
func noBreakLock(t *testing.T) {
	testNoBreakLock = true
	t.Cleanup(func() { testNoBreakLock = false })
}

// TestTwoBreakersFreshLockSurvives: breakers A and B both judge the same
// stale lock and (with the break lock off) both get past their re-check; B
// is paused there, A breaks the stale lock and takes the lock (a fresh
// lock), then B resumes. With rename-and-verify B moves the fresh lock
// aside, sees it is not the one it judged, and links it back: the fresh
// holder keeps its lock. The same schedule with the old check-then-unlink
// loses the fresh lock.
func TestTwoBreakersFreshLockSurvives(t *testing.T) {
	for _, algo := range []string{"rename", "old-check-then-unlink"} {
		t.Run(algo, func(t *testing.T) {
			noBreakLock(t)
			path, opt := newTestLock(t)
			writeLockFile(t, path, holderJSON("deadnode", 1, unixSeconds(time.Now())-10000))
			opt.Hostname = "breakerB"
			b := New(path, opt)
			_, judged, err := readHolder(path)
			if err != nil {
				t.Fatal(err)
			}
			if b.judge(mustHolder(t, path), 0, time.Now()) != verdictStale {
				t.Fatal("planted lock is not judged stale")
			}
			p := newPauser(b)
			res := make(chan bool, 1)
			if algo == "rename" {
				setHook(t, &testHookBeforeRename, p.hook)
				go func() { res <- b.breakLock(judged) }()
			} else {
				go func() { res <- oldBreakStale(path, judged.stamp, func() { p.hook(b) }) }()
			}
			<-p.paused
			opt.Hostname = "breakerA"
			a := New(path, opt)
			if err := a.Acquire(context.Background()); err != nil {
				t.Fatal(err)
			}
			if a.stats.breaks.Load() != 1 {
				t.Fatalf("A broke %d locks, want 1", a.stats.breaks.Load())
			}
			close(p.resumed)
			gone := <-res
			id, err := lstatID(path)
			survived := err == nil && id == a.ticket.id
			rerr := a.Release()
			if algo == "rename" {
				if gone || !survived || rerr != nil {
					t.Fatalf("fresh lock lost: breakLock=%v survived=%v Release=%v", gone, survived, rerr)
				}
				if b.stats.putBacks.Load() != 1 || b.stats.displaced.Load() != 0 || b.stats.breaks.Load() != 0 {
					t.Errorf("B stats %+v, want one put-back", b.Counters())
				}
			} else {
				if survived || !errors.Is(rerr, ErrLockLost) {
					t.Fatalf("negative control: the schedule did not reproduce the lost lock (survived=%v, Release=%v)", survived, rerr)
				}
				t.Log("check-then-unlink removed the fresh lock, as expected")
			}
			if as := asides(t, filepath.Dir(path)); len(as) != 0 {
				t.Errorf("aside files left: %v", as)
			}
			a.Close()
			b.Close()
			if cs := tickets(t, filepath.Dir(path)); len(cs) != 0 {
				t.Errorf("tickets left: %v", cs)
			}
		})
	}
}

func mustHolder(t *testing.T, path string) *Holder {
	t.Helper()
	h, err := ReadHolder(path)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestBreakerRecheckSeesReplacement: a breaker overtaken before its re-check
// does not even move the fresh lock.
func TestBreakerRecheckSeesReplacement(t *testing.T) {
	path, opt := newTestLock(t)
	writeLockFile(t, path, holderJSON("deadnode", 1, 1))
	opt.Timeout = 200 * time.Millisecond
	b := New(path, opt)
	p := newPauser(b)
	setHook(t, &testHookBeforeCheck, p.hook)
	errc := make(chan error, 1)
	go func() { errc <- b.Acquire(context.Background()) }()
	<-p.paused
	opt.Hostname = "fresh"
	a := New(path, opt)
	if err := a.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(p.resumed)
	var te *TimeoutError
	if err := <-errc; !errors.As(err, &te) || te.Holder == nil || te.Holder.Hostname != "fresh" {
		t.Fatalf("B: want a timeout naming the fresh holder, got %v", err)
	}
	if b.stats.putBacks.Load() != 0 || b.stats.breaks.Load() != 0 {
		t.Errorf("B stats %+v: it moved something", b.Counters())
	}
	if err := a.Release(); err != nil {
		t.Fatalf("fresh holder: %v", err)
	}
}

// TestPutBackLosesToNewcomer shows the residual window when two breakers
// are inside a break at once (the break lock off here; in production, after
// a live breaker's break lock was judged abandoned): B moves a fresh lock
// aside by mistake and, before B links it back, a newcomer takes the free
// lock path. The newcomer keeps the lock, the displaced holder learns it at
// Release (ErrLockLost), B counts a displacement, and nothing is left over.
func TestPutBackLosesToNewcomer(t *testing.T) {
	noBreakLock(t)
	path, opt := newTestLock(t)
	writeLockFile(t, path, holderJSON("deadnode", 1, 1))
	_, judged, _ := readHolder(path)
	b := New(path, opt)
	p1, p2 := newPauser(b), newPauser(b)
	setHook(t, &testHookBeforeRename, p1.hook)
	setHook(t, &testHookBeforePutBack, p2.hook)
	res := make(chan bool, 1)
	go func() { res <- b.breakLock(judged) }()
	<-p1.paused
	opt.Hostname = "fresh"
	fresh := New(path, opt)
	if err := fresh.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(p1.resumed)
	<-p2.paused // fresh's lock is now aside: the lock path is free
	opt.Hostname = "newcomer"
	newcomer := New(path, opt)
	if err := newcomer.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(p2.resumed)
	if <-res {
		t.Error("breakLock reported the judged lock broken")
	}
	if b.stats.displaced.Load() != 1 {
		t.Errorf("stats %+v, want one displacement", b.Counters())
	}
	if err := fresh.Release(); !errors.Is(err, ErrLockLost) {
		t.Errorf("displaced holder: Release = %v, want ErrLockLost", err)
	}
	if err := newcomer.Release(); err != nil {
		t.Errorf("newcomer: %v", err)
	}
	fresh.Close()
	newcomer.Close()
	b.Close()
	if as, cs := asides(t, filepath.Dir(path)), tickets(t, filepath.Dir(path)); len(as)+len(cs) != 0 {
		t.Errorf("left over: %v %v", as, cs)
	}
}

// TestBreakerPutsBackHeartbeatedLock: a lock judged breakable that
// heartbeats between the breaker's re-check and its rename is linked back
// after the rename: the changed mtime and content prove its holder alive.
func TestBreakerPutsBackHeartbeatedLock(t *testing.T) {
	path, opt := newTestLock(t)
	opt.HeartbeatInterval = 100 * time.Millisecond
	opt.Hostname = "holder"
	h := New(path, opt)
	if err := h.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := New(path, Options{Hostname: "breaker"})
	var judged lockState
	confirmed := func() int64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.confirmedAt
	}
	setHook(t, &testHookBeforeRename, func(*Lock) {
		// Wait for a whole heartbeat: its write (the state the re-check
		// sees changed) and its confirmation (the lstat that must not
		// fall into the moment the lock is aside: a holder that confirms
		// then finds its lock gone and counts it lost, which is right for
		// a holder that stalled past the stale timeout, the only one a
		// breaker judges stale outside this test).
		before := confirmed()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if _, st, err := readHolder(path); err == nil && st != judged && confirmed() != before {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Error("no heartbeat within 10s")
	})
	// A beat between our read and the re-check makes breakLock give up
	// before the rename (also correct, but not what is tested): retry.
	for try := 0; try < 5 && b.stats.putBacks.Load() == 0; try++ {
		_, judged, _ = readHolder(path)
		if b.breakLock(judged) {
			t.Fatal("a heartbeating lock was broken")
		}
	}
	if b.stats.putBacks.Load() != 1 || b.stats.displaced.Load() != 0 {
		t.Errorf("stats %+v, want one put-back", b.Counters())
	}
	if err := h.Release(); err != nil {
		t.Fatalf("holder lost its lock: %v", err)
	}
	if as := asides(t, filepath.Dir(path)); len(as) != 0 {
		t.Errorf("aside files left: %v", as)
	}
}

// TestSkewedRemoteHeartbeatingHolderNotBroken: a remote holder whose clock
// is three hours behind writes timestamps that the original rule judges
// stale at once; it heartbeats, so it must not be broken.
func TestSkewedRemoteHeartbeatingHolderNotBroken(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	opt.StaleTimeout = 2 * time.Second // generous: a stalled fsync must not fake a dead holder
	opt.Hostname = "farnode"
	opt.HeartbeatInterval = 20 * time.Millisecond
	holder := New(path, opt)
	holder.clock = func() time.Time { return time.Now().Add(-3 * time.Hour) }
	if err := holder.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := mustHolder(t, path)
	if age := unixSeconds(time.Now()) - h.Timestamp; age < 3*3600-10 {
		t.Fatalf("holder timestamp only %.0fs old", age)
	}
	opt.Hostname = "here"
	opt.HeartbeatInterval = -1
	opt.Timeout = 3 * time.Second // 1.5 x StaleTimeout
	w := New(path, opt)
	te := mustTimeout(t, w, "skewed heartbeating holder")
	if te.Holder == nil || te.Holder.Hostname != "farnode" || te.Unchanged >= opt.StaleTimeout {
		t.Errorf("timeout error %v", te)
	}
	t.Log(te)
	if err := holder.Release(); err != nil {
		t.Fatalf("holder lost its lock: %v", err)
	}
}

// TestUnchangedLockBrokenWhateverItsTimestamp: a Python-style lock from a
// node whose clock is an hour ahead never looks old to the original rule;
// it is broken once it has stayed unchanged for StaleTimeout as measured
// here, and not before. The observation survives a timed-out Acquire.
func TestUnchangedLockBrokenWhateverItsTimestamp(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	writeLockFile(t, path, holderJSON("aheadnode", 7, unixSeconds(time.Now())+3600))
	opt.StaleTimeout = time.Second
	opt.Timeout = 100 * time.Millisecond
	w := New(path, opt)
	first := time.Now()
	te := mustTimeout(t, w, "young unchanged lock")
	if te.Unchanged <= 0 || te.Unchanged >= opt.StaleTimeout {
		t.Errorf("Unchanged = %v, want in (0, %v)", te.Unchanged, opt.StaleTimeout)
	}
	w.opt.Timeout = 30 * time.Second
	if err := w.Acquire(context.Background()); err != nil {
		t.Fatalf("unchanged lock not broken: %v", err)
	}
	if el := time.Since(first); el < opt.StaleTimeout {
		t.Errorf("broken after %v, before StaleTimeout %v", el, opt.StaleTimeout)
	}
	w.Release()
}

// TestOldTimestampOfHeartbeatingRecordNeedsGrace: a record that promises
// heartbeats and carries an old timestamp (a dead remote Go holder, or a
// live one with a slow clock) is broken only after it has also stayed
// unchanged for heartbeatGrace; a Python record with the same timestamp is
// broken at once (the original rule).
func TestOldTimestampOfHeartbeatingRecordNeedsGrace(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	old := unixSeconds(time.Now()) - 120
	opt.StaleTimeout = time.Minute
	opt.Timeout = 200 * time.Millisecond

	writeLockFile(t, path, holderJSON("pynode", 7, old))
	w := New(path, opt)
	if err := w.Acquire(context.Background()); err != nil {
		t.Fatalf("old Python record not broken at once: %v", err)
	}
	w.Release()

	every := 100 * time.Millisecond
	grace := heartbeatGrace(every, opt.StaleTimeout)
	writeLockFile(t, path, goRecord(t, "gonode", 7, old, liveness.Process{}, every))
	w = New(path, opt)
	first := time.Now()
	mustTimeout(t, w, "old heartbeating record before its grace")
	w.opt.Timeout = 20 * time.Second // well under StaleTimeout
	if err := w.Acquire(context.Background()); err != nil {
		t.Fatalf("silent heartbeating record not broken after its grace: %v", err)
	}
	if el := time.Since(first); el < grace {
		t.Errorf("broken after %v, before the grace %v", el, grace)
	}
	w.Release()
}

// Environment of the lock-holding child of TestDeadHolderBrokenAtOnce.
const envHoldDir = "TIRASTORE_LOCK_HOLD_DIR"

// TestLockHolderChild takes the lock, says so, and waits to be killed.
func TestLockHolderChild(t *testing.T) {
	t.Parallel()
	dir := os.Getenv(envHoldDir)
	if dir == "" {
		t.Skip("helper for TestDeadHolderBrokenAtOnce")
	}
	l := New(filepath.Join(dir, "cache.db.lock"), Options{})
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	time.Sleep(time.Hour)
}

// TestDeadHolderBrokenAtOnce: a holder killed on this host is broken at
// once, without waiting for StaleTimeout; while it lives it is respected.
func TestDeadHolderBrokenAtOnce(t *testing.T) {
	t.Parallel()
	if liveness.Self().BootID == "" || liveness.Self().PIDNS == 0 {
		t.Skip("no /proc identity on this system: no dead-holder rule")
	}
	dir := physTempDir(t)
	path := filepath.Join(dir, "cache.db.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHolderChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHoldDir+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "held\n" {
		t.Fatalf("child said %q", line)
	}
	opt := Options{StaleTimeout: time.Hour, Timeout: 200 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	w := New(path, opt)
	if te := mustTimeout(t, w, "live holder"); te.Holder == nil || te.Holder.PID != cmd.Process.Pid {
		t.Fatalf("timeout names %+v, want pid %d", te.Holder, cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	w.opt.Timeout = 10 * time.Second
	start := time.Now()
	if err := w.Acquire(context.Background()); err != nil {
		t.Fatalf("dead holder not broken: %v", err)
	}
	t.Logf("dead holder broken after %v", time.Since(start))
	if w.stats.breaks.Load() != 1 {
		t.Errorf("breaks = %d", w.stats.breaks.Load())
	}
	w.Release()
	// The dead child's ticket was swept by the first successful Acquire.
	if w.stats.swept.Load() != 1 {
		t.Errorf("swept = %d, want the dead child's ticket", w.stats.swept.Load())
	}
	w.Close()
	if left := tickets(t, dir); len(left) != 0 {
		t.Errorf("tickets left: %v", left)
	}
}

// TestSweepSparesWhatItCannotProveDead: tickets of live processes, of other
// hosts, and Python tickets (no boot id) of dead pids are left alone.
func TestSweepSparesWhatItCannotProveDead(t *testing.T) {
	t.Parallel()
	if liveness.Self().BootID == "" || liveness.Self().PIDNS == 0 {
		t.Skip("no /proc identity on this system")
	}
	dir := physTempDir(t)
	path := filepath.Join(dir, "cache.db.lock")
	l := New(path, Options{Hostname: "h1"})
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	me := liveness.Self()
	myStart := me.StartTime
	if myStart == 0 {
		t.Skip("no /proc start time on this system")
	}
	goRec := func(host string, pid int) string {
		return fmt.Sprintf(`{"hostname": %q, "pid": %d, "timestamp": 1.0, "start_time": %d, "boot_id": %q, "pid_ns": %d}`,
			host, pid, myStart, me.BootID, me.PIDNS)
	}
	files := map[string]string{
		".lock_h1_1_live":      goRec("h1", os.Getpid()),
		".lock_h2_1_otherhost": goRec("h2", dead.Process.Pid),
		".lock_h1_1_python":    fmt.Sprintf(`{"hostname": "h1", "pid": %d, "timestamp": 1.0}`, dead.Process.Pid),
		".lock_h1_1_dead":      goRec("h1", dead.Process.Pid),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Release()
	l.Close()
	left := tickets(t, dir)
	sort.Strings(left)
	want := []string{".lock_h1_1_live", ".lock_h1_1_python", ".lock_h2_1_otherhost"}
	if !slices.Equal(left, want) || l.stats.swept.Load() != 1 {
		t.Fatalf("left %v (swept %d), want %v", left, l.stats.swept.Load(), want)
	}
}

// TestDeadHolderRule covers the same-host judgement case by case: which
// records are broken at once and which are left to staleness.
func TestDeadHolderRule(t *testing.T) {
	t.Parallel()
	me := liveness.Self()
	if me.BootID == "" || me.PIDNS == 0 || me.StartTime == 0 {
		t.Skip("no /proc identity on this system")
	}
	host := New("/x", Options{}).opt.Hostname
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := gone.Process.Pid
	now := unixSeconds(time.Now())
	with := func(f func(*liveness.Process)) liveness.Process { p := me; f(&p); return p }
	for _, c := range []struct {
		name   string
		record string
		dead   bool
	}{
		{"dead pid", goRecord(t, host, deadPID, now, me, time.Second), true},
		{"pid reused (start time differs)", goRecord(t, host, os.Getpid(), now, with(func(p *liveness.Process) { p.StartTime++ }), time.Second), true},
		{"live pid, same start time", goRecord(t, host, os.Getpid(), now, me, time.Second), false},
		{"live pid, no start time", goRecord(t, host, os.Getpid(), now, with(func(p *liveness.Process) { p.StartTime = 0 }), time.Second), false},
		{"Python record, live pid", holderJSON(host, os.Getpid(), now), false},
		{"Python record, dead pid", holderJSON(host, deadPID, now), false},
		{"other boot", goRecord(t, host, deadPID, now, with(func(p *liveness.Process) { p.BootID = "00000000-0000-0000-0000-000000000000" }), time.Second), false},
		{"other pid namespace", goRecord(t, host, deadPID, now, with(func(p *liveness.Process) { p.PIDNS++ }), time.Second), false},
		{"other host", goRecord(t, "elsewhere", deadPID, now, me, time.Second), false},
		{"pid 0", goRecord(t, host, 0, now, me, time.Second), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, opt := newTestLock(t)
			opt.StaleTimeout = time.Hour
			// A live or unknown holder must make the wait time out; a dead
			// one is broken at once, however long a loaded machine takes
			// to get there.
			opt.Timeout = 100 * time.Millisecond
			if c.dead {
				opt.Timeout = 30 * time.Second
			}
			writeLockFile(t, path, c.record)
			w := New(path, opt)
			err := w.Acquire(context.Background())
			if c.dead {
				if err != nil {
					t.Fatalf("dead holder not broken: %v", err)
				}
				w.Release()
				return
			}
			var te *TimeoutError
			if !errors.As(err, &te) {
				t.Fatalf("live or unknown holder broken: %v", err)
			}
		})
	}
}

// pyReader reads a file for a while as the original's waiters do (open,
// json.load) and reports what it saw.
const pyReader = `
import json, sys, time
path, secs, want = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
start = time.monotonic()
end, limit = start + secs, start + 30
reads = fails = 0
beats, sizes, bad = set(), set(), []
# secs, and on until want heartbeats and 10 reads per heartbeat were seen
# (a loaded machine gives a reader few turns), 30 s at most.
while time.monotonic() < end or (len(beats) < want or reads < 10 * want) and time.monotonic() < limit:
    try:
        with open(path) as f:
            s = f.read()
    except FileNotFoundError:
        continue
    reads += 1
    sizes.add(len(s))
    try:
        d = json.loads(s)
        ts = d["timestamp"]
        if type(ts) is not float or type(d["pid"]) is not int:
            raise ValueError("types")
        beats.add(d.get("heartbeat"))
    except (ValueError, KeyError, TypeError) as e:
        fails += 1
        if len(bad) < 3:
            bad.append(repr(s))
print(json.dumps({"reads": reads, "fails": fails, "beats": len(beats), "sizes": sorted(sizes), "bad": bad}))
`

type pyReadResult struct {
	Reads, Fails, Beats int
	Sizes               []int
	Bad                 []string
}

func runPyReader(t *testing.T, path string, secs float64, wantBeats int) pyReadResult {
	t.Helper()
	var r pyReadResult
	pytest.RunJSON(t, pyReader, nil, &r, path, strconv.FormatFloat(secs, 'f', -1, 64), strconv.Itoa(wantBeats))
	return r
}

// TestHeartbeatRewritesInPlace: with a short interval the record changes
// many times, always in the same inode and at the same size, and concurrent
// readers (python3 json.loads, and ours) never see it empty or unparseable.
// The negative control rewrites the file the naive way (truncate, write)
// and the same reader does catch that.
func TestHeartbeatRewritesInPlace(t *testing.T) {
	t.Parallel()
	pytest.Python(t)
	path, opt := newTestLock(t)
	opt.HeartbeatInterval = 2 * time.Millisecond
	l := New(path, opt)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, _ := lstatStamp(path)
	size, _ := l.rec.recordSize()
	stop := make(chan struct{})
	goReads, goFails := 0, 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			data, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			goReads++
			if h, err := parseHolder(data); err != nil || h.PID != os.Getpid() || len(data) != size {
				goFails++
			}
		}
	}()
	r := runPyReader(t, path, 1.0, 10)
	close(stop)
	wg.Wait()
	after, _ := lstatStamp(path)
	c := l.ticket
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	beats := c.beats // final once Release has stopped the heartbeat
	t.Logf("python: %+v; go: %d reads, %d failures; %d heartbeats", r, goReads, goFails, beats)
	if r.Fails != 0 || goFails != 0 {
		t.Errorf("unparseable reads: python %d %v, go %d", r.Fails, r.Bad, goFails)
	}
	if r.Reads < 100 || r.Beats < 10 || beats < 10 {
		t.Errorf("too little activity to test anything: %+v, %d beats", r, beats)
	}
	if len(r.Sizes) != 1 || r.Sizes[0] != size {
		t.Errorf("sizes seen %v, want only %d", r.Sizes, size)
	}
	if before.id != after.id || before.size != after.size {
		t.Errorf("inode or size changed: %+v -> %+v", before, after)
	}

	// Negative control: truncate-and-write is caught by the same reader.
	naive := filepath.Join(filepath.Dir(path), "naive")
	content := []byte(holderJSON("n", 1, 1.5))
	os.WriteFile(naive, content, 0o644)
	done, stopNaive := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for { // until the reader is done: it may take long to start
			select {
			case <-stopNaive:
				return
			default:
			}
			f, err := os.OpenFile(naive, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return
			}
			time.Sleep(50 * time.Microsecond)
			f.Write(content)
			f.Close()
		}
	}()
	nr := runPyReader(t, naive, 0.5, 0)
	close(stopNaive)
	<-done
	t.Logf("naive rewrite: %+v", nr)
	if nr.Fails == 0 {
		t.Error("negative control: the reader never caught a truncated file")
	}
}

// pyWaiter is one acquire of the original protocol with a short stale
// timeout; it reports whether it had to break the lock.
const pyWaiter = `
import json, os, random, socket, sys, tempfile, time
lock_path, stale, budget = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
d = os.path.dirname(lock_path)
host = socket.gethostname()
end = time.monotonic() + budget
broke = False
print("started", flush=True)
while time.monotonic() < end:
    fd, tmp = tempfile.mkstemp(prefix=".lock_%s_%d_" % (host, os.getpid()), dir=d)
    with os.fdopen(fd, "w") as f:
        json.dump({"hostname": host, "pid": os.getpid(), "timestamp": time.time()}, f)
    try:
        os.link(tmp, lock_path)
        os.unlink(lock_path)
        os.unlink(tmp)
        print(json.dumps({"acquired": True, "broke": broke}))
        sys.exit(0)
    except FileExistsError:
        os.unlink(tmp)
    try:
        with open(lock_path) as f:
            info = json.load(f)
        if time.time() - info["timestamp"] > stale:
            os.unlink(lock_path)
            broke = True
            continue
    except (OSError, ValueError, KeyError, TypeError):
        pass
    time.sleep(random.uniform(0, 0.005))
print(json.dumps({"acquired": False, "broke": broke}))
`

// TestHeartbeatKeepsPythonWaiterAway: an original-protocol waiter with a
// 2.5 s stale timeout does not break a Go holder that works for 5 s after
// the waiter started with heartbeats, and does break it without (the
// negative control, which holds until the lock file is no longer its own:
// timed from the waiter's start, on a loaded machine too). The stale
// timeout is far above the 50 ms beat because a race-built process on a
// loaded 2-core machine was seen to stall for 0.9 s.
func TestHeartbeatKeepsPythonWaiterAway(t *testing.T) {
	t.Parallel()
	pytest.Python(t)
	for _, hb := range []time.Duration{50 * time.Millisecond, -1} {
		path, opt := newTestLock(t)
		opt.HeartbeatInterval = hb
		l := New(path, opt)
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		held, _ := lstatStamp(path)
		cmd := pytest.Command(t, pyWaiter, path, "2.5", "30")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewReader(stdout)
		if first, err := lines.ReadString('\n'); err != nil || first != "started\n" {
			t.Fatalf("the waiter did not start: %q, %v", first, err)
		}
		if hb > 0 {
			time.Sleep(5 * time.Second)
		} else {
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if now, err := lstatStamp(path); err != nil || now.id != held.id {
					break // broken (and perhaps taken again by the waiter)
				}
			}
		}
		rerr := l.Release()
		rest, _ := io.ReadAll(lines)
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		out := string(rest)
		t.Logf("heartbeat %v: python %s, Go Release: %v", hb, strings.TrimSpace(out), rerr)
		if hb > 0 && (rerr != nil || strings.Contains(out, `"broke": true`)) {
			t.Errorf("heartbeating holder was broken by the Python waiter")
		}
		if hb < 0 && !errors.Is(rerr, ErrLockLost) {
			t.Errorf("negative control: without heartbeats the Python waiter did not break the lock (Release: %v)", rerr)
		}
	}
}

// TestReleaseStopsHeartbeat: beats happen only while held (the ticket's
// content does not change between Release and the next Acquire), there is
// one heartbeat goroutine per Lock, and Close ends it and removes the ticket.
func TestReleaseStopsHeartbeat(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	opt.HeartbeatInterval = time.Millisecond
	l := New(path, opt)
	var first *heartbeat
	for i := 0; i < 20; i++ {
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = l.beat
		} else if l.beat != first {
			t.Fatal("a new heartbeat goroutine per acquisition")
		}
		// A beat is due every millisecond; a loaded machine may delay the
		// goroutine, so wait for it instead of assuming a schedule.
		beat := regexp.MustCompile(`"heartbeat": [1-9]`)
		var data []byte
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			var err error
			if data, err = os.ReadFile(path); err == nil && beat.Match(data) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no heartbeat while held: %q %v", data, err)
			}
		}
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(l.own.path)
		time.Sleep(3 * time.Millisecond)
		if after, _ := os.ReadFile(l.own.path); string(after) != string(before) {
			t.Fatal("the ticket was rewritten after Release")
		}
	}
	l.Close()
	select {
	case <-first.done:
	default:
		t.Fatal("heartbeat goroutine still running after Close")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 0 {
		t.Errorf("files left: %v", ents)
	}
}

func TestAsideName(t *testing.T) {
	t.Parallel()
	dir := physTempDir(t)
	short := asideName(filepath.Join(dir, "cache.db.lock"), "node1")
	if !strings.HasPrefix(filepath.Base(short), "cache.db.lock.stale.node1."+strconv.Itoa(os.Getpid())+".") {
		t.Errorf("aside name %q", short)
	}
	long := filepath.Join(dir, strings.Repeat("x", 240)+".db.lock")
	writeLockFile(t, long, holderJSON("deadnode", 1, 1))
	a := asideName(long, strings.Repeat("h", 64))
	if n := len(filepath.Base(a)); n > maxNameLen || filepath.Dir(a) != dir {
		t.Fatalf("aside name of %d bytes: %q", n, a)
	}
	// And a lock with such a name can be broken.
	l := New(long, Options{Hostname: strings.Repeat("h", 64), Timeout: 5 * time.Second})
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("stale lock with a long name not broken: %v", err)
	}
	l.Release()
}

// breakLocks lists the break locks left in dir.
func breakLocks(t *testing.T, dir string) []string {
	return filesIn(t, dir, func(name string) bool { return strings.HasSuffix(name, BreakSuffix) })
}

// checkNothingLeft fails the test if aside files, tickets or break locks
// are left in dir.
func checkNothingLeft(t *testing.T, dir string) {
	t.Helper()
	if left := append(append(asides(t, dir), tickets(t, dir)...), breakLocks(t, dir)...); len(left) != 0 {
		t.Errorf("left over: %v", left)
	}
}

// pausedBreaker plants a stale lock at path, starts breaker "breakerB"
// breaking it, and returns once B is blocked in hook (resume it by closing
// p.resumed); res receives breakLock's result.
func pausedBreaker(t *testing.T, path string, opt Options, hook *func(*Lock)) (b *Lock, p *pauser, judged lockState, res <-chan bool) {
	t.Helper()
	writeLockFile(t, path, holderJSON("deadnode", 1, 1))
	_, judged, err := readHolder(path)
	if err != nil {
		t.Fatal(err)
	}
	opt.Hostname = "breakerB"
	b = New(path, opt)
	p = newPauser(b)
	setHook(t, hook, p.hook)
	r := make(chan bool, 1)
	go func() { r <- b.breakLock(judged) }()
	<-p.paused
	return b, p, judged, r
}

// TestBreakLockSerializesBreakers is the schedule the torture run caught:
// breakers A and B judge the same dead lock, B passes its re-check and is
// paused before its rename. With the break lock, A cannot break meanwhile
// (it times out, the judged lock untouched), and once B has broken the lock
// A takes it. Negative control, break lock off: A breaks the judged lock
// and takes the lock while B is paused, and B's rename then moves A's live
// lock aside (a put-back), which is how two processes ended up inside the
// lock once a newcomer took the path in the put-back window.
func TestBreakLockSerializesBreakers(t *testing.T) {
	for _, withBreakLock := range []bool{true, false} {
		t.Run(fmt.Sprintf("breaklock=%v", withBreakLock), func(t *testing.T) {
			if !withBreakLock {
				noBreakLock(t)
			}
			path, opt := newTestLock(t)
			dir := filepath.Dir(path)
			b, p, judged, res := pausedBreaker(t, path, opt, &testHookBeforeRename)
			opt.Hostname = "breakerA"
			opt.Timeout = 300 * time.Millisecond
			a := New(path, opt)
			aErr := a.Acquire(context.Background())
			if withBreakLock {
				var te *TimeoutError
				if !errors.As(aErr, &te) {
					if aErr == nil {
						a.Release()
					}
					t.Fatalf("A broke the lock while B was inside its break: Acquire = %v", aErr)
				}
				if st, err := lstatStamp(path); err != nil || st != judged.stamp {
					t.Fatalf("the judged lock was touched while B held the break lock (err %v)", err)
				}
				close(p.resumed)
				if !<-res {
					t.Fatal("B did not break the judged lock")
				}
				if bl := breakLocks(t, dir); len(bl) != 0 {
					t.Errorf("break lock left after the break: %v", bl)
				}
				a.opt.Timeout = 10 * time.Second
				if err := a.Acquire(context.Background()); err != nil {
					t.Fatalf("A after B's break: %v", err)
				}
				if b.stats.putBacks.Load() != 0 || a.stats.breaks.Load() != 0 {
					t.Errorf("stats A %+v B %+v: want B's break only", a.Counters(), b.Counters())
				}
			} else {
				if aErr != nil {
					t.Fatalf("negative control: A could not break while B was paused: %v", aErr)
				}
				close(p.resumed)
				if <-res {
					t.Fatal("negative control: B reported the judged lock broken")
				}
				if b.stats.putBacks.Load() != 1 {
					t.Fatalf("negative control: B stats %+v, want B to have moved A's live lock (one put-back)", b.Counters())
				}
				t.Log("without the break lock, B moved A's live lock aside, as expected")
			}
			if err := a.Release(); err != nil {
				t.Errorf("A: Release = %v", err)
			}
			a.Close()
			b.Close()
			checkNothingLeft(t, dir)
		})
	}
}

// TestAbandonedBreakLock: a break lock in the way is respected while its
// holder may be working, and removed when its holder is provably dead on
// this host (at once) or when it has stayed unchanged for breakGrace
// (another host's, or unreadable): the abandoned lock behind it is then
// broken as usual.
func TestAbandonedBreakLock(t *testing.T) {
	t.Parallel()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	me := liveness.Self()
	cases := []struct {
		name    string
		content string
		stale   time.Duration // StaleTimeout, hence breakGrace
		needsID bool
	}{
		{"dead-on-this-host", "", time.Hour, true},
		{"other-host", holderJSON("othernode", 1, unixSeconds(time.Now())), 300 * time.Millisecond, false},
		{"unreadable", "", 300 * time.Millisecond, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needsID && (me.BootID == "" || me.PIDNS == 0) {
				t.Skip("no /proc identity on this system: no dead-holder rule")
			}
			path, opt := newTestLock(t)
			dir := filepath.Dir(path)
			opt.Hostname = "waiter"
			opt.StaleTimeout = tc.stale
			content := tc.content
			if tc.needsID {
				content = goRecord(t, opt.Hostname, dead.Process.Pid, unixSeconds(time.Now()), liveness.Process{StartTime: 1, BootID: me.BootID, PIDNS: me.PIDNS}, time.Second)
			}
			writeLockFile(t, path+BreakSuffix, content)
			writeLockFile(t, path, holderJSON("deadnode", 1, 1))
			// Live-looking break lock first: a waiter with a short timeout
			// and a long grace does not touch it.
			if !tc.needsID {
				o := opt
				o.StaleTimeout, o.Timeout = time.Hour, 200*time.Millisecond
				w := New(path, o)
				mustTimeout(t, w, "break lock within its grace")
				w.Close()
				if _, err := os.Lstat(path + BreakSuffix); err != nil {
					t.Fatalf("break lock removed within its grace: %v", err)
				}
			}
			opt.Timeout = 10 * time.Second
			w := New(path, opt)
			if err := w.Acquire(context.Background()); err != nil {
				t.Fatalf("abandoned break lock not removed: %v", err)
			}
			if w.stats.breaks.Load() != 1 {
				t.Errorf("breaks = %d, want the dead lock broken", w.stats.breaks.Load())
			}
			w.Release()
			w.Close()
			checkNothingLeft(t, dir)
		})
	}
}

// TestBreakerOvertakenBeforeBreakLock: B judged the dead lock, but A breaks
// it and takes the lock before B gets the break lock. B's re-check under
// the break lock sees the fresh lock and B moves nothing.
func TestBreakerOvertakenBeforeBreakLock(t *testing.T) {
	path, opt := newTestLock(t)
	dir := filepath.Dir(path)
	b, p, _, res := pausedBreaker(t, path, opt, &testHookBeforeBreakLock)
	opt.Hostname = "breakerA"
	a := New(path, opt)
	if err := a.Acquire(context.Background()); err != nil {
		t.Fatalf("A: %v", err)
	}
	close(p.resumed)
	if <-res {
		t.Error("B reported the judged lock broken")
	}
	if id, err := lstatID(path); err != nil || id != a.ticket.id {
		t.Fatalf("A's lock was moved (err %v)", err)
	}
	if b.stats.putBacks.Load() != 0 || b.stats.breaks.Load() != 0 {
		t.Errorf("B stats %+v: it moved something", b.Counters())
	}
	if err := a.Release(); err != nil {
		t.Errorf("A: Release = %v", err)
	}
	a.Close()
	b.Close()
	checkNothingLeft(t, dir)
}

// TestSweepRemovesProvablyOldLeftovers: tickets of other hosts and of old
// Python workers, and files a breaker moved aside, are removed once they
// have stayed unchanged for longer than StaleTimeout; younger ones and any
// file with a second link (a lock, a break lock) stay.
func TestSweepRemovesProvablyOldLeftovers(t *testing.T) {
	t.Parallel()
	dir := physTempDir(t)
	path := filepath.Join(dir, "cache.db.lock")
	l := New(path, Options{Hostname: "h1", StaleTimeout: 300 * time.Millisecond})
	old := map[string]string{
		".lock_h2_7_otherhost":           `{"hostname": "h2", "pid": 7, "timestamp": 1.0}`,
		".lock_h1_8_python":              `{"hostname": "h1", "pid": 8, "timestamp": 1.0}`,
		"cache.db.lock.stale.h2.7.abcd":  `{"hostname": "h2", "pid": 7, "timestamp": 1.0}`,
		".lock_h2_9_linked":              `{"hostname": "h2", "pid": 9, "timestamp": 1.0}`,
		"cache.db.lock.break.stale.h2.1": `{}`,
	}
	for name, content := range old {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(dir, ".lock_h2_9_linked"), filepath.Join(dir, "other.db.lock")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	young := filepath.Join(dir, ".lock_h2_10_young")
	if err := os.WriteFile(young, []byte(`{"hostname": "h2", "pid": 10, "timestamp": 1.0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Release()
	l.Close()
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{".lock_h2_10_young", ".lock_h2_9_linked", "other.db.lock"}
	if !slices.Equal(left, want) || l.stats.swept.Load() != 4 {
		t.Fatalf("left %v (swept %d), want %v", left, l.stats.swept.Load(), want)
	}
}
