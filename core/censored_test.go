package core

import (
	"testing"

	"github.com/tirastore/tirastore/core/storage"
)

// A censored measurement renders the result_json censored.go promises,
// and reading it back gives the kind, and a lower bound for a timeout.
func TestCensoredRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		m    Measurement
		want string
	}{
		{Measurement{IsLegal: true, Censored: CensoredTimeout, TimedOutAfter: 30}, `{"is_legal":true,"execution_times":[30.0],"censored":"timeout"}`},
		{Measurement{Censored: CensoredCompileFailure}, `{"is_legal":false,"execution_times":null,"censored":"compile_failure"}`},
	} {
		rj, err := tc.m.resultJSON()
		if err != nil || rj != tc.want {
			t.Fatalf("resultJSON(%+v) = %q, %v; want %q", tc.m, rj, err, tc.want)
		}
		r, err := resultOf(&storage.Record{ResultJSON: rj})
		if err != nil || r.Censored != tc.m.Censored || r.Stats.LowerBound != (tc.m.Censored == CensoredTimeout) {
			t.Fatalf("resultOf(%s) = %+v, %v", rj, r, err)
		}
		if got := ResultCensored(rj); got != tc.m.Censored {
			t.Fatalf("ResultCensored(%s) = %q", rj, got)
		}
		back := Measurement{IsLegal: tc.m.IsLegal}
		if tc.m.Censored == CensoredTimeout {
			back.ExecutionTimes = Times(30)
		}
		if err := back.SetCensored(tc.m.Censored); err != nil || back.TimedOutAfter != tc.m.TimedOutAfter {
			t.Fatalf("SetCensored: %+v, %v", back, err)
		}
	}
}

// A "censored" key that does not fit its record is ignored, and a
// measured record is never read as censored.
func TestCensoredKeyThatDoesNotFitIsIgnored(t *testing.T) {
	for _, rj := range []string{
		`{"is_legal":true,"execution_times":[1.0,2.0],"censored":"timeout"}`,
		`{"is_legal":true,"execution_times":[0],"censored":"timeout"}`,
		`{"is_legal":false,"execution_times":null,"censored":"timeout"}`,
		`{"is_legal":true,"execution_times":[1.0],"censored":"compile_failure"}`,
		`{"is_legal":true,"execution_times":[1.0],"censored":null}`,
		`{"is_legal":true,"execution_times":[1.0]}`,
	} {
		r, err := resultOf(&storage.Record{ResultJSON: rj})
		if err != nil || r.Censored != "" || r.Stats.LowerBound {
			t.Fatalf("resultOf(%s) = %+v, %v; want a measured result", rj, r, err)
		}
	}
}
