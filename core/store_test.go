package core

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/pyjson"
)

var ctx = context.Background()

func openTemp(t *testing.T, opts Options) *Store {
	t.Helper()
	if opts.CPUModel == "" {
		opts.CPUModel = "Test CPU"
	}
	st, err := Open(ctx, filepath.Join(t.TempDir(), "cache.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

const src = "void blur() { /* c */ }"
const sched = "S(L0,L1,4,8,comps=['c1'])"

func TestRecordLookupRoundTrip(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{SourceProject: "p1"})
	wrote, err := st.Record(ctx, "blur", src, Measurement{Schedule: " S( L0, L1,4,8,comps=[\"c1\"])", IsLegal: true,
		ExecutionTimes: []pyjson.Number{"1", "1.0", "0.042", "1e-05"}}, false)
	if err != nil || !wrote {
		t.Fatalf("record: %v %v", wrote, err)
	}
	r, err := st.Lookup(ctx, "other name", src, sched)
	if err != nil || r == nil {
		t.Fatalf("lookup: %v %v", r, err)
	}
	if !r.IsLegal || r.Schedule != sched || r.SourceProject != "p1" || len(r.ExecutionTimes) != 4 || r.ExecutionTimes[3] != 1e-05 {
		t.Fatalf("unexpected result %+v", r)
	}
	// The stored values pass through as stored (1 stays an int, 1.0 a
	// float): what the reply shows (capi/replies_test.go checks its shape).
	legal, times := r.Stored()
	if b, _ := pyjson.Marshal([]any{legal, times}, pyjson.Compact); string(b) != `[true,[1,1.0,0.042,1e-05]]` {
		t.Fatalf("stored: %s", b)
	}
	// A second record without overwrite writes nothing.
	if wrote, err := st.Record(ctx, "blur", src, Measurement{Schedule: sched, IsLegal: false}, false); wrote || err != nil {
		t.Fatalf("second record: %v %v", wrote, err)
	}
	raw, err := st.Get(ctx, keys.RecordKey(keys.ProgramHash(src), sched))
	if err != nil || raw == nil {
		t.Fatal(raw, err)
	}
	if raw.ResultJSON != `{"is_legal":true,"execution_times":[1,1.0,0.042,1e-05]}` || raw.ProgramName != "blur" {
		t.Fatalf("raw %+v", raw)
	}
	if miss, err := st.Lookup(ctx, "blur", src, "U(L0,4,comps=['c1'])"); miss != nil || err != nil {
		t.Fatalf("miss: %v %v", miss, err)
	}
}

func TestRecordValidation(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{})
	cases := []struct {
		name, prog, source string
		m                  Measurement
		want               string
	}{
		{"missing times", "p", src, Measurement{Schedule: sched, IsLegal: true}, "execution_times must be provided (non-empty list) when is_legal is True."},
		{"empty times", "p", src, Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: []pyjson.Number{}}, "execution_times must be provided"},
		{"nan", "p", src, Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: []pyjson.Number{"NaN"}}, "finite"},
		{"inf", "p", src, Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: []pyjson.Number{"1e999"}}, "finite"},
		{"bad schedule", "p", src, Measurement{Schedule: "S(L0)", IsLegal: false}, "Invalid schedule string: Malformed S transformation: 'S(L0)'"},
		{"nul", "p\x00", src, Measurement{Schedule: sched}, "NUL"},
		{"utf8", "p", "\xff", Measurement{Schedule: sched}, "UTF-8"},
	}
	for _, c := range cases {
		_, err := st.Record(ctx, c.prog, c.source, c.m, false)
		if KindOf(err) != KindValue || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v (kind %v), want ValueError containing %q", c.name, err, KindOf(err), c.want)
		}
	}
	n, err := st.RecordMany(ctx, "p", src, []Measurement{
		{Schedule: sched, IsLegal: false},
		{Schedule: "X(L0)", IsLegal: false},
	}, false)
	if n != 0 || KindOf(err) != KindValue || !strings.HasPrefix(err.Error(), "schedules[1]: Invalid schedule string: Unknown transformation: 'X'") {
		t.Fatalf("record_many: %d %v", n, err)
	}
	if c, _ := st.Count(ctx); c != 0 {
		t.Fatalf("something was written: %d", c)
	}
}

func TestCPUMismatchDisablesWrites(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache.db")
	a, err := Open(ctx, path, Options{CPUModel: "X", SlurmCPUs: "4"})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := Open(ctx, path, Options{CPUModel: "Y", SlurmCPUs: "4"})
	if err != nil {
		t.Fatal(err)
	}
	if b.WritesAllowed() || !strings.Contains(b.Warning(), "CPU model: DB='X'  local='Y'") {
		t.Fatalf("writes %v warning %q", b.WritesAllowed(), b.Warning())
	}
	_, err = b.Record(ctx, "p", src, Measurement{Schedule: sched}, false)
	if KindOf(err) != KindPermission || !strings.Contains(err.Error(), "CPU metadata mismatch") {
		t.Fatalf("record with mismatch: %v", err)
	}
	c, err := Open(ctx, path, Options{CPUModel: "X", SlurmCPUs: "8"})
	if err != nil || c.WritesAllowed() {
		t.Fatalf("slurm mismatch not detected: %v", err)
	}
	d, err := Open(ctx, path, Options{CPUModel: "Y", SlurmCPUs: "8", AllowCPUMismatch: true})
	if err != nil || !d.WritesAllowed() {
		t.Fatalf("allow_cpu_mismatch: %v", err)
	}
}

func TestClosedStore(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{})
	st.Close()
	st.Close()
	if _, err := st.Count(ctx); !errors.Is(err, ErrClosed) || KindOf(err) != KindClosed {
		t.Fatalf("count after close: %v", err)
	}
}

func TestNotADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("this is not sqlite ", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, path, Options{CPUModel: "X"})
	if KindOf(err) != KindDatabase || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v", err)
	}
}

// A URL is not a file path: it is refused, naming it, and nothing is
// created (the original made a directory named after the scheme). A path
// that only contains "://" after something that is no URL scheme is a path.
func TestURLRefused(t *testing.T) {
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	for _, url := range []string{"mysql://u:secret@h/db", "sqlite+x://a"} {
		_, err := Open(ctx, url, Options{CPUModel: "X"})
		if KindOf(err) != KindValue || !strings.Contains(err.Error(), "is a URL of a kind") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v, want a ValueError saying it is a URL, without its password", url, err)
		}
	}
	// A PostgreSQL URL names a server: with none there, the open fails
	// soon (the open's short retries), creating nothing here.
	for _, url := range []string{"postgresql://u@/tira?host=/nonexistent-dir&connect_timeout=2", "postgres://no-such-host.invalid:5432/db"} {
		t0 := time.Now()
		_, err := Open(ctx, url, Options{CPUModel: "X"})
		if KindOf(err) != KindOperational || time.Since(t0) > 15*time.Second {
			t.Errorf("%s: %v after %v, want an OperationalError within the open's retries", url, err, time.Since(t0))
		}
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("refused URLs left %v in the working directory", names)
	}
	st, err := Open(ctx, "not a scheme://cache.db", Options{CPUModel: "X"})
	if err != nil {
		t.Fatalf("a path with \"://\" after a space: %v", err)
	}
	st.Close()
}

// newDatabaseFile creates a database of this engine (of CPU model X) in
// a directory of the test's own, closed, and returns its path.
func newDatabaseFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache.db")
	st, err := Open(ctx, path, Options{CPUModel: "X"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	return path
}

// execRaw runs one statement on the database file at path with the stdlib
// driver, as another tool (or anyone who may write the file) would.
func execRaw(t *testing.T, path, query string, args ...any) {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatal(err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	path := newDatabaseFile(t)
	execRaw(t, path, `UPDATE db_meta SET value = '3' WHERE key = 'schema_version'`)
	_, err := Open(ctx, path, Options{CPUModel: "X"})
	if KindOf(err) != KindDatabase || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("got %v", err)
	}
}

func TestCreatesFileModeAndNoLockLeft(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "sub", "dir")
	st, err := Open(ctx, filepath.Join(dir, "cache.db"), Options{CPUModel: "X"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Record(ctx, "p", src, Measurement{Schedule: sched, IsLegal: false}, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(st.Path())
	if err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("db mode %v %v", fi.Mode(), err)
	}
	if st.LockPath() != filepath.Join(dir, "cache.db.lock") {
		t.Fatalf("lock path %s", st.LockPath())
	}
	// While open: the database and this store's reusable lock ticket, no lock.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "cache.db" && !strings.HasPrefix(e.Name(), ".lock_") {
			t.Errorf("left behind while open: %s", e.Name())
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	entries, _ = os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "cache.db" {
			t.Errorf("left behind after Close: %s", e.Name())
		}
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				s := "U(L0," + string(rune('1'+g)) + ",comps=['c" + string(rune('a'+i)) + "'])"
				if _, err := st.Record(ctx, "p", src, Measurement{Schedule: s, IsLegal: true, ExecutionTimes: Times(float64(g), float64(i))}, false); err != nil {
					t.Error(err)
					return
				}
				if r, err := st.Lookup(ctx, "p", src, s); err != nil || r == nil || r.ExecutionTimes[1] != float64(i) {
					t.Errorf("lookup %s: %v %v", s, r, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if n, _ := st.Count(ctx); n != 160 {
		t.Fatalf("count %d", n)
	}
}

// TestEachOperationTakesTheLockOnce: every operation, write or read, takes
// the lock exactly once (a write in one transaction, a miss in one read).
// It fails if an operation takes it twice (say, the program and the row in
// two holds) or not at all.
func TestEachOperationTakesTheLockOnce(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{})
	m := Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: Times(1)}
	ph := keys.ProgramHash(src)
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"record", func() error { _, err := st.Record(ctx, "p", src, m, false); return err }},
		{"record_many", func() error { _, err := st.RecordMany(ctx, "p", src, []Measurement{m}, true); return err }},
		{"put", func() error { _, err := st.Put(ctx, "k", ph, sched, "{}", false); return err }},
		{"delete", func() error { _, err := st.Delete(ctx, "k"); return err }},
		{"lookup", func() error { _, err := st.LookupByHash(ctx, "p", keys.ProgramHash("other"), sched); return err }},
		{"contains", func() error { _, err := st.Contains(ctx, "p", "other", sched); return err }},
		{"count", func() error { _, err := st.Count(ctx); return err }},
	} {
		before := st.LockStats()
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		after := st.LockStats()
		if n := after.Acquired - before.Acquired; n != 1 {
			t.Errorf("%s: %d acquisitions, want 1", op.name, n)
		}
	}
}

// MustExist never creates a database or its directory (an operator's
// typo in a path).
func TestMustExistCreatesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "typo", "cahce.db")
	if _, err := Open(ctx, path, Options{CPUModel: "X", MustExist: true}); KindOf(err) != KindNotFound {
		t.Fatalf("open of a missing database: %v; want a not-found error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "typo")); !os.IsNotExist(err) {
		t.Fatalf("the directory was created (%v)", err)
	}
	if _, err := Open(ctx, dir, Options{CPUModel: "X", MustExist: true}); err == nil {
		t.Fatal("a directory opened as a database")
	}
	st := openTemp(t, Options{CPUModel: "X"})
	again, err := Open(ctx, st.Path(), Options{CPUModel: "X", MustExist: true})
	if err != nil {
		t.Fatalf("an existing database: %v", err)
	}
	again.Close()
}
