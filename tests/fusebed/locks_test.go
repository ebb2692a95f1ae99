//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A write lock held via mount A does not stop a conflicting lock via mount
// B (Lustre -o localflock), while on mount A itself it does. fcntl locks
// belong to a process, so the contender is a second process.
func TestLocksArePerMount(t *testing.T) {
	bed := startBed(t, 2)
	for _, name := range []string{"fcntl", "flock"} {
		if err := os.WriteFile(bed.path(0, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	f, err := os.OpenFile(bed.path(0, "fcntl"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
		t.Fatalf("F_SETLK via mount A: %v", err)
	}
	g, err := os.OpenFile(bed.path(0, "flock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := unix.Flock(int(g.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock via mount A: %v", err)
	}

	// The other process tries each kind of lock via B, then via A.
	out, err := roleCmd("locker",
		"fcntl", bed.path(1, "fcntl"), "fcntl", bed.path(0, "fcntl"),
		"flock", bed.path(1, "flock"), "flock", bed.path(0, "flock"),
	).CombinedOutput()
	if err != nil {
		t.Fatalf("locker: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"acquired", "conflict", "acquired", "conflict"}
	what := []string{
		"fcntl write lock via B while A's process holds one via A",
		"fcntl write lock via A while another process holds one via A",
		"flock via B while A's process holds one via A",
		"flock via A while another process holds one via A",
	}
	if len(got) != len(want) {
		t.Fatalf("locker printed %q, want %d lines", got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: %s, want %s", what[i], got[i], want[i])
		}
	}
}

// lockerMain tries a non-blocking exclusive lock for each (kind, path) pair
// and prints "acquired" or "conflict" per line; it holds every lock it got
// until it exits.
func lockerMain(args []string) int {
	if len(args)%2 != 0 {
		fmt.Fprintln(os.Stderr, "locker: want kind path pairs")
		return 2
	}
	for i := 0; i < len(args); i += 2 {
		f, err := os.OpenFile(args[i+1], os.O_RDWR, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "locker:", err)
			return 1
		}
		defer f.Close()
		switch args[i] {
		case "fcntl":
			err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK})
		case "flock":
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		default:
			err = fmt.Errorf("unknown lock kind %q", args[i])
		}
		switch {
		case err == nil:
			fmt.Println("acquired")
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EACCES):
			fmt.Println("conflict")
		default:
			fmt.Fprintln(os.Stderr, "locker:", err)
			return 1
		}
	}
	return 0
}

// A SIGKILLed fusebed leaves dead mounts (ENOTCONN); starting fusebed again
// on them clears them first, and `fusebed --cleanup` clears them even while
// a process still holds a file open on one.
func TestKillLeavesDeadMountsThatCleanupClears(t *testing.T) {
	bed := startBed(t, 2)
	if err := os.WriteFile(bed.path(0, "kept"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}

	checkDead := func() {
		t.Helper()
		for _, m := range bed.mounts {
			if !isMountPoint(m) {
				t.Fatalf("after kill -9, %s is no longer a mount point", m)
			}
			if err := statErr(m); !errors.Is(err, syscall.ENOTCONN) {
				t.Fatalf("after kill -9, stat %s: %v, want ENOTCONN", m, err)
			}
		}
	}

	bed.kill9()
	checkDead()
	// Restart on the dead mounts: fusebed clears them at startup.
	bed.start()
	if !strings.Contains(bed.stderr.String(), "cleared 1 stale mount(s)") {
		t.Errorf("restart over dead mounts: stderr does not say it cleared them:\n%s", bed.stderr)
	}
	if got, err := os.ReadFile(bed.path(1, "kept")); err != nil || string(got) != "data" {
		t.Fatalf("after restart, read via mount 2: %q, %v", got, err)
	}

	// Hold a file open on mount 1 across the kill: plain umount then says
	// EBUSY and cleanup must go on to umount -l.
	holder, err := os.Open(bed.path(0, "kept"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	bed.kill9()
	checkDead()
	start := time.Now()
	out := runCleanup(t, bed.mounts...)
	t.Logf("fusebed --cleanup took %v:\n%s", time.Since(start), out)
	for _, m := range bed.mounts {
		if isMountPoint(m) {
			t.Errorf("after --cleanup, %s is still a mount point", m)
			continue
		}
		st, err := os.Lstat(m)
		if err != nil || !st.IsDir() {
			t.Errorf("after --cleanup, %s: %v, %v; want a directory", m, st, err)
			continue
		}
		if ents, err := os.ReadDir(m); err != nil || len(ents) != 0 {
			t.Errorf("after --cleanup, %s holds %v (%v); want an empty directory", m, ents, err)
		}
	}
	if !strings.Contains(out, "by umount -f") && !strings.Contains(out, "by umount -l") {
		t.Errorf("the mount with an open file should have needed umount -f or -l:\n%s", out)
	}
	if _, err := holder.Read(make([]byte, 1)); err == nil {
		t.Errorf("read from a file of a dead, detached mount succeeded")
	}
	if again := runCleanup(t, bed.mounts...); strings.Count(again, "not mounted") != len(bed.mounts) {
		t.Errorf("second --cleanup:\n%s\nwant \"not mounted\" for each point", again)
	}
}

// SIGTERM while a file on a mount is still open: the mount is busy, so
// fusebed detaches it lazily, and still exits 0 leaving no mount.
func TestStopWithOpenFile(t *testing.T) {
	bed := startBed(t, 2)
	if err := os.WriteFile(bed.path(0, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(bed.path(0, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	bed.stop() // fails the test unless exit 0 and nothing mounted
	t.Logf("stopped in %v; stderr:\n%s", time.Since(start), bed.stderr)
	if !strings.Contains(bed.stderr.String(), "detaching it lazily") {
		t.Errorf("stderr does not report the lazy detach:\n%s", bed.stderr)
	}
}
