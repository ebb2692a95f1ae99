package lock

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/shareddir"
)

// maxLockFile bounds what we read from a lock file; real ones are 80 (Python)
// to about 300 (Go) bytes.
const maxLockFile = 64 << 10

// Holder is what a lock file says about its owner: the JSON the original
// writes, so it is equally meaningful for Python and Go holders.
type Holder struct {
	Hostname  string
	PID       int
	Timestamp float64 // seconds since the epoch, as Python time.time()

	// Extras of a Go holder; zero in a record written by Python.
	proc  liveness.Process // "start_time", "boot_id", "pid_ns"
	every time.Duration    // "heartbeat_interval": promised rewrite period
}

// ReadHolder reports who holds lockPath. The error wraps os.ErrNotExist if
// nobody does, and is a parse error if the file is not a holder record (such
// a lock is never broken).
func ReadHolder(lockPath string) (*Holder, error) {
	h, _, err := readHolder(lockPath)
	return h, err
}

// lockState is one observation of a lock file: the inode's stamp (fstat of
// the descriptor read from) and a hash of the bytes read. Two observations
// are of an unchanged lock iff their lockStates are equal.
type lockState struct {
	stamp
	sum [sha256.Size]byte
}

// readHolder (Acquire step 3 in docs/lock-protocol.md) also returns the
// state of the inode the record was read from, so that the waiter can tell
// how long it has stayed unchanged and breakLock can make sure it removes
// that very file.
//
// The lock's directory is shared with other users: the open neither follows
// a link nor blocks (a FIFO planted at the name), and anything but a
// regular file is refused (core/shareddir), as an unreadable lock.
// The state's stamp is the fstat that the checked open took before
// reading. The tickets and aside names that a sweep or a break reads are
// read the same way.
func readHolder(name string) (*Holder, lockState, error) {
	f, fst, err := shareddir.Open(name, os.O_RDONLY)
	if err != nil {
		return nil, lockState{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxLockFile+1))
	if err != nil {
		return nil, lockState{}, err
	}
	if len(data) > maxLockFile {
		return nil, lockState{}, fmt.Errorf("lock: %s: not a lock record (over %d bytes)", name, maxLockFile)
	}
	h, err := parseHolder(data)
	if err != nil {
		return nil, lockState{}, fmt.Errorf("lock: %s (owned by %s): %w", name, identity.Owner(fst.Uid), err)
	}
	return h, lockState{stamp: stampOf(fst), sum: sha256.Sum256(data)}, nil
}

// parseHolder reads a holder record the way the original uses it: a JSON
// object whose "timestamp" is a number. hostname and pid are informative
// only; missing or odd ones read as "" and 0. The Go extras are taken only
// when well-formed, else ignored as if absent.
func parseHolder(data []byte) (*Holder, error) {
	v, err := pyjson.Parse(data)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*pyjson.Object)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	tv, _ := o.Get("timestamp")
	tn, ok := tv.(pyjson.Number)
	if !ok {
		return nil, errors.New(`no numeric "timestamp"`)
	}
	ts, err := tn.Float64()
	if err != nil {
		return nil, err
	}
	h := &Holder{Timestamp: ts}
	if s, ok := o.Get("hostname"); ok {
		h.Hostname, _ = s.(string)
	}
	if pid, ok := uintKey(o, "pid"); ok && pid <= math.MaxInt32 {
		h.PID = int(pid)
	}
	h.proc.StartTime, _ = uintKey(o, "start_time")
	h.proc.PIDNS, _ = uintKey(o, "pid_ns")
	if s, ok := o.Get("boot_id"); ok {
		h.proc.BootID, _ = s.(string)
	}
	if v, ok := o.Get("heartbeat_interval"); ok {
		if n, ok := v.(pyjson.Number); ok {
			if f, err := n.Float64(); err == nil && f > 0 && f < 1e9 {
				h.every = time.Duration(f * float64(time.Second))
			}
		}
	}
	return h, nil
}

// uintKey reads a non-negative JSON integer.
func uintKey(o *pyjson.Object, key string) (uint64, bool) {
	v, ok := o.Get(key)
	if !ok {
		return 0, false
	}
	n, ok := v.(pyjson.Number)
	if !ok || !n.IsInt() {
		return 0, false
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	return u, err == nil
}
