package sqlitefile_test

import (
	"context"
	"fmt"
	"path/filepath"

	"testing"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/sqlitefile"
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

// TestRepeatedLookupsTakeNoLock: once a key was read under the lock, hit
// or miss, its next lookups are answered without the lock while nothing
// commits. It fails without the cache (every lookup takes the lock).
func TestRepeatedLookupsTakeNoLock(t *testing.T) {
	w, r := twoStores(t)
	for i := 0; i < 10; i++ {
		if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(float64(i))}, false); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ { // 10 hits, 10 misses
		lookupTimes(t, r, i)
	}
	before := r.LockStats().Acquired
	for round := 0; round < 3; round++ {
		for i := 0; i < 20; i++ {
			got := lookupTimes(t, r, i)
			if (got != nil) != (i < 10) || got != nil && got[0] != float64(i) {
				t.Fatalf("lookup %d = %v", i, got)
			}
		}
	}
	if n := r.LockStats().Acquired - before; n != 0 {
		t.Fatalf("%d lock acquisitions for 60 repeated lookups, want 0", n)
	}
}

// TestOthersCommitsAreNeverServedStale: a key cached as absent, or with an
// old result, is read again as soon as another store commits: the lookup
// after the other's record returned sees it. The cross-process version,
// with the negative control (the failpoint cache-trust, which serves
// entries without the header check), is tests/python/test_freshness.py.
func TestOthersCommitsAreNeverServedStale(t *testing.T) {
	w, r := twoStores(t)
	if got := lookupTimes(t, r, 1); got != nil {
		t.Fatalf("lookup before any record = %v", got)
	}
	lookupTimes(t, r, 1) // cached as absent
	if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(1), IsLegal: true, ExecutionTimes: core.Times(1.5)}, false); err != nil {
		t.Fatal(err)
	}
	if got := lookupTimes(t, r, 1); len(got) != 1 || got[0] != 1.5 {
		t.Fatalf("lookup after the other's record = %v, want [1.5]", got)
	}
	if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(1), IsLegal: true, ExecutionTimes: core.Times(2.5)}, true); err != nil {
		t.Fatal(err)
	}
	if got := lookupTimes(t, r, 1); len(got) != 1 || got[0] != 2.5 {
		t.Fatalf("lookup after the other's overwrite = %v, want [2.5]", got)
	}
}

// TestEvictLeastRecentlyUsed: a full cache evicts its least recently used
// entry, one at a time, and keeps the others, which stay answered without
// the lock. It fails if the cache grows past its bound, or if it evicts
// recently used entries (or everything) instead.
func TestEvictLeastRecentlyUsed(t *testing.T) {
	t.Cleanup(sqlitefile.SetMaxCached(100))
	w, r := twoStores(t)
	for i := 0; i < 150; i++ {
		if _, err := w.Record(ctx, "p", src, core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(float64(i))}, false); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 150; i++ {
		lookupTimes(t, r, i)
	}
	if n := sqlitefile.Counters(r.Backend()).Evicted; n != 50 {
		t.Fatalf("%d entries evicted, want 50", n)
	}
	before := r.LockStats().Acquired
	for i := 50; i < 150; i++ {
		lookupTimes(t, r, i)
	}
	if n := r.LockStats().Acquired - before; n != 0 {
		t.Fatalf("%d lock acquisitions for the 100 most recent keys, want 0", n)
	}
	lookupTimes(t, r, 0) // evicted: read under the lock again
	if n := r.LockStats().Acquired - before; n != 1 {
		t.Fatalf("%d lock acquisitions for an evicted key, want 1", n)
	}
}

func recordN(t *testing.T, st *core.Store, source string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := st.Record(ctx, "p", source, core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(float64(i))}, false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestABurstReadsTheProgramWhole: lookups of keys of one program that
// this store has not read take the lock until they have cost as long as
// reading the program whole (a few microseconds per record: here one
// locked lookup of a 10-record program), then one hold reads every
// record, and the rest of the burst, hits and misses, takes no lock. It
// fails if every new key takes the lock (20 acquisitions). A commit by
// another store ends it: a key absent from the whole program is read
// again, and found.
func TestABurstReadsTheProgramWhole(t *testing.T) {
	w, r := twoStores(t)
	recordN(t, w, src, 0, 10)
	before := r.LockStats().Acquired
	for i := 0; i < 20; i++ { // 10 hits, 10 misses
		got := lookupTimes(t, r, i)
		if (got != nil) != (i < 10) || got != nil && got[0] != float64(i) {
			t.Fatalf("lookup %d = %v", i, got)
		}
	}
	if n := r.LockStats().Acquired - before; n > 3 {
		t.Fatalf("%d lock acquisitions for 20 new keys of a 10-record program, want at most 3", n)
	}
	if c := sqlitefile.Counters(r.Backend()); c.ProgramReads != 1 || c.RowsRead != 10 {
		t.Fatalf("counters %+v, want one program of 10 rows read whole", c)
	}
	recordN(t, w, src, 15, 16)
	if got := lookupTimes(t, r, 15); len(got) != 1 || got[0] != 15 {
		t.Fatalf("lookup after the other's record = %v, want [15]", got)
	}
}

// TestAnEvictedEntryEndsAWholeProgram: once an entry of a program read
// whole is evicted, a key missing from the entries is no longer "absent":
// it is read again, and found. It fails if eviction leaves the program
// whole (the evicted record would be reported absent).
func TestAnEvictedEntryEndsAWholeProgram(t *testing.T) {
	t.Cleanup(sqlitefile.SetMaxCached(30))
	const other = "void other() {}"
	w, r := twoStores(t)
	recordN(t, w, src, 0, 10)
	recordN(t, w, other, 0, 25)
	for i := 0; i < 10; i++ {
		lookupTimes(t, r, i)
	}
	if c := sqlitefile.Counters(r.Backend()); c.ProgramReads != 1 {
		t.Fatalf("counters %+v, want the first program read whole", c)
	}
	for i := 0; i < 25; i++ { // 25 more entries in a cache of 30: evicts the oldest
		res, err := r.Lookup(ctx, "p", other, schedN(i))
		if err != nil || res == nil {
			t.Fatalf("lookup of the other program's %d = %v, %v", i, res, err)
		}
	}
	if c := sqlitefile.Counters(r.Backend()); c.Evicted == 0 || c.ProgramReads != 1 {
		t.Fatalf("counters %+v, want evictions and no other program read whole", c)
	}
	for i := 0; i < 10; i++ {
		if got := lookupTimes(t, r, i); len(got) != 1 || got[0] != float64(i) {
			t.Fatalf("lookup %d after evictions = %v, want [%d]", i, got, i)
		}
	}
}

// TestWholeReadsNeverEvict: a program is read whole only if its records
// fit in the room the cache has left, in bytes as in number, so that
// whole reads never evict one another. Here the byte bound holds some 25
// entries of about 600 bytes: a program of 30 records is read key by key
// and fills the cache, and then a 20-record program whose locked lookups
// have cost more than its read is read key by key too. It fails if the
// room is counted in entries alone (the second program is read whole,
// evicting).
func TestWholeReadsNeverEvict(t *testing.T) {
	t.Cleanup(sqlitefile.SetMaxCachedBytes(25 * 600))
	const other = "void other() {}"
	w, r := twoStores(t)
	recordN(t, w, other, 0, 30)
	recordN(t, w, src, 0, 20)
	for i := 0; i < 30; i++ { // a program too large to be read whole: point reads
		if res, err := r.Lookup(ctx, "p", other, schedN(i)); err != nil || res == nil {
			t.Fatalf("lookup of the other program's %d = %v, %v", i, res, err)
		}
	}
	for i := 0; i < 10; i++ {
		lookupTimes(t, r, i)
	}
	c := sqlitefile.Counters(r.Backend())
	if c.ProgramReads != 0 {
		t.Fatalf("counters %+v: a program read whole where it did not fit", c)
	}
	if c.PointReads != 40 {
		t.Fatalf("counters %+v, want 40 point reads", c)
	}
}

// BenchmarkReadWhole measures what the result cache's rule weighs against
// a burst's locked lookups: reading a program of 10,000 records whole
// under the lock (ns/row: tuning.LoadRowCost), beside a locked point read
// of one key (a lookup that misses the cache).
func BenchmarkReadWhole(b *testing.B) {
	path := filepath.Join(b.TempDir(), "cache.db")
	st, err := core.Open(ctx, path, core.Options{CPUModel: "X"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const rows = 10000
	ms := make([]core.Measurement, rows)
	for i := range ms {
		ms[i] = core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(0.5, 0.25)}
	}
	if _, err := st.RecordMany(ctx, "p", src, ms, false); err != nil {
		b.Fatal(err)
	}
	b.Run("whole", func(b *testing.B) {
		b.ResetTimer()
		for range b.N {
			if n, err := sqlitefile.ReadWhole(st.Backend(), core.ProgramHash(src)); err != nil || n != rows {
				b.Fatal(n, err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/rows, "ns/row")
	})
	b.Run("point", func(b *testing.B) {
		defer sqlitefile.SetMaxCached(rows / 2)() // no room for the whole program
		reader, err := core.Open(ctx, path, core.Options{CPUModel: "X"})
		if err != nil {
			b.Fatal(err)
		}
		defer reader.Close()
		b.ResetTimer()
		for i := range b.N {
			// A key not read before: each lookup takes the lock.
			if _, err := reader.Lookup(ctx, "p", src, schedN(rows+i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
