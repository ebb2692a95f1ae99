//go:build linux

package liveness

import (
	"os"
	"os/exec"
	"testing"
)

// TestGone judges this process (alive), a child that has exited (gone),
// this process under another start time (a recycled pid) and records that
// prove nothing (another namespace, no start time): the rule
// core/sqlitefile/internal/lock's TestDeadHolderRule applies to lock records,
// here on its own.
func TestGone(t *testing.T) {
	me := Self()
	if me.BootID == "" || me.PIDNS == 0 || me.StartTime == 0 {
		t.Skip("no /proc identity on this system")
	}
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	dead := child.Process.Pid
	other := me
	other.PIDNS++
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"self", GoneFromThisHost("h", "h", os.Getpid(), me), false},
		{"exited child", GoneFromThisHost("h", "h", dead, me), true},
		{"recycled pid", GoneFromThisHost("h", "h", os.Getpid(), Process{StartTime: me.StartTime + 1, BootID: me.BootID, PIDNS: me.PIDNS}), true},
		{"other host", GoneFromThisHost("h", "elsewhere", dead, me), false},
		{"other namespace", GoneFromThisHost("h", "h", dead, other), false},
		{"no boot id", GoneFromThisHost("h", "h", dead, Process{StartTime: me.StartTime, PIDNS: me.PIDNS}), false},
		{"pid 0", Gone(0, 0), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: gone = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestParseStartTime: field 22 of /proc/<pid>/stat is found however many
// spaces and parentheses the command's name (field 2) holds, a short or
// malformed line is an error, and this process's own start time is what
// Self recorded.
func TestParseStartTime(t *testing.T) {
	for _, c := range []struct {
		stat string
		want uint64
		ok   bool
	}{
		{"42 (sleep) S 1 42 42 0 -1 4194560 87 0 0 0 0 0 0 0 20 0 1 0 244679 8192000 200", 244679, true},
		{"42 (a) b) (c) S 1 42 42 0 -1 4194560 87 0 0 0 0 0 0 0 20 0 1 0 99 8192000 200", 99, true},
		{"42 (x y) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 7", 7, true},
		{"42 (short) S 1 2", 0, false},
		{"no parens", 0, false},
	} {
		got, err := parseStartTime([]byte(c.stat))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%q: %d, %v", c.stat, got, err)
		}
	}
	me := Self()
	if me.StartTime != 0 {
		if st, err := procStartTime(os.Getpid()); err != nil || st != me.StartTime {
			t.Errorf("procStartTime(self) = %d, %v; want %d", st, err, me.StartTime)
		}
	}
}
