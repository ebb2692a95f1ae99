// Command capi is libtirastore.so: the C ABI of the TiraStore engine, built
// with go build -buildmode=c-shared. It only converts: JSON in, the engine
// call, JSON out. include/tirastore.h is generated from the //export
// functions of this package and the error table of core/apierr (go run
// ./capi/genheader).
//
// The public C symbols (tirastore_open, ...) are thin C functions in
// forkguard.c that check, before entering Go, that the process is not a
// child forked after the library was loaded (the Go runtime does not
// survive fork(); entering it there would hang), then call the Go exports
// tirastoreGo_open, ...; the header names them without "Go".
//
// The shape follows SQLite's C API: opaque integer handles, a status code
// from every call, and one owner for every buffer (the library allocates,
// tirastore_free releases). No Go pointer crosses the boundary.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern const char *tirastore_forked_reply; // forkguard.c
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"syscall"
	"unsafe"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/tuning"
)

// Every status code and Python class of a reply comes from the one error
// table, core/apierr (the header's TIRASTORE_ERR_* macros are generated from
// it too); TIRASTORE_OK is 0. Errors that only this layer detects (bad
// pointers, JSON or handles, a panic) are *apierr.Error values of the
// kinds KindMisuse, KindHandle and KindInternal.
const statusOK = 0

// errForked is what every call answers in a child forked after the library
// was loaded. forkguard.c answers it without entering Go (whose runtime did
// not survive the fork), with the reply init makes here at load time.
var errForked = apierr.New(apierr.KindForked, "libtirastore cannot be used in a child made by fork() after "+
	"the library was loaded: its Go runtime does not survive fork(). Use it in the parent, exec in the "+
	"child, or load a fresh copy of the library in the child.")

func init() {
	var out *C.char
	reply(&out, nil, errForked)
	C.tirastore_forked_reply = out // kept for the life of the process
}

func misuse(format string, a ...any) error {
	return apierr.New(apierr.KindMisuse, format, a...)
}

// handles maps the integers C holds to open stores. Handles are never
// reused (next only grows, and only a successful open takes a number), so a
// stale or doubly-closed handle is reported, not confused with a newer
// store; and every number from 1 to next that is not open is one that was
// closed, which is how findHandle tells a closed handle from one this copy
// of the library never gave out without keeping a list.
var handles = struct {
	sync.Mutex
	next   uint64
	stores map[uint64]*core.Store
}{stores: map[uint64]*core.Store{}}

// findHandle returns the store behind h, removing it from the table when
// remove is set (tirastore_close).
func findHandle(h uint64, remove bool) (*core.Store, error) {
	handles.Lock()
	defer handles.Unlock()
	st, ok := handles.stores[h]
	if !ok {
		if h != 0 && h <= handles.next {
			// Closed: the engine's own message for a closed store, under the
			// status the ABI documents for a closed handle.
			return nil, apierr.Wrap(apierr.KindHandle, core.ErrClosed, "%s", core.ErrClosed.Message)
		}
		// Never given out here (0, or a number of another copy of the
		// library, which may have been closed there).
		return nil, apierr.New(apierr.KindHandle, "unknown or closed TiraStore handle %d", h)
	}
	if remove {
		delete(handles.stores, h)
	}
	return st, nil
}

// warned is a method's result with warnings for the caller: reply sends
// them beside the result ("warnings"), which Python shows as
// TiraStoreWarning.
type warned struct {
	result   any
	warnings []string
}

// withWarnings is a method's result with the engine's warnings, if any.
func withWarnings(result any, warnings []string) any {
	if len(warnings) == 0 {
		return result
	}
	return warned{result, warnings}
}

// reply encodes a result or an error into a library-owned C string and
// returns the status. out may be NULL when the caller wants the status only.
func reply(out **C.char, result any, err error) C.int {
	b, status := replyJSON(result, err)
	if out != nil {
		// One malloc and copy, NUL included (C.CString(string(b)) would
		// copy twice). The reply never contains a NUL: JSON escapes it.
		*out = (*C.char)(C.CBytes(append(b, 0)))
	}
	return C.int(status)
}

// replyJSON is reply's document, {"result": ...} or {"error": ...}, and
// its status.
func replyJSON(result any, err error) ([]byte, int) {
	var b []byte
	if err == nil {
		doc := pyjson.NewObjectCap(2)
		if w, ok := result.(warned); ok {
			doc.Set("result", w.result)
			doc.Set("warnings", replyStrings(w.warnings))
		} else {
			doc.Set("result", result)
		}
		if b, err = pyjson.Marshal(doc, pyjson.Compact); err != nil {
			err = apierr.New(apierr.KindInternal, "encode result: %v", err)
		}
	}
	status := statusOK
	if err != nil {
		k := apierr.KindOf(err)
		status = k.Status()
		eo := pyjson.NewObject()
		eo.Set("type", k.PythonName())
		eo.Set("message", err.Error())
		eo.Set("code", status)
		var errno syscall.Errno
		if errors.As(err, &errno) {
			eo.Set("errno", int(errno)) // lets Python pick the OSError subclass, as open() would
		}
		doc := pyjson.NewObject()
		doc.Set("error", eo)
		if b, err = pyjson.Marshal(doc, pyjson.Compact); err != nil {
			internal := apierr.KindInternal
			status = internal.Status()
			b = fmt.Appendf(nil, `{"error":{"type":%q,"message":"cannot encode the error reply","code":%d}}`,
				internal.PythonName(), status)
		}
	}
	return b, status
}

// guard turns a panic anywhere below into TIRASTORE_ERR_INTERNAL: the host
// process (a Python interpreter, a C++ harness) must never crash because of
// a bug in the library.
func guard(out **C.char, status *C.int) {
	if r := recover(); r != nil {
		*status = reply(out, nil, apierr.New(apierr.KindInternal,
			"internal error (please report): %v\n%s", r, debug.Stack()))
	}
}

func goBytes(p *C.char) []byte {
	if p == nil {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(p), C.int(C.strlen(p)))
}

var versionCString = C.CString(core.Version)

// tirastore_version returns the library version ("1.2.3"). The string is
// static: do not free it.
//
//export tirastoreGo_version
func tirastoreGo_version() *C.char { return versionCString }

var openParams = []string{"source_project", "cpu_model", "slurm_cpus", "allow_cpu_mismatch", "create", "sharing", "stale_lock_timeout", "lock_timeout", "tools", "match"}

// tirastore_open opens (creating if needed) the database at db_path: a
// file, or a postgresql:// URL naming a database on a PostgreSQL server
// (its tables are then created; the database must exist).
// options_json may be NULL or a JSON object with any of: source_project
// (str), cpu_model (str|null), slurm_cpus (str|null), allow_cpu_mismatch
// (bool), create (bool, default true; false: open an existing database
// only, TIRASTORE_ERR_NOT_FOUND when there is none, creating nothing),
// sharing ("all", the default: a new file 0666 and a new directory 1777,
// as the original; "group": 0660; "private": 0600 and a new directory as
// the umask makes it; as config_location chooses for a kernel-config
// cache; given "all", a new database in an existing directory that keeps
// other users out comes with a notice), stale_lock_timeout (seconds > 0; null =
// 600), lock_timeout (seconds; null = 600, 0 = try once, negative = wait
// forever). On success *handle is set and *out (if out is not NULL) receives
// {"result": {"db_path", "lock_path", "server", "source_project",
// "writes_allowed", "warning", "notices"}} (server: db_path is a server's URL,
// without its password, and lock_path is ""), notices being a list of warnings
// about a database directory other users cannot use, and about an ignored
// password file. On error *out
// receives {"error": {"type", "message", "code"}}. *out is owned by the caller:
// free it with tirastore_free.
//
//export tirastoreGo_open
func tirastoreGo_open(db_path *C.char, options_json *C.char, handle *C.uint64_t, out **C.char) (status C.int) {
	defer guard(out, &status)
	if db_path == nil || handle == nil {
		return reply(out, nil, misuse("tirastore_open: db_path and handle must not be NULL"))
	}
	a, err := parseArgs("TiraStore", goBytes(options_json))
	if err != nil {
		return reply(out, nil, err)
	}
	var o core.Options
	if o.SourceProject, err = a.optStr("source_project"); err != nil {
		return reply(out, nil, err)
	}
	if o.CPUModel, err = a.optStr("cpu_model"); err != nil {
		return reply(out, nil, err)
	}
	if o.SlurmCPUs, err = a.optStr("slurm_cpus"); err != nil {
		return reply(out, nil, err)
	}
	if o.AllowCPUMismatch, err = a.boolean("allow_cpu_mismatch", false); err != nil {
		return reply(out, nil, err)
	}
	create, err := a.boolean("create", true)
	if err != nil {
		return reply(out, nil, err)
	}
	o.MustExist = !create
	if o.Sharing, o.SharingAsked, err = a.sharing("sharing"); err != nil {
		return reply(out, nil, err)
	}
	if o.StaleLockTimeout, err = a.seconds("stale_lock_timeout"); err != nil {
		return reply(out, nil, err)
	}
	if o.LockTimeout, err = a.seconds("lock_timeout"); err != nil {
		return reply(out, nil, err)
	}
	if o.Tools, err = a.strMap("tools"); err != nil {
		return reply(out, nil, err)
	}
	if o.Match, err = a.strMap("match"); err != nil {
		return reply(out, nil, err)
	}
	if err := a.check(openParams); err != nil {
		return reply(out, nil, err)
	}
	o.Interruptible = interruptible
	st, err := core.Open(context.Background(), string(goBytes(db_path)), o)
	if err != nil {
		return reply(out, nil, err)
	}
	handles.Lock()
	handles.next++
	h := handles.next
	handles.stores[h] = st
	handles.Unlock()
	*handle = C.uint64_t(h)
	return reply(out, replyStoreInfo(st), nil)
}

// tirastore_close closes a handle. Closing an unknown or already closed
// handle returns TIRASTORE_ERR_HANDLE and changes nothing. out may be NULL.
//
//export tirastoreGo_close
func tirastoreGo_close(handle C.uint64_t, out **C.char) (status C.int) {
	defer guard(out, &status)
	st, err := findHandle(uint64(handle), true)
	if err != nil {
		return reply(out, nil, err)
	}
	dropBoard(st)
	return reply(out, nil, st.Close())
}

// tirastore_call runs one API method. method is a name such as "lookup",
// "record", "record_many", "contains", "stats", "export" (see docs/api.md,
// "Methods", for each method's arguments and result); args_json is a
// JSON object of its arguments (NULL means {}). Utility methods
// ("version", "normalize_schedule", "validate_schedule",
// "normalize_program", "make_program_hash", "make_record_key") take
// handle 0, as does "error_table" (the status codes with their names and
// Python classes). An argument value a binding cannot write as JSON (a
// Python bytes, say) may be sent as {"\u0000type": "<its type name>"}: the
// TypeError then names that type. *out receives {"result": ...} or
// {"error": ...}; the caller frees it with tirastore_free. Results may
// contain the non-standard tokens NaN and Infinity when a stored
// measurement holds them (as Python's json module writes them).
//
//export tirastoreGo_call
func tirastoreGo_call(handle C.uint64_t, method *C.char, args_json *C.char, out **C.char) (status C.int) {
	defer guard(out, &status)
	if method == nil {
		return reply(out, nil, misuse("tirastore_call: method must not be NULL"))
	}
	name := C.GoString(method)
	m, ok := methods[name]
	if !ok {
		return reply(out, nil, misuse("tirastore_call: unknown method %q", name))
	}
	var st *core.Store
	if m.store {
		var err error
		if st, err = findHandle(uint64(handle), false); err != nil {
			return reply(out, nil, err)
		}
	}
	req, err := request(name, args_json)
	if err != nil {
		return reply(out, nil, err)
	}
	if len(req) > tuning.LargeRequest {
		// Give the texts of a large call back to the system once it is
		// over, so that they do not add to those of the next one.
		defer debug.FreeOSMemory()
	}
	res, err := runCall(name, m, st, req)
	return reply(out, res, err)
}

// runCall is tirastore_call's work once its C arguments are read: the
// method m, named name, on st (nil for a utility) with the arguments of
// the JSON object req.
func runCall(name string, m method, st *core.Store, req []byte) (any, error) {
	a, err := parseArgs(name, req)
	if err != nil {
		return nil, err
	}
	if err := a.check(m.params); err != nil {
		return nil, err
	}
	return m.run(context.Background(), st, a)
}

// request is the caller's args_json, read in place (valid until the call
// returns: the parser keeps nothing of it) rather than copied, since it
// may hold a program source of hundreds of megabytes; one longer than
// limits.MaxRequestBytes is refused by its length, before it is parsed.
func request(method string, p *C.char) ([]byte, error) {
	if p == nil {
		return nil, nil
	}
	n := int(C.strlen(p))
	if n > limits.RequestLimit() {
		return nil, requestTooLong(method, uint64(n))
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), n), nil
}

// requestTooLong is the error of a call whose arguments are n bytes, more
// than a call may carry.
func requestTooLong(method string, n uint64) error {
	return &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): the arguments are %d bytes of JSON, "+
		"more than the %d a call may carry (a text, such as a program source, may have at most %d bytes; docs/limits.md)",
		displayName(method), n, limits.MaxRequestBytes, limits.MaxTextBytes)}
}

func main() {}
