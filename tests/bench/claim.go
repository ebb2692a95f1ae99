package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/tirastore/tirastore/core"
)

// Claims with leases: what lookup_or_claim costs over lookup,
// on a hit (target: within 10%) and on a miss, from Go (the engine) and
// from Python (the tirastore package). Section "claim" of -sections.
//
// Two workers run on fresh databases preloaded by another process, each
// in a process of its own (Go: a Store of its own in this process, opened
// after the preload; Python: a pybench.py process), as in the latency
// section:
//
//   - the lookup worker (variant "lookup") asks with lookup and records
//     with record: hits on keys it has not read before, the same keys
//     again, misses, and a miss followed by the record of that key (the
//     plain path of a worker that measures what it missed); and, its
//     cache holding the program (its lookups loaded it), pairs of a
//     lookup hit and a lookup_or_claim hit, each on a key it has not
//     read, timed one right after the other: the calls' own costs, with
//     the cache in the same state for both and no drift between them;
//   - the claiming worker (variant "lookup_or_claim") only calls
//     lookup_or_claim: hits on the same keys, the same keys again, a miss
//     claimed then released (the claim alone), and a miss claimed then
//     recorded through the claim (the claimer's full path).
//
// Rounds (-latency-rounds) alternate which worker runs first; samples are
// pooled over rounds. results.json: claims.<client>.<row>; the two-part
// rows also give each part (<row>:lookup, <row>:record, <row>:claim,
// <row>:release); claim_targets holds the ratios to the 10% target.

// Rows of the claim section (labels in results.json's claims.<client>).
const (
	clLookupHit     = "lookup_hit"                 // lookup worker: lookup hit, key not read before
	clLookupRepeat  = "lookup_hit_repeat"          // lookup worker: the same keys again
	clCachedPair    = "cached_pair"                // lookup worker, program cached: a lookup hit then a lookup_or_claim hit, keys not read
	clLookupMiss    = "lookup_miss"                // lookup worker: lookup miss
	clLookupRecord  = "lookup_miss_record"         // lookup worker: lookup miss + record of that key
	clClaimHit      = "lookup_or_claim_hit"        // claiming worker: hit, key not read before
	clClaimRepeat   = "lookup_or_claim_hit_repeat" // claiming worker: the same keys again
	clClaimRelease  = "lookup_or_claim_release"    // claiming worker: miss claimed, then released
	clClaimRecord   = "lookup_or_claim_record"     // claiming worker: miss claimed, then recorded through the claim
	claimHitTarget  = 1.10                         // target: lookup_or_claim / lookup on a hit, medians
	claimWarm       = 50                           // warm-up operations per kind
	tagClaimMiss    = 11                           // never written: the lookup worker's misses
	tagClaimPlain   = 12                           // lookup miss + record
	tagClaimRecord  = 13                           // claimed and recorded
	tagClaimRelease = 14                           // claimed and released (never recorded)
	tagClaimWarm    = 15                           // warm-up misses, records and claims
)

// Variants: the two workers.
const (
	claimVarLookup = "lookup"
	claimVarClaim  = "lookup_or_claim"
)

// claimImpls are the clients of the claim section.
var claimImpls = []string{implEngine, implPython}

// claimPlan is one worker's plan and the pool it needs preloaded (tag 0).
// The pool: keys [0, L) are both workers' hits (each worker has a database
// of its own), [L, 3L) the lookup worker's pairs (lookup_or_claim on
// [L, 2L), lookup on [2L, 3L)), then the warm-up keys. Warm-up misses, records and claims use tag tagClaimWarm
// at disjoint offsets.
func claimPlan(z sizes, variant string) ([]step, int) {
	l, r := z.Lookups, z.Records
	cached, warmHit := l, 3*l
	pool := warmHit + claimWarm
	const warmMiss, warmRecord, warmRelease = 0, 10000, 20000
	if variant == claimVarLookup {
		return []step{
			{Label: "warmup_miss", Op: "lookup", N: claimWarm, Tag: tagClaimWarm, Start: warmMiss, Expect: false, Warmup: true},
			{Label: "warmup_hit", Op: "lookup", N: claimWarm, Tag: tagPool, Start: warmHit, Expect: true, Warmup: true},
			{Label: "warmup_record", Op: "lookup_record", N: claimWarm / 2, Tag: tagClaimWarm, Start: warmRecord, Expect: true, Warmup: true},
			{Label: clLookupHit, Op: "lookup", N: l, Tag: tagPool, Expect: true},
			{Label: clLookupRepeat, Op: "lookup", N: l, Tag: tagPool, Expect: true},
			{Label: clCachedPair, Op: "lookup_pair", N: l, Tag: tagPool, Start: cached, Keys: l, Expect: true},
			{Label: clLookupMiss, Op: "lookup", N: l, Tag: tagClaimMiss, Expect: false},
			{Label: clLookupRecord, Op: "lookup_record", N: r, Tag: tagClaimPlain, Expect: true},
		}, pool
	}
	return []step{
		{Label: "warmup_release", Op: "claim_release", N: claimWarm / 2, Tag: tagClaimWarm, Start: warmRelease, Expect: true, Warmup: true},
		{Label: "warmup_hit", Op: "lookup_or_claim", N: claimWarm, Tag: tagPool, Start: warmHit, Expect: true, Warmup: true},
		{Label: "warmup_record", Op: "claim_record", N: claimWarm / 2, Tag: tagClaimWarm, Start: warmRecord, Expect: true, Warmup: true},
		{Label: clClaimHit, Op: "lookup_or_claim", N: l, Tag: tagPool, Expect: true},
		{Label: clClaimRepeat, Op: "lookup_or_claim", N: l, Tag: tagPool, Expect: true},
		{Label: clClaimRelease, Op: "claim_release", N: r, Tag: tagClaimRelease, Expect: true},
		{Label: clClaimRecord, Op: "claim_record", N: r, Tag: tagClaimRecord, Expect: true},
	}, pool
}

// claimParts names the two timed parts of the two-part operations.
var claimParts = map[string][2]string{
	"lookup_record": {"lookup", "record"},
	"claim_record":  {"claim", "record"},
	"claim_release": {"claim", "release"},
	"lookup_pair":   {"lookup", "lookup_or_claim"},
}

// claimSection measures both workers from Go and from Python, in rounds.
func claimSection(cfg *config, res *results) error {
	pyWhy := pythonPrereq(cfg)
	if pyWhy != "" {
		res.Skipped["claims/"+implPython] = pyWhy
		cfg.logf("claim python rows skipped: %s", pyWhy)
	}
	raw := map[string]map[string]*stepResult{}
	for round := 1; round <= cfg.Rounds; round++ {
		variants := []string{claimVarLookup, claimVarClaim}
		if round%2 == 0 {
			variants[0], variants[1] = variants[1], variants[0]
		}
		for _, impl := range claimImpls {
			if _, skipped := res.Skipped["claims/"+impl]; skipped {
				continue
			}
			for _, v := range variants {
				m, err := claimRun(cfg, impl, v, round)
				if err != nil && impl == implEngine {
					return fmt.Errorf("claims %s %s: %w", impl, v, err)
				}
				if err != nil {
					res.fail("claims/"+impl, err)
					delete(raw, impl)
					cfg.logf("claims %s %s: %v", impl, v, err)
					break
				}
				poolResults(raw, impl, m)
			}
		}
	}
	res.Claims = map[string]map[string]*opResult{}
	for impl, m := range raw {
		res.Claims[impl] = toOpResults(m, cfg.Raw)
	}
	res.ClaimTargets = claimTargets(res)
	return nil
}

// claimRun runs one worker's plan on a fresh, preloaded database.
func claimRun(cfg *config, impl, variant string, round int) (map[string]*stepResult, error) {
	if err := cfg.fresh(); err != nil {
		return nil, err
	}
	z := cfg.Go
	if impl == implPython {
		z = cfg.Py
	}
	steps, pool := claimPlan(z, variant)
	cfg.logf("claims %s, %s worker (round %d): pool of %d records, %d hits per row, %d misses recorded or released",
		impl, variant, round, pool, z.Lookups, z.Records)
	if err := preloadDB(cfg, implEngine, pool); err != nil {
		return nil, err
	}
	t0 := time.Now()
	var out map[string]*stepResult
	if impl == implEngine {
		st, err := core.Open(bg, cfg.dbPath(), core.Options{CPUModel: benchCPU, SlurmCPUs: "N/A"})
		if err != nil {
			return nil, err
		}
		out = runClaimPlan(st, steps)
		if err := st.Close(); err != nil {
			return nil, err
		}
	} else {
		py, err := runPython(cfg, cfg.pySpec(impl, steps))
		switch {
		case err != nil:
			return nil, err
		case py.Skip != "":
			return nil, errors.New(py.Skip)
		}
		out = py.Results
	}
	cfg.logf("claims %s, %s worker (round %d): done in %.1f s", impl, variant, round, time.Since(t0).Seconds())
	return out, nil
}

// runClaimPlan is runPlan for the claim plans, on the engine: the ops
// lookup, lookup_or_claim (expect: a result), and the two-part ops
// lookup_record (a miss, then the record), claim_record (a claim, then
// Claim.Record) and claim_release (a claim, then Claim.Release), each
// timed whole and by part (<label>:<part>); and lookup_pair, a lookup
// hit on key start+Keys+k and a lookup_or_claim hit on key start+k, one
// right after the other in alternating order, each timed alone: its parts
// are the rows (the whole means nothing).
func runClaimPlan(st *core.Store, steps []step) map[string]*stepResult {
	out := map[string]*stepResult{}
	opts := core.ClaimOptions{Wait: true}
	m := core.Measurement{IsLegal: true, ExecutionTimes: core.Times(benchTimes...)}
	for _, s := range steps {
		r := &stepResult{Label: s.Label}
		names, twoPart := claimParts[s.Op]
		var parts [2]*stepResult
		if twoPart {
			for j := range parts {
				parts[j] = &stepResult{Label: s.Label + ":" + names[j]}
			}
		}
		for k := 0; k < s.N; k++ {
			i := s.Start + k
			sched := schedule(s.Tag, i)
			var err error
			ok := true
			var mid time.Time
			var pairNS [2]int64
			t0 := time.Now()
			switch s.Op {
			case "lookup":
				var res *core.Result
				res, err = st.Lookup(bg, programName, programSource, sched)
				ok = (res != nil) == s.Expect
			case "lookup_pair":
				// Both calls timed on their own, in alternating order
				// (the first of two calls is not favoured).
				other := schedule(s.Tag, i+s.Keys)
				lookup := func() {
					t := time.Now()
					res, e := st.Lookup(bg, programName, programSource, other)
					pairNS[0] = time.Since(t).Nanoseconds()
					ok, err = ok && res != nil, errors.Join(err, e)
				}
				claim := func() {
					t := time.Now()
					o, e := st.LookupOrClaim(bg, programName, programSource, sched, opts)
					pairNS[1] = time.Since(t).Nanoseconds()
					ok, err = ok && o.Result != nil, errors.Join(err, e)
					if o.Claim != nil {
						o.Claim.Release(bg)
					}
				}
				if k%2 == 0 {
					lookup()
					claim()
				} else {
					claim()
					lookup()
				}
			case "lookup_or_claim":
				var o core.ClaimOutcome
				o, err = st.LookupOrClaim(bg, programName, programSource, sched, opts)
				ok = (o.Result != nil) == s.Expect
				if o.Claim != nil { // a miss where a hit was expected: give it back
					o.Claim.Release(bg)
				}
			case "lookup_record":
				var res *core.Result
				res, err = st.Lookup(bg, programName, programSource, sched)
				mid = time.Now()
				ok = res == nil
				if err == nil && ok {
					var wrote bool
					mm := m
					mm.Schedule = sched
					wrote, err = st.Record(bg, programName, programSource, mm, false)
					ok = wrote == s.Expect
				}
			case "claim_record", "claim_release":
				var o core.ClaimOutcome
				o, err = st.LookupOrClaim(bg, programName, programSource, sched, opts)
				mid = time.Now()
				ok = o.Claim != nil
				if err == nil && ok && s.Op == "claim_record" {
					var wrote bool
					wrote, err = o.Claim.Record(bg, m)
					ok = wrote == s.Expect
				} else if err == nil && ok {
					err = o.Claim.Release(bg)
				}
			default:
				err = fmt.Errorf("unknown op %q", s.Op)
			}
			end := time.Now()
			r.NS = append(r.NS, end.Sub(t0).Nanoseconds())
			if s.Op == "lookup_pair" && err == nil && ok {
				parts[0].NS = append(parts[0].NS, pairNS[0])
				parts[1].NS = append(parts[1].NS, pairNS[1])
			} else if twoPart && err == nil && ok {
				parts[0].NS = append(parts[0].NS, mid.Sub(t0).Nanoseconds())
				parts[1].NS = append(parts[1].NS, end.Sub(mid).Nanoseconds())
			}
			r.count(err, ok, s.Op, sched)
		}
		switch {
		case !s.Warmup:
			out[s.Label] = r
			if twoPart {
				out[parts[0].Label], out[parts[1].Label] = parts[0], parts[1]
			}
		case r.Errors > 0 || r.Wrong > 0:
			out["warmup/"+s.Label] = r
		}
	}
	return out
}

// claimMedian is the median of a claim row (NaN when missing).
func (res *results) claimMedian(impl, label string) float64 {
	if r := res.Claims[impl][label]; r != nil && r.Summary != nil {
		return r.Summary.Median
	}
	return math.NaN()
}

// claimTargets are the hit target, per client: lookup_or_claim's
// median over lookup's, on keys not read before and on the same keys
// again, each worker alone; and the same ratio from the lookup worker's
// pairs (the calls side by side, the cache in the same state: the
// sharpest of the three, since two processes differ by some percent
// whatever they run).
func claimTargets(res *results) []*target {
	var ts []*target
	for _, impl := range claimImpls {
		for _, c := range []struct{ id, name, loc, base string }{
			{"claim-hit", "lookup_or_claim / lookup, hit on a key not read before", clClaimHit, clLookupHit},
			{"claim-hit-repeat", "lookup_or_claim / lookup, hit on the same key again", clClaimRepeat, clLookupRepeat},
			{"claim-hit-cached", "lookup_or_claim / lookup, hit, program cached by lookups (lookup worker, pairs)", clCachedPair + ":lookup_or_claim", clCachedPair + ":lookup"},
		} {
			a, b := res.claimMedian(impl, c.loc), res.claimMedian(impl, c.base)
			v := ratio(a, b)
			t := &target{ID: c.id + "/" + impl, Name: c.name + ", " + impl, Value: fnum(v), Unit: "x",
				Goal: "<= " + fmtNum(claimHitTarget), Detail: fmt.Sprintf("median %s vs %s µs", fmtUS(a), fmtUS(b))}
			if !math.IsNaN(v) {
				t.Met = boolp(v <= claimHitTarget)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// claimRow is one line of the claim table: the row label, what it
// measures, and the row its ratio is taken against ("" for none).
type claimRow struct {
	title, call, label, base string
	target                   bool
}

var claimRows = []claimRow{
	{"hit, key not read before", "lookup", clLookupHit, "", false},
	{"", "lookup_or_claim", clClaimHit, clLookupHit, true},
	{"hit, same key again", "lookup", clLookupRepeat, "", false},
	{"", "lookup_or_claim", clClaimRepeat, clLookupRepeat, true},
	{"hit, key not read before, program cached by lookups", "lookup", clCachedPair + ":lookup", "", false},
	{"", "lookup_or_claim", clCachedPair + ":lookup_or_claim", clCachedPair + ":lookup", true},
	{"miss", "lookup", clLookupMiss, "", false},
	{"", "lookup_or_claim (claims)", clClaimRelease + ":claim", clLookupMiss, false},
	{"miss, then the record", "lookup + record", clLookupRecord, "", false},
	{"", "lookup_or_claim + claim.record", clClaimRecord, clLookupRecord, false},
	{"  the miss", "lookup", clLookupRecord + ":lookup", "", false},
	{"", "lookup_or_claim (claims)", clClaimRecord + ":claim", clLookupRecord + ":lookup", false},
	{"  the record", "record", clLookupRecord + ":record", "", false},
	{"", "claim.record", clClaimRecord + ":record", clLookupRecord + ":record", false},
	{"claim alone: claimed, then released", "lookup_or_claim + claim.release", clClaimRelease, "", false},
	{"  the release", "claim.release", clClaimRelease + ":release", "", false},
}

// writeClaims prints the claim rows (part of section 1).
func writeClaims(w io.Writer, res *results) {
	_, pySkipped := res.Skipped["claims/"+implPython]
	if res.Claims == nil && !pySkipped {
		return
	}
	fmt.Fprintf(w, "\n   Claims: lookup_or_claim against lookup (µs), two workers on their own fresh database, each its own process:\n")
	fmt.Fprintf(w, "   the lookup worker (lookup, record) and the claiming worker (lookup_or_claim only). ratio = this median / the median of the row it\n")
	fmt.Fprintf(w, "   is compared with (the one above it in its group), same client; target: lookup_or_claim within 10%% of lookup on a hit.\n")
	t := newTable("lll", "operation", "client", "call", "n", "median", "p99", "mean", "ratio", "target", "met?", "failed")
	for _, impl := range claimImpls {
		for _, c := range claimRows {
			r := res.Claims[impl][c.label]
			if r == nil || r.Summary == nil {
				continue
			}
			ra, tgt, met := "-", "", ""
			if c.base != "" {
				v := ratio(r.Summary.Median, res.claimMedian(impl, c.base))
				ra = fmtX(v)
				if c.target {
					tgt = "<=" + fmtNum(claimHitTarget) + "x"
					if !math.IsNaN(v) {
						met = metStr(boolp(v <= claimHitTarget))
					}
				}
			}
			failed := ""
			if r.Errors+r.Wrong > 0 {
				failed = fmt.Sprintf("%d err, %d wrong: %s", r.Errors, r.Wrong, firstLine(r.FirstError))
			}
			t.add(c.title, impl, c.call, fmt.Sprint(r.Summary.N), fmtUS(r.Summary.Median), fmtUS(r.Summary.P99), fmtUS(r.Summary.Mean),
				ra, tgt, met, failed)
		}
		for label, r := range res.Claims[impl] {
			if len(label) > 7 && label[:7] == "warmup/" {
				t.add("FAILED "+label, impl, "", "", "", "", "", "", "", "", fmt.Sprintf("%d err, %d wrong: %s", r.Errors, r.Wrong, firstLine(r.FirstError)))
			}
		}
	}
	t.write(w, "  ")
	if why, ok := res.Skipped["claims/"+implPython]; ok {
		fmt.Fprintf(w, "   python skipped: %s\n", why)
	}
	fmt.Fprintf(w, "   Hits: the lookup worker's cache loads the whole program at its first locked lookup (a quiet phase), so its hits on keys it has\n")
	fmt.Fprintf(w, "   not read come from memory. \"program cached by lookups\": in that worker, pairs of a lookup hit and a lookup_or_claim hit right after\n")
	fmt.Fprintf(w, "   it, each on a key not read before (the calls' own costs, the cache in the same state for both).\n")
	fmt.Fprintf(w, "   Misses: \"miss\" compares lookup misses with the claims of the claim-alone rows; \"the miss\" and \"the record\" are the parts of\n")
	fmt.Fprintf(w, "   the miss+record rows (a lookup miss, then record; a claim, then claim.record), timed within the same operations.\n")
}
