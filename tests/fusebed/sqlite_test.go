//go:build linux

package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
)

// The negative control of the whole project: plain SQLite (default VFS,
// rollback journal, fcntl locks) is safe for two processes on one mount, and
// not for two processes on two mounts, since no lock crosses mounts. Two
// writers on two mounts must corrupt the database (or lose committed rows)
// in at least one of a few bounded tries; on one mount, never.
//
// FUSEBED_SQLITE_TRIES=N runs N two-mount tries (default 5; up to 10 if
// none of the first 5 damages the database), to measure the rate.
func TestSQLiteNeedsCrossNodeLocks(t *testing.T) {
	bed := startBed(t, 2)
	const runFor = 4 * time.Second

	one := sqliteTry(t, bed, "one-mount", [2]int{0, 0}, runFor)
	t.Logf("one mount: %s", one)
	if one.corrupt != "" {
		t.Errorf("two writers on ONE mount damaged the database: %s", one.corrupt)
	}
	if one.errors > 0 {
		t.Errorf("two writers on ONE mount got %d errors: %s", one.errors, one.firstErr)
	}
	if one.txs[0] == 0 || one.txs[1] == 0 {
		t.Errorf("a writer on one mount committed nothing: %s", one)
	}

	tries, maxTries := 5, 10
	if s := os.Getenv("FUSEBED_SQLITE_TRIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("FUSEBED_SQLITE_TRIES=%q", s)
		}
		tries, maxTries = n, n
	}
	corrupted := 0
	var detect []string
	n := 0
	for n < tries || (corrupted == 0 && n < maxTries) {
		n++
		r := sqliteTry(t, bed, fmt.Sprintf("two-mounts-%d", n), [2]int{0, 1}, runFor)
		t.Logf("two mounts, try %d: %s", n, r)
		if r.corrupt != "" {
			corrupted++
			detect = append(detect, r.detectedAfter.Round(time.Millisecond).String())
		}
	}
	t.Logf("two mounts: damage in %d of %d tries (detected after %s); one mount: none", corrupted, n, strings.Join(detect, ", "))
	if corrupted == 0 {
		t.Errorf("two SQLite writers on two mounts never damaged the database in %d tries of %v: the mounts may be sharing locks", n, runFor)
	}
}

// tryResult is what one run of two writers did to a fresh database.
type tryResult struct {
	txs           [2]int
	rows          [2]int // committed, by the writers' count
	errors        int
	firstErr      string
	corrupt       string        // why the database is damaged; "" if not
	final         string        // what the check after the run found; "" if intact
	detectedAfter time.Duration // by the detecting writer's clock, or the whole run
	elapsed       time.Duration // processes' start to the end of both
}

func (r tryResult) String() string {
	s := fmt.Sprintf("%d+%d transactions (%d+%d rows) in %v", r.txs[0], r.txs[1], r.rows[0], r.rows[1], r.elapsed.Round(time.Millisecond))
	if r.errors > 0 {
		s += fmt.Sprintf(", %d errors (first: %s)", r.errors, r.firstErr)
	}
	if r.corrupt != "" {
		s += fmt.Sprintf(", DAMAGED after %v: %s", r.detectedAfter.Round(time.Millisecond), r.corrupt)
	}
	if r.final != "" {
		s += "; final check: " + r.final
	} else {
		s += "; final check: intact"
	}
	return s
}

const sqliteDSN = "?_busy_timeout=5000&_journal_mode=DELETE&_txlock=immediate"

// sqliteTry runs two writer processes on a fresh database, writer i via
// mount mounts[i], for at most d, and checks the result via the backing
// directory.
func sqliteTry(t *testing.T, bed *testBed, name string, mounts [2]int, d time.Duration) tryResult {
	t.Helper()
	if err := os.Mkdir(bed.path(0, name), 0o755); err != nil {
		t.Fatal(err)
	}
	rel := filepath.Join(name, "cache.db")
	db, err := sql.Open("sqlite3", "file:"+bed.path(0, rel)+sqliteDSN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, writer INTEGER, seq INTEGER, payload BLOB)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	stop := filepath.Join(t.TempDir(), "stop")

	start := time.Now()
	type done struct {
		i   int
		rep writerReport
		err error
	}
	results := make(chan done, 2)
	for i := 0; i < 2; i++ {
		cmd := roleCmd("sqlwriter", bed.path(mounts[i], rel), strconv.Itoa(i), d.String(), stop)
		cmd.Stderr = os.Stderr
		go func() {
			out, err := cmd.Output()
			var rep writerReport
			if err == nil {
				err = json.Unmarshal(out, &rep)
			}
			results <- done{i, rep, err}
		}()
	}
	var r tryResult
	for k := 0; k < 2; k++ {
		res := <-results
		if res.err != nil {
			t.Fatalf("writer %d: %v", res.i, res.err)
		}
		rep := res.rep
		r.txs[res.i], r.rows[res.i] = rep.Txs, rep.Rows
		r.errors += rep.Errors
		if r.firstErr == "" {
			r.firstErr = rep.FirstErr
		}
		if rep.Corrupt != "" && r.corrupt == "" {
			r.corrupt = fmt.Sprintf("writer %d saw: %s", res.i, rep.Corrupt)
			r.detectedAfter = time.Duration(rep.Micros) * time.Microsecond
			os.WriteFile(stop, nil, 0o644) // the other writer stops too
		}
	}
	r.elapsed = time.Since(start)

	// The verdict, read directly from the backing directory.
	r.final = checkDB(filepath.Join(bed.backing, rel), r.rows)
	if r.final != "" && r.corrupt == "" {
		r.corrupt = r.final
		r.detectedAfter = r.elapsed
	}
	return r
}

// checkDB returns why the database at p is damaged: integrity_check not
// "ok", an error reading it, or a writer's row count other than it
// committed.
func checkDB(p string, rows [2]int) string {
	db, err := sql.Open("sqlite3", "file:"+p+sqliteDSN)
	if err != nil {
		return err.Error()
	}
	defer db.Close()
	qr, err := db.Query(`PRAGMA integrity_check(5)`)
	if err != nil {
		return "integrity_check: " + err.Error()
	}
	var msgs []string
	for qr.Next() {
		var s string
		if err := qr.Scan(&s); err != nil {
			qr.Close()
			return "integrity_check: " + err.Error()
		}
		msgs = append(msgs, s)
	}
	err = qr.Err()
	qr.Close()
	if err != nil {
		return "integrity_check: " + err.Error()
	}
	if len(msgs) != 1 || msgs[0] != "ok" {
		return "integrity_check: " + strings.Join(msgs, "; ")
	}
	for w := 0; w < 2; w++ {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM t WHERE writer = ?`, w).Scan(&n); err != nil {
			return "count: " + err.Error()
		}
		if n != rows[w] {
			return fmt.Sprintf("writer %d committed %d rows, the database has %d", w, rows[w], n)
		}
	}
	return ""
}

// writerReport is a sqlwriter's result, printed as JSON on stdout.
type writerReport struct {
	Txs      int    `json:"txs"`
	Rows     int    `json:"rows"`
	Errors   int    `json:"errors"`
	FirstErr string `json:"first_error,omitempty"`
	Corrupt  string `json:"corrupt,omitempty"`
	// Micros is the time from the writer's first transaction to its end
	// (or to the damage it saw).
	Micros int64 `json:"micros"`
}

// sqlWriterMain is one plain SQLite writer: args DB ID DURATION STOPFILE.
// It commits small transactions until DURATION has passed, STOPFILE exists
// or it sees the database damaged (an error saying so, or fewer of its own
// rows than it committed).
func sqlWriterMain(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "sqlwriter: want DB ID DURATION STOPFILE")
		return 2
	}
	id, err1 := strconv.Atoi(args[1])
	d, err2 := time.ParseDuration(args[2])
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "sqlwriter:", err)
		return 2
	}
	stop := args[3]
	db, err := sql.Open("sqlite3", "file:"+args[0]+sqliteDSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqlwriter:", err)
		return 1
	}
	defer db.Close()
	db.SetMaxOpenConns(1)

	const rowsPerTx = 3
	var rep writerReport
	damaged := func(err error) bool {
		s := err.Error()
		for _, w := range []string{"malformed", "corrupt", "not a database"} {
			if strings.Contains(s, w) {
				rep.Corrupt = s
				return true
			}
		}
		rep.Errors++
		if rep.FirstErr == "" {
			rep.FirstErr = s
		}
		return false
	}
	insert := func(seq int) error {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		for k := 0; k < rowsPerTx; k++ {
			if _, err := tx.Exec(`INSERT INTO t (writer, seq, payload) VALUES (?, ?, randomblob(200))`, id, seq*rowsPerTx+k); err != nil {
				tx.Rollback()
				return err
			}
		}
		return tx.Commit()
	}
	start := time.Now()
	deadline := start.Add(d)
	for seq := 0; time.Now().Before(deadline) && rep.Errors < 100; seq++ {
		if _, err := os.Stat(stop); err == nil {
			break
		}
		if err := insert(seq); err != nil {
			if damaged(err) {
				break
			}
			continue
		}
		rep.Txs++
		rep.Rows += rowsPerTx
		if rep.Txs%5 == 0 {
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM t WHERE writer = ?`, id).Scan(&n); err != nil {
				if damaged(err) {
					break
				}
			} else if n != rep.Rows {
				rep.Corrupt = fmt.Sprintf("row count mismatch: committed %d rows, the database has %d", rep.Rows, n)
				break
			}
		}
	}
	rep.Micros = time.Since(start).Microseconds()
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}
