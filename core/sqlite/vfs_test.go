package sqlite

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/tirastore/tirastore/core/storage"
)

// The VFS under test and the two it is compared with: unix-none (what Open
// used before) and "" for SQLite's default unix VFS with POSIX locks, as
// standard SQLite (the original's Python workers) opens the file.
const (
	vfsNone     = "unix-none"
	vfsStandard = ""
)

// openVFS opens path with Open's settings through the named VFS. VFSName
// goes through Open itself, so that the tests exercise Open's DSN.
func openVFS(t testing.TB, path, vfs string) *DB {
	t.Helper()
	if vfs == VFSName {
		db, err := Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	dsn := "file:" + uriPath(path) + "?mode=rw"
	if vfs != vfsStandard {
		dsn += "&vfs=" + vfs
	}
	dsn += "&_journal_mode=DELETE&_synchronous=FULL&_foreign_keys=1&_busy_timeout=0"
	db, err := openDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// newFile creates an empty database file with the original's mode 0666
// (whatever the umask) in a fresh directory.
func newFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache.db")
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustExec(t testing.TB, db *DB, q string, args ...any) {
	t.Helper()
	if _, err := db.exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// state is a digest of table t: row count and a hash over all rows in order.
func state(t testing.TB, db *DB) string {
	t.Helper()
	rows, err := db.query("SELECT k, v FROM t ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	h := sha256.New()
	n := 0
	for rows.Next() {
		var k int64
		var v []byte
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%d:%x;", k, v)
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d rows %x", n, h.Sum(nil)[:8])
}

func integrityOK(t testing.TB, db *DB) {
	t.Helper()
	var res string
	if err := db.queryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q %v", res, err)
	}
}

func noJournal(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path + "-journal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal left behind: %v", err)
	}
}

// fill creates table t with n rows of size-byte random blobs.
func fill(t testing.TB, db *DB, n, size int) {
	t.Helper()
	err := db.Tx(func(tx *Tx) error {
		if _, err := tx.Exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)"); err != nil {
			return err
		}
		_, err := tx.Exec(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < ?)
			INSERT INTO t SELECT i, randomblob(?) FROM c`, n, size)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestVFSRegistered(t *testing.T) {
	t.Parallel()
	if err := RegisterVFS(); err != nil {
		t.Fatal(err)
	}
	// A URI naming an unknown VFS fails; ours opens.
	path := newFile(t)
	db := openVFS(t, path, VFSName)
	defer db.Close()
	if _, err := db.HasTables(); err != nil {
		t.Fatal(err)
	}
	bad, _ := sql.Open("sqlite3", "file:"+path+"?mode=rw&vfs=no-such-vfs")
	defer bad.Close()
	if err := bad.Ping(); err == nil {
		t.Fatal("an unknown VFS opened: the vfs parameter is ignored")
	}
}

// Writes, a failed transaction, and big transactions that spill the page
// cache into the database file before commit (so that the journal really is
// what restores the file on rollback), all checked against standard SQLite.
func TestVFSReadWriteRollback(t *testing.T) {
	t.Parallel()
	path := newFile(t)
	db := openVFS(t, path, VFSName)
	defer db.Close()
	mustExec(t, db, "PRAGMA cache_size = 8") // pages: every big transaction spills

	fill(t, db, 200, 300)
	noJournal(t, path)
	before := state(t, db)

	// A transaction that fails after writing is rolled back.
	boom := errors.New("boom")
	err := db.Tx(func(tx *Tx) error {
		if _, err := tx.Exec("UPDATE t SET v = randomblob(300)"); err != nil {
			return err
		}
		if _, err := tx.Exec("INSERT INTO t VALUES (1000, x'00')"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	noJournal(t, path)
	if got := state(t, db); got != before {
		t.Fatalf("rollback: %s, want %s", got, before)
	}

	// A big transaction that spills, then fails: rolled back from the journal.
	err = db.Tx(func(tx *Tx) error {
		if _, err := tx.Exec(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 3000)
			INSERT INTO t SELECT 10000+i, randomblob(2000) FROM c`); err != nil {
			return err
		}
		if _, err := tx.Exec("UPDATE t SET v = randomblob(100) WHERE k < 100"); err != nil {
			return err
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if fi.Size() < 3000*2000 {
			t.Errorf("no spill: database is %d bytes inside the transaction", fi.Size())
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	noJournal(t, path)
	integrityOK(t, db)
	if got := state(t, db); got != before {
		t.Fatalf("rollback after spill: %s, want %s", got, before)
	}

	// The same big transaction committed.
	err = db.Tx(func(tx *Tx) error {
		_, err := tx.Exec(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 3000)
			INSERT INTO t SELECT 10000+i, randomblob(2000) FROM c`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	noJournal(t, path)
	integrityOK(t, db)
	after := state(t, db)
	if !strings.HasPrefix(after, "3200 rows") {
		t.Fatalf("after commit: %s", after)
	}
	db.Close()

	// Standard SQLite reads exactly what was committed.
	std := openVFS(t, path, vfsStandard)
	defer std.Close()
	integrityOK(t, std)
	if got := state(t, std); got != after {
		t.Fatalf("standard SQLite reads %s, want %s", got, after)
	}
}

// A new journal has the database's mode whatever the umask (SQLite's policy:
// any process that can write the database can roll back a hot journal), and,
// when running as root, the database's owner.
func TestVFSJournalModeAndOwner(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)

	check := func(wantMode os.FileMode, wantUID, wantGID int) {
		t.Helper()
		path := newFile(t)
		if err := os.Chmod(path, wantMode); err != nil {
			t.Fatal(err)
		}
		if wantUID >= 0 {
			if err := os.Chown(path, wantUID, wantGID); err != nil {
				t.Fatal(err)
			}
		}
		db := openVFS(t, path, VFSName)
		defer db.Close()
		for i := 0; i < 2; i++ { // the first journal, and one from the remembered mode
			fi := journalOfTx(t, db, path)
			if fi.Mode().Perm() != wantMode {
				t.Errorf("journal mode %v, want %v (umask 022)", fi.Mode().Perm(), wantMode)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if wantUID >= 0 && (int(st.Uid) != wantUID || int(st.Gid) != wantGID) {
				t.Errorf("journal owner %d:%d, want %d:%d", st.Uid, st.Gid, wantUID, wantGID)
			}
			noJournal(t, path)
		}
	}
	check(0o666, -1, -1)
	check(0o640, -1, -1)
	if os.Geteuid() == 0 {
		check(0o666, 12345, 23456)
	}
}

// journalOfTx runs a write transaction on db (the database file path) and
// returns the journal's FileInfo as it was inside it.
func journalOfTx(t *testing.T, db *DB, path string) os.FileInfo {
	t.Helper()
	var fi os.FileInfo
	err := db.Tx(func(tx *Tx) error {
		if _, err := tx.Exec("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB)"); err != nil {
			return err
		}
		if _, err := tx.Exec("INSERT INTO t (v) VALUES (x'01')"); err != nil {
			return err
		}
		var err error
		if fi, err = os.Stat(path + "-journal"); err != nil {
			return fmt.Errorf("no journal inside the transaction: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// A chmod or chown of the database while a connection stays open is
// followed by that connection's next journal: a worker that opened a 0666
// database must not go on creating 0666 journals after its owner tightened
// it to 0644 (the next open would refuse such a journal, left by a crash,
// as writable by users who cannot write the database). The journal of each
// transaction is compared with the database's mode and owner at that time.
func TestVFSJournalFollowsChmod(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := newFile(t) // 0666
	db := openVFS(t, path, VFSName)
	defer db.Close()
	journalOf := func() (os.FileMode, uint32) {
		t.Helper()
		fi := journalOfTx(t, db, path)
		return fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid
	}
	if m, _ := journalOf(); m != 0o666 {
		t.Fatalf("first journal mode %v, want 0666", m)
	}
	for _, want := range []os.FileMode{0o644, 0o600, 0o664} {
		if err := os.Chmod(path, want); err != nil {
			t.Fatal(err)
		}
		if m, _ := journalOf(); m != want {
			t.Errorf("journal mode %v after chmod %v of the open database, want %v", m, want, want)
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(path, 12345, 23456); err != nil {
			t.Fatal(err)
		}
		if _, uid := journalOf(); uid != 12345 {
			t.Errorf("journal owner %d after chown of the open database, want 12345", uid)
		}
	}
}

// ------------------------------------------------------------------ crash

// helperEnv makes the test binary act as a helper process (TestVFSHelper).
const helperEnv = "TIRASTORE_VFS_HELPER"

// TestVFSHelper is not a test: it is the body of the child processes the
// tests start (crash and syscall workloads). It does nothing otherwise.
func TestVFSHelper(t *testing.T) {
	t.Parallel()
	args := strings.Split(os.Getenv(helperEnv), "|")
	if len(args) < 3 {
		t.Skip("helper process only")
	}
	role, path, vfs := args[0], args[1], args[2]
	if vfs == "standard" {
		vfs = vfsStandard
	}
	switch role {
	case "crash":
		crashHelper(t, path, vfs, args[3])
	case "syscalls":
		n, _ := strconv.Atoi(args[3])
		syscallHelper(t, path, vfs, n)
	}
	os.Exit(0)
}

// crashHelper starts a big write transaction, with a page cache so small that
// modified pages are written into the database file long before commit,
// reports through the ready file, and waits to be killed.
func crashHelper(t *testing.T, path, vfs, ready string) {
	db := openVFS(t, path, vfs)
	mustExec(t, db, "PRAGMA cache_size = 8")
	mustExec(t, db, "BEGIN IMMEDIATE")
	if _, err := db.exec("UPDATE t SET v = randomblob(length(v))"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.exec(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 500)
		INSERT INTO t SELECT 100000+i, randomblob(1000) FROM c`); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ready, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute)
	t.Fatal("not killed")
}

func fileHash(t testing.TB, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// A writer killed with SIGKILL in the middle of a big transaction leaves a
// hot journal and a half-written database; the next connection rolls it
// back: integrity_check is ok and the data is exactly the last commit. Every
// pairing of writer and recoverer among this VFS and standard SQLite (the old
// Python workers) is checked.
func TestVFSCrashRecovery(t *testing.T) {
	t.Parallel()
	names := map[string]string{VFSName: VFSName, vfsStandard: "standard"}
	for _, c := range []struct{ crash, recover string }{
		{VFSName, VFSName},
		{vfsStandard, VFSName},
		{VFSName, vfsStandard},
		{vfsStandard, vfsStandard},
	} {
		t.Run(names[c.crash]+"-then-"+names[c.recover], func(t *testing.T) {
			path := newFile(t)
			db := openVFS(t, path, VFSName)
			fill(t, db, 2000, 1000)
			want := state(t, db)
			db.Close()
			committed := fileHash(t, path)

			ready := filepath.Join(t.TempDir(), "ready")
			cmd := exec.Command(os.Args[0], "-test.run=^TestVFSHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"=crash|"+path+"|"+names[c.crash]+"|"+ready)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(60 * time.Second)
			for {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("helper never got ready:\n%s", out.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()

			jr, err := os.ReadFile(path + "-journal")
			if err != nil || len(jr) == 0 || jr[0] == 0 {
				t.Fatalf("no hot journal after the kill (%d bytes, %v)", len(jr), err)
			}
			if fileHash(t, path) == committed {
				t.Fatal("the database file was not modified before the kill: nothing to roll back")
			}

			db = openVFS(t, path, c.recover)
			defer db.Close()
			integrityOK(t, db)
			if got := state(t, db); got != want {
				t.Fatalf("after recovery: %s, want %s", got, want)
			}
			noJournal(t, path)
			if fileHash(t, path) != committed {
				t.Error("the rolled-back database differs from the committed file")
			}
		})
	}
}

// --------------------------------------------------------------- syscalls

const syscallMark = "MARK-"

// syscallHelper runs the workload the syscall test traces, on one kept-open
// connection: a warm-up write and read (the once-per-connection costs), then
// n write transactions (one record each) and n reads, each phase between two
// stat calls on marker names that delimit it in the trace.
func syscallHelper(t *testing.T, path, vfs string, n int) {
	db := openVFS(t, path, vfs)
	defer db.Close()
	dir := filepath.Dir(path)
	mark := func(name string) { os.Stat(filepath.Join(dir, syscallMark+name)) }
	put := func(i int) {
		err := db.Tx(func(tx *Tx) error {
			if err := tx.PutProgram(storage.Program{Hash: "h", Name: "p", Source: "s"}); err != nil {
				return err
			}
			_, err := tx.PutRecord(&storage.Record{Key: fmt.Sprint("k", i), ProgramHash: "h", Schedule: "S", ResultJSON: "{}",
				Hostname: "n", Username: "u", CreationDate: "t", UpdateDate: "t"}, true)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(i int) {
		if r, err := db.Get(fmt.Sprint("k", i)); err != nil || r == nil {
			t.Fatal(r, err)
		}
	}
	put(-1)
	get(-1)
	mark("writes")
	for i := 0; i < n; i++ {
		put(i)
	}
	mark("reads")
	for i := 0; i < n; i++ {
		get(i)
	}
	mark("end")
}

// traceCounts is what one traced run did in the database's directory, per
// phase: path-based metadata calls as "call file" ("stat journal", "open
// dir", ...) and descriptor syncs as "fsync file".
type traceCounts map[string]map[string]int

var (
	traceCall = regexp.MustCompile(`^\d+\s+([a-z0-9_]+)\((.*)$`)
	traceStr  = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	traceFd   = regexp.MustCompile(`^\d+<([^>]*)>`)
)

// parseTrace reads an strace -f -y log. Calls are named by what they do
// (openat -> open, newfstatat/statx/lstat -> stat, unlinkat -> unlink) and
// files by role (db, journal, wal, dir).
func parseTrace(t *testing.T, log, path string) traceCounts {
	t.Helper()
	dir := filepath.Dir(path)
	role := func(p string) string {
		switch p {
		case dir:
			return "dir"
		case path:
			return "db"
		}
		if strings.HasPrefix(p, path+"-") {
			return strings.TrimPrefix(p, path+"-")
		}
		return strings.TrimPrefix(p, dir+"/")
	}
	norm := map[string]string{"openat": "open", "openat2": "open", "creat": "open", "newfstatat": "stat", "statx": "stat",
		"lstat": "stat", "fstatat64": "stat", "unlinkat": "unlink", "faccessat": "access", "faccessat2": "access", "renameat": "rename", "renameat2": "rename", "linkat": "link"}
	counts := traceCounts{}
	phase := "setup"
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := traceCall.FindStringSubmatch(sc.Text())
		if m == nil { // "<... resumed>", signals, exits
			continue
		}
		call, args := m[1], m[2]
		if n, ok := norm[call]; ok {
			call = n
		}
		var key string
		if call == "fsync" || call == "fdatasync" {
			fd := traceFd.FindStringSubmatch(args)
			if fd == nil || (fd[1] != dir && !strings.HasPrefix(fd[1], dir+"/")) {
				continue
			}
			key = "fsync " + role(fd[1])
		} else {
			s := traceStr.FindStringSubmatch(args)
			if s == nil || (s[1] != dir && !strings.HasPrefix(s[1], dir+"/")) {
				continue
			}
			if name := strings.TrimPrefix(s[1], dir+"/"); strings.HasPrefix(name, syscallMark) {
				phase = strings.TrimPrefix(name, syscallMark)
				continue
			}
			key = call + " " + role(s[1])
		}
		if counts[phase] == nil {
			counts[phase] = map[string]int{}
		}
		counts[phase][key]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return counts
}

// metadata keeps the path-based calls of a phase (drops the syncs).
func metadata(c map[string]int) map[string]int {
	m := map[string]int{}
	for k, v := range c {
		if !strings.HasPrefix(k, "fsync ") {
			m[k] = v
		}
	}
	return m
}

func total(c map[string]int) (n int) {
	for _, v := range c {
		n += v
	}
	return n
}

func show(c map[string]int, per int) string {
	var keys []string
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.3g", k, float64(c[k])/float64(per)))
	}
	return strings.Join(parts, ", ")
}

// traceRun runs the syscall workload through vfs under strace.
func traceRun(t *testing.T, vfs string, n int) traceCounts {
	t.Helper()
	path := newFile(t)
	db := openVFS(t, path, VFSName)
	if err := db.Init("cpu", "N/A", "2026-01-01T00:00:00+00:00"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	log := filepath.Join(t.TempDir(), "strace.log")
	cmd := exec.Command("strace", "-f", "-qq", "-y", "-e", "trace=%file,fsync,fdatasync", "-o", log,
		os.Args[0], "-test.run=^TestVFSHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=syscalls|%s|%s|%d", helperEnv, path, vfs, n))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("strace %s: %v\n%s", vfs, err, out)
	}
	return parseTrace(t, log, path)
}

// Per record (one write transaction) SQLite through this VFS makes exactly
// three path-based metadata calls in the database's directory: stat (the
// hot-journal check), open and unlink of the journal; per read, only the
// stat. The new journal's directory is still fsynced once per write, through
// the kept descriptor. The negative control traces unix-none, which must
// make more (stat of the -wal and of the database, open of the directory),
// or the test could not fail.
func TestVFSSyscallCounts(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skip("strace not installed")
	}
	if err := exec.Command("strace", "-o", os.DevNull, "true").Run(); err != nil {
		t.Skipf("strace cannot trace here: %v", err)
	}
	const n = 20
	ours := traceRun(t, VFSName, n)
	control := traceRun(t, vfsNone, n)
	for _, c := range []struct {
		name string
		tc   traceCounts
	}{{VFSName, ours}, {vfsNone, control}} {
		t.Logf("%s: per write: %s", c.name, show(c.tc["writes"], n))
		t.Logf("%s: per read:  %s", c.name, show(c.tc["reads"], n))
		t.Logf("%s: open + first write and read: %s", c.name, show(c.tc["setup"], 1))
	}

	wantWrites := map[string]int{"stat journal": n, "open journal": n, "unlink journal": n}
	if got := metadata(ours["writes"]); fmt.Sprint(got) != fmt.Sprint(wantWrites) {
		t.Errorf("%s writes: %v, want %v", VFSName, got, wantWrites)
	}
	wantReads := map[string]int{"stat journal": n}
	if got := metadata(ours["reads"]); fmt.Sprint(got) != fmt.Sprint(wantReads) {
		t.Errorf("%s reads: %v, want %v", VFSName, got, wantReads)
	}
	// The same syncs as unix-none, file by file (fdatasync counts as fsync).
	syncs := func(c map[string]int) map[string]int {
		m := map[string]int{}
		for k, v := range c {
			if strings.HasPrefix(k, "fsync ") {
				m[k] = v
			}
		}
		return m
	}
	if got, want := syncs(ours["writes"]), syncs(control["writes"]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s writes sync %v, %s syncs %v", VFSName, got, vfsNone, want)
	}
	if got := ours["writes"]["fsync dir"]; got != n {
		t.Errorf("directory fsyncs per %d writes: %d, want %d", n, got, n)
	}

	// The negative control: the same measurement sees unix-none's extra calls.
	if got := total(metadata(control["writes"])); got <= 3*n {
		t.Errorf("control %s writes: %d path-based calls, want more than %d: %v", vfsNone, got, 3*n, control["writes"])
	}
	if got := total(metadata(control["reads"])); got <= n {
		t.Errorf("control %s reads: %d path-based calls, want more than %d: %v", vfsNone, got, n, control["reads"])
	}
	for _, k := range []string{"stat wal", "stat db", "open dir"} {
		if control["writes"][k] != n {
			t.Errorf("control %s writes: %q %d times, want %d", vfsNone, k, control["writes"][k], n)
		}
	}
}

// ------------------------------------------------------------- WAL header

func TestCheckHeader(t *testing.T) {
	t.Parallel()
	hdr := func(w, r byte) []byte {
		b := make([]byte, HeaderSize)
		copy(b, sqliteMagic)
		b[18], b[19] = w, r
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		wal  bool
	}{
		{"rollback", hdr(1, 1), false},
		{"wal", hdr(2, 2), true},
		{"wal write only", hdr(2, 1), true},
		{"wal read only", hdr(1, 2), true},
		{"empty", nil, false},
		{"short", hdr(2, 2)[:19], false},
		{"not sqlite", bytes.Repeat([]byte{2}, 100), false},
	} {
		err := CheckHeader("/x/cache.db", c.b)
		if (err != nil) != c.wal || (err != nil && !errors.Is(err, ErrWALMode)) {
			t.Errorf("%s: %v", c.name, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "/x/cache.db") || !strings.Contains(err.Error(), "rollback-journal")) {
			t.Errorf("%s: unclear message %q", c.name, err)
		}
	}
}

// A real WAL database, with committed rows still only in its -wal file: the
// header check refuses it, and even without that check this VFS fails
// closed (it cannot open a WAL) instead of reading the stale main file.
func TestWALDatabaseRefused(t *testing.T) {
	t.Parallel()
	path := newFile(t)
	walDB, err := sql.Open("sqlite3", "file:"+path+"?mode=rw&_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer walDB.Close()
	walDB.SetMaxOpenConns(1)
	for _, q := range []string{"PRAGMA wal_autocheckpoint = 0", "CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)", "INSERT INTO t VALUES (1, x'01')"} {
		if _, err := walDB.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("no -wal file: %v", err)
	}

	err = checkFile(path)
	var we *WALModeError
	if !errors.As(err, &we) || we.Path != path || !errors.Is(err, ErrWALMode) {
		t.Fatalf("checkFile: %v", err)
	}
	t.Log(err)

	// Open's connection setup (PRAGMA journal_mode=DELETE) already reads the
	// header; if it did not, the first query would.
	db, err := Open(path, nil)
	if err == nil {
		defer db.Close()
		var n int
		if err = db.queryRow("SELECT count(*) FROM t").Scan(&n); err == nil {
			t.Fatalf("read a WAL database through %s (%d rows)", VFSName, n)
		}
	}
	var se sqlite3.Error
	if !errors.As(err, &se) || se.Code != sqlite3.ErrCantOpen {
		t.Fatalf("through %s: %v, want SQLITE_CANTOPEN", VFSName, err)
	}
	t.Logf("through %s: %v", VFSName, err)

	// And checkFile accepts rollback-journal databases, new empty files included.
	empty := newFile(t)
	if err := checkFile(empty); err != nil {
		t.Fatal(err)
	}
	db2 := openVFS(t, empty, VFSName)
	fill(t, db2, 1, 1)
	db2.Close()
	if err := checkFile(empty); err != nil {
		t.Fatal(err)
	}
}

// checkFile reads the header of the database file at path and applies
// CheckHeader. It costs an open, a read and a close of the database path, so
// it belongs where a connection is opened, not before each transaction.
func checkFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr := make([]byte, HeaderSize)
	n, err := io.ReadFull(f, hdr)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return err
	}
	return CheckHeader(path, hdr[:n])
}
