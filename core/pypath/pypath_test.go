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

// Clean, Join, Parent, Name and ExpandUser are pathlib's: the strings
// ejKernel's PersistentCache shows and uses for its places.
func TestPurePathMatchesPython(t *testing.T) {
	pairs := [][2]string{
		{"", "x.json"}, {".", "x.json"}, {"a//b/./", "c.json"}, {"/h", "/t/k.json"}, {"//srv/x", "y.json"},
		{"///a", "b"}, {"a/..", "b/../c.json"}, {"~", "x.json"}, {"/", "x.json"}, {"rel", "sub/op.json"},
	}
	homes := []string{"~", "~/a//b", "~root/x", "x/~", "~/", "/abs"}
	var want struct {
		Join, Parent, Name [][]string
		Expand, Homeless   []string
	}
	pytest.RunJSON(t, `
import json, os, sys, pathlib
inp = json.load(sys.stdin)
out = {"Join": [], "Parent": [], "Name": [], "Expand": [], "Homeless": []}
for a, b in inp["pairs"]:
    j = pathlib.PurePosixPath(a) / b
    out["Join"].append([str(j)])
    out["Parent"].append([str(j.parent), str(pathlib.PurePosixPath(a).parent)])
    out["Name"].append([j.name, pathlib.PurePosixPath(a).name])
os.environ["HOME"] = "/home/tuner/"
for h in inp["homes"]:
    out["Expand"].append(str(pathlib.Path(h).expanduser()))
os.environ["HOME"] = ""
out["Homeless"].append(str(pathlib.Path("~/x").expanduser()))
print(json.dumps(out))
`, map[string]any{"pairs": pairs, "homes": homes}, &want)
	for i, p := range pairs {
		j := Join(p[0], p[1])
		got := []string{j}
		if got[0] != want.Join[i][0] {
			t.Errorf("Join(%q, %q) = %q, Python %q", p[0], p[1], got[0], want.Join[i][0])
		}
		if g := []string{Parent(j), Parent(p[0])}; g[0] != want.Parent[i][0] || g[1] != want.Parent[i][1] {
			t.Errorf("Parent of %q, %q = %q, Python %q", j, p[0], g, want.Parent[i])
		}
		if g := []string{Name(j), Name(p[0])}; g[0] != want.Name[i][0] || g[1] != want.Name[i][1] {
			t.Errorf("Name of %q, %q = %q, Python %q", j, p[0], g, want.Name[i])
		}
	}
	for i, h := range homes {
		got, err := ExpandUser(h, "/home/tuner/", true)
		if err != nil || got != want.Expand[i] {
			t.Errorf("ExpandUser(%q) = %q, %v; Python %q", h, got, err, want.Expand[i])
		}
	}
	if got, _ := ExpandUser("~/x", "", true); got != want.Homeless[0] {
		t.Errorf("ExpandUser with HOME empty = %q, Python %q", got, want.Homeless[0])
	}
	if _, err := ExpandUser("~no-such-user-here/x", "/h", true); err == nil {
		t.Error("an unknown user's ~ expanded")
	}
}
