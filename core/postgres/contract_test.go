package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/tirastore/tirastore/core/internal/pgtest"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/storage/storagetest"
	"github.com/tirastore/tirastore/core/tuning"
)

var ctx = context.Background()

func TestMain(m *testing.M) { pgtest.Main(m) }

func testConfig() storage.Config {
	return storage.Config{
		StaleLockTimeout: time.Minute, LockTimeout: time.Minute,
		NewMeta: map[string]string{"cpu_model": "X", "slurm_cpus": "N/A", "created_at": "2026-01-01T00:00:00"},
	}
}

// The PostgreSQL backend keeps the storage contract.
func TestStorageContract(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		b, _, err := postgres.Open(ctx, pgtest.URL(t), testConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}

func TestConfigureReadsTheUsersTimeouts(t *testing.T) {
	for _, c := range []struct {
		options string
		want    time.Duration
	}{
		{"", 70 * time.Second},
		{"-cstatement_timeout=1000", 11 * time.Second},
		{"-c statement_timeout=2s", 12 * time.Second},
		{"--statement-timeout=1min -csearch_path=x", 70 * time.Second},
		{"-cstatement_timeout=0", 0},
	} {
		if got := postgres.ClientDeadline(t, c.options); got != c.want {
			t.Errorf("options %q: client deadline %v, want %v", c.options, got, c.want)
		}
	}
}

// A backup and a check read the records a page at a time
// (tuning.ServerScanPage): every row of a table larger than a page is
// read once, in insertion order.
func TestWholeTableReadsPage(t *testing.T) {
	url := pgtest.URL(t)
	b, _, err := postgres.Open(ctx, url, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n := tuning.ServerScanPage + 50
	w := &storage.Write{Hash: strings.Repeat("a", 64), Name: "big", Source: "src", Hostname: "h", Username: "u"}
	for i := 0; i < n; i++ {
		w.Rows = append(w.Rows, storage.Row{Key: fmt.Sprintf("k%06d", n-i), Schedule: fmt.Sprintf("U(L0,%d)", i),
			ResultJSON: `{"is_legal":true,"execution_times":[1.0]}`})
	}
	if got, err := b.Write(ctx, w); err != nil || got != n {
		t.Fatalf("write: %d, %v", got, err)
	}
	pgtest.Need(t).PSQL(t, "UPDATE "+schemaOf(url)+".records SET result_json = 'not json' WHERE key = 'k000001'")
	var check *storage.TableCheck
	if err := b.View(ctx, "check", func(r storage.Reader) (err error) { check, err = r.CheckTables(); return err }); err != nil {
		t.Fatal(err)
	}
	if check.BadResults != 1 || check.Orphans != 0 {
		t.Fatalf("check: %+v, want 1 bad result", check)
	}
	path := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil { // the API layer creates it
		t.Fatal(err)
	}
	if err := b.Backup(ctx, path); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT schedule FROM records ORDER BY rowid")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("U(L0,%d)", i); s != want {
			t.Fatalf("row %d of the copy: %s, want %s (insertion order)", i, s, want)
		}
		i++
	}
	if i != n {
		t.Fatalf("the copy has %d records, want %d", i, n)
	}
}

// schemaOf is the schema a pgtest URL puts first on the search_path.
func schemaOf(url string) string {
	_, s, _ := strings.Cut(url, "search_path%3D")
	return `"` + s + `"`
}
