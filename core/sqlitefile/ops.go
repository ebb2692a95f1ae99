package sqlitefile

import (
	"context"
	"fmt"
	"time"

	"github.com/tirastore/tirastore/core/identity"

	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// The storage.Backend operations. Each runs under the hard-link lock on
// the kept connection (backend.go: locked), except the lookups the result
// cache can prove current (cache.go).

// Lookup returns the record of key, from the cache when it is provably
// current, else under the lock (see resultCache.Load).
func (s *Backend) Lookup(ctx context.Context, progHash, key string) (*storage.Record, error) {
	if rec, ok := s.cached(progHash, key); ok {
		return rec, nil
	}
	var rec *storage.Record
	start := time.Now()
	err := s.withDB(ctx, "lookup", func(db *sqlite.DB) (err error) {
		rec, err = s.cache.Load(db, progHash, key)
		return err
	})
	if err == nil {
		s.cache.Spent(progHash, time.Since(start))
	}
	return rec, err
}

// cached is the lock-free path of the lookups.
func (s *Backend) cached(progHash, key string) (*storage.Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false // the locked path reports it
	}
	return s.cache.Get(progHash, key)
}

// ConfigGet returns the config entry of (namespace, key), from the cache
// when it is provably current, else under the lock (see
// resultCache.LoadConfig).
func (s *Backend) ConfigGet(ctx context.Context, namespace, key string) (*storage.ConfigEntry, error) {
	ck := configKey{namespace, key}
	if e, ok := s.cachedConfig(ck); ok {
		return e, nil
	}
	var e *storage.ConfigEntry
	err := s.withDB(ctx, "config get", func(db *sqlite.DB) (err error) {
		e, err = s.cache.LoadConfig(db, ck)
		return err
	})
	return e, err
}

// cachedConfig is the lock-free path of ConfigGet.
func (s *Backend) cachedConfig(key configKey) (*storage.ConfigEntry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false // the locked path reports it
	}
	return s.cache.GetConfig(key)
}

// LookupMany looks the keys up under one acquisition of the lock and in
// one read transaction, except those the cache answers.
func (s *Backend) LookupMany(ctx context.Context, progHash string, keys []string) ([]*storage.Record, error) {
	recs := make([]*storage.Record, len(keys))
	var missing []int
	for i, k := range keys {
		if rec, ok := s.cached(progHash, k); ok {
			recs[i] = rec
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return recs, nil
	}
	err := s.withDB(ctx, "lookup_many", func(db *sqlite.DB) error {
		return s.cache.LoadMany(db, progHash, keys, missing, recs)
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// Contains reports whether a record row has key. Only a cached record
// answers without the lock: the cache holds joined reads, and a record
// whose program row is missing exists for contains (no join, as in the
// original) but not for lookup.
func (s *Backend) Contains(ctx context.Context, progHash, key string) (bool, error) {
	if rec, ok := s.cached(progHash, key); ok && rec != nil {
		return true, nil
	}
	var found bool
	err := s.withDB(ctx, "contains", func(db *sqlite.DB) (err error) {
		found, err = db.Contains(key)
		return err
	})
	return found, err
}

// Peek is the lock-free path of Lookup alone: the cache's answer, if it
// can prove it current.
func (s *Backend) Peek(progHash, key string) (*storage.Record, bool) { return s.cached(progHash, key) }

// Write commits w in one transaction: its program unless stored, its rows,
// and the claims it releases or renews, all or nothing. It returns how many
// rows were written.
func (s *Backend) Write(ctx context.Context, w *storage.Write) (int, error) {
	written := 0
	err := s.withDB(ctx, "record", func(db *sqlite.DB) error {
		return db.Tx(func(tx *sqlite.Tx) (err error) {
			written, err = putWrite(tx, w, identity.NowISO(time.Now()))
			return err
		})
	})
	return written, err
}

// putWrite writes w in tx, dated stamp, and returns how many rows it wrote.
func putWrite(tx *sqlite.Tx, w *storage.Write, stamp string) (int, error) {
	if !w.ProgramStored {
		if err := tx.PutProgram(storage.Program{Hash: w.Hash, Name: w.Name, Source: w.Source}); err != nil {
			return 0, err
		}
	}
	written := 0
	// wrote are the keys of the released claims whose record this write
	// stored: their claims end whatever their token (storage.Write).
	var wrote map[string]bool
	if len(w.Release) > 0 {
		wrote = make(map[string]bool, len(w.Release))
	}
	// A write of new records measured in one run stores it once for
	// each range of rowids it inserted (sqlite's "runs tables"); an
	// overwrite, which keeps the rowid of a record it replaces, and a
	// write of runs of their own (an import) store them per record.
	batch := w.RunTail != "" && !w.Overwrite
	var first, last int64 // the range of rowids inserted since the last flush
	inRange := 0
	flush := func() error {
		if inRange == 0 {
			return nil
		}
		inRange = 0
		return tx.PutRunBatch(first, last, stamp, w.RunTail)
	}
	for _, p := range w.Rows {
		rec := &storage.Record{
			Key: p.Key, ProgramHash: w.Hash, Schedule: p.Schedule, ResultJSON: p.ResultJSON,
			Hostname: w.Hostname, Username: w.Username, CreationDate: stamp, UpdateDate: stamp,
			SourceProject: w.SourceProject,
		}
		if batch {
			rowid, ok, err := insertRecord(tx, rec)
			if err != nil {
				return 0, err
			}
			if !ok {
				continue
			}
			written++
			if wrote != nil {
				wrote[p.Key] = true
			}
			if inRange > 0 && rowid != last+1 {
				if err := flush(); err != nil {
					return 0, err
				}
			}
			if inRange == 0 {
				first = rowid
			}
			last = rowid
			inRange++
			continue
		}
		ok, err := putRecord(tx, rec, w.Overwrite)
		if err != nil {
			return 0, err
		}
		if ok {
			written++
			if wrote != nil {
				wrote[p.Key] = true
			}
			if p.Runs != "" {
				if err := tx.PutRuns(p.Key, stamp, p.Runs); err != nil {
					return 0, err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	for _, c := range w.Contexts {
		if written == 0 {
			break // no runs name them
		}
		if err := tx.PutContext(c.Fingerprint, c.JSON); err != nil {
			return 0, err
		}
	}
	for _, c := range w.Release {
		del := tx.DeleteClaim
		if wrote[c.Key] {
			del = tx.DeleteClaimOfKey
		}
		if _, err := del(c.Key, c.Token); err != nil {
			return 0, err
		}
	}
	if len(w.Renew) > 0 {
		if _, err := tx.RenewClaims(w.Renew, stamp); err != nil {
			return 0, err
		}
	}
	return written, nil
}

// View runs fn under the lock: nobody else writes meanwhile, so its reads
// are consistent without a transaction of their own.
func (s *Backend) View(ctx context.Context, op string, fn func(storage.Reader) error) error {
	return s.withDB(ctx, op, func(db *sqlite.DB) error { return fn(reader{db}) })
}

// Reread is View: under the lock, a read has no fault to run it again
// after.
func (s *Backend) Reread(ctx context.Context, op string, fn func(storage.Reader) error) error {
	return s.View(ctx, op, fn)
}

// Update runs fn in one transaction under the lock.
func (s *Backend) Update(ctx context.Context, op string, fn func(storage.Writer) error) error {
	return s.withDB(ctx, op, func(db *sqlite.DB) error {
		return db.Tx(func(tx *sqlite.Tx) error { return fn(writer{reader{db}, tx}) })
	})
}

// UpdateClaims is Update for a transaction that writes claims only.
func (s *Backend) UpdateClaims(ctx context.Context, op string, fn func(storage.ClaimWriter) error) error {
	return s.withDB(ctx, op, func(db *sqlite.DB) error {
		return db.Tx(func(tx *sqlite.Tx) error { return fn(writer{reader{db}, tx}) })
	})
}

// EachProgram reads every program with its results in one ordered scan,
// in one read transaction under the lock (core/sqlite: EachProgram). The
// lock is held for the whole scan: released between chunks, it would let
// writers in, and the export would mix states of the database. The scan is
// linear in the records (an index on (program_hash, creation_date)), so
// the hold is a sequential read of the database.
func (s *Backend) EachProgram(ctx context.Context, fn func(storage.Program, []storage.ScheduleResult) error) error {
	return s.withDB(ctx, "export", func(db *sqlite.DB) error { return db.EachProgram(fn) })
}

// Backup copies the database into the new file path with SQLite's backup
// API, tuning.BackupStepPages pages per hold of the lock, so that writers
// get in between steps; a write between two steps makes SQLite start the
// copy over, so the copy is one consistent state. After
// tuning.BackupRestarts restarts the rest is copied in one hold.
func (s *Backend) Backup(ctx context.Context, path string) error {
	var bk *sqlite.Backup
	defer func() {
		if bk != nil {
			bk.Close()
		}
	}()
	restarts, last := 0, -1
	for {
		pages := tuning.BackupStepPages
		if restarts >= tuning.BackupRestarts {
			pages = -1
		}
		var done bool
		var remaining, total int
		err := s.withDB(ctx, "back up", func(*sqlite.DB) (err error) {
			if bk == nil {
				// Under the lock: the engine's VFS leaves exclusion to it,
				// so even opening a connection outside it could meet a
				// writer's journal half gone.
				if bk, err = sqlite.StartBackup(s.path, path); err != nil {
					return fmt.Errorf("write %s: %w", path, err)
				}
			}
			done, remaining, total, err = bk.Step(pages)
			return err
		})
		if err != nil {
			return err
		}
		if done {
			err := bk.Close()
			bk = nil
			return err
		}
		// A restart: more remains than after the previous step.
		if last >= 0 && remaining > last-pages && remaining >= total-pages {
			restarts++
		}
		last = remaining
	}
}

// reader is a View's storage.Reader: the connection's reads.
type reader struct{ *sqlite.DB }

// writer is an Update's storage.Writer: the reads, and the transaction's
// writes.
type writer struct {
	reader
	tx *sqlite.Tx
}

// PutRecord writes r in the transaction.
func (w writer) PutRecord(r *storage.Record, overwrite bool) (bool, error) {
	return putRecord(w.tx, r, overwrite)
}

// putRecord writes r in tx; the only constraint a record can fail is its
// program's foreign key.
func putRecord(tx *sqlite.Tx, r *storage.Record, overwrite bool) (bool, error) {
	ok, err := tx.PutRecord(r, overwrite)
	return ok, noProgram(err)
}

// insertRecord is tx.InsertRecord, a missing program row reported as
// putRecord reports it.
func insertRecord(tx *sqlite.Tx, r *storage.Record) (int64, bool, error) {
	rowid, ok, err := tx.InsertRecord(r)
	return rowid, ok, noProgram(err)
}

// noProgram is err, storage.ErrNoProgram when it is the foreign key's
// constraint failure.
func noProgram(err error) error {
	if sqlite.IsConstraint(err) {
		return fmt.Errorf("%w (%v)", storage.ErrNoProgram, err)
	}
	return err
}

// PutProgram writes p in the transaction unless present.
func (w writer) PutProgram(p storage.Program) error { return w.tx.PutProgram(p) }

// DeleteRecord deletes key in the transaction.
func (w writer) DeleteRecord(key string) (bool, error) { return w.tx.DeleteRecord(key) }

// PutConfig writes e in the transaction.
func (w writer) PutConfig(e *storage.ConfigEntry, overwrite bool) (bool, error) {
	return w.tx.PutConfig(e, overwrite)
}

// DeleteConfig deletes the config entry of (namespace, key) in the
// transaction.
func (w writer) DeleteConfig(namespace, key string) (bool, error) {
	return w.tx.DeleteConfig(namespace, key)
}

// ClearConfigs deletes every config entry of namespace in the transaction.
func (w writer) ClearConfigs(namespace string) (int64, error) { return w.tx.ClearConfigs(namespace) }

// PutClaim writes c in the transaction.
func (w writer) PutClaim(c *storage.Claim) error { return w.tx.PutClaim(c) }

// DeleteClaim deletes the claim of key in the transaction if token names it.
func (w writer) DeleteClaim(key, token string) (bool, error) { return w.tx.DeleteClaim(key, token) }

// RenewClaims renews the claims of refs in the transaction.
func (w writer) RenewClaims(refs []storage.ClaimRef, at string) ([]storage.ClaimRef, error) {
	return w.tx.RenewClaims(refs, at)
}

// PutConfigImport writes an import record in the transaction.
func (w writer) PutConfigImport(im *storage.ConfigImport) error { return w.tx.PutConfigImport(im) }

// PutMeta writes a db_meta row in the transaction.
func (w writer) PutMeta(key, value string) error { return w.tx.PutMeta(key, value) }

// PutRuns writes a record's runs in the transaction.
func (w writer) PutRuns(key, updateDate, runs string) error {
	return w.tx.PutRuns(key, updateDate, runs)
}

// PutContext writes a run context in the transaction unless present.
func (w writer) PutContext(c storage.RunContext) error { return w.tx.PutContext(c.Fingerprint, c.JSON) }
