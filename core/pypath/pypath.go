// Package pypath gives Go the pathlib semantics the original library used
// for file names: where the database resolves to, where its lock lives
// (with_suffix), what a backup is named (stem). They must agree with
// Python byte for byte, or old and new workers would use different files
// for the same database.
package pypath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/identity"
)

// Resolve is pathlib.Path.resolve(strict=False) of Python 3.11: a
// left-to-right walk that follows each existing symlink, applies ".." to the
// path resolved so far, and keeps missing components as they are; except
// that it follows only the links of the caller or of root (see LinkError).
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
	r := &resolver{seen: map[string]*string{}, vet: !failpoint.Enabled(failpoint.LinkTrust), euid: uint32(os.Geteuid())}
	out, ok := r.join("/", p)
	if r.err != nil {
		return "", r.err
	}
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

// # Whose links are followed
//
// The directories a database lives in are often writable by other users
// (the original made the database's directory 1777), and
// fs.protected_symlinks may be 0. A link planted there by another user
// would make this process create, initialise or chmod a file that user
// chose, with this process's rights: root creating a 0666 database in a
// root-only directory, a user creating one in place of their own
// ~/.ssh/authorized_keys. So the resolver follows a link only when its
// owner is the caller (geteuid) or root, as the kernel's
// protected_symlinks does in sticky directories, but everywhere: a link
// of another user is a *LinkError whatever directory holds it. A user's
// own link to their own database elsewhere, and a site's links made by
// root (/scratch -> /lustre/scratch), keep working. docs/COMPAT.md lists
// the difference from the original, which followed every link.

// LinkError is a symbolic link on the way that belongs neither to the
// caller nor to root: it is not followed, and the path is refused.
type LinkError struct {
	Path   string // the link
	Target string // what it points to
	Owner  uint32 // its owner
}

// Is makes errors.Is(err, fs.ErrPermission) true: the path is refused as
// a permission problem (Python's PermissionError), not a missing file.
func (e *LinkError) Is(target error) bool { return target == fs.ErrPermission }

// Error names the link, its target and its owner.
func (e *LinkError) Error() string {
	return fmt.Sprintf("%s is a symbolic link to %s owned by %s, not by you (uid %d) or root: "+
		"TiraStore follows only your own links and root's (another user may have planted it); "+
		"give the real path", e.Path, e.Target, identity.Owner(e.Owner), os.Geteuid())
}

type resolver struct {
	seen map[string]*string // symlink path -> resolution (nil while in progress)
	vet  bool               // follow only the caller's and root's links
	euid uint32
	err  error // a *LinkError that stopped the walk
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
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && r.vet && st.Uid != r.euid && st.Uid != 0 {
			r.err = &LinkError{Path: next, Target: target, Owner: st.Uid}
			return next, false
		}
		var ok bool
		path, ok = r.join(path, target)
		if r.err != nil {
			return path, false
		}
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

// Clean is str(PurePosixPath(p)): empty and "." components dropped, ".."
// kept, two leading slashes kept as they are (POSIX leaves "//" to the
// implementation), "." for an empty path. It is what ejKernel's
// PersistentCache shows as its path, so the two classes' paths compare
// equal as strings.
func Clean(p string) string {
	root := ""
	switch {
	case strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "///"):
		root = "//"
	case strings.HasPrefix(p, "/"):
		root = "/"
	}
	var parts []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			parts = append(parts, c)
		}
	}
	out := root + strings.Join(parts, "/")
	if out == "" {
		return "."
	}
	return out
}

// Join is PurePosixPath(a) / b: b when it is absolute, else the two
// cleaned and joined ("a" / "b.json" is "a/b.json", "a" / "/t/x.json" is
// "/t/x.json").
func Join(a, b string) string {
	if strings.HasPrefix(b, "/") {
		return Clean(b)
	}
	switch ca := Clean(a); ca {
	case ".":
		return Clean(b)
	case "/", "//":
		return Clean(ca + b)
	default:
		return Clean(ca + "/" + b)
	}
}

// Parent is PurePosixPath(p).parent: "." for a name alone, the root for a
// name in the root.
func Parent(p string) string {
	c := Clean(p)
	i := strings.LastIndex(c, "/")
	switch {
	case c == "/" || c == "//" || c == ".":
		return c
	case i < 0:
		return "."
	case i == 0:
		return "/"
	case i == 1 && strings.HasPrefix(c, "//"):
		return "//"
	}
	return c[:i]
}

// Name is PurePosixPath(p).name: the last component ("" for a root or ".").
func Name(p string) string {
	c := Clean(p)
	if c == "." || c == "/" || c == "//" {
		return ""
	}
	return c[strings.LastIndex(c, "/")+1:]
}

// ExpandUser is PosixPath.expanduser of Python 3.11: a leading "~" is the
// home directory (home when homeSet, as Python reads $HOME, an empty one
// meaning "/"; else the user database's entry of the caller), a leading
// "~name" that user's home directory; anything else is p, cleaned. An
// unknown user or no home is an error, as Python's RuntimeError.
func ExpandUser(p, home string, homeSet bool) (string, error) {
	if !strings.HasPrefix(p, "~") {
		return Clean(p), nil
	}
	first, rest, _ := strings.Cut(p, "/")
	var dir string
	switch {
	case first == "~" && homeSet:
		dir = home
	case first == "~":
		u, err := user.Current()
		if err != nil || u.HomeDir == "" {
			return "", fmt.Errorf("cannot expand %q: no $HOME and no home directory for the current user", p)
		}
		dir = u.HomeDir
	default:
		u, err := user.Lookup(first[1:])
		if err != nil || u.HomeDir == "" {
			return "", fmt.Errorf("cannot expand %q: no home directory for user %q", p, first[1:])
		}
		dir = u.HomeDir
	}
	if dir = strings.TrimRight(dir, "/"); dir == "" {
		dir = "/"
	}
	return Join(dir, rest), nil
}
