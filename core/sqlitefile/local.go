package sqlitefile

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/changelog"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodequeue"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/spool"
)

// # Node-local files
//
// The node queue (internal/nodequeue), the spool of group commit
// (internal/spool) and the change log (internal/changelog) live in this user's
// private directory on the node (internal/nodelocal), named by nodelocal.Name,
// each unless switched off (nodelocal.QueueEnabled, GroupCommitEnabled,
// ChangeLogEnabled). All three are opened, and checked, when the store opens
// (openLocal, before its Lock, which waits in the queue), so that a file
// planted at one of their names (by another user, before our directory existed)
// is found then: the speed-up it serves is off for this store (the queue: the
// lock is polled as from another node; the spool: writes commit alone; the log:
// the cache starts over at every commit of others), and Notices says so, once,
// for the caller to warn. Nothing planted is used, changed or removed, and the
// store never waits for it. closeLocal closes them all, after the Lock.

// localFiles are the store's node-local files, all nil when unused.
type localFiles struct {
	dir *nodelocal.Dir // the private directory; nil: none is used
	// queue is the node queue, which the store's Lock waits in
	// (lock.Options.Queue) and the cache asks whether writes are waiting.
	queue *nodequeue.Queue
	// spool hands writes over between this node's processes (group.go);
	// spoolErr is why there is none.
	spool    *spool.Spool
	spoolErr error
	// changes logs this store's commits and changeReader follows the
	// node's (cache.go); none when the cache is not used or the log is
	// off. changeMark marks the log used while the store is open.
	changes      *changelog.Writer
	changeReader *changelog.Reader
	changeMark   *changelog.Mark
	notices      []string
}

// sweepOnce: the first store of a process clears what killed processes of
// its user left in the private directory.
var sweepOnce sync.Once

// openLocal opens the store's node-local files (see above): the node
// queue, the spool and the change log, each unless switched off.
func (s *Backend) openLocal() {
	queue := nodelocal.QueueEnabled()
	group := nodelocal.GroupCommitEnabled() // implies queue
	logged := !s.fresh && nodelocal.ChangeLogEnabled()
	if !queue && !logged {
		return
	}
	var problems []string
	// note records err if it is a file that failed the checks, and
	// reports whether it was.
	note := func(what string, err error, off string) bool {
		var p *nodelocal.Problem
		if !errors.As(err, &p) {
			return false
		}
		problems = append(problems, fmt.Sprintf("node-local %s %s: %s: %s off for %s; remove it", what, p.Path, p.What, off, s.path))
		return true
	}
	defer func() {
		if len(problems) > 0 {
			s.local.notices = []string{strings.Join(problems, "\n")}
		}
	}()
	dir, err := nodelocal.Private()
	if err != nil {
		var off []string
		if queue {
			off = append(off, "node queue")
		}
		if group {
			off = append(off, "group commit")
		}
		if logged {
			off = append(off, "change log")
		}
		note("directory", err, strings.Join(off, ", "))
		return
	}
	s.local.dir = dir
	sweepOnce.Do(func() { sweepLocal(dir) })
	if queue {
		q, err := nodequeue.Open(s.lockPath)
		s.local.queue = q
		note("queue", err, "node queue")
	}
	if group {
		// Opened now rather than at the first write, so that a spool
		// that fails the checks is reported when the store opens.
		sp, err := spool.Open(dir, nodelocal.Name(nodelocal.SpoolPrefix, s.lockPath))
		s.local.spool, s.local.spoolErr = sp, err
		if sp == nil {
			note("spool", err, "group commit")
		}
	}
	if logged {
		name := nodelocal.Name(nodelocal.ChangeLogPrefix, s.lockPath)
		h, err := changelog.MarkUsed(dir, name)
		if !note("change log", err, "change log") {
			s.local.changes, s.local.changeReader, s.local.changeMark = changelog.NewWriter(dir, name), changelog.NewReader(dir, name), h
		}
	}
}

// closeLocal closes the store's node-local files, removing those no other
// store of the node uses (an empty spool, a log nobody else holds, an idle
// gate file) and then the private directory if that left it empty. The
// store's Lock must be closed first: it waits in the queue.
func (s *Backend) closeLocal() {
	lf := &s.local
	if lf.spool != nil {
		lf.spool.Remove()
		lf.spool.Close()
		lf.spool = nil
	}
	if lf.changes != nil {
		lf.changes.Close()
		lf.changeReader.Close()
		lf.changeMark.Release()
		lf.changes, lf.changeReader, lf.changeMark = nil, nil, nil
	}
	lf.queue.Close()
	lf.queue = nil
	if lf.dir != nil {
		lf.dir.RemoveIfEmpty()
	}
}

// sweepLocal removes what dead processes of this user left in dir: gate
// files nobody queues on, spool requests of dead requesters (then empty
// spools), change logs nobody holds (see nodequeue.Sweep, spool.Sweep,
// changelog.Sweep for the rules).
func sweepLocal(dir *nodelocal.Dir) {
	names, _ := dir.Names()
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, nodelocal.GatePrefix):
			nodequeue.Sweep(dir, n)
		case strings.HasPrefix(n, nodelocal.SpoolPrefix):
			spool.Sweep(dir, n)
		case strings.HasPrefix(n, nodelocal.ChangeLogPrefix):
			changelog.Sweep(dir, n)
		}
	}
}

// notices are warnings about the store's node-local files, found when it
// opened (storage.Opened.Notices): each names a file that failed the checks
// (another user's, a symlink, a FIFO, ...), what was wrong, and which speed-up
// is off for this store because of it (at most one notice per store); and, for
// a database created in an existing directory that other users cannot write,
// that they cannot use it (dirmode.go). Callers show them the way their
// language shows warnings (Python: RuntimeWarning).
func (s *Backend) notices() []string {
	n := append([]string{}, s.local.notices...)
	if s.dirNotice != "" {
		n = append(n, s.dirNotice)
	}
	return n
}
