package lock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/internal/pytest"
	"github.com/tirastore/tirastore/core/liveness"
)

// newTestLock returns a lock path in a fresh directory and fast options.
func newTestLock(t *testing.T) (string, Options) {
	t.Helper()
	dir := physTempDir(t)
	path := filepath.Join(dir, "cache.db.lock")
	return path, Options{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
}

// asides lists the files breakers moved aside, left in dir.
func asides(t *testing.T, dir string) []string {
	return filesIn(t, dir, func(name string) bool { return strings.Contains(name, ".lock.stale.") })
}

// tickets lists the ticket files left in dir.
func tickets(t *testing.T, dir string) []string {
	return filesIn(t, dir, func(name string) bool { return strings.HasPrefix(name, ".lock_") })
}

// filesIn lists the names in dir that match.
func filesIn(t *testing.T, dir string, match func(name string) bool) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if match(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// writeLockFile plants a lock file as some other holder would.
func writeLockFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func holderJSON(host string, pid int, ts float64) string {
	return fmt.Sprintf(`{"hostname": %q, "pid": %d, "timestamp": %s}`, host, pid, strconv.FormatFloat(ts, 'f', -1, 64))
}

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	l := New(path, opt)
	for i := 0; i < 3; i++ {
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("lock file missing while held: %v", err)
		}
		cs := tickets(t, filepath.Dir(path))
		if len(cs) != 1 {
			t.Fatalf("want exactly one ticket while held, got %v", cs)
		}
		cfi, err := os.Stat(filepath.Join(filepath.Dir(path), cs[0]))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(fi, cfi) {
			t.Fatal("lock file is not a hard link of the ticket")
		}
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("lock file still there after release: %v", err)
		}
		// The ticket is kept for the next Acquire (one per Lock).
		if cs := tickets(t, filepath.Dir(path)); len(cs) != 1 {
			t.Fatalf("tickets after release: %v, want just our reused one", cs)
		}
	}
	if err := l.Release(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if cs := tickets(t, filepath.Dir(path)); len(cs) != 0 {
		t.Fatalf("tickets left after Close: %v", cs)
	}
}

// TestStatsHeld: Held grows by each hold, from Acquire's return to the end
// of Release, and by nothing else (waiting, idling, a Release without a
// hold): it lies between the sleeps inside the holds and the time spent in
// Acquire-hold-Release as measured around the calls, which leaves out the
// idle time between the holds.
func TestStatsHeld(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	l := New(path, opt)
	defer l.Close()
	if h := l.Counters().Held; h != 0 {
		t.Fatalf("Held before any Acquire = %v", h)
	}
	const hold = 20 * time.Millisecond
	var low, high time.Duration
	for i := 0; i < 3; i++ {
		start := time.Now()
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(hold)
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
		low, high = low+hold, high+time.Since(start)
		time.Sleep(hold) // idle: must not count
		if got := l.Counters().Held; got < low || got > high {
			t.Fatalf("after %d holds: Held = %v, want in [%v, %v]", i+1, got, low, high)
		}
	}
	before := l.Counters().Held
	if err := l.Release(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release without a hold: %v", err)
	}
	if got := l.Counters(); got.Held != before || got.Acquired != 3 {
		t.Fatalf("stats after a Release without a hold: %+v, want Held %v and 3 acquisitions", got, before)
	}
}

func TestTicketNameModeAndContent(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	opt.Hostname = "node042"
	l := New(path, opt)
	before := unixSeconds(time.Now())
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	after := unixSeconds(time.Now())
	cs := tickets(t, filepath.Dir(path))
	re := regexp.MustCompile(`^\.lock_node042_` + strconv.Itoa(os.Getpid()) + `_[a-z0-9_]{8}$`)
	if len(cs) != 1 || !re.MatchString(cs[0]) {
		t.Fatalf("ticket names %v do not match %s", cs, re)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&^0o644 != 0 || fi.Mode().Perm()&0o044 == 0 {
		t.Errorf("ticket mode %v, want 0644 (readable by other users' waiters)", fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The original's three keys first, then the Go extras, then padding.
	re = regexp.MustCompile(`^\{"hostname": "node042", "pid": ` + strconv.Itoa(os.Getpid()) +
		`, "timestamp": [0-9]{10}\.[0-9]{6}, "start_time": [0-9]+, "boot_id": "[0-9a-f-]{36}", "pid_ns": [0-9]+` +
		`, "heartbeat_interval": 30\.0, "heartbeat": 0\} +$`)
	if !re.Match(data) {
		t.Fatalf("content %q does not match %s", data, re)
	}
	if size, _ := l.rec.recordSize(); len(data) != size {
		t.Errorf("record is %d bytes, want the fixed size %d", len(data), size)
	}
	h, err := ReadHolder(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.Hostname != "node042" || h.PID != os.Getpid() || h.Timestamp < before-0.001 || h.Timestamp > after+0.001 {
		t.Errorf("holder %+v, want node042/%d/[%f,%f]", h, os.Getpid(), before, after)
	}
}

// TestContentMatchesPythonJSON: python3 json.loads must read our records,
// padded or not, with the types the original expects, the timestamp to the
// microsecond and the extras as written.
func TestContentMatchesPythonJSON(t *testing.T) {
	t.Parallel()
	pytest.Python(t)
	type want struct {
		Text  string  `json:"text"`
		Host  string  `json:"host"`
		PID   int     `json:"pid"`
		TS    float64 `json:"ts"`
		Beats uint64  `json:"beats"`
	}
	var inputs []want
	me := liveness.Self()
	for _, c := range []struct {
		host string
		pid  int
		ts   float64
		proc liveness.Process
		hb   time.Duration
	}{
		{"node1", 42, 1764000000.123456, me, 30 * time.Second},
		{"node1", 1, 1764000000, liveness.Process{}, 0},
		{"n\u00f6d\u00e9-\U0001F600", 4194304, 1700000000.5, me, time.Millisecond},
		{`we"ird\host`, 7, 0.1, liveness.Process{StartTime: 1, BootID: `"\`, PIDNS: 2}, 1500 * time.Millisecond},
		{"x", 99, 1.5e-7, me, 0},
	} {
		r := &holderRecord{hostname: c.host, pid: c.pid, proc: c.proc, every: c.hb}
		size, _ := r.recordSize()
		for _, beats := range []uint64{0, 1, 12345, math.MaxUint64} {
			b, err := r.padded(c.ts, beats, size)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != size {
				t.Fatalf("%q: %d bytes, want %d", b, len(b), size)
			}
			inputs = append(inputs, want{string(b), c.host, c.pid, c.ts, beats})
		}
	}
	for i := 0; i < 200; i++ {
		ts := unixSeconds(time.Now().Add(time.Duration(i) * 7777777 * time.Nanosecond))
		b, _ := (&holderRecord{hostname: "h", pid: os.Getpid(), proc: me, every: time.Second}).encode(ts, uint64(i))
		inputs = append(inputs, want{string(b), "h", os.Getpid(), ts, uint64(i)})
	}
	// A live lock file too.
	path, opt := newTestLock(t)
	l := New(path, opt)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	live, _ := os.ReadFile(path)
	h, _ := ReadHolder(path)
	l.Release()
	inputs = append(inputs, want{string(live), h.Hostname, h.PID, h.Timestamp, 0})

	script := `
import json, sys
bad = []
for w in json.load(sys.stdin):
    d = json.loads(w["text"])
    keys = list(d)
    ok = (keys[:3] == ["hostname", "pid", "timestamp"] and d["hostname"] == w["host"]
          and type(d["pid"]) is int and d["pid"] == w["pid"]
          and type(d["timestamp"]) is float and abs(d["timestamp"] - w["ts"]) <= 5e-7)
    if "heartbeat" in d:
        ok = ok and d["heartbeat"] == w["beats"] and type(d["heartbeat_interval"]) is float
    if "start_time" in d:
        ok = ok and type(d["start_time"]) is int and type(d["pid_ns"]) is int and type(d["boot_id"]) is str
    if not ok:
        bad.append([w["text"], repr(d)])
print(json.dumps(bad))
`
	var bad [][2]string
	pytest.RunJSON(t, script, inputs, &bad)
	for _, b := range bad {
		t.Errorf("ours %q, json.loads gave %s", b[0], b[1])
	}
	// And our own parser reads back what we wrote.
	for _, w := range inputs {
		h, err := parseHolder([]byte(w.Text))
		if err != nil || h.Hostname != w.Host || h.PID != w.PID || math.Abs(h.Timestamp-w.TS) > 5e-7 {
			t.Errorf("parseHolder(%q) = %+v, %v", w.Text, h, err)
		}
	}
}

func TestTimeoutErrorText(t *testing.T) {
	t.Parallel()
	e := &TimeoutError{
		Path:   "/x/cache.db.lock",
		Holder: &Holder{Hostname: "node042", PID: 1234, Timestamp: unixSeconds(time.Now()) - 8.2},
		Waited: 12 * time.Second,
	}
	re := regexp.MustCompile(`^timed out after 12\.0s waiting for lock /x/cache\.db\.lock held by host node042 pid 1234 for 8\.[23]s$`)
	if !re.MatchString(e.Error()) {
		t.Errorf("got %q", e.Error())
	}
	e.Unchanged = 3 * time.Second
	re = regexp.MustCompile(`^timed out after 12\.0s waiting for lock /x/cache\.db\.lock held by host node042 pid 1234 for 8\.[23]s \(lock file unchanged for 3\.0s as seen here\)$`)
	if !re.MatchString(e.Error()) {
		t.Errorf("got %q", e.Error())
	}
	e.Holder = nil
	if got, want := e.Error(), "timed out after 12.0s waiting for lock /x/cache.db.lock (holder unknown)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestTimeoutWhileHeldByOther(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	a := New(path, opt)
	if err := a.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	opt.Timeout = 150 * time.Millisecond
	opt.Hostname = "other"
	b := New(path, opt)
	start := time.Now()
	err := b.Acquire(context.Background())
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("want *TimeoutError, got %v", err)
	}
	if el := time.Since(start); el < 150*time.Millisecond || el > 10*time.Second {
		t.Errorf("returned after %v, want about 150ms", el)
	}
	if te.Holder == nil || te.Holder.PID != os.Getpid() || te.Holder.Hostname != a.opt.Hostname {
		t.Errorf("holder %+v, want ours", te.Holder)
	}
	if te.Path != path || te.Waited < 150*time.Millisecond {
		t.Errorf("bad error fields: %+v", te)
	}
	t.Log(te)
	// a's ticket is the lock; b keeps its ticket for its next Acquire.
	if cs := tickets(t, filepath.Dir(path)); len(cs) != 2 {
		t.Errorf("tickets %v, want the holder's and the waiter's", cs)
	}
	b.Close()
	if cs := tickets(t, filepath.Dir(path)); len(cs) != 1 {
		t.Errorf("timed-out ticket not removed by Close: %v", cs)
	}
}

func TestContextCancel(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	a := New(path, opt)
	if err := a.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	// Long backoff: cancellation must not wait for it.
	opt.MinBackoff, opt.MaxBackoff = 30*time.Second, 60*time.Second
	b := New(path, opt)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	err := b.Acquire(ctx)
	if !errors.Is(err, context.Canceled) || err != context.Canceled {
		t.Fatalf("want ctx.Err() itself, got %v", err)
	}
	// Generous: shared CI machines stall goroutines for a second or more.
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("cancel took %v to be noticed", el)
	}
	// Already cancelled: returns at once, touches nothing.
	if err := b.Acquire(ctx); err != context.Canceled {
		t.Fatalf("got %v", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer dcancel()
	if err := b.Acquire(dctx); err != context.DeadlineExceeded {
		t.Fatalf("got %v", err)
	}
	if cs := tickets(t, filepath.Dir(path)); len(cs) > 2 {
		t.Errorf("tickets %v, want at most the holder's and the waiter's", cs)
	}
	b.Close()
	if cs := tickets(t, filepath.Dir(path)); len(cs) != 1 {
		t.Errorf("cancelled tickets not removed by Close: %v", cs)
	}
}

// TestInProcessWait: goroutines sharing one Lock wait on the in-process mutex,
// which honours ctx and Timeout too.
func TestInProcessWait(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	opt.Timeout = 100 * time.Millisecond
	l := New(path, opt)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() { errc <- l.Acquire(context.Background()) }()
	var te *TimeoutError
	if err := <-errc; !errors.As(err, &te) || te.Holder == nil {
		t.Fatalf("want *TimeoutError naming the holder, got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { errc <- l.Acquire(ctx) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	go func() { errc <- l.Acquire(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("waiter did not get the lock: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestGoroutinesExclusive: many goroutines, one shared Lock and several
// separate Locks on the same file; the race detector checks the counter.
func TestGoroutinesExclusive(t *testing.T) {
	t.Parallel()
	var tr tracker
	path, opt := newTestLock(t)
	opt.MinBackoff, opt.MaxBackoff = 50*time.Microsecond, time.Millisecond
	shared := tr.New(t, path, opt)
	var (
		counter int
		inside  int32
		wg      sync.WaitGroup
		mu      sync.Mutex // only to report overlap without a data race
		overlap bool
	)
	for g := 0; g < 8; g++ {
		l := shared
		if g%2 == 1 {
			l = tr.New(t, path, opt) // a separate Lock: only the file protocol protects
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if err := l.Acquire(context.Background()); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				overlap = overlap || inside > 1
				mu.Unlock()
				c := counter
				time.Sleep(10 * time.Microsecond)
				counter = c + 1
				mu.Lock()
				inside--
				mu.Unlock()
				if err := l.Release(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlap || counter != 800 {
		t.Fatalf("counter %d (want 800), overlap %v", counter, overlap)
	}
	tr.closeAll()
	if cs := tickets(t, filepath.Dir(path)); len(cs) != 0 {
		t.Errorf("tickets left: %v", cs)
	}
}

func TestStaleLockBroken(t *testing.T) {
	t.Parallel()
	var tr tracker
	path, opt := newTestLock(t)
	now := unixSeconds(time.Now())
	// Older than the default 600 s: broken.
	writeLockFile(t, path, holderJSON("deadnode", 1, now-601))
	l := tr.New(t, path, opt)
	l.opt.Timeout = 5 * time.Second
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("stale lock not broken: %v", err)
	}
	h, err := ReadHolder(path)
	if err != nil || h.PID != os.Getpid() {
		t.Fatalf("lock is not ours after breaking: %+v %v", h, err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}

	// Younger than StaleTimeout: respected.
	writeLockFile(t, path, holderJSON("livenode", 2, now-5))
	opt.Timeout = 100 * time.Millisecond
	err = tr.New(t, path, opt).Acquire(context.Background())
	var te *TimeoutError
	if !errors.As(err, &te) || te.Holder == nil || te.Holder.Hostname != "livenode" {
		t.Fatalf("fresh lock: want timeout naming livenode, got %v", err)
	}
	// Same file, shorter StaleTimeout: broken (within seconds: the
	// timeout is no longer what is tested, and a loaded machine needs
	// more than 100 ms to break a lock).
	opt.StaleTimeout, opt.Timeout = time.Second, 10*time.Second
	l = tr.New(t, path, opt)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("custom StaleTimeout: %v", err)
	}
	l.Release()

	// Integer timestamps (a Python int) count too; negative StaleTimeout never
	// breaks.
	writeLockFile(t, path, `{"hostname": "n", "pid": 3, "timestamp": 1000}`)
	opt.StaleTimeout, opt.Timeout = -1, 100*time.Millisecond
	if err := tr.New(t, path, opt).Acquire(context.Background()); !errors.As(err, &te) {
		t.Fatalf("StaleTimeout<0 must never break: %v", err)
	}
	opt.StaleTimeout, opt.Timeout = 0, 10*time.Second
	l = tr.New(t, path, opt)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("int timestamp: %v", err)
	}
	l.Release()
	tr.closeAll()
	if cs := tickets(t, filepath.Dir(path)); len(cs) != 0 {
		t.Errorf("tickets left: %v", cs)
	}
}

func TestUnparseableLockNeverBroken(t *testing.T) {
	t.Parallel()
	var tr tracker
	for _, content := range []string{
		"", "garbage", "{", "[]", "{}", `{"hostname": "n", "pid": 1}`,
		`{"hostname": "n", "pid": 1, "timestamp": "1000"}`,
		`{"hostname": "n", "pid": 1, "timestamp": null}`,
		`{"hostname": "n", "pid": 1, "timestamp": NaN}`,
		`{"hostname": "n", "pid": 1, "timestamp": Infinity}`,
		"\xff\xfe{}",
	} {
		path, opt := newTestLock(t)
		writeLockFile(t, path, content)
		opt.StaleTimeout = time.Nanosecond // anything parseable is stale
		opt.Timeout = 60 * time.Millisecond
		err := tr.New(t, path, opt).Acquire(context.Background())
		var te *TimeoutError
		if !errors.As(err, &te) {
			t.Errorf("%q: want timeout, got %v", content, err)
			continue
		}
		if got, _ := os.ReadFile(path); string(got) != content {
			t.Errorf("%q: lock file changed to %q", content, got)
		}
		tr.closeAll()
		if cs := tickets(t, filepath.Dir(path)); len(cs) != 0 {
			t.Errorf("%q: tickets left: %v", content, cs)
		}
	}
}

func TestReleaseKeepsForeignLock(t *testing.T) {
	t.Parallel()
	var tr tracker
	path, opt := newTestLock(t)
	l := tr.New(t, path, opt)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Someone judged us stale, broke the lock and took it.
	os.Remove(path)
	foreign := holderJSON("thief", 77, unixSeconds(time.Now()))
	writeLockFile(t, path, foreign)
	if err := l.Release(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Release: %v, want ErrLockLost", err)
	}
	if got, _ := os.ReadFile(path); string(got) != foreign {
		t.Fatalf("foreign lock touched: %q", got)
	}
	tr.closeAll()
	if cs := tickets(t, filepath.Dir(path)); len(cs) != 0 {
		t.Errorf("ticket left: %v", cs)
	}
	// And a lock that simply vanished.
	os.Remove(path)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if err := l.Release(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Release: %v, want ErrLockLost", err)
	}
	// The Lock is usable again.
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestBreakLockChecksInode: a judgement about one file must not remove a
// different file that has since taken its name, even with the same content
// and, often, the same inode number.
func TestBreakLockChecksInode(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	l := New(path, opt)
	old := holderJSON("old", 1, 1)
	writeLockFile(t, path, old)
	_, st, err := readHolder(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	// The freed inode number is typically reused at once by the next file:
	// ctime and mtime must tell them apart.
	time.Sleep(10 * time.Millisecond) // coarse-timestamp filesystems
	writeLockFile(t, path, old)
	if nst, _ := lstatStamp(path); nst.id == st.id {
		t.Log("inode number reused")
	}
	if l.breakLock(st) {
		t.Fatal("breakLock reported success on a replaced lock")
	}
	if got, _ := os.ReadFile(path); string(got) != old {
		t.Fatal("replacement lock removed")
	}
	_, st, _ = readHolder(path)
	if !l.breakLock(st) {
		t.Fatal("same inode not broken")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("lock still there")
	}
	if asides(t, filepath.Dir(path)) != nil {
		t.Fatal("aside files left")
	}
}

// TestLinkCountMeansHeld: link() failing although it did link (the lost NFS
// reply case) must count as success.
func TestLinkCountMeansHeld(t *testing.T) {
	t.Parallel()
	path, _ := newTestLock(t)
	c, err := newTicket(filepath.Dir(path), &holderRecord{hostname: "h", pid: os.Getpid()}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.remove()
	if err := os.Link(c.path, path); err != nil { // the "first" link
		t.Fatal(err)
	}
	held, err := tryLink(c, path) // the retransmit: EEXIST
	if err != nil || !held {
		t.Fatalf("held=%v err=%v, want held", held, err)
	}
	os.Remove(path)
	writeLockFile(t, path, "x")
	if held, err := tryLink(c, path); err != nil || held {
		t.Fatalf("foreign lock: held=%v err=%v", held, err)
	}
}

func TestAcquireErrors(t *testing.T) {
	t.Parallel()
	l := New(filepath.Join(t.TempDir(), "no", "such", "dir", "x.db.lock"), Options{Timeout: time.Second})
	err := l.Acquire(context.Background())
	var te *TimeoutError
	if err == nil || errors.As(err, &te) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing dir: want an immediate not-exist error, got %v", err)
	}
	// The in-process mutex must have been released: the same Lock acquires
	// once its directory exists (a leaked mutex: a wait until ctx ends).
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Acquire(ctx); err != nil {
		t.Fatalf("after a failed Acquire: %v", err)
	}
	l.Release()
	l.Close()
	dir := t.TempDir()
	l = New(filepath.Join(dir, "x.db.lock"), Options{})
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 { // root ignores directory permissions
		if err := l.Acquire(context.Background()); !errors.Is(err, os.ErrPermission) {
			t.Fatalf("read-only dir: %v", err)
		}
	}
	os.Chmod(dir, 0o700)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Release()
}

func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	l := New("/x", Options{MinBackoff: time.Millisecond, MaxBackoff: 300 * time.Millisecond})
	for attempt := 0; attempt < 100; attempt++ {
		ceil := min(300*time.Millisecond, time.Millisecond<<min(attempt, 20))
		for i := 0; i < 50; i++ {
			if d := l.backoff(attempt); d < 0 || d > ceil {
				t.Fatalf("backoff(%d) = %v, want [0, %v]", attempt, d, ceil)
			}
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	l := New("/x", Options{})
	if l.opt.StaleTimeout != 600*time.Second || l.opt.Timeout != 600*time.Second ||
		l.opt.MinBackoff != 5*time.Millisecond || l.opt.MaxBackoff != 500*time.Millisecond ||
		l.opt.HeartbeatInterval != 30*time.Second {
		t.Errorf("defaults: %+v", l.opt)
	}
	for _, c := range []struct{ stale, hb, want time.Duration }{
		{time.Minute, 0, 15 * time.Second},
		{-1, 0, 30 * time.Second},
		{time.Hour, 0, 30 * time.Second},
		{time.Minute, time.Second, time.Second},
		{time.Minute, -1, -1},
		{time.Minute, time.Nanosecond, time.Millisecond},
	} {
		l := New("/x", Options{StaleTimeout: c.stale, HeartbeatInterval: c.hb})
		if l.opt.HeartbeatInterval != c.want {
			t.Errorf("StaleTimeout %v HeartbeatInterval %v: got %v, want %v", c.stale, c.hb, l.opt.HeartbeatInterval, c.want)
		}
		if (l.rec.every > 0) != (c.want > 0) {
			t.Errorf("record heartbeat %v for interval %v", l.rec.every, c.want)
		}
	}
	if h, _ := os.Hostname(); l.opt.Hostname != h {
		t.Errorf("hostname %q, want %q", l.opt.Hostname, h)
	}
}

// tracker remembers the Locks a test makes, so that it can Close them (which
// removes their reused ticket files) before counting leftover tickets.
type tracker []*Lock

func (tr *tracker) New(t testing.TB, path string, opt Options) *Lock {
	l := New(path, opt)
	*tr = append(*tr, l)
	return l
}

func (tr *tracker) closeAll() {
	for _, l := range *tr {
		l.Close()
	}
}
