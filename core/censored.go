package core

import (
	"math"
	"strings"

	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/storage"
)

// # Censored results: a measurement that gave no time of its own
//
// A schedule whose run was killed at a time limit has no execution time,
// only a lower bound; one that failed to compile has neither time nor a
// known legality. Autoschedulers meet both on every search (a time
// budget per candidate, compiler crashes on exotic schedules) and measure
// them again and again unless the store can say so. A record says it with
// one more key of its result_json, "censored", beside the original's two,
// so that the original's workers (which read only is_legal and
// execution_times) still read something sensible:
//
//	timed out after T:  {"is_legal":true,"execution_times":[T],"censored":"timeout"}
//	failed to compile:  {"is_legal":false,"execution_times":null,"censored":"compile_failure"}
//
// T is in the unit of the times the database holds (the engine does not
// know it; TiraLib's are milliseconds). An old worker thus reads a timed-out schedule as legal and at least as
// slow as its limit (never the faster for being cut), and a compile
// failure as illegal (not to be tried again); this library reads the key
// back (Result.Censored) and marks the statistics of a timeout as a lower
// bound (timing.Stats.LowerBound). A censored record is never unstable,
// so it is never claimed to be measured again; merge reports it as a
// conflict with a measured record of the same schedule rather than
// mixing a bound into the samples. A "censored" key that does not fit its
// record (another value, or a timeout without exactly one positive time)
// is ignored: the record reads as the original's.

// The values of Measurement.Censored and Result.Censored.
const (
	// CensoredTimeout: the run was stopped at Measurement.TimedOutAfter
	// (in the unit of the execution times); its time is at least that.
	CensoredTimeout = "timeout"
	// CensoredCompileFailure: the schedule failed to compile; neither its
	// time nor its legality is known.
	CensoredCompileFailure = "compile_failure"
)

// censoredJSON validates a censored measurement and renders its
// result_json.
func (m *Measurement) censoredJSON() (string, error) {
	switch m.Censored {
	case CensoredTimeout:
		if !m.IsLegal || len(m.ExecutionTimes) > 0 {
			return "", newError(KindValue, "a timed-out measurement (censored='timeout') is recorded with is_legal True and "+
				"no execution_times: its time is at least timed_out_after")
		}
		t := m.TimedOutAfter
		if t == 0 {
			return "", newError(KindValue, "a timed-out measurement (censored='timeout') needs timed_out_after: the time limit, in the unit of the execution times")
		}
		if !(t > 0) || math.IsInf(t, 0) {
			return "", newError(KindValue, "timed_out_after must be a positive, finite number (the limit, in the unit of the execution times), got %s", pyjson.FormatFloat(t))
		}
		return `{"is_legal":true,"execution_times":[` + pyjson.FormatFloat(t) + `],"censored":"timeout"}`, nil
	case CensoredCompileFailure:
		if m.IsLegal || m.ExecutionTimes != nil || m.TimedOutAfter != 0 {
			return "", newError(KindValue, "a compile failure (censored='compile_failure') is recorded with is_legal False, "+
				"no execution_times and no timed_out_after")
		}
		return `{"is_legal":false,"execution_times":null,"censored":"compile_failure"}`, nil
	}
	return "", newError(KindValue, "censored must be None, 'timeout' or 'compile_failure', got %q", m.Censored)
}

// storedTimes is how many times m's result_json holds: its own, or the
// time limit of a timeout.
func (m *Measurement) storedTimes() int {
	if m.Censored == CensoredTimeout {
		return 1
	}
	return len(m.ExecutionTimes)
}

// censoredOf is what the "censored" value c of a parsed result_json says
// of r (filled from the same result_json), "" when it does not fit.
func censoredOf(c any, r *Result) string {
	switch c {
	case CensoredTimeout:
		if r.IsLegal && len(r.ExecutionTimes) == 1 && r.ExecutionTimes[0] > 0 && !math.IsInf(r.ExecutionTimes[0], 0) {
			return CensoredTimeout
		}
	case CensoredCompileFailure:
		if !r.IsLegal && len(r.ExecutionTimes) == 0 {
			return CensoredCompileFailure
		}
	}
	return ""
}

// ResultCensored is what a stored result_json says of its censoring
// (Result.Censored): "" for a measured result, or one that does not
// parse. An export writes it beside the original's keys.
func ResultCensored(resultJSON string) string {
	if !strings.Contains(resultJSON, `"censored"`) {
		return ""
	}
	r, err := resultOf(&storage.Record{ResultJSON: resultJSON})
	if err != nil {
		return ""
	}
	return r.Censored
}

// SetCensored makes m, a measurement as an export writes it (a timeout's
// limit as its one time), the censored measurement kind names, so that
// recording it writes the result_json it was exported from.
func (m *Measurement) SetCensored(kind string) error {
	switch kind {
	case CensoredTimeout:
		if len(m.ExecutionTimes) != 1 {
			return newError(KindValue, "a timeout (censored='timeout') holds its time limit as its one time, got %d times", len(m.ExecutionTimes))
		}
		t, err := m.ExecutionTimes[0].Float64()
		if err != nil {
			return newError(KindValue, "a timeout's time limit is not a number: %s", string(m.ExecutionTimes[0]))
		}
		m.TimedOutAfter, m.ExecutionTimes = t, nil
	case CensoredCompileFailure:
	default:
		return newError(KindValue, "censored must be 'timeout' or 'compile_failure', got %q", kind)
	}
	m.Censored = kind
	_, err := m.resultJSON()
	return err
}
