package lock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/liveness"
)

// deadPID is the pid of a process of this host that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("cannot run a child process:", err)
	}
	return cmd.Process.Pid
}

// thisHostJSON is a Go holder's record on this host, in this boot and pid
// namespace, of process pid that started at start.
func thisHostJSON(pid int, start uint64, ts float64) string {
	me := liveness.Self()
	return fmt.Sprintf(`{"hostname": %q, "pid": %d, "timestamp": %f, "boot_id": %q, "pid_ns": %d, "start_time": %d}`,
		identity.Hostname(), pid, ts, me.BootID, me.PIDNS, start)
}

func TestInspectAndBreak(t *testing.T) {
	t.Parallel()
	if liveness.Self().BootID == "" {
		t.Skip("no /proc: the dead-holder rule cannot apply")
	}
	path, opt := newTestLock(t)
	opt.StaleTimeout = 2 * time.Second
	now := unixSeconds(time.Now())
	refused := func(err error) bool { var r *RefusedError; return errors.As(err, &r) }
	for _, c := range []struct {
		name, record string
		force        bool
		broken       bool
		check        func(*Status) bool
	}{
		{"free", "", false, false, func(s *Status) bool { return !s.Held }},
		{"live holder here (this process), even with force", thisHostJSON(os.Getpid(), liveness.Self().StartTime, now), true, false,
			func(s *Status) bool { return s.OnThisHost && s.Alive && !s.Dead }},
		{"dead holder here", thisHostJSON(deadPID(t), 1, now), false, true, func(s *Status) bool { return s.Dead }},
		{"old Python holder elsewhere", holderJSON("elsewhere", 42, now-10), false, true,
			func(s *Status) bool { return s.Stale && !s.OnThisHost && s.Age > 9*time.Second }},
		{"recent Python holder elsewhere", holderJSON("elsewhere", 42, now), false, false,
			func(s *Status) bool { return !s.Stale && s.Holder.Hostname == "elsewhere" }},
		{"recent Python holder elsewhere, forced", holderJSON("elsewhere", 42, now), true, true, nil},
		{"not a record", "garbage", false, false, func(s *Status) bool { return s.Unreadable != nil }},
		{"not a record, forced", "garbage", true, true, nil},
		{"overdue heartbeat holder elsewhere, unchanged while watched", fmt.Sprintf(
			`{"hostname": "elsewhere", "pid": 42, "timestamp": %f, "heartbeat_interval": 0.2}`, now-10), false, true,
			func(s *Status) bool { return s.Overdue && !s.Stale && s.Heartbeat == 200*time.Millisecond }},
	} {
		os.Remove(path)
		if c.record != "" {
			writeLockFile(t, path, c.record)
		}
		l := New(path, opt)
		s, err := l.Inspect()
		if err != nil || (c.check != nil && !c.check(s)) {
			t.Fatalf("%s: Inspect = %+v, %v", c.name, s, err)
		}
		_, broken, err := l.Break(c.force)
		l.Close()
		if broken != c.broken || (err != nil && !refused(err)) || (!c.broken && c.record != "" && err == nil) {
			t.Fatalf("%s: Break(force=%v) = %v, %v; want broken %v", c.name, c.force, broken, err, c.broken)
		}
		if _, serr := os.Lstat(path); c.record != "" && (serr == nil) == c.broken {
			t.Fatalf("%s: lock file present %v after broken=%v", c.name, serr == nil, broken)
		}
		if left := tickets(t, dir(path)); len(left) > 0 {
			t.Fatalf("%s: ticket files left: %v", c.name, left)
		}
	}
}

// A heartbeating holder that rewrites its record while Break watches is
// alive: not broken (the negative control of the watch: without it, the
// overdue timestamp alone would break a holder whose clock is behind).
func TestBreakWatchesAnOverdueHolder(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	opt.StaleTimeout = 2 * time.Second
	rec := func() string {
		return fmt.Sprintf(`{"hostname": "skewed", "pid": 42, "timestamp": %f, "heartbeat_interval": 0.3}`,
			unixSeconds(time.Now())-10) // a clock 10 s behind ours, beating
	}
	writeLockFile(t, path, rec())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				// Not writeLockFile: t.Fatal belongs to the test's goroutine.
				if err := os.WriteFile(path+".tmp", []byte(rec()), 0o600); err != nil {
					t.Error(err)
					return
				}
				os.Rename(path+".tmp", path)
			}
		}
	}()
	l := New(path, opt)
	_, broken, err := l.Break(false)
	close(stop)
	<-done
	l.Close()
	var r *RefusedError
	if broken || !errors.As(err, &r) {
		t.Fatalf("Break of a beating holder = %v, %v; want refused", broken, err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the live lock was removed: %v", err)
	}
}

func dir(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			return path[:i]
		}
	}
	return "."
}

// A lock file that is not a record is stale once it has not changed for
// the stale timeout (by this host's clock, skewed here): Break removes it
// without force, and the advice names the plain break; younger, it needs
// force and the advice names both.
func TestOldGarbageIsStale(t *testing.T) {
	t.Parallel()
	path, opt := newTestLock(t)
	opt.StaleTimeout = time.Minute
	writeLockFile(t, path, "garbage")
	l := New(path, opt)
	defer l.Close()
	c := CommandsFor("/d/my cache.db", opt.StaleTimeout)
	if c.Break != "tirastore lock break --stale-lock-timeout 60 '/d/my cache.db'" {
		t.Fatalf("commands: %+v", c)
	}
	s, err := l.Inspect()
	if err != nil || s.Stale || s.Unreadable == nil || s.Age > 10*time.Second {
		t.Fatalf("young: %+v, %v", s, err)
	}
	if a := Advice(s, c, c.Break); !strings.Contains(a, "`"+c.Force+"` at once") || !strings.Contains(a, "`"+c.Break+"` removes it once") {
		t.Fatalf("young advice: %s", a)
	}
	var refused *RefusedError
	if _, broken, err := l.Break(false); broken || !errors.As(err, &refused) || !refused.Force {
		t.Fatalf("young break: %v, %v", broken, err)
	}
	l.clock = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if s, err = l.Inspect(); err != nil || !s.Stale || s.Age < time.Minute {
		t.Fatalf("old: %+v, %v", s, err)
	}
	if a := Advice(s, c, c.Repair); a != "`"+c.Repair+"` removes it" {
		t.Fatalf("old advice: %s", a)
	}
	if _, broken, err := l.Break(false); !broken || err != nil {
		t.Fatalf("old break: %v, %v", broken, err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the lock is still there: %v", err)
	}
}
