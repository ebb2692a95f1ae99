package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// fnum is a float that encodes NaN and infinities as JSON null (a ratio
// with a missing side), which encoding/json would refuse.
type fnum float64

// MarshalJSON writes null for NaN and infinities.
func (f fnum) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// results is the JSON document (and the source of every table).
type results struct {
	Schema     string                          `json:"schema"`
	Quick      bool                            `json:"quick"`
	Machine    machine                         `json:"machine"`
	Config     map[string]any                  `json:"config"`
	Latency    map[string]map[string]*opResult `json:"latency"`
	Syscalls   *syscallResults                 `json:"syscalls"`
	Throughput map[string][]*tpRun             `json:"throughput"`
	Targets    []*target                       `json:"targets"`
	// Claims are the claim section's rows (claim.go), by client and row;
	// ClaimTargets the claim section's hit target on them.
	Claims map[string]map[string]*opResult `json:"claims,omitempty"`
	// FloorRatios are the floor ratios (floor.go): client / floor of the
	// medians, by client and row.
	FloorRatios map[string]map[string]fnum `json:"floor_ratios,omitempty"`
	// Paired are the paired floor rows (pairedfloor.go), by client and
	// row: the floor targets are judged on them.
	Paired       map[string]map[string]*pairedRow `json:"paired_floor,omitempty"`
	ClaimTargets []*target                        `json:"claim_targets,omitempty"`
	Reference    reference                        `json:"reference_original"`
	// Postgres is the postgres section's figures (postgres.go), nil when
	// it did not run or no cluster could be started (Skipped says why).
	Postgres *pgResults `json:"postgres,omitempty"`
	// EjkernelImport is the ejkernel import row (ejkernel.go), nil when it
	// did not run (Skipped["ejkernel_import"] says why).
	EjkernelImport *ejkImport `json:"ejkernel_import,omitempty"`
	// Cliff is the cliff section's figures (cliff.go), nil when it did not
	// run or failed (Skipped["cliff"] says why).
	Cliff *cliffResults `json:"cliff,omitempty"`
	// Dashboard is the dashboard section's figures (dashboard.go), nil
	// when it did not run or failed (Skipped["dashboard"] says why).
	Dashboard *dashResults `json:"dashboard,omitempty"`
	// Realistic is the realistic section's runs (realistic.go).
	Realistic []*realRun        `json:"realistic,omitempty"`
	Skipped   map[string]string `json:"skipped"`
	// Failed holds the parts of Skipped that are left out because their
	// run failed (a client's error, a server that did not start), not for
	// a missing prerequisite.
	Failed   map[string]string `json:"failed,omitempty"`
	ElapsedS float64           `json:"elapsed_s"`
}

// fail leaves the part key out of the results, as a skipped one, because
// its run failed with err.
func (r *results) fail(key string, err error) {
	if r.Failed == nil {
		r.Failed = map[string]string{}
	}
	r.Failed[key] = err.Error()
	r.Skipped[key] = "failed: " + err.Error()
}

// notInstalled reports whether err is the exit status 3 by which
// tests/pg/pgcluster.py and pgbouncer.py say a program they need is not
// installed: a missing prerequisite, where any other error is a failure.
func notInstalled(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit) && exit.ExitCode() == 3
}

func configJSON(cfg *config) map[string]any {
	return map[string]any{
		"db_path": cfg.dbPath(), "lib": cfg.Lib, "python": cfg.Python,
		"go_sizes": cfg.Go, "python_sizes": cfg.Py, "original_py_sizes": cfg.Orig,
		"procs": cfg.Procs, "postgres_procs": cfg.PGProcs, "ops_per_worker": cfg.OpsPerWorker, "throughput_pool": cfg.TPPool, "throughput_repetitions": cfg.Reps, "latency_rounds": cfg.Rounds,
		"throughput_mix": "80% lookups (10% of them for absent keys), 20% records of new keys",
		"syscall_ops":    cfg.SyscallOps, "syscall_record_many_1000_calls": cfg.SyscallMany,
		"program_source_bytes": len(programSource), "schedule_format": schedFormat, "raw_samples": cfg.Raw,
		"config_cache_sizes": cfg.ConfigCache, "cliff_sizes": cfg.Cliff, "dashboard_sizes": cfg.Dash, "ejkernel_runs_each": cfg.EjkernelRuns, "config_cache_entries": []int{configSmall, configLarge}, "config_cache_key_format": configKeyFormat,
		"baseline": "tests/bench/baseline: the original's protocol in Go (50 ms..5 s backoff, stale 600 s, fresh ticket+link and fresh POSIX-locked connection per operation, two connections per record)",
	}
}

// reference holds the original library's quoted figures (measured
// elsewhere, DB path 5 components deep, ext4). They are context
// for judging how faithful the Go baseline is, never used in a ratio.
type reference struct {
	Note                   string  `json:"note"`
	LookupHitMedianUS      float64 `json:"lookup_hit_median_us"`
	RecordNewMedianUS      float64 `json:"record_new_median_us"`
	RecordMany1000PerRecUS float64 `json:"record_many_1000_per_record_us"`
	SyscallsPerLookup      float64 `json:"syscalls_per_lookup"`
	MetadataPerLookup      float64 `json:"metadata_syscalls_per_lookup"`
	Throughput32           float64 `json:"throughput_32_ops_per_s"`
	P99Lookup32MS          float64 `json:"p99_lookup_32_ms"`
	WorstOp32S             float64 `json:"worst_op_32_s"`
	FastestWorker32S       float64 `json:"fastest_worker_32_s"`
	SlowestWorker32S       float64 `json:"slowest_worker_32_s"`
}

var originalReference = reference{
	Note:              "quoted: the original Python library, measured elsewhere on a comparable machine, not by this run",
	LookupHitMedianUS: 449, RecordNewMedianUS: 1528, RecordMany1000PerRecUS: 28,
	SyscallsPerLookup: 49, MetadataPerLookup: 24,
	Throughput32: 980, P99Lookup32MS: 72.6, WorstOp32S: 21.4, FastestWorker32S: 2, SlowestWorker32S: 22,
}

// target is one of the bench's targets, judged on this run.
type target struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Value  fnum   `json:"value"`
	Unit   string `json:"unit"`
	Goal   string `json:"target"`
	Met    *bool  `json:"met"` // null: not measured in this run
	Detail string `json:"detail,omitempty"`
}

func (t *target) status() string {
	switch {
	case t.Goal == "report":
		return "info"
	case t.Met == nil:
		return "n/a"
	case *t.Met:
		return "MET"
	}
	return "MISSED"
}

func boolp(b bool) *bool { return &b }

// --- lookups into the results ---------------------------------------------

func (res *results) lat(impl, op string) *opResult {
	if m := res.Latency[impl]; m != nil {
		return m[op]
	}
	return nil
}

// median is the per-call median of a latency row (NaN when missing).
func (res *results) median(impl, op string) float64 {
	if r := res.lat(impl, op); r != nil && r.Summary != nil {
		return r.Summary.Median
	}
	return math.NaN()
}

// speedup is baseline-go's median over impl's, for the same operation.
func (res *results) speedup(impl, op string) float64 {
	return ratio(res.median(implBaseline, op), res.median(impl, op))
}

func (res *results) sc(impl, op string) *scRow {
	if res.Syscalls == nil {
		return nil
	}
	for _, r := range res.Syscalls.Rows {
		if r.Impl == impl && r.Op == op && r.Error == "" {
			return r
		}
	}
	return nil
}

// tpAt returns the run of impl with the most processes (32 by default).
func (res *results) tpAt(impl string) *tpRun {
	var best *tpRun
	for _, r := range res.Throughput[impl] {
		if best == nil || r.Procs > best.Procs {
			best = r
		}
	}
	return best
}

// tpAtP returns the run of impl with procs processes (nil if none).
func (res *results) tpAtP(impl string, procs int) *tpRun {
	for _, r := range res.Throughput[impl] {
		if r.Procs == procs {
			return r
		}
	}
	return nil
}

// --- targets -----------------------------------------------------------------

func evaluateTargets(cfg *config, res *results) []*target {
	var ts []*target
	atMost := func(id, name string, v, limit float64, unit, detail string) {
		t := &target{ID: id, Name: name, Value: fnum(v), Unit: unit, Goal: "<= " + fmtNum(limit), Detail: detail}
		if !math.IsNaN(v) {
			t.Met = boolp(v <= limit)
		}
		ts = append(ts, t)
	}
	atLeast := func(id, name string, v, limit float64, unit, detail string) {
		t := &target{ID: id, Name: name, Value: fnum(v), Unit: unit, Goal: ">= " + fmtNum(limit), Detail: detail}
		if !math.IsNaN(v) {
			t.Met = boolp(v >= limit)
		}
		ts = append(ts, t)
	}
	scMeta := func(impl, op string) (float64, string) {
		r := res.sc(impl, op)
		if r == nil {
			return math.NaN(), "not measured"
		}
		b := res.sc(implBaseline, op)
		d := byCallString(r.ByCall)
		if b != nil {
			d = fmt.Sprintf("baseline %s; %s", fmtCount(b.Meta), d)
		}
		return r.Meta, d
	}
	for _, impl := range []string{implEngine, implPython, implCtypes} {
		v, d := scMeta(impl, opLookupHit)
		atMost("syscalls-lookup-hit/"+impl, "metadata syscalls per lookup hit, "+impl, v, 3, "calls", d)
	}
	for _, impl := range []string{implEngine, implPython, implCtypes} {
		v, d := scMeta(impl, opRecordNew)
		atMost("syscalls-record/"+impl, "metadata syscalls per record, "+impl, v, 6, "calls", d)
	}
	latDetail := func(impl, op string) string {
		return fmt.Sprintf("median %s vs baseline-go %s µs", fmtUS(res.median(impl, op)), fmtUS(res.median(implBaseline, op)))
	}
	atLeast("speedup-lookup-hit/python", "lookup hit from Python, speedup vs baseline", res.speedup(implPython, opLookupHit), 10, "x", latDetail(implPython, opLookupHit))
	for _, impl := range []string{implEngine, implPython} {
		atLeast("speedup-record/"+impl, "record (new) from "+impl+", speedup vs baseline", res.speedup(impl, opRecordNew), 2, "x", latDetail(impl, opRecordNew))
	}
	for _, impl := range []string{implEngine, implPython} {
		atLeast("speedup-record-many-1000/"+impl, "record_many(1000) per record from "+impl+", speedup vs baseline", res.speedup(impl, opMany1000), 5, "x", latDetail(impl, opMany1000))
	}

	for _, f := range floorOps {
		if math.IsNaN(f.limit) {
			continue
		}
		for _, impl := range floorImpls {
			r, detail := math.NaN(), "not run"
			if p := res.paired(impl, f.op); p != nil {
				r = float64(p.Ratio)
				detail = fmt.Sprintf("median of %d pairs' ratios; medians %s vs floor %s µs (%s); unpaired %s", p.Pairs,
					fmtUS(p.Client.Median), fmtUS(p.Floor.Median), fmtX(float64(p.MediansRatio)), fmtX(res.overFloor(impl, f.op)))
			}
			atMost("floor-"+f.op+"/"+impl, opTitles[f.op]+" from "+impl+" / the floor, paired", r, f.limit, "x", detail)
		}
	}

	e, b := res.tpAt(implEngine), res.tpAt(implBaseline)
	p := "P=max"
	if e != nil {
		p = fmt.Sprintf("P=%d", e.Procs)
	}
	var tput, p99, slow = math.NaN(), math.NaN(), math.NaN()
	var tputD, p99D, slowD string
	if e != nil && e.Failed == "" && b != nil && b.Failed == "" {
		tput = ratio(e.OpsPerS, b.OpsPerS)
		tputD = fmt.Sprintf("%.0f vs %.0f ops/s", e.OpsPerS, b.OpsPerS)
		if e.Lookup != nil && b.Lookup != nil {
			p99 = ratio(e.Lookup.P99, b.Lookup.P99)
			p99D = fmt.Sprintf("%.2f vs %.2f ms", e.Lookup.P99/1e3, b.Lookup.P99/1e3)
		}
	}
	if e != nil && e.Failed == "" {
		slow = float64(e.SlowFast)
		slowD = fmt.Sprintf("fastest %.2f s, slowest %.2f s", e.FastestS, e.SlowestS)
		if len(e.Repetitions) > 1 {
			slowD = fmt.Sprintf("median of %d repetitions; median fastest %.2f s, slowest %.2f s", len(e.Repetitions), e.FastestS, e.SlowestS)
		}
	}
	atLeast("throughput", "aggregate throughput at "+p+", engine vs baseline", tput, 5, "x", tputD)
	atMost("p99-lookup", "p99 lookup latency at "+p+", engine / baseline", p99, 0.2, "", p99D)
	atMost("fairness", "slowest worker's finish / fastest's at "+p+", engine", slow, 2, "", slowD)

	// Over every engine run: no lost record, no timeout, worst op.
	var bad []string
	worst := math.NaN()
	n := 0
	for _, r := range res.Throughput[implEngine] {
		n += max(len(r.Repetitions), 1)
		if !r.ok() {
			bad = append(bad, fmt.Sprintf("P=%d: %s", r.Procs, tpProblem(r)))
		}
		if r.Failed == "" && (math.IsNaN(worst) || r.WorstMS > worst) {
			worst = r.WorstMS
		}
	}
	integrity := &target{ID: "integrity", Name: "no lost record, no lock timeout, no error (engine, every P)", Unit: "failed runs", Goal: "0"}
	if n > 0 {
		integrity.Value = fnum(len(bad))
		integrity.Met = boolp(len(bad) == 0)
		integrity.Detail = strings.Join(bad, "; ")
		if len(bad) == 0 {
			integrity.Detail = fmt.Sprintf("%d runs, every record found", n)
		}
	} else {
		integrity.Value = fnum(math.NaN())
	}
	ts = append(ts, integrity)
	atMost("worst-op", "worst single operation (engine, every P)", worst/1e3, 1, "s", "")

	// The Python-worker target: Python worker processes (the tirastore package)
	// against the baseline at the same P (the most processes of the run).
	py := res.tpAt(implPython)
	pyTput, pyD, pyP := math.NaN(), "not measured", "P=max"
	if py != nil {
		pyP = fmt.Sprintf("P=%d", py.Procs)
		pb := res.tpAtP(implBaseline, py.Procs)
		switch {
		case py.Failed != "":
			pyD = "python: " + firstLine(py.Failed)
		case pb == nil || pb.Failed != "":
			pyD = "no baseline-go run at " + pyP
		case !py.ok():
			pyD = "python: " + tpProblem(py)
		default:
			pyTput = ratio(py.OpsPerS, pb.OpsPerS)
			pyD = fmt.Sprintf("%.0f vs %.0f ops/s", py.OpsPerS, pb.OpsPerS)
		}
	}
	atLeast("throughput-python", "aggregate throughput at "+pyP+", python workers vs baseline", pyTput, 10, "x", pyD)

	links := &target{ID: "link-attempts", Name: "link() attempts per acquired lock at " + p, Unit: "per lock", Goal: "report", Value: fnum(math.NaN())}
	if e != nil && e.Failed == "" {
		links.Value = fnum(float64(e.LinksPerLock))
		if b != nil && b.Failed == "" {
			links.Detail = fmt.Sprintf("baseline %s", fmtNum(float64(b.LinksPerLock)))
		}
	}
	ts = append(ts, links)
	return ts
}

func tpProblem(r *tpRun) string {
	switch {
	case r.Failed != "":
		return r.Failed
	case !r.RecordsMatch:
		return fmt.Sprintf("%d lost, %d unexpected records", r.Lost, r.Unexpected)
	}
	return fmt.Sprintf("%d errors (%d lock timeouts), %d wrong results: %s", r.Errors, r.Timeouts, r.Wrong, r.FirstError)
}

// --- formatting ----------------------------------------------------------------

func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v == math.Trunc(v) && math.Abs(v) < 1e6:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// fmtUS prints microseconds with 3-4 significant digits.
func fmtUS(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func fmtX(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if v >= 10 {
		return strconv.FormatFloat(v, 'f', 1, 64) + "x"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "x"
}

// fmtPct prints a fraction as a whole percentage.
func fmtPct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(100*v, 'f', 0, 64) + "%"
}

// fmtCount prints a per-operation syscall count.
func fmtCount(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	if v < 1 {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func metStr(m *bool) string {
	switch {
	case m == nil:
		return ""
	case *m:
		return "yes"
	}
	return "NO"
}

// latencyTargets are the per-operation targets, by (op, impl).
var latencyTargets = map[[2]string]float64{
	{opLookupHit, implPython}: 10,
	{opRecordNew, implEngine}: 2,
	{opRecordNew, implPython}: 2,
	{opMany1000, implEngine}:  5,
	{opMany1000, implPython}:  5,
}

func writeReport(w io.Writer, cfg *config, res *results) {
	m := res.Machine
	fmt.Fprintf(w, "TiraStore benchmark   %s\n", m.Date)
	fmt.Fprintf(w, "machine   %s, %d cores, %s, host %s\n", m.CPUModel, m.Cores, m.Kernel, m.Hostname)
	fmt.Fprintf(w, "disk      %s (%s, statfs magic %s); database %s (%d components below the bench dir)\n", m.BenchDir, m.FSType, m.FSMagic, m.DBPath, m.DBDepth)
	fmt.Fprintf(w, "software  %s, Python %s, engine %s (commit %s)\n", m.GoVersion, m.PythonVersion, m.Engine, m.GitCommit)
	fmt.Fprintf(w, "baseline  the original's per-operation protocol, in Go (tests/bench/baseline), measured in this run on this disk\n")
	if res.Quick {
		fmt.Fprintf(w, "QUICK MODE: smoke-test sizes, the figures are not meaningful\n")
	}
	writeLatency(w, res)
	writeCliff(w, res)
	writeEjkernel(w, res)
	writeDashboard(w, res)
	writeSyscalls(w, res)
	writeThroughput(w, cfg, res)
	writeRealistic(w, res.Realistic)
	writeTargets(w, res)
	writeReference(w, res)
	writePostgres(w, cfg, res)
}

func writeLatency(w io.Writer, res *results) {
	fmt.Fprintf(w, "\n1. Per-operation latency, one process, warm store (µs). speedup = baseline-go median / this median, same run, same disk.\n")
	fmt.Fprintf(w, "   %d round(s), every client once per round on a fresh database preloaded by another process; samples pooled over rounds.\n", res.Config["latency_rounds"])
	fmt.Fprintf(w, "   Lookup hits, contains and record-existing use keys this process has not read before; \"same key again\" repeats the lookup-hit keys.\n")
	t := newTable("ll", "operation", "client", "n", "median", "p99", "mean", "median/rec", "speedup", "target", "met?", "failed")
	ops := []string{opLookupHit, opLookupRepeat, opLookupMiss, opContains, opRecordNew, opRecordExisting, opMany100, opMany1000}
	impls := []string{implBaseline, implEngine, implPython, implCtypes, implOrigPy, implFloor}
	for _, op := range ops {
		first := true
		for _, impl := range impls {
			r := res.lat(impl, op)
			if r == nil || r.Summary == nil {
				continue
			}
			title := ""
			if first {
				title = opTitles[op]
				first = false
			}
			name := impl
			if impl == implOrigPy {
				name += " (ref)"
			}
			perRec := ""
			if r.PerRecord != nil {
				perRec = fmtUS(r.PerRecord.Median)
			}
			sp := "-"
			if impl != implBaseline && impl != implFloor {
				sp = fmtX(res.speedup(impl, op))
			}
			tgt, met := "", ""
			if goal, ok := latencyTargets[[2]string{op, impl}]; ok {
				tgt = ">=" + fmtNum(goal) + "x"
				if s := res.speedup(impl, op); !math.IsNaN(s) {
					met = metStr(boolp(s >= goal))
				}
			}
			failed := ""
			if r.Errors+r.Wrong > 0 {
				failed = fmt.Sprintf("%d err, %d wrong", r.Errors, r.Wrong)
			}
			t.add(title, name, fmt.Sprint(r.Summary.N), fmtUS(r.Summary.Median), fmtUS(r.Summary.P99), fmtUS(r.Summary.Mean),
				perRec, sp, tgt, met, failed)
		}
	}
	t.write(w, "  ")
	for _, k := range sortedKeys(res.Skipped) {
		if impl, ok := strings.CutPrefix(k, "latency/"); ok && impl != implConfigSeed && impl != implConfigCache {
			fmt.Fprintf(w, "   %s skipped: %s\n", impl, res.Skipped[k])
		}
	}
	fmt.Fprintf(w, "   python = the tirastore package (cffi); ctypes = the bare C ABI; original-py (ref) = OriginalStore of tests/python/test_mixed_fleet.py,\n")
	fmt.Fprintf(w, "   the stdlib reconstruction of the original (no contains/record_many). Python and ctypes speedups are against the Go baseline: conservative.\n")
	fmt.Fprintf(w, "   floor = raw SQLite (go-sqlite3, the engine's build and connection settings, stock unix-none VFS): one durable transaction per call.\n")
	writeFloor(w, res)
	writeConfigCache(w, res)
	writeClaims(w, res)
}

// paired is impl's paired floor row op, nil if it did not run or failed.
func (res *results) paired(impl, op string) *pairedRow {
	p := res.Paired[impl][op]
	if p == nil || p.Client == nil || p.Floor == nil || p.Errors > 0 {
		return nil
	}
	return p
}

// writeFloor prints the floor ratios: each client's median over the
// floor's, for the writes, paired (judged) and unpaired, with the targets.
func writeFloor(w io.Writer, res *results) {
	if res.Paired != nil {
		fmt.Fprintf(w, "\n   The engine over the durable-transaction floor, paired (client and floor in turns, one write each, same directory;\n")
		fmt.Fprintf(w, "   µs per record; client / floor = the median of the pairs' ratios, judged; medians' = the ratio of the two medians)\n")
		t := newTable("ll", "operation", "client", "pairs", "median", "floor", "client / floor", "medians'", "target", "met?")
		for _, f := range floorOps {
			for _, impl := range floorImpls {
				p := res.Paired[impl][f.op]
				if p == nil {
					continue
				}
				if p.Errors > 0 || p.Client == nil || p.Floor == nil {
					t.add(opTitles[f.op], impl, fmt.Sprint(p.Pairs), "failed: "+p.FirstError, "", "", "", "", "")
					continue
				}
				tgt, met := "", ""
				if !math.IsNaN(f.limit) {
					tgt = "<=" + fmtNum(f.limit) + "x"
					met = metStr(boolp(float64(p.Ratio) <= f.limit))
				}
				t.add(opTitles[f.op], impl, fmt.Sprint(p.Pairs), fmtUS(p.Client.Median), fmtUS(p.Floor.Median), fmtX(float64(p.Ratio)),
					fmtX(float64(p.MediansRatio)), tgt, met)
			}
		}
		t.write(w, "  ")
	}
	if res.lat(implFloor, opRecordNew) == nil {
		return
	}
	fmt.Fprintf(w, "\n   The same, unpaired, for reference (µs per call; client median / floor median, same run, same disk; floor first and last in every round)\n")
	t := newTable("ll", "operation", "client", "median", "floor", "client / floor")
	for _, f := range floorOps {
		first := true
		for _, impl := range floorImpls {
			if res.lat(impl, f.op) == nil {
				continue
			}
			title := ""
			if first {
				title = opTitles[f.op]
				first = false
			}
			t.add(title, impl, fmtUS(res.median(impl, f.op)), fmtUS(res.median(implFloor, f.op)), fmtX(res.overFloor(impl, f.op)))
		}
	}
	t.write(w, "  ")
}

func writeSyscalls(w io.Writer, res *results) {
	fmt.Fprintf(w, "\n2. Syscalls per operation (strace -f -y, after warm-up; record_many(1000) per record).\n")
	fmt.Fprintf(w, "   meta = (i) namespace ops + (iii) advisory locks on the shared filesystem (the DB dir, and its ancestors up to the bench dir);\n")
	fmt.Fprintf(w, "   fewer = baseline-go meta / this meta.\n")
	switch {
	case res.Syscalls == nil:
		fmt.Fprintf(w, "   not run\n")
		return
	case res.Syscalls.Skipped != "":
		fmt.Fprintf(w, "   SKIPPED: %s\n", res.Syscalls.Skipped)
		return
	}
	t := newTable("ll"+strings.Repeat("r", 15)+"l", "operation", "client", "meta", "target", "met?", "fewer", "db dir", "ancestors",
		"(i) ns", "(iii) lock", "(ii) fd-attr", "attr-set", "node-local", "fsync", "data I/O", "close", "all", "meta by call")
	for _, op := range syscallOps {
		first := true
		for _, impl := range []string{implBaseline, implEngine, implPython, implCtypes} {
			var r *scRow
			for _, x := range res.Syscalls.Rows {
				if x.Impl == impl && x.Op == op {
					r = x
				}
			}
			if r == nil {
				continue
			}
			title := ""
			if first {
				title = opTitles[op]
				if op == opMany1000 {
					title += " /rec"
				}
				first = false
			}
			if r.Error != "" {
				t.add(title, impl, "ERROR", "", "", "", "", "", "", "", "", "", "", "", "", "", "", firstLine(r.Error))
				continue
			}
			tgt, met := "", ""
			if impl != implBaseline {
				goal := map[string]float64{opLookupHit: 3, opRecordNew: 6}[op]
				if goal > 0 {
					tgt = "<=" + fmtNum(goal)
					met = metStr(boolp(r.Meta <= goal))
				}
			}
			fewer := "-"
			if b := res.sc(implBaseline, op); b != nil && impl != implBaseline {
				fewer = fmtX(ratio(b.Meta, r.Meta))
				if r.Meta == 0 && b.Meta > 0 {
					fewer = "all"
				}
			}
			t.add(title, impl, fmtCount(r.Meta), tgt, met, fewer, fmtCount(r.MetaDBDir), fmtCount(r.MetaAnc), fmtCount(r.Path),
				fmtCount(r.Locks), fmtCount(r.FdAttr), fmtCount(r.FdAttrWrite), fmtCount(r.NodeLocal), fmtCount(r.Sync),
				fmtCount(r.Data), fmtCount(r.Close), fmtCount(r.All), byCallString(r.ByCall))
		}
	}
	t.write(w, "  ")
	fmt.Fprintf(w, "   (ii) fd-attr = fstat-like reads; attr-set = fchown/fchmod/ftruncate; node-local = (i)+(ii)+(iii)+attr-set elsewhere;\n")
	fmt.Fprintf(w, "   fsync, data I/O (reads/writes) and close on the shared filesystem; all = every syscall of every thread, Go runtime included.\n")
	for _, k := range sortedKeys(res.Skipped) {
		if strings.HasPrefix(k, "syscalls/") {
			fmt.Fprintf(w, "   %s skipped: %s\n", strings.TrimPrefix(k, "syscalls/"), res.Skipped[k])
		}
	}
}

func writeThroughput(w io.Writer, cfg *config, res *results) {
	fmt.Fprintf(w, "\n3. Aggregate throughput: P worker processes x %d operations (80%% lookups, 1 in 10 of them for absent keys; 20%% records of new keys),\n", cfg.OpsPerWorker)
	fmt.Fprintf(w, "   %d repetition(s), the clients alternating: ops/s, finish times and slow/fast are medians over repetitions, latency\n", cfg.Reps)
	fmt.Fprintf(w, "   percentiles are over all their operations, worst op the worst of all; records and failures are summed over repetitions.\n")
	fmt.Fprintf(w, "   Each run: fresh database preloaded with %d records, all workers released at once; afterwards the exact set of records is checked\n", cfg.TPPool)
	fmt.Fprintf(w, "   (preload + every acknowledged record, nothing else). Latencies in ms (p50, p99, p99.9, mean of lookups), finish times in s since\n")
	fmt.Fprintf(w, "   the start signal. With convoys (one process re-acquiring while the others back off) long waits are few but long: read p99\n")
	fmt.Fprintf(w, "   together with mean, worst op and slow/fast. Clients: engine-go and baseline-go workers are this program; python workers are\n")
	fmt.Fprintf(w, "   interpreters running tests/bench/pybench.py through the tirastore package (no lock figures: the package does not report them).\n")
	fmt.Fprintf(w, "   ready s = spawn -> every worker ready (start-up, not counted in ops/s); vs base = ops/s over baseline-go's at the same P;\n")
	fmt.Fprintf(w, "   CPU µs/op = the workers' CPU time (user + system, all threads) from the start signal to their end, per operation.\n")
	if why := res.Skipped["throughput/"+implPython]; why != "" {
		fmt.Fprintf(w, "   python skipped: %s\n", why)
	}
	if len(res.Throughput) == 0 {
		fmt.Fprintf(w, "   not run\n")
		return
	}
	t := newTable("rl", "P", "client", "ops/s", "vs base", "ready s", "lookup p50", "lookup p99", "p99/base", "p99.9", "mean", "record p50", "record p99", "all p99", "worst op", "CPU µs/op",
		"fastest", "slowest", "slow/fast", "links/lock", "lock busy", "hold µs", "records exp/found", "lost", "failed ops", "timeouts")
	for _, p := range cfg.Procs {
		var b *tpRun
		for _, x := range res.Throughput[implBaseline] {
			if x.Procs == p {
				b = x
			}
		}
		for _, impl := range []string{implBaseline, implEngine, implPython} {
			var r *tpRun
			for _, x := range res.Throughput[impl] {
				if x.Procs == p {
					r = x
				}
			}
			if r == nil {
				continue
			}
			if r.Failed != "" {
				t.add(fmt.Sprint(p), impl, "FAILED: "+firstLine(r.Failed))
				continue
			}
			vs, p99vs := "-", "-"
			if impl != implBaseline && b != nil && b.Failed == "" {
				vs = fmtX(ratio(r.OpsPerS, b.OpsPerS))
				if r.Lookup != nil && b.Lookup != nil {
					p99vs = fmtNum(ratio(r.Lookup.P99, b.Lookup.P99))
				}
			}
			lp50, lp99, lp999, lmean, allp99 := "-", "-", "-", "-", "-"
			if r.Lookup != nil {
				lp50, lp99 = fmtNum(r.Lookup.Median/1e3), fmtNum(r.Lookup.P99/1e3)
				lp999, lmean = fmtNum(r.Lookup.P999/1e3), fmtNum(r.Lookup.Mean/1e3)
			}
			rp50, rp99 := "-", "-"
			if r.Record != nil {
				rp50, rp99 = fmtNum(r.Record.Median/1e3), fmtNum(r.Record.P99/1e3)
			}
			if r.All != nil {
				allp99 = fmtNum(r.All.P99 / 1e3)
			}
			t.add(fmt.Sprint(p), impl, fmt.Sprintf("%.0f", r.OpsPerS), vs, fmtNum(r.ReadyS), lp50, lp99, p99vs, lp999, lmean, rp50, rp99, allp99, fmtNum(r.WorstMS), fmtUS(float64(r.CPUPerOpUS)),
				fmtNum(r.FastestS), fmtNum(r.SlowestS), fmtNum(float64(r.SlowFast)), fmtNum(float64(r.LinksPerLock)),
				fmtPct(float64(r.LockBusy)), fmtUS(float64(r.MeanHoldUS)),
				fmt.Sprintf("%d/%d", r.Expected, r.Found), fmt.Sprint(r.Lost), fmt.Sprint(r.Errors+r.Wrong), fmt.Sprint(r.Timeouts))
		}
	}
	t.write(w, "  ")
}

func writeTargets(w io.Writer, res *results) {
	fmt.Fprintf(w, "\n4. Targets, judged on this run (the engine against the baseline measured alongside, the floor ratios, python workers)\n")
	t := newTable("llrll")
	t.rows = nil
	held, missed, na := 0, 0, 0
	for _, x := range res.Targets {
		v := fmtNum(float64(x.Value))
		switch x.Unit {
		case "x":
			v = fmtX(float64(x.Value))
		case "calls":
			v = fmtCount(float64(x.Value))
		case "s":
			v += " s"
		case "MiB":
			v += " MiB"
		}
		switch {
		case x.Goal == "report":
		case x.Met == nil:
			na++
		case *x.Met:
			held++
		default:
			missed++
		}
		goal := x.Goal
		if x.Unit == "s" {
			goal += " s"
		}
		t.add("["+x.status()+"]", x.Name, v, goal, x.Detail)
	}
	t.write(w, "   ")
	fmt.Fprintf(w, "   summary: %d met, %d missed, %d not measured. A measurement, not a test: the exit code does not depend on it.\n", held, missed, na)
}

func writeReference(w io.Writer, res *results) {
	fmt.Fprintf(w, "\n5. The original's quoted figures (another run; context for the baseline's fidelity, never used in a ratio)\n")
	t := newTable("l", "figure", "original", "baseline-go here", "engine-go here")
	ref := res.Reference
	medUS := func(impl, op string) string { return fmtUS(res.median(impl, op)) }
	perRec := func(impl string) string {
		if r := res.lat(impl, opMany1000); r != nil && r.PerRecord != nil {
			return fmtUS(r.PerRecord.Median)
		}
		return "-"
	}
	sc := func(impl string, f func(*scRow) float64) string {
		if r := res.sc(impl, opLookupHit); r != nil {
			return fmtCount(f(r))
		}
		return "-"
	}
	meta := func(r *scRow) float64 { return r.Meta }
	all := func(r *scRow) float64 { return r.All }
	tp := func(impl string, f func(*tpRun) string) string {
		if r := res.tpAt(impl); r != nil && r.Failed == "" {
			return f(r)
		}
		return "-"
	}
	p99 := func(r *tpRun) string {
		if r.Lookup == nil {
			return "-"
		}
		return fmtNum(r.Lookup.P99 / 1e3)
	}
	t.add("lookup hit median µs", fmtNum(ref.LookupHitMedianUS), medUS(implBaseline, opLookupHit), medUS(implEngine, opLookupHit))
	t.add("record new median µs", fmtNum(ref.RecordNewMedianUS), medUS(implBaseline, opRecordNew), medUS(implEngine, opRecordNew))
	t.add("record_many(1000) µs/record", fmtNum(ref.RecordMany1000PerRecUS), perRec(implBaseline), perRec(implEngine))
	t.add("syscalls per lookup hit (all)", fmtNum(ref.SyscallsPerLookup), sc(implBaseline, all), sc(implEngine, all))
	t.add("metadata syscalls per lookup hit", fmtNum(ref.MetadataPerLookup), sc(implBaseline, meta), sc(implEngine, meta))
	t.add("throughput: processes", "32", tp(implBaseline, func(r *tpRun) string { return fmt.Sprint(r.Procs) }),
		tp(implEngine, func(r *tpRun) string { return fmt.Sprint(r.Procs) }))
	t.add("  ops/s", fmtNum(ref.Throughput32), tp(implBaseline, func(r *tpRun) string { return fmt.Sprintf("%.0f", r.OpsPerS) }),
		tp(implEngine, func(r *tpRun) string { return fmt.Sprintf("%.0f", r.OpsPerS) }))
	t.add("  p99 lookup ms", fmtNum(ref.P99Lookup32MS), tp(implBaseline, p99), tp(implEngine, p99))
	t.add("  worst op s", fmtNum(ref.WorstOp32S), tp(implBaseline, func(r *tpRun) string { return fmtNum(r.WorstMS / 1e3) }),
		tp(implEngine, func(r *tpRun) string { return fmtNum(r.WorstMS / 1e3) }))
	t.add("  fastest / slowest worker s", fmtNum(ref.FastestWorker32S)+" / "+fmtNum(ref.SlowestWorker32S),
		tp(implBaseline, func(r *tpRun) string { return fmtNum(r.FastestS) + " / " + fmtNum(r.SlowestS) }),
		tp(implEngine, func(r *tpRun) string { return fmtNum(r.FastestS) + " / " + fmtNum(r.SlowestS) }))
	t.write(w, "  ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
