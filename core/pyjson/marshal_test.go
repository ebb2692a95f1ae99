package pyjson

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// point is a Go type with no JSON form: Marshal refuses it rather than
// guess one (the C layer converts its values first, capi/replies.go).
type point struct{ x, y int }

func obj(kv ...any) *Object {
	o := NewObject()
	for i := 0; i < len(kv); i += 2 {
		o.Set(kv[i].(string), kv[i+1])
	}
	return o
}

var (
	indent2   = Options{EnsureASCII: true, Indent: 2, ItemSep: ",", KeySep: ": "}
	indent0   = Options{EnsureASCII: true, Indent: 0, ItemSep: ",", KeySep: ": "}
	rawCompat = Options{Indent: -1, ItemSep: ",", KeySep: ":"}
)

func TestMarshalScalars(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   any
		want string
	}{
		{nil, `null`},
		{true, `true`},
		{false, `false`},
		{0, `0`},
		{-42, `-42`},
		{int8(-8), `-8`},
		{int16(16), `16`},
		{int32(-32), `-32`},
		{int64(math.MinInt64), `-9223372036854775808`},
		{uint(7), `7`},
		{uint8(255), `255`},
		{uint16(65535), `65535`},
		{uint32(math.MaxUint32), `4294967295`},
		{uint64(math.MaxUint64), `18446744073709551615`},
		{1.0, `1.0`},
		{0.1, `0.1`},
		{1e16, `1e+16`},
		{math.NaN(), `NaN`},
		{math.Inf(-1), `-Infinity`},
		{float32(0.1), `0.10000000149011612`},
		{float32(1.5), `1.5`},
		{Number("0"), `0`},
		{Number("-0"), `0`},
		{Number("-0.0"), `-0.0`},
		{Number("12345678901234567890123"), `12345678901234567890123`},
		{Number("1.50"), `1.5`},
		{Number("1E5"), `100000.0`},
		{Number("1e-5"), `1e-05`},
		{Number("1e400"), `Infinity`},
		{Number("-1e400"), `-Infinity`},
		{Number("1e-400"), `0.0`},
		{Number("-1e-400"), `-0.0`},
		{Number("NaN"), `NaN`},
		{Number("Infinity"), `Infinity`},
		{Number("-Infinity"), `-Infinity`},
		{Number(strings.Repeat("9", MaxIntDigits)), strings.Repeat("9", MaxIntDigits)},
		{"", `""`},
		{"plain", `"plain"`},
	}
	for _, tc := range tests {
		got, err := Marshal(tc.in, Default)
		if err != nil || string(got) != tc.want {
			t.Errorf("Marshal(%#v) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestMarshalStrings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in         string
		ascii, raw string
	}{
		{`"\`, `"\"\\"`, `"\"\\"`},
		{"\n\r\t\b\f", `"\n\r\t\b\f"`, `"\n\r\t\b\f"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`, `"\u0000\u0001\u001f"`},
		{"\x7f", `"\u007f"`, "\"\x7f\""},
		{"</script>&", `"</script>&"`, `"</script>&"`},
		{"é", `"\u00e9"`, `"é"`},
		{"\u00ff\u0100", `"\u00ff\u0100"`, "\"\u00ff\u0100\""},
		{"中文", `"\u4e2d\u6587"`, `"中文"`},
		{"\u2028\u2029", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"\ufeff\uffff", `"\ufeff\uffff"`, "\"\ufeff\uffff\""},
		{"\ud7ff\ue000", `"\ud7ff\ue000"`, "\"\ud7ff\ue000\""},
		{"😀", `"\ud83d\ude00"`, `"😀"`},
		{"\U00010000\U0010ffff", `"\ud800\udc00\udbff\udfff"`, "\"\U00010000\U0010ffff\""},
		{"a\"b😀c\\", `"a\"b\ud83d\ude00c\\"`, "\"a\\\"b😀c\\\\\""},
	}
	for _, tc := range tests {
		got, err := Marshal(tc.in, Default)
		if err != nil || string(got) != tc.ascii {
			t.Errorf("Marshal(%q, ensure_ascii) = %s, %v; want %s", tc.in, got, err, tc.ascii)
		}
		got, err = Marshal(tc.in, rawCompat)
		if err != nil || string(got) != tc.raw {
			t.Errorf("Marshal(%q, raw) = %s, %v; want %s", tc.in, got, err, tc.raw)
		}
	}
}

func TestMarshalContainers(t *testing.T) {
	t.Parallel()
	nested := obj("b", []any{1, "x", obj()}, "a", obj("z", nil, "y", []any{}), "c", 1.5)
	tests := []struct {
		in   any
		opt  Options
		want string
	}{
		{[]any{}, Default, `[]`},
		{[]any{}, indent2, `[]`},
		{obj(), indent2, `{}`},
		{[]any(nil), Default, `[]`},
		{map[string]any(nil), Default, `{}`},
		{[]string(nil), Default, `[]`},
		{[]any{1, "a", nil, true}, Default, `[1, "a", null, true]`},
		{[]any{1, "a", nil, true}, Compact, `[1,"a",null,true]`},
		{[]string{"a", "é"}, Default, `["a", "\u00e9"]`},
		{[]Number{"1", "1.0", "-0"}, Default, `[1, 1.0, 0]`},
		{[]float64{1, 0.5, math.NaN()}, Default, `[1.0, 0.5, NaN]`},
		{[]*Object{obj("a", 1), nil}, Compact, `[{"a":1},{}]`},
		{nested, Default, `{"b": [1, "x", {}], "a": {"z": null, "y": []}, "c": 1.5}`},
		{nested, Compact, `{"b":[1,"x",{}],"a":{"z":null,"y":[]},"c":1.5}`},
		{nested, Canonical, `{"a":{"y":[],"z":null},"b":[1,"x",{}],"c":1.5}`},
		{nested, indent2, "{\n  \"b\": [\n    1,\n    \"x\",\n    {}\n  ],\n  \"a\": {\n    \"z\": null,\n    \"y\": []\n  },\n  \"c\": 1.5\n}"},
		{nested, indent0, "{\n\"b\": [\n1,\n\"x\",\n{}\n],\n\"a\": {\n\"z\": null,\n\"y\": []\n},\n\"c\": 1.5\n}"},
		// indent with the default ", " separator leaves trailing spaces, as
		// json.dumps(v, indent=1, separators=(", ", ": ")) does.
		{[]any{1, 2}, Options{Indent: 1, ItemSep: ", ", KeySep: ": "}, "[\n 1, \n 2\n]"},
		{"scalar", indent2, `"scalar"`},
		// Go maps are always written sorted.
		{map[string]any{"b": 1, "a": 2, "é": 3, "z": 4}, Default, `{"a": 2, "b": 1, "z": 4, "\u00e9": 3}`},
		// Code point order, not UTF-16 order: U+FFFF sorts before U+10000.
		{obj("\U00010000", 1, "\uffff", 2), Canonical, `{"\uffff":2,"\ud800\udc00":1}`},
		{obj("k\n", 1), Default, `{"k\n": 1}`},
	}
	for _, tc := range tests {
		got, err := Marshal(tc.in, tc.opt)
		if err != nil || string(got) != tc.want {
			t.Errorf("Marshal(%#v, %+v) =\n%s, %v\nwant\n%s", tc.in, tc.opt, got, err, tc.want)
		}
	}
}

func TestMarshalErrors(t *testing.T) {
	t.Parallel()
	self := NewObject()
	self.Set("me", self)
	loop := []any{nil}
	loop[0] = loop
	m := map[string]any{}
	m["m"] = m
	deep := any("x")
	for i := 0; i < MaxDepth+1; i++ {
		deep = []any{deep}
	}
	okDeep := any("x")
	for i := 0; i < MaxDepth; i++ {
		okDeep = []any{okDeep}
	}
	if _, err := Marshal(okDeep, Compact); err != nil {
		t.Errorf("Marshal at MaxDepth: %v", err)
	}
	type kind string
	tests := []struct {
		in   any
		want string
	}{
		{kind("x"), "pyjson.kind"},
		{[]int{1}, "[]int"},
		{map[string]int{}, "map[string]int"},
		{struct{}{}, "struct {}"},
		{[]byte("x"), "[]uint8"},
		{&[]any{}, "*[]interface {}"},
		{[]any{1, complex(1, 2)}, "complex128"},
		{obj("a", obj("b", uintptr(1))), "uintptr"},
		{Number("01"), "invalid Number"},
		{Number(""), "invalid Number"},
		{Number("inf"), "invalid Number"},
		{Number(strings.Repeat("9", MaxIntDigits+1)), "4301 digits"},
		{"bad \xff utf8", "not valid UTF-8"},
		{obj("bad \xff", 1), "not valid UTF-8"},
		{self, "Circular reference"},
		{loop, "Circular reference"},
		{m, "Circular reference"},
		{deep, "nested deeper"},
		{point{1, 2}, "pyjson.point"},
		{[]any{point{1, 2}}, "pyjson.point"},
	}
	for _, tc := range tests {
		got, err := Marshal(tc.in, Default)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Marshal(%T) = %q, %v; want error containing %q", tc.in, got, err, tc.want)
		}
	}
	var ut *UnsupportedTypeError
	if _, err := Marshal(kind("x"), Default); !errors.As(err, &ut) || ut.Type != "pyjson.kind" {
		t.Errorf("want *UnsupportedTypeError naming pyjson.kind, got %v", err)
	}
}

func TestMarshalSharedNotCircular(t *testing.T) {
	t.Parallel()
	// The same container twice (not inside itself) is fine, as in Python.
	shared := []any{1}
	o := obj("a", shared, "b", shared)
	got, err := Marshal([]any{o, o}, Compact)
	if err != nil || string(got) != `[{"a":[1],"b":[1]},{"a":[1],"b":[1]}]` {
		t.Errorf("got %s, %v", got, err)
	}
}
