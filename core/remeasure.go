package core

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/runctx"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
)

// # Re-measuring an unstable record
//
// (The same append serves a claim on a record none of whose runs
// matches the store's fingerprint rules: match.go.)
//
// LookupOrClaim with ClaimOptions.Remeasure treats a recorded schedule
// whose times break the noise policy (noise.go) as not yet measured well
// enough: while it has had fewer than 1 + MaxRemeasures runs, it is
// claimed like a miss, and the claimer's Record appends its times to the
// record's (a new run: storage "Runs") instead of replacing them, in the
// transaction that ends the claim. Another worker that reaches the record
// meanwhile gets the record as it stands, at once: a re-measurement
// improves a result that exists, so nobody waits for it, and the claim
// keeps two workers from measuring it at the same time. A legal, stable
// record, an illegal one, and one at its cap are hits as before.

// remeasurable reports whether rec, read as r (by the store's match
// rules), is to be measured again under the store's policy.
func (s *Store) remeasurable(rec *storage.Record, r *Result) bool {
	p := s.NoisePolicy()
	if !r.IsLegal || !p.Unstable(r.Stats) {
		return false
	}
	runs := r.matchedRuns
	if runs == 0 {
		runs = len(runsOf(rec, r))
	}
	return runs < 1+p.MaxRemeasures
}

// appendedResult is the result_json of rec with the times of newRJ (a
// legal measurement's result_json, as resultJSON writes it) appended.
func appendedResult(r *Result, newRJ string) (string, error) {
	_, old := r.Stored()
	return withAppended(old, strings.TrimSuffix(strings.TrimPrefix(newRJ, `{"is_legal":true,"execution_times":`), "}"))
}

// withAppended is a legal result_json whose times are the stored ones
// (old: Result.Stored's) followed by those of add, a list's JSON text.
func withAppended(old any, add string) (string, error) {
	oldText, err := storedListText(old)
	if err != nil {
		return "", err
	}
	merged := add
	if oldText != "[]" {
		merged = oldText[:len(oldText)-1] + "," + add[1:]
	}
	return `{"is_legal":true,"execution_times":` + merged + `}`, nil
}

// floatList is xs as a JSON list, each number as Python's repr writes it.
func floatList(xs []float64) string {
	b := []byte{'['}
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = pyjson.AppendFloat(b, x)
	}
	return string(append(b, ']'))
}

// storedListText is a result's stored execution_times (Result.Stored) as
// list text: as stored when it was canonical, else encoded; "[]" for null.
func storedListText(old any) (string, error) {
	switch t := old.(type) {
	case nil:
		return "[]", nil
	case pyjson.Raw:
		return string(t), nil
	case []any:
	default:
		return "", newError(KindValue, "its stored execution_times is not a list (%T): times cannot be appended to it; "+
			"record it again with overwrite", old)
	}
	b, err := pyjson.Marshal(old, pyjson.Compact)
	if err != nil {
		return "", wrapError(KindInternal, err, "encode result_json: %v", err)
	}
	return string(b), nil
}

// recordRemeasure is Record of a claim on an unstable record: m's times
// are appended as a new run if the record is still to be measured again
// (see "Re-measuring an unstable record"); it reports whether it wrote.
func (c *Claim) recordRemeasure(ctx context.Context, m Measurement, source string) (bool, error) {
	s := c.s
	if !m.IsLegal || len(m.ExecutionTimes) == 0 {
		return false, newError(KindValue, "the claim on %s is a re-measurement of a legal record: record is_legal True "+
			"with its execution_times, or release the claim", schedule.Repr(c.schedule))
	}
	m.Schedule = c.schedule
	w, _, err := s.prepareWrite(c.programName, c.programHash, source, []Measurement{m}, false)
	if err != nil {
		return false, err
	}
	row := w.Rows[0]
	if row.Key != c.ref.Key {
		return false, newError(KindInternal, "the claim's key %s is not the record's %s", c.ref.Key, row.Key)
	}
	fp, js, run := s.capture.Capture(len(m.ExecutionTimes))
	renew := s.claims.renewable(c.ref.Token)
	wrote := false
	err = s.be.Update(ctx, "record", func(wr storage.Writer) error {
		wrote = false
		if _, err := wr.DeleteClaim(c.ref.Key, c.ref.Token); err != nil {
			return err
		}
		if len(renew) > 0 {
			if _, err := wr.RenewClaims(renew, identity.NowISO(time.Now())); err != nil {
				return err
			}
		}
		rec, err := wr.Get(row.Key)
		if err != nil {
			return err
		}
		stamp := identity.NowISO(time.Now())
		out := &storage.Record{Key: row.Key, ProgramHash: c.programHash, Schedule: row.Schedule, ResultJSON: row.ResultJSON,
			Hostname: s.hostname, Username: s.username, CreationDate: stamp, UpdateDate: stamp, SourceProject: s.opts.SourceProject}
		runs := []runctx.Run{run}
		if rec != nil {
			full, err := resultOf(rec)
			if err != nil {
				return err
			}
			// What this store sees of it (its match rules): nil when no
			// run matches, which this run then adds.
			seen, err := s.readResult(rec, wr)
			if err != nil {
				return err
			}
			if seen != nil && !s.remeasurable(rec, seen) {
				return nil // stable or at its cap meanwhile (a late record)
			}
			if out.ResultJSON, err = appendedResult(full, row.ResultJSON); err != nil {
				return apierr.Prefix(fmt.Sprintf("%s: record %s (schedule %s): ", s.path, row.Key, schedule.Repr(row.Schedule)), err)
			}
			old := runsOf(rec, full)
			runs = make([]runctx.Run, 0, len(old)+1)
			for _, r := range old {
				runs = append(runs, r.Run)
			}
			runs = append(runs, run)
		} else if source == "" {
			return nil // deleted meanwhile, and the program row may be gone too: nothing to add to
		} else if err := wr.PutProgram(storage.Program{Hash: c.programHash, Name: c.programName, Source: source}); err != nil {
			return err
		}
		if _, err := wr.PutRecord(out, true); err != nil {
			return err
		}
		if err := wr.PutContext(storage.RunContext{Fingerprint: fp, JSON: js}); err != nil {
			return err
		}
		if err := wr.PutRuns(row.Key, stamp, runctx.EncodeRuns(runs)); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	if err != nil {
		return false, err
	}
	c.end()
	return wrote, nil
}
