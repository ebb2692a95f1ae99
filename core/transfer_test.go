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
	// The exports of an empty database import as nothing.
	empty := openTemp(t, Options{CPUModel: "X"})
	for _, format := range []string{"json", "jsonl"} {
		out, err := empty.Export(ctx, filepath.Join(dir, "empty."+format), format)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := empty.ImportExport(ctx, out, 0, 0, false, false); err != nil || r.Programs != 0 || r.Next != -1 {
			t.Fatalf("empty %s: %+v, %v", format, r, err)
		}
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

// A merge slice by slice copies every row as it is; a second merge finds
// them the same; another CPU is refused unless allowed.
func TestMergeFromSlices(t *testing.T) {
	dir := t.TempDir()
	src, err := Open(ctx, filepath.Join(dir, "src.db"), Options{CPUModel: "X", SourceProject: "B"})
	if err != nil {
		t.Fatal(err)
	}
	for p := 0; p < 9; p++ {
		ms := []Measurement{{Schedule: "R(L0,comps=['c1'])", IsLegal: true, ExecutionTimes: Times(float64(p))},
			{Schedule: "R(L1,comps=['c1'])", IsLegal: false}}
		if _, err := src.RecordMany(ctx, fmt.Sprintf("p%d", p), fmt.Sprintf("void p%d() {}", p), ms, false); err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	dst := openTemp(t, Options{CPUModel: "X"})
	var cursor *MergeCursor
	var added, slices int64
	for {
		r, err := dst.MergeFrom(ctx, filepath.Join(dir, "src.db"), cursor, 5, false, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if r.Programs == 0 {
			break
		}
		added, slices, cursor = added+r.Added, slices+1, r.NextCursor
	}
	if added != 18 || slices != 3 {
		t.Fatalf("added %d in %d slices; want 18 in 3", added, slices)
	}
	got, err := dst.Lookup(ctx, "p4", "void p4() {}", "R(L0,comps=['c1'])")
	if err != nil || got == nil || got.SourceProject != "B" {
		t.Fatalf("a merged row: %+v, %v; want source_project B kept", got, err)
	}
	r, err := dst.MergeFrom(ctx, filepath.Join(dir, "src.db"), nil, 0, false, false, false)
	if err != nil || r.Same != 18 || r.Added != 0 {
		t.Fatalf("second merge: %+v, %v", r, err)
	}
	other := openTemp(t, Options{CPUModel: "Y"})
	if _, err := other.MergeFrom(ctx, filepath.Join(dir, "src.db"), nil, 0, false, false, false); KindOf(err) != KindPermission {
		t.Fatalf("another CPU: %v; want refused", err)
	}
	if _, err := dst.MergeFrom(ctx, dst.Path(), nil, 0, false, false, false); KindOf(err) != KindValue {
		t.Fatalf("merge into itself: %v", err)
	}
}
