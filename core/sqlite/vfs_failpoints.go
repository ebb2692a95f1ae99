//go:build failpoints

package sqlite

// The failpoints build compiles vfs.c's failpoint (failpoint.DBWrite) in.

// #cgo CFLAGS: -DTIRASTORE_FAILPOINTS
import "C"
