//go:build failpoints

package failpoint

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestSwitchesAndActions(t *testing.T) {
	t.Setenv("TIRASTORE_FAILPOINTS", " lock-disabled = on ; before-commit=sleep(30);after-commit=panic")
	if !Compiled || !Enabled(LockDisabled) || Enabled(InterruptDisabled) {
		t.Fatal("switches not parsed")
	}
	start := time.Now()
	Inject(BeforeCommit)
	if time.Since(start) < 30*time.Millisecond {
		t.Error("sleep(30) did not sleep")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic action did not panic")
			}
		}()
		Inject(AfterCommit)
	}()
	// Re-read when the variable changes (a test arms points late).
	t.Setenv("TIRASTORE_FAILPOINTS", "")
	if Enabled(LockDisabled) {
		t.Error("stale failpoint configuration")
	}
	Inject(AfterCommit) // disarmed: no panic
}

func TestKillIsACrash(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Inject(DBOpened)
		os.Exit(0) // not reached
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillIsACrash$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", "TIRASTORE_FAILPOINTS=db-opened=kill")
	err := cmd.Run()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err == nil || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child was not SIGKILLed: %v", err)
	}
}
