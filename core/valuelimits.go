package core

import (
	"fmt"

	"github.com/tirastore/tirastore/core/limits"
)

// # Limits of stored values
//
// A JSON value the engine stores (a config entry's value, a record's
// result_json) may nest at most limits.MaxValueDepth levels: deeper, the
// Python readers of every process that shares the database would fail with
// RecursionError (docs/limits.md). Every write refuses a deeper value,
// naming it (TooDeepToStore). A deeper value already stored (by the
// original library, by an older engine, by a direct SQL write) is refused
// where a reader would decode it, naming it and the check that lists such
// values (tooDeepStored): a lookup or a get of it raises ValueError; the
// config listings (ConfigEntry.TooDeep) carry the error in its place, so
// that one such entry does not make the others unreadable. `tirastore
// check` reports every one (storage.TableCheck.DeepValues).

// Each caller measures the value first (limits.TooDeep: a length compare
// for a short one) and only then names it, so that the common case builds
// no message.

// TooDeepToStore is the error of writing a value nested depth levels
// deep, more than limits.MaxValueDepth; what names it ("config
// gpu|op|k: the value"). Every writer refuses with it, a merge
// (core/operator) too.
func TooDeepToStore(what string, depth int) error {
	return newError(KindValue, "%s nests %d levels deep; a stored JSON value may nest at most %d levels, so that "+
		"Python's json, which reads each level on the interpreter's stack, can read it back (docs/limits.md)",
		what, depth, limits.MaxValueDepth)
}

// tooDeepStored is the message about a stored value nested depth levels
// deep, more than limits.MaxValueDepth, that a reader was about to
// decode; what names it and remedy says how to replace it.
func tooDeepStored(what string, depth int, remedy string) string {
	return fmt.Sprintf("%s is stored nested %d levels deep, more than the %d levels a stored JSON value may have "+
		"(written before that limit, or not through TiraStore), which Python's json cannot read back reliably; "+
		"`tirastore check` lists every such value; %s", what, depth, limits.MaxValueDepth, remedy)
}
