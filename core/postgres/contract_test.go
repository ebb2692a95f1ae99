package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/internal/pgtest"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/storage/storagetest"
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
