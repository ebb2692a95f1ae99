//go:build !failpoints

package failpoint

import "testing"

// A normal build must ignore TIRASTORE_FAILPOINTS entirely: the shipped
// library carries no test switches.
func TestOffBuildIgnoresTheEnvironment(t *testing.T) {
	t.Setenv("TIRASTORE_FAILPOINTS", LockDisabled+"=on;"+BeforeCommit+"=panic")
	if Compiled || Enabled(LockDisabled) {
		t.Fatal("a normal build honours TIRASTORE_FAILPOINTS")
	}
	Inject(BeforeCommit) // must not panic
}
