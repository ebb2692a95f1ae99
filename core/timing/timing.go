// Package timing summarizes a record's execution times: the statistics a
// lookup returns (count, median, median absolute deviation, minimum) and
// the relative spread that the database's noise policy judges.
//
// The spread follows PolyBench's timing rule (run five times, drop the
// fastest and the slowest, and call the measurement unsafe when a
// remaining time deviates from their mean by more than 5%), generalized
// to any number of times: with five or more, the fastest and the slowest
// fifth are dropped (one each of five, as PolyBench does; two each of
// ten, so that one disturbed run among re-measurements does not keep a
// record unstable for ever); the spread is the largest deviation of a
// remaining time from their mean, relative to that mean. A single time
// has spread 0: it cannot show noise.
//
// Times that are not finite (NaN, infinities, which the original library
// could store) take no part: Count counts the finite ones.
package timing

import (
	"math"
	"slices"
)

// Stats are the statistics of one record's times.
type Stats struct {
	Count  int     // finite times
	Median float64 // of the finite times (mean of the middle two for an even count)
	MAD    float64 // median absolute deviation from Median (unscaled)
	Min    float64
	Spread float64 // see the package comment; 0 for a single time
	// LowerBound: the times are lower bounds, not samples (a run stopped
	// at its time limit); set by the reader of a censored record, never
	// by Summarize.
	LowerBound bool
}

// Summarize computes the statistics of times; ok is false when none is
// finite (no times, or only NaN and infinities).
func Summarize(times []float64) (st Stats, ok bool) {
	var buf [32]float64
	xs := buf[:0]
	for _, t := range times {
		if !math.IsNaN(t) && !math.IsInf(t, 0) {
			xs = append(xs, t)
		}
	}
	if len(xs) == 0 {
		return Stats{}, false
	}
	slices.Sort(xs)
	st.Count, st.Min, st.Median = len(xs), xs[0], Median(xs)
	st.Spread = spread(xs)
	// The deviations overwrite the sorted times, which are not needed
	// any more (a lookup computes this at every hit: no second buffer).
	for i, x := range xs {
		xs[i] = math.Abs(x - st.Median)
	}
	slices.Sort(xs)
	st.MAD = Median(xs)
	return st, true
}

// Median of sorted xs (not empty): the middle one, or the mean of the
// middle two for an even count; every median the store reports is this.
func Median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return xs[n/2-1]/2 + xs[n/2]/2
}

// spread of sorted xs (not empty): see the package comment.
func spread(xs []float64) float64 {
	if len(xs) >= 5 {
		cut := len(xs) / 5
		xs = xs[cut : len(xs)-cut]
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	worst := 0.0
	for _, x := range xs {
		worst = max(worst, math.Abs(x-mean))
	}
	if worst == 0 {
		return 0
	}
	return worst / math.Abs(mean) // +Inf for a zero mean of unequal times (negative ones: not times)
}

// DefaultMaxSpread is PolyBench's threshold: a spread above 5% is noise.
const DefaultMaxSpread = 0.05
