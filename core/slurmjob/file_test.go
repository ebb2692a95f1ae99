package slurmjob

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// What another user (or an accident) may have put at the answer file's
// name: each turns the sharing off, without a hang or an error, and is
// left as it was; the process asks Slurm on its own.

const planted = "not yours\n"

// hostile is one thing planted at the name, and how to tell it is intact.
type hostile struct {
	name   string
	plant  func(t *testing.T, path, dir string) // makes it
	intact func(t *testing.T, path, dir string) bool
}

// target is the file a planted link or hard link names: a file of ours
// that the Asker would overwrite if it followed the name.
func target(dir string) string { return filepath.Join(dir, "victim") }

func plantVictim(t *testing.T, dir string) {
	if err := os.WriteFile(target(dir), []byte(planted), 0o600); err != nil {
		t.Fatal(err)
	}
}

func victimIntact(dir string) bool {
	b, err := os.ReadFile(target(dir))
	return err == nil && string(b) == planted
}

func contentIntact(path string, mode os.FileMode) bool {
	b, err := os.ReadFile(path)
	st, serr := os.Lstat(path)
	return err == nil && serr == nil && string(b) == planted && st.Mode() == mode
}

var hostiles = []hostile{
	{"symlink",
		func(t *testing.T, path, dir string) {
			plantVictim(t, dir)
			if err := os.Symlink(target(dir), path); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, path, dir string) bool { return victimIntact(dir) }},
	{"dangling symlink",
		func(t *testing.T, path, dir string) {
			if err := os.Symlink(target(dir), path); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, path, dir string) bool {
			_, err := os.Lstat(target(dir))
			return os.IsNotExist(err)
		}},
	{"FIFO",
		func(t *testing.T, path, dir string) {
			if err := unix.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, path, dir string) bool {
			st, err := os.Lstat(path)
			return err == nil && st.Mode()&os.ModeNamedPipe != 0
		}},
	{"directory",
		func(t *testing.T, path, dir string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, path, dir string) bool {
			st, err := os.Lstat(path)
			return err == nil && st.IsDir()
		}},
	{"group-readable",
		func(t *testing.T, path, dir string) {
			if err := os.WriteFile(path, []byte(planted), 0o640); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, 0o640)
		},
		func(t *testing.T, path, dir string) bool { return contentIntact(path, 0o640) }},
	{"world-writable",
		func(t *testing.T, path, dir string) {
			if err := os.WriteFile(path, []byte(planted), 0o666); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, 0o666)
		},
		func(t *testing.T, path, dir string) bool { return contentIntact(path, 0o666) }},
	{"hard link",
		func(t *testing.T, path, dir string) {
			plantVictim(t, dir)
			if err := os.Link(target(dir), path); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, path, dir string) bool { return victimIntact(dir) }},
	{"another user's",
		func(t *testing.T, path, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			if err := os.WriteFile(path, []byte(planted), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, path, dir string) bool {
			var st unix.Stat_t
			return contentIntact(path, 0o600) && unix.Lstat(path, &st) == nil && st.Uid == 65534
		}},
}

func TestHostileFile(t *testing.T) {
	for _, h := range hostiles {
		t.Run(h.name, func(t *testing.T) {
			f := newFakes(t)
			f.set("squeue", "7|CANCELLED\n", "", 0)
			const interval = 300 * time.Millisecond
			a, dir := newTestAsker(t, interval, 2*time.Second)
			path := filepath.Join(dir, fileName(testCluster))
			h.plant(t, path, dir)
			t0 := time.Now()
			got := a.Ended(context.Background(), testCluster, []string{"7"})
			if el := time.Since(t0); el > 2*time.Second {
				t.Fatalf("Ended took %v", el)
			}
			if !reflect.DeepEqual(got, map[string]string{"7": "CANCELLED"}) {
				t.Fatalf("Ended = %v", got)
			}
			if !a.view(testCluster).off {
				t.Fatal("still sharing")
			}
			if !h.intact(t, path, dir) {
				t.Fatal("the planted file was changed")
			}
			// On its own, the process still asks at most once per interval.
			f.set("squeue", "8|RUNNING\n", "", 0)
			for end := time.Now().Add(3 * interval); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				a.Ended(context.Background(), testCluster, []string{"8"})
			}
			if n := len(f.calls("squeue")); n < 2 || n > 5 {
				t.Fatalf("%d queries in 3 intervals", n)
			}
			if !h.intact(t, path, dir) {
				t.Fatal("the planted file was changed")
			}
		})
	}
}

// The negative control: an Asker that followed links would write our
// answers into the symlink's target, and the test above would see it.
func TestHostileSymlinkControl(t *testing.T) {
	f := newFakes(t)
	f.set("squeue", "7|CANCELLED\n", "", 0)
	a, dir := newTestAsker(t, time.Hour, 2*time.Second)
	a.openFlags = fileFlags &^ unix.O_NOFOLLOW
	path := filepath.Join(dir, fileName(testCluster))
	plantVictim(t, dir)
	if err := os.Symlink(target(dir), path); err != nil {
		t.Fatal(err)
	}
	a.Ended(context.Background(), testCluster, []string{"7"})
	if victimIntact(dir) {
		t.Fatal("the control did not write through the link: the test cannot tell")
	}
	b, _ := os.ReadFile(target(dir))
	if !bytes.Contains(b, []byte(`"CANCELLED"`)) {
		t.Fatalf("victim: %q", b)
	}
}

// A content that does not parse (a crash in the middle of a write, another
// version) reads as empty and is rewritten; sharing goes on.
func TestGarbageFile(t *testing.T) {
	for name, content := range map[string][]byte{
		"text":       []byte(planted),
		"truncated":  []byte(`{"v":1,"last":1,"jobs":{"7":{"state":"CANC`),
		"version":    []byte(`{"v":99,"jobs":{"7":{"state":"CANCELLED"}}}`),
		"bad entry":  []byte(`{"v":1,"jobs":{"7x":{"state":"CANCELLED"},"8":{"state":"rm -rf"}}}`),
		"binary":     {0, 1, 2, 0xff},
		"over limit": append([]byte(`{"v":1,"jobs":{}}`), bytes.Repeat([]byte(" "), 1<<20)...),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakes(t)
			f.set("squeue", "7|RUNNING\n8|RUNNING\n", "", 0)
			a, dir := newTestAsker(t, time.Hour, 2*time.Second)
			path := filepath.Join(dir, fileName(testCluster))
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			if got := a.Ended(context.Background(), testCluster, []string{"7", "8"}); got != nil {
				t.Fatalf("Ended = %v", got)
			}
			if a.view(testCluster).off {
				t.Fatal("sharing turned off")
			}
			b, _ := os.ReadFile(path)
			d := parseDoc(b)
			if d.Jobs["7"].State != "RUNNING" || len(b) > 4096 {
				t.Fatalf("file not rewritten: %.200q", b)
			}
		})
	}
}

// The file stays small: old jobs are pruned, and at most SlurmMaxJobs kept.
func TestPrune(t *testing.T) {
	now := time.Now()
	jobs := map[string]entry{
		"1": {Wanted: now.Add(-time.Hour).UnixNano()},
		"2": {Wanted: now.UnixNano()},
		"3": {State: "CANCELLED", Checked: now.Add(-time.Hour).UnixNano(), Wanted: now.Add(-time.Minute).UnixNano()},
	}
	prune(jobs, now, time.Second)
	if _, ok := jobs["1"]; ok || len(jobs) != 2 {
		t.Fatalf("prune: %v", jobs)
	}
	if ids := dueIDs(jobs, now, time.Second); !reflect.DeepEqual(ids, []string{"2"}) {
		t.Fatalf("due %v", ids)
	}
}
