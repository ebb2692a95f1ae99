//go:build failpoints

package sqlite

// The failpoints build compiles vfs.c's failpoint (failpoint.DBWrite) in.

// #cgo CFLAGS: -DTIRASTORE_FAILPOINTS
import "C"

import "github.com/tirastore/tirastore/core/failpoint"

// tirastoreFailpointOn tells vfs.c whether the switch name is on (the
// negative controls of the shared-directory tests, see trust.go).
//
//export tirastoreFailpointOn
func tirastoreFailpointOn(name *C.char) C.int {
	if failpoint.Enabled(C.GoString(name)) {
		return 1
	}
	return 0
}
