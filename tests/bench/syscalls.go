package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The syscall section runs one worker per (implementation, operation)
// under `strace -f -y`, which decodes every file descriptor into its path.
// The worker preloads, warms up with the same kind of operation, then runs
// the measured operations between two stat()s of absent marker paths; only
// the lines between the markers are counted. Each call is classified by
// kind and by where it lands:
//
//	(i)   namespace ops: path-based open/creat/link/unlink/rename/mkdir/
//	      rmdir/stat/lstat/access/readlink/chmod/..., newfstatat/statx with
//	      a path, and getdents (a directory read);
//	(ii)  fd-based attribute reads: fstat, newfstatat/statx with
//	      AT_EMPTY_PATH, fstatfs;
//	(ii') fd-based attribute writes: fchmod, fchown, ftruncate (shown
//	      apart: Lustre sends them to the metadata server too);
//	(iii) advisory locks: fcntl F_SETLK/F_SETLKW/F_GETLK/F_OFD_*, flock;
//	plus fsync/fdatasync, data reads/writes and close, for context.
//
// Location: "DB dir" is the database's directory (database, journal, lock,
// tickets); "ancestors" are the directories above it, which a path lookup
// or SQLite's own path canonicalization (an lstat per component) walks:
// on a cluster those are lookups on the shared filesystem as well, which is
// why the database sits 5 components deep. Everything else (/proc, /sys,
// /dev, libraries) is node-local. The headline, "metadata syscalls per
// operation", is (i)+(iii) in the DB dir or its ancestors; the other
// columns show the rest so nothing is hidden.

// Location buckets.
const (
	locDBDir = iota
	locAncestor
	locLocal
	nLoc
)

// scCounts are the raw counts of one traced window.
type scCounts struct {
	All                                                  int
	Path, Lock, FdAttr, FdAttrWrite, Sync, Data, Closing [nLoc]int
	ByCall                                               map[string]int // headline calls by name
}

// scRow is one row of the syscall table, per operation (per record for
// record_many).
type scRow struct {
	Impl        string             `json:"impl"`
	Op          string             `json:"op"`
	Calls       int                `json:"traced_calls"`
	PerRecord   bool               `json:"per_record"`
	Meta        float64            `json:"metadata_per_op"` // (i)+(iii), DB dir + ancestors
	MetaDBDir   float64            `json:"metadata_per_op_db_dir"`
	MetaAnc     float64            `json:"metadata_per_op_ancestors"`
	Path        float64            `json:"namespace_ops_i"`
	Locks       float64            `json:"lock_calls_iii"`
	FdAttr      float64            `json:"fd_attr_reads_ii"`
	FdAttrWrite float64            `json:"fd_attr_writes"`
	NodeLocal   float64            `json:"node_local_i_ii_iii"`
	Sync        float64            `json:"fsync"`
	Data        float64            `json:"data_io"`
	Close       float64            `json:"close"`
	All         float64            `json:"all_syscalls"`
	ByCall      map[string]float64 `json:"metadata_by_call"`
	Error       string             `json:"error,omitempty"`
}

// syscallResults is the section's JSON.
type syscallResults struct {
	Skipped string   `json:"skipped,omitempty"`
	Strace  string   `json:"strace,omitempty"`
	Rows    []*scRow `json:"rows"`
}

var (
	pathCalls = setOf("open", "openat", "openat2", "creat", "link", "linkat", "symlink", "symlinkat",
		"unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat", "rmdir",
		"stat", "lstat", "stat64", "lstat64", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
		"chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat", "truncate", "statfs", "utime", "utimes",
		"futimesat", "mknod", "mknodat", "getxattr", "lgetxattr", "setxattr", "lsetxattr", "listxattr",
		"llistxattr", "removexattr", "lremovexattr", "chdir")
	dirReadCalls   = setOf("getdents", "getdents64")
	statCalls      = setOf("newfstatat", "fstatat64", "statx")
	fdAttrCalls    = setOf("fstat", "fstat64", "fstatfs", "fgetxattr", "flistxattr")
	fdAttrSetCalls = setOf("fchmod", "fchown", "ftruncate", "fsetxattr", "fremovexattr")
	syncCalls      = setOf("fsync", "fdatasync", "sync_file_range", "syncfs")
	dataCalls      = setOf("read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2")
	lockCmds       = []string{"F_SETLK", "F_SETLKW", "F_GETLK", "F_OFD_SETLK", "F_OFD_SETLKW", "F_OFD_GETLK"}

	// "PID name(args" — resumed halves ("PID <... name resumed>") do not
	// match and are not counted twice.
	straceLine = regexp.MustCompile(`^(\d+)\s+([a-z_0-9]+)\((.*)$`)
	// fd decorations (3</path>, AT_FDCWD</cwd>) and quoted strings, in order.
	argToken = regexp.MustCompile(`(AT_FDCWD|-?\d+)<((?:[^<>\\]|\\.)*)>|"((?:[^"\\]|\\.)*)"`)
)

func setOf(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// classifier places paths relative to the database directory. The bench
// directory stands for the shared filesystem's mount point: the DB dir's
// ancestors from there down are "ancestors" (lookups on the shared
// filesystem on a cluster), anything above it is node-local.
type classifier struct{ dbDir, root string }

func (c classifier) loc(p string) int {
	p = filepath.Clean(p)
	switch {
	case p == c.dbDir || strings.HasPrefix(p, c.dbDir+"/"):
		return locDBDir
	case strings.HasPrefix(c.dbDir, p+"/") && (p == c.root || strings.HasPrefix(p, c.root+"/")):
		return locAncestor
	}
	return locLocal
}

// nearest returns the location of the most shared of several paths.
func (c classifier) nearest(paths []string) int {
	best := locLocal
	for _, p := range paths {
		if l := c.loc(p); l < best {
			best = l
		}
	}
	return best
}

// callArgs splits a call's argument text into the paths it names: quoted
// strings resolved against the preceding dirfd, and decorated fds.
func callArgs(args string) (paths, fds []string, emptyPath bool) {
	if i := strings.LastIndex(args, ") = "); i >= 0 {
		args = args[:i]
	}
	dir := ""
	for _, m := range argToken.FindAllStringSubmatch(args, -1) {
		if m[1] != "" {
			dir = m[2]
			fds = append(fds, m[2])
			continue
		}
		s := m[3]
		switch {
		case s == "":
			emptyPath = true
		case strings.HasPrefix(s, "/"):
			paths = append(paths, s)
		case dir != "":
			paths = append(paths, filepath.Join(dir, s))
		default:
			paths = append(paths, s) // relative to an unknown cwd
		}
	}
	return paths, fds, emptyPath
}

// countWindow counts the calls between the begin and end marker lines of
// an strace -f -y output.
func countWindow(path, begin, end string, c classifier) (*scCounts, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	n := &scCounts{ByCall: map[string]int{}}
	in, sawBegin, sawEnd := false, false, false
	for sc.Scan() {
		line := sc.Text()
		if !in {
			if strings.Contains(line, begin) {
				in, sawBegin = true, true
			}
			continue
		}
		if strings.Contains(line, end) {
			sawEnd = true
			break
		}
		m := straceLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, args := m[2], m[3]
		n.All++
		paths, fds, empty := callArgs(args)
		fdLoc := locLocal
		if len(fds) > 0 {
			fdLoc = c.loc(fds[0])
		}
		headline := func(loc int) {
			if loc != locLocal {
				n.ByCall[name]++
			}
		}
		switch {
		case pathCalls[name] || (name == "utimensat" && len(paths) > 0):
			l := c.nearest(paths)
			n.Path[l]++
			headline(l)
		case dirReadCalls[name]:
			n.Path[fdLoc]++
			headline(fdLoc)
		case statCalls[name]:
			if empty || strings.Contains(args, "AT_EMPTY_PATH") || len(paths) == 0 {
				n.FdAttr[fdLoc]++
			} else {
				l := c.nearest(paths)
				n.Path[l]++
				headline(l)
			}
		case fdAttrCalls[name]:
			n.FdAttr[fdLoc]++
		case fdAttrSetCalls[name] || name == "utimensat":
			n.FdAttrWrite[fdLoc]++
		case name == "flock":
			n.Lock[fdLoc]++
			headline(fdLoc)
		case name == "fcntl" || name == "fcntl64":
			for _, cmd := range lockCmds {
				if strings.Contains(args, ", "+cmd+",") || strings.Contains(args, ", "+cmd+")") {
					n.Lock[fdLoc]++
					headline(fdLoc)
					break
				}
			}
		case syncCalls[name]:
			n.Sync[fdLoc]++
		case dataCalls[name]:
			n.Data[fdLoc]++
		case name == "close":
			n.Closing[fdLoc]++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !sawBegin || !sawEnd {
		return nil, fmt.Errorf("markers not found in the trace (begin %v, end %v)", sawBegin, sawEnd)
	}
	return n, nil
}

func shared(a [nLoc]int) int { return a[locDBDir] + a[locAncestor] }

// row turns counts into per-operation figures.
func (n *scCounts) row(impl, op string, calls, divisor int) *scRow {
	d := float64(calls * divisor)
	per := func(v int) float64 { return float64(v) / d }
	r := &scRow{
		Impl: impl, Op: op, Calls: calls, PerRecord: divisor > 1,
		Meta:        per(shared(n.Path) + shared(n.Lock)),
		MetaDBDir:   per(n.Path[locDBDir] + n.Lock[locDBDir]),
		MetaAnc:     per(n.Path[locAncestor] + n.Lock[locAncestor]),
		Path:        per(shared(n.Path)),
		Locks:       per(shared(n.Lock)),
		FdAttr:      per(shared(n.FdAttr)),
		FdAttrWrite: per(shared(n.FdAttrWrite)),
		NodeLocal:   per(n.Path[locLocal] + n.FdAttr[locLocal] + n.Lock[locLocal] + n.FdAttrWrite[locLocal]),
		Sync:        per(shared(n.Sync)),
		Data:        per(shared(n.Data)),
		Close:       per(shared(n.Closing)),
		All:         per(n.All),
		ByCall:      map[string]float64{},
	}
	for k, v := range n.ByCall {
		r.ByCall[k] = per(v)
	}
	return r
}

// byCallString lists the headline calls, most frequent first.
func byCallString(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || (l[i].v == l[j].v && l[i].k < l[j].k) })
	var parts []string
	for _, e := range l {
		parts = append(parts, fmt.Sprintf("%s %s", e.k, fmtCount(e.v)))
	}
	return strings.Join(parts, ", ")
}

// syscallOps are the traced operations.
var syscallOps = []string{opLookupHit, opLookupMiss, opContains, opRecordNew, opMany1000}

// syscallWarm is the number of warm-up operations before a traced window,
// syscallQuiet the pause after them (milliseconds).
const (
	syscallWarm  = 10
	syscallQuiet = 100
)

// syscallPlan warms up with the same operation, leaves the database quiet
// for syscallQuiet, then runs n traced operations (batches of 1000 for
// record_many) between the markers; the pool (n + syscallWarm records) is
// preloaded by another process. The pause makes the steady state the same
// in every run: without it, whether a store has loaded the program before
// or during the traced lookups depended on how long the process took to
// start, and the lookup rows varied between 0 and 4 metadata calls.
func syscallPlan(op string, n int, begin, end string) []step {
	const warm = syscallWarm
	var w, m step
	switch op {
	case opLookupHit:
		w = step{Op: "lookup", N: warm, Tag: tagPool, Start: n, Expect: true}
		m = step{Op: "lookup", N: n, Tag: tagPool, Expect: true}
	case opLookupMiss:
		w = step{Op: "lookup", N: warm, Tag: tagWarmMiss, Expect: false}
		m = step{Op: "lookup", N: n, Tag: tagMiss, Expect: false}
	case opContains:
		w = step{Op: "contains", N: warm, Tag: tagPool, Start: n, Expect: true}
		m = step{Op: "contains", N: n, Tag: tagPool, Expect: true}
	case opRecordNew:
		w = step{Op: "record", N: warm, Tag: tagWarmRecord, Expect: true}
		m = step{Op: "record", N: n, Tag: tagRecordNew, Expect: true}
	case opMany1000:
		w = step{Op: "record_many", N: 1, Tag: tagWarmMany, Batch: 1000, Expect: true}
		m = step{Op: "record_many", N: n, Tag: tagMany1000, Batch: 1000, Expect: true}
	}
	w.Label, w.Warmup, w.QuietMS = "warmup", true, syscallQuiet
	m.Label, m.MarkBegin, m.MarkEnd = op, begin, end
	return []step{w, m}
}

// syscallSection traces every (implementation, operation) pair.
func syscallSection(cfg *config, res *results) *syscallResults {
	out := &syscallResults{}
	strace, err := exec.LookPath("strace")
	if err != nil {
		out.Skipped = "strace not found: install it (e.g. apt-get install strace) to count syscalls"
		cfg.logf("syscalls skipped: %s", out.Skipped)
		return out
	}
	if v, err := exec.Command(strace, "-V").Output(); err == nil {
		out.Strace = strings.SplitN(strings.TrimSpace(string(v)), "\n", 2)[0]
	}
	impls := []string{implEngine, implBaseline, implPython, implCtypes}
	pyWhy := pythonPrereq(cfg)
	for _, impl := range impls {
		if (impl == implPython || impl == implCtypes) && pyWhy != "" {
			res.Skipped["syscalls/"+impl] = pyWhy
			continue
		}
		for _, op := range syscallOps {
			n := cfg.SyscallOps
			if op == opMany1000 {
				n = cfg.SyscallMany
			}
			row, err := traceOne(cfg, strace, impl, op, n)
			if err != nil {
				row = &scRow{Impl: impl, Op: op, Calls: n, PerRecord: op == opMany1000, Error: err.Error()}
				cfg.logf("syscalls %s %s: %v", impl, op, err)
			} else {
				cfg.logf("syscalls %s %-16s metadata %.1f/op (all syscalls %.0f)", impl, op, row.Meta, row.All)
			}
			out.Rows = append(out.Rows, row)
		}
	}
	return out
}

func traceOne(cfg *config, strace, impl, op string, n int) (*scRow, error) {
	if err := cfg.fresh(); err != nil {
		return nil, err
	}
	begin := filepath.Join(cfg.dbDir(), ".bench-strace-begin-"+op)
	end := filepath.Join(cfg.dbDir(), ".bench-strace-end-"+op)
	steps := syscallPlan(op, n, begin, end)
	preloader := impl
	if impl != implBaseline {
		preloader = implEngine
	}
	if err := preloadDB(cfg, preloader, n+syscallWarm); err != nil {
		return nil, err
	}
	tf, err := os.CreateTemp(cfg.Dir, "strace-*.txt")
	if err != nil {
		return nil, err
	}
	tf.Close()
	defer os.Remove(tf.Name())
	wrap := []string{strace, "-f", "-y", "-qq", "-o", tf.Name(), "--"}
	var cmd *exec.Cmd
	switch impl {
	case implEngine, implBaseline:
		spec, err := writeSpec(cfg, workerSpec{Role: "plan", Impl: impl, DB: cfg.dbPath(), Steps: steps})
		if err != nil {
			return nil, err
		}
		defer os.Remove(spec)
		cmd = exec.Command(wrap[0], append(wrap[1:], cfg.Exe)...)
		cmd.Env = append(os.Environ(), workerEnv+"="+spec)
	default:
		spec, err := writeSpec(cfg, cfg.pySpec(impl, steps))
		if err != nil {
			return nil, err
		}
		defer os.Remove(spec)
		cmd = pythonCmd(cfg, spec, wrap...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, lastLines(stderr.String(), 10))
	}
	if bad := planFailures(stdout.Bytes()); bad != "" {
		return nil, errors.New(bad)
	}
	counts, err := countWindow(tf.Name(), filepath.Base(begin), filepath.Base(end), classifier{dbDir: cfg.dbDir(), root: cfg.Dir})
	if err != nil {
		return nil, err
	}
	div := 1
	if op == opMany1000 {
		div = 1000
	}
	return counts.row(impl, op, n, div), nil
}

// planFailures reports a skip, errors or wrong results in a plan's JSON
// output (a Go worker's map of step results, or pybench.py's document).
func planFailures(out []byte) string {
	var py pyOutput
	if err := json.Unmarshal(out, &py); err != nil {
		return "unreadable worker output: " + err.Error()
	}
	switch {
	case py.Skip != "":
		return "skipped: " + py.Skip
	case py.Error != "":
		return py.Error
	}
	m := py.Results
	if m == nil {
		if err := json.Unmarshal(out, &m); err != nil {
			return "unreadable worker output: " + err.Error()
		}
	}
	for _, r := range m {
		if r != nil && (r.Errors > 0 || r.Wrong > 0) {
			return fmt.Sprintf("the traced operations failed (%d errors, %d wrong results): %s", r.Errors, r.Wrong, r.FirstError)
		}
	}
	return ""
}
