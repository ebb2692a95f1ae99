package lock

import (
	"path/filepath"
	"testing"
)

// physTempDir is a temporary directory with symlinks resolved (e.g. macOS
// /var -> /private/var), so that paths the code derives compare equal.
func physTempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}
