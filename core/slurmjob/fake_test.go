package slurmjob

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run fake sacct, squeue and scontrol: shell scripts in a
// directory that is the whole PATH, which print what the test put beside
// them (NAME.out, NAME.err, NAME.rc), log each call with its time and
// arguments (NAME.log), and hang if asked (NAME.hang; or NAME.blockable
// and FAKE_BLOCK in the environment, for one process of several). Their
// tools are named by absolute paths, so that nothing else of PATH is
// found: a missing fake is a missing command.

const testCluster = "testcl"

// Child processes: the test binary run again with SLURMJOB_CHILD set asks
// as the environment says and prints what it was answered.
func TestMain(m *testing.M) {
	if os.Getenv("SLURMJOB_CHILD") != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// child calls Ended from SLURMJOB_GOROUTINES goroutines, each again and
// again until SLURMJOB_FOR has passed since SLURMJOB_START (Unix ns), or,
// with SLURMJOB_STOP, until that file exists, and prints the union of the
// answers as JSON.
func child() int {
	env := func(k string) string { return os.Getenv("SLURMJOB_" + k) }
	interval, _ := time.ParseDuration(env("INTERVAL"))
	timeout, _ := time.ParseDuration(env("TIMEOUT"))
	dur, _ := time.ParseDuration(env("FOR"))
	start, _ := strconv.ParseInt(env("START"), 10, 64)
	n, _ := strconv.Atoi(env("GOROUTINES"))
	a := New(Options{Dir: env("DIR"), Interval: interval, Timeout: timeout})
	time.Sleep(time.Until(time.Unix(0, start)))
	end := time.Unix(0, start).Add(dur)
	seen := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < max(n, 1); g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got := a.Ended(context.Background(), testCluster, strings.Split(env("IDS"), ","))
				mu.Lock()
				for id, s := range got {
					seen[id] = s
				}
				mu.Unlock()
				if stop := env("STOP"); stop != "" {
					if _, err := os.Stat(stop); err == nil {
						return
					}
				} else if !time.Now().Before(end) {
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	b, _ := json.Marshal(seen)
	fmt.Println(string(b))
	return 0
}

// fakes is a directory of fake Slurm commands.
type fakes struct {
	t   *testing.T
	dir string
}

// newFakes makes the fake commands, with the real cluster's defaults:
// sacct fails as without accounting storage, squeue lists nothing,
// scontrol shows PrivateData=none. It sets PATH to them alone and
// SLURM_CLUSTER_NAME to testCluster.
func newFakes(t *testing.T) *fakes {
	t.Helper()
	f := &fakes{t: t, dir: t.TempDir()}
	tool := func(name string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s not found: %v", name, err)
		}
		return p
	}
	date, cat, sleep := tool("date"), tool("cat"), tool("sleep")
	for _, name := range []string{"sacct", "squeue", "scontrol"} {
		script := fmt.Sprintf(`#!/bin/sh
D='%s'
N='%s'
echo "$(%s +%%s%%N) $*" >> "$D/$N.log"
if [ -e "$D/$N.hang" ] || { [ -n "$FAKE_BLOCK" ] && [ -e "$D/$N.blockable" ]; }; then
	%s 60 &
	echo $! >> "$D/$N.pids"
	wait
fi
[ -e "$D/$N.out" ] && %s "$D/$N.out"
[ -e "$D/$N.err" ] && %s "$D/$N.err" >&2
rc=0
[ -e "$D/$N.rc" ] && rc=$(%s "$D/$N.rc")
exit $rc
`, f.dir, name, date, sleep, cat, cat, cat)
		f.write(name, script, 0o755)
	}
	f.set("sacct", "", sacctDisabled, 1)
	f.set("squeue", "", "", 0)
	f.set("scontrol", scontrolNone, "", 0)
	t.Setenv("PATH", f.dir)
	t.Setenv("SLURM_CLUSTER_NAME", testCluster)
	t.Cleanup(f.killHung)
	return f
}

func (f *fakes) write(name, text string, mode os.FileMode) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(text), mode); err != nil {
		f.t.Fatal(err)
	}
}

// set makes name print out and errText and exit with rc.
func (f *fakes) set(name, out, errText string, rc int) {
	f.write(name+".out", out, 0o644)
	f.write(name+".err", errText, 0o644)
	f.write(name+".rc", strconv.Itoa(rc), 0o644)
}

// flag creates (on) or removes the file name in the fakes' directory.
func (f *fakes) flag(name string, on bool) {
	p := filepath.Join(f.dir, name)
	if on {
		f.write(name, "", 0o644)
	} else {
		os.Remove(p)
	}
}

// call is one logged run of a fake.
type call struct {
	at   time.Time
	args string
}

// calls returns name's runs so far.
func (f *fakes) calls(name string) []call {
	b, _ := os.ReadFile(filepath.Join(f.dir, name+".log"))
	var out []call
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		ns, args, ok := strings.Cut(line, " ")
		n, err := strconv.ParseInt(ns, 10, 64)
		if ok && err == nil {
			out = append(out, call{time.Unix(0, n), args})
		}
	}
	return out
}

// resetLog forgets the calls so far.
func (f *fakes) resetLog() {
	for _, name := range []string{"sacct", "squeue", "scontrol"} {
		os.Remove(filepath.Join(f.dir, name+".log"))
	}
}

// hungPIDs are the sleeps that hung fakes started.
func (f *fakes) hungPIDs() []int {
	var pids []int
	for _, name := range []string{"sacct", "squeue", "scontrol"} {
		b, _ := os.ReadFile(filepath.Join(f.dir, name+".pids"))
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// killHung kills what hung fakes left (those of a stopped child).
func (f *fakes) killHung() {
	for _, pid := range f.hungPIDs() {
		if running(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// children starts n child processes asking about ids, with g goroutines
// each, from start for dur; wait returns their answers.
type children struct {
	t    *testing.T
	cmds []*exec.Cmd
	outs []*strings.Builder
}

func startChildren(t *testing.T, n, g int, dir string, interval, timeout time.Duration, ids []string,
	start time.Time, dur time.Duration, extraEnv ...string) *children {
	t.Helper()
	c := &children{t: t}
	for i := 0; i < n; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			"SLURMJOB_CHILD=1",
			"SLURMJOB_DIR="+dir,
			"SLURMJOB_INTERVAL="+interval.String(),
			"SLURMJOB_TIMEOUT="+timeout.String(),
			"SLURMJOB_FOR="+dur.String(),
			"SLURMJOB_START="+strconv.FormatInt(start.UnixNano(), 10),
			"SLURMJOB_GOROUTINES="+strconv.Itoa(g),
			"SLURMJOB_IDS="+strings.Join(ids, ","))
		cmd.Env = append(cmd.Env, extraEnv...)
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c.cmds = append(c.cmds, cmd)
		c.outs = append(c.outs, out)
	}
	t.Cleanup(func() {
		for _, cmd := range c.cmds {
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
	})
	return c
}

func (c *children) wait() []map[string]string {
	c.t.Helper()
	var res []map[string]string
	for i, cmd := range c.cmds {
		if err := cmd.Wait(); err != nil {
			c.t.Fatalf("child %d: %v", i, err)
		}
		m := map[string]string{}
		if err := json.Unmarshal([]byte(c.outs[i].String()), &m); err != nil {
			c.t.Fatalf("child %d printed %q: %v", i, c.outs[i].String(), err)
		}
		res = append(res, m)
	}
	return res
}
