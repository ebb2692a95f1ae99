// Package liveness answers "is the process that wrote this record still
// running?" for records written by processes of this host: the holder of
// the hard-link lock (core/sqlitefile/internal/lock, whose tickets carry a
// holder record) and the claims on measurements (core/claim.go). A process
// records who it is (Process) beside its host name and pid; a process of the
// same host, under the same kernel and in the same pid namespace, can later
// prove it dead by /proc (the dead-holder rule of docs/lock-protocol.md, "Dead
// holders"). Anything it cannot prove counts as alive.
package liveness

import "errors"

// Process is what a process records about itself, beside its host name
// and pid, so that another process on the same host can later prove it
// dead (GoneFromThisHost). Fields that /proc cannot tell are zero, and a
// record with a zero BootID or PIDNS is never judged dead by pid.
type Process struct {
	StartTime uint64 // field 22 of /proc/<pid>/stat: clock ticks after boot
	BootID    string // /proc/sys/kernel/random/boot_id: changes at every boot
	PIDNS     uint64 // inode of /proc/<pid>/ns/pid: its pid namespace
}

// Self is this process's Process, read from /proc once.
func Self() Process { return self() }

// OnThisHost reports whether a process that recorded host and p runs, or
// ran, on this host (localHost), under this very kernel (boot_id) and in
// our pid namespace (pid_ns): only then does its pid mean the same process
// here. A host name alone does not prove it (containers share host names;
// nodes get renamed; the node may have rebooted).
func OnThisHost(localHost, host string, p Process) bool {
	me := self()
	return host == localHost && p.BootID != "" && p.BootID == me.BootID && p.PIDNS != 0 && p.PIDNS == me.PIDNS
}

// GoneFromThisHost is the dead-holder rule for a process that recorded
// host, pid and p: it ran on this host (OnThisHost), and its pid is gone
// or now belongs to a process that started at another time (Gone).
func GoneFromThisHost(localHost, host string, pid int, p Process) bool {
	return OnThisHost(localHost, host, p) && Gone(pid, p.StartTime)
}

// Gone reports whether pid, in our pid namespace, is gone, or now belongs
// to a process that started at another time than startTime (0: unknown,
// then only a missing pid counts). The caller has made sure that the pid
// is of our namespace (OnThisHost); kill's EPERM (another user's process)
// and a pid that /proc hides (hidepid) count as alive.
func Gone(pid int, startTime uint64) bool {
	switch probePID(pid) {
	case pidGone:
		return true
	case pidAlive:
	default:
		return false
	}
	if startTime == 0 {
		return false // nothing to tell a recycled pid from the holder
	}
	st, err := procStartTime(pid)
	if err != nil {
		// Gone from /proc: it exited since kill(), or /proc hides other
		// users' processes (hidepid); only kill() can tell.
		return errors.Is(err, errNoProcess) && probePID(pid) == pidGone
	}
	return st != startTime
}

// pidState is what kill(pid, 0) says.
type pidState int

const (
	pidUnknown pidState = iota
	pidAlive
	pidGone
)

// errNoProcess: /proc has no entry for the pid.
var errNoProcess = errors.New("no such process")
