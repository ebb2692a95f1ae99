package nodequeue

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/queuechild"
	"github.com/tirastore/tirastore/core/tuning"
)

// holdsGate reports whether this process holds a lock on the gate file of
// path.
func holdsGate(t *testing.T, path string) bool {
	t.Helper()
	return holds(t, File(path), os.Getpid())
}

// TestGateSharedByLocksOfAProcess: two gates of one process on one
// database share one descriptor, so that closing one leaves the other's
// place in the queue; only the last close removes the file. The negative
// control closes a second descriptor of the file, as each Lock had before:
// the kernel drops the process's locks, and the check sees it.
func TestGateSharedByLocksOfAProcess(t *testing.T) {
	t.Parallel()
	path := newTestPath(t)
	g1 := openGate(path)
	if g1 == nil {
		t.Skip("no gate directory here")
	}
	if err := g1.Lock(context.Background(), time.Time{}, false, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !holdsGate(t, path) {
		t.Fatal("the gate's lock is not seen")
	}
	g2 := openGate(path)
	if g2.f.sharedGate != g1.f.sharedGate {
		t.Error("two gates of one process on one database have two descriptors")
	}
	g2.Close()
	if !holdsGate(t, path) {
		t.Fatal("closing one gate dropped the other's place in the queue")
	}
	if _, err := os.Stat(File(path)); err != nil {
		t.Fatalf("the gate file was removed while another gate of the process had it: %v", err)
	}
	// Negative control: a descriptor of its own, closed.
	f, err := os.OpenFile(File(path), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if holdsGate(t, path) {
		t.Fatal("negative control: closing a second descriptor kept the lock; the check above proves nothing")
	}
	g1.Unlock()
	g1.Close()
	if _, err := os.Stat(File(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the last close left the gate file: %v", err)
	}
}

// TestGateReplacedFileNotRemoved: a gate file removed under this process
// (by another process's last close) is not shared with newcomers, who get
// the new file; and closing the old one does not remove the new one.
func TestGateReplacedFileNotRemoved(t *testing.T) {
	t.Parallel()
	path := newTestPath(t)
	g1 := openGate(path)
	if g1 == nil {
		t.Skip("no gate directory here")
	}
	if err := os.Remove(File(path)); err != nil {
		t.Fatal(err)
	}
	g2 := openGate(path)
	if g2 == nil || g2.f.sharedGate == g1.f.sharedGate {
		t.Fatal("a newcomer got the removed gate file")
	}
	g1.Close()
	if _, err := os.Stat(File(path)); err != nil {
		t.Fatalf("closing the removed file's gate removed the new file: %v", err)
	}
	g2.Close()
	if _, err := os.Stat(File(path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the last close left the gate file: %v", err)
	}
}

// TestSweepGate: a gate file that nobody has open here, unchanged for a
// while and unlocked, is removed; one that another process holds a place
// in, one open in this process, or a recent one are left.
func TestSweepGate(t *testing.T) {
	t.Parallel()
	path := newTestPath(t)
	dir, err := nodelocal.Private()
	if err != nil {
		t.Skip(err)
	}
	name := nodelocal.Name(nodelocal.GatePrefix, path)
	old := time.Now().Add(-2 * tuning.StaleGateAge)
	age := func() {
		if err := os.Chtimes(File(path), old, old); err != nil {
			t.Fatal(err)
		}
	}
	exists := func() bool { _, err := os.Stat(File(path)); return err == nil }

	g := openGate(path)
	age()
	Sweep(dir, name)
	if !exists() {
		t.Fatal("swept a gate file open in this process")
	}
	g.Close()

	holder := queuechild.Start(t, path)
	age()
	Sweep(dir, name)
	if !exists() {
		t.Fatal("swept a gate file another process is queued on")
	}
	holder.Process.Kill()
	holder.Wait()
	if err := os.Chtimes(File(path), time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	Sweep(dir, name)
	if !exists() {
		t.Fatal("swept a recent gate file")
	}
	age()
	Sweep(dir, name)
	if exists() {
		t.Fatal("a leftover gate file was not swept")
	}
}

// TestPlantedGateNotUsed: a symlink at the gate's name (a file of ours
// elsewhere behind it) is reported as a Problem, not opened, at every Open
// (the store then gives its Lock no queue: see internal/lock's test of the
// same name), and the file behind the link is unchanged.
func TestPlantedGateNotUsed(t *testing.T) {
	// A node directory of its own (so not parallel), as internal/lock's
	// test of the same name: in a shared one, another process's last store
	// removes the empty private directory before the planting.
	t.Setenv(nodelocal.EnvBase, t.TempDir())
	path := newTestPath(t)
	if _, err := nodelocal.Private(); err != nil {
		t.Skip(err)
	}
	canary := queuechild.PhysTempDir(t) + "/canary"
	if err := os.WriteFile(canary, []byte("canary canary canary canary canary canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(canary, File(path)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(File(path)) })
	for i := 0; i < 3; i++ {
		var p *nodelocal.Problem
		if q, err := Open(path); !errors.As(err, &p) || q != nil {
			t.Fatalf("Open on a symlink: %v, %v; want a Problem", q, err)
		}
	}
	if b, _ := os.ReadFile(canary); string(b) != "canary canary canary canary canary canary" {
		t.Errorf("the file behind the symlink changed: %q", b)
	}
	if fi, _ := os.Stat(canary); fi.Mode().Perm() != 0o644 {
		t.Errorf("the file behind the symlink has mode %v", fi.Mode().Perm())
	}
}
