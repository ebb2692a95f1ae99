// Package storagetest is the contract of storage.Backend as a test suite:
// every backend's tests run Run against it, so that the API layer can rely
// on the same behaviour whatever stores the data.
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/storage"
)

// Open opens a backend on a new, empty database; the suite closes it.
type Open func(t *testing.T) storage.Backend

var ctx = context.Background()

// Run runs every contract test against backends made by open.
func Run(t *testing.T, open Open) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Open)
	}{
		{"WriteThenLookup", testWriteThenLookup},
		{"WriteOverwrite", testWriteOverwrite},
		{"WriteProgramStored", testWriteProgramStored},
		{"LookupMany", testLookupMany},
		{"Contains", testContains},
		{"Reads", testReads},
		{"RecordsAfter", testRecordsAfter},
		{"Update", testUpdate},
		{"EachProgram", testEachProgram},
		{"Backup", testBackup},
		{"Configs", testConfigs},
		{"ConfigNamespaces", testConfigNamespaces},
		{"Claims", testClaims},
		{"Runs", testRuns},
		{"CheckDepths", testCheckDepths},
		{"UnreadableResults", testUnreadableResults},
		{"Closed", testClosed},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// write stores rows of program hash (named name) with the given schedules
// and their times, and returns how many the backend wrote.
func write(t *testing.T, b storage.Backend, hash, name string, overwrite bool, scheds ...string) int {
	t.Helper()
	w := &storage.Write{Hash: hash, Name: name, Source: "src of " + name, Hostname: "h", Username: "u",
		SourceProject: "p", Overwrite: overwrite}
	for _, s := range scheds {
		w.Rows = append(w.Rows, storage.Row{Key: key(hash, s), Schedule: s,
			ResultJSON: fmt.Sprintf(`{"is_legal":true,"execution_times":[%d]}`, len(s))})
	}
	n, err := b.Write(ctx, w)
	if err != nil {
		t.Fatalf("write %v: %v", scheds, err)
	}
	return n
}

// key is a record key for the suite (the API layer computes real ones).
func key(hash, sched string) string { return hash + "/" + sched }

// hashOf is a program hash for the suite: 64 hex digits.
func hashOf(c byte) string { return strings.Repeat(string(c), 64) }

func testWriteThenLookup(t *testing.T, open Open) {
	b := open(t)
	h := hashOf('a')
	if rec, err := b.Lookup(ctx, h, key(h, "S1")); err != nil || rec != nil {
		t.Fatalf("lookup in an empty database: %v, %v; want nil, nil", rec, err)
	}
	if n := write(t, b, h, "prog", false, "S1", "S22"); n != 2 {
		t.Fatalf("wrote %d rows, want 2", n)
	}
	rec, err := b.Lookup(ctx, h, key(h, "S22"))
	if err != nil || rec == nil {
		t.Fatalf("lookup after write: %v, %v", rec, err)
	}
	want := storage.Record{Key: key(h, "S22"), ProgramHash: h, Schedule: "S22",
		ResultJSON: `{"is_legal":true,"execution_times":[3]}`, Hostname: "h", Username: "u", SourceProject: "p"}
	got := *rec
	if got.CreationDate == "" || got.UpdateDate != got.CreationDate {
		t.Errorf("dates %q / %q: want one non-empty date for a new record", got.CreationDate, got.UpdateDate)
	}
	got.CreationDate, got.UpdateDate = "", ""
	if got != want {
		t.Errorf("lookup = %+v, want %+v (name and source left empty)", got, want)
	}
}

func testWriteOverwrite(t *testing.T, open Open) {
	b := open(t)
	h := hashOf('b')
	write(t, b, h, "prog", false, "S1")
	first, _ := b.Lookup(ctx, h, key(h, "S1"))
	if n := write(t, b, h, "prog", false, "S1", "S2"); n != 1 {
		t.Fatalf("without overwrite: wrote %d, want 1 (the existing key skipped)", n)
	}
	time.Sleep(2 * time.Millisecond) // dates have microseconds
	w := &storage.Write{Hash: h, Name: "prog", Source: "src of prog", Hostname: "h2", Username: "u2", Overwrite: true,
		Rows: []storage.Row{{Key: key(h, "S1"), Schedule: "S1", ResultJSON: `{"is_legal":false,"execution_times":null}`}}}
	if n, err := b.Write(ctx, w); err != nil || n != 1 {
		t.Fatalf("overwrite: %d, %v; want 1", n, err)
	}
	rec, err := b.Lookup(ctx, h, key(h, "S1"))
	if err != nil || rec == nil || rec.ResultJSON != `{"is_legal":false,"execution_times":null}` || rec.Hostname != "h2" {
		t.Fatalf("after overwrite: %+v, %v", rec, err)
	}
	if rec.CreationDate != first.CreationDate || rec.UpdateDate == first.UpdateDate {
		t.Errorf("overwrite dates %q / %q, first %q: creation kept, update moved", rec.CreationDate, rec.UpdateDate, first.CreationDate)
	}
}

// testWriteProgramStored: a write that says its program is stored sends
// no source; it does not touch the program row, and where the row is
// missing it fails with ErrNoProgram and writes none of its rows.
func testWriteProgramStored(t *testing.T, open Open) {
	b := open(t)
	h := hashOf('s')
	write(t, b, h, "stored", false, "S1")
	byHash := func(hash string, scheds ...string) (int, error) {
		w := &storage.Write{Hash: hash, Name: "renamed", Hostname: "h", Username: "u", ProgramStored: true}
		for _, s := range scheds {
			w.Rows = append(w.Rows, storage.Row{Key: key(hash, s), Schedule: s, ResultJSON: `{"is_legal":false,"execution_times":null}`})
		}
		return b.Write(ctx, w)
	}
	if n, err := byHash(h, "S2", "S3"); err != nil || n != 2 {
		t.Fatalf("write by a stored program's hash: %d, %v", n, err)
	}
	var progs []storage.Program
	if err := b.EachProgram(ctx, func(p storage.Program, _ []storage.ScheduleResult) error {
		progs = append(progs, p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(progs) != 1 || progs[0].Name != "stored" || progs[0].Source != "src of stored" {
		t.Fatalf("programs after a write by hash: %+v; want the first write's row untouched", progs)
	}
	missing := hashOf('m')
	if n, err := byHash(missing, "S1", "S2"); !errors.Is(err, storage.ErrNoProgram) || n != 0 {
		t.Fatalf("write by the hash of a program not stored: %d, %v; want ErrNoProgram", n, err)
	}
	for _, s := range []string{"S1", "S2"} {
		if rec, err := b.Lookup(ctx, missing, key(missing, s)); err != nil || rec != nil {
			t.Fatalf("a failed write by hash left %+v (%v)", rec, err)
		}
	}
}

func testLookupMany(t *testing.T, open Open) {
	b := open(t)
	h := hashOf('c')
	write(t, b, h, "prog", false, "S1", "S3")
	keys := []string{key(h, "S3"), key(h, "S2"), key(h, "S1"), key(h, "S3")}
	recs, err := b.LookupMany(ctx, h, keys)
	if err != nil || len(recs) != len(keys) {
		t.Fatalf("lookup many: %d results, %v", len(recs), err)
	}
	for i, want := range []string{"S3", "", "S1", "S3"} {
		switch {
		case want == "" && recs[i] != nil:
			t.Errorf("[%d] = %+v, want absent", i, recs[i])
		case want != "" && (recs[i] == nil || recs[i].Schedule != want):
			t.Errorf("[%d] = %+v, want %s", i, recs[i], want)
		}
	}
}

func testContains(t *testing.T, open Open) {
	b := open(t)
	h := hashOf('d')
	write(t, b, h, "prog", false, "S1")
	for s, want := range map[string]bool{"S1": true, "S2": false} {
		if ok, err := b.Contains(ctx, h, key(h, s)); err != nil || ok != want {
			t.Errorf("contains %s = %v, %v; want %v", s, ok, err, want)
		}
	}
}

func testReads(t *testing.T, open Open) {
	b := open(t)
	h1, h2 := hashOf('e'), hashOf('f')
	write(t, b, h1, "prog", false, "S1")
	time.Sleep(2 * time.Millisecond)
	write(t, b, h1, "prog", false, "S0")
	write(t, b, h2, "prog", false, "T1")
	err := b.View(ctx, "reads", func(r storage.Reader) error {
		if v, ok, err := r.Meta("schema_version"); err != nil || !ok || v == "" {
			return fmt.Errorf("meta schema_version = %q, %v, %v", v, ok, err)
		}
		if _, ok, err := r.Meta("no such key"); err != nil || ok {
			return fmt.Errorf("meta of an absent key: ok %v, %v", ok, err)
		}
		rec, err := r.Get(key(h1, "S1"))
		if err != nil || rec == nil || rec.ProgramName != "prog" || rec.SourceCode != "src of prog" {
			return fmt.Errorf("get = %+v, %v; want the record joined with its program", rec, err)
		}
		progs, err := r.ProgramsByName("prog")
		if err != nil || len(progs) != 2 || progs[0].Hash != h1 || progs[1].Hash != h2 {
			return fmt.Errorf("programs by name = %+v, %v; want both, by hash", progs, err)
		}
		var order []string
		if err := r.EachRecordOf(h1, func(rec *storage.Record) error {
			order = append(order, rec.Schedule)
			if rec.ProgramName != "prog" {
				return fmt.Errorf("EachRecordOf: record %s not joined", rec.Key)
			}
			return nil
		}); err != nil || !slices.Equal(order, []string{"S1", "S0"}) {
			return fmt.Errorf("EachRecordOf = %v, %v; want by creation date", order, err)
		}
		if n, err := r.CountRecords(); err != nil || n != 3 {
			return fmt.Errorf("count records = %d, %v", n, err)
		}
		if n, err := r.CountPrograms(); err != nil || n != 2 {
			return fmt.Errorf("count programs = %d, %v", n, err)
		}
		sum, err := r.Summary()
		if err != nil || sum.Total != 3 || sum.Legal != 3 || sum.Programs != 2 || !slices.Equal(sum.Users, []string{"u"}) {
			return fmt.Errorf("summary = %+v, %v", sum, err)
		}
		keys, err := r.Keys(2, 1)
		if err != nil || !slices.Equal(keys, []string{key(h1, "S0"), key(h2, "T1")}) {
			return fmt.Errorf("keys(2, 1) = %v, %v; want by creation date", keys, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testRecordsAfter: the cursor over every record goes in insertion order,
// a chunk of at most limit rows at a time, with the program's name, and an
// overwrite keeps the row's place (Seq).
func testRecordsAfter(t *testing.T, open Open) {
	b := open(t)
	h1, h2 := hashOf('a'), hashOf('b')
	write(t, b, h2, "second", false, "T1")
	write(t, b, h1, "first", false, "S1", "S2")
	write(t, b, h2, "second", false, "T2")
	read := func(after int64, limit int) (recs []storage.SeqRecord) {
		t.Helper()
		if err := b.View(ctx, "records after", func(r storage.Reader) (err error) {
			recs, err = r.RecordsAfter(after, limit)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return recs
	}
	var got []string
	var seqs []int64
	for after := int64(0); ; {
		recs := read(after, 3)
		if len(recs) > 3 {
			t.Fatalf("RecordsAfter(%d, 3) gave %d rows", after, len(recs))
		}
		for _, r := range recs {
			if r.Seq <= after || r.SourceCode != "" {
				t.Fatalf("row %+v after %d: Seq must grow, no source", r, after)
			}
			after = r.Seq
			got = append(got, r.ProgramName+":"+r.Schedule)
			seqs = append(seqs, r.Seq)
		}
		if len(recs) < 3 {
			break
		}
	}
	if want := []string{"second:T1", "first:S1", "first:S2", "second:T2"}; !slices.Equal(got, want) {
		t.Fatalf("RecordsAfter order = %v, want %v", got, want)
	}
	if n := write(t, b, h1, "first", true, "S1"); n != 1 {
		t.Fatalf("overwrite wrote %d", n)
	}
	if recs := read(seqs[0], 1); len(recs) != 1 || recs[0].Seq != seqs[1] || recs[0].Schedule != "S1" {
		t.Fatalf("after an overwrite RecordsAfter = %+v; want S1 in its place %d", recs, seqs[1])
	}
	if recs := read(seqs[3], 10); len(recs) != 0 {
		t.Fatalf("RecordsAfter(last) = %+v, want none", recs)
	}
}

func testUpdate(t *testing.T, open Open) {
	b := open(t)
	h := hashOf('g')
	write(t, b, h, "prog", false, "S1")
	err := b.Update(ctx, "put", func(w storage.Writer) error {
		_, err := w.PutRecord(&storage.Record{Key: "orphan", ProgramHash: hashOf('z'), Schedule: "S",
			ResultJSON: "{}", Hostname: "h", Username: "u", CreationDate: "d", UpdateDate: "d"}, false)
		return err
	})
	if !errors.Is(err, storage.ErrNoProgram) {
		t.Fatalf("put of a record without its program: %v, want ErrNoProgram", err)
	}
	var found bool
	if err := b.Update(ctx, "delete", func(w storage.Writer) (err error) {
		found, err = w.DeleteRecord(key(h, "S1"))
		return err
	}); err != nil || !found {
		t.Fatalf("delete: %v, %v", found, err)
	}
	if rec, err := b.Lookup(ctx, h, key(h, "S1")); err != nil || rec != nil {
		t.Fatalf("lookup after delete: %+v, %v", rec, err)
	}
	// An error from fn rolls the transaction back.
	boom := errors.New("boom")
	err = b.Update(ctx, "put", func(w storage.Writer) error {
		if _, err := w.PutRecord(&storage.Record{Key: "k2", ProgramHash: h, Schedule: "S", ResultJSON: "{}",
			Hostname: "h", Username: "u", CreationDate: "d", UpdateDate: "d"}, false); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("update returning an error: %v", err)
	}
	if rec, _ := b.Lookup(ctx, h, "k2"); rec != nil {
		t.Fatal("a failed update's write was committed")
	}
}

func testEachProgram(t *testing.T, open Open) {
	b := open(t)
	write(t, b, hashOf('2'), "beta", false, "S1")
	write(t, b, hashOf('1'), "beta", false, "S1", "S22")
	write(t, b, hashOf('3'), "alpha", false, "S333")
	var got []string
	if err := b.EachProgram(ctx, func(p storage.Program, rs []storage.ScheduleResult) error {
		got = append(got, fmt.Sprintf("%s:%c:%d", p.Name, p.Hash[0], len(rs)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha:3:1", "beta:1:2", "beta:2:1"}; !slices.Equal(got, want) {
		t.Fatalf("EachProgram order %v, want %v (by name, then hash)", got, want)
	}
	// The per-program counts, in the same order.
	if err := b.View(ctx, "program summaries", func(r storage.Reader) error {
		ps, err := r.ProgramSummaries()
		if err != nil {
			return err
		}
		got = got[:0]
		for _, p := range ps {
			if p.FirstDate == "" || p.LastDate < p.FirstDate {
				return fmt.Errorf("program %s: dates %q..%q", p.Name, p.FirstDate, p.LastDate)
			}
			got = append(got, fmt.Sprintf("%s:%c:%d:%d", p.Name, p.Hash[0], p.Records, p.Legal))
		}
		if want := []string{"alpha:3:1:1", "beta:1:2:2", "beta:2:1:1"}; !slices.Equal(got, want) {
			return fmt.Errorf("ProgramSummaries %v, want %v", got, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func testConfigs(t *testing.T, open Open) {
	b := open(t)
	entry := func(key, value string) *storage.ConfigEntry {
		return &storage.ConfigEntry{Key: key, Device: "gpu:0", OpID: "op", CallKey: key, ValueJSON: value,
			Hostname: "h", Username: "u", CreationDate: "d1", UpdateDate: "d1"}
	}
	// Reads of a database without config entries.
	if err := b.View(ctx, "configs", func(r storage.Reader) error {
		if e, err := r.GetConfig("", "k"); err != nil || e != nil {
			return fmt.Errorf("get in an empty table: %+v, %v", e, err)
		}
		if n, err := r.CountConfigs(""); err != nil || n != 0 {
			return fmt.Errorf("count: %d, %v", n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, "configs", func(w storage.Writer) error {
		for _, k := range []string{"b", "a"} {
			if ok, err := w.PutConfig(entry(k, "1"), false); err != nil || !ok {
				return fmt.Errorf("put %s: %v, %v", k, ok, err)
			}
		}
		if ok, err := w.PutConfig(entry("a", "2"), false); err != nil || ok {
			return fmt.Errorf("put without overwrite: %v, %v; want false", ok, err)
		}
		later := entry("a", "3")
		later.CreationDate, later.UpdateDate = "d2", "d2"
		if ok, err := w.PutConfig(later, true); err != nil || !ok {
			return fmt.Errorf("overwrite: %v, %v", ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err := b.View(ctx, "configs", func(r storage.Reader) error {
		e, err := r.GetConfig("", "a")
		if err != nil || e == nil || e.ValueJSON != "3" || e.CreationDate != "d1" || e.UpdateDate != "d2" {
			return fmt.Errorf("after overwrite: %+v, %v; want value 3, created d1, updated d2", e, err)
		}
		var keys []string
		if err := r.EachConfig(storage.ConfigFilter{Device: "gpu:0"}, func(e *storage.ConfigEntry) error {
			keys = append(keys, e.Key)
			return nil
		}); err != nil || !slices.Equal(keys, []string{"a", "b"}) {
			return fmt.Errorf("EachConfig = %v, %v; want by key", keys, err)
		}
		if err := r.EachConfig(storage.ConfigFilter{Device: "gpu:1"}, func(e *storage.ConfigEntry) error {
			return fmt.Errorf("EachConfig of another device gave %s", e.Key)
		}); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The fast path agrees with the reads, hit and miss, twice (a cache),
	// and a cached answer is not served after a put of its key.
	for i := 0; i < 2; i++ {
		e, err := b.ConfigGet(ctx, "", "a")
		if err != nil || e == nil || e.ValueJSON != "3" || e.Device != "gpu:0" {
			t.Fatalf("ConfigGet(a) = %+v, %v; want value 3", e, err)
		}
		if e, err := b.ConfigGet(ctx, "", "zz"); err != nil || e != nil {
			t.Fatalf("ConfigGet of a missing key = %+v, %v", e, err)
		}
	}
	if err := b.Update(ctx, "configs", func(w storage.Writer) error {
		_, err := w.PutConfig(entry("a", "4"), true)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if e, err := b.ConfigGet(ctx, "", "a"); err != nil || e == nil || e.ValueJSON != "4" {
		t.Fatalf("ConfigGet(a) after the put = %+v, %v; want value 4", e, err)
	}
	// Import records: absent, written, replaced.
	im := &storage.ConfigImport{Path: "/x/a.json", Size: 10, MtimeNS: 5, SHA256: "ab", Entries: 2, ImportedAt: "d1",
		Hostname: "h", Username: "u"}
	if err := b.Update(ctx, "imports", func(w storage.Writer) error {
		if got, err := w.ConfigImported(im.Path); err != nil || got != nil {
			return fmt.Errorf("import record before any: %+v, %v", got, err)
		}
		if err := w.PutConfigImport(im); err != nil {
			return err
		}
		again := *im
		again.Entries, again.SHA256 = 3, "cd"
		return w.PutConfigImport(&again)
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.View(ctx, "imports", func(r storage.Reader) error {
		got, err := r.ConfigImported(im.Path)
		if err != nil || got == nil || got.Entries != 3 || got.SHA256 != "cd" || got.MtimeNS != 5 || got.Username != "u" {
			return fmt.Errorf("import record after a replace: %+v, %v", got, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, "configs", func(w storage.Writer) error {
		if ok, err := w.DeleteConfig("", "b"); err != nil || !ok {
			return fmt.Errorf("delete: %v, %v", ok, err)
		}
		if n, err := w.ClearConfigs(""); err != nil || n != 1 {
			return fmt.Errorf("clear: %d, %v; want 1", n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// testConfigNamespaces: an entry is named by (namespace, key): the same
// key in two namespaces is two entries, each read, counted, listed,
// deleted and cleared apart from the other, by the fast path too.
func testConfigNamespaces(t *testing.T, open Open) {
	b := open(t)
	entry := func(ns, key, device, value string) *storage.ConfigEntry {
		return &storage.ConfigEntry{Namespace: ns, Key: key, Device: device, OpID: "op", CallKey: key, ValueJSON: value,
			Hostname: "h", Username: "u", CreationDate: "d1", UpdateDate: "d1"}
	}
	const fa, mm = "flash-attn", "matmul ü"
	puts := []*storage.ConfigEntry{
		entry("", "k", "gpu:0", `"default"`), entry(fa, "k", "gpu:0", `"fa"`), entry(mm, "k", "gpu:1", `"mm"`),
		entry(fa, "a", "gpu:1", `1`), entry(fa, "b", "gpu:0", `2`),
	}
	if err := b.Update(ctx, "configs", func(w storage.Writer) error {
		for _, e := range puts {
			if ok, err := w.PutConfig(e, false); err != nil || !ok {
				return fmt.Errorf("put %s/%s: %v, %v", e.Namespace, e.Key, ok, err)
			}
		}
		// Without overwrite the key of another namespace does not count.
		if ok, err := w.PutConfig(entry(fa, "k", "gpu:0", `"again"`), false); err != nil || ok {
			return fmt.Errorf("a second put of %s/k without overwrite: %v, %v", fa, ok, err)
		}
		later := entry(mm, "k", "gpu:1", `"mm2"`)
		later.UpdateDate = "d2"
		if ok, err := w.PutConfig(later, true); err != nil || !ok {
			return fmt.Errorf("overwrite of %s/k: %v, %v", mm, ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	get := func(ns, key string) *storage.ConfigEntry {
		t.Helper()
		var e *storage.ConfigEntry
		if err := b.View(ctx, "configs", func(r storage.Reader) (err error) { e, err = r.GetConfig(ns, key); return err }); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // the fast path agrees, twice (a cache)
			f, err := b.ConfigGet(ctx, ns, key)
			if err != nil || (f == nil) != (e == nil) || f != nil && *f != *e {
				t.Fatalf("ConfigGet(%q, %q) = %+v, %v; the read gave %+v", ns, key, f, err, e)
			}
		}
		return e
	}
	for _, c := range []struct{ ns, value string }{{"", `"default"`}, {fa, `"fa"`}, {mm, `"mm2"`}} {
		e := get(c.ns, "k")
		if e == nil || e.ValueJSON != c.value || e.Namespace != c.ns || e.Key != "k" {
			t.Fatalf("entry k of namespace %q: %+v; want value %s", c.ns, e, c.value)
		}
	}
	if e := get("", "a"); e != nil {
		t.Fatalf("a of %s found in the namespace \"\": %+v", fa, e)
	}
	if e := get("other", "k"); e != nil {
		t.Fatalf("k found in a namespace without entries: %+v", e)
	}
	count := func(ns string) int64 {
		t.Helper()
		var n int64
		if err := b.View(ctx, "configs", func(r storage.Reader) (err error) { n, err = r.CountConfigs(ns); return err }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := []int64{count(""), count(fa), count(mm), count("other")}; !slices.Equal(got, []int64{1, 3, 1, 0}) {
		t.Fatalf("counts of \"\", %s, %s, other: %v; want [1 3 1 0]", fa, mm, got)
	}
	list := func(f storage.ConfigFilter) []string {
		t.Helper()
		var got []string
		if err := b.View(ctx, "configs", func(r storage.Reader) error {
			return r.EachConfig(f, func(e *storage.ConfigEntry) error {
				got = append(got, e.Namespace+"/"+e.Key+"="+e.ValueJSON)
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, c := range []struct {
		f    storage.ConfigFilter
		want []string
	}{
		{storage.ConfigFilter{}, []string{`/k="default"`}},
		{storage.ConfigFilter{Namespace: fa}, []string{"flash-attn/a=1", "flash-attn/b=2", `flash-attn/k="fa"`}},
		{storage.ConfigFilter{Namespace: fa, Device: "gpu:0"}, []string{"flash-attn/b=2", `flash-attn/k="fa"`}},
		{storage.ConfigFilter{Namespace: "other"}, nil},
		{storage.ConfigFilter{AllNamespaces: true}, []string{`/k="default"`, "flash-attn/a=1", "flash-attn/b=2",
			`flash-attn/k="fa"`, `matmul ü/k="mm2"`}},
		{storage.ConfigFilter{AllNamespaces: true, Device: "gpu:1"}, []string{"flash-attn/a=1", `matmul ü/k="mm2"`}},
		{storage.ConfigFilter{AllNamespaces: true, Device: "gpu:1", OpID: "none"}, nil},
		// AllNamespaces wins over a Namespace left set.
		{storage.ConfigFilter{AllNamespaces: true, Namespace: fa, Device: "gpu:1"}, []string{"flash-attn/a=1", `matmul ü/k="mm2"`}},
	} {
		if got := list(c.f); !slices.Equal(got, c.want) {
			t.Errorf("EachConfig(%+v) = %q; want %q", c.f, got, c.want)
		}
	}
	// Deletes and clears touch their namespace only; the fast path sees it.
	if err := b.Update(ctx, "configs", func(w storage.Writer) error {
		if ok, err := w.DeleteConfig(fa, "k"); err != nil || !ok {
			return fmt.Errorf("delete %s/k: %v, %v", fa, ok, err)
		}
		if ok, err := w.DeleteConfig("other", "k"); err != nil || ok {
			return fmt.Errorf("delete other/k: %v, %v; want false", ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if get(fa, "k") != nil || get("", "k") == nil || get(mm, "k") == nil {
		t.Fatalf("after deleting %s/k: %q", fa, list(storage.ConfigFilter{AllNamespaces: true}))
	}
	if err := b.Update(ctx, "configs", func(w storage.Writer) error {
		if n, err := w.ClearConfigs(fa); err != nil || n != 2 {
			return fmt.Errorf("clear %s: %d, %v; want 2", fa, n, err)
		}
		if n, err := w.ClearConfigs("other"); err != nil || n != 0 {
			return fmt.Errorf("clear other: %d, %v; want 0", n, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := list(storage.ConfigFilter{AllNamespaces: true}), []string{`/k="default"`, `matmul ü/k="mm2"`}; !slices.Equal(got, want) {
		t.Fatalf("after clearing %s: %q; want %q", fa, got, want)
	}
	if get(fa, "a") != nil || count(fa) != 0 || count("") != 1 {
		t.Fatalf("after clearing %s: a %+v, counts %d, %d", fa, get(fa, "a"), count(fa), count(""))
	}
}

func testBackup(t *testing.T, open Open) {
	b := open(t)
	write(t, b, hashOf('4'), "prog", false, "S1")
	path := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil { // the API layer creates it
		t.Fatal(err)
	}
	if err := b.Backup(ctx, path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("backup file: %v", err)
	}
}

func testClosed(t *testing.T, open Open) {
	b := open(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	h := hashOf('5')
	if _, err := b.Lookup(ctx, h, key(h, "S")); apierr.KindOf(err) != apierr.KindClosed {
		t.Errorf("lookup after close: %v, want the closed error", err)
	}
	if _, err := b.Write(ctx, &storage.Write{Hash: h}); apierr.KindOf(err) != apierr.KindClosed {
		t.Errorf("write after close: %v, want the closed error", err)
	}
	if err := b.View(ctx, "v", func(storage.Reader) error { return nil }); apierr.KindOf(err) != apierr.KindClosed {
		t.Errorf("view after close: %v, want the closed error", err)
	}
}

func testClaims(t *testing.T, open Open) {
	b := open(t)
	h := hashOf('c')
	claim := func(sched, token string) *storage.Claim {
		return &storage.Claim{Key: key(h, sched), ProgramHash: h, ProgramName: "conv", Schedule: sched, Token: token,
			Hostname: "node1", PID: 42, StartTime: 7, BootID: "boot", PIDNS: 9, SlurmJobID: "123", Username: "u",
			LeaseSeconds: 60, ClaimedAt: "2026-01-01T00:00:00+00:00", RenewedAt: "2026-01-01T00:00:00+00:00"}
	}
	claims := func(keys ...string) map[string]*storage.Claim {
		t.Helper()
		var got map[string]*storage.Claim
		if err := b.View(ctx, "claims", func(r storage.Reader) (err error) { got, err = r.GetClaims(keys); return err }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// A database without a claim reads as empty.
	if got := claims(key(h, "A")); len(got) != 0 {
		t.Fatalf("no claims yet: %v", got)
	}
	put := func(c *storage.Claim) {
		t.Helper()
		if err := b.UpdateClaims(ctx, "claim", func(w storage.ClaimWriter) error { return w.PutClaim(c) }); err != nil {
			t.Fatal(err)
		}
	}
	// same compares a claim read back with the one put: a backend with
	// a clock of its own (storage.Claim.ServerClock) dates the row by it
	// and says what is left of the lease.
	same := func(got, want *storage.Claim) bool {
		if got == nil {
			return false
		}
		g := *got
		if g.ServerClock {
			if g.ExpiresIn <= 0 || g.ExpiresIn > time.Duration(want.LeaseSeconds*float64(time.Second)) || g.RenewedAt == "" {
				t.Errorf("a server-dated claim's lease: %v left of %gs, renewed at %q", g.ExpiresIn, want.LeaseSeconds, g.RenewedAt)
			}
			g.ServerClock, g.ExpiresIn, g.ClaimedAt, g.RenewedAt = false, 0, want.ClaimedAt, want.RenewedAt
		}
		return g == *want
	}
	put(claim("A", "t1"))
	put(claim("B", "t2"))
	got := claims(key(h, "A"), key(h, "B"), key(h, "C"))
	if len(got) != 2 || !same(got[key(h, "A")], claim("A", "t1")) {
		t.Fatalf("GetClaims: %+v", got)
	}
	// A takeover replaces the row; the old token no longer renews or deletes it.
	put(claim("A", "t3"))
	var renewed []storage.ClaimRef
	err := b.UpdateClaims(ctx, "renew", func(w storage.ClaimWriter) (err error) {
		renewed, err = w.RenewClaims([]storage.ClaimRef{{Key: key(h, "A"), Token: "t1"}, {Key: key(h, "A"), Token: "t3"}}, "later")
		if err != nil {
			return err
		}
		if ok, err := w.DeleteClaim(key(h, "A"), "t1"); ok || err != nil {
			return fmt.Errorf("delete by an old token: %v %v", ok, err)
		}
		return nil
	})
	if err != nil || len(renewed) != 1 || renewed[0].Token != "t3" {
		t.Fatalf("renew: %v %v", renewed, err)
	}
	if c := claims(key(h, "A"))[key(h, "A")]; c.Renewals != 1 || (c.RenewedAt != "later" && !c.ServerClock) || c.Token != "t3" {
		t.Fatalf("after renewal: %+v", c)
	}
	// A write that releases its claim deletes it in the same transaction,
	// only if the token still names it.
	w := &storage.Write{Hash: h, Name: "conv", Source: "src", Hostname: "h", Username: "u",
		Rows:    []storage.Row{{Key: key(h, "A"), Schedule: "A", ResultJSON: `{"is_legal":false,"execution_times":null}`}},
		Release: []storage.ClaimRef{{Key: key(h, "A"), Token: "t3"}, {Key: key(h, "B"), Token: "wrong"}},
		Renew:   []storage.ClaimRef{{Key: key(h, "B"), Token: "t2"}}}
	if n, err := b.Write(ctx, w); n != 1 || err != nil {
		t.Fatalf("write with release: %v %v", n, err)
	}
	got = claims(key(h, "A"), key(h, "B"))
	if len(got) != 1 || got[key(h, "B")] == nil || got[key(h, "B")].Renewals != 1 {
		t.Fatalf("after the release and renewal: %+v", got)
	}
	var all []string
	if err := b.View(ctx, "each", func(r storage.Reader) error {
		return r.EachClaim(func(c *storage.Claim) error { all = append(all, c.Schedule); return nil })
	}); err != nil || !slices.Equal(all, []string{"B"}) {
		t.Fatalf("EachClaim: %v %v", all, err)
	}
	// A late record, after a takeover (the token no longer names the
	// claim): when it stores the record, the taker's claim ends too; when
	// the schedule was recorded already, another's claim on it (a
	// re-measurement's) stays.
	late := func(sched, token string) int {
		t.Helper()
		n, err := b.Write(ctx, &storage.Write{Hash: h, Name: "conv", Source: "src", Hostname: "h", Username: "u",
			Rows:    []storage.Row{{Key: key(h, sched), Schedule: sched, ResultJSON: `{"is_legal":true,"execution_times":[1.0]}`}},
			Release: []storage.ClaimRef{{Key: key(h, sched), Token: token}}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	put(claim("L", "taker"))
	if n := late("L", "holder"); n != 1 || len(claims(key(h, "L"))) != 0 {
		t.Fatalf("a late record that stores the schedule: %d written, claims %+v", n, claims(key(h, "L")))
	}
	put(claim("L", "remeasurer"))
	if n := late("L", "holder"); n != 0 || claims(key(h, "L"))[key(h, "L")] == nil {
		t.Fatalf("a late record of a recorded schedule: %d written, claims %+v", n, claims(key(h, "L")))
	}
}

// testCheckDepths: CheckTables names the stored values nested deeper than
// limits.MaxValueDepth (written past the API layer, as an old writer or a
// direct SQL write would), records and config entries alike (an entry
// with its namespace), and only those.
// A result_json that is not JSON (written past the engine, which
// validates) is counted Unreadable by Summary, neither legal nor illegal,
// and is not legal in ProgramSummaries: the other records are counted as
// ever, where the original's stats() failed on it.
func testUnreadableResults(t *testing.T, open Open) {
	b := open(t)
	w := &storage.Write{Hash: hashOf('u'), Name: "unreadable", Source: "src", Hostname: "h", Username: "u"}
	for i, result := range []string{`{"is_legal":true,"execution_times":[1.0]}`, `{not json`,
		`{"is_legal":false,"execution_times":[]}`, `{"is_legal":true,"execution_times":[NaN]}`, `[1, 2`,
		`[1, 2]`, `"a string"`} {
		w.Rows = append(w.Rows, storage.Row{Key: fmt.Sprintf("u%d", i), Schedule: fmt.Sprintf("U(L0,%d)", i),
			ResultJSON: result})
	}
	if n, err := b.Write(ctx, w); err != nil || n != 7 {
		t.Fatalf("write: %d, %v", n, err)
	}
	var s *storage.Summary
	var ps []storage.ProgramSummary
	var c *storage.TableCheck
	if err := b.View(ctx, "stats", func(r storage.Reader) (err error) {
		if s, err = r.Summary(); err != nil {
			return err
		}
		if c, err = r.CheckTables(); err != nil {
			return err
		}
		ps, err = r.ProgramSummaries()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Not JSON, or JSON that is not an object: what the export leaves out.
	if s.Total != 7 || s.Legal != 2 || s.Illegal != 1 || s.Unreadable != 4 || s.Programs != 1 {
		t.Errorf("summary %+v, want 7 records: 2 legal, 1 illegal, 4 unreadable", s)
	}
	if c.BadResults != 4 {
		t.Errorf("check counts %d bad results, want 4", c.BadResults)
	}
	if len(ps) != 1 || ps[0].Records != 7 || ps[0].Legal != 2 {
		t.Errorf("program summaries %+v, want one of 7 records, 2 legal", ps)
	}
}

func testCheckDepths(t *testing.T, open Open) {
	b := open(t)
	nest := func(depth int) string {
		return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
	}
	at, over := nest(limits.MaxValueDepth-1), nest(limits.MaxValueDepth) // result_json adds a level
	w := &storage.Write{Hash: hashOf('d'), Name: "deep", Source: "src", Hostname: "h", Username: "u"}
	for i, times := range []string{"[1.0]", at, over, over} {
		w.Rows = append(w.Rows, storage.Row{Key: fmt.Sprintf("r%d", i), Schedule: fmt.Sprintf("U(L0,%d)", i),
			ResultJSON: `{"is_legal":true,"execution_times":` + times + `}`})
	}
	if n, err := b.Write(ctx, w); err != nil || n != 4 {
		t.Fatalf("write: %d, %v", n, err)
	}
	if err := b.Update(ctx, "configs", func(w storage.Writer) error {
		for k, v := range map[[2]string]string{
			{"", "c0"}: nest(limits.MaxValueDepth), {"", "c1"}: nest(limits.MaxValueDepth + 1), {"", "c2"}: `{"a":"[[["}`,
			{"flash-attn", "c1"}: nest(limits.MaxValueDepth + 2), {"flash-attn", "c0"}: nest(limits.MaxValueDepth),
		} {
			e := &storage.ConfigEntry{Namespace: k[0], Key: k[1], Device: "gpu:0", OpID: "op", CallKey: k[1], ValueJSON: v,
				Hostname: "h", Username: "u", CreationDate: "d", UpdateDate: "d"}
			if _, err := w.PutConfig(e, false); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var c *storage.TableCheck
	if err := b.View(ctx, "check", func(r storage.Reader) (err error) { c, err = r.CheckTables(); return err }); err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("record r2 (%d levels)", limits.MaxValueDepth+1),
		fmt.Sprintf("record r3 (%d levels)", limits.MaxValueDepth+1),
		fmt.Sprintf("config c1 (%d levels)", limits.MaxValueDepth+1),
		fmt.Sprintf("config c1 in namespace flash-attn (%d levels)", limits.MaxValueDepth+2),
	}
	if c.DeepCount != 4 || !slices.Equal(c.DeepValues, want) {
		t.Fatalf("check found %d too deep: %q; want %q", c.DeepCount, c.DeepValues, want)
	}
}

// testRuns: a written row's runs come back with the record, by lookup,
// lookup_many, get and a program's records, until a write without runs
// (the original library's overwrite) replaces the record; contexts are
// stored once each; a deleted record takes its runs along.
func testRuns(t *testing.T, open Open) {
	b := open(t)
	h := hashOf('r')
	ctxA := storage.RunContext{Fingerprint: "fa", JSON: `{"host":"a"}`}
	w := &storage.Write{Hash: h, Name: "prog", Source: "src", Hostname: "h", Username: "u",
		Contexts: []storage.RunContext{ctxA},
		Rows: []storage.Row{
			{Key: key(h, "S1"), Schedule: "S1", ResultJSON: `{"is_legal":true,"execution_times":[1]}`, Runs: `[{"n":1,"context":"fa"}]`},
			{Key: key(h, "S2"), Schedule: "S2", ResultJSON: `{"is_legal":true,"execution_times":[2]}`},
		}}
	if n, err := b.Write(ctx, w); err != nil || n != 2 {
		t.Fatalf("write: %d, %v", n, err)
	}
	runsOf := func(k string) string {
		t.Helper()
		rec, err := b.Lookup(ctx, h, k)
		if err != nil || rec == nil {
			t.Fatalf("lookup %s: %v, %v", k, rec, err)
		}
		many, err := b.LookupMany(ctx, h, []string{k})
		if err != nil || many[0] == nil || many[0].Runs != rec.Runs {
			t.Fatalf("lookup_many %s: %+v, %v; lookup's runs %q", k, many, err, rec.Runs)
		}
		err = b.View(ctx, "test", func(r storage.Reader) error {
			got, err := r.Get(k)
			if err != nil || got == nil || got.Runs != rec.Runs {
				return fmt.Errorf("get %s: %+v, %v; lookup's runs %q", k, got, err, rec.Runs)
			}
			seen := 0
			err = r.EachRecordOf(h, func(o *storage.Record) error {
				if o.Key == k {
					seen++
					if o.Runs != rec.Runs {
						return fmt.Errorf("program's record %s has runs %q; lookup's %q", k, o.Runs, rec.Runs)
					}
				}
				return nil
			})
			if err == nil && seen != 1 {
				err = fmt.Errorf("the program's records list %s %d times", k, seen)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Runs
	}
	if got := runsOf(key(h, "S1")); got != `[{"n":1,"context":"fa"}]` {
		t.Errorf("runs of S1 %q", got)
	}
	if got := runsOf(key(h, "S2")); got != "" {
		t.Errorf("runs of S2, written without, %q", got)
	}
	// A second write naming the same context stores it once, and what is
	// stored under a fingerprint stays.
	w2 := &storage.Write{Hash: h, Name: "prog", Source: "src", Hostname: "h", Username: "u",
		Contexts: []storage.RunContext{{Fingerprint: "fa", JSON: `{"host":"other"}`}, {Fingerprint: "fb", JSON: `{"host":"b"}`}},
		Rows:     []storage.Row{{Key: key(h, "S3"), Schedule: "S3", ResultJSON: `{"is_legal":true,"execution_times":[3]}`, Runs: `[{"n":1,"context":"fb"}]`}}}
	if _, err := b.Write(ctx, w2); err != nil {
		t.Fatal(err)
	}
	err := b.View(ctx, "test", func(r storage.Reader) error {
		got, err := r.Contexts([]string{"fa", "fb", "missing"})
		if err != nil {
			return err
		}
		if len(got) != 2 || got["fa"] != ctxA.JSON || got["fb"] != `{"host":"b"}` {
			return fmt.Errorf("contexts %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The original's overwrite: a new row, without runs: the old runs no
	// longer describe it.
	time.Sleep(2 * time.Millisecond)
	over := &storage.Write{Hash: h, Name: "prog", Source: "src", Hostname: "old", Username: "u", Overwrite: true,
		Rows: []storage.Row{{Key: key(h, "S1"), Schedule: "S1", ResultJSON: `{"is_legal":true,"execution_times":[9]}`}}}
	if _, err := b.Write(ctx, over); err != nil {
		t.Fatal(err)
	}
	if got := runsOf(key(h, "S1")); got != "" {
		t.Errorf("runs of S1 after an overwrite without runs %q, want none", got)
	}
	// PutRuns dates runs with the record they describe; DeleteRecord
	// takes them along.
	var s3Date string
	err = b.Update(ctx, "test", func(w storage.Writer) error {
		rec, err := w.Get(key(h, "S3"))
		if err != nil {
			return err
		}
		s3Date = rec.UpdateDate
		if err := w.PutRuns(key(h, "S3"), rec.UpdateDate, `[{"n":1,"context":"fa"}]`); err != nil {
			return err
		}
		return w.PutContext(storage.RunContext{Fingerprint: "fc", JSON: `{"host":"c"}`})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := runsOf(key(h, "S3")); got != `[{"n":1,"context":"fa"}]` {
		t.Errorf("runs of S3 after PutRuns %q", got)
	}
	err = b.Update(ctx, "test", func(w storage.Writer) error {
		if ok, err := w.DeleteRecord(key(h, "S3")); err != nil || !ok {
			return fmt.Errorf("delete: %v, %v", ok, err)
		}
		// Put back with the same date: the old runs must not come back.
		rec := &storage.Record{Key: key(h, "S3"), ProgramHash: h, Schedule: "S3", ResultJSON: `{"is_legal":false,"execution_times":null}`,
			Hostname: "h", Username: "u", CreationDate: s3Date, UpdateDate: s3Date}
		_, err := w.PutRecord(rec, false)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := runsOf(key(h, "S3")); got != "" {
		t.Errorf("runs of a deleted and rewritten record %q", got)
	}
}
