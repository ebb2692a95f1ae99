package main

import (
	"math"
	"slices"
)

// summary describes a set of durations in microseconds. Percentiles are
// nearest-rank (the smallest sample with at least p% of the samples at or
// below it), so p99 of fewer than 100 samples is the maximum: no
// interpolation invents values that were never measured.
type summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median_us"`
	P99    float64 `json:"p99_us"`
	P999   float64 `json:"p999_us"`
	Mean   float64 `json:"mean_us"`
	Min    float64 `json:"min_us"`
	Max    float64 `json:"max_us"`
}

func summarize(ns []int64) *summary {
	if len(ns) == 0 {
		return nil
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	us := func(v int64) float64 { return float64(v) / 1e3 }
	return &summary{
		N:      len(s),
		Median: us(percentile(s, 50)),
		P99:    us(percentile(s, 99)),
		P999:   us(percentile(s, 99.9)),
		Mean:   sum / float64(len(s)) / 1e3,
		Min:    us(s[0]),
		Max:    us(s[len(s)-1]),
	}
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// scaled divides every figure by k (per-record figures of a batch).
func (s *summary) scaled(k int) *summary {
	if s == nil || k <= 1 {
		return s
	}
	f := float64(k)
	return &summary{N: s.N, Median: s.Median / f, P99: s.P99 / f, P999: s.P999 / f, Mean: s.Mean / f, Min: s.Min / f, Max: s.Max / f}
}

// ratio is a/b, or NaN when either is missing or b is zero.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}
