package sqlitefile

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tirastore/tirastore/core/changelog"
	"github.com/tirastore/tirastore/core/environ"
	"github.com/tirastore/tirastore/core/lock"
	"github.com/tirastore/tirastore/core/nodelocal"
	"github.com/tirastore/tirastore/core/spool"
)

// # Node-local files
//
// The node queue (core/lock), the spool of group commit (core/spool) and
// the change log (core/changelog) live in this user's private directory
// on the node (core/nodelocal). All three are opened, and checked, when
// the store opens, so that a file planted at one of their names (by
// another user, before our directory existed) is found then: the speed-up
// it serves is off for this store (the queue: the lock is polled as from
// another node; the spool: writes commit alone; the log: the cache starts
// over at every commit of others), and Notices says so, once, for the
// caller to warn. Nothing planted is used, changed or removed, and the
// store never waits for it.

// localFiles are the store's handles on its node-local files.
type localFiles struct {
	dir      *nodelocal.Dir  // the private directory; nil: none is used
	queue    *lock.NodeQueue // the hold on the node queue (the Lock shares it)
	spoolErr error           // why groupSpool has no spool
	notices  []string
}

// sweepOnce: the first store of a process clears what killed processes of
// its user left in the private directory.
var sweepOnce sync.Once

// openLocal opens the store's node-local files (see above): the node
// queue, the spool and the change log, each unless switched off.
func (s *Store) openLocal() {
	queue := environ.Get("TIRASTORE_NODE_QUEUE") != "0"
	group := queue && environ.Get("TIRASTORE_GROUP_COMMIT") != "0"
	logged := !s.fresh && environ.Get("TIRASTORE_CHANGE_LOG") != "0"
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
		q, err := lock.OpenNodeQueue(s.lockPath)
		s.local.queue = q
		note("queue", err, "node queue")
	}
	if group && s.groupSpool() == nil {
		note("spool", s.local.spoolErr, "group commit")
	}
	if logged {
		name := lock.NodeLocalName(lock.ChangeLogPrefix, s.lockPath)
		h, err := changelog.Hold(dir, name)
		if !note("change log", err, "change log") {
			s.changes, s.changeReader, s.changeHold = changelog.NewWriter(dir, name), changelog.NewReader(dir, name), h
		}
	}
}

// closeLocal closes the store's node-local files, removing those no other
// store of the node uses (an empty spool, a log nobody else holds; the
// Lock removes an idle gate file) and then the private directory if that
// left it empty.
func (s *Store) closeLocal() {
	if s.spool != nil {
		s.spool.Remove()
		s.spool.Close()
	}
	if s.changes != nil {
		s.changes.Close()
		s.changeReader.Close()
		s.changeHold.Release()
	}
	s.local.queue.Close()
	s.local.queue = nil
	if s.local.dir != nil {
		s.local.dir.RemoveIfEmpty()
	}
}

// sweepLocal removes what dead processes of this user left in dir: gate
// files nobody queues on, spool requests of dead requesters (then empty
// spools), change logs nobody holds (see lock.SweepGate, spool.Sweep,
// changelog.Sweep for the rules).
func sweepLocal(dir *nodelocal.Dir) {
	names, _ := dir.Names()
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, lock.GatePrefix):
			lock.SweepGate(dir, n)
		case strings.HasPrefix(n, lock.SpoolPrefix):
			spool.Sweep(dir, n)
		case strings.HasPrefix(n, lock.ChangeLogPrefix):
			changelog.Sweep(dir, n)
		}
	}
}

// notices are warnings about the store's node-local files, found when it
// opened (storage.Opened.Notices): each names a file that failed the checks (another user's, a
// symlink, a FIFO, ...), what was wrong, and which speed-up is off for
// this store because of it (at most one notice per store); and, for a
// database created in an existing directory that other users cannot
// write, that they cannot use it (dirmode.go). Callers show them the way
// their language shows warnings (Python: RuntimeWarning).
func (s *Store) notices() []string {
	n := append([]string{}, s.local.notices...)
	if s.dirNotice != "" {
		n = append(n, s.dirNotice)
	}
	return n
}
