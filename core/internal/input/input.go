// Package input holds the checks of one argument that every door of the
// engine applies the same way: a text (valid UTF-8, no NUL, not longer
// than limits.MaxTextBytes), a path argument resolved as Python resolves
// it, and the error of reading a file named by an argument. It is shared
// by core, core/operator and core/outfile, which cannot import each
// other's unexported helpers (core imports outfile, operator imports
// core), so that each check is written once.
package input

import (
	"strings"
	"unicode/utf8"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/pypath"
)

// Text rejects strings that the original could not have stored
// faithfully: invalid UTF-8 (Python refuses to encode lone surrogates) and
// NUL characters (SQLite's text functions and C callers truncate at NUL),
// and texts longer than limits.MaxTextBytes (docs/limits.md). field names
// the argument in the error.
func Text(field, s string) error {
	if len(s) > limits.TextLimit() {
		return TextTooLong(field, int64(len(s)))
	}
	if !utf8.ValidString(s) {
		shown := s
		if len(shown) > 200 {
			shown = shown[:200] + "..."
		}
		return apierr.New(apierr.KindValue, "%s is not valid UTF-8 (lone surrogates, such as a file name's bytes "+
			"that are not UTF-8, cannot be stored): %q", field, shown)
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return apierr.New(apierr.KindValue, "%s contains a NUL character at offset %d", field, i)
	}
	return nil
}

// TextTooLong is the error of a text of n bytes, longer than
// limits.MaxTextBytes; field names it.
func TextTooLong(field string, n int64) *apierr.Error {
	return apierr.New(apierr.KindValue, "%s is %d bytes of UTF-8, more than the %d bytes (%d MiB) a text may have (docs/limits.md)",
		field, n, limits.MaxTextBytes, limits.MaxTextBytes>>20)
}

// Texts is Text of each (field, text) pair, in order: the first error.
func Texts(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := Text(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// Path is pypath.Resolve for the path argument named what ("database
// path", "export path", ...): a link of another user on the way
// (pypath.LinkError) is a PermissionError, any other failure an OSError.
func Path(what, p string) (string, error) {
	abs, err := pypath.Resolve(p)
	if err != nil {
		k, ok := apierr.OSKind(err)
		if !ok {
			k = apierr.KindOS
		}
		return "", apierr.Wrap(k, err, "cannot resolve %s %q: %v", what, p, err)
	}
	return abs, nil
}

// File is the absolute form of a file argument named field: checked as a
// text, not empty, resolved (Path).
func File(field, path string) (string, error) {
	if err := Text(field, path); err != nil {
		return "", err
	}
	if path == "" {
		return "", apierr.New(apierr.KindValue, "%s must not be empty", field)
	}
	return Path(field, path)
}

// ReadError is the error of reading the file path, which holds what.
func ReadError(err error, what, path string) error {
	k, ok := apierr.OSKind(err)
	if !ok {
		k = apierr.KindOS
	}
	return apierr.Wrap(k, err, "cannot read %s %s: %v", what, path, err)
}
