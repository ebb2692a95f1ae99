package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core"
)

// A merge slice by slice copies every row as it is; a second merge finds
// them the same; another CPU is refused unless allowed.
func TestMergeSlices(t *testing.T) {
	dir := t.TempDir()
	src, err := core.Open(ctx, filepath.Join(dir, "src.db"), core.Options{CPUModel: "X", SourceProject: "B"})
	if err != nil {
		t.Fatal(err)
	}
	for p := 0; p < 9; p++ {
		ms := []core.Measurement{{Schedule: "R(L0,comps=['c1'])", IsLegal: true, ExecutionTimes: core.Times(float64(p))},
			{Schedule: "R(L1,comps=['c1'])", IsLegal: false}}
		if _, err := src.RecordMany(ctx, fmt.Sprintf("p%d", p), fmt.Sprintf("void p%d() {}", p), ms, false); err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	dst := openTemp(t, core.Options{CPUModel: "X"})
	var cursor *MergeCursor
	var added, slices int64
	for {
		r, err := Merge(ctx, dst, filepath.Join(dir, "src.db"), cursor, 5, false, false, false)
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
	r, err := Merge(ctx, dst, filepath.Join(dir, "src.db"), nil, 0, false, false, false)
	if err != nil || r.Same != 18 || r.Added != 0 {
		t.Fatalf("second merge: %+v, %v", r, err)
	}
	other := openTemp(t, core.Options{CPUModel: "Y"})
	if _, err := Merge(ctx, other, filepath.Join(dir, "src.db"), nil, 0, false, false, false); core.KindOf(err) != core.KindPermission {
		t.Fatalf("another CPU: %v; want refused", err)
	}
	if _, err := Merge(ctx, dst, dst.Path(), nil, 0, false, false, false); core.KindOf(err) != core.KindValue {
		t.Fatalf("merge into itself: %v", err)
	}
	// The same file under another name (a hard link, whose lock is another
	// file): refused as well.
	hard := filepath.Join(filepath.Dir(dst.Path()), "hard.db")
	if err := os.Link(dst.Path(), hard); err != nil {
		t.Fatal(err)
	}
	if _, err := Merge(ctx, dst, hard, nil, 0, false, false, false); core.KindOf(err) != core.KindValue ||
		!strings.Contains(err.Error(), "into itself") {
		t.Fatalf("merge of a hard link into itself: %v", err)
	}
}
