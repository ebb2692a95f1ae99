package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestMain lets this test binary serve as the benchmark's worker processes
// (run re-executes os.Executable() with workerEnv set).
func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(workerMain(spec))
	}
	os.Exit(m.Run())
}

// TestQuickRun is the smoke test: the whole benchmark in -quick mode into
// a temporary directory. It checks that every section is in the JSON (or
// says why it was skipped: a missing prerequisite; a part whose run
// failed fails the test), the kernel-config cache, claim and dashboard rows included, and
// that every throughput run found exactly the records it acknowledged. It
// asserts nothing about timings.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark in -quick mode (tens of seconds)")
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, "results.json")
	var stdout, stderr bytes.Buffer
	err := run([]string{"-quick", "-procs", "1,2", "-out", out, "-dir", filepath.Join(tmp, "dir")}, &stdout, &stderr)
	t.Logf("report:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Machine    map[string]any                       `json:"machine"`
		Latency    map[string]map[string]map[string]any `json:"latency"`
		Syscalls   *syscallResults                      `json:"syscalls"`
		Throughput map[string][]map[string]any          `json:"throughput"`
		Targets    []map[string]any                     `json:"targets"`
		Claims     map[string]map[string]map[string]any `json:"claims"`
		Ejkernel   *ejkImport                           `json:"ejkernel_import"`
		Skipped    map[string]string                    `json:"skipped"`
		Failed     map[string]string                    `json:"failed"`
		Reference  map[string]any                       `json:"reference_original"`
		Cliff      *cliffResults                        `json:"cliff"`
		Dashboard  *dashResults                         `json:"dashboard"`
		Paired     map[string]map[string]*pairedRow     `json:"paired_floor"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	for _, k := range sortedKeys(res.Failed) {
		t.Errorf("%s failed: %s", k, res.Failed[k])
	}
	for _, k := range []string{"cpu_model", "cores", "kernel", "fs_type", "go_version", "python_version", "date", "db_path"} {
		if _, ok := res.Machine[k]; !ok {
			t.Errorf("machine.%s missing", k)
		}
	}
	if !strings.HasSuffix(res.Machine["db_path"].(string), filepath.Join("a", "b", "c", "d", "cache.db")) {
		t.Errorf("database not 5 components deep: %v", res.Machine["db_path"])
	}

	ops := []string{opLookupHit, opLookupRepeat, opLookupMiss, opContains, opRecordNew, opRecordExisting, opMany100, opMany1000}
	checkLatency := func(impl string, want []string) {
		rows := res.Latency[impl]
		if rows == nil {
			if why := res.Skipped["latency/"+impl]; why != "" {
				t.Logf("latency %s skipped: %s", impl, why)
				return
			}
			t.Errorf("latency %s: neither measured nor skipped", impl)
			return
		}
		checkRows(t, "latency", impl, rows, want)
	}
	checkLatency(implEngine, ops)
	checkLatency(implBaseline, ops)
	checkLatency(implPython, ops)
	checkLatency(implCtypes, ops)
	checkLatency(implOrigPy, []string{opLookupHit, opLookupMiss, opRecordNew, opRecordExisting})
	checkLatency(implFloor, []string{opRecordNew, opMany100, opMany1000})
	checkLatency(implConfigSeed, configOps)
	checkLatency(implConfigCache, configOps)

	// The paired floor rows (pairedfloor.go): both clients, both rows,
	// every write of both sides acknowledged.
	for _, impl := range floorImpls {
		if why := res.Skipped["paired_floor/"+impl]; why != "" {
			t.Errorf("paired floor %s skipped: %s", impl, why)
			continue
		}
		for _, op := range []string{opRecordNew, opMany1000} {
			p := res.Paired[impl][op]
			switch {
			case p == nil:
				t.Errorf("paired floor %s %s: missing", impl, op)
			case p.Errors > 0 || p.Pairs == 0 || p.Client == nil || p.Floor == nil || !(p.Ratio > 0):
				t.Errorf("paired floor %s %s: %+v", impl, op, p)
			}
		}
	}

	// The claim section (claim.go): every row and part of both workers.
	claimLabels := []string{clLookupHit, clLookupRepeat, clCachedPair + ":lookup", clCachedPair + ":lookup_or_claim", clLookupMiss, clLookupRecord,
		clLookupRecord + ":lookup", clLookupRecord + ":record", clClaimHit, clClaimRepeat,
		clClaimRelease, clClaimRelease + ":claim", clClaimRelease + ":release",
		clClaimRecord, clClaimRecord + ":claim", clClaimRecord + ":record"}
	for _, impl := range claimImpls {
		rows := res.Claims[impl]
		if rows == nil {
			if why := res.Skipped["claims/"+impl]; why != "" && impl != implEngine {
				t.Logf("claims %s skipped: %s", impl, why)
			} else {
				t.Errorf("claims %s: neither measured nor skipped", impl)
			}
			continue
		}
		checkRows(t, "claims", impl, rows, claimLabels)
	}

	// The ejkernel import row (ejkernel.go): both variants and our part,
	// with PersistentCache constructed (ejkernel builds 39 caches).
	switch r := res.Ejkernel; {
	case r == nil && res.Skipped["ejkernel_import"] != "":
		t.Logf("ejkernel import row skipped: %s", res.Skipped["ejkernel_import"])
	case r == nil:
		t.Error("ejkernel import row: neither measured nor skipped")
	case r.Own == nil || r.Patched == nil || r.Pairs == nil || r.Ours == nil || r.Constructions == 0:
		t.Errorf("ejkernel import row incomplete: %+v", r)
	}

	switch {
	case res.Syscalls == nil:
		t.Error("syscalls section missing")
	case res.Syscalls.Skipped != "":
		t.Logf("syscalls skipped: %s", res.Syscalls.Skipped)
	default:
		got := map[string]bool{}
		for _, r := range res.Syscalls.Rows {
			if r.Error != "" {
				t.Errorf("syscalls %s %s: %s", r.Impl, r.Op, r.Error)
			}
			got[r.Impl+"/"+r.Op] = true
		}
		for _, impl := range []string{implEngine, implBaseline, implPython, implCtypes} {
			if res.Skipped["syscalls/"+impl] != "" {
				continue
			}
			for _, op := range syscallOps {
				if !got[impl+"/"+op] {
					t.Errorf("syscalls %s %s missing", impl, op)
				}
			}
		}
	}

	// The cliff section (cliff.go): both clients' rows without failures,
	// the neighbour's three runs, the memory row.
	switch c := res.Cliff; {
	case c == nil:
		t.Errorf("cliff section missing (skipped: %q)", res.Skipped["cliff"])
	default:
		for _, impl := range []string{implPython, implEngine} {
			if r := c.Rows[impl]; r == nil || r.Hit == nil || r.Thrash == nil || r.Problems != "" {
				t.Errorf("cliff %s: %+v", impl, r)
			}
		}
		if c.Rows[implEngine] != nil && c.Rows[implEngine].Cache == nil {
			t.Error("cliff engine-go: no cache counters")
		}
		if c.Alone == nil || c.BesideHits == nil || c.Beside == nil || c.BesideThrash == nil {
			t.Errorf("cliff neighbour runs incomplete: %+v", c)
		}
		if c.RSSWarmMiB <= 0 || c.RSSFullMiB <= 0 || c.RSSEndMiB <= 0 {
			t.Errorf("cliff memory row incomplete: %+v", c)
		}
	}

	// The dashboard section (dashboard.go): the hold rows, and the page's
	// rows unless they say why not (chromium missing: required under CI).
	switch d := res.Dashboard; {
	case d == nil:
		t.Errorf("dashboard section missing (skipped: %q)", res.Skipped["dashboard"])
	case d.ReadHold == nil || d.RecordHold == nil || d.ReadHold.N < 2:
		t.Errorf("dashboard hold rows incomplete: %+v", d)
	case d.Page == nil && res.Skipped["dashboard/page"] == "":
		t.Error("dashboard page rows: neither measured nor skipped")
	case d.Page == nil && os.Getenv("CI") == "true":
		t.Errorf("dashboard page rows skipped under CI: %s", res.Skipped["dashboard/page"])
	case d.Page == nil:
		t.Logf("dashboard page rows skipped: %s", res.Skipped["dashboard/page"])
	default:
		if len(d.Page.Starts) != 1 || len(d.Page.Rounds) != 1 || d.FirstPaint == nil || d.Visible == nil {
			t.Errorf("dashboard page rows incomplete: %+v", d.Page)
		}
		for _, r := range d.Page.Rounds {
			if r.Written != 100 || r.NewRecordsPolled < r.Written || r.PollBytes <= 0 {
				t.Errorf("dashboard round: %+v", r)
			}
		}
		if len(d.Page.PageErrors) > 0 {
			t.Errorf("dashboard page errors: %v", d.Page.PageErrors)
		}
	}

	for _, impl := range []string{implEngine, implBaseline, implPython} {
		if why := res.Skipped["throughput/"+impl]; why != "" {
			t.Logf("throughput %s skipped: %s", impl, why)
			continue
		}
		checkThroughput(t, impl, res.Throughput[impl], 2)
	}
	if len(res.Targets) < 10 {
		t.Errorf("%d targets evaluated", len(res.Targets))
	}
	if res.Reference == nil {
		t.Error("reference figures missing")
	}
	if _, err := os.Stat(strings.TrimSuffix(out, ".json") + ".txt"); err != nil {
		t.Errorf("table file: %v", err)
	}
}

// The strace parser: kinds, locations, markers, unfinished calls.
func TestCountWindow(t *testing.T) {
	trace := `1 newfstatat(AT_FDCWD</w>, "/b/a/b/c/d/.begin", 0x1, 0) = -1 ENOENT (No such file or directory)
1 openat(AT_FDCWD</w>, "/b/a/b/c/d/.lock_x", O_WRONLY|O_CREAT|O_EXCL, 0644) = 3</b/a/b/c/d/.lock_x>
1 write(3</b/a/b/c/d/.lock_x>, "{}", 2) = 2
1 close(3</b/a/b/c/d/.lock_x>) = 0
2 linkat(AT_FDCWD</w>, "/b/a/b/c/d/.lock_x", AT_FDCWD</w>, "/b/a/b/c/d/cache.db.lock", 0 <unfinished ...>
2 <... linkat resumed>) = 0
1 newfstatat(AT_FDCWD</w>, "/w", {st_mode=S_IFDIR|0755, ...}, AT_SYMLINK_NOFOLLOW) = 0
1 newfstatat(AT_FDCWD</w>, "/b", {st_mode=S_IFDIR|0755, ...}, AT_SYMLINK_NOFOLLOW) = 0
1 newfstatat(AT_FDCWD</w>, "/b/a/b", {st_mode=S_IFDIR|0755, ...}, AT_SYMLINK_NOFOLLOW) = 0
1 newfstatat(3</b/a/b/c/d/cache.db>, "", {st_mode=S_IFREG|0644, ...}, AT_EMPTY_PATH) = 0
1 statx(AT_FDCWD</w>, "rel", AT_STATX_SYNC_AS_STAT, STATX_ALL, 0x1) = -1 ENOENT
1 fcntl(3</b/a/b/c/d/cache.db>, F_SETLK, {l_type=F_RDLCK, l_whence=SEEK_SET, l_start=1073741824, l_len=1}) = 0
1 fcntl(3</b/a/b/c/d/cache.db>, F_GETFL) = 0x8002 (flags O_RDWR|O_LARGEFILE)
1 fstat(4</proc/self/stat>, {st_mode=S_IFREG|0444, ...}) = 0
1 fdatasync(3</b/a/b/c/d/cache.db-journal>) = 0
1 fchown(3</b/a/b/c/d/cache.db-journal>, 0, 0) = 0
1 unlink("/b/a/b/c/d/cache.db-journal") = 0
1 getdents64(5</b/a/b/c/d>, 0x1 /* 3 entries */, 32768) = 80
1 futex(0x1, FUTEX_WAKE_PRIVATE, 1) = 0
1 newfstatat(AT_FDCWD</w>, "/b/a/b/c/d/.end", 0x1, 0) = -1 ENOENT (No such file or directory)
1 unlinkat(AT_FDCWD</w>, "/b/a/b/c/d/after-the-window", 0) = 0
`
	p := filepath.Join(t.TempDir(), "trace.txt")
	if err := os.WriteFile(p, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := countWindow(p, ".begin", ".end", classifier{dbDir: "/b/a/b/c/d", root: "/b"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", what, got, want)
		}
	}
	check("all", n.All, 17)
	// openat, linkat, unlink, getdents64 in the DB dir; /b and /b/a/b are
	// ancestors within the bench dir; /w and the relative statx are local.
	check("path db dir", n.Path[locDBDir], 4)
	check("path ancestors", n.Path[locAncestor], 2)
	check("path local", n.Path[locLocal], 2)
	check("locks", n.Lock[locDBDir], 1)
	check("fd attr db", n.FdAttr[locDBDir], 1)
	check("fd attr local", n.FdAttr[locLocal], 1)
	check("attr set", n.FdAttrWrite[locDBDir], 1)
	check("sync", n.Sync[locDBDir], 1)
	check("data", n.Data[locDBDir], 1)
	check("close", n.Closing[locDBDir], 1)
	r := n.row("x", "y", 1, 1)
	if r.Meta != 7 || r.ByCall["newfstatat"] != 2 || r.ByCall["fcntl"] != 1 {
		t.Errorf("row %+v", r)
	}
	if _, err := countWindow(p, ".begin", ".never", classifier{dbDir: "/b/a/b/c/d", root: "/b"}); err == nil {
		t.Error("a missing end marker must be an error")
	}
}

// TestPostgresSection is the postgres section's smoke test: the section
// alone in -quick mode. It checks that both backends produced every
// latency row without failures and a throughput row at every process
// count with exactly the records acknowledged. Without PostgreSQL it
// skips, except under CI=true, where it fails. It asserts nothing about
// timings.
func TestPostgresSection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster and runs the section in -quick mode")
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, "results.json")
	var stdout, stderr bytes.Buffer
	err := run([]string{"-quick", "-sections", "postgres", "-pg-procs", "1,2", "-out", out, "-dir", filepath.Join(tmp, "dir")}, &stdout, &stderr)
	t.Logf("report:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Postgres *struct {
			URLForm    string                               `json:"url_form"`
			Latency    map[string]map[string]map[string]any `json:"latency"`
			Throughput map[string][]map[string]any          `json:"throughput"`
			Pooler     []*poolerRun                         `json:"pooler"`
			Limits     *poolerLimits                        `json:"pooler_limits"`
		} `json:"postgres"`
		Skipped map[string]string `json:"skipped"`
		Failed  map[string]string `json:"failed"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	for _, k := range sortedKeys(res.Failed) {
		t.Errorf("%s failed: %s", k, res.Failed[k])
	}
	if res.Postgres == nil {
		why := res.Skipped["postgres"]
		if why == "" {
			t.Fatal("postgres section neither measured nor skipped")
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("postgres section skipped under CI: %s", why)
		}
		t.Skip(why)
	}
	if !strings.HasPrefix(res.Postgres.URLForm, "postgresql://postgres@/") { // the socket, no password
		t.Errorf("url form %q", res.Postgres.URLForm)
	}
	for _, backend := range pgBackends {
		if why := res.Skipped["postgres/latency/"+backend]; why != "" {
			t.Errorf("latency %s failed: %s", backend, why)
		}
		checkRows(t, "latency", backend, res.Postgres.Latency[backend], pgLatencyOps)
		checkThroughput(t, backend, res.Postgres.Throughput[backend], 2)
	}
	checkRows(t, "latency", backendPostgres, res.Postgres.Latency[backendPostgres], pgQueryOps)
	if !strings.Contains(stdout.String(), "6. PostgreSQL beside the SQLite file") {
		t.Error("the section's table is not in the report")
	}
	if why := res.Skipped["postgres/pooler"]; why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pooler rows skipped under CI: %s", why)
		}
		t.Logf("pooler rows skipped: %s", why)
		return
	}
	if lim := res.Postgres.Limits; lim == nil || lim.MaxConnections == 0 || lim.PoolSize == 0 {
		t.Fatalf("pooler limits %+v", lim)
	}
	if len(res.Postgres.Pooler) != 4 {
		t.Errorf("%d pooler rows, want 4 (2 client counts x 2 paths)", len(res.Postgres.Pooler))
	}
	for _, r := range res.Postgres.Pooler {
		if r.Samples == 0 || r.FailedSamples != 0 {
			t.Errorf("pooler %s %d clients: %d samples, %d failed: %s", r.Path, r.Clients, r.Samples, r.FailedSamples, r.FirstError)
		}
		if r.Connected != r.Clients || r.Refused+r.OpenErrors+r.Errors != 0 || r.Ops != r.Clients*res.Postgres.Limits.Ops {
			t.Errorf("pooler %s %d clients: %d connected, %d refused, %d+%d errors, %d ops: %s", r.Path, r.Clients, r.Connected,
				r.Refused, r.OpenErrors, r.Errors, r.Ops, r.FirstError)
		}
		// Each store holds its one connection once open: directly, the
		// server sees every client; through PgBouncer, its pool alone.
		if r.Path == "direct" && r.ServerConAtStart < r.Clients {
			t.Errorf("direct %d clients: the server had %d connections at the start", r.Clients, r.ServerConAtStart)
		}
		if r.Path == "pgbouncer" && (r.PeakServerCon > res.Postgres.Limits.PoolSize || r.ServerConAtStart < 1) {
			t.Errorf("pgbouncer %d clients: server connections %d at start, peak %d, pool %d", r.Clients,
				r.ServerConAtStart, r.PeakServerCon, res.Postgres.Limits.PoolSize)
		}
	}
}

// TestPoolerRefusals checks that the pooler rows see clients beyond the
// server's connections: 20 direct clients on a server of max_connections
// 10, 3 of them reserved for superusers and 1 the sampler's, must show 6
// connected, 14 refused (53300), and 6 server connections of the
// database, 7 in all. It asserts nothing about timings.
func TestPoolerRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	var log bytes.Buffer
	wd, _ := os.Getwd()
	cfg := &config{Python: "python3", Repo: findRepo(wd), log: &log}
	if cfg.Repo == "" {
		t.Fatal("no repository root above the working directory")
	}
	c, err := startCluster(cfg, "--max-connections", "10")
	if err != nil {
		if os.Getenv("CI") == "true" || !notInstalled(err) {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer c.stop()
	if _, err := c.psqlDB("postgres", `CREATE DATABASE refusals OWNER tira_pw`); err != nil {
		t.Fatal(err)
	}
	url := "postgresql://tira_pw@/refusals?host=" + c.SocketDir + "&port=" + strconv.Itoa(c.Port) + "&pool_max_conns=1"
	r := poolerRun1(c, url, "refusals", "direct", 20, 5)
	if r.Connected != 6 || r.Refused != 14 || r.OpenErrors != 0 || r.Errors != 0 || r.Ops != 6*5 {
		t.Errorf("connected %d, refused %d, other open errors %d, errors %d, ops %d (want 6, 14, 0, 0, 30): %s",
			r.Connected, r.Refused, r.OpenErrors, r.Errors, r.Ops, r.FirstError)
	}
	if r.FailedSamples != 0 {
		t.Errorf("%d samples failed: %s", r.FailedSamples, r.FirstError)
	}
	if r.ServerConAtStart != 6 || r.PeakServerCon != 6 || r.PeakServerAll != 7 {
		t.Errorf("server connections at start %d, peak %d, all %d (want 6, 6, 7 with the sampler)", r.ServerConAtStart, r.PeakServerCon, r.PeakServerAll)
	}
}

// checkRows checks that a section's rows of one client (an
// implementation, a backend) have every row of want, measured without
// errors or wrong results, and no failed warm-up.
func checkRows(t *testing.T, section, client string, rows map[string]map[string]any, want []string) {
	t.Helper()
	for _, op := range want {
		r := rows[op]
		if r == nil || r["per_call"] == nil {
			t.Errorf("%s %s %s missing", section, client, op)
			continue
		}
		if r["errors"].(float64) != 0 || r["wrong_results"].(float64) != 0 {
			t.Errorf("%s %s %s: %v errors, %v wrong: %v", section, client, op, r["errors"], r["wrong_results"], r["first_error"])
		}
	}
	for label := range rows {
		if strings.HasPrefix(label, "warmup/") {
			t.Errorf("%s %s: failed warm-up %s: %v", section, client, label, rows[label]["first_error"])
		}
	}
}

// checkThroughput checks a client's throughput runs: want of them, each
// without a harness failure, with exactly the records expected, and
// without errors, lock timeouts or wrong results.
func checkThroughput(t *testing.T, client string, runs []map[string]any, want int) {
	t.Helper()
	if len(runs) != want {
		t.Errorf("throughput %s: %d runs, want %d", client, len(runs), want)
	}
	for _, r := range runs {
		if f, _ := r["harness_failure"].(string); f != "" {
			t.Errorf("throughput %s P=%v: %s", client, r["procs"], f)
			continue
		}
		if r["records_match"] != true || r["expected_records"] != r["found_records"] {
			t.Errorf("throughput %s P=%v: records expected %v, found %v, lost %v, unexpected %v", client, r["procs"],
				r["expected_records"], r["found_records"], r["lost_records"], r["unexpected_records"])
		}
		if r["errors"].(float64) != 0 || r["lock_timeouts"].(float64) != 0 || r["wrong_results"].(float64) != 0 {
			t.Errorf("throughput %s P=%v: errors %v, timeouts %v, wrong %v: %v", client, r["procs"],
				r["errors"], r["lock_timeouts"], r["wrong_results"], r["first_error"])
		}
	}
}
