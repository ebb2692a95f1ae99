// Package keys computes the two identifiers the original Python TiraStore
// stores in its database: program_hash and the record key.
//
// Both are persisted and shared with Python workers on the same database
// file, so they must be bit-identical to the original's (COMPAT.md, "Program
// normalization and hash" and "Record key"); any difference silently splits
// one cache into two.
package keys

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/tuning"
)

// ProgramHash returns program_hash: the lowercase hex SHA-256 of the UTF-8
// bytes of schedule.NormalizeProgram(source), as the original's
// make_program_hash does, so that sources differing only in comments,
// #include lines and whitespace share one programs row. Bytes that are not
// valid UTF-8 are hashed as they are (the original cannot hash such text).
//
// It costs one copy of the source, normalized in place and hashed where
// it lies (schedule.NormalizeProgramInPlace); from
// tuning.ScratchInMemoryMap bytes on, the copy is memory mapped for it and
// unmapped before it returns, so that a large source's copy is not left on
// the Go heap beside the memory its write needs next.
func ProgramHash(source string) string {
	buf, release := scratch(len(source))
	defer release()
	copy(buf, source)
	sum := sha256.Sum256(schedule.NormalizeProgramInPlace(buf))
	return hex.EncodeToString(sum[:])
}

// scratch is n bytes of working memory and the function that gives them
// back: from the Go heap when small, else mapped memory (or the heap if it
// cannot be mapped).
func scratch(n int) ([]byte, func()) {
	if n >= tuning.ScratchInMemoryMap {
		if b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON); err == nil {
			return b, func() { syscall.Munmap(b) }
		}
	}
	return make([]byte, n), func() {}
}

// RecordKey returns the records.key of a measurement: the lowercase hex
// SHA-256 of the UTF-8 bytes of the canonical JSON (Python's
// json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True)) of
// {"program_hash": programHash, "tiralib_schedule_string":
// schedule.Normalize(sched)}. It normalizes sched itself so that every
// spelling of a schedule maps to the same key, whoever computes it.
//
// Inputs are expected to be valid UTF-8. If not, each stray byte 0xNN is
// encoded as the JSON escape \udcNN, which is what the original produces for
// a str decoded with errors="surrogateescape"; no valid input can give such a
// key, so invalid input never collides with a real record.
func RecordKey(programHash, sched string) string {
	return RecordKeyNormalized(programHash, schedule.Normalize(sched))
}

// IsProgramHash reports whether h has the form of a program hash: 64
// lowercase hexadecimal digits.
func IsProgramHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// plainASCII: printable ASCII without '"' or '\\', which canonical JSON
// writes as is.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// RecordKeyNormalized is RecordKey for a schedule that is already
// normalized (schedule.Normalize), for callers that need the normalized
// form anyway: normalizing twice would double the cost of a bulk insert.
func RecordKeyNormalized(programHash, normSched string) string {
	sum := sha256.Sum256(canonicalJSON(programHash, normSched))
	return hex.EncodeToString(sum[:])
}

// canonicalJSON returns the canonical JSON of the record-key document.
func canonicalJSON(programHash, normSched string) []byte {
	if plainASCII(programHash) && plainASCII(normSched) {
		// The common case, without the general encoder: nothing to escape.
		b := make([]byte, 0, 48+len(programHash)+len(normSched))
		b = append(b, `{"program_hash":"`...)
		b = append(b, programHash...)
		b = append(b, `","tiralib_schedule_string":"`...)
		b = append(b, normSched...)
		return append(b, `"}`...)
	}
	if utf8.ValidString(programHash) && utf8.ValidString(normSched) {
		obj := pyjson.NewObject()
		obj.Set("program_hash", programHash)
		obj.Set("tiralib_schedule_string", normSched)
		doc, err := pyjson.Marshal(obj, pyjson.Canonical)
		if err != nil {
			panic("keys: pyjson rejected valid UTF-8: " + err.Error()) // cannot happen
		}
		return doc
	}
	// sort_keys order: "program_hash" < "tiralib_schedule_string".
	var b strings.Builder
	b.WriteString(`{"program_hash":`)
	b.WriteString(quoteSurrogateEscape(programHash))
	b.WriteString(`,"tiralib_schedule_string":`)
	b.WriteString(quoteSurrogateEscape(normSched))
	b.WriteString(`}`)
	return []byte(b.String())
}

// quoteSurrogateEscape returns the canonical JSON string for s, writing each
// byte that is not valid UTF-8 as \udcNN. Valid runs go through pyjson.
func quoteSurrogateEscape(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for len(s) > 0 {
		i := 0
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			i += n
		}
		if i > 0 {
			q, err := pyjson.Marshal(s[:i], pyjson.Canonical)
			if err != nil {
				panic("keys: pyjson rejected valid UTF-8: " + err.Error())
			}
			b.Write(q[1 : len(q)-1])
		}
		if i < len(s) {
			const hexDigits = "0123456789abcdef"
			b.WriteString(`\udc`)
			b.WriteByte(hexDigits[s[i]>>4])
			b.WriteByte(hexDigits[s[i]&0xF])
			i++
		}
		s = s[i:]
	}
	b.WriteByte('"')
	return b.String()
}
