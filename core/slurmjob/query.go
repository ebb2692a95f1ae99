package slurmjob

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/tuning"
)

// One query: sacct for every job, then squeue for those sacct did not
// list (it failed: accounting is off, sacct is missing, slurmdbd does not
// answer). Commands run without a shell, from PATH, with the caller's
// environment (SLURM_CONF), each in a process group of its own that is
// killed when the query's time is up.

// waitDelay bounds how long a killed command's output is waited for (a
// child that escaped the kill may hold the pipe open).
const waitDelay = 200 * time.Millisecond

// invalidJobID is what squeue of Slurm 22.05 writes to stderr, exiting 1,
// when asked about one job that the controller does not know (or hides):
//
//	slurm_load_jobs error: Invalid job id specified
//
// Asked about several, it lists those it knows and exits 0.
const invalidJobID = "Invalid job id specified"

// privacy is what the controller's PrivateData says of other users' jobs.
type privacy int

const (
	privacyUnknown privacy = iota // not asked yet, or scontrol failed
	jobsShown                     // PrivateData without "jobs"
	jobsHidden                    // PrivateData has "jobs" (or a word we do not know)
)

// ask runs one query about ids (valid ids, of LocalCluster's jobs) and
// returns the states Slurm gave ("" for none), Purged for the jobs the
// controller forgot. Bounded by the timeout and ctx; never nil.
func (a *Asker) ask(ctx context.Context, ids []string) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	got := make(map[string]string, len(ids))
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	// sacct gets half the time, so that squeue still runs after a sacct
	// that waited on a slurmdbd that does not answer.
	sctx, scancel := context.WithTimeout(ctx, a.timeout/2)
	out, _, err := run(sctx, "sacct", "-X", "-n", "-P", "-j", strings.Join(ids, ","),
		"--starttime", "now-2days", "-o", "JobIDRaw,State")
	scancel()
	if err == nil {
		states, _ := parseStates(out, want)
		for id, s := range states {
			got[id] = s
		}
	}
	var rest []string
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			rest = append(rest, id)
		}
	}
	if len(rest) > 0 {
		a.squeue(ctx, rest, got)
	}
	return got
}

// squeue asks the controller about ids and puts its answers into got,
// and Purged for the jobs it no longer knows, if it would show them (see
// the package doc).
func (a *Asker) squeue(ctx context.Context, ids []string, got map[string]string) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	// -a: jobs of hidden partitions and of partitions closed to us too,
	// which squeue leaves out by default; -t all: ended jobs too.
	out, errOut, err := run(ctx, "squeue", "-h", "-a", "-t", "all", "-j", strings.Join(ids, ","), "-o", "%A|%T")
	var gone []string
	switch {
	case err == nil:
		states, clean := parseStates(out, want)
		for id, s := range states {
			got[id] = s
		}
		// A missing job is forgotten only if every line was an answer
		// and squeue had nothing to complain about.
		if clean && len(bytes.TrimSpace(errOut)) == 0 {
			for _, id := range ids {
				if _, ok := states[id]; !ok {
					gone = append(gone, id)
				}
			}
		}
	case unknownJob(err, out, errOut):
		if len(ids) == 1 {
			gone = ids
			break
		}
		// Another version may fail the whole list for one unknown job:
		// then one by one.
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			a.squeue(ctx, []string{id}, got)
		}
		return
	}
	if len(gone) > 0 && a.jobsVisible(ctx) {
		for _, id := range gone {
			got[id] = Purged
		}
	}
}

// unknownJob reports whether a failed squeue said that it does not know
// the job: it exited non-zero by itself, printed nothing, and said so.
func unknownJob(err error, out, errOut []byte) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.Exited() && len(bytes.TrimSpace(out)) == 0 &&
		bytes.Contains(errOut, []byte(invalidJobID))
}

// jobsVisible reports whether the controller shows this user every job
// (PrivateData without "jobs"), as scontrol says, once per Asker; false
// while it cannot be told.
func (a *Asker) jobsVisible(ctx context.Context) bool {
	a.mu.Lock()
	p := a.privacy
	a.mu.Unlock()
	if p == privacyUnknown {
		out, _, err := run(ctx, "scontrol", "show", "config")
		if err != nil {
			return false
		}
		p = parsePrivacy(out)
		a.mu.Lock()
		a.privacy = p
		a.mu.Unlock()
	}
	return p == jobsShown
}

// privateDataWords are the PrivateData values other than "jobs"
// (slurm.conf(5)); any other word counts as hiding jobs.
var privateDataWords = map[string]bool{
	"accounts": true, "cloud": true, "events": true, "nodes": true, "partitions": true,
	"reservations": true, "usage": true, "users": true,
}

// parsePrivacy reads the PrivateData line of `scontrol show config`:
//
//	PrivateData             = none
//	PrivateData             = cloud,jobs,usage
func parsePrivacy(out []byte) privacy {
	for _, line := range strings.Split(string(out), "\n") {
		key, val, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(key) != "PrivateData" {
			continue
		}
		val = strings.TrimSpace(val)
		if val == "none" {
			return jobsShown
		}
		for _, w := range strings.Split(val, ",") {
			if !privateDataWords[w] {
				return jobsHidden
			}
		}
		return jobsShown
	}
	return privacyUnknown
}

// parseClusterName reads the ClusterName line of `scontrol show config`
// ("" if there is none):
//
//	ClusterName             = cluster1
func parseClusterName(out []byte) string {
	for _, line := range strings.Split(string(out), "\n") {
		key, val, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(key) == "ClusterName" {
			return strings.TrimSpace(val)
		}
	}
	return ""
}

// parseStates reads the lines "id|state" of `sacct -P -o JobIDRaw,State`
// or `squeue -o %A|%T` and returns the states of the jobs in want (the
// first word: sacct writes "CANCELLED by 1234"). clean is false if a line
// was not of that form. A job listed twice (sacct with a requeued job) is
// over only if every line says so.
func parseStates(out []byte, want map[string]bool) (states map[string]string, clean bool) {
	states = map[string]string{}
	clean = true
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		id, rest, ok := strings.Cut(line, "|")
		state := firstWord(rest)
		if !ok || strings.Contains(rest, "|") || !validID(id) || !validState(state) {
			clean = false
			continue
		}
		if !want[id] {
			continue // sacct -j of an array's job lists its tasks too
		}
		if old, seen := states[id]; seen && !Terminal(old) {
			continue
		}
		states[id] = state
	}
	return states, clean
}

// validState reports whether s looks like a job state: upper-case letters
// and underscores, as Slurm names them.
func validState(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'A' || c > 'Z') && c != '_' {
			return false
		}
	}
	return true
}

// firstWord is s up to its first space.
func firstWord(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i]
	}
	return s
}

// capped keeps the first tuning.SlurmOutputMax bytes written to it and
// swallows the rest, so that a command never blocks on a full pipe.
type capped struct {
	b    []byte
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := tuning.SlurmOutputMax - len(c.b)
	if len(p) > room {
		c.over = true
		c.b = append(c.b, p[:max(room, 0)]...)
	} else {
		c.b = append(c.b, p...)
	}
	return len(p), nil
}

// errTooLong: a command wrote more than tuning.SlurmOutputMax.
var errTooLong = errors.New("slurmjob: command output too long")

// run runs name (found in PATH) with args, no shell, stdin /dev/null, in a
// process group of its own that is killed when ctx ends. err is nil only
// if it exited 0 with a bounded output.
func run(ctx context.Context, name string, args ...string) (stdout, stderr []byte, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var so, se capped
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The whole group: a wrapper script's children too.
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	cmd.WaitDelay = waitDelay
	err = cmd.Run()
	if err == nil && (so.over || se.over) {
		err = errTooLong
	}
	return so.b, se.b, err
}
