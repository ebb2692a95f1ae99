package schedule

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

// TestTablesUpToDate regenerates the tables with the local python3 and
// compares them with the checked-in tables_gen.go. The contract is CPython
// 3.11 (Unicode 14); with another Python version the character database
// differs, so the test is skipped rather than failed.
func TestTablesUpToDate(t *testing.T) {
	v, err := pytest.Version(t)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pythonVersion, v+".") {
		t.Skipf("python3 is %s; tables come from CPython %s", v, pythonVersion)
	}
	want, err := exec.Command(pytest.Python(t), "gen_tables.py", "-o", "-").Output()
	if err != nil {
		t.Fatalf("gen_tables.py: %v", err)
	}
	got, err := os.ReadFile("tables_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("tables_gen.go is stale: run `go generate ./core/schedule/` with CPython 3.11")
	}
}

// TestTablesWellFormed checks the invariants inRanges relies on.
func TestTablesWellFormed(t *testing.T) {
	for name, table := range map[string][]runeRange{
		"space": spaceRanges, "decimal": decimalRanges, "word": wordRanges, "printable": printableRanges,
	} {
		for i, r := range table {
			if r[0] > r[1] || (i > 0 && r[0] <= table[i-1][1]+1) {
				t.Errorf("%s[%d] = %v is out of order", name, i, r)
			}
		}
	}
	if unicodeVersion != "14.0.0" {
		t.Errorf("tables are Unicode %s, the contract is CPython 3.11 = Unicode 14.0.0", unicodeVersion)
	}
}
