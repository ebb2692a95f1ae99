package nodelocal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const canaryText = "canary: must never change"

// fixture is a fresh private directory and, outside it, a canary file of
// this user (mode 0644) that planted names point at.
type fixture struct {
	dir    *Dir
	canary string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	d, err := OpenDir(filepath.Join(t.TempDir(), "private"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.WriteFile(canary, []byte(canaryText), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: d, canary: canary}
}

// trust switches the checks off for the rest of the test: the negative
// controls show that each check is what stops its attack.
func trust(t *testing.T) {
	old := trusting
	trusting = func() bool { return true }
	t.Cleanup(func() { trusting = old })
}

// wantProblem fails unless err is a *Problem about name whose What
// contains what.
func wantProblem(t *testing.T, err error, path, what string) {
	t.Helper()
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatalf("want a Problem (%s), got %v", what, err)
	}
	if p.Path != path || !strings.Contains(p.What, what) {
		t.Fatalf("Problem %q, want %s: ...%s...", p.Error(), path, what)
	}
}

// timely runs fn and fails if it takes more than 5 s (an open that blocks
// on a FIFO would hang).
func timely(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("blocked")
	}
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown to another user)")
	}
}

// plant makes a bad file at name in the fixture's directory.
type plant struct {
	name  string
	what  string // the expected Problem
	root  bool
	make  func(t *testing.T, fx *fixture, p string)
	ctrl  func(t *testing.T, fx *fixture, f *os.File) // negative control: what using it does
	flags int
}

// TestOpenRefusesPlantedFiles: every kind of bad file at a name is
// refused as a Problem, left as it was, never blocks, and (negative
// control, checks off) would have been used.
func TestOpenRefusesPlantedFiles(t *testing.T) {
	writeReaches := func(target func(fx *fixture) string) func(t *testing.T, fx *fixture, f *os.File) {
		return func(t *testing.T, fx *fixture, f *os.File) {
			if _, err := f.WriteAt([]byte("XX"), 0); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(target(fx)); !strings.HasPrefix(string(b), "XX") {
				t.Fatalf("negative control: the write did not reach %s", target(fx))
			}
		}
	}
	isType := func(typ uint32) func(t *testing.T, fx *fixture, f *os.File) {
		return func(t *testing.T, fx *fixture, f *os.File) {
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != typ {
				t.Fatalf("negative control: opened %o, want type %o", st.Mode, typ)
			}
		}
	}
	cases := []plant{
		{name: "symlink", what: "a symbolic link, not a regular file", flags: os.O_RDWR | os.O_CREATE,
			make: func(t *testing.T, fx *fixture, p string) { must(t, os.Symlink(fx.canary, p)) },
			ctrl: writeReaches(func(fx *fixture) string { return fx.canary })},
		{name: "fifo", what: "a FIFO, not a regular file", flags: os.O_RDONLY,
			make: func(t *testing.T, fx *fixture, p string) { must(t, unix.Mkfifo(p, 0o600)) },
			ctrl: isType(unix.S_IFIFO)},
		{name: "fifo-rw", what: "a FIFO, not a regular file", flags: os.O_RDWR | os.O_CREATE,
			make: func(t *testing.T, fx *fixture, p string) { must(t, unix.Mkfifo(p, 0o666)) },
			ctrl: isType(unix.S_IFIFO)},
		{name: "dir", what: "a directory, not a regular file", flags: os.O_RDONLY,
			make: func(t *testing.T, fx *fixture, p string) { must(t, os.Mkdir(p, 0o700)) },
			ctrl: isType(unix.S_IFDIR)},
		{name: "mode", what: "mode 0644, not 0600", flags: os.O_RDWR | os.O_CREATE,
			make: func(t *testing.T, fx *fixture, p string) {
				must(t, os.WriteFile(p, []byte("mine"), 0o644))
				must(t, os.Chmod(p, 0o644))
			},
			ctrl: isType(unix.S_IFREG)},
		{name: "world", what: "mode 0666, not 0600", flags: os.O_RDWR | os.O_CREATE,
			make: func(t *testing.T, fx *fixture, p string) {
				must(t, os.WriteFile(p, []byte("mine"), 0o666))
				must(t, os.Chmod(p, 0o666))
			},
			ctrl: isType(unix.S_IFREG)},
		{name: "owner", what: "owned by uid 65534, not 0", root: true, flags: os.O_RDWR | os.O_CREATE,
			make: func(t *testing.T, fx *fixture, p string) {
				must(t, os.WriteFile(p, []byte("theirs"), 0o600))
				must(t, os.Chown(p, 65534, 65534))
			},
			ctrl: isType(unix.S_IFREG)},
		{name: "hardlink", what: "2 hard links, not 1", flags: os.O_RDWR | os.O_CREATE,
			make: func(t *testing.T, fx *fixture, p string) {
				// A private file of ours elsewhere (mode 0600, so that only
				// the link count gives it away).
				must(t, os.Chmod(fx.canary, 0o600))
				must(t, os.Link(fx.canary, p))
			},
			ctrl: writeReaches(func(fx *fixture) string { return fx.canary })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				requireRoot(t)
			}
			for _, control := range []bool{false, true} {
				fx := newFixture(t)
				p := fx.dir.Join("gate-x")
				tc.make(t, fx, p)
				var before unix.Stat_t
				must(t, unix.Lstat(p, &before))
				canaryBefore, _ := os.ReadFile(fx.canary)
				if control {
					trust(t)
				}
				var f *os.File
				var err error
				timely(t, func() { f, _, err = fx.dir.Open("gate-x", tc.flags) })
				if control {
					if err != nil {
						t.Fatalf("negative control: %v", err)
					}
					tc.ctrl(t, fx, f)
					f.Close()
					continue
				}
				wantProblem(t, err, p, tc.what)
				var after unix.Stat_t
				must(t, unix.Lstat(p, &after))
				if after.Mode != before.Mode || after.Uid != before.Uid || after.Ino != before.Ino {
					t.Errorf("the refused file changed: %o uid %d -> %o uid %d", before.Mode, before.Uid, after.Mode, after.Uid)
				}
				if b, _ := os.ReadFile(fx.canary); string(b) != string(canaryBefore) {
					t.Errorf("the canary changed: %q", b)
				}
				if fi, _ := os.Stat(fx.canary); tc.name == "symlink" && fi.Mode().Perm() != 0o644 {
					t.Errorf("the canary's mode changed: %v", fi.Mode().Perm())
				}
			}
		})
	}
}

// TestSubdirRefusesPlanted: the same for directories (the spool): a
// symlink, a file, a FIFO, another user's directory, one others can write.
func TestSubdirRefusesPlanted(t *testing.T) {
	cases := []struct {
		name, what string
		root       bool
		make       func(t *testing.T, fx *fixture, p, target string)
	}{
		{"symlink", "a symbolic link, not a directory", false, func(t *testing.T, fx *fixture, p, target string) { must(t, os.Symlink(target, p)) }},
		{"file", "a regular file, not a directory", false, func(t *testing.T, fx *fixture, p, _ string) { must(t, os.WriteFile(p, nil, 0o600)) }},
		{"fifo", "a FIFO, not a directory", false, func(t *testing.T, fx *fixture, p, _ string) { must(t, unix.Mkfifo(p, 0o600)) }},
		{"mode", "mode 0777, not 0700", false, func(t *testing.T, fx *fixture, p, _ string) {
			must(t, os.Mkdir(p, 0o777))
			must(t, os.Chmod(p, 0o777))
		}},
		{"owner", "owned by uid 65534, not 0", true, func(t *testing.T, fx *fixture, p, _ string) {
			must(t, os.Mkdir(p, 0o700))
			must(t, os.Chown(p, 65534, 65534))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				requireRoot(t)
			}
			for _, control := range []bool{false, true} {
				fx := newFixture(t)
				target := t.TempDir() // a directory of ours elsewhere
				must(t, os.Chmod(target, 0o700))
				p := fx.dir.Join("spool-x")
				tc.make(t, fx, p, target)
				if control {
					trust(t)
				}
				var sd *Dir
				var err error
				timely(t, func() { sd, err = fx.dir.Subdir("spool-x") })
				if control {
					if tc.name == "file" || tc.name == "fifo" {
						continue // O_DIRECTORY refuses those even unchecked
					}
					if err != nil {
						t.Fatalf("negative control: %v", err)
					}
					f, _, err := sd.Open("req", os.O_RDWR|os.O_CREATE)
					if err != nil {
						t.Fatalf("negative control: %v", err)
					}
					f.Close()
					sd.Close()
					continue
				}
				wantProblem(t, err, p, tc.what)
				if names, _ := os.ReadDir(target); len(names) != 0 {
					t.Errorf("something was created behind the symlink: %v", names)
				}
			}
		})
	}
}

// TestOpenDirRefusesPlanted: the private directory itself, planted before
// its user made it: a symlink to another directory, a directory of
// another user, one others can write, a file.
func TestOpenDirRefusesPlanted(t *testing.T) {
	cases := []struct {
		name, what string
		root       bool
		make       func(t *testing.T, p, target string)
	}{
		{"symlink", "a symbolic link, not a directory", false, func(t *testing.T, p, target string) { must(t, os.Symlink(target, p)) }},
		{"mode", "mode 0777, not 0700", false, func(t *testing.T, p, _ string) {
			must(t, os.Mkdir(p, 0o777))
			must(t, os.Chmod(p, 0o777))
		}},
		{"owner", "owned by uid 65534, not 0", true, func(t *testing.T, p, _ string) {
			must(t, os.Mkdir(p, 0o700))
			must(t, os.Chown(p, 65534, 65534))
		}},
		{"file", "a regular file, not a directory", false, func(t *testing.T, p, _ string) { must(t, os.WriteFile(p, nil, 0o600)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				requireRoot(t)
			}
			for _, control := range []bool{false, true} {
				target := t.TempDir()
				must(t, os.Chmod(target, 0o700))
				p := filepath.Join(t.TempDir(), "tirastore-x")
				tc.make(t, p, target)
				var before unix.Stat_t
				must(t, unix.Lstat(p, &before))
				if control {
					trust(t)
				}
				d, err := OpenDir(p)
				if control {
					if tc.name == "file" {
						continue
					}
					if err != nil {
						t.Fatalf("negative control: %v", err)
					}
					d.Close()
					continue
				}
				wantProblem(t, err, p, tc.what)
				var after unix.Stat_t
				must(t, unix.Lstat(p, &after))
				if after.Mode != before.Mode || after.Uid != before.Uid {
					t.Errorf("the refused directory changed: %o -> %o", before.Mode, after.Mode)
				}
			}
		})
	}
}

// TestCreatedPrivate: what is created gets mode 0600 (0700) whatever the
// umask, through its descriptor; descriptors come back blocking.
func TestCreatedPrivate(t *testing.T) {
	old := syscall.Umask(0o377)
	defer syscall.Umask(old)
	fx := newFixture(t)
	f, st, err := fx.dir.Open("changes-x", os.O_RDWR|os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st.Mode&0o7777 != 0o600 {
		t.Errorf("status says mode %o", st.Mode&0o7777)
	}
	if fi, _ := os.Stat(fx.dir.Join("changes-x")); fi.Mode().Perm() != 0o600 {
		t.Errorf("created with mode %v, want 0600", fi.Mode().Perm())
	}
	if fl, _ := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); fl&unix.O_NONBLOCK != 0 {
		t.Error("O_NONBLOCK left set")
	}
	sd, err := fx.dir.Subdir("spool-x")
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	if fi, _ := os.Stat(sd.Path()); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory created with mode %v, want 0700", fi.Mode().Perm())
	}
	// Opened again: it exists and is right.
	g, _, err := fx.dir.Open("changes-x", os.O_RDWR|os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if _, _, err := fx.dir.Open("changes-x", os.O_RDWR|os.O_CREATE|os.O_EXCL); !errors.Is(err, fs.ErrExist) {
		t.Errorf("O_EXCL on an existing file: %v", err)
	}
	if _, _, err := fx.dir.Open("missing", os.O_RDONLY); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// TestRecreatedAfterRemoval: after the last user removed the (empty)
// directory, a process that still has it open recreates it once when it
// creates a file, and finds files that another process made in a new
// instance of it.
func TestRecreatedAfterRemoval(t *testing.T) {
	fx := newFixture(t)
	sd, err := fx.dir.Subdir("spool-x")
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	sd.RemoveIfEmpty()
	fx.dir.RemoveIfEmpty()
	if _, err := os.Stat(fx.dir.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RemoveIfEmpty left the empty directory: %v", err)
	}
	f, _, err := sd.Open("1.req", os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		t.Fatalf("creating in a removed directory: %v", err)
	}
	f.Close()
	if _, err := os.Stat(filepath.Join(fx.dir.Path(), "spool-x", "1.req")); err != nil {
		t.Fatal(err)
	}
	fx.dir.RemoveIfEmpty() // not empty: stays
	if _, err := os.Stat(fx.dir.Path()); err != nil {
		t.Fatalf("RemoveIfEmpty removed a directory with files: %v", err)
	}
	// Another process removes and remakes it; our handles follow.
	must(t, os.RemoveAll(fx.dir.Path()))
	must(t, os.MkdirAll(filepath.Join(fx.dir.Path(), "spool-x"), 0o700))
	must(t, os.WriteFile(filepath.Join(fx.dir.Path(), "spool-x", "2.req"), nil, 0o600))
	if names, err := sd.Names(); err != nil || len(names) != 1 || names[0] != "2.req" {
		t.Fatalf("names after the directory was remade: %v %v", names, err)
	}
	if _, err := fx.dir.Lstat("spool-x"); err != nil {
		t.Fatalf("lstat after the directory was remade: %v", err)
	}
}

// TestRemoveOnlySameFile: Remove with a file removes the name only while
// it still is that file.
func TestRemoveOnlySameFile(t *testing.T) {
	fx := newFixture(t)
	f, _, err := fx.dir.Open("gate-x", os.O_RDWR|os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	must(t, os.Remove(fx.dir.Join("gate-x")))
	must(t, os.WriteFile(fx.dir.Join("gate-x"), nil, 0o600))
	if err := fx.dir.Remove("gate-x", f); err == nil {
		t.Fatal("removed a file created since")
	}
	if _, err := os.Stat(fx.dir.Join("gate-x")); err != nil {
		t.Fatal(err)
	}
}

// TestReadFileWriteNew: the whole-file calls of the spool write a new
// private file and read it back; they refuse an existing name, read a
// missing one as fs.ErrNotExist, and refuse planted files without
// blocking, as Open does (negative control: with the checks off, the
// symlink's target is read and the FIFO is opened).
func TestReadFileWriteNew(t *testing.T) {
	fx := newFixture(t)
	for _, data := range [][]byte{[]byte(`{"written":3}`), {}, make([]byte, 1<<17)} {
		fx.dir.Remove("res", nil)
		must(t, fx.dir.WriteNew("res", data))
		got, err := fx.dir.ReadFile("res")
		if err != nil || string(got) != string(data) {
			t.Fatalf("read %d bytes back (%v), want %d", len(got), err, len(data))
		}
		if fi, err := os.Stat(fx.dir.Join("res")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v (%v), want 0600", fi.Mode().Perm(), err)
		}
	}
	if err := fx.dir.WriteNew("res", []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteNew over an existing name: %v, want ErrExist", err)
	}
	if _, err := fx.dir.ReadFile("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile of a missing name: %v, want ErrNotExist", err)
	}

	must(t, os.Symlink(fx.canary, fx.dir.Join("link")))
	must(t, unix.Mkfifo(fx.dir.Join("fifo"), 0o600))
	for _, control := range []bool{false, true} {
		if control {
			trust(t)
		}
		var got []byte
		var err error
		timely(t, func() { got, err = fx.dir.ReadFile("link") })
		switch {
		case control && string(got) != canaryText:
			t.Fatalf("negative control: read %q (%v), want the canary", got, err)
		case !control:
			wantProblem(t, err, fx.dir.Join("link"), "a symbolic link, not a regular file")
		}
		if !control {
			timely(t, func() { _, err = fx.dir.ReadFile("fifo") })
			wantProblem(t, err, fx.dir.Join("fifo"), "a FIFO, not a regular file")
			err = fx.dir.WriteNew("link", []byte("XX"))
			wantProblem(t, err, fx.dir.Join("link"), "a symbolic link, not a regular file")
		}
	}
	if b, _ := os.ReadFile(fx.canary); string(b) != canaryText {
		t.Fatalf("the canary changed: %q", b)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBaseFromEnvironment: TIRASTORE_NODE_DIR moves the private directory
// (relative values are made absolute); unset, it is under /dev/shm.
func TestBaseFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvBase, dir)
	if got, want := PrivatePath(), filepath.Join(dir, "tirastore-"+strconv.Itoa(os.Geteuid())); got != want {
		t.Fatalf("PrivatePath = %q, want %q", got, want)
	}
	d, err := Private()
	if err != nil {
		t.Fatal(err)
	}
	if d.Path() != PrivatePath() {
		t.Fatalf("Private() is at %q, want %q", d.Path(), PrivatePath())
	}
	t.Setenv(EnvBase, "rel")
	if abs, _ := filepath.Abs("rel"); Base() != abs {
		t.Fatalf("Base with a relative value = %q, want %q", Base(), abs)
	}
	t.Setenv(EnvBase, "")
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() && Base() != "/dev/shm" {
		t.Fatalf("Base with the variable empty = %q, want /dev/shm", Base())
	}
}
