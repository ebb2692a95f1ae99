package pyjson

import (
	"math"
	"strings"
	"testing"
)

func TestNumberClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n             Number
		isInt, finite bool
		valid         bool
		f             float64 // checked when valid (NaN compared with IsNaN)
	}{
		{"0", true, true, true, 0},
		{"-0", true, true, true, 0}, // int 0: no negative zero
		{"-0.0", false, true, true, math.Copysign(0, -1)},
		{"123", true, true, true, 123},
		{"-45", true, true, true, -45},
		{"123456789012345678901234567890", true, true, true, 1.2345678901234568e29},
		{"1.5", false, true, true, 1.5},
		{"1.50", false, true, true, 1.5},
		{"1E5", false, true, true, 1e5},
		{"1e-5", false, true, true, 1e-5},
		{"1e+5", false, true, true, 1e5},
		{"1e400", false, false, true, math.Inf(1)},
		{"-1e400", false, false, true, math.Inf(-1)},
		{"1e-400", false, true, true, 0},
		{"NaN", false, false, true, math.NaN()},
		{"Infinity", false, false, true, math.Inf(1)},
		{"-Infinity", false, false, true, math.Inf(-1)},
		// Not numbers Python's json could read or write.
		{"", false, false, false, 0},
		{"-", false, false, false, 0},
		{"01", false, false, false, 0},
		{"+1", false, false, false, 0},
		{"1.", false, false, false, 0},
		{".5", false, false, false, 0},
		{"1e", false, false, false, 0},
		{"1e+", false, false, false, 0},
		{"inf", false, false, false, 0},
		{"nan", false, false, false, 0},
		{"-NaN", false, false, false, 0},
		{"0x10", false, false, false, 0},
		{"1_000", false, false, false, 0},
		{" 1", false, false, false, 0},
		{"1 ", false, false, false, 0},
		{"١", false, false, false, 0}, // Arabic-Indic digit: not a JSON digit
	}
	for _, tc := range tests {
		if got := tc.n.IsInt(); got != tc.isInt {
			t.Errorf("Number(%q).IsInt() = %v, want %v", tc.n, got, tc.isInt)
		}
		if got := tc.n.IsFinite(); got != tc.finite {
			t.Errorf("Number(%q).IsFinite() = %v, want %v", tc.n, got, tc.finite)
		}
		f, err := tc.n.Float64()
		if !tc.valid {
			if err == nil {
				t.Errorf("Number(%q).Float64() = %v, want error", tc.n, f)
			}
			continue
		}
		if err != nil {
			t.Errorf("Number(%q).Float64() error %v", tc.n, err)
			continue
		}
		same := f == tc.f && math.Signbit(f) == math.Signbit(tc.f) || math.IsNaN(f) && math.IsNaN(tc.f)
		if !same {
			t.Errorf("Number(%q).Float64() = %v, want %v", tc.n, f, tc.f)
		}
	}
}

func TestNumberFloat64CorrectlyRounded(t *testing.T) {
	t.Parallel()
	// Halfway cases and long mantissas, where a naive parser rounds wrong.
	tests := []struct {
		n    Number
		want float64
	}{
		{"9007199254740993", 9007199254740992},              // 2^53+1 ties to even
		{"9007199254740995", 9007199254740996},              // ties to even upwards
		{"2.2250738585072011e-308", 2.225073858507201e-308}, // the PHP/Java hang value
		{"0.1000000000000000055511151231257827021181583404541015625", 0.1},
		{"4.9406564584124654e-324", 5e-324},
		{"2.4703282292062328e-324", 5e-324}, // just above half the smallest subnormal
		{"2.4703282292062327e-324", 0},      // just below: underflows to zero
	}
	for _, tc := range tests {
		f, err := tc.n.Float64()
		if err != nil || f != tc.want {
			t.Errorf("Number(%q).Float64() = %v, %v; want %v", tc.n, f, err, tc.want)
		}
	}
}

func TestNumberFloat64HugeInt(t *testing.T) {
	t.Parallel()
	// float(10**400) raises OverflowError; the int itself is finite.
	n := Number("1" + strings.Repeat("0", 400))
	if !n.IsInt() || !n.IsFinite() {
		t.Fatalf("%s: IsInt %v IsFinite %v, want true true", n, n.IsInt(), n.IsFinite())
	}
	if f, err := n.Float64(); err == nil || !math.IsInf(f, 1) {
		t.Errorf("Float64() = %v, %v; want +Inf and an error", f, err)
	}
}
