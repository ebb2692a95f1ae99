package pyjson

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error is a
// *SyntaxError with an offset inside the input, and that Marshal(Parse(x))
// is a fixed point: parsing the output and marshalling again gives the same
// bytes, for each option family.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		``, `null`, `[1, 2.50, -0, 1E5, 1e400, NaN, -Infinity]`, `{"a": {"b": [true, false]}, "a": 1}`,
		`"\u00e9\ud83d\ude00\n\t\"\\\/"`, `"\ud800"`, "\"\xff\"", "\ufeff{}", `[1,]`, `{"a" 1}`,
		`123456789012345678901234567890`, "\"\x7f é 中\"", ` [ { } , [ ] ] `, `"\u12`, `01`, `-`,
	} {
		f.Add([]byte(s))
	}
	r := newRand(5)
	for i := 0; i < 20; i++ {
		txt := randJSONText(r, 3)
		f.Add(txt)
		f.Add(mutate(r, txt))
	}
	opts := []Options{
		Canonical, Default,
		{Indent: 2, ItemSep: ",", KeySep: ": "},
		{SortKeys: true, EnsureASCII: true, Indent: 0, ItemSep: ",", KeySep: ": "},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): error %T is not *SyntaxError", data, err)
			}
			if se.Offset < 0 || se.Offset > len(data) || se.Line < 1 || se.Column < 1 {
				t.Fatalf("Parse(%q): bad position %+v", data, se)
			}
			return
		}
		for _, o := range opts {
			b1, err := Marshal(v, o)
			if err != nil {
				t.Fatalf("Marshal(Parse(%q), %+v): %v", data, o, err)
			}
			v2, err := Parse(b1)
			if err != nil {
				t.Fatalf("Parse(Marshal(Parse(%q))) = Parse(%q): %v", data, b1, err)
			}
			b2, err := Marshal(v2, o)
			if err != nil {
				t.Fatalf("Marshal of re-parsed %q: %v", b1, err)
			}
			if !bytes.Equal(b1, b2) {
				t.Fatalf("not stable for %q with %+v:\n%q\n%q", data, o, b1, b2)
			}
		}
	})
}
