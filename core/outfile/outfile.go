// Package outfile is the output-path check and the writing of an output
// file: an output path that is a database or one of its files is refused,
// and an output is written to a temporary file beside it, renamed over it
// when complete (see "Output files"). Every door that writes a file at a
// path the user typed goes through it: core (backup, export_json),
// core/operator (export) and the C method output_create (the CLI's
// conflicts file, a plot).
package outfile

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/shareddir"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/sqlitefile"
	"github.com/tirastore/tirastore/core/storage"
)

// # Output files
//
// Export, backup, export_json, the CLI's conflicts file and plots write a
// file at a path the user typed, by renaming a finished temporary file
// over it. A typo there must not destroy a database: `tirastore export DB
// DB` once renamed a JSON file over the database (its config entries,
// claims and db_meta gone, every open worker failing), and `export DB
// DB.lock` wrote over the lock. So every output path is checked here,
// once for every door (the C methods export, backup, config_export and
// output_create; Python's plot and the CLI ask through the last), and
// refused with a ValueError naming what it is, before anything is written:
//
//   - a database the call uses, or a file of one: the database itself
//     (by name, or the same file under another name: a hard link, a link
//     of the caller, another path to its directory), its journal, -wal
//     and -shm (sqlite.Companions), its lock, break lock, a lock moved
//     aside and any lock ticket file of its directory (sqlitefile.LockNameOf);
//   - the same names of any other database: a name of the lock's family
//     anywhere, the journal of an existing database file;
//   - a file the call reads (the export an import reads);
//   - anything but a regular file (a FIFO, a device: renaming over
//     /dev/null as root would replace it);
//   - another database: an existing file with SQLite's header. Export,
//     export_json, conflicts files and plots write no database, so they
//     never replace one, whatever its tables. A backup writes a database:
//     it replaces an earlier backup of the same database (a TiraStore
//     database with the same db_meta created_at, cpu_model and
//     slurm_cpus, whose lock file does not exist), and nothing else, so
//     that `tirastore backup DB snapshots/` can run every night.
//
// A store on a PostgreSQL server has no files: only the last rules apply.
// The output is then written to a temporary file beside it, created with
// O_CREAT|O_EXCL|O_NOFOLLOW in its directory and given its mode through
// its descriptor (core/shareddir), synced, checked to still be the file at
// the temporary name, and renamed over the path.

// Kind is what an output file is for.
type Kind int

// The output kinds.
const (
	Export       Kind = iota // operator.Export
	Backup                   // core.Store.Backup
	ConfigExport             // core.Store.ConfigExportJSON
	Conflicts                // the CLI's --conflicts file of import and merge
	Plot                     // tirastore.plot.plot_program
)

// outputKinds names each kind: in the C method output_create, in messages,
// and as what writes it.
var outputKinds = [...]struct{ name, label, writer string }{
	Export:       {"export", "export path", "an export"},
	Backup:       {"backup", "backup path", "a backup"},
	ConfigExport: {"config_export", "PersistentCache file", "export_json"},
	Conflicts:    {"conflicts", "conflicts file", "a conflicts file"},
	Plot:         {"plot", "plot file", "a plot"},
}

// ParseKind is the kind called name ("conflicts", "plot", ...).
func ParseKind(name string) (Kind, bool) {
	for k, o := range outputKinds {
		if o.name == name {
			return Kind(k), true
		}
	}
	return 0, false
}

// Given refuses the output path p as the caller gave it when it names,
// through links, an existing pipe, socket or device (/dev/stdout, a
// terminal): an output is written to a new file beside its path and
// renamed into place, which none of these can take, and its resolved path
// (a /proc/<pid>/fd/pipe:[...] link target) says nothing to the user.
// kind is what the output is for.
func Given(kind Kind, p string) error {
	var st unix.Stat_t
	if p == "" || unix.Stat(p, &st) != nil {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
		return nil
	}
	return apierr.New(apierr.KindValue, "%s %s is %s, not a regular file: an output is written to a new file "+
		"beside its path and renamed into place, which a pipe or device cannot take; give a file name, "+
		"refused, nothing was written", outputKinds[kind].label, p, shareddir.Describe(&st))
}

// Check resolves the output path p of kind (as every path argument is
// resolved: core/pypath) and refuses it when writing there would replace
// a database or a file of one (see "Output files"). dbs are the databases
// the call uses (files, or server URLs, which have no files); inputs are
// the files it reads. It returns the absolute path.
func Check(kind Kind, p string, dbs, inputs []string) (string, error) {
	label := outputKinds[kind].label
	if err := Given(kind, p); err != nil {
		return "", err
	}
	out, err := input.File(label, p)
	if err != nil {
		return "", err
	}
	c := &outputCheck{kind: kind, out: out, inputs: inputs}
	for _, db := range dbs {
		if storage.IsServerURL(db) {
			continue
		}
		abs, err := input.Path("database path", db)
		if err != nil {
			return "", err
		}
		c.dbs = append(c.dbs, abs)
	}
	return out, c.run()
}

// CheckResolved is Check of the absolute path out that a store's own call
// writes (export, backup, export_json): db is the store's database file,
// "" for a server's (it has no files); backupOf, for a backup, reads the
// db_meta rows of the database backed up (an earlier backup of it may be
// replaced), else nil.
func CheckResolved(kind Kind, out, db string, backupOf func() (map[string]string, error)) error {
	c := &outputCheck{kind: kind, out: out, backupOf: backupOf}
	if db != "" {
		c.dbs = []string{db}
	}
	return c.run()
}

// outputCheck is one check of an output path.
type outputCheck struct {
	kind   Kind
	out    string   // absolute
	dbs    []string // absolute database files
	inputs []string
	// backupOf, for a backup, reads the db_meta rows of the database
	// backed up: an earlier backup of it (the same rows) may be replaced.
	backupOf func() (map[string]string, error)
}

// refuse is the ValueError of an output that is what.
func (c *outputCheck) refuse(what string) error {
	return apierr.New(apierr.KindValue, "%s %s is %s: refused, nothing was written", outputKinds[c.kind].label, c.out, what)
}

func (c *outputCheck) run() error {
	if failpoint.Enabled(failpoint.OutputTrust) {
		return nil
	}
	var ost unix.Stat_t
	exists := unix.Stat(c.out, &ost) == nil
	for _, db := range c.dbs {
		if what := companionOf(db, c.out, exists, &ost); what != "" {
			return c.refuse(what)
		}
	}
	for _, in := range c.inputs {
		abs, err := input.Path("input path", in)
		if err != nil {
			return err
		}
		if abs == c.out || exists && sameInode(abs, &ost) {
			return c.refuse("the file this call reads (" + abs + ")")
		}
	}
	if what := sqlitefile.CompanionName(c.out); what != "" {
		return c.refuse(what)
	}
	if !exists {
		return nil
	}
	if ost.Mode&unix.S_IFMT != unix.S_IFREG {
		return c.refuse(shareddir.Describe(&ost) + ", not a regular file (an output replaces a regular file or makes a new one)")
	}
	isDB, err := sqlitefile.HasSQLiteHeader(c.out)
	if err != nil {
		k, ok := apierr.OSKind(err)
		if !ok {
			k = apierr.KindOS
		}
		return apierr.Wrap(k, err, "%s %s exists and cannot be read to tell whether it is a database: %v; "+
			"refused, nothing was written", outputKinds[c.kind].label, c.out, err)
	}
	if !isDB {
		return nil
	}
	if c.kind != Backup || c.backupOf == nil {
		return c.refuse(fmt.Sprintf("an existing SQLite database: %s never replaces a database (choose another name)",
			outputKinds[c.kind].writer))
	}
	return c.earlierBackup()
}

// earlierBackup refuses a backup's existing database file unless it is an
// earlier backup of the same database, not in use.
func (c *outputCheck) earlierBackup() error {
	info, err := sqlite.Identify(c.out)
	if err != nil {
		return c.refuse(fmt.Sprintf("an existing SQLite database that cannot be read (%v): a backup replaces only "+
			"an earlier backup of this database", err))
	}
	if !info.TiraStore {
		return c.refuse("an existing SQLite database that is not a TiraStore database: a backup replaces only " +
			"an earlier backup of this database")
	}
	mine, err := c.backupOf()
	if err != nil {
		return err
	}
	for _, k := range []string{"created_at", "cpu_model", "slurm_cpus"} {
		if info.Meta[k] != mine[k] {
			return c.refuse(fmt.Sprintf("another TiraStore database (its %s is %q, this database's %q): a backup "+
				"replaces only an earlier backup of this database", k, info.Meta[k], mine[k]))
		}
	}
	if lp, err := sqlitefile.LockPathFor(c.out); err == nil {
		if _, err := os.Lstat(lp); err == nil {
			return c.refuse(fmt.Sprintf("a TiraStore database in use (its lock file %s exists)", lp))
		}
	}
	return nil
}

// companionOf says what out is to the database db: the database itself, a
// file SQLite or the lock keeps beside it, or "" (neither). exists and ost
// are out's stat.
func companionOf(db, out string, exists bool, ost *unix.Stat_t) string {
	files := append([]sqlite.Companion{{Path: db, What: "the database itself"}}, sqlite.Companions(db)...)
	lp, lerr := sqlitefile.LockPathFor(db)
	if lerr == nil {
		files = append(files, sqlite.Companion{Path: lp, What: "the lock file"},
			sqlite.Companion{Path: lp + sqlitefile.LockBreakSuffix, What: "the break lock"})
	}
	of := func(what string) string {
		if what == "the database itself" {
			return what + " (" + db + ")"
		}
		return what + " of the database " + db
	}
	dir, base := filepath.Split(out)
	if sameDir(filepath.Clean(dir), filepath.Dir(db)) {
		for _, f := range files {
			if base == filepath.Base(f.Path) {
				return of(f.What)
			}
		}
		if lerr == nil {
			if what := sqlitefile.LockNameOf(lp, base); what != "" {
				return of(what)
			}
		}
	}
	if exists {
		for _, f := range files {
			if sameInode(f.Path, ost) {
				if f.Path == db {
					return "the database " + db + " itself under another name (the same file)"
				}
				return of(f.What) + " under another name (the same file as " + f.Path + ")"
			}
		}
	}
	return ""
}

// sameDir reports whether the directories a and b are one: the same path,
// or the same directory reached by another path (a bind mount).
func sameDir(a, b string) bool {
	if a == b {
		return true
	}
	var st unix.Stat_t
	return unix.Stat(a, &st) == nil && sameInode(b, &st)
}

// sameInode reports whether path names the file whose stat is st.
func sameInode(path string, st *unix.Stat_t) bool {
	var o unix.Stat_t
	return unix.Stat(path, &o) == nil && o.Dev == st.Dev && o.Ino == st.Ino
}

// Output is an output file being written: a temporary file beside its
// path (see "Output files"), renamed over the path by Commit.
type Output struct {
	// Path is the absolute output path; File the temporary file, open
	// read-write.
	Path string
	File *os.File
	tmp  string
	done bool
}

// PermFor is the mode of an output made from the databases dbs (file
// paths; a server's URL counts as shared): 0666 narrowed to what each
// database file lets others do, so that an export, a conflicts file or a
// plot of a private (0600) database is private too, whatever the umask.
// The umask applies on top.
func PermFor(dbs ...string) uint32 {
	perm := uint32(0o666)
	for _, db := range dbs {
		var st unix.Stat_t
		if unix.Stat(db, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			perm &= st.Mode & 0o666
		}
	}
	return perm
}

// Create checks the output path p of kind (Check) and creates its
// temporary file, mode PermFor(dbs) less the umask: for a binding that
// writes the contents itself (the CLI's conflicts file, a plot) through
// the file's descriptor, then commits or aborts.
func Create(kind Kind, p string, dbs, inputs []string) (*Output, error) {
	out, err := Check(kind, p, dbs, inputs)
	if err != nil {
		return nil, err
	}
	o, err := CreateResolved(out, PermFor(dbs...), false)
	if err != nil {
		return nil, WriteError(err, outputKinds[kind].label, out)
	}
	return o, nil
}

// CreateResolved creates the temporary file of the output out, checked
// already (CheckResolved), with mode perm exactly when exact (a backup has
// its database's mode), else perm less the umask.
func CreateResolved(out string, perm uint32, exact bool) (*Output, error) {
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: out, Err: unix.EISDIR}
	}
	tmp := tempBeside(out)
	create := shareddir.CreateUmask
	if exact {
		create = shareddir.Create
	}
	f, err := create(tmp, os.O_RDWR, perm)
	if err != nil {
		return nil, err
	}
	return &Output{Path: out, File: f, tmp: tmp}, nil
}

// Temp is the temporary file's path: for a writer that fills it by name
// (a backend's backup writes a database there).
func (o *Output) Temp() string { return o.tmp }

// Commit syncs the temporary file, checks that its name still names it
// (nobody replaced it meanwhile), closes it and renames it over Path; on
// failure the temporary file is removed.
func (o *Output) Commit() error {
	if o.done {
		return fmt.Errorf("%s: already committed or aborted", o.Path)
	}
	o.done = true
	mine := o.ours()
	err := o.File.Sync()
	if err == nil && !mine {
		err = fmt.Errorf("%s is no longer the file this call wrote", o.tmp)
	}
	if cerr := o.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(o.tmp, o.Path)
	}
	if err != nil && mine {
		os.Remove(o.tmp)
	}
	return err
}

// Abort closes and removes the temporary file (after Commit: nothing).
func (o *Output) Abort() {
	if o.done {
		return
	}
	o.done = true
	if o.ours() {
		os.Remove(o.tmp)
	}
	o.File.Close()
}

// ours reports whether the temporary name still names the open file.
func (o *Output) ours() bool {
	var st, lst unix.Stat_t
	return unix.Fstat(int(o.File.Fd()), &st) == nil && unix.Lstat(o.tmp, &lst) == nil &&
		lst.Dev == st.Dev && lst.Ino == st.Ino
}

// tempBeside names a private temporary file next to path, so that the
// final rename stays within one directory (and one filesystem).
func tempBeside(path string) string {
	return fmt.Sprintf("%s.tmp-%d-%d", path, os.Getpid(), time.Now().UnixNano())
}

// WriteReplacing writes the file out through fill, into a temporary file
// beside it (CreateResolved: mode perm less the umask; PermFor the
// databases it comes from) that is synced and
// renamed over out: readers of out see the old file or the whole new one,
// never a part. The caller has checked out (CheckResolved).
func WriteReplacing(out string, perm uint32, fill func(w *bufio.Writer) error) error {
	o, err := CreateResolved(out, perm, false)
	if err != nil {
		return err
	}
	defer o.Abort() // after the commit: nothing
	w := bufio.NewWriterSize(o.File, 1<<20)
	if err := fill(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return o.Commit()
}

// WriteError is the error of writing the file out, which holds what (an
// *apierr.Error from below passes unchanged).
func WriteError(err error, what, out string) error {
	var e *apierr.Error
	if errors.As(err, &e) {
		return err
	}
	k, _ := apierr.OSKind(err)
	return apierr.Wrap(k, err, "cannot write %s %s: %v", what, out, err)
}
