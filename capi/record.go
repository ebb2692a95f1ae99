package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/tirastore/tirastore/core"
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
	// Read in place, as tirastore_call's arguments are (see request).
	times, err := pyjson.Parse(unsafe.Slice((*byte)(unsafe.Pointer(execution_times_json)), int(execution_times_len)))
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

// tirastore_record_many is tirastore_call(handle, "record_many", ...) by
// program hash for a binding's hot path, with the measurements as arrays
// rather than a JSON list of objects (whose encoding and parsing cost more
// than a record in a large batch): count measurements; schedule i is the
// next schedule_lens[i] bytes of UTF-8 in schedules (all of them one after
// the other); is_legal[i] is 0 or not; execution_times i is None when
// times_counts[i] is -1, else the next times_counts[i] numbers of times,
// each stored as Python writes that float (a binding sends other numbers,
// ints among them, through tirastore_call, which keeps their texts). The
// program must be in the database, as for "record_many" by program_hash
// (else TIRASTORE_ERR_NO_PROGRAM, nothing written). On success *written
// receives how many records were written (the method's result) and *out
// is NULL; on an error *out receives {"error": ...} as from tirastore_call.
// A pointer may be NULL only when nothing is read through it.
//
//export tirastoreGo_record_many
func tirastoreGo_record_many(handle C.uint64_t, program_name *C.char, program_name_len C.size_t,
	program_hash *C.char, program_hash_len C.size_t, count C.size_t, schedules *C.char, schedule_lens *C.int64_t,
	is_legal *C.char, times_counts *C.int64_t, times *C.double, overwrite C.int,
	written *C.size_t, out **C.char) (status C.int) {
	defer guard(out, &status)
	if out == nil || written == nil {
		return reply(out, nil, misuse("tirastore_record_many: written and out must not be NULL"))
	}
	*out = nil
	st, err := findHandle(uint64(handle), false)
	if err != nil {
		return reply(out, nil, err)
	}
	texts, err := cTexts("record_many", []cText{{"program_name", program_name, program_name_len},
		{"program_hash", program_hash, program_hash_len}})
	if err != nil {
		return reply(out, nil, err)
	}
	limit := uint64(limits.RequestLimit())
	if uint64(count) > limit {
		return reply(out, nil, requestTooLong("record_many", uint64(count)))
	}
	n := int(count)
	if n > 0 && (schedule_lens == nil || is_legal == nil || times_counts == nil) {
		return reply(out, nil, misuse("tirastore_record_many: schedule_lens, is_legal and times_counts must not be NULL with a count of %d", n))
	}
	var lens, counts []int64
	var legal []byte
	if n > 0 {
		lens = unsafe.Slice((*int64)(unsafe.Pointer(schedule_lens)), n)
		counts = unsafe.Slice((*int64)(unsafe.Pointer(times_counts)), n)
		legal = unsafe.Slice((*byte)(unsafe.Pointer(is_legal)), n)
	}
	// The sizes first, so that nothing is read past what the caller gave.
	size := uint64(program_name_len) + uint64(program_hash_len)
	var textBytes, nTimes uint64
	for i := range n {
		if lens[i] < 0 || counts[i] < -1 {
			return reply(out, nil, misuse("tirastore_record_many: measurement %d has schedule_lens %d and times_counts %d", i, lens[i], counts[i]))
		}
		if uint64(lens[i]) > limit || uint64(max(counts[i], 0)) > limit/8 {
			return reply(out, nil, requestTooLong("record_many", max(uint64(lens[i]), 8*uint64(max(counts[i], 0)))))
		}
		textBytes += uint64(lens[i])
		nTimes += uint64(max(counts[i], 0))
		if size+textBytes+8*nTimes > limit {
			return reply(out, nil, requestTooLong("record_many", size+textBytes+8*nTimes))
		}
	}
	if (textBytes > 0 && schedules == nil) || (nTimes > 0 && times == nil) {
		return reply(out, nil, misuse("tirastore_record_many: schedules or times is NULL with %d bytes and %d numbers to read", textBytes, nTimes))
	}
	var text []byte
	var nums []float64
	if textBytes > 0 {
		text = unsafe.Slice((*byte)(unsafe.Pointer(schedules)), textBytes)
	}
	if nTimes > 0 {
		nums = unsafe.Slice((*float64)(unsafe.Pointer(times)), nTimes)
	}
	a := &args{method: displayName("record_many"), obj: pyjson.NewObjectCap(3)}
	a.obj.Set("program_name", texts[0])
	a.obj.Set("program_hash", texts[1])
	a.obj.Set("overwrite", overwrite != 0)
	res, err := recordMany(context.Background(), st, a, func() ([]core.Measurement, error) {
		ms := make([]core.Measurement, n)
		off, k := int64(0), 0
		for i := range ms {
			if lens[i] > int64(limits.TextLimit()) {
				return nil, a.tooLong(fmt.Sprintf("schedules[%d].tiralib_schedule_string", i), lens[i])
			}
			ms[i].Schedule = string(text[off : off+lens[i]])
			off += lens[i]
			ms[i].IsLegal = legal[i] != 0
			if c := counts[i]; c >= 0 {
				ts := make([]pyjson.Number, c)
				for j := range ts {
					ts[j] = pyjson.Number(pyjson.FormatFloat(nums[k]))
					k++
				}
				ms[i].ExecutionTimes = ts
			}
		}
		return ms, nil
	})
	if err != nil {
		return reply(out, nil, err)
	}
	*written = C.size_t(res)
	return statusOK
}
