// Package storage is the seam between TiraStore's API layer (package core:
// argument checks, normalization, keys, result shapes, the CPU policy) and
// a database backend. A backend stores what the API layer has already
// validated and keyed; it never normalizes or hashes.
//
// There are two backends: the shared SQLite file (core/sqlitefile), one
// file on a cluster filesystem, serialized by the hard-link lock, with
// its kept connection and result cache behind this interface; and a
// PostgreSQL server (core/postgres), with row-level concurrency and no
// global lock.
//
// Adding a table: its row types go here, its reads on Reader and its
// writes on Writer (or, for an operation a backend serves faster than a
// transaction would, a method of Backend), each backend implements them,
// and the API layer exposes them (docs/design.md, "Where each kind of change
// goes").
package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tirastore/tirastore/core/limits"
)

// Record is one row of the records table, with the program's name and
// source when the read joined them in (Get, EachRecordOf); lookups leave
// both empty.
type Record struct {
	Key           string
	ProgramHash   string
	Schedule      string
	ResultJSON    string
	Hostname      string
	Username      string
	CreationDate  string
	UpdateDate    string
	SourceProject string
	ProgramName   string
	SourceCode    string
	// Runs is the record's measurement runs (the runs_json of its
	// record_runs row: see "Runs"), "" when it has none that describes
	// it: written by the original library, or overwritten by it since.
	Runs string
}

// # Runs
//
// A record's times may come from several runs (a first measurement,
// re-measurements of a noisy record, a merge of two databases), each
// taken in a run context: the host and CPU, cores, Slurm allocation,
// governor (a core/runctx.Static, stored once per distinct value in the
// run_contexts table under its fingerprint), and the load, frequency,
// job and date of the run itself (a core/runctx.Run). A record's runs are
// one row of the record_runs table, a JSON list of runctx.Run in the
// order their times appear in execution_times, with the update_date of
// the record they describe: an original worker that overwrites the
// record leaves the row, which no longer matches and is ignored. Neither
// table is known to the original library, whose readers and writers go
// on as before. A backend reads a record's runs with the record (Runs),
// in lookups too, so that a cache holds both. The records of one record
// or record_many share one run, that of their write (Write.RunTail): a
// backend may keep it once per write and rebuild each record's runs,
// byte for byte, from the record's own count of times.

// RunContext is one row of the run_contexts table: a context's JSON
// (core/runctx.Static.JSON) under its fingerprint.
type RunContext struct {
	Fingerprint string `json:"fingerprint"`
	JSON        string `json:"context"`
}

// Program is one row of the programs table.
type Program struct {
	Hash   string
	Name   string
	Source string
}

// ScheduleResult is the part of a record that an export writes, with
// its runs (see "Runs"; "" when it has none).
type ScheduleResult struct {
	Schedule   string
	ResultJSON string
	Runs       string
}

// ConfigEntry is one entry of the kernel-config table (ejKernel's
// PersistentCache): the best configuration found for a (device, op_id,
// call_key), under the seed's key "device|op_id|call_key", as JSON text,
// with who wrote it and when. An entry is named by (Namespace, Key): each
// cache of a database (ejKernel keeps one per operation) is a namespace
// of its own, and "" is the namespace of every entry written before
// namespaces existed.
type ConfigEntry struct {
	Namespace    string
	Key          string
	Device       string
	OpID         string
	CallKey      string
	ValueJSON    string
	Hostname     string
	Username     string
	CreationDate string
	UpdateDate   string
	// Context is the fingerprint of the run context the entry was tuned
	// in (a run_contexts row: see "Runs"); "" when unknown (an entry
	// written before contexts, or imported from a JSON file).
	Context string
}

// ConfigName is how messages name the config entry of key in namespace:
// the key alone in the namespace "", else "<key> in namespace <namespace>",
// the one form every message (errors, check) uses.
func ConfigName(namespace, key string) string {
	if namespace == "" {
		return key
	}
	return key + " in namespace " + namespace
}

// ConfigFilter selects config entries (Reader.EachConfig): those of
// Namespace, or of every namespace with AllNamespaces (tools that show
// the whole table), of Device and OpID ("" matches any).
type ConfigFilter struct {
	Namespace     string
	AllNamespaces bool
	Device, OpID  string
}

// ConfigImport remembers that a seed JSON file was imported into the
// kernel-config table, so that it is imported once, never twice, and that
// a later change of the file can be told apart from the content imported.
type ConfigImport struct {
	Path       string // absolute path of the JSON file
	Size       int64
	MtimeNS    int64
	SHA256     string // of the file's bytes, hex
	Entries    int64  // entries the file held
	ImportedAt string
	Hostname   string
	Username   string
}

// Claim is one row of the claims table: a worker's announcement that it
// is measuring the schedule of Key, so that others wait for its result
// instead of measuring it too (core/claim.go has the protocol). The
// holder renews the row while it measures; a waiter judges it abandoned
// by its own clock (Renewals unchanged for LeaseSeconds) or, on the
// holder's host, by the dead-process rule (core/liveness.GoneFromThisHost),
// never by the dates, which are for people.
type Claim struct {
	Key, ProgramHash, ProgramName, Schedule string
	// Token names this claim: a takeover writes a new one, so that the
	// old holder's release or renewal no longer matches.
	Token string
	// Who holds it: host, pid and what proves the pid's process dead on
	// that host (core/liveness.Process), the Slurm job and the cluster
	// that knows it ("" outside one, or written by a version before the
	// cluster was recorded) and the user.
	Hostname     string
	PID          int
	StartTime    uint64
	BootID       string
	PIDNS        uint64
	SlurmJobID   string
	SlurmCluster string
	Username     string
	// LeaseSeconds is how long a waiter lets the row stay unrenewed.
	LeaseSeconds float64
	// Renewals counts the holder's renewals: each changes the row.
	Renewals             int64
	ClaimedAt, RenewedAt string
	// ServerClock: the backend has one clock that dates every renewal
	// (a database server's), and ExpiresIn is what is left of the lease
	// by it when the claim was read (<= 0: expired), so that a waiter
	// need not watch the row for a whole lease first. A backend whose
	// writers date rows by their own clocks (the shared file) leaves it
	// false, and waiters count the lease on their own clocks.
	ServerClock bool
	ExpiresIn   time.Duration
}

// ClaimRef names one claim: its key and the token of its holder.
type ClaimRef struct {
	Key   string `json:"key"`
	Token string `json:"token"`
}

// SeqRecord is a record with its place in the order rows were inserted
// (Seq: SQLite's rowid, the server's rowid column), which an overwrite
// keeps: the cursor a reader that follows the whole table
// (core/dashboard) goes on from. Its Record has the program's name but
// not its source.
type SeqRecord struct {
	Seq int64
	Record
}

// ProgramSummary counts one program's records (stats --by program).
type ProgramSummary struct {
	Hash, Name          string
	Records, Legal      int64  // a record whose result_json is not JSON is not legal
	FirstDate, LastDate string // creation dates of its oldest and newest record ("" without records)
}

// TableCheck is what a check of the tables found (tirastore check).
type TableCheck struct {
	// Integrity is SQLite's integrity_check: ["ok"] when sound.
	Integrity []string
	// Orphans are records whose program row is missing; BadResults
	// records whose result_json is not valid JSON or not a JSON object,
	// which no reader can use (both -1, not counted, when the integrity
	// check failed).
	Orphans, BadResults int64
	// DeepValues names the stored JSON values (a record's result_json,
	// a config entry's value) nested deeper than limits.MaxValueDepth,
	// which readers refuse: "record <key>" or "config <name>" (the
	// entry's ConfigName), records
	// first, at most MaxDeepListed of them; DeepCount counts them all
	// (-1 when the integrity check failed).
	DeepValues []string
	DeepCount  int64
}

// MaxDeepListed bounds TableCheck.DeepValues: a report names enough
// values to find them, and counts the rest.
const MaxDeepListed = 100

// CheckDepth counts the stored value of key in kind ("record" or
// "config", whose key is then the entry's ConfigName) when its JSON text nests
// deeper than limits.MaxValueDepth, for a backend's CheckTables.
func (c *TableCheck) CheckDepth(kind, key, text string) {
	d, over := limits.TooDeep(text)
	if !over {
		return
	}
	c.DeepCount++
	if len(c.DeepValues) < MaxDeepListed {
		c.DeepValues = append(c.DeepValues, fmt.Sprintf("%s %s (%d levels)", kind, key, d))
	}
}

// Summary is what the original's stats() counts in the tables.
type Summary struct {
	Total, Legal, Illegal, Programs int64
	SourceProjects, Users           []string
	// Unreadable counts the records whose result_json is not JSON or
	// not a JSON object (a direct write to the table can leave one; the
	// export leaves them out): in Total, neither Legal nor Illegal. The
	// original's stats() failed on the first that was not JSON.
	Unreadable int64
}

// Write is one record or record_many call: one program's validated rows,
// with who wrote them. A backend writes it whole or not at all.
type Write struct {
	Hash          string `json:"program_hash"`
	Name          string `json:"program_name"`
	Source        string `json:"source"`
	Rows          []Row  `json:"rows"`
	Hostname      string `json:"hostname"`
	Username      string `json:"username"`
	SourceProject string `json:"source_project"`
	Overwrite     bool   `json:"overwrite"`
	// ProgramStored: the writer knows the program row is stored and sent
	// no Source (core.ProgramRef). The write does not insert the program;
	// if the row is not there, it fails with ErrNoProgram and writes
	// nothing.
	ProgramStored bool `json:"program_stored,omitempty"`
	// Release are claims that the write ends (a claimer's record): each
	// is deleted in the write's transaction if its token still names it;
	// and when the write stores the record of a released claim's key, any
	// claim on that key is deleted (a late record after a takeover: the
	// schedule is recorded, the taker's claim measures nothing, and a
	// taker that died would leave it for good).
	Release []ClaimRef `json:"release,omitempty"`
	// Renew are other claims of the writer, renewed in the write's
	// transaction (dated by it) if their tokens still name them: a
	// claimer's records keep its other claims alive when the lock is too
	// busy for its renewals.
	Renew []ClaimRef `json:"renew,omitempty"`
	// Contexts are the run contexts its rows' runs name, stored unless
	// present.
	Contexts []RunContext `json:"contexts,omitempty"`
	// RunTail, when set, is the one run every row was measured in, as
	// runctx.RunTail writes it: each row's Runs is that run alone,
	// counting the row's stored times (see "Runs"). A backend may store
	// it once for the rows the write inserts instead of once per row.
	RunTail string `json:"run_tail,omitempty"`
}

// Row is one validated record of a Write: its key, normalized schedule and
// result_json as the original wrote them, and its runs (see "Runs"),
// stored with the row's update_date when the row is written ("" : none).
type Row struct {
	Key        string `json:"key"`
	Schedule   string `json:"schedule"`
	ResultJSON string `json:"result_json"`
	Runs       string `json:"runs,omitempty"`
}

// OnServer is implemented by a backend whose database lives on a server,
// not in a file: tools that make a file from the database (a backup) name
// it after DatabaseName, and replies say "server".
type OnServer interface {
	DatabaseName() string
}

// LinkLocked is implemented by a backend that serializes writers with a
// hard-link lock file beside the database (the original's protocol): its
// path, for tools that show or break it, and its counters.
type LinkLocked interface {
	LockPath() string
	LockStats() LockCounters
}

// LockCounters are a hard-link lock's counters since the store opened:
// Links per Acquired is what an acquisition cost in link() attempts, Held
// per Acquired the mean time an operation kept everyone else waiting.
type LockCounters struct {
	Acquired, Links, Breaks int64
	Held                    time.Duration
}

// Config is what the API layer tells a backend when it opens one.
type Config struct {
	// StaleLockTimeout (positive) and LockTimeout (positive, TryOnce or
	// WaitForever) are the resolved lock settings (core/options.go); a
	// backend without a global lock applies LockTimeout to waiting for a
	// connection or a row.
	StaleLockTimeout time.Duration
	LockTimeout      time.Duration
	// Hostname names this host in lock files and records.
	Hostname string
	// Interruptible wraps every wait (see core.Options.Interruptible).
	Interruptible func(ctx context.Context) (context.Context, func())
	// NewMeta are the db_meta rows of a database this open creates
	// (cpu_model, slurm_cpus, created_at).
	NewMeta map[string]string
	// MustExist: open an existing database only; a missing one is an
	// error wrapping fs.ErrNotExist, and nothing is created.
	MustExist bool
	// Sharing is who may use a database file this open creates; a
	// backend without files ignores it.
	Sharing Sharing
	// SharingAsked: the caller chose Sharing (the default is the
	// original's ShareAll). Only then does a new database in a directory
	// that keeps other users out come with a notice saying so: for a
	// database nobody asked to share, that is no news.
	SharingAsked bool
}

// Sharing says who besides its owner may use a database file that an open
// creates: the original library shared every database with every user,
// while a cache in a user's home must be theirs alone (see
// core/configplace.go, which chooses it for PersistentCache).
type Sharing int

const (
	// ShareAll is the original's: the file 0666, and a directory the open
	// creates 1777, so that every user may take the lock beside it.
	ShareAll Sharing = iota
	// ShareGroup: the file 0660; the directory is left as it is (a
	// group's project directory).
	ShareGroup
	// SharePrivate: the file 0600; a directory the open creates gets the
	// mode the umask gives (as Python's mkdir).
	SharePrivate
)

// sharingNames are the names of the Sharing values in the C API's options.
var sharingNames = [...]string{ShareAll: "all", ShareGroup: "group", SharePrivate: "private"}

// String is the name of s in the C API ("all", "group", "private").
func (s Sharing) String() string {
	if s < 0 || int(s) >= len(sharingNames) {
		return fmt.Sprintf("Sharing(%d)", int(s))
	}
	return sharingNames[s]
}

// SharingNames are the names of the Sharing values, in order, for messages.
func SharingNames() []string { return sharingNames[:] }

// ParseSharing is the Sharing named name, and whether there is one.
func ParseSharing(name string) (Sharing, bool) {
	for i, n := range sharingNames {
		if n == name {
			return Sharing(i), true
		}
	}
	return 0, false
}

// FileMode is the mode of a database file created with s.
func (s Sharing) FileMode() uint32 {
	switch s {
	case ShareGroup:
		return 0o660
	case SharePrivate:
		return 0o600
	}
	return 0o666
}

// The special values of Config.LockTimeout.
const (
	// TryOnce: take the lock only if it is free now.
	TryOnce time.Duration = 1
	// WaitForever: no bound on the wait.
	WaitForever time.Duration = -1
)

// Opened is what a backend's Open learnt about the database.
type Opened struct {
	// Meta holds the db_meta rows the API layer checks (cpu_model,
	// slurm_cpus, NoisePolicyKey), absent rows left out.
	Meta map[string]string
	// Notices are warnings for the caller to show: a speed-up switched off
	// by a file that failed its checks, a database other users cannot use.
	Notices []string
}

// Backend is one open database. It is safe for concurrent use; every
// method but Close fails with the engine's closed error after Close.
// Errors are *apierr.Error values naming the database and the operation.
type Backend interface {
	// Location names the database in messages (a path; a URL without its
	// password).
	Location() string

	// Lookup returns the record of key (program name and source left
	// empty), or nil. It is the hot path: a backend may answer it from a
	// cache it can prove current.
	Lookup(ctx context.Context, programHash, key string) (*Record, error)
	// LookupMany is Lookup of several keys of one program in one
	// consistent read; the results are in the order of keys.
	LookupMany(ctx context.Context, programHash string, keys []string) ([]*Record, error)
	// Contains reports whether a record row has key (no join with
	// programs, as in the original).
	Contains(ctx context.Context, programHash, key string) (bool, error)
	// ConfigGet returns the config entry of (namespace, key), or nil.
	// Like Lookup, it is a hot path that a backend may answer from a
	// cache it can prove current.
	ConfigGet(ctx context.Context, namespace, key string) (*ConfigEntry, error)
	// Peek is Lookup answered without a round trip to the database (a
	// cache the backend can prove current): ok false when it cannot
	// tell, and the caller asks Lookup or a transaction.
	Peek(programHash, key string) (rec *Record, ok bool)
	// Write stores w's program (unless present) and rows in one
	// transaction and returns how many rows it wrote (a row whose key
	// exists is skipped unless w.Overwrite).
	Write(ctx context.Context, w *Write) (int, error)

	// View runs fn in one consistent read; op names it in errors.
	View(ctx context.Context, op string, fn func(Reader) error) error
	// Reread is View for an fn that starts over from its arguments each
	// time it is called: a database server's backend runs it again after
	// a fault that a retry gets past (a lost connection, a restarting
	// server), where View gives up, since its fn may have passed rows on.
	Reread(ctx context.Context, op string, fn func(Reader) error) error
	// Update runs fn in one transaction, committed if fn returns nil.
	Update(ctx context.Context, op string, fn func(Writer) error) error
	// UpdateClaims is Update for a transaction that writes claims only,
	// which a backend may make cheaper for its caches: the records and
	// config entries that they hold stay valid across it. fn may run more
	// than once: a database server's backend runs it again after the
	// server aborted the transaction (a deadlock, a lost connection), and
	// after the answer of its COMMIT was lost, when the earlier run may
	// have committed. So it starts over from its arguments each time, and
	// a run must recognize what an earlier one committed (a claim by its
	// token) and report that as done.
	UpdateClaims(ctx context.Context, op string, fn func(ClaimWriter) error) error
	// EachProgram calls fn for every program in export order (by name,
	// then hash) with its results ordered by creation date, from one
	// consistent state of the database, holding one program in memory at
	// a time.
	EachProgram(ctx context.Context, fn func(p Program, results []ScheduleResult) error) error
	// Backup writes a consistent copy of the database into path, an
	// empty file that the API layer created for it (with
	// O_CREAT|O_EXCL|O_NOFOLLOW and its final mode: core/shareddir) and
	// renames into place.
	Backup(ctx context.Context, path string) error

	// Close releases the backend; calls in flight finish first. Closing
	// twice is harmless.
	Close() error
	// CloseIfIdle is Close unless a call is in flight; it never waits.
	CloseIfIdle() (bool, error)
}

// Reader is the read side of a View or Update.
type Reader interface {
	// Meta is one db_meta row (ok false when absent).
	Meta(key string) (value string, ok bool, err error)
	// Get is a record joined with its program (inner join), or nil.
	Get(key string) (*Record, error)
	// ProgramsByName lists the programs of a name by hash.
	ProgramsByName(name string) ([]Program, error)
	// ProgramsAfter lists up to limit programs after (name, hash) in
	// (name, hash) order: a cursor over every program.
	ProgramsAfter(name, hash string, limit int) ([]Program, error)
	// EachRecordOf calls fn for every record of a program, joined with
	// it, by creation date.
	EachRecordOf(programHash string, fn func(*Record) error) error
	// CountRecords and CountPrograms are the table sizes.
	CountRecords() (int64, error)
	CountPrograms() (int64, error)
	// Summary computes the original's stats() counts.
	Summary() (*Summary, error)
	// Keys lists record keys by creation date; limit > 0 paginates.
	Keys(limit, offset int64) ([]string, error)
	// ProgramSummaries counts the records of every program, by name then
	// hash (programs without records included).
	ProgramSummaries() ([]ProgramSummary, error)
	// RecordsAfter lists up to limit records whose Seq is above after,
	// by Seq, joined with their program's name (inner join): one read of
	// bounded size, so that following the whole table holds the lock no
	// longer per call than a lookup's load of limit rows does.
	RecordsAfter(after int64, limit int) ([]SeqRecord, error)
	// CheckTables runs the database's own integrity check and counts the
	// records that lookups cannot serve.
	CheckTables() (*TableCheck, error)

	// GetConfig is the config entry of (namespace, key), or nil.
	GetConfig(namespace, key string) (*ConfigEntry, error)
	// EachConfig calls fn for every config entry that f selects, by
	// namespace then key.
	EachConfig(f ConfigFilter, fn func(*ConfigEntry) error) error
	// CountConfigs is the number of config entries of namespace.
	CountConfigs(namespace string) (int64, error)
	// ConfigImported is the import record of the JSON file path, or nil.
	ConfigImported(path string) (*ConfigImport, error)

	// Contexts returns the run contexts of those fingerprints that are
	// stored: their JSON, by fingerprint.
	Contexts(fingerprints []string) (map[string]string, error)
	// AllContexts returns every stored run context (few: one per
	// machine, allocation and tool versions), for an export.
	AllContexts() (map[string]string, error)

	// GetClaims returns the claims of those keys that have one, by key.
	GetClaims(keys []string) (map[string]*Claim, error)
	// EachClaim calls fn for every claim, oldest first.
	EachClaim(fn func(*Claim) error) error
}

// ClaimWriter is the write side of an UpdateClaims: reads, and writes of
// claims.
type ClaimWriter interface {
	Reader
	// PutClaim inserts c, replacing the claim of its key (a takeover).
	PutClaim(c *Claim) error
	// DeleteClaim removes the claim of key if token still names it and
	// reports whether it did.
	DeleteClaim(key, token string) (bool, error)
	// RenewClaims counts a renewal, dated at, of each claim of refs that
	// its token still names, and returns those.
	RenewClaims(refs []ClaimRef, at string) ([]ClaimRef, error)
}

// Writer is the write side of an Update.
type Writer interface {
	ClaimWriter
	// PutProgram inserts p unless its hash is stored (the first name
	// stored for a source stays).
	PutProgram(p Program) error
	// PutRecord inserts r, or replaces an existing row if overwrite
	// (keeping its creation date); it reports whether it wrote. The
	// program must exist: ErrNoProgram otherwise.
	PutRecord(r *Record, overwrite bool) (bool, error)
	// DeleteRecord removes a record (and its runs) and reports whether
	// it existed.
	DeleteRecord(key string) (bool, error)
	// PutRuns stores the runs of the record of key whose update_date is
	// updateDate (see "Runs"), replacing any.
	PutRuns(key, updateDate, runs string) error
	// PutContext stores c unless its fingerprint is stored.
	PutContext(c RunContext) error

	// PutConfig inserts e, or replaces the entry of its (namespace, key)
	// if overwrite (keeping its creation date); it reports whether it
	// wrote.
	PutConfig(e *ConfigEntry, overwrite bool) (bool, error)
	// DeleteConfig removes the config entry of (namespace, key) and
	// reports whether it existed.
	DeleteConfig(namespace, key string) (bool, error)
	// ClearConfigs removes every config entry of namespace and says how
	// many.
	ClearConfigs(namespace string) (int64, error)
	// PutConfigImport inserts or replaces the import record of im.Path.
	PutConfigImport(im *ConfigImport) error
	// PutMeta inserts or replaces a db_meta row of this engine's own
	// (LastCheckKey); the original's rows are written at creation only.
	PutMeta(key, value string) error
}

// LastCheckKey is the db_meta row where `tirastore check` leaves the
// summary of its last run (a JSON object), which the dashboard shows.
const LastCheckKey = "tirastore_last_check"

// NoisePolicyKey is the db_meta row of the database's noise policy (a
// JSON object, core/noise.go), which every backend's Open reports in
// Opened.Meta.
const NoisePolicyKey = "tirastore_noise_policy"

// ErrNoProgram is Writer.PutRecord's error for a record whose program row
// does not exist.
var ErrNoProgram = errors.New("program_hash is not in the programs table")
