// Package limits holds the limits of what TiraStore accepts and stores:
// how deeply a stored JSON value may nest, and how long a text and a
// call's arguments may be. Each figure is defined here once; the engine
// enforces it, the C layer reports it (the "limits" utility method) and
// bindings ask the library for it rather than repeating it.
// docs/limits.md gives the reasons to users.
package limits

import (
	"math"

	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/pyjson"
)

// MaxValueDepth is the deepest nesting of arrays and objects a stored JSON
// value may have: a config entry's value, a record's result_json. Every
// write refuses a deeper value (ValueError), so that every reader can read
// back what was stored.
//
// Why 100: CPython's json module (its C decoder and encoder alike) counts
// each level of nesting against the interpreter's recursion limit, 1000 by
// default, together with the frames of whoever called it. A reply adds a
// few levels of its own around a value (at most 3: {"result": [{... "value":
// v}]}), and the caller may be deep already: a test inside pytest, a call
// from an autotuner's frames, a JAX trace. 100 leaves about 900 frames to
// the caller, which is more than any of those uses; real configurations
// and results nest 2 or 3 levels. It also stays under the limits of other
// languages' common JSON readers (Rust's serde_json stops at 128), so an
// export or a seed file read elsewhere does not meet a limit either.
// pyjson.MaxDepth, 1000, stays the bound of what the engine parses (a
// request, a file): a parse that deep costs the Go stack nothing, but a
// value stored that deep would break Python's readers.
const MaxValueDepth = 100

// MaxTextBytes is the longest string, in bytes of UTF-8, that a call may
// carry and the engine stores: in practice a program source, the only
// text that comes anywhere near it (names, schedules and keys are short).
// A longer one is refused (ValueError) before anything is built of it.
//
// Why 256 MiB: SQLite's build in go-sqlite3 refuses any string or row
// longer than SQLITE_MAX_LENGTH, 1,000,000,000 bytes, so that is the hard
// ceiling; a record costs a few times its source in memory while it is
// parsed, hashed and written (the JSON request, the decoded text, SQLite's
// row), so the limit keeps the peak of recording the largest source near
// 1 GiB, which the memory of an HPC job allows, where a source near the
// ceiling would need 3 to 4 GiB and abort a process under a tighter
// address-space limit. Real program sources are kilobytes to a few
// megabytes: the limit is far above them.
const MaxTextBytes = 256 << 20

// MaxRequestBytes is the longest JSON text of one call's arguments; the C
// layer refuses a longer request by its length, before parsing it. Twice
// MaxTextBytes: room for the largest text with its escapes (every newline
// of a source is two bytes in JSON, a quote or a tab too) and for the
// other arguments (record_many's schedules).
const MaxRequestBytes = 2 * MaxTextBytes

// TextLimit is MaxTextBytes as the engine applies it: no limit under the
// failpoint switch TextSizeUnchecked (a negative control's).
func TextLimit() int {
	if failpoint.Enabled(failpoint.TextSizeUnchecked) {
		return math.MaxInt
	}
	return MaxTextBytes
}

// RequestLimit is MaxRequestBytes as the C layer applies it (no limit
// under TextSizeUnchecked, as TextLimit).
func RequestLimit() int {
	if failpoint.Enabled(failpoint.TextSizeUnchecked) {
		return math.MaxInt
	}
	return MaxRequestBytes
}

// TooDeep reports how deeply the JSON text of a stored value nests and
// whether that is deeper than MaxValueDepth. A text too short to nest
// that deep (each level takes two bytes) costs one length compare; a
// longer one one scan, without allocating. depth is 0 when not measured.
func TooDeep[T string | []byte](text T) (depth int, over bool) {
	if len(text) <= 2*MaxValueDepth || failpoint.Enabled(failpoint.ValueDepthUnlimited) {
		return 0, false
	}
	depth = pyjson.Depth(text)
	return depth, depth > MaxValueDepth
}
