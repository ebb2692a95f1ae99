package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// opResult is one row of the latency section: per call, and per record for
// the batch rows.
type opResult struct {
	Summary    *summary `json:"per_call"`
	PerRecord  *summary `json:"per_record,omitempty"`
	Batch      int      `json:"batch,omitempty"`
	Errors     int      `json:"errors"`
	Timeouts   int      `json:"timeouts"`
	Wrong      int      `json:"wrong_results"`
	FirstError string   `json:"first_error,omitempty"`
	SamplesNS  []int64  `json:"samples_ns,omitempty"` // every call's duration, with -raw
}

func toOpResults(raw map[string]*stepResult, keepSamples bool) map[string]*opResult {
	out := map[string]*opResult{}
	for label, r := range raw {
		o := &opResult{Summary: summarize(r.NS), Batch: r.Batch, Errors: r.Errors, Timeouts: r.Timeouts, Wrong: r.Wrong, FirstError: r.FirstError}
		if keepSamples {
			o.SamplesNS = r.NS
		}
		if r.Batch > 1 {
			o.PerRecord = o.Summary.scaled(r.Batch)
		}
		out[label] = o
	}
	return out
}

// latencySection measures every client's per-operation latency. It runs
// in rounds (-latency-rounds), each round measuring baseline-go, engine-go,
// python and ctypes in turn on fresh databases, and pools each row's
// samples over the rounds: drift of a shared machine then weighs on every
// client alike instead of on whichever ran in a bad minute. The Python
// original reference runs in the first round only. The durable-transaction
// floor (floor.go) runs at the start and at the end of every round.
func latencySection(cfg *config, res *results) error {
	raw := map[string]map[string]*stepResult{}
	add := func(impl string, m map[string]*stepResult) { poolResults(raw, impl, m) }
	pyWhy := ""
	if cfg.Sections["python"] {
		if pyWhy = pythonPrereq(cfg); pyWhy != "" {
			for _, impl := range []string{implPython, implCtypes, implOrigPy} {
				res.Skipped["latency/"+impl] = pyWhy
			}
			cfg.logf("python rows skipped: %s", pyWhy)
		}
	}
	// The floor (floor.go) runs first and last in every round, its samples
	// pooled: it brackets the engine's rows from Go and from Python, so
	// that a machine drifting within a round weighs on both sides of the
	// ratios engine / floor.
	floor := func(round int) error {
		m, err := latencyFloor(cfg, round)
		if err != nil {
			return fmt.Errorf("latency %s: %w", implFloor, err)
		}
		add(implFloor, m)
		return nil
	}
	for round := 1; round <= cfg.Rounds; round++ {
		if err := floor(round); err != nil {
			return err
		}
		if cfg.Sections["latency"] {
			for _, impl := range []string{implBaseline, implEngine} {
				m, err := latencyGo(cfg, impl, round)
				if err != nil {
					return fmt.Errorf("latency %s: %w", impl, err)
				}
				add(impl, m)
			}
		}
		if cfg.Sections["python"] && pyWhy == "" {
			latencyPythonRound(cfg, res, raw, round)
		}
		if err := floor(round); err != nil {
			return err
		}
	}
	for impl, m := range raw {
		res.Latency[impl] = toOpResults(m, cfg.Raw)
	}
	paired := map[string]sizes{}
	if cfg.Sections["latency"] {
		paired[implEngine] = cfg.Go
	}
	if cfg.Sections["python"] && pyWhy == "" {
		paired[implPython] = cfg.Py
	}
	for _, impl := range floorImpls {
		z, ok := paired[impl]
		if !ok {
			continue
		}
		rows, err := pairedFloor(cfg, impl, z)
		if err != nil {
			res.fail("paired_floor/"+impl, err)
			cfg.logf("paired floor %s: %v", impl, err)
			continue
		}
		if res.Paired == nil {
			res.Paired = map[string]map[string]*pairedRow{}
		}
		res.Paired[impl] = rows
	}
	return nil
}

// latencyPythonRound runs one round of the Python clients, pooling their
// samples into raw; a client that fails is skipped from then on.
func latencyPythonRound(cfg *config, res *results, raw map[string]map[string]*stepResult, round int) {
	for _, impl := range []string{implPython, implCtypes, implOrigPy} {
		if impl == implOrigPy && round > 1 {
			continue
		}
		if _, failed := res.Skipped["latency/"+impl]; failed {
			continue
		}
		m, err := latencyPython(cfg, impl, round)
		if err != nil {
			res.fail("latency/"+impl, err)
			delete(raw, impl)
			cfg.logf("latency %s: %v", impl, err)
			continue
		}
		poolResults(raw, impl, m)
	}
}

// poolResults adds one run's step results of impl to raw, the samples of a
// row pooled over rounds.
func poolResults(raw map[string]map[string]*stepResult, impl string, m map[string]*stepResult) {
	if raw[impl] == nil {
		raw[impl] = map[string]*stepResult{}
	}
	for label, r := range m {
		p := raw[impl][label]
		if p == nil {
			p = &stepResult{Label: r.Label, Batch: r.Batch}
			raw[impl][label] = p
		}
		p.NS = append(p.NS, r.NS...)
		p.Errors += r.Errors
		p.Timeouts += r.Timeouts
		p.Wrong += r.Wrong
		if p.FirstError == "" {
			p.FirstError = r.FirstError
		}
	}
}

// latencyGo runs the latency plan in this process on a fresh database.
func latencyGo(cfg *config, impl string, round int) (map[string]*stepResult, error) {
	if err := cfg.fresh(); err != nil {
		return nil, err
	}
	steps, pool := latencyPlan(cfg.Go)
	cfg.logf("latency %s (round %d): pool of %d records, %d lookups per row, %d records, record_many %d x100 %d x1000",
		impl, round, pool, cfg.Go.Lookups, cfg.Go.Records, cfg.Go.Many100, cfg.Go.Many1000)
	return runLatencyPlan(cfg, impl, round, impl, pool, steps, func() (client, error) { return openClient(impl, cfg.dbPath()) })
}

// runLatencyPlan preloads the fresh database with pool records (by the
// client preloader), then runs steps through the client that open makes:
// what latencyGo and latencyFloor (floor.go) share.
func runLatencyPlan(cfg *config, impl string, round int, preloader string, pool int, steps []step,
	open func() (client, error)) (map[string]*stepResult, error) {
	if err := preloadDB(cfg, preloader, pool); err != nil {
		return nil, err
	}
	c, err := open()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	t0 := time.Now()
	out := runPlan(c, steps)
	cfg.logf("latency %s (round %d): done in %.1f s", impl, round, time.Since(t0).Seconds())
	return out, nil
}

// pySpec is what tests/bench/pybench.py reads.
type pySpec struct {
	Impl        string    `json:"impl"`
	DB          string    `json:"db"`
	Lib         string    `json:"lib"`
	Repo        string    `json:"repo"`
	ProgramName string    `json:"program_name"`
	Source      string    `json:"source"`
	SchedFormat string    `json:"sched_format"`
	Times       []float64 `json:"times"`
	CPUModel    string    `json:"cpu_model"`
	Steps       []step    `json:"steps"`
	// CliffSourceSuffix makes the cliff section's program sources
	// (cliffSource): {p} is the program's number.
	CliffSourceSuffix string `json:"cliff_source_suffix"`
	// Role "throughput" makes pybench.py a throughput worker (TP), and
	// "serve" a writer of the paired floor rows (pairedfloor.go), instead
	// of running Steps.
	Role string  `json:"role,omitempty"`
	TP   *tpSpec `json:"tp,omitempty"`
	// The kernel-config cache's entries (configcache.go): device, op_id,
	// call keys from ConfigKeyFormat ({tag}, {i}), and the configuration
	// (plus a "trial" field) every entry stores.
	ConfigDevice    string         `json:"config_device"`
	ConfigOpID      string         `json:"config_op_id"`
	ConfigKeyFormat string         `json:"config_key_format"`
	ConfigValue     map[string]any `json:"config_value"`
}

// pyOutput is what pybench.py prints.
type pyOutput struct {
	Results map[string]*stepResult `json:"results"`
	Skip    string                 `json:"skip,omitempty"`
	Error   string                 `json:"error,omitempty"`
}

func (cfg *config) pySpec(impl string, steps []step) pySpec {
	return pySpec{Impl: impl, DB: cfg.dbPath(), Lib: cfg.Lib, Repo: cfg.Repo, ProgramName: programName,
		Source: programSource, SchedFormat: schedFormat, Times: benchTimes, CPUModel: benchCPU, Steps: steps, CliffSourceSuffix: cliffSourceSuffix,
		ConfigDevice: configDevice, ConfigOpID: configOpID, ConfigKeyFormat: configKeyFormat, ConfigValue: configValue}
}

// pythonCmd runs pybench.py on a spec file, against this tree's package and
// library whatever tirastore the interpreter has installed.
func pythonCmd(cfg *config, specPath string, wrap ...string) *exec.Cmd {
	argv := append(append([]string{}, wrap...), cfg.Python, filepath.Join(cfg.Repo, "tests", "bench", "pybench.py"), specPath)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = pythonEnv(cfg, true)
	return cmd
}

// pythonEnv is this process's environment with this tree's package first
// on PYTHONPATH and its library in TIRASTORE_LIB; noBytecode also sets
// PYTHONDONTWRITEBYTECODE.
func pythonEnv(cfg *config, noBytecode bool) []string {
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PYTHONPATH=") && !strings.HasPrefix(e, "TIRASTORE_LIB=") {
			env = append(env, e)
		}
	}
	pp := filepath.Join(cfg.Repo, "python")
	if old := os.Getenv("PYTHONPATH"); old != "" {
		pp += string(os.PathListSeparator) + old
	}
	env = append(env, "PYTHONPATH="+pp, "TIRASTORE_LIB="+cfg.Lib)
	if noBytecode {
		env = append(env, "PYTHONDONTWRITEBYTECODE=1")
	}
	return env
}

// runPython runs one pybench.py spec and decodes its output.
func runPython(cfg *config, spec pySpec, wrap ...string) (*pyOutput, error) {
	path, err := writeSpec(cfg, spec)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	cmd := pythonCmd(cfg, path, wrap...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var out pyOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("pybench.py %s: %v (%v)\n%s", spec.Impl, runErr, err, lastLines(stderr.String(), 15))
	}
	if out.Error != "" {
		return nil, fmt.Errorf("pybench.py %s: %s", spec.Impl, out.Error)
	}
	return &out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pythonPrereq says why Python rows cannot run, or "".
func pythonPrereq(cfg *config) string {
	if _, err := os.Stat(cfg.Lib); err != nil {
		return fmt.Sprintf("%s missing (run ./build.sh or make build)", cfg.Lib)
	}
	if _, err := exec.LookPath(cfg.Python); err != nil {
		return fmt.Sprintf("%s not found", cfg.Python)
	}
	return ""
}

// latencyPython runs the latency plan from Python (pybench.py): the
// tirastore package, bare ctypes, or the Python reconstruction of the
// original. A client that cannot run here is an error saying why.
func latencyPython(cfg *config, impl string, round int) (map[string]*stepResult, error) {
	z := cfg.Py
	if impl == implOrigPy {
		z = cfg.Orig
	}
	if err := cfg.fresh(); err != nil {
		return nil, err
	}
	steps, pool := latencyPlan(z)
	cfg.logf("latency %s (round %d): pool of %d records, %d lookups per row, %d records", impl, round, pool, z.Lookups, z.Records)
	if impl == implOrigPy {
		// OriginalStore must create the database itself (its CPU id);
		// pybench.py preloads it through the engine in a second store.
		steps = append(preloadSteps(pool), steps...)
	} else if err := preloadDB(cfg, implEngine, pool); err != nil {
		return nil, err
	}
	t0 := time.Now()
	out, err := runPython(cfg, cfg.pySpec(impl, steps))
	switch {
	case err != nil:
		return nil, err
	case out.Skip != "":
		return nil, errors.New(out.Skip)
	}
	cfg.logf("latency %s (round %d): done in %.1f s", impl, round, time.Since(t0).Seconds())
	return out.Results, nil
}

// preloadDB writes the pool of present records (tag 0) in a separate
// worker process with the given Go implementation, so that the measured
// process has not seen them written.
func preloadDB(cfg *config, impl string, pool int) error {
	return preloadWith(cfg, impl, cfg.dbPath(), pool)
}

// preloadWith is preloadDB into the database at db (a path or a URL).
func preloadWith(cfg *config, impl, db string, pool int) error {
	spec, err := writeSpec(cfg, workerSpec{Role: "plan", Impl: impl, DB: db, Steps: preloadSteps(pool)})
	if err != nil {
		return err
	}
	defer os.Remove(spec)
	cmd := workerCmd(cfg, spec)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("preload: %v: %s", err, lastLines(stderr.String(), 5))
	}
	if bad := planFailures(stdout.Bytes()); bad != "" {
		return errors.New("preload: " + bad)
	}
	return nil
}
