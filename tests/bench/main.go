// Command bench is TiraStore's benchmark: it measures the engine and, in the
// same run on the same disk, a baseline that follows the original Python
// library's per-operation protocol (package baseline), so that every figure
// has a ratio beside it.
//
//	go run ./tests/bench [-quick] [-out build/bench/results.json] [-dir build/bench-tmp]
//
// Sections:
//
//  1. per-operation latency (median, p99, mean) from Go, engine and
//     baseline: lookup hit/miss, contains, record new/existing,
//     record_many(100/1000);
//  2. the same rows for the engine from Python (the tirastore package) and
//     through ctypes (the bare C ABI), and for the Python reconstruction of
//     the original (tests/python/test_mixed_fleet.py) as a reference, all
//     driven through tests/bench/pybench.py;
//  3. metadata syscalls per operation, counted with strace in worker
//     processes, classified by kind and by where they land (the database's
//     directory and its ancestors = the shared filesystem, or node-local);
//  4. aggregate throughput of 1..32 worker processes on an 80/20
//     lookup/record mix, with the exact set of records checked afterwards;
//  5. the kernel-config cache: tirastore.PersistentCache beside
//     the seed's whole-file JSON pattern (tests/python/seed_cache.py), get
//     hit and put with 10 and 10,000 entries stored, printed with the
//     latency rows (configcache.go);
//  6. claims with leases: lookup_or_claim against lookup on a
//     hit and on a miss (claim + record against lookup + record, and the
//     claim alone), from Go and Python, printed with the latency rows
//     (claim.go);
//  7. the import cost of the released ejkernel with tirastore's
//     PersistentCache in place of its own, in fresh interpreters
//     of the ejkernel venv (ejkernel.go), printed after the latency rows;
//  8. PostgreSQL beside the SQLite file (postgres.go): a throwaway cluster
//     (tests/pg/pgcluster.py) on this machine, reached on its Unix socket;
//     per-operation latency from Go (lookup hit and miss, interleaved,
//     record new, record_many(100)) and the throughput mix at 1..64
//     processes, for both backends, in the same run; the lookup
//     statement alone beside the joined one it replaced (pgquery.go);
//     64, 256 and 1,000 clients through PgBouncer and directly
//     (pooler.go); skipped with the reason when no cluster can be
//     started;
//  9. tirastore dashboard on a database of 200,000 records
//     (dashboard.go): the holds of its reads against a lookup's, and in
//     headless Chromium its first paint and how soon another process's
//     records show.
//
// It prints one table per section, then which of the targets hold,
// and writes every raw figure as JSON. The exit code is 0 even when targets
// are missed: this is a measurement, not a test (a harness failure, e.g. a
// lost record or a client that failed, is reported in the tables and the
// JSON: "failed" lists the parts left out because their run failed, where
// "skipped" also holds those left out for a missing prerequisite).
//
// The database lives 5 path components below the bench directory
// (<dir>/a/b/c/d/cache.db), as deep as the original's reference
// measurements; -dir puts it on another filesystem.
//
// Worker processes are this same executable, selected by the environment
// variable TIRASTORE_BENCH_WORKER (a spec file path).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/tirastore/tirastore/core/tuning"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// workerEnv names the worker spec file in a worker process's environment.
const workerEnv = "TIRASTORE_BENCH_WORKER"

func main() {
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(workerMain(spec))
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
}

// dbSubdirs put the database 5 components below the bench directory.
var dbSubdirs = []string{"a", "b", "c", "d"}

// config is everything a run needs; flags fill it.
type config struct {
	Out, Dir, Repo, Python, Lib string
	Exe                         string // the worker executable (this program)
	Quick                       bool
	Go, Py, Orig                sizes
	ConfigCache                 configSizes
	Procs                       []int
	PGProcs                     []int // process counts of the postgres section
	OpsPerWorker, TPPool, Reps  int
	Rounds                      int
	SyscallOps, SyscallMany     int
	EjkernelRuns                int // fresh interpreters per variant of the ejkernel import row
	Cliff                       cliffSizes
	Dash                        dashSizes
	Sections                    map[string]bool
	TPClients                   map[string]bool // clients of the throughput section
	Keep, Raw                   bool
	// Real are the realistic section's sizes; WorkerEnv is added to the
	// environment of every worker process (the switches it runs).
	Real      realisticSizes
	WorkerEnv []string
	log       io.Writer
}

func (c *config) dbDir() string  { return filepath.Join(append([]string{c.Dir}, dbSubdirs...)...) }
func (c *config) dbPath() string { return filepath.Join(c.dbDir(), "cache.db") }

// fresh empties the database directory: every scenario starts from a new
// database (and no lock or lock ticket left by the previous one).
//
// <dir>/a is deleted only if this tool created it (it holds the marker
// file), so that -dir pointed at a directory with an unrelated "a" in it
// cannot lose data.
func (c *config) fresh() error {
	top := filepath.Join(c.Dir, dbSubdirs[0])
	marker := filepath.Join(top, freshMarker)
	if _, err := os.Stat(top); err == nil {
		if _, err := os.Stat(marker); err != nil {
			return fmt.Errorf("%s exists and was not created by this benchmark (no %s in it): choose another -dir", top, freshMarker)
		}
		if err := os.RemoveAll(top); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(c.dbDir(), 0o777); err != nil {
		return err
	}
	return os.WriteFile(marker, nil, 0o644)
}

// freshMarker marks the directory tree the benchmark may delete.
const freshMarker = ".tirastore-bench"

// cleanup removes the database tree at the end of a run (unless -keep).
func (c *config) cleanup() {
	top := filepath.Join(c.Dir, dbSubdirs[0])
	if _, err := os.Stat(filepath.Join(top, freshMarker)); err == nil {
		os.RemoveAll(top)
	}
}

func (c *config) logf(format string, a ...any) {
	fmt.Fprintf(c.log, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

// findRepo walks up from dir to the directory holding this module's go.mod.
func findRepo(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/tirastore/tirastore\n") {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

func parseProcs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad process count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// run is the whole benchmark; args are the command-line flags.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cwd, _ := os.Getwd()
	repoDefault := findRepo(cwd)
	if repoDefault == "" {
		if exe, err := os.Executable(); err == nil {
			repoDefault = findRepo(filepath.Dir(exe))
		}
	}
	cfg := &config{log: stderr}
	fs.StringVar(&cfg.Repo, "repo", repoDefault, "repository root (for tests/bench/pybench.py and build/libtirastore.so)")
	fs.StringVar(&cfg.Out, "out", "", "JSON output (default <repo>/build/bench/results.json; the table goes beside it as .txt)")
	fs.StringVar(&cfg.Dir, "dir", "", "bench directory: the database goes to <dir>/a/b/c/d/cache.db (default <repo>/build/bench-tmp)")
	fs.StringVar(&cfg.Python, "python", "python3", "Python interpreter for the Python and ctypes rows")
	fs.StringVar(&cfg.Lib, "lib", "", "libtirastore.so for Python and ctypes (default <repo>/build/libtirastore.so)")
	fs.BoolVar(&cfg.Quick, "quick", false, "smoke-test sizes (seconds, not minutes; the figures are not meaningful)")
	lookups := fs.Int("lookups", 2000, "iterations of each lookup/contains row")
	records := fs.Int("records", 500, "iterations of the record new / record existing rows")
	many100 := fs.Int("many100", 30, "iterations of record_many(100)")
	many1000 := fs.Int("many1000", 12, "iterations of record_many(1000)")
	configPuts := fs.Int("config-puts", 50, "timed puts of the kernel-config cache's 10,000-entry row per round (the seed's rewrite the whole file); its get-hit row runs -lookups gets, its 10-entry put row -records puts")
	origDiv := fs.Int("orig-divisor", 4, "the Python original reference runs 1/N of the iterations")
	procs := fs.String("procs", "1,2,4,8,16,32", "process counts of the throughput section")
	pgProcs := fs.String("pg-procs", "1,2,4,8,16,32,64", "process counts of the postgres section's throughput rows")
	fs.IntVar(&cfg.OpsPerWorker, "ops", 200, "operations per throughput worker (80% lookups, 20% new records); note that with convoys (the baseline) the p99 of a fixed-count run depends on it")
	fs.IntVar(&cfg.Rounds, "latency-rounds", 2, "rounds of the latency section (every client once per round, samples pooled)")
	fs.IntVar(&cfg.Reps, "reps", 3, "repetitions of every throughput run (engine and baseline alternate)")
	fs.IntVar(&cfg.TPPool, "pool", 1000, "records preloaded before each throughput run")
	fs.IntVar(&cfg.SyscallOps, "syscall-ops", 50, "traced operations per syscall row")
	fs.IntVar(&cfg.SyscallMany, "syscall-many", 3, "traced record_many(1000) calls per syscall row")
	fs.IntVar(&cfg.EjkernelRuns, "ejkernel-runs", 15, "fresh interpreters per variant (ejkernel's own class, patched) of the ejkernel import row, after one warm-up each")
	fs.IntVar(&cfg.Cliff.Programs, "cliff-programs", 64, "programs of the cliff section's working set")
	fs.IntVar(&cfg.Cliff.Records, "cliff-records", 4*tuning.MaxCached/64, "records per program of the cliff section's working set (default: 4 x the result cache's entries in all)")
	fs.IntVar(&cfg.Cliff.Lookups, "cliff-lookups", 30000, "timed lookups of the cliff section's thrash rows")
	fs.IntVar(&cfg.Cliff.Memory, "cliff-memory-lookups", 1000000, "lookups in all of the cliff section's memory row")
	fs.IntVar(&cfg.Cliff.NeighbourRecords, "cliff-neighbour-records", 200, "records of each cliff neighbour run")
	fs.IntVar(&cfg.Cliff.NeighbourRounds, "cliff-rounds", 2, "cliff neighbour runs of each kind (alone, beside the thrashing process), alternating")
	fs.IntVar(&cfg.Dash.Programs, "dash-programs", 20, "programs of the dashboard section's database")
	fs.IntVar(&cfg.Dash.Records, "dash-records", 10000, "records per program of the dashboard section's database")
	fs.IntVar(&cfg.Dash.Lookups, "dash-lookups", 40, "lookups per program of the dashboard section's hold rows (a fresh store: loads and point reads)")
	fs.IntVar(&cfg.Dash.Starts, "dash-starts", 3, "starts of the dashboard's server timed to the page's first paint")
	fs.IntVar(&cfg.Dash.Rounds, "dash-rounds", 5, "record_many calls of another process timed until the dashboard's page shows them")
	fs.IntVar(&cfg.Dash.New, "dash-new", 1000, "records of each of those record_many calls")
	sections := fs.String("sections", "latency,python,config,claim,ejkernel,syscalls,throughput,postgres,cliff,dashboard,realistic", "sections to run (realistic: Tiramisu-like beam workers measuring for seconds, with a kept and a fresh connection; config: the kernel-config cache rows; claim: lookup_or_claim against lookup, from Go and Python; ejkernel: the import cost of the released ejkernel with tirastore's PersistentCache, in the venv of make ejkernel-venv; postgres: a throwaway PostgreSQL cluster beside the SQLite file; cliff: lookups over a working set 4x the result cache, a neighbour's records beside them, and a lookup-heavy process's memory; dashboard: tirastore dashboard on a large database, in headless Chromium, and the holds of its reads against a lookup's)")
	tpClients := fs.String("tp-clients", implEngine+","+implBaseline+","+implPython, "clients of the throughput section (the python-worker throughput target needs python and baseline-go)")
	realProcs := fs.String("realistic-procs", "8,32,64", "worker counts of the realistic section")
	realDirs := fs.String("realistic-dirs", "", "comma-separated directories of the realistic section, e.g. a FUSE mount of tests/fusebed (default: the bench directory)")
	fs.BoolVar(&cfg.Real.Fresh, "realistic-fresh", true, "also run the realistic section with a fresh connection per operation (false: the kept connection alone, for a slow filesystem)")
	fs.IntVar(&cfg.Real.Steps, "realistic-steps", 6, "search steps per beam worker of the realistic section")
	fs.IntVar(&cfg.Real.Space, "realistic-space", 4000, "schedules of the realistic section's shared candidate space")
	fs.IntVar(&cfg.Real.Preload, "realistic-preload", 1000, "of them recorded before each realistic run")
	fs.Float64Var(&cfg.Real.MinMeasure, "realistic-min-measure", 0.5, "seconds of a simulated measurement, at least")
	fs.Float64Var(&cfg.Real.MaxMeasure, "realistic-max-measure", 5, "seconds of a simulated measurement, at most")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the bench directory afterwards")
	fs.BoolVar(&cfg.Raw, "raw", false, "also write every single duration (and every throughput worker's report) into the JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.Repo == "" {
		return errors.New("cannot find the repository root; pass -repo")
	}
	if cfg.Quick {
		for _, q := range []struct {
			name string
			v    *int
			n    int
		}{{"lookups", lookups, 30}, {"records", records, 20}, {"many100", many100, 3}, {"many1000", many1000, 2}, {"config-puts", configPuts, 10}} {
			if !isSet(fs, q.name) {
				*q.v = q.n
			}
		}
		if !isSet(fs, "procs") {
			*procs = "1,2,4"
		}
		if !isSet(fs, "pg-procs") {
			*pgProcs = "1,2,4"
		}
		if !isSet(fs, "ops") {
			cfg.OpsPerWorker = 25
		}
		if !isSet(fs, "reps") {
			cfg.Reps = 1
		}
		if !isSet(fs, "latency-rounds") {
			cfg.Rounds = 1
		}
		if !isSet(fs, "pool") {
			cfg.TPPool = 100
		}
		if !isSet(fs, "syscall-ops") {
			cfg.SyscallOps = 5
		}
		if !isSet(fs, "syscall-many") {
			cfg.SyscallMany = 1
		}
		if !isSet(fs, "ejkernel-runs") {
			cfg.EjkernelRuns = 1
		}
		for _, q := range []struct {
			name string
			v    *int
			n    int
		}{{"cliff-programs", &cfg.Cliff.Programs, 8}, {"cliff-records", &cfg.Cliff.Records, 256}, {"cliff-lookups", &cfg.Cliff.Lookups, 500},
			{"cliff-memory-lookups", &cfg.Cliff.Memory, 5000}, {"cliff-neighbour-records", &cfg.Cliff.NeighbourRecords, 20}, {"cliff-rounds", &cfg.Cliff.NeighbourRounds, 1},
			{"dash-programs", &cfg.Dash.Programs, 4}, {"dash-records", &cfg.Dash.Records, 500}, {"dash-lookups", &cfg.Dash.Lookups, 10},
			{"dash-starts", &cfg.Dash.Starts, 1}, {"dash-rounds", &cfg.Dash.Rounds, 1}, {"dash-new", &cfg.Dash.New, 100}} {
			if !isSet(fs, q.name) {
				*q.v = q.n
			}
		}
	}
	cfg.Go = sizes{*lookups, *records, *many100, *many1000}
	cfg.Py = cfg.Go
	d := max(*origDiv, 1)
	cfg.Orig = sizes{max(*lookups/d, 1), max(*records/d, 1), max(*many100/d, 1), max(*many1000/d, 1)}
	cfg.ConfigCache = configSizes{Gets: *lookups, PutsSmall: *records, PutsLarge: max(*configPuts, 1)}
	var err error
	if cfg.Procs, err = parseProcs(*procs); err != nil {
		return err
	}
	if cfg.PGProcs, err = parseProcs(*pgProcs); err != nil {
		return err
	}
	if cfg.Real.Procs, err = parseProcs(*realProcs); err != nil {
		return err
	}
	for _, d := range strings.Split(*realDirs, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.Real.Dirs = append(cfg.Real.Dirs, d)
		}
	}
	cfg.Real.MinBurst, cfg.Real.MaxBurst, cfg.Real.PerStep = 10, 200, 2
	if cfg.Quick {
		cfg.Real.Steps, cfg.Real.MinMeasure, cfg.Real.MaxMeasure = 1, 0.01, 0.05
	}
	cfg.Reps, cfg.Rounds, cfg.EjkernelRuns = max(cfg.Reps, 1), max(cfg.Rounds, 1), max(cfg.EjkernelRuns, 1)
	cfg.Sections = map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		cfg.Sections[strings.TrimSpace(s)] = true
	}
	cfg.TPClients = map[string]bool{}
	for _, c := range strings.Split(*tpClients, ",") {
		switch c = strings.TrimSpace(c); c {
		case implEngine, implBaseline, implPython:
			cfg.TPClients[c] = true
		default:
			return fmt.Errorf("-tp-clients: unknown client %q (engine-go, baseline-go, python)", c)
		}
	}
	if cfg.Out == "" {
		cfg.Out = filepath.Join(cfg.Repo, "build", "bench", "results.json")
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(cfg.Repo, "build", "bench-tmp")
	}
	if cfg.Lib == "" {
		cfg.Lib = filepath.Join(cfg.Repo, "build", "libtirastore.so")
	}
	if err := os.MkdirAll(cfg.Dir, 0o777); err != nil {
		return err
	}
	if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
		return err
	}
	if cfg.Dir, err = filepath.EvalSymlinks(cfg.Dir); err != nil {
		return err
	}
	if cfg.Exe, err = os.Executable(); err != nil {
		return err
	}
	if !cfg.Keep {
		defer cfg.cleanup()
	}

	started := time.Now()
	res := &results{Schema: "tirastore-bench/1", Quick: cfg.Quick}
	res.Machine = describeMachine(cfg)
	res.Config = configJSON(cfg)
	cfg.logf("machine: %s, %d cores, %s, %s on %s", res.Machine.CPUModel, res.Machine.Cores, res.Machine.Kernel, cfg.Dir, res.Machine.FSType)

	res.Latency = map[string]map[string]*opResult{}
	res.Skipped = map[string]string{}
	if cfg.Sections["latency"] || cfg.Sections["python"] {
		if err := latencySection(cfg, res); err != nil {
			return err
		}
	}
	if cfg.Sections["config"] {
		if err := configSection(cfg, res); err != nil {
			return err
		}
	}
	if cfg.Sections["claim"] {
		if err := claimSection(cfg, res); err != nil {
			return err
		}
	}
	if cfg.Sections["ejkernel"] {
		ejkernelSection(cfg, res)
	}
	if cfg.Sections["syscalls"] {
		res.Syscalls = syscallSection(cfg, res)
	}
	if cfg.Sections["throughput"] {
		res.Throughput = throughputSection(cfg, res)
	}
	if cfg.Sections["postgres"] {
		res.Postgres = postgresSection(cfg, res)
	}
	if cfg.Sections["cliff"] {
		res.Cliff = cliffSection(cfg, res)
	}
	if cfg.Sections["realistic"] {
		res.Realistic = realisticSection(cfg, res)
	}
	if cfg.Sections["dashboard"] {
		dashboardSection(cfg, res)
	}
	res.FloorRatios = floorRatios(res)
	res.Targets = append(append(evaluateTargets(cfg, res), cliffTargets(res)...), dashTargets(res)...)
	res.Reference = originalReference
	res.ElapsedS = time.Since(started).Seconds()

	var table strings.Builder
	writeReport(&table, cfg, res)
	io.WriteString(stdout, table.String())

	if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o777); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfg.Out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	txt := strings.TrimSuffix(cfg.Out, filepath.Ext(cfg.Out)) + ".txt"
	if err := os.WriteFile(txt, []byte(table.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s and %s (%.0f s)\n", cfg.Out, txt, res.ElapsedS)
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// workerCmd is a command that runs this program as a worker on spec.
func workerCmd(cfg *config, specPath string) *exec.Cmd {
	cmd := exec.Command(cfg.Exe)
	cmd.Env = append(append(os.Environ(), cfg.WorkerEnv...), workerEnv+"="+specPath)
	return cmd
}

// writeSpec stores a worker spec in a fresh file beside the bench dir.
func writeSpec(cfg *config, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(cfg.Dir, "spec-*.json")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.Write(b)
	return f.Name(), err
}
