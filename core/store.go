// Package core is the TiraStore engine's API layer: the API of the
// original Python library (lookup, record, record_many, ...) with its
// argument checks, normalization, keys, result shapes, CPU policy and
// errors, over a storage backend (core/storage) that stores what this
// layer has validated. The backend is the shared SQLite file
// (core/sqlitefile) or a PostgreSQL server (core/postgres); docs/design.md
// draws the whole pipeline.
package core

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core/cpu"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/runctx"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/sqlitefile"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// Store is an open handle on one database. It is safe for concurrent use by
// many goroutines; the backend serializes them with every other process
// using the same database.
type Store struct {
	be   storage.Backend
	path string
	opts Options

	hostname   string
	username   string
	localCPU   string
	localSlurm string

	writesAllowed bool
	warning       string
	notices       []string

	// lockWait is the resolved lock_timeout (storage.Config.LockTimeout),
	// which also bounds a wait for another worker's claim; claims are the
	// claims this store holds and has seen (claim.go).
	lockWait time.Duration
	claims   claimState

	noiseMu sync.Mutex
	noise   NoisePolicy // noise.go

	contexts contextCache     // runs.go
	capture  *runctx.Capturer // the context of this store's writes
	match    []fieldRule      // match.go
}

// Open connects to the database at path, creating it (and its directory)
// when it does not exist, and runs the original's CPU check: on a mismatch
// writes are disabled (unless opts.AllowCPUMismatch) and Warning says why.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if err := input.Text("db_path", path); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, newError(KindValue, "db_path must not be empty")
	}
	stale, wait, err := opts.LockTimeouts()
	if err != nil {
		return nil, err
	}
	if err := runctx.CheckTools(opts.Tools); err != nil {
		return nil, newError(KindValue, "%v", err)
	}
	opts.Tools = maps.Clone(opts.Tools)
	match, err := compileMatch(opts.Match)
	if err != nil {
		return nil, err
	}
	opts.Match = maps.Clone(opts.Match)
	s := &Store{
		opts:          opts,
		hostname:      identity.Hostname(),
		username:      identity.Username(),
		localCPU:      opts.CPUModel,
		localSlurm:    opts.SlurmCPUs,
		writesAllowed: true,
		lockWait:      wait,
	}
	s.capture, s.match = runctx.NewCapturer(s.hostname, opts.Tools), match
	if s.localCPU == "" {
		s.localCPU = cpu.Model()
	}
	if s.localSlurm == "" {
		s.localSlurm = cpu.SlurmCPUs()
	}
	cfg := storage.Config{
		StaleLockTimeout: stale,
		LockTimeout:      wait,
		Hostname:         s.hostname,
		Interruptible:    opts.Interruptible,
		MustExist:        opts.MustExist,
		Sharing:          opts.Sharing,
		SharingAsked:     opts.SharingAsked,
		NewMeta: map[string]string{
			"cpu_model":  s.localCPU,
			"slurm_cpus": s.localSlurm,
			"created_at": identity.NowISO(time.Now()),
		},
	}
	be, opened, err := openBackend(ctx, path, cfg)
	if err != nil {
		return nil, err
	}
	s.be, s.path, s.notices = be, be.Location(), opened.Notices
	s.checkCPU(opened.Meta)
	s.noise = DefaultNoisePolicy
	if text, ok := opened.Meta[storage.NoisePolicyKey]; ok {
		var err error
		if s.noise, err = parseNoisePolicy(text); err != nil {
			s.notices = append(s.notices, fmt.Sprintf("%s: %v", s.path, err))
		}
	}
	return s, nil
}

// openBackend chooses the backend by the form of the location
// (storage.IsServerURL): a postgresql:// (or postgres://) URL names a
// PostgreSQL database, another URL is refused, and anything else is a
// file path.
func openBackend(ctx context.Context, location string, cfg storage.Config) (storage.Backend, *storage.Opened, error) {
	if storage.IsServerURL(location) {
		if postgres.IsURL(location) {
			return postgres.Open(ctx, location, cfg)
		}
		scheme, _, _ := strings.Cut(location, "://")
		return nil, nil, newError(KindValue, "db_path %s is a URL of a kind TiraStore does not know (%s://): "+
			"give a file path, or a postgresql:// URL", schedule.Repr(postgres.Redact(location)), scheme)
	}
	abs, err := input.Path("database path", location)
	if err != nil {
		return nil, nil, err
	}
	return sqlitefile.Open(ctx, abs, cfg)
}

// checkCPU compares the database's CPU metadata with this host's, as the
// original did at connect time: a mismatch disables writes unless
// AllowCPUMismatch, and Warning carries the original's banner.
func (s *Store) checkCPU(meta map[string]string) {
	dbCPU, dbSlurm := meta["cpu_model"], meta["slurm_cpus"]
	var parts []string
	if dbCPU != "" && dbCPU != s.localCPU {
		parts = append(parts, fmt.Sprintf("  CPU model: DB=%s  local=%s", schedule.Repr(dbCPU), schedule.Repr(s.localCPU)))
	}
	if dbSlurm != "" && dbSlurm != "N/A" && dbSlurm != s.localSlurm {
		parts = append(parts, fmt.Sprintf("  SLURM_CPUS_PER_TASK: DB=%s  local=%s", schedule.Repr(dbSlurm), schedule.Repr(s.localSlurm)))
	}
	if len(parts) > 0 && !s.opts.AllowCPUMismatch {
		s.writesAllowed = false
		s.warning = "[TiraStore] CPU metadata mismatch — write operations disabled.\n"
		for _, p := range parts {
			s.warning += p + "\n"
		}
		s.warning += "  Set allow_cpu_mismatch=True to override."
	}
}

// Close marks the store closed; later calls fail with ErrClosed. Calls in
// flight finish first. Closing twice is harmless.
// The claims it still holds are released first, so that their waiters
// need not wait out the leases.
func (s *Store) Close() error {
	s.releaseHeld(context.Background())
	return s.be.Close()
}

// CloseIfIdle is Close for exit handlers, which must never wait: it closes
// the store unless an operation is in flight (say, in a thread that the
// exiting program abandons) and reports whether it did.
// Claims it holds are released first, waiting for the lock at most
// tuning.ClaimReleaseAtExit (a process that exits is dead anyway: its
// claims are taken over at once on its host, after their lease elsewhere).
func (s *Store) CloseIfIdle() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tuning.ClaimReleaseAtExit)
	s.releaseHeld(ctx)
	cancel()
	return s.be.CloseIfIdle()
}

// Path is the resolved absolute path of the database file, or a server's
// URL without its password (the backend's location).
func (s *Store) Path() string { return s.path }

// IsServer reports whether the database is on a server (Path is a URL),
// not in a file.
func (s *Store) IsServer() bool {
	_, ok := s.be.(storage.OnServer)
	return ok
}

// Options are the options this store was opened with, CPUModel and
// SlurmCPUs as this host's (detected when they were ""): what a tool that
// opens another database as this one was opened needs (a merge opens its
// source so).
func (s *Store) Options() Options {
	o := s.opts
	o.CPUModel, o.SlurmCPUs = s.localCPU, s.localSlurm
	return o
}

// SourceProject is the project name stamped on records this store writes.
func (s *Store) SourceProject() string { return s.opts.SourceProject }

// WritesAllowed is false when the CPU check failed at Open.
func (s *Store) WritesAllowed() bool { return s.writesAllowed }

// Warning is the original's CPU-mismatch message, or "" when writes are
// allowed; callers print it the way their language prints warnings.
func (s *Store) Warning() string { return s.warning }

// Backend is the store's storage backend, for tools and tests that need
// what only it knows (through the optional interfaces of package storage).
func (s *Store) Backend() storage.Backend { return s.be }

// Notices are warnings found when the store opened, for the caller to show
// the way its language shows warnings (Python: a TiraStoreWarning): a
// database other users cannot use, or an ignored password file.
func (s *Store) Notices() []string { return append([]string(nil), s.notices...) }

// CheckWrites is the error of a write to a store whose CPU check failed at
// Open (nil when writes are allowed): every write refuses with it, import
// and merge (core/operator) too.
func (s *Store) CheckWrites() error {
	if !s.writesAllowed {
		return newError(KindPermission, "Write operations are disabled due to CPU metadata mismatch. Initialize with allow_cpu_mismatch=True to override.")
	}
	return nil
}

// LockPath is the hard-link lock's path (COMPAT: <db>.with_suffix(".db.lock")),
// or "" for a backend without one.
func (s *Store) LockPath() string {
	if l, ok := s.be.(storage.LinkLocked); ok {
		return l.LockPath()
	}
	return ""
}

// LockStats are the counters of the store's hard-link lock (zero for a
// backend without one): Links per Acquired is how many link() attempts an
// acquisition cost; Held per Acquired is the mean time an operation kept
// everyone else waiting.
func (s *Store) LockStats() storage.LockCounters {
	if l, ok := s.be.(storage.LinkLocked); ok {
		return l.LockStats()
	}
	return storage.LockCounters{}
}
