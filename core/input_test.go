package core

import (
	"testing"

	"github.com/tirastore/tirastore/core/pyjson"
)

// resultJSON writes its document directly; the generic encoder, given the
// same object, is the reference for every shape and number form.
func TestResultJSONMatchesMarshal(t *testing.T) {
	t.Parallel()
	numbers := [][]pyjson.Number{
		nil, {}, {"0.1"}, {"1"}, {"-0"}, {"-0.0"}, {"0"}, {"1.50", "1E5", "2e-7", "-3"},
		{"12345678901234567890"}, {"1e16"}, {"1e-4"}, {"0.00001"}, {"5e-324"}, {"1.7976931348623157e308"},
		{"123456789.125", "-0.000123"},
	}
	for _, legal := range []bool{true, false} {
		for _, ts := range numbers {
			m := Measurement{Schedule: "", IsLegal: legal, ExecutionTimes: ts}
			got, err := m.resultJSON()
			if legal && len(ts) == 0 {
				if err == nil {
					t.Errorf("is_legal with times %v: no error", ts)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%v %v: %v", legal, ts, err)
			}
			obj := pyjson.NewObject()
			obj.Set("is_legal", legal)
			if ts == nil {
				obj.Set("execution_times", nil)
			} else {
				obj.Set("execution_times", ts)
			}
			want, err := pyjson.Marshal(obj, pyjson.Compact)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("%v %v: got %s, want %s", legal, ts, got, want)
			}
		}
	}
	for _, bad := range []struct {
		n    pyjson.Number
		want string
	}{
		{"x", `execution_times[1] is not a number: "x"`},
		{"NaN", "execution_times[1] must be a finite number, got NaN"},
		{"1e400", "execution_times[1] must be a finite number, got 1e400"},
		{"-Infinity", "execution_times[1] must be a finite number, got -Infinity"},
	} {
		m := Measurement{IsLegal: true, ExecutionTimes: []pyjson.Number{"1.0", bad.n}}
		if _, err := m.resultJSON(); err == nil || err.Error() != bad.want {
			t.Errorf("%s: got %v, want %q", bad.n, err, bad.want)
		}
	}
}
