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
// naming it (checkStoreDepth). A deeper value already stored (by the
// original library, by an older engine, by a direct SQL write) is refused
// where a reader would decode it, naming it and the check that lists such
// values (storedTooDeep): a lookup or a get of it raises ValueError; the
// config listings (ConfigEntry.PyJSON) carry the error in its place, so
// that one such entry does not make the others unreadable. `tirastore
// check` reports every one (storage.TableCheck.DeepValues).

// checkStoreDepth is the error of writing a value whose JSON text nests
// deeper than limits.MaxValueDepth; what names the value ("config
// 'gpu|op|k': the value").
func checkStoreDepth(what, text string) error {
	if d, over := limits.TooDeep(text); over {
		return newError(KindValue, "%s nests %d levels deep; a stored JSON value may nest at most %d levels, so that "+
			"Python's json, which reads each level on the interpreter's stack, can read it back (docs/limits.md)",
			what, d, limits.MaxValueDepth)
	}
	return nil
}

// storedTooDeep is the message about a stored value nested deeper than
// limits.MaxValueDepth that a reader was about to decode ("" when it is
// not); what names it and remedy says how to replace it.
func storedTooDeep(what, text, remedy string) string {
	d, over := limits.TooDeep(text)
	if !over {
		return ""
	}
	return fmt.Sprintf("%s is stored nested %d levels deep, more than the %d levels a stored JSON value may have "+
		"(written before that limit, or not through TiraStore), which Python's json cannot read back reliably; "+
		"`tirastore check` lists every such value; %s", what, d, limits.MaxValueDepth, remedy)
}
