package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/storage"
)

// The storage.Backend operations.

// The records table has the original's columns, as core/sqlite's (a
// backup copies them into one): its statements are built from the one
// list of them, sqlite.RecordColumns.
var (
	// recordColumns and recordColumnsOfR list the columns, bare and of
	// the alias r.
	recordColumns    = strings.Join(sqlite.RecordColumns, ", ")
	recordColumnsOfR = "r." + strings.Join(sqlite.RecordColumns, ", r.")
	// recordOverwrite is what an overwrite replaces: every column but the
	// key and creation_date.
	recordOverwrite = sqlite.UpsertSet(sqlite.RecordColumns, "key", "creation_date")

	// The lookups read the records row alone. The original's inner join
	// with programs (a record whose program row is missing is not found)
	// is kept by the foreign key instead (records.program_hash REFERENCES
	// programs: no record without its program, no program deleted under
	// its records): the join found nothing more, and it cost every hit,
	// not a miss, a probe of programs' index and heap, and every
	// statement a plan of two tables where the query mode plans each one
	// (transaction pooling's cache_describe).
	lookupSQL     = "SELECT " + recordColumnsOfR + ", " + runsOfR + ` FROM records r WHERE r.key = $1`
	lookupManySQL = "SELECT " + recordColumnsOfR + ", " + runsOfR + ` FROM records r WHERE r.key = ANY($1)`

	// The rows of one write from arrays, in their order (so that rowid
	// follows it), one statement whatever their number.
	insertRowsSQL = "INSERT INTO records (" + recordColumns + `)
  SELECT t.k, $2, t.s, t.r, $3, $4, $5, $5, $6
    FROM unnest($1::text[], $7::text[], $8::text[]) WITH ORDINALITY AS t(k, s, r, n) ORDER BY t.n
  ON CONFLICT (key) DO NOTHING RETURNING key`
	upsertRowsSQL = "INSERT INTO records (" + recordColumns + `)
  SELECT t.k, $2, t.s, t.r, $3, $4, $5, $5, $6
    FROM unnest($1::text[], $7::text[], $8::text[]) WITH ORDINALITY AS t(k, s, r, n) ORDER BY t.n
  ON CONFLICT (key) DO UPDATE SET ` + recordOverwrite + `
  RETURNING key`
)

const (
	containsSQL = "SELECT EXISTS (SELECT 1 FROM records WHERE key = $1)"

	insertProgramSQL = `INSERT INTO programs (program_hash, program_name, source_code) VALUES ($1, $2, $3)
  ON CONFLICT (program_hash) DO NOTHING`
	// ownRowsSQL finds, after a retry, the rows an earlier attempt of the
	// same write committed before its answer was lost: exactly its
	// values, its date.
	ownRowsSQL = `SELECT r.key FROM records r
  JOIN unnest($1::text[], $7::text[], $8::text[]) AS t(k, s, res) ON r.key = t.k AND r.schedule = t.s AND r.result_json = t.res
  WHERE r.program_hash = $2 AND r.hostname = $3 AND r.username = $4 AND r.update_date = $5 AND r.source_project = $6`
	// runsOfR is the runs of the record r (storage "Runs"): those of its
	// record_runs row if that describes it (the same update_date).
	runsOfR = "coalesce((SELECT u.runs_json FROM record_runs u WHERE u.key = r.key AND u.update_date = r.update_date), '')"
	// putRunsSQL stores the runs of the rows of a write that it wrote
	// (dated $2): the first row of each key, as the insert keeps it (an
	// overwrite's rows are one per key already).
	putRunsSQL = `INSERT INTO record_runs (key, update_date, runs_json)
  SELECT DISTINCT ON (t.k) t.k, $2, t.u FROM unnest($1::text[], $3::text[]) WITH ORDINALITY AS t(k, u, n)
    JOIN records rec ON rec.key = t.k AND rec.update_date = $2
    WHERE t.u <> '' ORDER BY t.k, t.n
  ON CONFLICT (key) DO UPDATE SET update_date = excluded.update_date, runs_json = excluded.runs_json`
	putContextsSQL = `INSERT INTO run_contexts (fingerprint, context_json)
  SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT (fingerprint) DO NOTHING`
	// releaseSQL deletes the released claims ($1 keys, $2 tokens) that
	// their tokens still name, and any claim on a key whose record this
	// write stored (dated $3, as putRunsSQL tells them; storage.Write).
	releaseSQL = `DELETE FROM claims c USING unnest($1::text[], $2::text[]) AS t(k, tok)
  WHERE c.key = t.k AND (c.token = t.tok OR EXISTS (SELECT 1 FROM records r WHERE r.key = t.k AND r.update_date = $3))`
	renewSQL = `UPDATE claims c SET renewals = c.renewals + 1, renewed_at = ` + serverNow + `
  FROM unnest($1::text[], $2::text[]) AS t(k, tok) WHERE c.key = t.k AND c.token = t.tok`
)

// LookupStatement is the statement of one lookup (the key is $1): the
// benchmark times it alone, beside other forms of it, on the same server.
func LookupStatement() string { return lookupSQL }

// serverNow is the server's clock as identity.NowISO writes dates: a
// claim's dates, by which the server judges its lease.
const serverNow = `(to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '+00:00')`

// scanRecord reads a row of the record columns and its runs.
func scanRecord(row pgx.Row) (*storage.Record, error) {
	var r storage.Record
	err := row.Scan(append(sqlite.RecordFields(&r), &r.Runs)...)
	return &r, err
}

// entered is retry inside one operation (enter): what every call of this
// backend but Write, which prepares its arguments in between, runs as.
func (s *Backend) entered(ctx context.Context, op string, idempotent bool, fn func(ctx context.Context, attempt int) error) error {
	ctx, done, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer done()
	return s.retry(ctx, op, idempotent, fn)
}

// one runs fn, a read of one statement, with retries.
func (s *Backend) one(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	return s.entered(ctx, op, true, func(ctx context.Context, _ int) error {
		sctx, cancel := s.stmtCtx(ctx)
		defer cancel()
		return fn(sctx)
	})
}

// Lookup reads the record of key in one round trip.
func (s *Backend) Lookup(ctx context.Context, _, key string) (*storage.Record, error) {
	var rec *storage.Record
	err := s.one(ctx, "lookup", func(ctx context.Context) error {
		r, err := scanRecord(s.pool.QueryRow(ctx, lookupSQL, key))
		if errors.Is(err, pgx.ErrNoRows) {
			rec = nil
			return nil
		}
		rec = r
		return err
	})
	return rec, err
}

// LookupMany reads the records of keys in one statement.
func (s *Backend) LookupMany(ctx context.Context, _ string, keys []string) ([]*storage.Record, error) {
	var out []*storage.Record
	err := s.one(ctx, "lookup_many", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, lookupManySQL, keys)
		if err != nil {
			return err
		}
		byKey := make(map[string]*storage.Record, len(keys))
		for rows.Next() {
			r, err := scanRecord(rows)
			if err != nil {
				rows.Close()
				return err
			}
			byKey[r.Key] = r
		}
		if err := rows.Err(); err != nil {
			return err
		}
		out = make([]*storage.Record, len(keys))
		for i, k := range keys {
			out[i] = byKey[k]
		}
		return nil
	})
	return out, err
}

// Contains reports whether a record row has key (no join).
func (s *Backend) Contains(ctx context.Context, _, key string) (bool, error) {
	var found bool
	err := s.one(ctx, "contains", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, containsSQL, key).Scan(&found)
	})
	return found, err
}

// ConfigGet reads the config entry of (namespace, key); nothing is
// cached.
func (s *Backend) ConfigGet(ctx context.Context, namespace, key string) (*storage.ConfigEntry, error) {
	var e *storage.ConfigEntry
	err := s.one(ctx, "config get", func(ctx context.Context) error {
		var err error
		e, err = getConfig(ctx, s.pool, namespace, key)
		return err
	})
	return e, err
}

// Peek cannot answer without a round trip.
func (s *Backend) Peek(string, string) (*storage.Record, bool) { return nil, false }

// Write stores w in one pipelined batch: one round trip, one implicit
// transaction. A retry after a lost answer counts the rows that the
// earlier attempt committed (exactly w's values and date) as written, so
// that a record that won its key still says so.
func (s *Backend) Write(ctx context.Context, w *storage.Write) (int, error) {
	ctx, done, err := s.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	rows := w.Rows
	if w.Overwrite {
		rows = lastOfEachKey(rows)
	}
	keys := make([]string, len(rows))
	scheds := make([]string, len(rows))
	results := make([]string, len(rows))
	runs := make([]string, len(rows))
	anyRuns := false
	for i, r := range rows {
		keys[i], scheds[i], results[i], runs[i] = r.Key, r.Schedule, r.ResultJSON, r.Runs
		anyRuns = anyRuns || r.Runs != ""
	}
	stamp := identity.NowISO(time.Now())
	args := []any{keys, w.Hash, w.Hostname, w.Username, stamp, w.SourceProject, scheds, results}
	insert := insertRowsSQL
	if w.Overwrite {
		insert = upsertRowsSQL
	}
	written := 0
	err = s.retry(ctx, "record", true, func(ctx context.Context, attempt int) error {
		sctx, cancel := s.stmtCtx(ctx)
		defer cancel()
		b := &pgx.Batch{}
		local := s.queueLocal(b)
		if !w.ProgramStored {
			b.Queue(insertProgramSQL, w.Hash, w.Name, w.Source)
		}
		b.Queue(insert, args...)
		if anyRuns {
			b.Queue(putRunsSQL, keys, stamp, runs)
		}
		if len(w.Contexts) > 0 {
			fps, texts := make([]string, len(w.Contexts)), make([]string, len(w.Contexts))
			for i, c := range w.Contexts {
				fps[i], texts[i] = c.Fingerprint, c.JSON
			}
			b.Queue(putContextsSQL, fps, texts)
		}
		if len(w.Release) > 0 {
			k, t := refArrays(w.Release)
			b.Queue(releaseSQL, k, t, stamp)
		}
		if len(w.Renew) > 0 {
			k, t := refArrays(w.Renew)
			b.Queue(renewSQL, k, t)
		}
		br := s.pool.SendBatch(sctx, b)
		if local {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		if !w.ProgramStored {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		got := map[string]bool{}
		r, err := br.Query()
		if err == nil {
			var k string
			_, err = pgx.ForEachRow(r, []any{&k}, func() error { got[k] = true; return nil })
		}
		if err != nil {
			br.Close()
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		if attempt > 0 && len(got) < len(keys) {
			r, err := s.pool.Query(sctx, ownRowsSQL, args...)
			if err != nil {
				return err
			}
			var k string
			if _, err := pgx.ForEachRow(r, []any{&k}, func() error { got[k] = true; return nil }); err != nil {
				return err
			}
		}
		written = len(got)
		if w.Overwrite {
			// Every row of the call counts, a key given twice too, as
			// the original's (and SQLite's) upsert per row counts.
			written = 0
			for _, r := range w.Rows {
				if got[r.Key] {
					written++
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, s.noProgram(err)
	}
	return written, nil
}

// noProgram maps a foreign-key violation to storage.ErrNoProgram.
func (s *Backend) noProgram(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" {
		return errors.Join(storage.ErrNoProgram, err)
	}
	return err
}

// lastOfEachKey keeps the last row of each key, in the order of their
// first appearance: an upsert may not change one row twice in one
// statement, and with overwrite the last row written is the one SQLite
// keeps.
func lastOfEachKey(rows []storage.Row) []storage.Row {
	idx := make(map[string]int, len(rows))
	out := make([]storage.Row, 0, len(rows))
	for _, r := range rows {
		if i, ok := idx[r.Key]; ok {
			out[i] = r
			continue
		}
		idx[r.Key] = len(out)
		out = append(out, r)
	}
	return out
}

func refArrays(refs []storage.ClaimRef) (keys, tokens []string) {
	keys, tokens = make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		keys[i], tokens[i] = r.Key, r.Token
	}
	return keys, tokens
}

// View runs fn in one REPEATABLE READ, read-only transaction: one
// snapshot, blocking nobody. Only starting it is retried (fn may not be
// safe to run twice).
func (s *Backend) View(ctx context.Context, op string, fn func(storage.Reader) error) error {
	return s.tx(ctx, op, false, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(ctx context.Context, tx pgx.Tx) error {
		return fn(&reader{s: s, ctx: ctx, q: tx})
	})
}

// Reread is View run again, whole, after a fault that a retry gets past
// (storage.Backend.Reread).
func (s *Backend) Reread(ctx context.Context, op string, fn func(storage.Reader) error) error {
	return s.tx(ctx, op, true, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(ctx context.Context, tx pgx.Tx) error {
		return fn(&reader{s: s, ctx: ctx, q: tx})
	})
}

// Update runs fn in one READ COMMITTED transaction; only starting it is
// retried.
func (s *Backend) Update(ctx context.Context, op string, fn func(storage.Writer) error) error {
	return s.tx(ctx, op, false, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(ctx context.Context, tx pgx.Tx) error {
		return fn(&writer{reader{s: s, ctx: ctx, q: tx, write: true}, tx})
	})
}

// UpdateClaims is Update (the claims need no cache of their own), and
// whole transactions are run again that failed before their commit (a
// deadlock the server broke, a lost connection) or whose COMMIT's answer
// was lost: fn recognizes what an earlier run committed
// (storage.Backend.UpdateClaims).
func (s *Backend) UpdateClaims(ctx context.Context, op string, fn func(storage.ClaimWriter) error) error {
	return s.tx(ctx, op, true, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(ctx context.Context, tx pgx.Tx) error {
		return fn(&writer{reader{s: s, ctx: ctx, q: tx, write: true}, tx})
	})
}

// ranErr marks an error of a transaction whose function ran: it is not
// retried.
type ranErr struct{ error }

func (e ranErr) Unwrap() error { return e.error }

// tx runs fn in a transaction of opts, committed if fn returns nil. With
// rerun, a failure that a retry may get past runs the whole transaction
// again, a lost COMMIT's too (it may have committed: fn, or the
// read-only transaction, makes that harmless); without, a failure after
// BEGIN is final.
func (s *Backend) tx(ctx context.Context, op string, rerun bool, opts pgx.TxOptions, fn func(context.Context, pgx.Tx) error) error {
	return s.entered(ctx, op, rerun, func(ctx context.Context, _ int) error {
		bctx, cancel := s.stmtCtx(ctx)
		tx, err := s.pool.BeginTx(bctx, s.txOptions(opts))
		cancel()
		if err != nil {
			return err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), s.stmtTimeoutOr(time.Minute))
			_ = tx.Rollback(rctx)
			cancel()
		}()
		if err := fn(ctx, tx); err != nil {
			if rerun {
				return s.noProgram(err)
			}
			return ranErr{s.noProgram(err)}
		}
		cctx, cancel := s.stmtCtx(ctx)
		defer cancel()
		if err := tx.Commit(cctx); err != nil {
			if rerun {
				return err
			}
			if isConnError(err) {
				err = fmt.Errorf("the connection was lost at COMMIT, so the transaction may or may not "+
					"have been committed: %w", err)
			}
			return ranErr{err}
		}
		return nil
	})
}

func (s *Backend) stmtTimeoutOr(d time.Duration) time.Duration {
	if s.stmtTimeout > 0 {
		return s.stmtTimeout
	}
	return d
}

// EachProgram reads every program, ServerExportPage at a time with their
// sources, and each one's results, all in one REPEATABLE READ snapshot.
func (s *Backend) EachProgram(ctx context.Context, fn func(storage.Program, []storage.ScheduleResult) error) error {
	return s.View(ctx, "export", func(r storage.Reader) error {
		return r.(*reader).eachProgram(fn)
	})
}

// Backup writes a consistent copy of the database, as a SQLite file of
// the same tables (backup.go).
func (s *Backend) Backup(ctx context.Context, path string) error {
	return s.View(ctx, "back up", func(r storage.Reader) error {
		return r.(*reader).backupTo(path)
	})
}
