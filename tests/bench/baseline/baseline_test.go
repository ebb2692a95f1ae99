package baseline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/sqlitefile"
)

const (
	src   = "void blur() { /* body */ for (int i = 0; i < N; i++) out[i] = in[i]; }"
	sched = "S(L0,L1,4,8,comps=['c1'])"
	cpuID = "baseline-test-cpu"
)

var ctx = context.Background()

// helperEnv selects a helper-process role in TestMain (multi-process tests
// re-execute this test binary).
const helperEnv = "TIRASTORE_BASELINE_HELPER"

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		if err := helper(role); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper runs one role: "lock <lockPath> <counterFile> <n>" increments a
// counter n times under the lock, checking that nobody else is inside;
// "record <db> <worker> <n>" records n unique schedules through a Store.
func helper(role string) error {
	f := strings.Fields(role)
	n, err := strconv.Atoi(f[3])
	if err != nil {
		return err
	}
	switch f[0] {
	case "lock":
		l := NewLock(f[1], LockOptions{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Timeout: time.Minute})
		inside := f[2] + ".inside"
		for i := 0; i < n; i++ {
			h, err := l.Acquire()
			if err != nil {
				return err
			}
			m, err := os.OpenFile(inside, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("two holders at once: %w", err)
			}
			m.Close()
			b, err := os.ReadFile(f[2])
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			c, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			time.Sleep(100 * time.Microsecond) // widen the window a race would need
			if err := os.WriteFile(f[2], []byte(strconv.Itoa(c+1)), 0o644); err != nil {
				return err
			}
			if err := os.Remove(inside); err != nil {
				return err
			}
			if err := h.Release(); err != nil {
				return err
			}
		}
		if st := l.Stats(); st.Acquired != int64(n) || st.Links < int64(n) {
			return fmt.Errorf("stats %+v after %d acquisitions", st, n)
		}
		return nil
	case "record":
		s, err := Open(f[1], Options{CPUModel: cpuID, SlurmCPUs: "N/A",
			Lock: LockOptions{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Timeout: time.Minute}})
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			ok, err := s.Record("p", src, fmt.Sprintf("T2(L0,L1,%s,%d,comps=['c1'])", f[2], i), true, []float64{0.5}, false)
			if err != nil || !ok {
				return fmt.Errorf("record %d: %v %v", i, ok, err)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

func runHelpers(t *testing.T, roles []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, len(roles))
	outs := make([]*strings.Builder, len(roles))
	for i, r := range roles {
		cmds[i] = exec.Command(exe, "-test.run=^$")
		cmds[i].Env = append(os.Environ(), helperEnv+"="+r)
		outs[i] = &strings.Builder{}
		cmds[i].Stderr = outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("helper %q: %v\n%s", roles[i], err, outs[i])
		}
	}
}

func openCore(t *testing.T, path string) *core.Store {
	t.Helper()
	st, err := core.Open(ctx, path, core.Options{CPUModel: cpuID, SlurmCPUs: "N/A"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if !st.WritesAllowed() {
		t.Fatalf("core: writes disabled: %s", st.Warning())
	}
	return st
}

func openBaseline(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{CPUModel: cpuID, SlurmCPUs: "N/A"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.WritesAllowed() {
		t.Fatal("baseline: writes disabled")
	}
	return s
}

func numbers(v any) []string {
	list, _ := v.([]any)
	out := []string{}
	for _, x := range list {
		out = append(out, string(x.(pyjson.Number)))
	}
	return out
}

// The baseline creates the database; the engine opens it, finds what the
// baseline wrote with identical stored text, and writes into it.
func TestBaselineCreatesEngineUses(t *testing.T) {
	db := filepath.Join(t.TempDir(), "a", "b", "cache.db")
	b := openBaseline(t, db)
	if ok, err := b.Record("blur", src, "S( L0 , L1,4,8,comps=[\"c1\"])", true, []float64{0.1, 1.0, 1e-05}, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	n, err := b.RecordMany("blur", src, []Entry{
		{Schedule: "I(L0,L1,comps=['c1'])", IsLegal: false},
		{Schedule: "R(L0,comps=['c1'])", IsLegal: true, ExecutionTimes: []float64{0.03, 0.031}},
	}, false)
	if err != nil || n != 2 {
		t.Fatal(n, err)
	}
	if _, err := os.Stat(db + ".lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("lock left behind: %v", err)
	}

	c := openCore(t, db)
	r, err := c.Lookup(ctx, "blur", src, sched)
	if err != nil || r == nil {
		t.Fatalf("engine does not find the baseline's record: %v %v", r, err)
	}
	if !r.IsLegal || !reflect.DeepEqual(r.ExecutionTimes, []float64{0.1, 1.0, 1e-05}) || r.Schedule != sched {
		t.Fatalf("engine reads %+v", r)
	}
	raw, err := c.Get(ctx, keys.RecordKey(keys.ProgramHash(src), sched))
	if err != nil || raw == nil {
		t.Fatal(raw, err)
	}
	if want := `{"is_legal":true,"execution_times":[0.1,1.0,1e-05]}`; raw.ResultJSON != want {
		t.Fatalf("result_json %s, want %s", raw.ResultJSON, want)
	}
	if n, err := c.Count(ctx); err != nil || n != 3 {
		t.Fatalf("engine counts %d, %v", n, err)
	}
	if ok, err := c.Record(ctx, "blur", src, core.Measurement{Schedule: "F(L0,comps=['c1'])", IsLegal: true, ExecutionTimes: core.Times(2)}, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, err := b.Contains("blur", src, "F(L0,comps=['c1'])"); err != nil || !ok {
		t.Fatalf("baseline does not see the engine's record: %v %v", ok, err)
	}
}

// The engine creates the database; the baseline opens it, reads, writes,
// and a measurement written by either side is stored as the same text.
func TestEngineCreatesBaselineUses(t *testing.T) {
	db := filepath.Join(t.TempDir(), "cache.db")
	c := openCore(t, db)
	if ok, err := c.Record(ctx, "blur", src, core.Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: core.Times(0.1, 1.0, 1e-05)}, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	b := openBaseline(t, db)
	r, err := b.Lookup("blur", src, sched)
	if err != nil || r == nil {
		t.Fatalf("baseline does not find the engine's record: %v %v", r, err)
	}
	if r.IsLegal != true || !reflect.DeepEqual(numbers(r.ExecutionTimes), []string{"0.1", "1.0", "1e-05"}) {
		t.Fatalf("baseline reads %+v", r)
	}
	if r, err := b.Lookup("blur", src, "F(L0,comps=['c1'])"); err != nil || r != nil {
		t.Fatalf("miss: %v %v", r, err)
	}
	// Record existing without overwrite: false; with overwrite: true.
	if ok, err := b.Record("blur", src, sched, true, []float64{9}, false); err != nil || ok {
		t.Fatalf("record existing: %v %v", ok, err)
	}
	if ok, err := b.Record("blur", src, sched, true, []float64{0.1, 1.0, 1e-05}, true); err != nil || !ok {
		t.Fatalf("overwrite: %v %v", ok, err)
	}
	const other = "U(L2,4,comps=['c1'])"
	if ok, err := b.Record("blur", src, other, true, []float64{0.1, 1.0, 1e-05}, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	ph := keys.ProgramHash(src)
	r1, err := c.Get(ctx, keys.RecordKey(ph, sched))
	if err != nil || r1 == nil {
		t.Fatal(r1, err)
	}
	r2, err := c.Get(ctx, keys.RecordKey(ph, other))
	if err != nil || r2 == nil {
		t.Fatal(r2, err)
	}
	if r1.ResultJSON != r2.ResultJSON {
		t.Fatalf("same measurement, different text: engine %s, baseline %s", r1.ResultJSON, r2.ResultJSON)
	}
	if r1.CreationDate == r1.UpdateDate {
		t.Fatalf("overwrite kept no creation date: %+v", r1)
	}
	if n, err := b.Count(); err != nil || n != 2 {
		t.Fatalf("count %d %v", n, err)
	}
	if _, err := b.Record("blur", src, "S(L0)", true, []float64{1}, false); err == nil || !strings.Contains(err.Error(), "Invalid schedule string") {
		t.Fatalf("invalid schedule: %v", err)
	}
}

// The lock file is a link of a claim holding the original's JSON, both
// are gone after release, and the lock path is the engine's.
func TestLockFiles(t *testing.T) {
	dir := t.TempDir()
	lp, err := sqlitefile.LockPathFor(filepath.Join(dir, "cache.db"))
	if err != nil {
		t.Fatal(err)
	}
	l := NewLock(lp, LockOptions{})
	h, err := l.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(lp)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	prefix := fmt.Sprintf(`{"hostname": %q, "pid": %d, "timestamp": `, host, os.Getpid())
	if !strings.HasPrefix(string(b), prefix) || !strings.HasSuffix(string(b), "}") {
		t.Fatalf("lock content %s", b)
	}
	ents, _ := os.ReadDir(dir)
	claims := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), fmt.Sprintf(".lock_%s_%d_", host, os.Getpid())) {
			claims++
		}
	}
	if claims != 1 {
		t.Fatalf("%d claims in %v", claims, ents)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// A lock whose timestamp is older than the stale timeout is broken; an
// unparseable one never is.
func TestStaleLock(t *testing.T) {
	dir := t.TempDir()
	lp := filepath.Join(dir, "cache.db.lock")
	old := fmt.Sprintf(`{"hostname": "elsewhere", "pid": 1, "timestamp": %d.5}`, time.Now().Add(-time.Hour).Unix())
	if err := os.WriteFile(lp, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	l := NewLock(lp, LockOptions{StaleTimeout: time.Minute, Timeout: 10 * time.Second})
	h, err := l.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if st := l.Stats(); st.Breaks != 1 || st.Acquired != 1 || st.Links != 2 {
		t.Fatalf("stats %+v", st)
	}
	if err := os.WriteFile(lp, []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	l = NewLock(lp, LockOptions{StaleTimeout: time.Nanosecond, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Timeout: 100 * time.Millisecond})
	var te *TimeoutError
	if _, err := l.Acquire(); !errors.As(err, &te) {
		t.Fatalf("unparseable lock: %v", err)
	}
}

// Several processes increment a counter under the lock: nobody is ever
// inside at the same time and no increment is lost.
func TestLockExcludesProcesses(t *testing.T) {
	dir := t.TempDir()
	lp := filepath.Join(dir, "cache.db.lock")
	counter := filepath.Join(dir, "counter")
	const procs, n = 4, 40
	roles := make([]string, procs)
	for i := range roles {
		roles[i] = fmt.Sprintf("lock %s %s %d", lp, counter, n)
	}
	runHelpers(t, roles)
	b, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := strconv.Atoi(string(b)); got != procs*n {
		t.Fatalf("counter %d, want %d", got, procs*n)
	}
}

// Several processes record through baseline Stores while one engine store
// reads: every record arrives.
func TestRecordingProcesses(t *testing.T) {
	db := filepath.Join(t.TempDir(), "cache.db")
	c := openCore(t, db)
	const procs, n = 3, 15
	roles := make([]string, procs)
	for i := range roles {
		roles[i] = fmt.Sprintf("record %s %d %d", db, i, n)
	}
	runHelpers(t, roles)
	if got, err := c.Count(ctx); err != nil || got != procs*n {
		t.Fatalf("count %d (%v), want %d", got, err, procs*n)
	}
}
