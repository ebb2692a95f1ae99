package operator

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
)

// # Merging databases
//
// Merge copies the records of another TiraStore database (another
// cluster's, another experiment's) into a store, a slice of programs at
// a time: each call opens the source as an existing database, reads up to
// a number of records of the programs after a cursor under the source's
// own lock, and writes them in one transaction of the store. Rows are
// copied as they are (who measured them and when stay), with their runs
// and the runs' contexts. A key already here is "same" when its result
// is the one stored; when both are legal with times, every sample is
// kept: the runs the record here lacks are appended (core.MergeRuns:
// "merged"; merging again adds nothing); otherwise (legal against
// illegal) it is a conflict, replaced only with overwrite. The records'
// CPU check applies between the two databases: a source measured on
// another CPU model or SLURM_CPUS_PER_TASK is refused unless
// allowCPUMismatch.

// MergeCursor is where a merge goes on: the last program merged.
type MergeCursor struct{ Name, Hash string }

// MergeResult is TransferResult with the cursor of the next slice.
type MergeResult struct {
	TransferResult
	// Next is nil when the source is done.
	NextCursor *MergeCursor
}

// Merge merges into s the programs of the database at srcPath that come
// after cursor (nil: from the first) until about maxRecords records (at
// least one program) are copied; see "Merging databases".
func Merge(ctx context.Context, s *core.Store, srcPath string, cursor *MergeCursor, maxRecords int, overwrite, allowCPUMismatch, listConflicts bool) (*MergeResult, error) {
	if err := s.CheckWrites(); err != nil {
		return nil, err
	}
	o := s.Options()
	src, err := core.Open(ctx, srcPath, core.Options{MustExist: true, AllowCPUMismatch: true, CPUModel: o.CPUModel,
		SlurmCPUs: o.SlurmCPUs, LockTimeout: o.LockTimeout, StaleLockTimeout: o.StaleLockTimeout,
		Interruptible: o.Interruptible})
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if src.Path() == s.Path() || sameFile(src.Path(), s.Path()) {
		return nil, apierr.New(apierr.KindValue, "cannot merge %s into itself", s.Path())
	}
	if !allowCPUMismatch {
		if err := sameCPU(ctx, s, src); err != nil {
			return nil, err
		}
	}
	if cursor == nil {
		cursor = &MergeCursor{}
	}
	// The slice, read under the source's lock.
	type program struct {
		storage.Program
		recs []*storage.Record
	}
	var slice []program
	var n int
	var contexts map[string]string // of the slice's runs, by fingerprint
	readSlice := func(r storage.Reader) error {
		after := *cursor
		for maxRecords <= 0 || n < maxRecords {
			ps, err := r.ProgramsAfter(after.Name, after.Hash, 64)
			if err != nil || len(ps) == 0 {
				return err
			}
			for _, p := range ps {
				pr := program{Program: p}
				if err := r.EachRecordOf(p.Hash, func(rec *storage.Record) error {
					pr.recs = append(pr.recs, rec)
					if d, over := limits.TooDeep(rec.ResultJSON); over {
						return core.TooDeepToStore(fmt.Sprintf("%s: record %s (program %s, schedule %s): result_json",
							src.Path(), rec.Key, p.Name, schedule.Repr(rec.Schedule)), d)
					}
					return nil
				}); err != nil {
					return err
				}
				slice, n = append(slice, pr), n+len(pr.recs)
				after = MergeCursor{p.Name, p.Hash}
				if maxRecords > 0 && n >= maxRecords {
					return nil
				}
			}
		}
		return nil
	}
	err = src.Backend().View(ctx, "merge (read)", func(r storage.Reader) error {
		slice, n = nil, 0
		if err := readSlice(r); err != nil {
			return err
		}
		var fps []string
		for _, p := range slice {
			for _, rec := range p.recs {
				fps = append(fps, core.RunContexts(rec)...)
			}
		}
		contexts, err = r.Contexts(fps)
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &MergeResult{}
	if len(slice) == 0 {
		return res, nil
	}
	err = s.Backend().Update(ctx, "merge", func(w storage.Writer) error {
		res.TransferResult = TransferResult{}
		for _, p := range slice {
			res.Programs++
			if err := w.PutProgram(p.Program); err != nil {
				return err
			}
			for _, rec := range p.recs {
				res.Records++
				here, err := w.Get(rec.Key)
				if err != nil {
					return err
				}
				switch {
				case here == nil:
					res.Added++
				case here.ResultJSON == rec.ResultJSON:
					res.Same++ // one measurement, copied before (its runs as they are here)
					continue
				default:
					m, both, err := core.MergeRuns(here, rec)
					if err != nil {
						return err
					}
					if both && !overwrite {
						if m.Added == 0 {
							res.Same++
							continue
						}
						res.Merged++
						stamp := identity.NowISO(time.Now())
						merged := *here
						merged.ResultJSON, merged.UpdateDate = m.ResultJSON, stamp
						merged.ProgramName, merged.SourceCode, merged.Runs = "", "", ""
						if _, err := w.PutRecord(&merged, true); err != nil {
							return err
						}
						if err := putContexts(w, contexts, m.Contexts); err != nil {
							return err
						}
						if err := w.PutRuns(rec.Key, stamp, m.Runs); err != nil {
							return err
						}
						continue
					}
					res.Conflicts++
					if listConflicts {
						res.ConflictList = append(res.ConflictList, Conflict{p.Name, rec.Schedule, here.ResultJSON, rec.ResultJSON})
					}
					if !overwrite {
						continue
					}
					res.Replaced++
				}
				row := *rec
				row.ProgramName, row.SourceCode, row.Runs = "", "", ""
				if _, err := w.PutRecord(&row, overwrite); err != nil {
					return err
				}
				if rec.Runs != "" {
					if err := putContexts(w, contexts, core.RunContexts(rec)); err != nil {
						return err
					}
					if err := w.PutRuns(rec.Key, rec.UpdateDate, rec.Runs); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	last := slice[len(slice)-1]
	res.NextCursor = &MergeCursor{last.Name, last.Hash}
	return res, nil
}

// putContexts stores the contexts of fps that the source held (texts).
func putContexts(w storage.Writer, texts map[string]string, fps []string) error {
	for _, fp := range fps {
		if text, ok := texts[fp]; ok {
			if err := w.PutContext(storage.RunContext{Fingerprint: fp, JSON: text}); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameCPU refuses a source whose CPU metadata differs from the database
// of s, naming both.
func sameCPU(ctx context.Context, s, src *core.Store) error {
	for _, m := range []struct {
		key string
		get func(*core.Store, context.Context) (*string, error)
	}{{"cpu_model", (*core.Store).CPUModel}, {"slurm_cpus", (*core.Store).SlurmCPUs}} {
		mine, err := m.get(s, ctx)
		if err != nil {
			return err
		}
		theirs, err := m.get(src, ctx)
		if err != nil {
			return err
		}
		if str(mine) != str(theirs) {
			return apierr.New(apierr.KindPermission, "%s was measured with %s %q, %s with %q: results are not comparable "+
				"(allow_cpu_mismatch merges anyway)", src.Path(), m.key, str(theirs), s.Path(), str(mine))
		}
	}
	return nil
}

// str is *p, "" for nil.
func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// sameFile reports whether the database files a and b are one file under
// two names (a hard link: its lock would be another file, so the merge
// would read and write one database under two locks). A server's
// database has no file: never.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}
