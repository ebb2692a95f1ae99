package pyjson

import (
	"math"
	"testing"
)

func TestFormatFloat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{-1, "-1.0"},
		{0.1, "0.1"},
		{100, "100.0"},
		{1234567, "1234567.0"},
		{0.30000000000000004, "0.30000000000000004"},
		{1.0000000000000002, "1.0000000000000002"},
		{math.Pi, "3.141592653589793"},
		{-math.E, "-2.718281828459045"},
		// The lower switch point: 1e-4 is positional, anything below is not.
		{1e-4, "0.0001"},
		{0.000123, "0.000123"},
		{3e-4, "0.0003"},
		{math.Nextafter(1e-4, 0), "9.999999999999999e-05"},
		{1e-5, "1e-05"},
		{1.5e-5, "1.5e-05"},
		// The upper switch point: 1e16 and above use exponent form.
		{1e15, "1000000000000000.0"},
		{9999999999999998, "9999999999999998.0"},
		{1e16, "1e+16"},
		{1.5e16, "1.5e+16"},
		{123456789012345678, "1.2345678901234568e+17"},
		{12345678901234567890, "1.2345678901234567e+19"},
		{1e22, "1e+22"},
		{1e23, "1e+23"},
		{1e100, "1e+100"},
		{-1e100, "-1e+100"},
		{1e-100, "1e-100"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.SmallestNonzeroFloat64, "5e-324"},
		{-math.SmallestNonzeroFloat64, "-5e-324"},
		{2.2250738585072014e-308, "2.2250738585072014e-308"},
		{math.NaN(), "NaN"},
		{math.Inf(1), "Infinity"},
		{math.Inf(-1), "-Infinity"},
	}
	for _, tc := range tests {
		if got := FormatFloat(tc.in); got != tc.want {
			t.Errorf("FormatFloat(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFormatFloatRoundTrips(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{0.1, 1e-5, 1e16, 5e-324, math.MaxFloat64, 123.456, 1 / 3.0} {
		s := FormatFloat(f)
		g, err := Number(s).Float64()
		if err != nil || g != f {
			t.Errorf("FormatFloat(%v) = %q reads back as %v, %v", f, s, g, err)
		}
	}
}
