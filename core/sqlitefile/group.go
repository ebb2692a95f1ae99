package sqlitefile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/changelog"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodequeue"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/spool"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// # Group commit
//
// A record's commit waits for four fsyncs (synchronous=FULL with a DELETE
// journal, which the original's databases keep), a millisecond on a local
// disk and far more on Lustre, while the lock is held. With many writers on
// a node the lock is then busy mostly with waiting for the disk. So a
// record (or record_many) that finds another write of its node ahead of it
// in the writers' lane hands its rows over (internal/spool), and whichever
// store holds the lock next as a writer commits every handed-over request
// with its own rows in one transaction, then leaves each requester the
// number of records written for it. A requester that reaches the head of
// the lane and finds its result returns it without taking the lock.
//
// What a caller sees does not change:
//   - record returns only once its rows are committed (by whichever
//     process), and the count is its own rows' count;
//   - each request is all-or-nothing (one transaction holds it whole) and
//     carries its requester's host name, user and source project; the
//     committer's clock dates the rows, as if the requester had committed
//     at that moment;
//   - a requester whose wait times out or is interrupted withdraws its
//     request if nobody has taken it: the error then means nothing was
//     written. If a committer already has it, the requester waits for that
//     transaction's outcome (it holds the lock and is committing) and
//     reports it. Only if that committer dies before leaving the outcome is
//     it unknown, and the error says so;
//   - if a group's transaction fails, every requester of it commits its own
//     rows alone, as without group commit, and sees its own error;
//   - a committer killed after its COMMIT but before leaving the results
//     leaves takes that the next committer commits again: the rows are
//     there, and a row found exactly as requested (program, schedule,
//     result, host, user, project) and dated by the dead committer's
//     transaction (its takes carry that date) counts as written for that
//     requester. A row written earlier by anyone else, even with the same
//     values, does not: record then returns False, as for any key that
//     existed.
//
// TIRASTORE_GROUP_COMMIT=0 switches it off (for comparisons); without the
// node queue (TIRASTORE_NODE_QUEUE=0, or no /dev/shm) there is none
// (nodelocal.GroupCommitEnabled), nor when the spool's directory fails its
// checks (internal/nodelocal; the store warns when it opens). The spool is one
// of the store's node-local files (local.go).

// writeRequest is one record or record_many call's rows (storage.Write:
// the spool's payload) and what this backend learnt of their fate.
type writeRequest struct {
	storage.Write
	// prevStamps: committers that died had taken this request and may
	// have committed its rows, dated by one of prevStamps; a row found
	// exactly as requested with such a date counts as written.
	prevStamps []string
}

// writeResult is what a committer leaves a requester: how many of its rows
// were written, or Retry: the group's transaction failed, commit alone.
type writeResult struct {
	Written int  `json:"written"`
	Retry   bool `json:"retry,omitempty"`
}

// handover is one call's request as nodequeue.Handover sees it.
type handover struct {
	sp  *spool.Spool
	req *writeRequest
	pub *spool.Request // set by Publish
	// left is the result a committer left, once read: a result is
	// final (only its requester removes it), so Done's reading serves
	// handedOverResult too.
	left    []byte
	hasLeft bool
}

// Publish hands the request over (nodequeue.Handover).
func (h *handover) Publish() bool {
	b, err := json.Marshal(h.req)
	if err != nil {
		return false
	}
	r, err := h.sp.Publish(b)
	if err != nil {
		return false
	}
	h.pub = r
	return true
}

// Done reports whether another process committed the request
// (nodequeue.Handover).
func (h *handover) Done() bool {
	_, ok, err := h.read()
	return err == nil && ok
}

// read is the result a committer left for the published request, if any.
func (h *handover) read() ([]byte, bool, error) {
	if h.hasLeft {
		return h.left, true, nil
	}
	b, ok, err := h.pub.Result()
	if ok && err == nil {
		h.left, h.hasLeft = b, true
	}
	return b, ok, err
}

// result decodes the outcome a committer left for the published request.
func (h *handover) result() (writeResult, bool, error) {
	b, ok, err := h.read()
	if err != nil || !ok {
		return writeResult{}, ok, err
	}
	var res writeResult
	if err := json.Unmarshal(b, &res); err != nil {
		return writeResult{}, false, fmt.Errorf("spool %s: result of %s: %w", h.sp.Dir(), h.pub.ID(), err)
	}
	return res, true, nil
}

// writeRecords commits req's rows, handing them over to another writer of
// this node when one is ahead (see Group commit), and returns how many
// were written. Without the store's spool (group commit off, or the spool
// cannot be used: local.spoolErr says why) writes commit alone, as do
// writes of a source over tuning.MaxHandoverSource.
func (s *Backend) writeRecords(ctx context.Context, req *writeRequest) (int, error) {
	sp := s.local.spool
	if sp == nil || len(req.Source) > tuning.MaxHandoverSource {
		return s.commitAlone(ctx, req)
	}
	h := &handover{sp: sp, req: req}
	written, ran := 0, false
	err := s.lockedHandover(ctx, "record", h, func(db *sqlite.DB) error {
		ran = true
		if h.pub != nil {
			// Under the lock no committer is at work: a result is final,
			// and a take without one was left by a dead committer.
			switch res, ok, err := h.result(); {
			case err != nil:
				return err
			case ok && !res.Retry:
				written = res.Written
				return nil
			}
			// Ours to commit now, and nobody else's.
			if taken, tags := h.pub.Discard(); taken {
				req.prevStamps = tagStamps(tags)
			}
		}
		n, err := s.commitGroup(db, req, sp)
		written = n
		return err
	})
	if h.pub == nil {
		return written, err
	}
	defer h.pub.Done()
	switch {
	case errors.Is(err, nodequeue.ErrHandedOver):
		return s.handedOverResult(ctx, h, req)
	case err == nil:
		return written, nil
	case ran:
		return 0, err // our own transaction failed; nothing of ours is left published
	}
	// The lock never came (timeout, interruption, I/O error): take the
	// request back, or learn the outcome of the transaction that has it.
	if withdrawn, werr := h.pub.Withdraw(); withdrawn || werr != nil {
		return 0, err
	}
	b, werr := h.pub.Wait(tuning.HandoverWaitPoll, tuning.HandoverWaitLimit)
	if werr != nil {
		var e *apierr.Error
		if errors.As(err, &e) {
			return 0, &apierr.Error{Kind: e.Kind, Err: e, Message: fmt.Sprintf("%s (the record may have been written: %v)", e.Message, werr)}
		}
		return 0, fmt.Errorf("%w (the record may have been written: %v)", err, werr)
	}
	var res writeResult
	if jerr := json.Unmarshal(b, &res); jerr != nil || res.Retry {
		return 0, err // the group failed: nothing of ours was written
	}
	return res.Written, nil
}

// handedOverResult is the outcome of a request that another process
// committed, or the request committed alone if that process's group failed.
func (s *Backend) handedOverResult(ctx context.Context, h *handover, req *writeRequest) (int, error) {
	res, ok, err := h.result()
	switch {
	case err != nil:
		return 0, s.classify(err, "record")
	case !ok:
		return 0, s.classify(fmt.Errorf("spool %s: no result for %s", h.sp.Dir(), h.pub.ID()), "record")
	case res.Retry:
		return s.commitAlone(ctx, req)
	}
	return res.Written, nil
}

// commitAlone commits req by itself (no handover either way).
func (s *Backend) commitAlone(ctx context.Context, req *writeRequest) (int, error) {
	written := 0
	err := s.withWriteDB(ctx, "record", func(db *sqlite.DB) error {
		n, err := s.commitLogged(db, []*writeRequest{req}, time.Now())
		if err == nil {
			written = n[0]
		}
		return err
	})
	return written, err
}

// commitGroup commits req with the requests handed over to this node's
// writers, in one transaction, and leaves each requester its result. If
// that transaction fails, the requesters are told to commit alone and req
// is committed by itself. It runs under the lock.
func (s *Backend) commitGroup(db *sqlite.DB, req *writeRequest, sp *spool.Spool) (int, error) {
	at := time.Now()
	var taken []*spool.Taken
	// Requests are published by writes waiting in the lane, which hold
	// or wait for a byte of it, and their takers' orphans are waited for
	// there by their requesters: with nobody else in the lane (one
	// F_GETLK), the spool's listing is skipped. A write that has
	// published but not yet taken its place in the lane is then missed:
	// it commits alone once it reaches the lock.
	if sp != nil && s.local.queue.WritesWaiting() {
		// The takes carry the transaction's date: if this process dies
		// after its COMMIT, the next committer can tell its rows.
		taken, _ = sp.Take("", tuning.MaxGroup, strconv.FormatInt(at.UnixMicro(), 10))
	}
	reqs := []*writeRequest{req}
	var mine []*spool.Taken // the takes whose payload could be read
	for _, c := range taken {
		var r writeRequest
		if err := json.Unmarshal(c.Payload, &r); err != nil {
			leaveResult(c, writeResult{Retry: true})
			continue
		}
		if c.Orphan {
			r.prevStamps = tagStamps(c.PrevTag)
		}
		reqs = append(reqs, &r)
		mine = append(mine, c)
	}
	n, err := s.commitLogged(db, reqs, at)
	if err != nil && len(mine) > 0 {
		for _, c := range mine {
			leaveResult(c, writeResult{Retry: true})
		}
		n, err = s.commitLogged(db, reqs[:1], time.Now())
		if err != nil {
			return 0, err
		}
		return n[0], nil
	}
	if err != nil {
		return 0, err
	}
	for i, c := range mine {
		leaveResult(c, writeResult{Written: n[i+1]})
	}
	return n[0], nil
}

// tagStamps are the dates of the transactions whose takes carried tags
// (see commitGroup and spool.Taken.PrevTag).
func tagStamps(tags string) []string {
	var out []string
	for _, tag := range strings.Split(tags, spool.TagSep) {
		if us, err := strconv.ParseInt(tag, 10, 64); err == nil {
			out = append(out, identity.NowISO(time.UnixMicro(us)))
		}
	}
	return out
}

// leaveResult leaves a requester its result; if that fails, the take stays and
// its requester, finding no result, commits its rows itself.
func leaveResult(c *spool.Taken, res writeResult) {
	b, _ := json.Marshal(res)
	_ = c.Finish(b)
}

// commitLogged writes every request in one transaction dated at, in
// order, and returns how many rows of each were written. It logs the
// transaction's changes for the node's other caches (see resultCache).
func (s *Backend) commitLogged(db *sqlite.DB, reqs []*writeRequest, at time.Time) ([]int, error) {
	before, logged := s.generationNow()
	written, changes, err := putRequests(db, reqs, at)
	if err != nil || !logged {
		return written, err
	}
	s.logCommit(before, changes)
	return written, nil
}

// logCommit logs the commit that moved the database from generation
// before as changes (the rows it changed) for the node's caches, this
// store's included (see resultCache). It runs under the lock, right after
// the commit.
func (s *Backend) logCommit(before generation, changes *changelog.Entry) {
	after, ok := s.generationNow()
	if !ok || after == before {
		return
	}
	changes.File, changes.Before, changes.After = s.conn.file, changelog.Generation(before), changelog.Generation(after)
	own, err := s.local.changes.Append(changes)
	if err != nil {
		// The node's caches then start over at this commit, as they
		// would without the log.
		s.local.changes.Close()
	} else if own != nil {
		s.cache.Logged(own)
	}
}

// generationNow reads the database's generation under the lock; ok is
// false when commits are not logged (no log: also with fresh connections).
func (s *Backend) generationNow() (g generation, ok bool) {
	if s.local.changes == nil || s.conn == nil {
		return g, false
	}
	h, err := readHeader(s.conn.hdr)
	if err != nil {
		return g, false
	}
	return h.generation(), true
}

// putRequests writes reqs in one transaction dated at and returns how
// many rows of each it wrote, and the changes for the change log.
func putRequests(db *sqlite.DB, reqs []*writeRequest, at time.Time) ([]int, *changelog.Entry, error) {
	written := make([]int, len(reqs))
	stamp := identity.NowISO(at)
	var changes *changelog.Entry
	err := db.Tx(func(tx *sqlite.Tx) error {
		clear(written)
		changes = &changelog.Entry{}
		for i, r := range reqs {
			if !r.ProgramStored {
				if err := tx.PutProgram(storage.Program{Hash: r.Hash, Name: r.Name, Source: r.Source}); err != nil {
					return err
				}
			}
			for _, p := range r.Rows {
				rec := &storage.Record{
					Key: p.Key, ProgramHash: r.Hash, Schedule: p.Schedule, ResultJSON: p.ResultJSON,
					Hostname: r.Hostname, Username: r.Username, CreationDate: stamp, UpdateDate: stamp,
					SourceProject: r.SourceProject,
				}
				ok, err := putRecord(tx, rec, r.Overwrite)
				switch {
				case err != nil:
				case ok && r.Overwrite:
					// Inserted, or updated keeping the old creation date.
					changes.Drop = append(changes.Drop, changelog.Dropped{Key: rec.Key, ProgramHash: rec.ProgramHash})
				case ok:
					changes.Put = append(changes.Put, rec) // exactly what a lookup now reads
				}
				for _, st := range r.prevStamps {
					if err != nil || ok {
						break
					}
					mine := *rec
					mine.UpdateDate = st
					ok, err = tx.HasRecord(&mine)
				}
				if err != nil {
					return err
				}
				if ok {
					written[i]++
				}
			}
			for _, c := range r.Release {
				if _, err := tx.DeleteClaim(c.Key, c.Token); err != nil {
					return err
				}
			}
			if len(r.Renew) > 0 {
				if _, err := tx.RenewClaims(r.Renew, stamp); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return written, changes, err
}
