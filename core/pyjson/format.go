package pyjson

import (
	"math"
	"strconv"
)

// FormatFloat formats like Python repr(float): shortest round-trip digits;
// positional notation when 1e-4 <= |x| < 1e16 with ".0" added to integral
// values (1234567.0, 0.0001, -0.0); otherwise exponent form with sign and at
// least two exponent digits (1e-05, 1.5e+16, 1e+16, 1.7976931348623157e+308,
// 5e-324). NaN -> "NaN", +Inf -> "Infinity", -Inf -> "-Infinity" (this is
// what json.dumps writes, not repr).
//
// It exists because no strconv format matches repr: 'g' switches to exponent
// form at other magnitudes (1e+06 where repr writes 1000000.0), 'f' never
// does, and none of them adds ".0" to integral values.
func FormatFloat(f float64) string {
	return string(appendFloat(nil, f))
}

// AppendFloat appends FormatFloat(f) to dst, for an encoder that writes
// numbers into a buffer of its own.
func AppendFloat(dst []byte, f float64) []byte { return appendFloat(dst, f) }

// appendFloat appends FormatFloat(f) to dst.
func appendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, nanToken...)
	case math.IsInf(f, 1):
		return append(dst, infToken...)
	case math.IsInf(f, -1):
		return append(dst, negInfToken...)
	case f == 0:
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	// Shortest round-trip digits in the form [-]d[.ddd]e±XX. Go and CPython
	// (dtoa.c mode 0) both pick the shortest string that reads back as f and,
	// among those, the one nearest to f.
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64)
	neg := e[0] == '-'
	if neg {
		e = e[1:]
	}
	var digits [24]byte
	nd := 0
	i := 0
	for ; i < len(e) && e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[nd] = e[i]
			nd++
		}
	}
	exp, _ := strconv.Atoi(string(e[i+1:])) // "+05" / "-324"
	// decpt is where the decimal point goes relative to the digit string:
	// value = 0.DIGITS * 10**decpt. repr uses exponent form when
	// decpt <= -4 or decpt > 16 (float_repr_style 'short', format 'r').
	decpt := exp + 1
	if neg {
		dst = append(dst, '-')
	}
	ds := digits[:nd]
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			dst = append(dst, '0', '.')
			for j := 0; j < -decpt; j++ {
				dst = append(dst, '0')
			}
			dst = append(dst, ds...)
		case decpt >= nd:
			dst = append(dst, ds...)
			for j := nd; j < decpt; j++ {
				dst = append(dst, '0')
			}
			dst = append(dst, '.', '0')
		default:
			dst = append(dst, ds[:decpt]...)
			dst = append(dst, '.')
			dst = append(dst, ds[decpt:]...)
		}
		return dst
	}
	dst = append(dst, ds[0])
	if nd > 1 {
		dst = append(dst, '.')
		dst = append(dst, ds[1:]...)
	}
	dst = append(dst, 'e')
	if exp < 0 {
		dst = append(dst, '-')
		exp = -exp
	} else {
		dst = append(dst, '+')
	}
	if exp < 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendInt(dst, int64(exp), 10)
}
