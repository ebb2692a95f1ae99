package core

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/timing"
)

// # The noise policy
//
// A database carries the rule that tells a trustworthy measurement from a
// noisy one (storage.NoisePolicyKey, a db_meta row the original's
// readers ignore): a record whose times spread more than MaxSpread
// (core/timing: PolyBench's rule) is unstable. LookupOrClaim with
// Remeasure hands an unstable record out as a claim to measure again;
// the new times are appended to the old, and the record is stable once
// all of them meet the rule, or after MaxRemeasures more runs, so that a
// schedule whose noise is its own never loops. A database without the
// row follows DefaultNoisePolicy; a store reads the row when it opens.

// NoisePolicy is a database's rule for noisy records.
type NoisePolicy struct {
	// MaxSpread: a record whose Stats.Spread is above it is unstable.
	MaxSpread float64 `json:"max_spread"`
	// MaxRemeasures bounds the runs a record gets after its first.
	MaxRemeasures int `json:"max_remeasures"`
}

// DefaultNoisePolicy is PolyBench's 5% and at most 3 re-measurements.
var DefaultNoisePolicy = NoisePolicy{MaxSpread: timing.DefaultMaxSpread, MaxRemeasures: 3}

// Bounds of a NoisePolicy: a spread is a fraction (10 = 1000%), and
// every re-measurement costs a measurement's machine time.
const (
	MaxNoiseSpread    = 10.0
	MaxNoiseRemeasure = 100
)

// check validates p, naming the bad field.
func (p NoisePolicy) check() error {
	if math.IsNaN(p.MaxSpread) || p.MaxSpread <= 0 || p.MaxSpread > MaxNoiseSpread {
		return newError(KindValue, "max_spread must be above 0 and at most %g (a fraction: 0.05 is 5%%), got %g", MaxNoiseSpread, p.MaxSpread)
	}
	if p.MaxRemeasures < 0 || p.MaxRemeasures > MaxNoiseRemeasure {
		return newError(KindValue, "max_remeasures must be between 0 and %d, got %d", MaxNoiseRemeasure, p.MaxRemeasures)
	}
	return nil
}

// parseNoisePolicy reads the db_meta row's text; a row that does not
// parse or holds values out of bounds is reported, and the default used.
func parseNoisePolicy(text string) (NoisePolicy, error) {
	p := DefaultNoisePolicy
	if err := json.Unmarshal([]byte(text), &p); err != nil {
		return DefaultNoisePolicy, fmt.Errorf("db_meta %s is not a JSON object of max_spread and max_remeasures (%v): the default policy applies", storage.NoisePolicyKey, err)
	}
	if err := p.check(); err != nil {
		return DefaultNoisePolicy, fmt.Errorf("db_meta %s: %v: the default policy applies", storage.NoisePolicyKey, err)
	}
	return p, nil
}

// Unstable reports whether stats break p: at least two finite times
// spread above MaxSpread.
func (p NoisePolicy) Unstable(st timing.Stats) bool {
	return st.Count >= 2 && st.Spread > p.MaxSpread
}

// NoisePolicy is the policy this store judges records by (read when it
// opened, or set since by SetNoisePolicy).
func (s *Store) NoisePolicy() NoisePolicy {
	s.noiseMu.Lock()
	defer s.noiseMu.Unlock()
	return s.noise
}

// SetNoisePolicy stores p as the database's policy: this store follows
// it at once, stores opened afterwards too.
func (s *Store) SetNoisePolicy(ctx context.Context, p NoisePolicy) error {
	if err := p.check(); err != nil {
		return err
	}
	if err := s.CheckWrites(); err != nil {
		return err
	}
	text, _ := json.Marshal(p)
	if err := s.be.Update(ctx, "set the noise policy", func(w storage.Writer) error {
		return w.PutMeta(storage.NoisePolicyKey, string(text))
	}); err != nil {
		return err
	}
	s.noiseMu.Lock()
	s.noise = p
	s.noiseMu.Unlock()
	return nil
}

// newResult is readResult with a read of its own.
func (s *Store) newResult(rec *storage.Record) (*Result, error) { return s.readResult(rec, nil) }

// readResult is resultOf(rec) judged by the store's noise policy, with
// the times of the runs its match rules keep (match.go): nil when none
// does, a miss to this store. read resolves unseen contexts (nil: a read
// of its own).
func (s *Store) readResult(rec *storage.Record, read storage.Reader) (*Result, error) {
	r, _, err := s.judge(rec, read)
	return r, err
}

// judge is readResult with, when no run matches, what differed.
func (s *Store) judge(rec *storage.Record, read storage.Reader) (*Result, Mismatch, error) {
	r, err := resultOf(rec)
	if r == nil {
		return nil, nil, err
	}
	r.Unstable = s.NoisePolicy().Unstable(r.Stats)
	return s.matching(rec, r, read)
}

// Stability counts the records by the noise policy: those with a finite
// time, and those of them whose spread breaks it (tirastore stats), and
// the censored ones, which have no time of their own (censored.go). It
// reads every record once, under one hold of the lock (as an export).
type Stability struct {
	Policy                   NoisePolicy
	Timed, Unstable          int64
	MedianSpread             float64 // of the timed records; 0 without any
	TimedOut, CompileFailure int64
}

// Stability scans the records and counts them by the store's policy.
func (s *Store) Stability(ctx context.Context) (*Stability, error) {
	p := s.NoisePolicy()
	var spreads []float64
	var unstable, timedOut, compileFailure int64
	err := s.be.EachProgram(ctx, func(_ storage.Program, rs []storage.ScheduleResult) error {
		for _, r := range rs {
			res, err := resultOf(&storage.Record{ResultJSON: r.ResultJSON, Schedule: r.Schedule})
			if err != nil {
				continue // unreadable: stats counts those
			}
			switch res.Censored {
			case CensoredTimeout:
				timedOut++
				continue
			case CensoredCompileFailure:
				compileFailure++
				continue
			}
			if res.Stats.Count == 0 {
				continue // without a time
			}
			spreads = append(spreads, res.Stats.Spread)
			if p.Unstable(res.Stats) {
				unstable++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	st := &Stability{Policy: p, Timed: int64(len(spreads)), Unstable: unstable, TimedOut: timedOut, CompileFailure: compileFailure}
	if len(spreads) > 0 {
		slices.Sort(spreads)
		st.MedianSpread = timing.Median(spreads)
	}
	return st, nil
}
