//go:build linux

package runctx

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func sample() Static {
	return Static{
		Host:             "node01",
		CPUModel:         "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
		CPUVendor:        "GenuineIntel",
		CPUFamily:        6,
		CPUModelID:       85,
		CPUFlags:         []string{"AVX", "AVX2", "AVX512F", "SSE4"},
		Cores:            8,
		SlurmCPUsPerTask: "8",
		Governor:         "performance",
		Tools:            map[string]string{"tiramisu": "1.0 <x&y>", "gcc": "13.2", "clang": "17"},
	}
}

// fakeFiles replaces readFile with a map from path to content; a missing
// path is an error.
func fakeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	old := readFile
	t.Cleanup(func() { readFile = old })
	readFile = func(path string) ([]byte, error) {
		if s, ok := files[path]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("no such file: " + path)
	}
}

// fakeAffinity makes the process appear to run on exactly cpus, or fails
// when cpus is nil.
func fakeAffinity(t *testing.T, cpus []int) {
	t.Helper()
	old := schedGetaffinity
	t.Cleanup(func() { schedGetaffinity = old })
	schedGetaffinity = func(pid int, set *unix.CPUSet) error {
		if cpus == nil {
			return errors.New("no affinity")
		}
		set.Zero()
		for _, c := range cpus {
			set.Set(c)
		}
		return nil
	}
}

// jsonKeys returns the keys of a JSON object in the order they appear.
func jsonKeys(t *testing.T, text string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %q", text)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestJSONCanonical(t *testing.T) {
	s := sample()
	text := s.JSON()

	keys := jsonKeys(t, text)
	if !sort.StringsAreSorted(keys) {
		t.Errorf("top-level keys not sorted: %v", keys)
	}
	// Every field of Static, and nothing else, appears.
	var want []string
	typ := reflect.TypeOf(Static{})
	for i := 0; i < typ.NumField(); i++ {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		want = append(want, name)
	}
	sort.Strings(want)
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}

	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		t.Fatal(err)
	}
	toolKeys := jsonKeys(t, string(raw["tools"]))
	if !sort.StringsAreSorted(toolKeys) || len(toolKeys) != 3 {
		t.Errorf("tool keys not sorted: %v", toolKeys)
	}

	if strings.HasSuffix(text, "\n") {
		t.Errorf("trailing newline: %q", text)
	}
	if !strings.Contains(text, `"1.0 <x&y>"`) {
		t.Errorf("HTML characters escaped: %q", text)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(text)); err != nil || compact.String() != text {
		t.Errorf("whitespace outside strings: %q", text)
	}

	// The same value gives the same text and fingerprint, whatever the
	// map's insertion order or the flags' order.
	s2 := sample()
	s2.Tools = map[string]string{"clang": "17", "gcc": "13.2", "tiramisu": "1.0 <x&y>"}
	s2.CPUFlags = []string{"SSE4", "AVX2", "AVX", "AVX512F", "AVX"}
	if s2.JSON() != text {
		t.Errorf("equal contexts differ:\n%s\n%s", s2.JSON(), text)
	}
	if s2.Fingerprint() != s.Fingerprint() {
		t.Error("equal contexts have different fingerprints")
	}

	fp := s.Fingerprint()
	if len(fp) != 32 || strings.Trim(fp, "0123456789abcdef") != "" {
		t.Errorf("fingerprint %q is not 32 lowercase hex digits", fp)
	}

	s3 := sample()
	s3.Tools["gcc"] = "13.3"
	if s3.Fingerprint() == fp {
		t.Error("a different tool version gives the same fingerprint")
	}
}

func TestJSONEmptyCollections(t *testing.T) {
	text := Static{Host: "h"}.JSON()
	if !strings.Contains(text, `"cpu_flags":[]`) || !strings.Contains(text, `"tools":{}`) {
		t.Errorf("nil collections not written as empty: %s", text)
	}
	if (Static{Host: "h"}).Fingerprint() != (Static{Host: "h", CPUFlags: []string{}, Tools: map[string]string{}}).Fingerprint() {
		t.Error("nil and empty collections give different fingerprints")
	}
}

func TestParseStaticRoundTrip(t *testing.T) {
	s := sample()
	s.CPUFlags = sortedSet(s.CPUFlags)
	got, err := ParseStatic(s.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, s)
	}
	if got.JSON() != s.JSON() || got.Fingerprint() != s.Fingerprint() {
		t.Error("round trip changes the text")
	}
}

func TestParseStaticRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"not json", "not valid JSON"},
		{"", "not valid JSON"},
		{`{"host": "a"`, "not valid"},
		{`["host", "a"]`, "not a JSON object"},
		{`null`, "not a JSON object"},
		{`"text"`, "not a JSON object"},
		{`{"cores": "eight"}`, "cores"},
	} {
		_, err := ParseStatic(tc.in)
		if err == nil {
			t.Errorf("ParseStatic(%q) accepted", tc.in)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseStatic(%q) = %v, want mention of %q", tc.in, err, tc.want)
		}
	}
}

func TestParseStaticLenient(t *testing.T) {
	s, err := ParseStatic(`{"host":"n1","cores":4,"gpu":"A100","numa":{"nodes":2}}`)
	if err != nil {
		t.Fatal(err)
	}
	if s.Host != "n1" || s.Cores != 4 {
		t.Errorf("got %+v", s)
	}
	if s.CPUFlags == nil || len(s.CPUFlags) != 0 {
		t.Errorf("missing cpu_flags: %#v, want empty non-nil", s.CPUFlags)
	}
	if s.Tools == nil || len(s.Tools) != 0 {
		t.Errorf("missing tools: %#v, want empty non-nil", s.Tools)
	}
	s, err = ParseStatic(`{"cpu_flags":null,"tools":null}`)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUFlags == nil || s.Tools == nil {
		t.Errorf("null collections stay nil: %+v", s)
	}
}

func TestCheckTools(t *testing.T) {
	ok := []map[string]string{
		nil,
		{},
		{"tiramisu": "0.3.1-dev", "gcc": "13.2", "llvm": "17.0.6 (Red Hat)"},
		{"python": ""},
		{strings.Repeat("n", 64): strings.Repeat("v", 256)},
		{"compilateur": "version été"},
	}
	for _, tools := range ok {
		if err := CheckTools(tools); err != nil {
			t.Errorf("CheckTools(%q) = %v", tools, err)
		}
	}

	many := map[string]string{}
	for i := 0; i < MaxTools+1; i++ {
		many[strings.Repeat("t", i+1)] = "1"
	}
	if err := CheckTools(many); err == nil || !strings.Contains(err.Error(), "33") {
		t.Errorf("33 entries: %v", err)
	}
	delete(many, "t")
	if err := CheckTools(many); err != nil {
		t.Errorf("32 entries: %v", err)
	}

	bad := []struct {
		tools map[string]string
		name  string // the entry the error must name
	}{
		{map[string]string{"": "1"}, `tools[""]`},
		{map[string]string{strings.Repeat("n", 65): "1"}, `tools["nnnn`},
		{map[string]string{"gcc": strings.Repeat("v", 257)}, `tools["gcc"]`},
		{map[string]string{"gcc": "13\xff"}, `tools["gcc"]`},
		{map[string]string{"g\xffc": "13"}, `tools["g\xffc"]`},
		{map[string]string{"gcc": "13\n"}, `tools["gcc"]`},
		{map[string]string{"gcc": "13\x00"}, `tools["gcc"]`},
		{map[string]string{"g\tcc": "13"}, `tools["g\tcc"]`},
		{map[string]string{"gcc": "13\u0085"}, `tools["gcc"]`},
		{map[string]string{"clang": "17", "gcc": "13\x7f"}, `tools["gcc"]`},
	}
	for _, tc := range bad {
		err := CheckTools(tc.tools)
		if err == nil {
			t.Errorf("CheckTools(%q) accepted", tc.tools)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.name) {
			t.Errorf("CheckTools(%q) = %v, want it to name %s", tc.tools, err, tc.name)
		}
	}
}

func TestCaptureRun(t *testing.T) {
	fakeAffinity(t, []int{3, 5})
	fakeFiles(t, map[string]string{
		"/proc/loadavg": "0.52 0.40 0.33 1/234 5678\n",
		"/sys/devices/system/cpu/cpu3/cpufreq/scaling_cur_freq": "2400000\n",
		"/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": "1000000\n",
	})
	oldNow := now
	t.Cleanup(func() { now = oldNow })
	now = func() time.Time { return time.Date(2024, 5, 6, 7, 8, 9, 0, time.FixedZone("X", 3600)) }
	t.Setenv("SLURM_JOB_ID", "4242")

	r := CaptureRun("abc", 3)
	want := Run{Count: 3, Context: "abc", SlurmJobID: "4242", LoadAvg: 0.52, MHz: 2400, At: "2024-05-06T06:08:09+00:00"}
	if r != want {
		t.Errorf("CaptureRun = %+v, want %+v", r, want)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"n":3,"context":"abc","job":"4242","load":0.52,"mhz":2400,"at":"2024-05-06T06:08:09+00:00"}` {
		t.Errorf("JSON = %s", got)
	}
}

func TestCaptureRunUnreadable(t *testing.T) {
	fakeAffinity(t, nil)
	fakeFiles(t, nil)
	t.Setenv("SLURM_JOB_ID", "")
	r := CaptureRun("abc", 1)
	if r.LoadAvg != -1 || r.MHz != -1 {
		t.Errorf("unreadable files: load %v, mhz %v; want -1, -1", r.LoadAvg, r.MHz)
	}
	if r.SlurmJobID != "" {
		t.Errorf("job %q outside Slurm", r.SlurmJobID)
	}
	if b, err := json.Marshal(r); err != nil || strings.Contains(string(b), "job") {
		t.Errorf("JSON = %s, %v; want no job key", b, err)
	}
}

func TestCaptureRunGarbage(t *testing.T) {
	fakeAffinity(t, []int{0})
	for _, tc := range []struct{ load, freq string }{
		{"", ""},
		{"  \n", "\n"},
		{"abc def", "fast"},
		{"NaN 1 1", "NaN"},
		{"+Inf 1 1", "Inf"},
		{"-1 0 0", "-5"},
		{"\x00\xff", "2400000 extra"},
	} {
		fakeFiles(t, map[string]string{
			"/proc/loadavg": tc.load,
			"/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq": tc.freq,
		})
		r := CaptureRun("x", 1)
		if r.LoadAvg != -1 || r.MHz != -1 {
			t.Errorf("load %q freq %q: got %v, %v; want -1, -1", tc.load, tc.freq, r.LoadAvg, r.MHz)
		}
	}
}

func TestCaptureStatic(t *testing.T) {
	fakeAffinity(t, []int{2, 3, 7})
	fakeFiles(t, map[string]string{
		"/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor": "performance\n",
		"/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "powersave\n",
	})
	t.Setenv("SLURM_CPUS_PER_TASK", "3")

	tools := map[string]string{"gcc": "13.2"}
	s := CaptureStatic("node01", tools)
	tools["gcc"] = "changed"
	tools["new"] = "1"
	if !reflect.DeepEqual(s.Tools, map[string]string{"gcc": "13.2"}) {
		t.Errorf("tools not copied: %v", s.Tools)
	}
	if s.Host != "node01" || s.Cores != 3 || s.Governor != "performance" || s.SlurmCPUsPerTask != "3" {
		t.Errorf("got %+v", s)
	}
	if s.CPUFlags == nil || !sort.StringsAreSorted(s.CPUFlags) {
		t.Errorf("flags nil or unsorted: %#v", s.CPUFlags)
	}
	for i := 1; i < len(s.CPUFlags); i++ {
		if s.CPUFlags[i] == s.CPUFlags[i-1] {
			t.Errorf("duplicate flag %q", s.CPUFlags[i])
		}
	}
	if s.CPUModel == "" {
		t.Error("empty CPU model")
	}

	// The captured flags are the caller's own: changing them does not
	// change the next capture.
	if len(s.CPUFlags) > 0 {
		first := s.CPUFlags[0]
		s.CPUFlags[0] = "ZZZ"
		if again := CaptureStatic("node01", nil); again.CPUFlags[0] != first {
			t.Error("flags shared between captures")
		}
	}
}

func TestCaptureStaticFallbacks(t *testing.T) {
	fakeAffinity(t, nil)
	fakeFiles(t, nil)
	t.Setenv("SLURM_CPUS_PER_TASK", "")
	s := CaptureStatic("h", nil)
	if s.Cores < 1 {
		t.Errorf("cores %d without affinity", s.Cores)
	}
	if s.Governor != "" || s.SlurmCPUsPerTask != "" {
		t.Errorf("got governor %q slurm %q, want empty", s.Governor, s.SlurmCPUsPerTask)
	}
	if s.Tools == nil || len(s.Tools) != 0 || s.CPUFlags == nil {
		t.Errorf("nil collections: %#v %#v", s.Tools, s.CPUFlags)
	}
}

// TestCaptureStaticReal reads this machine, whatever it is.
func TestCaptureStaticReal(t *testing.T) {
	s := CaptureStatic("h", map[string]string{"go": "1"})
	if s.Cores < 1 {
		t.Errorf("cores %d", s.Cores)
	}
	if s.CPUFlags == nil || !sort.StringsAreSorted(s.CPUFlags) {
		t.Errorf("flags nil or unsorted: %#v", s.CPUFlags)
	}
	got, err := ParseStatic(s.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if got.Fingerprint() != s.Fingerprint() {
		t.Error("real context does not round-trip")
	}
	r := CaptureRun(s.Fingerprint(), 1)
	if r.LoadAvg < -1 || r.MHz < -1 || r.At == "" {
		t.Errorf("real run %+v", r)
	}
}

func TestReadSmallCaps(t *testing.T) {
	path := t.TempDir() + "/big"
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 10000)), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := readSmall(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != maxReadBytes {
		t.Errorf("read %d bytes, want %d", len(b), maxReadBytes)
	}
	if _, err := readSmall(path + ".missing"); err == nil {
		t.Error("missing file read")
	}
}

// EncodeRuns writes what encoding/json writes for the values a capture
// makes, and ParseRuns reads it back.
func TestEncodeRunsAsEncodingJSON(t *testing.T) {
	runs := []Run{
		{Count: 5, Context: "0123456789abcdef0123456789abcdef", LoadAvg: 0.52, MHz: 2400, At: "2026-12-06T22:40:30.056054+00:00"},
		{Count: 0, Context: "", SlurmJobID: "12345", LoadAvg: -1, MHz: -1, At: "x"},
		{Count: 3, Context: "a\"b\\c<d>&\u00e9\n", SlurmJobID: "j\x01", LoadAvg: 123.25, MHz: 0.001, At: ""},
	}
	want, err := json.Marshal(runs)
	if err != nil {
		t.Fatal(err)
	}
	if got := EncodeRuns(runs); got != string(want) {
		t.Errorf("EncodeRuns:\n got %s\nwant %s", got, want)
	}
	back, err := ParseRuns(EncodeRuns(runs))
	if err != nil || len(back) != len(runs) {
		t.Fatal(back, err)
	}
	for i := range runs {
		if back[i] != runs[i] {
			t.Errorf("run %d: %+v, want %+v", i, back[i], runs[i])
		}
	}
	for _, r := range runs { // one run alone: RunsHead, its count, RunTail
		if got, want := RunsHead+strconv.Itoa(r.Count)+RunTail(&r), EncodeRuns([]Run{r}); got != want {
			t.Errorf("head, count and tail:\n got %s\nwant %s", got, want)
		}
	}
	if got := EncodeRuns(nil); got != "[]" {
		t.Errorf("no runs: %s", got)
	}
	for _, bad := range []string{"", "{}", "[1]", `[{"n":-1}]`} {
		if _, err := ParseRuns(bad); err == nil {
			t.Errorf("ParseRuns(%q) accepted", bad)
		}
	}
}

// A Capturer reads the system once per RefreshEvery, and dates every run.
func TestCapturerRefreshes(t *testing.T) {
	reads := 0
	old, oldNow := readFile, now
	t.Cleanup(func() { readFile, now = old, oldNow })
	readFile = func(path string) ([]byte, error) {
		if path == "/proc/loadavg" {
			reads++
		}
		return nil, errors.New("unreadable")
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now = func() time.Time { return clock }
	c := NewCapturer("h", map[string]string{"gcc": "13"})
	fp, js, run := c.Capture(5)
	if run.Count != 5 || run.Context != fp || !strings.Contains(js, `"gcc":"13"`) || reads != 1 {
		t.Fatalf("first capture: %s %s %+v, %d reads", fp, js, run, reads)
	}
	clock = clock.Add(RefreshEvery / 2)
	_, _, run2 := c.Capture(2)
	if reads != 1 || run2.Count != 2 || run2.At == run.At {
		t.Fatalf("within RefreshEvery: %d reads, run %+v", reads, run2)
	}
	clock = clock.Add(RefreshEvery)
	c.Capture(1)
	if reads != 2 {
		t.Fatalf("after RefreshEvery: %d reads, want 2", reads)
	}
}
