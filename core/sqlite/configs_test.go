package sqlite

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/storage"
)

// The config table as the first layout created it, before namespaces,
// with its index: the DDL of databases written then.
const (
	oldConfigTable = `CREATE TABLE IF NOT EXISTS config_entries (
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
	oldConfigIndex = `CREATE INDEX IF NOT EXISTS idx_config_entries_device_op_id
    ON config_entries (device, op_id)`
)

// oldConfigDB is a database whose config table has the first layout, with
// n rows (one of them too deeply nested to read back).
func oldConfigDB(t *testing.T, n int) (*DB, string) {
	t.Helper()
	db, path := newDB(t, "old.db")
	for _, ddl := range []string{oldConfigTable, oldConfigIndex} {
		if _, err := db.exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		v := fmt.Sprint(i)
		if i == 1 {
			v = strings.Repeat("[", limits.MaxValueDepth+1) + strings.Repeat("]", limits.MaxValueDepth+1)
		}
		k := fmt.Sprintf("gpu:%d|op|k%03d", i%2, i)
		if _, err := db.exec(`INSERT INTO config_entries VALUES (?, ?, 'op', ?, ?, 'h', 'u', 'c', 'u')`,
			k, fmt.Sprintf("gpu:%d", i%2), fmt.Sprintf("k%03d", i), v); err != nil {
			t.Fatal(err)
		}
	}
	return db, path
}

// layoutOf is the config table's layout, and the names in sqlite_master
// that mention it.
func layoutOf(t *testing.T, db *DB) (configLayout, []string) {
	t.Helper()
	l, err := db.configLayout()
	if err != nil {
		t.Fatal(err)
	}
	names, err := db.strings(`SELECT type || ' ' || name FROM sqlite_master WHERE tbl_name LIKE 'config_entries%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	return l, names
}

// allConfigs lists every entry as "namespace/key=value".
func allConfigs(t *testing.T, db *DB) []string {
	t.Helper()
	var out []string
	if err := db.EachConfig(storage.ConfigFilter{AllNamespaces: true}, func(e *storage.ConfigEntry) error {
		out = append(out, e.Namespace+"/"+e.Key+"="+e.ValueJSON[:min(len(e.ValueJSON), 3)])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A database of the first layout is read as it is, its rows in the
// namespace "", and no read changes it; the first write rebuilds the
// table into the current layout with every row, as a new database's.
func TestOldConfigTableReadThenRebuiltByTheFirstWrite(t *testing.T) {
	t.Parallel()
	const n = 40
	db, path := oldConfigDB(t, n)
	before := allConfigs(t, db)
	if len(before) != n || before[0] != "/gpu:0|op|k000=0" {
		t.Fatalf("old rows read as %d entries starting %q; want %d in the namespace \"\"", len(before), before[:1], n)
	}
	if e, err := db.GetConfig("", "gpu:1|op|k003"); err != nil || e == nil || e.ValueJSON != "3" || e.Namespace != "" || e.Device != "gpu:1" {
		t.Fatalf("GetConfig of an old row: %+v, %v", e, err)
	}
	if e, err := db.GetConfig("flash-attn", "gpu:1|op|k003"); err != nil || e != nil {
		t.Fatalf("an old row found in another namespace: %+v, %v", e, err)
	}
	if c, err := db.CountConfigs(""); err != nil || c != n {
		t.Fatalf("CountConfigs(\"\") = %d, %v; want %d", c, err, n)
	}
	if c, err := db.CountConfigs("x"); err != nil || c != 0 {
		t.Fatalf("CountConfigs(x) = %d, %v; want 0", c, err)
	}
	var gpu1 int
	if err := db.EachConfig(storage.ConfigFilter{Device: "gpu:1"}, func(*storage.ConfigEntry) error { gpu1++; return nil }); err != nil || gpu1 != n/2 {
		t.Fatalf("EachConfig of gpu:1: %d, %v", gpu1, err)
	}
	if err := db.EachConfig(storage.ConfigFilter{Namespace: "x"}, func(e *storage.ConfigEntry) error {
		return fmt.Errorf("listed %s in namespace x", e.Key)
	}); err != nil {
		t.Fatal(err)
	}
	c, err := db.CheckTables()
	if err != nil || c.DeepCount != 1 || c.DeepValues[0] != fmt.Sprintf("config gpu:1|op|k001 (%d levels)", limits.MaxValueDepth+1) {
		t.Fatalf("check of the old table: %+v, %v", c, err)
	}
	if l, names := layoutOf(t, db); l != configKeyed || !slices.Contains(names, "index idx_config_entries_device_op_id") {
		t.Fatalf("the reads changed the old table: layout %d, %q", l, names)
	}

	// A second connection (another process) reads the old layout, then
	// sees the rebuild that this one commits.
	other, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if e, err := other.GetConfig("", "gpu:0|op|k000"); err != nil || e == nil {
		t.Fatalf("the other connection's read: %+v, %v", e, err)
	}

	put := &storage.ConfigEntry{Namespace: "flash-attn", Key: "gpu:0|op|k000", Device: "gpu:0", OpID: "op", CallKey: "k000",
		ValueJSON: `"fa"`, Hostname: "h2", Username: "u2", CreationDate: "c2", UpdateDate: "u2"}
	if err := db.Tx(func(tx *Tx) error {
		ok, err := tx.PutConfig(put, false)
		if err == nil && !ok {
			err = errors.New("the put wrote nothing")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	l, names := layoutOf(t, db)
	want := []string{"index " + ConfigIndex, "index sqlite_autoindex_config_entries_1", "table config_entries"}
	if l != configContexts || !slices.Equal(names, want) {
		t.Fatalf("after the first write: layout %d, %q; want %d, %q", l, names, configContexts, want)
	}
	after := allConfigs(t, db)
	if wantAll := append(slices.Clone(before), `flash-attn/gpu:0|op|k000="fa`); !slices.Equal(after, wantAll) {
		t.Fatalf("after the rebuild: %q; want the %d old rows and the new one", after, n)
	}
	e, err := db.GetConfig("", "gpu:1|op|k003")
	if err != nil || e == nil || *e != (storage.ConfigEntry{Key: "gpu:1|op|k003", Device: "gpu:1", OpID: "op", CallKey: "k003",
		ValueJSON: "3", Hostname: "h", Username: "u", CreationDate: "c", UpdateDate: "u"}) {
		t.Fatalf("an old row after the rebuild: %+v, %v", e, err)
	}
	// The DDL is a new database's, byte for byte.
	fresh, _ := newDB(t, "fresh.db")
	if err := fresh.Tx(func(tx *Tx) error { _, err := tx.PutConfig(put, false); return err }); err != nil {
		t.Fatal(err)
	}
	ddl := func(d *DB) []string {
		s, err := d.strings(`SELECT sql FROM sqlite_master WHERE tbl_name = 'config_entries' AND sql IS NOT NULL ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got, want := ddl(db), ddl(fresh); !slices.Equal(got, want) {
		t.Fatalf("rebuilt DDL %q; a new database's %q", got, want)
	}
	if ic, err := db.strings("PRAGMA integrity_check"); err != nil || !slices.Equal(ic, []string{"ok"}) {
		t.Fatalf("integrity after the rebuild: %q, %v", ic, err)
	}
	// The other connection reads the new layout at once.
	if e, err := other.GetConfig("flash-attn", "gpu:0|op|k000"); err != nil || e == nil || e.ValueJSON != `"fa"` {
		t.Fatalf("the other connection after the rebuild: %+v, %v", e, err)
	}
	if c, err := other.CountConfigs(""); err != nil || c != n {
		t.Fatalf("the other connection counts %d, %v in the namespace \"\"; want %d", c, err, n)
	}
}

// Every config write rebuilds an old table (a delete and a clear too),
// inside its transaction: a write that fails after the rebuild leaves
// the old table as it was.
func TestOldConfigTableRebuildIsTheWritesTransaction(t *testing.T) {
	t.Parallel()
	const n = 5
	for _, c := range []struct {
		name  string
		write func(tx *Tx) (int64, error)
		after int // entries left in the namespace ""
	}{
		{"put", func(tx *Tx) (int64, error) {
			ok, err := tx.PutConfig(&storage.ConfigEntry{Key: "gpu:0|op|k000", ValueJSON: "9", Device: "gpu:0", OpID: "op", CallKey: "k000"}, true)
			return map[bool]int64{true: 1}[ok], err
		}, n},
		{"delete", func(tx *Tx) (int64, error) {
			ok, err := tx.DeleteConfig("", "gpu:0|op|k000")
			return map[bool]int64{true: 1}[ok], err
		}, n - 1},
		{"clear", func(tx *Tx) (int64, error) { return tx.ClearConfigs("") }, 0},
		{"clear of another namespace", func(tx *Tx) (int64, error) { n, err := tx.ClearConfigs("x"); return n + 1, err }, n},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, _ := oldConfigDB(t, n)
			before := allConfigs(t, db)
			boom := errors.New("boom")
			err := db.Tx(func(tx *Tx) error {
				if k, err := c.write(tx); err != nil || k == 0 {
					return fmt.Errorf("the write: %d, %v", k, err)
				}
				if l, _ := tx.d.configLayout(); l != configContexts {
					return fmt.Errorf("the write did not rebuild the table: layout %d", l)
				}
				return boom // the write fails after the rebuild
			})
			if !errors.Is(err, boom) {
				t.Fatal(err)
			}
			if l, names := layoutOf(t, db); l != configKeyed || !slices.Contains(names, "index idx_config_entries_device_op_id") ||
				slices.Contains(names, "table "+configKeyedTable) {
				t.Fatalf("a failed write left layout %d, %q", l, names)
			}
			if got := allConfigs(t, db); !slices.Equal(got, before) {
				t.Fatalf("a failed write left %q; want %q", got, before)
			}
			if err := db.Tx(func(tx *Tx) error { _, err := c.write(tx); return err }); err != nil {
				t.Fatal(err)
			}
			if l, _ := layoutOf(t, db); l != configContexts {
				t.Fatalf("a write that committed left layout %d", l)
			}
			if got, _ := db.CountConfigs(""); got != int64(c.after) {
				t.Fatalf("%d entries after the %s; want %d", got, c.name, c.after)
			}
		})
	}
}

// A database without a config table: a delete or clear creates none.
func TestConfigDeleteCreatesNoTable(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "none.db")
	if err := db.Tx(func(tx *Tx) error {
		if ok, err := tx.DeleteConfig("", "k"); err != nil || ok {
			return fmt.Errorf("delete: %v, %v", ok, err)
		}
		_, err := tx.ClearConfigs("")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if l, names := layoutOf(t, db); l != configNone || len(names) != 0 {
		t.Fatalf("layout %d, %q", l, names)
	}
}

// The second layout (namespaced, without a context column) is read with
// every entry of unknown context, and its first config write adds the
// column (an ALTER TABLE in the write's transaction: a failed write
// leaves the table as it was).
func TestSecondConfigLayoutGainsContexts(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "c.db")
	if err := db.Tx(func(tx *Tx) error {
		_, err := tx.Exec(`CREATE TABLE config_entries (namespace TEXT NOT NULL DEFAULT '', key TEXT NOT NULL,
  device TEXT NOT NULL, op_id TEXT NOT NULL, call_key TEXT NOT NULL, value_json TEXT NOT NULL, hostname TEXT NOT NULL,
  username TEXT NOT NULL, creation_date TEXT NOT NULL, update_date TEXT NOT NULL, PRIMARY KEY (namespace, key))`)
		if err == nil {
			_, err = tx.Exec(`INSERT INTO config_entries VALUES ('ns', 'd|o|k', 'd', 'o', 'k', '1', 'h', 'u', 'c', 'u')`)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if l, _ := db.configLayout(); l != configNamespaced {
		t.Fatalf("layout %d, want the second", l)
	}
	e, err := db.GetConfig("ns", "d|o|k")
	if err != nil || e == nil || e.Context != "" || e.ValueJSON != "1" {
		t.Fatalf("read of the second layout: %+v, %v", e, err)
	}
	boom := errors.New("boom")
	put := func(tx *Tx) error {
		_, err := tx.PutConfig(&storage.ConfigEntry{Namespace: "ns", Key: "d|o|k2", Device: "d", OpID: "o", CallKey: "k2",
			ValueJSON: "2", Hostname: "h", Username: "u", CreationDate: "c", UpdateDate: "u", Context: "fp"}, false)
		return err
	}
	if err := db.Tx(func(tx *Tx) error {
		if err := put(tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if l, _ := db.configLayout(); l != configNamespaced {
		t.Fatalf("a failed write left layout %d", l)
	}
	if err := db.Tx(put); err != nil {
		t.Fatal(err)
	}
	if l, _ := db.configLayout(); l != configContexts {
		t.Fatalf("after a write: layout %d, want the current", l)
	}
	if e, err := db.GetConfig("ns", "d|o|k2"); err != nil || e == nil || e.Context != "fp" {
		t.Fatalf("the written entry: %+v, %v", e, err)
	}
	if e, err := db.GetConfig("ns", "d|o|k"); err != nil || e == nil || e.Context != "" {
		t.Fatalf("the old entry: %+v, %v", e, err)
	}
}
