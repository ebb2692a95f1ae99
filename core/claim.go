package core

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// # Claims: never measure the same schedule twice
//
// Workers of one search reach the same schedule at nearly the same
// moment; without coordination each misses, each measures, and all
// results but one are thrown away. LookupOrClaim returns the record when
// there is one; else it claims the schedule for its caller, who measures
// it and records through the Claim, in one transaction that also ends the
// claim. A caller that finds a live claim of another worker waits for its
// result (or returns at once, Wait false).
//
// A claim is a row of the claims table (storage.Claim) in the same
// database, written under the same lock as the records: claiming a key is
// reading that it has neither a record nor a live claim and writing the
// claim, in one transaction, so two workers cannot both claim it. The
// original library's workers never look at the table: they measure and
// record as before, and a claimer's record then returns False like any
// record of an existing key.
//
// When a claim ends without a result, a waiter takes it over:
//   - its holder released it (Release, or an exception in Python's with
//     block): the row is gone;
//   - its holder is dead on the waiter's host: the lock's dead-holder rule
//     (core/liveness.GoneFromThisHost: same host, kernel and pid namespace,
//     pid gone or reused), judged at once;
//   - its lease ran out: the holder renews the row every third of its
//     lease (a goroutine of the holder's Store, while it holds claims),
//     and a waiter that has seen the row unchanged for the lease, on its
//     own monotonic clock, takes it over. As for the lock, the holder's
//     clock or dates never count, so clock skew cannot expire a live
//     claim; a stopped holder (SIGSTOP, a suspended Slurm job, a VM
//     pause) loses its claims after its lease, as a dead one on another
//     node does. The observation is kept by the Store across calls.
//     A database server dates every renewal by its own one clock
//     (storage.Claim.ServerClock): there the server's verdict counts,
//     and a waiter that just arrived need not watch the row first.
//
// A late record, of a claim that expired and may have been taken over:
// Claim.Record stores the result if the schedule is still not recorded
// (the measurement is as good as anyone's) and returns true; if someone
// recorded it meanwhile, it returns false, as record does for an existing
// key. It never raises for being late, and it ends the claim only if the
// claim is still its own, so a worker that took over keeps its claim
// (its own record then returns false).
//
// A waiter does not hammer the shared filesystem: every tuning.ClaimProbe
// it asks the result cache, lock-free, whether the result is there (a
// read of the database's header tells whether anyone committed since) and
// looks, locally, whether a holder of this host died; it reads the claims
// under the lock only with a full-jitter backoff from tuning.ClaimMinPoll
// to tuning.ClaimMaxPoll, when a holder of this host died, or when a
// lease it watches is due. The wait is bounded by lock_timeout and ends
// early on Ctrl-C (Options.Interruptible), like a wait for the lock.

// ClaimOptions are LookupOrClaim's choices.
type ClaimOptions struct {
	// Lease is how long other workers let the claim go unrenewed before
	// they take it over (0: tuning.ClaimLease; else between
	// tuning.MinClaimLease and tuning.MaxClaimLease).
	Lease time.Duration
	// Wait: when another live worker holds the claim, wait until its
	// result is recorded (returned) or its claim ends without one (then
	// claimed for this caller); false: return at once.
	Wait bool
	// Remeasure: a record that the noise policy calls unstable, under its
	// cap of runs, is claimed to be measured again (remeasure.go).
	Remeasure bool
}

// lease resolves o.Lease.
func (o ClaimOptions) lease() (time.Duration, error) {
	l := o.Lease
	if l == 0 {
		return tuning.ClaimLease, nil
	}
	if l < tuning.MinClaimLease || l > tuning.MaxClaimLease {
		return 0, newError(KindValue, "lease must be between %g and %g seconds, got %g",
			tuning.MinClaimLease.Seconds(), tuning.MaxClaimLease.Seconds(), l.Seconds())
	}
	return l, nil
}

// ClaimHolder is who holds a claim: for a caller that found it busy, for
// listings (tirastore claims) and for error messages.
type ClaimHolder struct {
	Key, ProgramHash, ProgramName, Schedule string
	Hostname                                string
	PID                                     int
	SlurmJobID, SlurmCluster, Username      string
	// JobState is what Slurm says of the holder's job ("RUNNING",
	// "SUSPENDED", "CANCELLED", ...; claimslurm.go), "" when it was not
	// asked or did not say: only listings (Claims) ask. JobEnded: that
	// state says the job is over (core/slurmjob.Terminal), so the next
	// waiter takes the claim over.
	JobState             string
	JobEnded             bool
	Lease                time.Duration
	Renewals             int64
	ClaimedAt, RenewedAt string
	// Dead: its process is provably gone (it died on this host); such a
	// claim is taken over by the next caller.
	Dead bool
	// Recorded: the schedule has a record although the claim is there
	// (only check's stale claims say; listings leave it false).
	Recorded bool
}

func newClaimHolder(c *storage.Claim, dead bool) *ClaimHolder {
	return &ClaimHolder{Key: c.Key, ProgramHash: c.ProgramHash, ProgramName: c.ProgramName, Schedule: c.Schedule,
		Hostname: c.Hostname, PID: c.PID, SlurmJobID: c.SlurmJobID, SlurmCluster: c.SlurmCluster, Username: c.Username,
		Lease: time.Duration(c.LeaseSeconds * float64(time.Second)), Renewals: c.Renewals,
		ClaimedAt: c.ClaimedAt, RenewedAt: c.RenewedAt, Dead: dead}
}

// describe names the holder in a sentence.
func (h *ClaimHolder) describe() string {
	job := ""
	if h.SlurmJobID != "" {
		job = ", Slurm job " + h.SlurmJobID
		if h.SlurmCluster != "" {
			job += " of cluster " + h.SlurmCluster
		}
	}
	return fmt.Sprintf("%s pid %d%s, claimed at %s, lease %gs", h.Hostname, h.PID, job, h.ClaimedAt, h.Lease.Seconds())
}

// Claim is this caller's claim on measuring one schedule: measure it, then
// Record (or Release to give it up). It renews itself while held. Safe
// for concurrent use; after Record or Release it is ended.
type Claim struct {
	s            *Store
	ref          storage.ClaimRef
	programName  string
	programHash  string
	schedule     string // as the caller gave it
	lease        time.Duration
	mu           sync.Mutex
	source       string // "" until known (a claim made by hash)
	ended, taken bool
	// remeasure: a claim on a recorded schedule, whose Record appends
	// (remeasure.go): unstable, or (mismatch) none of its runs matches
	// the store's fingerprint rules (match.go).
	remeasure bool
	mismatch  Mismatch
}

// Token names the claim (the C ABI's and Python's handle on it).
func (c *Claim) Token() string { return c.ref.Token }

// Key is the record key the result will be stored under.
func (c *Claim) Key() string { return c.ref.Key }

// Lease is the claim's lease.
func (c *Claim) Lease() time.Duration { return c.lease }

// Remeasure reports whether the claim is on a recorded schedule, whose
// Record appends a run (see "Re-measuring an unstable record").
func (c *Claim) Remeasure() bool { return c.remeasure }

// Mismatch is, for a claim on a record none of whose runs matches the
// store's fingerprint rules, what differed in the closest run; nil
// otherwise.
func (c *Claim) Mismatch() Mismatch { return c.mismatch }

// Schedule is the schedule as the caller gave it.
func (c *Claim) Schedule() string { return c.schedule }

// ProgramName is the program's name as the claimer gave it (a reply shows
// it).
func (c *Claim) ProgramName() string { return c.programName }

// ProgramHash is the claimed program's hash (a reply shows it; SetSource
// checks a source against it).
func (c *Claim) ProgramHash() string { return c.programHash }

// TakenOver reports whether a renewal found the claim no longer this
// caller's: it expired (the holder was stopped longer than its lease) and
// another worker took it over, or an operator removed it. Record still
// stores the result if nobody has (see "Claims").
func (c *Claim) TakenOver() bool { return c.takenOver() }

func (c *Claim) takenOver() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.taken
}

// SetSource gives a claim made by program hash its program's source, which
// Record needs (to store the program row with the record); it must hash
// to the claim's program.
func (c *Claim) SetSource(source string) error {
	if err := input.Text("program_source_code", source); err != nil {
		return err
	}
	if h := progHashes.hash(source); h != c.programHash {
		return newError(KindValue, "program_source_code is not the claimed program's source (its hash is %s, the claim's %s)", h, c.programHash)
	}
	c.mu.Lock()
	c.source = source
	c.mu.Unlock()
	return nil
}

// Record stores the measurement and ends the claim, in one transaction
// (see "Claims" for a late record). It reports whether it wrote: false
// when the schedule was recorded meanwhile by someone else.
func (c *Claim) Record(ctx context.Context, m Measurement) (bool, error) {
	c.mu.Lock()
	source, ended := c.source, c.ended
	c.mu.Unlock()
	if ended {
		return false, newError(KindValue, "the claim on %s has ended (recorded or released)", schedule.Repr(c.schedule))
	}
	if c.remeasure {
		if err := c.s.CheckWrites(); err != nil {
			return false, err
		}
		return c.recordRemeasure(ctx, m, source)
	}
	if source == "" {
		return false, newError(KindValue, "the claim on %s was made by program hash: give the program's source to record", schedule.Repr(c.schedule))
	}
	if err := c.s.CheckWrites(); err != nil {
		return false, err
	}
	m.Schedule = c.schedule
	w, _, err := c.s.PrepareWrite(c.programName, source, []Measurement{m}, false)
	if err != nil {
		return false, err
	}
	if w.Rows[0].Key != c.ref.Key {
		return false, newError(KindInternal, "the claim's key %s is not the record's %s", c.ref.Key, w.Rows[0].Key)
	}
	c.s.stampRuns(w, []Measurement{m})
	w.Release = []storage.ClaimRef{c.ref}
	w.Renew = c.s.claims.renewable(c.ref.Token)
	n, err := c.s.be.Write(ctx, w)
	if err != nil {
		return false, err
	}
	c.end()
	return n == 1, nil
}

// Release gives the claim up without a result: a waiter takes it over at
// once. Releasing an ended claim does nothing.
func (c *Claim) Release(ctx context.Context) error {
	c.mu.Lock()
	ended := c.ended
	c.mu.Unlock()
	if ended {
		return nil
	}
	err := c.s.be.UpdateClaims(ctx, "release a claim", func(w storage.ClaimWriter) error {
		_, err := w.DeleteClaim(c.ref.Key, c.ref.Token)
		return err
	})
	if err != nil {
		return err
	}
	c.end()
	return nil
}

// end marks the claim ended and stops renewing it.
func (c *Claim) end() {
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	c.s.claims.drop(c)
}

// ClaimOutcome is what LookupManyOrClaim found for one schedule: exactly
// one of its fields is set.
type ClaimOutcome struct {
	Result *Result      // recorded
	Claim  *Claim       // claimed for this caller: measure and record
	Busy   *ClaimHolder // held by another live worker (Wait false)
}

// claimState is a Store's side of claims: the claims it holds (renewed by
// its renewer goroutine, claimrenew.go) and what it has seen of others'
// (judged by the wait loop, claimwait.go).
type claimState struct {
	mu sync.Mutex
	// held are this store's claims that have not ended, by token; those
	// taken over are kept (for a late Record) but no longer renewed.
	held map[string]*Claim
	// seen: the state of other workers' claims as this store last read
	// it, with when it first saw that state (the lease's clock).
	seen map[string]sighting
	// ended: claims whose holder's Slurm job was seen ended
	// (claimslurm.go), by key.
	ended map[string]jobEnd
	// renewing: the renewer goroutine runs; wake tells it that the set of
	// claims (and so the shortest lease) changed; stop ends it.
	renewing bool
	wake     chan struct{}
	stop     chan struct{}
	closed   bool
}

// HeldClaim is the claim of this store named token that has not ended, or
// nil: how the C ABI finds the claim a caller records or releases.
func (s *Store) HeldClaim(token string) *Claim {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	return s.claims.held[token]
}

// LookupOrClaim returns, for (program, schedule), the record if there is
// one (Result); else a claim for this caller to measure it (Claim); else,
// when another live worker holds the claim and opts.Wait is false, that
// holder (Busy). With Wait it waits (see "Claims"). The schedule must be
// valid (it will be recorded).
func (s *Store) LookupOrClaim(ctx context.Context, programName, source, sched string, opts ClaimOptions) (ClaimOutcome, error) {
	if err := input.Texts("program_name", programName, "program_source_code", source); err != nil {
		return ClaimOutcome{}, err
	}
	hash := progHashes.hash(source)
	if o, ok, err := s.peekOne(hash, sched, opts); ok || err != nil {
		return o, err
	}
	out, err := s.lookupOrClaim(ctx, programName, hash, source, []string{sched}, opts, false)
	if err != nil {
		return ClaimOutcome{}, err
	}
	return out[0], nil
}

// peekOne is LookupOrClaim's hot path: a hit that the cache proves
// current, answered as lookup answers it (a recorded schedule is not
// validated again), at a lookup's cost. ok false: not known here.
func (s *Store) peekOne(hash, sched string, opts ClaimOptions) (ClaimOutcome, bool, error) {
	if _, err := opts.lease(); err != nil {
		return ClaimOutcome{}, true, err
	}
	if err := input.Text("tiralib_schedule_string", sched); err != nil {
		return ClaimOutcome{}, true, err
	}
	rec, ok := s.be.Peek(hash, keys.RecordKey(hash, sched))
	if !ok || rec == nil {
		return ClaimOutcome{}, false, nil
	}
	r, err := s.newResult(rec)
	if err != nil {
		return ClaimOutcome{}, true, err
	}
	if r == nil || opts.Remeasure && s.remeasurable(rec, r) {
		return ClaimOutcome{}, false, nil // no run matches, or unstable: to claim
	}
	return ClaimOutcome{Result: r}, true, nil
}

// LookupOrClaimByHash is LookupOrClaim by program hash (see LookupByHash);
// the claim needs the program's source before it records (SetSource).
func (s *Store) LookupOrClaimByHash(ctx context.Context, programName, hash, sched string, opts ClaimOptions) (ClaimOutcome, error) {
	if err := checkProgramRef(programName, hash, ""); err != nil {
		return ClaimOutcome{}, err
	}
	if o, ok, err := s.peekOne(hash, sched, opts); ok || err != nil {
		return o, err
	}
	out, err := s.lookupOrClaim(ctx, programName, hash, "", []string{sched}, opts, false)
	if err != nil {
		return ClaimOutcome{}, err
	}
	return out[0], nil
}

// LookupManyOrClaim is LookupOrClaim for several schedules of one program,
// with one acquisition of the lock for the whole batch (and one per poll
// while it waits); the outcomes are in the order of schedules. Invalid
// input anywhere fails the whole call, naming the entry.
func (s *Store) LookupManyOrClaim(ctx context.Context, programName, source string, schedules []string, opts ClaimOptions) ([]ClaimOutcome, error) {
	if err := input.Texts("program_name", programName, "program_source_code", source); err != nil {
		return nil, err
	}
	return s.lookupOrClaim(ctx, programName, progHashes.hash(source), source, schedules, opts, true)
}

// LookupManyOrClaimByHash is LookupManyOrClaim by program hash.
func (s *Store) LookupManyOrClaimByHash(ctx context.Context, programName, hash string, schedules []string, opts ClaimOptions) ([]ClaimOutcome, error) {
	if err := checkProgramRef(programName, hash, ""); err != nil {
		return nil, err
	}
	return s.lookupOrClaim(ctx, programName, hash, "", schedules, opts, true)
}

// StaleClaims are the claims nobody will end: a holder dead on this host,
// a holder whose Slurm job has ended (asked as a waiter asks, in one
// question before the transaction: claimslurm.go), or a schedule recorded
// meanwhile (a record made without ending its claim: by an older library,
// say); with remove they are removed, in the transaction that found them.
// A waiter takes such claims over or ignores them anyway; the operator's
// check (core/operator) lists them and --repair removes them, by the
// claims' own rules, which live here.
func (s *Store) StaleClaims(ctx context.Context, remove bool) ([]*ClaimHolder, error) {
	ended, err := s.endedJobClaims(ctx)
	if err != nil {
		return nil, err
	}
	var out []*ClaimHolder
	var refs []storage.ClaimRef
	find := func(r storage.Reader) error {
		out, refs = nil, nil
		return r.EachClaim(func(c *storage.Claim) error {
			dead := liveness.GoneFromThisHost(s.hostname, c.Hostname, c.PID, liveness.Process{StartTime: c.StartTime, BootID: c.BootID, PIDNS: c.PIDNS})
			end, jobEnded := ended[c.Token]
			jobEnded = jobEnded && end.renewals == c.Renewals // not renewed since
			rec, err := r.Get(c.Key)
			if err != nil || (!dead && !jobEnded && rec == nil) {
				return err
			}
			h := newClaimHolder(c, dead)
			h.Recorded = rec != nil
			if jobEnded {
				h.JobState, h.JobEnded = end.state, true
			}
			out, refs = append(out, h), append(refs, storage.ClaimRef{Key: c.Key, Token: c.Token})
			return nil
		})
	}
	if !remove {
		return out, s.be.View(ctx, "check claims", find)
	}
	// A run after a lost COMMIT's answer no longer finds what an earlier
	// run removed: the claims found by any run are reported, each once
	// (gone, whichever run removed it).
	var found []*ClaimHolder
	seen := map[string]bool{}
	err = s.be.UpdateClaims(ctx, "remove stale claims", func(w storage.ClaimWriter) error {
		if err := find(w); err != nil {
			return err
		}
		for i, r := range refs {
			if _, err := w.DeleteClaim(r.Key, r.Token); err != nil {
				return err
			}
			if !seen[r.Token] {
				seen[r.Token] = true
				found = append(found, out[i])
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// Claims lists every claim of the database, oldest first, with whether
// its holder is provably dead (on this host).
func (s *Store) Claims(ctx context.Context) ([]*ClaimHolder, error) {
	var out []*ClaimHolder
	err := s.be.View(ctx, "list claims", func(r storage.Reader) error {
		return r.EachClaim(func(c *storage.Claim) error {
			dead := liveness.GoneFromThisHost(s.hostname, c.Hostname, c.PID, liveness.Process{StartTime: c.StartTime, BootID: c.BootID, PIDNS: c.PIDNS})
			out = append(out, newClaimHolder(c, dead))
			return nil
		})
	})
	if err == nil {
		jobStates(ctx, out)
	}
	return out, err
}
