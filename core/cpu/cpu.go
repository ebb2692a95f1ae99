// Package cpu reports the CPU identity stored in a database's metadata.
//
// The original Python TiraStore compares the CPU model and SLURM_CPUS_PER_TASK
// of every process against the values stored in the database and disables
// writes on a mismatch, so a Go worker must report exactly the strings a
// Python worker on the same node reports, or mixed fleets lock each other
// out. The Python side takes py-cpuinfo's brand_raw. py-cpuinfo 9.0.0 on
// Linux does not ask the CPUID instruction first: it reads /proc/cpuinfo
// (first line named "model name", "cpu", "processor" or "uarch" with a
// non-numeric value), then `lscpu` ("Model name", else a non-numeric
// "Model"), and only then CPUID (x86 only). Model follows the same order so
// that it also agrees on ppc64le ("cpu : POWER9 ...") and aarch64 (where
// only lscpu names the core), where CPUID gives nothing.
package cpu

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/klauspost/cpuid/v2"

	"github.com/tirastore/tirastore/core/environ"
)

// Unknown is what Model reports when no source names the CPU; the original
// stores the same literal.
const Unknown = "unknown"

// SlurmUnset is what SlurmCPUs reports outside a Slurm allocation; the
// original stores the same literal, and treats it as "matches anything".
const SlurmUnset = "N/A"

var (
	modelOnce  sync.Once
	modelValue string
)

// Model returns the CPU model string as py-cpuinfo's brand_raw reports it,
// or "unknown". It is computed once per process (it may run lscpu).
func Model() string {
	modelOnce.Do(func() { modelValue = detectModel() })
	return modelValue
}

// Source functions, replaceable by tests.
var (
	readProcCPUInfo = func() ([]byte, error) { return os.ReadFile("/proc/cpuinfo") }
	runLscpu        = defaultRunLscpu
	cpuidBrand      = func() string { return cpuid.CPU.BrandName }
)

func detectModel() string {
	var procText string
	if b, err := readProcCPUInfo(); err == nil {
		procText = string(b)
		if s := ParseProcCPUInfo(procText); s != "" {
			return s
		}
	}
	if out, ok := runLscpu(); ok {
		if s := ParseLscpu(out); s != "" {
			return s
		}
	}
	if s := pyStrip(latin1(strings.Trim(cpuidBrand(), "\x00"))); s != "" && s != Unknown {
		return s
	}
	// The original's own fallback; normally already covered above.
	if s := procField(procText, false, "model name"); s != "" {
		return s
	}
	return Unknown
}

func defaultRunLscpu() (string, bool) {
	path, err := exec.LookPath("lscpu")
	if err != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path).Output()
	if err != nil {
		return "", false
	}
	return string(out), true
}

// ParseProcCPUInfo extracts the brand the way py-cpuinfo reads /proc/cpuinfo:
// the first line whose key is one of "model name", "cpu", "processor",
// "uarch" (case-insensitive) and whose value is non-empty and not all digits.
func ParseProcCPUInfo(text string) string {
	return procField(text, true, "model name", "cpu", "processor", "uarch")
}

// ParseLscpu extracts the brand the way py-cpuinfo reads lscpu output:
// "Model name", else "Model" when it is not a number.
func ParseLscpu(text string) string {
	if s := procField(text, false, "Model name"); s != "" {
		return s
	}
	if s := procField(text, false, "Model"); s != "" && !pyIsDigit(s) {
		return s
	}
	return ""
}

// procField mirrors py-cpuinfo's _get_field_actual: lines outer, names inner;
// key and value split at the first ':' and stripped; key compared lowercased.
func procField(text string, cantBeNumber bool, names ...string) string {
	for _, line := range pySplitLines(text) {
		left, right, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		left = strings.ToLower(pyStrip(left))
		right = pyStrip(right)
		if right == "" {
			continue
		}
		for _, name := range names {
			if left == strings.ToLower(name) && !(cantBeNumber && pyIsDigit(right)) {
				return right
			}
		}
	}
	return ""
}

// SlurmCPUs returns SLURM_CPUS_PER_TASK, or "N/A" when it is unset. Like
// Python's os.environ.get, a variable set to "" yields "".
func SlurmCPUs() string {
	if v, ok := environ.Lookup("SLURM_CPUS_PER_TASK"); ok {
		return v
	}
	return SlurmUnset
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool {
	switch {
	case r >= 0x09 && r <= 0x0d, r >= 0x1c && r <= 0x20, r == 0x85, r == 0xa0,
		r == 0x1680, r >= 0x2000 && r <= 0x200a, r == 0x2028, r == 0x2029,
		r == 0x202f, r == 0x205f, r == 0x3000:
		return true
	}
	return false
}

// pyStrip is Python's str.strip() with no argument.
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

// pyIsDigit approximates Python's str.isdigit (non-empty, all digits). It
// accepts Unicode decimal digits (Nd); Python also accepts a few hundred
// "digit" characters such as superscripts, which never occur in these files.
func pyIsDigit(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsDigit(r) {
			return false
		}
	}
	return true
}

// pySplitLines is Python's str.splitlines() (no keepends).
func pySplitLines(s string) []string {
	var lines []string
	start := 0
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		switch rs[i] {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			lines = append(lines, string(rs[start:i]))
			start = i + 1
		case '\r':
			lines = append(lines, string(rs[start:i]))
			if i+1 < len(rs) && rs[i+1] == '\n' {
				i++
			}
			start = i + 1
		}
	}
	if start < len(rs) {
		lines = append(lines, string(rs[start:]))
	}
	return lines
}

// latin1 maps each byte to the code point of the same value, as py-cpuinfo
// does with chr() when it assembles the CPUID brand string.
func latin1(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(rune(s[i]))
	}
	return b.String()
}
