package core

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/runctx"
)

// queryInts runs a query of integers on the file at path with the stdlib
// driver, as another tool would.
func queryInts(t *testing.T, path, query string, args ...any) []int64 {
	t.Helper()
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// batchMeasurements are n measurements of schedules from index from on,
// of one to four times each, every fifth illegal, every seventh a timeout.
func batchMeasurements(from, n int) []Measurement {
	ms := make([]Measurement, n)
	for i := range ms {
		j := from + i
		m := Measurement{Schedule: fmt.Sprintf("U(L0,%d,comps=['c1'])", j+2), IsLegal: true}
		switch {
		case j%5 == 0:
			m.IsLegal = false
		case j%7 == 0:
			m.Censored, m.TimedOutAfter = CensoredTimeout, 30
		default:
			m.ExecutionTimes = Times([]float64{1, 1.5, 2, 2.5}[:1+j%4]...)
		}
		ms[i] = m
	}
	return ms
}

// checkOneRun checks that the record of m reads back with the run of its
// write: its count of times, a known context, and the stored text
// exactly as a row of its own would hold it.
func checkOneRun(t *testing.T, st *Store, m Measurement) {
	t.Helper()
	runs, err := st.Runs(ctx, "p", src, m.Schedule)
	if err != nil || len(runs) != 1 {
		t.Fatalf("%s: runs %+v, %v", m.Schedule, runs, err)
	}
	if runs[0].Count != m.storedTimes() || runs[0].Context == nil {
		t.Fatalf("%s: run %+v (context %v), want %d times of a known context", m.Schedule, runs[0].Run, runs[0].Context, m.storedTimes())
	}
	rec, err := st.be.Lookup(ctx, keys.ProgramHash(src), keys.RecordKey(keys.ProgramHash(src), m.Schedule))
	if err != nil || rec == nil {
		t.Fatal(rec, err)
	}
	if want := runctx.EncodeRuns([]runctx.Run{runs[0].Run}); rec.Runs != want {
		t.Fatalf("%s: stored runs %s, want %s", m.Schedule, rec.Runs, want)
	}
}

// A record_many stores the run of its records once, a row for the rowids
// it inserted, and each record reads back with its own count of times;
// an overwrite stores runs per record.
func TestRecordManyStoresItsRunOnce(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{})
	ms := batchMeasurements(0, 60)
	if n, err := st.RecordMany(ctx, "p", src, ms, false); err != nil || n != 60 {
		t.Fatal(n, err)
	}
	// Again with ten of them: those are skipped, the new ones contiguous.
	more := append(append([]Measurement{}, ms[:10]...), batchMeasurements(60, 15)...)
	if n, err := st.RecordMany(ctx, "p", src, more, false); err != nil || n != 15 {
		t.Fatal(n, err)
	}
	path := st.Path()
	if got := queryInts(t, path, "SELECT last - first + 1 FROM record_run_batches ORDER BY first"); fmt.Sprint(got) != "[60 15]" {
		t.Fatalf("batch rows cover %v records, want [60 15]", got)
	}
	if got := queryInts(t, path, "SELECT count(*) FROM record_runs"); got[0] != 0 {
		t.Fatalf("%d rows of runs of their own", got[0])
	}
	for _, m := range append(ms, more[10:]...) {
		checkOneRun(t, st, m)
	}
	over := batchMeasurements(100, 3)
	copy(over, ms[:2])
	if n, err := st.RecordMany(ctx, "p", src, over, true); err != nil || n != 3 {
		t.Fatal(n, err)
	}
	if got := queryInts(t, path, "SELECT count(*) FROM record_runs"); got[0] != 3 {
		t.Fatalf("an overwrite of 3 records wrote %d rows of their own", got[0])
	}
	for _, m := range over {
		checkOneRun(t, st, m)
	}
}

// A batch row describes only records dated as its write: a record moved
// into its range (a renumbering VACUUM) or overwritten by the original
// library is one run of unknown context, never another write's run.
func TestBatchRunsNeverDescribeAnotherWrite(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{})
	a, b := batchMeasurements(1, 3), batchMeasurements(11, 3)
	for _, ms := range [][]Measurement{a, b} {
		if _, err := st.RecordMany(ctx, "p", src, ms, false); err != nil {
			t.Fatal(err)
		}
	}
	path := st.Path()
	st.Close()
	// b[0] moves to the rowid of a[1], in a's range.
	keyB := keys.RecordKey(keys.ProgramHash(src), b[0].Schedule)
	execRaw(t, path, "DELETE FROM records WHERE rowid = 2")
	execRaw(t, path, "UPDATE records SET rowid = 2 WHERE key = ?", keyB)
	// a[2] is overwritten by an original worker (a new date).
	keyA := keys.RecordKey(keys.ProgramHash(src), a[2].Schedule)
	execRaw(t, path, "UPDATE records SET update_date = '2030-01-01T00:00:00.000000+00:00' WHERE key = ?", keyA)
	reopen := func() *Store {
		st, err := Open(ctx, path, Options{CPUModel: "Test CPU"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	st = reopen()
	for _, m := range []Measurement{b[0], a[2]} {
		runs, err := st.Runs(ctx, "p", src, m.Schedule)
		if err != nil || len(runs) != 1 || runs[0].Context != nil || runs[0].Count != m.storedTimes() {
			t.Fatalf("%s: runs %+v, %v: want one run of unknown context", m.Schedule, runs, err)
		}
	}
	checkOneRun(t, st, a[0])
	checkOneRun(t, st, b[1])
	// The negative control: dated as a's write, b[0] would read a's run.
	dateA := ""
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT update_date FROM record_run_batches ORDER BY first LIMIT 1").Scan(&dateA); err != nil {
		t.Fatal(err)
	}
	db.Close()
	execRaw(t, path, "UPDATE records SET update_date = ? WHERE key = ?", dateA, keyB)
	st = reopen()
	if runs, err := st.Runs(ctx, "p", src, b[0].Schedule); err != nil || len(runs) != 1 || runs[0].Context == nil {
		t.Fatalf("dated as a's write: runs %+v, %v; the date is not what keeps them apart", runs, err)
	}
}

// A database whose runs an earlier version wrote (a row per record, no
// batches table) reads them, gains the table at this version's first
// write, and a store opened before that write reads the new rows too.
func TestRunsOfTheEarlierLayout(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cache.db")
	st, err := Open(ctx, path, Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	old := batchMeasurements(1, 2)
	if _, err := st.RecordMany(ctx, "p", src, old, true); err != nil { // runs of their own
		t.Fatal(err)
	}
	st.Close()
	execRaw(t, path, "DROP TABLE record_run_batches")
	before, err := Open(ctx, path, Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if n := strings.Join(before.Notices(), "\n"); strings.Contains(n, "layout") {
		t.Fatalf("the earlier layout called foreign: %s", n)
	}
	for _, m := range old {
		checkOneRun(t, before, m)
	}
	writer, err := Open(ctx, path, Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	fresh := batchMeasurements(20, 4)
	if _, err := writer.RecordMany(ctx, "p", src, fresh, false); err != nil {
		t.Fatal(err)
	}
	if got := queryInts(t, path, "SELECT count(*) FROM record_run_batches"); got[0] != 1 {
		t.Fatalf("%d batch rows after the first write", got[0])
	}
	for _, m := range append(old, fresh...) {
		checkOneRun(t, before, m)
	}
}
