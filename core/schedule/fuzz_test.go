package schedule

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

// oracle is testdata/reference.py running beside the fuzzer, asked one input
// at a time: the same reference as TestDifferentialPython's, so that the
// rules have one oracle, not a second one in Go.
type oracle struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

var (
	oracleOnce sync.Once
	theOracle  *oracle
	oracleErr  error
)

// getOracle starts the reference once per test binary (it skips the test
// where there is no python3, like the differential test).
func getOracle(t testing.TB) *oracle {
	t.Helper()
	pytest.Python(t)
	script := referenceScript(t)
	oracleOnce.Do(func() {
		cmd := pytest.Command(t, script)
		in, err := cmd.StdinPipe()
		if err != nil {
			oracleErr = err
			return
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			oracleErr = err
			return
		}
		if err = cmd.Start(); err != nil {
			oracleErr = err
			return
		}
		// It ends when its stdin closes, with this test binary.
		theOracle = &oracle{in: in, out: bufio.NewReader(out)}
	})
	if oracleErr != nil {
		t.Fatalf("starting the reference: %v", oracleErr)
	}
	return theOracle
}

// ask returns the reference's answer for one schedule and one program (both
// valid UTF-8: JSON, like a Python str, carries no other).
func (o *oracle) ask(t testing.TB, schedule, program string) pyOut {
	t.Helper()
	req, err := json.Marshal(pyIn{Schedules: []string{schedule}, Programs: []string{program}})
	if err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err = o.in.Write(append(req, '\n')); err != nil {
		t.Fatalf("asking the reference: %v", err)
	}
	line, err := o.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading the reference's answer: %v", err)
	}
	var out pyOut
	if err = json.Unmarshal(line, &out); err != nil || len(out.Norm) != 1 || len(out.Prog) != 1 {
		t.Fatalf("the reference's answer %q: %v", line, err)
	}
	return out
}

func FuzzSchedule(f *testing.F) {
	for _, c := range normalizeCases {
		f.Add(c.in)
	}
	for _, c := range validateCases {
		f.Add(c.in)
	}
	for _, c := range programCases {
		f.Add(c.in)
	}
	o := getOracle(f)
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		ok, reason := Validate(s)
		if ok != (reason == "") {
			t.Fatalf("Validate(%q) = (%v, %q)", s, ok, reason)
		}
		Validate(n)
		p := NormalizeProgram(s)
		if r := Repr(s); !utf8.ValidString(r) {
			t.Fatalf("Repr(%q) is not valid UTF-8", s)
		}
		// Invalid UTF-8 has no Python str to compare with (unit tests cover
		// it); removing a space between two stray bytes can also join them
		// into a new rune, so the checks below need valid UTF-8.
		if !utf8.ValidString(s) {
			return
		}
		// Idempotence holds for the original (the reference checks it too)
		// and follows from the rules: rewriting a block never adds or
		// removes a "]" or a "comps=[".
		if nn := Normalize(n); nn != n {
			t.Fatalf("Normalize not idempotent: %q -> %q -> %q", s, n, nn)
		}
		want := o.ask(t, s, s)
		if n != want.Norm[0] {
			t.Fatalf("Normalize(%q) = %q, reference %q", s, n, want.Norm[0])
		}
		if ok != want.Valid[0][0] || reason != want.Valid[0][1] {
			t.Fatalf("Validate(%q) = (%v, %q), reference (%v, %q)", s, ok, reason, want.Valid[0][0], want.Valid[0][1])
		}
		if p != want.Prog[0] {
			t.Fatalf("NormalizeProgram(%q) = %q, reference %q", s, p, want.Prog[0])
		}
		// NormalizeProgram is not idempotent in general (removing spaces can
		// form new comments: "/ * x * /"), so only absence of spaces is checked.
		for _, out := range []string{n, p} {
			for _, r := range out {
				if IsSpace(r) {
					t.Fatalf("whitespace %U left in %q (input %q)", r, out, s)
				}
			}
		}
	})
}
