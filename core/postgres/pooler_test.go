package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/internal/pgtest"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/storage/storagetest"
)

// The backend keeps the storage contract through PgBouncer in
// transaction pooling mode (pool_mode=transaction).
func TestStorageContractThroughPgBouncer(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		url, _ := pgtest.Database(t)
		b, _, err := postgres.Open(ctx, url, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}

// One claimer per key through the pooler: the key locks are
// transaction-scoped advisory locks, which stay with the transaction
// whichever server connection runs it.
func TestOneClaimerPerKeyThroughPgBouncer(t *testing.T) {
	url, _ := pgtest.Database(t)
	for s, n := range claimRace(t, url, 8, 30) {
		if n != 1 {
			t.Errorf("%s claimed %d times", s, n)
		}
	}
}

// 16 openers of a new database at once through the pooler create its
// schema once, each in the schema lock's transaction.
func TestSchemaCreationThroughPgBouncer(t *testing.T) {
	url, direct := pgtest.Database(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _, err := postgres.Open(ctx, url, testConfig())
			if err == nil {
				err = b.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM db_meta WHERE key = 'schema_version'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("db_meta: %d schema_version rows, %v", n, err)
	}
}

// The engine's settings hold inside its transactions and are gone after
// them: a plain session through the pooler, which gets the server
// connections the engine used, sees the server's defaults.
func TestSettingsLastOneTransactionThroughPgBouncer(t *testing.T) {
	url, _ := pgtest.Database(t, "options=-cstatement_timeout%3D4321")
	b, _, err := postgres.Open(ctx, url, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := 0; i < 40; i++ {
		err := b.View(ctx, "probe", func(r storage.Reader) error {
			var got string
			ok, err := postgres.QueryOne(r, "SELECT current_setting('statement_timeout') || ' ' || current_setting('idle_in_transaction_session_timeout')", &got)
			if err == nil && (!ok || got != "4321ms 30s") {
				err = fmt.Errorf("inside a transaction: %q", got)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	w := &storage.Write{Hash: strings.Repeat("a", 64), Name: "p", Source: "s", Hostname: "h", Username: "u",
		Rows: []storage.Row{{Key: "k", Schedule: "S", ResultJSON: `{"is_legal": true}`}}}
	if _, err := b.Write(ctx, w); err != nil {
		t.Fatal(err)
	}
	plain := strings.Replace(url, "&options=-cstatement_timeout%3D4321", "", 1)
	plain = strings.Replace(plain, "&pool_mode=transaction", "", 1)
	cfg, err := pgx.ParseConfig(plain)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	for i := 0; i < 40; i++ {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var st, idle string
		err = conn.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&st, &idle)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st != "0" || idle != "0" {
			t.Fatalf("a setting outlived the engine's transaction: statement_timeout %s, idle_in_transaction_session_timeout %s", st, idle)
		}
	}
}

// Negative control: pgx's default query mode, prepared statements cached
// per connection (cache_statement), fails through transaction pooling
// (PgBouncer before 1.21, or without max_prepared_statements): the
// statement prepared on one server connection is missing on the next.
func TestNegativeControlCachedStatementsFailThroughPgBouncer(t *testing.T) {
	url, _ := pgtest.Database(t, "default_query_exec_mode=cache_statement")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			b, _, err := postgres.Open(ctx, url, testConfig())
			if err != nil {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
				return
			}
			defer b.Close()
			for i := 0; i < 100; i++ {
				if _, err := b.Lookup(ctx, "", fmt.Sprintf("k%d-%d", w, i)); err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if len(failures) == 0 {
		t.Fatal("cached prepared statements worked through transaction pooling: the tests above cannot tell the query modes apart")
	}
	for _, err := range failures {
		if m := err.Error(); !strings.Contains(m, "prepared statement") {
			t.Errorf("unexpected failure: %v", err)
		}
	}
}

func TestPoolModeInTheURL(t *testing.T) {
	for _, c := range []struct{ query, want string }{
		{"pool_mode=statement", "statement pooling forbids"},
		{"pool_mode=bogus", `pool_mode="bogus"`},
		{"pool_mode=transaction&options=-csearch_path%3Dx", "search_path, a session setting"},
		{"pool_mode=transaction&search_path=x", "parameter search_path would be a session setting"},
		{"pool_mode=transaction&options=-X", "cannot pass"},
	} {
		_, _, err := postgres.Open(ctx, "postgresql://u@127.0.0.1:1/db?"+c.query, testConfig())
		var ae *apierr.Error
		if err == nil || !errors.As(err, &ae) || ae.Kind != apierr.KindValue || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a value error with %q", c.query, err, c.want)
		}
	}
}

func TestTransactionPoolingBeginsWithTheSettings(t *testing.T) {
	got := postgres.BeginQuery(t, "postgresql://u@h/db?pool_mode=transaction&lock_timeout=5s&options=-cstatement_timeout%3D1000",
		pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	want := "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL idle_in_transaction_session_timeout = '30000'; " +
		"SET LOCAL lock_timeout = '5s'; SET LOCAL statement_timeout = '1000'"
	if got != want {
		t.Errorf("BEGIN:\n got %s\nwant %s", got, want)
	}
	if got := postgres.BeginQuery(t, "postgresql://u@h/db", pgx.TxOptions{}); got != "" {
		t.Errorf("session mode: BEGIN %q, want pgx's own", got)
	}
}
