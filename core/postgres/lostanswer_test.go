package postgres_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/internal/pgtest"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/storage"
)

// commitCutter is a proxy on a Unix socket in front of the test cluster's.
// Armed, it forwards the next message of a client that holds a COMMIT to
// the server and then cuts that client's connection before the server's
// answer: the transaction commits, and the client cannot know it (a
// pooler restarted, a network cut at the wrong moment).
type commitCutter struct {
	dir   string
	armed atomic.Bool
	cuts  atomic.Int32
}

func newCommitCutter(t *testing.T, c *pgtest.Cluster) *commitCutter {
	t.Helper()
	dir, err := os.MkdirTemp("", "tscut-") // short: a socket's path has 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf(".s.PGSQL.%d", c.Port)
	ln, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); os.RemoveAll(dir) })
	p := &commitCutter{dir: dir}
	go func() {
		for {
			cl, err := ln.Accept()
			if err != nil {
				return
			}
			srv, err := net.Dial("unix", filepath.Join(c.SocketDir, name))
			if err != nil {
				cl.Close()
				continue
			}
			go p.serve(cl, srv)
		}
	}()
	return p
}

func (p *commitCutter) serve(cl, srv net.Conn) {
	var cut atomic.Bool
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := srv.Read(buf)
			if n > 0 && !cut.Load() {
				_, _ = cl.Write(buf[:n])
			}
			if err != nil {
				cl.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := cl.Read(buf)
		if n > 0 {
			if bytes.Contains(bytes.ToLower(buf[:n]), []byte("commit\x00")) && p.armed.CompareAndSwap(true, false) {
				cut.Store(true)
				_, _ = srv.Write(buf[:n])
				p.cuts.Add(1)
				time.Sleep(200 * time.Millisecond) // the server commits
				cl.Close()
				srv.Close()
				return
			}
			_, _ = srv.Write(buf[:n])
		}
		if err != nil {
			srv.Close()
			return
		}
	}
}

// url is u, a URL of the cluster's socket, through the proxy.
func (p *commitCutter) url(t *testing.T, u string, c *pgtest.Cluster) string {
	t.Helper()
	if !strings.Contains(u, "host="+c.SocketDir+"&") {
		t.Fatalf("no socket directory in %s", u)
	}
	return strings.Replace(u, "host="+c.SocketDir+"&", "host="+p.dir+"&", 1)
}

// A claims transaction whose COMMIT's answer is lost is run again, and
// the run again finds what the first committed (storage.Backend's
// UpdateClaims contract): the call succeeds, one row. Negative control:
// an Update, which is not run again, fails through the same cut, saying
// that the COMMIT's outcome is unknown, and its row was committed.
func TestClaimsRunAgainAfterALostCommitAnswer(t *testing.T) {
	c := pgtest.Need(t)
	p := newCommitCutter(t, c)
	b, _, err := postgres.Open(ctx, p.url(t, pgtest.URL(t), c), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	claim := func(key, token string) *storage.Claim {
		return &storage.Claim{Key: key, ProgramHash: "h", ProgramName: "conv", Schedule: key, Token: token,
			Hostname: "node1", PID: 42, LeaseSeconds: 60, ClaimedAt: "2026-01-01T00:00:00+00:00",
			RenewedAt: "2026-01-01T00:00:00+00:00"}
	}
	held := func(key string) *storage.Claim {
		t.Helper()
		var got map[string]*storage.Claim
		if err := b.View(ctx, "claims", func(r storage.Reader) (err error) { got, err = r.GetClaims([]string{key}); return err }); err != nil {
			t.Fatal(err)
		}
		return got[key]
	}

	p.armed.Store(true)
	err = b.Update(ctx, "put", func(w storage.Writer) error { return w.PutClaim(claim("control", "t0")) })
	if p.cuts.Load() != 1 || err == nil || !strings.Contains(err.Error(), "may or may not have been committed") {
		t.Fatalf("negative control: %d cuts, %v", p.cuts.Load(), err)
	}
	if c := held("control"); c == nil || c.Token != "t0" {
		t.Fatalf("negative control: the cut COMMIT did not commit: %+v", c)
	}

	runs, found := 0, false
	p.armed.Store(true)
	err = b.UpdateClaims(ctx, "claim", func(w storage.ClaimWriter) error {
		runs++
		got, err := w.GetClaims([]string{"k"})
		if err != nil {
			return err
		}
		if found = got["k"] != nil && got["k"].Token == "t1"; found {
			return nil
		}
		return w.PutClaim(claim("k", "t1"))
	})
	if err != nil || p.cuts.Load() != 2 || runs != 2 || !found {
		t.Fatalf("claims: %v after %d cuts, %d runs, found its own: %v", err, p.cuts.Load(), runs, found)
	}
	if c := held("k"); c == nil || c.Token != "t1" {
		t.Fatalf("claims: %+v", c)
	}
}

// A Reread whose connection is lost in the middle runs again, whole;
// negative control: a View of the same function fails.
func TestRereadRunsAgainAfterALostConnection(t *testing.T) {
	c := pgtest.Need(t)
	b, _, err := postgres.Open(ctx, pgtest.URL(t), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, view := range []bool{false, true} {
		runs := 0
		fn := func(r storage.Reader) error {
			runs++
			var pid int64
			if _, err := postgres.QueryOne(r, "SELECT pg_backend_pid()", &pid); err != nil {
				return err
			}
			if runs == 1 {
				c.PSQL(t, fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid))
			}
			_, err := postgres.QueryOne(r, "SELECT 1", new(int64))
			return err
		}
		if view {
			err = b.View(ctx, "view", fn)
		} else {
			err = b.Reread(ctx, "reread", fn)
		}
		if view && (err == nil || runs != 1) {
			t.Fatalf("negative control: View ran %d times: %v", runs, err)
		}
		if !view && (err != nil || runs != 2) {
			t.Fatalf("Reread ran %d times: %v", runs, err)
		}
	}
}
