package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/tuning"
)

// The cliff section: lookups over a working set
// larger than a store's result cache, and the memory of a lookup-heavy
// process. The database holds cliffSizes.Programs programs of
// cliffSizes.Records records each (by default 4 x tuning.MaxCached records
// in all), written beforehand by this process; the measured processes
// never wrote them.
//
//   - (a) one Python process (pybench.py, the tirastore package): lookup
//     hits over cliffHitRecords records' programs (a working set that
//     fits), then lookups of random (program, schedule) pairs over every
//     program (the thrash row), whose median is judged against the hit's;
//     the same in Go (engine-go, in-process), with the lock's and the
//     cache's counters over the thrash row (program loads under the lock,
//     rows read, point reads).
//   - memory: the same Python process's VmRSS after its warm-up, after the
//     thrash rows (the cache full) and after Memory lookups in all (the
//     rest: hits and misses over cliffFitRecords records' programs, which
//     fit the cache). Target: no growth once the cache is full
//     (cliffRSSPlateau); the growth from the warm-up is shown beside the
//     cache's byte bound.
//   - (b) a neighbour Python process recording new keys one at a time,
//     alone, beside a second Python process doing cached hits (lock-free:
//     the CPU such a process takes, no lock), and beside a second Python
//     process thrashing, in turn (NeighbourRounds each): its record p50
//     each way.
type cliffSizes struct {
	Programs int `json:"programs"`
	Records  int `json:"records_per_program"`
	// Lookups: the thrash row's timed lookups (a quarter more before it,
	// untimed, for the cache to settle); Memory: the memory row's lookups
	// in all; NeighbourRecords: the records of each neighbour run.
	Lookups          int `json:"thrash_lookups"`
	Memory           int `json:"memory_lookups"`
	NeighbourRecords int `json:"neighbour_records"`
	NeighbourRounds  int `json:"neighbour_rounds"`
}

// cliffSourceSuffix ends program p's source (cliffSource).
const cliffSourceSuffix = "\nint cliff_program_{p};\n"

// cliffSource is the source of the cliff section's program p.
func cliffSource(p int) string {
	return programSource + strings.ReplaceAll(cliffSourceSuffix, "{p}", fmt.Sprint(p))
}

// Tags and sizes of the cliff section's records.
const (
	tagCliff          = 20    // the working set's schedules
	tagCliffNeighbour = 21    // the neighbour's new records (start: run*NeighbourRecords)
	cliffHitRecords   = 8192  // records of the cached-hit row's programs
	cliffFitRecords   = 16384 // records of the memory row's fitting programs
	cliffHitLookups   = 20000
	cliffLookupTarget = 10.0 // target: thrash median / hit median
	cliffNeighbourMax = 1.5  // target: neighbour record p50 beside / alone
)

// cliffRSSPlateau is the memory row's target (memory stays bounded):
// once the cache is full (after the thrash rows), the rest of the million
// lookups may grow the Python process's VmRSS by this many MiB at most (Go's heap size and the allocator's spans move a
// little between collections).
const cliffRSSPlateau = 8.0

// cliffRow is one client's lookups: hit and thrash summaries (µs), with
// the thrash row's p90 and, from Go, the counters.
type cliffRow struct {
	Hit      *summary `json:"cached_hit"`
	Thrash   *summary `json:"thrash"`
	ThrashP9 float64  `json:"thrash_p90_us"`
	Ratio    fnum     `json:"thrash_median_per_hit"`
	Problems string   `json:"problems,omitempty"`
	// Go only: over the thrash row, the lock's acquisitions and the
	// cache's counters (sqlitefile.CacheCounters: keys read under the
	// lock, entries evicted). The row's longest lookup
	// (Thrash.Max) bounds its longest hold of the lock: each lookup takes
	// the lock at most once, and nobody else uses it.
	Lock  *lockStats       `json:"lock,omitempty"`
	Cache map[string]int64 `json:"cache,omitempty"`
}

// cliffResults is the cliff section's part of results.json.
type cliffResults struct {
	Sizes       cliffSizes           `json:"sizes"`
	CacheBound  int                  `json:"cache_max_entries"`
	CacheBytes  int                  `json:"cache_max_bytes"`
	Rows        map[string]*cliffRow `json:"lookups"`
	RSSWarmMiB  float64              `json:"rss_after_warmup_mib"`
	RSSFullMiB  float64              `json:"rss_after_thrash_mib"`
	RSSEndMiB   float64              `json:"rss_after_lookups_mib"`
	HWMMiB      float64              `json:"peak_rss_mib"`
	MemLookups  int                  `json:"memory_lookups_done"`
	FullLookups int                  `json:"lookups_with_cache_full"`
	Alone       *summary             `json:"neighbour_record_alone"`
	Beside      *summary             `json:"neighbour_record_beside"`
	BesideRatio fnum                 `json:"neighbour_p50_beside_per_alone"`
	// BesideHits is the neighbour's records beside a process doing
	// cached hits only (no lock): what its CPU alone costs the neighbour.
	BesideHits *summary `json:"neighbour_record_beside_hits"`
	// BesideThrash is the thrashing process's lookups during the
	// neighbour's runs.
	BesideThrash *summary `json:"thrash_beside_neighbour"`
}

// cliffSection runs the section; a failure is kept in res.Failed["cliff"].
func cliffSection(cfg *config, res *results) *cliffResults {
	out, err := runCliff(cfg)
	if err != nil {
		res.fail("cliff", err)
		cfg.logf("cliff: %v", err)
	}
	return out
}

func runCliff(cfg *config) (*cliffResults, error) {
	z := cfg.Cliff
	out := &cliffResults{Sizes: z, CacheBound: tuning.MaxCached, CacheBytes: tuning.MaxCachedBytes, Rows: map[string]*cliffRow{}}
	if err := cfg.fresh(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := cliffPreload(cfg.dbPath(), z); err != nil {
		return nil, err
	}
	cfg.logf("cliff: %d programs x %d records written in %.1f s (result cache: %d entries)", z.Programs, z.Records, time.Since(t0).Seconds(), tuning.MaxCached)

	// (a) and the memory row, from Python.
	if why := pythonPrereq(cfg); why != "" {
		return out, errors.New(why)
	}
	warm := max(z.Lookups/4, 1)
	hits := min(cliffHitLookups, max(z.Memory/10, 1))
	fit := max(z.Memory-2*hits-warm-z.Lookups, 0)
	hitSet := step{Op: "lookup_set", Tag: tagCliff, Programs: min(max(cliffHitRecords/z.Records, 1), z.Programs), Records: z.Records, Keys: z.Records}
	fitSet := step{Op: "lookup_set", Tag: tagCliff, Programs: min(max(cliffFitRecords/z.Records, 1), z.Programs), Records: z.Records, Keys: 2 * z.Records}
	thrash := step{Op: "lookup_set", Tag: tagCliff, Programs: z.Programs, Records: z.Records, Keys: z.Records}
	with := func(s step, label string, n int, seed int64, warm bool) step {
		s.Label, s.N, s.Seed, s.Warmup = label, n, seed, warm
		return s
	}
	plan := []step{
		with(hitSet, "warmup_hit", hits, 1, true),
		with(hitSet, "cached_hit", hits, 2, false),
		{Label: "rss_warm", Op: "rss"},
		with(thrash, "warmup_thrash", warm, 4, true),
		with(thrash, "thrash", z.Lookups, 5, false),
		{Label: "rss_full", Op: "rss"},
		with(fitSet, "fit_mix", fit, 3, true), // untimed: no samples kept
		{Label: "rss_end", Op: "rss"},
	}
	cfg.logf("cliff python: %d hits, %d+%d lookups over %d programs, %d over %d programs", hits, warm, z.Lookups, z.Programs, fit, fitSet.Programs)
	t0 = time.Now()
	py, err := runPython(cfg, cfg.pySpec(implPython, plan))
	if err != nil {
		return out, err
	}
	if py.Skip != "" {
		return out, errors.New(py.Skip)
	}
	cfg.logf("cliff python: done in %.1f s", time.Since(t0).Seconds())
	out.Rows[implPython] = newCliffRow(py.Results["cached_hit"], py.Results["thrash"], py.Results)
	if r := py.Results["rss_warm"]; r != nil {
		out.RSSWarmMiB = float64(r.RSSKiB) / 1024
	}
	if r := py.Results["rss_full"]; r != nil {
		out.RSSFullMiB = float64(r.RSSKiB) / 1024
	}
	if r := py.Results["rss_end"]; r != nil {
		out.RSSEndMiB, out.HWMMiB = float64(r.RSSKiB)/1024, float64(r.HWMKiB)/1024
	}
	out.MemLookups, out.FullLookups = 2*hits+fit+warm+z.Lookups, fit

	// (a) from Go, in this process, with the counters.
	t0 = time.Now()
	goRow, err := cliffGo(cfg.dbPath(), []step{
		with(hitSet, "warmup_hit", hits, 1, true), with(hitSet, "cached_hit", hits, 2, false),
		with(thrash, "warmup_thrash", warm, 4, true), with(thrash, "thrash", z.Lookups, 5, false)})
	if err != nil {
		return out, err
	}
	out.Rows[implEngine] = goRow
	cfg.logf("cliff engine-go: done in %.1f s", time.Since(t0).Seconds())

	// (b) the neighbour: alone, beside cached hits, beside a thrashing
	// process, in turn.
	var alone, besideHits, beside, bg []int64
	for round := 0; round < z.NeighbourRounds; round++ {
		for kind, set := range []*step{nil, &hitSet, &thrash} {
			run := 3*round + kind
			var busy []step
			if set != nil {
				busy = []step{with(*set, "warmup", warm, int64(10+run), true), with(*set, "busy", math.MaxInt32, int64(20+run), false)}
			}
			ns, lookups, err := cliffNeighbour(cfg, z, run, busy)
			if err != nil {
				return out, err
			}
			switch kind {
			case 0:
				alone = append(alone, ns...)
			case 1:
				besideHits = append(besideHits, ns...)
			default:
				beside, bg = append(beside, ns...), append(bg, lookups...)
			}
		}
	}
	out.Alone, out.BesideHits, out.Beside, out.BesideThrash = summarize(alone), summarize(besideHits), summarize(beside), summarize(bg)
	if out.Alone != nil && out.Beside != nil {
		out.BesideRatio = fnum(ratio(out.Beside.Median, out.Alone.Median))
	}
	return out, nil
}

// newRand is the generator of a lookup_set step's pairs.
func newRand(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 29)) }

// newCliffRow summarizes the hit and thrash rows of one client; failed
// operations of any step are named in Problems.
func newCliffRow(hit, thrash *stepResult, all map[string]*stepResult) *cliffRow {
	row := &cliffRow{Ratio: fnum(math.NaN())}
	if hit != nil {
		row.Hit = summarize(hit.NS)
	}
	if thrash != nil {
		row.Thrash = summarize(thrash.NS)
		s := slices.Clone(thrash.NS)
		slices.Sort(s)
		if len(s) > 0 {
			row.ThrashP9 = float64(percentile(s, 90)) / 1e3
		}
	}
	if row.Hit != nil && row.Thrash != nil {
		row.Ratio = fnum(ratio(row.Thrash.Median, row.Hit.Median))
	}
	var bad []string
	for label, r := range all {
		if r.Errors+r.Wrong > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d errors, %d wrong (%s)", label, r.Errors, r.Wrong, r.FirstError))
		}
	}
	slices.Sort(bad)
	row.Problems = strings.Join(bad, "; ")
	return row
}

// cliffPreload writes the working set with record_many, 1,024 records a
// call, from a store of this process that is closed before anyone
// measures.
func cliffPreload(db string, z cliffSizes) error {
	ctx := context.Background()
	st, err := core.Open(ctx, db, core.Options{CPUModel: benchCPU, SlurmCPUs: "N/A"})
	if err != nil {
		return err
	}
	defer st.Close()
	for p := 0; p < z.Programs; p++ {
		src := cliffSource(p)
		for from := 0; from < z.Records; from += 1024 {
			ms := make([]core.Measurement, 0, 1024)
			for i := from; i < min(from+1024, z.Records); i++ {
				ms = append(ms, core.Measurement{Schedule: schedule(tagCliff, i), IsLegal: true, ExecutionTimes: core.Times(benchTimes...)})
			}
			if n, err := st.RecordMany(ctx, programName, src, ms, false); err != nil || n != len(ms) {
				return fmt.Errorf("preload of program %d: %d of %d written: %v", p, n, len(ms), err)
			}
		}
	}
	return nil
}

// cliffGo runs steps (lookup_set only) in this process through a fresh
// store, and reads its counters around the "thrash" step.
func cliffGo(db string, steps []step) (*cliffRow, error) {
	ctx := context.Background()
	st, err := core.Open(ctx, db, core.Options{CPUModel: benchCPU, SlurmCPUs: "N/A"})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	results := map[string]*stepResult{}
	var lockBefore lockStats
	var cacheBefore map[string]int64
	for _, s := range steps {
		if s.Label == "thrash" {
			lockBefore, cacheBefore = engineLockStats(st), cacheCounters(st)
		}
		r := &stepResult{Label: s.Label}
		srcs := make([]string, s.Programs)
		for p := range srcs {
			srcs[p] = cliffSource(s.Start + p)
		}
		scheds := make([]string, s.Keys)
		for i := range scheds {
			scheds[i] = schedule(s.Tag, i)
		}
		rng := newRand(s.Seed)
		for k := 0; k < s.N; k++ {
			p, i := rng.IntN(s.Programs), rng.IntN(s.Keys)
			t0 := time.Now()
			got, err := st.Lookup(ctx, programName, srcs[p], scheds[i])
			r.NS = append(r.NS, int64(time.Since(t0)))
			r.count(err, (got != nil) == (i < s.Records), "lookup", scheds[i])
		}
		if !s.Warmup || r.Errors+r.Wrong > 0 {
			results[s.Label] = r
		}
	}
	row := newCliffRow(results["cached_hit"], results["thrash"], results)
	l := engineLockStats(st).sub(lockBefore)
	row.Lock = &l
	if after := cacheCounters(st); after != nil {
		row.Cache = map[string]int64{}
		for k, v := range after {
			row.Cache[k] = v - cacheBefore[k]
		}
	}
	return row, nil
}

// engineLockStats are st's lock counters as the bench keeps them.
func engineLockStats(st *core.Store) lockStats {
	c := st.LockStats()
	return lockStats{Acquired: c.Acquired, Links: c.Links, Breaks: c.Breaks, HeldNS: int64(c.Held)}
}

// cacheCounters are the counters of st's result cache
// (sqlitefile.Backend.CacheCounters) by name, nil when the backend has none
// (looked up by name: the section also runs against earlier engines, for a
// before/after comparison).
func cacheCounters(st *core.Store) map[string]int64 {
	m := reflect.ValueOf(st.Backend()).MethodByName("CacheCounters")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return nil
	}
	b, err := json.Marshal(m.Call(nil)[0].Interface())
	if err != nil {
		return nil
	}
	var out map[string]int64
	if json.Unmarshal(b, &out) != nil {
		return nil
	}
	return out
}

// cliffNeighbour runs one neighbour (pybench.py, z.NeighbourRecords records
// of new keys, after 5 untimed ones), beside a second Python process that
// runs busy (lookup_set steps, the last one until the neighbour is done)
// unless busy is empty; it returns the neighbour's record durations and the
// busy process's lookup durations meanwhile.
func cliffNeighbour(cfg *config, z cliffSizes, run int, busy []step) (records, lookups []int64, err error) {
	thrashing := len(busy) > 0
	var bg *exec.Cmd
	var bgOut strings.Builder
	stop := filepath.Join(cfg.Dir, fmt.Sprintf("cliff-stop-%d", run))
	ready := filepath.Join(cfg.Dir, fmt.Sprintf("cliff-ready-%d", run))
	for _, f := range []string{stop, ready} { // an earlier run's (-keep, or a killed run)
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
		defer os.Remove(f)
	}
	if thrashing {
		last := &busy[len(busy)-1]
		last.ReadyFile, last.StopFile = ready, stop
		path, err := writeSpec(cfg, cfg.pySpec(implPython, busy))
		if err != nil {
			return nil, nil, err
		}
		defer os.Remove(path)
		bg = pythonCmd(cfg, path)
		bg.Stdout = &bgOut
		if err := bg.Start(); err != nil {
			return nil, nil, err
		}
		defer func() {
			if bg != nil { // not waited for yet: a failed run
				os.WriteFile(stop, nil, 0o644)
				bg.Wait()
			}
		}()
		for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return nil, nil, errors.New("the busy process did not get ready within 10 minutes")
			}
		}
	}
	start := 5 + run*(z.NeighbourRecords+5)
	py, err := runPython(cfg, cfg.pySpec(implPython, []step{
		{Label: "warmup_record", Op: "record", N: 5, Tag: tagCliffNeighbour, Start: start - 5, Expect: true, Warmup: true},
		{Label: "record", Op: "record", N: z.NeighbourRecords, Tag: tagCliffNeighbour, Start: start, Expect: true},
	}))
	if err != nil {
		return nil, nil, err
	}
	if py.Skip != "" {
		return nil, nil, errors.New(py.Skip)
	}
	r := py.Results["record"]
	if r == nil || r.Errors+r.Wrong > 0 {
		return nil, nil, fmt.Errorf("neighbour run %d: %+v", run, r)
	}
	if !thrashing {
		return r.NS, nil, nil
	}
	os.WriteFile(stop, nil, 0o644)
	err = bg.Wait()
	bg = nil
	if err != nil {
		return nil, nil, fmt.Errorf("busy process: %v", err)
	}
	var o pyOutput
	if err := json.Unmarshal([]byte(bgOut.String()), &o); err != nil {
		return nil, nil, fmt.Errorf("busy process: %v", err)
	}
	t := o.Results["busy"]
	if t == nil || t.Errors+t.Wrong > 0 {
		return nil, nil, fmt.Errorf("busy process: %+v", t)
	}
	return r.NS, t.NS, nil
}

// cliffTargets are the section's targets (the lookup ratio, the neighbour,
// memory) on its figures.
func cliffTargets(res *results) []*target {
	c := res.Cliff
	if c == nil {
		return nil
	}
	var ts []*target
	judge := func(id, name string, v, limit float64, unit, detail string) {
		t := &target{ID: id, Name: name, Value: fnum(v), Unit: unit, Goal: "<= " + fmtNum(limit), Detail: detail}
		if !math.IsNaN(v) && v != 0 {
			t.Met = boolp(v <= limit)
		}
		ts = append(ts, t)
	}
	if r := c.Rows[implPython]; r != nil && r.Thrash != nil && r.Hit != nil {
		judge("cliff-lookup/python", "lookup median over 4x the result cache / cached hit, python", float64(r.Ratio), cliffLookupTarget, "x",
			fmt.Sprintf("median %s µs (p90 %s) vs hit %s µs", fmtUS(r.Thrash.Median), fmtUS(r.ThrashP9), fmtUS(r.Hit.Median)))
	}
	if r := c.Rows[implEngine]; r != nil && r.Thrash != nil && r.Hit != nil {
		d := fmt.Sprintf("median %s µs (p90 %s) vs hit %s µs; longest lookup (bounds the hold) %s µs", fmtUS(r.Thrash.Median), fmtUS(r.ThrashP9), fmtUS(r.Hit.Median), fmtUS(r.Thrash.Max))
		if r.Cache != nil {
			d += fmt.Sprintf("; under the lock: %d point reads, %d programs read whole (%d rows), %d evicted", r.Cache["PointReads"], r.Cache["ProgramReads"], r.Cache["RowsRead"], r.Cache["Evicted"])
		}
		ts = append(ts, &target{ID: "cliff-lookup/engine-go", Name: "lookup median over 4x the result cache / cached hit, engine-go",
			Value: r.Ratio, Unit: "x", Goal: "report", Detail: d})
	}
	if c.Alone != nil && c.Beside != nil {
		d := fmt.Sprintf("%s vs %s µs", fmtUS(c.Beside.Median), fmtUS(c.Alone.Median))
		if c.BesideHits != nil {
			d += fmt.Sprintf("; beside a process doing cached hits (its CPU, no lock) %s µs", fmtUS(c.BesideHits.Median))
		}
		judge("cliff-neighbour", "neighbour's record p50 beside the thrashing process / alone", float64(c.BesideRatio), cliffNeighbourMax, "x", d)
	}
	if c.RSSEndMiB > 0 {
		judge("memory", fmt.Sprintf("RSS growth of a Python process once its cache is full, over %s lookups", fmtCount(float64(c.FullLookups))),
			c.RSSEndMiB-c.RSSFullMiB, cliffRSSPlateau, "MiB",
			fmt.Sprintf("%.1f MiB after its warm-up, %.1f with the cache full, %.1f after %s lookups in all (peak %.1f; cache bound %d MiB)",
				c.RSSWarmMiB, c.RSSFullMiB, c.RSSEndMiB, fmtCount(float64(c.MemLookups)), c.HWMMiB, c.CacheBytes>>20))
	}
	return ts
}

// writeCliff prints the cliff section.
func writeCliff(w io.Writer, res *results) {
	c := res.Cliff
	why, skipped := res.Skipped["cliff"]
	if c == nil && !skipped {
		return
	}
	fmt.Fprintf(w, "\n   Lookups past the result cache, µs.\n")
	if c != nil {
		fmt.Fprintf(w, "   %d programs x %d records (the cache holds %d entries and %d MiB); thrash: random (program, schedule) pairs over all of them;\n", c.Sizes.Programs, c.Sizes.Records, c.CacheBound, c.CacheBytes>>20)
		fmt.Fprintf(w, "   hit: the same over %d programs. ratio = thrash median / hit median, same process.\n", min(max(cliffHitRecords/c.Sizes.Records, 1), c.Sizes.Programs))
		t := newTable("ll", "client", "hit median", "thrash median", "thrash p90", "thrash max", "ratio", "lock acq.", "point reads", "whole reads", "evicted", "failed")
		for _, impl := range []string{implPython, implEngine} {
			r := c.Rows[impl]
			if r == nil || r.Hit == nil || r.Thrash == nil {
				continue
			}
			acq, points, whole, evicted := "-", "-", "-", "-"
			if r.Lock != nil {
				acq = fmt.Sprint(r.Lock.Acquired)
			}
			if r.Cache != nil {
				points, evicted = fmt.Sprint(r.Cache["PointReads"]), fmt.Sprint(r.Cache["Evicted"])
				whole = fmt.Sprintf("%d (%d rows)", r.Cache["ProgramReads"], r.Cache["RowsRead"])
			}
			t.add(impl, fmtUS(r.Hit.Median), fmtUS(r.Thrash.Median), fmtUS(r.ThrashP9), fmtUS(r.Thrash.Max), fmtX(float64(r.Ratio)), acq, points, whole, evicted, r.Problems)
		}
		t.write(w, "  ")
		if c.Alone != nil && c.Beside != nil {
			fmt.Fprintf(w, "   neighbour (python, record of a new key): p50 %s alone, %s beside a thrashing python process (%sx); p99 %s / %s",
				fmtUS(c.Alone.Median), fmtUS(c.Beside.Median), fmtNum(float64(c.BesideRatio)), fmtUS(c.Alone.P99), fmtUS(c.Beside.P99))
			if c.BesideHits != nil {
				fmt.Fprintf(w, ";\n   beside a python process doing cached hits (its CPU, no lock): p50 %s", fmtUS(c.BesideHits.Median))
			}
			if c.BesideThrash != nil {
				fmt.Fprintf(w, "; its lookups meanwhile: median %s", fmtUS(c.BesideThrash.Median))
			}
			fmt.Fprintln(w)
		}
		if c.RSSEndMiB > 0 {
			fmt.Fprintf(w, "   memory (python, VmRSS): %.1f MiB after warm-up, %.1f after the thrash rows (cache full), %.1f after %s lookups in all (peak %.1f)\n",
				c.RSSWarmMiB, c.RSSFullMiB, c.RSSEndMiB, fmtCount(float64(c.MemLookups)), c.HWMMiB)
		}
		fmt.Fprintf(w, "   lock acq., loads, rows read, point reads: over the thrash row, engine-go only (Python has no counters); a lookup takes the lock\n")
		fmt.Fprintf(w, "   at most once and nobody else does, so engine-go's thrash max bounds its longest hold of the lock.\n")
	}
	if skipped {
		fmt.Fprintf(w, "   cliff skipped: %s\n", why)
	}
}
