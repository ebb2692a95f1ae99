package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/pyjson"
)

// Transaction pooling, part of the postgres section: Go clients (each a
// store of its own, as a worker process would be, with a pool of one
// connection, connecting as the cluster's non-superuser role tira_pw) at
// 64, 256 and 1,000 clients run the 80/20 mix through a throwaway
// PgBouncer in transaction pooling mode (tests/pg/pgbouncer.py, 20
// server connections) and directly against the server. Each run gets a
// new database.
//
// Every client opens its store before the clock starts (the run waits
// for every open to return), as a fleet of long-running workers does:
// each store then holds its connection until the client is done. (Had
// the clock started after a fixed delay, most opens would fall inside
// the run, spread over it while early clients finished and closed, and
// whether the clients ever held more than max_connections at once would
// depend on timing.) A refused open, SQLSTATE 53300 "too many clients",
// is counted apart: the engine does not retry it, the open fails at once.
//
// The server's connections are sampled every 10 ms over a superuser
// connection opened before the clients and kept (a sampler connecting
// anew for each sample, as psql does, finds no slot exactly when the
// server is full, and loses those samples): the database's connections
// right after the opens, and their peak. Connecting first, it takes an
// ordinary slot: the clients have max_connections - reserved - 1.
//
// results.json: postgres.pooler[] (one row per path and client count).

// poolerRun is one run of the pooler rows.
type poolerRun struct {
	Path    string `json:"path"` // "pgbouncer" or "direct"
	Clients int    `json:"clients"`
	// Connected clients opened their store; Refused ones were refused by
	// the server, 53300; OpenErrors failed to open otherwise.
	Connected  int `json:"connected"`
	Refused    int `json:"refused_53300"`
	OpenErrors int `json:"open_errors"`
	// Errors are failed operations of connected clients.
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Ops         int     `json:"ops"`
	OpsPerS     float64 `json:"ops_per_s"`
	LookupP50US float64 `json:"lookup_p50_us"`
	LookupP99US float64 `json:"lookup_p99_us"`
	RecordP99US float64 `json:"record_p99_us"`
	// OpenS: from the first open's start to the last open's return.
	OpenS float64 `json:"open_s"`
	// ServerConAtStart: the database's server connections once every open
	// returned; PeakServerCon their peak over the samples; PeakServerAll
	// the peak of the server's client connections, the sampler's included.
	ServerConAtStart int     `json:"server_connections_at_start"`
	PeakServerCon    int     `json:"peak_server_connections"`
	PeakServerAll    int     `json:"peak_server_connections_all"`
	Samples          int     `json:"samples"`
	FailedSamples    int     `json:"failed_samples"`
	ElapsedS         float64 `json:"elapsed_s"`
}

// poolerLimits are the server's connection settings of the pooler rows.
type poolerLimits struct {
	MaxConnections int `json:"max_connections"`
	// Reserved: superuser_reserved_connections (and reserved_connections
	// from PostgreSQL 16 on), slots the clients' role cannot take.
	Reserved int `json:"reserved_connections"`
	PoolSize int `json:"pgbouncer_pool_size"`
	Ops      int `json:"ops_per_client"`
}

// poolerRows runs the pooler rows; nil when PgBouncer cannot be started.
func poolerRows(cfg *config, c *pgCluster, res *results) (*poolerLimits, []*poolerRun) {
	dir := filepath.Join(c.Base, "bouncer")
	cmd := exec.Command(cfg.Python, filepath.Join(cfg.Repo, "tests", "pg", "pgbouncer.py"), "start", dir, c.Base)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		err = fmt.Errorf("pgbouncer.py start: %w: %s", err, lastLines(stderr.String(), 3))
		if notInstalled(err) {
			res.Skipped["postgres/pooler"] = err.Error()
		} else {
			res.fail("postgres/pooler", err)
		}
		cfg.logf("postgres pooler rows skipped: %s", res.Skipped["postgres/pooler"])
		return nil, nil
	}
	defer exec.Command(cfg.Python, filepath.Join(cfg.Repo, "tests", "pg", "pgbouncer.py"), "stop", dir).Run()
	var b struct {
		Port      int    `json:"port"`
		SocketDir string `json:"socket_dir"`
		PoolSize  int    `json:"pool_size"`
		Version   string `json:"version"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &b); err != nil {
		res.fail("postgres/pooler", err)
		return nil, nil
	}
	lim := &poolerLimits{PoolSize: b.PoolSize, Ops: 20}
	out, err := c.psqlDB("postgres", `SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int
		+ coalesce(current_setting('reserved_connections', true)::int, 0)`)
	if _, err2 := fmt.Sscanf(strings.ReplaceAll(out, "|", " "), "%d %d", &lim.MaxConnections, &lim.Reserved); err != nil || err2 != nil {
		res.fail("postgres/pooler", fmt.Errorf("the server's connection settings: %v %v", err, err2))
		return nil, nil
	}
	clients := []int{64, 256, 1000}
	if cfg.Quick {
		clients, lim.Ops = []int{16, 64}, 5
	}
	var rows []*poolerRun
	for _, n := range clients {
		for _, path := range []string{"pgbouncer", "direct"} {
			c.schemas++
			db := fmt.Sprintf("pooler_%d", c.schemas)
			if _, err := c.psqlDB("postgres", fmt.Sprintf(`CREATE DATABASE %q OWNER tira_pw`, db)); err != nil {
				cfg.logf("postgres pooler: %v", err)
				continue
			}
			host, port, mode := c.SocketDir, c.Port, ""
			if path == "pgbouncer" {
				host, port, mode = b.SocketDir, b.Port, "&pool_mode=transaction"
			}
			url := fmt.Sprintf("postgresql://tira_pw@/%s?host=%s&port=%d&pool_max_conns=1%s", db, host, port, mode)
			r := poolerRun1(c, url, db, path, n, lim.Ops)
			rows = append(rows, r)
			cfg.logf("postgres pooler %-9s clients=%-5d connected %d, refused (53300) %d, other open errors %d, opens %.1f s; "+
				"%.0f ops/s, lookup p50 %.0f us p99 %.0f us, record p99 %.0f us; server connections at start %d, peak %d "+
				"(all %d, %d samples); errors %d %s", path, n, r.Connected, r.Refused, r.OpenErrors, r.OpenS,
				r.OpsPerS, r.LookupP50US, r.LookupP99US, r.RecordP99US, r.ServerConAtStart, r.PeakServerCon,
				r.PeakServerAll, r.Samples, r.Errors, r.FirstError)
			if _, err := c.psqlDB("postgres", fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, db)); err != nil {
				cfg.logf("postgres pooler: %v", err)
			}
		}
	}
	return lim, rows
}

// poolerSampler counts the server's client connections, of database db
// and in all, every 10 ms over a connection of its own, until stopped.
type poolerSampler struct {
	conn     *pgx.Conn
	db       string
	mu       sync.Mutex
	peak     int
	peakAll  int
	samples  int
	failed   int
	firstErr error
	stop     chan struct{}
	finished chan struct{}
}

// sampleSQL counts the server's client backends: of database $1, and all.
const sampleSQL = `SELECT count(*) FILTER (WHERE datname = $1), count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`

// newSampler connects (as the superuser, on the server's socket) and
// starts sampling.
func newSampler(c *pgCluster, db string) (*poolerSampler, error) {
	conn, err := pgx.Connect(context.Background(), fmt.Sprintf("postgresql://postgres@/postgres?host=%s&port=%d", c.SocketDir, c.Port))
	if err != nil {
		return nil, err
	}
	s := &poolerSampler{conn: conn, db: db, stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(s.finished)
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return s, nil
}

// sample takes one sample (the connection is one: a sample at a time);
// the database's count of it, -1 when the query failed.
func (s *poolerSampler) sample() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n, all int
	if err := s.conn.QueryRow(context.Background(), sampleSQL, s.db).Scan(&n, &all); err != nil {
		s.failed++
		if s.firstErr == nil {
			s.firstErr = err
		}
		return -1
	}
	s.samples++
	s.peak, s.peakAll = max(s.peak, n), max(s.peakAll, all)
	return n
}

// close stops the sampling and closes the connection.
func (s *poolerSampler) close() {
	close(s.stop)
	<-s.finished
	s.conn.Close(context.Background())
}

// poolerRun1 runs n clients of ops operations each (80% lookups of
// preloaded keys, 20% records of new ones) on url.
func poolerRun1(c *pgCluster, url, db, path string, n, ops int) *poolerRun {
	ctx := context.Background()
	r := &poolerRun{Path: path, Clients: n}
	opts := core.Options{CPUModel: "bench", SlurmCPUs: "N/A"}
	src := "void pooler() {}"
	pre, err := core.Open(ctx, url, opts)
	if err != nil {
		r.OpenErrors, r.FirstError = n, err.Error()
		return r
	}
	const pool = 500
	ms := make([]core.Measurement, pool)
	for i := range ms {
		ms[i] = core.Measurement{Schedule: fmt.Sprintf("U(L0,%d,comps=['p'])", i), IsLegal: true, ExecutionTimes: []pyjson.Number{"1"}}
	}
	_, err = pre.RecordMany(ctx, "pooler", src, ms, false)
	pre.Close()
	if err != nil {
		r.OpenErrors, r.FirstError = n, err.Error()
		return r
	}
	smp, err := newSampler(c, db)
	if err != nil {
		r.OpenErrors, r.FirstError = n, "the sampler's connection: "+err.Error()
		return r
	}
	var mu sync.Mutex
	var lookups, records []time.Duration
	fail := func(err error, open bool) {
		mu.Lock()
		defer mu.Unlock()
		if r.FirstError == "" {
			r.FirstError = err.Error()
		}
		var pe *pgconn.PgError
		switch {
		case open && errors.As(err, &pe) && pe.Code == "53300": // too_many_connections
			r.Refused++
		case open:
			r.OpenErrors++
		default:
			r.Errors++
		}
	}
	var opened, done sync.WaitGroup
	start := make(chan struct{})
	t0 := time.Now()
	for w := 0; w < n; w++ {
		opened.Add(1)
		done.Add(1)
		go func(w int) {
			defer done.Done()
			st, err := core.Open(ctx, url, opts)
			opened.Done()
			if err != nil {
				fail(err, true)
				return
			}
			defer st.Close()
			mu.Lock()
			r.Connected++
			mu.Unlock()
			<-start
			var lk, rc []time.Duration
			for i := 0; i < ops; i++ {
				t := time.Now()
				if i%5 == 4 {
					_, err = st.Record(ctx, "pooler", src, core.Measurement{Schedule: fmt.Sprintf("U(L1,%d,comps=['w%d'])", i, w),
						IsLegal: true, ExecutionTimes: []pyjson.Number{"1"}}, false)
					rc = append(rc, time.Since(t))
				} else {
					_, err = st.Lookup(ctx, "pooler", src, fmt.Sprintf("U(L0,%d,comps=['p'])", (w*7+i)%pool))
					lk = append(lk, time.Since(t))
				}
				if err != nil {
					fail(err, false)
					return
				}
			}
			mu.Lock()
			lookups, records = append(lookups, lk...), append(records, rc...)
			r.Ops += len(lk) + len(rc)
			mu.Unlock()
		}(w)
	}
	opened.Wait() // the clock runs from here: every store that could open holds its connection
	r.OpenS = time.Since(t0).Seconds()
	r.ServerConAtStart = smp.sample()
	t0 = time.Now()
	close(start)
	done.Wait()
	el := time.Since(t0)
	smp.close()
	r.PeakServerCon, r.PeakServerAll, r.Samples, r.FailedSamples = smp.peak, smp.peakAll, smp.samples, smp.failed
	if smp.firstErr != nil && r.FirstError == "" {
		r.FirstError = "a sample: " + smp.firstErr.Error()
	}
	r.ElapsedS = el.Seconds()
	r.OpsPerS = float64(r.Ops) / el.Seconds()
	q := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Nanoseconds()) / 1e3
	}
	r.LookupP50US, r.LookupP99US, r.RecordP99US = q(lookups, 0.5), q(lookups, 0.99), q(records, 0.99)
	return r
}

// writePooler prints the pooler rows.
func writePooler(w io.Writer, pr *pgResults) {
	lim := pr.PoolerLimits
	if lim == nil || len(pr.Pooler) == 0 {
		return
	}
	fmt.Fprintf(w, "\n   Many clients: N Go clients, a store each (pool_max_conns=1, as N worker processes), role tira_pw (no superuser), through\n")
	fmt.Fprintf(w, "   PgBouncer (transaction pooling, %d server connections) or directly; server max_connections=%d, of which %d reserved for\n", lim.PoolSize, lim.MaxConnections, lim.Reserved)
	fmt.Fprintf(w, "   superusers, 1 the sampler's: %d for the clients. Every store opened before the clock starts, then %d ops each (80%% lookup\n", lim.MaxConnections-lim.Reserved-1, lim.Ops)
	fmt.Fprintf(w, "   hits, 20%% new records). refused: opens the server refused (53300: no slot; not retried). Server connections of the database,\n")
	fmt.Fprintf(w, "   sampled every 10 ms over a superuser connection opened first: once every open returned, and the peak. ops/s and p99 are\n")
	fmt.Fprintf(w, "   those of the connected clients; latencies in µs.\n")
	t := newTable("rl", "clients", "path", "connected", "refused", "other errors", "opens s", "ops/s", "lookup p50", "lookup p99", "record p99",
		"server conns at start", "server conns peak", "samples ok/all")
	for _, r := range pr.Pooler {
		t.add(fmt.Sprint(r.Clients), r.Path, fmt.Sprint(r.Connected), fmt.Sprint(r.Refused), fmt.Sprint(r.OpenErrors+r.Errors),
			fmt.Sprintf("%.1f", r.OpenS), fmt.Sprintf("%.0f", r.OpsPerS), fmtUS(r.LookupP50US), fmtUS(r.LookupP99US), fmtUS(r.RecordP99US),
			fmt.Sprint(r.ServerConAtStart), fmt.Sprint(r.PeakServerCon), fmt.Sprintf("%d/%d", r.Samples, r.Samples+r.FailedSamples))
	}
	t.write(w, "  ")
	for _, r := range pr.Pooler {
		if r.FirstError != "" {
			fmt.Fprintf(w, "   %s %d clients, first error: %s\n", r.Path, r.Clients, firstLine(r.FirstError))
		}
	}
}
