// Package pyjson reads and writes JSON exactly as CPython 3.11's json module
// does, so that databases written by the Go engine are byte-for-byte what the
// original Python TiraStore would have written, and vice versa.
//
// Go's encoding/json differs from Python's json in ways that matter for a
// byte-exact format: it escapes '<', '>' and '&', formats floats differently
// (it writes 1 and 1e-7 where Python writes 1.0 and 1e-07), has no
// NaN/Infinity, does not keep object key order, and conflates ints and
// floats. This package instead
// mirrors json.loads and json.dumps:
//
//   - Parse behaves like json.loads on a str decoded from UTF-8: it keeps
//     numbers as text ([Number]) so ints stay ints and floats stay floats,
//     keeps object key order ([Object]) with dict semantics for duplicate
//     keys, accepts NaN/Infinity/-Infinity, and reports errors with CPython's
//     messages ("Expecting value", "Extra data", ...) plus the byte offset.
//   - Marshal behaves like json.dumps with sort_keys, ensure_ascii, indent
//     and separators ([Options]); floats are written like repr(float)
//     ([FormatFloat]).
//
// Deliberate differences from CPython, all of which reject input rather than
// produce something Python would not: Parse rejects invalid UTF-8 (including
// UTF-8-encoded surrogates, which json.loads(bytes) lets through via
// "surrogatepass"), rejects lone surrogate escapes such as "\ud800" (Python
// accepts them and builds a str that cannot be encoded as UTF-8), and limits
// nesting to [MaxDepth] instead of raising RecursionError at a depth that
// depends on the Python call stack.
package pyjson
