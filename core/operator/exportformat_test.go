package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core"
)

// An export imported slice by slice into an empty store exports to the
// same bytes, in both formats; a second import finds everything the same;
// a changed result is a conflict, written only with overwrite.
func TestImportExportRoundTrip(t *testing.T) {
	src := openTemp(t, core.Options{CPUModel: "X"})
	for p := 0; p < 5; p++ {
		var ms []core.Measurement
		for i := 0; i < 7; i++ {
			ms = append(ms, core.Measurement{Schedule: fmt.Sprintf("S(L0,L1,%d,8,comps=['c1'])", i+1), IsLegal: i%3 != 0})
			if ms[i].IsLegal {
				ms[i].ExecutionTimes = core.Times(0.5, float64(p)+0.25)
			}
		}
		name := fmt.Sprintf("prog%d", p%3) // names with two sources: <name>_v1, _v2
		if _, err := src.RecordMany(ctx, name, fmt.Sprintf("void f%d() {}", p), ms, false); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	for _, format := range []string{"json", "jsonl"} {
		out, _, err := Export(ctx, src, filepath.Join(dir, "a."+format), format, false)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := core.Open(ctx, filepath.Join(dir, format+".db"), core.Options{CPUModel: "X"})
		if err != nil {
			t.Fatal(err)
		}
		var total TransferResult
		slices := 0
		for off := int64(0); off >= 0; slices++ {
			r, err := Import(ctx, dst, out, off, 10, false, false)
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
		back, _, err := Export(ctx, dst, filepath.Join(dir, "b."+format), format, false)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(out)
		b, _ := os.ReadFile(back)
		if string(a) != string(b) {
			t.Fatalf("%s: export -> import -> export differs", format)
		}
		r, err := Import(ctx, dst, out, 0, 0, false, false)
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
	r, err := Import(ctx, src, edited, 0, 0, false, true)
	if err != nil || r.Conflicts == 0 || r.Replaced != 0 || len(r.ConflictList) != int(r.Conflicts) {
		t.Fatalf("conflicts without overwrite: %+v, %v", r, err)
	}
	if r2, err := Import(ctx, src, edited, 0, 0, true, false); err != nil || r2.Replaced != r.Conflicts {
		t.Fatalf("conflicts with overwrite: %+v, %v", r2, err)
	}
	// The exports of an empty database import as nothing.
	empty := openTemp(t, core.Options{CPUModel: "X"})
	for _, format := range []string{"json", "jsonl"} {
		out, _, err := Export(ctx, empty, filepath.Join(dir, "empty."+format), format, false)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := Import(ctx, empty, out, 0, 0, false, false); err != nil || r.Programs != 0 || r.Next != -1 {
			t.Fatalf("empty %s: %+v, %v", format, r, err)
		}
	}
	// A malformed file writes nothing and names the file.
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\n  \"p\": {\"Tiramisu_cpp\": 1}\n}\n"), 0o644)
	n, _ := src.Count(ctx)
	if _, err := Import(ctx, src, bad, 0, 0, false, false); core.KindOf(err) != core.KindValue || !strings.Contains(err.Error(), bad) {
		t.Fatalf("malformed: %v", err)
	}
	if m, _ := src.Count(ctx); m != n {
		t.Fatalf("a failed import wrote %d records", m-n)
	}
}

// Export refuses an unknown format; a name with two sources is exported
// as <name>_v1 and <name>_v2, in the original's JSON Lines layout.
func TestExportFormats(t *testing.T) {
	st := openTemp(t, core.Options{})
	if _, _, err := Export(ctx, st, filepath.Join(t.TempDir(), "x"), "xml", false); core.KindOf(err) != core.KindValue || err.Error() != "fmt must be 'json' or 'jsonl', got 'xml'" {
		t.Fatalf("bad format: %v", err)
	}
	st.Record(ctx, "é", "a", core.Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: core.Times(1)}, false)
	st.Record(ctx, "é", "b", core.Measurement{Schedule: sched, IsLegal: false}, false)
	out, _, err := Export(ctx, st, filepath.Join(t.TempDir(), "x.jsonl"), "jsonl", false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `{"é_v1": {"Tiramisu_cpp": `) {
		t.Fatalf("jsonl: %q", b)
	}
}

// An export with runs carries each record's runs and their contexts, and
// an import stores them: the other database's runs say where and how the
// times were taken. Runs that do not add up are refused, naming the entry.
func TestExportImportRuns(t *testing.T) {
	src := openTemp(t, core.Options{CPUModel: "X", Tools: map[string]string{"tiramisu": "1.2"}})
	if _, err := src.Record(ctx, "p", "void p() {}", core.Measurement{Schedule: "R(L0,comps=['c'])", IsLegal: true,
		ExecutionTimes: core.Times(1, 2, 3)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Record(ctx, "p", "void p() {}", core.Measurement{Schedule: "R(L1,comps=['c'])"}, false); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plain, _, err := Export(ctx, src, filepath.Join(dir, "plain.json"), "json", false)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(plain); strings.Contains(string(b), `"runs"`) {
		t.Fatalf("an export without runs has them:\n%s", b)
	}
	out, _, err := Export(ctx, src, filepath.Join(dir, "runs.json"), "json", true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), `"runs"`) || !strings.Contains(string(b), `"tiramisu": "1.2"`) {
		t.Fatalf("an export with runs:\n%s", b)
	}
	dst := openTemp(t, core.Options{CPUModel: "X"})
	if _, err := Import(ctx, dst, out, 0, 0, false, false); err != nil {
		t.Fatal(err)
	}
	for _, sched := range []string{"R(L0,comps=['c'])", "R(L1,comps=['c'])"} {
		want, err := src.Runs(ctx, "p", "void p() {}", sched)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dst.Runs(ctx, "p", "void p() {}", sched)
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: runs %+v, %v; want %+v", sched, got, err, want)
		}
		for i := range want {
			if got[i].Count != want[i].Count || got[i].Context == nil || got[i].Context.Fingerprint() != want[i].Context.Fingerprint() ||
				got[i].At != want[i].At {
				t.Errorf("%s run %d: %+v, want %+v", sched, i, got[i], want[i])
			}
		}
	}
	bad := strings.Replace(string(b), `"count": 3`, `"count": 2`, 1)
	if bad == string(b) {
		t.Fatal("the export has no run of three times to break")
	}
	badPath := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badPath, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	other := openTemp(t, core.Options{CPUModel: "X"})
	_, err = Import(ctx, other, badPath, 0, 0, false, false)
	if core.KindOf(err) != core.KindValue || !strings.Contains(err.Error(), "schedules_list[0]: runs count 2 times, execution_times holds 3") {
		t.Fatalf("runs that do not add up: %v", err)
	}
}

// A syntax error in an export is reported at its byte in the file (the
// parser's offsets are into one program's value), in both formats, and
// CheckImport gives the same error for the first program.
func TestImportSyntaxErrorAtItsByte(t *testing.T) {
	src := openTemp(t, core.Options{CPUModel: "X"})
	for p := 0; p < 3; p++ {
		if _, err := src.RecordMany(ctx, fmt.Sprintf("p%d", p), fmt.Sprintf("void f%d() {}", p),
			[]core.Measurement{{Schedule: "R(L0,comps=['c1'])", IsLegal: false}}, false); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	for _, format := range []string{"json", "jsonl"} {
		out, _, err := Export(ctx, src, filepath.Join(dir, "a."+format), format, false)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		for _, program := range []int{0, 2} { // the first, which CheckImport reads, and the last
			at := strings.Index(string(b), fmt.Sprintf(`"p%d"`, program))
			at += strings.Index(string(b[at:]), "false")
			bad := append(append(append([]byte{}, b[:at]...), '@'), b[at+5:]...)
			path := filepath.Join(dir, fmt.Sprintf("bad%d.%s", program, format))
			if err := os.WriteFile(path, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			dst := openTemp(t, core.Options{CPUModel: "X"})
			_, err := Import(ctx, dst, path, 0, 0, false, false)
			want := fmt.Sprintf("%s is not a TiraStore export: Expecting value at byte %d", path, at)
			if err == nil || err.Error() != want {
				t.Fatalf("%s, program %d: %v; want %q", format, program, err, want)
			}
			cerr := CheckImport(path)
			if program == 0 && (cerr == nil || cerr.Error() != want) || program != 0 && cerr != nil {
				t.Fatalf("%s, program %d: CheckImport: %v", format, program, cerr)
			}
		}
		// A bad escape in a program's name: at the backslash.
		at := strings.Index(string(b), `"p1"`)
		bad := strings.Replace(string(b), `"p1"`, `"p\q"`, 1)
		path := filepath.Join(dir, "badname."+format)
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = Import(ctx, openTemp(t, core.Options{CPUModel: "X"}), path, 0, 0, false, false)
		if want := fmt.Sprintf("at byte %d", at+2); err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Fatalf("%s, a bad name: %v; want the error %s", format, err, want)
		}
	}
}
