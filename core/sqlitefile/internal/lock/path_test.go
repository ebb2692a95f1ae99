package lock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

// chdir changes directory for one (non-parallel) test.
func chdir(t *testing.T, dir string) {
	t.Helper()
	old, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir(old) })
}

var compatNames = []struct{ in, out string }{
	{"cache.db", "cache.db.lock"},
	{"cache.sqlite", "cache.db.lock"},
	{"cache", "cache.db.lock"},
	{"a.b.c", "a.b.db.lock"},
	{".hidden", ".hidden.db.lock"},
	{"trailing.", "trailing..db.lock"},
	{"..x", "..db.lock"},
	{"x.db.lock", "x.db.db.lock"},
}

func TestPathForCompatExamples(t *testing.T) {
	t.Parallel()
	dir := physTempDir(t)
	for _, exist := range []bool{false, true} {
		for _, c := range compatNames {
			p := filepath.Join(dir, c.in)
			if exist {
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := PathFor(p)
			if err != nil {
				t.Fatalf("PathFor(%q): %v", p, err)
			}
			if want := filepath.Join(dir, c.out); got != want {
				t.Errorf("PathFor(%q) (exists=%v) = %q, want %q", p, exist, got, want)
			}
		}
	}
}

func TestPathForRelative(t *testing.T) {
	dir := physTempDir(t)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	chdir(t, dir)
	cases := map[string]string{
		"cache.db":            dir + "/cache.db.lock",
		"./cache.sqlite":      dir + "/cache.db.lock",
		"sub/../a.b.c":        dir + "/a.b.db.lock",
		"sub/x.db/":           dir + "/sub/x.db.lock",
		"missing/dir/cache":   dir + "/missing/dir/cache.db.lock",
		"missing/../.hidden":  dir + "/.hidden.db.lock",
		"sub//./deep/../y.db": dir + "/sub/y.db.lock",
		"":                    dir + ".db.lock", // Path("") is the cwd
	}
	for in, want := range cases {
		got, err := PathFor(in)
		if err != nil {
			t.Fatalf("PathFor(%q): %v", in, err)
		}
		if got != want {
			t.Errorf("PathFor(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPathForSymlinks(t *testing.T) {
	dir := physTempDir(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "real/deep"), 0o755))
	must(os.Symlink("real", filepath.Join(dir, "link")))                              // relative target
	must(os.Symlink(filepath.Join(dir, "real/deep"), filepath.Join(dir, "linkdeep"))) // absolute target
	must(os.WriteFile(filepath.Join(dir, "real/target.sqlite"), nil, 0o644))
	must(os.Symlink("real/target.sqlite", filepath.Join(dir, "db.lnk")))
	must(os.Symlink("loop2", filepath.Join(dir, "loop1")))
	must(os.Symlink("loop1", filepath.Join(dir, "loop2")))

	cases := map[string]string{
		dir + "/link/cache.db":        dir + "/real/cache.db.lock",
		dir + "/link/new/cache.db":    dir + "/real/new/cache.db.lock",
		dir + "/linkdeep/../c.db":     dir + "/real/c.db.lock", // ".." after the link, like realpath
		dir + "/db.lnk":               dir + "/real/target.db.lock",
		dir + "/link/deep/../../x.db": dir + "/x.db.lock",
	}
	for in, want := range cases {
		got, err := PathFor(in)
		if err != nil {
			t.Fatalf("PathFor(%q): %v", in, err)
		}
		if got != want {
			t.Errorf("PathFor(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := PathFor(dir + "/loop1/x.db"); err == nil {
		t.Errorf("symlink loop: want error")
	}

	// A cwd reached through a symlink, with $PWD telling the logical path
	// (os.Getwd would believe it; Python's os.getcwd does not).
	chdir(t, dir+"/link")
	t.Setenv("PWD", dir+"/link")
	got, err := PathFor("c.db")
	if err != nil {
		t.Fatal(err)
	}
	if want := dir + "/real/c.db.lock"; got != want {
		t.Errorf("PathFor from symlinked cwd = %q, want %q", got, want)
	}
}

func TestPathForRoot(t *testing.T) {
	t.Parallel()
	if _, err := PathFor("/"); err == nil {
		t.Error(`PathFor("/"): want error (empty name), as Python with_suffix raises`)
	}
}

// TestPathForMatchesPython compares with pathlib itself on one tree.
func TestPathForMatchesPython(t *testing.T) {
	pytest.Python(t)
	dir := physTempDir(t)
	for _, s := range [][2]string{{"real", "link"}, {"real/deep", "linkdeep"}, {"../..", "up"}, {"loop2", "loop1"}, {"loop1", "loop2"}, {"nowhere", "dangling"}, {"/", "rootlink"}} {
		if strings.HasPrefix(s[0], "real") {
			os.MkdirAll(filepath.Join(dir, s[0]), 0o755)
		}
		if err := os.Symlink(s[0], filepath.Join(dir, s[1])); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "real/f.sqlite"), nil, 0o644)
	os.Symlink("f.sqlite", filepath.Join(dir, "real/flink"))
	inputs := []string{
		"cache.db", "cache.sqlite", "cache", "a.b.c", ".hidden", "x.", "..x", "...", "a..b",
		"link/c.db", "link/deep/../c.db", "linkdeep/../c.db", "linkdeep/..", "up/x.db",
		"dangling", "dangling/x.db", "loop1/x", "rootlink/tmp/q.db", "real/flink",
		"real/flink/..", "./real/./f.sqlite", "missing/../../y.z", "link/", ".", "..",
		dir + "/link/abs.db", dir + "//real//abs.db", "/", "//x.db", "",
	}
	chdir(t, dir)
	script := `
import json, sys
from pathlib import Path
out = []
for p in json.load(sys.stdin):
    try:
        out.append(str(Path(p).resolve().with_suffix(".db.lock")))
    except (RuntimeError, ValueError, OSError) as e:
        out.append(None)
print(json.dumps(out))
`
	var want []*string
	pytest.RunJSON(t, script, inputs, &want) // in dir, after chdir
	for i, p := range inputs {
		got, err := PathFor(p)
		switch {
		case want[i] == nil && err == nil:
			t.Errorf("PathFor(%q) = %q, Python raised", p, got)
		case want[i] != nil && err != nil:
			t.Errorf("PathFor(%q): %v, Python gave %q", p, err, *want[i])
		case want[i] != nil && got != *want[i]:
			t.Errorf("PathFor(%q) = %q, Python %q", p, got, *want[i])
		}
	}
}

// NameOf knows every name the protocol makes beside a lock, asideName's
// shortened ones included, and no other.
func TestNameOf(t *testing.T) {
	t.Parallel()
	for _, lp := range []string{"/d/cache.db.lock", "/d/" + strings.Repeat("x", 240) + ".db.lock"} {
		names := map[string]string{
			filepath.Base(lp):                                                 "the lock file",
			filepath.Base(lp) + BreakSuffix:                                   "the break lock",
			filepath.Base(asideName(lp, "n1")):                                "a lock moved aside by a breaker",
			filepath.Base(asideName(lp+BreakSuffix, strings.Repeat("h", 60))): "a lock moved aside by a breaker",
			TicketPrefix("n1", 42) + "abcdefgh":                               "a lock ticket file",
			"cache.db":                                                        "",
			"cache.db.lock.json":                                              "",
			"cache.db.lockstale.1.abcdefgh":                                   "",
		}
		for name, want := range names {
			if got := NameOf(lp, name); got != want {
				t.Errorf("NameOf(%s, %s) = %q, want %q", lp, name, got, want)
			}
		}
	}
}
