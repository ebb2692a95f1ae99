// Package runctx captures the context in which a measurement was taken.
//
// A cached execution time is only as trustworthy as the conditions it was
// measured under: the same program runs at different speeds on another CPU,
// with fewer cores, under the powersave governor or on a loaded node. Every
// measurement therefore carries its run context, so that users can judge
// measurements and filter out those taken under conditions they distrust.
//
// The context has two parts. Static holds what stays the same across a
// process's measurements (host, CPU, cores, Slurm allocation, governor, tool
// versions); it is stored once per distinct value, named by its Fingerprint.
// Run holds what changes with every measurement (load, clock frequency,
// date) and refers to its Static by that fingerprint.
package runctx

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/klauspost/cpuid/v2"

	"github.com/tirastore/tirastore/core/cpu"
	"github.com/tirastore/tirastore/core/environ"
	"github.com/tirastore/tirastore/core/identity"
)

// Static is the part of a run's context that stays the same across a
// process's measurements. It is stored once per distinct value, named by its
// Fingerprint, so that millions of measurements do not repeat it.
type Static struct {
	// Host is the store's host name, so measurements of one node can be
	// told apart from another's.
	Host string `json:"host"`
	// CPUModel is the brand string the database's metadata uses, so both
	// can be compared as text.
	CPUModel string `json:"cpu_model"`
	// CPUVendor is the CPUID vendor string, "" when unknown (non-x86).
	CPUVendor string `json:"cpu_vendor"`
	// CPUFamily is the CPUID family number; with CPUModelID it names a
	// microarchitecture even when brand strings are vague.
	CPUFamily int `json:"cpu_family"`
	// CPUModelID is the CPUID model number.
	CPUModelID int `json:"cpu_model_id"`
	// CPUFlags are the CPU's features (vector extensions matter for
	// generated code), sorted, deduplicated, never nil.
	CPUFlags []string `json:"cpu_flags"`
	// Cores is how many CPUs this process may run on, which bounds the
	// parallelism of a measured program.
	Cores int `json:"cores"`
	// SlurmCPUsPerTask is SLURM_CPUS_PER_TASK, "" outside Slurm: the
	// allocation the scheduler granted, which may differ from Cores.
	SlurmCPUsPerTask string `json:"slurm_cpus_per_task"`
	// Governor is the cpufreq scaling governor of the first CPU this
	// process may run on, "" when unreadable; powersave slows every run.
	Governor string `json:"governor"`
	// Tools are the versions of the compilers and libraries the caller
	// used, because they change the generated code. Never nil.
	Tools map[string]string `json:"tools"`
}

// Run is the part of a run's context that changes with every measurement,
// so that a measurement taken on a busy or throttled node can be recognised.
type Run struct {
	// Count is how many times this run was added, so that repeated
	// measurements share one record.
	Count int `json:"n"`
	// Context is the Fingerprint of the run's Static.
	Context string `json:"context"`
	// SlurmJobID is SLURM_JOB_ID, so a run can be traced to its job.
	SlurmJobID string `json:"job,omitempty"`
	// LoadAvg is the 1-minute load average when the run was recorded, -1
	// when unreadable; a high value means the run competed for the CPU.
	LoadAvg float64 `json:"load"`
	// MHz is the current frequency of the first CPU this process may run
	// on, -1 when unreadable; a low value means throttling or power saving.
	MHz float64 `json:"mhz"`
	// At is the UTC ISO 8601 date of recording, in the shape the database
	// stores every date.
	At string `json:"at"`
}

// MaxTools bounds how many tool versions a context may carry, because the
// caller's map is stored in a shared database that other users read.
const MaxTools = 32

// Limits on one tool entry, in bytes, for the same reason as MaxTools.
const (
	maxToolName  = 64
	maxToolValue = 256
)

// maxReadBytes caps reads of kernel files: they are tiny, and a cap keeps a
// surprising file from costing memory.
const maxReadBytes = 4 << 10

// Sources, replaceable by tests.
var (
	// readFile reads a small file under /proc or /sys.
	readFile = readSmall
	// now is the clock used for Run.At.
	now = time.Now
)

// readSmall reads at most maxReadBytes of a file.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxReadBytes))
}

// readTrimmed reads a file and trims surrounding whitespace; ok is false
// when it cannot be read.
func readTrimmed(path string) (string, bool) {
	b, err := readFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// cpuStatic is the part of Static that cannot change while a process runs.
type cpuStatic struct {
	model, vendor   string
	family, modelID int
	flags           []string
}

var (
	cpuOnce  sync.Once
	cpuValue cpuStatic
)

func cpuInfo() cpuStatic {
	cpuOnce.Do(func() {
		cpuValue = cpuStatic{
			model:   cpu.Model(),
			vendor:  cpuid.CPU.VendorString,
			family:  cpuid.CPU.Family,
			modelID: cpuid.CPU.Model,
			flags:   sortedSet(cpuid.CPU.FeatureSet()),
		}
	})
	return cpuValue
}

func cpufreqPath(n int, name string) string {
	return "/sys/devices/system/cpu/cpu" + strconv.Itoa(n) + "/cpufreq/" + name
}

// CaptureStatic reads the static context of this process on this host, so
// that it can be stored with the process's measurements. host is the
// store's host name; tools is copied, nil means none. The CPU identity is
// read once per process; cores, governor and Slurm allocation are read on
// every call because they may change. Callers should check tools with
// CheckTools before storing.
func CaptureStatic(host string, tools map[string]string) Static {
	c := cpuInfo()
	cores, first := affinity()
	governor, _ := readTrimmed(cpufreqPath(first, "scaling_governor"))
	t := make(map[string]string, len(tools))
	for k, v := range tools {
		t[k] = v
	}
	return Static{
		Host:             host,
		CPUModel:         c.model,
		CPUVendor:        c.vendor,
		CPUFamily:        c.family,
		CPUModelID:       c.modelID,
		CPUFlags:         append([]string{}, c.flags...),
		Cores:            cores,
		SlurmCPUsPerTask: environ.Get("SLURM_CPUS_PER_TASK"),
		Governor:         governor,
		Tools:            t,
	}
}

// CaptureRun reads the dynamic context now, for a run added count times
// under the static context whose fingerprint is fp.
func CaptureRun(fp string, count int) Run {
	_, first := affinity()
	return Run{
		Count:      count,
		Context:    fp,
		SlurmJobID: environ.Get("SLURM_JOB_ID"),
		LoadAvg:    loadAvg(),
		MHz:        curMHz(first),
		At:         identity.NowISO(now()),
	}
}

// loadAvg returns the 1-minute load average, -1 when unreadable.
func loadAvg() float64 {
	s, ok := readTrimmed("/proc/loadavg")
	if !ok {
		return -1
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return -1
	}
	return nonNegative(fields[0], 1)
}

// curMHz returns the current frequency of CPU n in MHz, -1 when unreadable.
func curMHz(n int) float64 {
	s, ok := readTrimmed(cpufreqPath(n, "scaling_cur_freq"))
	if !ok {
		return -1
	}
	return nonNegative(s, 1000)
}

// nonNegative parses s as a finite, non-negative number divided by div, or
// returns -1. NaN and infinities are refused because JSON cannot hold them.
func nonNegative(s string, div float64) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return -1
	}
	return f / div
}

// sortedSet returns the distinct strings of in, sorted, never nil.
func sortedSet(in []string) []string {
	out := append([]string{}, in...)
	sort.Strings(out)
	j := 0
	for i, s := range out {
		if i == 0 || s != out[j-1] {
			out[j] = s
			j++
		}
	}
	return out[:j]
}

// JSON returns s as canonical JSON: keys sorted at every level, no spaces,
// CPUFlags sorted and deduplicated, nil lists and maps as empty ones, so
// that equal contexts give equal text and therefore equal fingerprints.
func (s Static) JSON() string {
	tools := s.Tools
	if tools == nil {
		tools = map[string]string{}
	}
	// encoding/json writes a map's keys sorted, and a struct's fields in
	// declaration order; a map makes the order independent of the struct.
	m := map[string]any{
		"host":                s.Host,
		"cpu_model":           s.CPUModel,
		"cpu_vendor":          s.CPUVendor,
		"cpu_family":          s.CPUFamily,
		"cpu_model_id":        s.CPUModelID,
		"cpu_flags":           sortedSet(s.CPUFlags),
		"cores":               s.Cores,
		"slurm_cpus_per_task": s.SlurmCPUsPerTask,
		"governor":            s.Governor,
		"tools":               tools,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		// Only strings, ints and string collections: cannot fail.
		panic("runctx: encoding a context: " + err.Error())
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Fingerprint returns the first 32 hex digits of the SHA-256 of s.JSON():
// the name under which the database stores a context, equal for equal
// contexts.
func (s Static) Fingerprint() string {
	sum := sha256.Sum256([]byte(s.JSON()))
	return hex.EncodeToString(sum[:16])
}

// ParseStatic reads a context stored by JSON. It ignores unknown keys,
// because a newer writer may add fields; missing Tools and CPUFlags become
// empty, never nil.
func ParseStatic(text string) (Static, error) {
	trimmed := strings.TrimSpace(text)
	if !strings.HasPrefix(trimmed, "{") {
		if json.Valid([]byte(trimmed)) {
			return Static{}, errors.New("runctx: run context is not a JSON object")
		}
		return Static{}, errors.New("runctx: run context is not valid JSON")
	}
	var s Static
	if err := json.Unmarshal([]byte(trimmed), &s); err != nil {
		return Static{}, fmt.Errorf("runctx: run context is not valid: %w", err)
	}
	if s.CPUFlags == nil {
		s.CPUFlags = []string{}
	}
	if s.Tools == nil {
		s.Tools = map[string]string{}
	}
	return s, nil
}

// CheckTools returns an error naming the first bad entry (in name order),
// or nil, because tool versions come from the caller and are stored in a
// shared database: at most MaxTools entries; names non-empty and at most
// 64 bytes; values at most 256 bytes; both valid UTF-8 without control
// characters.
func CheckTools(tools map[string]string) error {
	if len(tools) > MaxTools {
		return fmt.Errorf("tools: %d entries, at most %d allowed", len(tools), MaxTools)
	}
	names := make([]string, 0, len(tools))
	for name := range tools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		value := tools[name]
		switch {
		case name == "":
			return fmt.Errorf("tools[%q]: empty name", name)
		case len(name) > maxToolName:
			return fmt.Errorf("tools[%q]: name is %d bytes, at most %d allowed", name, len(name), maxToolName)
		case len(value) > maxToolValue:
			return fmt.Errorf("tools[%q]: value is %d bytes, at most %d allowed", name, len(value), maxToolValue)
		}
		if err := checkText(name); err != nil {
			return fmt.Errorf("tools[%q]: name %v", name, err)
		}
		if err := checkText(value); err != nil {
			return fmt.Errorf("tools[%q]: value %v", name, err)
		}
	}
	return nil
}

// checkText refuses invalid UTF-8 and control characters.
func checkText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("contains control character %U", r)
		}
	}
	return nil
}

// EncodeRuns is runs as a record's runs are stored (storage "Runs"): a
// JSON list, in the order of the times they added, each run as
// encoding/json writes a Run (ParseRuns reads it so). It is written by
// hand: a record_many of thousands of rows encodes one per row.
func EncodeRuns(runs []Run) string {
	b := make([]byte, 0, 128*len(runs)+2)
	b = append(b, '[')
	for i, r := range runs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRun(b, &r)
	}
	return string(append(b, ']'))
}

// appendRun appends r as a JSON object (finite numbers: CaptureRun makes
// no other, and a caller's own Run must be as finite): RunsHead, its
// count, and its tail (appendRunTail).
func appendRun(b []byte, r *Run) []byte {
	b = append(b, RunsHead[1:]...)
	b = strconv.AppendInt(b, int64(r.Count), 10)
	return appendRunTail(b, r)
}

// RunsHead and RunTail split the runs of a record measured in one run:
// EncodeRuns of that run alone is RunsHead, its count in decimal, and
// RunTail of the run. A backend that stores one run for a batch of
// records stores its tail once, and a read rebuilds each record's runs
// from its own count of times (storage "Runs").
const RunsHead = `[{"n":`

// RunTail is what follows the count in EncodeRuns of r alone (see
// RunsHead).
func RunTail(r *Run) string {
	return string(append(appendRunTail(make([]byte, 0, 128), r), ']'))
}

// appendRunTail appends r's JSON object after its count.
func appendRunTail(b []byte, r *Run) []byte {
	b = append(b, `,"context":`...)
	b = appendJSONString(b, r.Context)
	if r.SlurmJobID != "" {
		b = append(b, `,"job":`...)
		b = appendJSONString(b, r.SlurmJobID)
	}
	b = append(b, `,"load":`...)
	b = strconv.AppendFloat(b, r.LoadAvg, 'f', -1, 64)
	b = append(b, `,"mhz":`...)
	b = strconv.AppendFloat(b, r.MHz, 'f', -1, 64)
	b = append(b, `,"at":`...)
	b = appendJSONString(b, r.At)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string: plain text as it is, any
// other through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// ParseRuns reads a record's stored runs (lenient about unknown keys, as
// ParseStatic), naming what is wrong with text that is not a list of runs.
func ParseRuns(text string) ([]Run, error) {
	var runs []Run
	if err := json.Unmarshal([]byte(text), &runs); err != nil {
		return nil, fmt.Errorf("runctx: record runs are not a JSON list of runs: %v", err)
	}
	for i, r := range runs {
		if r.Count < 0 {
			return nil, fmt.Errorf("runctx: record runs: run %d counts %d times", i, r.Count)
		}
	}
	return runs, nil
}

// RefreshEvery is how long a Capturer reuses what it read: the kernel
// updates the load average every five seconds, and a governor, an
// allocation or an affinity mask changes far more rarely than a
// measurement takes; read at every record they cost more than the write
// of a record that exists already.
const RefreshEvery = time.Second

// Capturer captures the context of one store's writes, reading the system
// at most once per RefreshEvery. Safe for concurrent use.
type Capturer struct {
	host  string
	tools map[string]string

	mu      sync.Mutex
	read    time.Time // monotonic; zero: never
	static  Static
	fp, js  string
	dynamic Run
}

// NewCapturer captures for a store of host whose caller's tools are tools
// (copied; checked by CheckTools beforehand).
func NewCapturer(host string, tools map[string]string) *Capturer {
	t := make(map[string]string, len(tools))
	for k, v := range tools {
		t[k] = v
	}
	return &Capturer{host: host, tools: t}
}

// Capture returns the current context: its fingerprint and JSON, and a run
// of count times in it, dated now.
func (c *Capturer) Capture(count int) (fp, contextJSON string, run Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := now()
	c.refresh(t)
	run = c.dynamic
	run.Count, run.At = count, identity.NowISO(t)
	return c.fp, c.js, run
}

// Current is the context Capture would store now, and its fingerprint.
func (c *Capturer) Current() (Static, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refresh(now())
	return c.static, c.fp
}

// refresh reads the system again if what c holds was read RefreshEvery
// before t (or never); c.mu is held.
func (c *Capturer) refresh(t time.Time) {
	if c.read.IsZero() || t.Sub(c.read) >= RefreshEvery || t.Before(c.read) {
		c.static = CaptureStatic(c.host, c.tools)
		c.fp, c.js = c.static.Fingerprint(), c.static.JSON()
		c.dynamic = CaptureRun(c.fp, 0)
		c.read = t
	}
}
