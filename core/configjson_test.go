package core

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An import is one transaction, remembered; a once import of the same file
// is skipped, and reports a change of the file; a malformed file writes
// nothing.
func TestConfigImportOnceAndExport(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{CPUModel: "X"})
	dir := t.TempDir()
	path := filepath.Join(dir, "mm.json")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"gpu:0|mm|a": {"bm": 64, "s": NaN}, "gpu:0|mm|b|c": [1, 2]}`)
	res, err := st.ConfigImportJSON(ctx, "", path, true, false)
	if err != nil || !res.Found || res.Skipped || res.Added != 2 || res.Entries != 2 {
		t.Fatalf("first import: %+v, %v", res, err)
	}
	if e, err := st.ConfigGet(ctx, "", "gpu:0", "mm", "b|c", false); err != nil || e == nil || e.ValueJSON != "[1,2]" {
		t.Fatalf("the call_key keeps its bars: %+v, %v", e, err)
	}
	if res, err = st.ConfigImportJSON(ctx, "", path, true, false); err != nil || !res.Skipped || res.Changed || res.Added != 0 {
		t.Fatalf("second once import: %+v, %v", res, err)
	}
	write(`{"gpu:0|mm|a": 1, "gpu:0|mm|new": 2}`)
	res, err = st.ConfigImportJSON(ctx, "", path, true, false)
	if err != nil || !res.Skipped || !res.Changed || !strings.Contains(res.Notice, "changed since it was imported") {
		t.Fatalf("changed file: %+v, %v", res, err)
	}
	if res, err = st.ConfigImportJSON(ctx, "", path, false, false); err != nil || res.Added != 1 || res.Kept != 1 {
		t.Fatalf("explicit import: %+v, %v", res, err)
	}
	if res, err = st.ConfigImportJSON(ctx, "", path, false, true); err != nil || res.Replaced != 2 || res.Added != 0 {
		t.Fatalf("explicit import with overwrite: %+v, %v", res, err)
	}
	for _, bad := range []string{`[1]`, `{"a|b|c": 1, "nobars": 2}`, `{"a|b|c": `, `{"a\u0000|b|c": 1}`} {
		write(bad)
		n, _ := st.ConfigLen(ctx, "")
		if _, err := st.ConfigImportJSON(ctx, "", path, false, true); KindOf(err) != KindValue || !strings.Contains(err.Error(), path) {
			t.Errorf("import of %s: %v; want a ValueError naming the file", bad, err)
		}
		if m, _ := st.ConfigLen(ctx, ""); m != n {
			t.Errorf("a failed import of %s changed the table (%d -> %d entries)", bad, n, m)
		}
	}
	if _, err := st.ConfigImportJSON(ctx, "", filepath.Join(dir, "none.json"), false, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if res, err := st.ConfigImportJSON(ctx, "", filepath.Join(dir, "none.json"), true, false); err != nil || res.Found {
		t.Fatalf("missing file, once: %+v, %v", res, err)
	}
	out := filepath.Join(dir, "out.json")
	got, n, err := st.ConfigExportJSON(ctx, "", out)
	if err != nil || got != out || n != 3 {
		t.Fatalf("export: %q, %d, %v", got, n, err)
	}
	b, _ := os.ReadFile(out)
	if string(b) != `{"gpu:0|mm|a": 1, "gpu:0|mm|b|c": [1, 2], "gpu:0|mm|new": 2}` {
		t.Fatalf("export wrote %s", b)
	}
	if res, err := st.ConfigImportJSON(ctx, "", out, true, false); err != nil || !res.Skipped || res.Changed {
		t.Fatalf("an exported file counts as imported: %+v, %v", res, err)
	}
}

// A get answered from one store's cache sees another store's put at once
// (two stores: two caches, as two processes).
func TestConfigGetSeesAnotherStoresPut(t *testing.T) {
	t.Parallel()
	a := openTemp(t, Options{CPUModel: "X"})
	b, err := Open(ctx, a.Path(), Options{CPUModel: "X"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	value := func() string {
		e, err := a.ConfigGet(ctx, "", "d", "op", "k", false)
		if err != nil {
			t.Fatal(err)
		}
		if e == nil {
			return "<none>"
		}
		return e.ValueJSON
	}
	for i, step := range []func() error{
		func() error { return nil },
		func() error { _, err := b.ConfigPut(ctx, "", "d", "op", "k", "1", true); return err },
		func() error { _, err := b.ConfigPut(ctx, "", "d", "op", "k", "2", true); return err },
		func() error { _, err := b.ConfigDelete(ctx, "", "d", "op", "k"); return err },
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

// Each seed file is imported into the namespace asked for (ejKernel's
// <opname>.json into the namespace of its operation), once by its path;
// an export writes one namespace, and the error of a bad value names the
// namespace.
func TestConfigNamespacesImportExport(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{CPUModel: "X"})
	dir := t.TempDir()
	seed := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fa := seed("flash-attn.json", `{"gpu:0|fa@v1|s": {"bm": 64}, "gpu:0|fa@v1|t": 1}`)
	mm := seed("matmul.json", `{"gpu:0|fa@v1|s": "matmul's"}`)
	if _, err := st.ConfigPut(ctx, "", "gpu:0", "fa@v1", "s", `"default"`, true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns, path string
		added    int64
	}{{"flash-attn", fa, 2}, {"matmul", mm, 1}} {
		res, err := st.ConfigImportJSON(ctx, c.ns, c.path, true, false)
		if err != nil || res.Added != c.added || res.Kept != 0 || res.Skipped {
			t.Fatalf("import of %s into %s: %+v, %v", c.path, c.ns, res, err)
		}
	}
	// Once by the path: a once import into another namespace skips it.
	if res, err := st.ConfigImportJSON(ctx, "other", fa, true, false); err != nil || !res.Skipped {
		t.Fatalf("a second once import of %s: %+v, %v", fa, res, err)
	}
	value := func(ns string) string {
		e, err := st.ConfigGet(ctx, ns, "gpu:0", "fa@v1", "s", false)
		if err != nil || e == nil || e.Namespace != ns {
			t.Fatalf("get in %q: %+v, %v", ns, e, err)
		}
		return e.ValueJSON
	}
	if got := []string{value(""), value("flash-attn"), value("matmul")}; !slices.Equal(got, []string{`"default"`, `{"bm":64}`, `"matmul's"`}) {
		t.Fatalf("the key's values in \"\", flash-attn, matmul: %q", got)
	}
	for ns, want := range map[string]int64{"": 1, "flash-attn": 2, "matmul": 1, "other": 0} {
		if n, err := st.ConfigLen(ctx, ns); err != nil || n != want {
			t.Errorf("len of %q: %d, %v; want %d", ns, n, err, want)
		}
	}
	all, err := st.ConfigEntries(ctx, ConfigFilter{AllNamespaces: true})
	if err != nil || len(all) != 4 || all[0].Namespace != "" || all[3].Namespace != "matmul" {
		t.Fatalf("every namespace's entries: %v, %v", all, err)
	}
	out := filepath.Join(dir, "out.json")
	if _, n, err := st.ConfigExportJSON(ctx, "flash-attn", out); err != nil || n != 2 {
		t.Fatalf("export of flash-attn: %d, %v", n, err)
	}
	if b, _ := os.ReadFile(out); string(b) != `{"gpu:0|fa@v1|s": {"bm": 64}, "gpu:0|fa@v1|t": 1}` {
		t.Fatalf("export of flash-attn wrote %s", b)
	}
	if _, n, err := st.ConfigExportJSON(ctx, "none", out); err != nil || n != 0 {
		t.Fatalf("export of an empty namespace: %d, %v", n, err)
	}
	if n, err := st.ConfigClear(ctx, "flash-attn"); err != nil || n != 2 {
		t.Fatalf("clear of flash-attn: %d, %v", n, err)
	}
	if ok, err := st.ConfigDelete(ctx, "matmul", "gpu:0", "fa@v1", "s"); err != nil || !ok {
		t.Fatalf("delete in matmul: %v, %v", ok, err)
	}
	if value("") != `"default"` {
		t.Fatal("the namespace \"\" lost its entry")
	}
	// Messages name the namespace; a bad namespace is a ValueError.
	_, err = st.ConfigPut(ctx, "flash-attn", "gpu:0", "fa@v1", "s", `{"a":`, true)
	if KindOf(err) != KindValue || !strings.Contains(err.Error(), "config gpu:0|fa@v1|s in namespace flash-attn: the value") {
		t.Fatalf("a bad value in flash-attn: %v", err)
	}
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	if _, err = st.ConfigPut(ctx, "flash-attn", "gpu:0", "fa@v1", "s", deep, true); KindOf(err) != KindValue ||
		!strings.Contains(err.Error(), "config gpu:0|fa@v1|s in namespace flash-attn: the value nests") {
		t.Fatalf("a too deep value in flash-attn: %v", err)
	}
	for _, call := range []func() error{
		func() error { _, err := st.ConfigGet(ctx, "a\x00b", "d", "o", "k", false); return err },
		func() error { _, err := st.ConfigPut(ctx, "a\x00b", "d", "o", "k", "1", true); return err },
		func() error { _, err := st.ConfigLen(ctx, "a\x00b"); return err },
		func() error { _, err := st.ConfigClear(ctx, "\xed\xa0\x80"); return err },
		func() error { _, err := st.ConfigEntries(ctx, ConfigFilter{Namespace: "a\x00b"}); return err },
		func() error { _, err := st.ConfigImportJSON(ctx, "a\x00b", fa, false, false); return err },
		func() error { _, _, err := st.ConfigExportJSON(ctx, "a\x00b", out); return err },
	} {
		if err := call(); KindOf(err) != KindValue || !strings.Contains(err.Error(), "namespace") {
			t.Errorf("a bad namespace: %v; want a ValueError naming it", err)
		}
	}
}
