package core

import (
	"context"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/slurmjob"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// # Claims that follow the Slurm job
//
// A holder renews its claim every third of its lease. When a renewal is
// late by a quarter of that interval, the holder may be dead, stopped or
// only slow; on another node its pid proves nothing. If the holder ran in
// a Slurm job of this waiter's cluster, the waiter asks Slurm
// (core/slurmjob: one query per interval for the whole node, answers
// shared): a job that has ended (cancelled, timed out, failed, completed)
// holds nothing any more, and its claim is taken over at once instead of
// at the end of its lease. Anything else Slurm says (running, suspended,
// requeued) or cannot say (unreachable, another cluster, a claim of a
// version that did not record the cluster) leaves the decision to the
// lease, so a suspended job keeps its claims for their lease, as before.
// Nothing is asked while holders renew on time: a search whose workers
// live costs Slurm no query.

// slurmJobs is this process's Asker (one per process: it shares answers
// with the node's other processes through core/slurmjob's file).
var slurmJobs = sync.OnceValue(func() *slurmjob.Asker { return slurmjob.New(slurmjob.Options{}) })

// overdueAfter is how long a holder's claim may stay unchanged before the
// waiter asks Slurm about its job: its renewal interval (a third of the
// lease) and a quarter of that again.
func overdueAfter(lease time.Duration) time.Duration { return lease * 5 / 12 }

// slurmJudged reports whether c's holder is to be judged by Slurm from
// here: it ran in a job of this process's cluster, on another host (on
// this one, /proc judges it).
func (s *Store) slurmJudged(c *storage.Claim, cluster string) bool {
	return c.SlurmJobID != "" && c.SlurmCluster != "" && c.SlurmCluster == cluster &&
		!liveness.OnThisHost(s.hostname, c.Hostname, liveness.Process{StartTime: c.StartTime, BootID: c.BootID, PIDNS: c.PIDNS})
}

// askSlurm asks Slurm about the jobs of the pending claims' holders that
// are overdue (see above) and marks those whose job has ended, so that
// the next pass takes them over; it reports whether it marked any.
func (s *Store) askSlurm(ctx context.Context, pend []*pendingClaim, now time.Time) bool {
	cluster := slurmJobs().Cluster(ctx)
	if cluster == "" {
		return false
	}
	var ids []string
	var asked []*pendingClaim
	for _, p := range pend {
		if s.slurmDue(p, cluster, now) {
			p.slurmAsked = now
			ids = append(ids, p.holder.SlurmJobID)
			asked = append(asked, p)
		}
	}
	if len(ids) == 0 {
		return false
	}
	ended := slurmJobs().Ended(ctx, cluster, ids)
	marked := false
	for _, p := range asked {
		if state, ok := ended[p.holder.SlurmJobID]; ok {
			s.claims.markJobEnded(p.holder, state)
			marked = true
		}
	}
	return marked
}

// slurmDue reports whether p's holder is to be asked about now: judged by
// Slurm from here, overdue, not known ended, and not asked about within
// tuning.SlurmInterval (the node asks no more often; a suspended job stays
// overdue, and must not make its waiters read the claims in a loop).
func (s *Store) slurmDue(p *pendingClaim, cluster string, now time.Time) bool {
	h := p.holder
	if h == nil || cluster == "" || !s.slurmJudged(h, cluster) || s.claims.jobEnded(h) ||
		now.Sub(p.slurmAsked) < tuning.SlurmInterval {
		return false
	}
	lease := time.Duration(h.LeaseSeconds * float64(time.Second))
	unchangedSince := p.due.Add(-lease)
	return now.Sub(unchangedSince) >= overdueAfter(lease)
}

// slurmDueAny reports whether a holder of pend is to be asked about now,
// which makes the waiter read the claims (and ask) at once.
func (s *Store) slurmDueAny(ctx context.Context, pend []*pendingClaim, now time.Time) bool {
	cluster := slurmJobs().Cluster(ctx)
	for _, p := range pend {
		if s.slurmDue(p, cluster, now) {
			return true
		}
	}
	return false
}

// jobEnd is a claim whose holder's Slurm job was seen ended: the claim
// as it was then (a takeover or a renewal since makes it another).
type jobEnd struct {
	token    string
	renewals int64
	state    string
}

// markJobEnded notes that c's holder's job has ended (state).
func (cs *claimState) markJobEnded(c *storage.Claim, state string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended == nil || len(cs.ended) >= maxSightings {
		cs.ended = make(map[string]jobEnd)
	}
	cs.ended[c.Key] = jobEnd{token: c.Token, renewals: c.Renewals, state: state}
}

// jobEnded reports whether c, as it stands, is a claim whose holder's job
// was seen ended.
func (cs *claimState) jobEnded(c *storage.Claim) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	e, ok := cs.ended[c.Key]
	return ok && e.token == c.Token && e.renewals == c.Renewals
}

// endedJobClaims are the claims, by token, whose holder's Slurm job has
// ended, as they stood when Slurm was asked (a renewal since makes the
// claim another): of the claims judged by Slurm from here (slurmJudged),
// in one question, outside any transaction. Nil outside a Slurm cluster.
func (s *Store) endedJobClaims(ctx context.Context) (map[string]jobEnd, error) {
	cluster := slurmJobs().Cluster(ctx)
	if cluster == "" {
		return nil, nil
	}
	var judged []storage.Claim
	err := s.be.View(ctx, "list claims", func(r storage.Reader) error {
		judged = judged[:0]
		return r.EachClaim(func(c *storage.Claim) error {
			if s.slurmJudged(c, cluster) {
				judged = append(judged, *c)
			}
			return nil
		})
	})
	if err != nil || len(judged) == 0 {
		return nil, err
	}
	ids := make([]string, len(judged))
	for i, c := range judged {
		ids[i] = c.SlurmJobID
	}
	states := slurmJobs().Ended(ctx, cluster, ids)
	out := make(map[string]jobEnd)
	for _, c := range judged {
		if state, ok := states[c.SlurmJobID]; ok {
			out[c.Token] = jobEnd{token: c.Token, renewals: c.Renewals, state: state}
		}
	}
	return out, nil
}

// jobStates fills the JobState of the listed holders whose job is of this
// process's cluster, in one question to Slurm (shared with the node, as
// the waiters' are).
func jobStates(ctx context.Context, hs []*ClaimHolder) {
	cluster := slurmJobs().Cluster(ctx)
	if cluster == "" {
		return
	}
	var ids []string
	for _, h := range hs {
		if h.SlurmJobID != "" && h.SlurmCluster == cluster {
			ids = append(ids, h.SlurmJobID)
		}
	}
	if len(ids) == 0 {
		return
	}
	states := slurmJobs().States(ctx, cluster, ids)
	for _, h := range hs {
		if h.SlurmCluster == cluster {
			h.JobState = states[h.SlurmJobID]
			h.JobEnded = h.JobState != "" && slurmjob.Terminal(h.JobState)
		}
	}
}
