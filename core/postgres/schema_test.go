package postgres_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tirastore/tirastore/core/internal/pgtest"
	"github.com/tirastore/tirastore/core/postgres"
)

// schemaCreations stages the race of workers opening a new database at
// once: a first opener takes the schema lock and holds it until a second
// opener, which found no tables, waits for it; then the first creates the
// schema and commits, and the second goes on. It returns how many times
// the DDL ran.
func schemaCreations(t *testing.T, stale bool) int64 {
	t.Helper()
	url := pgtest.URL(t)
	var creations atomic.Int64
	locked := make(chan struct{})
	release := make(chan struct{})
	var first sync.Once
	restore := postgres.SchemaSteps(func(step string) {
		switch step {
		case "locked":
			first.Do(func() { close(locked); <-release })
		case "create":
			creations.Add(1)
		}
	}, stale)
	defer restore()

	errs := make(chan error, 2)
	open := func() {
		b, _, err := postgres.Open(ctx, url, testConfig())
		if err == nil {
			b.Close()
		}
		errs <- err
	}
	go open()
	<-locked
	go open()

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		// A bigint key shows as its high and low halves (objsubid 1).
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
    AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1`,
			int64(postgres.SchemaLock>>32), int64(postgres.SchemaLock&0xffffffff)).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(end) {
			close(release)
			t.Fatal("the second opener never waited for the schema lock")
		}
	}
	close(release)
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return creations.Load()
}

// An opener that waited for the schema lock while another created the
// schema sees the tables and runs no DDL: CREATE INDEX IF NOT EXISTS
// would wait for the table locks of writers already at work, a deadlock
// with a writer that waits for one of its own. Negative control: checked
// with to_regclass, which answers from the session's catalog cache, the
// waiter runs the DDL again.
func TestOpenerThatWaitedForTheCreatorRunsNoDDL(t *testing.T) {
	if n := schemaCreations(t, false); n != 1 {
		t.Fatalf("the DDL ran %d times, want once", n)
	}
}

func TestNegativeControlStaleCheckRunsTheDDLAgain(t *testing.T) {
	if n := schemaCreations(t, true); n != 2 {
		t.Fatalf("with the stale check the DDL ran %d times, want twice: the test above cannot tell", n)
	}
}
