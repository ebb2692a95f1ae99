package identity

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

func TestNowISOExamples(t *testing.T) {
	cases := []struct {
		t    time.Time
		want string
	}{
		{time.Date(2026, 2, 21, 15, 30, 12, 123456000, time.UTC), "2026-02-21T15:30:12.123456+00:00"},
		{time.Date(2026, 2, 21, 15, 30, 12, 123456999, time.UTC), "2026-02-21T15:30:12.123456+00:00"},
		{time.Date(2026, 2, 21, 15, 30, 12, 0, time.UTC), "2026-02-21T15:30:12+00:00"},
		{time.Date(2026, 2, 21, 15, 30, 12, 999, time.UTC), "2026-02-21T15:30:12+00:00"},
		{time.Date(2026, 2, 21, 15, 30, 12, 1000, time.UTC), "2026-02-21T15:30:12.000001+00:00"},
		{time.Date(2026, 2, 21, 17, 30, 12, 500000000, time.FixedZone("X", 2*3600)), "2026-02-21T15:30:12.500000+00:00"},
		{time.Date(999, 1, 2, 3, 4, 5, 0, time.UTC), "0999-01-02T03:04:05+00:00"},
	}
	for _, c := range cases {
		if got := NowISO(c.t); got != c.want {
			t.Errorf("NowISO(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}

// TestNowISOMatchesPython compares with isoformat() of the same instant, built
// in Python from whole seconds and microseconds (the sub-microsecond part is
// dropped, as datetime.now() floors the clock).
func TestNowISOMatchesPython(t *testing.T) {
	pytest.Python(t)
	rng := rand.New(rand.NewSource(1))
	const minSec, maxSec = -62135596800, 253402300799 // 0001-01-01 .. 9999-12-31T23:59:59
	var times []time.Time
	for i := 0; i < 3000; i++ {
		var sec int64
		switch i % 3 {
		case 0:
			sec = minSec + rng.Int63n(maxSec-minSec)
		case 1:
			sec = 1.7e9 + rng.Int63n(1e8) // around now
		default:
			sec = rng.Int63n(4e9) - 2e9
		}
		ns := rng.Int63n(1e9)
		switch i % 7 {
		case 0:
			ns = 0
		case 1:
			ns = rng.Int63n(1000) // below a microsecond: must print no fraction
		case 2:
			ns -= ns % 1000
		}
		times = append(times, time.Unix(sec, ns))
	}
	times = append(times, time.Unix(minSec, 0), time.Unix(maxSec, 999999999), time.Unix(0, 0), time.Unix(-1, 999999))
	var in strings.Builder
	for _, tm := range times {
		fmt.Fprintf(&in, "%d %d\n", tm.Unix(), tm.Nanosecond()/1000)
	}
	script := `
import sys
from datetime import datetime, timedelta, timezone
epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
for line in sys.stdin:
    s, us = map(int, line.split())
    print((epoch + timedelta(seconds=s, microseconds=us)).isoformat())
`
	lines := pytest.Lines(pytest.Run(t, script, []byte(in.String())))
	if len(lines) != len(times) {
		t.Fatalf("python gave %d lines for %d times", len(lines), len(times))
	}
	for i, tm := range times {
		if got := NowISO(tm); got != lines[i] {
			t.Errorf("NowISO(%d.%09d) = %q, python %q", tm.Unix(), tm.Nanosecond(), got, lines[i])
		}
	}
}

// TestNowISOLiveRoundTrips has Python parse a live NowISO value: it must
// come back unchanged through fromisoformat().isoformat() and be close to
// Python's own datetime.now(timezone.utc).
func TestNowISOLiveRoundTrips(t *testing.T) {
	s := NowISO(time.Now())
	script := `
import sys
from datetime import datetime, timezone
s = sys.argv[1]
d = datetime.fromisoformat(s)
assert d.isoformat() == s, (d.isoformat(), s)
assert abs((datetime.now(timezone.utc) - d).total_seconds()) < 60, s
`
	pytest.Run(t, script, nil, s) // a failed assert names s
}

var userVars = []string{"LOGNAME", "USER", "LNAME", "USERNAME"}

func TestUsernameMatchesGetpass(t *testing.T) {
	pytest.Python(t)
	// Each variable unset, empty or set to a distinct name: 3^4 combinations,
	// all evaluated by one Python process that edits its own os.environ.
	type setting struct {
		Name  string
		Value *string // nil = unset
	}
	var combos [][]setting
	for combo := 0; combo < 81; combo++ {
		var cs []setting
		c := combo
		for i, name := range userVars {
			switch c % 3 {
			case 0:
				cs = append(cs, setting{name, nil})
			case 1:
				empty := ""
				cs = append(cs, setting{name, &empty})
			case 2:
				val := fmt.Sprintf("u%d_%s", i, strings.ToLower(name))
				cs = append(cs, setting{name, &val})
			}
			c /= 3
		}
		combos = append(combos, cs)
	}
	script := `
import getpass, json, os, sys
out = []
for combo in json.load(sys.stdin):
    for s in combo:
        if s["Value"] is None:
            os.environ.pop(s["Name"], None)
        else:
            os.environ[s["Name"]] = s["Value"]
    out.append(getpass.getuser())
print(json.dumps(out))
`
	var want []string
	pytest.RunJSON(t, script, combos, &want)
	for i, cs := range combos {
		for _, s := range cs {
			if s.Value == nil {
				t.Setenv(s.Name, "") // registers restoration
				os.Unsetenv(s.Name)
			} else {
				t.Setenv(s.Name, *s.Value)
			}
		}
		if got := Username(); got != want[i] {
			t.Errorf("combo %d: Username() = %q, getpass.getuser() = %q", i, got, want[i])
		}
	}
}

func TestUsernameFallsBackToUID(t *testing.T) {
	for _, name := range userVars {
		t.Setenv(name, "")
	}
	old := lookupUID
	t.Cleanup(func() { lookupUID = old })
	lookupUID = func(string) (string, error) { return "", errors.New("no such user") }
	if got, want := Username(), strconv.Itoa(os.Getuid()); got != want {
		t.Errorf("Username() = %q, want uid %q", got, want)
	}
	lookupUID = func(uid string) (string, error) { return "name-of-" + uid, nil }
	if got, want := Username(), "name-of-"+strconv.Itoa(os.Getuid()); got != want {
		t.Errorf("Username() = %q, want %q", got, want)
	}
}

func TestHostnameMatchesPython(t *testing.T) {
	out := pytest.Run(t, "import socket; print(socket.gethostname())", nil)
	if got, want := Hostname(), strings.TrimSpace(string(out)); got != want {
		t.Errorf("Hostname() = %q, socket.gethostname() = %q", got, want)
	}
}
