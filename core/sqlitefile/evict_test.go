package sqlitefile_test

import (
	"testing"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/sqlitefile"
	"github.com/tirastore/tirastore/core/tuning"
)

// progSrc is the source of the test program named name.
func progSrc(name string) string { return "void " + name + "() {}" }

// recordProgram records n schedules of program name (times: the index).
func recordProgram(t *testing.T, w *core.Store, name string, n int) {
	t.Helper()
	ms := make([]core.Measurement, n)
	for i := range ms {
		ms[i] = core.Measurement{Schedule: schedN(i), IsLegal: true, ExecutionTimes: core.Times(float64(i))}
	}
	if got, err := w.RecordMany(ctx, name, progSrc(name), ms, false); err != nil || got != n {
		t.Fatal(got, err)
	}
}

// lookupIn looks schedule i of program name up and checks the answer:
// present below n, absent from n.
func lookupIn(t *testing.T, st *core.Store, name string, i, n int) {
	t.Helper()
	r, err := st.Lookup(ctx, name, progSrc(name), schedN(i))
	if err != nil {
		t.Fatal(err)
	}
	if (r != nil) != (i < n) || r != nil && r.ExecutionTimes[0] != float64(i) {
		t.Fatalf("lookup %s %d = %+v, want present %v", name, i, r, i < n)
	}
}

// complete reports which of names st's cache holds complete.
func complete(st *core.Store, names ...string) string {
	got := cachedPrograms(st, false)
	s := ""
	for _, n := range names {
		if got[keys.ProgramHash(progSrc(n))] {
			s += n
		}
	}
	return s
}

// TestEvictLeastRecentlyUsed: when the cache is full, it evicts the least
// recently used program and keeps the others, which stay answered without
// the lock. It fails with the old policy (the whole cache started over:
// only the last program loaded stayed).
func TestEvictLeastRecentlyUsed(t *testing.T) {
	t.Cleanup(sqlitefile.SetMaxCached(100))
	w, r := twoStores(t)
	for _, p := range []string{"a", "b", "c"} {
		recordProgram(t, w, p, 40)
	}
	for _, p := range []string{"a", "b"} {
		lookupIn(t, r, p, 0, 40)
		lookupIn(t, r, p, 1, 40) // a second miss: loads the program
	}
	if got := complete(r, "a", "b", "c"); got != "ab" {
		t.Fatalf("complete %q, want ab", got)
	}
	lookupIn(t, r, "a", 5, 40) // a is now the most recently used
	lookupIn(t, r, "c", 0, 40)
	lookupIn(t, r, "c", 1, 40) // loads c: 120 entries do not fit in 100
	if got := complete(r, "a", "b", "c"); got != "ac" {
		t.Fatalf("complete %q after loading c, want ac (b, the least recently used, evicted)", got)
	}
	before := r.LockStats().Acquired
	for i := 0; i < 45; i++ {
		lookupIn(t, r, "a", i, 40)
		lookupIn(t, r, "c", i, 40)
	}
	if n := r.LockStats().Acquired - before; n != 0 {
		t.Fatalf("%d lock acquisitions for the programs kept, want 0", n)
	}
}

// TestLoadAdmission: a program's first locked miss reads the one key; its
// second loads the program. A load that earned no hits before its eviction
// is not repeated: the program is then read key by key. It fails with
// every miss admitted (the old policy: the first miss of a quiet phase
// loaded the program), and with loads repeated whether they paid or not.
func TestLoadAdmission(t *testing.T) {
	t.Cleanup(sqlitefile.SetMaxCached(100))
	w, r := twoStores(t)
	for _, p := range []string{"a", "b"} {
		recordProgram(t, w, p, 60)
	}
	lookupIn(t, r, "a", 0, 60) // the first look at the file
	c0 := sqlitefile.Counters(r.Backend())
	lookupIn(t, r, "b", 0, 60)
	c1 := sqlitefile.Counters(r.Backend())
	if c1.Loads != c0.Loads || c1.PointReads != c0.PointReads+1 || complete(r, "b") != "" {
		t.Fatalf("first miss of b: %+v then %+v, want one point read, no load", c0, c1)
	}
	lookupIn(t, r, "b", 1, 60)
	c2 := sqlitefile.Counters(r.Backend())
	if c2.Loads != c1.Loads+1 || complete(r, "b") != "b" {
		t.Fatalf("second miss of b: %+v then %+v, want a load of b", c1, c2)
	}
	// a's load (its second miss) evicts b, which earned no hit: b's load did
	// not pay.
	lookupIn(t, r, "a", 1, 60)
	if got := complete(r, "a", "b"); got != "a" {
		t.Fatalf("complete %q, want a", got)
	}
	c3 := sqlitefile.Counters(r.Backend())
	for i := 2; i < 6; i++ {
		lookupIn(t, r, "b", i, 60)
	}
	c4 := sqlitefile.Counters(r.Backend())
	if c4.Loads != c3.Loads || c4.PointReads != c3.PointReads+4 {
		t.Fatalf("misses of b after a load that did not pay: %+v then %+v, want 4 point reads and no load", c3, c4)
	}
}

// TestLoadHoldBounded: a program is loaded tuning.LoadChunkRows rows per
// locked lookup, never more, and is complete (answering hits and misses
// without the lock, a record added during the load included) once its last
// chunk is read. It fails with the old policy (the whole program read in
// the hold of one lookup).
func TestLoadHoldBounded(t *testing.T) {
	t.Parallel()
	w, r := twoStores(t)
	n := 3*tuning.LoadChunkRows + 10
	recordProgram(t, w, "big", n)
	lookupIn(t, r, "big", 0, n)
	last := sqlitefile.Counters(r.Backend())
	added := false
	for i := 1; complete(r, "big") == "" && i < 10; i++ {
		acquired := r.LockStats().Acquired
		lookupIn(t, r, "big", n+i, n) // an absent key: a locked miss
		if got := r.LockStats().Acquired - acquired; got != 1 {
			t.Fatalf("lookup %d took the lock %d times, want once", i, got)
		}
		c := sqlitefile.Counters(r.Backend())
		if c.Chunks > last.Chunks+1 || c.ChunkRows-last.ChunkRows > int64(tuning.LoadChunkRows) {
			t.Fatalf("one locked lookup read %d chunks, %d rows; want at most 1 and %d", c.Chunks-last.Chunks, c.ChunkRows-last.ChunkRows, tuning.LoadChunkRows)
		}
		last = c
		if !added && c.Chunks > 0 {
			// A record of the program committed during the load: a
			// logged commit the reader follows.
			if _, err := w.Record(ctx, "big", progSrc("big"), core.Measurement{Schedule: schedN(n), IsLegal: true, ExecutionTimes: core.Times(float64(n))}, false); err != nil {
				t.Fatal(err)
			}
			added, n = true, n+1
		}
	}
	if complete(r, "big") == "" || last.Completed != 1 || last.ChunkRows < int64(n-1) {
		t.Fatalf("not loaded after 10 misses: %+v", last)
	}
	before := r.LockStats().Acquired
	for i := 0; i < n+20; i += 7 {
		lookupIn(t, r, "big", i, n)
	}
	lookupIn(t, r, "big", n-1, n) // the record added during the load
	if got := r.LockStats().Acquired - before; got != 0 {
		t.Fatalf("%d lock acquisitions for a loaded program, want 0", got)
	}
}
