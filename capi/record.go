package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/pyjson"
)

// tirastore_record is tirastore_call(handle, "record", ...) by program hash
// for a binding's hot path: a record of a program the binding has written
// before (see "record" by program_hash: a program the database does not
// have is TIRASTORE_ERR_NO_PROGRAM, and nothing is written). The texts are
// UTF-8 given as pointer and length (a pointer may be NULL only with length
// 0); is_legal and overwrite are 0 or not; execution_times_json is the JSON
// of that argument (an array of numbers, or null), also by pointer and
// length, kept as JSON so that its numbers keep their exact texts. On success
// (status TIRASTORE_OK) *written receives 1 if the record was written, 0 if
// it existed and overwrite was 0 (the method's true and false), and *out
// is NULL: no reply to free. On an error *out receives {"error": ...} as
// from tirastore_call (status and message are the method's own).
//
//export tirastoreGo_record
func tirastoreGo_record(handle C.uint64_t, program_name *C.char, program_name_len C.size_t,
	program_hash *C.char, program_hash_len C.size_t, schedule *C.char, schedule_len C.size_t,
	is_legal C.int, execution_times_json *C.char, execution_times_len C.size_t, overwrite C.int,
	written *C.int, out **C.char) (status C.int) {
	defer guard(out, &status)
	if out == nil || written == nil {
		return reply(out, nil, misuse("tirastore_record: written and out must not be NULL"))
	}
	*out = nil
	st, err := findHandle(uint64(handle), false)
	if err != nil {
		return reply(out, nil, err)
	}
	if n := uint64(program_name_len) + uint64(program_hash_len) + uint64(schedule_len) + uint64(execution_times_len); n > uint64(limits.RequestLimit()) {
		return reply(out, nil, requestTooLong("record", n))
	}
	texts, err := cTexts("record", []cText{{"program_name", program_name, program_name_len},
		{"program_hash", program_hash, program_hash_len}, {"tiralib_schedule_string", schedule, schedule_len}})
	if err != nil {
		return reply(out, nil, err)
	}
	if execution_times_json == nil {
		return reply(out, nil, misuse("tirastore_record: execution_times must not be NULL (its JSON: null for None)"))
	}
	// The arguments as tirastore_call's JSON would have given them, run by
	// the method itself: one set of checks and messages for both paths.
	a := &args{method: displayName("record"), obj: pyjson.NewObjectCap(6)}
	a.obj.Set("program_name", texts[0])
	a.obj.Set("program_hash", texts[1])
	a.obj.Set("tiralib_schedule_string", texts[2])
	a.obj.Set("is_legal", is_legal != 0)
	times, err := pyjson.Parse(C.GoBytes(unsafe.Pointer(execution_times_json), C.int(execution_times_len)))
	if err != nil {
		return reply(out, nil, misuse("%s(): execution_times is not valid JSON: %v", a.method, err))
	}
	a.obj.Set("execution_times", times)
	a.obj.Set("overwrite", overwrite != 0)
	res, err := methods["record"].run(context.Background(), st, a)
	if err != nil {
		return reply(out, nil, err)
	}
	*written = 0
	if ok, _ := res.(bool); ok {
		*written = 1
	}
	return statusOK
}
