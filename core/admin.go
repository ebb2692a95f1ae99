package core

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/pypath"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
)

// Put is the original's low-level insert/update by raw key (admin use). The
// program must already exist; result_json must be a JSON object so that
// later lookups can read it.
func (s *Store) Put(ctx context.Context, key, programHash, sched, resultJSON string, overwrite bool) (bool, error) {
	if err := checkTexts("key", key, "program_hash", programHash, "schedule", sched, "result_json", resultJSON); err != nil {
		return false, err
	}
	if err := s.checkWrites(); err != nil {
		return false, err
	}
	if _, _, err := parseResult(key, resultJSON); err != nil {
		return false, err
	}
	var wrote bool
	err := s.be.Update(ctx, "put", func(w storage.Writer) (err error) {
		stamp := identity.NowISO(time.Now())
		wrote, err = w.PutRecord(&storage.Record{
			Key: key, ProgramHash: programHash, Schedule: sched, ResultJSON: resultJSON,
			Hostname: s.hostname, Username: s.username, CreationDate: stamp, UpdateDate: stamp,
			SourceProject: s.opts.SourceProject,
		}, overwrite)
		if errors.Is(err, storage.ErrNoProgram) {
			return wrapError(KindValue, err, "put %s: program_hash %s is not in the programs table (%v)", key, programHash, errors.Unwrap(err))
		}
		return err
	})
	return wrote, err
}

// Delete removes a record by key and reports whether it existed.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkText("key", key); err != nil {
		return false, err
	}
	if err := s.checkWrites(); err != nil {
		return false, err
	}
	var found bool
	err := s.be.Update(ctx, "delete", func(w storage.Writer) (err error) {
		found, err = w.DeleteRecord(key)
		return err
	})
	return found, err
}

// Backup writes a consistent snapshot of the database to dest and returns
// its absolute path. With dest "" the name is <stem>_<UTC timestamp>.db
// beside the database, as in the original; an existing directory receives a
// file of the database's name. The copy is made under the lock (so it
// never contains half a transaction), written to a temporary file and
// renamed into place, so dest is never seen half-written.
func (s *Store) Backup(ctx context.Context, dest string) (string, error) {
	if err := checkText("backup_path", dest); err != nil {
		return "", err
	}
	if dest == "" {
		stamp := time.Now().UTC().Format("20060102T150405Z")
		dest = filepath.Join(filepath.Dir(s.path), pypath.Stem(filepath.Base(s.path))+"_"+stamp+".db")
	}
	dest, err := pypath.Resolve(dest)
	if err != nil {
		return "", wrapError(KindOS, err, "cannot resolve backup path: %v", err)
	}
	if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		dest = filepath.Join(dest, filepath.Base(s.path))
	}
	if dest == s.path {
		return "", newError(KindValue, "backup path %s is the database itself", dest)
	}
	if _, err := os.Stat(filepath.Dir(dest)); err != nil {
		k, _ := apierr.OSKind(err)
		return "", wrapError(k, err, "cannot back up to %s: %v", dest, err)
	}
	tmp := tempBeside(dest)
	defer os.Remove(tmp)
	if err := s.be.Backup(ctx, tmp); err != nil {
		return "", err
	}
	if err := syncFile(tmp); err != nil {
		return "", s.fileError(err, "back up")
	}
	if fi, err := os.Stat(s.path); err == nil {
		_ = os.Chmod(tmp, fi.Mode().Perm())
	}
	if err := os.Rename(tmp, dest); err != nil {
		return "", s.fileError(err, "back up")
	}
	return dest, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Export formats the original's export accepts.
var exportFormats = map[string]bool{"json": true, "jsonl": true}

// Export writes every program with its schedules to path as JSON ("json":
// one object, indent 2) or JSON Lines ("jsonl": one program per line), byte
// for byte as the original did, and returns the absolute path.
func (s *Store) Export(ctx context.Context, path, format string) (string, error) {
	if !exportFormats[format] {
		return "", newError(KindValue, "fmt must be 'json' or 'jsonl', got %s", schedule.Repr(format))
	}
	if err := checkText("output_path", path); err != nil {
		return "", err
	}
	out, err := pypath.Resolve(path)
	if err != nil {
		return "", wrapError(KindOS, err, "cannot resolve export path: %v", err)
	}
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		perr := &fs.PathError{Op: "open", Path: out, Err: syscall.EISDIR}
		return "", wrapError(KindOS, perr, "cannot write export: %v", perr)
	}
	type program struct {
		storage.Program
		results []storage.ScheduleResult
	}
	var progs []program
	err = s.be.EachProgram(ctx, func(p storage.Program, rs []storage.ScheduleResult) error {
		progs = append(progs, program{p, rs})
		return nil
	})
	if err != nil {
		return "", err
	}

	versions := map[string]int{}
	for _, p := range progs {
		versions[p.Name]++
	}
	seen := map[string]int{}
	doc := pyjson.NewObject()
	for _, p := range progs {
		list := make([]any, 0, len(p.results))
		for _, r := range p.results {
			legal, times, err := parseResult(p.Hash, r.ResultJSON)
			if err != nil {
				return "", err
			}
			item := pyjson.NewObject()
			item.Set("schedule_str", r.Schedule)
			item.Set("is_legal", legal)
			item.Set("execution_times", times)
			list = append(list, item)
		}
		entry := pyjson.NewObject()
		entry.Set("Tiramisu_cpp", p.Source)
		entry.Set("schedules_list", list)
		entry.Set("program_name", p.Name)
		name := p.Name
		if versions[p.Name] > 1 {
			seen[p.Name]++
			name = fmt.Sprintf("%s_v%d", p.Name, seen[p.Name])
		}
		doc.Set(name, entry)
	}

	var buf []byte
	if format == "json" {
		b, err := pyjson.Marshal(doc, pyjson.Options{Indent: 2, ItemSep: ",", KeySep: ": "})
		if err != nil {
			return "", wrapError(KindInternal, err, "encode export: %v", err)
		}
		buf = append(b, '\n')
	} else {
		for _, k := range doc.Keys() {
			line := pyjson.NewObject()
			v, _ := doc.Get(k)
			line.Set(k, v)
			b, err := pyjson.Marshal(line, pyjson.Options{Indent: -1, ItemSep: ", ", KeySep: ": "})
			if err != nil {
				return "", wrapError(KindInternal, err, "encode export: %v", err)
			}
			buf = append(append(buf, b...), '\n')
		}
	}
	if err := writeFileAtomic(out, buf); err != nil {
		k, _ := apierr.OSKind(err)
		return "", wrapError(k, err, "cannot write export %s: %v", out, err)
	}
	return out, nil
}

// tempBeside names a private temporary file next to path, so that the
// final rename stays within one directory (and one filesystem).
func tempBeside(path string) string {
	return fmt.Sprintf("%s.tmp-%d-%d", path, os.Getpid(), time.Now().UnixNano())
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// into place, so a reader never sees a half-written export.
func writeFileAtomic(path string, data []byte) error {
	tmp := tempBeside(path)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// fileError classifies an error of a file operation of this layer (a
// backup's rename), naming the database and the operation.
func (s *Store) fileError(err error, op string) error {
	if k, ok := apierr.OSKind(err); ok {
		return wrapError(k, err, "cannot %s %s: %v", op, s.path, err)
	}
	return wrapError(KindInternal, err, "%s: %s: %v", s.path, op, err)
}
