//go:build linux

package main

// Test harness: the test binary plays every process the tests need. With
// FUSEBED_TEST_ROLE set, TestMain runs that role instead of the tests:
// "fusebed" is the program itself (run), "locker" and "sqlwriter" are the
// second processes of the lock and SQLite tests.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const roleEnv = "FUSEBED_TEST_ROLE"

// started lists every mount point a test asked for, to check at the end
// that none is left mounted.
var started struct {
	sync.Mutex
	points []string
}

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
	case "fusebed":
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	case "locker":
		os.Exit(lockerMain(os.Args[1:]))
	case "sqlwriter":
		os.Exit(sqlWriterMain(os.Args[1:]))
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", roleEnv, os.Getenv(roleEnv))
		os.Exit(2)
	}
	code := m.Run()
	started.Lock()
	for _, p := range started.points {
		if isMountPoint(p) {
			fmt.Fprintf(os.Stderr, "FAIL: %s is still mounted after the tests; clearing it\n", p)
			if _, err := cleanupMount(p); err != nil {
				fmt.Fprintf(os.Stderr, "cleanup %s: %v\n", p, err)
			}
			code = 1
		}
	}
	started.Unlock()
	os.Exit(code)
}

// roleCmd is a command running this test binary in the given role.
func roleCmd(role string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	// Under -race, a process sleeps 1 s at exit (atexit_sleep_ms) unless
	// told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "GORACE="+gorace)
	// A fusebed whose test dies unmounts itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	return cmd
}

// requireFuse skips the test where FUSE cannot be mounted directly.
func requireFuse(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("skipping: FUSE test bed needs /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: FUSE test bed mounts with mount(2) directly, which needs root")
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testBed is a running fusebed process.
type testBed struct {
	t       *testing.T
	cmd     *exec.Cmd
	backing string
	mounts  []string
	stderr  *syncBuffer
	exited  chan struct{}
	waitErr error
	stopped bool
	extra   atomic.Int32 // lines on stdout after the first
}

// mountEPERM matches fusebed's own report that mount(2) was refused
// (no CAP_SYS_ADMIN in this namespace): the one failure that skips.
var mountEPERM = regexp.MustCompile(`(?m)\bmount \S+: .*operation not permitted`)

// startBed starts fusebed on a new backing directory with n mounts and
// waits for "ready"; the test's cleanup stops it and checks it unmounted.
func startBed(t *testing.T, n int, extra ...string) *testBed {
	t.Helper()
	requireFuse(t)
	dir := t.TempDir() // registered first, so removed after the bed stops
	b := &testBed{t: t, backing: filepath.Join(dir, "backing")}
	for i := 0; i < n; i++ {
		b.mounts = append(b.mounts, filepath.Join(dir, fmt.Sprintf("node%d", i+1)))
	}
	b.start(extra...)
	return b
}

// start (re)starts fusebed on b's backing directory and mount points.
func (b *testBed) start(extra ...string) {
	t := b.t
	t.Helper()
	args := []string{"--backing", b.backing}
	for _, m := range b.mounts {
		args = append(args, "--mount", m)
	}
	args = append(args, extra...)
	started.Lock()
	started.points = append(started.points, b.mounts...)
	started.Unlock()

	b.cmd = roleCmd("fusebed", args...)
	b.stderr = &syncBuffer{}
	b.cmd.Stderr = b.stderr
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b.exited = make(chan struct{})
	b.stopped = false
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
				b.extra.Add(1) // checked by stop
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		b.waitErr = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(b.stop)

	select {
	case line := <-lines:
		if line != "ready" {
			t.Fatalf("fusebed printed %q, want \"ready\"; stderr:\n%s", line, b.stderr)
		}
	case <-b.exited:
		msg := b.stderr.String()
		if mountEPERM.MatchString(msg) {
			t.Skipf("skipping: mounting FUSE here fails with EPERM (no CAP_SYS_ADMIN in this namespace?):\n%s", msg)
		}
		t.Fatalf("fusebed exited before ready (%v); stderr:\n%s", b.waitErr, msg)
	case <-time.After(30 * time.Second):
		t.Fatalf("fusebed not ready after 30s; stderr:\n%s", b.stderr)
	}
}

// stop sends SIGTERM, expects exit 0 with nothing left mounted, and falls
// back to SIGKILL and cleanup (failing the test) otherwise.
func (b *testBed) stop() {
	t := b.t
	if b.stopped {
		return
	}
	b.stopped = true
	select {
	case <-b.exited:
	default:
		b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.exited:
			if b.waitErr != nil {
				t.Errorf("fusebed after SIGTERM: %v; stderr:\n%s", b.waitErr, b.stderr)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("fusebed did not exit 20s after SIGTERM; killing it; stderr:\n%s", b.stderr)
			b.cmd.Process.Kill()
			<-b.exited
		}
	}
	if n := b.extra.Load(); n > 0 {
		t.Errorf("fusebed printed %d line(s) on stdout after \"ready\"", n)
	}
	for _, m := range b.mounts {
		if isMountPoint(m) {
			t.Errorf("%s still mounted after fusebed exited", m)
			if _, err := cleanupMount(m); err != nil {
				t.Errorf("cleanup %s: %v", m, err)
			}
		}
	}
}

// kill9 kills fusebed with SIGKILL, leaving its mounts dead.
func (b *testBed) kill9() {
	b.t.Helper()
	b.cmd.Process.Kill()
	<-b.exited
	b.stopped = true
}

func (b *testBed) path(mount int, name string) string {
	return filepath.Join(b.mounts[mount], name)
}

// runCleanup runs `fusebed --cleanup points...` and returns its stderr.
func runCleanup(t *testing.T, points ...string) string {
	t.Helper()
	cmd := roleCmd("fusebed", append([]string{"--cleanup"}, points...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("fusebed --cleanup: %v\n%s", err, out.String())
	}
	return out.String()
}

func TestUsage(t *testing.T) {
	dir := t.TempDir()
	back := filepath.Join(dir, "backing")
	var out, errOut bytes.Buffer
	if code := run(nil, &out, &errOut); code != 2 {
		t.Errorf("no arguments: exit %d, want 2", code)
	}
	if code := run([]string{"--backing", back, "--mount", filepath.Join(back, "m")}, &out, &errOut); code != 1 {
		t.Errorf("mount inside backing: exit %d, want 1", code)
	}
	if code := run([]string{"--backing", back, "--mount", dir}, &out, &errOut); code != 1 {
		t.Errorf("backing inside mount: exit %d, want 1", code)
	}
	m := filepath.Join(dir, "m")
	if code := run([]string{"--backing", back, "--mount", m, "--mount", m + "/"}, &out, &errOut); code != 1 {
		t.Errorf("same mount twice: exit %d, want 1", code)
	}
	if code := run([]string{"--backing", back, "--mount", m, "--latency", "-1ms"}, &out, &errOut); code != 2 {
		t.Errorf("negative latency: exit %d, want 2", code)
	}
	if code := run([]string{"--cleanup", filepath.Join(dir, "not-a-mount")}, &out, &errOut); code != 0 {
		t.Errorf("cleanup of a plain directory: exit %d, want 0", code)
	}
	if out.Len() != 0 {
		t.Errorf("stdout: %q, want nothing", out.String())
	}
}

func TestMountinfoUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a\040b`: "/tmp/a b",
		`/tmp/x\011`:  "/tmp/x\t",
		`/tmp/plain`:  "/tmp/plain",
		`/tmp/a\\b`:   `/tmp/a\\b`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// statErr returns the error of stat(p) as an errno, or nil.
func statErr(p string) error {
	var st syscall.Stat_t
	err := syscall.Stat(p, &st)
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
