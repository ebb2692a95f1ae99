package core

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An export imported slice by slice into an empty store exports to the
// same bytes, in both formats; a second import finds everything the same;
// a changed result is a conflict, written only with overwrite.
func TestImportExportRoundTrip(t *testing.T) {
	src := openTemp(t, Options{CPUModel: "X"})
	for p := 0; p < 5; p++ {
		var ms []Measurement
		for i := 0; i < 7; i++ {
			ms = append(ms, Measurement{Schedule: fmt.Sprintf("S(L0,L1,%d,8,comps=['c1'])", i+1), IsLegal: i%3 != 0})
			if ms[i].IsLegal {
				ms[i].ExecutionTimes = Times(0.5, float64(p)+0.25)
			}
		}
		name := fmt.Sprintf("prog%d", p%3) // names with two sources: <name>_v1, _v2
		if _, err := src.RecordMany(ctx, name, fmt.Sprintf("void f%d() {}", p), ms, false); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	for _, format := range []string{"json", "jsonl"} {
		out, err := src.Export(ctx, filepath.Join(dir, "a."+format), format)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := Open(ctx, filepath.Join(dir, format+".db"), Options{CPUModel: "X"})
		if err != nil {
			t.Fatal(err)
		}
		var total TransferResult
		slices := 0
		for off := int64(0); off >= 0; slices++ {
			r, err := dst.ImportExport(ctx, out, off, 10, false, false)
			if err != nil {
				t.Fatalf("%s at %d: %v", format, off, err)
			}
			total.Programs += r.Programs
			total.Added += r.Added
			off = r.Next
		}
		if total.Programs != 5 || total.Added != 35 || slices < 3 {
			t.Fatalf("%s: %d programs, %d added in %d slices", format, total.Programs, total.Added, slices)
		}
		back, err := dst.Export(ctx, filepath.Join(dir, "b."+format), format)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(out)
		b, _ := os.ReadFile(back)
		if string(a) != string(b) {
			t.Fatalf("%s: export -> import -> export differs", format)
		}
		r, err := dst.ImportExport(ctx, out, 0, 0, false, false)
		if err != nil || r.Same != 35 || r.Added != 0 || r.Next != -1 {
			t.Fatalf("%s: second import %+v, %v", format, r, err)
		}
		dst.Close()
	}
	// Conflicts: the same keys with other times.
	edited := filepath.Join(dir, "edited.jsonl")
	a, _ := os.ReadFile(filepath.Join(dir, "a.jsonl"))
	if err := os.WriteFile(edited, []byte(strings.ReplaceAll(string(a), "0.25", "9.75")), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := src.ImportExport(ctx, edited, 0, 0, false, true)
	if err != nil || r.Conflicts == 0 || r.Replaced != 0 || len(r.ConflictList) != int(r.Conflicts) {
		t.Fatalf("conflicts without overwrite: %+v, %v", r, err)
	}
	if r2, err := src.ImportExport(ctx, edited, 0, 0, true, false); err != nil || r2.Replaced != r.Conflicts {
		t.Fatalf("conflicts with overwrite: %+v, %v", r2, err)
	}
	// A malformed file writes nothing and names the file.
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\n  \"p\": {\"Tiramisu_cpp\": 1}\n}\n"), 0o644)
	n, _ := src.Count(ctx)
	if _, err := src.ImportExport(ctx, bad, 0, 0, false, false); KindOf(err) != KindValue || !strings.Contains(err.Error(), bad) {
		t.Fatalf("malformed: %v", err)
	}
	if m, _ := src.Count(ctx); m != n {
		t.Fatalf("a failed import wrote %d records", m-n)
	}
}
