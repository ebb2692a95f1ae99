package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PostgreSQL beside the SQLite file: section "postgres" of -sections.
//
// A throwaway cluster (tests/pg/pgcluster.py: initdb in a new temporary
// directory, a Unix socket of its own, the superuser trusted on it) runs
// on this machine for the section's length and is stopped and removed at
// its end, also when the section fails. Without PostgreSQL the section is
// skipped (results.json: skipped.postgres says why) and the run goes on.
//
// Every measured run gets a fresh database: for the SQLite file, a new
// file at the usual path (cfg.fresh); for PostgreSQL, a new schema,
// put first on the search_path through the URL's options parameter (the
// engine creates its tables in the first schema of the search_path).
// Both backends are driven by the same engine (core.Open dispatches on
// the location), so the rows differ by the backend only:
//
//   - latency, one process, warm store, from Go: lookup hit (pool keys
//     this process has not read before, the pool preloaded by another
//     process) and lookup miss, interleaved, record new, record_many(100),
//     with the -lookups, -records and -many100 counts, over
//     -latency-rounds rounds in which the order of the backends alternates
//     (samples pooled); on postgres also the lookup statement alone, hit
//     and miss, beside the joined statement it replaced (pgquery.go);
//   - throughput, the 80/20 mix of the throughput section at -pg-procs
//     processes, -reps repetitions with the backends alternating, and the
//     exact set of records checked after each run.
//
// results.json: postgres.latency.<backend>.<row>,
// postgres.throughput.<backend>[] (as the throughput section's rows),
// postgres.pooler[] (pooler.go).

// Backends of the postgres section, as they appear in tables and JSON.
const (
	backendSQLite   = "sqlite-file"
	backendPostgres = "postgres"
)

// pgBackends are the postgres section's backends, in table order.
var pgBackends = []string{backendSQLite, backendPostgres}

// pgLatencyOps are the postgres section's latency rows, in table order.
var pgLatencyOps = []string{opLookupHit, opLookupMiss, opRecordNew, opMany100}

// pgOpTitles name the latency rows in the table.
var pgOpTitles = map[string]string{
	opLookupHit:  "lookup hit, key not read before",
	opLookupMiss: "lookup miss",
	opRecordNew:  "record new",
	opMany100:    "record_many(100)",
}

// pgResults are the postgres section's figures.
type pgResults struct {
	// URLForm is the form of the URLs the engine was given (no password
	// in it: the superuser is trusted on the socket).
	URLForm string `json:"url_form"`
	// Settings are some of the server's settings (version, fsync...).
	Settings map[string]string `json:"server_settings"`
	Procs    []int             `json:"procs"`
	Rounds   int               `json:"latency_rounds"`
	// Latency is by backend, then row; Throughput by backend, one
	// aggregated run per process count.
	Latency    map[string]map[string]*opResult `json:"latency"`
	Throughput map[string][]*tpRun             `json:"throughput"`
	// Pooler: through PgBouncer in transaction pooling and directly, at
	// 64, 256 and 1,000 clients (pooler.go).
	Pooler       []*poolerRun  `json:"pooler"`
	PoolerLimits *poolerLimits `json:"pooler_limits"`
	ElapsedS     float64       `json:"elapsed_s"`
}

// pgCluster is a running throwaway cluster (pgcluster.py's JSON, without
// the password it also prints).
type pgCluster struct {
	Base      string `json:"base"`
	BinDir    string `json:"bindir"`
	Port      int    `json:"port"`
	SocketDir string `json:"socket_dir"`
	URL       string `json:"url"` // the superuser's, on the socket

	cfg      *config
	dir      string
	schemas  int
	stopOnce sync.Once
}

// pgScript is tests/pg/pgcluster.py of the repository.
func pgScript(cfg *config) string {
	return filepath.Join(cfg.Repo, "tests", "pg", "pgcluster.py")
}

// startCluster makes and starts a cluster in a new temporary directory;
// args go to pgcluster.py start (--max-connections N).
func startCluster(cfg *config, args ...string) (*pgCluster, error) {
	dir, err := os.MkdirTemp("", "tirastore-bench-pg-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Python, append([]string{pgScript(cfg), "start", dir}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster.py start: %w: %s", err, lastLines(strings.TrimSpace(stderr.String()), 3))
	}
	c := &pgCluster{cfg: cfg, dir: dir}
	if err := json.Unmarshal(stdout.Bytes(), c); err != nil || c.URL == "" {
		c.stop()
		return nil, fmt.Errorf("pgcluster.py start: unexpected output (%v)", err)
	}
	return c, nil
}

// stop stops the cluster and removes its directory (once; safe to call
// from the signal handler and the section's defer alike).
func (c *pgCluster) stop() {
	c.stopOnce.Do(func() {
		out, err := exec.Command(c.cfg.Python, pgScript(c.cfg), "stop", c.dir).CombinedOutput()
		if err != nil {
			c.cfg.logf("postgres: pgcluster.py stop: %v: %s", err, lastLines(strings.TrimSpace(string(out)), 3))
		}
		os.RemoveAll(c.dir)
	})
}

// psql runs sql as the superuser in the database tira; its unaligned
// output.
func (c *pgCluster) psql(sql string) (string, error) { return c.psqlDB("tira", sql) }

// psqlDB is psql in database db.
func (c *pgCluster) psqlDB(db, sql string) (string, error) {
	bin := filepath.Join(c.BinDir, "psql")
	if _, err := os.Stat(bin); err != nil {
		bin = "psql"
	}
	cmd := exec.Command(bin, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
		"-h", c.SocketDir, "-p", strconv.Itoa(c.Port), "-U", "postgres", "-d", db, "-c", sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %q: %v: %s", sql, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// schemaURL is the URL of schema name: the superuser's on the socket,
// with the schema first on the search_path.
func (c *pgCluster) schemaURL(name string) string {
	return c.URL + "&options=-csearch_path%3D" + name
}

// urlForm is the URL form the engine is given, with placeholders for the
// machine's figures.
func (c *pgCluster) urlForm() string {
	f := strings.Replace(c.schemaURL("<schema>"), "host="+c.SocketDir, "host=<socket dir>", 1)
	return strings.Replace(f, "port="+strconv.Itoa(c.Port), "port=<port>", 1)
}

// newSchema names a schema not used before and returns its URL and the
// functions that create it (the fresh database of a run) and drop it.
func (c *pgCluster) newSchema() (url string, create, drop func() error) {
	c.schemas++
	name := fmt.Sprintf("bench_%d", c.schemas)
	create = func() error {
		_, err := c.psql(fmt.Sprintf(`CREATE SCHEMA "%s"`, name))
		return err
	}
	drop = func() error {
		_, err := c.psql(fmt.Sprintf(`DROP SCHEMA IF EXISTS "%s" CASCADE`, name))
		return err
	}
	return c.schemaURL(name), create, drop
}

// settings are some of the server's settings, by name.
func (c *pgCluster) settings() map[string]string {
	out, err := c.psql(`SELECT name || '=' || current_setting(name) FROM pg_settings WHERE name IN
		('server_version', 'fsync', 'synchronous_commit', 'wal_sync_method', 'shared_buffers', 'max_connections') ORDER BY name`)
	m := map[string]string{}
	if err != nil {
		m["error"] = err.Error()
		return m
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// pgLocation is one measured run's database: its location, the function
// that makes it new and empty, and the one that removes it afterwards.
type pgLocation struct {
	db      string
	fresh   func() error
	cleanup func()
}

// location gives a fresh database of backend for one run.
func (c *pgCluster) location(backend string) pgLocation {
	if backend == backendSQLite {
		return pgLocation{db: c.cfg.dbPath(), fresh: c.cfg.fresh, cleanup: func() {}}
	}
	url, create, drop := c.newSchema()
	return pgLocation{db: url, fresh: create, cleanup: func() {
		if err := drop(); err != nil {
			c.cfg.logf("postgres: %v", err)
		}
	}}
}

// postgresSection runs the section; nil (and res.Skipped["postgres"], or
// res.Failed when PostgreSQL is installed) when no cluster can be started.
func postgresSection(cfg *config, res *results) *pgResults {
	t0 := time.Now()
	c, err := startCluster(cfg)
	if err != nil {
		if notInstalled(err) {
			res.Skipped["postgres"] = err.Error()
		} else {
			res.fail("postgres", err)
		}
		cfg.logf("postgres section skipped: %v", err)
		return nil
	}
	defer c.stop()
	// An interrupted run must not leave a server behind (pg_ctl detaches
	// it from this process group, so it would not get the signal).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	defer func() {
		signal.Stop(sig)
		close(done)
	}()
	go func() {
		select {
		case s := <-sig:
			cfg.logf("postgres: %v: stopping the cluster", s)
			c.stop()
			code := 130
			if s == syscall.SIGTERM {
				code = 143
			}
			os.Exit(code)
		case <-done:
		}
	}()

	pr := &pgResults{URLForm: c.urlForm(), Settings: c.settings(), Procs: cfg.PGProcs, Rounds: cfg.Rounds}
	cfg.logf("postgres: cluster of PostgreSQL %s on a Unix socket, port %d", pr.Settings["server_version"], c.Port)
	pr.Latency = pgLatency(cfg, c, res)
	pr.Throughput = pgThroughput(cfg, c)
	pr.PoolerLimits, pr.Pooler = poolerRows(cfg, c, res)
	pr.ElapsedS = time.Since(t0).Seconds()
	cfg.logf("postgres: section done in %.0f s", pr.ElapsedS)
	return pr
}

// pgLatencyPlan is the latency plan of the postgres section: the latency
// section's warm-up, then its lookup-hit and lookup-miss rows
// (interleaved), record-new and record_many(100) rows. It returns the
// plan and the pool size.
func pgLatencyPlan(z sizes) ([]step, int) {
	const warm = 50
	warmHit := z.Lookups
	pool := warmHit + warm
	return []step{
		{Label: "warmup_miss", Op: "lookup", N: warm, Tag: tagWarmMiss, Expect: false, Warmup: true},
		{Label: "warmup_hit", Op: "lookup", N: warm, Tag: tagPool, Start: warmHit, Expect: true, Warmup: true},
		{Label: "warmup_record", Op: "record", N: warm / 2, Tag: tagWarmRecord, Expect: true, Warmup: true},
		// Hits and misses interleaved: both rows see the same server
		// state (timed one after the other, the hits ran right after the
		// preload and came out slower than the misses).
		{Label: "lookups", Op: "interleave", Parts: []step{
			{Label: opLookupHit, Op: "lookup", N: z.Lookups, Tag: tagPool, Expect: true},
			{Label: opLookupMiss, Op: "lookup", N: z.Lookups, Tag: tagMiss, Expect: false},
		}},
		{Label: opRecordNew, Op: "record", N: z.Records, Tag: tagRecordNew, Expect: true},
		{Label: opMany100, Op: "record_many", N: z.Many100, Tag: tagMany100, Batch: 100, Expect: true},
	}, pool
}

// pgLatency measures both backends' latency rows, in rounds; a backend
// whose run fails is recorded in res.Skipped ("postgres/latency/<backend>").
func pgLatency(cfg *config, c *pgCluster, res *results) map[string]map[string]*opResult {
	raw := map[string]map[string]*stepResult{}
	for round := 1; round <= cfg.Rounds; round++ {
		order := pgBackends
		if round%2 == 0 {
			order = []string{pgBackends[1], pgBackends[0]}
		}
		for _, b := range order {
			if _, failed := res.Skipped["postgres/latency/"+b]; failed {
				continue
			}
			m, err := pgLatencyRun(cfg, c.location(b), b, round)
			if err != nil {
				res.fail("postgres/latency/"+b, err)
				delete(raw, b)
				cfg.logf("postgres latency %s: %v", b, err)
				continue
			}
			poolResults(raw, b, m)
		}
	}
	out := map[string]map[string]*opResult{}
	for b, m := range raw {
		out[b] = toOpResults(m, cfg.Raw)
	}
	return out
}

// pgLatencyRun runs the plan in this process on a fresh database that
// another process has preloaded.
func pgLatencyRun(cfg *config, loc pgLocation, backend string, round int) (map[string]*stepResult, error) {
	defer loc.cleanup()
	if err := loc.fresh(); err != nil {
		return nil, err
	}
	steps, pool := pgLatencyPlan(cfg.Go)
	cfg.logf("postgres latency %s (round %d): pool of %d records, %d lookups per row, %d records, record_many %d x100",
		backend, round, pool, cfg.Go.Lookups, cfg.Go.Records, cfg.Go.Many100)
	if err := preloadAt(cfg, loc.db, pool); err != nil {
		return nil, err
	}
	cl, err := openClient(implEngine, loc.db)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	out := runPlan(cl, steps)
	if err := cl.Close(); err != nil {
		return nil, err
	}
	if backend == backendPostgres {
		q, err := runQueryRef(loc.db, cfg.Go.Lookups)
		if err != nil {
			return nil, fmt.Errorf("lookup statement rows: %w", err)
		}
		for label, r := range q {
			out[label] = r
		}
	}
	cfg.logf("postgres latency %s (round %d): done in %.1f s", backend, round, time.Since(t0).Seconds())
	return out, nil
}

// preloadAt writes the pool of present records (tag 0) into the database
// at db, through the engine, in a worker process of its own.
func preloadAt(cfg *config, db string, pool int) error { return preloadWith(cfg, implEngine, db, pool) }

// pgThroughput runs the throughput mix at every -pg-procs count on both
// backends, repetitions alternating the backends.
func pgThroughput(cfg *config, c *pgCluster) map[string][]*tpRun {
	out := map[string][]*tpRun{}
	for _, p := range cfg.PGProcs {
		reps := map[string][]*tpRun{}
		for rep := 0; rep < cfg.Reps; rep++ {
			for _, b := range pgBackends {
				loc := c.location(b)
				r := throughputRun(cfg, implEngine, p, loc.db, loc.fresh)
				loc.cleanup()
				reps[b] = append(reps[b], r)
				logTP(cfg, "postgres throughput "+b, r)
			}
		}
		for _, b := range pgBackends {
			out[b] = append(out[b], aggregate(reps[b]))
		}
	}
	return out
}

// pgMedian is the per-call median of a latency row of the section (NaN
// when missing).
func (pr *pgResults) pgMedian(backend, op string) float64 {
	if r := pr.Latency[backend][op]; r != nil && r.Summary != nil {
		return r.Summary.Median
	}
	return math.NaN()
}

// writePostgres prints the postgres section (when it was selected).
func writePostgres(w io.Writer, cfg *config, res *results) {
	if !cfg.Sections["postgres"] {
		return
	}
	fmt.Fprintf(w, "\n6. PostgreSQL beside the SQLite file: the engine on both backends, same machine, same run.\n")
	pr := res.Postgres
	if pr == nil {
		fmt.Fprintf(w, "   SKIPPED: %s\n", res.Skipped["postgres"])
		return
	}
	s := pr.Settings
	fmt.Fprintf(w, "   Server: PostgreSQL %s, a throwaway cluster of tests/pg/pgcluster.py on this machine (fsync=%s, synchronous_commit=%s,\n",
		s["server_version"], s["fsync"], s["synchronous_commit"])
	fmt.Fprintf(w, "   wal_sync_method=%s); URL %s\n", s["wal_sync_method"], pr.URLForm)
	fmt.Fprintf(w, "   (Unix socket, no TLS, superuser trusted on the socket: no password), one new schema per run; sqlite-file: a new database file\n")
	fmt.Fprintf(w, "   per run at the path of the header line.\n")
	fmt.Fprintf(w, "   Latency (µs), one process, warm store, from Go, %d round(s), the backends' order alternating; the pool preloaded by another process.\n", pr.Rounds)
	t := newTable("ll", "operation", "backend", "n", "median", "p99", "mean", "median/rec", "pg/sqlite", "failed")
	for _, op := range pgLatencyOps {
		first := true
		for _, b := range pgBackends {
			r := pr.Latency[b][op]
			if r == nil || r.Summary == nil {
				continue
			}
			title := ""
			if first {
				title, first = pgOpTitles[op], false
			}
			perRec := ""
			if r.PerRecord != nil {
				perRec = fmtUS(r.PerRecord.Median)
			}
			ra := "-"
			if b == backendPostgres {
				ra = fmtX(ratio(r.Summary.Median, pr.pgMedian(backendSQLite, op)))
			}
			failed := ""
			if r.Errors+r.Wrong > 0 {
				failed = fmt.Sprintf("%d err, %d wrong: %s", r.Errors, r.Wrong, firstLine(r.FirstError))
			}
			t.add(title, b, fmt.Sprint(r.Summary.N), fmtUS(r.Summary.Median), fmtUS(r.Summary.P99), fmtUS(r.Summary.Mean), perRec, ra, failed)
		}
	}
	for _, b := range pgBackends {
		for label, r := range pr.Latency[b] {
			if strings.HasPrefix(label, "warmup/") {
				t.add("FAILED "+label, b, "", "", "", "", "", "", fmt.Sprintf("%d err, %d wrong: %s", r.Errors, r.Wrong, firstLine(r.FirstError)))
			}
		}
	}
	t.write(w, "  ")
	for _, b := range pgBackends {
		if why, ok := res.Skipped["postgres/latency/"+b]; ok {
			fmt.Fprintf(w, "   %s latency FAILED: %s\n", b, firstLine(why))
		}
	}
	writeHitMiss(w, pr)

	fmt.Fprintf(w, "\n   Throughput: P worker processes x %d operations, the mix of section 3, %d repetition(s), the backends alternating; a fresh\n", cfg.OpsPerWorker, cfg.Reps)
	fmt.Fprintf(w, "   database preloaded with %d records per run, the exact set of records checked afterwards. ops/s: median over repetitions;\n", cfg.TPPool)
	fmt.Fprintf(w, "   latencies (µs; worst op in ms) over all their operations; pg/sqlite = postgres ops/s / sqlite-file ops/s.\n")
	t = newTable("rl", "P", "backend", "ops/s", "pg/sqlite", "lookup p50", "lookup p99", "record p50", "record p99", "worst op",
		"slow/fast", "records exp/found", "records ok", "failed ops")
	at := func(b string, p int) *tpRun {
		for _, r := range pr.Throughput[b] {
			if r.Procs == p {
				return r
			}
		}
		return nil
	}
	us := func(s *summary, f func(*summary) float64) string {
		if s == nil {
			return "-"
		}
		return fmtUS(f(s))
	}
	p50 := func(s *summary) float64 { return s.Median }
	p99 := func(s *summary) float64 { return s.P99 }
	for _, p := range pr.Procs {
		for _, b := range pgBackends {
			r := at(b, p)
			if r == nil {
				continue
			}
			if r.Failed != "" {
				t.add(fmt.Sprint(p), b, "FAILED: "+firstLine(r.Failed))
				continue
			}
			ra := "-"
			if s := at(backendSQLite, p); b == backendPostgres && s != nil && s.Failed == "" {
				ra = fmtX(ratio(r.OpsPerS, s.OpsPerS))
			}
			ok := "yes"
			if !r.RecordsMatch {
				ok = fmt.Sprintf("NO (%d lost, %d unexpected)", r.Lost, r.Unexpected)
			}
			t.add(fmt.Sprint(p), b, fmt.Sprintf("%.0f", r.OpsPerS), ra, us(r.Lookup, p50), us(r.Lookup, p99), us(r.Record, p50), us(r.Record, p99),
				fmtNum(r.WorstMS), fmtNum(float64(r.SlowFast)), fmt.Sprintf("%d/%d", r.Expected, r.Found), ok, fmt.Sprint(r.Errors+r.Wrong))
		}
	}
	t.write(w, "  ")
	for _, b := range pgBackends {
		for _, r := range pr.Throughput[b] {
			if r.FirstError != "" {
				fmt.Fprintf(w, "   %s P=%d first error: %s\n", b, r.Procs, firstLine(r.FirstError))
			}
		}
	}
	writePooler(w, pr)
	fmt.Fprintf(w, "   Section time: %.0f s (cluster start and stop included).\n", pr.ElapsedS)
}
