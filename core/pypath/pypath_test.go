package pypath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

func TestSuffixStemWithSuffix(t *testing.T) {
	for _, c := range []struct{ name, suffix, stem, lock string }{
		{"cache.db", ".db", "cache", "cache.db.lock"},
		{"cache.sqlite", ".sqlite", "cache", "cache.db.lock"},
		{"cache", "", "cache", "cache.db.lock"},
		{"a.b.c", ".c", "a.b", "a.b.db.lock"},
		{".hidden", "", ".hidden", ".hidden.db.lock"},
		{"trailing.", "", "trailing.", "trailing..db.lock"},
	} {
		if got := Suffix(c.name); got != c.suffix {
			t.Errorf("Suffix(%q) = %q, want %q", c.name, got, c.suffix)
		}
		if got := Stem(c.name); got != c.stem {
			t.Errorf("Stem(%q) = %q, want %q", c.name, got, c.stem)
		}
		if got, _ := WithSuffix("/d/"+c.name, ".db.lock"); got != "/d/"+c.lock {
			t.Errorf("WithSuffix(%q) = %q, want %q", c.name, got, "/d/"+c.lock)
		}
	}
}

// TestMatchesPython compares Resolve, Stem and Suffix with pathlib on
// relative paths, symlinks, ".." after a symlink and missing components.
func TestMatchesPython(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "real", "sub"), 0o755)
	os.Symlink(filepath.Join(dir, "real", "sub"), filepath.Join(dir, "link"))
	paths := []string{"x.db", "link/x.db", "link/../y.db", "missing/dir/z.sqlite", "./a.b.c", "link/.hidden"}
	var want [][3]string
	pytest.RunJSON(t, `
import json, os, sys, pathlib
os.chdir(sys.argv[1])
out = []
for p in json.load(sys.stdin):
    r = pathlib.Path(p).resolve()
    out.append([str(r), r.stem, r.suffix])
print(json.dumps(out))
`, paths, &want, dir)
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		got, err := Resolve(p)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(got)
		if g := [3]string{got, Stem(name), Suffix(name)}; g != want[i] {
			t.Errorf("%q: got %q, Python %q", p, g, want[i])
		}
	}
}
