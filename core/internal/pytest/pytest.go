// Package pytest is the test plumbing shared by the differential tests that
// compare TiraStore's Go code with CPython (the original implementation and
// its json, pathlib, getpass, py-cpuinfo, ... behaviour): finding the
// interpreter, skipping when there is none, and running a script with
// input on stdin and output on stdout.
//
// It exists so that each package's tests do not carry their own copy of
// that plumbing, with its own idea of which interpreter to use and how to
// report a failing script. It is imported by _test.go files only.
package pytest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// EnvPython names the environment variable that selects the interpreter
// (e.g. a venv with py-cpuinfo installed) instead of python3 from $PATH.
const EnvPython = "TIRASTORE_TEST_PYTHON"

// maxArg is the longest script passed with -c; longer ones go through a
// file, as Linux limits one argument to 128 KiB.
const maxArg = 64 << 10

var interp struct {
	once    sync.Once
	path    string // "" = no interpreter; why says why
	why     string
	version string // major.minor, "" if the interpreter did not run
	err     error  // why version is ""
}

func find() {
	name := os.Getenv(EnvPython)
	if name == "" {
		name = "python3"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		interp.why = name + " not found"
		if name != "python3" {
			interp.why = EnvPython + "=" + name + " not found"
		}
		return
	}
	// The real interpreter behind p (sys.executable), so that version
	// manager shims are not paid for on every run.
	interp.path = p
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable); print('%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		interp.err = err
		return
	}
	exe, ver, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if exe = strings.TrimSpace(exe); exe != "" {
		interp.path = exe
	}
	interp.version = strings.TrimSpace(ver)
}

// Python returns the path of the interpreter: $TIRASTORE_TEST_PYTHON if
// set, else python3 from $PATH, resolved to sys.executable. It skips the
// test when there is none. The choice is made once per test binary.
func Python(t testing.TB) string {
	t.Helper()
	interp.once.Do(find)
	if interp.path == "" {
		t.Skip(interp.why)
	}
	return interp.path
}

// Version returns the interpreter's "major.minor" version, or the error
// that kept it from running; it skips like Python.
func Version(t testing.TB) (string, error) {
	t.Helper()
	Python(t)
	return interp.version, interp.err
}

// Command returns a command running script with args (sys.argv[1:]) under
// Python(t), for callers that start it themselves. The script is passed
// with -c, or as a temporary file when too long for one argument.
func Command(t testing.TB, script string, args ...string) *exec.Cmd {
	t.Helper()
	py := Python(t)
	if len(script) <= maxArg {
		return exec.Command(py, append([]string{"-c", script}, args...)...)
	}
	path := filepath.Join(t.TempDir(), "script.py")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return exec.Command(py, append([]string{path}, args...)...)
}

// Run runs script with args, stdin (none if nil) on its standard input, and
// returns its standard output. A failing script fails the test, with its
// standard error in the message.
func Run(t testing.TB, script string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := Command(t, script, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.Bytes())
	}
	return out
}

// RunJSON is Run with in encoded as JSON on stdin (none if in is nil) and
// the JSON the script prints decoded into out.
func RunJSON(t testing.TB, script string, in, out any, args ...string) {
	t.Helper()
	Python(t) // skip before any work
	var stdin []byte
	if in != nil {
		var err error
		if stdin, err = json.Marshal(in); err != nil {
			t.Fatal(err)
		}
	}
	res := Run(t, script, stdin, args...)
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("decoding python output: %v\n%s", err, res)
	}
}

// Lines splits output into lines; one final newline ends the last line.
func Lines(b []byte) []string {
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}
