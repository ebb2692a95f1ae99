package lock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// PathFor returns the lock path of a database, as the original computes it:
// Path(db).resolve().with_suffix(".db.lock"). It must agree byte for byte,
// or Go and Python workers would lock different files for the same database.
//
// cache.db -> cache.db.lock, cache.sqlite -> cache.db.lock,
// cache -> cache.db.lock, a.b.c -> a.b.db.lock, .hidden -> .hidden.db.lock.
// The path is first made absolute with symlinks of its existing prefix
// resolved, like Python's non-strict resolve(); the database need not exist.
func PathFor(dbPath string) (string, error) {
	p, err := resolve(dbPath)
	if err != nil {
		return "", err
	}
	return withSuffix(p, ".db.lock")
}

// resolve is pathlib.Path.resolve(strict=False) of Python 3.11: a
// left-to-right walk that follows each existing symlink, applies ".." to the
// path resolved so far, and keeps missing components as they are.
func resolve(p string) (string, error) {
	if p == "" {
		p = "." // Path("") is Path(".")
	}
	if !filepath.IsAbs(p) {
		// The physical working directory, as os.getcwd() returns it; Go's
		// os.Getwd may return $PWD, a path through symlinks.
		wd, err := syscall.Getwd()
		if err != nil {
			return "", fmt.Errorf("lock: resolve %q: %w", p, err)
		}
		p = wd + "/" + p
	}
	r := &resolver{seen: map[string]*string{}}
	out, ok := r.join("/", p)
	if !ok {
		// A symlink loop: Python's resolve() raises RuntimeError.
		return "", fmt.Errorf("lock: resolve %q: symlink loop at %s", p, out)
	}
	out = filepath.Clean(out)
	if _, err := os.Stat(out); errors.Is(err, syscall.ELOOP) {
		return "", fmt.Errorf("lock: resolve %q: %w", p, err)
	}
	return out, nil
}

type resolver struct {
	seen map[string]*string // symlink path -> resolution (nil while in progress)
}

// join resolves rest relative to the already resolved absolute path base.
func (r *resolver) join(base, rest string) (string, bool) {
	path := base
	if strings.HasPrefix(rest, "/") {
		path = "/"
	}
	for rest != "" {
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		switch name {
		case "", ".":
			continue
		case "..":
			path = filepath.Dir(path)
			continue
		}
		next := filepath.Join(path, name)
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			path = next
			continue
		}
		if res, seen := r.seen[next]; seen {
			if res != nil {
				path = *res
				continue
			}
			return filepath.Join(next, rest), false // loop
		}
		r.seen[next] = nil
		target, err := os.Readlink(next)
		if err != nil {
			path = next
			continue
		}
		var ok bool
		path, ok = r.join(path, target)
		if !ok {
			return filepath.Join(path, rest), false
		}
		res := path
		r.seen[next] = &res
	}
	return path, true
}

// withSuffix is PurePath.with_suffix: the suffix is the name's text from its
// last '.', unless that dot is the first or the last character of the name.
func withSuffix(p, suffix string) (string, error) {
	dir, name := filepath.Split(p)
	if name == "" {
		return "", fmt.Errorf("lock: %q has an empty name", p)
	}
	if i := strings.LastIndexByte(name, '.'); i > 0 && i < len(name)-1 {
		name = name[:i]
	}
	return dir + name + suffix, nil
}

// dirOf is the directory that holds the lock and the claims.
func dirOf(lockPath string) string { return filepath.Dir(lockPath) }
