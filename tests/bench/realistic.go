package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core"
)

// The realistic section (section "realistic" of -sections): what the
// SQLite-file backend's speed-ups are worth to workers that spend seconds
// measuring between calls, beside the micro mix of the throughput section.
//
// A beam worker is a Tiramisu-like search step after step: a burst of
// 10-200 lookups of candidate schedules (the beam's children, drawn from a
// space of schedules that all workers of the program share, a quarter of
// it preloaded), then, for up to two of the candidates it missed, the
// claiming worker's path: lookup_or_claim; on a claim, a measurement
// simulated by sleeping 0.5-5 s, then the record through the claim; a
// worker that finds another one measuring waits for its result, as the
// README's worker does. Every worker runs the same number of steps with
// the same seed in every configuration, so that two configurations differ
// only by what the store does.
//
// The one switch of the backend, the kept connection (with the lock-free
// result cache it carries) against a fresh connection per operation, runs
// both ways at 8, 32 and 64 workers (-realistic-procs), in every directory
// of -realistic-dirs (the bench directory by default; a FUSE mount of
// tests/fusebed for a Lustre-like filesystem). Beside each realistic run,
// the micro mix (200 back-to-back operations per worker) runs in the same
// configuration. The search's figure is its throughput: measurements per
// minute of the fleet, and the share of the workers' time spent in store
// calls.

// mechanism is one configuration of the realistic section: the
// environment its workers run with.
type mechanism struct {
	Name string   `json:"name"`
	Env  []string `json:"env"`
}

// mechanisms are the configurations: the default first (the base of the
// report's comparisons), then the switch off.
var mechanisms = []mechanism{
	{"kept connection", nil},
	{"fresh connection", []string{"TIRASTORE_CONNECTION=fresh"}},
}

// realisticSizes are the section's knobs (flags -realistic-*).
type realisticSizes struct {
	Procs      []int
	Fresh      bool // also run with a fresh connection per operation
	Dirs       []string
	Steps      int     // search steps per worker
	Space      int     // schedules of the shared candidate space
	Preload    int     // of them recorded before the run
	MinBurst   int     // lookups per step, at least
	MaxBurst   int     // and at most
	PerStep    int     // candidates measured per step, at most
	MinMeasure float64 // seconds of one simulated measurement, at least
	MaxMeasure float64 // and at most
}

// beamSpec is one beam worker's share.
type beamSpec struct {
	WID        int     `json:"wid"`
	Seed       uint64  `json:"seed"`
	Steps      int     `json:"steps"`
	Space      int     `json:"space"`
	MinBurst   int     `json:"min_burst"`
	MaxBurst   int     `json:"max_burst"`
	PerStep    int     `json:"per_step"`
	MinMeasure float64 `json:"min_measure_s"`
	MaxMeasure float64 `json:"max_measure_s"`
}

// beamResult is one beam worker's report.
type beamResult struct {
	WID          int     `json:"wid"`
	StartNS      int64   `json:"start_unix_ns"`
	EndNS        int64   `json:"end_unix_ns"`
	LookupNS     []int64 `json:"lookup_ns"`
	ClaimNS      []int64 `json:"claim_ns"`  // lookup_or_claim, its wait for another worker included
	RecordNS     []int64 `json:"record_ns"` // the record through the claim
	StoreNS      int64   `json:"store_ns"`  // every store call
	Measurements int     `json:"measurements"`
	Waited       int     `json:"waited"` // lookup_or_claim returned another worker's result
	Acked        []int   `json:"acked"`  // space indexes this worker recorded
	Errors       int     `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
}

// realRun is one realistic run: one configuration, one directory, P workers.
type realRun struct {
	Dir          string   `json:"dir"`
	Mechanism    string   `json:"mechanism"`
	Procs        int      `json:"procs"`
	WallS        float64  `json:"wall_s"`
	Measurements int      `json:"measurements"`
	PerMinute    float64  `json:"measurements_per_min"`
	StoreShare   fnum     `json:"store_share"` // store time over the workers' wall time
	Lookup       *summary `json:"lookup"`
	Claim        *summary `json:"lookup_or_claim"`
	Record       *summary `json:"claim_record"`
	Waited       int      `json:"waited_for_another"`
	Lost         int      `json:"lost_records"`
	Errors       int      `json:"errors"`
	FirstError   string   `json:"first_error,omitempty"`
	Failed       string   `json:"harness_failure,omitempty"`
	Micro        *tpRun   `json:"micro,omitempty"` // the throughput section's mix, same configuration (one node)
}

// tagSpace tags the shared candidate space's schedules.
const tagSpace = 21

// beamWorker runs a beam spec on st: "ready", a line on stdin, the steps.
func beamWorker(st *core.Store, s *beamSpec) *beamResult {
	// The same sequence of bursts and measurement times in every
	// configuration: a worker's generator depends on its id and the seed.
	rng := rand.New(rand.NewPCG(s.Seed, uint64(s.WID)))
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	r := &beamResult{WID: s.WID, StartNS: time.Now().UnixNano()}
	fail := func(err error, what string) {
		r.Errors++
		if r.FirstError == "" {
			r.FirstError = what + ": " + err.Error()
		}
	}
	m := core.Measurement{IsLegal: true, ExecutionTimes: core.Times(benchTimes...)}
	for step := 0; step < s.Steps; step++ {
		n := s.MinBurst + rng.IntN(s.MaxBurst-s.MinBurst+1)
		var missed []int
		for k := 0; k < n; k++ {
			i := rng.IntN(s.Space)
			t0 := time.Now()
			res, err := st.Lookup(bg, programName, programSource, schedule(tagSpace, i))
			d := time.Since(t0).Nanoseconds()
			r.LookupNS = append(r.LookupNS, d)
			r.StoreNS += d
			if err != nil {
				fail(err, "lookup")
			} else if res == nil {
				missed = append(missed, i)
			}
		}
		// The measurement times are drawn whether or not they are used,
		// so that the generator stays in step across configurations.
		sleeps := make([]time.Duration, s.PerStep)
		for k := range sleeps {
			sleeps[k] = time.Duration((s.MinMeasure + rng.Float64()*(s.MaxMeasure-s.MinMeasure)) * float64(time.Second))
		}
		for k := 0; k < s.PerStep && k < len(missed); k++ {
			i := missed[k]
			t0 := time.Now()
			o, err := st.LookupOrClaim(bg, programName, programSource, schedule(tagSpace, i), core.ClaimOptions{Wait: true})
			d := time.Since(t0).Nanoseconds()
			r.ClaimNS = append(r.ClaimNS, d)
			r.StoreNS += d
			switch {
			case err != nil:
				fail(err, "lookup_or_claim")
				continue
			case o.Claim == nil:
				r.Waited++
				continue
			}
			time.Sleep(sleeps[k])
			r.Measurements++
			mm := m
			mm.Schedule = schedule(tagSpace, i)
			t0 = time.Now()
			wrote, err := o.Claim.Record(bg, mm)
			d = time.Since(t0).Nanoseconds()
			r.RecordNS = append(r.RecordNS, d)
			r.StoreNS += d
			switch {
			case err != nil:
				fail(err, "record")
			case wrote:
				r.Acked = append(r.Acked, i)
			}
		}
	}
	r.EndNS = time.Now().UnixNano()
	return r
}

// realisticSection runs every configuration at every P in every directory.
func realisticSection(cfg *config, res *results) []*realRun {
	var out []*realRun
	dirs := cfg.Real.Dirs
	if len(dirs) == 0 {
		dirs = []string{cfg.Dir}
	}
	saved := cfg.Dir
	defer func() { cfg.Dir, cfg.WorkerEnv = saved, nil }()
	for _, dir := range dirs {
		cfg.Dir = dir
		for _, p := range cfg.Real.Procs {
			// Configurations alternate within a P, so that a drift of
			// the machine weighs on all of them alike.
			for _, mech := range mechanisms {
				if !cfg.Real.Fresh && mech.Env != nil {
					continue
				}
				cfg.WorkerEnv = mech.Env
				r := realisticRun(cfg, dir, mech.Name, p)
				r.Micro = throughputRun(cfg, implEngine, p, cfg.dbPath(), cfg.fresh)
				cfg.logf("realistic %s P=%-2d %-16s %6.1f measurements/min, store %5.2f%%, lookup p99 %.1f ms, lost %d, errors %d%s; micro %7.0f ops/s",
					dir, p, mech.Name, r.PerMinute, 100*float64(r.StoreShare), p99ms(r.Lookup), r.Lost, r.Errors, failedNote(r.Failed, r.FirstError), r.Micro.OpsPerS)
				out = append(out, r)
			}
		}
	}
	return out
}

func p99ms(s *summary) float64 {
	if s == nil {
		return 0
	}
	return s.P99 / 1e3
}

func failedNote(f, firstError string) string {
	switch {
	case f != "":
		return " FAILED: " + f
	case firstError != "":
		return " (first error: " + firstError + ")"
	}
	return ""
}

// realisticRun is one run of P beam workers in cfg's configuration.
func realisticRun(cfg *config, dir, mech string, procs int) *realRun {
	r := &realRun{Dir: dir, Mechanism: mech, Procs: procs}
	if err := cfg.fresh(); err != nil {
		r.Failed = err.Error()
		return r
	}
	db := cfg.dbPath()
	c, err := openClient(implEngine, db)
	if err != nil {
		r.Failed = "open: " + err.Error()
		return r
	}
	var pre []step
	for i := 0; i < cfg.Real.Preload; i++ {
		pre = append(pre, step{Label: "preload", Op: "record", N: 1, Tag: tagSpace, Start: i * (cfg.Real.Space / max(cfg.Real.Preload, 1)), Expect: true, Warmup: true})
	}
	failed := runPlan(c, pre)
	c.Close()
	for _, p := range failed {
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
	for w := range workers {
		bs := &beamSpec{WID: w, Seed: 7, Steps: cfg.Real.Steps, Space: cfg.Real.Space,
			MinBurst: cfg.Real.MinBurst, MaxBurst: cfg.Real.MaxBurst, PerStep: cfg.Real.PerStep,
			MinMeasure: cfg.Real.MinMeasure, MaxMeasure: cfg.Real.MaxMeasure}
		spec, err := writeSpec(cfg, workerSpec{Role: "beam", Impl: implEngine, DB: db, Beam: bs})
		if err != nil {
			r.Failed = err.Error()
			return r
		}
		cmd := workerCmd(cfg, spec)
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
	for i, w := range workers {
		line, err := w.stdout.ReadString('\n')
		if err != nil || line != "ready\n" {
			w.cmd.Wait()
			r.Failed = fmt.Sprintf("worker %d did not get ready (%q, %v): %s", i, line, err, lastLines(w.stderr.String(), 5))
			return r
		}
	}
	t0 := time.Now().UnixNano()
	for _, w := range workers {
		io.WriteString(w.stdin, "go\n")
	}
	results := make([]*beamResult, procs)
	for i, w := range workers {
		b, err := io.ReadAll(w.stdout)
		var br beamResult
		if err == nil {
			err = json.Unmarshal(b, &br)
		}
		w.stdin.Close()
		if werr := w.cmd.Wait(); err == nil {
			err = werr
		}
		if err != nil {
			r.Failed = fmt.Sprintf("worker %d: %v: %s", i, err, lastLines(w.stderr.String(), 5))
			return r
		}
		results[i] = &br
	}
	var lookups, claims, records []int64
	var ends []int64
	var storeNS, workNS int64
	expected := map[string]bool{}
	for _, s := range pre {
		expected[recordKey(tagSpace, s.Start)] = true
	}
	for _, w := range results {
		lookups = append(lookups, w.LookupNS...)
		claims = append(claims, w.ClaimNS...)
		records = append(records, w.RecordNS...)
		ends = append(ends, w.EndNS)
		storeNS += w.StoreNS
		workNS += w.EndNS - w.StartNS
		r.Measurements += w.Measurements
		r.Waited += w.Waited
		r.Errors += w.Errors
		if r.FirstError == "" {
			r.FirstError = w.FirstError
		}
		for _, i := range w.Acked {
			expected[recordKey(tagSpace, i)] = true
		}
	}
	r.WallS = float64(slices.Max(ends)-t0) / 1e9
	r.PerMinute = float64(r.Measurements) / r.WallS * 60
	r.StoreShare = fnum(ratio(float64(storeNS), float64(workNS)))
	r.Lookup, r.Claim, r.Record = summarize(lookups), summarize(claims), summarize(records)
	found, err := allKeys(db)
	if err != nil {
		r.Failed = "verify: " + err.Error()
		return r
	}
	for k := range expected {
		if !found[k] {
			r.Lost++
		}
	}
	return r
}

// writeRealistic prints the section's table: per directory and P, each
// configuration against "all on".
func writeRealistic(w io.Writer, runs []*realRun) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nREALISTIC: beam workers (bursts of lookups, lookup_or_claim, 0.5-5 s measurements), kept against fresh connection; micro: the throughput mix\n")
	fmt.Fprintf(w, "   meas/min: the fleet's measurements per minute (same seeds in every configuration); store: share of the workers' time in store calls;\n")
	fmt.Fprintf(w, "   vs kept: the change against the kept connection at the same P (negative: slower without it)\n")
	t := newTable("lrlrrrrrrrrr", "dir", "P", "configuration", "meas/min", "vs kept", "store %", "lookup p50", "lookup p99", "claim p99", "record p99",
		"micro ops/s", "vs kept")
	base := map[string]*realRun{}
	for _, r := range runs {
		if r.Mechanism == mechanisms[0].Name {
			base[fmt.Sprint(r.Dir, r.Procs)] = r
		}
	}
	for _, r := range runs {
		b := base[fmt.Sprint(r.Dir, r.Procs)]
		vs, microVs := "-", "-"
		if b != nil && b != r && b.PerMinute > 0 {
			vs = fmt.Sprintf("%+.1f%%", 100*(r.PerMinute/b.PerMinute-1))
		}
		microOps := "-"
		if r.Micro != nil {
			microOps = fmt.Sprintf("%.0f", r.Micro.OpsPerS)
			if b != nil && b != r && b.Micro != nil && b.Micro.OpsPerS > 0 {
				microVs = fmt.Sprintf("%+.1f%%", 100*(r.Micro.OpsPerS/b.Micro.OpsPerS-1))
			}
		}
		name := r.Mechanism
		if r.Failed != "" || r.Lost != 0 || r.Errors != 0 {
			name += " (!)"
		}
		t.add(shortDir(r.Dir), fmt.Sprint(r.Procs), name, fmt.Sprintf("%.1f", r.PerMinute), vs,
			fmt.Sprintf("%.2f", 100*float64(r.StoreShare)), msCell(r.Lookup, false), msCell(r.Lookup, true),
			msCell(r.Claim, true), msCell(r.Record, true), microOps, microVs)
	}
	t.write(w, "   ")
}

func shortDir(d string) string {
	if i := strings.LastIndex(d, "/"); i >= 0 && i < len(d)-1 {
		return d[i+1:]
	}
	return d
}

func msCell(s *summary, p99 bool) string {
	if s == nil {
		return "-"
	}
	if p99 {
		return fmt.Sprintf("%.2f", s.P99/1e3)
	}
	return fmt.Sprintf("%.2f", s.Median/1e3)
}
