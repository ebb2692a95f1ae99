package core

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/runctx"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/timing"
)

// # Fingerprint rules
//
// A record may hold runs taken on other machines (a merge of two
// databases, a database shared by several clusters). A store opened with
// match rules (Options.Match) trusts only the runs whose context matches
// its own on the chosen fields: a lookup returns the record with the
// times of those runs alone, and a record none of whose runs matches is
// a miss, which lookup_or_claim claims (its record then appends a run:
// remeasure.go) and whose Claim says which fields differed. A run whose
// context is unknown (written by the original library, which keeps
// none) matches no rule: a rule asks for proof. Without rules every
// record matches, as in the original.
//
// Fields: host, cpu_model, cpu_flags, cores, slurm_cpus_per_task,
// governor, tools (all of them). Rules: "exact" (equal), "any" (not
// compared: the same as leaving the field out) and, for cpu_model alone,
// "family" (the same CPU vendor, family and model number: another SKU of
// the same microarchitecture; the model strings where CPUID gives no
// numbers).

// matchFields are the fields a rule may name, in the order messages list
// them.
var matchFields = []string{"host", "cpu_model", "cpu_flags", "cores", "slurm_cpus_per_task", "governor", "tools"}

// Rule names.
const (
	MatchExact  = "exact"
	MatchAny    = "any"
	MatchFamily = "family"
)

// fieldRule is one compiled rule.
type fieldRule struct{ field, rule string }

// compileMatch validates rules and keeps those that compare, in
// matchFields order.
func compileMatch(rules map[string]string) ([]fieldRule, error) {
	for f, r := range rules {
		if !slices.Contains(matchFields, f) {
			return nil, newError(KindValue, "match: unknown field %q (fields: %s)", f, strings.Join(matchFields, ", "))
		}
		switch {
		case r == MatchExact || r == MatchAny:
		case r == MatchFamily && f == "cpu_model":
		case r == MatchFamily:
			return nil, newError(KindValue, "match: %q applies to cpu_model only, not %s", r, f)
		default:
			return nil, newError(KindValue, "match[%q]: unknown rule %q (rules: exact, any, family)", f, r)
		}
	}
	var out []fieldRule
	for _, f := range matchFields {
		if r, ok := rules[f]; ok && r != MatchAny {
			out = append(out, fieldRule{f, r})
		}
	}
	return out, nil
}

// fieldText is field f of st as messages show it.
func fieldText(st *runctx.Static, f string) string {
	switch f {
	case "host":
		return st.Host
	case "cpu_model":
		return st.CPUModel
	case "cpu_flags":
		return strings.Join(st.CPUFlags, " ")
	case "cores":
		return strconv.Itoa(st.Cores)
	case "slurm_cpus_per_task":
		return st.SlurmCPUsPerTask
	case "governor":
		return st.Governor
	case "tools":
		keys := make([]string, 0, len(st.Tools))
		for k := range st.Tools {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + st.Tools[k]
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// sameFamily reports whether two contexts' CPUs are of one family (see
// "Fingerprint rules").
func sameFamily(a, b *runctx.Static) bool {
	if a.CPUFamily == 0 && a.CPUModelID == 0 || b.CPUFamily == 0 && b.CPUModelID == 0 {
		return a.CPUModel == b.CPUModel
	}
	return a.CPUVendor == b.CPUVendor && a.CPUFamily == b.CPUFamily && a.CPUModelID == b.CPUModelID
}

// Mismatch says, per field of a rule, what a run's context held and what
// this store's holds ("unknown" for a run without a context).
type Mismatch map[string][2]string

// differs compares theirs (nil: unknown) with ours by rules.
func differs(rules []fieldRule, theirs, ours *runctx.Static) Mismatch {
	var m Mismatch
	for _, r := range rules {
		var same bool
		switch {
		case theirs == nil:
		case r.rule == MatchFamily:
			same = sameFamily(theirs, ours)
		case r.field == "tools":
			same = maps.Equal(theirs.Tools, ours.Tools)
		case r.field == "cpu_flags":
			same = slices.Equal(theirs.CPUFlags, ours.CPUFlags)
		default:
			same = fieldText(theirs, r.field) == fieldText(ours, r.field)
		}
		if !same {
			if m == nil {
				m = Mismatch{}
			}
			t := "unknown"
			if theirs != nil {
				t = fieldText(theirs, r.field)
			}
			m[r.field] = [2]string{t, fieldText(ours, r.field)}
		}
	}
	return m
}

// String lists the fields of m: "cpu_model: 'A' here 'B'; ...".
func (m Mismatch) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %q, here %q", k, m[k][0], m[k][1])
	}
	return strings.Join(parts, "; ")
}

// matching applies the store's rules to r, read from rec: r itself
// without rules; r with the times of its matching runs alone, if any;
// else nil and what differed in the run that came closest (its last
// run, on a tie). read resolves contexts the store has not seen (nil:
// a read of its own).
func (s *Store) matching(rec *storage.Record, r *Result, read storage.Reader) (*Result, Mismatch, error) {
	if len(s.match) == 0 {
		return r, nil, nil
	}
	ours, ourFP := s.capture.Current()
	runs := runsOf(rec, r)
	var fps []string
	for _, run := range runs {
		if run.Run.Context != ourFP && run.Run.Context != "" {
			fps = append(fps, run.Run.Context)
		}
	}
	var found map[string]*runctx.Static
	var err error
	if len(fps) > 0 {
		if read != nil {
			found, err = s.contexts.resolve(read, fps)
		} else {
			found, err = s.contexts.resolveOwn(s, fps)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	var kept []float64
	var closest Mismatch
	matchedRuns := 0
	for _, run := range runs {
		var m Mismatch
		if run.Run.Context != ourFP {
			m = differs(s.match, found[run.Run.Context], &ours)
		}
		if len(m) == 0 {
			matchedRuns++
			kept = append(kept, run.Times...)
		} else if closest == nil || len(m) <= len(closest) {
			closest = m
		}
	}
	if matchedRuns == 0 {
		return nil, closest, nil
	}
	if matchedRuns == len(runs) {
		r.matchedRuns = matchedRuns
		return r, nil, nil
	}
	out := *r
	out.ExecutionTimes = kept
	out.times = pyjson.Raw(floatList(kept))
	out.Stats, _ = timing.Summarize(kept)
	out.Stats.LowerBound = r.Stats.LowerBound
	out.Unstable = s.NoisePolicy().Unstable(out.Stats)
	out.matchedRuns = matchedRuns
	return &out, nil, nil
}
