package sqlite

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The journal rule (tira_journal_verdict, through InspectJournal) on real
// files of other users: each case is a journal beside a database, with
// owners, groups and modes set as root.
func TestJournalRule(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files of other users")
	}
	const other, group = 65534, 4242
	type file struct {
		uid, gid int
		mode     os.FileMode
	}
	cases := []struct {
		name    string
		db, j   file
		dirMode os.FileMode
		make    func(t *testing.T, j string) // instead of a regular journal
		want    int
	}{
		{"the database owner's", file{0, 0, 0o644}, file{0, 0, 0o644}, 0o1777, nil, JournalTrusted},
		{"another user's, 0644 database", file{0, 0, 0o644}, file{other, other, 0o644}, 0o1777, nil, JournalOwner},
		{"another user's, 0666 database (a mixed fleet)", file{0, 0, 0o666}, file{other, other, 0o666}, 0o1777, nil, JournalTrusted},
		{"the owner's, more writable than the database", file{0, 0, 0o644}, file{0, 0, 0o666}, 0o1777, nil, JournalMode},
		{"a group member's, group database, group directory", file{0, group, 0o664}, file{other, group, 0o664}, 0o2775, nil, JournalTrusted},
		{"the group's, group database, world-writable directory", file{0, group, 0o664}, file{other, group, 0o664}, 0o3777, nil, JournalOwner},
		{"another group's, group database", file{0, group, 0o664}, file{other, other, 0o664}, 0o2775, nil, JournalOwner},
		{"a second name of another file", file{0, 0, 0o644}, file{0, 0, 0o644}, 0o1777, func(t *testing.T, j string) {
			if err := os.WriteFile(j, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(j, j+".other"); err != nil {
				t.Fatal(err)
			}
		}, JournalLinks},
		{"a FIFO", file{0, 0, 0o644}, file{other, other, 0o644}, 0o1777, func(t *testing.T, j string) {
			if err := unix.Mkfifo(j, 0o644); err != nil {
				t.Fatal(err)
			}
		}, JournalNotRegular},
		{"a symbolic link to the owner's file", file{0, 0, 0o644}, file{0, 0, 0o644}, 0o1777, func(t *testing.T, j string) {
			if err := os.WriteFile(j+".real", []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(j+".real", j); err != nil {
				t.Fatal(err)
			}
		}, JournalNotRegular},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "c.db")
			j := JournalPath(db)
			if err := os.WriteFile(db, []byte("db"), 0o600); err != nil {
				t.Fatal(err)
			}
			must(t, os.Chown(db, c.db.uid, c.db.gid), os.Chmod(db, c.db.mode))
			if c.make != nil {
				c.make(t, j)
			} else {
				if err := os.WriteFile(j, []byte{0xd9, 1, 2}, 0o600); err != nil {
					t.Fatal(err)
				}
				must(t, os.Chown(j, c.j.uid, c.j.gid), os.Chmod(j, c.j.mode))
			}
			must(t, os.Chown(dir, 0, c.db.gid), os.Chmod(dir, c.dirMode))
			got, err := InspectJournal(db)
			if err != nil || got == nil {
				t.Fatalf("InspectJournal = %v, %v", got, err)
			}
			if got.Verdict != c.want {
				t.Errorf("verdict %d (%s), want %d", got.Verdict, got.Why(), c.want)
			}
			if (got.Verdict == JournalTrusted) != (got.Why() == "") {
				t.Errorf("Why() = %q for verdict %d", got.Why(), got.Verdict)
			}
		})
	}
}

func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
