//go:build linux

package liveness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// This file reads what /proc says about a process: the three facts a
// process records about itself (Process), and whether a pid is in use.

var (
	selfOnce sync.Once
	selfID   Process
)

// self returns this process's identity; fields that cannot be read stay
// zero (and are then left out of a lock record: a holder with no boot_id
// is never judged dead by pid, see OnThisHost).
func self() Process {
	selfOnce.Do(func() {
		if st, err := procStartTime(os.Getpid()); err == nil {
			selfID.StartTime = st
		}
		selfID.BootID = readBootID()
		selfID.PIDNS = readPIDNamespace()
	})
	return selfID
}

func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readPIDNamespace() uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return uint64(st.Ino)
}

// procStartTime returns field 22 (starttime) of /proc/<pid>/stat.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return 0, errNoProcess
	}
	if err != nil {
		return 0, err
	}
	return parseStartTime(b)
}

// parseStartTime reads field 22 of a /proc/<pid>/stat line. The second
// field (comm) is in parentheses and may itself contain spaces and
// parentheses, so fields are counted after the last ')'.
func parseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("liveness: malformed /proc stat %q", stat)
	}
	// After ") " come fields 3 (state), 4, ...; starttime is field 22.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 22-2 {
		return 0, fmt.Errorf("liveness: malformed /proc stat %q", stat)
	}
	return strconv.ParseUint(f[22-3], 10, 64)
}

// probePID is what kill(pid, 0) says about pid.
func probePID(pid int) pidState {
	if pid <= 0 {
		return pidUnknown // kill(0 or -n) would address process groups
	}
	switch err := unix.Kill(pid, 0); err {
	case nil, unix.EPERM: // EPERM: exists, owned by someone else
		return pidAlive
	case unix.ESRCH:
		return pidGone
	default:
		return pidUnknown
	}
}
