//go:build unix && !linux

package lock

import "errors"

// Without /proc a holder records no process identity, so the dead-holder
// rule never applies and locks are judged by staleness alone.

type procIdentity struct {
	startTime uint64
	bootID    string
	pidNS     uint64
}

func self() procIdentity { return procIdentity{} }

var errNoProcess = errors.New("no such process")

func procStartTime(pid int) (uint64, error) { return 0, errors.New("lock: no /proc") }

type pidState int

const (
	pidUnknown pidState = iota
	pidAlive
	pidGone
)

func probePID(pid int) pidState { return pidUnknown }
