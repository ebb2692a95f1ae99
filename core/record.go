package core

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/runctx"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
)

// prepare validates one measurement the way the original did, in its order
// (times, then the normalized schedule), and computes its key: the row to
// write.
func prepare(programHash string, m *Measurement) (storage.Row, error) {
	if err := input.Text("tiralib_schedule_string", m.Schedule); err != nil {
		return storage.Row{}, err
	}
	rj, err := m.resultJSON()
	if err != nil {
		return storage.Row{}, err
	}
	norm := schedule.Normalize(m.Schedule)
	if ok, reason := schedule.Validate(norm); !ok {
		return storage.Row{}, invalidSchedule(reason)
	}
	return storage.Row{Key: keys.RecordKeyNormalized(programHash, norm), Schedule: norm, ResultJSON: rj}, nil
}

// maxReasonRunes is how much of a validation reason an error shows: the
// reason quotes the bad segment, which may be megabytes long, and a
// worker's log should not be flooded with it (callers match on the
// reason's beginning, which stays).
const maxReasonRunes = 300

// invalidSchedule is the original's ValueError for a schedule Validate
// refused with reason, the reason cut at maxReasonRunes.
func invalidSchedule(reason string) error {
	if n := utf8.RuneCountInString(reason); n > maxReasonRunes {
		cut := 0
		for range maxReasonRunes {
			_, size := utf8.DecodeRuneInString(reason[cut:])
			cut += size
		}
		reason = fmt.Sprintf("%s... (%d characters in all)", reason[:cut], n)
	}
	return newError(KindValue, "Invalid schedule string: %s", reason)
}

// Record stores one measurement and reports whether it wrote (false when the
// record exists and overwrite is false). The program row is inserted if
// absent; both happen in one transaction.
func (s *Store) Record(ctx context.Context, programName, source string, m Measurement, overwrite bool) (bool, error) {
	n, err := s.record(ctx, programName, ProgramRef{Source: source}, []Measurement{m}, overwrite, false)
	return n == 1, err
}

// RecordMany stores several measurements of one program in one transaction.
// Every entry is validated first; on any error nothing is written and the
// message says which entry (schedules[i]: ...). It returns how many records
// were written.
func (s *Store) RecordMany(ctx context.Context, programName, source string, ms []Measurement, overwrite bool) (int, error) {
	return s.record(ctx, programName, ProgramRef{Source: source}, ms, overwrite, true)
}

// ProgramRef names a call's program: its source, or (ByHash) only its
// hash, which a binding sends once it knows it, so that a long source is
// not encoded and parsed again at every call. A write by hash is for a
// program the caller knows is stored (it wrote or read it by this hash
// before): it does not insert the program row, and fails with
// KindNoProgram if the row is not there, for the caller to write again
// with the source.
type ProgramRef struct {
	Source, Hash string
	ByHash       bool
}

// RecordRef is Record with the program given by a ProgramRef.
func (s *Store) RecordRef(ctx context.Context, programName string, prog ProgramRef, m Measurement, overwrite bool) (bool, error) {
	n, err := s.record(ctx, programName, prog, []Measurement{m}, overwrite, false)
	return n == 1, err
}

// RecordManyRef is RecordMany with the program given by a ProgramRef.
func (s *Store) RecordManyRef(ctx context.Context, programName string, prog ProgramRef, ms []Measurement, overwrite bool) (int, error) {
	return s.record(ctx, programName, prog, ms, overwrite, true)
}

func (s *Store) record(ctx context.Context, programName string, prog ProgramRef, ms []Measurement, overwrite, many bool) (int, error) {
	if prog.ByHash {
		if err := input.Text("program_name", programName); err != nil {
			return 0, err
		}
		if !keys.IsProgramHash(prog.Hash) {
			return 0, badProgramHash(prog.Hash)
		}
	} else if err := input.Texts("program_name", programName, "program_source_code", prog.Source); err != nil {
		return 0, err
	}
	if err := s.CheckWrites(); err != nil {
		return 0, err
	}
	hash := prog.Hash
	if !prog.ByHash {
		hash = progHashes.hash(prog.Source)
	}
	w, bad, err := s.prepareWrite(programName, hash, prog.Source, ms, overwrite)
	if err != nil {
		if many {
			return 0, apierr.Prefix(fmt.Sprintf("schedules[%d]: ", bad), err)
		}
		return 0, err
	}
	w.ProgramStored = prog.ByHash
	s.stampRuns(w, ms)
	n, err := s.be.Write(ctx, w)
	if prog.ByHash && errors.Is(err, storage.ErrNoProgram) {
		return 0, wrapError(KindNoProgram, err, "%s: program_hash %s is not stored in this database "+
			"(another database at its path, or the program was removed): nothing was written; "+
			"write again with program_source_code", s.Path(), prog.Hash)
	}
	return n, err
}

// stampRuns gives each row of w, the measurements ms, one run: taken
// now, in this process's run context (storage "Runs").
func (s *Store) stampRuns(w *storage.Write, ms []Measurement) {
	fp, js, run := s.capture.Capture(0)
	w.Contexts = []storage.RunContext{{Fingerprint: fp, JSON: js}}
	w.RunTail = runctx.RunTail(&run)
	for i := range w.Rows {
		run.Count = ms[i].storedTimes()
		w.Rows[i].Runs = runctx.EncodeRuns([]runctx.Run{run})
	}
}

// PrepareWrite validates and keys the measurements of one program into
// the Write that stores them as this store's (its host, user and
// source_project), without runs; on an error, bad is the index of the
// measurement.
// record and record_many write it at once; an import (core/operator)
// first compares its rows with what is stored.
func (s *Store) PrepareWrite(programName, source string, ms []Measurement, overwrite bool) (w *storage.Write, bad int, err error) {
	return s.prepareWrite(programName, progHashes.hash(source), source, ms, overwrite)
}

func (s *Store) prepareWrite(programName, hash, source string, ms []Measurement, overwrite bool) (w *storage.Write, bad int, err error) {
	rows := make([]storage.Row, len(ms))
	for i := range ms {
		if rows[i], err = prepare(hash, &ms[i]); err != nil {
			return nil, i, err
		}
	}
	return &storage.Write{Hash: hash, Name: programName, Source: source, Rows: rows, Hostname: s.hostname,
		Username: s.username, SourceProject: s.opts.SourceProject, Overwrite: overwrite}, 0, nil
}
