// Package lock implements TiraStore's cross-node mutex: a lock file created
// with link(2), which is atomic on NFS and Lustre where fcntl/flock are not
// trustworthy. It speaks the original Python TiraStore's protocol, so old
// Python workers and new Go workers exclude each other on the same database
// during a migration, and adds what the original lacks on a cluster: a
// heartbeat, staleness measured on the waiter's own clock, breaking dead
// holders on the same host at once, and breaking by rename-and-verify.
//
// # Files
//
// For a database /d/cache.db (see PathFor):
//
//	/d/cache.db.lock                      the lock; exists iff someone holds it
//	/d/.lock_<host>_<pid>_<8 random>      a claim file, one per contender
//	/d/cache.db.lock.break                the break lock: a second name of
//	                                      the claim of the one waiter that
//	                                      is removing an abandoned lock
//	/d/cache.db.lock.stale.<host>.<pid>.<8 random>
//	/d/cache.db.lock.break.stale.<host>.<pid>.<8 random>
//	                                      a lock, or a break lock, that a
//	                                      breaker has moved aside, for
//	                                      microseconds (see Breaking)
//
// The lock is a second name (hard link) of its holder's claim, so both hold
// the same text. A Python holder writes, with json.dumps:
//
//	{"hostname": "node1", "pid": 42, "timestamp": 1764000000.123456}
//
// A Go holder writes the same three keys first, then extras that Python
// ignores, then spaces up to a fixed length (JSON allows trailing
// whitespace; json.load skips it), all on one line:
//
//	{"hostname": "node1", "pid": 42, "timestamp": 1764000000.123456,
//	 "start_time": 244679, "boot_id": "c23871bb-...", "pid_ns": 4026531836,
//	 "heartbeat_interval": 30.0, "heartbeat": 17}
//
// The extras are:
//
//   - start_time: field 22 of /proc/<pid>/stat (clock ticks after boot), to
//     tell the holder from a later process that got the same pid;
//   - boot_id: /proc/sys/kernel/random/boot_id, which changes at every boot;
//   - pid_ns: inode number of /proc/self/ns/pid, the holder's pid namespace;
//   - heartbeat_interval (seconds) and heartbeat (a counter): present iff the
//     holder heartbeats, i.e. promises to rewrite the record that often.
//
// Keys that cannot be determined (no /proc) are left out. The timestamp
// always has six decimals, so every version of a record has its keys at the
// same offsets. Claims are created O_CREAT|O_EXCL with mode 0644 (the
// original's mkstemp made them 0600), so that waiters of other users can
// read who holds the lock and name the holder in their errors.
//
// # Acquire
//
//  0. queue: take this node's queue (gate.go), so that one process per
//     node polls the shared filesystem; skipped if unavailable.
//  1. write: write the record, timestamp now, heartbeat 0, into our claim.
//     One claim serves every Acquire of the Lock until Close (the original
//     created a fresh one per attempt): it is created once and rewritten in
//     place with one pwrite, so a steady-state acquisition costs the
//     metadata server one link and, at release, one unlink (see claim.write
//     for when it is fsynced). Other contenders never look at claims.
//  2. tryLink: link(claim, lock). Success means we hold the lock. On any
//     failure, stat the claim: a link count of 2 with the lock path being
//     our claim's inode means the link did happen (an NFS retransmitted
//     LINK whose first reply was lost answers EEXIST), so we hold the
//     lock. EEXIST otherwise means someone else holds it; any other error
//     is returned (e.g. a filesystem without hard links).
//  3. readHolder: open the lock, fstat it, read and parse it. The state
//     (device, inode, size, mtime, ctime, SHA-256 of the bytes) is noted
//     with the monotonic time at which this Lock first saw exactly that
//     state (see Staleness).
//  4. judge, and if the holder is dead (Dead holders) or stale (Staleness),
//     breakLock (Breaking), then retry at once. A lock file that cannot be
//     read or parsed, or whose timestamp is NaN or infinite, is never
//     broken (the original never breaks those either).
//  5. Otherwise sleep (exponential backoff with full jitter, MinBackoff to
//     MaxBackoff) and go to 1, until Timeout or until ctx is done; the
//     *TimeoutError names the holder's host and pid, its age by its
//     timestamp and how long the lock file stayed unchanged as seen here.
//     The claim stays for the next Acquire; Close removes it.
//  6. Once held: start the heartbeat, and the holder's lease (lease.go)
//     from the moment before step 1's write.
//
// Goroutines of one process share one *Lock: they are first serialized by an
// in-process mutex (which also honours ctx and Timeout), so the file protocol
// runs for one goroutine at a time.
//
// # Heartbeat
//
// While held, a goroutine (one per Lock, from its first Acquire to Close)
// rewrites the record every HeartbeatInterval (default min(StaleTimeout/4,
// 30 s)) with the current timestamp and the next counter. Old Python waiters therefore see a fresh
// timestamp and do not break a Go holder that works longer than their
// stale_lock_timeout; Go waiters see the file change (Staleness).
//
// The rewrite is one pwrite of the whole record, padded to its fixed length,
// at offset 0 of the claim (which is the lock inode), through the claim's
// descriptor, which stays open. The file is never truncated, never empty
// and never changes size, and every version is complete JSON. Then fsync:
// without it an NFS client may keep the new bytes in its page cache for up
// to ~30 s and other nodes would go on reading the old timestamp. The cost
// is one WRITE plus one COMMIT (NFS), or one OST write and sync (Lustre),
// per interval for the single holder of a database: negligible. A beat that
// fails is retried at the next tick; only beats failing for StaleTimeout can
// get the lock broken. Beats run under the Lock's mutex and only while held,
// so none touches the claim after Release has taken it back. After each
// beat the holder checks, by path, that the lock is still its claim: that
// renews its lease (lease.go), or finds the lock lost.
//
// # Fencing
//
// A holder stopped or hung for longer than its waiters' patience has its
// lock broken, and must then never write: the next holder rolls its hot
// journal back and writes on its own. Each holder therefore has a lease,
// the time since it last confirmed the lock (a write of the lock file seen
// to be still its claim), which ends halfway to the earliest moment a Go
// waiter may judge the lock abandoned; the heartbeat renews it. The
// engine's VFS refuses every write, truncate, sync, journal open and
// journal delete once the lease is over and a new confirmation (Confirm)
// fails (core/sqlite, fence.go and vfs.c), and the store reports the lost
// lock (a *LostError: which lock, when last confirmed, who holds it now).
// What no client-side fence closes: a write that passed the check and is
// stalled before its system call completes (see Remaining holes).
//
// Torn reads: Linux does not make read(2) atomic against a concurrent
// write(2) on the same page, so a reader on the holder's node (or on the NFS
// server) that races a beat within the ~100 ns of the copy may see a mix of
// two versions. Because both versions have the same length and layout, the
// mix is still parseable and every key but timestamp and heartbeat reads
// exactly; the timestamp may read as a mix of the old and new digits. Go
// waiters are not misled (a mix is just "changed", and breakLock compares the
// bytes again after moving the file). A Python waiter could be: see
// Remaining holes.
//
// # Staleness
//
// A holder that is not provably dead is stale when either
//
//   - its lock file has stayed unchanged (same state, see Acquire step 3)
//     for StaleTimeout, as measured by this process on its monotonic
//     clock, whatever the timestamp in it says; or
//   - its timestamp is older than StaleTimeout by our wall clock (the
//     original rule) and the record promises no heartbeat (written by
//     Python, or by Go with heartbeats off): stale at once, exactly as the
//     original and the Python waiters judge it; or
//   - its timestamp is older than StaleTimeout and it promises heartbeats,
//     but it has also stayed unchanged here for heartbeatGrace = three
//     promised intervals + 1 s (at most StaleTimeout; 91 s by default).
//
// So clock skew cannot break a live Go holder: it changes its file every
// interval, which resets the count, whatever its clock or ours says (see
// TestSkewedRemoteHeartbeatingHolderNotBroken: three hours behind). A
// Python holder never heartbeats: after StaleTimeout unchanged it is dead or
// overdue either way, which is also the original rule measured locally, and
// a node with a clock ahead of ours cannot keep a dead lock alive.
//
// Why the timestamp still counts at all: with the unchanged rule alone, a
// waiter that arrives at a lock dead for hours would wait StaleTimeout
// before breaking it, and with the default Timeout (= StaleTimeout) its
// Acquire would time out first; the original breaks such a lock at once. Why
// only as an alternative for records without heartbeat, and after a grace
// for the others: a waiter whose clock runs ahead (or a holder whose clock
// runs behind) would otherwise break live heartbeating holders early.
//
// The observation is kept by the Lock across Acquire calls (one that times
// out does not restart the count for the next) and dropped when the Lock
// takes the lock.
//
// # Dead holders
//
// A holder is dead, and its lock is broken at once without any staleness
// wait, when its record names our host name, the same boot_id as ours (same
// kernel, no reboot since) and the same pid_ns (same pid namespace), and
// either kill(pid, 0) fails with ESRCH or the live pid's start time in
// /proc/<pid>/stat differs from the recorded start_time (the pid was
// reused). EPERM from kill means alive (another user's process); a pid that
// kill still finds but /proc hides (hidepid) counts as alive.
//
// Records without boot_id or pid_ns, in particular every Python record, are
// never judged by pid: a host name alone does not prove that the pid means
// the same process here. Containers routinely share the node's host name
// (host networking, Apptainer/Singularity, --uts=host) while having their
// own pid namespace, where our kill() finds nothing; boot_id is shared by
// all containers of one kernel, which is why pid_ns is compared as well.
// Such holders are left to Staleness. A Python record with a live pid on
// this host is likewise treated as alive (there is no start_time to detect
// pid reuse).
//
// # Breaking a lock
//
// breakLock removes a lock judged breakable only if it is still the very
// file judged:
//
//  1. re-check: lstat the lock path; if it is no longer the judged state
//     (inode, size, mtime, ctime), give up (most races end here, cheaply).
//  2. take the break lock: link our claim (which holds our record) to
//     <lock>.break. If another waiter holds it, give up and keep waiting:
//     a break takes a few metadata operations, and by our next attempt the
//     lock path is free or holds a fresh lock. A break lock whose holder is
//     dead on this host (Dead holders), or that has stayed unchanged for
//     breakGrace (10 s, at most StaleTimeout) as seen here, is removed the
//     way a lock is (steps 4-6), and taken at a later attempt.
//  3. re-check again, now as the only breaker.
//  4. rename(lock, aside) to a fresh private name. Rename moves one directory
//     entry atomically. (NFS: a retransmitted RENAME whose first reply was
//     lost reports ENOENT; aside is checked.)
//  5. verify: open aside; same device and inode, same size and mtime
//     (rename changes only the ctime) and the same bytes as judged?
//  6. If so, unlink aside: the judged lock is gone. If not (we moved a fresh
//     lock that replaced the judged one, or the judged lock heartbeated in
//     between), put it back with link(aside, lock), then unlink aside. link
//     never replaces an existing name.
//  7. Remove the break lock (if it is still ours) and retry at once.
//
// Why the break lock: without it, several waiters that judged the same
// abandoned lock all pass their re-check, and one that is overtaken between
// its re-check and its rename (another breaker removed the judged lock, a
// newcomer linked a fresh one) moves the newcomer's live lock aside. The
// put-back then restores it unless yet another newcomer took the free path
// in between, which displaces the first newcomer while it works. The
// torture run (8 simulated nodes of one host, where every node's queue
// head applies the dead-holder rule at the same moment) caught exactly this
// about once in three runs: two processes inside the lock, a journal rolled
// back under a live writer, acknowledged records lost. Under the break lock
// the judged lock can change between step 3 and step 4 only by its own
// holder's release (a live holder misjudged stale) or by an old Python
// worker; a dead holder's lock cannot change at all.
//
// Why two Go breakers can never remove a live lock: a breaker unlinks only
// its own aside name, and only after step 5 has shown that the inode behind
// that name is the one it judged, unmodified. The inode judged was, when
// read, a dead holder's or a stale one's; the verification rules out both
// an inode number reused by a newer lock (different mtime and bytes: the
// timestamp and, for Go, start_time) and a holder that heartbeated since
// (different mtime and bytes). Any other file that a breaker moves is put
// back. The re-checks are only an optimisation for that guarantee: on NFS,
// lstat may answer from the attribute cache, whereas step 5 opens a new
// name and revalidates.
//
// What remains (Remaining holes): a live lock can be displaced, i.e. be
// absent from the lock path between a breaker's rename and its link back,
// two consecutive syscalls, and lost if a newcomer links then. That needs
// the breaker to have moved a live lock, which under the break lock needs a
// live holder misjudged stale (or a Python worker) to release between the
// breaker's step 3 and step 4, or two breakers at once (a live breaker
// stalled for breakGrace, its break lock judged abandoned). The displaced
// holder's Release reports ErrLockLost (TestPutBackLosesToNewcomer).
//
// # Release
//
// End the lease, then unlink the lock only if it is still our claim's inode
// (lstat of the lock path: same device and inode number; we keep the claim
// alive, so the number cannot have been reused), then let the next process
// of the node through the queue. If the lock had been broken (it is
// missing, or is now someone else's, or a confirmation found it so),
// Release leaves it alone and reports a *LostError (ErrLockLost). The claim
// stays for the next Acquire.
//
// Identity is always decided by looking a path up, never by fstat of our
// own descriptor: some filesystems (FUSE ones, our test bed included)
// answer fstat by one of the inode's paths, which after a break can be the
// lock path holding someone else's lock. An fstat-based release was tried
// and lost records in the torture run for exactly that reason.
//
// # Who may unlink what
//
//   - a claim: its creator, always;
//   - the lock path: its holder, at Release, if it is its claim's inode;
//     a Go breaker only by renaming it to its own aside name, while holding
//     the break lock, after which the aside name is unlinked, or linked back
//     and unlinked, by that breaker only;
//   - the break lock: its holder, when its break is over, if it is still
//     its claim's inode; a waiter that judged it abandoned, by renaming it
//     aside as for the lock;
//   - old Python workers: the lock path, unconditionally, when they release
//     and when they judge it stale by its timestamp.
//
// # Interoperation with old Python workers
//
// Python and Go workers exclude each other (TestMixedGoAndPythonWorkers),
// Python waiters read Go records (extra keys, padding) and do not break a
// heartbeating Go holder (TestHeartbeatKeepsPythonWaiterAway), and Go breaks
// a Python holder exactly when Python waiters would, or when its lock has
// stayed unchanged for StaleTimeout. What old Python workers can still do
// wrong, as in the original:
//
//   - A Python breaker checks then unlinks: between its read and its unlink
//     the stale lock may be replaced by a fresh one (Go or Python), which it
//     then removes.
//   - A Python holder whose lock was broken as stale (it worked longer than
//     stale_lock_timeout; it never heartbeats) unlinks, at release, whatever
//     lock then exists, possibly a Go holder's.
//   - A Python waiter judges by its own wall clock: if it runs ahead of a Go
//     holder's clock by more than StaleTimeout minus HeartbeatInterval, it
//     breaks that live holder.
//   - A Python waiter on the holder's node can read a torn heartbeat whose
//     timestamp mixes the old value's leading digits with the new value's
//     trailing ones. When the beat carries over a thousands digit (say
//     ...0999.x -> ...1029.x), that mix can read up to ~1000 s too old, and
//     the waiter breaks the live lock. It needs a read overlapping a pwrite
//     to within ~100 ns, the split to fall on one of two or three bytes and
//     such a carry (one beat in ~30): well under once a year per database,
//     even with 64 Python waiters polling continuously. Go waiters are
//     immune.
//   - Python waiters do not know the dead-holder rule; they wait for
//     staleness, as before.
//
// # Remaining holes
//
//   - Fencing (lease.go) stops a stalled holder at its next write, truncate,
//     sync or journal delete. A system call already past the check when the
//     process stalls (SIGSTOP between the check and the pwrite, an NFS
//     WRITE that hangs for minutes) still lands after the lock may have
//     been broken: the window is one system call, not a transaction. Only
//     the storage could fence that (a token it checks), and neither Lustre
//     nor NFS offers one. The lease assumes that every Go waiter uses the
//     same StaleTimeout, and that Python waiters' wall clocks are not ahead
//     of the holder's by more than StaleTimeout minus HeartbeatInterval.
//   - The node queue: a waiter behind a stopped or hung process leaves the
//     queue once the line has not moved for StaleTimeout, having watched
//     the lock file meanwhile (gate.go, Stalled places), then polls and
//     breaks the stopped holder's lock: on its node, the others proceed
//     about StaleTimeout after they started waiting, as on other nodes.
//     While it polls beside a queue that hands the lock on without a gap,
//     it waits for the node's fair-share yield (fairShare).
//   - Displacement by a Go breaker (Breaking) and the Python cases above.
//     Python workers ignore the break lock.
//   - A breaker that crashes between its rename and its unlink or link back
//     leaves an aside file; if it had moved a live lock by mistake, that
//     holder has lost it (its next write is fenced). Claims and aside files
//     of killed processes are swept by the first successful Acquire of each
//     Lock: at once those of this host that the dead-holder rule proves
//     dead, and any other once unchanged for longer than StaleTimeout
//     (sweep.go). A breaker killed while it holds the break lock holds up
//     the breaking of abandoned locks: on its host until a waiter sees it
//     dead, elsewhere for breakGrace.
//   - A live process keeps its lock fresh however long its critical section
//     runs, even if it hangs: only killing it frees the lock (at once for
//     waiters on its host; after heartbeatGrace or StaleTimeout elsewhere).
//     A held Lock that is never released stays held until its process
//     exits.
//   - A waiter that first sees a dead remote Go holder's lock breaks it
//     after heartbeatGrace (91 s by default) if the lock's timestamp is
//     already old by our clock, else after StaleTimeout of observation; so
//     its first Acquire may time out when Timeout <= StaleTimeout (the
//     next Acquire of the same Lock continues the count; a new process
//     starts over).
//   - A waiter whose StaleTimeout is shorter than a holder's heartbeat
//     interval breaks that live holder, as a short stale_lock_timeout did in
//     the original: workers should share one StaleTimeout, and
//     HeartbeatInterval must stay well below every worker's.
//   - Fairness: within a node the queue (gate.go) serves waiters first
//     come, first served (writes in a lane of their own); between nodes the heads poll at random and
//     a node yields after fairShare consecutive acquisitions when it has
//     seen another node waiting, which bounds but does not order the waits.
//     Processes without the queue (old Python workers, other containers)
//     poll with backoff, as before.
//   - In a sticky (1777) directory, another user's abandoned lock cannot be
//     moved or unlinked: waiters report it in their TimeoutError (with the
//     EPERM) and its owner or an administrator must remove it. Locks of old
//     Python workers are 0600, so other users cannot even read them.
//   - Unix only (link counts and inode numbers); the dead-holder rule needs
//     Linux's /proc.
package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tirastore/tirastore/core/identity"
)

// Defaults of the original library (stale_lock_timeout=600.0) and of the
// retry loop.
const (
	DefaultStaleTimeout = 600 * time.Second
	DefaultTimeout      = 600 * time.Second
	DefaultMinBackoff   = 5 * time.Millisecond
	DefaultMaxBackoff   = 500 * time.Millisecond
	// MaxDefaultHeartbeat caps the default heartbeat interval,
	// min(StaleTimeout/4, MaxDefaultHeartbeat).
	MaxDefaultHeartbeat = 30 * time.Second
)

// minHeartbeat bounds how often a holder rewrites its lock file.
const minHeartbeat = time.Millisecond

// ctxPoll bounds how long a waiting Acquire goes without looking at ctx, for
// callers that cancel it from a signal handler.
const ctxPoll = 100 * time.Millisecond

// ErrNotHeld is returned by Release when this Lock is not held, which is a
// programming error in the caller.
var ErrNotHeld = errors.New("lock: not held")

// ErrLockLost is returned by Release when the lock file was no longer ours
// (broken as stale by another process, possibly re-acquired by it): the
// critical section may not have been exclusive, which callers may want to log.
var ErrLockLost = errors.New("lock: lock file was broken by another process before release")

// Options tune a Lock; the zero value gives the original's behaviour plus
// heartbeats and the dead-holder rule.
type Options struct {
	// StaleTimeout: a lock that stayed unchanged this long is broken; so is
	// one whose timestamp is older and that does not heartbeat (the
	// original rule). See "Staleness" in the package doc. 0 means 600 s; a
	// negative value never breaks any lock, not even a dead holder's.
	StaleTimeout time.Duration
	// Timeout: how long Acquire waits before returning *TimeoutError.
	// 0 means 600 s; a negative value waits forever.
	Timeout time.Duration
	// Hostname written into the claim; default: the host name.
	Hostname string
	// Backoff bounds between attempts; defaults 5 ms and 500 ms.
	MinBackoff, MaxBackoff time.Duration
	// HeartbeatInterval: while held, the lock file's timestamp is rewritten
	// this often. 0 means min(StaleTimeout/4, 30 s) (30 s if StaleTimeout
	// is negative); a negative value turns heartbeats off, which makes the
	// lock look like a Python holder's (broken by its timestamp).
	HeartbeatInterval time.Duration
	// Fence, if set, receives the holder's lease (lease.go): the deadline
	// until which it may write without confirming the lock again.
	Fence Fence
}

// Lock is the hard-link lock on one lock path. One Lock is meant to be shared
// by all goroutines of a process that use the same store.
type Lock struct {
	path string
	opt  Options
	rec  *record
	// clock is the wall clock for timestamps and ages; tests skew it.
	clock func() time.Time

	sem chan struct{} // in-process mutex; a channel so waiting honours ctx
	// noGate: the node-local queue could not be opened (or is switched
	// off); gated: the current holder holds it. Owned by the sem holder.
	noGate, gated bool

	mu        sync.Mutex // guards claim, heldSince, confirmedAt and lost, and the claim's record while held
	claim     *claim     // non-nil while held
	heldSince time.Time  // when the current hold began (monotonic), for Stats.Held
	// confirmedAt is when the current lease began (monoNow, see lease.go);
	// lost is set once the lock was found broken while held.
	confirmedAt int64
	lost        *LostError
	lease       time.Duration // see leaseFor; fixed at New
	beat        *heartbeat    // the heartbeat goroutine, from the first Acquire to Close (owned by the sem holder)

	// own is this process's claim file, created by the first Acquire and
	// reused by every later one until Close; gate is the node-local queue
	// in front of the file protocol (nil when unavailable). Both belong to
	// whoever holds sem.
	own  *claim
	gate *gate

	// The rest belongs to whoever holds sem (the one goroutine running
	// acquireFile).
	seen, seenBreak observation // the lock file's, the break lock's
	stats           stats
	// breakErr is why the last attempt to break a stale lock failed (e.g.
	// EPERM: another user's lock in a sticky directory), for TimeoutError.
	breakErr error
	swept    bool // sweepClaims has run
}

// observation is a file's state last seen while waiting, and since when.
type observation struct {
	valid bool
	state lockState
	since time.Time // monotonic: when first seen
}

// stats are counters for tests, benchmarks and monitoring (Lock.Stats).
// They are atomic so that Stats may read them while another goroutine waits.
type stats struct {
	acquired  atomic.Int64 // Acquire successes
	links     atomic.Int64 // link() attempts
	breaks    atomic.Int64 // locks removed as stale or dead
	putBacks  atomic.Int64 // locks moved aside by mistake and linked back
	displaced atomic.Int64 // ... of which the lock path had been taken meanwhile
	swept     atomic.Int64 // dead processes' claims removed by sweepClaims
	heldNS    atomic.Int64 // total time held, Acquire's return to Release
	writes    atomic.Int64 // AcquireWrite successes
	// handedOver counts AcquireWriteHandover calls that another process did.
	handedOver atomic.Int64
	// bypassed counts acquisitions that left a stalled node queue.
	bypassed atomic.Int64
}

// Stats is a snapshot of a Lock's counters. Links per Acquired is how hard
// this process polled the shared filesystem's metadata server for the lock;
// Breaks counts locks it removed as abandoned. Held per Acquired is the
// mean critical section; Held summed over every process of a database and
// divided by the elapsed time is how busy the lock was, which is what
// bounds the throughput of all of them together.
type Stats struct {
	Acquired, Links, Breaks int64
	Held                    time.Duration
	// Writes counts the acquisitions that queued as writes (AcquireWrite),
	// included in Acquired; HandedOver the writes that another process of
	// the node did instead (AcquireWriteHandover), not included.
	Writes, HandedOver int64
	// Bypassed counts the acquisitions that left the node queue because it
	// did not move (a stopped or hung process ahead: see gate.go).
	Bypassed int64
}

// Stats returns the counters since New; safe to call at any time.
func (l *Lock) Stats() Stats {
	return Stats{Acquired: l.stats.acquired.Load(), Links: l.stats.links.Load(), Breaks: l.stats.breaks.Load(),
		Held: time.Duration(l.stats.heldNS.Load()), Writes: l.stats.writes.Load(),
		HandedOver: l.stats.handedOver.Load(), Bypassed: l.stats.bypassed.Load()}
}

// New returns a Lock for lockPath (normally PathFor(dbPath)); nothing is
// touched on disk until Acquire.
func New(lockPath string, opt Options) *Lock {
	if opt.StaleTimeout == 0 {
		opt.StaleTimeout = DefaultStaleTimeout
	}
	if opt.Timeout == 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Hostname == "" {
		opt.Hostname = identity.Hostname()
	}
	if opt.MinBackoff <= 0 {
		opt.MinBackoff = DefaultMinBackoff
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = DefaultMaxBackoff
	}
	if opt.MaxBackoff < opt.MinBackoff {
		opt.MaxBackoff = opt.MinBackoff
	}
	if opt.HeartbeatInterval == 0 {
		opt.HeartbeatInterval = MaxDefaultHeartbeat
		if opt.StaleTimeout > 0 {
			opt.HeartbeatInterval = min(opt.StaleTimeout/4, MaxDefaultHeartbeat)
		}
	}
	if opt.HeartbeatInterval > 0 && opt.HeartbeatInterval < minHeartbeat {
		opt.HeartbeatInterval = minHeartbeat
	}
	rec := &record{hostname: opt.Hostname, pid: os.Getpid(), proc: self()}
	if opt.HeartbeatInterval > 0 {
		rec.every = opt.HeartbeatInterval
	}
	return &Lock{path: lockPath, opt: opt, rec: rec, clock: time.Now, sem: make(chan struct{}, 1),
		lease: leaseFor(opt, rec.every)}
}

// Path returns the lock file path, for messages.
func (l *Lock) Path() string { return l.path }

// Acquire blocks until the lock is held, ctx is done (returning ctx.Err()),
// or Options.Timeout has passed (returning *TimeoutError). Other errors are
// I/O failures that retrying will not fix, such as a missing directory.
// Like sync.Mutex it is not reentrant: a goroutine that already holds the
// lock and calls Acquire again waits for itself until Timeout.
func (l *Lock) Acquire(ctx context.Context) error { return l.acquire(ctx, false, nil) }

// AcquireWrite is Acquire for an operation that will write: on the node's
// queue it waits in the writers' lane first (see the gate), so that reads
// do not queue behind several writes. The lock it takes is the same.
func (l *Lock) AcquireWrite(ctx context.Context) error { return l.acquire(ctx, true, nil) }

// Handover is a write that another process of this node may do on the
// caller's behalf, in its own transaction (group commit: see core/spool).
type Handover interface {
	// Publish is called before waiting, only when another process of
	// this node holds or waits for the writers' lane; it makes the write
	// available to them and reports whether it did.
	Publish() bool
	// Done is called once the published write's process holds the lane:
	// true means another process did the write, so the lock is not taken.
	Done() bool
}

// ErrHandedOver is AcquireWriteHandover's answer when another process of
// this node did the write: the lock is not held.
var ErrHandedOver = errors.New("lock: the write was done by another process of this node")

// AcquireWriteHandover is AcquireWrite for a write that can be handed over
// (h): when other writes of this node are ahead, it is published, and if
// one of them does it meanwhile, AcquireWriteHandover returns
// ErrHandedOver without taking the lock. Without the node queue h is not
// called. If the queue fails after h.Publish (it falls back to polling),
// the lock is taken as by AcquireWrite, and the caller must look under the
// lock whether its published write was done.
func (l *Lock) AcquireWriteHandover(ctx context.Context, h Handover) error {
	return l.acquire(ctx, true, h)
}

// WritesWaiting reports whether a write of another process of this node
// holds or waits for the writers' lane, i.e. whether the database is about
// to change. Only the lock's holder may call it; without the node queue it
// reports false.
func (l *Lock) WritesWaiting() bool {
	return l.gate != nil && l.gate.laneBusy()
}

func (l *Lock) acquire(ctx context.Context, write bool, h Handover) error {
	start := time.Now()
	var deadline time.Time
	if l.opt.Timeout > 0 {
		deadline = start.Add(l.opt.Timeout)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.lockLocal(ctx, start, deadline); err != nil {
		return err
	}
	if l.gate == nil && !l.noGate {
		l.gate = openGate(l.path)
		l.noGate = l.gate == nil
	}
	if l.gate != nil {
		var done func() bool
		if h != nil && l.gate.laneBusy() && h.Publish() {
			done = h.Done
		}
		switch err := l.gate.lock(ctx, deadline, write, done, l.stallCheck()); {
		case err == nil:
			l.gated = true
		case errors.Is(err, errHandedOver):
			l.stats.handedOver.Add(1)
			<-l.sem
			return ErrHandedOver
		case errors.Is(err, errGateTimeout):
			<-l.sem
			h, _ := ReadHolder(l.path)
			return &TimeoutError{Path: l.path, Holder: h, Waited: time.Since(start), now: l.clock(),
				Queue: l.gate.holder()}
		case errors.Is(err, errGateStalled):
			l.stats.bypassed.Add(1) // the line does not move: go around it
		case errors.Is(err, errGateUnavailable):
			// e.g. EDEADLK: proceed without the queue; it only orders.
		default:
			<-l.sem
			return err
		}
	}
	c, wrote, err := l.acquireFile(ctx, start, deadline)
	if err != nil {
		if l.gated {
			l.gated = false
			l.gate.unlock()
		}
		<-l.sem
		return err
	}
	if l.rec.every > 0 && l.beat == nil {
		l.beat = l.startHeartbeat()
	}
	if !l.swept {
		l.swept = true
		l.sweepClaims()
	}
	if write {
		l.stats.writes.Add(1)
	}
	l.mu.Lock()
	l.claim, l.heldSince = c, time.Now()
	l.startLease(wrote)
	l.mu.Unlock()
	return nil
}

// lockLocal takes the in-process mutex.
func (l *Lock) lockLocal(ctx context.Context, start, deadline time.Time) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	default:
	}
	timeout, stop := deadlineTimer(deadline)
	defer stop()
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		h, _ := ReadHolder(l.path)
		return &TimeoutError{Path: l.path, Holder: h, Waited: time.Since(start), now: l.clock()}
	}
}

// acquireFile runs the file protocol; it returns the claim that is now the
// lock and when (monoNow) its record was written before the link that made
// it the lock, the start of the holder's lease; or an error.
func (l *Lock) acquireFile(ctx context.Context, start, deadline time.Time) (*claim, int64, error) {
	c, err := l.ownClaim()
	if err != nil {
		return nil, 0, err
	}
	if l.gated {
		if err := l.gate.yieldIfDue(ctx, l.opt.MaxBackoff); err != nil {
			return nil, 0, err
		}
	}
	var (
		last      *Holder
		readErr   error
		unchanged time.Duration
	)
	l.breakErr = nil
	quick := 0 // consecutive retries without sleeping
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		wrote := monoNow()
		if l.gated {
			l.gate.noteProgress()
		}
		if err := c.write(l.clock()); err != nil {
			return nil, 0, err
		}
		l.stats.links.Add(1)
		held, err := tryLink(c, l.path)
		if err != nil && errors.Is(err, os.ErrNotExist) && c.gone() {
			// Someone deleted our claim file: make a new one.
			c.f.Close()
			if l.own, err = newClaim(dirOf(l.path), l.rec, l.flushEvery()); err != nil {
				return nil, 0, err
			}
			c = l.own
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		if held {
			l.stats.acquired.Add(1)
			l.seen.valid = false
			if l.gated {
				l.gate.noteAcquired()
			}
			return c, wrote, nil
		}
		if l.gated {
			// The holder is not queued on our gate: another node (or a
			// process that does not use the queue) wants the lock too.
			l.gate.noteForeign()
		}
		retryNow := false
		h, st, rerr := readHolder(l.path)
		switch {
		case rerr == nil:
			last = h
			unchanged = l.seen.observe(st, time.Now())
			if l.judge(h, unchanged, l.clock()) != verdictLive {
				// A failed break (say, EPERM in a sticky directory) is
				// not fatal: keep waiting, as for a live holder.
				retryNow = l.breakLock(st)
			}
		case errors.Is(rerr, os.ErrNotExist):
			retryNow = true // released between our link and our read
		default:
			readErr = rerr // e.g. another user's 0600 lock file
		}
		now := time.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return nil, 0, &TimeoutError{Path: l.path, Holder: last, Waited: now.Sub(start), Unchanged: unchanged,
				ReadErr: readErr, BreakErr: l.breakErr, now: l.clock()}
		}
		// Bounded, so that odd states (a dangling symlink at the lock path,
		// a lock that keeps being replaced) cannot spin.
		if retryNow && quick < 3 {
			quick++
			continue
		}
		quick = 0
		d := l.backoff(attempt, l.gated)
		if !deadline.IsZero() {
			d = min(d, deadline.Sub(now))
		}
		if err := sleepCtx(ctx, d); err != nil {
			return nil, 0, err
		}
	}
}

// ownClaim returns this Lock's claim, creating it (empty: the first write
// fills it) at the first Acquire.
func (l *Lock) ownClaim() (*claim, error) {
	if l.own == nil {
		c, err := newClaim(dirOf(l.path), l.rec, l.flushEvery())
		if err != nil {
			return nil, err
		}
		l.own = c
	}
	return l.own, nil
}

// backoff is "full jitter": uniform in [0, min(MaxBackoff, MinBackoff*2^n)],
// so that 64 waiters spread out instead of retrying in lockstep. The head of
// a node's queue polls for the whole node, so it polls at least every
// gatedMaxBackoff: one poller per node, not one per process.
func (l *Lock) backoff(attempt int, gated bool) time.Duration {
	ceil := l.opt.MaxBackoff
	if gated {
		ceil = min(ceil, gatedMaxBackoff)
	}
	if attempt < 30 {
		if d := l.opt.MinBackoff << attempt; d > 0 && d < ceil {
			ceil = d
		}
	}
	return rand.N(ceil + 1)
}

// sleepCtx sleeps d, returning early with ctx.Err() when ctx is done. ctx is
// also polled every ctxPoll, in case its Done channel is not the only signal.
func sleepCtx(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return ctx.Err()
		}
		t := time.NewTimer(min(left, ctxPoll))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// heartbeat is the goroutine that keeps a held lock fresh.
type heartbeat struct {
	stop chan struct{}
	done chan struct{}
}

// startHeartbeat starts this Lock's heartbeat: one goroutine for the
// Lock's life (until Close), which every HeartbeatInterval rewrites the
// record through the claim's open descriptor while the lock is held and
// checks that the lock is still its claim, which renews the holder's lease
// (Confirm, lease.go). One
// goroutine per Lock rather than per acquisition: starting and joining a
// goroutine at every operation cost cross-thread wake-ups on the hot path.
// A beat runs under l.mu, so Release waits for a beat in progress and no
// beat touches the claim once Release has taken it back. A failed beat is
// retried at the next tick; only if beats keep failing for StaleTimeout can
// the lock be broken.
func (l *Lock) startHeartbeat() *heartbeat {
	hb := &heartbeat{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(hb.done)
		t := time.NewTicker(l.rec.every)
		defer t.Stop()
		for {
			select {
			case <-hb.stop:
				return
			case <-t.C:
				l.mu.Lock()
				if l.claim != nil {
					_ = l.confirmLocked() // a loss is reported by Release
				}
				l.mu.Unlock()
			}
		}
	}()
	return hb
}

// Release gives the lock up: the lease ends, the lock file is unlinked
// only if it is still our claim (the claim itself stays for the next
// Acquire). It returns ErrNotHeld if the lock is not held, and a *LostError
// (errors.Is ErrLockLost) if the lock had been broken by someone else
// meanwhile, or could not be confirmed after a stall: the critical section
// may not have been exclusive. The in-process mutex is released in all
// cases.
func (l *Lock) Release() error {
	l.mu.Lock()
	c, since, lost := l.claim, l.heldSince, l.lost
	l.claim = nil
	if c != nil && l.opt.Fence != nil {
		l.opt.Fence.Extend(0)
	}
	l.mu.Unlock()
	if c == nil {
		return ErrNotHeld
	}
	defer func() {
		l.stats.heldNS.Add(int64(time.Since(since)))
		if l.gated {
			l.gated = false
			l.gate.unlock()
		}
		<-l.sem
	}()
	// Unlink the lock path only if it is still our inode. This must look
	// the path up: an fstat of our claim is not enough. Some filesystems
	// (FUSE ones among them, our test bed included) answer fstat by a path
	// of the inode rather than by the inode itself, and after a break that
	// path may be the lock path, now someone else's lock, with two links.
	switch id, err := lstatID(l.path); {
	case err == nil && id == c.id:
		if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if lost != nil {
			return lost // put back by a breaker since, but broken meanwhile
		}
		return nil
	case err == nil || errors.Is(err, os.ErrNotExist):
		if lost != nil {
			return lost
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.lostError(nil)
	default:
		return err
	}
}

// Close removes this Lock's claim file and closes its descriptors. The Lock
// must not be held; a later Acquire starts over with a new claim. Processes
// that exit without Close leave their claim behind: sweepClaims removes it
// at the next Acquire of a process on the same host.
func (l *Lock) Close() error {
	l.sem <- struct{}{}
	defer func() { <-l.sem }()
	if hb := l.beat; hb != nil {
		l.beat = nil
		close(hb.stop)
		<-hb.done
	}
	var err error
	if l.own != nil {
		err = l.own.remove()
		l.own = nil
	}
	if l.gate != nil {
		l.gate.close()
		l.gate, l.noGate = nil, false
	}
	return err
}

// flushEvery is how often write fsyncs the claim: the heartbeat interval,
// which bounds how old a record other nodes may see.
func (l *Lock) flushEvery() time.Duration {
	if l.rec.every > 0 {
		return l.rec.every
	}
	if l.opt.StaleTimeout > 0 {
		return min(l.opt.StaleTimeout/4, MaxDefaultHeartbeat)
	}
	return MaxDefaultHeartbeat
}

// TimeoutError says who held the lock when Acquire gave up, because "timed
// out" alone sends users hunting for the culprit across 64 nodes.
type TimeoutError struct {
	Path   string
	Holder *Holder // nil if the lock file could not be read or parsed
	Waited time.Duration
	// Unchanged is how long the lock file had stayed exactly as it was, as
	// seen from this process (0 if unknown). A live Go holder rewrites it
	// every HeartbeatInterval; a large value means a Python holder, or a
	// holder that stopped heartbeating.
	Unchanged time.Duration
	// ReadErr is why the lock file could not be read (nil if it could), and
	// BreakErr why it was judged abandoned but could not be removed: both
	// typically "permission denied" for another user's lock.
	ReadErr, BreakErr error
	// Queue is the pid of the process of this node that was ahead of us in
	// the node-local queue when we gave up waiting there (0 if we got
	// through it, or if unknown).
	Queue int

	now time.Time // wall clock when it was made; zero: time.Now()
}

// Error names the lock, the holder, how long it has held the lock by its
// timestamp, and how long the lock had not changed.
func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("timed out after %.1fs waiting for lock %s", e.Waited.Seconds(), e.Path)
	if e.Queue > 0 {
		s += fmt.Sprintf(" (queued behind pid %d of this host, which waits for or holds the lock)", e.Queue)
	}
	if e.Holder == nil {
		if e.ReadErr != nil {
			return s + fmt.Sprintf(" (holder unknown: cannot read the lock file: %v; remove it as its owner or an administrator if its holder is gone)", e.ReadErr)
		}
		return s + " (holder unknown)"
	}
	now := e.now
	if now.IsZero() {
		now = time.Now()
	}
	age := unixSeconds(now) - e.Holder.Timestamp
	s += fmt.Sprintf(" held by host %s pid %d for %.1fs", e.Holder.Hostname, e.Holder.PID, age)
	if e.Unchanged > 0 {
		s += fmt.Sprintf(" (lock file unchanged for %.1fs as seen here)", e.Unchanged.Seconds())
	}
	if e.BreakErr != nil {
		s += fmt.Sprintf("; it is abandoned but could not be removed: %v (remove it as its owner or an administrator)", e.BreakErr)
	}
	return s
}

// unixSeconds is Python's time.time() for t.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
