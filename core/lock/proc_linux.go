//go:build linux

package lock

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

// This file answers "is the process that wrote this lock still running?" for
// holders on this host. A holder records three facts about itself (see
// procIdentity) and a waiter on the same host compares them with /proc.

// procIdentity is what a Go holder writes about its own process, so that a
// waiter on the same kernel can tell a dead holder, or a recycled pid, from a
// live one.
type procIdentity struct {
	startTime uint64 // field 22 of /proc/self/stat: clock ticks after boot
	bootID    string // /proc/sys/kernel/random/boot_id: changes every boot
	pidNS     uint64 // inode of /proc/self/ns/pid: our pid namespace
}

var (
	selfOnce sync.Once
	selfID   procIdentity
)

// self returns this process's identity; fields that cannot be read stay
// zero and are then left out of the lock record (a holder with no boot_id is
// never judged dead by pid: see deadOnThisHost).
func self() procIdentity {
	selfOnce.Do(func() {
		if st, err := procStartTime(os.Getpid()); err == nil {
			selfID.startTime = st
		}
		selfID.bootID = readBootID()
		selfID.pidNS = readPIDNamespace()
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

// errNoProcess: /proc has no entry for the pid.
var errNoProcess = errors.New("no such process")

// procStartTime returns field 22 (starttime) of /proc/<pid>/stat. The second
// field (comm) is in parentheses and may itself contain spaces and
// parentheses, so fields are counted after the last ')'.
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

func parseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("lock: malformed /proc stat %q", stat)
	}
	// After ") " come fields 3 (state), 4, ...; starttime is field 22.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 22-2 {
		return 0, fmt.Errorf("lock: malformed /proc stat %q", stat)
	}
	return strconv.ParseUint(f[22-3], 10, 64)
}

// pidState is what kill(pid, 0) says.
type pidState int

const (
	pidUnknown pidState = iota
	pidAlive
	pidGone
)

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
