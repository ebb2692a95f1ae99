package core

import (
	"context"
	"slices"
	"sync"

	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/runctx"
	"github.com/tirastore/tirastore/core/storage"
)

// MeasurementRun is one run of a record (storage "Runs"): its part of the
// record's execution times, with the context it was taken in.
type MeasurementRun struct {
	runctx.Run
	// Times are the run's part of the record's execution_times.
	Times []float64
	// Context is the run's static context; nil when the database does not
	// hold it (a run of a record written by the original library, which
	// keeps none, has Run.Context "" too).
	Context *runctx.Static
	// Differs: for a store with fingerprint rules (match.go), what of the
	// run's context differs from the store's by them (nil: it matches).
	Differs Mismatch
}

// contextCache remembers the run contexts a store has read: a context is
// named by the hash of its content, so an entry never goes stale.
type contextCache struct {
	mu sync.Mutex
	m  map[string]*runctx.Static
}

// maxCachedContexts bounds a store's contextCache; contexts are few (one
// per host, allocation and tool versions), so this is never reached in
// practice but by a database crafted to make it grow.
const maxCachedContexts = 4096

// resolve returns the contexts of fps, reading those it does not hold
// with r; a fingerprint the database lacks, or whose JSON does not
// parse, is missing from the result.
func (c *contextCache) resolve(r storage.Reader, fps []string) (map[string]*runctx.Static, error) {
	out := make(map[string]*runctx.Static, len(fps))
	var missing []string
	c.mu.Lock()
	for _, fp := range fps {
		if st, ok := c.m[fp]; ok {
			out[fp] = st
		} else if fp != "" {
			missing = append(missing, fp)
		}
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	texts, err := r.Contexts(missing)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedContexts {
		c.m = make(map[string]*runctx.Static)
	}
	for fp, text := range texts {
		st, err := runctx.ParseStatic(text)
		if err != nil || st.Fingerprint() != fp {
			continue // not what its name says: no context rather than a wrong one
		}
		c.m[fp], out[fp] = &st, &st
	}
	return out, nil
}

// resolveOwn is resolve with a read of s's own.
func (c *contextCache) resolveOwn(s *Store, fps []string) (out map[string]*runctx.Static, err error) {
	c.mu.Lock()
	all := true
	for _, fp := range fps {
		if _, ok := c.m[fp]; !ok {
			all = false
			break
		}
	}
	c.mu.Unlock()
	if all {
		return c.resolve(nil, fps)
	}
	err = s.be.View(context.Background(), "read run contexts", func(r storage.Reader) (err error) {
		out, err = c.resolve(r, fps)
		return err
	})
	return out, err
}

// runsOf splits rec's times into its runs; a record without stored runs
// (or whose runs do not add up to its times: written by another tool)
// is one run of unknown context.
func runsOf(rec *storage.Record, r *Result) []MeasurementRun {
	times := r.ExecutionTimes
	if rec.Runs != "" {
		if runs, err := runctx.ParseRuns(rec.Runs); err == nil && len(runs) > 0 {
			total := 0
			for _, run := range runs {
				total += run.Count
			}
			if total == len(times) {
				out := make([]MeasurementRun, len(runs))
				for i, run := range runs {
					out[i] = MeasurementRun{Run: run, Times: times[:run.Count:run.Count]}
					times = times[run.Count:]
				}
				return out
			}
		}
	}
	return []MeasurementRun{{Run: runctx.Run{Count: len(times), LoadAvg: -1, MHz: -1, At: rec.UpdateDate}, Times: times}}
}

// Runs returns the runs of the record of (program, schedule), oldest
// first, each with its context; nil when there is no record.
func (s *Store) Runs(ctx context.Context, programName, source, sched string) ([]MeasurementRun, error) {
	if err := input.Texts("program_name", programName, "program_source_code", source); err != nil {
		return nil, err
	}
	hash := progHashes.hash(source)
	if err := checkProgramRef(programName, hash, sched); err != nil {
		return nil, err
	}
	key := keys.RecordKey(hash, sched)
	var out []MeasurementRun
	err := s.be.View(ctx, "runs", func(r storage.Reader) error {
		out = nil
		rec, err := r.Get(key)
		if err != nil || rec == nil {
			return err
		}
		res, err := resultOf(rec)
		if err != nil {
			return err
		}
		out = runsOf(rec, res)
		fps := make([]string, 0, len(out))
		for _, run := range out {
			fps = append(fps, run.Run.Context)
		}
		found, err := s.contexts.resolve(r, fps)
		if err != nil {
			return err
		}
		ours, ourFP := s.capture.Current()
		for i := range out {
			out[i].Context = found[out[i].Run.Context]
			if len(s.match) > 0 && out[i].Run.Context != ourFP {
				out[i].Differs = differs(s.match, out[i].Context, &ours)
			}
		}
		return nil
	})
	return out, err
}

// RunsMerge is what MergeRuns made of two records of one key.
type RunsMerge struct {
	// ResultJSON and Runs are the merged record's: every time and run of
	// the record here, then those of the other that this one lacks.
	ResultJSON, Runs string
	// Added counts the other record's runs that were added (0: nothing to
	// write).
	Added int
	// Contexts are the fingerprints of the added runs' contexts.
	Contexts []string
}

// MergeRuns merges theirs, a record of another database, into here, the
// record of the same key in this one, keeping every sample: the runs of
// theirs that here lacks (a run equal in count, context, date and times
// is the same run, merged before) are appended, times and runs. Both
// must be legal with times of their own, neither censored (ok false
// otherwise: the caller's conflict).
func MergeRuns(here, theirs *storage.Record) (m RunsMerge, ok bool, err error) {
	h, err := resultOf(here)
	if err != nil {
		return m, false, err
	}
	t, err := resultOf(theirs)
	if err != nil {
		return m, false, err
	}
	if !h.IsLegal || !t.IsLegal || len(h.ExecutionTimes) == 0 || len(t.ExecutionTimes) == 0 || h.Censored != "" || t.Censored != "" {
		return m, false, nil
	}
	hr, tr := runsOf(here, h), runsOf(theirs, t)
	runs := make([]runctx.Run, 0, len(hr)+len(tr))
	for _, r := range hr {
		runs = append(runs, r.Run)
	}
	var add []float64
	for _, r := range tr {
		if slices.ContainsFunc(hr, func(x MeasurementRun) bool {
			return x.Count == r.Count && x.Run.Context == r.Run.Context && x.At == r.At && slices.Equal(x.Times, r.Times)
		}) {
			continue
		}
		runs = append(runs, r.Run)
		add = append(add, r.Times...)
		m.Added++
		if r.Run.Context != "" && !slices.Contains(m.Contexts, r.Run.Context) {
			m.Contexts = append(m.Contexts, r.Run.Context)
		}
	}
	if m.Added == 0 {
		return m, true, nil
	}
	_, old := h.Stored()
	if m.ResultJSON, err = withAppended(old, floatList(add)); err != nil {
		return m, false, nil // not a list of times: the caller's conflict
	}
	m.Runs = runctx.EncodeRuns(runs)
	return m, true, nil
}

// RunContexts are the fingerprints of the contexts rec's runs name (none
// for a record without runs, or whose runs do not parse).
func RunContexts(rec *storage.Record) []string {
	if rec.Runs == "" {
		return nil
	}
	runs, err := runctx.ParseRuns(rec.Runs)
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range runs {
		if r.Context != "" && !slices.Contains(out, r.Context) {
			out = append(out, r.Context)
		}
	}
	return out
}

// ExportRuns is a record's stored runs (storage.Record.Runs) as an export
// carries them, with each context inline (texts: contexts by fingerprint):
// a list of {"count", "context" (an object; null when unknown),
// "slurm_job_id", "load_avg", "mhz" (null when unreadable), "date"}; nil
// for none (no runs, or runs that do not parse).
func ExportRuns(runs string, texts map[string]string) []any {
	if runs == "" {
		return nil
	}
	parsed, err := runctx.ParseRuns(runs)
	if err != nil {
		return nil
	}
	out := make([]any, len(parsed))
	for i, r := range parsed {
		o := pyjson.NewObjectCap(6)
		o.Set("count", r.Count)
		var ctx any // parsed, for the export's layout (indented or not)
		if text, ok := texts[r.Context]; ok {
			ctx, _ = pyjson.Parse([]byte(text))
		}
		o.Set("context", ctx)
		o.Set("slurm_job_id", r.SlurmJobID)
		o.Set("load_avg", UnreadableAsNil(r.LoadAvg))
		o.Set("mhz", UnreadableAsNil(r.MHz))
		o.Set("date", r.At)
		out[i] = o
	}
	return out
}

// UnreadableAsNil is a run's load average or frequency (runctx.Run) as
// a reply or an export shows it: f, or nil (null) for the -1 of a value
// that was unreadable.
func UnreadableAsNil(f float64) any {
	if f < 0 {
		return nil
	}
	return f
}

// Bounds of what an import may store in a run: a context this engine
// captures is about a kilobyte (its CPU flags), its texts short.
const (
	maxContextBytes = 64 << 10
	maxRunText      = 256
)

// ImportRuns reads the runs of a measurement of count times from an
// export (ExportRuns' form): the runs to store and the contexts they
// name, each under the fingerprint of its content. A value that is not
// that form, or runs that do not add up to count times, is an error
// naming what is wrong.
func ImportRuns(v any, count int) (runs string, contexts []storage.RunContext, err error) {
	list, ok := v.([]any)
	if !ok {
		return "", nil, newError(KindValue, "runs is not a list")
	}
	out := make([]runctx.Run, len(list))
	total := 0
	for i, item := range list {
		o, ok := item.(*pyjson.Object)
		if !ok {
			return "", nil, newError(KindValue, "runs[%d] is not an object", i)
		}
		n, _ := o.Get("count")
		num, ok := n.(pyjson.Number)
		c, err := num.Float64()
		if !ok || err != nil || c < 0 || c != float64(int(c)) {
			return "", nil, newError(KindValue, "runs[%d].count is not a count of times", i)
		}
		r := runctx.Run{Count: int(c), LoadAvg: -1, MHz: -1}
		total += r.Count
		if x, _ := o.Get("slurm_job_id"); x != nil {
			if r.SlurmJobID, ok = x.(string); !ok {
				return "", nil, newError(KindValue, "runs[%d].slurm_job_id is not a string", i)
			}
		}
		if x, _ := o.Get("date"); x != nil {
			if r.At, ok = x.(string); !ok {
				return "", nil, newError(KindValue, "runs[%d].date is not a string", i)
			}
		}
		for _, f := range []struct {
			name string
			dst  *float64
		}{{"load_avg", &r.LoadAvg}, {"mhz", &r.MHz}} {
			x, _ := o.Get(f.name)
			if x == nil {
				continue
			}
			num, ok := x.(pyjson.Number)
			v, err := num.Float64()
			if !ok || err != nil || !num.IsFinite() || v < 0 {
				return "", nil, newError(KindValue, "runs[%d].%s is not a non-negative number", i, f.name)
			}
			*f.dst = v
		}
		if len(r.SlurmJobID) > maxRunText || len(r.At) > maxRunText {
			return "", nil, newError(KindValue, "runs[%d]: slurm_job_id and date are at most %d bytes", i, maxRunText)
		}
		if x, _ := o.Get("context"); x != nil {
			b, err := pyjson.Marshal(x, pyjson.Compact)
			if err != nil {
				return "", nil, newError(KindValue, "runs[%d].context: %v", i, err)
			}
			if len(b) > maxContextBytes {
				return "", nil, newError(KindValue, "runs[%d].context is %d bytes, at most %d", i, len(b), maxContextBytes)
			}
			st, err := runctx.ParseStatic(string(b))
			if err != nil {
				return "", nil, newError(KindValue, "runs[%d].context: %v", i, err)
			}
			if err := runctx.CheckTools(st.Tools); err != nil {
				return "", nil, newError(KindValue, "runs[%d].context: %v", i, err)
			}
			r.Context = st.Fingerprint()
			if !slices.ContainsFunc(contexts, func(c storage.RunContext) bool { return c.Fingerprint == r.Context }) {
				contexts = append(contexts, storage.RunContext{Fingerprint: r.Context, JSON: st.JSON()})
			}
		}
		out[i] = r
	}
	if total != count {
		return "", nil, newError(KindValue, "runs count %d times, execution_times holds %d", total, count)
	}
	return runctx.EncodeRuns(out), contexts, nil
}
