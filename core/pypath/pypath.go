// Package pypath gives Go the pathlib semantics the original library used
// for file names: where the database resolves to, where its lock lives
// (with_suffix), what a backup is named (stem). They must agree with
// Python byte for byte, or old and new workers would use different files
// for the same database.
package pypath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Resolve is pathlib.Path.resolve(strict=False) of Python 3.11: a
// left-to-right walk that follows each existing symlink, applies ".." to the
// path resolved so far, and keeps missing components as they are.
func Resolve(p string) (string, error) {
	if p == "" {
		p = "." // Path("") is Path(".")
	}
	if !filepath.IsAbs(p) {
		// The physical working directory, as os.getcwd() returns it; Go's
		// os.Getwd may return $PWD, a path through symlinks.
		wd, err := syscall.Getwd()
		if err != nil {
			return "", fmt.Errorf("resolve %q: %w", p, err)
		}
		p = wd + "/" + p
	}
	r := &resolver{seen: map[string]*string{}}
	out, ok := r.join("/", p)
	if !ok {
		// A symlink loop: Python's resolve() raises RuntimeError.
		return "", fmt.Errorf("resolve %q: symlink loop at %s", p, out)
	}
	out = filepath.Clean(out)
	if _, err := os.Stat(out); errors.Is(err, syscall.ELOOP) {
		return "", fmt.Errorf("resolve %q: %w", p, err)
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

// WithSuffix is PurePath.with_suffix: the suffix is the name's text from its
// last '.', unless that dot is the first or the last character of the name.
func WithSuffix(p, suffix string) (string, error) {
	dir, name := filepath.Split(p)
	if name == "" {
		return "", fmt.Errorf("%q has an empty name", p)
	}
	return dir + Stem(name) + suffix, nil
}

// Suffix is PurePath.suffix: the name's text from its last '.', unless
// that dot is the first or the last character of the name.
func Suffix(name string) string {
	if i := strings.LastIndexByte(name, '.'); 0 < i && i < len(name)-1 {
		return name[i:]
	}
	return ""
}

// Stem is PurePath.stem: the name without its Suffix.
func Stem(name string) string { return strings.TrimSuffix(name, Suffix(name)) }
