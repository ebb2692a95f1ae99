package pypath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// A link of another user is never followed, wherever it is on the path;
// the caller's own links are. (The tests run as root in CI; as another
// user the chown below fails and the test skips.)
func TestResolveFollowsOnlyTheCallersAndRootsLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "private")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "theirs.db")
	sub := filepath.Join(dir, "sub")
	mine := filepath.Join(dir, "mine.db")
	for _, l := range []string{theirs, sub, mine} {
		to := filepath.Join(target, "a.db")
		if l == sub {
			to = target
		}
		if err := os.Symlink(to, l); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		for _, l := range []string{theirs, sub} {
			if err := os.Lchown(l, 65534, 65534); err != nil {
				t.Skipf("cannot give a link to another user: %v", err)
			}
		}
	} else {
		t.Skip("needs root to make links of another user")
	}
	for _, p := range []string{theirs, filepath.Join(sub, "a.db")} {
		_, err := Resolve(p)
		var le *LinkError
		if !errors.As(err, &le) || !errors.Is(err, fs.ErrPermission) || le.Owner != 65534 ||
			!strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("Resolve(%s) = %v, want a *LinkError of uid 65534", p, err)
		}
	}
	got, err := Resolve(mine)
	if err != nil || got != filepath.Join(target, "a.db") {
		t.Errorf("Resolve(own link) = %q, %v", got, err)
	}
}
