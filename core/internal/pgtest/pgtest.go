// Package pgtest gives Go tests a real PostgreSQL server: a throwaway
// cluster that tests/pg/pgcluster.py makes with initdb and starts on a
// socket of its own, once per test binary (Main), and a fresh schema of
// it per test (URL). No cluster of the machine's own is used.
//
// Without PostgreSQL installed the tests that need it skip, except under
// CI=true, where they fail: CI installs it (.ci/run). It is imported by
// _test.go files only.
package pgtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Cluster is a running throwaway cluster (pgcluster.py's JSON).
type Cluster struct {
	Base      string `json:"base"`
	BinDir    string `json:"bindir"`
	Port      int    `json:"port"`
	SocketDir string `json:"socket_dir"`
	// URL is the superuser's on the socket; TCPURL tira_pw's, with its
	// password, over TCP without TLS.
	URL      string `json:"url"`
	TCPURL   string `json:"tcp_url"`
	Cert     string `json:"cert"`
	Password string `json:"password"`
}

var (
	cluster *Cluster
	why     string // why there is none
	// missing says the cluster's script found PostgreSQL not installed
	// (its exit status 3): only then may a test skip. A failure of an
	// installed PostgreSQL, or of the script, fails the tests.
	missing bool
	schemas atomic.Int64
)

// notInstalled reports whether err is the exit status 3 by which
// pgcluster.py and pgbouncer.py say a program they need is not installed.
func notInstalled(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit) && exit.ExitCode() == 3
}

// script is tests/pg/pgcluster.py of this source tree.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "tests", "pg", "pgcluster.py")
}

func python() string {
	if p := os.Getenv("TIRASTORE_TEST_PYTHON"); p != "" {
		return p
	}
	return "python3"
}

// Main runs the test binary's tests with a cluster started for them, and
// removes it afterwards.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "tirastore-pgtest-")
	if err == nil {
		var out []byte
		cmd := exec.Command(python(), script(), "start", dir)
		cmd.Stderr = os.Stderr
		if out, err = cmd.Output(); err == nil {
			var c Cluster
			if err = json.Unmarshal(out, &c); err == nil {
				cluster = &c
			}
		}
	}
	if err != nil {
		why = fmt.Sprintf("no PostgreSQL test cluster: %v", err)
		missing = notInstalled(err)
	}
	code := m.Run()
	if bouncer != nil {
		_ = exec.Command(python(), bouncerScript(), "stop", bouncer.Base).Run()
	}
	if cluster != nil {
		_ = exec.Command(python(), script(), "stop", dir).Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// Need returns the cluster, or skips t when PostgreSQL is not installed
// (fails it under CI=true, and whenever the cluster failed to start).
func Need(t testing.TB) *Cluster {
	t.Helper()
	if cluster == nil {
		if os.Getenv("CI") == "true" || !missing {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	return cluster
}

// URL is the URL of a new, empty schema for t (first on the search_path),
// dropped when t ends.
func URL(t testing.TB) string {
	c := Need(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), schemas.Add(1))
	c.PSQL(t, fmt.Sprintf(`CREATE SCHEMA %q`, name))
	t.Cleanup(func() { _, _ = c.psql(fmt.Sprintf(`DROP SCHEMA IF EXISTS %q CASCADE`, name)) })
	return c.URL + "&options=-csearch_path%3D" + name
}

// PSQL runs sql as the superuser in the database tira and returns its
// unaligned output; a failure fails t.
func (c *Cluster) PSQL(t testing.TB, sql string) string {
	t.Helper()
	out, err := c.psql(sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (c *Cluster) psql(sql string) (string, error) {
	cmd := exec.Command(filepath.Join(c.BinDir, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
		"-h", c.SocketDir, "-p", fmt.Sprint(c.Port), "-U", "postgres", "-d", "tira", "-c", sql)
	if _, err := os.Stat(cmd.Path); err != nil {
		cmd.Path, _ = exec.LookPath("psql")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %q: %v: %s", sql, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Restart restarts the server (mode "fast" or "immediate").
func (c *Cluster) Restart(t testing.TB, mode string) {
	t.Helper()
	if out, err := exec.Command(python(), script(), "restart", c.Base, "--mode", mode).CombinedOutput(); err != nil {
		t.Fatalf("restart: %v: %s", err, out)
	}
}

// Bouncer is a running throwaway PgBouncer (tests/pg/pgbouncer.py's
// JSON) in front of the cluster, in transaction pooling mode.
type Bouncer struct {
	Base      string `json:"base"`
	Port      int    `json:"port"`
	SocketDir string `json:"socket_dir"`
	PoolSize  int    `json:"pool_size"`
	Version   string `json:"version"`
}

var (
	bouncer     *Bouncer
	bouncerOnce sync.Once
	bouncerWhy  string
	// bouncerMissing: pgbouncer.py's exit status 3, as missing for the
	// cluster.
	bouncerMissing bool
	databases      atomic.Int64
)

func bouncerScript() string { return filepath.Join(filepath.Dir(script()), "pgbouncer.py") }

// NeedBouncer returns the PgBouncer of the test binary, started on first
// use (Main stops it), or skips t (fails it under CI=true) when PgBouncer
// or PostgreSQL is not installed.
func NeedBouncer(t testing.TB) *Bouncer {
	t.Helper()
	c := Need(t)
	bouncerOnce.Do(func() {
		dir := filepath.Join(c.Base, "bouncer")
		cmd := exec.Command(python(), bouncerScript(), "start", dir, c.Base)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err == nil {
			var b Bouncer
			if err = json.Unmarshal(out, &b); err == nil {
				bouncer = &b
			}
		}
		if err != nil {
			bouncerWhy = fmt.Sprintf("no PgBouncer: %v", err)
			bouncerMissing = notInstalled(err)
		}
	})
	if bouncer == nil {
		if os.Getenv("CI") == "true" || !bouncerMissing {
			t.Fatal(bouncerWhy)
		}
		t.Skip(bouncerWhy)
	}
	return bouncer
}

// Database creates a new database for t (dropped when t ends) and
// returns its URL through the PgBouncer, with pool_mode=transaction and
// params (name=value pairs, already escaped), and its direct URL.
// Databases, not schemas: a schema is chosen by a session setting
// (search_path), which transaction pooling does not carry.
func Database(t testing.TB, params ...string) (pooled, direct string) {
	t.Helper()
	c := Need(t)
	b := NeedBouncer(t)
	name := fmt.Sprintf("d%d_%d", os.Getpid(), databases.Add(1))
	c.PSQL(t, fmt.Sprintf(`CREATE DATABASE %q`, name))
	t.Cleanup(func() { _, _ = c.psql(fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, name)) })
	q := "?host=" + b.SocketDir + "&port=" + fmt.Sprint(b.Port) + "&pool_mode=transaction"
	for _, p := range params {
		q += "&" + p
	}
	return "postgresql://postgres@/" + name + q,
		"postgresql://postgres@/" + name + "?host=" + c.SocketDir + "&port=" + fmt.Sprint(c.Port)
}

// Restart stops the PgBouncer at once (its clients cut off mid-call) and
// starts it again.
func (b *Bouncer) Restart(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(python(), bouncerScript(), "restart", b.Base).CombinedOutput(); err != nil {
		t.Fatalf("pgbouncer restart: %v: %s", err, out)
	}
}
