// Package changelog lets the result caches of one node's processes follow
// the commits of the others instead of starting over at each of them.
//
// A process caches lookup results (core's resultCache) for as long as one
// read of the database header shows that nothing has committed since they
// were read. Under a steady stream of writes that is never long: with 32
// processes recording, the database changes every few milliseconds, every
// cache is emptied at every commit, and nearly every lookup takes the lock
// again, one process after another. Yet a commit of this engine changes
// only the rows it writes, and its committer knows them.
//
// So a committer appends one Entry per commit to a log: "the database file
// (device, inode) went from generation Before to generation After, and these
// are the only rows that changed". A cache that reflects Before applies the
// entry and then reflects After, and keeps serving. An entry is a fact about
// the database, whoever reads it and whenever: it is applied only by a cache
// whose generation is exactly Before, so entries that do not chain (a commit
// that was not logged: another node, an old Python worker, an administrative
// change) change nothing, and the cache starts over as it did before the log
// existed. The log never has to be complete, in order or even present.
//
// The log is one file per database, user and node, in node-local memory
// (in the user's private directory beside the node queue's gate file,
// internal/nodelocal), mode 0600, opened through the directory's descriptor
// and checked before it is read or written: a reader trusts entries only
// of its own user, so another user of a shared database cannot slip
// forged results into its cache. Every entry is appended with one write()
// under the database lock, and framed so that a reader never applies a torn
// or partial one (a magic number, the length, a CRC-32C, then the length and
// a second magic number at the end, by which the next writer checks that
// the log ends with a whole entry). A log that grew past 4 MiB, or ends
// with a torn entry (its writer was killed), is started over by the next
// writer: it writes a new epoch into the file's header and truncates the
// entries; readers that see a new epoch read from the first entry again.
package changelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
	"github.com/tirastore/tirastore/core/storage"
)

// GenerationSize is the length of a database generation (see Entry).
const GenerationSize = 28

// Generation identifies a state of the database file: the header fields a
// commit changes (core reads them; here they are opaque bytes).
type Generation [GenerationSize]byte

// FileID is the database file an entry is about: a replaced file (restored
// from a backup, say) may reach the same generation with other content.
type FileID struct{ Dev, Ino uint64 }

// Entry is one logged commit.
type Entry struct {
	File          FileID
	Before, After Generation
	// Put are rows this commit wrote as given (new records), exactly as a
	// locked lookup now reads them; Drop are keys whose row changed in a
	// way the committer does not know exactly (an overwrite keeps the old
	// row's creation date): a reader forgets them.
	Put  []*storage.Record
	Drop []Dropped
}

// Dropped is a key whose row changed in a way not logged, with the program
// the row belongs to now.
type Dropped struct{ Key, ProgramHash string }

// maxSize is the size past which the next writer starts the log over (a
// variable for tests).
var maxSize int64 = 4 << 20

const (
	fileMagic  = 0x5453434c // "TSCL"
	entryMagic = 0x54534345 // "TSCE"
	endMagic   = 0x5453435a // "TSCZ"
	headerSize = 16         // fileMagic, version, epoch
	version    = 1
	frameHead  = 8 // entryMagic, payload length
	frameTail  = 12
	// maxPayload bounds one entry, so that a corrupt length cannot make a
	// reader allocate gigabytes.
	maxPayload = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// open opens the log name in dir, creating it for a writer: a regular file
// of this user, mode 0600, one link, or the error is a *nodelocal.Problem
// (see internal/nodelocal). It returns the status it checked.
func open(dir *nodelocal.Dir, name string, write bool) (*os.File, unix.Stat_t, error) {
	flags := os.O_RDONLY
	if write {
		flags = os.O_RDWR | os.O_CREATE
	}
	return dir.Open(name, flags)
}

// readEpoch reads the log's header: ok is false when it has none (yet) or
// not one of this version.
func readEpoch(f *os.File) (epoch uint64, ok bool, err error) {
	var hdr [headerSize]byte
	n, err := f.ReadAt(hdr[:], 0)
	if n < headerSize {
		if err == io.EOF {
			err = nil
		}
		return 0, false, err
	}
	if binary.LittleEndian.Uint32(hdr[0:]) != fileMagic || binary.LittleEndian.Uint32(hdr[4:]) != version {
		return 0, false, nil
	}
	return binary.LittleEndian.Uint64(hdr[8:]), true, nil
}

// Writer appends entries. Its methods are called under the database lock.
type Writer struct {
	dir  *nodelocal.Dir
	name string
	f    *os.File
	ino  uint64 // f's inode, named in the Own of each Append
}

// NewWriter returns a writer of the log name in dir; the file is opened at
// the first Append.
func NewWriter(dir *nodelocal.Dir, name string) *Writer { return &Writer{dir: dir, name: name} }

// Own is an entry as its writer appended it: where it is in the log, so
// that the writer's own Reader can take the entry from memory instead of
// decoding it again (see Reader.Next).
type Own struct {
	Entry *Entry
	ino   uint64
	epoch uint64
	off   int64
	size  int64 // the frame's
}

// Append logs e. A failure leaves the log as it was or with a torn tail,
// which the next Append replaces; readers then start over, as they would
// without a log.
func (w *Writer) Append(e *Entry) (*Own, error) {
	var st unix.Stat_t
	if w.f != nil {
		if err := unix.Fstat(int(w.f.Fd()), &st); err != nil || st.Nlink == 0 {
			w.f.Close()
			w.f = nil
		}
	}
	if w.f == nil {
		f, fst, err := open(w.dir, w.name, true)
		if err != nil {
			return nil, err
		}
		w.f, w.ino, st = f, fst.Ino, fst
	}
	size, epoch, err := w.validSize(st.Size)
	if err != nil {
		return nil, err
	}
	if size < 0 || size > maxSize {
		if epoch, err = w.restart(); err != nil {
			return nil, err
		}
		size = headerSize
	}
	frame, err := encode(e)
	if err != nil {
		return nil, err
	}
	if _, err := w.f.WriteAt(frame, size); err != nil {
		return nil, err
	}
	return &Own{Entry: e, ino: w.ino, epoch: epoch, off: size, size: int64(len(frame))}, nil
}

// validSize is the log's size (given by the caller's fstat) and epoch if it
// has a header and ends with a whole entry; size is -1 if it must be
// started over.
func (w *Writer) validSize(size int64) (int64, uint64, error) {
	if size < headerSize {
		return -1, 0, nil
	}
	epoch, ok, err := readEpoch(w.f)
	if err != nil || !ok {
		return -1, 0, err
	}
	if size == headerSize {
		return size, epoch, nil
	}
	var tail [8]byte
	if _, err := w.f.ReadAt(tail[:], size-8); err != nil {
		return 0, 0, err
	}
	n := int64(binary.LittleEndian.Uint32(tail[0:]))
	start := size - int64(frameTail) - n - frameHead
	if binary.LittleEndian.Uint32(tail[4:]) != endMagic || start < headerSize {
		return -1, 0, nil
	}
	var head [frameHead]byte
	if _, err := w.f.ReadAt(head[:], start); err != nil {
		return 0, 0, err
	}
	if binary.LittleEndian.Uint32(head[0:]) != entryMagic || int64(binary.LittleEndian.Uint32(head[4:])) != n {
		return -1, 0, nil
	}
	return size, epoch, nil
}

// restart starts the log over with a new epoch: the header first, so that a
// reader that sees the new epoch reads from the first entry again.
func (w *Writer) restart() (uint64, error) {
	epoch := rand.Uint64() | 1
	var hdr [headerSize]byte
	binary.LittleEndian.PutUint32(hdr[0:], fileMagic)
	binary.LittleEndian.PutUint32(hdr[4:], version)
	binary.LittleEndian.PutUint64(hdr[8:], epoch)
	if _, err := w.f.WriteAt(hdr[:], 0); err != nil {
		return 0, err
	}
	return epoch, w.f.Truncate(headerSize)
}

// Close closes the writer's file.
func (w *Writer) Close() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
}

// Reader reads the entries appended since its previous call.
type Reader struct {
	dir   *nodelocal.Dir
	name  string
	f     *os.File
	ino   uint64
	epoch uint64
	off   int64
	buf   []byte
}

// NewReader returns a reader of the log name in dir. Entries logged before
// the reader first opens the file (at its first Next) are skipped: the
// cache a reader serves starts empty, and they are of no use to it.
func NewReader(dir *nodelocal.Dir, name string) *Reader { return &Reader{dir: dir, name: name} }

// Next returns the whole entries appended since the previous call. restart
// is true when the log was started over since, or reopened after its file
// was removed: entries may then have been missed, and the caller must not
// assume that none of them concerned it. A missing, foreign or unreadable
// log yields no entries.
//
// own, if not nil, is an entry this process appended, passed while it
// still holds the database lock it appended under: where the reader meets
// it, it returns own.Entry itself rather than decoding the frame, and when
// the reader stands right at it (nothing else was appended since its last
// call), Next reads nothing at all.
func (r *Reader) Next(own *Own) (entries []*Entry, restart bool, err error) {
	if own != nil && r.f != nil && own.ino == r.ino && own.epoch == r.epoch && own.off == r.off {
		// The writer appended own where this reader stands, under the
		// database lock that the caller still holds: the log is the one
		// this reader has open (its writer checked it was not removed,
		// and its epoch is this reader's) and nothing follows own.
		r.off += own.size
		return []*Entry{own.Entry}, false, nil
	}
	var st unix.Stat_t
	if r.f != nil {
		if err := unix.Fstat(int(r.f.Fd()), &st); err != nil || st.Nlink == 0 {
			r.f.Close()
			r.f, restart = nil, true
		}
	}
	if r.f == nil {
		f, fst, err := open(r.dir, r.name, false)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
			return nil, restart, err
		}
		st = fst
		first := r.epoch == 0 && !restart
		r.f, r.ino, r.epoch, r.off = f, st.Ino, 0, headerSize
		if first {
			// Skip what is there: read the epoch and start at the end.
			if epoch, ok, _ := readEpoch(r.f); ok {
				r.epoch, r.off = epoch, st.Size
			}
			return nil, false, nil
		}
	}
	epoch, ok, err := readEpoch(r.f)
	if err != nil || !ok {
		return nil, restart, err
	}
	if epoch != r.epoch {
		r.epoch, r.off, restart = epoch, headerSize, true
	}
	if st.Size <= r.off {
		return nil, restart, nil
	}
	want := st.Size - r.off
	if want > maxSize+maxPayload {
		return nil, restart, nil
	}
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	n, err := r.f.ReadAt(r.buf[:want], r.off)
	if err != nil && err != io.EOF {
		return nil, restart, err
	}
	data := r.buf[:n]
	used := 0
	for {
		if own != nil && own.ino == r.ino && own.epoch == r.epoch && own.off == r.off+int64(used) {
			if size, ok := frameSize(data[used:]); ok {
				entries = append(entries, own.Entry)
				used += size
				continue
			}
		}
		e, size, ok := decodeFrame(data[used:])
		if !ok {
			break
		}
		if e != nil {
			entries = append(entries, e)
		}
		used += size
	}
	r.off += int64(used)
	return entries, restart, nil
}

// Close closes the reader's file.
func (r *Reader) Close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// encode frames e: entryMagic, payload length, payload, CRC-32C of the
// payload, payload length, endMagic. The frame is sized before it is
// built: an entry of a record_many(1000) is hundreds of kilobytes, which
// growing by appends would copy over and over, under the lock.
func encode(e *Entry) ([]byte, error) {
	b := make([]byte, frameHead, encodedSize(e))
	b = binary.LittleEndian.AppendUint64(b, e.File.Dev)
	b = binary.LittleEndian.AppendUint64(b, e.File.Ino)
	b = append(b, e.Before[:]...)
	b = append(b, e.After[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Put)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Drop)))
	for _, r := range e.Put {
		for _, s := range [...]string{r.Key, r.ProgramHash, r.Schedule, r.ResultJSON, r.Hostname,
			r.Username, r.CreationDate, r.UpdateDate, r.SourceProject} {
			b = appendString(b, s)
		}
	}
	for _, d := range e.Drop {
		b = appendString(b, d.Key)
		b = appendString(b, d.ProgramHash)
	}
	n := len(b) - frameHead
	if n > maxPayload {
		return nil, fmt.Errorf("changelog: entry of %d bytes is too large", n)
	}
	binary.LittleEndian.PutUint32(b[0:], entryMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[frameHead:], castagnoli))
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = binary.LittleEndian.AppendUint32(b, endMagic)
	return b, nil
}

// encodedSize is the size of e's frame as encode writes it.
func encodedSize(e *Entry) int {
	n := frameHead + 8 + 8 + 2*GenerationSize + 4 + 4 + frameTail
	for _, r := range e.Put {
		n += 9*4 + len(r.Key) + len(r.ProgramHash) + len(r.Schedule) + len(r.ResultJSON) + len(r.Hostname) +
			len(r.Username) + len(r.CreationDate) + len(r.UpdateDate) + len(r.SourceProject)
	}
	for _, d := range e.Drop {
		n += 2*4 + len(d.Key) + len(d.ProgramHash)
	}
	return n
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// frameSize is the size of the whole frame at the start of data (ok false:
// none), checked by its magic numbers and lengths only.
func frameSize(data []byte) (int, bool) {
	if len(data) < frameHead+frameTail || binary.LittleEndian.Uint32(data[0:]) != entryMagic {
		return 0, false
	}
	n := int(binary.LittleEndian.Uint32(data[4:]))
	size := frameHead + n + frameTail
	if n > maxPayload || len(data) < size || int(binary.LittleEndian.Uint32(data[size-8:])) != n ||
		binary.LittleEndian.Uint32(data[size-4:]) != endMagic {
		return 0, false
	}
	return size, true
}

// decodeFrame decodes the frame at the start of data. ok is false when data
// does not start with a whole, intact frame (an entry still being written,
// a torn one, or the end); e is nil for an intact frame whose payload does
// not parse (skipped).
func decodeFrame(data []byte) (e *Entry, size int, ok bool) {
	size, ok = frameSize(data)
	if !ok {
		return nil, 0, false
	}
	n := size - frameHead - frameTail
	payload := data[frameHead : frameHead+n]
	if binary.LittleEndian.Uint32(data[frameHead+n:]) != crc32.Checksum(payload, castagnoli) {
		return nil, 0, false
	}
	e, err := decodePayload(payload)
	if err != nil {
		return nil, size, true
	}
	return e, size, true
}

var errShort = errors.New("changelog: short payload")

func decodePayload(p []byte) (*Entry, error) {
	d := decoder{p: p}
	e := &Entry{}
	e.File.Dev = d.u64()
	e.File.Ino = d.u64()
	copy(e.Before[:], d.bytes(GenerationSize))
	copy(e.After[:], d.bytes(GenerationSize))
	nPut, nDrop := int(d.u32()), int(d.u32())
	if d.err != nil || nPut > len(p) || nDrop > len(p) {
		return nil, errShort
	}
	for i := 0; i < nPut; i++ {
		r := &storage.Record{}
		for _, s := range [...]*string{&r.Key, &r.ProgramHash, &r.Schedule, &r.ResultJSON, &r.Hostname,
			&r.Username, &r.CreationDate, &r.UpdateDate, &r.SourceProject} {
			*s = d.str()
		}
		e.Put = append(e.Put, r)
	}
	for i := 0; i < nDrop; i++ {
		k := d.str()
		e.Drop = append(e.Drop, Dropped{Key: k, ProgramHash: d.str()})
	}
	if d.err != nil || len(d.p) != 0 {
		return nil, errShort
	}
	return e, nil
}

type decoder struct {
	p   []byte
	err error
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil || len(d.p) < n {
		d.err = errShort
		return nil
	}
	b := d.p[:n]
	d.p = d.p[n:]
	return b
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) str() string {
	n := int(d.u32())
	if d.err != nil || n > len(d.p) {
		d.err = errShort
		return ""
	}
	return string(d.bytes(n))
}
