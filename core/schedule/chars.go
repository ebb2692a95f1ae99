package schedule

//go:generate python3 gen_tables.py

// runeRange is an inclusive range [lo, hi] of code points. The generated
// tables are sorted, non-overlapping and non-adjacent slices of them.
type runeRange [2]rune

// inRanges reports whether r lies in one of the sorted ranges (binary search).
func inRanges(r rune, table []runeRange) bool {
	lo, hi := 0, len(table)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch {
		case r < table[m][0]:
			hi = m
		case r > table[m][1]:
			lo = m + 1
		default:
			return true
		}
	}
	return false
}

// IsSpace reports whether Python's str.isspace() is true for r (CPython
// 3.11, Unicode 14). This is the "whitespace" of the compatibility contract:
// the set that the original removes from schedules and programs and that its
// regular expressions match with \s. It differs from unicode.IsSpace and from
// Go regexp's ASCII-only \s (e.g. U+001C..U+001F are spaces, U+200B is not),
// and using either of those would change program hashes and record keys.
func IsSpace(r rune) bool {
	if r < 0x80 {
		return asciiSpace(byte(r))
	}
	return inRanges(r, spaceRanges)
}

// isDecimal reports Python str.isdecimal() for r: the \d of the original.
func isDecimal(r rune) bool {
	if r < 0x80 {
		return r >= '0' && r <= '9'
	}
	return inRanges(r, decimalRanges)
}

// isWord reports Python str.isalnum() or r == '_': the \w of the original.
func isWord(r rune) bool {
	if r < 0x80 {
		return r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
	}
	return inRanges(r, wordRanges)
}

// isPrintable reports Python str.isprintable() for r, which decides what
// repr() escapes.
func isPrintable(r rune) bool {
	if r < 0x80 {
		return r >= 0x20 && r < 0x7F
	}
	return inRanges(r, printableRanges)
}
