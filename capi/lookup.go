package main

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
*/
import "C"

import (
	"context"
	"sync"
	"unsafe"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/limits"
)

// tirastore_lookup is tirastore_call(handle, "lookup", ...) by program
// hash for a binding's hot path: a repeated lookup of a program whose hash
// the binding knows (from "make_program_hash", or from a lookup that sent
// the source). The arguments are UTF-8 texts given as pointer and length
// (no JSON to write, none to parse; an embedded NUL is refused as the
// method refuses it). On success (status TIRASTORE_OK) the reply is the
// result alone, without the {"result": ...} around it: null for a miss,
// else the JSON array [is_legal, execution_times, schedule, hostname,
// username, creation_date, update_date, source_project], the fields of
// "lookup"'s object in their order. It is written to buf when it fits
// in buf_size bytes (not NUL-terminated; *out is then NULL), else to a
// new NUL-terminated buffer in *out that the caller frees with
// tirastore_free; *reply_len receives its length either way. On an error
// *out receives {"error": ...} as from tirastore_call (status and message
// are the method's own). A pointer may be NULL only with length 0.
//
//export tirastoreGo_lookup
func tirastoreGo_lookup(handle C.uint64_t, program_name *C.char, program_name_len C.size_t,
	program_hash *C.char, program_hash_len C.size_t, schedule *C.char, schedule_len C.size_t,
	buf unsafe.Pointer, buf_size C.size_t, reply_len *C.size_t, out **C.char) (status C.int) {
	defer guard(out, &status)
	if out == nil || reply_len == nil {
		return reply(out, nil, misuse("tirastore_lookup: reply_len and out must not be NULL"))
	}
	*out = nil
	st, err := findHandle(uint64(handle), false)
	if err != nil {
		return reply(out, nil, err)
	}
	texts, err := cTexts("lookup", []cText{{"program_name", program_name, program_name_len},
		{"program_hash", program_hash, program_hash_len}, {"tiralib_schedule_string", schedule, schedule_len}})
	if err != nil {
		return reply(out, nil, err)
	}
	rowBuf := rowBufs.Get().(*[]byte)
	defer rowBufs.Put(rowBuf)
	b, err := lookupRow((*rowBuf)[:0], st, texts[0], texts[1], texts[2])
	if err != nil {
		return reply(out, nil, err)
	}
	if cap(b) <= maxPooledRow {
		*rowBuf = b
	}
	*reply_len = C.size_t(len(b))
	if buf != nil && len(b) <= int(buf_size) {
		copy(unsafe.Slice((*byte)(buf), len(b)), b)
		return statusOK
	}
	*out = (*C.char)(C.CBytes(append(b, 0)))
	return statusOK
}

// cText is one text argument of a hot-path entry point: its name in the
// method's messages, and the caller's pointer and length.
type cText struct {
	name string
	p    *C.char
	n    C.size_t
}

// cTexts copies the text arguments of a hot-path entry point of method
// (tirastore_lookup, tirastore_record, tirastore_record_many) into Go
// strings, refusing a NULL pointer with a length (misuse) and a text longer
// than a text may be, as the method's JSON arguments would be refused
// (tooLong).
func cTexts(method string, in []cText) ([]string, error) {
	texts := make([]string, len(in))
	for i, arg := range in {
		if arg.p == nil && arg.n != 0 {
			return nil, misuse("tirastore_%s: %s is NULL with a length of %d", method, arg.name, arg.n)
		}
		if uint64(arg.n) > uint64(limits.TextLimit()) {
			return nil, (&args{method: displayName(method)}).tooLong(arg.name, int64(arg.n))
		}
		texts[i] = C.GoStringN(arg.p, C.int(arg.n))
	}
	return texts, nil
}

// rowBufs are the buffers tirastore_lookup writes its replies into before
// copying them to the caller's; one that grew past maxPooledRow (a result
// with thousands of times) is not kept.
var rowBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledRow = 64 << 10

// lookupRow is tirastore_lookup's work: the lookup by program hash and its
// reply (appendResultRow), appended to dst.
func lookupRow(dst []byte, st *core.Store, name, programHash, sched string) ([]byte, error) {
	r, err := st.LookupByHash(context.Background(), name, programHash, sched)
	if err != nil {
		return nil, err
	}
	b, err := appendResultRow(dst, r)
	if err != nil {
		return nil, apierr.New(apierr.KindInternal, "encode result: %v", err)
	}
	return b, nil
}
