package core

import (
	"context"
	"fmt"
	"github.com/tirastore/tirastore/core/storage"
	"sync"

	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/sqlite"
)

// Result is a stored measurement as lookup returns it. IsLegal and
// ExecutionTimes are typed for Go callers; PyJSON hands other languages the
// stored values exactly (ints stay ints, NaN stays NaN).
type Result struct {
	IsLegal        bool
	ExecutionTimes []float64 // nil when the record stores null
	Schedule       string
	Hostname       string
	Username       string
	CreationDate   string
	UpdateDate     string
	SourceProject  string

	legal any // the stored is_legal value
	times any // the stored execution_times value
}

// PyJSON is the LookupResult field order of the original, with the stored
// JSON values untouched.
func (r *Result) PyJSON() any {
	o := pyjson.NewObjectCap(8)
	o.Set("is_legal", r.legal)
	o.Set("execution_times", r.times)
	o.Set("schedule", r.Schedule)
	o.Set("hostname", r.Hostname)
	o.Set("username", r.Username)
	o.Set("creation_date", r.CreationDate)
	o.Set("update_date", r.UpdateDate)
	o.Set("source_project", r.SourceProject)
	return o
}

// parseResult reads result_json leniently, as Python's json.loads does
// (NaN and Infinity tokens included).
func parseResult(key, resultJSON string) (legal, times any, err error) {
	v, err := pyjson.Parse([]byte(resultJSON))
	if err != nil {
		return nil, nil, newError(KindValue, "record %s: result_json is not valid JSON: %v", key, err)
	}
	obj, ok := v.(*pyjson.Object)
	if !ok {
		return nil, nil, newError(KindValue, "record %s: result_json is not a JSON object", key)
	}
	legal, _ = obj.Get("is_legal")
	times, _ = obj.Get("execution_times")
	return legal, times, nil
}

func newResult(rec *storage.Record) (*Result, error) {
	legal, times, err := parseResult(rec.Key, rec.ResultJSON)
	if err != nil {
		return nil, err
	}
	r := &Result{
		Schedule: rec.Schedule, Hostname: rec.Hostname, Username: rec.Username,
		CreationDate: rec.CreationDate, UpdateDate: rec.UpdateDate, SourceProject: rec.SourceProject,
		legal: legal, times: times,
	}
	switch l := legal.(type) {
	case bool:
		r.IsLegal = l
	case pyjson.Number:
		f, _ := l.Float64()
		r.IsLegal = f != 0
	}
	if list, ok := times.([]any); ok {
		r.ExecutionTimes = make([]float64, 0, len(list))
		for _, t := range list {
			if n, ok := t.(pyjson.Number); ok {
				f, _ := n.Float64()
				r.ExecutionTimes = append(r.ExecutionTimes, f)
			}
		}
	}
	return r, nil
}

// programHashes remembers the hashes of the last few program sources: an
// autoscheduler asks about many schedules of one program, and normalizing
// and hashing a long source for each lookup would cost more than the
// lookup itself.
type programHashes struct {
	mu sync.Mutex
	m  map[string]string
}

const maxProgramHashes = 64

func (p *programHashes) hash(source string) string {
	p.mu.Lock()
	h, ok := p.m[source]
	p.mu.Unlock()
	if ok {
		return h
	}
	h = keys.ProgramHash(source)
	p.mu.Lock()
	if p.m == nil || len(p.m) >= maxProgramHashes {
		p.m = make(map[string]string)
	}
	p.m[source] = h
	p.mu.Unlock()
	return h
}

// Lookup returns the stored result for (program, schedule), or nil when
// there is none. The program name does not take part in the key. A
// repeated lookup is answered from the process's cache when the database
// provably has not changed since (see resultCache).
func (s *Store) Lookup(ctx context.Context, programName, source, sched string) (*Result, error) {
	if err := checkTexts("program_name", programName, "program_source_code", source); err != nil {
		return nil, err
	}
	return s.LookupByHash(ctx, programName, s.progs.hash(source), sched)
}

// LookupByHash is Lookup for a caller that holds the program's hash
// (keys.ProgramHash, the make_program_hash utility) instead of its source:
// a binding then need not send a source of many kilobytes with every call.
func (s *Store) LookupByHash(ctx context.Context, programName, programHash, sched string) (*Result, error) {
	if err := checkProgramRef(programName, programHash, sched); err != nil {
		return nil, err
	}
	rec, err := s.read(ctx, "lookup", programHash, keys.RecordKey(programHash, sched))
	if err != nil || rec == nil {
		return nil, err
	}
	return newResult(rec)
}

// checkProgramRef validates the arguments of the ByHash methods.
func checkProgramRef(programName, programHash, sched string) error {
	if err := checkTexts("program_name", programName, "tiralib_schedule_string", sched); err != nil {
		return err
	}
	if !keys.IsProgramHash(programHash) {
		return newError(KindValue, "program_hash must be 64 lowercase hexadecimal digits (the SHA-256 that make_program_hash returns), got %s", pyRepr(programHash))
	}
	return nil
}

// read returns the joined record for key of program progHash (nil:
// absent), from the cache if it is provably current, else under the lock
// (loading the whole program when the database is quiet: see
// resultCache).
func (s *Store) read(ctx context.Context, op, progHash, key string) (*storage.Record, error) {
	if rec, ok := s.cached(progHash, key); ok {
		return rec, nil
	}
	var rec *storage.Record
	err := s.withDB(ctx, op, func(db *sqlite.DB) (err error) {
		if r, ok := s.cache.getLocked(progHash, key); ok {
			rec = r // brought up to date from the change log when the lock was taken
			return nil
		}
		if s.cache.shouldPrefetch(progHash, s.lk.WritesWaiting) {
			recs, err := db.ProgramRecords(progHash, prefetchLimit)
			if err != nil {
				return err
			}
			s.cache.sync()
			s.cache.putProgram(progHash, recs)
			if recs != nil {
				rec, _ = s.cache.get(progHash, key)
				return nil
			}
		}
		if rec, err = db.Lookup(key); err != nil {
			return err
		}
		s.cache.sync()
		s.cache.put(key, rec)
		return nil
	})
	return rec, err
}

// cached is the lock-free path of read.
func (s *Store) cached(progHash, key string) (*storage.Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, false // withDB reports it
	}
	return s.cache.get(progHash, key)
}

// LookupMany looks up several schedules of one program under one
// acquisition of the lock and in one read transaction; the results are in
// the order of schedules (nil where absent). Invalid input anywhere fails
// the whole call, naming the entry (schedules[i]: ...).
func (s *Store) LookupMany(ctx context.Context, programName, source string, schedules []string) ([]*Result, error) {
	if err := checkTexts("program_name", programName, "program_source_code", source); err != nil {
		return nil, err
	}
	return s.LookupManyByHash(ctx, programName, s.progs.hash(source), schedules)
}

// LookupManyByHash is LookupMany by program hash (see LookupByHash).
func (s *Store) LookupManyByHash(ctx context.Context, programName, hash string, schedules []string) ([]*Result, error) {
	if err := checkProgramRef(programName, hash, ""); err != nil {
		return nil, err
	}
	keyList := make([]string, len(schedules))
	for i, sc := range schedules {
		if err := checkText("tiralib_schedule_string", sc); err != nil {
			e := err.(*Error)
			return nil, &Error{Kind: e.Kind, Message: fmt.Sprintf("schedules[%d]: %s", i, e.Message), Err: e.Err}
		}
		keyList[i] = keys.RecordKey(hash, sc)
	}
	recs := make([]*storage.Record, len(keyList))
	var missing []int
	for i, k := range keyList {
		if rec, ok := s.cached(hash, k); ok {
			recs[i] = rec
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		err := s.withDB(ctx, "lookup_many", func(db *sqlite.DB) error {
			err := db.Read(func(r *sqlite.Reader) error {
				for _, i := range missing {
					rec, err := r.Lookup(keyList[i])
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
			s.cache.sync()
			for _, i := range missing {
				s.cache.put(keyList[i], recs[i])
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]*Result, len(recs))
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		r, err := newResult(rec)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// Contains reports whether a record exists for (program, schedule).
func (s *Store) Contains(ctx context.Context, programName, source, sched string) (bool, error) {
	if err := checkTexts("program_name", programName, "program_source_code", source); err != nil {
		return false, err
	}
	return s.ContainsByHash(ctx, programName, s.progs.hash(source), sched)
}

// ContainsByHash is Contains by program hash (see LookupByHash).
func (s *Store) ContainsByHash(ctx context.Context, programName, hash, sched string) (bool, error) {
	if err := checkProgramRef(programName, hash, sched); err != nil {
		return false, err
	}
	key := keys.RecordKey(hash, sched)
	// Only a cached record answers: the cache holds joined reads, and a
	// record whose program row is missing exists for contains (no join,
	// as in the original) but not for lookup.
	if rec, ok := s.cached(hash, key); ok && rec != nil {
		return true, nil
	}
	var found bool
	err := s.withDB(ctx, "contains", func(db *sqlite.DB) (err error) {
		found, err = db.Contains(key)
		return err
	})
	return found, err
}

// ProgramSource is one stored source version of a program name.
type ProgramSource struct {
	ProgramHash string
	SourceCode  string
}

// PyJSON gives the original's dict: {"program_hash", "source_code"}.
func (p ProgramSource) PyJSON() any {
	o := pyjson.NewObject()
	o.Set("program_hash", p.ProgramHash)
	o.Set("source_code", p.SourceCode)
	return o
}

// GetProgramSource lists every source version stored under a program name,
// ordered by program hash.
func (s *Store) GetProgramSource(ctx context.Context, programName string) ([]ProgramSource, error) {
	if err := checkText("program_name", programName); err != nil {
		return nil, err
	}
	var progs []storage.Program
	if err := s.withDB(ctx, "get_program_source", func(db *sqlite.DB) (err error) {
		progs, err = db.ProgramsByName(programName)
		return err
	}); err != nil {
		return nil, err
	}
	out := make([]ProgramSource, len(progs))
	for i, p := range progs {
		out[i] = ProgramSource{ProgramHash: p.Hash, SourceCode: p.Source}
	}
	return out, nil
}

// GetProgramRecords returns every result recorded for a program's source,
// ordered by creation date.
func (s *Store) GetProgramRecords(ctx context.Context, programName, source string) ([]*Result, error) {
	if err := checkTexts("program_name", programName, "program_source_code", source); err != nil {
		return nil, err
	}
	hash := keys.ProgramHash(source)
	var recs []*storage.Record
	if err := s.withDB(ctx, "get_program_records", func(db *sqlite.DB) (err error) {
		recs, err = db.RecordsByProgram(hash)
		return err
	}); err != nil {
		return nil, err
	}
	out := make([]*Result, 0, len(recs))
	for _, rec := range recs {
		r, err := newResult(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Count is the number of records.
func (s *Store) Count(ctx context.Context) (n int64, err error) {
	err = s.withDB(ctx, "count", func(db *sqlite.DB) (err error) {
		n, err = db.CountRecords()
		return err
	})
	return n, err
}

// ProgramCount is the number of distinct programs.
func (s *Store) ProgramCount(ctx context.Context) (n int64, err error) {
	err = s.withDB(ctx, "program_count", func(db *sqlite.DB) (err error) {
		n, err = db.CountPrograms()
		return err
	})
	return n, err
}

// Stats is the original's stats() summary.
type Stats struct {
	TotalRecords, LegalRecords, IllegalRecords, TotalPrograms int64
	SourceProjects, Users                                     []string
	CPUModel, SlurmCPUs                                       *string // nil when db_meta lacks the row
}

// PyJSON gives the original's dict, in its key order.
func (st *Stats) PyJSON() any {
	o := pyjson.NewObject()
	o.Set("total_records", st.TotalRecords)
	o.Set("legal_records", st.LegalRecords)
	o.Set("illegal_records", st.IllegalRecords)
	o.Set("total_programs", st.TotalPrograms)
	o.Set("source_projects", st.SourceProjects)
	o.Set("users", st.Users)
	o.Set("cpu_model", optString(st.CPUModel))
	o.Set("slurm_cpus", optString(st.SlurmCPUs))
	return o
}

func optString(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func metaPtr(db *sqlite.DB, key string) (*string, error) {
	v, ok, err := db.Meta(key)
	if err != nil || !ok {
		return nil, err
	}
	return &v, nil
}

// Stats summarizes the database.
func (s *Store) Stats(ctx context.Context) (*Stats, error) {
	var st Stats
	err := s.withDB(ctx, "stats", func(db *sqlite.DB) error {
		ss, err := db.Stats()
		if err != nil {
			return err
		}
		st = Stats{TotalRecords: ss.Total, LegalRecords: ss.Legal, IllegalRecords: ss.Illegal,
			TotalPrograms: ss.Programs, SourceProjects: ss.SourceProjects, Users: ss.Users}
		if st.CPUModel, err = metaPtr(db, "cpu_model"); err != nil {
			return err
		}
		st.SlurmCPUs, err = metaPtr(db, "slurm_cpus")
		return err
	})
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// Keys lists record keys ordered by creation date; limit > 0 paginates.
func (s *Store) Keys(ctx context.Context, limit, offset int64) (keys []string, err error) {
	err = s.withDB(ctx, "keys", func(db *sqlite.DB) (err error) {
		keys, err = db.Keys(limit, offset)
		return err
	})
	return keys, err
}

// RawRecord is a record row joined with its program, as get() returns it.
type RawRecord storage.Record

// PyJSON gives the original's dict: the record columns, then program_name
// and source_code.
func (r *RawRecord) PyJSON() any {
	o := pyjson.NewObject()
	for _, kv := range [][2]string{
		{"key", r.Key}, {"program_hash", r.ProgramHash}, {"schedule", r.Schedule},
		{"result_json", r.ResultJSON}, {"hostname", r.Hostname}, {"username", r.Username},
		{"creation_date", r.CreationDate}, {"update_date", r.UpdateDate},
		{"source_project", r.SourceProject}, {"program_name", r.ProgramName}, {"source_code", r.SourceCode},
	} {
		o.Set(kv[0], kv[1])
	}
	return o
}

// Get returns the raw record for a key, or nil.
func (s *Store) Get(ctx context.Context, key string) (*RawRecord, error) {
	if err := checkText("key", key); err != nil {
		return nil, err
	}
	var rec *storage.Record
	if err := s.withDB(ctx, "get", func(db *sqlite.DB) (err error) {
		rec, err = db.Get(key)
		return err
	}); err != nil || rec == nil {
		return nil, err
	}
	return (*RawRecord)(rec), nil
}

// CPUModel is the cpu_model stored in db_meta (ok false when absent).
func (s *Store) CPUModel(ctx context.Context) (*string, error) { return s.meta(ctx, "cpu_model") }

// SlurmCPUs is the slurm_cpus stored in db_meta (nil when absent).
func (s *Store) SlurmCPUs(ctx context.Context) (*string, error) { return s.meta(ctx, "slurm_cpus") }

func (s *Store) meta(ctx context.Context, key string) (v *string, err error) {
	err = s.withDB(ctx, key, func(db *sqlite.DB) (err error) {
		v, err = metaPtr(db, key)
		return err
	})
	return v, err
}
