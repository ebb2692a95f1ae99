package core

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/timing"
	"github.com/tirastore/tirastore/core/tuning"
)

// Result is a stored measurement as lookup returns it. IsLegal and
// ExecutionTimes are typed for Go callers; Stored hands other languages the
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
	// Stats summarize ExecutionTimes (core/timing); Count 0 when it has
	// no finite time (an illegal schedule, null times).
	Stats timing.Stats
	// Unstable: the times break the store's noise policy (noise.go).
	Unstable bool
	// Censored: the record holds no time of its own (censored.go): ""
	// (measured), CensoredTimeout (ExecutionTimes is the time limit, a
	// lower bound, as Stats says) or CensoredCompileFailure.
	Censored string

	matchedRuns int // the runs the store's match rules kept (match.go); 0: not counted

	legal any // the stored is_legal value
	times any // the stored execution_times value
}

// Stored are the stored is_legal and execution_times values, untouched: a
// list of numbers stored as the original wrote it is its compact text
// (pyjson.Raw, see fromCanonical), anything else as parsed. The C layer's
// reply passes them on, so that other languages read what was stored.
func (r *Result) Stored() (legal, times any) { return r.legal, r.times }

// ParseResult reads result_json leniently, as Python's json.loads does
// (NaN and Infinity tokens included), naming the record key in its error:
// lookups, put, and the export (core/operator) read results so.
func ParseResult(key, resultJSON string) (legal, times any, err error) {
	obj, err := parseResultObject(key, resultJSON)
	if err != nil {
		return nil, nil, err
	}
	legal, _ = obj.Get("is_legal")
	times, _ = obj.Get("execution_times")
	return legal, times, nil
}

func parseResultObject(key, resultJSON string) (*pyjson.Object, error) {
	v, err := pyjson.Parse([]byte(resultJSON))
	if err != nil {
		return nil, newError(KindValue, "record %s: result_json is not valid JSON: %v", key, err)
	}
	obj, ok := v.(*pyjson.Object)
	if !ok {
		return nil, newError(KindValue, "record %s: result_json is not a JSON object", key)
	}
	return obj, nil
}

func resultOf(rec *storage.Record) (*Result, error) {
	r := &Result{
		Schedule: rec.Schedule, Hostname: rec.Hostname, Username: rec.Username,
		CreationDate: rec.CreationDate, UpdateDate: rec.UpdateDate, SourceProject: rec.SourceProject,
	}
	if r.fromCanonical(rec.ResultJSON) {
		r.Stats, _ = timing.Summarize(r.ExecutionTimes)
		return r, nil
	}
	if d, over := limits.TooDeep(rec.ResultJSON); over {
		return nil, newError(KindValue, "%s", tooDeepStored(fmt.Sprintf("record %s (schedule %s): its result_json",
			rec.Key, schedule.Repr(rec.Schedule)), d, "delete the record (TiraStore.delete(key)) or record it again with overwrite"))
	}
	obj, err := parseResultObject(rec.Key, rec.ResultJSON)
	if err != nil {
		return nil, err
	}
	legal, _ := obj.Get("is_legal")
	times, _ := obj.Get("execution_times")
	r.legal, r.times = legal, times
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
	r.Stats, _ = timing.Summarize(r.ExecutionTimes)
	if c, ok := obj.Get("censored"); ok {
		r.Censored = censoredOf(c, r)
		r.Stats.LowerBound = r.Censored == CensoredTimeout
	}
	return r, nil
}

// fromCanonical fills r from result_json written as the original and this
// engine write it, {"is_legal":<bool>,"execution_times":<null or a list of
// numbers>} with no whitespace, and reports whether it was. Then the list
// is passed through as it is stored (pyjson.Raw): what a Python reader of
// the reply parses is what the original's json.loads of the column gave,
// without a parse and a re-encoding on every hit. Any other form (spaces,
// another key, a nested value) goes through the general parser.
func (r *Result) fromCanonical(rj string) bool {
	rest, ok := strings.CutPrefix(rj, `{"is_legal":`)
	if !ok {
		return false
	}
	switch {
	case strings.HasPrefix(rest, "true"):
		r.IsLegal, rest = true, rest[len("true"):]
	case strings.HasPrefix(rest, "false"):
		r.IsLegal, rest = false, rest[len("false"):]
	default:
		return false
	}
	if rest, ok = strings.CutPrefix(rest, `,"execution_times":`); !ok {
		return false
	}
	if times, ok := strings.CutSuffix(rest, "}"); !ok {
		return false
	} else if times == "null" {
		r.legal = r.IsLegal
		return true
	} else if list, ok := parseNumberList(times); ok {
		r.legal, r.times, r.ExecutionTimes = r.IsLegal, pyjson.Raw(times), list
		return true
	}
	r.IsLegal = false
	return false
}

// parseNumberList reads "[n,n,...]" (no whitespace, each n a number as
// Python's json reads it, NaN and Infinity included).
func parseNumberList(s string) ([]float64, bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, false
	}
	body := s[1 : len(s)-1]
	out := []float64{}
	if body == "" {
		return out, true
	}
	for _, tok := range strings.Split(body, ",") {
		f, err := pyjson.Number(tok).Float64()
		if err != nil {
			return nil, false
		}
		out = append(out, f)
	}
	return out, true
}

// programHashes remembers the hashes of the last few program sources of
// this process: an autoscheduler asks about many schedules of one program,
// and normalizing and hashing a long source for each lookup would cost
// more than the lookup itself. It is shared by every store and by
// ProgramHash, so that a binding that asks for the hash of a source it
// has just looked up (to send the hash instead from then on) does not
// hash it again. A source over tuning.MaxRememberedSource is hashed each
// time, not kept.
type programHashes struct {
	mu       sync.Mutex
	m        map[string]string
	computed int // hashes computed (not remembered), for tests
}

var progHashes programHashes

func (p *programHashes) hash(source string) string {
	if len(source) > tuning.MaxRememberedSource {
		p.mu.Lock()
		p.computed++
		p.mu.Unlock()
		return keys.ProgramHash(source) // kept, it would keep the source in memory
	}
	p.mu.Lock()
	h, ok := p.m[source]
	p.mu.Unlock()
	if ok {
		return h
	}
	h = keys.ProgramHash(source)
	p.mu.Lock()
	p.computed++
	if p.m == nil || len(p.m) >= tuning.MaxProgramHashes {
		p.m = make(map[string]string)
	}
	p.m[source] = h
	p.mu.Unlock()
	return h
}

// ProgramHash is keys.ProgramHash (the make_program_hash utility),
// remembered for the last few sources.
func ProgramHash(source string) string { return progHashes.hash(source) }

// Lookup returns the stored result for (program, schedule), or nil when
// there is none. The program name does not take part in the key. A
// repeated lookup is answered from the process's cache when the database
// provably has not changed since (see resultCache).
func (s *Store) Lookup(ctx context.Context, programName, source, sched string) (*Result, error) {
	if err := input.Texts("program_name", programName, "program_source_code", source); err != nil {
		return nil, err
	}
	return s.LookupByHash(ctx, programName, progHashes.hash(source), sched)
}

// LookupByHash is Lookup for a caller that holds the program's hash
// (keys.ProgramHash, the make_program_hash utility) instead of its source:
// a binding then need not send a source of many kilobytes with every call.
func (s *Store) LookupByHash(ctx context.Context, programName, programHash, sched string) (*Result, error) {
	if err := checkProgramRef(programName, programHash, sched); err != nil {
		return nil, err
	}
	rec, err := s.be.Lookup(ctx, programHash, keys.RecordKey(programHash, sched))
	if err != nil || rec == nil {
		return nil, err
	}
	return s.newResult(rec)
}

// checkProgramRef validates the arguments of the ByHash methods.
func checkProgramRef(programName, programHash, sched string) error {
	if err := input.Texts("program_name", programName, "tiralib_schedule_string", sched); err != nil {
		return err
	}
	if !keys.IsProgramHash(programHash) {
		return badProgramHash(programHash)
	}
	return nil
}

// badProgramHash is the error for a program_hash argument that is not one.
func badProgramHash(h string) error {
	return newError(KindValue, "program_hash must be 64 lowercase hexadecimal digits (the SHA-256 that make_program_hash returns), got %s", schedule.Repr(h))
}

// LookupMany looks up several schedules of one program under one
// acquisition of the lock and in one read transaction; the results are in
// the order of schedules (nil where absent). Invalid input anywhere fails
// the whole call, naming the entry (schedules[i]: ...).
func (s *Store) LookupMany(ctx context.Context, programName, source string, schedules []string) ([]*Result, error) {
	if err := input.Texts("program_name", programName, "program_source_code", source); err != nil {
		return nil, err
	}
	return s.LookupManyByHash(ctx, programName, progHashes.hash(source), schedules)
}

// LookupManyByHash is LookupMany by program hash (see LookupByHash).
func (s *Store) LookupManyByHash(ctx context.Context, programName, hash string, schedules []string) ([]*Result, error) {
	if err := checkProgramRef(programName, hash, ""); err != nil {
		return nil, err
	}
	keyList := make([]string, len(schedules))
	for i, sc := range schedules {
		if err := input.Text("tiralib_schedule_string", sc); err != nil {
			return nil, apierr.Prefix(fmt.Sprintf("schedules[%d]: ", i), err)
		}
		keyList[i] = keys.RecordKey(hash, sc)
	}
	recs, err := s.be.LookupMany(ctx, hash, keyList)
	if err != nil {
		return nil, err
	}
	out := make([]*Result, len(recs))
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		r, err := s.newResult(rec)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// Contains reports whether a record exists for (program, schedule).
func (s *Store) Contains(ctx context.Context, programName, source, sched string) (bool, error) {
	if err := input.Texts("program_name", programName, "program_source_code", source); err != nil {
		return false, err
	}
	return s.ContainsByHash(ctx, programName, progHashes.hash(source), sched)
}

// ContainsByHash is Contains by program hash (see LookupByHash).
func (s *Store) ContainsByHash(ctx context.Context, programName, hash, sched string) (bool, error) {
	if err := checkProgramRef(programName, hash, sched); err != nil {
		return false, err
	}
	return s.be.Contains(ctx, hash, keys.RecordKey(hash, sched))
}

// ProgramSource is one stored source version of a program name.
type ProgramSource struct {
	ProgramHash string
	SourceCode  string
}

// GetProgramSource lists every source version stored under a program name,
// ordered by program hash.
func (s *Store) GetProgramSource(ctx context.Context, programName string) ([]ProgramSource, error) {
	if err := input.Text("program_name", programName); err != nil {
		return nil, err
	}
	var progs []storage.Program
	if err := s.be.View(ctx, "get_program_source", func(r storage.Reader) (err error) {
		progs, err = r.ProgramsByName(programName)
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
	if err := input.Texts("program_name", programName, "program_source_code", source); err != nil {
		return nil, err
	}
	hash := progHashes.hash(source)
	var out []*Result
	err := s.be.View(ctx, "get_program_records", func(r storage.Reader) error {
		out = out[:0]
		return r.EachRecordOf(hash, func(rec *storage.Record) error {
			res, err := s.readResult(rec, r)
			if err == nil && res != nil {
				out = append(out, res)
			}
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []*Result{}
	}
	return out, nil
}

// Count is the number of records.
func (s *Store) Count(ctx context.Context) (n int64, err error) {
	err = s.be.View(ctx, "count", func(r storage.Reader) (err error) {
		n, err = r.CountRecords()
		return err
	})
	return n, err
}

// ProgramCount is the number of distinct programs.
func (s *Store) ProgramCount(ctx context.Context) (n int64, err error) {
	err = s.be.View(ctx, "program_count", func(r storage.Reader) (err error) {
		n, err = r.CountPrograms()
		return err
	})
	return n, err
}

// Stats is the original's stats() summary.
type Stats struct {
	TotalRecords, LegalRecords, IllegalRecords, TotalPrograms int64
	SourceProjects, Users                                     []string
	CPUModel, SlurmCPUs                                       *string // nil when db_meta lacks the row
	// Warnings tell what the counts could not include: records whose
	// result_json is not JSON, in TotalRecords but neither legal nor
	// illegal (the original's stats() failed on the first of them).
	Warnings []string
}

// UnreadableResults is the warning about n records whose result_json is
// not JSON that what (a stats, an export) skipped or could not count.
func (s *Store) UnreadableResults(n int64, what string) string {
	return fmt.Sprintf("%d record(s) of %s have a result_json that cannot be read (not JSON, or not a JSON object; "+
		"a direct write to the table can leave one): %s. `tirastore check` on the database counts them; delete them or record them again with "+
		"overwrite", n, s.path, what)
}

func metaPtr(r storage.Reader, key string) (*string, error) {
	v, ok, err := r.Meta(key)
	if err != nil || !ok {
		return nil, err
	}
	return &v, nil
}

// Stats summarizes the database.
func (s *Store) Stats(ctx context.Context) (*Stats, error) {
	var st Stats
	err := s.be.View(ctx, "stats", func(r storage.Reader) error {
		ss, err := r.Summary()
		if err != nil {
			return err
		}
		st = Stats{TotalRecords: ss.Total, LegalRecords: ss.Legal, IllegalRecords: ss.Illegal,
			TotalPrograms: ss.Programs, SourceProjects: ss.SourceProjects, Users: ss.Users}
		if ss.Unreadable > 0 {
			st.Warnings = []string{s.UnreadableResults(ss.Unreadable, "they are in total_records, neither legal nor illegal")}
		}
		if st.CPUModel, err = metaPtr(r, "cpu_model"); err != nil {
			return err
		}
		st.SlurmCPUs, err = metaPtr(r, "slurm_cpus")
		return err
	})
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// ProgramStat counts one program's records (stats --by program).
type ProgramStat storage.ProgramSummary

// ProgramStats counts the records of every program, by name then hash, in
// one read under the lock.
func (s *Store) ProgramStats(ctx context.Context) ([]*ProgramStat, error) {
	var out []*ProgramStat
	err := s.be.View(ctx, "program stats", func(r storage.Reader) error {
		ps, err := r.ProgramSummaries()
		out = make([]*ProgramStat, len(ps))
		for i := range ps {
			out[i] = (*ProgramStat)(&ps[i])
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Keys lists record keys ordered by creation date; limit > 0 paginates.
func (s *Store) Keys(ctx context.Context, limit, offset int64) (keys []string, err error) {
	err = s.be.View(ctx, "keys", func(r storage.Reader) (err error) {
		keys, err = r.Keys(limit, offset)
		return err
	})
	return keys, err
}

// RawRecord is a record row joined with its program, as get() returns it.
type RawRecord storage.Record

// Get returns the raw record for a key, or nil.
func (s *Store) Get(ctx context.Context, key string) (*RawRecord, error) {
	if err := input.Text("key", key); err != nil {
		return nil, err
	}
	var rec *storage.Record
	if err := s.be.View(ctx, "get", func(r storage.Reader) (err error) {
		rec, err = r.Get(key)
		return err
	}); err != nil || rec == nil {
		return nil, err
	}
	return (*RawRecord)(rec), nil
}

// CPUModel is the cpu_model stored in db_meta (nil when absent).
func (s *Store) CPUModel(ctx context.Context) (*string, error) { return s.meta(ctx, "cpu_model") }

// SlurmCPUs is the slurm_cpus stored in db_meta (nil when absent).
func (s *Store) SlurmCPUs(ctx context.Context) (*string, error) { return s.meta(ctx, "slurm_cpus") }

func (s *Store) meta(ctx context.Context, key string) (v *string, err error) {
	err = s.be.View(ctx, key, func(r storage.Reader) (err error) {
		v, err = metaPtr(r, key)
		return err
	})
	return v, err
}

// RecordsAfter reads up to limit records inserted after the cursor after
// (a storage.SeqRecord's Seq; 0 before the first), in insertion order, in
// one read: a reader that follows the whole table (core/dashboard) reads
// it a bounded chunk per hold of the lock. limit must be positive.
func (s *Store) RecordsAfter(ctx context.Context, after int64, limit int) (recs []storage.SeqRecord, err error) {
	if limit <= 0 {
		return nil, newError(KindValue, "records_after: limit must be positive, got %d", limit)
	}
	err = s.be.View(ctx, "records_after", func(r storage.Reader) (err error) {
		recs, err = r.RecordsAfter(after, limit)
		return err
	})
	return recs, err
}

// ResultOf reads a record's stored result as a lookup does: for readers
// that follow the table (core/dashboard) and so hold rows, not keys.
func ResultOf(rec *storage.Record) (*Result, error) { return resultOf(rec) }
