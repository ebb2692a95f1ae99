package core

import (
	"math"
	"strconv"

	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/pyjson"
)

// TextTooLong is the error of a text of n bytes, longer than
// limits.MaxTextBytes; field names it. The C layer reports with it a text
// it did not build (one a binding or its parser measured).
func TextTooLong(field string, n int64) *Error { return input.TextTooLong(field, n) }

// Measurement is one result to record: the schedule it was measured under,
// whether it was legal, and the measured times (nil means None).
type Measurement struct {
	Schedule       string
	IsLegal        bool
	ExecutionTimes []pyjson.Number
	// Censored says the measurement gave no time of its own: ""
	// (measured), CensoredTimeout (then TimedOutAfter is the time limit
	// in seconds) or CensoredCompileFailure (see censored.go).
	Censored      string
	TimedOutAfter float64
}

// Times converts float64 measurements into the number form Measurement
// carries, formatted as Python would write them.
func Times(xs ...float64) []pyjson.Number {
	out := make([]pyjson.Number, len(xs))
	for i, x := range xs {
		out[i] = pyjson.Number(pyjson.FormatFloat(x))
	}
	return out
}

// resultJSON validates m's times and renders result_json exactly as the
// original wrote it: {"is_legal":<bool>,"execution_times":<list or null>}
// (json.dumps with separators (",", ":")). The document has this one shape,
// so it is written directly rather than through pyjson.Marshal: record_many
// renders one per entry, and the generic encoder was the largest part of
// preparing an entry. TestResultJSONMatchesMarshal holds the two equal.
func (m *Measurement) resultJSON() (string, error) {
	if m.Censored != "" {
		return m.censoredJSON()
	}
	if m.TimedOutAfter != 0 {
		return "", newError(KindValue, "timed_out_after is given only with censored='timeout'")
	}
	if m.IsLegal && len(m.ExecutionTimes) == 0 {
		return "", newError(KindValue, "execution_times must be provided (non-empty list) when is_legal is True.")
	}
	b := make([]byte, 0, 40+12*len(m.ExecutionTimes))
	b = append(b, `{"is_legal":`...)
	b = strconv.AppendBool(b, m.IsLegal)
	b = append(b, `,"execution_times":`...)
	if m.ExecutionTimes == nil {
		b = append(b, "null}"...)
		return string(b), nil
	}
	b = append(b, '[')
	for i, t := range m.ExecutionTimes {
		f, err := t.Float64()
		if err != nil {
			return "", newError(KindValue, "execution_times[%d] is not a number: %q", i, string(t))
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return "", newError(KindValue, "execution_times[%d] must be a finite number, got %s", i, string(t))
		}
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = pyjson.AppendNumber(b, t); err != nil {
			return "", wrapError(KindInternal, err, "encode result_json: %v", err)
		}
	}
	b = append(b, "]}"...)
	return string(b), nil
}
