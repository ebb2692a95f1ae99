package sqlitefile

import (
	"container/list"
	"os"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/changelog"
	"github.com/tirastore/tirastore/core/sqlitefile/internal/nodelocal"
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
// served. Otherwise the entries are dropped and the lookup takes the lock.
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
// Only the lock-free check is new; a Backend on a filesystem that needs fresh
// connections (NFS) never uses it (see conn).
//
// # Whole programs
//
// An autoscheduler asks about many schedules of one program. When a locked
// lookup finds that nothing has committed since this store's previous
// locked operation (a read-mostly phase: the generation read when the lock
// was taken is still the cache's), it may load every record of the program
// (up to tuning.PrefetchLimit of them) and mark the program complete:
// later lookups of that program, hits and misses alike, are answered from
// memory until something commits. While others write, generations change at
// every operation and no prefetch happens, so writers never pay for it.
//
// A load is read in chunks of tuning.LoadChunkRows rows in the order of the
// program_hash index, one chunk per locked miss of the program: no hold of
// the lock reads more than a chunk and the key's own row, whatever the
// program's size. A load goes on while writes of this node wait for the
// lock: a write then waits for one chunk more, and once the program is
// loaded this process's lookups of it stop taking the lock at all. (Loads
// used to wait for a moment without waiting writes; under steady writes,
// 32 processes with 20% records, none came, and every first lookup of a
// key took the lock.) Rows that logged commits
// add to a program while it is being loaded are kept (see apply), so that the
// program is complete when its last chunk is read.
//
// # Which programs are loaded
//
// A load pays only if the program is asked about again before it is
// evicted. A program is loaded on its second locked miss within
// tuning.AdmitWindow (its first reads the one key), and not again for
// tuning.AdmitMemory after a load of it that did not pay (fewer than one
// hit per tuning.LoadPayback rows loaded before its eviction): with a working
// set larger than the cache, lookups then read their keys one by one
// instead of loading programs that evict each other.
//
// # Eviction
//
// The entries are bounded by tuning.MaxCached and tuning.MaxCachedBytes.
// When full, the cache evicts the least recently used program's entries,
// all of them (a complete program, or the keys read one by one), until the
// new ones fit; configs are never evicted with them (they have their own
// bound).
//
// # Following the node's commits
//
// A commit of this engine logs the rows it changed (internal/changelog), and a
// cache whose generation is the one that commit started from applies them
// and moves to the generation it left: entries stay valid across the
// commits of this node's processes, and a loaded program stays complete.
// Only a commit that was not logged (another node, an old Python worker, an
// administrative change, a committer killed before it logged) makes the
// cache start over. While the log keeps up, a program is loaded even while
// others write; after a commit that was not logged, only in a quiet phase
// again, for tuning.FollowQuiet.
type resultCache struct {
	mu  sync.Mutex
	hdr *os.File // nil: no lock-free reads (no kept connection)
	gen generation
	// entries are the known keys (a nil record: known to be absent), each
	// in its program's group (progs); lru orders the groups, most
	// recently used first, and bytes estimates their memory (entrySize).
	entries map[string]*entry
	progs   map[string]*progEntry
	lru     list.List
	bytes   int
	// configs are kernel-config entries by (namespace, key) (nil value:
	// known to be absent), valid at gen as entries are. No logged commit
	// changes a config row (config writes are not logged), so following the log
	// keeps them; a config write is a commit that was not logged and starts the
	// cache over.
	configs map[configKey]*storage.ConfigEntry
	// tooBig: programs found to have more than tuning.PrefetchLimit records at
	// gen.
	tooBig map[string]bool
	// history is what admission remembers of programs (see "Which
	// programs are loaded"), across restarts: it says how lookups go, not
	// what the file holds.
	history map[string]*progHistory
	// counters count the work done under the lock (CacheCounters).
	counters CacheCounters
	// genSince is when this store first saw gen (monotonic); restarted:
	// the generation read when the lock was last taken was neither gen
	// nor reached by following the log, so the entries were dropped then.
	genSince  time.Time
	restarted bool
	// writes is the fence's count of database writes (nil: no fence), and
	// writesAtBegin its value when the lock was taken: End reads the
	// header again only if it moved. synced: the generation the operation
	// leaves is known already (its own logged commit), so End need not.
	writes        func() uint64
	writesAtBegin uint64
	synced        bool
	// indexed: records has the index on program_hash (a prefetch reads
	// only the program's rows, whatever the database's size).
	indexed bool
	// file is hdr's file; log follows the node's commits (nil: no log);
	// brokeAt is when a commit that was not logged last emptied the cache.
	file    changelog.FileID
	log     *changelog.Reader
	brokeAt time.Time
}

// The cache's operations, in the order a store uses them:
//   - setFile when the kept connection is opened or dropped;
//   - Get, lock-free, for a lookup; on a miss the store takes the lock;
//   - Begin when the lock is taken, with the header read then;
//   - Load / LoadMany under the lock (a lookup), Logged after this
//     store's own logged commit;
//   - End when a locked operation succeeded.

// setFile points lock-free reads at a new header descriptor (nil: none) of
// file, following the node's commits through log (nil: none), and forgets
// every entry; writes is the fence's write count (nil: none).
func (c *resultCache) setFile(hdr *os.File, file changelog.FileID, log *changelog.Reader, writes func() uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hdr, c.file, c.log, c.writes = hdr, file, nil, writes
	c.gen, c.genSince = generation{}, time.Time{} // learnt again under the lock
	c.reset()
	if hdr != nil && log != nil {
		c.log = log
		_, _, _ = log.Next(nil) // from here on: the cache starts empty
	}
}

// setIndexed records whether the database has the program_hash index.
func (c *resultCache) setIndexed(ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.indexed = ok
}

// forgetAll drops every entry (the lock was found lost: anything may have
// changed).
func (c *resultCache) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reset()
}

// reset forgets every entry (the caller holds c.mu).
func (c *resultCache) reset() {
	c.entries, c.progs, c.tooBig, c.configs = nil, nil, nil, nil
	c.lru.Init()
	c.bytes = 0
}

// entry is what the cache knows of one key.
type entry struct {
	rec  *storage.Record // nil: known to be absent
	prog *progEntry
	size int // entrySize
}

// progEntry is the entries of one program: the unit of eviction.
type progEntry struct {
	hash  string
	keys  map[string]struct{}
	elem  *list.Element // in resultCache.lru
	bytes int
	// complete: every record of the program is among keys. loading: a
	// load in chunks is under way, next at pos, loaded rows read so far.
	complete, loading bool
	pos               sqlite.ProgramPos
	loaded            int
	// hits counts the lookups these entries answered since the load
	// started (its payback).
	hits int
}

// progHistory is what admission remembers of one program.
type progHistory struct {
	missed time.Time // its last locked miss
	unpaid time.Time // when a load of it that did not pay was evicted
}

// CacheCounters count what a result cache did under the lock
// (Backend.CacheCounters): make bench reports them beside the lock's
// counters, to show whether a working set larger than the cache makes
// lookups load programs under the lock.
type CacheCounters struct {
	// Loads: program loads started; Completed: loads that read the whole
	// program; Chunks and ChunkRows: what they read, one chunk per hold of
	// the lock.
	Loads, Completed, Chunks, ChunkRows int64
	// PointReads: keys a locked lookup read one by one; Evicted: programs
	// whose entries were evicted to make room.
	PointReads, Evicted int64
}

// progOverhead is what entrySize counts for a program's group, and
// entryOverhead for an entry beside its strings (the map entries, the
// Record's fields): estimates, so that MaxCachedBytes bounds the memory of
// many small groups too.
const (
	progOverhead  = 256
	entryOverhead = 320
)

// entrySize estimates the memory of key's entry holding rec.
func entrySize(key string, rec *storage.Record) int {
	n := entryOverhead + len(key)
	if rec != nil {
		n += len(rec.ProgramHash) + len(rec.Schedule) + len(rec.ResultJSON) + len(rec.Hostname) + len(rec.Username) +
			len(rec.CreationDate) + len(rec.UpdateDate) + len(rec.SourceProject) + len(rec.ProgramName) + len(rec.SourceCode)
	}
	return n
}

// Get returns the entry for key of program progHash if the database is
// provably unchanged since it was read, or changed only by logged commits
// that the cache applied; ok is false otherwise (take the lock). An absent
// key of a complete program is a known miss. It needs no lock: one fstat
// and one header read prove the entry current.
func (c *resultCache) Get(progHash, key string) (rec *storage.Record, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok = c.lookup(progHash, key); !ok || c.hdr == nil {
		return nil, false
	}
	if !failpoint.Enabled(failpoint.CacheTrust) && !c.current() {
		return nil, false
	}
	if rec, ok = c.lookup(progHash, key); ok {
		c.used(progHash, key)
	}
	return rec, ok
}

// configKey names a config entry: the same key in two namespaces is two
// entries.
type configKey struct{ namespace, key string }

// GetConfig is Get for the config entry of key. Logged commits, which
// the cache follows, never change a config row.
func (c *resultCache) GetConfig(key configKey) (e *storage.ConfigEntry, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok = c.configs[key]; !ok || c.hdr == nil {
		return nil, false
	}
	if !failpoint.Enabled(failpoint.CacheTrust) && !c.current() {
		return nil, false
	}
	e, ok = c.configs[key]
	return e, ok
}

// LoadConfig is Load for the config entry of key (no prefetch: an
// autotuner asks for few keys, each many times).
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

// lookup is what the entries say of key (the caller holds c.mu).
func (c *resultCache) lookup(progHash, key string) (*storage.Record, bool) {
	if e, ok := c.entries[key]; ok {
		return e.rec, true
	}
	if p := c.progs[progHash]; p != nil && p.complete {
		return nil, true
	}
	return nil, false
}

// used counts a lookup of key that the entries answered: its program
// becomes the most recently used, and its load earned a hit (the caller
// holds c.mu).
func (c *resultCache) used(progHash, key string) {
	p := c.progs[progHash]
	if e, ok := c.entries[key]; ok {
		p = e.prog
	}
	if p != nil {
		p.hits++
		c.lru.MoveToFront(p.elem)
	}
}

// group is progHash's group, made the most recently used (created if
// need be; the caller holds c.mu).
func (c *resultCache) group(progHash string) *progEntry {
	if p := c.progs[progHash]; p != nil {
		c.lru.MoveToFront(p.elem)
		return p
	}
	if c.progs == nil {
		c.progs = map[string]*progEntry{}
	}
	p := &progEntry{hash: progHash, keys: map[string]struct{}{}}
	p.elem = c.lru.PushFront(p)
	c.progs[progHash] = p
	c.bytes += progOverhead
	return p
}

// evict drops p's entries, and remembers whether its load paid (the
// caller holds c.mu).
func (c *resultCache) evict(p *progEntry) {
	for k := range p.keys {
		delete(c.entries, k)
	}
	c.bytes -= p.bytes + progOverhead
	c.lru.Remove(p.elem)
	delete(c.progs, p.hash)
	c.counters.Evicted++
	if p.loaded > 0 {
		if h := c.history[p.hash]; h != nil {
			h.unpaid = time.Time{}
			if p.hits*tuning.LoadPayback < p.loaded {
				h.unpaid = time.Now()
			}
		}
	}
}

// makeRoom evicts the least recently used programs until n more entries
// of size bytes in all fit (the caller holds c.mu).
func (c *resultCache) makeRoom(n, size int) {
	for len(c.entries)+n > tuning.MaxCached || c.bytes+size > tuning.MaxCachedBytes {
		back := c.lru.Back()
		if back == nil {
			return
		}
		c.evict(back.Value.(*progEntry))
	}
}

// putEntry remembers rec (nil: absent) as key's entry, in program
// progHash (the caller holds c.mu).
func (c *resultCache) putEntry(progHash, key string, rec *storage.Record) {
	c.forget(key, progHash)
	size := entrySize(key, rec)
	if p := c.progs[progHash]; p != nil {
		c.lru.MoveToFront(p.elem) // evicted last
	}
	c.makeRoom(1, size+progOverhead)
	c.add(c.group(progHash), key, rec, size)
}

// add puts key's entry into p (the caller holds c.mu and made room).
func (c *resultCache) add(p *progEntry, key string, rec *storage.Record, size int) {
	if c.entries == nil {
		c.entries = map[string]*entry{}
	}
	c.entries[key] = &entry{rec: rec, prog: p, size: size}
	p.keys[key] = struct{}{}
	p.bytes += size
	c.bytes += size
}

// current reports whether the entries are the database's current content:
// the file still has a name and its generation is the cache's, or becomes
// it by applying the logged commits (the caller holds c.mu). Entries that
// are not current are kept: under the lock, Begin either brings them up to
// date from the log or drops them.
func (c *resultCache) current() bool {
	if ok, err := nodelocal.Linked(c.hdr); err != nil || !ok {
		return false
	}
	h, err := readHeader(c.hdr)
	if err != nil {
		return false
	}
	g := h.generation()
	if g == c.gen {
		return true
	}
	if !c.follow(nil) {
		return false
	}
	if c.gen == g {
		return true
	}
	// The log went past the header read above: a commit since then.
	if h, err = readHeader(c.hdr); err != nil {
		return false
	}
	return h.generation() == c.gen
}

// Begin starts a locked operation with the generation g read when the lock
// was taken: the entries stay if g is theirs or the logged commits lead
// there, and are dropped otherwise. While the lock is held nothing but
// this store changes the file, so g stays the database's generation until
// this store writes.
func (c *resultCache) Begin(g generation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced, c.restarted = false, false
	if c.writes != nil {
		c.writesAtBegin = c.writes()
	}
	if c.hdr == nil {
		return
	}
	if g == c.gen && !c.genSince.IsZero() {
		return
	}
	if c.follow(nil) && c.gen == g {
		return // under the lock every logged commit is in the log
	}
	c.restart(g)
}

// restart drops the entries for generation g, which a commit that was not
// logged (or the first look at the file) led to (the caller holds c.mu).
func (c *resultCache) restart(g generation) {
	if !c.genSince.IsZero() && (len(c.entries) > 0 || len(c.progs) > 0) {
		c.brokeAt = time.Now()
	}
	c.gen, c.genSince, c.restarted = g, time.Now(), true
	c.reset()
}

// End ends every successful locked operation. An operation that did not
// write the file (the fence's count says so) left the generation Begin
// read; one that did (a commit, or the rollback of a crashed writer's hot
// journal when SQLite found one) makes the cache read the header again,
// unless its own logged commit told it the result (Logged).
func (c *resultCache) End() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hdr == nil || c.synced || (c.writes != nil && c.writes() == c.writesAtBegin) {
		return
	}
	h, err := readHeader(c.hdr)
	if err != nil {
		c.reset()
		return
	}
	g := h.generation()
	if g == c.gen {
		return
	}
	if c.follow(nil) && c.gen == g {
		return
	}
	c.restart(g)
}

// follow applies the logged commits that chain from the cache's
// generation, and reports whether any did (the caller holds c.mu). own is
// the entry this store just logged, if any (see changelog.Reader.Next).
func (c *resultCache) follow(own *changelog.Own) bool {
	if c.log == nil || c.genSince.IsZero() {
		return false
	}
	entries, _, err := c.log.Next(own)
	if err != nil {
		return false
	}
	moved := false
	for _, e := range entries {
		// The negative control of the log's tests applies entries whether
		// or not they start where the cache is.
		chained := generation(e.Before) == c.gen || failpoint.Enabled(failpoint.ChangeLogUnchained)
		if e.File != c.file || !chained {
			continue
		}
		c.apply(e)
		c.gen, c.genSince, moved = generation(e.After), time.Now(), true
	}
	return moved
}

// apply changes the entries as the logged commit e changed the database
// (the caller holds c.mu).
func (c *resultCache) apply(e *changelog.Entry) {
	for _, d := range e.Drop {
		c.forget(d.Key, d.ProgramHash)
		if p := c.progs[d.ProgramHash]; p != nil {
			p.complete, p.loading = false, false
		}
	}
	for _, r := range e.Put {
		_, known := c.entries[r.Key]
		c.forget(r.Key, r.ProgramHash)
		p := c.progs[r.ProgramHash]
		if !known && (p == nil || !p.complete && !p.loading) {
			continue // nobody asked: not worth the memory (a record_many of others)
		}
		// A complete program stays complete; one being loaded keeps the
		// row, which its later chunks may not read (a row that reuses the
		// rowid of a deleted one, behind the load's place).
		c.putEntry(r.ProgramHash, r.Key, r)
	}
}

// Logged applies the entry this store has just logged, under the lock,
// without reading it back (see changelog.Own). When the cache reaches the
// entry's generation, which the committer read after its COMMIT, End need
// not read the header again.
func (c *resultCache) Logged(own *changelog.Own) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.follow(own) && c.gen == generation(own.Entry.After) {
		c.synced = true
	}
}

// forget drops key, whose row now belongs to program progHash: if it
// belonged to another program, that one is no longer complete (the caller
// holds c.mu).
func (c *resultCache) forget(key, progHash string) {
	e, ok := c.entries[key]
	if !ok {
		return
	}
	if e.rec != nil && e.rec.ProgramHash != progHash {
		e.prog.complete, e.prog.loading = false, false
	}
	delete(e.prog.keys, key)
	e.prog.bytes -= e.size
	c.bytes -= e.size
	delete(c.entries, key)
}

// Load answers a lookup of key (program progHash) under the lock: from
// the entries if they have it, else from db, with the next chunk of the
// program's load when one is under way or admitted (see "Whole programs"),
// and remembers what it read. c.mu is not held during the queries: only
// the lock's holder changes the entries, and lock-free Gets of other
// goroutines go on meanwhile.
func (c *resultCache) Load(db *sqlite.DB, progHash, key string, writesWaiting func() bool) (*storage.Record, error) {
	c.mu.Lock()
	rec, ok := c.lookup(progHash, key)
	ok = ok && c.hdr != nil // brought up to date from the change log by Begin
	var pos sqlite.ProgramPos
	load := false
	if ok {
		c.used(progHash, key)
	} else {
		pos, load = c.shouldLoad(progHash, writesWaiting)
	}
	c.mu.Unlock()
	if ok {
		return rec, nil
	}
	if load {
		if ok, err := c.loadChunk(db, progHash, pos); err != nil {
			return nil, err
		} else if ok {
			c.mu.Lock()
			rec, ok := c.lookup(progHash, key)
			c.mu.Unlock()
			if ok {
				return rec, nil
			}
		}
	}
	rec, err := db.Lookup(key)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.PointReads++
	c.put(progHash, key, rec)
	return rec, nil
}

// loadChunk reads the chunk of progHash's load at pos (at the start, after
// counting the program's records: one too big is not loaded) and adds it;
// false: the load ended without it.
func (c *resultCache) loadChunk(db *sqlite.DB, progHash string, pos sqlite.ProgramPos) (bool, error) {
	if pos == sqlite.StartOfProgram {
		n, err := db.ProgramSize(progHash, tuning.PrefetchLimit+1)
		if err != nil {
			return false, err
		}
		if n > tuning.PrefetchLimit {
			c.mu.Lock()
			c.putTooBig(progHash)
			c.mu.Unlock()
			return false, nil
		}
	}
	recs, next, err := db.ProgramChunk(progHash, pos, tuning.LoadChunkRows)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.putChunk(progHash, pos, recs, next), nil
}

// LoadMany is Load for several keys of program progHash, read key by key
// in one read transaction (no load); recs receives the records at the
// indexes missing lists.
func (c *resultCache) LoadMany(db *sqlite.DB, progHash string, keys []string, missing []int, recs []*storage.Record) error {
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
	for _, i := range missing {
		c.put(progHash, keys[i], recs[i])
	}
	return nil
}

// shouldLoad says whether this locked miss of progHash reads a chunk of
// its load, and where: the load under way goes on; a new one starts if
// shouldPrefetch and admit allow it (writesWaiting: see shouldPrefetch).
// The caller holds the lock and c.mu.
func (c *resultCache) shouldLoad(progHash string, writesWaiting func() bool) (sqlite.ProgramPos, bool) {
	if p := c.progs[progHash]; p != nil && p.loading {
		return p.pos, c.hdr != nil
	}
	if !c.admit(progHash) || !c.shouldPrefetch(progHash, writesWaiting) {
		return sqlite.ProgramPos{}, false
	}
	p := c.group(progHash)
	p.loading, p.pos, p.loaded, p.hits = true, sqlite.StartOfProgram, 0, 0
	c.counters.Loads++
	return p.pos, true
}

// admit notes a locked miss of progHash and says whether a load of it
// would pay (see "Which programs are loaded"). The caller holds c.mu.
func (c *resultCache) admit(progHash string) bool {
	now := time.Now()
	h := c.history[progHash]
	if h == nil {
		if c.history == nil || len(c.history) >= tuning.MaxAdmitHistory {
			c.history = map[string]*progHistory{}
		}
		c.history[progHash] = &progHistory{missed: now}
		return false
	}
	prev := h.missed
	h.missed = now
	if !h.unpaid.IsZero() && now.Sub(h.unpaid) < tuning.AdmitMemory {
		return false
	}
	return now.Sub(prev) <= tuning.AdmitWindow
}

// shouldPrefetch: progHash is neither complete nor known to be too big,
// the database has the program_hash index or is small enough, and either the
// cache has been following the node's commits (none unlogged for
// tuning.FollowQuiet) or it is a quiet phase (nothing committed since this
// store's previous locked operation, which left entries, nor for
// tuning.QuietBeforePrefetch before that) in which no write waits. The caller
// holds the lock and c.mu.
func (c *resultCache) shouldPrefetch(progHash string, writesWaiting func() bool) bool {
	if pages, ok := c.gen.pages(); !c.indexed && (!ok || pages > tuning.PrefetchMaxPages) {
		return false
	}
	if c.hdr == nil || progHash == "" || c.restarted || c.tooBig[progHash] {
		return false
	}
	if p := c.progs[progHash]; p != nil && p.complete {
		return false
	}
	following := c.log != nil && (c.brokeAt.IsZero() || time.Since(c.brokeAt) >= tuning.FollowQuiet)
	return following || len(c.entries) > 0 && time.Since(c.genSince) >= tuning.QuietBeforePrefetch && !writesWaiting()
}

// putTooBig remembers that progHash has too many records to load, and
// ends its load (the caller holds the lock and c.mu).
func (c *resultCache) putTooBig(progHash string) {
	if p := c.progs[progHash]; p != nil {
		p.loading = false
	}
	if c.hdr == nil {
		return
	}
	if c.tooBig == nil {
		c.tooBig = map[string]bool{}
	}
	c.tooBig[progHash] = true
}

// putChunk adds the chunk recs that progHash's load read at pos, next
// being the place after it; the program is complete when the chunk is
// short. It reports whether the chunk was added: not when the load was
// dropped meanwhile, nor when it would not fit in the cache with the
// program's earlier chunks (the program is then too big). The caller holds
// the lock and c.mu.
func (c *resultCache) putChunk(progHash string, pos sqlite.ProgramPos, recs []*storage.Record, next sqlite.ProgramPos) bool {
	p := c.progs[progHash]
	if c.hdr == nil || p == nil || !p.loading || p.pos != pos {
		return false
	}
	c.counters.Chunks++
	c.counters.ChunkRows += int64(len(recs))
	if p.loaded+len(recs) > tuning.PrefetchLimit {
		c.putTooBig(progHash)
		return false
	}
	size := 0
	for _, r := range recs {
		if e, ok := c.entries[r.Key]; !ok || e.prog != p {
			size += entrySize(r.Key, r)
		}
	}
	c.lru.MoveToFront(p.elem) // evicted last
	c.makeRoom(len(recs), size)
	if c.progs[progHash] != p { // evicted: larger than the cache
		c.putTooBig(progHash)
		return false
	}
	for _, r := range recs {
		c.forget(r.Key, progHash)
		c.add(p, r.Key, r, entrySize(r.Key, r))
	}
	p.loaded += len(recs)
	p.pos = next
	if len(recs) < tuning.LoadChunkRows {
		p.loading, p.complete = false, true
		c.counters.Completed++
	}
	return true
}

// put remembers what a locked read returned for key of program progHash
// (nil: absent). The caller holds the lock and c.mu.
func (c *resultCache) put(progHash, key string, rec *storage.Record) {
	if c.hdr == nil {
		return
	}
	c.putEntry(progHash, key, rec)
}

// Counters returns the cache's counters.
func (c *resultCache) Counters() CacheCounters {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counters
}
