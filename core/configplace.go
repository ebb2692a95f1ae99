package core

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/environ"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/pypath"
	"github.com/tirastore/tirastore/core/shareddir"
	"github.com/tirastore/tirastore/core/storage"
)

// # Where a PersistentCache keeps its entries
//
// ejKernel's PersistentCache (the released package, which its users
// install) puts the cache of operation <opname> in
// $EJKERNEL_PERSISTENT_CACHE_DIR/<opname>.json when that variable is set,
// else in ~/ejkernel-presistent-cache/<opname>.json (its spelling), or in
// the path it is given, "~" expanded, all with pathlib's rules (an
// absolute opname replaces the directory). When that directory cannot be
// made it falls back to ./.ejkernel-presistent-cache, then to
// <tempdir>/ejkernel-presistent-cache, and with none it keeps nothing.
// Its constructor never raises for any of this: ejkernel builds 39 caches
// while it is imported.
//
// ConfigPlace finds the same place, without creating or opening anything
// (a PersistentCache is lazy: its first put creates its files). The
// entries of every operation whose files share a directory live in ONE
// database there, ConfigDBName, each operation in its own namespace, the
// JSON file's stem: 39 operations make one database and one lock, not 39,
// and a legacy <opname>.json is imported once into its namespace.
//
// Who may use the files: a cache is private (0600) unless its directory
// is writable by its group and not by everyone (a group's project
// directory: 0660), or the caller asks for sharing (Shared: the original
// library's 0666). A world-writable directory such as /tmp is not a
// request to share a cache with the world. A private cache uses no
// database and imports no JSON file of another user (root excepted).

// ConfigDBName is the name of the database that holds the entries of
// every PersistentCache whose JSON file is in the same directory.
const ConfigDBName = "persistent-cache.tirastore.db"

// configDirEnv is ejKernel's variable naming the cache directory.
const configDirEnv = "EJKERNEL_PERSISTENT_CACHE_DIR"

// configDirName is the released class's directory, in the home directory
// and in its fallbacks ("./." + it, the temporary directory's).
const configDirName = "ejkernel-presistent-cache"

// ConfigPlaceArgs are a PersistentCache's constructor arguments that say
// where it keeps its entries.
type ConfigPlaceArgs struct {
	Opname string
	// Path is the path argument; PathGiven false means None.
	Path      string
	PathGiven bool
	// Shared: nil lets the directory decide (see above); true shares the
	// files with every user (the original's modes); false keeps them
	// private.
	Shared *bool
}

// ConfigPlace is where a PersistentCache keeps its entries, as found now.
type ConfigPlace struct {
	// DBPath is the database's absolute path, or a server's URL.
	DBPath string
	// JSONPath is the absolute path of the operation's JSON file ("" when
	// the path names the database itself or a server).
	JSONPath string
	// Namespace holds the operation's entries in the database: the JSON
	// file's stem ("" for a database or server named by the path).
	Namespace string
	// Path is what ejKernel's class shows as its path: the JSON file as
	// pathlib spells it (or the path as given for a database or a URL).
	Path string
	// Sharing is the mode of files a first put creates.
	Sharing storage.Sharing
	// DBExists: the database file exists (for a URL: always true, the
	// server says).
	DBExists bool
	// ImportJSON: JSONPath is a regular file to import once.
	ImportJSON bool
	// Disabled, when not "", says why no directory can hold the cache: it
	// keeps its entries in memory only, as the released class does.
	Disabled string
	// Notices are warnings: a fallback directory is used, a JSON file of
	// another user is not imported.
	Notices []string
}

// LocateConfigCache returns where a PersistentCache with these arguments
// keeps its entries now. It creates nothing and opens nothing. Errors are
// for arguments (a NUL, an explicit path that cannot be expanded), and for
// a database a private cache must not use (another user's file).
func LocateConfigCache(a ConfigPlaceArgs) (*ConfigPlace, error) {
	if err := input.Texts("opname", a.Opname, "path", a.Path); err != nil {
		return nil, err
	}
	home, homeSet := environ.Lookup("HOME")
	if a.PathGiven && storage.IsServerURL(a.Path) {
		// A server's URL: the backend refuses what it does not serve.
		return &ConfigPlace{DBPath: a.Path, Path: a.Path, DBExists: true, Sharing: storage.ShareAll}, nil
	}
	leaf := a.Opname + ".json"
	var first string // the released class's first choice, pathlib's spelling
	var firstErr error
	if a.PathGiven {
		p, err := pypath.ExpandUser(a.Path, home, homeSet)
		if err != nil {
			return nil, newError(KindValue, "PersistentCache(): path %q: %v", a.Path, err)
		}
		name := pypath.Name(p)
		if !strings.HasSuffix(name, ".json") || name == ".json" {
			return placeDB(a, p)
		}
		first = p
	} else if dir, ok := environ.Lookup(configDirEnv); ok {
		root, err := pypath.ExpandUser(dir, home, homeSet)
		first, firstErr = pypath.Join(root, leaf), err
	} else {
		h, err := pypath.ExpandUser("~", home, homeSet)
		first, firstErr = pypath.Join(pypath.Join(h, configDirName), leaf), err
	}
	var reasons []string
	candidates := []string{first}
	if cwd, err := os.Getwd(); err == nil {
		candidates = append(candidates, pypath.Join(pypath.Join(cwd, "."+configDirName), leaf))
	}
	if tmp := pyTempDir(); tmp != "" {
		candidates = append(candidates, pypath.Join(pypath.Join(tmp, configDirName), leaf))
	}
	for i, c := range candidates {
		if i == 0 && firstErr != nil {
			reasons = append(reasons, firstErr.Error())
			continue
		}
		dir, why := usableDir(pypath.Parent(c))
		if why != "" {
			reasons = append(reasons, why)
			continue
		}
		// The database's name is vetted as a path argument is: another
		// user's link there is refused, never followed.
		db, err := input.Path("database", filepath.Join(dir, ConfigDBName))
		if err != nil {
			return nil, err
		}
		pl := &ConfigPlace{
			DBPath:    db,
			JSONPath:  filepath.Join(dir, pypath.Name(c)),
			Namespace: strings.TrimSuffix(pypath.Name(c), ".json"),
			Path:      c,
		}
		if i > 0 {
			pl.Notices = append(pl.Notices, fmt.Sprintf("PersistentCache(%q): %s; the cache is kept in %s instead",
				a.Opname, strings.Join(reasons, "; "), dir))
		}
		if err := pl.judge(a.Shared, dir); err != nil {
			return nil, err
		}
		return pl, nil
	}
	return &ConfigPlace{Path: first, Disabled: fmt.Sprintf("PersistentCache(%q): no directory can hold the cache (%s): "+
		"its entries are kept in this process only", a.Opname, strings.Join(reasons, "; "))}, nil
}

// placeDB is the place of a cache whose path names the database itself.
func placeDB(a ConfigPlaceArgs, p string) (*ConfigPlace, error) {
	abs, err := input.Path("path", p)
	if err != nil {
		return nil, err
	}
	pl := &ConfigPlace{DBPath: abs, Path: p}
	return pl, pl.judge(a.Shared, filepath.Dir(abs))
}

// judge sets the sharing of the files the cache creates in dir, and what
// it finds there: the database (refused when a private cache would use
// another user's) and the JSON file to import (only a trusted one).
func (pl *ConfigPlace) judge(shared *bool, dir string) error {
	switch {
	case shared != nil && *shared:
		pl.Sharing = storage.ShareAll
	case shared != nil:
		pl.Sharing = storage.SharePrivate
	default:
		pl.Sharing = storage.SharePrivate
		var st unix.Stat_t
		if unix.Stat(dir, &st) == nil && st.Mode&0o020 != 0 && st.Mode&0o002 == 0 {
			pl.Sharing = storage.ShareGroup
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(pl.DBPath, &st); err == nil {
		pl.DBExists = true
		if !pl.trusts(&st) {
			return newError(KindPermission, "PersistentCache: the database %s belongs to %s, and this cache is private "+
				"(its directory %s is not a group's): use your own directory, or pass shared=True to use another user's database",
				pl.DBPath, identity.Owner(st.Uid), dir)
		}
	}
	if pl.JSONPath == "" {
		return nil
	}
	var js unix.Stat_t
	switch err := unix.Lstat(pl.JSONPath, &js); {
	case err != nil:
	case js.Mode&unix.S_IFMT != unix.S_IFREG:
		pl.Notices = append(pl.Notices, fmt.Sprintf("PersistentCache: %s is not a regular file; it is not imported", pl.JSONPath))
	case !pl.trusts(&js):
		pl.Notices = append(pl.Notices, fmt.Sprintf("PersistentCache: %s belongs to %s, and this cache is private: it is not "+
			"imported (`tirastore config import-ejkernel %s %s --namespace %s` imports it, if you trust it)",
			pl.JSONPath, identity.Owner(js.Uid), pl.DBPath, pl.JSONPath, pl.Namespace))
	default:
		pl.ImportJSON = true
	}
	return nil
}

// trusts reports whether a private cache may use a file: the caller's or
// root's. A shared or group cache uses every file of its directory, whose
// writers it shares with.
func (pl *ConfigPlace) trusts(st *unix.Stat_t) bool {
	return pl.Sharing != storage.SharePrivate || st.Uid == 0 || int(st.Uid) == os.Geteuid()
}

// usableDir is the absolute form of dir if the released class's
// mkdir(parents=True, exist_ok=True) would succeed there (an existing
// directory, or one this process may create), else why not. It creates
// nothing.
func usableDir(dir string) (string, string) {
	abs, err := input.Path("directory", dir)
	if err != nil {
		return "", err.Error()
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return "", fmt.Sprintf("%s is not a directory", p)
		case err == nil && p == abs:
			return abs, ""
		case err == nil:
			if err := shareddir.MayCreateIn(p); err != nil {
				return "", fmt.Sprintf("cannot create %s: %s: %v", abs, p, err)
			}
			return abs, ""
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Sprintf("cannot use %s: %v", abs, err)
		case p == filepath.Dir(p):
			return "", fmt.Sprintf("cannot create %s", abs)
		}
	}
}

// pyTempDir is Python's tempfile.gettempdir(): the first of $TMPDIR,
// $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp and the working directory that is
// a directory this process may create files in ("" if none).
func pyTempDir() string {
	var dirs []string
	for _, env := range []string{"TMPDIR", "TEMP", "TMP"} {
		if v := environ.Get(env); v != "" {
			dirs = append(dirs, v)
		}
	}
	dirs = append(dirs, "/tmp", "/var/tmp", "/usr/tmp")
	if cwd, err := os.Getwd(); err == nil {
		dirs = append(dirs, cwd)
	}
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		if fi, err := os.Stat(abs); err == nil && fi.IsDir() &&
			shareddir.MayCreateIn(abs) == nil {
			return abs
		}
	}
	return ""
}
