package core

import (
	"context"
	"fmt"

	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
)

// # Merging databases
//
// MergeFrom copies the records of another TiraStore database (another
// cluster's, another experiment's) into this one, a slice of programs at
// a time: each call opens the source as an existing database, reads up to
// a number of records of the programs after a cursor under the source's
// own lock, and writes them in one transaction of this store. Rows are
// copied as they are (who measured them and when stay); a key already
// here is "same" when its result is the one stored, else a conflict,
// replaced only with overwrite. The records' CPU check applies between the
// two databases: a source measured on another CPU model or
// SLURM_CPUS_PER_TASK is refused unless allowCPUMismatch.

// MergeCursor is where a merge goes on: the last program merged.
type MergeCursor struct{ Name, Hash string }

// MergeResult is TransferResult with the cursor of the next slice.
type MergeResult struct {
	TransferResult
	// Next is nil when the source is done.
	NextCursor *MergeCursor
}

// PyJSON is TransferResult's, with next as {program_name, program_hash}
// or null.
func (r *MergeResult) PyJSON() any {
	o := r.TransferResult.PyJSON().(*pyjson.Object)
	if r.NextCursor == nil {
		o.Set("next", nil)
	} else {
		c := pyjson.NewObjectCap(2)
		c.Set("program_name", r.NextCursor.Name)
		c.Set("program_hash", r.NextCursor.Hash)
		o.Set("next", c)
	}
	o.Delete("size")
	return o
}

// MergeFrom merges the programs of the database at srcPath that come
// after cursor (nil: from the first) until about maxRecords records (at
// least one program) are copied; see "Merging databases".
func (s *Store) MergeFrom(ctx context.Context, srcPath string, cursor *MergeCursor, maxRecords int, overwrite, allowCPUMismatch, listConflicts bool) (*MergeResult, error) {
	if err := s.checkWrites(); err != nil {
		return nil, err
	}
	src, err := Open(ctx, srcPath, Options{MustExist: true, AllowCPUMismatch: true, CPUModel: s.localCPU,
		SlurmCPUs: s.localSlurm, LockTimeout: s.opts.LockTimeout, StaleLockTimeout: s.opts.StaleLockTimeout,
		Interruptible: s.opts.Interruptible})
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if src.path == s.path {
		return nil, newError(KindValue, "cannot merge %s into itself", s.path)
	}
	if !allowCPUMismatch {
		if err := s.sameCPU(ctx, src); err != nil {
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
	err = src.be.View(ctx, "merge (read)", func(r storage.Reader) error {
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
						return tooDeepToStore(fmt.Sprintf("%s: record %s (program %s, schedule %s): result_json",
							src.path, rec.Key, p.Name, schedule.Repr(rec.Schedule)), d)
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
	})
	if err != nil {
		return nil, err
	}
	res := &MergeResult{}
	if len(slice) == 0 {
		return res, nil
	}
	err = s.be.Update(ctx, "merge", func(w storage.Writer) error {
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
					res.Same++
					continue
				default:
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
				row.ProgramName, row.SourceCode = "", ""
				if _, err := w.PutRecord(&row, overwrite); err != nil {
					return err
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

// sameCPU refuses a source whose CPU metadata differs from this store's
// database's, naming both.
func (s *Store) sameCPU(ctx context.Context, src *Store) error {
	for _, key := range []string{"cpu_model", "slurm_cpus"} {
		mine, err := s.meta(ctx, key)
		if err != nil {
			return err
		}
		theirs, err := src.meta(ctx, key)
		if err != nil {
			return err
		}
		if str(mine) != str(theirs) {
			return newError(KindPermission, "%s was measured with %s %q, %s with %q: results are not comparable "+
				"(allow_cpu_mismatch merges anyway)", src.path, key, str(theirs), s.path, str(mine))
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
