package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/outfile"
	"github.com/tirastore/tirastore/core/pypath"
	"github.com/tirastore/tirastore/core/storage"
)

// Put is the original's low-level insert/update by raw key (admin use). The
// program must already exist; result_json must be a JSON object so that
// later lookups can read it.
func (s *Store) Put(ctx context.Context, key, programHash, sched, resultJSON string, overwrite bool) (bool, error) {
	if err := input.Texts("key", key, "program_hash", programHash, "schedule", sched, "result_json", resultJSON); err != nil {
		return false, err
	}
	if err := s.CheckWrites(); err != nil {
		return false, err
	}
	if d, over := limits.TooDeep(resultJSON); over {
		return false, TooDeepToStore("record "+key+": result_json", d)
	}
	if _, _, err := ParseResult(key, resultJSON); err != nil {
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
	if err := input.Text("key", key); err != nil {
		return false, err
	}
	if err := s.CheckWrites(); err != nil {
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
	if err := input.Text("backup_path", dest); err != nil {
		return "", err
	}
	// A server's database is backed up into a SQLite file named after it,
	// in the working directory (it is beside no file).
	dir, base := filepath.Dir(s.path), filepath.Base(s.path)
	if srv, ok := s.be.(storage.OnServer); ok {
		dir, base = ".", srv.DatabaseName()+".db"
	}
	if dest == "" {
		stamp := time.Now().UTC().Format("20060102T150405Z")
		dest = filepath.Join(dir, pypath.Stem(base)+"_"+stamp+".db")
	}
	intoDir := strings.HasSuffix(dest, "/") // "snapshots/": a directory, created if missing
	if err := outfile.Given(outfile.Backup, dest); err != nil {
		return "", err
	}
	dest, err := input.Path("backup path", dest)
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
			if v != nil {
				meta[k] = *v
			}
		}
		return meta, nil
	}
	if err := s.CheckOutput(outfile.Backup, dest, backupOf); err != nil {
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

// CheckOutput is outfile.CheckResolved of the absolute path out for this
// store's database (none for a server's, which has no files): the check
// of every file a store's method or an operator's tool writes for it.
func (s *Store) CheckOutput(kind outfile.Kind, out string, backupOf func() (map[string]string, error)) error {
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
