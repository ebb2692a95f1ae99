package sqlite

// # Large texts
//
// go-sqlite3 binds every text with SQLITE_TRANSIENT: SQLite copies it
// before the statement runs, and the statement then builds the row, a
// second copy. For a program source of hundreds of megabytes that is two
// copies beside the engine's own (docs/limits.md counts what a record
// costs). PutProgram therefore hands a source from tuning.UncopiedSource
// bytes on to the SQL function tirastore_text (text.c), which gives it to
// SQLite as a static text: the row is the only copy. The source's memory
// is pinned while SQLite may read it.

/*
#include <stdint.h>
long long tira_text_put(const char *p, long long n);
void tira_text_drop(long long token);
int tira_text_register(void);
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

func init() {
	if rc := C.tira_text_register(); rc != 0 {
		panic(fmt.Sprintf("sqlite: cannot register the function tirastore_text (SQLite result code %d)", int(rc)))
	}
}

// withText runs fn with a token under which tirastore_text(token) returns
// s without copying it, or with ok false when no token is free (fn must
// then bind s as usual).
func withText(s string, fn func(token int64, ok bool) error) error {
	var pin runtime.Pinner
	p := unsafe.StringData(s)
	pin.Pin(p)
	defer pin.Unpin()
	token := int64(C.tira_text_put((*C.char)(unsafe.Pointer(p)), C.longlong(len(s))))
	if token != 0 {
		defer C.tira_text_drop(C.longlong(token))
	}
	return fn(token, token != 0)
}
