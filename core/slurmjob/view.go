package slurmjob

import (
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/tuning"
)

// view is what this process knows of one cluster's jobs, and how it takes
// part in the node's queries (see the package doc).
type view struct {
	path string // the shared answer file

	mu sync.Mutex
	// jobs is the last read of the file, with this process's own
	// questions and answers merged in.
	jobs map[string]entry
	// off: the file was refused (or failed); the process asks on its own.
	off bool
	// busySince is when the flock began to be found taken at every try
	// (zero: it was free at the last try). A process stopped inside its
	// few microseconds under the flock holds it until it resumes; past
	// twice the timeout, the others ask on their own meanwhile.
	busySince time.Time
	// lastQuery and querying are this process's own queries, when it
	// does not share: at most one per interval, one at a time.
	lastQuery time.Time
	querying  bool
}

// round is one query: the jobs to ask about, and what Slurm said.
type round struct {
	ids    []string
	start  time.Time
	shared bool  // marked in the file as its querier (else: this process's own)
	mark   *mark // the mark, when shared
	got    map[string]string
}

// writeTries and writePause bound how long a querier tries to take the
// flock to write its answers back: others hold it for microseconds, so
// some milliseconds are plenty, and a querier that gives up leaves its mark
// to expire.
const (
	writeTries = 20
	writePause = time.Millisecond
)

// plan records that ids are wanted and returns the query this call is to
// run, nil if none (a query is under way, or the last one is recent).
func (v *view) plan(a *Asker, ids []string, now time.Time) *round {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, id := range ids {
		e := v.jobs[id]
		e.Wanted = now.UnixNano()
		v.jobs[id] = e
	}
	if !v.off {
		if r, decided := v.planShared(a, now); decided {
			return r
		}
	}
	// Not shared: this process's own queries, at most one per interval.
	prune(v.jobs, now, a.interval)
	if v.querying || (now.Sub(v.lastQuery) < a.interval && v.lastQuery.Sub(now) < a.interval) {
		return nil
	}
	r := &round{ids: dueIDs(v.jobs, now, a.interval), start: now}
	if len(r.ids) == 0 {
		return nil
	}
	v.querying, v.lastQuery = true, now
	return r
}

// planShared takes part in the node's queries through the file: false
// when the process is to decide on its own (the file is refused, or its
// flock has been taken too long).
func (v *view) planShared(a *Asker, now time.Time) (r *round, decided bool) {
	fd, err := openFile(v.path, a.openFlags)
	if err != nil {
		v.off = true
		return nil, false
	}
	defer closeFile(fd)
	locked, err := tryLock(fd)
	if err != nil {
		v.off = true
		return nil, false
	}
	if !locked {
		if v.busySince.IsZero() {
			v.busySince = now
		}
		return nil, now.Sub(v.busySince) <= 2*a.timeout
	}
	v.busySince = time.Time{}
	d, err := readDoc(fd)
	if err != nil {
		v.off = true
		return nil, false
	}
	mergeJobs(d.Jobs, v.jobs)
	prune(d.Jobs, now, a.interval)
	last := time.Unix(0, d.Last)
	due := now.Sub(last) >= a.interval || last.Sub(now) >= a.interval // or the clock went back
	if due && (d.Querier == nil || a.stale(d.Querier, now)) {
		if ids := dueIDs(d.Jobs, now, a.interval); len(ids) > 0 {
			r = &round{ids: ids, start: now, shared: true, mark: a.newMark(now)}
			d.Querier, d.Last = r.mark, now.UnixNano()
		}
	}
	if writeDoc(fd, d) != nil {
		v.off = true
		if r != nil {
			r.shared, r.mark = false, nil
			v.querying, v.lastQuery = true, now
		}
		return r, true
	}
	v.jobs = d.Jobs
	return r, true
}

// finish records r's answers, in the file too if r was the node's query.
func (v *view) finish(a *Asker, r *round) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !r.shared {
		v.querying = false
	}
	record(v.jobs, r)
	if !r.shared || v.off {
		return
	}
	for try := 0; try < writeTries; try++ {
		if try > 0 {
			time.Sleep(writePause)
		}
		fd, err := openFile(v.path, a.openFlags)
		if err != nil {
			v.off = true
			return
		}
		locked, err := tryLock(fd)
		if err != nil || !locked {
			closeFile(fd)
			if err != nil {
				v.off = true
				return
			}
			continue
		}
		d, err := readDoc(fd)
		if err == nil {
			mergeJobs(d.Jobs, v.jobs)
			if q := d.Querier; q != nil && *q == *r.mark {
				d.Querier = nil
			}
			prune(d.Jobs, time.Now(), a.interval)
			err = writeDoc(fd, d)
		}
		closeFile(fd)
		if err != nil {
			v.off = true
			return
		}
		v.jobs = d.Jobs
		return
	}
}

// answer returns the states of ids (the ended ones alone if endedOnly),
// as this process knows them.
func (v *view) answer(ids []string, endedOnly bool) map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out map[string]string
	for _, id := range ids {
		if s := v.jobs[id].State; s != "" && (!endedOnly || Terminal(s)) {
			if out == nil {
				out = map[string]string{}
			}
			out[id] = s
		}
	}
	return out
}

// newMark marks this process as the querier of a new round.
func (a *Asker) newMark(now time.Time) *mark {
	me := liveness.Self()
	return &mark{PID: os.Getpid(), Start: me.StartTime, BootID: me.BootID, PIDNS: me.PIDNS,
		Round: a.rounds.Add(1), Since: now.UnixNano()}
}

// stale reports whether the querier q is to be replaced: it has been
// querying for more than twice the timeout (stopped, or its query hangs
// unkilled), or it has died on this node (as core/liveness proves it: the
// same boot and pid namespace, its pid gone or reused).
func (a *Asker) stale(q *mark, now time.Time) bool {
	since := time.Unix(0, q.Since)
	if now.Sub(since) > 2*a.timeout || since.Sub(now) > 2*a.timeout {
		return true
	}
	me := liveness.Self()
	return q.BootID != "" && q.BootID == me.BootID && q.PIDNS != 0 && q.PIDNS == me.PIDNS &&
		liveness.Gone(q.PID, q.Start)
}

// record puts r's answers into jobs ("" where Slurm could not tell): an
// ended job stays ended, and an answer never replaces one from a later
// query. A round that asked nothing (its context was done) records
// nothing.
func record(jobs map[string]entry, r *round) {
	if r.got == nil {
		return
	}
	for _, id := range r.ids {
		e, ok := jobs[id]
		if !ok || Terminal(e.State) || e.Checked > r.start.UnixNano() {
			continue
		}
		e.State, e.Checked = r.got[id], r.start.UnixNano()
		jobs[id] = e
	}
}

// mergeJobs merges src into dst, entry by entry (mergeEntry).
func mergeJobs(dst, src map[string]entry) {
	for id, s := range src {
		dst[id] = mergeEntry(dst[id], s)
	}
}

// mergeEntry is what two records of a job tell together: the latest want,
// an ended state if either has one, else the later answer.
func mergeEntry(d, s entry) entry {
	d.Wanted = max(d.Wanted, s.Wanted)
	switch {
	case Terminal(d.State):
	case Terminal(s.State) || s.Checked > d.Checked:
		d.State, d.Checked = s.State, s.Checked
	}
	return d
}

// wantedFor is how long a job stays in the queries after it was last
// asked about.
func wantedFor(interval time.Duration) time.Duration {
	return tuning.SlurmWantedIntervals * interval
}

// prune drops the jobs that nobody asked about for tuning.SlurmKeep (or
// the wanted window, if longer), then, past tuning.SlurmMaxJobs, the least
// recently wanted.
func prune(jobs map[string]entry, now time.Time, interval time.Duration) {
	keep := max(tuning.SlurmKeep, wantedFor(interval))
	cut := now.Add(-keep).UnixNano()
	for id, e := range jobs {
		if max(e.Wanted, e.Checked) < cut {
			delete(jobs, id)
		}
	}
	if len(jobs) <= tuning.SlurmMaxJobs {
		return
	}
	ids := byWanted(jobs)
	for _, id := range ids[tuning.SlurmMaxJobs:] {
		delete(jobs, id)
	}
}

// dueIDs returns the jobs to ask about: wanted lately and not known to
// have ended, at most tuning.SlurmMaxJobs (the most recently wanted), in
// numerical order.
func dueIDs(jobs map[string]entry, now time.Time, interval time.Duration) []string {
	cut := now.Add(-wantedFor(interval)).UnixNano()
	due := map[string]entry{}
	for id, e := range jobs {
		if e.Wanted >= cut && !Terminal(e.State) {
			due[id] = e
		}
	}
	ids := byWanted(due)
	if len(ids) > tuning.SlurmMaxJobs {
		ids = ids[:tuning.SlurmMaxJobs]
	}
	sort.Slice(ids, func(i, j int) bool { return idLess(ids[i], ids[j]) })
	return ids
}

// byWanted returns the ids of jobs, the most recently wanted first.
func byWanted(jobs map[string]entry) []string {
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		wi, wj := jobs[ids[i]].Wanted, jobs[ids[j]].Wanted
		if wi != wj {
			return wi > wj
		}
		return idLess(ids[i], ids[j])
	})
	return ids
}

// idLess orders valid job ids numerically.
func idLess(x, y string) bool {
	a, _ := strconv.ParseUint(x, 10, 64)
	b, _ := strconv.ParseUint(y, 10, 64)
	return a < b
}
