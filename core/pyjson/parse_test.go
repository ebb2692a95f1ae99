package pyjson

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// compact renders a parsed value for comparison; NonASCII keeps it readable.
var compactRaw = Options{Indent: -1, ItemSep: ",", KeySep: ":"}

func TestParseValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string // want: Marshal(Parse(in), compactRaw)
	}{
		{`null`, `null`},
		{`true`, `true`},
		{`false`, `false`},
		{` 	 "x"` + "\r\n", `"x"`},
		{`0`, `0`},
		{`-0`, `0`},
		{`-0.0`, `-0.0`},
		{`1.50`, `1.5`},
		{`1E5`, `100000.0`},
		{`1e-5`, `1e-05`},
		{`1e400`, `Infinity`},
		{`-1e400`, `-Infinity`},
		{`NaN`, `NaN`},
		{`Infinity`, `Infinity`},
		{`-Infinity`, `-Infinity`},
		{`123456789012345678901234567890`, `123456789012345678901234567890`},
		{`[]`, `[]`},
		{`[ ]`, `[]`},
		{`{}`, `{}`},
		{"{ \n}", `{}`},
		{`[1, [2, [3]], {"a": []}]`, `[1,[2,[3]],{"a":[]}]`},
		{`{"b": 1, "a": 2}`, `{"b":1,"a":2}`},
		// Duplicate keys: last value wins, first position kept.
		{`{"a": 1, "b": 2, "a": 3}`, `{"a":3,"b":2}`},
		// Escapes.
		{`"\" \\ \/ \b \f \n \r \t"`, `"\" \\ / \b \f \n \r \t"`},
		{`"\u0041\u00e9\u00E9\u4e2d"`, `"Aéé中"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\uD83D\uDE00"`, `"😀"`},
		{`"\u0000"`, `"\u0000"`},
		{"\"raw \x7f é 中 😀\"", "\"raw \x7f é 中 😀\""},
		{`"<>&"`, `"<>&"`},
	}
	for _, tc := range tests {
		v, err := Parse([]byte(tc.in))
		if err != nil {
			t.Errorf("Parse(%q) error: %v", tc.in, err)
			continue
		}
		got, err := Marshal(v, compactRaw)
		if err != nil {
			t.Errorf("Marshal(Parse(%q)) error: %v", tc.in, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("Parse(%q) -> %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestParseTypes(t *testing.T) {
	t.Parallel()
	v, err := Parse([]byte(`[null, true, "s", 1.50, 1E5, -0, NaN, [], {}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{nil, true, "s", Number("1.50"), Number("1E5"), Number("-0"), Number("NaN"), []any{}, NewObject()}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("Parse types = %#v, want %#v", v, want)
	}
	o, err := Parse([]byte(`{"z": 1, "y": {"x": null}}`))
	if err != nil {
		t.Fatal(err)
	}
	obj := o.(*Object)
	if got := obj.Keys(); !reflect.DeepEqual(got, []string{"z", "y"}) {
		t.Errorf("keys = %v", got)
	}
	inner, _ := obj.Get("y")
	if x, ok := inner.(*Object).Get("x"); !ok || x != nil {
		t.Errorf("inner x = %v, %v", x, ok)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		msg    string // prefix of SyntaxError.Msg
		offset int    // byte offset
	}{
		// Messages and positions as CPython 3.11 reports them.
		{``, "Expecting value", 0},
		{` `, "Expecting value", 1},
		{`nul`, "Expecting value", 0},
		{`-`, "Expecting value", 0},
		{`-Inf`, "Expecting value", 0},
		{`-NaN`, "Expecting value", 0},
		{`+1`, "Expecting value", 0},
		{`.5`, "Expecting value", 0},
		{`'a'`, "Expecting value", 0},
		{`[`, "Expecting value", 1},
		{`[1,]`, "Expecting value", 3},
		{`[1 2]`, "Expecting ',' delimiter", 3},
		{`[1`, "Expecting ',' delimiter", 2},
		{`{`, "Expecting property name enclosed in double quotes", 1},
		{`{"a":1,}`, "Expecting property name enclosed in double quotes", 7},
		{`{1:2}`, "Expecting property name enclosed in double quotes", 1},
		{`{"a" 1}`, "Expecting ':' delimiter", 5},
		{`{"a":}`, "Expecting value", 5},
		{`{"a":1 "b":2}`, "Expecting ',' delimiter", 7},
		{`"abc`, "Unterminated string starting at", 0},
		{`["abc\`, "Unterminated string starting at", 1},
		{`"\u12`, "Invalid \\uXXXX escape", 2},
		{`"\u1234`, "Invalid \\uXXXX escape", 2}, // CPython wants one more char
		{`"\u12G4"`, "Invalid \\uXXXX escape", 2},
		{`"\ud800\u12G4"`, "Invalid \\uXXXX escape", 8},
		{`"\x"`, "Invalid \\escape", 1},
		{`"\'"`, "Invalid \\escape", 1},
		{"\"a\x01\"", "Invalid control character at", 2},
		{"\"a\nb\"", "Invalid control character at", 2},
		{"\"a\tb\"", "Invalid control character at", 2},
		{`1.`, "Extra data", 1},
		{`01`, "Extra data", 1},
		{`1e`, "Extra data", 1},
		{`1e+`, "Extra data", 1},
		{`1 2`, "Extra data", 2},
		{`{} x`, "Extra data", 3},
		{`nulll`, "Extra data", 4},
		{`[1]]`, "Extra data", 3},
		{"\ufeff[1]", "Unexpected UTF-8 BOM", 0},
		{"\u00a0 1", "Expecting value", 0}, // NBSP is not JSON whitespace
		{"\f1", "Expecting value", 0},
		// This package's own rejections.
		{"\"a\xff\"", "Invalid UTF-8", 2},
		{"\"\xed\xa0\x80\"", "Invalid UTF-8", 1}, // UTF-8-encoded surrogate
		{"[\"\xc3\"]", "Invalid UTF-8", 2},
		{`"\ud800"`, "Lone surrogate", 1},
		{`"ab\udc00"`, "Lone surrogate", 3},
		{`"\ud800\u0041"`, "Lone surrogate", 1},
		{`"\ud800\ud800"`, "Lone surrogate", 1},
		{`"\udbff"`, "Lone surrogate", 1},
		{`"x\ud83d`, "Invalid \\uXXXX escape", 3},
		{`"\ud83d"`, "Lone surrogate", 1},
		{strings.Repeat("1", MaxIntDigits+1), "Exceeds the limit (4300 digits)", 0},
		{"[-" + strings.Repeat("1", MaxIntDigits+1) + "]", "Exceeds the limit (4300 digits)", 1},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), "Nesting deeper than", MaxDepth},
		{strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), "Nesting deeper than", 5 * MaxDepth},
	}
	for _, tc := range tests {
		v, err := Parse([]byte(tc.in))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%.40q) = %v, %v; want SyntaxError %q", tc.in, v, err, tc.msg)
			continue
		}
		if !strings.HasPrefix(se.Msg, tc.msg) || se.Offset != tc.offset {
			t.Errorf("Parse(%.40q) error %q at %d, want %q at %d", tc.in, se.Msg, se.Offset, tc.msg, tc.offset)
		}
		if !strings.Contains(err.Error(), "byte offset") {
			t.Errorf("error text %q lacks the byte offset", err)
		}
	}
}

func TestParseLimitsAccepted(t *testing.T) {
	t.Parallel()
	// Exactly at the limits is fine.
	for _, in := range []string{
		strings.Repeat("9", MaxIntDigits),
		"-" + strings.Repeat("9", MaxIntDigits),
		"1" + strings.Repeat("0", 5000) + ".0", // floats have no digit limit
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	} {
		if _, err := Parse([]byte(in)); err != nil {
			t.Errorf("Parse(%.30q...) error: %v", in, err)
		}
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	t.Parallel()
	// Line and column as JSONDecodeError computes them; column counts
	// characters, the offset counts bytes.
	_, err := Parse([]byte("[\"é\",\n  \"ü\" x]"))
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("want SyntaxError, got %v", err)
	}
	if se.Msg != "Expecting ',' delimiter" || se.Line != 2 || se.Column != 7 || se.Offset != 14 {
		t.Errorf("got %+v", se)
	}
	want := "pyjson: Expecting ',' delimiter: line 2 column 7 (byte offset 14)"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

// TestParseWithMaxString: a string longer than MaxString (decoded) is not
// built and Long's value stands in its place; one at the limit is built;
// the rest of the input is parsed (and checked) as usual.
func TestParseWithMaxString(t *testing.T) {
	t.Parallel()
	type long struct{ n int }
	opts := ParseOptions{MaxString: 8, Long: func(n int) any { return long{n} }}
	for _, c := range []struct {
		in   string
		want any
	}{
		{`"12345678"`, "12345678"},
		{`"123456789"`, long{9}},
		{`"1234567\n"`, "1234567\n"},           // 9 bytes encoded, 8 decoded
		{`"\u00e9\u00e9\u00e9\u00e9"`, "éééé"}, // 24 encoded, 8 decoded
		{`"\u00e9\u00e9\u00e9\u00e9x"`, long{9}},
		{`"\ud83d\ude00\ud83d\ude00x"`, long{9}},
		{`"\"\"\"\"\"\"\"\"\\"`, long{9}},
	} {
		v, err := ParseWith([]byte(c.in), opts)
		if err != nil || v != c.want {
			t.Errorf("ParseWith(%s) = %#v, %v; want %#v", c.in, v, err, c.want)
		}
	}
	v, err := ParseWith([]byte(`{"a": "123456789", "b": [1, "x"]}`), opts)
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*Object)
	if a, _ := o.Get("a"); a != (long{9}) {
		t.Errorf("a = %#v", a)
	}
	if _, err := ParseWith([]byte(`["123456789", ]`), opts); err == nil {
		t.Error("the rest of the input was not checked")
	}
}

// TestDecodedLen: decodedLen counts what the parser builds, for strings
// long enough to be counted before they are decoded.
func TestDecodedLen(t *testing.T) {
	t.Parallel()
	r := newRand(7)
	pieces := []string{"a", "é", "中", "😀", `\n`, `\"`, `\\`, `\/`, `\u00e9`, `\u4e2d`, `\ud83d\ude00`, `\u0041`, "\t"}
	for k := 0; k < 500; k++ {
		var b strings.Builder
		for n := r.IntN(40); n > 0; n-- {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		body := strings.ReplaceAll(b.String(), "\t", `\t`)
		v, err := Parse([]byte(`"` + body + `"`))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if got, want := decodedLen([]byte(body)), len(v.(string)); got != want {
			t.Fatalf("decodedLen(%q) = %d, the string has %d bytes", body, got, want)
		}
	}
	// A long string is allocated at its decoded size.
	body := strings.Repeat(`x\n`, exactBufferFrom)
	v, err := Parse([]byte(`"` + body + `"`))
	if err != nil {
		t.Fatal(err)
	}
	if s := v.(string); len(s) != 2*exactBufferFrom || s[:3] != "x\nx" {
		t.Fatalf("decoded %d bytes", len(s))
	}
}

// Object keys read through the shared-key path are the keys str reads:
// escapes, control characters, the longest shared length and one past
// it, repeated keys (one string), and errors at the same offsets.
func TestParseSharedKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", maxSharedKey)
	doc := `[{"a":1,"b\u00e9":2,"` + long + `":3,"` + long + `x":4},{"a":5,"b\u00e9":6,"` + long + `":7,"` + long + `x":8}]`
	v, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	list := v.([]any)
	for _, o := range list {
		if got, want := o.(*Object).Keys(), []string{"a", "bé", long, long + "x"}; !slices.Equal(got, want) {
			t.Fatalf("keys %q, want %q", got, want)
		}
	}
	k0, k1 := list[0].(*Object).Keys()[0], list[1].(*Object).Keys()[0]
	if unsafe.StringData(k0) != unsafe.StringData(k1) {
		t.Error(`the second "a" is a new string, not the first one's`)
	}
	for _, bad := range []string{"{\"a\x01\":1}", "{\"a\\x\":1}", `{"a`, `{"` + long + "\x02\":1}"} {
		_, err := Parse([]byte(bad))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Fatalf("%q: %v, want a SyntaxError", bad, err)
		}
		p := &parser{data: []byte(bad)}
		_, _, want := p.str(1)
		if want == nil || err.Error() != want.Error() {
			t.Errorf("%q: %v, want str's %v", bad, err, want)
		}
	}
}
