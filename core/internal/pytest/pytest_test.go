package pytest

import (
	"reflect"
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", []string{""}},
		{"a\n", []string{"a"}},
		{"a\nb", []string{"a", "b"}},
		{"a\n\n", []string{"a", ""}},
	} {
		if got := Lines([]byte(c.in)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Lines(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestRun(t *testing.T) {
	got := Lines(Run(t, "import sys\nfor l in sys.stdin: print(l.strip().upper() + sys.argv[1])", []byte("a\nb\n"), "!"))
	if want := []string{"A!", "B!"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if v, err := Version(t); err != nil || !strings.HasPrefix(v, "3.") {
		t.Errorf("Version() = %q, %v", v, err)
	}
}

func TestRunJSON(t *testing.T) {
	var out struct{ N []int }
	RunJSON(t, "import json, sys\nprint(json.dumps({'N': [x * 2 for x in json.load(sys.stdin)]}))", []int{1, 2}, &out)
	if want := []int{2, 4}; !reflect.DeepEqual(out.N, want) {
		t.Errorf("got %v, want %v", out.N, want)
	}
	// A script too long for -c still runs, from a file.
	var n int
	RunJSON(t, "print(len(__import__('sys').argv))\n"+strings.Repeat("#\n", maxArg), nil, &n, "x")
	if n != 2 {
		t.Errorf("argv has %d items, want 2", n)
	}
}
