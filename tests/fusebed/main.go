//go:build linux

// Command fusebed is a Lustre-like test bed on one machine: it mounts ONE
// backing directory at K mount points, each mount standing for a cluster
// node that shares the file system.
//
// Usage:
//
//	fusebed --backing DIR --mount M1 --mount M2 ... [--latency D] [--debug]
//	fusebed --cleanup M1 M2 ...
//
// Flags:
//
//	--backing DIR  the directory all mounts show (created if missing)
//	--mount M      a mount point (repeatable, at least one; created if
//	               missing; must not lie inside DIR, nor DIR inside it)
//	--latency D    sleep D (a Go duration such as 200us or 1ms) in every
//	               metadata request (lookup, getattr, statx, create, link,
//	               unlink, rename, mkdir, rmdir, open), like a round trip to
//	               a Lustre metadata server; default 0
//	--debug        log every FUSE request and reply on stderr
//	--cleanup      do not mount: clear the (dead) mounts at the points given
//	               as arguments (and with --mount), then exit
//
// Serving: fusebed clears stale mounts at the requested points (see
// cleanup below), mounts all, checks that each one answers, then prints
// exactly one line "ready" on stdout and serves until SIGTERM or SIGINT, on
// which it unmounts every mount (detaching lazily, as umount -l, one still
// busy with open files after about a second) and exits 0. It exits 2 on a
// usage error, 1 on a mount error (nothing is left mounted then) or if all
// its mounts were unmounted by someone else.
//
// What each mount is: go-fuse's loopback node (fs.NewLoopbackRoot) over the
// backing directory, one independent FUSE connection per mount. Therefore:
//
//   - fcntl (POSIX) and flock locks are NOT forwarded (EnableLocks: false):
//     the kernel keeps them local to each mount, so a lock taken via mount A
//     does not conflict with one via mount B, while two processes on the same
//     mount do conflict. This is Lustre mounted with -o localflock (and NFS
//     with local_lock=all): SQLite's own locking protects nothing across
//     "nodes".
//   - link, rename, O_EXCL create, unlink, mkdir are passed to the one
//     backing directory, so they are atomic across mounts: link to an
//     existing name fails with EEXIST and O_EXCL create races have one
//     winner whatever mount each contender uses. Inode numbers and link
//     counts are the backing file system's, the same via every mount.
//   - Entry, attribute and negative-entry timeouts are 0, so the kernel
//     asks the server for every lookup and stat: names and sizes changed via
//     one mount are seen at once via another.
//   - Every open and create returns FOPEN_DIRECT_IO and kernel passthrough is
//     off, so no mount keeps file data in its page cache: every read and
//     write is a request to this server, and data written via one mount is
//     read fresh via another, even through a descriptor opened before the
//     write (as SQLite keeps its database open). Consequence: mmap with
//     MAP_SHARED of a file on a mount fails with ENODEV (MAP_PRIVATE works),
//     so SQLite's WAL mode (a shared-memory -shm file) fails with "disk I/O
//     error"; rollback-journal modes do not map the database and work.
//
// Measured on the development machine (Linux 6.18, 2 cores, ext4 backing,
// as root):
//
//   - go-fuse v2.12.1 mounts with mount(2) itself (DirectMountStrict; no
//     fusermount binary is needed or used). Without CAP_SYS_ADMIN the mount
//     fails with EPERM and fusebed exits 1 saying so.
//   - Data coherence, 20000 pairs of "4 KiB pwrite via mount A, pread via a
//     descriptor opened earlier via mount B": FOPEN_DIRECT_IO: 0 stale reads,
//     0.74 s. Kernel page cache with its default automatic invalidation (on a
//     changed mtime at each attribute refresh): 0 stale here, but 3.2 s, and
//     it rests on the backing file system's mtime changing at every write.
//     Page cache with ExplicitDataCacheControl: 20000 of 20000 reads stale.
//   - Requests: stat(2) of a file is LOOKUP + STATX; an O_EXCL create is
//     LOOKUP + CREATE; link(2) is LOOKUP, LOOKUP, LINK. Per operation:
//     stat 40-50 us (ext4 directly: ~1 us); create+link+unlink+unlink
//     0.5 ms (ext4: 0.1 ms). With --latency D each delayed request costs
//     about D + 0.1-0.2 ms: 200us gives stat 0.68 ms and that cycle 3.3 ms;
//     1ms gives 2.5 ms and 11.3 ms. (The sleep is nanosleep(2): time.Sleep
//     rounds sub-millisecond sleeps up to ~1 ms.)
//   - Two SQLite writers (default VFS, journal_mode=DELETE, busy_timeout
//     5 s, 3-row transactions) in two processes on two mounts damaged the
//     database in every try (35 of 35), within their first 5 transactions
//     (80-160 ms): committed rows lost or rolled-back rows present, "database
//     disk image is malformed", integrity_check failures, and "disk I/O
//     error" as one deletes the other's journal. The same two writers on
//     one mount: ~450-550 transactions in 4 s, row counts exact, integrity
//     ok (see sqlite_test.go).
//   - A fusebed killed with SIGKILL leaves mounts that answer ENOTCONN.
//     Plain umount clears one with no file open on it; with a file still
//     open, umount and umount -f fail with EBUSY and umount -l clears it.
//     After that the mount point is the plain (empty) directory again.
//
// Cleanup: for each point that is a mount, fusebed calls umount2(2) with no
// flags, then MNT_FORCE, then MNT_DETACH (what `umount`, `umount -f` and
// `umount -l` do as root), stopping at the first that works, and repeats
// while mounts are stacked there. At startup it does this only for a FUSE
// mount that is dead (ENOTCONN); a live mount at a requested point is an
// error (another fusebed may be serving it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// mountList is a repeatable string flag.
type mountList []string

func (m *mountList) String() string     { return strings.Join(*m, ",") }
func (m *mountList) Set(v string) error { *m = append(*m, v); return nil }

func run(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("fusebed", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var (
		backing string
		mounts  mountList
		latency time.Duration
		debug   bool
		cleanup bool
	)
	fset.StringVar(&backing, "backing", "", "backing `DIR` shown at every mount")
	fset.Var(&mounts, "mount", "mount point `M` (repeat for each simulated node)")
	fset.DurationVar(&latency, "latency", 0, "sleep `D` in every metadata request")
	fset.BoolVar(&debug, "debug", false, "log FUSE requests on stderr")
	fset.BoolVar(&cleanup, "cleanup", false, "clear the mounts at the given points and exit")
	fset.Usage = func() {
		fmt.Fprintln(stderr, "usage: fusebed --backing DIR --mount M1 --mount M2 ... [--latency D] [--debug]")
		fmt.Fprintln(stderr, "       fusebed --cleanup M1 M2 ...")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	logger := log.New(stderr, "fusebed: ", 0)

	if cleanup {
		points := append(append([]string{}, mounts...), fset.Args()...)
		if len(points) == 0 {
			logger.Print("--cleanup needs mount points")
			return 2
		}
		code := 0
		for _, p := range points {
			steps, err := cleanupMount(p)
			switch {
			case err != nil:
				logger.Printf("cleanup %s: %v", p, err)
				code = 1
			case len(steps) == 0:
				logger.Printf("cleanup %s: not mounted", p)
			default:
				logger.Printf("cleanup %s: cleared %d mount(s) by %s", p, len(steps), strings.Join(steps, ", "))
			}
		}
		return code
	}

	if fset.NArg() > 0 {
		logger.Printf("unexpected arguments %q", fset.Args())
		fset.Usage()
		return 2
	}
	if backing == "" || len(mounts) == 0 {
		fset.Usage()
		return 2
	}
	if latency < 0 {
		logger.Print("--latency must not be negative")
		return 2
	}
	bed, err := newBed(backing, mounts, latency, debug, logger)
	if err != nil {
		logger.Print(err)
		return 1
	}
	if err := bed.start(); err != nil {
		logger.Print(err)
		bed.stop()
		return 1
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	gone := make(chan struct{})
	go func() {
		bed.wait()
		close(gone)
	}()

	if _, err := io.WriteString(stdout, "ready\n"); err != nil {
		logger.Printf("print ready: %v", err)
	}
	if f, ok := stdout.(*os.File); ok {
		_ = f.Sync() // a pipe or terminal: nothing buffered, Sync is a no-op
	}

	select {
	case s := <-sigs:
		if debug {
			logger.Printf("%v: unmounting", s)
		}
		if !bed.stop() {
			return 1
		}
		return 0
	case <-gone:
		logger.Print("all mounts were unmounted by someone else")
		return 1
	}
}

// bed is the set of mounts of one backing directory.
type bed struct {
	backing string
	points  []string
	latency time.Duration
	debug   bool
	logger  *log.Logger

	mu      sync.Mutex
	servers []*fuse.Server // parallel to points; nil until mounted
	wg      sync.WaitGroup
}

func newBed(backing string, mounts []string, latency time.Duration, debug bool, logger *log.Logger) (*bed, error) {
	b, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b, 0o755); err != nil {
		return nil, fmt.Errorf("backing: %w", err)
	}
	if b, err = filepath.EvalSymlinks(b); err != nil {
		return nil, fmt.Errorf("backing: %w", err)
	}
	seen := map[string]bool{}
	var points []string
	for _, m := range mounts {
		if a, err := filepath.Abs(m); err == nil {
			if err := os.MkdirAll(filepath.Dir(a), 0o755); err != nil {
				return nil, fmt.Errorf("mount point %s: %w", m, err)
			}
		}
		p, err := resolvePoint(m)
		if err != nil {
			return nil, fmt.Errorf("mount point %s: %w", m, err)
		}
		if seen[p] {
			return nil, fmt.Errorf("mount point %s given twice", m)
		}
		seen[p] = true
		if within(p, b) || within(b, p) {
			return nil, fmt.Errorf("mount point %s and backing %s must not contain each other", p, b)
		}
		points = append(points, p)
	}
	return &bed{
		backing: b,
		points:  points,
		latency: latency,
		debug:   debug,
		logger:  logger,
		servers: make([]*fuse.Server, len(points)),
	}, nil
}

// within reports whether p is dir or lies under it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// start clears stale mounts, creates the mount points and mounts all. On an
// error, the mounts made so far stay in b.servers for stop.
func (b *bed) start() error {
	for _, p := range b.points {
		if err := clearStale(p, b.logger); err != nil {
			return err
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("mount point: %w", err)
		}
	}
	for i, p := range b.points {
		srv, err := b.mount(i, p)
		if err != nil {
			return fmt.Errorf("mount %s: %w", p, err)
		}
		b.mu.Lock()
		b.servers[i] = srv
		b.mu.Unlock()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			srv.Wait()
		}()
	}
	// Each mount answers: a stat of the root goes through the server.
	for _, p := range b.points {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("mount %s does not answer: %w", p, err)
		}
	}
	return nil
}

func (b *bed) mount(i int, point string) (*fuse.Server, error) {
	lr, err := fs.NewLoopbackRoot(b.backing)
	if err != nil {
		return nil, err
	}
	root := &bedNode{LoopbackNode: lr.(*fs.LoopbackNode), latency: b.latency}
	zero := time.Duration(0)
	mlog := log.New(b.logger.Writer(), fmt.Sprintf("fusebed[%d %s]: ", i, point), log.Lmicroseconds)
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			EnableLocks:       false,
			FsName:            "fusebed:" + b.backing,
			Name:              "fusebed",
			// All file data goes through this server (see FOPEN_DIRECT_IO
			// in bedNode), whatever the kernel offers.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
			Debug:                b.debug,
			Logger:               mlog,
		},
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		Logger:          mlog,
	}
	return fs.Mount(point, root, opts)
}

// wait returns when every mount has stopped serving.
func (b *bed) wait() { b.wg.Wait() }

// stop unmounts every mount. A mount still busy after a few tries is
// detached lazily (umount -l). It reports whether all mounts are gone.
func (b *bed) stop() bool {
	b.mu.Lock()
	servers := append([]*fuse.Server{}, b.servers...)
	b.mu.Unlock()
	ok := true
	for i, srv := range servers {
		if srv == nil {
			continue
		}
		p := b.points[i]
		var err error
		// Unmount itself retries for about 0.3 s (a file just closed is
		// released asynchronously); a file still open keeps it busy.
		for try := 0; try < 2; try++ {
			if err = srv.Unmount(); err == nil || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err == nil {
			continue
		}
		b.logger.Printf("unmount %s: %v; detaching it lazily", p, err)
		if derr := unix.Unmount(p, unix.MNT_DETACH); derr != nil && isMountPoint(p) {
			b.logger.Printf("umount -l %s: %v", p, derr)
			ok = false
		}
	}
	return ok
}

// bedNode is the loopback node with FOPEN_DIRECT_IO on every open and the
// injected metadata latency.
type bedNode struct {
	*fs.LoopbackNode
	latency time.Duration
}

var (
	_ fs.NodeWrapChilder = (*bedNode)(nil)
	_ fs.NodeLookuper    = (*bedNode)(nil)
	_ fs.NodeGetattrer   = (*bedNode)(nil)
	_ fs.NodeStatxer     = (*bedNode)(nil)
	_ fs.NodeCreater     = (*bedNode)(nil)
	_ fs.NodeOpener      = (*bedNode)(nil)
	_ fs.NodeLinker      = (*bedNode)(nil)
	_ fs.NodeUnlinker    = (*bedNode)(nil)
	_ fs.NodeRenamer     = (*bedNode)(nil)
	_ fs.NodeMkdirer     = (*bedNode)(nil)
	_ fs.NodeRmdirer     = (*bedNode)(nil)
)

func (n *bedNode) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &bedNode{LoopbackNode: ops.(*fs.LoopbackNode), latency: n.latency}
}

// delay sleeps n.latency with nanosleep(2): time.Sleep rounds sleeps under
// a millisecond up to about 1 ms (the runtime's poller waits in whole
// milliseconds), which would make --latency 200us a 1 ms latency. The
// blocked thread is handed off by the runtime like any blocking syscall.
func (n *bedNode) delay() {
	if n.latency <= 0 {
		return
	}
	ts := unix.NsecToTimespec(n.latency.Nanoseconds())
	for {
		var rem unix.Timespec
		if err := unix.Nanosleep(&ts, &rem); err != unix.EINTR {
			return
		}
		ts = rem
	}
}

func (n *bedNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.delay()
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *bedNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.delay()
	return n.LoopbackNode.Getattr(ctx, f, out)
}

func (n *bedNode) Statx(ctx context.Context, f fs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	n.delay()
	return n.LoopbackNode.Statx(ctx, f, flags, mask, out)
}

func (n *bedNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.delay()
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return ch, fh, fuseFlags | fuse.FOPEN_DIRECT_IO, errno
}

func (n *bedNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.delay()
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	return fh, fuseFlags | fuse.FOPEN_DIRECT_IO, errno
}

func (n *bedNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.delay()
	return n.LoopbackNode.Link(ctx, target, name, out)
}

func (n *bedNode) Unlink(ctx context.Context, name string) syscall.Errno {
	n.delay()
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *bedNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.delay()
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

func (n *bedNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.delay()
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *bedNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.delay()
	return n.LoopbackNode.Rmdir(ctx, name)
}

// resolvePoint makes p absolute with its parent's symlinks resolved, without
// touching p itself (a dead mount answers ENOTCONN to any stat of it).
func resolvePoint(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if a == "/" {
		return "", errors.New("cannot mount at /")
	}
	dir, base := filepath.Split(a)
	rdir, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return a, nil // nothing can be mounted there yet
	}
	if err != nil {
		return "", err
	}
	return filepath.Join(rdir, base), nil
}

// mountsAt returns the file system types of the mounts at point p (the
// newest last), from /proc/self/mountinfo.
func mountsAt(p string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var types []string
	for _, line := range strings.Split(string(data), "\n") {
		// id parent maj:min root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(line)
		if len(fields) < 7 || unescapeMountinfo(fields[4]) != p {
			continue
		}
		fstype := ""
		for i := 6; i+1 < len(fields); i++ {
			if fields[i] == "-" {
				fstype = fields[i+1]
				break
			}
		}
		types = append(types, fstype)
	}
	return types, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space, ...) of a
// path in /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isMountPoint(p string) bool {
	types, err := mountsAt(p)
	return err == nil && len(types) > 0
}

// cleanupMount clears every mount stacked at point m with umount, then
// umount -f, then umount -l (the first that works, for each) and returns
// the steps that worked, one per mount cleared.
func cleanupMount(m string) ([]string, error) {
	p, err := resolvePoint(m)
	if err != nil {
		return nil, err
	}
	var steps []string
	for len(steps) < 64 && isMountPoint(p) {
		step, err := unmountOne(p)
		if err != nil {
			return steps, err
		}
		steps = append(steps, step)
	}
	if isMountPoint(p) {
		return steps, errors.New("still mounted")
	}
	return steps, nil
}

// unmountOne removes the newest mount at p and returns the step that did it.
func unmountOne(p string) (string, error) {
	var errs []error
	for _, f := range []struct {
		name  string
		flags int
	}{{"umount", 0}, {"umount -f", unix.MNT_FORCE}, {"umount -l", unix.MNT_DETACH}} {
		err := unix.Unmount(p, f.flags)
		if err == nil {
			return f.name, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
	}
	return "", errors.Join(errs...)
}

// clearStale clears dead FUSE mounts at p; a live mount there is an error.
func clearStale(p string, logger *log.Logger) error {
	types, err := mountsAt(p)
	if err != nil || len(types) == 0 {
		return err
	}
	if !strings.HasPrefix(types[len(types)-1], "fuse") {
		return fmt.Errorf("mount point %s is already a %s mount", p, types[len(types)-1])
	}
	errc := make(chan error, 1)
	go func() {
		var st unix.Stat_t
		errc <- unix.Stat(p, &st)
	}()
	select {
	case err = <-errc:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("mount point %s is a FUSE mount that does not answer (a stopped fusebed?); run fusebed --cleanup %s", p, p)
	}
	if !errors.Is(err, unix.ENOTCONN) {
		return fmt.Errorf("mount point %s is already a live FUSE mount (another fusebed?); run fusebed --cleanup %s", p, p)
	}
	steps, err := cleanupMount(p)
	if err != nil {
		return fmt.Errorf("clear stale mount %s: %w", p, err)
	}
	logger.Printf("cleared %d stale mount(s) at %s by %s", len(steps), p, strings.Join(steps, ", "))
	return nil
}
