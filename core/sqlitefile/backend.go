// Package sqlitefile is TiraStore's shared-file backend: one SQLite file on
// a cluster filesystem (Lustre, GPFS, NFS), used by many processes on many
// nodes, every use of it serialized by the hard-link lock (internal/lock), as
// in the original library, so that old Python workers and this engine can
// share one database during a migration.
//
// Every operation takes the lock, runs one transaction on the connection
// and releases the lock: there is no node-local state, nothing in /dev/shm
// or /tmp, and nothing another process of the node could plant or stall.
// Two speed-ups stay, because they pay on a realistic workload (see
// docs/performance.md), and one safety net:
//   - conn.go: one SQLite connection kept across operations, used only
//     under the lock (on NFS, or with TIRASTORE_CONNECTION=fresh, a new
//     one per operation, as the original did);
//   - cache.go: a repeated lookup answered without the lock while a header
//     read proves the database unchanged, and a burst's program read whole
//     once its locked lookups have cost as long as that read;
//   - the fence of core/sqlite: a stalled holder's writes refused once its
//     lock may have been broken.
package sqlitefile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/shareddir"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/lock"
	"github.com/tirastore/tirastore/core/storage"
)

// Backend is an open shared SQLite file (a storage.Backend). It is safe for
// concurrent use by many goroutines; the hard-link lock serializes them
// with every other process using the same file.
type Backend struct {
	path     string
	lockPath string
	cfg      storage.Config
	lk       *lock.Lock
	// fence refuses the connections' writes once the holder's tenure of
	// the lock is in doubt (core/sqlite: Fencing); nil only in the negative
	// control of the stall tests. fenceErr is why the last renewal failed.
	fence    *sqlite.Fence
	fenceErr atomic.Pointer[error]

	// madeDir: Open created the database's directory (dirmode.go);
	// dirNotice says why other users cannot use a database created in an
	// existing directory ("" if they can).
	madeDir   bool
	dirNotice string
	// runsNotice says that the runs tables are of another layout
	// (core/sqlite runs.go), "" if not.
	runsNotice string

	// fresh: open a new connection for every operation (see conn.go).
	fresh bool
	// conn is the kept connection; used and replaced only under the lock.
	conn  *conn
	cache resultCache

	mu     sync.RWMutex // held shared by operations, exclusively by Close
	closed bool
}

var _ storage.Backend = (*Backend)(nil)

// notADirectory refuses a database path that names a directory (a user
// who gave the folder meant for the database) with IsADirectoryError,
// saying that a file's path is expected, before anything is created.
func notADirectory(path string) error {
	st, err := shareddir.Lstat(path)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	perr := &fs.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
	return apierr.Wrap(apierr.KindOS, perr, "cannot open %s: it is a directory owned by %s, and a database is a "+
		"file: give the path of the database file, e.g. %s", path, identity.Owner(st.Uid),
		filepath.Join(path, "cache.db"))
}

// Open opens the database file at path (absolute), creating it and its
// directory when they do not exist, with cfg.NewMeta in a new db_meta.
func Open(ctx context.Context, path string, cfg storage.Config) (*Backend, *storage.Opened, error) {
	lockPath, err := lock.PathFor(path)
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.KindOS, err, "cannot derive the lock path of %s: %v", path, err)
	}
	s := &Backend{path: path, lockPath: lockPath, cfg: cfg}
	if err := notADirectory(path); err != nil {
		return nil, nil, err
	}
	// A typo that names another database's lock file or journal: a
	// database made there would hold that lock for good, or make the
	// other database unusable. (A database already there is opened.)
	if what := CompanionName(path); what != "" && !failpoint.Enabled(failpoint.OutputTrust) {
		isDB, err := HasSQLiteHeader(path)
		if err != nil {
			k, ok := apierr.OSKind(err)
			if !ok {
				k = apierr.KindOS
			}
			return nil, nil, apierr.Wrap(k, err, "cannot open database %s: %v", path, err)
		}
		if !isDB {
			return nil, nil, apierr.New(apierr.KindValue, "%s is the name of %s: no database is opened or made "+
				"there (give the database's own path, or choose another name)", path, what)
		}
	}
	if cfg.MustExist {
		if err := Existing(path); err != nil {
			return nil, nil, err
		}
	}
	// The lock's ticket file lives beside the database, so the directory
	// must exist before the lock can be taken.
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return nil, nil, s.classify(err, "create the database directory")
		}
		s.madeDir = true
	}
	s.fresh = freshConnections(dir)
	lopts := lock.Options{
		StaleTimeout: cfg.StaleLockTimeout,
		Timeout:      cfg.LockTimeout,
		Hostname:     cfg.Hostname,
	}
	// The negative controls run without a fence: fence-disabled, and
	// lock-disabled (no lock at all, so nothing a fence could confirm).
	if !failpoint.Enabled(failpoint.FenceDisabled) && !failpoint.Enabled(failpoint.LockDisabled) {
		s.fence = sqlite.NewFence(s.renewTenure)
		lopts.Fence = s.fence
	}
	s.lk = lock.New(lockPath, lopts)
	meta, err := s.initOrValidate(ctx)
	if err != nil {
		s.dropConn()
		s.lk.Close()
		s.freeFence()
		return nil, nil, err
	}
	var notices []string
	if s.dirNotice != "" {
		notices = append(notices, s.dirNotice)
	}
	if s.runsNotice != "" {
		notices = append(notices, s.runsNotice)
	}
	return s, &storage.Opened{Meta: meta, Notices: notices}, nil
}

// Existing is the error of opening path as an existing database: nil for
// a regular file (or a link to one), else why not (not found, a directory).
func Existing(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return apierr.Wrap(apierr.KindNotFound, err, "no database at %s (an existing database was asked for: none was created)", path)
	case err != nil:
		k, _ := apierr.OSKind(err)
		return apierr.Wrap(k, err, "cannot open database %s: %v", path, err)
	case fi.IsDir():
		perr := &fs.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
		return apierr.Wrap(apierr.KindOS, perr, "cannot open database %s: it is a directory", path)
	case !fi.Mode().IsRegular():
		what := "not a regular file"
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			what = "it is " + shareddir.Describe(&unix.Stat_t{Mode: st.Mode, Uid: st.Uid}) + ", not a regular file"
		}
		return apierr.New(apierr.KindValue, "cannot open database %s: %s", path, what)
	}
	return nil
}

// Location is the database file's absolute path.
func (s *Backend) Location() string { return s.path }

// LockPath is the hard-link lock's path (COMPAT: <db>.with_suffix(".db.lock")).
func (s *Backend) LockPath() string { return s.lockPath }

// LockStats are the counters of this store's hard-link lock: Links per
// Acquired is how many link() attempts an acquisition cost, i.e. how hard
// waiting polled the shared filesystem's metadata server; Held per
// Acquired is the mean time an operation kept everyone else waiting.
func (s *Backend) LockStats() lock.Counters { return s.lk.Counters() }

// CacheCounters are the counters of this store's result cache: how many
// lookups read their key under the lock, and how many entries were evicted
// (make bench's cliff section reports them beside LockStats).
func (s *Backend) CacheCounters() CacheCounters { return s.cache.Counters() }

// renewTenure is the fence's renewal (a write found the tenure over, after a
// stall): it confirms the lock again, and keeps why it could not.
func (s *Backend) renewTenure() bool {
	err := s.lk.Confirm()
	if err != nil {
		s.fenceErr.Store(&err)
	}
	return err == nil
}

// freeFence releases the fence once no connection uses it.
func (s *Backend) freeFence() {
	if s.fence != nil {
		s.fence.Free()
		s.fence = nil
	}
}

// metaKeys are the db_meta rows Open reports (the API layer's CPU check
// and noise policy).
var metaKeys = []string{"cpu_model", "slurm_cpus", storage.NoisePolicyKey}

// initOrValidate creates a missing database or checks the schema of an
// existing one, under the lock, and reads its metadata.
func (s *Backend) initOrValidate(ctx context.Context) (meta map[string]string, err error) {
	release, err := s.acquire(ctx)
	if err != nil {
		return nil, s.classify(err, "open")
	}
	defer func() { err = s.release(release, "open", err) }()

	created, err := s.createFile()
	if err != nil {
		return nil, s.classify(err, "create the database")
	}
	c, err := s.connect()
	if err != nil {
		return nil, s.classify(err, "open")
	}
	db := c.db
	defer s.endOp(&err)

	defer func() { err = s.fenced(err, "open") }()
	ok, err := db.HasTables()
	if err != nil {
		return nil, s.classify(err, "open")
	}
	if !ok {
		if !created && !emptyFile(s.path) {
			return nil, apierr.New(apierr.KindDatabase, "%s is an SQLite database but not a TiraStore one (tables db_meta, programs, records missing)", s.path)
		}
		if !created && s.cfg.MustExist {
			return nil, apierr.New(apierr.KindDatabase, "%s is an empty file, not a database: an existing database was "+
				"asked for, so none was made in it", s.path)
		}
		m := s.cfg.NewMeta
		if err := db.Init(m["cpu_model"], m["slurm_cpus"], m["created_at"]); err != nil {
			return nil, s.classify(err, "initialise the database")
		}
	} else if err = s.checkSchema(db); err != nil {
		return nil, err
	} else {
		// A database of the original's schema gets the index the ordered
		// scans use (export, get_program_records); one that
		// cannot be given it (a read-only file, say) works without, and a
		// refusal by the fence is reported by fenced.
		_, _ = db.EnsureIndexes()
	}
	if foreign, err := db.ForeignRuns(); err != nil {
		return nil, s.classify(err, "open")
	} else if foreign {
		s.runsNotice = fmt.Sprintf("%s: its tables %s, %s and %s are not of this version's layout (an earlier build, "+
			"or written by another tool): records are read and written without their runs and run contexts", s.path,
			sqlite.RunsTable, sqlite.RunBatchesTable, sqlite.ContextsTable)
	}
	meta = map[string]string{}
	for _, k := range metaKeys {
		v, ok, err := db.Meta(k)
		if err != nil {
			return nil, s.classify(err, "read db_meta")
		}
		if ok {
			meta[k] = v
		}
	}
	return meta, nil
}

// createFile creates the database file when it does not exist yet, with
// the mode of cfg.Sharing (the original's 0666 unless a kernel-config
// cache asks for 0660 or 0600), and with the original's sharing gives a
// directory Open created the mode 1777 (dirmode.go). The file is created in its
// directory with O_CREAT|O_EXCL|O_NOFOLLOW and its mode set through the new
// descriptor (core/shareddir): whatever another user planted at the name is
// left alone, and what it is gets judged when the connection opens it. The mode
// is set with fchmod because the process umask must not be touched: it is
// shared with every thread of the host program.
func (s *Backend) createFile() (bool, error) {
	f, err := shareddir.Create(s.path, os.O_RDWR, s.cfg.Sharing.FileMode())
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	f.Close()
	if s.cfg.Sharing == storage.ShareAll {
		if notice := s.shareDir(); s.cfg.SharingAsked {
			s.dirNotice = notice
		}
	}
	return true, nil
}

func emptyFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Size() == 0
}

func (s *Backend) checkSchema(db *sqlite.DB) error {
	v, ok, err := db.Meta("schema_version")
	if err != nil {
		return s.classify(err, "read db_meta")
	}
	want := fmt.Sprint(sqlite.SchemaVersion)
	switch {
	case !ok:
		return apierr.New(apierr.KindDatabase, "%s has no schema_version in db_meta; it was not written by TiraStore", s.path)
	case v == want:
		return nil
	case len(v) > len(want) || (len(v) == len(want) && v > want):
		return apierr.New(apierr.KindDatabase, "%s has schema_version %s, newer than this library's %s: upgrade tirastore", s.path, v, want)
	default:
		return apierr.New(apierr.KindDatabase, "%s has schema_version %s; this library reads version %s only (the original's first format needs a migration)", s.path, v, want)
	}
}

// Close marks the store closed; later calls fail with apierr.ErrClosed.
// Calls in flight finish first. It closes the kept connection and removes
// the lock's ticket file. Closing twice is harmless.
func (s *Backend) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked()
}

// CloseIfIdle is Close for exit handlers, which must never wait: it closes
// the store unless an operation is in flight (say, in a thread that the
// exiting program abandons) and reports whether it did.
func (s *Backend) CloseIfIdle() (bool, error) {
	if !s.mu.TryLock() {
		return false, nil
	}
	defer s.mu.Unlock()
	return true, s.closeLocked()
}

func (s *Backend) closeLocked() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.dropConn()
	err := s.lk.Close()
	s.freeFence()
	return err
}

// withDB runs fn on the kept connection (see conn.go) while holding the
// lock.
func (s *Backend) withDB(ctx context.Context, op string, fn func(db *sqlite.DB) error) (err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return apierr.ErrClosed
	}
	release, err := s.acquire(ctx)
	if err != nil {
		return s.classify(err, op)
	}
	defer func() { err = s.release(release, op, err) }()
	c, err := s.connect()
	if err != nil {
		return s.classify(err, op)
	}
	failpoint.Inject(failpoint.DBOpened)
	defer s.endOp(&err)
	return s.fenced(s.classify(fn(c.db), op), op)
}

// fenced turns the outcome of an operation whose writes the fence refused
// into the lost-lock error (see core/sqlite: Fencing): its transaction did
// not commit. endOp then discards the connection without a rollback of its
// own (the fence stays lost until the lock is released, so none can be
// written), and the next holder rolls the hot journal back.
func (s *Backend) fenced(err error, op string) error {
	if s.fence == nil || !s.fence.Lost() {
		return err
	}
	var cause error = lock.ErrLockLost
	if p := s.fenceErr.Swap(nil); p != nil {
		cause = *p
	}
	if err == nil {
		// Found lost by the heartbeat during a call that wrote nothing.
		return apierr.Wrap(apierr.KindLockLost, cause, "%s: %s: %v; another process may have used the database "+
			"at the same time as this call", s.path, op, cause)
	}
	return apierr.Wrap(apierr.KindLockLost, cause, "%s: %s failed: %v; this call's writes were refused and its "+
		"transaction was not committed (the next holder of the lock rolls it back)", s.path, op, cause)
}

// release gives the lock back after an operation that ended with err, and
// reports a lock found lost meanwhile (lock.LostError): it was broken
// while this process held it, so the operation may not have been alone on
// the database; the caches and the connection are dropped.
func (s *Backend) release(release func() error, op string, err error) error {
	rerr := release()
	if !errors.Is(rerr, lock.ErrLockLost) {
		return err
	}
	s.dropConn()
	s.cache.forgetAll()
	switch {
	case apierr.KindOf(err) == apierr.KindLockLost:
		return err
	case err != nil:
		return apierr.Wrap(apierr.KindLockLost, rerr, "%s: %s failed: %v; and %v", s.path, op, err, rerr)
	}
	return apierr.Wrap(apierr.KindLockLost, rerr, "%s: %s: %v; another process may have used the database "+
		"at the same time as this call (its writes, if any, were committed)", s.path, op, rerr)
}

// endOp ends an operation under the lock: the cache learns the generation
// the operation left behind (cache.End), and a connection that failed for
// any reason other than the caller's input is closed, so that the next
// operation starts from a new one. With fresh connections it is closed in
// any case.
func (s *Backend) endOp(errp *error) {
	if *errp == nil {
		s.cache.End()
	}
	if k := apierr.KindOf(*errp); s.fresh || (*errp != nil && k != apierr.KindValue && k != apierr.KindType) {
		s.dropConn()
	}
	failpoint.Inject(failpoint.BeforeRelease)
}

// acquire takes the hard-link lock and returns its release. Only a
// failpoint build can switch the lock off, for the negative controls of the
// concurrency tests.
func (s *Backend) acquire(ctx context.Context) (release func() error, err error) {
	if failpoint.Enabled(failpoint.LockDisabled) {
		return func() error { return nil }, nil
	}
	if s.cfg.Interruptible != nil {
		var stop func()
		ctx, stop = s.cfg.Interruptible(ctx)
		defer stop()
	}
	if err := s.lk.Acquire(ctx); err != nil {
		return nil, err
	}
	failpoint.Inject(failpoint.LockAcquired)
	return s.lk.Release, nil
}

// refusedJournal is the error of an operation whose journal the VFS
// refused (core/sqlite: "The database's directory is shared"): a
// sqlite3.DatabaseError naming the journal, its owner and the rule it
// breaks. If the name has changed since (removed, or replaced by a journal
// the rule trusts), the operation failed all the same and says so.
func (s *Backend) refusedJournal(err error, op string) error {
	j, ierr := sqlite.InspectJournal(s.path)
	if ierr == nil && j != nil && !j.Trusted() {
		jerr := &sqlite.JournalError{Journal: j, DBPath: s.path}
		return apierr.Wrap(apierr.KindDatabase, jerr, "cannot %s %s: %v", op, s.path, jerr)
	}
	return apierr.Wrap(apierr.KindDatabase, err, "cannot %s %s: its journal %s was refused as untrusted "+
		"and has changed since (%v); try again", op, s.path, sqlite.JournalPath(s.path), err)
}

// classify turns any error from the layers below into an *apierr.Error
// whose message names the database file and the failed operation.
func (s *Backend) classify(err error, op string) error {
	if e, done := apierr.Classified(err); done {
		return e
	}
	var te *lock.TimeoutError
	switch {
	case errors.As(err, &te):
		// What removes the lock, when one look proves it abandoned (a
		// break refused: another user's lock) or it is not a record
		// (waiters never break one): the operator's advice.
		c := lock.CommandsFor(s.path, s.lk.StaleTimeout())
		st, ierr := s.lk.Inspect()
		if ierr == nil {
			if a := lock.Advice(st, c, c.Break); a != "" {
				return apierr.Wrap(apierr.KindTimeout, err, "%s: %v; %s", s.path, err, a)
			}
		} else if errors.Is(ierr, fs.ErrPermission) {
			if a := lock.Unreadable(s.lockPath, c); a != "" {
				return apierr.Wrap(apierr.KindTimeout, err, "%s: %v; %s", s.path, err, a)
			}
		}
		return apierr.Wrap(apierr.KindTimeout, err, "%s: %v", s.path, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return apierr.Wrap(apierr.KindInterrupted, err, "%s: %s interrupted while waiting for the lock", s.path, op)
	case sqlite.IsNotDatabase(err):
		return apierr.Wrap(apierr.KindDatabase, err, "%s: cannot %s: %v", s.path, op, err)
	case shareddir.IsRefused(err):
		return apierr.Wrap(apierr.KindOS, err, "cannot %s %s: %v", op, s.path, err)
	case sqlite.IsRefused(err):
		return s.refusedJournal(err, op)
	}
	if k, ok := apierr.OSKind(err); ok {
		return apierr.Wrap(k, err, "cannot %s %s: %v", op, s.path, err)
	}
	if sqlite.IsSQLiteError(err) {
		return apierr.Wrap(apierr.KindOperational, err, "%s: cannot %s: %v", s.path, op, err)
	}
	return apierr.Wrap(apierr.KindInternal, err, "%s: %s: %v", s.path, op, err)
}
