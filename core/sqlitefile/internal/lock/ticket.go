package lock

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/pyjson"
)

// holderRecord is what a ticket (and therefore the lock, while held) says about
// its holder: the original's three keys, then the extras a Go holder adds.
type holderRecord struct {
	hostname string
	pid      int
	proc     liveness.Process
	every    time.Duration // heartbeat interval; 0: no heartbeat keys
}

// encode returns the holder record with timestamp ts and heartbeat counter
// beats, in json.dumps's layout:
//
//	{"hostname": "node1", "pid": 42, "timestamp": 1764000000.123456,
//	 "start_time": 244679, "boot_id": "c238...", "pid_ns": 4026531836,
//	 "heartbeat_interval": 30.0, "heartbeat": 0}
//
// (on one line). The timestamp always has six decimals, so that it has the
// same width in every rewrite until the year 2286: the bytes of all other
// keys then stay at the same offsets, and a reader that races a heartbeat
// and sees a mix of two versions still reads the unchanging keys exactly
// (see "Torn reads" in docs/lock-protocol.md). Keys that could not be
// determined are left out.
func (r *holderRecord) encode(ts float64, beats uint64) ([]byte, error) {
	host, err := pyjson.Marshal(r.hostname, pyjson.Default)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"hostname": `...)
	b = append(b, host...)
	b = append(b, `, "pid": `...)
	b = strconv.AppendInt(b, int64(r.pid), 10)
	b = append(b, `, "timestamp": `...)
	b = strconv.AppendFloat(b, ts, 'f', 6, 64)
	if r.proc.StartTime != 0 {
		b = append(b, `, "start_time": `...)
		b = strconv.AppendUint(b, r.proc.StartTime, 10)
	}
	if r.proc.BootID != "" {
		id, err := pyjson.Marshal(r.proc.BootID, pyjson.Default)
		if err != nil {
			return nil, err
		}
		b = append(b, `, "boot_id": `...)
		b = append(b, id...)
	}
	if r.proc.PIDNS != 0 {
		b = append(b, `, "pid_ns": `...)
		b = strconv.AppendUint(b, r.proc.PIDNS, 10)
	}
	if r.every > 0 {
		b = append(b, `, "heartbeat_interval": `...)
		b = append(b, pyjson.FormatFloat(r.every.Seconds())...)
		b = append(b, `, "heartbeat": `...)
		b = strconv.AppendUint(b, beats, 10)
	}
	return append(b, '}'), nil
}

// recordSize is the fixed length of every version of r's record: the
// longest timestamp of this era and the longest counter, so that a
// heartbeat never changes the file's size.
func (r *holderRecord) recordSize() (int, error) {
	b, err := r.encode(9999999999.999999, math.MaxUint64)
	return len(b), err
}

// padded is encode, followed by spaces up to size (JSON allows trailing
// whitespace; json.loads and the original's json.load skip it).
func (r *holderRecord) padded(ts float64, beats uint64, size int) ([]byte, error) {
	b, err := r.encode(ts, beats)
	if err != nil {
		return nil, err
	}
	for len(b) < size {
		b = append(b, ' ')
	}
	return b, nil
}

// ticket is this process's ticket file. One ticket serves every Acquire of a
// Lock: it is created at the first and removed by Close, so that a
// steady-state acquisition costs the metadata server one link and one
// unlink instead of the original's create, link, unlink, unlink. While the
// lock is held, the lock file is a second name of the same inode (id).
type ticket struct {
	path string
	id   fileID
	rec  *holderRecord
	size int

	// f stays open for the ticket's life: the record is rewritten through it
	// (before each link attempt and at each heartbeat) without an open.
	f *os.File
	// beats counts heartbeats since the last acquisition; owned by the
	// heartbeat goroutine while it runs.
	beats uint64
	// flushed is when the record was last fsynced (monotonic), and
	// flushEvery how stale the copy other nodes can see may become (see
	// write).
	flushed    time.Time
	flushEvery time.Duration
}

// mkstemp's alphabet and length for the random part of the name.
const (
	ticketChars  = "abcdefghijklmnopqrstuvwxyz0123456789_"
	ticketRandom = 8
	ticketTries  = 100
)

// TicketPrefix is the start of every ticket file name, as in the original:
// ".lock_<hostname>_<pid>_". Exposed for tools that list or sweep tickets.
func TicketPrefix(hostname string, pid int) string {
	return ticketStart + hostname + "_" + strconv.Itoa(pid) + "_"
}

// ticketStart begins every ticket file's name, whatever its host and pid.
const ticketStart = ".lock_"

func randomName(n int) string {
	name := make([]byte, n)
	for j := range name {
		name[j] = ticketChars[rand.IntN(len(ticketChars))]
	}
	return string(name)
}

// newTicket creates an empty ticket file in dir, named like
// tempfile.mkstemp(prefix=TicketPrefix(...), dir=dir), and keeps it open.
func newTicket(dir string, rec *holderRecord, flushEvery time.Duration) (*ticket, error) {
	size, err := rec.recordSize()
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	prefix := TicketPrefix(rec.hostname, rec.pid)
	for i := 0; i < ticketTries; i++ {
		p := filepath.Join(dir, prefix+randomName(ticketRandom))
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lock: create ticket: %w", err)
		}
		id, err := fstatID(f)
		if err != nil {
			f.Close()
			os.Remove(p)
			return nil, fmt.Errorf("lock: create ticket: %w", err)
		}
		return &ticket{path: p, id: id, rec: rec, size: size, f: f, flushEvery: flushEvery}, nil
	}
	return nil, fmt.Errorf("lock: create ticket in %s: no free name after %d tries", dir, ticketTries)
}

// write (Acquire step 1 in docs/lock-protocol.md) stores the holder record
// with a fresh timestamp, so that the lock starts with the moment it was
// taken. It runs before every link attempt, while the ticket is not the lock
// and nobody reads it: one pwrite of the fixed-size record at offset 0, no
// open, no truncate.
//
// fsync only when the last one is older than flushEvery (the heartbeat
// interval). Local filesystems and Lustre show other nodes the new bytes at
// once; an NFS client may keep them in its cache until written back, so an
// NFS waiter may read an older timestamp, at most flushEvery (plus the
// kernel's writeback delay, itself flushed by the next beat) older. That is
// far below any stale timeout the heartbeat rule allows, and Go waiters do
// not judge a lock by its bytes alone: link changes its ctime.
func (c *ticket) write(now time.Time) error {
	data, err := c.rec.padded(unixSeconds(now), 0, c.size)
	if err != nil {
		return err
	}
	if _, err := c.f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("lock: write ticket: %w", err)
	}
	if mono := time.Now(); c.flushed.IsZero() || mono.Sub(c.flushed) >= c.flushEvery {
		if err := c.f.Sync(); err != nil {
			return fmt.Errorf("lock: write ticket: %w", err)
		}
		c.flushed = mono
	}
	c.beats = 0
	return nil
}

// beat rewrites the record in place with timestamp now and the next
// counter: one pwrite of the whole fixed-size record at offset 0, so the
// file is never empty, never changes size, and every version a reader can
// get is complete; then fsync, without which an NFS client may keep the
// new bytes in its cache and other nodes would go on seeing the old ones.
func (c *ticket) beat(now time.Time) error {
	n := c.beats + 1
	data, err := c.rec.padded(unixSeconds(now), n, c.size)
	if err != nil {
		return err
	}
	if _, err := c.f.WriteAt(data, 0); err != nil {
		return err
	}
	if err := c.f.Sync(); err != nil {
		return err
	}
	c.flushed = time.Now()
	c.beats = n
	return nil
}

// remove closes and deletes the ticket; a ticket already gone is fine.
func (c *ticket) remove() error {
	c.f.Close()
	if err := os.Remove(c.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// gone reports whether the ticket's name no longer leads to its inode
// (someone deleted the file): the next link would fail with ENOENT.
func (c *ticket) gone() bool {
	id, err := lstatID(c.path)
	return err != nil || id != c.id
}

// tryLink (Acquire step 2 in docs/lock-protocol.md) makes the ticket the
// lock (or, for takeBreakLock, the break lock). A link count of 2 after a
// failure means the link was made anyway (lost NFS reply, retransmitted
// request answered EEXIST).
func tryLink(c *ticket, lockPath string) (held bool, err error) {
	err = os.Link(c.path, lockPath)
	if err == nil {
		return true, nil
	}
	// The link may have happened although link() failed (a lost NFS
	// reply). Held only if the lock path itself is our inode: a link count
	// of 2 alone could also be a breaker's aside name of an earlier hold,
	// and a filesystem that answers a stat from a stale name of the inode
	// (the FUSE test bed can) would fake it. By path, not fstat (Release).
	if n, serr := linkCount(c.path); serr == nil && n == 2 {
		if id, lerr := lstatID(lockPath); lerr == nil && id == c.id {
			return true, nil
		}
	}
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	return false, fmt.Errorf("lock: %w", err)
}
