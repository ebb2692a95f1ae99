// Package schedule reproduces, byte for byte, how the original Python
// TiraStore normalizes and validates Tiramisu schedule strings and normalizes
// program sources before hashing.
//
// Every function here feeds a hash (program_hash, record key) or an error
// message that users match on, and old Python workers share databases with
// this engine, so the behaviour follows the original's regular expressions
// exactly, including their Unicode-aware \s, \d and \w (CPython 3.11,
// Unicode 14; see gen_tables.py) and their quirks. The contract is
// docs/COMPAT.md, sections "Whitespace", "Program normalization and
// hash" and "Schedule normalization and validation".
//
// One departure is deliberate: Validate also accepts the actions TiraLib
// prints that the original does not know (D, E, M and TG), so that every
// schedule TiraLib explores can be recorded. Normalize is the original's
// rule on those strings too, so their keys are the ones an old worker
// computes: it finds such records, although it cannot record them.
//
// Strings are UTF-8. Bytes that are not valid UTF-8 (which a Python str cannot
// hold) are kept as they are, never count as whitespace, digits or word
// characters, and appear in error messages as Python's surrogateescape would
// show them (\udcXX). Such input has no Python counterpart (a str holding a
// lone surrogate cannot even be UTF-8 encoded for hashing), so callers at the
// API boundary should reject it; here it only must not crash, and removing a
// space between two stray bytes may join them into a new rune.
package schedule

import "strings"

// removeSpace deletes every rune for which IsSpace is true, like the
// original's re.sub(r"\s+", "", s). Invalid UTF-8 bytes are kept.
//
// It runs on every schedule a record or lookup normalizes, so ASCII bytes
// are tested directly, and kept text is copied in runs between spaces
// rather than rune by rune (removeSpaceInPlace is its form for program
// sources).
func removeSpace(s string) string {
	var b []byte // nil until the first space
	kept := 0    // start of the run of kept bytes not copied yet
	for i := 0; i < len(s); {
		space, n := spaceAtString(s, i)
		if space {
			if b == nil {
				b = make([]byte, 0, len(s))
			}
			b = append(b, s[kept:i]...)
			kept = i + n
		}
		i += n
	}
	if b == nil {
		return s
	}
	return string(append(b, s[kept:]...))
}

const compsOpen = "comps=["

// Normalize implements the original's normalize_schedule, which defines the
// schedule part of a record key and the stored schedule column: "" for
// empty input; all whitespace (IsSpace) removed; then, scanning left to right
// without overlap as re.sub(r"comps=\[([^\]]*)\]", ...) does, every
// "comps=[" up to the first following "]" has its inner text split on ",",
// each item stripped of leading and trailing ' and " characters and
// re-wrapped in single quotes. So comps=["a", 'b'] becomes comps=['a','b'],
// comps=[] becomes comps=[”], and a "]" inside a quoted name ends the block
// early (comps=['a]'] becomes comps=['a']'], which no longer validates).
// Normalize is idempotent on valid UTF-8: Normalize(Normalize(s)) ==
// Normalize(s).
func Normalize(s string) string {
	if s == "" {
		return ""
	}
	s = removeSpace(s)
	var b strings.Builder
	i := 0 // start of the text not yet copied
	for {
		j := strings.Index(s[i:], compsOpen)
		if j < 0 {
			break
		}
		start := i + j
		inner := start + len(compsOpen)
		k := strings.IndexByte(s[inner:], ']')
		if k < 0 {
			// No "]" after this "comps=[", hence none after any later
			// one either: the regex matches nothing more.
			break
		}
		if b.Len() == 0 {
			b.Grow(len(s) + 16)
		}
		b.WriteString(s[i:start])
		b.WriteString(compsOpen)
		for items, n := s[inner:inner+k], 0; ; n++ { // strings.Split(items, ","), without its slice
			item, rest, more := strings.Cut(items, ",")
			if n > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('\'')
			b.WriteString(strings.Trim(item, `'"`))
			b.WriteByte('\'')
			if !more {
				break
			}
			items = rest
		}
		b.WriteByte(']')
		i = inner + k + 1
	}
	if i == 0 {
		return s
	}
	b.WriteString(s[i:])
	return b.String()
}
