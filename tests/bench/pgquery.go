package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tirastore/tirastore/core/postgres"
)

// The lookup statement alone, part of the postgres section's latency
// rows: over one pgx connection of its own (pgx's default query mode,
// prepared statements cached, as the engine's in session mode), the
// engine's lookup statement (postgres.LookupStatement) and, as a
// reference, the statement it replaced (joinedLookupSQL, which the
// engine no longer runs), each on keys present and absent, interleaved
// (runQueryRef): the four rows see the same server state, so hit - miss
// is what a hit costs more, and joined - current what the join cost.

// Labels of the statement rows, in table order.
const (
	qCurrentHit  = "query_hit"
	qCurrentMiss = "query_miss"
	qJoinedHit   = "query_joined_hit"
	qJoinedMiss  = "query_joined_miss"
)

// pgQueryOps are the statement rows (the postgres backend only).
var pgQueryOps = []string{qCurrentHit, qCurrentMiss, qJoinedHit, qJoinedMiss}

// joinedLookupSQL is a bench-only reference, not the engine's: the
// lookup statement as it once was, the records row joined with
// its programs row (the engine's statement with the join put back).
var joinedLookupSQL = strings.Replace(postgres.LookupStatement(), " FROM records r ",
	" FROM records r JOIN programs p ON r.program_hash = p.program_hash ", 1)

// runQueryRef times n executions of each statement row on the database at
// url, where records (tagPool, 0..n-1) are present and (tagMiss, ...)
// absent, the four interleaved with their order rotating.
func runQueryRef(url string, n int) (map[string]*stepResult, error) {
	if joinedLookupSQL == postgres.LookupStatement() {
		return nil, fmt.Errorf("the engine's lookup statement has no ` FROM records r `: the joined reference cannot be made from it: %s", joinedLookupSQL)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	type row struct {
		label, sql string
		tag        int
		found      bool
	}
	rows := []row{
		{qCurrentHit, postgres.LookupStatement(), tagPool, true},
		{qCurrentMiss, postgres.LookupStatement(), tagMiss, false},
		{qJoinedHit, joinedLookupSQL, tagPool, true},
		{qJoinedMiss, joinedLookupSQL, tagMiss, false},
	}
	out := map[string]*stepResult{}
	for _, r := range rows {
		out[r.label] = &stepResult{Label: r.label}
	}
	const warm = 20
	for k := -warm; k < n; k++ {
		for j0 := range rows {
			r := rows[(j0+max(k, 0))%len(rows)]
			i := k
			if k < 0 {
				i = n + warm + k // warm-up keys: not among the timed ones
			}
			key := recordKey(r.tag, i)
			t0 := time.Now()
			found, err := queryOne(ctx, conn, r.sql, key)
			d := time.Since(t0)
			if k < 0 {
				if err != nil {
					return nil, fmt.Errorf("%s warm-up: %w", r.label, err)
				}
				continue
			}
			res := out[r.label]
			res.NS = append(res.NS, d.Nanoseconds())
			res.count(err, found == r.found, "lookup statement", key)
		}
	}
	return out, nil
}

// queryOne runs sql on key and reads its row, if any, to the last byte.
func queryOne(ctx context.Context, conn *pgx.Conn, sql, key string) (bool, error) {
	rs, err := conn.Query(ctx, sql, key)
	if err != nil {
		return false, err
	}
	found := false
	for rs.Next() {
		found = true
		_ = rs.RawValues()
	}
	rs.Close()
	return found, rs.Err()
}

// writeHitMiss prints what a hit costs more than a miss, from the
// interleaved engine rows of both backends, then the statement rows.
func writeHitMiss(w io.Writer, pr *pgResults) {
	fmt.Fprintf(w, "   Lookup hit - miss (medians, µs; the two rows interleaved):")
	for _, b := range pgBackends {
		h, m := pr.pgMedian(b, opLookupHit), pr.pgMedian(b, opLookupMiss)
		fmt.Fprintf(w, " %s %s - %s = %s;", b, fmtUS(h), fmtUS(m), fmtUS(h-m))
	}
	fmt.Fprintln(w)
	lat := pr.Latency[backendPostgres]
	if lat[qCurrentHit] == nil {
		return
	}
	fmt.Fprintf(w, "   The lookup statement alone (µs), one pgx connection, prepared, the four rows interleaved on the same keys; REFERENCE:\n")
	fmt.Fprintf(w, "   the former statement (records joined with programs), a bench-only string the engine no longer runs.\n")
	t := newTable("l", "statement", "hit median", "miss median", "hit - miss", "hit p99", "miss p99", "failed")
	for _, pair := range [][3]string{{"engine's (records row alone)", qCurrentHit, qCurrentMiss}, {"REFERENCE old, joined", qJoinedHit, qJoinedMiss}} {
		h, m := lat[pair[1]], lat[pair[2]]
		if h == nil || m == nil || h.Summary == nil || m.Summary == nil {
			continue
		}
		failed := ""
		if n := h.Errors + h.Wrong + m.Errors + m.Wrong; n > 0 {
			failed = fmt.Sprintf("%d: %s %s", n, firstLine(h.FirstError), firstLine(m.FirstError))
		}
		t.add(pair[0], fmtUS(h.Summary.Median), fmtUS(m.Summary.Median), fmtUS(h.Summary.Median-m.Summary.Median),
			fmtUS(h.Summary.P99), fmtUS(m.Summary.P99), failed)
	}
	t.write(w, "  ")
}
