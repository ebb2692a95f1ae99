// Package proclocks reads /proc/locks for the tests that check, across
// processes, who holds a byte of a file (the node queue's order and its
// lanes; who waits shows in the queue's wake words: nodequeue.Sleepers).
package proclocks

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnavailable means this system has no /proc/locks: the caller should
// skip its test.
var ErrUnavailable = errors.New("proclocks: no /proc/locks")

// entries are the /proc/locks lines about the file at path, split into
// fields; ok is false if the file does not exist.
func entries(path string) (lines [][]string, ok bool, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, false, nil
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil, true, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// "N: POSIX ADVISORY WRITE pid dev:ino start end", or with "->"
		// after N: for a blocked request.
		if len(f) > 1 && f[1] == "->" {
			f = append(f[:1], f[2:]...)
			f[0] = "->"
		}
		if len(f) > 6 && f[5] == id {
			lines = append(lines, f)
		}
	}
	return lines, true, nil
}

// Holds reports whether process pid holds a lock on the file at path.
func Holds(path string, pid int) (bool, error) {
	lines, _, err := entries(path)
	for _, f := range lines {
		if f[0] != "->" && f[4] == strconv.Itoa(pid) {
			return true, nil
		}
	}
	return false, err
}
