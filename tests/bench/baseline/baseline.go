// Package baseline is the ORIGINAL TiraStore's per-operation protocol,
// written in Go so that the benchmark (tests/bench) can put a ratio beside
// every figure of the engine, measured in the same run on the same disk.
// It is a yardstick, not a product: it does only what the benchmark calls.
//
// What it reproduces (COMPAT.md):
//
//   - The lock (lock.go): per attempt a fresh ticket file
//     .lock_<host>_<pid>_<random> in the database's directory holding
//     {"hostname": ..., "pid": ..., "timestamp": ...} (json.dumps layout),
//     link() to <db>.with_suffix(".db.lock") (lock.PathFor), on EEXIST the
//     original's stale rule and exponential backoff with jitter from 50 ms
//     to 5 s; release = unlink the lock, then the ticket.
//   - Per operation, reads included: acquire -> open a FRESH SQLite
//     connection -> work -> close -> release. The connection is what
//     Python's sqlite3.connect gives: SQLite's default "unix" VFS with its
//     POSIX advisory locks, journal_mode=DELETE, synchronous=FULL,
//     foreign_keys=ON, busy_timeout=0, deferred transactions.
//   - Record uses TWO connections, as the original did: its record() first
//     made sure the program row exists (SELECT, INSERT if absent, commit,
//     close), then opened a second connection to write the record (SELECT
//     the key, INSERT or UPDATE, commit, close). We read "two connections
//     per record" as both under ONE lock hold: that is the conservative
//     reading (a second acquire/release would make the baseline slower and
//     every speedup larger). RecordMany does the same with one transaction
//     for all records on the second connection.
//   - Keys, hashes, normalization, validation and result_json are the
//     engine's own (core/keys, core/schedule, core.Times + core/pyjson), so
//     both write one schema: a database created by core.Open is used here
//     and vice versa (baseline_test.go checks both ways).
//
// What it leaves out: CPU-mismatch warnings beyond disabling writes, the
// admin API, NaN checks (the benchmark never sends NaN).
package baseline

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" database/sql driver

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/cpu"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/pypath"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/sqlite" // the schema text and the original's lookup read (GetRecordSQL), shared with the engine
	"github.com/tirastore/tirastore/core/sqlitefile"
)

// nowFunc is the clock for record dates.
var nowFunc = time.Now

// Options are the original constructor's parameters the benchmark uses.
type Options struct {
	SourceProject string
	CPUModel      string // "" detects (cpu.Model), as the engine does
	SlurmCPUs     string // "" detects (cpu.SlurmCPUs)
	Lock          LockOptions
}

// Store is one original-protocol handle on a database file.
type Store struct {
	path    string
	lk      *Lock
	opts    Options
	host    string
	user    string
	cpu     string
	slurm   string
	writeOK bool
}

// Open connects to path as the original did, creating the directory (mode
// 1777, best effort), the file (0666) and the schema when missing, and runs
// the CPU check (a mismatch disables writes).
func Open(path string, opts Options) (*Store, error) {
	abs, err := pypath.Resolve(path)
	if err != nil {
		return nil, err
	}
	lockPath, err := sqlitefile.LockPathFor(abs)
	if err != nil {
		return nil, err
	}
	s := &Store{
		path: abs, opts: opts, lk: NewLock(lockPath, opts.Lock),
		host: identity.Hostname(), user: identity.Username(),
		cpu: opts.CPUModel, slurm: opts.SlurmCPUs, writeOK: true,
	}
	if s.cpu == "" {
		s.cpu = cpu.Model()
	}
	if s.slurm == "" {
		s.slurm = cpu.SlurmCPUs()
	}
	dir := filepath.Dir(abs)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	_ = os.Chmod(dir, 0o777|fs.ModeSticky)
	err = s.withLock(func() error {
		f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if err == nil {
			f.Chmod(0o666)
			f.Close()
		} else if !errors.Is(err, fs.ErrExist) {
			return err
		}
		return s.withConn(s.initConn)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) initConn(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range sqlite.SchemaDDL() {
		if _, err := tx.Exec(q); err != nil {
			return err
		}
	}
	for _, kv := range [][2]string{
		{"schema_version", "2"}, {"cpu_model", s.cpu}, {"slurm_cpus", s.slurm},
		{"created_at", identity.NowISO(nowFunc())},
	} {
		if _, err := tx.Exec("INSERT OR IGNORE INTO db_meta (key, value) VALUES (?, ?)", kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	var dbCPU, dbSlurm string
	if err := db.QueryRow("SELECT value FROM db_meta WHERE key = 'cpu_model'").Scan(&dbCPU); err != nil {
		return err
	}
	if err := db.QueryRow("SELECT value FROM db_meta WHERE key = 'slurm_cpus'").Scan(&dbSlurm); err != nil {
		return err
	}
	if (dbCPU != "" && dbCPU != s.cpu) || (dbSlurm != "" && dbSlurm != "N/A" && dbSlurm != s.slurm) {
		s.writeOK = false
	}
	return nil
}

// Path is the resolved database path.
func (s *Store) Path() string { return s.path }

// LockStats are the lock's counters (link attempts per acquisition).
func (s *Store) LockStats() LockStats { return s.lk.Stats() }

// WritesAllowed is false after a CPU mismatch.
func (s *Store) WritesAllowed() bool { return s.writeOK }

// withLock runs fn while holding the hard-link lock.
func (s *Store) withLock(fn func() error) error {
	h, err := s.lk.Acquire()
	if err != nil {
		return err
	}
	err = fn()
	return errors.Join(err, h.Release())
}

// dsn is what Python's sqlite3.connect plus the original's PRAGMAs give:
// the default unix VFS (POSIX locks), DELETE journal, FULL sync, foreign
// keys on, no busy wait, deferred transactions.
func (s *Store) dsn() string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return "file:" + r.Replace(s.path) +
		"?_journal_mode=DELETE&_synchronous=FULL&_foreign_keys=1&_busy_timeout=0&_txlock=deferred"
}

// withConn opens a fresh connection, runs fn, closes it.
func (s *Store) withConn(fn func(db *sql.DB) error) error {
	db, err := sql.Open("sqlite3", s.dsn())
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return err
	}
	err = fn(db)
	return errors.Join(err, db.Close())
}

// op is one original operation: lock, one fresh connection, release.
func (s *Store) op(fn func(db *sql.DB) error) error {
	return s.withLock(func() error { return s.withConn(fn) })
}

// Result is what Lookup returns: the parsed result_json and the row.
type Result struct {
	IsLegal        any // the stored value (a bool for everything written here)
	ExecutionTimes any // []any of pyjson.Number, or nil
	Schedule       string
	Hostname       string
	Username       string
	CreationDate   string
	UpdateDate     string
	SourceProject  string
	ResultJSON     string
}

func checkSchedule(sched string) (string, error) {
	norm := schedule.Normalize(sched)
	if ok, reason := schedule.Validate(norm); !ok {
		return "", fmt.Errorf("Invalid schedule string: %s", reason)
	}
	return norm, nil
}

// getRecordSQL is the original's read of one record, joined with its
// program.
var getRecordSQL = "SELECT r." + strings.Join(sqlite.RecordColumns, ", r.") + `, p.program_name, p.source_code
  FROM records r JOIN programs p ON r.program_hash = p.program_hash WHERE r.key = ?`

// Lookup returns the record for (program, schedule), or nil.
func (s *Store) Lookup(name, source, sched string) (*Result, error) {
	key := keys.RecordKey(keys.ProgramHash(source), sched)
	var r *Result
	err := s.op(func(db *sql.DB) error {
		var k, ph, pname, psrc string
		var x Result
		err := db.QueryRow(getRecordSQL, key).Scan(&k, &ph, &x.Schedule, &x.ResultJSON, &x.Hostname,
			&x.Username, &x.CreationDate, &x.UpdateDate, &x.SourceProject, &pname, &psrc)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		r = &x
		return nil
	})
	if err != nil || r == nil {
		return nil, err
	}
	v, err := pyjson.Parse([]byte(r.ResultJSON))
	if err != nil {
		return nil, err
	}
	if obj, ok := v.(*pyjson.Object); ok {
		r.IsLegal, _ = obj.Get("is_legal")
		r.ExecutionTimes, _ = obj.Get("execution_times")
	}
	return r, nil
}

// Contains reports whether a record exists.
func (s *Store) Contains(name, source, sched string) (bool, error) {
	key := keys.RecordKey(keys.ProgramHash(source), sched)
	found := false
	err := s.op(func(db *sql.DB) error {
		var one int
		err := db.QueryRow("SELECT 1 FROM records WHERE key = ?", key).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	return found, err
}

// Count is the number of records.
func (s *Store) Count() (int64, error) {
	var n int64
	err := s.op(func(db *sql.DB) error { return db.QueryRow("SELECT COUNT(*) FROM records").Scan(&n) })
	return n, err
}

// Entry is one schedule of RecordMany.
type Entry struct {
	Schedule       string
	IsLegal        bool
	ExecutionTimes []float64 // nil: None
}

// row is a validated entry, ready to write.
type row struct {
	key, sched, resultJSON string
}

// ResultJSON renders result_json as the engine (and the original) write it:
// {"is_legal":<bool>,"execution_times":<list or null>}, floats in Python's
// repr (core.Times), compact separators.
func ResultJSON(isLegal bool, times []float64) (string, error) {
	if isLegal && len(times) == 0 {
		return "", errors.New("execution_times must be provided (non-empty list) when is_legal is True.")
	}
	o := pyjson.NewObject()
	o.Set("is_legal", isLegal)
	if times == nil {
		o.Set("execution_times", nil)
	} else {
		o.Set("execution_times", core.Times(times...))
	}
	b, err := pyjson.Marshal(o, pyjson.Compact)
	return string(b), err
}

func prepare(programHash string, e Entry) (row, error) {
	rj, err := ResultJSON(e.IsLegal, e.ExecutionTimes)
	if err != nil {
		return row{}, err
	}
	norm, err := checkSchedule(e.Schedule)
	if err != nil {
		return row{}, err
	}
	return row{key: keys.RecordKey(programHash, e.Schedule), sched: norm, resultJSON: rj}, nil
}

// Record stores one measurement; false when the key exists and overwrite
// is false.
func (s *Store) Record(name, source, sched string, isLegal bool, times []float64, overwrite bool) (bool, error) {
	n, err := s.record(name, source, []Entry{{Schedule: sched, IsLegal: isLegal, ExecutionTimes: times}}, overwrite)
	return n == 1, err
}

// RecordMany stores several schedules of one program (validated first, one
// transaction) and returns how many were written.
func (s *Store) RecordMany(name, source string, entries []Entry, overwrite bool) (int, error) {
	return s.record(name, source, entries, overwrite)
}

func (s *Store) record(name, source string, entries []Entry, overwrite bool) (int, error) {
	if !s.writeOK {
		return 0, errors.New("Write operations are disabled due to CPU metadata mismatch.")
	}
	ph := keys.ProgramHash(source)
	rows := make([]row, len(entries))
	for i, e := range entries {
		r, err := prepare(ph, e)
		if err != nil {
			return 0, fmt.Errorf("schedules[%d]: %w", i, err)
		}
		rows[i] = r
	}
	written := 0
	err := s.withLock(func() error {
		// Connection 1: the program row.
		if err := s.withConn(func(db *sql.DB) error { return ensureProgram(db, ph, name, source) }); err != nil {
			return err
		}
		// Connection 2: the records.
		return s.withConn(func(db *sql.DB) (err error) {
			written, err = s.putRecords(db, ph, rows, overwrite)
			return err
		})
	})
	return written, err
}

func ensureProgram(db *sql.DB, ph, name, source string) error {
	var one int
	err := db.QueryRow("SELECT 1 FROM programs WHERE program_hash = ?", ph).Scan(&one)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec("INSERT OR IGNORE INTO programs (program_hash, program_name, source_code) VALUES (?, ?, ?)", ph, name, source); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *Store) putRecords(db *sql.DB, ph string, rows []row, overwrite bool) (int, error) {
	keyExists := func(q interface {
		QueryRow(string, ...any) *sql.Row
	}, key string) (bool, error) {
		var one int
		err := q.QueryRow("SELECT 1 FROM records WHERE key = ?", key).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
	single := len(rows) == 1
	var singleExists bool
	if single {
		// The single-record path checks first, outside a transaction, as
		// Python's implicit transactions do (BEGIN only before a write).
		var err error
		if singleExists, err = keyExists(db, rows[0].key); err != nil || (singleExists && !overwrite) {
			return 0, err
		}
	}
	tx, err := db.Begin()
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	stamp := identity.NowISO(nowFunc())
	written := 0
	for _, r := range rows {
		exists, err := singleExists, error(nil)
		if !single {
			if exists, err = keyExists(tx, r.key); err != nil {
				return 0, err
			}
		}
		switch {
		case exists && !overwrite:
			continue
		case exists:
			_, err = tx.Exec(`UPDATE records SET program_hash = ?, schedule = ?, result_json = ?, hostname = ?,
       username = ?, update_date = ?, source_project = ? WHERE key = ?`,
				ph, r.sched, r.resultJSON, s.host, s.user, stamp, s.opts.SourceProject, r.key)
		default:
			_, err = tx.Exec(`INSERT INTO records (key, program_hash, schedule, result_json, hostname, username,
       creation_date, update_date, source_project) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				r.key, ph, r.sched, r.resultJSON, s.host, s.user, stamp, stamp, s.opts.SourceProject)
		}
		if err != nil {
			return 0, err
		}
		written++
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return written, nil
}
