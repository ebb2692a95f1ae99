//go:build linux

package lock

import (
	"os"
	"testing"
)

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
	me := self()
	if me.startTime != 0 {
		if st, err := procStartTime(os.Getpid()); err != nil || st != me.startTime {
			t.Errorf("procStartTime(self) = %d, %v; want %d", st, err, me.startTime)
		}
	}
}
