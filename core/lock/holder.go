package lock

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/tirastore/tirastore/core/pyjson"
)

// maxLockFile bounds what we read from a lock file; real ones are ~80 bytes.
const maxLockFile = 64 << 10

// Holder is what a lock file says about its owner: the JSON the original
// writes, so it is equally meaningful for Python and Go holders.
type Holder struct {
	Hostname  string
	PID       int
	Timestamp float64 // seconds since the epoch, as Python time.time()
}

// ReadHolder reports who holds lockPath. The error wraps os.ErrNotExist if
// nobody does, and is a parse error if the file is not a holder record (such
// a lock is never broken as stale).
func ReadHolder(lockPath string) (*Holder, error) {
	h, _, err := readHolder(lockPath)
	return h, err
}

// readHolder (step 3) also returns the stamp of the inode the record was
// read from, so that breakStale can make sure it removes that very file.
func readHolder(lockPath string) (*Holder, stamp, error) {
	f, err := os.Open(lockPath)
	if err != nil {
		return nil, stamp{}, err
	}
	defer f.Close()
	id, err := fstatStamp(f)
	if err != nil {
		return nil, stamp{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxLockFile+1))
	if err != nil {
		return nil, stamp{}, err
	}
	if len(data) > maxLockFile {
		return nil, stamp{}, fmt.Errorf("lock: %s: not a lock record (over %d bytes)", lockPath, maxLockFile)
	}
	h, err := parseHolder(data)
	if err != nil {
		return nil, stamp{}, fmt.Errorf("lock: %s: %w", lockPath, err)
	}
	return h, id, nil
}

// parseHolder reads a holder record the way the original uses it: a JSON
// object whose "timestamp" is a number. hostname and pid are informative
// only; missing or odd ones read as "" and 0.
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
	if p, ok := o.Get("pid"); ok {
		if n, ok := p.(pyjson.Number); ok && n.IsInt() {
			if pid, err := strconv.ParseInt(string(n), 10, 64); err == nil && pid >= 0 && pid <= math.MaxInt32 {
				h.PID = int(pid)
			}
		}
	}
	return h, nil
}

// breakStale (step 4) unlinks the lock if it is still the inode judged
// stale (same device, inode number and ctime). It reports whether the lock
// is now gone (by us or anyone), i.e. whether retrying at once makes sense.
func breakStale(lockPath string, judged stamp) bool {
	id, err := lstatStamp(lockPath)
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	if id != judged {
		return false // replaced by a new holder meanwhile
	}
	err = os.Remove(lockPath)
	return err == nil || errors.Is(err, os.ErrNotExist)
}
