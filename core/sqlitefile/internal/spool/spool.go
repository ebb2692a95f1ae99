// Package spool hands writes from the processes of one node to whichever
// of them commits next, so that one transaction, and one set of fsyncs,
// serves several of them (group commit).
//
// A record's commit waits for four fsyncs, so with many writers on a node
// the lock is busy mostly with waiting for the disk, one record at a time.
// A writer that finds another process of its node ahead of it publishes
// its rows here and waits in the node's writers' lane as before. Whoever
// holds the lock next as a writer takes every published request, commits
// them together with its own rows in one transaction, and leaves each
// requester its result; a requester that reaches the head of the lane and
// finds its result collects it and returns without taking the lock.
//
// The spool is a directory of small files in node-local memory (in this
// user's private directory, internal/nodelocal), one per request, and every
// change of state is a rename, so a process killed at any point leaves a
// state the others can read:
//
//	<id>.tmp         being written by the requester (ignored by takers)
//	<id>.req         published: waiting for a taker
//	<id>.clm-<pid>-<tag>  taken by process pid, which is committing it
//	                      (tag: the taker's own mark, e.g. its timestamp)
//	<id>.res         committed; holds the result for the requester
//
// where <id> is <nanoseconds>-<requester pid>-<sequence>, so that sorting
// ids sorts requests by the time they were published. Takes happen only
// under the database lock: a take found by the next holder of the lock is
// one whose taker died (or failed to leave results), and it is taken
// again (see Take). The payload
// and result bytes are opaque here; the store defines them.
//
// The directory is per user (mode 0700, in a private directory of mode
// 0700): a process can rename and remove only its own user's requests,
// and a request is committed with its requester's identity anyway. Every
// file is opened through the directory's descriptor and checked
// (internal/nodelocal), so that nothing planted there is read or written.
package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
)

// Spool is one user's spool directory for one database on this node.
type Spool struct {
	d   *nodelocal.Dir
	dir string // d's path, for messages
}

// Open returns the spool name in dir, creating the directory (mode 0700)
// if it does not exist. It fails (a *nodelocal.Problem) if name is not a
// private directory of this user, so that nobody else can slip requests
// into our transactions or make us follow a symlink.
func Open(dir *nodelocal.Dir, name string) (*Spool, error) {
	d, err := dir.Subdir(name)
	if err != nil {
		return nil, err
	}
	return &Spool{d: d, dir: d.Path()}, nil
}

// Dir is the spool's directory, for messages.
func (s *Spool) Dir() string { return s.dir }

// Remove removes what dead requesters left (removeIfAbandoned), then the
// spool directory if it is empty (a store of the database on this node
// calls it when it closes; a spool in use stays). A store that publishes
// later makes it again.
func (s *Spool) Remove() {
	names, _ := s.names()
	for _, n := range names {
		if id, _ := splitName(n); id != "" {
			s.removeIfAbandoned(n, id)
		}
	}
	s.d.RemoveIfEmpty()
}

// Close closes the spool's directory descriptor.
func (s *Spool) Close() { s.d.Close() }

// Sweep clears the spool name in dir of what dead processes left (the
// files of requests whose requester is gone, once older than abandonAge)
// and then removes the directory if it is empty. The first store of a
// process calls it for every spool of its user on the node, so that
// killed processes leave no litter for long.
func Sweep(dir *nodelocal.Dir, name string) {
	d, err := dir.Subdir(name)
	if err != nil {
		return
	}
	defer d.Close()
	(&Spool{d: d, dir: d.Path()}).Remove()
}

// Request is one published write, seen from its requester.
type Request struct {
	sp *Spool
	id string
}

var seq atomic.Uint64

// procNS and procStart name this process in its request ids (see
// removeIfAbandoned): <nanoseconds>-<pid>-<sequence>-<pid ns>-<start time>.
var procNS, procStart = liveness.Self().PIDNS, liveness.Self().StartTime

// Publish writes payload as a new request and makes it visible to
// takers.
func (s *Spool) Publish(payload []byte) (*Request, error) {
	id := fmt.Sprintf("%019d-%d-%d-%d-%d", time.Now().UnixNano(), os.Getpid(), seq.Add(1), procNS, procStart)
	r := &Request{sp: s, id: id}
	// If the last store of the database on this node closed and removed
	// the empty directory meanwhile, the Dir makes it again.
	if err := s.install(r.name(".tmp"), r.name(".req"), payload); err != nil {
		return nil, err
	}
	return r, nil
}

// install writes b to a new file tmp and renames it to dst, so that dst
// appears whole or not at all.
func (s *Spool) install(tmp, dst string, b []byte) error {
	if err := s.d.WriteNew(tmp, b); err != nil {
		return err // nothing of ours is left
	}
	err := s.d.Rename(tmp, dst)
	if err != nil {
		s.d.Remove(tmp, nil)
	}
	return err
}

// read returns the content of the spool's file name.
func (s *Spool) read(name string) ([]byte, error) { return s.d.ReadFile(name) }

// ID names the request (for messages and tests).
func (r *Request) ID() string { return r.id }

// name is the request's file name in state suffix, path its path (tests).
func (r *Request) name(suffix string) string { return r.id + suffix }
func (r *Request) path(suffix string) string { return filepath.Join(r.sp.dir, r.id+suffix) }

// Result returns the result a taker left, and whether there is one.
func (r *Request) Result() ([]byte, bool, error) {
	b, err := r.sp.read(r.name(".res"))
	switch {
	case err == nil:
		return b, true, nil
	case errors.Is(err, os.ErrNotExist):
		return nil, false, nil
	default:
		return nil, false, err
	}
}

// Done removes the result once the requester has it.
func (r *Request) Done() { r.sp.d.Remove(r.name(".res"), nil) }

// Discard removes every file of the request, taken or not: its requester
// holds the database lock and commits the rows itself, so nobody else may.
// If the request had been taken (by a taker that died or failed before
// leaving a result, and may have committed it), it returns true and that
// taker's tags (see Taken.PrevTag).
func (r *Request) Discard() (taken bool, tag string) {
	d := r.sp.d
	if d.Remove(r.name(".req"), nil) == nil {
		return false, ""
	}
	d.Remove(r.name(".res"), nil)
	if c, _ := r.take(); c != "" {
		d.Remove(c, nil)
		_, state := splitName(c)
		return true, takeTag(state)
	}
	return false, ""
}

// Withdraw takes a request back that nobody has taken yet: true means
// it never will be committed. False means a taker has it (or had it):
// see Wait.
func (r *Request) Withdraw() (bool, error) {
	switch err := r.sp.d.Remove(r.name(".req"), nil); {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// ErrOrphaned is returned by Wait when the process that took a request
// died before leaving its result: whether its transaction committed is
// unknown (the next taker commits the request again).
var ErrOrphaned = errors.New("spool: the process committing this request died before reporting the outcome")

// Wait waits, polling every interval, for the result of a request that a
// taker has, until the result is there, or the taker is dead or has
// not left it within limit (ErrOrphaned either way: a taker holds the
// database lock and only commits, which takes milliseconds).
func (r *Request) Wait(interval, limit time.Duration) ([]byte, error) {
	end := time.Now().Add(limit)
	for {
		b, ok, err := r.Result()
		if err != nil || ok {
			return b, err
		}
		c, err := r.take()
		if err != nil {
			return nil, err
		}
		if c == "" {
			// Between a take and its result there is always one of
			// the two files: look for the result once more.
			if b, ok, err := r.Result(); err != nil || ok {
				return b, err
			}
			return nil, fmt.Errorf("spool: request %s vanished from %s", r.id, r.sp.dir)
		}
		if _, state := splitName(c); !alive(takerPID(state)) {
			if b, ok, err := r.Result(); err != nil || ok {
				return b, err
			}
			return nil, ErrOrphaned
		}
		if time.Now().After(end) {
			return nil, ErrOrphaned
		}
		time.Sleep(interval)
	}
}

// take is the name of the request's taken file, or "".
func (r *Request) take() (string, error) {
	names, err := r.sp.names()
	if err != nil {
		return "", err
	}
	for _, n := range names {
		if strings.HasPrefix(n, r.id+".clm-") {
			return n, nil
		}
	}
	return "", nil
}

func (s *Spool) names() ([]string, error) { return s.d.Names() }

// Taken is a request a taker has taken over. Orphan: an earlier
// taker had it and died (or failed) before leaving a result, so its rows
// may be committed already; PrevTag is that taker's tag, followed by
// those of the takers that died before it (separated by TagSep), which
// the new take keeps too.
type Taken struct {
	sp      *Spool
	id, cur string // cur: the file's current name
	Payload []byte
	Orphan  bool
	PrevTag string
}

// ID names the request.
func (c *Taken) ID() string { return c.id }

// Take takes over up to max published requests, marking each take with
// tag (no '.', '/', '-' or TagSep), oldest first, besides
// except (the caller's own request id, or ""), and also those whose
// taker died or is this process: it must be called only while holding
// the database lock, which every taker holds from its take to its
// results. (A live taker's take is left alone: a taker that failed to
// leave results leaves its requesters to commit alone.) A request whose
// payload cannot be read is skipped (left for its requester's own retry).
// It also removes results and partial requests of processes that are
// gone.
func (s *Spool) Take(except string, max int, tag string) ([]*Taken, error) {
	names, err := s.names()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(idPart(a), idPart(b)) })
	mine := ".clm-" + strconv.Itoa(os.Getpid()) + "-" + tag
	var out []*Taken
	for _, n := range names {
		id, state := splitName(n)
		switch {
		case id == except || id == "":
			continue
		case state == ".res" || state == ".tmp" || state == ".rtmp":
			s.removeIfAbandoned(n, id)
			continue
		case state == ".req":
		case !strings.HasPrefix(state, ".clm-"):
			continue
		case takerPID(state) != os.Getpid() && alive(takerPID(state)):
			continue
		}
		if len(out) >= max {
			break
		}
		c := &Taken{sp: s, id: id, cur: id + mine, Orphan: state != ".req", PrevTag: takeTag(state)}
		if c.PrevTag != "" {
			// Keep the dead takers' tags: each of them may have
			// committed the request.
			c.cur += TagSep + c.PrevTag
		}
		if err := s.d.Rename(n, c.cur); err != nil {
			continue // withdrawn meanwhile
		}
		b, err := s.read(c.cur)
		if err != nil {
			continue
		}
		c.Payload = b
		out = append(out, c)
	}
	return out, nil
}

// Finish leaves result for the requester: the result file appears before
// the take disappears, so a requester always finds one of them.
func (c *Taken) Finish(result []byte) error {
	if err := c.sp.install(c.id+".rtmp", c.id+".res", result); err != nil {
		return err
	}
	return c.sp.d.Remove(c.cur, nil)
}

// abandonAge is how old a result or partial request of a dead process must
// be before a taker (or Sweep) removes it (an age, besides the pid,
// guards against processes of another pid namespace sharing /dev/shm).
const abandonAge = 10 * time.Minute

// removeIfAbandoned removes a request or result (name, of request id)
// whose requester is dead. A request id that names its requester's pid
// namespace and start time
// (Publish) is removed as soon as that process is provably gone
// (liveness.ProcessGone): the last store to close and the first of a process
// leave nothing of killed requesters behind. Ids without them (another
// version of the library) and requesters of another pid namespace that
// shares this directory keep the age rule.
func (s *Spool) removeIfAbandoned(name, id string) {
	f := strings.Split(id, "-")
	if len(f) != 3 && len(f) != 5 {
		return
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		return
	}
	if len(f) == 5 {
		ns, _ := strconv.ParseUint(f[3], 10, 64)
		start, _ := strconv.ParseUint(f[4], 10, 64)
		if liveness.ProcessGone(pid, ns, start) {
			s.d.Remove(name, nil)
			return
		}
	}
	if alive(pid) {
		return
	}
	if st, err := s.d.Lstat(name); err == nil && time.Since(time.Unix(st.Mtim.Unix())) > abandonAge {
		s.d.Remove(name, nil)
	}
}

// takerPID is the pid in a take's state suffix (.clm-<pid>-<tag>), or
// 0.
func takerPID(state string) int {
	f, _, _ := strings.Cut(strings.TrimPrefix(state, ".clm-"), "-")
	pid, _ := strconv.Atoi(f)
	return pid
}

// TagSep separates the tags a take carries (its own, then those of
// earlier takers that died).
const TagSep = "_"

// takeTag is the tag in a take's state suffix, or "".
func takeTag(state string) string {
	if !strings.HasPrefix(state, ".clm-") {
		return ""
	}
	_, tag, _ := strings.Cut(strings.TrimPrefix(state, ".clm-"), "-")
	return tag
}

// splitName splits a spool file name into its id and its state suffix.
func splitName(n string) (id, state string) {
	i := strings.IndexByte(n, '.')
	if i <= 0 {
		return "", ""
	}
	return n[:i], n[i:]
}

// idPart is the id of a spool file name (for sorting).
func idPart(n string) string { id, _ := splitName(n); return id }

// alive reports whether process pid exists (on this node: the spool is
// node-local).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	return unix.Kill(pid, 0) != unix.ESRCH
}
