package core

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/storage"
)

// The statistics come with every lookup, judged by the database's noise
// policy, which a store sets for every store opened afterwards.
func TestNoisePolicyJudgesLookups(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{})
	if _, err := st.Record(ctx, "blur", src, Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: Times(1, 1.02, 1, 0.99, 1.5)}, false); err != nil {
		t.Fatal(err)
	}
	r, err := st.Lookup(ctx, "blur", src, sched)
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	if r.Stats.Count != 5 || r.Stats.Median != 1 || r.Stats.Min != 0.99 || r.Unstable {
		t.Fatalf("stats %+v unstable %v; want 5 times, median 1, min 0.99, stable at 5%%", r.Stats, r.Unstable)
	}
	if p := st.NoisePolicy(); p != DefaultNoisePolicy {
		t.Fatalf("policy of a new database %+v", p)
	}
	strict := NoisePolicy{MaxSpread: 0.001, MaxRemeasures: 1}
	if err := st.SetNoisePolicy(ctx, strict); err != nil {
		t.Fatal(err)
	}
	if r, _ = st.Lookup(ctx, "blur", src, sched); !r.Unstable {
		t.Fatal("a 0.1% policy still calls a 1% spread stable")
	}
	other, err := Open(ctx, st.Path(), Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if p := other.NoisePolicy(); p != strict {
		t.Fatalf("a store opened afterwards follows %+v, want %+v", p, strict)
	}
	for _, bad := range []NoisePolicy{{MaxSpread: 0}, {MaxSpread: -1}, {MaxSpread: 11}, {MaxSpread: 0.05, MaxRemeasures: -1}, {MaxSpread: 0.05, MaxRemeasures: 101}} {
		if err := st.SetNoisePolicy(ctx, bad); KindOf(err) != KindValue {
			t.Errorf("SetNoisePolicy(%+v) = %v, want a ValueError", bad, err)
		}
	}
}

// A policy row that does not parse (any writer of a shared file can plant
// one) is named in a notice, and the default applies.
func TestBadNoisePolicyRowFallsBack(t *testing.T) {
	t.Parallel()
	path := newDatabaseFile(t)
	for _, row := range []string{`not json`, `{"max_spread": -3, "max_remeasures": 2}`} {
		execRaw(t, path, "INSERT OR REPLACE INTO db_meta (key, value) VALUES (?, ?)", storage.NoisePolicyKey, row)
		st, err := Open(ctx, path, Options{CPUModel: "X"})
		if err != nil {
			t.Fatal(err)
		}
		notices := strings.Join(st.Notices(), "\n")
		if st.NoisePolicy() != DefaultNoisePolicy || !strings.Contains(notices, storage.NoisePolicyKey) {
			t.Errorf("row %q: policy %+v, notices %q", row, st.NoisePolicy(), notices)
		}
		st.Close()
	}
}

// A table of the runs tables' names but another shape (an earlier build,
// or planted by anyone who may write the file) switches runs off; it
// never makes a lookup or a record fail.
func TestForeignRunsTableSwitchesRunsOff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ plant, read string }{
		{"CREATE TABLE record_runs (key TEXT PRIMARY KEY, runs_json TEXT)", "SELECT u.rec FROM record_runs u"},
		{"CREATE TABLE record_run_batches (first INTEGER PRIMARY KEY, runs TEXT)", "SELECT b.run_tail FROM record_run_batches b"},
	} {
		path := newDatabaseFile(t)
		execRaw(t, path, c.plant)
		// The negative control: this engine's read of runs fails on it.
		db, err := sql.Open("sqlite3", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(c.read); err == nil {
			t.Fatalf("%s: the planted table has this engine's columns", c.plant)
		}
		db.Close()
		st, err := Open(ctx, path, Options{CPUModel: "X"})
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Join(st.Notices(), "\n"); !strings.Contains(n, "record_runs, record_run_batches and run_contexts are not of this version's layout") {
			t.Errorf("%s: notices %q: want one about the runs tables", c.plant, n)
		}
		if _, err := st.Record(ctx, "blur", src, Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: Times(1, 2)}, false); err != nil {
			t.Fatal(err)
		}
		r, err := st.Lookup(ctx, "blur", src, sched)
		if err != nil || r == nil || r.Stats.Count != 2 {
			t.Fatal(c.plant, r, err)
		}
		runs, err := st.Runs(ctx, "blur", src, sched)
		if err != nil || len(runs) != 1 || runs[0].Context != nil || len(runs[0].Times) != 2 {
			t.Fatalf("%s: runs %+v, %v: want one run of unknown context", c.plant, runs, err)
		}
		st.Close()
	}
}
