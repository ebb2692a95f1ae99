package pyjson

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Options mirrors json.dumps keyword arguments.
//
// The zero value is not json.dumps's default (it means indent=0 with empty
// separators); start from Canonical, Compact or Default. Note that
// json.dumps(v, indent=N) silently switches item_separator to "," so that
// lines carry no trailing space: to reproduce it pass
// Options{EnsureASCII: true, Indent: N, ItemSep: ",", KeySep: ": "}.
type Options struct {
	SortKeys    bool   // sort_keys=True: object keys in code point order
	EnsureASCII bool   // ensure_ascii=True: escape everything outside printable ASCII
	Indent      int    // <0: no indentation (single line); >=0: json.dumps(indent=N) layout (newline + N spaces per level; indent=0 means newlines with no spaces)
	ItemSep     string // e.g. ", " or ","
	KeySep      string // e.g. ": " or ":"
}

// The option sets TiraStore's Python code uses, named so that call sites say
// which json.dumps call they reproduce.
var (
	// Canonical = json.dumps(v, sort_keys=True, separators=(",", ":"),
	// ensure_ascii=True)
	Canonical = Options{SortKeys: true, EnsureASCII: true, Indent: -1, ItemSep: ",", KeySep: ":"}
	// Compact = json.dumps(v, separators=(",", ":"), ensure_ascii=True)
	Compact = Options{EnsureASCII: true, Indent: -1, ItemSep: ",", KeySep: ":"}
	// Default = json.dumps(v) (separators ", " and ": ", ensure_ascii=True)
	Default = Options{EnsureASCII: true, Indent: -1, ItemSep: ", ", KeySep: ": "}
)

// Raw is JSON text that Marshal writes as it is, unchecked. It is for a
// value the caller has proven to be JSON that a Python parser reads as it
// would the value's own encoding, in the layout the Options use: a stored
// list of numbers passed through without a parse and a re-encoding.
type Raw string

// UnsupportedTypeError is returned by Marshal for a Go value it cannot
// encode, like the TypeError "Object of type X is not JSON serializable".
type UnsupportedTypeError struct {
	Type string // the Go type, as printed by %T
}

// Error names the offending Go type.
func (e *UnsupportedTypeError) Error() string {
	return "pyjson: value of Go type " + e.Type + " is not JSON serializable"
}

// Marshal encodes exactly like json.dumps with those options. Accepted Go
// values: nil, bool, string, Number, float64, float32, int, int8, int16,
// int32, int64, uint, uint8, uint16, uint32, uint64, []any, []string,
// []Number, []float64, []*Object, *Object and map[string]any: a value of
// another Go type is converted to these first, the way a Python class
// would be converted to dicts and lists before json.dumps (the C layer's
// replies: capi/replies.go). Anything else (including named types such as `type
// Kind string`) gives an *UnsupportedTypeError naming the Go type.
//
// Containers: *Object keys are written in insertion order, or sorted when
// SortKeys. A Go map has no order, so map[string]any keys are ALWAYS written
// sorted (by code point, as sorted() would) to keep output deterministic:
// this matches Python only where the Python dict had sorted keys or SortKeys
// is set; use *Object when order matters. Nil slices, nil maps and a nil
// *Object are written as empty containers ([] and {}), since Python has no
// nil list or dict. A container that contains itself is an error ("Circular
// reference detected", as in Python), as is nesting deeper than MaxDepth.
//
// Numbers: a Number with integer syntax is written as Python int(str) would
// print it (e.g. "-0" -> "0", big integers kept exactly; more than
// MaxIntDigits digits is an error as in CPython 3.11); any other Number is
// parsed to float64 and written with FormatFloat (so "1.50" -> "1.5",
// "1E5" -> "100000.0", "1e400" -> "Infinity"), exactly like json.loads
// followed by json.dumps. A Number with invalid syntax is an error. float32
// values are widened exactly to float64 first (float32(0.1) is written as
// 0.10000000149011612). NaN and infinities are written as NaN, Infinity and
// -Infinity (json.dumps's default allow_nan=True).
//
// Strings: with EnsureASCII, escape '"' '\\' and \n \r \t \b \f with their
// short forms, every other char outside 0x20..0x7E (controls, DEL 0x7F, all
// non-ASCII) as lowercase \uXXXX, astral chars as a surrogate pair;
// '<' '>' '&' '/' are NOT escaped. Without EnsureASCII: escape only '"',
// '\\', the short forms and other chars < 0x20 as \u00XX; everything else
// (DEL, non-ASCII) raw UTF-8. Strings (and keys) must be valid UTF-8: Python
// str cannot hold stray bytes, so invalid UTF-8 is an error rather than being
// silently replaced.
//
// Indent layout matches CPython byte for byte, including empty containers
// "[]" and "{}" and the item separator at line ends (json.dumps(indent=2)
// uses item_separator="," and key_separator=": " — callers pass
// ItemSep/KeySep explicitly).
func Marshal(v any, opt Options) ([]byte, error) {
	e := &encoder{opt: opt, buf: make([]byte, 0, 256)}
	if err := e.value(v, 0); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// Append is Marshal appending to dst: a caller writing a document of a
// fixed shape (a lookup's reply, once per call) writes its parts into one
// buffer.
func Append(dst []byte, v any, opt Options) ([]byte, error) {
	e := encoder{opt: opt, buf: dst}
	if err := e.value(v, 0); err != nil {
		return dst, err
	}
	return e.buf, nil
}

// AppendString is Append of the string s, without making it an any (which
// costs an allocation per string).
func AppendString(dst []byte, s string, opt Options) ([]byte, error) {
	e := encoder{opt: opt, buf: dst}
	if err := e.string(s); err != nil {
		return dst, err
	}
	return e.buf, nil
}

type encoder struct {
	opt   Options
	buf   []byte
	depth int // containers being encoded
	// active holds the containers currently being encoded, to detect
	// cycles the way json.dumps's check_circular does.
	active map[visitKey]struct{}
}

// cycleCheckDepth is the container depth from which Marshal starts tracking
// containers to report cycles.
const cycleCheckDepth = 32

type visitKey struct {
	ptr uintptr
	len int
	typ reflect.Type
}

func (e *encoder) value(v any, level int) error {
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case bool:
		if x {
			e.buf = append(e.buf, "true"...)
		} else {
			e.buf = append(e.buf, "false"...)
		}
	case string:
		return e.string(x)
	case Number:
		return e.number(x)
	case Raw:
		e.buf = append(e.buf, x...)
	case float64:
		e.buf = appendFloat(e.buf, x)
	case float32:
		e.buf = appendFloat(e.buf, float64(x))
	case int:
		e.buf = strconv.AppendInt(e.buf, int64(x), 10)
	case int64:
		e.buf = strconv.AppendInt(e.buf, x, 10)
	case uint64:
		e.buf = strconv.AppendUint(e.buf, x, 10)
	case int8, int16, int32, uint, uint8, uint16, uint32:
		// The other integer types, rare in a reply, take one path.
		if rv := reflect.ValueOf(x); rv.CanInt() {
			e.buf = strconv.AppendInt(e.buf, rv.Int(), 10)
		} else {
			e.buf = strconv.AppendUint(e.buf, rv.Uint(), 10)
		}
	case []any:
		return e.list(v, len(x), level, func(i int, lvl int) error { return e.value(x[i], lvl) })
	case []string:
		return e.list(v, len(x), level, func(i int, _ int) error { return e.string(x[i]) })
	case []Number:
		return e.list(v, len(x), level, func(i int, _ int) error { return e.number(x[i]) })
	case []float64:
		return e.list(v, len(x), level, func(i int, _ int) error {
			e.buf = appendFloat(e.buf, x[i])
			return nil
		})
	case []*Object:
		return e.list(v, len(x), level, func(i int, lvl int) error { return e.object(x[i], lvl) })
	case *Object:
		return e.object(x, level)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // byte order of UTF-8 == code point order
		return e.dict(v, keys, level, func(i int, lvl int) error { return e.value(x[keys[i]], lvl) })
	default:
		return &UnsupportedTypeError{Type: fmt.Sprintf("%T", v)}
	}
	return nil
}

func (e *encoder) object(o *Object, level int) error {
	if o == nil {
		e.buf = append(e.buf, "{}"...)
		return nil
	}
	keys, vals := o.keys, o.vals
	if e.opt.SortKeys && len(keys) > 1 {
		order := make([]int, len(keys))
		for i := range order {
			order[i] = i
		}
		sort.Slice(order, func(a, b int) bool { return keys[order[a]] < keys[order[b]] })
		sk := make([]string, len(keys))
		sv := make([]any, len(keys))
		for i, j := range order {
			sk[i], sv[i] = keys[j], vals[j]
		}
		keys, vals = sk, sv
	}
	return e.dict(o, keys, level, func(i int, lvl int) error { return e.value(vals[i], lvl) })
}

// enter records container c as being encoded and fails on cycles and on
// excessive depth.
func (e *encoder) enter(c any, n int) (visitKey, error) {
	e.depth++
	if e.depth > MaxDepth {
		return visitKey{}, fmt.Errorf("pyjson: containers nested deeper than %d levels", MaxDepth)
	}
	if e.depth <= cycleCheckDepth {
		// Shallow containers are not tracked: a cycle keeps re-entering
		// the same containers, so it is caught once deeper than this, and
		// ordinary documents skip the bookkeeping.
		return visitKey{}, nil
	}
	rv := reflect.ValueOf(c)
	k := visitKey{ptr: rv.Pointer(), len: n, typ: rv.Type()}
	if k.ptr == 0 || n == 0 {
		return visitKey{}, nil
	}
	if _, busy := e.active[k]; busy {
		return visitKey{}, fmt.Errorf("pyjson: Circular reference detected (%T)", c)
	}
	if e.active == nil {
		e.active = make(map[visitKey]struct{})
	}
	e.active[k] = struct{}{}
	return k, nil
}

func (e *encoder) leave(k visitKey) {
	e.depth--
	if k.ptr != 0 {
		delete(e.active, k)
	}
}

// list writes a JSON array of n items the way json's _iterencode_list does.
func (e *encoder) list(c any, n int, level int, item func(i, level int) error) error {
	if n == 0 {
		e.buf = append(e.buf, "[]"...)
		return nil
	}
	k, err := e.enter(c, n)
	if err != nil {
		return err
	}
	defer e.leave(k)
	e.buf = append(e.buf, '[')
	level = e.open(level)
	for i := 0; i < n; i++ {
		if i > 0 {
			e.sep(level)
		}
		if err := item(i, level); err != nil {
			return err
		}
	}
	e.close(level)
	e.buf = append(e.buf, ']')
	return nil
}

// dict writes a JSON object the way json's _iterencode_dict does.
func (e *encoder) dict(c any, keys []string, level int, val func(i, level int) error) error {
	if len(keys) == 0 {
		e.buf = append(e.buf, "{}"...)
		return nil
	}
	k, err := e.enter(c, len(keys))
	if err != nil {
		return err
	}
	defer e.leave(k)
	e.buf = append(e.buf, '{')
	level = e.open(level)
	for i, key := range keys {
		if i > 0 {
			e.sep(level)
		}
		if err := e.string(key); err != nil {
			return err
		}
		e.buf = append(e.buf, e.opt.KeySep...)
		if err := val(i, level); err != nil {
			return err
		}
	}
	e.close(level)
	e.buf = append(e.buf, '}')
	return nil
}

// open starts the first item of a non-empty container and returns the
// container's inner indentation level.
func (e *encoder) open(level int) int {
	if e.opt.Indent < 0 {
		return level
	}
	level++
	e.newline(level)
	return level
}

// sep writes the separator between two items.
func (e *encoder) sep(level int) {
	e.buf = append(e.buf, e.opt.ItemSep...)
	if e.opt.Indent >= 0 {
		e.newline(level)
	}
}

// close ends the last item of a container opened at level-1.
func (e *encoder) close(level int) {
	if e.opt.Indent >= 0 {
		e.newline(level - 1)
	}
}

func (e *encoder) newline(level int) {
	e.buf = append(e.buf, '\n')
	for i := 0; i < level*e.opt.Indent; i++ {
		e.buf = append(e.buf, ' ')
	}
}

func (e *encoder) number(n Number) error {
	b, err := AppendNumber(e.buf, n)
	if err != nil {
		return err
	}
	e.buf = b
	return nil
}

// AppendNumber appends n the way json.dumps writes the value json.loads made
// of it ("1.50" -> 1.5, "1E5" -> 100000.0, "-0" -> 0), so that a caller
// writing a fixed-shape document (a record's result_json, thousands per
// record_many) need not build an Object for Marshal. It fails on invalid
// syntax and on integers longer than Python's digit limit, as Marshal does.
func AppendNumber(dst []byte, n Number) ([]byte, error) {
	valid, isInt := n.classify()
	if !valid {
		return dst, fmt.Errorf("pyjson: invalid Number %q", string(n))
	}
	if !isInt {
		f, err := n.Float64()
		if err != nil {
			return dst, err
		}
		return appendFloat(dst, f), nil
	}
	s := string(n)
	digits := len(s)
	if s[0] == '-' {
		digits--
	}
	if digits > MaxIntDigits {
		return dst, fmt.Errorf("pyjson: integer Number has %d digits, more than Python's limit of %d for int to str conversion", digits, MaxIntDigits)
	}
	if s == "-0" {
		s = "0" // int("-0") == 0
	}
	return append(dst, s...), nil
}

const hexDigits = "0123456789abcdef"

// string writes s quoted like json's encode_basestring(_ascii).
func (e *encoder) string(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("pyjson: string is not valid UTF-8: %q", s)
	}
	b := append(e.buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' {
			i++
			continue
		}
		if c >= 0x7f && !e.opt.EnsureASCII {
			i++ // DEL and non-ASCII are written raw
			continue
		}
		b = append(b, s[start:i]...)
		size := 1
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		default:
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			if r >= 0x10000 {
				r -= 0x10000
				b = appendU4(b, 0xd800|(r>>10))
				r = 0xdc00 | (r & 0x3ff)
			}
			b = appendU4(b, r)
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	e.buf = append(b, '"')
	return nil
}

func appendU4(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}
