// Command capi is libtirastore.so: the C ABI of the TiraStore engine, built
// with go build -buildmode=c-shared. It only converts: JSON in, the engine
// call, JSON out. include/tirastore.h is generated from the //export
// functions and status constants of this package (go run ./capi/genheader).
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/pyjson"
)

// Status codes returned by every tirastore_* function. The generator copies
// each constant with its C name (the "C:" tag) and comment into the header.
const (
	statusOK          = 0  // C: TIRASTORE_OK success; *out holds {"result": ...}
	statusInternal    = 1  // C: TIRASTORE_ERR_INTERNAL a bug in the library (Python: RuntimeError)
	statusValue       = 2  // C: TIRASTORE_ERR_VALUE a bad value: invalid schedule, NaN, NUL (ValueError)
	statusType        = 3  // C: TIRASTORE_ERR_TYPE an argument of the wrong JSON type (TypeError)
	statusPermission  = 4  // C: TIRASTORE_ERR_PERMISSION writes disabled, or EACCES/EROFS (PermissionError)
	statusTimeout     = 5  // C: TIRASTORE_ERR_TIMEOUT the lock was not obtained in time (TimeoutError)
	statusOS          = 6  // C: TIRASTORE_ERR_OS another filesystem error, e.g. ENOSPC (OSError)
	statusNotFound    = 7  // C: TIRASTORE_ERR_NOT_FOUND a file that must exist does not (FileNotFoundError)
	statusClosed      = 8  // C: TIRASTORE_ERR_CLOSED the store was closed (ValueError)
	statusDatabase    = 9  // C: TIRASTORE_ERR_DATABASE not a database, corrupt, or newer schema (sqlite3.DatabaseError)
	statusOperational = 10 // C: TIRASTORE_ERR_OPERATIONAL SQLite could not run a statement (sqlite3.OperationalError)
	statusInterrupted = 11 // C: TIRASTORE_ERR_INTERRUPTED a lock wait was interrupted (KeyboardInterrupt)
	statusHandle      = 12 // C: TIRASTORE_ERR_HANDLE unknown or already closed handle (ValueError)
	statusMisuse      = 13 // C: TIRASTORE_ERR_MISUSE NULL pointer, invalid JSON, unknown method (ValueError)
	statusForked      = 14 // C: TIRASTORE_ERR_FORKED called in a child of fork(): this copy's Go runtime is gone (RuntimeError)
	statusLockLost    = 15 // C: TIRASTORE_ERR_LOCK_LOST the lock was broken while the call held it, after a stall (LockLostError)
)

var kindStatus = map[core.Kind]int{
	core.KindInternal:    statusInternal,
	core.KindValue:       statusValue,
	core.KindType:        statusType,
	core.KindPermission:  statusPermission,
	core.KindTimeout:     statusTimeout,
	core.KindOS:          statusOS,
	core.KindNotFound:    statusNotFound,
	core.KindClosed:      statusClosed,
	core.KindDatabase:    statusDatabase,
	core.KindOperational: statusOperational,
	core.KindInterrupted: statusInterrupted,
	core.KindLockLost:    statusLockLost,
}

// callError is an error detected by the C layer itself (bad pointers,
// handles or JSON) rather than by the engine.
type callError struct {
	status int
	msg    string
}

func (e *callError) Error() string { return e.msg }

func misuse(format string, a ...any) error {
	return &callError{statusMisuse, fmt.Sprintf(format, a...)}
}

// handles maps the integers C holds to open stores. Handles are never
// reused, so a stale or doubly-closed handle is reported, not confused with
// a newer store.
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
		return nil, &callError{statusHandle, fmt.Sprintf("unknown or closed TiraStore handle %d", h)}
	}
	if remove {
		delete(handles.stores, h)
	}
	return st, nil
}

// reply encodes a result or an error into a library-owned C string and
// returns the status. out may be NULL when the caller wants the status only.
func reply(out **C.char, result any, err error) C.int {
	var b []byte
	if err == nil {
		doc := pyjson.NewObjectCap(1)
		doc.Set("result", result)
		if b, err = pyjson.Marshal(doc, pyjson.Compact); err != nil {
			err = &core.Error{Kind: core.KindInternal, Message: "encode result: " + err.Error()}
		}
	}
	status := statusOK
	if err != nil {
		typ := "ValueError"
		if e, ok := err.(*callError); ok {
			status = e.status
		} else {
			k := core.KindOf(err)
			status, typ = kindStatus[k], k.PythonName()
		}
		eo := pyjson.NewObject()
		eo.Set("type", typ)
		eo.Set("message", err.Error())
		eo.Set("code", status)
		var errno syscall.Errno
		if errors.As(err, &errno) {
			eo.Set("errno", int(errno)) // lets Python pick the OSError subclass, as open() would
		}
		doc := pyjson.NewObject()
		doc.Set("error", eo)
		if b, err = pyjson.Marshal(doc, pyjson.Compact); err != nil {
			b = []byte(`{"error":{"type":"RuntimeError","message":"cannot encode the error reply","code":1}}`)
			status = statusInternal
		}
	}
	if out != nil {
		// One malloc and copy, NUL included (C.CString(string(b)) would
		// copy twice). The reply never contains a NUL: JSON escapes it.
		*out = (*C.char)(C.CBytes(append(b, 0)))
	}
	return C.int(status)
}

// guard turns a panic anywhere below into TIRASTORE_ERR_INTERNAL: the host
// process (a Python interpreter, a C++ harness) must never crash because of
// a bug in the library.
func guard(out **C.char, status *C.int) {
	if r := recover(); r != nil {
		*status = reply(out, nil, &core.Error{Kind: core.KindInternal,
			Message: fmt.Sprintf("internal error (please report): %v\n%s", r, debug.Stack())})
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

var openParams = []string{"source_project", "cpu_model", "slurm_cpus", "allow_cpu_mismatch", "stale_lock_timeout", "lock_timeout"}

// tirastore_open opens (creating if needed) the database at db_path.
// options_json may be NULL or a JSON object with any of: source_project
// (str), cpu_model (str|null), slurm_cpus (str|null), allow_cpu_mismatch
// (bool), stale_lock_timeout (seconds), lock_timeout (seconds, null = 600,
// negative = wait forever). On success *handle is set and *out (if out is
// not NULL) receives {"result": {"db_path", "lock_path", "source_project",
// "writes_allowed", "warning", "notices"}}, notices being a list of
// warnings about node-local files that failed their checks and about a
// database directory other users cannot use. On error *out receives
// {"error": {"type", "message", "code"}}. *out is owned by the caller: free it with
// tirastore_free.
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
	if o.StaleLockTimeout, err = a.seconds("stale_lock_timeout", core.DefaultStaleLockTimeout); err != nil {
		return reply(out, nil, err)
	}
	if o.LockTimeout, err = a.seconds("lock_timeout", core.DefaultLockTimeout); err != nil {
		return reply(out, nil, err)
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = time.Nanosecond // an explicit 0 means "try once", not the engine's default
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
	return reply(out, storeInfo(st), nil)
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
	return reply(out, nil, st.Close())
}

// tirastore_call runs one API method. method is a name such as "lookup",
// "record", "record_many", "contains", "stats", "export" (see the README's
// C API section for each method's arguments and result); args_json is a
// JSON object of its arguments (NULL means {}). Utility methods
// ("version", "normalize_schedule", "validate_schedule",
// "normalize_program", "make_program_hash", "make_record_key") take
// handle 0. *out receives {"result": ...} or {"error": ...}; the caller
// frees it with tirastore_free. Results may contain the non-standard
// tokens NaN and Infinity when a stored measurement holds them (as
// Python's json module writes them).
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
	a, err := parseArgs(name, goBytes(args_json))
	if err != nil {
		return reply(out, nil, err)
	}
	if err := a.check(m.params); err != nil {
		return reply(out, nil, err)
	}
	res, err := m.run(context.Background(), st, a)
	return reply(out, res, err)
}

// tirastore_free releases a buffer the library returned through an out
// parameter. NULL is ignored. Each buffer must be freed exactly once.
//
//export tirastoreGo_free
func tirastoreGo_free(buf *C.char) {
	C.free(unsafe.Pointer(buf))
}

func main() {}
