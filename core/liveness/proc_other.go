//go:build unix && !linux

package liveness

import "errors"

// Without /proc a process records no identity, so the dead-holder rule
// never applies and records are judged by staleness alone.

func self() Process { return Process{} }

func procStartTime(pid int) (uint64, error) { return 0, errors.New("liveness: no /proc") }

func probePID(pid int) pidState { return pidUnknown }
