package postgres_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tirastore/tirastore/core/internal/pgtest"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/storage"
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

// createdSchema is a fresh schema of the test cluster in which this
// backend created its tables, and a connection of the test's own to it
// (closed when the test ends).
func createdSchema(t *testing.T) (url string, conn *pgx.Conn) {
	t.Helper()
	url = pgtest.URL(t)
	b, _, err := postgres.Open(ctx, url, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if conn, err = pgx.Connect(ctx, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return url, conn
}

// A database of layout 1 (config entries without a namespace) is migrated
// by the next opener: every entry is kept, in the namespace "", and the
// same key can then be put in another namespace.
func TestLayoutOneConfigTableIsMigrated(t *testing.T) {
	url, conn := createdSchema(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The table and index as layout 1 created them.
	exec(`DROP TABLE config_entries`)
	exec(`CREATE TABLE config_entries (
    key            TEXT COLLATE "C" PRIMARY KEY,
    device         TEXT COLLATE "C" NOT NULL,
    op_id          TEXT COLLATE "C" NOT NULL,
    call_key       TEXT COLLATE "C" NOT NULL,
    value_json     TEXT COLLATE "C" NOT NULL,
    hostname       TEXT COLLATE "C" NOT NULL,
    username       TEXT COLLATE "C" NOT NULL,
    creation_date  TEXT COLLATE "C" NOT NULL,
    update_date    TEXT COLLATE "C" NOT NULL
)`)
	exec(`CREATE INDEX idx_config_entries_device_op_id ON config_entries (device, op_id)`)
	for i := 0; i < 3; i++ {
		exec(`INSERT INTO config_entries VALUES ($1, 'gpu:0', 'op', $2, $3, 'h', 'u', 'c', 'u')`,
			fmt.Sprintf("gpu:0|op|k%d", i), fmt.Sprintf("k%d", i), fmt.Sprint(i))
	}
	exec(`UPDATE db_meta SET value = '1' WHERE key = 'postgres_schema'`)

	for round := 0; round < 2; round++ { // the second open finds the layout current
		b, _, err := postgres.Open(ctx, url, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := b.View(ctx, "list", func(r storage.Reader) error {
			return r.EachConfig(storage.ConfigFilter{AllNamespaces: true}, func(e *storage.ConfigEntry) error {
				got = append(got, e.Namespace+"/"+e.Key+"="+e.ValueJSON)
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		want := []string{"/gpu:0|op|k0=0", "/gpu:0|op|k1=1", "/gpu:0|op|k2=2"}
		if round == 1 {
			want = append(want, "fa/gpu:0|op|k1=9")
		}
		if !slices.Equal(got, want) {
			t.Fatalf("open %d: entries %q; want %q", round, got, want)
		}
		if round == 0 {
			if err := b.Update(ctx, "put", func(w storage.Writer) error {
				ok, err := w.PutConfig(&storage.ConfigEntry{Namespace: "fa", Key: "gpu:0|op|k1", Device: "gpu:0", OpID: "op",
					CallKey: "k1", ValueJSON: "9", Hostname: "h", Username: "u", CreationDate: "c", UpdateDate: "u"}, false)
				if err == nil && !ok {
					err = fmt.Errorf("the put in another namespace wrote nothing")
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		b.Close()
	}
	var layout string
	var pk, indexes []string
	if err := conn.QueryRow(ctx, `SELECT value FROM db_meta WHERE key = 'postgres_schema'`).Scan(&layout); err != nil || layout != "4" {
		t.Fatalf("postgres_schema %q, %v; want 4", layout, err)
	}
	var runsTables int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
    WHERE table_schema = current_schema() AND table_name IN ('record_runs', 'run_contexts')`).Scan(&runsTables); err != nil || runsTables != 2 {
		t.Fatalf("runs tables after the migrations: %d, %v; want 2", runsTables, err)
	}
	if err := conn.QueryRow(ctx, `SELECT array_agg(a.attname::text ORDER BY k.n) FROM pg_index i
    CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
    WHERE i.indrelid = 'config_entries'::regclass AND i.indisprimary`).Scan(&pk); err != nil ||
		!slices.Equal(pk, []string{"namespace", "key"}) {
		t.Fatalf("primary key %q, %v; want (namespace, key)", pk, err)
	}
	if err := conn.QueryRow(ctx, `SELECT array_agg(indexname::text ORDER BY indexname) FROM pg_indexes
    WHERE tablename = 'config_entries' AND schemaname = current_schema()`).Scan(&indexes); err != nil ||
		!slices.Equal(indexes, []string{"config_entries_pkey", "idx_config_entries_namespace_device_op_id"}) {
		t.Fatalf("indexes %q, %v", indexes, err)
	}
}

// TestRecordColumnsAreTheTables: the records table this backend creates
// has the columns its statements are built from (sqlite.RecordColumns, the
// original's, in their order), then its own rowid.
func TestRecordColumnsAreTheTables(t *testing.T) {
	_, conn := createdSchema(t)
	rows, err := conn.Query(ctx, `SELECT column_name FROM information_schema.columns
  WHERE table_schema = current_schema() AND table_name = 'records' ORDER BY ordinal_position`)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(sqlite.RecordColumns), "rowid"); !slices.Equal(cols, want) {
		t.Fatalf("records has %v, want %v", cols, want)
	}
}
