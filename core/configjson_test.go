package core

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An import is one transaction, remembered; a once import of the same file
// is skipped, and reports a change of the file; a malformed file writes
// nothing.
func TestConfigImportOnceAndExport(t *testing.T) {
	st := openTemp(t, Options{CPUModel: "X"})
	dir := t.TempDir()
	path := filepath.Join(dir, "mm.json")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"gpu:0|mm|a": {"bm": 64, "s": NaN}, "gpu:0|mm|b|c": [1, 2]}`)
	res, err := st.ConfigImportJSON(ctx, path, true, false)
	if err != nil || !res.Found || res.Skipped || res.Added != 2 || res.Entries != 2 {
		t.Fatalf("first import: %+v, %v", res, err)
	}
	if e, err := st.ConfigGet(ctx, "gpu:0", "mm", "b|c"); err != nil || e == nil || e.ValueJSON != "[1,2]" {
		t.Fatalf("the call_key keeps its bars: %+v, %v", e, err)
	}
	if res, err = st.ConfigImportJSON(ctx, path, true, false); err != nil || !res.Skipped || res.Changed || res.Added != 0 {
		t.Fatalf("second once import: %+v, %v", res, err)
	}
	write(`{"gpu:0|mm|a": 1, "gpu:0|mm|new": 2}`)
	res, err = st.ConfigImportJSON(ctx, path, true, false)
	if err != nil || !res.Skipped || !res.Changed || !strings.Contains(res.Notice, "changed since it was imported") {
		t.Fatalf("changed file: %+v, %v", res, err)
	}
	if res, err = st.ConfigImportJSON(ctx, path, false, false); err != nil || res.Added != 1 || res.Kept != 1 {
		t.Fatalf("explicit import: %+v, %v", res, err)
	}
	if res, err = st.ConfigImportJSON(ctx, path, false, true); err != nil || res.Replaced != 2 || res.Added != 0 {
		t.Fatalf("explicit import with overwrite: %+v, %v", res, err)
	}
	for _, bad := range []string{`[1]`, `{"a|b|c": 1, "nobars": 2}`, `{"a|b|c": `, `{"a\u0000|b|c": 1}`} {
		write(bad)
		n, _ := st.ConfigLen(ctx)
		if _, err := st.ConfigImportJSON(ctx, path, false, true); KindOf(err) != KindValue || !strings.Contains(err.Error(), path) {
			t.Errorf("import of %s: %v; want a ValueError naming the file", bad, err)
		}
		if m, _ := st.ConfigLen(ctx); m != n {
			t.Errorf("a failed import of %s changed the table (%d -> %d entries)", bad, n, m)
		}
	}
	if _, err := st.ConfigImportJSON(ctx, filepath.Join(dir, "none.json"), false, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if res, err := st.ConfigImportJSON(ctx, filepath.Join(dir, "none.json"), true, false); err != nil || res.Found {
		t.Fatalf("missing file, once: %+v, %v", res, err)
	}
	out := filepath.Join(dir, "out.json")
	got, n, err := st.ConfigExportJSON(ctx, out)
	if err != nil || got != out || n != 3 {
		t.Fatalf("export: %q, %d, %v", got, n, err)
	}
	b, _ := os.ReadFile(out)
	if string(b) != `{"gpu:0|mm|a": 1, "gpu:0|mm|b|c": [1, 2], "gpu:0|mm|new": 2}` {
		t.Fatalf("export wrote %s", b)
	}
	if res, err := st.ConfigImportJSON(ctx, out, true, false); err != nil || !res.Skipped || res.Changed {
		t.Fatalf("an exported file counts as imported: %+v, %v", res, err)
	}
}

// A get answered from one store's cache sees another store's put at once
// (two stores: two caches, as two processes).
func TestConfigGetSeesAnotherStoresPut(t *testing.T) {
	a := openTemp(t, Options{CPUModel: "X"})
	b, err := Open(ctx, a.Path(), Options{CPUModel: "X"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	value := func() string {
		e, err := a.ConfigGet(ctx, "d", "op", "k")
		if err != nil {
			t.Fatal(err)
		}
		if e == nil {
			return "<none>"
		}
		return e.ValueJSON
	}
	// A stamped answer stays fresh until the other store writes.
	if _, err := b.ConfigPut(ctx, "d", "op", "s", "0", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.ConfigValue(ctx, "d", "op", "s"); err != nil {
		t.Fatal(err)
	}
	_, stamp, err := a.ConfigValue(ctx, "d", "op", "s") // from the cache
	if err != nil || stamp == 0 || !a.ConfigFresh(stamp) {
		t.Fatalf("a cached hit: stamp %d fresh %v, %v", stamp, a.ConfigFresh(stamp), err)
	}
	if _, err := b.ConfigPut(ctx, "d", "op", "other", "1", true); err != nil {
		t.Fatal(err)
	}
	if a.ConfigFresh(stamp) {
		t.Fatal("a stamp stayed fresh after another store's put")
	}
	for i, step := range []func() error{
		func() error { return nil },
		func() error { _, err := b.ConfigPut(ctx, "d", "op", "k", "1", true); return err },
		func() error { _, err := b.ConfigPut(ctx, "d", "op", "k", "2", true); return err },
		func() error { _, err := b.ConfigDelete(ctx, "d", "op", "k"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
		want := []string{"<none>", "1", "2", "<none>"}[i]
		for j := 0; j < 3; j++ { // the second and third from the cache
			if got := value(); got != want {
				t.Fatalf("step %d, get %d: %s, want %s", i, j, got, want)
			}
		}
	}
}
