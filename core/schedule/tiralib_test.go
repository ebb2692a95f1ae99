package schedule

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

// tiralibSchedules returns the lines of testdata/tiralib_schedules.txt:
// schedules printed by TiraLib's own action classes (the file's header says
// how they were made).
func tiralibSchedules(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "tiralib_schedules.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// TestTiraLibSchedules checks that every schedule TiraLib prints can be
// recorded: it validates as printed and normalized, its normalization is
// idempotent, and the reference agrees on both.
func TestTiraLibSchedules(t *testing.T) {
	in := pyIn{Schedules: tiralibSchedules(t), Programs: []string{}}
	seen := map[string]int{}
	for _, s := range in.Schedules {
		n := Normalize(s)
		if ok, reason := Validate(s); !ok {
			t.Errorf("Validate(%q): %s", s, reason)
		}
		if ok, reason := Validate(n); !ok {
			t.Errorf("Validate(Normalize(%q)) = Validate(%q): %s", s, n, reason)
		}
		if nn := Normalize(n); nn != n {
			t.Errorf("Normalize not idempotent: %q -> %q -> %q", s, n, nn)
		}
		for _, seg := range strings.Split(n, "|") {
			seen[leadingName(seg)]++
		}
	}
	// Every action TiraLib has, so that a truncated file does not pass.
	var missing []string
	for name := range transformations {
		if seen[name] == 0 {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("no schedule with %v in the file", missing)
	}

	var out pyOut
	pytest.RunJSON(t, referenceScript(t), in, &out)
	if len(out.Norm) != len(in.Schedules) {
		t.Fatalf("the reference returned %d results for %d schedules", len(out.Norm), len(in.Schedules))
	}
	if len(out.Idem) != 0 {
		t.Errorf("the reference normalize_schedule is not idempotent on %q", out.Idem)
	}
	for i, s := range in.Schedules {
		if n := Normalize(s); n != out.Norm[i] {
			t.Errorf("Normalize(%q) = %q, reference %q", s, n, out.Norm[i])
		}
		for _, v := range [][2]any{out.Valid[i], out.NormValid[i]} {
			if v[0] != true || v[1] != "" {
				t.Errorf("the reference rejects %q (or its normalization): %v", s, v)
			}
		}
	}
	t.Logf("%d schedules; actions: %v", len(in.Schedules), seen)
}
