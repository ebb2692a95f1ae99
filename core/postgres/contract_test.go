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
