package nodelocal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInspect: Inspect finds a database's node-local files, says what is
// wrong with planted ones, counts a spool's entries and changes nothing.
func TestInspect(t *testing.T) {
	d, err := Private()
	if err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(t.TempDir(), "cache.db.lock") // names no other test's files
	gate, spool, changes := d.Join(Name(GatePrefix, lockPath)), d.Join(Name(SpoolPrefix, lockPath)), d.Join(Name(ChangeLogPrefix, lockPath))
	t.Cleanup(func() {
		for _, p := range []string{gate, spool, changes} {
			os.RemoveAll(p)
		}
	})
	byRole := func() map[string]FileState {
		m := map[string]FileState{}
		for _, f := range Inspect(lockPath) {
			m[f.Role] = f
		}
		return m
	}
	got := byRole()
	if len(got) != 4 || !got["private directory"].Present || got["private directory"].Problem != "" {
		t.Fatalf("fresh: %+v", got)
	}
	for _, r := range []string{"gate file", "spool", "change log"} {
		if got[r].Present || got[r].Problem != "" {
			t.Fatalf("%s of a database nobody opened: %+v", r, got[r])
		}
	}
	// Planted: a symlink at the gate, a file of mode 0644 as the change
	// log; a spool of this user holding two requests.
	must(t, os.Symlink("/etc/passwd", gate))
	must(t, os.WriteFile(changes, nil, 0o600))
	must(t, os.Chmod(changes, 0o644))
	must(t, os.Mkdir(spool, 0o700))
	for _, n := range []string{"a.req", "b.res"} {
		must(t, os.WriteFile(filepath.Join(spool, n), nil, 0o600))
	}
	got = byRole()
	if g := got["gate file"]; !g.Present || !strings.Contains(g.Problem, "a symbolic link") || g.Path != gate || g.Serves != "node queue" {
		t.Fatalf("gate: %+v", g)
	}
	if c := got["change log"]; !strings.Contains(c.Problem, "mode 0644") {
		t.Fatalf("change log: %+v", c)
	}
	if s := got["spool"]; s.Problem != "" || s.Entries != 2 {
		t.Fatalf("spool: %+v", s)
	}
	if fi, err := os.Lstat(gate); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the planted link was changed: %v %v", fi, err)
	}
	// A spool replaced by a link is refused without being listed.
	must(t, os.RemoveAll(spool))
	must(t, os.Symlink(t.TempDir(), spool))
	if s := byRole()["spool"]; !strings.Contains(s.Problem, "a symbolic link") || s.Entries != 0 {
		t.Fatalf("linked spool: %+v", s)
	}
}
