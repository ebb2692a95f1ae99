package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/tirastore/tirastore/core"
)

// tpRun is one throughput measurement: P worker processes started
// together, each running OpsPerWorker operations back to back.
type tpRun struct {
	Impl         string `json:"impl"`
	Procs        int    `json:"procs"`
	OpsPerWorker int    `json:"ops_per_worker"`
	TotalOps     int    `json:"total_ops"`

	// ReadyS is the start-up: the first worker's spawn -> the last one
	// ready (interpreter, library, open, warm-up), not counted in WallS.
	ReadyS  float64  `json:"ready_s"`
	WallS   float64  `json:"wall_s"` // start signal -> last worker done
	OpsPerS float64  `json:"ops_per_s"`
	Lookup  *summary `json:"lookup"`
	Record  *summary `json:"record"`
	All     *summary `json:"all_ops"`
	WorstMS float64  `json:"worst_op_ms"`
	// CPUPerOpUS is the workers' CPU time (user + system, all their
	// threads) from the start signal to their end, per operation: what
	// each operation costs the node besides its waiting.
	CPUPerOpUS fnum `json:"cpu_per_op_us"`

	FinishS  []float64 `json:"worker_finish_s"` // per worker, since the start signal
	FastestS float64   `json:"fastest_worker_s"`
	SlowestS float64   `json:"slowest_worker_s"`
	SlowFast fnum      `json:"slowest_over_fastest"`

	Lock         lockStats `json:"lock"`
	LinksPerLock fnum      `json:"link_attempts_per_lock"`
	// LockBusy is the workers' total time holding the lock over the wall
	// time: the share of the run during which the lock was held, which is
	// at most 1 (the lock excludes) and near 1 when the lock is what
	// limits throughput. MeanHoldUS is the mean critical section.
	LockBusy   fnum `json:"lock_busy"`
	MeanHoldUS fnum `json:"mean_hold_us"`

	Preloaded    int  `json:"preloaded"`
	Acked        int  `json:"acked_new_records"`
	Expected     int  `json:"expected_records"`
	Found        int  `json:"found_records"`
	Lost         int  `json:"lost_records"`
	Unexpected   int  `json:"unexpected_records"`
	RecordsMatch bool `json:"records_match"`

	Errors     int    `json:"errors"`
	Timeouts   int    `json:"lock_timeouts"`
	Wrong      int    `json:"wrong_results"`
	FirstError string `json:"first_error,omitempty"`
	Failed     string `json:"harness_failure,omitempty"`

	Workers []*tpResult `json:"workers,omitempty"` // every worker's report, with -raw

	// Repetitions are the single runs an aggregated row combines.
	Repetitions []*tpRun `json:"repetitions,omitempty"`

	lookupNS, recordNS []int64 // for pooling repetitions
}

// ok says the run lost nothing and nothing failed.
func (r *tpRun) ok() bool {
	return r.Failed == "" && r.RecordsMatch && r.Errors == 0 && r.Wrong == 0
}

// throughputSection runs the throughput mix at every P with Go workers
// (engine-go, baseline-go) and Python workers (python: pybench.py through
// the tirastore package; skipped, with the reason in res.Skipped, when
// Python cannot run here).
func throughputSection(cfg *config, res *results) map[string][]*tpRun {
	out := map[string][]*tpRun{}
	var impls []string
	for _, impl := range []string{implEngine, implBaseline, implPython} {
		if cfg.TPClients[impl] {
			impls = append(impls, impl)
		}
	}
	if cfg.TPClients[implPython] {
		if why := pythonClientPrereq(cfg); why != "" {
			impls = slices.DeleteFunc(impls, func(s string) bool { return s == implPython })
			res.Skipped["throughput/"+implPython] = why
			cfg.logf("throughput python rows skipped: %s", why)
		}
	}
	for _, p := range cfg.Procs {
		reps := map[string][]*tpRun{}
		// Repetitions alternate the clients, so that drift of the
		// machine (page cache, other tenants of the VM) hits all alike.
		for rep := 0; rep < cfg.Reps; rep++ {
			for _, impl := range impls {
				r := throughputRun(cfg, impl, p, cfg.dbPath(), cfg.fresh)
				reps[impl] = append(reps[impl], r)
				logTP(cfg, "throughput "+impl, r)
			}
		}
		for _, impl := range impls {
			out[impl] = append(out[impl], aggregate(reps[impl]))
		}
	}
	return out
}

// pythonClientPrereq says why pybench.py's python client cannot run here
// (no interpreter, no library, the package or cffi missing), or "": it
// runs an empty plan on a fresh database.
func pythonClientPrereq(cfg *config) string {
	if why := pythonPrereq(cfg); why != "" {
		return why
	}
	if err := cfg.fresh(); err != nil {
		return err.Error()
	}
	out, err := runPython(cfg, cfg.pySpec(implPython, []step{}))
	switch {
	case err != nil:
		return err.Error()
	case out.Skip != "":
		return out.Skip
	}
	return ""
}

// logTP logs one throughput run (what names it: section and client).
func logTP(cfg *config, what string, r *tpRun) {
	if r.Failed != "" {
		cfg.logf("%s P=%d: FAILED: %s", what, r.Procs, r.Failed)
		return
	}
	p99 := math.NaN()
	if r.Lookup != nil {
		p99 = r.Lookup.P99 / 1e3
	}
	cfg.logf("%s P=%-2d %7.0f ops/s, lookup p99 %.1f ms, worst %.0f ms, slowest/fastest %.1f, records %d/%d, errors %d",
		what, r.Procs, r.OpsPerS, p99, r.WorstMS, float64(r.SlowFast), r.Found, r.Expected, r.Errors)
}

// aggregate combines repetitions of one (implementation, P) run: ops/s,
// finish times and slowest/fastest are the median over repetitions, the
// latency percentiles are over the pooled operations of all repetitions,
// the worst operation is the worst of all, counts are summed (and every
// repetition must have found exactly its records), lock busy is the total
// held over the total wall time.
func aggregate(reps []*tpRun) *tpRun {
	if len(reps) == 1 {
		return reps[0]
	}
	a := &tpRun{Impl: reps[0].Impl, Procs: reps[0].Procs, OpsPerWorker: reps[0].OpsPerWorker, Repetitions: reps, RecordsMatch: true}
	var ops, fastest, slowest, slowFast, wall, ready, cpu []float64
	var wallSum float64
	var lookups, records, all []int64
	for _, r := range reps {
		if r.Failed != "" {
			if a.Failed == "" {
				a.Failed = r.Failed
			}
			continue
		}
		a.TotalOps += r.TotalOps
		ops = append(ops, r.OpsPerS)
		wall = append(wall, r.WallS)
		ready = append(ready, r.ReadyS)
		fastest = append(fastest, r.FastestS)
		slowest = append(slowest, r.SlowestS)
		slowFast = append(slowFast, float64(r.SlowFast))
		lookups = append(lookups, r.lookupNS...)
		records = append(records, r.recordNS...)
		a.WorstMS = max(a.WorstMS, r.WorstMS)
		a.Lock.add(r.Lock)
		cpu = append(cpu, float64(r.CPUPerOpUS))
		wallSum += r.WallS
		a.Preloaded += r.Preloaded
		a.Acked += r.Acked
		a.Expected += r.Expected
		a.Found += r.Found
		a.Lost += r.Lost
		a.Unexpected += r.Unexpected
		a.RecordsMatch = a.RecordsMatch && r.RecordsMatch
		a.Errors += r.Errors
		a.Timeouts += r.Timeouts
		a.Wrong += r.Wrong
		if a.FirstError == "" {
			a.FirstError = r.FirstError
		}
	}
	if len(ops) == 0 {
		return a
	}
	a.OpsPerS, a.WallS, a.ReadyS = median(ops), median(wall), median(ready)
	a.CPUPerOpUS = fnum(median(cpu))
	a.FastestS, a.SlowestS, a.SlowFast = median(fastest), median(slowest), fnum(median(slowFast))
	all = append(append(all, lookups...), records...)
	a.Lookup, a.Record, a.All = summarize(lookups), summarize(records), summarize(all)
	a.setLockFigures(wallSum)
	return a
}

// setLockFigures derives the per-lock figures from r.Lock, for a run (or
// runs) of wallS seconds in all. The tirastore package does not report its
// lock figures: python runs have none (null, "-").
func (r *tpRun) setLockFigures(wallS float64) {
	if r.Impl == implPython {
		nan := fnum(math.NaN())
		r.LinksPerLock, r.LockBusy, r.MeanHoldUS = nan, nan, nan
		return
	}
	r.LinksPerLock = fnum(ratio(float64(r.Lock.Links), float64(r.Lock.Acquired)))
	r.LockBusy = fnum(ratio(float64(r.Lock.HeldNS)/1e9, wallS))
	r.MeanHoldUS = fnum(ratio(float64(r.Lock.HeldNS)/1e3, float64(r.Lock.Acquired)))
}

// median of a few values (the mean of the middle two for an even count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

type tpWorker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bytes.Buffer
	spec   string
}

// throughputRun is one throughput measurement of impl with procs worker
// processes on the database at location db (a file path or a
// postgresql:// URL, as core.Open takes it), which fresh makes new and
// empty first. Go workers are this program (workerCmd); python workers are
// pybench.py processes (pythonCmd), with the same spec, barrier and report.
func throughputRun(cfg *config, impl string, procs int, db string, fresh func() error) *tpRun {
	r := &tpRun{Impl: impl, Procs: procs, OpsPerWorker: cfg.OpsPerWorker, TotalOps: procs * cfg.OpsPerWorker, Preloaded: cfg.TPPool}
	if err := fresh(); err != nil {
		r.Failed = err.Error()
		return r
	}
	// Preload the pool with the implementation under test (the engine
	// from Go for Python workers: the same engine, the same rows).
	preImpl := impl
	if impl == implPython {
		preImpl = implEngine
	}
	c, err := openClient(preImpl, db)
	if err != nil {
		r.Failed = "open: " + err.Error()
		return r
	}
	pre := runPlan(c, preloadSteps(cfg.TPPool))
	c.Close()
	for _, p := range pre {
		r.Failed = "preload: " + p.FirstError
		return r
	}

	workers := make([]*tpWorker, procs)
	defer func() {
		for _, w := range workers {
			if w == nil {
				continue
			}
			if w.cmd.ProcessState == nil && w.cmd.Process != nil {
				w.cmd.Process.Kill()
				w.cmd.Wait()
			}
			os.Remove(w.spec)
		}
	}()
	spawned := time.Now()
	for w := range workers {
		tp := &tpSpec{
			WID: w, Tag: tagWorkerBase + w, PoolTag: tagPool, MissTag: tagMiss,
			Ops: cfg.OpsPerWorker, Pool: cfg.TPPool, RecordFrac: 0.2, MissFrac: 0.1, Warmup: 5, Seed: 42,
		}
		var spec string
		if impl == implPython {
			ps := cfg.pySpec(impl, nil)
			ps.DB, ps.Role, ps.TP = db, "throughput", tp
			spec, err = writeSpec(cfg, ps)
		} else {
			spec, err = writeSpec(cfg, workerSpec{Role: "throughput", Impl: impl, DB: db, TP: tp})
		}
		if err != nil {
			r.Failed = err.Error()
			return r
		}
		cmd := workerCmd(cfg, spec)
		if impl == implPython {
			cmd = pythonCmd(cfg, spec)
		}
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		stderr := &bytes.Buffer{}
		cmd.Stderr = stderr
		workers[w] = &tpWorker{cmd: cmd, stdin: stdin, stdout: bufio.NewReaderSize(stdout, 1<<20), stderr: stderr, spec: spec}
		if err := cmd.Start(); err != nil {
			r.Failed = "start worker: " + err.Error()
			return r
		}
	}
	// Barrier: every worker has opened its store and warmed up.
	for i, w := range workers {
		line, err := w.stdout.ReadString('\n')
		if err != nil || line != "ready\n" {
			w.cmd.Wait()
			r.Failed = fmt.Sprintf("worker %d did not get ready (%q, %v): %s", i, line, err, lastLines(w.stderr.String(), 5))
			return r
		}
	}
	r.ReadyS = time.Since(spawned).Seconds()
	t0 := time.Now().UnixNano()
	for _, w := range workers {
		io.WriteString(w.stdin, "go\n")
	}
	// Every report first (a worker closes its stdout after it), then
	// stdin closed: a worker that waits for that (pybench.py) exits only
	// once every worker has finished.
	results := make([]*tpResult, procs)
	for i, w := range workers {
		b, err := io.ReadAll(w.stdout)
		var res tpResult
		if err == nil {
			err = json.Unmarshal(b, &res)
		}
		if err != nil {
			w.stdin.Close()
			w.cmd.Wait()
			r.Failed = fmt.Sprintf("worker %d: %v: %s", i, err, lastLines(w.stderr.String(), 5))
			return r
		}
		results[i] = &res
	}
	for _, w := range workers {
		w.stdin.Close()
	}
	for i, w := range workers {
		if err := w.cmd.Wait(); err != nil {
			r.Failed = fmt.Sprintf("worker %d: %v: %s", i, err, lastLines(w.stderr.String(), 5))
			return r
		}
	}

	var lookups, records, all []int64
	var ends []int64
	var cpuNS int64
	expected := map[string]bool{}
	for i := 0; i < cfg.TPPool; i++ {
		expected[recordKey(tagPool, i)] = true
	}
	for _, w := range results {
		lookups = append(lookups, w.LookupNS...)
		records = append(records, w.RecordNS...)
		ends = append(ends, w.EndNS)
		cpuNS += w.CPUNS
		r.FinishS = append(r.FinishS, float64(w.EndNS-t0)/1e9)
		r.Errors += w.Errors
		r.Timeouts += w.Timeouts
		r.Wrong += w.Wrong
		if r.FirstError == "" {
			r.FirstError = w.FirstError
		}
		r.Lock.add(w.Lock)
		r.Acked += len(w.Acked)
		for _, i := range w.Acked {
			expected[recordKey(tagWorkerBase+w.WID, i)] = true
		}
	}
	if cfg.Raw {
		r.Workers = results
	}
	r.lookupNS, r.recordNS = lookups, records
	all = append(append(all, lookups...), records...)
	r.WallS = float64(slices.Max(ends)-t0) / 1e9
	r.OpsPerS = float64(r.TotalOps) / r.WallS
	r.CPUPerOpUS = fnum(float64(cpuNS) / 1e3 / float64(r.TotalOps))
	r.Lookup, r.Record, r.All = summarize(lookups), summarize(records), summarize(all)
	if r.All != nil {
		r.WorstMS = r.All.Max / 1e3
	}
	r.FastestS, r.SlowestS = slices.Min(r.FinishS), slices.Max(r.FinishS)
	r.SlowFast = fnum(ratio(r.SlowestS, r.FastestS))
	r.setLockFigures(r.WallS)

	// The exact set of records: the preloaded pool plus every acknowledged
	// new record, nothing lost, nothing extra.
	r.Expected = len(expected)
	found, err := allKeys(db)
	if err != nil {
		r.Failed = "verify: " + err.Error()
		return r
	}
	r.Found = len(found)
	for k := range expected {
		if !found[k] {
			r.Lost++
		}
	}
	for k := range found {
		if !expected[k] {
			r.Unexpected++
		}
	}
	r.RecordsMatch = r.Lost == 0 && r.Unexpected == 0
	return r
}

// allKeys lists the database's record keys through the engine (both
// implementations write the same schema).
func allKeys(db string) (map[string]bool, error) {
	st, err := core.Open(context.Background(), db, core.Options{CPUModel: benchCPU, SlurmCPUs: "N/A"})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ks, err := st.Keys(context.Background(), 0, 0)
	if err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(ks))
	for _, k := range ks {
		m[k] = true
	}
	return m, nil
}
