package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"time"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/environ"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/internal/wait"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// # Waiting for another worker's claim
//
// lookupOrClaim is the loop behind LookupOrClaim and LookupManyOrClaim
// (see "Claims" in claim.go): read the records and claims, claim what is
// free, and, with Wait, probe the result cache lock-free every
// tuning.ClaimProbe and read under the lock with a full-jitter backoff,
// judging each claim of another worker by what this store has seen of it
// (look: its holder dead on this host, or unchanged for its lease on this
// store's clock).

// sighting is one observation of another worker's claim.
type sighting struct {
	token    string
	renewals int64
	since    time.Time // monotonic
}

// maxSightings bounds claimState.seen (keys are dropped once resolved;
// this only bounds a caller that abandons waits).
const maxSightings = 1 << 14

// look judges c, another worker's claim, as seen now: whether it may be
// taken over (its holder is dead on this host, or it stayed unchanged for
// its lease here), and when its lease will be due if it stays unchanged.
func (cs *claimState) look(s *Store, c *storage.Claim, now time.Time) (takeable, dead bool, due time.Time) {
	if liveness.GoneFromThisHost(s.hostname, c.Hostname, c.PID, liveness.Process{StartTime: c.StartTime, BootID: c.BootID, PIDNS: c.PIDNS}) ||
		cs.jobEnded(c) {
		return true, true, now
	}
	lease := time.Duration(c.LeaseSeconds * float64(time.Second))
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, mine := cs.held[c.Token]; mine {
		return false, false, now.Add(lease) // this process is alive: its claim is
	}
	if c.ServerClock {
		// One clock dates every renewal: its verdict needs no watching.
		return c.ExpiresIn <= 0, false, now.Add(max(c.ExpiresIn, 0))
	}
	sg, ok := cs.seen[c.Key]
	if !ok || sg.token != c.Token || sg.renewals != c.Renewals {
		if len(cs.seen) >= maxSightings {
			clear(cs.seen)
		}
		if cs.seen == nil {
			cs.seen = make(map[string]sighting)
		}
		sg = sighting{token: c.Token, renewals: c.Renewals, since: now}
		cs.seen[c.Key] = sg
	}
	due = sg.since.Add(lease)
	return !now.Before(due), false, due
}

// forget drops what was seen of key's claim (resolved).
func (cs *claimState) forget(key string) {
	cs.mu.Lock()
	delete(cs.seen, key)
	delete(cs.ended, key)
	cs.mu.Unlock()
}

// pendingClaim is a schedule whose outcome is not known yet.
type pendingClaim struct {
	i      int
	key    string
	norm   string         // normalized: what the key hashes and the claim row shows
	given  string         // as the caller gave it: what Record stores
	holder *storage.Claim // the last claim of another worker seen on it
	due    time.Time      // when its lease is due, if it stays unchanged
	// remeasure: the schedule is recorded, and the claim is to measure
	// it again (remeasure.go); mismatch: because no run matched the
	// store's fingerprint rules, which fields differed (match.go).
	remeasure bool
	mismatch  Mismatch
	// slurmAsked: when Slurm was last asked about its holder's job
	// (claimslurm.go).
	slurmAsked time.Time
	// token is this call's claim token for the schedule, made by the
	// first pass that claims it (not before: a hit needs none) and the
	// same in every later pass: a pass that finds it on the claim knows
	// the claim as its own, put by an earlier pass whose COMMIT's answer
	// was lost.
	token string
}

func (s *Store) lookupOrClaim(ctx context.Context, programName, hash, source string, schedules []string, opts ClaimOptions, many bool) ([]ClaimOutcome, error) {
	lease, err := opts.lease()
	if err != nil {
		return nil, err
	}
	out := make([]ClaimOutcome, len(schedules))
	pend := make([]*pendingClaim, 0, len(schedules))
	for i, sc := range schedules {
		err := input.Text("tiralib_schedule_string", sc)
		norm := schedule.Normalize(sc)
		if err == nil {
			if ok, reason := schedule.Validate(norm); !ok {
				err = invalidSchedule(reason)
			}
		}
		if err != nil && many {
			return nil, apierr.Prefix(fmt.Sprintf("schedules[%d]: ", i), err)
		} else if err != nil {
			return nil, err
		}
		pend = append(pend, &pendingClaim{i: i, key: keys.RecordKeyNormalized(hash, norm), norm: norm, given: sc})
	}
	// A read as lookup's or lookup_many's: lock-free for what the cache
	// proves current, else under the lock (which loads the cache, so that
	// the next lookups of the program are lock-free too); only what is
	// still missing takes the claims transaction.
	if pend, err = s.readResults(ctx, hash, pend, out, opts.Remeasure); err != nil || len(pend) == 0 {
		return out, err
	}
	if err := s.CheckWrites(); err != nil {
		return nil, err
	}
	var deadline time.Time
	if s.lockWait > 0 {
		deadline = time.Now().Add(s.lockWait)
	}
	if opts.Wait && s.opts.Interruptible != nil {
		var stop func()
		ctx, stop = s.opts.Interruptible(ctx)
		defer stop()
	}
	poll := tuning.ClaimMinPoll
	for first := true; ; first = false {
		// Read the records and claims; take what is free, under the lock
		// as a write only when something may be taken (the first pass
		// always: a miss usually is one).
		take := first || s.someoneGone(pend, time.Now())
		if pend, err = s.claimPass(ctx, programName, hash, source, lease, pend, out, take, opts.Remeasure); err != nil {
			return nil, s.claimWaitError(ctx, err, pend)
		}
		if len(pend) == 0 || !opts.Wait {
			for _, p := range pend {
				if p.holder != nil {
					out[p.i].Busy = newClaimHolder(p.holder, false)
				}
			}
			return out, nil
		}
		if s.askSlurm(ctx, pend, time.Now()) {
			continue // a holder's job has ended: take its claim now
		}
		// Wait: probe the cache and the holders of this host often, read
		// under the lock with backoff, or when a lease is due.
		next := time.Now().Add(time.Duration(mrand.Int64N(int64(poll)) + 1))
		poll = min(2*poll, tuning.ClaimMaxPoll)
		for {
			if !deadline.IsZero() && time.Now().After(deadline) {
				return nil, s.claimTimeout(pend)
			}
			if err := wait.Sleep(ctx, min(tuning.ClaimProbe, time.Until(next)+time.Millisecond)); err != nil {
				return nil, s.claimWaitError(ctx, err, pend)
			}
			if pend, err = s.peekResults(hash, pend, out); err != nil || len(pend) == 0 {
				return out, err
			}
			now := time.Now()
			if !now.Before(next) || s.someoneGone(pend, now) || s.slurmDueAny(ctx, pend, now) {
				break
			}
		}
	}
}

// peekResults fills out for the pending schedules that the cache can
// answer as recorded, lock-free, and returns the others.
func (s *Store) peekResults(hash string, pend []*pendingClaim, out []ClaimOutcome) ([]*pendingClaim, error) {
	left := pend[:0]
	for _, p := range pend {
		rec, ok := s.be.Peek(hash, p.key)
		if !ok || rec == nil {
			left = append(left, p)
			continue
		}
		r, err := s.newResult(rec)
		if err != nil {
			return nil, err
		}
		if r == nil { // no run matches the store's rules: a miss
			left = append(left, p)
			continue
		}
		out[p.i].Result = r
		s.claims.forget(p.key)
	}
	return left, nil
}

// readResults is peekResults through the backend's lookup or lookup_many
// (under the lock unless the cache answers); with remeasure, a record to
// measure again stays pending.
func (s *Store) readResults(ctx context.Context, hash string, pend []*pendingClaim, out []ClaimOutcome, remeasure bool) ([]*pendingClaim, error) {
	keyList := make([]string, len(pend))
	for i, p := range pend {
		keyList[i] = p.key
	}
	var recs []*storage.Record
	var err error
	if len(pend) == 1 {
		// As lookup reads: its read may load the whole program.
		var rec *storage.Record
		rec, err = s.be.Lookup(ctx, hash, keyList[0])
		recs = []*storage.Record{rec}
	} else {
		recs, err = s.be.LookupMany(ctx, hash, keyList)
	}
	if err != nil {
		return nil, err
	}
	left := pend[:0]
	for i, p := range pend {
		if recs[i] == nil {
			left = append(left, p)
			continue
		}
		r, err := s.newResult(recs[i])
		if err != nil {
			return nil, err
		}
		if r == nil || remeasure && s.remeasurable(recs[i], r) {
			left = append(left, p)
			continue
		}
		out[p.i].Result = r
		s.claims.forget(p.key)
	}
	return left, nil
}

// someoneGone reports whether a holder of this host died, a holder's
// Slurm job ended or a lease is due, any of which makes the waiter take
// claims over now.
func (s *Store) someoneGone(pend []*pendingClaim, now time.Time) bool {
	for _, p := range pend {
		if h := p.holder; h == nil || !now.Before(p.due) || s.claims.jobEnded(h) ||
			liveness.GoneFromThisHost(s.hostname, h.Hostname, h.PID, liveness.Process{StartTime: h.StartTime, BootID: h.BootID, PIDNS: h.PIDNS}) {
			return true
		}
	}
	return false
}

// claimPass reads the pending schedules' records and claims in one
// transaction (a write transaction if take: then it also claims every
// schedule that is free, or whose claim may be taken over), fills out for
// those it resolved and returns the others, each with its holder.
func (s *Store) claimPass(ctx context.Context, programName, hash, source string, lease time.Duration,
	pend []*pendingClaim, out []ClaimOutcome, take, remeasure bool) ([]*pendingClaim, error) {
	var mine []*Claim
	var results map[int]*Result
	var left []*pendingClaim
	var couldTake bool // a read-only pass found something to take
	// A write pass also renews the claims this store holds (as its
	// records do): one more way to keep them alive when the lock is busy.
	var renew, renewedRefs []storage.ClaimRef
	pass := func(r storage.Reader, w storage.ClaimWriter) error {
		mine, results, left, couldTake = nil, map[int]*Result{}, nil, false
		claimedNow := map[string]bool{}
		if w != nil && len(renew) > 0 {
			var err error
			if renewedRefs, err = w.RenewClaims(renew, identity.NowISO(time.Now())); err != nil {
				return err
			}
		}
		keyList := make([]string, len(pend))
		for i, p := range pend {
			keyList[i] = p.key
		}
		claims, err := r.GetClaims(keyList)
		if err != nil {
			return err
		}
		now := time.Now()
		var at string
		for _, p := range pend {
			rec, err := r.Get(p.key)
			if err != nil {
				return err
			}
			// A record is claimed to be measured again when it is
			// unstable (remeasure) or when none of its runs matches this
			// store's fingerprint rules (res nil): either way the claim's
			// record appends a run.
			var res *Result
			var mm Mismatch
			if rec != nil {
				if res, mm, err = s.judge(rec, r); err != nil {
					return err
				}
				if res != nil && (!remeasure || !s.remeasurable(rec, res)) {
					results[p.i] = res
					continue
				}
			}
			p.remeasure, p.mismatch = rec != nil, mm
			if claimedNow[p.key] {
				continue // the same schedule twice in one batch: one claim
			}
			c := claims[p.key]
			if c != nil && p.token != "" && c.Token == p.token {
				// Put by an earlier pass of this call whose COMMIT's
				// answer was lost (UpdateClaims ran it again): ours.
				claimedNow[p.key] = true
				mine = append(mine, s.claimOf(c, p, lease, source))
				continue
			}
			if c != nil {
				takeable, _, due := s.claims.look(s, c, now)
				if res != nil && !takeable {
					results[p.i] = res // being measured again: the record as it stands
					continue
				}
				if !takeable || w == nil {
					p.holder, p.due = c, due
					left = append(left, p)
					couldTake = couldTake || takeable
					continue
				}
			} else if w == nil {
				p.holder, p.due = nil, now
				left = append(left, p)
				couldTake = true
				continue
			}
			claimedNow[p.key] = true
			if at == "" {
				at = identity.NowISO(now)
			}
			row := s.newClaimRow(p, programName, hash, lease, at)
			if err := w.PutClaim(row); err != nil {
				return err
			}
			mine = append(mine, s.claimOf(row, p, lease, source))
		}
		return nil
	}
	var err error
	if !take {
		err = s.be.Reread(ctx, "lookup_or_claim", func(r storage.Reader) error { return pass(r, nil) })
		take = err == nil && couldTake // released or expired meanwhile: take it now
	}
	if take && err == nil {
		renew = s.claims.renewable("")
		err = s.be.UpdateClaims(ctx, "lookup_or_claim", func(w storage.ClaimWriter) error { return pass(w, w) })
		if err == nil && len(renew) > 0 {
			s.claims.renewed(renew, renewedRefs)
		}
	}
	if err != nil {
		return pend, err
	}
	for i, r := range results {
		out[i].Result = r
	}
	for _, c := range mine {
		s.claims.hold(s, c)
		for _, p := range pend {
			if p.key == c.ref.Key {
				out[p.i].Claim = c
			}
		}
	}
	for _, p := range pend {
		if out[p.i].Result != nil {
			s.claims.forget(p.key)
		}
	}
	return left, nil
}

// newClaimToken is a claim's token: random, so that nobody else's claim
// has it.
func newClaimToken() string {
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	return hex.EncodeToString(tok[:])
}

// claimOf is the caller's Claim of row c, this store's claim on p.
func (s *Store) claimOf(c *storage.Claim, p *pendingClaim, lease time.Duration, source string) *Claim {
	return &Claim{s: s, ref: storage.ClaimRef{Key: c.Key, Token: c.Token}, programName: c.ProgramName,
		programHash: c.ProgramHash, schedule: p.given, lease: lease, source: source, remeasure: p.remeasure,
		mismatch: p.mismatch}
}

// freshTokenPerPass is for a test's negative control only: each pass
// claims with a new token, so that a pass cannot know an earlier pass's
// claim as its own.
var freshTokenPerPass bool

// newClaimRow is this store's claim on p.
func (s *Store) newClaimRow(p *pendingClaim, programName, hash string, lease time.Duration, at string) *storage.Claim {
	if p.token == "" {
		p.token = newClaimToken()
	}
	token := p.token
	if freshTokenPerPass {
		token = newClaimToken()
	}
	me := liveness.Self()
	job, cluster := environ.Get("SLURM_JOB_ID"), ""
	if job != "" {
		cluster = environ.Get("SLURM_CLUSTER_NAME")
	}
	return &storage.Claim{
		Key: p.key, ProgramHash: hash, ProgramName: programName, Schedule: p.norm,
		Token: token, Hostname: s.hostname, PID: os.Getpid(),
		StartTime: me.StartTime, BootID: me.BootID, PIDNS: me.PIDNS,
		SlurmJobID: job, SlurmCluster: cluster, Username: s.username,
		LeaseSeconds: lease.Seconds(), ClaimedAt: at, RenewedAt: at,
	}
}

// claimTimeout is the error of a wait that outlasted lock_timeout: it
// names a holder the caller waited for.
func (s *Store) claimTimeout(pend []*pendingClaim) error {
	who := "another worker"
	for _, p := range pend {
		if p.holder != nil {
			who = newClaimHolder(p.holder, false).describe()
			me := liveness.Self()
			if liveness.OnThisHost(s.hostname, p.holder.Hostname, liveness.Process{StartTime: p.holder.StartTime,
				BootID: p.holder.BootID, PIDNS: p.holder.PIDNS}) && p.holder.PID == os.Getpid() && p.holder.StartTime == me.StartTime {
				who += ": this very process, a claim it has not recorded or released (record or release it " +
					"before asking for its schedule again, or ask with wait=False), unless another of its threads " +
					"is still measuring"
			}
			break
		}
	}
	return newError(KindTimeout, "%s: timed out after %gs waiting for the measurement of %s claimed by %s (%d schedules still claimed)",
		s.path, s.lockWait.Seconds(), schedule.Repr(pend[0].norm), who, len(pend))
}

// claimWaitError is err, from a wait for claims, as the caller should see
// it: an interrupted wait says so (ctx canceled by Ctrl-C).
func (s *Store) claimWaitError(ctx context.Context, err error, pend []*pendingClaim) error {
	var e *apierr.Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return wrapError(KindInterrupted, err, "%s: lookup_or_claim interrupted while waiting for %d claimed schedules", s.path, len(pend))
	}
	return err
}
