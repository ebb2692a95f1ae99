package sqlite

import (
	"database/sql"
	"errors"
	"strings"

	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/storage"
)

// The kernel-config table: ejKernel's PersistentCache entries, one row per
// (namespace, key), the key being the seed's "device|op_id|call_key", with
// who wrote it and when. A namespace is one cache of the database
// (ejKernel keeps one per operation); "" is the namespace of every entry
// written before namespaces existed. The table is created by the first
// write (a database that only holds records never gets it); until then
// every read finds it empty. The original library never looks at it.
//
// # Its layouts
//
// The first layout had no namespace: key TEXT PRIMARY KEY (configKeyed);
// the second no context (the fingerprint of the run context an entry was
// tuned in: run_contexts, runs.go). A database that has one of them is
// read as it is, every row of the first in the namespace "", of both of
// context "", through a subquery that adds the columns
// (configLayout.source). The first config write of this engine adds the
// context column to the second (an ALTER TABLE, which rewrites nothing)
// and rebuilds the first into the current layout (rebuildConfigTable),
// inside that write's transaction: a crash or an
// error leaves the old table or the new one, never neither, and no write
// of an entry happens without it. The table's columns say its layout:
// db_meta's schema_version stays the original's (docs/COMPAT.md), and the
// look that every config read already made for the table tells the layout
// too (configLayout), so that knowing it costs no statement more, and a
// rebuild by another process is seen at the next read.
const (
	ConfigTable       = "config_entries"
	createConfigTable = `CREATE TABLE IF NOT EXISTS config_entries (
    namespace      TEXT NOT NULL DEFAULT '',
    key            TEXT NOT NULL,
    device         TEXT NOT NULL,
    op_id          TEXT NOT NULL,
    call_key       TEXT NOT NULL,
    value_json     TEXT NOT NULL,
    hostname       TEXT NOT NULL,
    username       TEXT NOT NULL,
    creation_date  TEXT NOT NULL,
    update_date    TEXT NOT NULL,
    context        TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, key)
)`
	// ConfigIndex serves the listings of one namespace's entries of a
	// device or operation.
	ConfigIndex       = "idx_config_entries_namespace_device_op_id"
	createConfigIndex = `CREATE INDEX IF NOT EXISTS ` + ConfigIndex + `
    ON config_entries (namespace, device, op_id)`

	// configKeyedTable is the name the old table has during its rebuild
	// (inside one transaction: no database ever shows it).
	configKeyedTable = "config_entries_keyed"

	// ConfigImportTable remembers the seed JSON files imported (see
	// storage.ConfigImport), created by the first import.
	ConfigImportTable       = "config_imports"
	createConfigImportTable = `CREATE TABLE IF NOT EXISTS config_imports (
    path         TEXT PRIMARY KEY,
    size         INTEGER NOT NULL,
    mtime_ns     INTEGER NOT NULL,
    sha256       TEXT NOT NULL,
    entries      INTEGER NOT NULL,
    imported_at  TEXT NOT NULL,
    hostname     TEXT NOT NULL,
    username     TEXT NOT NULL
)`

	// configColumns are the columns every layout has; a read selects
	// namespace first and context last (configRead).
	configColumns = `key, device, op_id, call_key, value_json, hostname, username, creation_date, update_date`
	configRead    = `namespace, ` + configColumns + `, context`
	insertConfig  = `INSERT OR IGNORE INTO config_entries (` + configRead + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	upsertConfig  = `INSERT INTO config_entries (` + configRead + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT(namespace, key) DO UPDATE SET device = excluded.device, op_id = excluded.op_id,
       call_key = excluded.call_key, value_json = excluded.value_json, hostname = excluded.hostname,
       username = excluded.username, update_date = excluded.update_date, context = excluded.context`
	// addConfigContext brings the second layout to the third.
	addConfigContext = `ALTER TABLE config_entries ADD COLUMN context TEXT NOT NULL DEFAULT ''`
)

// configLayout is the shape of a database's config table.
type configLayout int

const (
	configNone       configLayout = iota // no table yet: every read finds nothing
	configKeyed                          // the first layout: key TEXT PRIMARY KEY, no namespace
	configNamespaced                     // the second: (namespace, key), no context
	configContexts                       // the current one: with the context of each entry
)

// source is what a read selects the config rows from, each with its
// namespace and context: the table itself, or an old one's rows in the
// namespace "" and of no context ("": unknown). SQLite flattens the
// subquery, so a read by key still uses the old table's primary key.
func (l configLayout) source() string {
	switch l {
	case configKeyed:
		return `(SELECT '' AS namespace, ` + configColumns + `, '' AS context FROM config_entries)`
	case configNamespaced:
		return `(SELECT namespace, ` + configColumns + `, '' AS context FROM config_entries)`
	}
	return ConfigTable
}

// order is the ORDER BY of a listing by namespace then key: by key alone
// in the old table, whose rows are all of one namespace (SQLite would
// sort them in a temporary tree otherwise).
func (l configLayout) order() string {
	if l == configKeyed {
		return " ORDER BY key"
	}
	return " ORDER BY namespace, key"
}

// configLayout tells whether the config table exists and in which layout,
// in the one statement that was the look for the table before namespaces.
func (d *DB) configLayout() (configLayout, error) {
	var cols, ns, ctx int
	err := d.queryRow(`SELECT count(*), count(CASE WHEN name = 'namespace' THEN 1 END),
       count(CASE WHEN name = 'context' THEN 1 END)
  FROM pragma_table_info('config_entries', 'main')`).Scan(&cols, &ns, &ctx)
	switch {
	case err != nil || cols == 0:
		return configNone, err
	case ns == 0:
		return configKeyed, nil
	case ctx == 0:
		return configNamespaced, nil
	}
	return configContexts, nil
}

// hasTable reports whether the table name exists.
func (d *DB) hasTable(name string) (bool, error) {
	var n int
	err := d.queryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
	return n == 1, err
}

func scanConfig(sc scanner) (*storage.ConfigEntry, error) {
	var e storage.ConfigEntry
	err := sc.Scan(&e.Namespace, &e.Key, &e.Device, &e.OpID, &e.CallKey, &e.ValueJSON, &e.Hostname, &e.Username,
		&e.CreationDate, &e.UpdateDate, &e.Context)
	return &e, err
}

// GetConfig returns the entry of (namespace, key), or nil.
func (d *DB) GetConfig(namespace, key string) (*storage.ConfigEntry, error) {
	l, err := d.configLayout()
	if err != nil || l == configNone {
		return nil, err
	}
	e, err := scanConfig(d.queryRow("SELECT "+configRead+" FROM "+l.source()+
		" WHERE namespace = ? AND key = ?", namespace, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return e, err
}

// EachConfig calls fn for every entry that f selects, by namespace then
// key.
func (d *DB) EachConfig(f storage.ConfigFilter, fn func(*storage.ConfigEntry) error) error {
	l, err := d.configLayout()
	if err != nil || l == configNone {
		return err
	}
	var where []string
	var args []any
	if !f.AllNamespaces {
		where, args = append(where, "namespace = ?"), append(args, f.Namespace)
	}
	if f.Device != "" {
		where, args = append(where, "device = ?"), append(args, f.Device)
	}
	if f.OpID != "" {
		where, args = append(where, "op_id = ?"), append(args, f.OpID)
	}
	q := "SELECT " + configRead + " FROM " + l.source()
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return eachRow(d, scanConfig, fn, q+l.order(), args...)
}

// CountConfigs is the number of config entries of namespace.
func (d *DB) CountConfigs(namespace string) (int64, error) {
	l, err := d.configLayout()
	if err != nil || l == configNone {
		return 0, err
	}
	return d.count("SELECT COUNT(*) FROM "+l.source()+" WHERE namespace = ?", namespace)
}

// configTable readies the config table for a write in the transaction and
// reports whether it exists: an old layout is rebuilt into the current
// one, and a missing table is created if create (a put), else left
// missing (a delete finds nothing to delete).
func (tx *Tx) configTable(create bool) (bool, error) {
	l, err := tx.d.configLayout()
	if err != nil {
		return false, err
	}
	switch l {
	case configContexts:
		return true, nil
	case configNamespaced:
		_, err := tx.Exec(addConfigContext)
		return true, err
	case configKeyed:
		return true, tx.rebuildConfigTable()
	}
	if !create {
		return false, nil
	}
	for _, ddl := range []string{createConfigTable, createConfigIndex} {
		if _, err := tx.Exec(ddl); err != nil {
			return false, err
		}
	}
	return true, nil
}

// rebuildConfigTable turns the table of the first layout into the current
// one, its rows in the namespace "", in the caller's transaction: the old
// table is renamed away, the new one created under its name with the
// same DDL as a new database's (sqlite_master then reads the same either
// way), the rows copied, the old table (and its index) dropped. Until the
// transaction commits, the database still holds the old table.
func (tx *Tx) rebuildConfigTable() error {
	apart := failpoint.Enabled(failpoint.ConfigRebuildApart)
	for i, stmt := range []string{
		`ALTER TABLE config_entries RENAME TO ` + configKeyedTable,
		createConfigTable,
		createConfigIndex,
		`INSERT INTO config_entries (namespace, ` + configColumns + `) SELECT '', ` + configColumns + ` FROM ` + configKeyedTable,
		`DROP TABLE ` + configKeyedTable,
	} {
		if apart {
			// The negative control: each step commits on its own.
			if _, err := tx.Exec("COMMIT"); err != nil {
				return err
			}
		}
		if i == 1 {
			failpoint.Inject(failpoint.ConfigRebuilding) // the old table renamed away, no new one yet
		}
		_, err := tx.Exec(stmt)
		if apart {
			if _, berr := tx.Exec("BEGIN IMMEDIATE"); err == nil {
				err = berr
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// PutConfig inserts e, or with overwrite replaces the entry of its
// (namespace, key) (keeping its creation date); it reports whether it
// wrote.
func (tx *Tx) PutConfig(e *storage.ConfigEntry, overwrite bool) (bool, error) {
	if _, err := tx.configTable(true); err != nil {
		return false, err
	}
	q := insertConfig
	if overwrite {
		q = upsertConfig
	}
	return tx.changed(q, e.Namespace, e.Key, e.Device, e.OpID, e.CallKey, e.ValueJSON, e.Hostname, e.Username,
		e.CreationDate, e.UpdateDate, e.Context)
}

// DeleteConfig removes the entry of (namespace, key) and reports whether
// it existed.
func (tx *Tx) DeleteConfig(namespace, key string) (bool, error) {
	if ok, err := tx.configTable(false); err != nil || !ok {
		return false, err
	}
	return tx.changed("DELETE FROM config_entries WHERE namespace = ? AND key = ?", namespace, key)
}

// ClearConfigs removes every config entry of namespace and returns how
// many there were.
func (tx *Tx) ClearConfigs(namespace string) (int64, error) {
	if ok, err := tx.configTable(false); err != nil || !ok {
		return 0, err
	}
	return tx.changes("DELETE FROM config_entries WHERE namespace = ?", namespace)
}

// ConfigImported returns the import record of the JSON file path, or nil.
func (d *DB) ConfigImported(path string) (*storage.ConfigImport, error) {
	if ok, err := d.hasTable(ConfigImportTable); err != nil || !ok {
		return nil, err
	}
	var im storage.ConfigImport
	err := d.queryRow(`SELECT path, size, mtime_ns, sha256, entries, imported_at, hostname, username
  FROM config_imports WHERE path = ?`, path).Scan(&im.Path, &im.Size, &im.MtimeNS, &im.SHA256, &im.Entries,
		&im.ImportedAt, &im.Hostname, &im.Username)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &im, nil
}

// PutMeta inserts or replaces a db_meta row.
func (tx *Tx) PutMeta(key, value string) error {
	_, err := tx.exec(`INSERT INTO db_meta (key, value) VALUES (?, ?)
  ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	return err
}

// PutConfigImport inserts or replaces the import record of im.Path,
// creating the table on first use.
func (tx *Tx) PutConfigImport(im *storage.ConfigImport) error {
	if _, err := tx.exec(createConfigImportTable); err != nil {
		return err
	}
	_, err := tx.exec(`INSERT OR REPLACE INTO config_imports
  (path, size, mtime_ns, sha256, entries, imported_at, hostname, username) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		im.Path, im.Size, im.MtimeNS, im.SHA256, im.Entries, im.ImportedAt, im.Hostname, im.Username)
	return err
}
