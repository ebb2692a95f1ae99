package main

import (
	"os"
	"runtime"

	"github.com/tirastore/tirastore/core/tuning"
)

// init gives the Go runtime of the host process tuning.HostProcs Ps (see
// there why), unless the host's environment sets GOMAXPROCS, which the
// runtime has then applied already and which is left as the user chose.
func init() {
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(tuning.HostProcs)
	}
}
