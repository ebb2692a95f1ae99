//go:build !linux

package runctx

import "runtime"

// affinity assumes runtime.NumCPU() CPUs from 0 where there is no
// affinity mask to read.
func affinity() (cores, first int) { return runtime.NumCPU(), 0 }
