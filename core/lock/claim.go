package lock

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tirastore/tirastore/core/pyjson"
)

// claim is this process's claim file; while the lock is held, the lock file
// is a second name of the same inode (id).
type claim struct {
	path string
	id   fileID
}

// mkstemp's alphabet and length for the random part of the name.
const (
	claimChars  = "abcdefghijklmnopqrstuvwxyz0123456789_"
	claimRandom = 8
	claimTries  = 100
)

// ClaimPrefix is the start of every claim file name, as in the original:
// ".lock_<hostname>_<pid>_". Exposed for tools that list or sweep claims.
func ClaimPrefix(hostname string, pid int) string {
	return ".lock_" + hostname + "_" + strconv.Itoa(pid) + "_"
}

// newClaim creates an empty claim file in dir, named and permissioned like
// tempfile.mkstemp(prefix=ClaimPrefix(...), dir=dir).
func newClaim(dir, hostname string) (*claim, error) {
	prefix := ClaimPrefix(hostname, os.Getpid())
	for i := 0; i < claimTries; i++ {
		name := make([]byte, claimRandom)
		for j := range name {
			name[j] = claimChars[rand.IntN(len(claimChars))]
		}
		p := filepath.Join(dir, prefix+string(name))
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lock: create claim: %w", err)
		}
		id, err := fstatID(f)
		f.Close()
		if err != nil {
			os.Remove(p)
			return nil, fmt.Errorf("lock: create claim: %w", err)
		}
		return &claim{path: p, id: id}, nil
	}
	return nil, fmt.Errorf("lock: create claim in %s: no free name after %d tries", dir, claimTries)
}

// writeClaim (step 1) stores the holder record with a fresh timestamp. It
// runs before every link attempt so that the timestamp the lock carries is
// the moment it was taken. The file is closed before link so that NFS
// close-to-open consistency shows the content to other nodes.
func (c *claim) write(hostname string, pid int, now time.Time) error {
	data, err := claimContent(hostname, pid, unixSeconds(now))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_TRUNC, 0)
	if errors.Is(err, os.ErrNotExist) {
		// Someone removed our claim; start over with a new one.
		nc, cerr := newClaim(filepath.Dir(c.path), hostname)
		if cerr != nil {
			return cerr
		}
		*c = *nc
		f, err = os.OpenFile(c.path, os.O_WRONLY|os.O_TRUNC, 0)
	}
	if err != nil {
		return fmt.Errorf("lock: write claim: %w", err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("lock: write claim: %w", err)
	}
	return nil
}

// claimContent is json.dumps({"hostname": h, "pid": pid, "timestamp": ts}).
func claimContent(hostname string, pid int, ts float64) ([]byte, error) {
	o := pyjson.NewObject()
	o.Set("hostname", hostname)
	o.Set("pid", pid)
	o.Set("timestamp", ts)
	return pyjson.Marshal(o, pyjson.Default)
}

// remove deletes the claim; a claim already gone is fine.
func (c *claim) remove() error {
	if err := os.Remove(c.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// tryLink (step 2) makes the claim the lock. A link count of 2 after a
// failure means the link was made anyway (lost NFS reply, retransmitted
// request answered EEXIST).
func tryLink(c *claim, lockPath string) (held bool, err error) {
	err = os.Link(c.path, lockPath)
	if err == nil {
		return true, nil
	}
	if n, serr := linkCount(c.path); serr == nil && n == 2 {
		return true, nil
	}
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	return false, fmt.Errorf("lock: %w", err)
}
