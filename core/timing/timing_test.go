package timing

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		name  string
		times []float64
		want  Stats
	}{
		{"one", []float64{2}, Stats{Count: 1, Median: 2, MAD: 0, Min: 2, Spread: 0}},
		{"two", []float64{1.2, 1}, Stats{Count: 2, Median: 1.1, MAD: 0.1, Min: 1, Spread: 0.1 / 1.1}},
		// PolyBench: five runs, min and max dropped: 10, 10.2, 10.4 remain.
		{"polybench", []float64{10.4, 9, 10, 20, 10.2}, Stats{Count: 5, Median: 10.2, MAD: 0.2, Min: 9, Spread: 0.2 / 10.2}},
		// Ten: two dropped at each end, so two outliers do not count.
		{"ten", []float64{1, 1, 1, 1, 1, 1, 5, 6, 0.1, 0.2}, Stats{Count: 10, Median: 1, MAD: 0, Min: 0.1, Spread: 0}},
		{"nonfinite ignored", []float64{math.NaN(), 3, math.Inf(1)}, Stats{Count: 1, Median: 3, Min: 3}},
	} {
		got, ok := Summarize(c.times)
		if !ok || got.Count != c.want.Count || !near(got.Median, c.want.Median) || !near(got.MAD, c.want.MAD) ||
			!near(got.Min, c.want.Min) || !near(got.Spread, c.want.Spread) {
			t.Errorf("%s: Summarize(%v) = %+v, %v; want %+v", c.name, c.times, got, ok, c.want)
		}
	}
}

func TestSummarizeNothing(t *testing.T) {
	for _, times := range [][]float64{nil, {}, {math.NaN()}, {math.Inf(-1)}} {
		if st, ok := Summarize(times); ok {
			t.Errorf("Summarize(%v) = %+v, true; want false", times, st)
		}
	}
}

func TestSpreadOverThreshold(t *testing.T) {
	// Five runs, one of the middle three 8% off the others: unstable by PolyBench.
	st, _ := Summarize([]float64{0.9, 1, 1.08, 1, 1.2})
	if st.Spread <= DefaultMaxSpread {
		t.Errorf("spread %g, want above %g", st.Spread, DefaultMaxSpread)
	}
	st, _ = Summarize([]float64{1, 1.01, 0.99, 1, 1.3})
	if st.Spread > DefaultMaxSpread {
		t.Errorf("spread %g with the outlier dropped, want at most %g", st.Spread, DefaultMaxSpread)
	}
}

func TestZeroMean(t *testing.T) {
	if st, _ := Summarize([]float64{0, 0}); st.Spread != 0 {
		t.Errorf("all zero: spread %g", st.Spread)
	}
	if st, _ := Summarize([]float64{-1, 1}); !math.IsInf(st.Spread, 1) {
		t.Errorf("zero mean of unequal times: spread %g, want +Inf", st.Spread)
	}
}

func TestSummarizeDoesNotReorderInput(t *testing.T) {
	in := []float64{3, 1, 2}
	Summarize(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("input reordered: %v", in)
	}
}
