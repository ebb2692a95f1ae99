package spool

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
)

// privateDir is a fresh private directory (internal/nodelocal) for a test.
func privateDir(t *testing.T) *nodelocal.Dir {
	t.Helper()
	d, err := nodelocal.OpenDir(filepath.Join(t.TempDir(), "private"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func openTemp(t *testing.T) *Spool {
	t.Helper()
	sp, err := Open(privateDir(t), "spool")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	return sp
}

// files lists the spool's file names, sorted.
func files(t *testing.T, sp *Spool) string {
	t.Helper()
	names, err := sp.names()
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		_, state := splitName(n)
		names[i] = state
	}
	return strings.Join(names, " ")
}

// TestHandOver: a published request is taken with its payload, in
// publication order, and its requester finds the taker's result.
func TestHandOver(t *testing.T) {
	sp := openTemp(t)
	r1, err := sp.Publish([]byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := sp.Publish([]byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := r1.Result(); ok {
		t.Fatal("result before any take")
	}
	cs, err := sp.Take("", 10, "7")
	if err != nil || len(cs) != 2 {
		t.Fatalf("taken %d, %v", len(cs), err)
	}
	if string(cs[0].Payload) != "one" || string(cs[1].Payload) != "two" {
		t.Fatalf("payloads %q %q, want publication order", cs[0].Payload, cs[1].Payload)
	}
	if ok, err := r1.Withdraw(); ok || err != nil {
		t.Fatalf("withdrew a taken request: %v %v", ok, err)
	}
	for i, c := range cs {
		if err := c.Finish([]byte("res" + strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range []*Request{r1, r2} {
		b, ok, err := r.Result()
		if err != nil || !ok || string(b) != "res"+strconv.Itoa(i) {
			t.Fatalf("result %d: %q %v %v", i, b, ok, err)
		}
		r.Done()
	}
	if f := files(t, sp); f != "" {
		t.Errorf("files left: %s", f)
	}
}

// TestPublishRecreatesDirectory: a spool whose empty directory another
// store removed on closing still publishes.
func TestPublishRecreatesDirectory(t *testing.T) {
	sp := openTemp(t)
	sp.Remove()
	if _, err := os.Stat(sp.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Remove left the empty directory: %v", err)
	}
	if _, err := sp.Publish([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if cs, _ := sp.Take("", 10, "7"); len(cs) != 1 {
		t.Fatal("the request published after the directory's removal was not taken")
	}
}

// TestWithdraw: a request taken back before any take is never taken.
func TestWithdraw(t *testing.T) {
	sp := openTemp(t)
	r, err := sp.Publish([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := r.Withdraw(); !ok || err != nil {
		t.Fatalf("withdraw: %v %v", ok, err)
	}
	if cs, _ := sp.Take("", 10, "7"); len(cs) != 0 {
		t.Fatal("a withdrawn request was taken")
	}
}

// TestTakeExceptAndMax: the caller's own request is left alone, and at
// most max requests are taken, oldest first.
func TestTakeExceptAndMax(t *testing.T) {
	sp := openTemp(t)
	var rs []*Request
	for i := 0; i < 4; i++ {
		r, err := sp.Publish([]byte{byte('a' + i)})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	cs, err := sp.Take(rs[0].ID(), 2, "7")
	if err != nil || len(cs) != 2 || string(cs[0].Payload) != "b" || string(cs[1].Payload) != "c" {
		t.Fatalf("taken %v, %v", cs, err)
	}
	if ok, _ := rs[0].Withdraw(); !ok {
		t.Error("the excepted request was taken")
	}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	return cmd.Process.Pid
}

// TestOrphanedTake: a take whose taker died is taken again by the
// next taker, and its requester's Wait reports ErrOrphaned instead of
// waiting forever; a live taker's result reaches Wait.
func TestOrphanedTake(t *testing.T) {
	sp := openTemp(t)
	r, err := sp.Publish([]byte("p"))
	if err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(sp.dir, r.ID()+".clm-"+strconv.Itoa(deadPID(t))+"-123")
	if err := os.Rename(r.path(".req"), dead); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(time.Millisecond, time.Minute); !errors.Is(err, ErrOrphaned) {
		t.Fatalf("Wait on a dead taker's take: %v, want ErrOrphaned", err)
	}
	cs, err := sp.Take("", 10, "7")
	if err != nil || len(cs) != 1 || string(cs[0].Payload) != "p" {
		t.Fatalf("the orphaned take was not taken again: %v %v", cs, err)
	}
	if !cs[0].Orphan || cs[0].PrevTag != "123" {
		t.Errorf("orphan %v, previous tag %q: want true, the dead taker's 123", cs[0].Orphan, cs[0].PrevTag)
	}
	if f, want := files(t, sp), ".clm-"+strconv.Itoa(os.Getpid())+"-7"+TagSep+"123"; f != want {
		t.Errorf("new take %q, want %q (the dead taker's tag kept after ours)", f, want)
	}
	done := make(chan error, 1)
	go func() {
		b, err := r.Wait(time.Millisecond, time.Minute)
		if err == nil && string(b) != "ok" {
			err = errors.New("result " + string(b))
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := cs[0].Finish([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not see the result")
	}
}

// TestLiveTakeLeftAlone: another live process's take is not taken over;
// once that process is gone, it is.
func TestLiveTakeLeftAlone(t *testing.T) {
	sp := openTemp(t)
	r, err := sp.Publish([]byte("p"))
	if err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Skip("cannot run sleep:", err)
	}
	defer other.Process.Kill()
	if err := os.Rename(r.path(".req"), filepath.Join(sp.dir, r.ID()+".clm-"+strconv.Itoa(other.Process.Pid))); err != nil {
		t.Fatal(err)
	}
	if cs, _ := sp.Take("", 10, "7"); len(cs) != 0 {
		t.Fatal("a live process's take was taken over")
	}
	if _, err := r.Wait(time.Millisecond, 30*time.Millisecond); !errors.Is(err, ErrOrphaned) {
		t.Fatalf("Wait past its limit: %v, want ErrOrphaned", err)
	}
	other.Process.Kill()
	other.Wait()
	if cs, _ := sp.Take("", 10, "7"); len(cs) != 1 {
		t.Fatal("a dead process's take was not taken over")
	}
}

// TestDiscard: a requester that commits its rows itself removes its
// request in any state, so nobody commits it a second time.
func TestDiscard(t *testing.T) {
	sp := openTemp(t)
	for _, taken := range []bool{false, true} {
		r, err := sp.Publish([]byte("p"))
		if err != nil {
			t.Fatal(err)
		}
		if taken {
			if err := os.Rename(r.path(".req"), filepath.Join(sp.dir, r.ID()+".clm-"+strconv.Itoa(deadPID(t))+"-99")); err != nil {
				t.Fatal(err)
			}
		}
		if was, tag := r.Discard(); was != taken || (taken && tag != "99") {
			t.Errorf("Discard: taken %v tag %q, want %v", was, tag, taken)
		}
		if f := files(t, sp); f != "" {
			t.Errorf("taken=%v: files left after Discard: %s", taken, f)
		}
	}
}

// TestAbandonedFilesRemoved: results and partial requests of dead
// processes are removed once old; a live process's are kept.
func TestAbandonedFilesRemoved(t *testing.T) {
	sp := openTemp(t)
	old := time.Now().Add(-2 * abandonAge)
	mk := func(pid int, suffix string, at time.Time) string {
		p := filepath.Join(sp.dir, "0000000000000000001-"+strconv.Itoa(pid)+"-1"+suffix)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := deadPID(t)
	gone := []string{mk(dead, ".res", old), mk(dead, ".tmp", old)}
	kept := []string{mk(dead, ".rtmp", time.Now()), mk(os.Getpid(), ".res", old)}
	if _, err := sp.Take("", 10, "7"); err != nil {
		t.Fatal(err)
	}
	checkRemoved(t, gone, kept)
}

// checkRemoved: every file of gone was removed, every file of kept is there.
func checkRemoved(t *testing.T, gone, kept []string) {
	t.Helper()
	for _, p := range gone {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed", filepath.Base(p))
		}
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", filepath.Base(p), err)
		}
	}
}

// TestOpenRefusesSharedDirectory: a spool directory that others can
// write to (or a symlink) is refused, so that nobody can slip requests
// into our transactions; its mode is left as it was.
func TestOpenRefusesSharedDirectory(t *testing.T) {
	d := privateDir(t)
	if err := os.Mkdir(d.Join("spool"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.Join("spool"), 0o777); err != nil {
		t.Fatal(err)
	}
	var p *nodelocal.Problem
	if _, err := Open(d, "spool"); !errors.As(err, &p) {
		t.Errorf("opened a world-writable spool: %v", err)
	}
	if fi, err := os.Stat(d.Join("spool")); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("the refused directory was changed: %v %v", fi.Mode(), err)
	}
	if err := os.Symlink(t.TempDir(), d.Join("link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(d, "link"); !errors.As(err, &p) {
		t.Errorf("opened a symlinked spool: %v", err)
	}
}

// TestSweep: Sweep removes a dead requester's old files and then the empty
// directory, and leaves a live process's request alone.
func TestSweep(t *testing.T) {
	d := privateDir(t)
	sp, err := Open(d, "spool-x")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	old := time.Now().Add(-2 * abandonAge)
	dead := filepath.Join(sp.Dir(), "0000000000000000001-"+strconv.Itoa(deadPID(t))+"-1.req")
	if err := os.WriteFile(dead, []byte("p"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(dead, old, old)
	live, err := sp.Publish([]byte("q"))
	if err != nil {
		t.Fatal(err)
	}
	Sweep(d, "spool-x")
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dead requester's old request was left: %v", err)
	}
	if ok, err := live.Withdraw(); !ok || err != nil {
		t.Fatalf("a live request was swept: %v %v", ok, err)
	}
	Sweep(d, "spool-x")
	if _, err := os.Stat(sp.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the empty spool was left: %v", err)
	}
}

// TestKilledRequesterRemovedAtOnce: a request or result whose id names a
// requester of our pid namespace that is provably gone (its pid free, or
// reused by a process that started at another time) is removed by Remove
// however young; a live requester's, one of another pid namespace and one
// in the old id format (no identity) wait for the age rule.
func TestKilledRequesterRemovedAtOnce(t *testing.T) {
	self := liveness.Self()
	ns, start := self.PIDNS, self.StartTime
	if ns == 0 || start == 0 {
		t.Skip("no /proc identity here")
	}
	d := privateDir(t)
	sp, err := Open(d, "spool-k")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	mk := func(id, suffix string) string {
		p := filepath.Join(sp.Dir(), id+suffix)
		if err := os.WriteFile(p, []byte("r"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	me, dead := strconv.Itoa(os.Getpid()), strconv.Itoa(deadPID(t))
	nsS, startS := strconv.FormatUint(ns, 10), strconv.FormatUint(start, 10)
	gone := []string{
		mk("0000000000000000001-"+dead+"-1-"+nsS+"-"+startS, ".res"),   // killed
		mk("0000000000000000002-"+me+"-2-"+nsS+"-"+startS+"0", ".req"), // pid reused
	}
	kept := []string{
		mk("0000000000000000003-"+me+"-3-"+nsS+"-"+startS, ".res"),    // alive
		mk("0000000000000000004-"+dead+"-4-"+nsS+"1-"+startS, ".res"), // another pid namespace
		mk("0000000000000000005-"+dead+"-5", ".res"),                  // old format, young
	}
	sp.Remove()
	checkRemoved(t, gone, kept)
}
