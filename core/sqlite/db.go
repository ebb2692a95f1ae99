// Package sqlite is the storage layer: the schema of the original library
// (schema_version 2), its statements, and the connection settings it needs on
// a cluster filesystem. It is the only package that imports go-sqlite3.
//
// Nothing here locks: every function that reads or writes assumes the
// caller holds the hard-link lock, because SQLite's own POSIX locks are not
// trusted across nodes. A connection may stay open between locked uses:
// SQLite revalidates it at the start of every transaction, and outside a
// transaction it neither reads nor writes the files.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/tirastore/tirastore/core/failpoint"
)

// SchemaVersion is the db_meta schema_version this engine reads and writes.
const SchemaVersion = 2

// The DDL is the original's text, byte for byte, so that sqlite_master of a
// database created here is identical to one created by the original.
const (
	createMeta = `CREATE TABLE IF NOT EXISTS db_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
`
	createPrograms = `CREATE TABLE IF NOT EXISTS programs (
    program_hash    TEXT PRIMARY KEY,
    program_name    TEXT NOT NULL,
    source_code     TEXT NOT NULL
);
`
	createRecords = `CREATE TABLE IF NOT EXISTS records (
    key                TEXT PRIMARY KEY,
    program_hash       TEXT NOT NULL REFERENCES programs(program_hash),
    schedule           TEXT NOT NULL,
    result_json        TEXT NOT NULL,
    hostname           TEXT NOT NULL,
    username           TEXT NOT NULL,
    creation_date      TEXT NOT NULL,
    update_date        TEXT NOT NULL,
    source_project     TEXT NOT NULL DEFAULT ''
);
`
)

// DB is one SQLite connection with the settings the original used:
// journal_mode=DELETE (WAL needs shared memory, which breaks on Lustre),
// synchronous=FULL, foreign_keys=ON, busy_timeout=0 (our lock serializes),
// and the tirastore VFS (vfs.go), built on SQLite's "unix-none": the unix VFS
// without POSIX advisory locks. Those locks are node-local or absent on
// Lustre (localflock/noflock) and can hang on some NFS setups, so they
// protect nothing across nodes and can only hurt; the hard-link lock, held
// around every use of the connection, is the one that serializes. With no
// lock to consult, a connection that finds a journal treats it as hot and
// rolls it back, which is right precisely because no other writer can be
// alive while we hold the hard-link lock.
type DB struct {
	db *sql.DB

	// conn is the pool's one connection, checked out for the DB's whole
	// life: every statement runs on it, and transactions are plain BEGIN /
	// COMMIT / ROLLBACK statements. database/sql's own transactions start a
	// goroutine each (Tx.awaitDone), which woke another thread at every
	// operation; see Tx.
	conn *sql.Conn

	// stmts are the prepared statements of the hot paths, prepared once per
	// connection (a sqlitefile.Backend keeps its connection across operations).
	stmts map[string]*sql.Stmt

	// runs is the state of the runs tables as last seen (runs.go).
	runs int
}

// uriPath escapes the characters that end or alter the path part of an
// SQLite URI filename, so that any file name works.
func uriPath(path string) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return r.Replace(path)
}

// Open opens an existing database file read-write. It never creates the
// file: creation (with the original's 0666 mode) is the caller's job. The
// connection's writes are refused once fence is lost (fence.go); a nil
// fence never refuses.
func Open(path string, fence *Fence) (*DB, error) {
	return openDSN("file:" + uriPath(path) +
		"?mode=rw&vfs=" + VFSName + "&_journal_mode=DELETE&_synchronous=FULL&_foreign_keys=1&_busy_timeout=0" +
		fence.uriParam())
}

// bg is the context of every statement: an operation's deadline applies to
// waiting for the lock, never to SQLite work under it (an interrupted
// statement would only turn a finished wait into a failed operation).
var bg = context.Background()

// openDSN opens one connection to dsn and checks it out for good.
func openDSN(dsn string) (*DB, error) {
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, err
	}
	// One connection, never recycled behind our back: it must be closed
	// before the lock is released.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	conn, err := db.Conn(bg)
	if err == nil {
		if err = conn.PingContext(bg); err != nil {
			conn.Close()
		}
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return &DB{db: db, conn: conn, stmts: map[string]*sql.Stmt{}}, nil
}

// exec, query and queryRow run one statement on the connection.
func (d *DB) exec(query string, args ...any) (sql.Result, error) {
	return d.conn.ExecContext(bg, query, args...)
}

func (d *DB) query(query string, args ...any) (*sql.Rows, error) {
	return d.conn.QueryContext(bg, query, args...)
}

// scanner is a row to read: *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

// eachRow runs query and calls fn with each row as scan reads it, rows
// streaming from the cursor; an error of scan or fn stops it and is
// returned as is.
func eachRow[T any](d *DB, scan func(scanner) (T, error), fn func(T) error, query string, args ...any) error {
	rows, err := d.query(query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	return rows.Err()
}

// allRows is eachRow collecting the rows, in order (an empty, non-nil
// slice when there are none).
func allRows[T any](d *DB, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	out := []T{}
	err := eachRow(d, scan, func(v T) error {
		out = append(out, v)
		return nil
	}, query, args...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (d *DB) queryRow(query string, args ...any) *sql.Row {
	return d.conn.QueryRowContext(bg, query, args...)
}

// Close closes the connection. Outside a transaction SQLite writes nothing
// when it closes (the journal was deleted at the last commit).
func (d *DB) Close() error {
	for _, st := range d.stmts {
		st.Close()
	}
	d.conn.Close()
	return d.db.Close()
}

// stmt returns the prepared form of query, preparing it on first use.
func (d *DB) stmt(query string) (*sql.Stmt, error) {
	if st, ok := d.stmts[query]; ok {
		return st, nil
	}
	st, err := d.conn.PrepareContext(bg, query)
	if err != nil {
		return nil, err
	}
	if d.stmts == nil {
		d.stmts = map[string]*sql.Stmt{}
	}
	d.stmts[query] = st
	return st, nil
}

// Pragma runs a PRAGMA statement (tests and negative controls).
func (d *DB) Pragma(stmt string) error {
	_, err := d.exec(stmt)
	return err
}

// Read runs fn in one transaction that it always rolls back: many reads see
// one snapshot and pay SQLite's per-transaction checks (hot journal,
// change counter) once. It writes nothing, so failpoints do not fire.
func (d *DB) Read(fn func() error) error {
	if _, err := d.exec("BEGIN"); err != nil {
		return err
	}
	defer d.rollback()
	return fn()
}

// inRead runs fn inside one read transaction: the caller's, when one is
// open (Read, Tx), or else one of its own, started and rolled back as Read
// does.
func (d *DB) inRead(fn func() error) error {
	var autocommit bool
	if err := d.conn.Raw(func(c any) error {
		sc, ok := c.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("sqlite: unexpected driver connection %T", c)
		}
		autocommit = sc.AutoCommit()
		return nil
	}); err != nil {
		return err
	}
	if !autocommit {
		return fn()
	}
	return d.Read(fn)
}

// rollback ends the open transaction, if SQLite has not already ended it
// (some errors roll back by themselves; ROLLBACK then fails harmlessly).
func (d *DB) rollback() { _, _ = d.exec("ROLLBACK") }

// IsNotDatabase reports errors that mean "this file is not a usable SQLite
// database" (SQLITE_NOTADB, SQLITE_CORRUPT), as opposed to I/O trouble.
func IsNotDatabase(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrNotADB || se.Code == sqlite3.ErrCorrupt
	}
	return false
}

// IsConstraint reports a constraint violation (e.g. a record whose program
// is missing), which is the caller's bad input rather than a broken file.
func IsConstraint(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrConstraint
}

// SchemaDDL is the original's CREATE TABLE statements (schema_version 2),
// byte for byte, for tools that create or check the schema themselves (the
// benchmark's original-protocol baseline). It has no index: the original
// created none (see IndexDDL).
func SchemaDDL() []string { return []string{createMeta, createPrograms, createRecords} }

// RecordsProgramIndex is the one secondary index this engine adds to the
// original's schema: records by (program_hash, creation_date), for the reads
// of one program's records in creation order (export, get_program_records).
// Like every non-unique index its entries end with the rowid, so a scan of
// it lists records of equal creation_date in rowid order: the order in
// which the original's unindexed "WHERE program_hash = ? ORDER BY
// creation_date" returns them (its sort keeps the scan's rowid order).
//
// An index is invisible to the original's readers and writers (COMPAT.md):
// SQLite maintains it on their writes too, and they never name it.
const RecordsProgramIndex = "idx_records_program_hash_creation_date"

const createRecordsIndex = `CREATE INDEX IF NOT EXISTS ` + RecordsProgramIndex + `
    ON records (program_hash, creation_date);
`

// indexes are the secondary indexes, by name, that Init creates and
// EnsureIndexes adds to a database created without them.
var indexes = []struct{ name, ddl string }{
	{RecordsProgramIndex, createRecordsIndex},
}

// IndexDDL is the CREATE INDEX statements Init runs after SchemaDDL.
func IndexDDL() []string {
	out := make([]string, len(indexes))
	for i, ix := range indexes {
		out[i] = ix.ddl
	}
	return out
}

// Tx is one write transaction, with the statements that write records.
//
// It is BEGIN IMMEDIATE ... COMMIT run as statements on the DB's connection,
// not a database/sql transaction: that one starts a goroutine per
// transaction to watch its context (which here is never cancelled), and the
// goroutine's start woke a second thread at every record, one more context
// switch per operation on nodes where 32 processes share few cores.
type Tx struct {
	d *DB
}

// Exec runs one statement inside the transaction.
func (tx *Tx) Exec(query string, args ...any) (sql.Result, error) {
	return tx.d.exec(query, args...)
}

// exec runs query inside the transaction, prepared once per connection;
// a query that cannot be prepared (its table does not exist yet) runs
// unprepared, to fail or succeed as SQLite decides.
func (tx *Tx) exec(query string, args ...any) (sql.Result, error) {
	if st, err := tx.d.stmt(query); err == nil {
		return st.Exec(args...)
	}
	return tx.Exec(query, args...)
}

// changes is exec reporting how many rows the statement changed.
func (tx *Tx) changes(query string, args ...any) (int64, error) {
	res, err := tx.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// changed is changes reporting whether the statement changed a row.
func (tx *Tx) changed(query string, args ...any) (bool, error) {
	n, err := tx.changes(query, args...)
	return n > 0, err
}

// Tx runs fn inside one write transaction (BEGIN IMMEDIATE), committing on
// nil and rolling back on error. It also rolls back when fn panics, before
// the panic goes on up: the caller still holds the lock then, while a
// transaction left open would be rolled back later, when the connection
// closes, from its journal, over what other processes committed meanwhile.
func (d *DB) Tx(fn func(tx *Tx) error) error {
	if _, err := d.exec("BEGIN IMMEDIATE"); err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			// Also a COMMIT that failed can leave the transaction open
			// (SQLITE_BUSY, some I/O errors).
			d.rollback()
			d.runs = runsUnseen // it may have created them (runs.go)
		}
	}()
	if err := fn(&Tx{d: d}); err != nil {
		return err
	}
	failpoint.Inject(failpoint.BeforeCommit)
	if _, err := d.exec("COMMIT"); err != nil {
		return err
	}
	done = true
	failpoint.Inject(failpoint.AfterCommit)
	return nil
}

// Init creates the tables, their indexes (IndexDDL) and the db_meta rows of
// a new database. It is idempotent: existing tables, indexes and meta rows
// are left as they are.
func (d *DB) Init(cpuModel, slurmCPUs, createdAt string) error {
	return d.Tx(func(tx *Tx) error {
		for _, ddl := range append(SchemaDDL(), IndexDDL()...) {
			if _, err := tx.Exec(ddl); err != nil {
				return err
			}
		}
		for _, kv := range [][2]string{
			{"schema_version", fmt.Sprint(SchemaVersion)},
			{"cpu_model", cpuModel},
			{"slurm_cpus", slurmCPUs},
			{"created_at", createdAt},
		} {
			if _, err := tx.Exec("INSERT OR IGNORE INTO db_meta (key, value) VALUES (?, ?)", kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

// EnsureIndexes creates the indexes Init creates (IndexDDL) that the
// database lacks: one written by the original, or by a version of this
// engine from before them. The caller holds the lock and has checked the
// tables (HasTables); created reports whether anything was written.
//
// When every index is present it only reads sqlite_master and writes
// nothing, so calling it at every open costs one read. It writes only
// when an index is missing, in one transaction (building the index reads
// and sorts the whole records table, once): an open that must not write
// (read-only, writes disabled by a CPU mismatch) should not call it; every
// read stays correct without the index, only slower.
func (d *DB) EnsureIndexes() (created bool, err error) {
	missing, err := d.missingIndexes()
	if err != nil || len(missing) == 0 {
		return false, err
	}
	err = d.Tx(func(tx *Tx) error {
		// Look again inside the write transaction: what was missing at
		// the first look is what this transaction creates.
		if missing, err = d.missingIndexes(); err != nil {
			return err
		}
		for _, ix := range missing {
			if _, err := tx.Exec(ix.ddl); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return len(missing) > 0, nil
}

// missingIndexes lists the indexes whose name sqlite_master lacks.
func (d *DB) missingIndexes() (missing []struct{ name, ddl string }, err error) {
	for _, ix := range indexes {
		var n int
		if err := d.queryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, ix.name).Scan(&n); err != nil {
			return nil, err
		}
		if n == 0 {
			missing = append(missing, ix)
		}
	}
	return missing, nil
}

// HasTables reports whether the database has been initialised (an empty
// file left by a creator that crashed before Init has not).
func (d *DB) HasTables() (bool, error) {
	var n int
	err := d.queryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('db_meta', 'programs', 'records')`).Scan(&n)
	return n == 3, err
}

// Meta returns a db_meta value; ok is false when the row is absent.
func (d *DB) Meta(key string) (value string, ok bool, err error) {
	err = d.queryRow("SELECT value FROM db_meta WHERE key = ?", key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return value, err == nil, err
}

// IsSQLiteError reports any error that SQLite itself raised.
func IsSQLiteError(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se)
}
