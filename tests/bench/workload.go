package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/tests/bench/baseline"
)

// The workload: one Tiramisu-like program of realistic size and schedules
// T2(L0,L1,<tag>,<i>,...) whose (tag, i) pair names a record. Tags keep the
// key spaces of the benchmark's phases apart, so every "new" record is new
// and every "miss" misses, whoever (Go or Python) computes the schedule.
const (
	programName = "bench_conv2d"
	schedFormat = "T2(L0,L1,{tag},{i},comps=['conv'])|U(L2,4,comps=['conv'])"

	tagPool       = 0    // preloaded records: lookup hits, contains, record existing
	tagMiss       = 1    // never written: lookup misses
	tagRecordNew  = 2    // record new
	tagMany100    = 3    // record_many(100)
	tagMany1000   = 4    // record_many(1000)
	tagWarmMiss   = 5    // warm-up misses
	tagWarmRecord = 6    // warm-up records
	tagWarmMany   = 7    // warm-up record_many
	tagWorkerBase = 1000 // throughput worker w records under tag 1000+w
)

// benchTimes are the execution times every benchmark record carries:
// floats that need Python's repr to be written faithfully.
var benchTimes = []float64{0.1, 0.105, 0.11}

// benchCPU is the cpu_model of every benchmark database, given to both
// sides so that no CPU check can disable writes.
const benchCPU = "tirastore-bench-cpu"

// programSource is a ~2 KB C++ source, the size of a typical Tiramisu
// program: its normalization and hash are part of every operation's cost.
var programSource = func() string {
	var b strings.Builder
	b.WriteString("#include <tiramisu/tiramisu.h>\n#include <vector>\n\nusing namespace tiramisu;\n\n")
	b.WriteString("/* conv2d: a benchmark program for the TiraStore benchmark. */\n")
	b.WriteString("int main(int argc, char **argv) {\n    tiramisu::init(\"conv2d\");\n")
	for i := 0; i < 12; i++ {
		fmt.Fprintf(&b, "    var i%d(\"i%d\", 0, 256), j%d(\"j%d\", 0, 256); // loop pair %d\n", i, i, i, i, i)
		fmt.Fprintf(&b, "    computation c%d(\"c%d\", {i%d, j%d}, in(i%d, j%d) * w(%d) + b(%d));\n", i, i, i, i, i, i, i, i)
	}
	b.WriteString("    conv.then(c0, j0).then(c1, j1);\n    tiramisu::codegen({&in, &w, &b, &out}, \"conv2d.o\");\n    return 0;\n}\n")
	return b.String()
}()

// schedule is the schedule of record (tag, i).
func schedule(tag, i int) string {
	return strings.NewReplacer("{tag}", strconv.Itoa(tag), "{i}", strconv.Itoa(i)).Replace(schedFormat)
}

// recordKey is the database key of record (tag, i).
func recordKey(tag, i int) string {
	return keys.RecordKey(keys.ProgramHash(programSource), schedule(tag, i))
}

// lockStats is the engine's lock.Stats or the baseline's LockStats.
type lockStats struct {
	Acquired int64 `json:"acquired"`
	Links    int64 `json:"links"`
	Breaks   int64 `json:"breaks"`
	HeldNS   int64 `json:"held_ns"` // total time held
}

func (a lockStats) sub(b lockStats) lockStats {
	return lockStats{a.Acquired - b.Acquired, a.Links - b.Links, a.Breaks - b.Breaks, a.HeldNS - b.HeldNS}
}

// add sums b into a.
func (a *lockStats) add(b lockStats) {
	a.Acquired += b.Acquired
	a.Links += b.Links
	a.Breaks += b.Breaks
	a.HeldNS += b.HeldNS
}

// client is what the benchmark does with a store, implemented by the
// engine (core) and the original-protocol baseline.
type client interface {
	Lookup(sched string) (found bool, err error)
	Contains(sched string) (bool, error)
	Record(sched string, overwrite bool) (bool, error)
	RecordMany(scheds []string, overwrite bool) (int, error)
	LockStats() lockStats
	Close() error
}

// Implementation names, as they appear in tables and JSON.
const (
	implEngine   = "engine-go"
	implBaseline = "baseline-go"
	implPython   = "python"
	implCtypes   = "ctypes"
	implOrigPy   = "original-py"
)

func openClient(impl, db string) (client, error) {
	switch impl {
	case implEngine:
		st, err := core.Open(context.Background(), db, core.Options{CPUModel: benchCPU, SlurmCPUs: "N/A"})
		if err != nil {
			return nil, err
		}
		return &engineClient{st: st}, nil
	case implBaseline:
		st, err := baseline.Open(db, baseline.Options{CPUModel: benchCPU, SlurmCPUs: "N/A"})
		if err != nil {
			return nil, err
		}
		return &baselineClient{st: st}, nil
	}
	return nil, fmt.Errorf("unknown Go implementation %q", impl)
}

type engineClient struct{ st *core.Store }

var bg = context.Background()

func (c *engineClient) Lookup(sched string) (bool, error) {
	r, err := c.st.Lookup(bg, programName, programSource, sched)
	return r != nil, err
}

func (c *engineClient) Contains(sched string) (bool, error) {
	return c.st.Contains(bg, programName, programSource, sched)
}

func (c *engineClient) Record(sched string, overwrite bool) (bool, error) {
	return c.st.Record(bg, programName, programSource, core.Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: core.Times(benchTimes...)}, overwrite)
}

func (c *engineClient) RecordMany(scheds []string, overwrite bool) (int, error) {
	ms := make([]core.Measurement, len(scheds))
	for i, s := range scheds {
		ms[i] = core.Measurement{Schedule: s, IsLegal: true, ExecutionTimes: core.Times(benchTimes...)}
	}
	return c.st.RecordMany(bg, programName, programSource, ms, overwrite)
}

func (c *engineClient) LockStats() lockStats {
	s := c.st.LockStats()
	return lockStats{Acquired: s.Acquired, Links: s.Links, Breaks: s.Breaks, HeldNS: int64(s.Held)}
}

func (c *engineClient) Close() error { return c.st.Close() }

type baselineClient struct{ st *baseline.Store }

func (c *baselineClient) Lookup(sched string) (bool, error) {
	r, err := c.st.Lookup(programName, programSource, sched)
	return r != nil, err
}

func (c *baselineClient) Contains(sched string) (bool, error) {
	return c.st.Contains(programName, programSource, sched)
}

func (c *baselineClient) Record(sched string, overwrite bool) (bool, error) {
	return c.st.Record(programName, programSource, sched, true, benchTimes, overwrite)
}

func (c *baselineClient) RecordMany(scheds []string, overwrite bool) (int, error) {
	es := make([]baseline.Entry, len(scheds))
	for i, s := range scheds {
		es[i] = baseline.Entry{Schedule: s, IsLegal: true, ExecutionTimes: benchTimes}
	}
	return c.st.RecordMany(programName, programSource, es, overwrite)
}

func (c *baselineClient) LockStats() lockStats {
	s := c.st.LockStats()
	return lockStats{Acquired: s.Acquired, Links: s.Links, Breaks: s.Breaks, HeldNS: int64(s.Held)}
}

func (c *baselineClient) Close() error { return nil }

// isTimeout reports a lock timeout of either implementation.
func isTimeout(err error) bool {
	var ce *core.Error
	var be *baseline.TimeoutError
	return (errors.As(err, &ce) && ce.Kind == core.KindTimeout) || errors.As(err, &be)
}

// step is one row of a plan: n operations of one kind on records
// (tag, start..start+n-1), or n batches of `batch` records. Go
// (runPlan) and Python (pybench.py) interpret plans identically; the
// config_* operations of the kernel-config cache (configcache.go) exist
// only in pybench.py's config clients.
type step struct {
	Label string `json:"label"`
	// Op: lookup, contains, record, record_many; config_open (a seed JSON
	// file of Batch entries (tag, start...) is written, then a cache is
	// opened on it; N is 1), config_get, config_put; interleave (Go only:
	// Parts run side by side, runPlan).
	Op        string `json:"op"`
	N         int    `json:"n"`
	Tag       int    `json:"tag"`
	Start     int    `json:"start"`
	Batch     int    `json:"batch,omitempty"`
	Overwrite bool   `json:"overwrite,omitempty"`
	// Keys, when set, makes operation k use key start + k mod Keys (the
	// same few keys again and again) instead of start + k.
	Keys   int  `json:"keys,omitempty"`
	Expect bool `json:"expect"` // lookup/contains/config_get: found; record/config_put: written; config_open: every entry loaded
	Warmup bool `json:"warmup,omitempty"`
	// QuietMS: after the step the worker pauses this many milliseconds, a
	// database left alone (as between two measurements of an
	// autoscheduler), which is what a store's whole-program cache waits
	// for before it loads a program (core/cache.go).
	QuietMS int `json:"quiet_ms,omitempty"`
	// MarkBegin/MarkEnd, when set, are stat()ed (they do not exist) right
	// before and after the step: strace windows are cut at them.
	MarkBegin string `json:"mark_begin,omitempty"`
	MarkEnd   string `json:"mark_end,omitempty"`
	// The cliff section's lookup_set (cliff.go): N lookups of random
	// (program, schedule) pairs over Programs programs from Start (their
	// sources: cliffSource), schedule indexes below Records present, up to
	// Keys absent, drawn from Seed; ReadyFile is created when the step
	// starts, StopFile ends it early when it exists.
	Programs  int    `json:"programs,omitempty"`
	Records   int    `json:"records,omitempty"`
	Seed      int64  `json:"seed,omitempty"`
	ReadyFile string `json:"ready_file,omitempty"`
	StopFile  string `json:"stop_file,omitempty"`
	// Parts are the steps of an interleave step, each a row of its own.
	Parts []step `json:"parts,omitempty"`
}

// stepResult holds one step's raw timings.
type stepResult struct {
	Label      string  `json:"label"`
	Batch      int     `json:"batch,omitempty"`
	NS         []int64 `json:"ns"`
	Errors     int     `json:"errors"`
	Timeouts   int     `json:"timeouts"`
	Wrong      int     `json:"wrong"` // unexpected results (a hit that missed...)
	FirstError string  `json:"first_error,omitempty"`
	// RSSKiB and HWMKiB: an rss step's VmRSS and VmHWM (pybench.py).
	RSSKiB int64 `json:"rss_kib,omitempty"`
	HWMKiB int64 `json:"hwm_kib,omitempty"`
}

// count tallies one operation of the step: an error (and whether it was
// a lock timeout) or a wrong result, the first of them kept as text.
func (r *stepResult) count(err error, ok bool, op, sched string) {
	switch {
	case err != nil:
		r.Errors++
		if isTimeout(err) {
			r.Timeouts++
		}
		if r.FirstError == "" {
			r.FirstError = err.Error()
		}
	case !ok:
		r.Wrong++
		if r.FirstError == "" {
			r.FirstError = fmt.Sprintf("%s %s: unexpected result", op, sched)
		}
	}
}

// runPlan runs the steps on c and returns the results of the non-warm-up
// steps by label, plus those of warm-up steps that failed ("warmup/<label>").
//
// An "interleave" step (Go only: pybench.py has none) runs its Parts
// side by side: operation k of every part, then operation k+1, the order
// of the parts rotating by one at each k, each operation timed alone into
// its part's label; so that rows compared with each other (a lookup hit
// and a miss) see the same state of the database, the server and its
// caches, instead of one row running right after a preload and the other
// later.
func runPlan(c client, steps []step) map[string]*stepResult {
	out := map[string]*stepResult{}
	for _, s := range steps {
		parts := []step{s}
		if s.Op == "interleave" {
			parts = s.Parts
		}
		rs := make([]*stepResult, len(parts))
		for j, p := range parts {
			rs[j] = &stepResult{Label: p.Label, Batch: p.Batch}
		}
		if s.MarkBegin != "" {
			os.Stat(s.MarkBegin)
		}
		n := s.N
		for _, p := range parts {
			n = max(n, p.N)
		}
		for k := 0; k < n; k++ {
			for j0 := range parts {
				j := (j0 + k) % len(parts)
				if k < parts[j].N {
					runOp(c, parts[j], k, rs[j])
				}
			}
		}
		if s.MarkEnd != "" {
			os.Stat(s.MarkEnd)
		}
		time.Sleep(time.Duration(s.QuietMS) * time.Millisecond)
		for j, r := range rs {
			switch {
			case !s.Warmup:
				out[parts[j].Label] = r
			case r.Errors > 0 || r.Wrong > 0:
				out["warmup/"+parts[j].Label] = r // a failed preload or warm-up must not go unnoticed
			}
		}
	}
	return out
}

// runOp runs operation k of step s on c, timed, into r.
func runOp(c client, s step, k int, r *stepResult) {
	var err error
	ok := true
	i := s.Start + k
	if s.Keys > 0 {
		i = s.Start + k%s.Keys
	}
	t0 := time.Now()
	switch s.Op {
	case "lookup":
		var found bool
		found, err = c.Lookup(schedule(s.Tag, i))
		ok = found == s.Expect
	case "contains":
		var found bool
		found, err = c.Contains(schedule(s.Tag, i))
		ok = found == s.Expect
	case "record":
		var written bool
		written, err = c.Record(schedule(s.Tag, i), s.Overwrite)
		ok = written == s.Expect
	case "record_many":
		scheds := make([]string, s.Batch)
		for j := range scheds {
			scheds[j] = schedule(s.Tag, s.Start+k*s.Batch+j)
		}
		t0 = time.Now()
		var n int
		n, err = c.RecordMany(scheds, s.Overwrite)
		ok = (n == s.Batch) == s.Expect
	default:
		err = fmt.Errorf("unknown op %q", s.Op)
	}
	r.NS = append(r.NS, time.Since(t0).Nanoseconds())
	r.count(err, ok, s.Op, schedule(s.Tag, i))
}

// Labels of the per-operation rows, in table order.
const (
	opLookupHit      = "lookup_hit"
	opLookupRepeat   = "lookup_hit_repeat"
	opLookupMiss     = "lookup_miss"
	opContains       = "contains"
	opRecordNew      = "record_new"
	opRecordExisting = "record_existing"
	opMany100        = "record_many_100"
	opMany1000       = "record_many_1000"
)

var opTitles = map[string]string{
	opLookupHit:      "lookup hit",
	opLookupRepeat:   "lookup hit, same key again",
	opLookupMiss:     "lookup miss",
	opContains:       "contains (hit)",
	opRecordNew:      "record new",
	opRecordExisting: "record existing",
	opMany100:        "record_many(100)",
	opMany1000:       "record_many(1000)",
	opConfigGet:      "config get hit",
	opConfigPutSmall: "config put, 10 entries stored",
	opConfigPutLarge: "config put, 10,000 entries stored",
}

// sizes are the iteration counts of the latency plan.
type sizes struct {
	Lookups  int `json:"lookups"`
	Records  int `json:"records"`
	Many100  int `json:"record_many_100"`
	Many1000 int `json:"record_many_1000"`
}

// preloadSteps write the pool of present records (tag 0) in batches.
func preloadSteps(pool int) []step {
	var st []step
	for start := 0; start < pool; start += 1000 {
		b := min(1000, pool-start)
		st = append(st, step{Label: "preload", Op: "record_many", N: 1, Tag: tagPool, Start: start, Batch: b, Expect: true, Warmup: true})
	}
	return st
}

// latencyPlan is the per-operation plan: warm up, then every row, on a
// database into which another process has preloaded the pool (preloadDB:
// an in-process cache must not have seen the pool being written, as in a
// real fleet where most hits are other workers' records). Each lookup-hit,
// contains and record-existing iteration uses a pool record this process
// has not touched before ("cold key, warm store"); the repeat row then
// looks the lookup-hit keys up again, which shows what an in-process cache
// gains. It returns the plan and the pool size.
func latencyPlan(z sizes) ([]step, int) {
	const warm = 50
	hit := 0
	contains := hit + z.Lookups
	existing := contains + z.Lookups
	warmHit := existing + z.Records
	pool := warmHit + warm
	st := []step{
		{Label: "warmup_miss", Op: "lookup", N: warm, Tag: tagWarmMiss, Expect: false, Warmup: true},
		{Label: "warmup_hit", Op: "lookup", N: warm, Tag: tagPool, Start: warmHit, Expect: true, Warmup: true},
		{Label: "warmup_record", Op: "record", N: warm / 2, Tag: tagWarmRecord, Expect: true, Warmup: true},
		{Label: opLookupHit, Op: "lookup", N: z.Lookups, Tag: tagPool, Start: hit, Expect: true},
		{Label: opLookupRepeat, Op: "lookup", N: z.Lookups, Tag: tagPool, Start: hit, Expect: true},
		{Label: opLookupMiss, Op: "lookup", N: z.Lookups, Tag: tagMiss, Expect: false},
		{Label: opContains, Op: "contains", N: z.Lookups, Tag: tagPool, Start: contains, Expect: true},
		{Label: opRecordNew, Op: "record", N: z.Records, Tag: tagRecordNew, Expect: true},
		{Label: opRecordExisting, Op: "record", N: z.Records, Tag: tagPool, Start: existing, Expect: false},
		{Label: opMany100, Op: "record_many", N: z.Many100, Tag: tagMany100, Batch: 100, Expect: true},
		{Label: opMany1000, Op: "record_many", N: z.Many1000, Tag: tagMany1000, Batch: 1000, Expect: true},
	}
	return st, pool
}
