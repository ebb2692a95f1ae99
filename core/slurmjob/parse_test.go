package slurmjob

import (
	"reflect"
	"testing"
)

// The outputs below were captured from the one-node Slurm 22.05 cluster of
// tests/slurm/cluster.py (accounting storage none, MinJobAge=30), with the
// command lines of query.go; the jobs were `sbatch --wrap 'sleep ...'`,
// then scancel'ed, `scontrol suspend`ed, timed out (--time=1), failed
// (exit 2), held, or left to be purged.

// squeueMixed: `squeue -h -a -t all -j 1,16,17,26,27,28,29,30,31,32 -o
// %A|%T` with a forgotten job (1, left out), a pending job (26,
// --begin=now+1hour), a held one (27), an array job (28, whose tasks 28_0
// and 28_1 have the raw ids 31 and 32, and 28_2 the array's own), a job
// just scancel'ed whose batch script ignores SIGTERM (29, COMPLETING
// until KillWait) and a suspended one (17).
const squeueMixed = `29|COMPLETING
26|PENDING
27|PENDING
16|RUNNING
31|RUNNING
32|RUNNING
28|RUNNING
30|RUNNING
17|SUSPENDED
`

// squeueEnded: `squeue -h -a -t all -j 1,16,17,22,23,24,25 -o %A|%T`
// with a job timed out (22, --time=1), one cancelled (23), one completed
// (24), one failed (25, exit 2), beside running and suspended ones and a
// forgotten one (1, left out).
const squeueEnded = `23|CANCELLED
24|COMPLETED
25|FAILED
16|RUNNING
17|SUSPENDED
22|TIMEOUT
`

// squeuePurgedOne is squeue's stderr (exit status 1, nothing on stdout)
// asked about one job that the controller no longer knows; asked about two
// such jobs, it printed nothing and exited 0.
const squeuePurgedOne = "slurm_load_jobs error: Invalid job id specified\n"

// sacctDisabled is sacct's stderr (exit status 1) on a cluster without
// accounting storage.
const sacctDisabled = "Slurm accounting storage is disabled\n"

// sacctListed is sacct's -P output in the form sacct(1) documents (the
// test cluster has no accounting to capture it from): a cancelled job's
// state names who cancelled it.
const sacctListed = `101|CANCELLED by 0
102|RUNNING
103|TIMEOUT
104|OUT_OF_MEMORY
`

// scontrolPrivate and scontrolNone are the PrivateData line of `scontrol
// show config` (the same as root and as another user) and its neighbours,
// with PrivateData=usage,jobs,cloud in slurm.conf and without PrivateData.
const (
	scontrolPrivate = "PriorityType            = priority/basic\nPrivateData             = cloud,jobs,usage\nProctrackType           = proctrack/linuxproc\n"
	scontrolNone    = "PriorityType            = priority/basic\nPrivateData             = none\nProctrackType           = proctrack/linuxproc\n"
)

func set(ids ...string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func TestParseSqueue(t *testing.T) {
	got, clean := parseStates([]byte(squeueMixed), set("1", "16", "17", "26", "27", "28", "29", "31"))
	want := map[string]string{"16": "RUNNING", "17": "SUSPENDED", "26": "PENDING", "27": "PENDING",
		"28": "RUNNING", "29": "COMPLETING", "31": "RUNNING"}
	if !clean || !reflect.DeepEqual(got, want) {
		t.Fatalf("parseStates = %v, %v; want %v, clean", got, clean, want)
	}
	got, clean = parseStates([]byte(squeueEnded), set("1", "16", "17", "22", "23", "24", "25"))
	want = map[string]string{"16": "RUNNING", "17": "SUSPENDED", "22": "TIMEOUT", "23": "CANCELLED",
		"24": "COMPLETED", "25": "FAILED"}
	if !clean || !reflect.DeepEqual(got, want) {
		t.Fatalf("parseStates = %v, %v; want %v, clean", got, clean, want)
	}
	ended := map[string]bool{}
	for id, s := range got {
		if Terminal(s) {
			ended[id] = true
		}
	}
	if !reflect.DeepEqual(ended, set("22", "23", "24", "25")) {
		t.Fatalf("ended %v", ended)
	}
}

func TestParseSacct(t *testing.T) {
	got, clean := parseStates([]byte(sacctListed), set("101", "102", "103", "104"))
	want := map[string]string{"101": "CANCELLED", "102": "RUNNING", "103": "TIMEOUT", "104": "OUT_OF_MEMORY"}
	if !clean || !reflect.DeepEqual(got, want) {
		t.Fatalf("parseStates = %v, %v", got, clean)
	}
	// A requeued job listed twice is over only if every line says so.
	got, _ = parseStates([]byte("7|NODE_FAIL\n7|RUNNING\n8|RUNNING\n8|PREEMPTED\n9|FAILED\n9|CANCELLED by 5\n"), set("7", "8", "9"))
	if !reflect.DeepEqual(got, map[string]string{"7": "RUNNING", "8": "RUNNING", "9": "CANCELLED"}) {
		t.Fatalf("duplicates: %v", got)
	}
}

func TestParseDefensive(t *testing.T) {
	for _, out := range []string{
		"JOBID|STATE\n",               // a header
		"12x|CANCELLED\n",             // squeue reads 12x as 12: never ours
		"6_0|CANCELLED\n",             // %i's form, not %A's
		"1|cancelled\n",               // not a state
		"1|CANCELLED|extra\n",         // a third column
		"1 CANCELLED\n",               // no separator
		"|CANCELLED\n",                // no id
		"1|\n",                        // no state
		"007|CANCELLED\n",             // not as Slurm prints ids
		"99999999999|CANCELLED\n",     // beyond 32 bits
		"1|" + string(rune(0)) + "\n", // binary
	} {
		got, clean := parseStates([]byte(out), set("1", "12", "6", "7", "99999999999"))
		if clean || len(got) != 0 {
			t.Errorf("%q: %v, clean %v", out, got, clean)
		}
	}
	// Lines of jobs not asked about (sacct -j of an array lists its
	// tasks) are skipped, but the output stays clean.
	got, clean := parseStates([]byte("5|RUNNING\n6|COMPLETED\n\n"), set("6"))
	if !clean || !reflect.DeepEqual(got, map[string]string{"6": "COMPLETED"}) {
		t.Fatalf("%v %v", got, clean)
	}
}

func TestParsePrivacy(t *testing.T) {
	for out, want := range map[string]privacy{
		scontrolPrivate:               jobsHidden,
		scontrolNone:                  jobsShown,
		"PrivateData = usage,cloud\n": jobsShown,
		"PrivateData = all\n":         jobsHidden, // a word we do not know
		"PrivateData\n":               privacyUnknown,
		"":                            privacyUnknown,
	} {
		if got := parsePrivacy([]byte(out)); got != want {
			t.Errorf("%q: %v, want %v", out, got, want)
		}
	}
}

func TestValidID(t *testing.T) {
	for _, id := range []string{"1", "42", "4294967295", "67043328"} {
		if !validID(id) {
			t.Errorf("%q refused", id)
		}
	}
	for _, id := range []string{"", "0", "007", "4294967296", "12345678901", "12x", "12_3", "12+1",
		"-1", "-j", " 1", "1,2", "1;true", "１"} {
		if validID(id) {
			t.Errorf("%q accepted", id)
		}
	}
}

func TestTerminal(t *testing.T) {
	for _, s := range []string{"BOOT_FAIL", "CANCELLED", "CANCELLED by 0", "COMPLETED", "COMPLETING",
		"DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT", "REVOKED", Purged} {
		if !Terminal(s) {
			t.Errorf("%s: not terminal", s)
		}
	}
	for _, s := range []string{"PENDING", "RUNNING", "SUSPENDED", "STOPPED", "CONFIGURING", "RESIZING",
		"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD", "SIGNALING",
		"STAGE_OUT", "POWER_UP_NODE", "LAUNCH_FAILED", "UPDATE_DB", "", "cancelled", "UNKNOWN"} {
		if Terminal(s) {
			t.Errorf("%s: terminal", s)
		}
	}
}

func TestParseClusterName(t *testing.T) {
	for out, want := range map[string]string{
		scontrolNone: "",
		"AuthType                = auth/munge\nClusterName             = cluster1\nCompleteWait            = 0 sec\n": "cluster1",
		"ClusterName=c2": "c2",
		"":               "",
	} {
		if got := parseClusterName([]byte(out)); got != want {
			t.Errorf("parseClusterName(%q) = %q, want %q", out, got, want)
		}
	}
}
