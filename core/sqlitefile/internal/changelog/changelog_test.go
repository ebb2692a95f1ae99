package changelog

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
	"github.com/tirastore/tirastore/core/storage"
)

func entry(n byte, keys ...string) *Entry {
	e := &Entry{File: FileID{Dev: 1, Ino: 2}}
	e.Before[0], e.After[0] = n, n+1
	for _, k := range keys {
		e.Put = append(e.Put, &storage.Record{Key: k, ProgramHash: "p", Schedule: "S(" + k + ")", ResultJSON: `{"x":1}`,
			Hostname: "h", Username: "u", CreationDate: "c", UpdateDate: "d", SourceProject: "sp"})
	}
	e.Drop = []Dropped{{Key: "gone" + string('0'+n), ProgramHash: "q"}}
	return e
}

func logPath(t *testing.T) string { return filepath.Join(t.TempDir(), "private", "changes") }

// at is the private directory (internal/nodelocal) holding the file at path p,
// and the file's name in it.
func at(t *testing.T, p string) (*nodelocal.Dir, string) {
	t.Helper()
	d, err := nodelocal.OpenDir(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d, filepath.Base(p)
}

func writerAt(t *testing.T, p string) *Writer { return NewWriter(at(t, p)) }
func readerAt(t *testing.T, p string) *Reader { return NewReader(at(t, p)) }

func holdAt(t *testing.T, p string) *Mark {
	t.Helper()
	h, err := MarkUsed(at(t, p))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func next(t *testing.T, r *Reader) ([]*Entry, bool) {
	t.Helper()
	es, restart, err := r.Next(nil)
	if err != nil {
		t.Fatal(err)
	}
	return es, restart
}

// started is a log with one entry, its writer, and a reader that has
// opened it (and so skipped that entry).
func started(t *testing.T) (string, *Writer, *Reader) {
	t.Helper()
	p := logPath(t)
	w := writerAt(t, p)
	t.Cleanup(w.Close)
	appendOK(t, w, entry(0))
	r := readerAt(t, p)
	t.Cleanup(r.Close)
	if es, _ := next(t, r); len(es) != 0 {
		t.Fatalf("a new reader got %d old entries", len(es))
	}
	return p, w, r
}

func appendOK(t *testing.T, w *Writer, e *Entry) {
	t.Helper()
	if _, err := w.Append(e); err != nil {
		t.Fatal(err)
	}
}

// Entries come back whole, in order, each once; a reader that opens the
// log skips what was logged before.
func TestRoundTrip(t *testing.T) {
	p := logPath(t)
	w := writerAt(t, p)
	defer w.Close()
	appendOK(t, w, entry(0, "a"))
	r := readerAt(t, p)
	defer r.Close()
	if es, _ := next(t, r); len(es) != 0 {
		t.Fatalf("a new reader got %d old entries", len(es))
	}
	want := []*Entry{entry(1, "b", "c"), entry(2), entry(3, "é\x01\"")}
	for _, e := range want {
		appendOK(t, w, e)
	}
	got, restart := next(t, r)
	if restart || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v (restart %v), want %+v", got, restart, want)
	}
	if es, _ := next(t, r); len(es) != 0 {
		t.Fatalf("entries read twice: %d", len(es))
	}
}

// A reader never returns a partial entry (one still being written, or torn
// by a writer that died): it waits at it. The next writer starts the log
// over, and the reader follows into the new epoch.
func TestTornTail(t *testing.T) {
	p, w, r := started(t)
	frame, err := encode(entry(1, "x"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(frame[:len(frame)-5]); err != nil {
		t.Fatal(err)
	}
	if es, _ := next(t, r); len(es) != 0 {
		t.Fatalf("partial entry returned: %+v", es)
	}
	if _, err := f.Write(frame[len(frame)-5:]); err != nil { // the rest arrives
		t.Fatal(err)
	}
	if es, _ := next(t, r); len(es) != 1 || !reflect.DeepEqual(es[0], entry(1, "x")) {
		t.Fatalf("completed entry: %+v", es)
	}
	// Torn for good: the next Append starts over.
	if _, err := f.Write(frame[:20]); err != nil {
		t.Fatal(err)
	}
	if es, _ := next(t, r); len(es) != 0 {
		t.Fatalf("torn entry returned: %+v", es)
	}
	appendOK(t, w, entry(2, "y"))
	es, restart := next(t, r)
	if !restart || len(es) != 1 || !reflect.DeepEqual(es[0], entry(2, "y")) {
		t.Fatalf("after the torn tail: %+v (restart %v)", es, restart)
	}
}

// A corrupt entry (its CRC does not match) stops the reader there.
func TestCorruptEntry(t *testing.T) {
	p, w, r := started(t)
	fi, _ := os.Stat(p)
	appendOK(t, w, entry(1, "k"))
	appendOK(t, w, entry(2, "k2"))
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{'Z'}, fi.Size()+frameHead+30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if es, _ := next(t, r); len(es) != 0 {
		t.Fatalf("read past a corrupt entry: %+v", es)
	}
}

// Past maxSize the writer starts over; a reader sees the new epoch and
// reads from its first entry.
func TestStartOver(t *testing.T) {
	old := maxSize
	t.Cleanup(func() { maxSize = old })
	maxSize = 2000
	p, w, r := started(t)
	var all []*Entry
	restarts := 0
	for i := byte(1); i < 40; i++ {
		e := entry(i, "key-of-some-length")
		appendOK(t, w, e)
		es, restart := next(t, r)
		if restart {
			restarts++
		}
		all = append(all, es...)
		if fi, _ := os.Stat(p); fi.Size() > maxSize+1000 {
			t.Fatalf("log of %d bytes", fi.Size())
		}
	}
	if restarts == 0 || len(all) != 39 {
		t.Fatalf("%d restarts, %d entries; want some restarts and every entry", restarts, len(all))
	}
	for i, e := range all {
		if e.Before[0] != byte(i+1) {
			t.Fatalf("entry %d out of order: %d", i, e.Before[0])
		}
	}
}

// A removed log is reopened by name (restart: entries may have been missed);
// a file another user could write is not trusted.
func TestRemovedAndForeign(t *testing.T) {
	p, w, r := started(t)
	os.Remove(p)
	appendOK(t, w, entry(1, "n"))
	es, restart := next(t, r)
	if !restart || len(es) != 1 {
		t.Fatalf("after removal: %d entries, restart %v", len(es), restart)
	}
	if err := os.Chmod(p, 0o622); err != nil {
		t.Fatal(err)
	}
	w2 := writerAt(t, p)
	if _, err := w2.Append(entry(2)); err == nil {
		t.Error("appended to a file others can write")
	}
	r2 := readerAt(t, p)
	defer r2.Close()
	if _, _, err := r2.Next(nil); err == nil {
		t.Error("read a file others can write")
	}
	link := filepath.Join(filepath.Dir(p), "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := writerAt(t, link).Append(entry(3)); err == nil {
		t.Error("followed a symlink")
	}
}

// The last holder to release removes the log; earlier ones leave it.
func TestHoldRelease(t *testing.T) {
	p := logPath(t)
	a, b := holdAt(t, p), holdAt(t, p)
	if a == nil || b == nil {
		t.Fatal("MarkUsed failed")
	}
	a.Release()
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("removed while still held: %v", err)
	}
	b.Release()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("not removed by the last holder: %v", err)
	}
}

// Sweep removes a log that nobody holds once it is old, and keeps a held
// one and a recent one.
func TestSweep(t *testing.T) {
	p := logPath(t)
	d, name := at(t, p)
	h := holdAt(t, p)
	old := time.Now().Add(-2 * staleAge)
	os.Chtimes(p, old, old)
	Sweep(d, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("a held log was swept: %v", err)
	}
	h.f.Close() // the holder dies without Release
	os.Chtimes(p, time.Now(), time.Now())
	Sweep(d, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("a recent log was swept: %v", err)
	}
	os.Chtimes(p, old, old)
	Sweep(d, name)
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("a leftover log was kept: %v", err)
	}
}

// A writer's own entry comes back as the very Entry it appended, in its
// place among the others; a stale Own (the log started over) is ignored.
func TestOwnEntry(t *testing.T) {
	p, w, r := started(t)
	other := writerAt(t, p)
	defer other.Close()
	appendOK(t, other, entry(1, "a"))
	mine := entry(2, "b")
	own, err := w.Append(mine)
	if err != nil || own == nil {
		t.Fatal(own, err)
	}
	appendOK(t, other, entry(3, "c"))
	es, _, err := r.Next(own)
	if err != nil || len(es) != 3 || es[1] != mine || es[0] == mine || !reflect.DeepEqual(es[2], entry(3, "c")) {
		t.Fatalf("got %+v, %v", es, err)
	}
	appendOK(t, w, entry(4, "d"))
	stale, _ := w.Append(entry(5, "e"))
	stale.epoch++
	es, _, _ = r.Next(stale)
	if len(es) != 2 || es[1] == stale.Entry || !reflect.DeepEqual(es[1], entry(5, "e")) {
		t.Fatalf("stale own: %+v", es)
	}
}

// A writer's own entry right where its reader stands comes back without a
// read: the test spoils the frame on disk after the append, which a read
// would refuse (and an earlier version returned nothing), and the reader
// still returns the entry and stands right after it.
func TestOwnEntryNotRead(t *testing.T) {
	p, w, r := started(t)
	mine := entry(2, "b")
	own, err := w.Append(mine)
	if err != nil || own == nil {
		t.Fatal(own, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(make([]byte, own.size), own.off)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if es, _, err := r.Next(own); err != nil || len(es) != 1 || es[0] != mine {
		t.Fatalf("got %+v, %v", es, err)
	}
	if r.off != own.off+own.size {
		t.Fatalf("reader at %d, want %d", r.off, own.off+own.size)
	}
	// The frame it skipped stays spoiled, so the writer starts the log
	// over; the reader follows.
	other := writerAt(t, p)
	defer other.Close()
	appendOK(t, other, entry(3, "c"))
	if es, restart := next(t, r); !restart || len(es) != 1 || !reflect.DeepEqual(es[0], entry(3, "c")) {
		t.Fatalf("after: %+v (restart %v)", es, restart)
	}
}

// encodedSize is exactly the frame's size: encode then allocates once.
// (A size too small would still encode right, only slower: this test is
// what catches it.)
func TestEncodedSize(t *testing.T) {
	for _, e := range []*Entry{{}, entry(0), entry(3, "a", "b"), bigEntry(1000)} {
		b, err := encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := encodedSize(e); got != len(b) || cap(b) != len(b) {
			t.Errorf("%d puts, %d drops: encodedSize %d, frame %d bytes (capacity %d)", len(e.Put), len(e.Drop), got, len(b), cap(b))
		}
	}
}

// bigEntry is the entry of a record_many of n new records.
func bigEntry(n int) *Entry {
	e := &Entry{}
	for i := range n {
		e.Put = append(e.Put, &storage.Record{Key: strings.Repeat("k", 64) + strconv.Itoa(i), ProgramHash: strings.Repeat("h", 64),
			Schedule: "T2(L0,L1,4," + strconv.Itoa(i) + ",comps=['conv'])|U(L2,4,comps=['conv'])", ResultJSON: `{"is_legal": true, "execution_times": [0.1, 0.105, 0.11]}`,
			Hostname: "node", Username: "user", CreationDate: "2026-12-03T09:40:34.762542+00:00", UpdateDate: "2026-12-03T09:40:34.762542+00:00"})
	}
	return e
}

// BenchmarkEncode1000 encodes the entry of a record_many(1000), which the
// committer does under the lock.
func BenchmarkEncode1000(b *testing.B) {
	e := bigEntry(1000)
	for i := 0; i < b.N; i++ {
		if _, err := encode(e); err != nil {
			b.Fatal(err)
		}
	}
}
