package sqlitefile

import (
	"container/list"
	"os"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// resultCache serves repeated lookups of one process without the lock.
//
// Every entry (a record, or "absent") was read under the lock, and the cache
// remembers the database generation (see generation) it was read at: the
// one read when the lock was taken, which only this store's own writes
// can change while it holds the lock (End then reads it again). A lookup that
// finds its key here reads the header through the kept descriptor (one pread,
// no metadata round trip) and checks that the file still has a name; if the
// generation is unchanged, no transaction has committed since the entry was
// read, so the entry is still what a locked read would return, and it is
// served. Otherwise the lookup takes the lock, and Begin drops the entries.
//
// Why a lock-free header read cannot make us serve a stale entry: a writer
// increments the change counter in page 1 during its commit, before the
// commit is acknowledged; so a lookup that starts after another process's
// record() returned reads the new counter. A writer that crashed mid-commit
// may leave page 1 changed (the lookup then takes the lock, whose next
// holder rolls back) or unchanged with other pages already written (the
// committed content is still the old one, which the entry reflects). A
// rollback restores the old header and the old content together.
//
// So the cache pays while nothing commits: an autoscheduler's bursts of
// lookups between two measurements, a read-mostly phase, a kernel-config
// cache read at every kernel call. Any commit, by anyone, empties it. A
// Backend on a filesystem that needs fresh connections (NFS) never uses it
// (see conn).
//
// A burst looks up many schedules of one program that this process has
// not read yet, each of which would take the lock. On a cluster
// filesystem a hold of the lock costs metadata round trips (link, stat,
// unlink), milliseconds in all, while reading a record costs a few
// microseconds once a transaction is open. So once the locked lookups of
// a program since the last commit have cost as long as reading the whole
// program would (its rows, counted once, times tuning.LoadRowCost), the
// next one reads every record of the program in that hold, and the
// program is "whole": a key of it that is not in the entries is known to
// be absent. On a local disk a hold costs tens of microseconds and a
// program of thousands of records is read whole only after a long burst;
// on a Lustre-like filesystem after one or two lookups. A program that
// would not fit in the room the entries have left (in number and in
// bytes) is never read whole, so whole reads never evict.
//
// The entries are bounded by tuning.MaxCached and tuning.MaxCachedBytes;
// when full, the least recently used entry goes. Configs have their own
// bound and are never evicted with records.
type resultCache struct {
	mu  sync.Mutex
	hdr *os.File // nil: no lock-free reads (no kept connection)
	gen generation
	// known: gen was read under the lock since the entries were last
	// dropped; until then nothing is served.
	known bool
	// entries are the known keys (a nil record: known to be absent), each
	// an element of lru, most recently used first; bytes estimates their
	// memory (entrySize).
	entries map[string]*list.Element
	lru     list.List
	bytes   int
	// programs is what the cache knows of each program at gen (see
	// programState); rows remembers programs' record counts across
	// generations, an estimate of what reading each whole costs.
	programs map[string]*programState
	rows     map[string]int64
	// configs are kernel-config entries by (namespace, key) (nil value:
	// known to be absent), valid at gen as entries are.
	configs map[configKey]*storage.ConfigEntry
	// counters count the work done under the lock (CacheCounters).
	counters CacheCounters
	// writes is the fence's count of database writes (nil: no fence), and
	// writesAtBegin its value when the lock was taken: End reads the
	// header again only if it moved.
	writes        func() uint64
	writesAtBegin uint64
}

// The cache's operations, in the order a store uses them:
//   - setFile when the kept connection is opened or dropped;
//   - Get, lock-free, for a lookup; on a miss the store takes the lock;
//   - Begin when the lock is taken, with the header read then;
//   - Load / LoadMany / LoadConfig under the lock;
//   - End when a locked operation succeeded.

// setFile points lock-free reads at a new header descriptor (nil: none)
// and forgets every entry; writes is the fence's write count (nil: none).
func (c *resultCache) setFile(hdr *os.File, writes func() uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hdr, c.writes = hdr, writes
	c.reset()
}

// forgetAll drops every entry (the lock was found lost: anything may have
// changed).
func (c *resultCache) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reset()
}

// reset forgets every entry and the generation they were read at (the
// caller holds c.mu).
func (c *resultCache) reset() {
	c.entries, c.programs, c.configs, c.known = nil, nil, nil, false
	c.lru.Init()
	c.bytes = 0
}

// entry is what the cache knows of one key.
type entry struct {
	key, program string
	rec          *storage.Record // nil: known to be absent
	size         int             // entrySize
}

// programState is what the cache knows of one program at its generation:
// what its locked lookups cost (spent), and whether every record of the
// program is among the entries (whole).
type programState struct {
	spent time.Duration
	whole bool
}

// CacheCounters count what a result cache did under the lock
// (Backend.CacheCounters): make bench reports them beside the lock's
// counters, to show how many lookups missed the cache and whether a
// working set larger than the cache made it evict.
type CacheCounters struct {
	// PointReads: keys a locked lookup read from the database; Evicted:
	// entries evicted to make room; ProgramReads and RowsRead: programs
	// read whole, and their records.
	PointReads, Evicted, ProgramReads, RowsRead int64
}

// entryOverhead is what entrySize counts for an entry beside its strings
// (the map entry, the list element, the Record's fields): an estimate, so
// that MaxCachedBytes bounds the memory of many small entries too.
const entryOverhead = 320

// entrySize estimates the memory of key's entry holding rec.
func entrySize(key string, rec *storage.Record) int {
	n := entryOverhead + len(key)
	if rec != nil {
		n += len(rec.ProgramHash) + len(rec.Schedule) + len(rec.ResultJSON) + len(rec.Hostname) + len(rec.Username) +
			len(rec.CreationDate) + len(rec.UpdateDate) + len(rec.SourceProject) + len(rec.ProgramName) + len(rec.SourceCode) +
			len(rec.Runs)
	}
	return n
}

// Get returns the entry for key if the database is provably unchanged
// since it was read; ok is false otherwise (take the lock). It needs no
// lock: one fstat and one header read prove the entry current.
func (c *resultCache) Get(program, key string) (rec *storage.Record, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if c.hdr == nil || !ok && !c.whole(program) {
		return nil, false
	}
	if !failpoint.Enabled(failpoint.CacheTrust) && !c.current() {
		return nil, false
	}
	if !ok {
		return nil, true // absent from a whole program
	}
	c.lru.MoveToFront(el)
	return el.Value.(*entry).rec, true
}

// whole reports whether every record of program is among the entries
// (the caller holds c.mu).
func (c *resultCache) whole(program string) bool {
	p := c.programs[program]
	return p != nil && p.whole
}

// configKey names a config entry: the same key in two namespaces is two
// entries.
type configKey struct{ namespace, key string }

// GetConfig is Get for the config entry of key.
func (c *resultCache) GetConfig(key configKey) (e *storage.ConfigEntry, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok = c.configs[key]; !ok || c.hdr == nil {
		return nil, false
	}
	if !failpoint.Enabled(failpoint.CacheTrust) && !c.current() {
		return nil, false
	}
	return e, true
}

// current reports whether the entries are the database's current content:
// they were read at a known generation, the file still has a name and its
// header shows that generation (the caller holds c.mu). Entries that are
// not current are kept: under the lock, Begin drops them.
func (c *resultCache) current() bool {
	if !c.known {
		return false
	}
	if ok, err := linked(c.hdr); err != nil || !ok {
		return false
	}
	h, err := readHeader(c.hdr)
	return err == nil && h.generation() == c.gen
}

// Begin starts a locked operation with the generation g read when the lock
// was taken: the entries stay if g is theirs and are dropped otherwise.
// While the lock is held nothing but this store changes the file, so g
// stays the database's generation until this store writes.
func (c *resultCache) Begin(g generation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes != nil {
		c.writesAtBegin = c.writes()
	}
	if c.hdr == nil || c.known && g == c.gen {
		return
	}
	c.reset()
	c.gen, c.known = g, true
}

// End ends every successful locked operation. An operation that did not
// write the file (the fence's count says so) left the generation Begin
// read; one that did (a commit, or the rollback of a crashed writer's hot
// journal when SQLite found one) makes the cache read the header again and
// start over if it moved.
func (c *resultCache) End() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hdr == nil || c.writes != nil && c.writes() == c.writesAtBegin {
		return
	}
	h, err := readHeader(c.hdr)
	if err != nil {
		c.reset()
		return
	}
	if g := h.generation(); !c.known || g != c.gen {
		c.reset()
		c.gen, c.known = g, true
	}
}

// Load answers a lookup of key (program program) under the lock: from
// the entries if they have it, else from db, a point read or the whole
// program (see resultCache), and remembers what it read. c.mu is not
// held during the queries: only the lock's holder changes the entries,
// and lock-free Gets of other goroutines go on meanwhile.
func (c *resultCache) Load(db *sqlite.DB, program, key string) (*storage.Record, error) {
	c.mu.Lock()
	if el, ok := c.entries[key]; ok && c.hdr != nil {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return el.Value.(*entry).rec, nil
	}
	caching := c.hdr != nil
	if caching && c.whole(program) {
		c.mu.Unlock()
		return nil, nil
	}
	p := c.programs[program]
	spent, rows, counted := time.Duration(0), int64(0), false
	if p != nil {
		spent = p.spent
		rows, counted = c.rows[program]
	}
	c.mu.Unlock()
	if spent > 0 && caching {
		if !counted {
			n, err := db.CountRecordsOf(program)
			if err != nil {
				return nil, err
			}
			rows = n
			c.mu.Lock()
			c.setRows(program, n)
			c.mu.Unlock()
		}
		if spent >= time.Duration(rows)*tuning.LoadRowCost && c.fits(rows) {
			return c.loadProgram(db, program, key)
		}
	}
	rec, err := db.Lookup(key)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.PointReads++
	c.put(program, key, rec)
	return rec, nil
}

// setRows remembers program's record count (the caller holds c.mu).
func (c *resultCache) setRows(program string, n int64) {
	if c.rows == nil || len(c.rows) >= tuning.MaxCached {
		c.rows = map[string]int64{}
	}
	c.rows[program] = n
}

// fits reports whether rows more entries fit in the cache without
// evicting one, by its bound on entries and, at the entries' mean size,
// on bytes: a program read whole that evicted others would make them
// read whole again, and a working set larger than the cache would be
// read whole over and over.
func (c *resultCache) fits(rows int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rows > int64(tuning.MaxCached-len(c.entries)) {
		return false
	}
	mean := int64(entryOverhead + 256)
	if n := len(c.entries); n > 0 {
		mean = int64(c.bytes / n)
	}
	return rows*mean <= int64(tuning.MaxCachedBytes-c.bytes)
}

// loadProgram reads every record of program into the entries, marks the
// program whole, and returns key's record (nil: absent).
func (c *resultCache) loadProgram(db *sqlite.DB, program, key string) (*storage.Record, error) {
	var recs []*storage.Record
	err := db.LookupProgram(program, func(r *storage.Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.ProgramReads++
	c.counters.RowsRead += int64(len(recs))
	c.setRows(program, int64(len(recs)))
	var found *storage.Record
	for _, r := range recs {
		if r.Key == key {
			found = r
		}
		c.put(program, r.Key, r)
	}
	// fits judged by the entries' mean size: larger records may have
	// made the program evict some of its own, and then it is not whole.
	for _, r := range recs {
		if _, ok := c.entries[r.Key]; !ok {
			return found, nil
		}
	}
	if p := c.program(program); p != nil {
		p.whole = true
	}
	return found, nil
}

// Spent adds what a locked lookup of program cost (d, the lock's wait
// and hold) to the program's account at the current generation: what
// reading it whole would have saved.
func (c *resultCache) Spent(program string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hdr == nil || !c.known {
		return
	}
	if p := c.program(program); p != nil {
		p.spent += d
	}
}

// program is the state of program at the current generation, created
// if absent; nil when the cache already tracks tuning.MaxCached programs
// (the caller holds c.mu).
func (c *resultCache) program(program string) *programState {
	if p := c.programs[program]; p != nil {
		return p
	}
	if c.programs == nil {
		c.programs = map[string]*programState{}
	}
	if len(c.programs) >= tuning.MaxCached {
		return nil
	}
	p := &programState{}
	c.programs[program] = p
	return p
}

// LoadMany is Load for several keys, read key by key in one read
// transaction; recs receives the records at the indexes missing lists.
func (c *resultCache) LoadMany(db *sqlite.DB, program string, keys []string, missing []int, recs []*storage.Record) error {
	c.mu.Lock()
	whole := c.hdr != nil && c.whole(program)
	c.mu.Unlock()
	if whole {
		return nil // recs[i] stay nil: absent from a whole program
	}
	err := db.Read(func() error {
		for _, i := range missing {
			rec, err := db.Lookup(keys[i])
			if err != nil {
				return err
			}
			recs[i] = rec
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.PointReads += int64(len(missing))
	for _, i := range missing {
		c.put(program, keys[i], recs[i])
	}
	return nil
}

// LoadConfig is Load for the config entry of key.
func (c *resultCache) LoadConfig(db *sqlite.DB, key configKey) (*storage.ConfigEntry, error) {
	c.mu.Lock()
	e, ok := c.configs[key]
	c.mu.Unlock()
	if ok && c.hdr != nil {
		return e, nil
	}
	e, err := db.GetConfig(key.namespace, key.key)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hdr == nil {
		return e, nil
	}
	if c.configs == nil || len(c.configs) >= tuning.MaxCached {
		c.configs = make(map[configKey]*storage.ConfigEntry)
	}
	c.configs[key] = e
	return e, nil
}

// put remembers what a locked read returned for key (nil: absent),
// evicting the least recently used entries to make room. The caller holds
// the lock and c.mu.
func (c *resultCache) put(program, key string, rec *storage.Record) {
	if c.hdr == nil {
		return
	}
	if el, ok := c.entries[key]; ok {
		c.remove(el)
	}
	size := entrySize(key, rec)
	for len(c.entries) > 0 && (len(c.entries)+1 > tuning.MaxCached || c.bytes+size > tuning.MaxCachedBytes) {
		c.remove(c.lru.Back())
		c.counters.Evicted++
	}
	if c.entries == nil {
		c.entries = map[string]*list.Element{}
	}
	c.entries[key] = c.lru.PushFront(&entry{key: key, program: program, rec: rec, size: size})
	c.bytes += size
}

// remove drops the entry el (the caller holds c.mu); its program is no
// longer whole.
func (c *resultCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*entry)
	delete(c.entries, e.key)
	c.bytes -= e.size
	if p := c.programs[e.program]; p != nil {
		p.whole = false
	}
}

// Counters returns the cache's counters.
func (c *resultCache) Counters() CacheCounters {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counters
}
