package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"time"
)

// workerSpec is what a worker process is told to do.
type workerSpec struct {
	Role  string    `json:"role"` // "plan" (run Steps) or "throughput"
	Impl  string    `json:"impl"`
	DB    string    `json:"db"`
	Steps []step    `json:"steps,omitempty"`
	TP    *tpSpec   `json:"tp,omitempty"`
	Beam  *beamSpec `json:"beam,omitempty"`
}

// tpSpec is one throughput worker's share: Ops operations, a fraction
// RecordFrac of them records of new keys (tagWorkerBase+WID, 0, 1, ...),
// the rest lookups, of which MissFrac look for absent keys and the others
// for random records of the preloaded pool.
type tpSpec struct {
	WID int `json:"wid"`
	// The tags of the worker's keys (workload.go): its new records, the
	// preloaded pool, the absent keys; Python workers (pybench.py) read
	// them from here too.
	Tag        int     `json:"tag"`
	PoolTag    int     `json:"pool_tag"`
	MissTag    int     `json:"miss_tag"`
	Ops        int     `json:"ops"`
	Pool       int     `json:"pool"`
	RecordFrac float64 `json:"record_frac"`
	MissFrac   float64 `json:"miss_frac"`
	Warmup     int     `json:"warmup"`
	Seed       uint64  `json:"seed"`
}

// tpResult is one throughput worker's report.
type tpResult struct {
	WID        int       `json:"wid"`
	Pid        int       `json:"pid"`
	StartNS    int64     `json:"start_unix_ns"`
	EndNS      int64     `json:"end_unix_ns"`
	LookupNS   []int64   `json:"lookup_ns"`
	RecordNS   []int64   `json:"record_ns"`
	Acked      []int     `json:"acked"` // i of each record (tagWorkerBase+WID, i) acknowledged as written
	Errors     int       `json:"errors"`
	Timeouts   int       `json:"timeouts"`
	Wrong      int       `json:"wrong"`
	FirstError string    `json:"first_error,omitempty"`
	Lock       lockStats `json:"lock"`
	// CPUNS is the process's CPU time (user + system, every thread)
	// between the start signal and its end.
	CPUNS int64 `json:"cpu_ns"`
}

// cpuNS is this process's CPU time so far (user + system).
func cpuNS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func workerMain(specPath string) int {
	b, err := os.ReadFile(specPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	var spec workerSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	c, err := openClient(spec.Impl, spec.DB)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: open:", err)
		return 2
	}
	defer c.Close()
	var out any
	switch spec.Role {
	case "plan":
		out = runPlan(c, spec.Steps)
	case "throughput":
		out = throughputWorker(c, spec.TP)
	case "beam":
		ec, ok := c.(*engineClient)
		if !ok {
			fmt.Fprintln(os.Stderr, "worker: beam workers run the engine")
			return 2
		}
		out = beamWorker(ec.st, spec.Beam)
	default:
		fmt.Fprintln(os.Stderr, "worker: unknown role", spec.Role)
		return 2
	}
	w := bufio.NewWriter(os.Stdout)
	if err := json.NewEncoder(w).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	w.Flush()
	return 0
}

// throughputWorker warms up, says "ready" on stdout, waits for a line on
// stdin (the start signal, sent to all workers at once), then runs its
// operations back to back.
func throughputWorker(c client, s *tpSpec) *tpResult {
	rng := rand.New(rand.NewPCG(s.Seed, uint64(s.WID)))
	for k := 0; k < s.Warmup; k++ {
		c.Lookup(schedule(s.PoolTag, rng.IntN(s.Pool)))
	}
	before := c.LockStats()
	ops := make([]bool, s.Ops) // true: record
	nrec := int(float64(s.Ops)*s.RecordFrac + 0.5)
	for k := 0; k < nrec; k++ {
		ops[k] = true
	}
	rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })

	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')

	cpu0 := cpuNS()
	r := &tpResult{WID: s.WID, Pid: os.Getpid(), StartNS: time.Now().UnixNano()}
	next := 0
	fail := func(err error, what string) {
		r.Errors++
		if isTimeout(err) {
			r.Timeouts++
		}
		if r.FirstError == "" {
			r.FirstError = what + ": " + err.Error()
		}
	}
	for _, isRecord := range ops {
		if isRecord {
			i := next
			next++
			t0 := time.Now()
			ok, err := c.Record(schedule(s.Tag, i), false)
			r.RecordNS = append(r.RecordNS, time.Since(t0).Nanoseconds())
			switch {
			case err != nil:
				fail(err, "record")
			case !ok:
				r.Wrong++
				if r.FirstError == "" {
					r.FirstError = fmt.Sprintf("record of new key %d returned false", i)
				}
			default:
				r.Acked = append(r.Acked, i)
			}
			continue
		}
		miss := rng.Float64() < s.MissFrac
		sched := schedule(s.PoolTag, rng.IntN(s.Pool))
		if miss {
			sched = schedule(s.MissTag, rng.IntN(1<<30))
		}
		t0 := time.Now()
		found, err := c.Lookup(sched)
		r.LookupNS = append(r.LookupNS, time.Since(t0).Nanoseconds())
		switch {
		case err != nil:
			fail(err, "lookup")
		case found == miss:
			r.Wrong++
			if r.FirstError == "" {
				r.FirstError = fmt.Sprintf("lookup %s: found=%v", sched, found)
			}
		}
	}
	r.EndNS = time.Now().UnixNano()
	r.CPUNS = cpuNS() - cpu0
	r.Lock = c.LockStats().sub(before)
	return r
}
