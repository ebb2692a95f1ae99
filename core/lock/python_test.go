package lock

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
)

var (
	pyOnce sync.Once
	pyPath string
)

// python3 returns the real interpreter behind "python3" (sys.executable, so
// that version-manager shims are not paid for on every call), or skips.
func python3(t *testing.T) string {
	t.Helper()
	pyOnce.Do(func() {
		if p, err := exec.LookPath("python3"); err == nil {
			out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
			if s := strings.TrimSpace(string(out)); err == nil && s != "" {
				pyPath = s
			} else {
				pyPath = p
			}
		}
	})
	if pyPath == "" {
		t.Skip("python3 not found")
	}
	return pyPath
}
