package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// reader is the storage.Reader of a View or Update: statements of one
// transaction. The Each* methods read all their rows before they call fn,
// which may read more in the same transaction (one connection runs one
// statement at a time).
type reader struct {
	s     *Backend
	ctx   context.Context
	q     pgx.Tx
	write bool // an Update's: GetClaims locks the keys it reads
}

// writer adds an Update's writes.
type writer struct {
	reader
	tx pgx.Tx
}

// row runs a one-row statement; ok is false when it found no row.
func (r *reader) row(dst []any, sql string, args ...any) (ok bool, err error) {
	ctx, cancel := r.s.stmtCtx(r.ctx)
	defer cancel()
	err = r.q.QueryRow(ctx, sql, args...).Scan(dst...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// rows runs a statement and calls scan for each row (the statement is
// still open: scan must not run another).
func (r *reader) rows(scan func(pgx.Rows) error, sql string, args ...any) error {
	ctx, cancel := r.s.stmtCtx(r.ctx)
	defer cancel()
	rows, err := r.q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// exec runs a statement and returns the rows it affected.
func (r *reader) exec(sql string, args ...any) (int64, error) {
	ctx, cancel := r.s.stmtCtx(r.ctx)
	defer cancel()
	tag, err := r.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (r *reader) count(sql string, args ...any) (n int64, err error) {
	_, err = r.row([]any{&n}, sql, args...)
	return n, err
}

func (r *reader) strings(sql string, args ...any) ([]string, error) {
	out := []string{}
	err := r.rows(func(rows pgx.Rows) error {
		var s string
		err := rows.Scan(&s)
		out = append(out, s)
		return err
	}, sql, args...)
	return out, err
}

// Meta is one db_meta row.
func (r *reader) Meta(key string) (string, bool, error) {
	var v string
	ok, err := r.row([]any{&v}, "SELECT value FROM db_meta WHERE key = $1", key)
	return v, ok, err
}

var getSQL = "SELECT " + recordColumnsOfR + `, p.program_name, p.source_code, ` + runsOfR + `
  FROM records r JOIN programs p ON r.program_hash = p.program_hash WHERE r.key = $1`

// Get is a record joined with its program, or nil.
func (r *reader) Get(key string) (*storage.Record, error) {
	var rec storage.Record
	ok, err := r.row(append(sqlite.RecordFields(&rec), &rec.ProgramName, &rec.SourceCode, &rec.Runs), getSQL, key)
	if !ok {
		return nil, err
	}
	return &rec, nil
}

func (r *reader) programs(sql string, args ...any) ([]storage.Program, error) {
	var out []storage.Program
	err := r.rows(func(rows pgx.Rows) error {
		var p storage.Program
		err := rows.Scan(&p.Hash, &p.Name, &p.Source)
		out = append(out, p)
		return err
	}, sql, args...)
	return out, err
}

// ProgramsByName lists the programs of a name by hash.
func (r *reader) ProgramsByName(name string) ([]storage.Program, error) {
	return r.programs("SELECT program_hash, program_name, source_code FROM programs WHERE program_name = $1 ORDER BY program_hash", name)
}

// ProgramsAfter lists up to limit programs after (name, hash).
func (r *reader) ProgramsAfter(name, hash string, limit int) ([]storage.Program, error) {
	return r.programs(`SELECT program_hash, program_name, source_code FROM programs
  WHERE (program_name, program_hash) > ($1, $2) ORDER BY program_name, program_hash LIMIT $3`, name, hash, limit)
}

// EachRecordOf calls fn for every record of a program, joined with it,
// by creation date then insertion order.
func (r *reader) EachRecordOf(programHash string, fn func(*storage.Record) error) error {
	var name, source string
	ok, err := r.row([]any{&name, &source}, "SELECT program_name, source_code FROM programs WHERE program_hash = $1", programHash)
	if !ok {
		return err
	}
	return eachRead(r, func(rows pgx.Rows) (*storage.Record, error) {
		rec, err := scanRecord(rows)
		rec.ProgramName, rec.SourceCode = name, source
		return rec, err
	}, fn, "SELECT "+recordColumnsOfR+", "+runsOfR+" FROM records r WHERE r.program_hash = $1 ORDER BY r.creation_date, r.rowid", programHash)
}

// RecordsAfter lists up to limit records after the rowid after, by rowid
// (the idx_records_rowid index), with their program's name.
func (r *reader) RecordsAfter(after int64, limit int) ([]storage.SeqRecord, error) {
	out := []storage.SeqRecord{}
	err := r.rows(func(rows pgx.Rows) error {
		var rec storage.SeqRecord
		err := rows.Scan(append(append([]any{&rec.Seq}, sqlite.RecordFields(&rec.Record)...), &rec.ProgramName)...)
		out = append(out, rec)
		return err
	}, "SELECT r.rowid, "+recordColumnsOfR+`, p.program_name
  FROM records r JOIN programs p ON r.program_hash = p.program_hash
  WHERE r.rowid > $1 ORDER BY r.rowid LIMIT $2`, after, limit)
	return out, err
}

// eachRead reads every row of a statement with scan, then calls fn for
// each: fn may run statements of the same transaction, which one
// connection cannot while the first one's rows are open.
func eachRead[T any](r *reader, scan func(pgx.Rows) (T, error), fn func(T) error, sql string, args ...any) error {
	var all []T
	err := r.rows(func(rows pgx.Rows) error {
		v, err := scan(rows)
		all = append(all, v)
		return err
	}, sql, args...)
	if err != nil {
		return err
	}
	for _, v := range all {
		if err := fn(v); err != nil {
			return err
		}
	}
	return nil
}

// CountRecords is the size of records.
func (r *reader) CountRecords() (int64, error) { return r.count("SELECT count(*) FROM records") }

// CountPrograms is the size of programs.
func (r *reader) CountPrograms() (int64, error) { return r.count("SELECT count(*) FROM programs") }

// legalOf is SQLite's json_extract(result_json, '$.is_legal') compared
// with 1 (true, 1) and 0 (false, 0), as the original's stats counted:
// 1, 0 or NULL, of the lenientJSONB of the column.
const legalOf = `(SELECT CASE jsonb_typeof(j.v)
        WHEN 'boolean' THEN CASE WHEN j.v = 'true'::jsonb THEN 1 ELSE 0 END
        WHEN 'number' THEN CASE WHEN (j.v #>> '{}')::numeric = 1 THEN 1 WHEN (j.v #>> '{}')::numeric = 0 THEN 0 END
        END
   FROM (SELECT %s -> 'is_legal' AS v) j)`

func legalExpr(col string) string {
	return fmt.Sprintf(legalOf, lenientJSONB(col))
}

// lenientJSONB is the jsonb of the text column col as Python's json reads
// it: its NaN and Infinity tokens made numbers first, which PostgreSQL's
// JSON refuses. A text that is not JSON fails the statement (notJSON).
func lenientJSONB(col string) string {
	return fmt.Sprintf(`regexp_replace(%s, '-?\mInfinity\M|\mNaN\M', '0', 'g')::jsonb`, col)
}

// notJSON reports whether err is PostgreSQL's refusal of a text that is
// not JSON (legalOf's cast of a result_json that a direct write left).
func notJSON(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22P02" // invalid_text_representation
}

// withSavepoint runs fn's statements in a savepoint of r's transaction,
// which stays usable when one of them fails (the failed statement's error
// is returned).
func (r *reader) withSavepoint(fn func() error) error {
	sp, err := r.q.Begin(r.ctx)
	if err != nil {
		return err
	}
	outer := r.q
	r.q = sp
	err = fn()
	r.q = outer
	if err != nil {
		sp.Rollback(r.ctx)
		return err
	}
	return sp.Commit(r.ctx)
}

// legalOfParsed is legalOf of a result_json that Go parses: 1, 0, or -1
// (neither); ok is false for a text that is not JSON or not a JSON object
// (Summary's Unreadable). Only the scans that step in when a result_json
// is not JSON use it (see Summary).
func legalOfParsed(resultJSON string) (legal int, ok bool) {
	v, err := pyjson.Parse([]byte(resultJSON))
	if err != nil {
		return -1, false
	}
	obj, isObj := v.(*pyjson.Object)
	if !isObj {
		return -1, false
	}
	switch l, _ := obj.Get("is_legal"); l := l.(type) {
	case bool:
		if l {
			return 1, true
		}
		return 0, true
	case pyjson.Number:
		if f, err := l.Float64(); err == nil && (f == 0 || f == 1) {
			return int(f), true
		}
	}
	return -1, true
}

// Summary computes the original's stats() counts. PostgreSQL refuses to
// cast a result_json that is not JSON (a direct write to the table can
// leave one) and fails the statement: the counts are then made in Go, by
// a scan of every result, that one counted Unreadable.
func (r *reader) Summary() (*storage.Summary, error) {
	var s storage.Summary
	err := r.withSavepoint(func() error {
		_, err := r.row([]any{&s.Total, &s.Legal, &s.Illegal, &s.Unreadable}, `SELECT count(*), count(*) FILTER (WHERE l = 1),
       count(*) FILTER (WHERE l = 0), count(*) FILTER (WHERE t <> 'object')
  FROM (SELECT `+legalExpr("result_json")+` AS l, jsonb_typeof(`+lenientJSONB("result_json")+`) AS t FROM records) x`)
		return err
	})
	if notJSON(err) {
		s = storage.Summary{}
		err = r.eachRecordPage("SELECT rowid, result_json FROM records", func(rows pgx.Rows) (int64, error) {
			var id int64
			var j string
			if err := rows.Scan(&id, &j); err != nil {
				return 0, err
			}
			s.Total++
			switch l, ok := legalOfParsed(j); {
			case !ok:
				s.Unreadable++
			case l == 1:
				s.Legal++
			case l == 0:
				s.Illegal++
			}
			return id, nil
		})
	}
	if err != nil {
		return nil, err
	}
	if s.Programs, err = r.CountPrograms(); err != nil {
		return nil, err
	}
	if s.SourceProjects, err = r.strings("SELECT DISTINCT source_project FROM records ORDER BY 1"); err != nil {
		return nil, err
	}
	if s.Users, err = r.strings("SELECT DISTINCT username FROM records ORDER BY 1"); err != nil {
		return nil, err
	}
	return &s, nil
}

// Keys lists record keys by creation date; limit > 0 paginates.
func (r *reader) Keys(limit, offset int64) ([]string, error) {
	if limit > 0 {
		return r.strings("SELECT key FROM records ORDER BY creation_date, rowid LIMIT $1 OFFSET $2", limit, offset)
	}
	return r.strings("SELECT key FROM records ORDER BY creation_date, rowid")
}

// ProgramSummaries counts the records of every program. As in Summary, a
// result_json that is not JSON makes the legal counts a scan in Go (that
// record is not legal).
func (r *reader) ProgramSummaries() ([]storage.ProgramSummary, error) {
	var out []storage.ProgramSummary
	summaries := func(legal string) error {
		out = []storage.ProgramSummary{}
		return r.rows(func(rows pgx.Rows) error {
			var p storage.ProgramSummary
			err := rows.Scan(&p.Hash, &p.Name, &p.Records, &p.Legal, &p.FirstDate, &p.LastDate)
			out = append(out, p)
			return err
		}, `SELECT p.program_hash, p.program_name, count(r.key), `+legal+`,
       coalesce(min(r.creation_date), ''), coalesce(max(r.creation_date), '')
  FROM programs p LEFT JOIN records r ON r.program_hash = p.program_hash
  GROUP BY p.program_hash, p.program_name ORDER BY p.program_name, p.program_hash`)
	}
	err := r.withSavepoint(func() error {
		return summaries(`count(*) FILTER (WHERE r.key IS NOT NULL AND ` + legalExpr("r.result_json") + ` = 1)`)
	})
	if !notJSON(err) {
		return out, err
	}
	if err := summaries("0"); err != nil {
		return nil, err
	}
	legal := map[string]int64{}
	err = r.eachRecordPage("SELECT rowid, program_hash, result_json FROM records", func(rows pgx.Rows) (int64, error) {
		var id int64
		var hash, j string
		if err := rows.Scan(&id, &hash, &j); err != nil {
			return 0, err
		}
		if l, _ := legalOfParsed(j); l == 1 {
			legal[hash]++
		}
		return id, nil
	})
	for i := range out {
		out[i].Legal = legal[out[i].Hash]
	}
	return out, err
}

// CheckTables counts orphans and records whose result is not JSON (as
// Python reads it) or not a JSON object. PostgreSQL checks its pages
// itself (and pg_amcheck does on demand): Integrity says "ok" once the
// tables could be read.
func (r *reader) CheckTables() (*storage.TableCheck, error) {
	c := &storage.TableCheck{Integrity: []string{"ok"}}
	var err error
	if c.Orphans, err = r.count(`SELECT count(*) FROM records r
  WHERE NOT EXISTS (SELECT 1 FROM programs p WHERE p.program_hash = r.program_hash)`); err != nil {
		return nil, err
	}
	err = r.eachRecordPage("SELECT rowid, result_json, key FROM records", func(rows pgx.Rows) (int64, error) {
		var id int64
		var j, key string
		if err := rows.Scan(&id, &j, &key); err != nil {
			return 0, err
		}
		if v, err := pyjson.Parse([]byte(j)); err != nil {
			c.BadResults++
		} else if _, ok := v.(*pyjson.Object); !ok {
			c.BadResults++
		}
		c.CheckDepth("record", key, j)
		return id, nil
	})
	if err != nil {
		return nil, err
	}
	// Config values too deep to read back; each level takes two
	// characters, so shorter values are not read.
	err = r.rows(func(rows pgx.Rows) error {
		var ns, key, v string
		if err := rows.Scan(&ns, &key, &v); err != nil {
			return err
		}
		c.CheckDepth("config", storage.ConfigName(ns, key), v)
		return nil
	}, "SELECT namespace, key, value_json FROM config_entries WHERE length(value_json) > $1 ORDER BY namespace, key",
		2*limits.MaxValueDepth)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// eachRecordPage runs query (a SELECT of records whose first column is
// rowid, without WHERE or ORDER BY) a page of tuning.ServerScanPage rows
// at a time, in rowid order; scan returns each row's rowid.
func (r *reader) eachRecordPage(query string, scan func(pgx.Rows) (int64, error)) error {
	after := int64(math.MinInt64)
	for {
		n := 0
		err := r.rows(func(rows pgx.Rows) error {
			id, err := scan(rows)
			after, n = id, n+1
			return err
		}, query+" WHERE rowid > $1 ORDER BY rowid LIMIT $2", after, tuning.ServerScanPage)
		if err != nil || n < tuning.ServerScanPage {
			return err
		}
	}
}

const configColumns = `namespace, key, device, op_id, call_key, value_json, hostname, username, creation_date, update_date, context`

func configDst(e *storage.ConfigEntry) []any {
	return []any{&e.Namespace, &e.Key, &e.Device, &e.OpID, &e.CallKey, &e.ValueJSON, &e.Hostname, &e.Username,
		&e.CreationDate, &e.UpdateDate, &e.Context}
}

// getConfig reads one config entry through q (the pool or a transaction).
func getConfig(ctx context.Context, q queryer, namespace, key string) (*storage.ConfigEntry, error) {
	var e storage.ConfigEntry
	err := q.QueryRow(ctx, "SELECT "+configColumns+" FROM config_entries WHERE namespace = $1 AND key = $2",
		namespace, key).Scan(configDst(&e)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// GetConfig is the config entry of (namespace, key), or nil.
func (r *reader) GetConfig(namespace, key string) (*storage.ConfigEntry, error) {
	ctx, cancel := r.s.stmtCtx(r.ctx)
	defer cancel()
	return getConfig(ctx, r.q, namespace, key)
}

// EachConfig calls fn for the config entries f selects, by namespace
// then key.
func (r *reader) EachConfig(f storage.ConfigFilter, fn func(*storage.ConfigEntry) error) error {
	var where []string
	var args []any
	cond := func(c string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(c, len(args)))
	}
	if !f.AllNamespaces {
		cond("namespace = $%d", f.Namespace)
	}
	if f.Device != "" {
		cond("device = $%d", f.Device)
	}
	if f.OpID != "" {
		cond("op_id = $%d", f.OpID)
	}
	q := "SELECT " + configColumns + " FROM config_entries"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return eachRead(r, func(rows pgx.Rows) (*storage.ConfigEntry, error) {
		e := &storage.ConfigEntry{}
		return e, rows.Scan(configDst(e)...)
	}, fn, q+" ORDER BY namespace, key", args...)
}

// CountConfigs is the number of config entries of namespace.
func (r *reader) CountConfigs(namespace string) (int64, error) {
	return r.count("SELECT count(*) FROM config_entries WHERE namespace = $1", namespace)
}

// ConfigImported is the import record of path, or nil.
func (r *reader) ConfigImported(path string) (*storage.ConfigImport, error) {
	var im storage.ConfigImport
	ok, err := r.row([]any{&im.Path, &im.Size, &im.MtimeNS, &im.SHA256, &im.Entries, &im.ImportedAt, &im.Hostname, &im.Username},
		`SELECT path, size, mtime_ns, sha256, entries, imported_at, hostname, username FROM config_imports WHERE path = $1`, path)
	if !ok {
		return nil, err
	}
	return &im, nil
}

const claimColumns = `key, program_hash, program_name, schedule, token, hostname, pid, start_time, boot_id,
    pid_ns, slurm_job_id, username, lease, renewals, claimed_at, renewed_at, slurm_cluster`

// claimSelect adds what the server's clock leaves of each lease.
const claimSelect = "SELECT " + claimColumns + `,
    extract(epoch FROM renewed_at::timestamptz + lease * interval '1 second' - clock_timestamp())::float8
  FROM claims`

func scanClaim(rows pgx.Rows) (*storage.Claim, error) {
	var c storage.Claim
	var left float64
	var startTime, pidNS int64
	err := rows.Scan(&c.Key, &c.ProgramHash, &c.ProgramName, &c.Schedule, &c.Token, &c.Hostname, &c.PID,
		&startTime, &c.BootID, &pidNS, &c.SlurmJobID, &c.Username, &c.LeaseSeconds, &c.Renewals,
		&c.ClaimedAt, &c.RenewedAt, &c.SlurmCluster, &left)
	c.StartTime, c.PIDNS = uint64(startTime), uint64(pidNS)
	c.ServerClock, c.ExpiresIn = true, time.Duration(left*float64(time.Second))
	return &c, err
}

// lockKeysSQL takes a transaction-scoped advisory lock per key, in one
// order (of the locks' numbers) so that two transactions never wait for
// each other in a cycle: the claims transaction of a key is then alone on
// it until it commits.
const lockKeysSQL = `SELECT count(pg_advisory_xact_lock(h))
  FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest($1::text[]) AS k ORDER BY 1) s`

// skipKeyLocks is for a test's negative control only (export_test.go).
var skipKeyLocks bool

// GetClaims returns the claims of those keys that have one. In an
// Update it first locks the keys (lockKeysSQL), and reads them in a
// statement of its own: under READ COMMITTED that statement, and every
// later one (the records), sees what the previous holder of the keys
// committed.
func (r *reader) GetClaims(keys []string) (map[string]*storage.Claim, error) {
	out := make(map[string]*storage.Claim)
	if len(keys) == 0 {
		return out, nil
	}
	if r.write && !skipKeyLocks {
		if _, err := r.exec(lockKeysSQL, keys); err != nil {
			return nil, err
		}
	}
	err := r.rows(func(rows pgx.Rows) error {
		c, err := scanClaim(rows)
		out[c.Key] = c
		return err
	}, claimSelect+" WHERE key = ANY($1)", keys)
	return out, err
}

// EachClaim calls fn for every claim, oldest first.
func (r *reader) EachClaim(fn func(*storage.Claim) error) error {
	return eachRead(r, scanClaim, fn, claimSelect+" ORDER BY claimed_at, key")
}

// PutProgram inserts p unless its hash is stored.
func (w *writer) PutProgram(p storage.Program) error {
	_, err := w.exec(insertProgramSQL, p.Hash, p.Name, p.Source)
	return err
}

var (
	recordParams = params(len(sqlite.RecordColumns))
	putRecordSQL = "INSERT INTO records (" + recordColumns + ") VALUES (" + recordParams + `)
  ON CONFLICT (key) DO NOTHING`
	upsertRecordSQL = "INSERT INTO records (" + recordColumns + ") VALUES (" + recordParams + `)
  ON CONFLICT (key) DO UPDATE SET ` + recordOverwrite
)

// params is the parameter list "$1, $2, ..., $n".
func params(n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = "$" + strconv.Itoa(i+1)
	}
	return strings.Join(p, ", ")
}

// PutRecord inserts r, or replaces the row of its key if overwrite.
func (w *writer) PutRecord(r *storage.Record, overwrite bool) (bool, error) {
	q := putRecordSQL
	if overwrite {
		q = upsertRecordSQL
	}
	n, err := w.exec(q, sqlite.RecordValues(r)...)
	if err != nil {
		return false, w.s.noProgram(err)
	}
	return n > 0, nil
}

// DeleteRecord removes a record and its runs.
func (w *writer) DeleteRecord(key string) (bool, error) {
	if _, err := w.exec("DELETE FROM record_runs WHERE key = $1", key); err != nil {
		return false, err
	}
	n, err := w.exec("DELETE FROM records WHERE key = $1", key)
	return n > 0, err
}

// PutRuns stores the runs of the record of key dated updateDate.
func (w *writer) PutRuns(key, updateDate, runs string) error {
	_, err := w.exec(`INSERT INTO record_runs (key, update_date, runs_json) VALUES ($1, $2, $3)
  ON CONFLICT (key) DO UPDATE SET update_date = excluded.update_date, runs_json = excluded.runs_json`, key, updateDate, runs)
	return err
}

// PutContext stores a run context unless its fingerprint is stored.
func (w *writer) PutContext(c storage.RunContext) error {
	_, err := w.exec("INSERT INTO run_contexts (fingerprint, context_json) VALUES ($1, $2) ON CONFLICT (fingerprint) DO NOTHING",
		c.Fingerprint, c.JSON)
	return err
}

// AllContexts returns every stored run context by fingerprint.
func (r *reader) AllContexts() (map[string]string, error) {
	return r.contexts("SELECT fingerprint, context_json FROM run_contexts")
}

// Contexts returns the context JSON of those fingerprints that are stored.
func (r *reader) Contexts(fingerprints []string) (map[string]string, error) {
	return r.contexts("SELECT fingerprint, context_json FROM run_contexts WHERE fingerprint = ANY($1)", fingerprints)
}

// contexts runs query, a read of (fingerprint, context_json) rows, into a
// map by fingerprint.
func (r *reader) contexts(query string, args ...any) (map[string]string, error) {
	out := map[string]string{}
	err := r.rows(func(rows pgx.Rows) error {
		var f, j string
		err := rows.Scan(&f, &j)
		out[f] = j
		return err
	}, query, args...)
	return out, err
}

// PutConfig inserts e, or replaces the entry of its (namespace, key) if
// overwrite.
func (w *writer) PutConfig(e *storage.ConfigEntry, overwrite bool) (bool, error) {
	q := "INSERT INTO config_entries (" + configColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
  ON CONFLICT (namespace, key) DO NOTHING`
	if overwrite {
		q = "INSERT INTO config_entries (" + configColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
  ON CONFLICT (namespace, key) DO UPDATE SET device = excluded.device, op_id = excluded.op_id,
       call_key = excluded.call_key, value_json = excluded.value_json, hostname = excluded.hostname,
       username = excluded.username, update_date = excluded.update_date, context = excluded.context`
	}
	n, err := w.exec(q, e.Namespace, e.Key, e.Device, e.OpID, e.CallKey, e.ValueJSON, e.Hostname, e.Username,
		e.CreationDate, e.UpdateDate, e.Context)
	return n > 0, err
}

// DeleteConfig removes the config entry of (namespace, key).
func (w *writer) DeleteConfig(namespace, key string) (bool, error) {
	n, err := w.exec("DELETE FROM config_entries WHERE namespace = $1 AND key = $2", namespace, key)
	return n > 0, err
}

// ClearConfigs removes every config entry of namespace.
func (w *writer) ClearConfigs(namespace string) (int64, error) {
	return w.exec("DELETE FROM config_entries WHERE namespace = $1", namespace)
}

// PutConfigImport inserts or replaces the import record of im.Path.
func (w *writer) PutConfigImport(im *storage.ConfigImport) error {
	_, err := w.exec(`INSERT INTO config_imports (path, size, mtime_ns, sha256, entries, imported_at, hostname, username)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
  ON CONFLICT (path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256,
       entries = excluded.entries, imported_at = excluded.imported_at, hostname = excluded.hostname,
       username = excluded.username`,
		im.Path, im.Size, im.MtimeNS, im.SHA256, im.Entries, im.ImportedAt, im.Hostname, im.Username)
	return err
}

// PutMeta inserts or replaces a db_meta row.
func (w *writer) PutMeta(key, value string) error {
	_, err := w.exec(`INSERT INTO db_meta (key, value) VALUES ($1, $2)
  ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}

// PutClaim inserts c, replacing the claim of its key, dated by the
// server's clock (its lease counts from there).
func (w *writer) PutClaim(c *storage.Claim) error {
	_, err := w.exec(`INSERT INTO claims (`+claimColumns+`)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, `+serverNow+`, `+serverNow+`, $15)
  ON CONFLICT (key) DO UPDATE SET program_hash = excluded.program_hash, program_name = excluded.program_name,
       schedule = excluded.schedule, token = excluded.token, hostname = excluded.hostname, pid = excluded.pid,
       start_time = excluded.start_time, boot_id = excluded.boot_id, pid_ns = excluded.pid_ns,
       slurm_job_id = excluded.slurm_job_id, username = excluded.username, lease = excluded.lease,
       renewals = excluded.renewals, claimed_at = excluded.claimed_at, renewed_at = excluded.renewed_at,
       slurm_cluster = excluded.slurm_cluster`,
		c.Key, c.ProgramHash, c.ProgramName, c.Schedule, c.Token, c.Hostname, c.PID, int64(c.StartTime), c.BootID,
		int64(c.PIDNS), c.SlurmJobID, c.Username, c.LeaseSeconds, c.Renewals, c.SlurmCluster)
	return err
}

// DeleteClaim removes the claim of key if token names it.
func (w *writer) DeleteClaim(key, token string) (bool, error) {
	n, err := w.exec("DELETE FROM claims WHERE key = $1 AND token = $2", key, token)
	return n > 0, err
}

// RenewClaims renews, dated by the server's clock (at is the caller's
// and is not used), each claim of refs that its token still names.
func (w *writer) RenewClaims(refs []storage.ClaimRef, _ string) ([]storage.ClaimRef, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	k, t := refArrays(refs)
	var renewed []storage.ClaimRef
	err := w.rows(func(rows pgx.Rows) error {
		var r storage.ClaimRef
		err := rows.Scan(&r.Key, &r.Token)
		renewed = append(renewed, r)
		return err
	}, renewSQL+" RETURNING c.key, c.token", k, t)
	return renewed, err
}
