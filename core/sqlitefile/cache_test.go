package sqlitefile_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"testing"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/sqlitefile"
	"github.com/tirastore/tirastore/core/tuning"
)

// Two stores on one file have separate connections and caches, as two
// processes do (the cross-process version of these checks, with negative
// controls, is tests/python/test_freshness.py).
var ctx = context.Background()

// src is the program of the tests.
const src = "void blur() { /* c */ }"

func twoStores(t *testing.T) (writer, reader *core.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache.db")
	var err error
	if writer, err = core.Open(ctx, path, core.Options{CPUModel: "X"}); err != nil {
		t.Fatal(err)
	}
	if reader, err = core.Open(ctx, path, core.Options{CPUModel: "X"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { writer.Close(); reader.Close() })
	return writer, reader
}

func schedN(i int) string { return fmt.Sprintf("S(L0,L1,%d,8,comps=['c1'])", i) }

func lookupTimes(t *testing.T, st *core.Store, i int) []float64 {
	t.Helper()
	r, err := st.Lookup(ctx, "p", src, schedN(i))
	if err != nil {
		t.Fatal(err)
	}
	if r == nil {
		return nil
	}
	return r.ExecutionTimes
}

// TestProgramPrefetch: in a quiet phase the reader loads the whole program
// and then answers hits and misses without taking the lock; a commit by the
// other store is seen at once.
func TestProgramPrefetch(t *testing.T) {
	t.Setenv("TIRASTORE_CHANGE_LOG", "0") // the quiet phase alone (see TestFollowLoggedCommits)
	w, r := twoStores(t)
	for i := 0; i < 3; i++ {
		if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(float64(i))}, false); err != nil {
			t.Fatal(err)
		}
	}
	lookupTimes(t, r, 0) // locked: first operation at this generation
	time.Sleep(tuning.QuietBeforePrefetch + 5*time.Millisecond)
	lookupTimes(t, r, 1) // locked: quiet long enough: loads program p
	before := r.LockStats().Acquired
	for k := 0; k < 3; k++ {
		for i := 0; i < 5; i++ {
			got := lookupTimes(t, r, i)
			if want := i < 3; (got != nil) != want || (want && got[0] != float64(i)) {
				t.Fatalf("lookup %d = %v", i, got)
			}
		}
	}
	if n := r.LockStats().Acquired - before; n != 0 {
		t.Errorf("%d lock acquisitions for lookups of a loaded program, want 0", n)
	}
	// A new record (a key the reader knows to be absent) and an overwrite.
	if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(4), IsLegal: true, ExecutionTimes: core.Times(4.5)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(0), IsLegal: true, ExecutionTimes: core.Times(-1)}, true); err != nil {
		t.Fatal(err)
	}
	if got := lookupTimes(t, r, 4); len(got) != 1 || got[0] != 4.5 {
		t.Fatalf("new record not seen: %v", got)
	}
	if got := lookupTimes(t, r, 0); len(got) != 1 || got[0] != -1 {
		t.Fatalf("overwrite not seen: %v", got)
	}
	if ok, err := r.Contains(ctx, "p", src, schedN(4)); err != nil || !ok {
		t.Fatalf("contains after the write: %v %v", ok, err)
	}
}

// TestNoPrefetchOfLargeDatabase: without the program_hash index, above
// tuning.PrefetchMaxPages no program is loaded (a prefetch would scan the
// whole records table), and lookups stay correct,
// key by key under the lock.
func TestNoPrefetchOfLargeDatabase(t *testing.T) {
	t.Cleanup(sqlitefile.SetPrefetchMaxPages(0))
	t.Setenv("TIRASTORE_CHANGE_LOG", "0") // the quiet phase alone
	w, r := twoStores(t)
	ms := make([]core.Measurement, 200)
	for i := range ms {
		ms[i] = core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(float64(i))}
	}
	if _, err := w.RecordMany(ctx, "p", src, ms, false); err != nil {
		t.Fatal(err)
	}
	pages, ok, err := sqlitefile.HeaderPages(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !ok || pages < 4 {
		t.Fatalf("header size %d pages (valid %v), want a valid size of at least 4", pages, ok)
	}
	sqlitefile.SetPrefetchMaxPages(pages - 1)
	sqlitefile.SetIndexed(r.Backend(), false)
	lookupTimes(t, r, 0)
	time.Sleep(tuning.QuietBeforePrefetch + 5*time.Millisecond)
	before := r.LockStats().Acquired
	for i := 1; i <= 5; i++ { // 0 is cached already
		if got := lookupTimes(t, r, i); len(got) != 1 || got[0] != float64(i) {
			t.Fatalf("lookup %d = %v", i, got)
		}
	}
	complete := len(cachedPrograms(r, false))
	if n := r.LockStats().Acquired - before; complete != 0 || n != 5 {
		t.Fatalf("%d programs loaded, %d lock acquisitions for 5 new keys; want 0 and 5", complete, n)
	}
	// At the bound, the program is loaded as usual.
	sqlitefile.SetPrefetchMaxPages(pages)
	time.Sleep(tuning.QuietBeforePrefetch + 5*time.Millisecond)
	lookupTimes(t, r, 6)
	complete = len(cachedPrograms(r, false))
	if complete != 1 {
		t.Fatalf("%d programs loaded at the bound, want 1", complete)
	}
	// With the index, a program is loaded whatever the database's size.
	const src2 = "void other() {}"
	if _, err := w.RecordMany(ctx, "q", src2, ms[:20], false); err != nil {
		t.Fatal(err)
	}
	sqlitefile.SetPrefetchMaxPages(1)
	sqlitefile.SetIndexed(r.Backend(), true)
	for i := 0; i < 2; i++ { // the first learns the new generation
		time.Sleep(tuning.QuietBeforePrefetch + 5*time.Millisecond)
		if _, err := r.Lookup(ctx, "q", src2, schedN(i)); err != nil {
			t.Fatal(err)
		}
	}
	if !cachedPrograms(r, false)[keys.ProgramHash(src2)] {
		t.Fatal("with the index, the program was not loaded in a quiet phase")
	}
}

// cachedPrograms are the programs st's cache holds complete (tooBig:
// those it found too big to load).
func cachedPrograms(st *core.Store, tooBig bool) map[string]bool {
	complete, big := sqlitefile.CachedPrograms(st.Backend())
	if tooBig {
		return big
	}
	return complete
}

// TestProgramTooBigToPrefetch: a program over tuning.PrefetchLimit is read key by
// key, and still correctly.
func TestProgramTooBigToPrefetch(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("writes tuning.PrefetchLimit+1 records")
	}
	w, r := twoStores(t)
	ms := make([]core.Measurement, tuning.PrefetchLimit+1)
	for i := range ms {
		ms[i] = core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(float64(i))}
	}
	if n, err := w.RecordMany(ctx, "p", src, ms, false); err != nil || n != len(ms) {
		t.Fatal(n, err)
	}
	for k := 0; k < 3; k++ {
		time.Sleep(tuning.QuietBeforePrefetch + 5*time.Millisecond)
		for _, i := range []int{k, 7 + k, tuning.PrefetchLimit - k, tuning.PrefetchLimit + 5 + k} {
			got := lookupTimes(t, r, i)
			if want := i <= tuning.PrefetchLimit; (got != nil) != want || (want && got[0] != float64(i)) {
				t.Fatalf("lookup %d = %v", i, got)
			}
		}
	}
	complete, big := cachedPrograms(r, false)[keys.ProgramHash(src)], cachedPrograms(r, true)[keys.ProgramHash(src)]
	if complete || !big {
		t.Errorf("complete=%v tooBig=%v, want a program too big to load", complete, big)
	}
}

// TestNoPrefetchWhileOthersWrite: a store that reads between commits it
// cannot follow (not logged: another node, an old worker) never loads whole
// programs, even when it reads twice in a row between two commits.
func TestNoPrefetchWhileOthersWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	t.Setenv("TIRASTORE_CHANGE_LOG", "0")
	w, err := core.Open(ctx, path, core.Options{CPUModel: "X"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.Unsetenv("TIRASTORE_CHANGE_LOG")
	r, err := core.Open(ctx, path, core.Options{CPUModel: "X"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 200; i++ {
		if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(1)}, false); err != nil {
			t.Fatal(err)
		}
		lookupTimes(t, r, i)
		lookupTimes(t, r, i+1000)
	}
	if len(cachedPrograms(r, false)) != 0 {
		t.Errorf("loaded a whole program while another store was writing")
	}
}

// TestFollowLoggedCommits: a store that follows the change log loads a
// program while another store writes, and then answers every lookup, of
// new records, overwritten ones and absent keys alike, without the lock
// and as a locked read would. Negative control: with the log's entries
// applied whether or not they chain (failpoint changelog-unchained, see
// tests/python/test_freshness.py), a commit that was not logged is missed.
func TestFollowLoggedCommits(t *testing.T) {
	t.Parallel()
	w, r := twoStores(t)
	record := func(i int, v float64, overwrite bool) {
		t.Helper()
		if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(v)}, overwrite); err != nil {
			t.Fatal(err)
		}
	}
	record(0, 0, false)
	lookupTimes(t, r, 0) // locked: the cache learns the generation
	record(1, 1, false)
	if got := lookupTimes(t, r, 100); got != nil { // locked, following the log: loads program p
		t.Fatalf("lookup 100 = %v", got)
	}
	complete := cachedPrograms(r, false)[keys.ProgramHash(src)]
	if !complete {
		t.Fatal("program not loaded while following the log")
	}
	before := r.LockStats().Acquired
	want := map[int]float64{0: 0, 1: 1}
	for i := 2; i < 40; i++ {
		switch i % 3 {
		case 0:
			record(i, float64(i), false)
			want[i] = float64(i)
		case 1:
			record(i%7, -float64(i), true) // an overwrite: dropped from the cache
			want[i%7] = -float64(i)
		}
		for k := 0; k < 45; k++ {
			got := lookupTimes(t, r, k)
			v, ok := want[k]
			if (got != nil) != ok || (ok && got[0] != v) {
				t.Fatalf("after write %d: lookup %d = %v, want %v (present %v)", i, k, got, v, ok)
			}
		}
	}
	// Overwritten keys are read under the lock once each; everything else
	// comes from the cache.
	if n := r.LockStats().Acquired - before; n > 20 {
		t.Errorf("%d lock acquisitions for lookups while following, want at most the overwrites' (14)", n)
	}
	// A commit that is not logged: the reader must not serve its old entries.
	raw, err := sql.Open("sqlite3", r.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec("DELETE FROM records WHERE key = ?", keys.RecordKey(keys.ProgramHash(src), schedN(3))); err != nil {
		t.Fatal(err)
	}
	record(41, 41, false) // logged, but from a generation the reader never saw
	if got := lookupTimes(t, r, 3); got != nil {
		t.Fatalf("deleted record still served: %v", got)
	}
	if got := lookupTimes(t, r, 41); len(got) != 1 || got[0] != 41 {
		t.Fatalf("lookup 41 = %v", got)
	}
}
