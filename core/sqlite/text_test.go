package sqlite

import (
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// TestLargeSourceStoredExactly: a source from tuning.UncopiedSource bytes on
// goes through tirastore_text and is stored as the same TEXT, byte for
// byte; a second program of the same hash keeps the first, as PutProgram
// does for any source.
func TestLargeSourceStoredExactly(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "c.db")
	src := strings.Repeat("for (int i = 0; i < n; i++) { é = \"x\"; }\n", tuning.UncopiedSource/40+1)
	if len(src) < tuning.UncopiedSource {
		t.Fatal("the source is too short for tirastore_text")
	}
	for _, name := range []string{"big", "second"} {
		if err := db.Tx(func(tx *Tx) error {
			return tx.PutProgram(storage.Program{Hash: "h", Name: name, Source: src + name})
		}); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := db.ProgramsByName("big")
	if err != nil || len(ps) != 1 || ps[0].Source != src+"big" {
		t.Fatalf("stored: %d programs, %v (same source: %v)", len(ps), err, len(ps) == 1 && ps[0].Source == src+"big")
	}
	var typ string
	if err := db.queryRow("SELECT typeof(source_code) FROM programs").Scan(&typ); err != nil || typ != "text" {
		t.Fatalf("typeof(source_code) = %q, %v", typ, err)
	}
}

// TestTextFunctionIsDirectOnly: no trigger or view of a database file can
// call tirastore_text (a token names a text only during the engine's own
// statement, and not even then from a trigger).
func TestTextFunctionIsDirectOnly(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t, "c.db")
	if _, err := db.exec("CREATE TRIGGER t AFTER INSERT ON records BEGIN SELECT tirastore_text(1); END"); err != nil {
		t.Fatal(err)
	}
	err := db.Tx(func(tx *Tx) error {
		if err := tx.PutProgram(storage.Program{Hash: "h", Name: "n", Source: "s"}); err != nil {
			return err
		}
		_, err := tx.PutRecord(&storage.Record{Key: "k", ProgramHash: "h", Schedule: "S", ResultJSON: "{}"}, false)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "unsafe use of tirastore_text") {
		t.Fatalf("a trigger called tirastore_text: %v", err)
	}
	var out string
	if err := db.queryRow("SELECT coalesce(tirastore_text(12345), 'none')").Scan(&out); err == nil {
		t.Fatalf("an unknown token gave %q", out)
	}
}
