package baseline

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/pyjson"
)

// The original's lock figures: stale after 10 minutes, backoff from 50 ms
// doubling to 5 s. Timeout is not the original's (it waited without bound);
// it equals the engine's default so that both sides of a comparison give up
// at the same point and a wait that long shows up as a failure.
const (
	DefaultStaleTimeout = 600 * time.Second
	DefaultMinBackoff   = 50 * time.Millisecond
	DefaultMaxBackoff   = 5 * time.Second
	DefaultTimeout      = 600 * time.Second
)

// LockOptions tune a Lock; the zero value gives the original's figures.
type LockOptions struct {
	StaleTimeout           time.Duration // 0: 600 s
	MinBackoff, MaxBackoff time.Duration // 0: 50 ms and 5 s
	Timeout                time.Duration // 0: 600 s; negative: wait forever
}

func (o LockOptions) withDefaults() LockOptions {
	if o.StaleTimeout <= 0 {
		o.StaleTimeout = DefaultStaleTimeout
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// LockStats count what the lock cost, comparable with the engine's
// lock.Stats: Links per Acquired is how many link() attempts (each a
// metadata round trip on the shared filesystem) one acquisition took.
type LockStats struct {
	Acquired, Links, Breaks int64
	Held                    time.Duration // total time held
}

// TimeoutError is returned when the lock was not obtained within Timeout.
// The benchmark counts these as failures.
type TimeoutError struct {
	LockPath string
	Waited   time.Duration
}

// Error names the lock and the wait.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("baseline: lock %s not acquired within %v", e.LockPath, e.Waited)
}

// Lock is the original's hard-link mutex on one lock path, per COMPAT.md.
// Goroutines of one process are serialized by a mutex first (the original
// was used from one thread); the file protocol then runs as the original's.
type Lock struct {
	path string
	dir  string
	opt  LockOptions
	host string
	pid  int

	mu sync.Mutex

	acquired, links, breaks, heldNS atomic.Int64
}

// NewLock returns the lock on lockPath (see lock.PathFor for the path of a
// database); nothing touches the filesystem until Acquire.
func NewLock(lockPath string, opt LockOptions) *Lock {
	return &Lock{
		path: lockPath,
		dir:  filepath.Dir(lockPath),
		opt:  opt.withDefaults(),
		host: identity.Hostname(),
		pid:  os.Getpid(),
	}
}

// Path is the lock file's path.
func (l *Lock) Path() string { return l.path }

// Stats returns the counters since NewLock.
func (l *Lock) Stats() LockStats {
	return LockStats{Acquired: l.acquired.Load(), Links: l.links.Load(), Breaks: l.breaks.Load(),
		Held: time.Duration(l.heldNS.Load())}
}

// Held is an acquired lock; Release gives it back.
type Held struct {
	l      *Lock
	ticket string
	since  time.Time
}

// Acquire takes the lock as the original did, every attempt from scratch:
// create a fresh ticket file .lock_<host>_<pid>_<random> (mkstemp: O_EXCL,
// mode 0600), write {"hostname": ..., "pid": ..., "timestamp": ...} with
// json.dumps's separators, close it, link() it to the lock path. On EEXIST
// unlink the ticket, read the lock's JSON and unlink the lock if its
// timestamp is older than StaleTimeout (retrying at once), else sleep a
// random time in [0, delay) (full jitter) with delay doubling from
// MinBackoff to MaxBackoff.
func (l *Lock) Acquire() (*Held, error) {
	l.mu.Lock()
	start := time.Now()
	delay := l.opt.MinBackoff
	for {
		ticket, err := l.writeTicket()
		if err != nil {
			l.mu.Unlock()
			return nil, err
		}
		l.links.Add(1)
		err = os.Link(ticket, l.path)
		if err == nil {
			l.acquired.Add(1)
			return &Held{l: l, ticket: ticket, since: time.Now()}, nil
		}
		os.Remove(ticket)
		if !errors.Is(err, fs.ErrExist) {
			l.mu.Unlock()
			return nil, err
		}
		if retry, broke := l.breakIfStale(); retry {
			if broke {
				l.breaks.Add(1)
			}
			continue
		}
		if l.opt.Timeout > 0 && time.Since(start) > l.opt.Timeout {
			l.mu.Unlock()
			return nil, &TimeoutError{LockPath: l.path, Waited: time.Since(start)}
		}
		time.Sleep(time.Duration(rand.Int64N(int64(delay)) + 1))
		delay = min(2*delay, l.opt.MaxBackoff)
	}
}

// mkstempChars are the characters of Python's tempfile names.
const mkstempChars = "abcdefghijklmnopqrstuvwxyz0123456789_"

// writeTicket creates and fills one fresh ticket file, as tempfile.mkstemp
// plus json.dump did.
func (l *Lock) writeTicket() (string, error) {
	prefix := filepath.Join(l.dir, ".lock_"+l.host+"_"+strconv.Itoa(l.pid)+"_")
	var f *os.File
	var name string
	for tries := 0; ; tries++ {
		b := make([]byte, 8)
		for i := range b {
			b[i] = mkstempChars[rand.IntN(len(mkstempChars))]
		}
		name = prefix + string(b)
		var err error
		f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || tries > 100 {
			return "", err
		}
	}
	host, err := pyjson.Marshal(l.host, pyjson.Default)
	if err != nil {
		f.Close()
		os.Remove(name)
		return "", err
	}
	ts := pyjson.FormatFloat(float64(time.Now().UnixNano()) / 1e9)
	doc := `{"hostname": ` + string(host) + `, "pid": ` + strconv.Itoa(l.pid) + `, "timestamp": ` + ts + `}`
	_, werr := f.WriteString(doc)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		os.Remove(name)
		return "", errors.Join(werr, cerr)
	}
	return name, nil
}

// breakIfStale is the original's stale rule: read the lock's JSON and
// unlink the lock when now - timestamp > StaleTimeout. A lock that is gone
// or unparseable is never broken. retry says to try again at once without
// sleeping: the lock was broken, or it vanished meanwhile (its holder
// released; sleeping then would only make the baseline slower than it has
// to be, and the comparison less conservative).
func (l *Lock) breakIfStale() (retry, broke bool) {
	b, err := os.ReadFile(l.path)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist), false
	}
	v, err := pyjson.Parse(b)
	if err != nil {
		return false, false
	}
	obj, ok := v.(*pyjson.Object)
	if !ok {
		return false, false
	}
	t, _ := obj.Get("timestamp")
	n, ok := t.(pyjson.Number)
	if !ok {
		return false, false
	}
	ts, err := n.Float64()
	if err != nil {
		return false, false
	}
	age := float64(time.Now().UnixNano())/1e9 - ts
	if age > l.opt.StaleTimeout.Seconds() {
		err := os.Remove(l.path)
		return err == nil || errors.Is(err, fs.ErrNotExist), err == nil
	}
	return false, false
}

// Release is the original's: unlink the lock path, then the ticket.
func (h *Held) Release() error {
	defer h.l.mu.Unlock()
	defer func() { h.l.heldNS.Add(int64(time.Since(h.since))) }()
	err := os.Remove(h.l.path)
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, os.Remove(h.ticket))
}
