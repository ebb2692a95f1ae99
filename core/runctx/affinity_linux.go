package runctx

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// schedGetaffinity reads the CPU affinity of the calling thread
// (replaceable by tests).
var schedGetaffinity = unix.SchedGetaffinity

// affinity returns how many CPUs this process may run on and the first of
// them. Without an affinity mask it assumes runtime.NumCPU() CPUs from 0.
func affinity() (cores, first int) {
	var set unix.CPUSet
	if err := schedGetaffinity(0, &set); err == nil {
		if n := set.Count(); n > 0 {
			for i := 0; i < 8*int(unsafe.Sizeof(set)); i++ {
				if set.IsSet(i) {
					return n, i
				}
			}
		}
	}
	return runtime.NumCPU(), 0
}
