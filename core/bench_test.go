package core

import (
	"fmt"
	"path/filepath"
	"testing"
)

// The engine's per-operation cost from Go, for profiling a change quickly
// (go test -run '^$' -bench . ./core). The figures the project reports,
// side by side with the original's protocol, come from `make bench`
// (tests/bench).

func benchStore(b *testing.B) *Store {
	b.Helper()
	st, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), Options{CPUModel: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

func benchSchedule(i int) string {
	return fmt.Sprintf("S(L0,L1,%d,%d,comps=['c1'])|U(L2,4,comps=['c1'])", i%1000, i/1000)
}

func BenchmarkLookupHit(b *testing.B) {
	st := benchStore(b)
	if _, err := st.Record(ctx, "p", src, Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: Times(0.1, 0.2)}, false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, err := st.Lookup(ctx, "p", src, sched); err != nil || r == nil {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkLookupMiss(b *testing.B) {
	st := benchStore(b)
	for i := 0; i < b.N; i++ {
		if r, err := st.Lookup(ctx, "p", src, sched); err != nil || r != nil {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkRecordNew(b *testing.B) {
	st := benchStore(b)
	for i := 0; i < b.N; i++ {
		if ok, err := st.Record(ctx, "p", src, Measurement{Schedule: benchSchedule(i), IsLegal: true, ExecutionTimes: Times(0.1)}, false); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func benchRecordMany(b *testing.B, n int) {
	st := benchStore(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ms := make([]Measurement, n)
		for j := range ms {
			ms[j] = Measurement{Schedule: benchSchedule(i*n + j), IsLegal: true, ExecutionTimes: Times(0.1)}
		}
		if w, err := st.RecordMany(ctx, "p", src, ms, false); err != nil || w != n {
			b.Fatal(w, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1e3, "µs/record")
}

func BenchmarkRecordMany100(b *testing.B)  { benchRecordMany(b, 100) }
func BenchmarkRecordMany1000(b *testing.B) { benchRecordMany(b, 1000) }

// BenchmarkRecordExisting is a write that finds its key: the lock, a
// transaction and no commit, the cost of everything around the writes.
func BenchmarkRecordExisting(b *testing.B) {
	st := benchStore(b)
	m := Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: Times(0.1)}
	if _, err := st.Record(ctx, "p", src, m, false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ok, err := st.Record(ctx, "p", src, m, false); err != nil || ok {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkConfigGetHit(b *testing.B) {
	st := benchStore(b)
	if _, err := st.ConfigPut(ctx, "", "gpu:0", "mm@v1", "sig", `{"block_m":128}`, true); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if e, err := st.ConfigGet(ctx, "", "gpu:0", "mm@v1", "sig", false); err != nil || e == nil {
			b.Fatal(e, err)
		}
	}
}

func BenchmarkConfigPut(b *testing.B) {
	st := benchStore(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := st.ConfigPut(ctx, "", "gpu:0", "mm@v1", fmt.Sprint(i), `{"block_m":128}`, true); err != nil {
			b.Fatal(err)
		}
	}
}
