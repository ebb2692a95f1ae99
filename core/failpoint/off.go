//go:build !failpoints

package failpoint

// Inject does nothing in a normal build.
func Inject(name string) {}

// Enabled is always false in a normal build.
func Enabled(name string) bool { return false }

// Compiled reports whether this build honours TIRASTORE_FAILPOINTS.
const Compiled = false
