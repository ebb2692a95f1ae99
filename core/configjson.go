package core

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/outfile"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/shareddir"
	"github.com/tirastore/tirastore/core/storage"
)

// # The seed's JSON files
//
// ejKernel's PersistentCache keeps one JSON object per cache file, {key:
// value} with the key "device|op_id|call_key", written by json.dump. An
// existing file is the only copy of hours of tuning, and old readers may
// still read it during a migration, so the engine never rewrites it on its
// own: ConfigImportJSON copies it into a namespace of the table in one
// transaction and remembers it (path, size, mtime, SHA-256) in
// config_imports, so that an automatic import (once) happens once and
// never twice; ConfigExportJSON writes a namespace back in the seed's
// format when a user asks for it.

// ConfigImportResult says what ConfigImportJSON did.
type ConfigImportResult struct {
	// Path is the file's absolute path; Found is false when it does not
	// exist (once only: nothing to import).
	Path  string
	Found bool
	// Entries is the number of entries in the file; Added are new keys,
	// Replaced existing keys overwritten, Kept existing keys left as they
	// were (no overwrite).
	Entries, Added, Replaced, Kept int64
	// Skipped: once, and the file was imported before (ImportedAt, by
	// ImportedBy); nothing was read into the table. Changed: the file is
	// no longer what was imported then (an old writer went on writing it).
	Skipped, Changed       bool
	ImportedAt, ImportedBy string
	// Notice is what to tell the user when Changed (a warning).
	Notice string
}

// seedFile is a seed JSON file read whole: its entries and what
// config_imports remembers of it.
type seedFile struct {
	entries []*storage.ConfigEntry
	mark    storage.ConfigImport
}

// ConfigImportJSON imports the seed JSON file path into namespace of the
// kernel-config table in one transaction, all or nothing: with overwrite
// an entry of the file replaces the namespace's entry of its key, else
// the namespace's stays. With
// once (PersistentCache's constructor) a missing file is no error, and a
// file imported before (by any process, under any options) is not read
// again: the result says Skipped, and Changed when the file changed since.
// Every import is remembered, so that a later once import skips it; the
// record is the file's (by its path), whatever the namespace: ejKernel's
// caches each import their own <opname>.json into their own namespace.
//
// A key is split at its first two "|" into device, op_id and call_key (the
// seed joins them with "|", so a device or op_id holding "|" cannot be told
// apart; the key itself is kept exactly). Entries are stamped with this
// host, user and time.
func (s *Store) ConfigImportJSON(ctx context.Context, namespace, path string, once, overwrite bool) (*ConfigImportResult, error) {
	if err := input.Text("namespace", namespace); err != nil {
		return nil, err
	}
	abs, err := input.File("path", path)
	if err != nil {
		return nil, err
	}
	res := &ConfigImportResult{Path: abs}
	fi, err := statSeedFile(abs)
	if once && errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	res.Found = true
	if once {
		var mark *storage.ConfigImport
		err := s.be.View(ctx, "config import", func(r storage.Reader) (err error) {
			mark, err = r.ConfigImported(abs)
			return err
		})
		if err != nil {
			return nil, err
		}
		if mark != nil {
			return s.skipped(res, mark, fi)
		}
	}
	f, err := s.readSeedFile(namespace, abs)
	if err != nil {
		return nil, err
	}
	res.Entries = int64(len(f.entries))
	var mark *storage.ConfigImport
	err = s.be.Update(ctx, "config import", func(w storage.Writer) error {
		res.Added, res.Replaced, res.Kept = 0, 0, 0
		var err error
		if once {
			// Another process may have imported it since the look above.
			if mark, err = w.ConfigImported(abs); err != nil || mark != nil {
				return err
			}
		}
		before, err := w.CountConfigs(namespace)
		if err != nil {
			return err
		}
		var wrote int64
		for _, e := range f.entries {
			ok, err := w.PutConfig(e, overwrite)
			if err != nil {
				return err
			}
			if ok {
				wrote++
			}
		}
		after, err := w.CountConfigs(namespace)
		if err != nil {
			return err
		}
		res.Added = after - before
		res.Replaced = wrote - res.Added
		res.Kept = res.Entries - wrote
		return w.PutConfigImport(&f.mark)
	})
	if err != nil {
		return nil, err
	}
	if mark != nil {
		return s.skipped(res, mark, fi)
	}
	res.ImportedAt, res.ImportedBy = f.mark.ImportedAt, f.mark.Username+"@"+f.mark.Hostname
	return res, nil
}

// skipped fills res for a once import of a file imported before, as mark
// says; fi is the file's status now.
func (s *Store) skipped(res *ConfigImportResult, mark *storage.ConfigImport, fi os.FileInfo) (*ConfigImportResult, error) {
	res.Skipped = true
	res.Entries, res.ImportedAt, res.ImportedBy = mark.Entries, mark.ImportedAt, mark.Username+"@"+mark.Hostname
	if fi.Size() != mark.Size || fi.ModTime().UnixNano() != mark.MtimeNS {
		// Touched or rewritten: only its bytes tell.
		sum, err := fileSHA256(res.Path)
		if err != nil {
			return nil, input.ReadError(err, "PersistentCache file", res.Path)
		}
		res.Changed = sum != mark.SHA256
	}
	if res.Changed {
		res.Notice = fmt.Sprintf("%s changed since it was imported into %s (%s, by %s): entries written to it "+
			"since then are not in the cache; import_json() imports them (the cache's own entries are kept)",
			res.Path, s.path, res.ImportedAt, res.ImportedBy)
	}
	return res, nil
}

// fileSHA256 is the hex SHA-256 of the file's bytes. The file is opened
// as every file beside a database is (core/shareddir): a FIFO planted at
// its name is refused, not waited on.
func fileSHA256(path string) (string, error) {
	f, _, err := shareddir.Open(path, os.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readSeedFile reads and checks a whole seed JSON file: one object of
// "device|op_id|call_key" keys, its entries made for namespace. The seed
// replaces its file by rename, so one open file is one consistent version of
// it. It is opened as every file beside a database is (core/shareddir): never
// blocking on a FIFO, never through a link at its name.
func (s *Store) readSeedFile(namespace, path string) (*seedFile, error) {
	return readSeedFile(namespace, path, s.hostname, s.username)
}

// CheckConfigImport is the error ConfigImportJSON (not once) would give
// for the seed file path before it writes anything: the file cannot be
// read, or is not a seed file of entries valid in namespace. A command
// that creates its database refuses the input first.
func CheckConfigImport(namespace, path string) error {
	if err := input.Text("namespace", namespace); err != nil {
		return err
	}
	abs, err := input.File("path", path)
	if err != nil {
		return err
	}
	if _, err := statSeedFile(abs); err != nil {
		return err
	}
	_, err = readSeedFile(namespace, abs, "", "")
	return err
}

// statSeedFile is the status of the seed file at abs, or why it cannot be
// read (missing: an error that is fs.ErrNotExist; a directory).
func statSeedFile(abs string) (os.FileInfo, error) {
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, input.ReadError(err, "PersistentCache file", abs)
	}
	if fi.IsDir() {
		return nil, input.ReadError(&fs.PathError{Op: "open", Path: abs, Err: syscall.EISDIR}, "PersistentCache file", abs)
	}
	return fi, nil
}

// readSeedFile is Store.readSeedFile with the entries stamped by hostname
// and username.
func readSeedFile(namespace, path, hostname, username string) (*seedFile, error) {
	fh, st, err := shareddir.Open(path, os.O_RDONLY)
	var refused *shareddir.Refused
	if errors.As(err, &refused) {
		return nil, newError(KindOS, "%s is %s, not a regular file: a PersistentCache file is read from a regular "+
			"file (write a stream to a file first; a file another user planted at that name is its owner's or "+
			"root's to remove)", path, refused.What)
	}
	if err != nil {
		return nil, input.ReadError(err, "PersistentCache file", path)
	}
	defer fh.Close()
	data, err := io.ReadAll(fh)
	if err != nil {
		return nil, input.ReadError(err, "PersistentCache file", path)
	}
	v, err := pyjson.Parse(data)
	if err != nil {
		return nil, wrapError(KindValue, err, "%s is not a PersistentCache file: %v", path, err)
	}
	obj, ok := v.(*pyjson.Object)
	if !ok {
		return nil, newError(KindValue, "%s is not a PersistentCache file: its top level is not an object", path)
	}
	now := time.Now()
	stamp := identity.NowISO(now)
	sum := sha256.Sum256(data)
	f := &seedFile{mark: storage.ConfigImport{Path: path, Size: int64(len(data)), MtimeNS: st.Mtim.Nano(),
		SHA256: hex.EncodeToString(sum[:]), Entries: int64(obj.Len()), ImportedAt: stamp,
		Hostname: hostname, Username: username}}
	var bad error
	obj.Range(func(key string, val any) bool {
		parts := strings.SplitN(key, "|", 3)
		if len(parts) != 3 {
			bad = newError(KindValue, "%s: key %s is not \"device|op_id|call_key\"", path, schedule.Repr(key))
			return false
		}
		if bad = checkConfigRef(namespace, parts[0], parts[1], parts[2]); bad != nil {
			bad = wrapError(KindValue, bad, "%s: key %s: %v", path, schedule.Repr(key), bad)
			return false
		}
		b, err := pyjson.Marshal(val, pyjson.Compact)
		if err != nil {
			bad = wrapError(KindValue, err, "%s: key %s: %v", path, schedule.Repr(key), err)
			return false
		}
		if d, over := limits.TooDeep(b); over {
			bad = TooDeepToStore(fmt.Sprintf("%s: key %s: the value", path, schedule.Repr(key)), d)
			return false
		}
		f.entries = append(f.entries, &storage.ConfigEntry{Namespace: namespace, Key: key, Device: parts[0], OpID: parts[1],
			CallKey: parts[2], ValueJSON: string(b), Hostname: hostname, Username: username,
			CreationDate: stamp, UpdateDate: stamp})
		return true
	})
	if bad != nil {
		return nil, bad
	}
	return f, nil
}

// ConfigExportJSON writes every config entry of namespace to path in the
// seed's format (json.dump's: one object {key: value}, by key, separators
// ", " and ": "), replacing the file atomically as the seed did, and
// returns the absolute path and the number of entries. path must pass the
// output check (see "Output files": never the database or a file of it,
// nor another database). The file is then remembered as imported (see
// ConfigImportJSON), in the same transaction.
func (s *Store) ConfigExportJSON(ctx context.Context, namespace, path string) (string, int64, error) {
	if err := input.Text("namespace", namespace); err != nil {
		return "", 0, err
	}
	if err := outfile.Given(outfile.ConfigExport, path); err != nil {
		return "", 0, err
	}
	out, err := input.File("output_path", path)
	if err != nil {
		return "", 0, err
	}
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		perr := &fs.PathError{Op: "open", Path: out, Err: syscall.EISDIR}
		return "", 0, wrapError(KindOS, perr, "cannot write PersistentCache file: %v", perr)
	}
	if err := s.CheckOutput(outfile.ConfigExport, out, nil); err != nil {
		return "", 0, err
	}
	var n int64
	err = s.be.Update(ctx, "config export", func(w storage.Writer) error {
		n = 0
		err := outfile.WriteReplacing(out, outfile.PermFor(s.path), func(bw *bufio.Writer) error {
			err := w.EachConfig(storage.ConfigFilter{Namespace: namespace}, func(e *storage.ConfigEntry) error {
				v, err := pyjson.Parse([]byte(e.ValueJSON))
				if err == nil {
					k, _ := pyjson.Marshal(e.Key, pyjson.Default)
					var b []byte
					if b, err = pyjson.Marshal(v, pyjson.Default); err == nil {
						sep := ", "
						if n == 0 {
							sep = "{"
						}
						_, err = bw.WriteString(sep + string(k) + ": " + string(b))
					}
				}
				if err != nil {
					return wrapError(KindInternal, err, "config %s: %v", storage.ConfigName(e.Namespace, e.Key), err)
				}
				n++
				return nil
			})
			if err == nil && n == 0 {
				err = bw.WriteByte('{')
			}
			if err == nil {
				err = bw.WriteByte('}')
			}
			return err
		})
		if err != nil {
			return outfile.WriteError(err, "PersistentCache file", out)
		}
		// What the file holds came from the table: remembered as imported,
		// so that opening a cache on it neither imports it (which would
		// bring back entries deleted since) nor reports it changed.
		fresh, err := s.readSeedFile(namespace, out)
		if err != nil {
			return err
		}
		return w.PutConfigImport(&fresh.mark)
	})
	if err != nil {
		return "", 0, err
	}
	return out, n, nil
}
