package cpu

import (
	"os"
	"testing"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

const sampleX86 = `processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 85
model name	: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz
stepping	: 7
cpu MHz		: 2500.000

processor	: 1
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz
`

const samplePPC = `processor	: 0
cpu		: POWER9 (raw), altivec supported
clock		: 3800.000000MHz
revision	: 2.2 (pvr 004e 1202)

timebase	: 512000000
platform	: PowerNV
model		: 9006-22P
machine		: PowerNV 9006-22P
`

const sampleARM64 = `processor	: 0
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x3
CPU part	: 0xd0c
CPU revision	: 1
`

const sampleARM32 = `Processor	: ARMv7 Processor rev 4 (v7l)
processor	: 0
BogoMIPS	: 38.40
Hardware	: BCM2835
`

const sampleLscpuARM = `Architecture:                    aarch64
CPU op-mode(s):                  32-bit, 64-bit
Vendor ID:                       ARM
Model name:                      Neoverse-N1
Model:                           1
`

const sampleLscpuModelOnly = `Architecture:  ppc64le
Model:         2.2 (pvr 004e 1202)
`

func TestParseProcCPUInfo(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"x86", sampleX86, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"},
		{"ppc64le", samplePPC, "POWER9 (raw), altivec supported"},
		{"arm64 has no brand", sampleARM64, ""},
		{"arm32 Processor line first", sampleARM32, "ARMv7 Processor rev 4 (v7l)"},
		{"empty", "", ""},
		{"empty value skipped", "model name\t:\nmodel name : X\n", "X"},
		{"value keeps later colons", "model name : A: B : C\n", "A: B : C"},
		{"numeric value skipped", "model name : 1234\ncpu : Real\n", "Real"},
		{"case-insensitive key", "MODEL NAME : Up\n", "Up"},
		{"uarch", "uarch : sifive,u74-mc\n", "sifive,u74-mc"},
		{"CRLF and padding", "model name \t:   Padded CPU  \r\n", "Padded CPU"},
		{"no colon", "model name Intel\n", ""},
		{"nbsp stripped like Python", "model name :\u00a0X\u00a0\n", "X"},
	}
	for _, c := range cases {
		if got := ParseProcCPUInfo(c.in); got != c.want {
			t.Errorf("%s: ParseProcCPUInfo = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestParseLscpu(t *testing.T) {
	if got := ParseLscpu(sampleLscpuARM); got != "Neoverse-N1" {
		t.Errorf("got %q", got)
	}
	if got := ParseLscpu(sampleLscpuModelOnly); got != "2.2 (pvr 004e 1202)" {
		t.Errorf("got %q", got)
	}
	if got := ParseLscpu("Model: 85\n"); got != "" {
		t.Errorf("numeric Model must be ignored, got %q", got)
	}
}

func withSources(t *testing.T, proc string, procErr error, lscpu string, lscpuOK bool, brand string) string {
	t.Helper()
	oldP, oldL, oldB := readProcCPUInfo, runLscpu, cpuidBrand
	t.Cleanup(func() { readProcCPUInfo, runLscpu, cpuidBrand = oldP, oldL, oldB })
	readProcCPUInfo = func() ([]byte, error) { return []byte(proc), procErr }
	runLscpu = func() (string, bool) { return lscpu, lscpuOK }
	cpuidBrand = func() string { return brand }
	return detectModel()
}

func TestDetectOrder(t *testing.T) {
	if got := withSources(t, sampleX86, nil, sampleLscpuARM, true, "CPUID brand"); got != "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz" {
		t.Errorf("proc first: %q", got)
	}
	if got := withSources(t, sampleARM64, nil, sampleLscpuARM, true, ""); got != "Neoverse-N1" {
		t.Errorf("lscpu second: %q", got)
	}
	if got := withSources(t, sampleARM64, nil, "", false, "  Some CPU\x00\x00"); got != "Some CPU" {
		t.Errorf("cpuid third: %q", got)
	}
	if got := withSources(t, "", os.ErrNotExist, "", false, "unknown"); got != Unknown {
		t.Errorf("nothing: %q", got)
	}
	if got := withSources(t, "", os.ErrNotExist, "", false, ""); got != Unknown {
		t.Errorf("nothing: %q", got)
	}
}

func TestModelStable(t *testing.T) {
	m := Model()
	if m == "" {
		t.Fatal("Model() is empty")
	}
	if Model() != m {
		t.Fatal("Model() not stable")
	}
	t.Logf("Model() = %q", m)
}

func TestSlurmCPUs(t *testing.T) {
	t.Setenv("SLURM_CPUS_PER_TASK", "8")
	if got := SlurmCPUs(); got != "8" {
		t.Errorf("set: %q", got)
	}
	t.Setenv("SLURM_CPUS_PER_TASK", "")
	if got := SlurmCPUs(); got != "" {
		t.Errorf("empty must stay empty like os.environ.get: %q", got)
	}
	os.Unsetenv("SLURM_CPUS_PER_TASK")
	if got := SlurmCPUs(); got != "N/A" {
		t.Errorf("unset: %q", got)
	}
}

// needPyCPUInfo skips unless the interpreter can import cpuinfo.
// TIRASTORE_TEST_PYTHON selects the interpreter (e.g. a venv with py-cpuinfo).
func needPyCPUInfo(t *testing.T) {
	t.Helper()
	if err := pytest.Command(t, "import cpuinfo").Run(); err != nil {
		t.Skipf("py-cpuinfo not importable by %s (set %s)", pytest.Python(t), pytest.EnvPython)
	}
}

func TestModelMatchesPyCPUInfo(t *testing.T) {
	needPyCPUInfo(t)
	var want string
	pytest.RunJSON(t, "import cpuinfo, json; print(json.dumps(cpuinfo.get_cpu_info().get('brand_raw', '')))", nil, &want)
	if want == "" {
		want = Unknown // the original's last fallback
	}
	if got := Model(); got != want {
		t.Errorf("Model() = %q, py-cpuinfo brand_raw = %q", got, want)
	}
}

// TestParsersMatchPyCPUInfo feeds the same texts to py-cpuinfo's own field
// parser.
func TestParsersMatchPyCPUInfo(t *testing.T) {
	needPyCPUInfo(t)
	texts := []string{sampleX86, samplePPC, sampleARM64, sampleARM32, "",
		"model name\t:\nmodel name : X\n", "model name : A: B : C\n",
		"model name : 1234\ncpu : Real\n", "MODEL NAME : Up\n", "model name \t:   Padded CPU  \r\n",
		"model name :\u00a0X\u00a0\n", "a\x1cmodel name: sep\n", "cpu : \u0661\u0662\ncpu : ok",
		sampleLscpuARM, sampleLscpuModelOnly, "Model: 85\n"}
	script := `
import json, sys
from cpuinfo import cpuinfo as c
out = []
for t in json.load(sys.stdin):
    p = c._get_field(True, t, None, None, 'model name', 'cpu', 'processor', 'uarch') or ''
    l = c._get_field(False, t, None, None, 'Model name')
    if not l:
        l = c._get_field(False, t, None, None, 'Model')
        if not l or l.isdigit():
            l = ''
    out.append([p, l])
print(json.dumps(out))
`
	var want [][2]string
	pytest.RunJSON(t, script, texts, &want)
	for i, text := range texts {
		if got := ParseProcCPUInfo(text); got != want[i][0] {
			t.Errorf("proc %q: got %q, py-cpuinfo %q", text, got, want[i][0])
		}
		if got := ParseLscpu(text); got != want[i][1] {
			t.Errorf("lscpu %q: got %q, py-cpuinfo %q", text, got, want[i][1])
		}
	}
}
