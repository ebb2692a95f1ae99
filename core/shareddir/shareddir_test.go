package shareddir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Open returns at once for a FIFO (a blocking open would wait for a
// writer forever) and refuses it, as it refuses links and directories.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{fifo: "a FIFO owned by uid", link: "a symbolic link owned by uid", dir: "a directory owned by uid"} {
		done := make(chan error, 1)
		go func() {
			f, _, err := Open(name, os.O_RDONLY)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			var r *Refused
			if !errors.As(err, &r) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), name) {
				t.Errorf("Open(%s) = %v, want a *Refused naming it as %q", name, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Open(%s) blocked", name)
		}
	}
	f, st, err := Open(reg, os.O_RDONLY)
	if err != nil {
		t.Fatalf("Open(regular file) = %v", err)
	}
	defer f.Close()
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("fstat mode %o", st.Mode)
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("O_NONBLOCK left set on the descriptor (flags %#o, %v)", fl, err)
	}
}

// Create makes a new file with exactly the mode asked whatever the
// umask, and never touches what is already at the name: a link to a file
// elsewhere stays a link, and its target is neither created nor changed.
func TestCreateIsExclusiveAndSetsTheModeThroughTheDescriptor(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "new.db")
	f, err := Create(p, os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o666 {
		t.Errorf("mode %o, want 0666 despite umask 077", fi.Mode().Perm())
	}
	target := filepath.Join(dir, "elsewhere", "a.db")
	os.Mkdir(filepath.Dir(target), 0o700)
	planted := filepath.Join(dir, "planted.db")
	if err := os.Symlink(target, planted); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(planted, os.O_RDWR, 0o666); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create through a dangling link = %v, want fs.ErrExist", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link's target was created: %v", err)
	}
}
