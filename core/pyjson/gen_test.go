package pyjson

// Random generators shared by the differential and fuzz tests.

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

var specialRunes = []rune{
	0x2028, 0x2029, 0xfeff, 0xfffe, 0xffff, 0xd7ff, 0xe000, 0x10000, 0x10ffff,
	0x1f600, 0x7f, 0x80, 0x9f, 0xa0, 0xff, 0x100, 0x7ff, 0x800,
}

// randRune favours the characters json.dumps treats specially.
func randRune(r *rand.Rand) rune {
	switch r.IntN(10) {
	case 0:
		return rune(r.IntN(0x20))
	case 1:
		return []rune{'"', '\\', '/', 0x7f, '<', '>', '&', '\'', ' ', '~'}[r.IntN(10)]
	case 2, 3, 4:
		return rune(0x20 + r.IntN(0x5f))
	case 5:
		return rune(0x80 + r.IntN(0x80))
	case 6:
		for {
			c := rune(0x100 + r.IntN(0xff00))
			if c < 0xd800 || c > 0xdfff {
				return c
			}
		}
	case 7:
		return specialRunes[r.IntN(len(specialRunes))]
	case 8:
		return rune(0x10000 + r.IntN(0x100000))
	default:
		return rune(0x1f300 + r.IntN(0x800))
	}
}

func randString(r *rand.Rand, maxLen int) string {
	n := r.IntN(maxLen + 1)
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteRune(randRune(r))
	}
	return b.String()
}

// randFloat covers all magnitudes: raw bit patterns (NaN, Inf, subnormals),
// powers of ten and their neighbours, the repr switch points 1e-4 and 1e16,
// short decimals, integers and powers of two.
func randFloat(r *rand.Rand) float64 {
	sign := 1.0
	if r.IntN(2) == 0 {
		sign = -1
	}
	switch r.IntN(9) {
	case 0:
		return math.Float64frombits(r.Uint64())
	case 1: // subnormal
		return sign * math.Float64frombits(r.Uint64()&(1<<52-1))
	case 2: // power of ten, possibly nudged
		f, _ := strconv.ParseFloat(fmt.Sprintf("1e%d", r.IntN(636)-325), 64)
		return sign * nudge(r, f, 2)
	case 3: // repr's switch points and their neighbours
		bases := []float64{1e-4, 1e16, 1e-5, 1e15, 1e17, 1e-3, 9.999999999999999e-05, 9999999999999998}
		return sign * nudge(r, bases[r.IntN(len(bases))], 4)
	case 4: // short decimal
		s := fmt.Sprintf("%de%d", r.Int64N(1e17), r.IntN(61)-30)
		f, _ := strconv.ParseFloat(s, 64)
		return sign * f
	case 5: // integral
		return sign * float64(r.Int64N(1<<62)>>r.IntN(62))
	case 6:
		return sign * r.Float64() * math.Pow(10, float64(r.IntN(40)-20))
	case 7:
		return sign * math.Ldexp(1, r.IntN(2098)-1074)
	default:
		return sign * nudge(r, math.MaxFloat64, 3)
	}
}

func nudge(r *rand.Rand, f float64, max int) float64 {
	for n := r.IntN(2*max+1) - max; n != 0; {
		if n > 0 {
			f = math.Nextafter(f, math.Inf(1))
			n--
		} else {
			f = math.Nextafter(f, math.Inf(-1))
			n++
		}
	}
	return f
}

// randIntText returns an integer literal, sometimes hundreds of digits long.
func randIntText(r *rand.Rand) string {
	switch r.IntN(6) {
	case 0:
		return []string{"0", "-0", "1", "-1", "9223372036854775807", "-9223372036854775808", "18446744073709551616"}[r.IntN(7)]
	case 1:
		return strconv.FormatInt(r.Int64(), 10)
	case 2:
		return randDigits(r, 1+r.IntN(400), true)
	default:
		return strconv.FormatInt(r.Int64N(2000)-1000, 10)
	}
}

func randDigits(r *rand.Rand, n int, signed bool) string {
	var b strings.Builder
	if signed && r.IntN(2) == 0 {
		b.WriteByte('-')
	}
	b.WriteByte(byte('1' + r.IntN(9)))
	for i := 1; i < n; i++ {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
	return b.String()
}

// randFloatText returns a float literal in any form the JSON grammar
// allows: "1.50", "1E5", "-0.0", "1e400", long mantissas, exact halfway
// points between adjacent doubles.
func randFloatText(r *rand.Rand) string {
	switch r.IntN(8) {
	case 0:
		return []string{"0.0", "-0.0", "1.50", "1E5", "1e-5", "1e400", "-1e400", "1e-400", "-1e-400", "0e0", "0E-0", "2.5e+3",
			"NaN", "Infinity", "-Infinity", "1.7976931348623157e308", "1.7976931348623159e308", "4.9e-324", "2.4703282292062328e-324"}[r.IntN(19)]
	case 1, 2:
		return halfwayText(r)
	case 3:
		return randDigits(r, 1+r.IntN(30), true) + "." + strings.TrimLeft(randDigits(r, 1+r.IntN(30), false), "-")
	case 4:
		return randDigits(r, 1+r.IntN(20), true) + []string{"e", "E"}[r.IntN(2)] + []string{"", "+", "-"}[r.IntN(3)] + strconv.Itoa(r.IntN(400))
	case 5:
		return randDigits(r, 1+r.IntN(800), true) + "e-" + strconv.Itoa(r.IntN(1200))
	default:
		return FormatFloat(randFloat(r))
	}
}

// halfwayText is the exact decimal midpoint between a random double and its
// successor, optionally perturbed just above or below: the hardest inputs
// for correct rounding.
func halfwayText(r *rand.Rand) string {
	f := math.Abs(randFloat(r))
	if math.IsNaN(f) || math.IsInf(f, 0) || f == math.MaxFloat64 {
		f = 1.5
	}
	g := math.Nextafter(f, math.Inf(1))
	mid := new(big.Float).SetPrec(2000).SetFloat64(f)
	mid.Add(mid, new(big.Float).SetPrec(2000).SetFloat64(g))
	mid.Quo(mid, big.NewFloat(2).SetPrec(2000))
	s := mid.Text('e', 1100)
	mant, exp, _ := strings.Cut(s, "e")
	mant = strings.TrimRight(mant, "0")
	mant = strings.TrimSuffix(mant, ".")
	switch r.IntN(3) {
	case 0:
		if !strings.Contains(mant, ".") {
			mant += ".0"
		}
		mant += "000000000001"
	case 1:
		if strings.Contains(mant, ".") && strings.HasSuffix(mant, "5") {
			mant = mant[:len(mant)-1] + "4999999999999"
		}
	}
	return mant + "e" + exp
}

// node is the transport form of a generated value for the Python side:
// built with encoding/json, free of any string escaping or number formatting
// by this package, so it cannot hide this package's bugs.
type node = []any

func codepoints(s string) []int {
	cps := make([]int, 0, utf8.RuneCountInString(s))
	for _, c := range s {
		cps = append(cps, int(c))
	}
	return cps
}

// randValue returns a Go value for Marshal and its transport node.
func randValue(r *rand.Rand, depth int) (any, node) {
	k := r.IntN(14)
	if depth <= 0 && k >= 9 {
		k = r.IntN(9)
	}
	switch k {
	case 0:
		return nil, node{"z"}
	case 1:
		b := r.IntN(2) == 0
		return b, node{"b", b}
	case 2, 3:
		s := randString(r, 12)
		return s, node{"s", codepoints(s)}
	case 4:
		t := randIntText(r)
		switch r.IntN(4) {
		case 0:
			return Number(t), node{"i", t}
		case 1:
			if n, err := strconv.ParseInt(t, 10, 64); err == nil {
				return n, node{"i", t}
			}
			return Number(t), node{"i", t}
		case 2:
			if n, err := strconv.ParseUint(t, 10, 64); err == nil {
				return n, node{"i", t}
			}
			return Number(t), node{"i", t}
		default:
			if n, err := strconv.ParseInt(t, 10, 0); err == nil {
				return int(n), node{"i", t}
			}
			return Number(t), node{"i", t}
		}
	case 5, 6:
		f := randFloat(r)
		return f, node{"f", strconv.FormatUint(math.Float64bits(f), 16)}
	case 7:
		f := float32(randFloat(r))
		return f, node{"f", strconv.FormatUint(math.Float64bits(float64(f)), 16)}
	case 8:
		t := randFloatText(r)
		return Number(t), node{"F", t}
	case 9, 10:
		n := r.IntN(5)
		switch r.IntN(6) {
		case 0:
			xs := make([]string, n)
			ns := make([]any, n)
			for i := range xs {
				xs[i] = randString(r, 6)
				ns[i] = node{"s", codepoints(xs[i])}
			}
			return xs, node{"l", ns}
		case 1:
			xs := make([]float64, n)
			ns := make([]any, n)
			for i := range xs {
				xs[i] = randFloat(r)
				ns[i] = node{"f", strconv.FormatUint(math.Float64bits(xs[i]), 16)}
			}
			return xs, node{"l", ns}
		case 2:
			xs := make([]Number, n)
			ns := make([]any, n)
			for i := range xs {
				if r.IntN(2) == 0 {
					xs[i] = Number(randIntText(r))
					ns[i] = node{"i", string(xs[i])}
				} else {
					xs[i] = Number(randFloatText(r))
					ns[i] = node{"F", string(xs[i])}
				}
			}
			return xs, node{"l", ns}
		default:
			xs := make([]any, n)
			ns := make([]any, n)
			for i := range xs {
				xs[i], ns[i] = randValue(r, depth-1)
			}
			return xs, node{"l", ns}
		}
	case 11:
		m := map[string]any{}
		ns := []any{}
		for i, n := 0, r.IntN(5); i < n; i++ {
			k := randKey(r)
			v, vn := randValue(r, depth-1)
			if _, dup := m[k]; dup {
				continue
			}
			m[k] = v
			ns = append(ns, []any{codepoints(k), vn})
		}
		return m, node{"m", ns}
	default:
		o := NewObject()
		ns := []any{}
		for i, n := 0, r.IntN(6); i < n; i++ {
			k := randKey(r)
			v, vn := randValue(r, depth-1)
			o.Set(k, v) // duplicates: replace value, keep position (dict)
			ns = append(ns, []any{codepoints(k), vn})
		}
		return o, node{"o", ns}
	}
}

func randKey(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return []string{"a", "b", "B", "é", "\U0001f600", "\uffff", "", "a\n"}[r.IntN(8)]
	}
	return randString(r, 6)
}

// randJSONText writes a random, valid JSON text with random whitespace,
// escape styles (short, \u with either hex case, surrogate pairs, raw) and
// number spellings, for the parser tests.
func randJSONText(r *rand.Rand, depth int) []byte {
	var b []byte
	ws := func() {
		if r.IntN(3) == 0 {
			b = append(b, []string{" ", "\n", "\t", "\r\n  ", "  "}[r.IntN(5)]...)
		}
	}
	var val func(d int)
	str := func() {
		b = append(b, '"')
		for i, n := 0, r.IntN(8); i < n; i++ {
			c := randRune(r)
			switch {
			case c == '"' || c == '\\' || c < 0x20 || r.IntN(4) == 0:
				switch c {
				case '"', '\\':
					b = append(b, '\\', byte(c))
					continue
				case '\n':
					if r.IntN(2) == 0 {
						b = append(b, '\\', 'n')
						continue
					}
				case '/':
					b = append(b, '\\', '/')
					continue
				}
				hexfmt := "\\u%04x"
				if r.IntN(2) == 0 {
					hexfmt = "\\u%04X"
				}
				if c >= 0x10000 {
					c -= 0x10000
					b = fmt.Appendf(b, hexfmt, 0xd800+(c>>10))
					b = fmt.Appendf(b, hexfmt, 0xdc00+(c&0x3ff))
				} else {
					b = fmt.Appendf(b, hexfmt, c)
				}
			default:
				b = utf8.AppendRune(b, c)
			}
		}
		b = append(b, '"')
	}
	val = func(d int) {
		k := r.IntN(10)
		if d <= 0 && k >= 7 {
			k = r.IntN(7)
		}
		switch k {
		case 0:
			b = append(b, []string{"null", "true", "false"}[r.IntN(3)]...)
		case 1, 2:
			str()
		case 3, 4:
			b = append(b, randIntText(r)...)
		case 5, 6:
			b = append(b, randFloatText(r)...)
		case 7, 8:
			b = append(b, '{')
			ws()
			for i, n := 0, r.IntN(5); i < n; i++ {
				if i > 0 {
					b = append(b, ',')
					ws()
				}
				if r.IntN(3) == 0 {
					b = append(b, []string{`"a"`, `"b"`, `"\u0061"`, `"\ud83d\ude00"`, `"😀"`}[r.IntN(5)]...)
				} else {
					str()
				}
				ws()
				b = append(b, ':')
				ws()
				val(d - 1)
				ws()
			}
			b = append(b, '}')
		default:
			b = append(b, '[')
			ws()
			for i, n := 0, r.IntN(5); i < n; i++ {
				if i > 0 {
					b = append(b, ',')
					ws()
				}
				val(d - 1)
				ws()
			}
			b = append(b, ']')
		}
	}
	ws()
	val(depth)
	ws()
	return b
}

// mutate damages a text in ways that exercise every error path.
func mutate(r *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	for i, n := 0, 1+r.IntN(3); i < n; i++ {
		pos := 0
		if len(b) > 0 {
			pos = r.IntN(len(b) + 1)
		}
		insert := func(s string) { b = append(b[:pos], append([]byte(s), b[pos:]...)...) }
		switch r.IntN(9) {
		case 0:
			if pos < len(b) {
				b = append(b[:pos], b[pos+1:]...)
			}
		case 1:
			b = b[:pos]
		case 2:
			const chars = "[]{}\",:\\ -+.eE0123456789ntfNI\x01\x1f\t"
			insert(string(chars[r.IntN(len(chars))]))
		case 3:
			if pos < len(b) {
				const chars = "[]{}\",:\\ -.eE019uxa\x00\x7f"
				b[pos] = chars[r.IntN(len(chars))]
			}
		case 4:
			insert([]string{`\ud800`, `\udc00`, `\ud83d\u0041`, `\uDBFF`, `\ud83d\ude00`}[r.IntN(5)])
		case 5:
			insert([]string{"\xff", "\xc3", "\xed\xa0\x80", "\xef\xbb\xbf", "\xc0\x80"}[r.IntN(5)])
		case 6:
			insert([]string{"\\", "\\u", "\\u12", "\\x", "\"", "\u00a0", "\u2028"}[r.IntN(7)])
		case 7:
			insert([]string{"NaN", "-Infinity", "Infinity", "-", "1e", "0", "00", "1.", ".5"}[r.IntN(9)])
		default:
			if pos < len(b) {
				b = append(b[:pos], b[pos+r.IntN(len(b)-pos+1):]...)
			}
		}
	}
	return b
}
