// Package slurmjob tells whether Slurm jobs have ended, so that a worker
// waiting on another worker's claim can take it over as soon as the
// holder's job is over (cancelled, timed out, failed), instead of waiting
// out the claim's lease.
//
// # One query per node
//
// Every query loads the one controller (or slurmdbd) that all the nodes of
// a cluster share, and tens of waiters on each of hundreds of nodes may
// wait on the same dead holder. So the waiters of a node share their
// questions and answers: one small file per user and cluster in a
// node-local directory (/dev/shm), rewritten under flock(2), which is held
// only to read and rewrite it, never while Slurm is asked. Each waiter adds
// the jobs it wants to know about; the first one that finds the last query
// older than the interval and no query under way marks itself the querier,
// asks Slurm about every job wanted lately, in one query, and writes the
// answers back. The others answer from the file or, when the lock is taken
// at that moment, from what they last read: Ended never waits for another
// process. A querier that stopped is replaced after twice the query
// timeout, one that died on this node at once.
//
// The file lies in a directory that other users can write, so it is opened
// without following a link and without blocking, and used only if it is a
// regular file of ours, with one link and no permission for others;
// anything else turns the sharing off for the process, which then asks
// Slurm on its own, at most once per interval.
//
// # Unknown is alive
//
// Taking a claim over from a holder that still runs makes two workers
// measure the same schedule and disturb each other's timings, while
// waiting out the lease only costs time. So only Slurm saying that the job
// has ended counts: a failing, missing or hung command, a line that does
// not parse, a job of another cluster, a suspended, requeued or pending job
// all read as alive.
//
// # Jobs the controller forgot
//
// slurmctld forgets a job MinJobAge after it ended (300 s by default);
// accounting (sacct) remembers it, and is asked first. Where accounting is
// off, squeue is asked, and a job of this very cluster that the controller
// no longer knows has ended (Purged): squeue leaves it out of its list, or,
// asked about that one job alone, fails with "Invalid job id specified".
// That holds only if the controller shows this user everyone's jobs: with
// PrivateData=jobs, another user's running job is missing in just the
// same way, so then a missing job counts as alive.
package slurmjob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tirastore/tirastore/core/environ"
	"github.com/tirastore/tirastore/core/tuning"
)

// Purged is the state Ended gives a job that the controller of its
// cluster no longer knows (see the package doc): not a state of Slurm's,
// but as final as one, since a job is forgotten only MinJobAge after its
// end.
const Purged = "PURGED"

// terminal lists the states of a job that is over, as sacct and squeue
// print them: its processes are gone or being killed (COMPLETING), and
// the job will not run them again. A requeued, preempted-and-requeued or
// suspended job is not over (REQUEUED, REQUEUE_HOLD, SPECIAL_EXIT,
// PENDING, SUSPENDED, STOPPED, ...), nor is any state this list does not
// know.
var terminal = map[string]bool{
	"BOOT_FAIL":     true,
	"CANCELLED":     true,
	"COMPLETED":     true,
	"COMPLETING":    true,
	"DEADLINE":      true,
	"FAILED":        true,
	"NODE_FAIL":     true,
	"OUT_OF_MEMORY": true,
	"PREEMPTED":     true,
	"REVOKED":       true,
	"TIMEOUT":       true,
	Purged:          true,
}

// Terminal reports whether a job in state (as Ended, sacct or squeue give
// it: "CANCELLED", or sacct's "CANCELLED by 0") has ended for good, so
// that its processes no longer hold anything. Unknown states are not:
// the caller then waits out the lease, which is always safe.
func Terminal(state string) bool {
	return terminal[firstWord(state)]
}

// LocalCluster is the cluster of the job this process runs in,
// SLURM_CLUSTER_NAME as Slurm sets it in a job's environment ("" outside a
// job): a job id names a job only together with its cluster. It reads the
// live environment (core/environ), as the claim rows that record it do.
// Asker.Cluster adds the cluster of a node outside any job.
func LocalCluster() string {
	return environ.Get("SLURM_CLUSTER_NAME")
}

// Options configure an Asker; zero values take the defaults.
type Options struct {
	// Dir is the node-local directory of the shared answer file; "" is
	// /dev/shm. It must not be on a network filesystem: the file is
	// coordinated by flock(2), and it is shared by the node's processes
	// only.
	Dir string
	// Interval is the least time between two queries of the node (0:
	// tuning.SlurmInterval).
	Interval time.Duration
	// Timeout bounds one query (0: tuning.SlurmTimeout); a querier silent
	// for twice it is replaced.
	Timeout time.Duration
}

// Asker answers whether jobs have ended, sharing queries with the other
// processes of the node (see the package doc). Make it with New; it is
// safe for concurrent use, and one per process is enough.
type Asker struct {
	dir      string
	interval time.Duration
	timeout  time.Duration
	// openFlags open the answer file; only the negative control of the
	// tests drops O_NOFOLLOW from them.
	openFlags int

	mu      sync.Mutex
	views   map[string]*view // by cluster
	privacy privacy          // what scontrol said of PrivateData
	rounds  atomic.Uint64    // numbers this process's queries

	// The node's cluster outside a job (Cluster): asked of scontrol at
	// most once per interval until it answers, under clusterMu.
	clusterMu    sync.Mutex
	cluster      string
	clusterAsked time.Time
}

// New returns an Asker with o's settings.
func New(o Options) *Asker {
	a := &Asker{dir: o.Dir, interval: o.Interval, timeout: o.Timeout, openFlags: fileFlags, views: map[string]*view{}}
	if a.dir == "" {
		a.dir = "/dev/shm"
	}
	if a.interval <= 0 {
		a.interval = tuning.SlurmInterval
	}
	if a.timeout <= 0 {
		a.timeout = tuning.SlurmTimeout
	}
	return a
}

// Cluster is the cluster whose jobs this process can judge: LocalCluster
// inside a job; outside one (a login node's `tirastore dashboard`,
// `claims` or `check`), the ClusterName that `scontrol show config`
// gives, asked at most once per interval until it answers, within the
// query timeout. "" where Slurm is not installed or does not answer: then
// nothing is asked about, and the leases decide.
func (a *Asker) Cluster(ctx context.Context) string {
	if c := LocalCluster(); c != "" {
		return c
	}
	a.clusterMu.Lock()
	defer a.clusterMu.Unlock()
	if a.cluster != "" || (!a.clusterAsked.IsZero() && time.Since(a.clusterAsked) < a.interval) {
		return a.cluster
	}
	a.clusterAsked = time.Now()
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if out, _, err := run(ctx, "scontrol", "show", "config"); err == nil {
		a.cluster = parseClusterName(out)
	}
	return a.cluster
}

// Ended returns, for each of jobIDs that Slurm says has ended, its state
// ("CANCELLED", "TIMEOUT", Purged, ...; Terminal is true of each); nil if
// none. A job missing from the map is running, suspended, pending, unknown,
// or not asked about yet: call again later.
//
// cluster is the cluster of the jobs (the holder's SLURM_CLUSTER_NAME);
// only the jobs of this process's Cluster are asked about, so Ended
// answers nothing for "" or another cluster. Job ids must be SLURM_JOB_ID
// values, plain decimal numbers; anything else is ignored and never
// reaches a command line.
//
// Ended never waits for another process. When this call is the node's
// querier it runs the query, bounded by the Asker's Timeout and by ctx
// (the commands are killed when either ends); otherwise it answers at once
// from the node's last answers.
func (a *Asker) Ended(ctx context.Context, cluster string, jobIDs []string) map[string]string {
	return a.states(ctx, cluster, jobIDs, true)
}

// States is Ended with every state Slurm gave, ended or not ("RUNNING",
// "SUSPENDED", ...): what a listing of claims shows. Jobs it has no
// answer for are left out.
func (a *Asker) States(ctx context.Context, cluster string, jobIDs []string) map[string]string {
	return a.states(ctx, cluster, jobIDs, false)
}

func (a *Asker) states(ctx context.Context, cluster string, jobIDs []string, endedOnly bool) map[string]string {
	if cluster == "" || cluster != a.Cluster(ctx) {
		return nil
	}
	ids := validIDs(jobIDs)
	if len(ids) == 0 {
		return nil
	}
	v := a.view(cluster)
	if r := v.plan(a, ids, time.Now()); r != nil {
		if len(r.ids) > 0 && ctx.Err() == nil {
			r.got = a.ask(ctx, r.ids)
		}
		v.finish(a, r)
	}
	return v.answer(ids, endedOnly)
}

// view returns the state of cluster's answers.
func (a *Asker) view(cluster string) *view {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.views[cluster]
	if v == nil {
		v = &view{path: filepath.Join(a.dir, fileName(cluster)), jobs: map[string]entry{}}
		a.views[cluster] = v
	}
	return v
}

// fileName is the answer file's name for cluster: per user, since another
// user's processes must not write what ours read, and per cluster, since
// a job id names a job only within its cluster. The hash keeps the name
// short and free of whatever characters a cluster name has.
func fileName(cluster string) string {
	h := sha256.Sum256([]byte(cluster))
	return fmt.Sprintf("tirastore-slurm-%d-%s", os.Geteuid(), hex.EncodeToString(h[:6]))
}

// validID reports whether id is a job id as SLURM_JOB_ID holds it: a
// decimal number from 1 to 2^32-1 without leading zeros, exactly as sacct
// (JobIDRaw) and squeue (%A) print it back. squeue reads "12x" as 12, and
// an id it prints otherwise than asked would never be found in its answer,
// hence the strict form. The array and heterogeneous forms (12_3, 12+1)
// are refused too: SLURM_JOB_ID never has them, and squeue prints a
// pending array's tasks as one range, in which such a task would be
// missing although it is not over.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 10 || id[0] == '0' {
		return false
	}
	var n uint64
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + uint64(c-'0')
	}
	return n <= 1<<32-1
}

// validIDs returns the valid ids of ids, once each, at most
// tuning.SlurmMaxJobs of them.
func validIDs(ids []string) []string {
	var out []string
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if validID(id) && !seen[id] && len(out) < tuning.SlurmMaxJobs {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
