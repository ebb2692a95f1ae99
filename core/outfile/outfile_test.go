package outfile_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/operator"
	"github.com/tirastore/tirastore/core/outfile"
)

var ctx = context.Background()

// openTemp opens a new store in a test's directory.
func openTemp(t *testing.T) *core.Store {
	t.Helper()
	st, err := core.Open(ctx, filepath.Join(t.TempDir(), "cache.db"), core.Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// dirNames lists the names in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// Every output of a store (export, backup, export_json) refuses the
// database, each file of it and another database with a ValueError naming
// what the path is, before anything is written: the database's bytes and
// the directory's names stay as they were.
func TestOutputsRefuseTheDatabaseAndItsFiles(t *testing.T) {
	st := openTemp(t)
	m := core.Measurement{Schedule: "S(L0,L1,4,8,comps=['c1'])", IsLegal: true, ExecutionTimes: core.Times(0.5)}
	if _, err := st.Record(ctx, "blur", "void blur() { /* c */ }", m, false); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ConfigPut(ctx, "", "cpu", "op", "k", "1", true); err != nil {
		t.Fatal(err)
	}
	db := st.Path()
	dir := filepath.Dir(db)
	lockPath := st.LockPath()
	// Files that exist: a lock ticket, a hard link to the database, another
	// database.
	if err := os.WriteFile(filepath.Join(dir, ".lock_node1_42_abcdefgh"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(db, filepath.Join(dir, "hardlink.db")); err != nil {
		t.Fatal(err)
	}
	other, err := core.Open(ctx, filepath.Join(dir, "other.db"), core.Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	cases := map[string]string{
		db:                                    "is the database itself",
		filepath.Join(dir, "hardlink.db"):     "itself under another name",
		lockPath:                              "is the lock file of the database",
		lockPath + ".break":                   "is the break lock of the database",
		lockPath + ".stale.node1.42.abcdefgh": "is a lock moved aside by a breaker of the database",
		filepath.Join(dir, ".lock_node1_42_abcdefgh"): "is a lock ticket file of the database",
		filepath.Join(dir, ".lock_node2_7_zzzzzzzz"):  "is a lock ticket file of the database",
		db + "-journal":                     "is the journal of the database",
		db + "-wal":                         "is the write-ahead log of the database",
		db + "-shm":                         "is the shared-memory index of the database",
		filepath.Join(dir, "other.db"):      "is an existing SQLite database",
		filepath.Join(dir, "other.db.lock"): "is the lock file of a TiraStore database in",
		"/dev/null":                         "is a character device",
	}
	before, _ := os.ReadFile(db)
	names := dirNames(t, dir)
	for out, want := range cases {
		calls := map[string]func() error{
			"export":      func() error { _, _, err := operator.Export(ctx, st, out, "json", false); return err },
			"jsonl":       func() error { _, _, err := operator.Export(ctx, st, out, "jsonl", false); return err },
			"export_json": func() error { _, _, err := st.ConfigExportJSON(ctx, "", out); return err },
			"backup":      func() error { _, err := st.Backup(ctx, out); return err },
		}
		for name, call := range calls {
			if name == "backup" && strings.HasSuffix(out, "other.db") {
				want := "is another TiraStore database"
				if err := call(); core.KindOf(err) != core.KindValue || !strings.Contains(err.Error(), want) {
					t.Errorf("%s to %s: %v, want a ValueError saying %q", name, out, err, want)
				}
				continue
			}
			err := call()
			if core.KindOf(err) != core.KindValue || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was written") {
				t.Errorf("%s to %s: %v, want a ValueError saying %q", name, out, err, want)
			}
		}
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(before, after) {
		t.Fatal("the database changed")
	}
	if got := dirNames(t, dir); strings.Join(got, " ") != strings.Join(names, " ") {
		t.Fatalf("names changed: %v, were %v", got, names)
	}
	// Ordinary outputs still work, and a backup may replace an earlier
	// backup of the same database (every night into one name).
	for i := 0; i < 2; i++ {
		if _, err := st.Backup(ctx, filepath.Join(dir, "snap")+"/"); err != nil {
			t.Fatalf("backup %d: %v", i, err)
		}
	}
	if _, _, err := operator.Export(ctx, st, filepath.Join(dir, "dump.json"), "json", false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ConfigExportJSON(ctx, "", filepath.Join(dir, "seed.json")); err != nil {
		t.Fatal(err)
	}
	// A backup in use (its lock file exists) is not replaced.
	if err := os.WriteFile(filepath.Join(dir, "snap", "cache.db.lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Backup(ctx, filepath.Join(dir, "snap")+"/"); core.KindOf(err) != core.KindValue || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("backup over a database in use: %v", err)
	}
}

// Check (the C method output_create's check) spares every database
// given, skips server URLs, and refuses the files the call reads.
func TestCheckDatabasesAndInputs(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	in := filepath.Join(dir, "dump.json")
	if err := os.WriteFile(in, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dbs := []string{a, "postgresql://db.example.org/tira", b}
	for out, want := range map[string]string{
		a + ".lock":                  "is the lock file of the database " + a,
		filepath.Join(dir, "a.lock"): "",
		a:                            "is the database itself",
		b + ".lock":                  "is the lock file of the database " + b,
		b + "-journal":               "is the journal of the database " + b,
		in:                           "is the file this call reads",
		filepath.Join(dir, "c.json"): "",
	} {
		got, err := outfile.Check(outfile.Conflicts, out, dbs, []string{in})
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", out, err)
		case want == "" && got != out:
			t.Errorf("%s: resolved to %s", out, got)
		case want != "" && (core.KindOf(err) != core.KindValue || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", out, err, want)
		}
	}
}

// An output is written through a temporary file created in its directory
// and renamed over it: an abort leaves nothing, a commit only the output.
func TestOutputCommitAndAbort(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "plot.png")
	o, err := outfile.Create(outfile.Plot, out, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.File.WriteString("png"); err != nil {
		t.Fatal(err)
	}
	o.Abort()
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("abort left %v", names)
	}
	o, err = outfile.Create(outfile.Plot, out, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.File.WriteString("png"); err != nil {
		t.Fatal(err)
	}
	if err := o.Commit(); err != nil {
		t.Fatal(err)
	}
	o.Abort() // after the commit: nothing
	if b, err := os.ReadFile(out); err != nil || string(b) != "png" {
		t.Fatalf("committed: %q, %v", b, err)
	}
	if names := dirNames(t, dir); strings.Join(names, " ") != "plot.png" {
		t.Fatalf("commit left %v", names)
	}
}
