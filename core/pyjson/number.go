package pyjson

import (
	"errors"
	"math"
	"strconv"
)

// Number is a JSON number literal kept as text so that ints stay ints and
// floats stay floats through a round trip, as in Python. Also holds the
// non-standard tokens "NaN", "Infinity", "-Infinity" that Python writes.
//
// Parse returns numbers exactly as they appear in the input ("1.50", "1E5",
// "-0"); Marshal normalises them the way json.loads followed by json.dumps
// would ("1.5", "100000.0", "0").
type Number string

// Python's special float tokens, as json.dumps writes them and json.loads
// accepts them.
const (
	nanToken    = "NaN"
	infToken    = "Infinity"
	negInfToken = "-Infinity"
)

// MaxIntDigits is CPython 3.11's default limit on the number of decimal
// digits in an int converted from or to a string
// (sys.get_int_max_str_digits()). json.loads raises ValueError for an integer
// literal with more digits and json.dumps raises ValueError for such an int,
// so Parse and Marshal reject them too instead of producing data Python
// cannot read back.
const MaxIntDigits = 4300

// scanNumber matches a JSON number starting at data[i] exactly like CPython's
// C scanner (_match_number_unicode): an optional '-', then "0" or a nonzero
// digit followed by digits, then ".digits" only if a digit follows the '.',
// then an exponent only if at least one digit follows "e", "e+" or "e-"
// (otherwise the scanner backtracks and the number ends before the 'e').
// It reports the end offset, whether the literal is a float (has a fraction
// or exponent) and whether a number was found at all.
func scanNumber(data []byte, i int) (end int, isFloat bool, ok bool) {
	n := len(data)
	if i < n && data[i] == '-' {
		i++
	}
	switch {
	case i < n && data[i] >= '1' && data[i] <= '9':
		i++
		for i < n && isDigit(data[i]) {
			i++
		}
	case i < n && data[i] == '0':
		i++
	default:
		return i, false, false
	}
	if i+1 < n && data[i] == '.' && isDigit(data[i+1]) {
		isFloat = true
		i += 2
		for i < n && isDigit(data[i]) {
			i++
		}
	}
	if i < n && (data[i] == 'e' || data[i] == 'E') {
		j := i + 1
		if j < n && (data[j] == '+' || data[j] == '-') {
			j++
		}
		k := j
		for k < n && isDigit(data[k]) {
			k++
		}
		if k > j {
			isFloat = true
			i = k
		}
	}
	return i, isFloat, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// classify reports whether n is a syntactically valid number (a JSON number
// as CPython's scanner reads it, or one of the special tokens) and whether it
// is an integer literal.
func (n Number) classify() (valid, isInt bool) {
	switch n {
	case nanToken, infToken, negInfToken:
		return true, false
	}
	b := []byte(n)
	end, isFloat, ok := scanNumber(b, 0)
	if !ok || end != len(b) {
		return false, false
	}
	return true, !isFloat
}

// IsInt reports whether n has integer syntax (an optional '-' and digits
// without leading zeros; no '.', 'e', 'E'; not NaN/Infinity), that is whether
// json.loads would turn it into a Python int rather than a float.
func (n Number) IsInt() bool {
	valid, isInt := n.classify()
	return valid && isInt
}

// errBadNumber is returned for a Number whose text is not a number Python's
// json module could have read or written.
var errBadNumber = errors.New("pyjson: invalid Number syntax")

// Float64 returns the value Python's float() gives for the value json.loads
// makes of n: correctly rounded, +Inf/-Inf for float literals that overflow
// (float("1e400") is inf, not an error), 0 or a subnormal for literals that
// underflow, and NaN/±Inf for the special tokens. Integer literals are
// converted like float(int): rounded to nearest, "-0" gives +0 (the int 0
// has no sign), and an integer too large for a float64 gives ±Inf with an
// error, as float(10**400) raises OverflowError. It also fails if n is not
// valid number syntax.
func (n Number) Float64() (float64, error) {
	valid, isInt := n.classify()
	if !valid {
		return 0, errBadNumber
	}
	// The syntax check above rules out everything strconv accepts that
	// Python's JSON scanner does not ("inf", "0x1p3", "1_0", "+1").
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		var ne *strconv.NumError
		if !errors.As(err, &ne) || ne.Err != strconv.ErrRange {
			return 0, err
		}
		if isInt {
			return f, errIntTooLarge
		}
		// ±Inf or 0: exactly what Python's float() returns.
	}
	if isInt && f == 0 {
		f = 0 // int("-0") == 0, and float(0) is +0.0
	}
	return f, nil
}

// errIntTooLarge mirrors Python's OverflowError for float(huge_int).
var errIntTooLarge = errors.New("pyjson: integer Number too large to convert to float")

// IsFinite reports whether n is a finite value: false for NaN, Infinity,
// -Infinity and float literals that overflow to infinity (such as "1e400",
// which json.dumps would write back as Infinity), and for invalid syntax.
// Integer literals are always finite, as Python ints are.
func (n Number) IsFinite() bool {
	valid, isInt := n.classify()
	if !valid {
		return false
	}
	if isInt {
		return true
	}
	f, err := n.Float64()
	return err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// String returns the literal text of n.
func (n Number) String() string { return string(n) }
