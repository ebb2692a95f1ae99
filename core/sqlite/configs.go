package sqlite

import (
	"database/sql"
	"errors"

	"github.com/tirastore/tirastore/core/storage"
)

// The kernel-config table: ejKernel's PersistentCache entries, one row per
// key "device|op_id|call_key" (the seed's key), with who wrote it and when.
// It is created by the first write (a database that only holds records
// never gets it); until then every read finds it empty. The original
// library never looks at it.
const (
	ConfigTable       = "config_entries"
	createConfigTable = `CREATE TABLE IF NOT EXISTS config_entries (
    key            TEXT PRIMARY KEY,
    device         TEXT NOT NULL,
    op_id          TEXT NOT NULL,
    call_key       TEXT NOT NULL,
    value_json     TEXT NOT NULL,
    hostname       TEXT NOT NULL,
    username       TEXT NOT NULL,
    creation_date  TEXT NOT NULL,
    update_date    TEXT NOT NULL
)`
	createConfigIndex = `CREATE INDEX IF NOT EXISTS idx_config_entries_device_op_id
    ON config_entries (device, op_id)`

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

	configColumns = `key, device, op_id, call_key, value_json, hostname, username, creation_date, update_date`
	insertConfig  = `INSERT OR IGNORE INTO config_entries (` + configColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	upsertConfig  = `INSERT INTO config_entries (` + configColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
  ON CONFLICT(key) DO UPDATE SET device = excluded.device, op_id = excluded.op_id, call_key = excluded.call_key,
       value_json = excluded.value_json, hostname = excluded.hostname, username = excluded.username,
       update_date = excluded.update_date`
)

// hasConfigTable reports whether the config table exists yet.
func (d *DB) hasConfigTable() (bool, error) { return d.hasTable(ConfigTable) }

// hasTable reports whether the table name exists.
func (d *DB) hasTable(name string) (bool, error) {
	var n int
	err := d.queryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n)
	return n == 1, err
}

func scanConfig(sc interface{ Scan(...any) error }) (*storage.ConfigEntry, error) {
	var e storage.ConfigEntry
	err := sc.Scan(&e.Key, &e.Device, &e.OpID, &e.CallKey, &e.ValueJSON, &e.Hostname, &e.Username,
		&e.CreationDate, &e.UpdateDate)
	return &e, err
}

// GetConfig returns the entry of key, or nil.
func (d *DB) GetConfig(key string) (*storage.ConfigEntry, error) {
	if ok, err := d.hasConfigTable(); err != nil || !ok {
		return nil, err
	}
	e, err := scanConfig(d.queryRow("SELECT "+configColumns+" FROM config_entries WHERE key = ?", key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return e, err
}

// EachConfig calls fn for every entry of device and op_id ("" matches any),
// by key.
func (d *DB) EachConfig(device, opID string, fn func(*storage.ConfigEntry) error) error {
	if ok, err := d.hasConfigTable(); err != nil || !ok {
		return err
	}
	rows, err := d.query("SELECT "+configColumns+` FROM config_entries
  WHERE (?1 = '' OR device = ?1) AND (?2 = '' OR op_id = ?2) ORDER BY key`, device, opID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanConfig(rows)
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

// CountConfigs is the number of config entries.
func (d *DB) CountConfigs() (int64, error) {
	if ok, err := d.hasConfigTable(); err != nil || !ok {
		return 0, err
	}
	return d.count("SELECT COUNT(*) FROM config_entries")
}

// ensureConfigTable creates the config table in the transaction if it is
// not there yet.
func (tx *Tx) ensureConfigTable() error {
	ok, err := tx.d.hasConfigTable()
	if err != nil || ok {
		return err
	}
	for _, ddl := range []string{createConfigTable, createConfigIndex} {
		if _, err := tx.exec(ddl); err != nil {
			return err
		}
	}
	return nil
}

// PutConfig inserts e, or with overwrite replaces the entry of its key
// (keeping its creation date); it reports whether it wrote.
func (tx *Tx) PutConfig(e *storage.ConfigEntry, overwrite bool) (bool, error) {
	if err := tx.ensureConfigTable(); err != nil {
		return false, err
	}
	q := insertConfig
	if overwrite {
		q = upsertConfig
	}
	res, err := tx.exec(q, e.Key, e.Device, e.OpID, e.CallKey, e.ValueJSON, e.Hostname, e.Username,
		e.CreationDate, e.UpdateDate)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// DeleteConfig removes the entry of key and reports whether it existed.
func (tx *Tx) DeleteConfig(key string) (bool, error) {
	if ok, err := tx.d.hasConfigTable(); err != nil || !ok {
		return false, err
	}
	res, err := tx.exec("DELETE FROM config_entries WHERE key = ?", key)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// ClearConfigs removes every config entry and returns how many there were.
func (tx *Tx) ClearConfigs() (int64, error) {
	if ok, err := tx.d.hasConfigTable(); err != nil || !ok {
		return 0, err
	}
	res, err := tx.exec("DELETE FROM config_entries")
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
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
