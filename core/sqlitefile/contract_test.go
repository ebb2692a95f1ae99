package sqlitefile_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/storage/storagetest"
)

// The shared-file backend keeps the storage contract.
func TestStorageContract(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, func(t *testing.T) storage.Backend {
		path := filepath.Join(t.TempDir(), "cache.db")
		b, _, err := sqlitefile.Open(ctx, path, storage.Config{
			StaleLockTimeout: time.Minute, LockTimeout: time.Minute,
			NewMeta: map[string]string{"cpu_model": "X", "slurm_cpus": "N/A", "created_at": "2026-01-01T00:00:00"},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}
