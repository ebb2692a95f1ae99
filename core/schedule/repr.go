package schedule

import (
	"strings"
	"unicode/utf8"
)

const lowerHex = "0123456789abcdef"

// Repr returns Python's repr() of s as a str (CPython 3.11 unicode_repr),
// because the original puts {token!r} into its validation messages and
// callers match on those messages. Quotes: single, unless s contains ' and
// no ", then double. Escapes: backslash, the chosen quote, \t \n \r; other
// ASCII controls and DEL as \xNN; non-printable non-ASCII (str.isprintable)
// as \xNN, \uNNNN or \UNNNNNNNN; all hex lowercase. A byte that is not valid
// UTF-8 is shown as \udcNN, the lone surrogate Python's surrogateescape
// error handler would have produced for it.
func Repr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte(quote)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			hexEscape(&b, 'u', 0xDC00|rune(s[i]), 4)
			i++
			continue
		}
		i += n
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteByte(byte(r))
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7F:
			hexEscape(&b, 'x', r, 2)
		case r < 0x7F:
			b.WriteByte(byte(r))
		case isPrintable(r):
			b.WriteRune(r)
		case r <= 0xFF:
			hexEscape(&b, 'x', r, 2)
		case r <= 0xFFFF:
			hexEscape(&b, 'u', r, 4)
		default:
			hexEscape(&b, 'U', r, 8)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

// hexEscape writes a backslash, kind, and r as width lowercase hex digits.
func hexEscape(b *strings.Builder, kind byte, r rune, width int) {
	b.WriteByte('\\')
	b.WriteByte(kind)
	for shift := 4 * (width - 1); shift >= 0; shift -= 4 {
		b.WriteByte(lowerHex[(r>>uint(shift))&0xF])
	}
}
