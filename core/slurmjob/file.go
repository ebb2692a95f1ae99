package slurmjob

import (
	"encoding/json"
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/tuning"
)

// The answer file, in a directory that other users can write (/dev/shm),
// where a name may be planted before we create it: a symbolic link (with
// fs.protected_symlinks off, our writes would land on the file it names),
// a FIFO (an open for reading would block), a file of theirs (they would
// write our answers), a hard link to a file of ours (we would overwrite
// it). So it is opened with O_NOFOLLOW|O_NONBLOCK and used only if fstat
// shows a regular file owned by our euid, with one link and no permission
// bits for group or others; nothing is ever done to it by path (no chmod,
// no rename, no unlink). It is written in place under the flock: a crash in
// the middle leaves text that does not parse, which reads as empty.

// fileFlags open the answer file: created if missing, mode 0600 (less
// the umask, which can only take bits away).
const fileFlags = unix.O_RDWR | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

// errRefused: the name is not a file this process may share.
var errRefused = errors.New("slurmjob: the answer file is not a private regular file of ours")

// doc is the answer file's content.
type doc struct {
	// Version is fileVersion; a file of another version reads as empty.
	Version int `json:"v"`
	// Last is when the last query started (Unix nanoseconds).
	Last int64 `json:"last"`
	// Querier is the process running a query, nil if none.
	Querier *mark `json:"querier,omitempty"`
	// Jobs are the answers and questions, by job id.
	Jobs map[string]entry `json:"jobs"`
}

// fileVersion is doc.Version of this layout.
const fileVersion = 1

// mark names a querier: its process (as core/liveness identifies one, so
// that a querier that died on this node is replaced at once), the round
// (a number of its process) and when it started.
type mark struct {
	PID    int    `json:"pid"`
	Start  uint64 `json:"start,omitempty"`
	BootID string `json:"boot_id,omitempty"`
	PIDNS  uint64 `json:"pid_ns,omitempty"`
	Round  uint64 `json:"round"`
	Since  int64  `json:"since"`
}

// entry is what the node knows of one job.
type entry struct {
	// State is the job's state at Checked, "" if unknown (not asked
	// yet, or the last query could not tell).
	State string `json:"state,omitempty"`
	// Checked is when the query that gave State started (Unix ns).
	Checked int64 `json:"checked,omitempty"`
	// Wanted is when a waiter last asked about the job (Unix ns).
	Wanted int64 `json:"wanted,omitempty"`
}

// openFile opens the answer file at path with flags and checks it (see
// above); any failure means the process does not share it.
func openFile(path string, flags int) (int, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, flags, 0o600)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 || st.Nlink != 1 {
		unix.Close(fd)
		return -1, errRefused
	}
	return fd, nil
}

// tryLock takes the flock on fd without waiting: false if another holds
// it.
func tryLock(fd int) (bool, error) {
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch err {
		case nil:
			return true, nil
		case unix.EWOULDBLOCK:
			return false, nil
		case unix.EINTR:
			continue
		}
		return false, err
	}
}

// readDoc reads the locked file: a content that is too large, does not
// parse or is of another version reads as empty; only a failing read is
// an error.
func readDoc(fd int) (*doc, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size > tuning.SlurmFileMax {
		return parseDoc(nil), nil
	}
	buf := make([]byte, st.Size)
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return parseDoc(buf[:n]), nil
}

// parseDoc decodes the file's content, keeping only well-formed jobs: an
// empty doc for anything else.
func parseDoc(b []byte) *doc {
	d := &doc{Version: fileVersion, Jobs: map[string]entry{}}
	var in doc
	if json.Unmarshal(b, &in) != nil || in.Version != fileVersion {
		return d
	}
	d.Last, d.Querier = in.Last, in.Querier
	for id, e := range in.Jobs {
		if validID(id) && (e.State == "" || validState(e.State)) {
			d.Jobs[id] = e
		}
	}
	return d
}

// writeDoc replaces the locked file's content with d.
func writeDoc(fd int, d *doc) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		off += n
	}
	for {
		err := unix.Ftruncate(fd, int64(len(b)))
		if err != unix.EINTR {
			return err
		}
	}
}

// closeFile releases the flock and the descriptor.
func closeFile(fd int) {
	unix.Flock(fd, unix.LOCK_UN)
	unix.Close(fd)
}
