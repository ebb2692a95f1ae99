// Package tuning is the one table of TiraStore's internal tunables: the
// waits, polling intervals and bounds that no caller sets, each with the
// reason for its value. The public defaults (the timeouts a caller may
// set) are here too, so that each figure is written once; what those
// timeouts mean from Go, C and Python is in core/options.go.
//
// To change how long a lookup waits for the lock, see LockTimeout (the
// caller's bound) and the backoffs below (how often a waiter polls).
// docs/performance.md ("Figures the code cites") has the measurements
// behind the figures.
package tuning

import "time"

// Public defaults: the original library's figures. core/options.go says
// what a caller's nil, 0 and negative mean and names these as its
// defaults (core.DefaultStaleLockTimeout, core.DefaultLockTimeout); the
// lock (core/sqlitefile/internal/lock) uses them for a zero Options.
const (
	// StaleLockTimeout: the original broke a lock older than 10 minutes.
	StaleLockTimeout = 600 * time.Second
	// LockTimeout: a wait for the lock gives up after about as long as
	// a stale lock takes to be broken, naming the holder.
	LockTimeout = 600 * time.Second
	// ClaimLease: how long a claim on a measurement may go unrenewed
	// before other workers take it over (a holder stopped or dead on
	// another node). Its holder renews it every third of it, so a live
	// holder misses two renewals before anyone doubts it; a minute keeps
	// a suspended job's schedules from waiting long (BuildBuddy's remote
	// cache learnt to keep such leases short, pinging every 20 s).
	ClaimLease = 60 * time.Second
)

// Claims on measurements (core/claim.go).
const (
	// MinClaimLease and MaxClaimLease bound the lease a caller may ask
	// for: shorter than a few polls of the waiters, a live holder would
	// be taken over; a day is longer than any measurement.
	MinClaimLease = 100 * time.Millisecond
	MaxClaimLease = 24 * time.Hour
	// ClaimProbe is how often a waiter asks its cache, lock-free, whether
	// the result has been recorded (the cache checks the database's
	// header first) and whether a holder on this host died.
	ClaimProbe = 20 * time.Millisecond
	// ClaimMinPoll and ClaimMaxPoll bound the full-jitter backoff between
	// a waiter's reads of the claims under the lock, which are what
	// notice a result of another node, a release or an expiry.
	ClaimMinPoll = 20 * time.Millisecond
	ClaimMaxPoll = time.Second
	// ClaimReleaseAtExit bounds how long closing an idle store at exit
	// waits for the lock to release the claims it still holds.
	ClaimReleaseAtExit = 2 * time.Second
)

// Asking Slurm whether a claim's holder's job has ended (core/slurmjob).
// A node's waiters share one answer file, so these are per node, not per
// process.
const (
	// SlurmInterval is the least time between two queries of a node (one
	// sacct, and squeue for what sacct did not list). A waiter needs the
	// answer only once its holder has stopped renewing, tens of seconds
	// into a ClaimLease, so an answer a second old costs nothing; it is
	// ClaimMaxPoll, how often a waiter reads the claims anyway. Every
	// query loads the controller (or slurmdbd), which all the nodes of a
	// cluster share.
	SlurmInterval = time.Second
	// SlurmTimeout bounds one query, all of its commands (sacct gets half
	// of it, so that squeue still runs when slurmdbd does not answer): a
	// Slurm client waits 10 s for an answer (MessageTimeout's default)
	// before it gives up on its own. A querier that went silent is replaced
	// after twice this.
	SlurmTimeout = 10 * time.Second
	// SlurmWantedIntervals: a job is asked about while some waiter of the
	// node asked for it within this many intervals. A waiter asks at every
	// read of the claims (at most ClaimMaxPoll apart), so only a job that
	// no waiter waits on any more drops out of the queries.
	SlurmWantedIntervals = 10
	// SlurmKeep is how long an answer stays in the file after the last
	// waiter asked for it: an ended job stays ended, and a waiter that
	// comes back to it within a few minutes needs no query.
	SlurmKeep = 5 * time.Minute
	// SlurmMaxJobs bounds the jobs the file remembers and one query asks
	// about (the most recently wanted): a node waits on a few holders'
	// jobs at a time, and at about a hundred bytes a job this keeps the
	// file a tenth of SlurmFileMax, and a command line some kilobytes.
	SlurmMaxJobs = 1024
	// SlurmFileMax bounds what is read of the answer file: a larger file
	// is none that this package wrote, and is read as empty.
	SlurmFileMax = 1 << 20
	// SlurmOutputMax bounds what is read of one command's output: some
	// hundred bytes a job; more is not the answer to our question.
	SlurmOutputMax = 1 << 20
)

// The hard-link lock (core/sqlitefile/internal/lock).
const (
	// MinBackoff and MaxBackoff bound the full-jitter backoff between two
	// link() attempts of a waiter: every
	// attempt is a metadata operation on the shared filesystem, so a busy
	// lock is polled ever more slowly, up to MaxBackoff.
	MinBackoff = 5 * time.Millisecond
	MaxBackoff = 500 * time.Millisecond
	// MaxHeartbeat caps the default heartbeat interval of a holder,
	// min(stale timeout / 4, MaxHeartbeat): a heartbeat is one write and
	// one lstat of the lock file.
	MaxHeartbeat = 30 * time.Second
	// MinHeartbeat bounds how often a holder rewrites its lock file.
	MinHeartbeat = time.Millisecond
	// CtxPoll bounds how long a waiting Acquire goes without looking at
	// its context, for callers that cancel it from a signal handler.
	CtxPoll = 100 * time.Millisecond
)

// The result cache (core/sqlitefile, cache.go).
const (
	// DashboardChunkRows is what one read of `tirastore dashboard` takes
	// of the records table (core/dashboard), so that its hold of the lock
	// stays within a few point reads' (about a millisecond) and writers
	// never wait behind a whole table.
	DashboardChunkRows = 128
	// LoadRowCost is what reading one record into the result cache costs
	// when a program is read whole under the lock: the cache reads a
	// program whole once its locked lookups since the last commit have
	// cost as long as its rows times this (core/sqlitefile, cache.go), so
	// that a burst never spends more than twice what the better of the
	// two ways would have.
	LoadRowCost = 4 * time.Microsecond
	// BackupStepPages is what a backup copies per hold of the lock: 1,024
	// pages (4 MiB with 4 KiB pages), a few milliseconds of copying, the
	// hold of a record_many of some hundred records.
	BackupStepPages = 1024
	// BackupRestarts is how many times writers may make a stepped backup
	// start over before it copies the rest in one hold of the lock (a
	// backup must finish even under a steady stream of writes).
	BackupRestarts = 3
)

// MaxCached bounds the result cache's entries (and, separately, its
// configs); when full, it evicts the least recently used entry, never a
// config. Variables for tests.
var MaxCached = 1 << 16

// MaxCachedBytes bounds the cache's entries in bytes (an estimate of
// each record's memory: records differ a lot in size), as MaxCached
// does in number. A process's resident memory grows by up to about
// twice it (Go's heap grows to twice its live data before it
// collects), in each of a node's tens of processes: 16 MiB holds some
// 25,000 records of a few hundred bytes.
var MaxCachedBytes = 16 << 20

// The API layer (core).
const (
	// MaxProgramHashes bounds the process's memory of program hashes by
	// source; when full it starts over.
	MaxProgramHashes = 64
)

// The C layer (capi).
const (
	// ArmDelay keeps the fast path free of signal handling: only a lock
	// wait that lasts this long installs the SIGINT handler.
	ArmDelay = 20 * time.Millisecond
	// LargeRequest is the size of a call's arguments (JSON bytes) after
	// which the call ends by giving the memory of what it decoded back to
	// the system (a forced collection, some milliseconds): the Go heap
	// would otherwise keep a large source's text until it grew to twice
	// its live size, and the next large call would add its own to it.
	LargeRequest = 64 << 20
)

// Large program sources (core, core/keys, core/sqlitefile): what is
// worth doing for a source of kilobytes is not for one of hundreds of
// megabytes (limits.MaxTextBytes).
const (
	// MaxRememberedSource is the longest source whose hash the process
	// remembers (MaxProgramHashes): a remembered source stays in memory
	// as the map's key, and hashing a source this long again costs less
	// than a millisecond.
	MaxRememberedSource = 1 << 20
	// ScratchInMemoryMap is the size from which the normalization of a
	// program source works in memory mapped for it and unmapped at once
	// (core/keys), not on the Go heap, which would keep the pages until
	// its next collection, in addition to what the write allocates next.
	ScratchInMemoryMap = 1 << 20
	// UncopiedSource is the size from which a program's source is handed
	// to SQLite without the copy of a bound parameter (core/sqlite, "Large
	// texts"): below it, that copy costs less than the registration.
	UncopiedSource = 1 << 20
)

// The PostgreSQL backend (core/postgres). Each applies unless the
// connection URL or PGOPTIONS sets the server parameter itself.
const (
	// ServerConnectTimeout bounds one connection attempt (libpq's
	// connect_timeout, when the URL and PGCONNECT_TIMEOUT leave it unset):
	// a cut network fails an open or a call instead of hanging in the
	// kernel's TCP retries.
	ServerConnectTimeout = 10 * time.Second
	// ServerStatementTimeout is the server's statement_timeout: no
	// statement of the engine runs this long (the longest is one page of
	// an export), so one that does is stuck behind a lock.
	ServerStatementTimeout = 60 * time.Second
	// ServerIdleInTransaction is the server's
	// idle_in_transaction_session_timeout: a client stopped inside a
	// transaction (SIGSTOP, a suspended Slurm job) holds its row locks
	// only this long, then the server ends its session and rolls it back,
	// so a stalled holder never commits late. Below the default claim
	// lease, so that a stalled claimer never blocks its takers longer.
	ServerIdleInTransaction = 30 * time.Second
	// ServerCallSlack is what a statement's client-side deadline adds to
	// ServerStatementTimeout: past it the server is unreachable (a cut
	// network never answers), and the call fails.
	ServerCallSlack = 10 * time.Second
	// ServerRetryFor bounds the retries of a call that met a lost
	// connection or a restarting server (and could be retried: nothing
	// was sent, or the call is idempotent); between attempts the backoff
	// grows from ServerRetryMin to ServerRetryMax. A restart of a
	// server takes a few seconds.
	ServerRetryFor = 30 * time.Second
	// ServerOpenRetryFor is ServerRetryFor for opening a store when
	// nothing answers: a server that is down when a worker starts fails
	// its open soon (a wrong host or port should not look like a hang), a
	// restart still gets through. An answer that the server cannot serve
	// yet gets ServerRetryFor (core/postgres: openRetryWindow).
	ServerOpenRetryFor = 5 * time.Second
	ServerRetryMin     = 50 * time.Millisecond
	ServerRetryMax     = 2 * time.Second
	// ServerMaxConns is a process's pool of connections when the URL
	// does not set pool_max_conns: a worker makes one call at a time,
	// and a second connection keeps its claims' renewals from waiting
	// behind that call. 64 workers then need a max_connections above
	// 128 (the server's default is 100), or PgBouncer in between, or
	// pool_max_conns=1.
	ServerMaxConns = 2
	// ServerCloseWait bounds how long closing a store waits for its
	// connections to close (pgx sends an unreachable server a cancel
	// request first, and waits up to 15 s for it).
	ServerCloseWait = time.Second
	// ServerProbeTimeout bounds the probe that tells a server that does
	// not speak PostgreSQL from one that is down (it runs only after a
	// connection failed).
	ServerProbeTimeout = 2 * time.Second
	// ServerScanPage is how many records a whole-table read (a backup,
	// a check) reads per statement, in rowid order: each statement stays
	// far below ServerStatementTimeout whatever the table's size.
	ServerScanPage = 10000
	// ServerExportPage is how many programs an export or backup reads
	// per statement (with their sources) inside its one snapshot.
	ServerExportPage = 64
)
