// Package environ is how the engine reads environment variables.
//
// A Go runtime copies the process environment once, when it starts. Inside
// libtirastore.so that is when the host program loads the library, so a
// variable the host sets later (Python's os.environ["SLURM_CPUS_PER_TASK"] =
// ..., which calls putenv) would be invisible to os.Getenv, while the
// original library saw it. The C layer therefore replaces Lookup with a
// getenv(3) of the live C environment; pure Go programs keep os.LookupEnv.
package environ

import "os"

// Lookup returns the value of an environment variable and whether it is set.
var Lookup = os.LookupEnv

// Get returns the value of an environment variable, "" when unset.
func Get(name string) string {
	v, _ := Lookup(name)
	return v
}
