package pyjson

import (
	"strings"
	"testing"
)

func TestDepth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int
	}{
		{`1`, 0},
		{`"[[["`, 0},
		{`[]`, 1},
		{`{}`, 1},
		{`[1, 2]`, 1},
		{`[[1]]`, 2},
		{`{"a": [1]}`, 2},
		{`{"a": "]]]\"[[[[", "b": {"c": {}}}`, 3},
		{`[[1], [[2]], 3]`, 3},
		{`{"\\": [[["x\\\""]]]}`, 4},
		{strings.Repeat("[", 1000) + strings.Repeat("]", 1000), 1000},
	} {
		if got := Depth(c.in); got != c.want {
			t.Errorf("Depth(%.40q) = %d, want %d", c.in, got, c.want)
		}
		if got := Depth([]byte(c.in)); got != c.want {
			t.Errorf("Depth([]byte(%.40q)) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestDepthMatchesParse: on JSON the parser accepts, Depth is the depth of
// the value the parser builds.
func TestDepthMatchesParse(t *testing.T) {
	t.Parallel()
	var depthOf func(v any) int
	depthOf = func(v any) int {
		d := 0
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				d = max(d, depthOf(e))
			}
			return d + 1
		case *Object:
			x.Range(func(_ string, e any) bool { d = max(d, depthOf(e)); return true })
			return d + 1
		}
		return 0
	}
	for _, in := range []string{`[{"a": [1, {"b": "}"}]}, [], {}]`, `{"x": {"y": {"z": ["\"[", [[]]]}}}`, `NaN`, `"\u005b"`} {
		v, err := Parse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := Depth(in), depthOf(v); got != want {
			t.Errorf("Depth(%q) = %d, the parsed value's depth is %d", in, got, want)
		}
	}
}
