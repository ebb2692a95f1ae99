package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	_ "github.com/mattn/go-sqlite3" // the engine's SQLite build (core/sqlite links the same one)

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/keys"
)

// # The durable-transaction floor
//
// implFloor is raw SQLite doing what a record must at least do: one durable
// write transaction per call, on the engine's database (its schema and
// index, created by the engine's preload) with the engine's connection
// settings (core/sqlite: Open): journal_mode=DELETE, synchronous=FULL,
// foreign_keys=ON, busy_timeout=0, locking_mode NORMAL, the page size the
// engine created the file with. It uses go-sqlite3, the SQLite build the
// engine links (the same copy, in this binary), through database/sql as the
// engine does, on one connection kept open, with SQLite's stock "unix-none"
// VFS: the unix VFS without POSIX locks, the one the engine's own VFS
// (core/sqlite/vfs.go) is built on. The engine's VFS saves a few path calls
// per transaction over it, which the engine's ratio is free to show.
//
// Per transaction it runs BEGIN IMMEDIATE, one prepared INSERT per record
// (the program row exists: the preload wrote it), COMMIT. Nothing else: no
// lock, no program upsert, no key computation (the keys of
// its plan are computed before it runs), no JSON (every row carries the
// result_json, host, user and project of a preloaded row, so the rows are
// the engine's rows byte for byte but for key, schedule and dates). It is
// the floor, not a usable store: on a shared database it would need the
// lock the engine takes.
const implFloor = "floor"

// floorClient is the floor's client: Record and RecordMany only.
type floorClient struct {
	db   *sql.DB
	conn *sql.Conn
	ins  *sql.Stmt
	keys map[string]string // schedule -> record key, for the plan's records
	row  [4]string         // program_hash, result_json, hostname, username of a preloaded row
	proj string            // its source_project
}

var errFloorOp = errors.New("the floor client only writes (record, record_many)")

// openFloor opens the floor on the engine-created database at path, for
// the record steps of steps.
func openFloor(path string, steps []step) (*floorClient, error) {
	dsn := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path) +
		"?mode=rw&vfs=unix-none&_journal_mode=DELETE&_synchronous=FULL&_foreign_keys=1&_busy_timeout=0"
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	f := &floorClient{db: db, keys: map[string]string{}}
	fail := func(err error) (*floorClient, error) {
		f.Close()
		return nil, fmt.Errorf("floor: %w", err)
	}
	if f.conn, err = db.Conn(context.Background()); err != nil {
		return fail(err)
	}
	err = f.conn.QueryRowContext(bg, "SELECT program_hash, result_json, hostname, username, source_project FROM records LIMIT 1").
		Scan(&f.row[0], &f.row[1], &f.row[2], &f.row[3], &f.proj)
	if err != nil {
		return fail(fmt.Errorf("read a preloaded row: %w", err))
	}
	q := "INSERT INTO records (key, program_hash, schedule, result_json, hostname, username, creation_date, update_date, source_project) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
	if f.ins, err = f.conn.PrepareContext(bg, q); err != nil {
		return fail(err)
	}
	for _, s := range steps {
		switch s.Op {
		case "record":
			for k := 0; k < s.N; k++ {
				f.key(schedule(s.Tag, s.Start+k))
			}
		case "record_many":
			for i := s.Start; i < s.Start+s.N*s.Batch; i++ {
				f.key(schedule(s.Tag, i))
			}
		}
	}
	return f, nil
}

// key computes the record key of sched, before the floor runs.
func (f *floorClient) key(sched string) { f.keys[sched] = keys.RecordKey(f.row[0], sched) }

// tx runs one durable transaction inserting scheds.
func (f *floorClient) tx(scheds []string) (int, error) {
	if _, err := f.conn.ExecContext(bg, "BEGIN IMMEDIATE"); err != nil {
		return 0, err
	}
	stamp := identity.NowISO(time.Now())
	for _, s := range scheds {
		k, ok := f.keys[s]
		if !ok {
			f.conn.ExecContext(bg, "ROLLBACK")
			return 0, fmt.Errorf("floor: schedule %s is not in the plan", s)
		}
		if _, err := f.ins.Exec(k, f.row[0], s, f.row[1], f.row[2], f.row[3], stamp, stamp, f.proj); err != nil {
			f.conn.ExecContext(bg, "ROLLBACK")
			return 0, err
		}
	}
	if _, err := f.conn.ExecContext(bg, "COMMIT"); err != nil {
		f.conn.ExecContext(bg, "ROLLBACK")
		return 0, err
	}
	return len(scheds), nil
}

func (f *floorClient) Record(sched string, overwrite bool) (bool, error) {
	if overwrite {
		return false, errFloorOp
	}
	n, err := f.tx([]string{sched})
	return n == 1, err
}

func (f *floorClient) RecordMany(scheds []string, overwrite bool) (int, error) {
	if overwrite {
		return 0, errFloorOp
	}
	return f.tx(scheds)
}

func (f *floorClient) Lookup(string) (bool, error)   { return false, errFloorOp }
func (f *floorClient) Contains(string) (bool, error) { return false, errFloorOp }
func (f *floorClient) LockStats() lockStats          { return lockStats{} }

func (f *floorClient) Close() error {
	if f.ins != nil {
		f.ins.Close()
	}
	if f.conn != nil {
		f.conn.Close()
	}
	return f.db.Close()
}

// floorSteps are the steps of the latency plan the floor runs: the new
// records (its warm-up, record new, record_many(100) and (1000)).
func floorSteps(steps []step) []step {
	var out []step
	for _, s := range steps {
		if (s.Op == "record" || s.Op == "record_many") && s.Expect && !s.Overwrite {
			out = append(out, s)
		}
	}
	return out
}

// latencyFloor runs the floor's steps of the latency plan on a fresh
// database that the engine created and preloaded as for latencyGo.
func latencyFloor(cfg *config, round int) (map[string]*stepResult, error) {
	if err := cfg.fresh(); err != nil {
		return nil, err
	}
	all, pool := latencyPlan(cfg.Go)
	steps := floorSteps(all)
	return runLatencyPlan(cfg, implFloor, round, implEngine, pool, steps, func() (client, error) { return openFloor(cfg.dbPath(), steps) })
}

// floorOps are the rows judged against the floor, with the limit on
// client / floor of the medians (record_many(100) is shown, not judged).
var floorOps = []struct {
	op    string
	limit float64
}{{opRecordNew, 1.15}, {opMany100, math.NaN()}, {opMany1000, 1.3}}

// floorImpls are the clients judged against the floor.
var floorImpls = []string{implEngine, implPython}

// overFloor is impl's median over the floor's, for op (NaN when missing).
func (res *results) overFloor(impl, op string) float64 {
	return ratio(res.median(impl, op), res.median(implFloor, op))
}

// floorRatios are the ratios of floorOps for floorImpls, nil without the
// floor's rows.
func floorRatios(res *results) map[string]map[string]fnum {
	if res.lat(implFloor, opRecordNew) == nil {
		return nil
	}
	out := map[string]map[string]fnum{}
	for _, impl := range floorImpls {
		out[impl] = map[string]fnum{}
		for _, f := range floorOps {
			out[impl][f.op] = fnum(res.overFloor(impl, f.op))
		}
	}
	return out
}
