package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/pyjson"
)

// Transaction pooling, part of the postgres section: Go clients (each a
// store of its own, as a worker process would be, with a pool of one
// connection) at -pooler-clients counts run the 80/20 mix through a
// throwaway PgBouncer in transaction pooling mode (tests/pg/pgbouncer.py,
// 20 server connections) and directly against the server. Each run gets
// a new database; the server's connections of the clients are sampled
// (pg_stat_activity) and their peak reported. Directly, clients beyond
// the server's max_connections fail to connect: the run counts them as
// errors (that is the figure).
//
// results.json: postgres.pooler[] (one row per path and client count).

// poolerRun is one run of the pooler rows.
type poolerRun struct {
	Path          string  `json:"path"` // "pgbouncer" or "direct"
	Clients       int     `json:"clients"`
	Ops           int     `json:"ops"`
	Errors        int     `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
	OpsPerS       float64 `json:"ops_per_s"`
	LookupP50US   float64 `json:"lookup_p50_us"`
	LookupP99US   float64 `json:"lookup_p99_us"`
	RecordP99US   float64 `json:"record_p99_us"`
	PeakServerCon int     `json:"peak_server_connections"`
	ElapsedS      float64 `json:"elapsed_s"`
}

// poolerRows runs the pooler rows; nil when PgBouncer cannot be started.
func poolerRows(cfg *config, c *pgCluster, res *results) []*poolerRun {
	dir := filepath.Join(c.Base, "bouncer")
	cmd := exec.Command(cfg.Python, filepath.Join(cfg.Repo, "tests", "pg", "pgbouncer.py"), "start", dir, c.Base)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		res.Skipped["postgres/pooler"] = fmt.Sprintf("pgbouncer.py start: %v: %s", err, lastLines(stderr.String(), 3))
		cfg.logf("postgres pooler rows skipped: %s", res.Skipped["postgres/pooler"])
		return nil
	}
	defer exec.Command(cfg.Python, filepath.Join(cfg.Repo, "tests", "pg", "pgbouncer.py"), "stop", dir).Run()
	var b struct {
		Port      int    `json:"port"`
		SocketDir string `json:"socket_dir"`
		Version   string `json:"version"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &b); err != nil {
		res.Skipped["postgres/pooler"] = err.Error()
		return nil
	}
	clients := []int{64, 256, 1000}
	ops := 20
	if cfg.Quick {
		clients, ops = []int{16, 64}, 5
	}
	var out []*poolerRun
	for _, n := range clients {
		for _, path := range []string{"pgbouncer", "direct"} {
			c.schemas++
			db := fmt.Sprintf("pooler_%d", c.schemas)
			if _, err := c.psqlDB("postgres", fmt.Sprintf(`CREATE DATABASE %q`, db)); err != nil {
				cfg.logf("postgres pooler: %v", err)
				continue
			}
			url := fmt.Sprintf("postgresql://postgres@/%s?host=%s&port=%d&pool_max_conns=1", db, c.SocketDir, c.Port)
			if path == "pgbouncer" {
				url = fmt.Sprintf("postgresql://postgres@/%s?host=%s&port=%d&pool_max_conns=1&pool_mode=transaction", db, b.SocketDir, b.Port)
			}
			r := poolerRun1(cfg, c, url, db, path, n, ops)
			out = append(out, r)
			cfg.logf("postgres pooler %-9s clients=%-5d %7.0f ops/s, lookup p50 %.0f us p99 %.0f us, record p99 %.0f us, "+
				"server connections (peak) %d, errors %d %s", path, n, r.OpsPerS, r.LookupP50US, r.LookupP99US, r.RecordP99US,
				r.PeakServerCon, r.Errors, r.FirstError)
			_, _ = c.psqlDB("postgres", fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, db))
		}
	}
	return out
}

// poolerRun1 runs n clients of ops operations each (80% lookups of
// preloaded keys, 20% records of new ones) on url.
func poolerRun1(cfg *config, c *pgCluster, url, db, path string, n, ops int) *poolerRun {
	ctx := context.Background()
	r := &poolerRun{Path: path, Clients: n}
	opts := core.Options{CPUModel: "bench", SlurmCPUs: "N/A"}
	src := "void pooler() {}"
	pre, err := core.Open(ctx, url, opts)
	if err != nil {
		r.Errors, r.FirstError = n, err.Error()
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
		r.Errors, r.FirstError = n, err.Error()
		return r
	}
	stop := make(chan struct{})
	peak := make(chan int)
	go func() {
		m := 0
		for {
			select {
			case <-stop:
				peak <- m
				return
			case <-time.After(100 * time.Millisecond):
			}
			out, err := c.psqlDB("postgres", fmt.Sprintf(`SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND backend_type = 'client backend'`, db))
			if v, err2 := strconv.Atoi(strings.TrimSpace(out)); err == nil && err2 == nil && v > m {
				m = v
			}
		}
	}()
	var mu sync.Mutex
	var lookups, records []time.Duration
	var wg sync.WaitGroup
	start := make(chan struct{})
	t0 := time.Now()
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			fail := func(err error) {
				mu.Lock()
				if r.Errors == 0 {
					r.FirstError = err.Error()
				}
				r.Errors++
				mu.Unlock()
			}
			st, err := core.Open(ctx, url, opts)
			if err != nil {
				fail(err)
				return
			}
			defer st.Close()
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
					fail(err)
					return
				}
			}
			mu.Lock()
			lookups, records = append(lookups, lk...), append(records, rc...)
			r.Ops += len(lk) + len(rc)
			mu.Unlock()
		}(w)
	}
	time.Sleep(200 * time.Millisecond) // the opens first: the clock runs from the start signal
	t0 = time.Now()
	close(start)
	wg.Wait()
	el := time.Since(t0)
	close(stop)
	r.PeakServerCon = <-peak
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
	_ = os.Getpid
	return r
}
