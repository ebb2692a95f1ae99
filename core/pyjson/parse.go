package pyjson

import (
	"bytes"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth is the deepest nesting of arrays and objects that Parse accepts
// and Marshal writes. CPython has no fixed limit: json.loads and json.dumps
// raise RecursionError at roughly 990-1000 levels under the default
// recursion limit, depending on how deep the calling Python code already is.
// The Go limit keeps hostile input from exhausting the stack and keeps the Go
// engine from writing documents far beyond what Python can read back.
const MaxDepth = 1000

// SyntaxError describes why Parse rejected its input. Where CPython's json
// module raises JSONDecodeError, Msg is CPython's message ("Expecting value",
// "Extra data", "Invalid control character at", ...) and the position is the
// one CPython reports, converted from a character index to a byte offset;
// the remaining messages (invalid UTF-8, lone surrogate, too deep, too many
// integer digits) are this package's own.
type SyntaxError struct {
	Msg    string // what is wrong, without position
	Offset int    // byte offset into the input where the problem is
	Line   int    // 1-based line number of Offset
	Column int    // 1-based column of Offset, counted in characters like CPython
}

// Error formats the error like JSONDecodeError does, with the byte offset in
// place of CPython's character index.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("pyjson: %s: line %d column %d (byte offset %d)", e.Msg, e.Line, e.Column, e.Offset)
}

// Parse decodes like Python json.loads: values are nil, bool, string, Number,
// []any, *Object. Accepts NaN, Infinity, -Infinity; duplicate keys: last
// value wins, first position kept (Python dict). Rejects invalid UTF-8 input,
// trailing garbage, and lone surrogate escapes (\ud800 not followed by a low
// surrogate) with a clear error giving the byte offset.
//
// The input is what the Python side would hand to json.loads as a str, i.e.
// UTF-8 text; a leading byte order mark is rejected exactly as json.loads
// rejects a str starting with U+FEFF. Only space, tab, LF and CR count as
// whitespace; raw control characters (U+0000-U+001F) inside strings are
// errors (json.loads's strict=True). Integers with more than MaxIntDigits
// digits are rejected as in CPython 3.11. All errors are *SyntaxError.
func Parse(data []byte) (any, error) {
	return ParseWith(data, ParseOptions{})
}

// ParseOptions bound what ParseWith builds of its input.
type ParseOptions struct {
	// MaxString, when positive, is the longest string (in bytes, once
	// decoded) that is built: a longer one is not, and Long(its length)
	// stands in its place in the result. The parse still checks the rest
	// of the input. It lets a caller refuse a text by its size without
	// having allocated it (the C layer: limits.MaxTextBytes).
	MaxString int
	Long      func(n int) any
}

// ParseWith is Parse with options. data is only read while it runs: no
// value of the result shares memory with it, so it may be memory that the
// caller frees or reuses afterwards (the C layer parses the caller's
// buffer in place).
func ParseWith(data []byte, opts ParseOptions) (any, error) {
	p := &parser{data: data, opts: opts}
	if !utf8.Valid(data) {
		return nil, p.fail("Invalid UTF-8 byte in input", firstInvalidUTF8(data))
	}
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return nil, p.fail("Unexpected UTF-8 BOM (decode using utf-8-sig)", 0)
	}
	v, i, err := p.value(p.skipSpace(0))
	if err != nil {
		return nil, err
	}
	if i = p.skipSpace(i); i != len(data) {
		return nil, p.fail("Extra data", i)
	}
	return v, nil
}

type parser struct {
	data  []byte
	depth int
	opts  ParseOptions
	// keys are the short object keys read so far, each string made once:
	// a list of records repeats the same few keys thousands of times.
	keys map[string]string
}

// Sizes of the key sharing of parser.key: keys up to maxSharedKey bytes,
// at most maxSharedKeys of them per parse.
const (
	maxSharedKey  = 64
	maxSharedKeys = 256
)

// fail builds a SyntaxError at byte offset off, computing line and column
// the way json.JSONDecodeError does (column counts characters since the
// last newline).
func (p *parser) fail(msg string, off int) error {
	if off > len(p.data) {
		off = len(p.data)
	}
	before := p.data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	col := utf8.RuneCount(before[lineStart:]) + 1
	return &SyntaxError{Msg: msg, Offset: off, Line: line, Column: col}
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// skipSpace skips json's WHITESPACE, r'[ \t\n\r]*'.
func (p *parser) skipSpace(i int) int {
	for i < len(p.data) {
		switch p.data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value parses one JSON value at data[i] (whitespace already skipped), like
// CPython's scan_once, and returns it with the offset just past it.
func (p *parser) value(i int) (any, int, error) {
	d := p.data
	if i >= len(d) {
		return nil, i, p.fail("Expecting value", i)
	}
	switch d[i] {
	case '"':
		return p.str(i)
	case '{':
		return p.object(i)
	case '[':
		return p.array(i)
	case 'n':
		if bytes.HasPrefix(d[i:], []byte("null")) {
			return nil, i + 4, nil
		}
	case 't':
		if bytes.HasPrefix(d[i:], []byte("true")) {
			return true, i + 4, nil
		}
	case 'f':
		if bytes.HasPrefix(d[i:], []byte("false")) {
			return false, i + 5, nil
		}
	case 'N':
		if bytes.HasPrefix(d[i:], []byte(nanToken)) {
			return Number(nanToken), i + len(nanToken), nil
		}
	case 'I':
		if bytes.HasPrefix(d[i:], []byte(infToken)) {
			return Number(infToken), i + len(infToken), nil
		}
	case '-':
		if bytes.HasPrefix(d[i:], []byte(negInfToken)) {
			return Number(negInfToken), i + len(negInfToken), nil
		}
	}
	end, isFloat, ok := scanNumber(d, i)
	if !ok {
		return nil, i, p.fail("Expecting value", i)
	}
	if !isFloat {
		digits := end - i
		if d[i] == '-' {
			digits--
		}
		if digits > MaxIntDigits {
			return nil, i, p.fail(fmt.Sprintf("Exceeds the limit (%d digits) for integer string conversion: value has %d digits", MaxIntDigits, digits), i)
		}
	}
	return Number(d[i:end]), end, nil
}

func (p *parser) enter(i int) error {
	p.depth++
	if p.depth > MaxDepth {
		return p.fail(fmt.Sprintf("Nesting deeper than %d levels", MaxDepth), i)
	}
	return nil
}

// array parses '[' at data[i] like CPython's _parse_array_unicode.
func (p *parser) array(i int) (any, int, error) {
	if err := p.enter(i); err != nil {
		return nil, i, err
	}
	defer func() { p.depth-- }()
	d := p.data
	out := []any{}
	i = p.skipSpace(i + 1)
	if i < len(d) && d[i] == ']' {
		return out, i + 1, nil
	}
	for {
		v, next, err := p.value(i)
		if err != nil {
			return nil, next, err
		}
		out = append(out, v)
		i = p.skipSpace(next)
		if i < len(d) && d[i] == ']' {
			return out, i + 1, nil
		}
		if i >= len(d) || d[i] != ',' {
			return nil, i, p.fail("Expecting ',' delimiter", i)
		}
		i = p.skipSpace(i + 1)
	}
}

// object parses '{' at data[i] like CPython's _parse_object_unicode.
func (p *parser) object(i int) (any, int, error) {
	if err := p.enter(i); err != nil {
		return nil, i, err
	}
	defer func() { p.depth-- }()
	d := p.data
	i = p.skipSpace(i + 1)
	if i < len(d) && d[i] == '}' {
		return NewObject(), i + 1, nil
	}
	out := NewObjectCap(4) // a record's dict of three or four keys, without regrowing
	for {
		if i >= len(d) || d[i] != '"' {
			return nil, i, p.fail("Expecting property name enclosed in double quotes", i)
		}
		k, next, err := p.key(i)
		if err != nil {
			return nil, next, err
		}
		i = p.skipSpace(next)
		if i >= len(d) || d[i] != ':' {
			return nil, i, p.fail("Expecting ':' delimiter", i)
		}
		i = p.skipSpace(i + 1)
		v, next, err := p.value(i)
		if err != nil {
			return nil, next, err
		}
		out.Set(k, v)
		i = p.skipSpace(next)
		if i < len(d) && d[i] == '}' {
			return out, i + 1, nil
		}
		if i >= len(d) || d[i] != ',' {
			return nil, i, p.fail("Expecting ',' delimiter", i)
		}
		i = p.skipSpace(i + 1)
	}
}

// key parses the object key whose opening quote is at data[begin]: str,
// but a short key without escapes or control characters that the parse
// has met before is the string made then (a key longer than any text is
// a marker of str's, no string: refused as a key, which the request's own
// length limit makes unreachable from the C layer).
func (p *parser) key(begin int) (string, int, error) {
	d := p.data
	for end := begin + 1; end < len(d) && end-begin <= maxSharedKey; end++ {
		c := d[end]
		if c == '"' {
			if k, ok := p.keys[string(d[begin+1:end])]; ok { // no allocation for the lookup
				return k, end + 1, nil
			}
			k := string(d[begin+1 : end])
			if p.keys == nil {
				p.keys = make(map[string]string)
			}
			if len(p.keys) < maxSharedKeys {
				p.keys[k] = k
			}
			return k, end + 1, nil
		}
		if c == '\\' || c <= 0x1f {
			break
		}
	}
	v, next, err := p.str(begin)
	if err != nil {
		return "", next, err
	}
	k, ok := v.(string)
	if !ok {
		return "", begin, p.fail("Object key too long", begin)
	}
	return k, next, nil
}

// str parses the string whose opening quote is at data[begin], like
// CPython's scanstring_unicode with strict=True.
//
// A first pass finds its end: a string without escapes is then copied
// once, and one with escapes is decoded into a buffer of its encoded
// length (never shorter than the decoded one), which becomes the string
// without another copy, so that a long text (a program source: every
// newline is an escape) costs its size once, not the doublings of a
// growing buffer and a final copy.
func (p *parser) str(begin int) (any, int, error) {
	d := p.data
	end, escaped, ctl := begin+1, false, -1
	for end < len(d) && d[end] != '"' {
		switch c := d[end]; {
		case c == '\\':
			escaped = true
			end++
		case c <= 0x1f && ctl < 0:
			ctl = end
		}
		end++
	}
	if end < len(d) && !escaped {
		if ctl >= 0 {
			return nil, ctl, p.fail("Invalid control character at", ctl)
		}
		if n := end - begin - 1; p.opts.MaxString > 0 && n > p.opts.MaxString {
			return p.opts.Long(n), end + 1, nil
		}
		return string(d[begin+1 : end]), end + 1, nil
	}
	var buf []byte
	if end < len(d) {
		n := end - begin - 1 // the encoded length bounds the decoded one
		if n > exactBufferFrom || (p.opts.MaxString > 0 && n > p.opts.MaxString) {
			n = decodedLen(d[begin+1 : end])
		}
		if p.opts.MaxString > 0 && n > p.opts.MaxString {
			return p.opts.Long(n), end + 1, nil
		}
		buf = make([]byte, 0, n)
	}
	i := begin + 1
	chunk := i
	for {
		// Find the closing quote or the next escape; reject raw controls.
		for i < len(d) && d[i] != '"' && d[i] != '\\' {
			if d[i] <= 0x1f {
				return nil, i, p.fail("Invalid control character at", i)
			}
			i++
		}
		if i >= len(d) {
			return nil, i, p.fail("Unterminated string starting at", begin)
		}
		if d[i] == '"' {
			buf = append(buf, d[chunk:i]...)
			if len(buf) == 0 {
				return "", i + 1, nil
			}
			// buf is this string's own: no copy.
			return unsafe.String(unsafe.SliceData(buf), len(buf)), i + 1, nil
		}
		// Backslash escape.
		buf = append(buf, d[chunk:i]...)
		if i+1 >= len(d) {
			return nil, i, p.fail("Unterminated string starting at", begin)
		}
		c := d[i+1]
		if c != 'u' {
			var r byte
			switch c {
			case '"', '\\', '/':
				r = c
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			case 'n':
				r = '\n'
			case 'r':
				r = '\r'
			case 't':
				r = '\t'
			default:
				return nil, i, p.fail("Invalid \\escape", i)
			}
			buf = append(buf, r)
			i += 2
			chunk = i
			continue
		}
		// \uXXXX: CPython needs the four digits and at least one more
		// character after them (else "Invalid \uXXXX escape", even when
		// the string is merely unterminated).
		u := i + 1
		r, ok := p.hex4(u)
		if !ok {
			return nil, u, p.fail("Invalid \\uXXXX escape", u)
		}
		end := u + 5
		switch {
		case r >= 0xd800 && r <= 0xdbff:
			// High surrogate: combine with a following \uXXXX low
			// surrogate, checked in CPython's order.
			if end+6 < len(d) && d[end] == '\\' && d[end+1] == 'u' {
				r2, ok := p.hex4(end + 1)
				if !ok {
					return nil, end + 1, p.fail("Invalid \\uXXXX escape", end+1)
				}
				if r2 >= 0xdc00 && r2 <= 0xdfff {
					r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
					end += 6
					break
				}
			}
			return nil, i, p.fail(fmt.Sprintf("Lone surrogate \\u%04x in string (Python would accept it but it has no UTF-8 form)", r), i)
		case r >= 0xdc00 && r <= 0xdfff:
			return nil, i, p.fail(fmt.Sprintf("Lone surrogate \\u%04x in string (Python would accept it but it has no UTF-8 form)", r), i)
		}
		buf = utf8.AppendRune(buf, r)
		i = end
		chunk = i
	}
}

// exactBufferFrom is the encoded length from which a string's buffer is
// sized by counting its decoded length (one more pass) rather than by its
// encoded length, which wastes a byte per escape.
const exactBufferFrom = 1 << 20

// decodedLen is the length in bytes of the decoded form of the body of a
// string (between its quotes), counted without decoding it; escapes that
// are not valid count as their own length (the decoding reports them).
func decodedLen(b []byte) int {
	n := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			n++
			continue
		}
		if b[i+1] != 'u' {
			n++
			i++
			continue
		}
		r, ok := hex4At(b, i+1)
		if !ok {
			n += 2
			i++
			continue
		}
		if r >= 0xd800 && r <= 0xdbff && i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if r2, ok := hex4At(b, i+7); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
				n += 4
				i += 11
				continue
			}
		}
		if r >= 0xd800 && r <= 0xdfff {
			n += 3 // a lone surrogate: an error once decoded
		} else {
			n += utf8.RuneLen(r)
		}
		i += 5
	}
	return n
}

// hex4At decodes the four hex digits after the 'u' at b[u] (no more input
// is required after them, unlike hex4).
func hex4At(b []byte, u int) (rune, bool) {
	if u+4 >= len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[u+1 : u+5] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// hex4 decodes the four hex digits after the 'u' at data[u], requiring (as
// CPython does) that at least one byte follows them.
func (p *parser) hex4(u int) (rune, bool) {
	if u+5 >= len(p.data) {
		return 0, false
	}
	return hex4At(p.data, u)
}
