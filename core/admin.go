package core

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/outfile"
	"github.com/tirastore/tirastore/core/postgres"
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
	if d, over := limits.TooDeep(resultJSON); over {
		return false, tooDeepToStore("record "+key+": result_json", d)
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
// file of the database's name, as does a path ending in "/", and a missing
// directory is created. dest must pass the output check (see "Output
// files": never the database or a file of it, never another database but
// an earlier backup of this one). The copy is made under the lock (so it
// never contains half a transaction), written to a temporary file that has
// the database's mode from its creation, and renamed into place, so dest
// is never seen half-written.
func (s *Store) Backup(ctx context.Context, dest string) (string, error) {
	if err := checkText("backup_path", dest); err != nil {
		return "", err
	}
	// A server's database is backed up into a SQLite file named after it,
	// in the working directory (it is beside no file).
	dir, base := filepath.Dir(s.path), filepath.Base(s.path)
	if s.IsServer() {
		dir, base = ".", postgres.DatabaseName(s.path)+".db"
	}
	if dest == "" {
		stamp := time.Now().UTC().Format("20060102T150405Z")
		dest = filepath.Join(dir, pypath.Stem(base)+"_"+stamp+".db")
	}
	intoDir := strings.HasSuffix(dest, "/") // "snapshots/": a directory, created if missing
	dest, err := resolvePath("backup path", dest)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(dest); intoDir || err == nil && fi.IsDir() {
		dest = filepath.Join(dest, base)
	}
	backupOf := func() (map[string]string, error) {
		meta := map[string]string{}
		for _, k := range []string{"created_at", "cpu_model", "slurm_cpus"} {
			v, err := s.meta(ctx, k)
			if err != nil {
				return nil, err
			}
			meta[k] = str(v)
		}
		return meta, nil
	}
	if err := s.checkOutput(outfile.Backup, dest, backupOf); err != nil {
		return "", err
	}
	// As opening a database creates its directory, so does a backup.
	if err := os.MkdirAll(filepath.Dir(dest), 0o777); err != nil {
		k, _ := apierr.OSKind(err)
		return "", wrapError(k, err, "cannot back up to %s: %v", dest, err)
	}
	// The copy has the database's mode (a shared database's backup stays
	// shared), set through the new file's descriptor.
	perm, exact := uint32(0o666), false
	if fi, err := os.Stat(s.path); err == nil && !s.IsServer() {
		perm, exact = uint32(fi.Mode().Perm()), true
	}
	out, err := outfile.CreateResolved(dest, perm, exact)
	if err != nil {
		return "", outfile.WriteError(err, "backup", dest)
	}
	defer out.Abort()
	if err := s.be.Backup(ctx, out.Temp()); err != nil {
		return "", err
	}
	if err := out.Commit(); err != nil {
		return "", s.fileError(err, "back up")
	}
	return dest, nil
}

// Export formats the original's export accepts.
var exportFormats = map[string]bool{"json": true, "jsonl": true}

// Export writes every program with its schedules to path as JSON ("json":
// one object, indent 2) or JSON Lines ("jsonl": one program per line), byte
// for byte as the original did, and returns the absolute path. path must
// pass the output check (see "Output files": never the database or a file
// of it, nor another database).
func (s *Store) Export(ctx context.Context, path, format string) (string, error) {
	if !exportFormats[format] {
		return "", newError(KindValue, "fmt must be 'json' or 'jsonl', got %s", schedule.Repr(format))
	}
	if err := checkText("output_path", path); err != nil {
		return "", err
	}
	out, err := resolvePath("export path", path)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		perr := &fs.PathError{Op: "open", Path: out, Err: syscall.EISDIR}
		return "", wrapError(KindOS, perr, "cannot write export: %v", perr)
	}
	if err := s.checkOutput(outfile.Export, out, nil); err != nil {
		return "", err
	}
	err = outfile.WriteReplacing(out, func(w *bufio.Writer) error {
		ew := &exportWriter{w: w, json: format == "json"}
		err := s.be.EachProgram(ctx, ew.program)
		if err == nil {
			err = ew.finish()
		}
		if ew.err != nil {
			err = ew.err
		}
		return err
	})
	if err != nil {
		return "", outfile.WriteError(err, "export", out)
	}
	return out, nil
}

// exportWriter writes an export while the backend scans the programs, in
// the original's format: a program name with several source versions
// becomes <name>_v1, <name>_v2, ... (in hash order); the versions of one
// name come one after another in the scan (by name, then hash), so only
// they are held in memory at once.
type exportWriter struct {
	w     *bufio.Writer
	json  bool   // "json" (one object, indent 2), else "jsonl"
	name  string // the name of the entries in group
	group []any  // the entries of name, not written yet
	n     int    // entries written
	err   error  // the first write error (the scan then stops)
}

// errExportWrite stops the scan after a write error (exportWriter.err).
var errExportWrite = errors.New("export write failed")

// exportJSON is json.dumps(indent=2) as the original wrote it; exportLine
// is the json.dumps default of each JSON Lines line.
var (
	exportJSON = pyjson.Options{Indent: 2, ItemSep: ",", KeySep: ": "}
	exportLine = pyjson.Options{Indent: -1, ItemSep: ", ", KeySep: ": "}
)

// program takes the next program of the scan.
func (ew *exportWriter) program(p storage.Program, rs []storage.ScheduleResult) error {
	if len(ew.group) > 0 && p.Name != ew.name {
		if err := ew.flush(); err != nil {
			return err
		}
	}
	list := make([]any, 0, len(rs))
	for _, r := range rs {
		legal, times, err := parseResult(p.Hash, r.ResultJSON)
		if err != nil {
			return err
		}
		item := pyjson.NewObjectCap(3)
		item.Set("schedule_str", r.Schedule)
		item.Set("is_legal", legal)
		item.Set("execution_times", times)
		list = append(list, item)
	}
	entry := pyjson.NewObjectCap(3)
	entry.Set("Tiramisu_cpp", p.Source)
	entry.Set("schedules_list", list)
	entry.Set("program_name", p.Name)
	ew.name, ew.group = p.Name, append(ew.group, entry)
	return nil
}

// flush writes the entries of one name.
func (ew *exportWriter) flush() error {
	for i, entry := range ew.group {
		key := ew.name
		if len(ew.group) > 1 {
			key = fmt.Sprintf("%s_v%d", ew.name, i+1)
		}
		if err := ew.entry(key, entry); err != nil {
			return err
		}
	}
	ew.group = ew.group[:0]
	return nil
}

// entry writes one top-level key and its value.
func (ew *exportWriter) entry(key string, v any) error {
	var b []byte
	if ew.json {
		k, err := pyjson.Marshal(key, exportJSON)
		if err != nil {
			return wrapError(KindInternal, err, "encode export: %v", err)
		}
		val, err := pyjson.Marshal(v, exportJSON)
		if err != nil {
			return wrapError(KindInternal, err, "encode export: %v", err)
		}
		sep := ",\n  "
		if ew.n == 0 {
			sep = "{\n  "
		}
		b = append(append(append([]byte(sep), k...), ": "...), nest(val)...)
	} else {
		line := pyjson.NewObjectCap(1)
		line.Set(key, v)
		l, err := pyjson.Marshal(line, exportLine)
		if err != nil {
			return wrapError(KindInternal, err, "encode export: %v", err)
		}
		b = append(l, '\n')
	}
	ew.n++
	return ew.write(b)
}

// nest indents a value written at the top level by one more level: every
// line after the first gains the indent (strings hold no raw newlines: JSON
// escapes them).
func nest(val []byte) []byte {
	return bytes.ReplaceAll(val, []byte("\n"), []byte("\n  "))
}

// finish writes the last name's entries and the end of the document.
func (ew *exportWriter) finish() error {
	if err := ew.flush(); err != nil {
		return err
	}
	if ew.json {
		end := "\n}\n"
		if ew.n == 0 {
			end = "{}\n"
		}
		if err := ew.write([]byte(end)); err != nil {
			return err
		}
	}
	if err := ew.w.Flush(); err != nil {
		ew.err = err
		return errExportWrite
	}
	return nil
}

func (ew *exportWriter) write(b []byte) error {
	if _, err := ew.w.Write(b); err != nil {
		ew.err = err
		return errExportWrite
	}
	return nil
}

// checkOutput is outfile.CheckResolved of the absolute path out for this
// store's database.
func (s *Store) checkOutput(kind outfile.Kind, out string, backupOf func() (map[string]string, error)) error {
	db := s.path
	if s.IsServer() {
		db = ""
	}
	return outfile.CheckResolved(kind, out, db, backupOf)
}

// fileError classifies an error of a file operation of this layer (a
// backup's rename), naming the database and the operation.
func (s *Store) fileError(err error, op string) error {
	if k, ok := apierr.OSKind(err); ok {
		return wrapError(k, err, "cannot %s %s: %v", op, s.path, err)
	}
	return wrapError(KindInternal, err, "%s: %s: %v", s.path, op, err)
}
