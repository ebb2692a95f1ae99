package schedule

import (
	"bytes"
	"unicode/utf8"
	"unsafe"
)

// NormalizeProgram implements the original's normalize_program, whose
// SHA-256 is the program_hash shared by old and new workers. In order:
//
//  1. re.sub(r"/\*.*?\*/", "", s, flags=re.DOTALL): block comments, shortest
//     match, across lines; an unterminated "/*" is kept.
//  2. re.sub(r"//[^\n]*", "", s): line comments up to, not including, "\n".
//  3. re.sub(r'^\s*#\s*include\s*[<"][^>"]*[>"]\s*$', "", s, flags=re.M):
//     #include lines. Because \s also matches "\n", a match may begin at an
//     earlier blank line, may span lines inside the brackets, and takes the
//     trailing whitespace up to the last "\n" before the next non-space
//     character (or to the end of the text). The emulation reproduces the
//     regex engine's leftmost, greedy result.
//  4. All whitespace (IsSpace) removed.
//
// Empty input gives "". It copies src once and normalizes the copy in
// place (NormalizeProgramInPlace).
func NormalizeProgram(src string) string {
	if src == "" {
		return ""
	}
	b := NormalizeProgramInPlace([]byte(src))
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is this call's own copy
}

// NormalizeProgramInPlace is NormalizeProgram on the bytes of b, which it
// overwrites: it returns the normalized text, a prefix of b. Every step
// only deletes, so each writes its result over its input, behind the
// point it reads: a source is normalized (and hashed, core/keys) in the
// memory of one copy of it, however large (a source of hundreds of
// megabytes would otherwise cost a copy per step).
func NormalizeProgramInPlace(b []byte) []byte {
	b = removeBlockComments(b)
	b = removeLineComments(b)
	b = removeIncludes(b)
	return removeSpaceInPlace(b)
}

// removeBlockComments is step 1 of NormalizeProgram, in place.
func removeBlockComments(s []byte) []byte {
	w, i := 0, 0
	for {
		j := bytes.Index(s[i:], []byte("/*"))
		if j < 0 {
			break
		}
		start := i + j
		k := bytes.Index(s[start+2:], []byte("*/"))
		if k < 0 {
			// No terminator after this opener, so none after any later one.
			break
		}
		w += copy(s[w:], s[i:start])
		i = start + 2 + k + 2
	}
	if i == 0 {
		return s
	}
	w += copy(s[w:], s[i:])
	return s[:w]
}

// removeLineComments is step 2 of NormalizeProgram, in place.
func removeLineComments(s []byte) []byte {
	w, i := 0, 0
	for {
		j := bytes.Index(s[i:], []byte("//"))
		if j < 0 {
			break
		}
		start := i + j
		end := len(s)
		if k := bytes.IndexByte(s[start:], '\n'); k >= 0 {
			end = start + k
		}
		w += copy(s[w:], s[i:start])
		i = end
	}
	if i == 0 {
		return s
	}
	w += copy(s[w:], s[i:])
	return s[:w]
}

// includeMatcher emulates Python's re.sub for the #include pattern of step 3
// of NormalizeProgram. It memoizes the last whitespace run and the last
// closing-bracket search so that pathological inputs (long runs of blank
// lines, many unterminated "#include <") stay linear instead of quadratic.
//
// removeIncludes writes its result over s behind the candidate start p,
// and only ever where it copies bytes over themselves or before p-1; the
// matcher reads s at p-1 and after, and its memos describe bytes at or
// after the positions asked about, which are never before p: what it reads
// is the input as it was.
type includeMatcher struct {
	s []byte

	runFrom, runTo     int // s[runFrom:runTo] is whitespace, s[runTo] is not
	closeFrom, closeAt int // first '>' or '"' at or after closeFrom (-1: none)
}

// skipSpace returns the end of the whitespace run starting at i (\s*).
func (m *includeMatcher) skipSpace(i int) int {
	if i >= m.runFrom && i <= m.runTo {
		return m.runTo
	}
	j := i
	for j < len(m.s) {
		space, n := spaceAt(m.s, j)
		if !space {
			break
		}
		j += n
	}
	m.runFrom, m.runTo = i, j
	return j
}

// closeBracket returns the index of the first '>' or '"' at or after i, or
// -1 ([^>"]* followed by [>"]; the class includes "\n").
func (m *includeMatcher) closeBracket(i int) int {
	if i >= m.closeFrom && (m.closeAt < 0 || i <= m.closeAt) {
		return m.closeAt
	}
	at := bytes.IndexAny(m.s[i:], `>"`)
	if at >= 0 {
		at += i
	}
	m.closeFrom, m.closeAt = i, at
	return at
}

// matchAt returns the end of the regex's match starting at p (which must
// satisfy ^), or -1 if there is none. Each \s* before a literal or class
// that whitespace cannot match has exactly one viable length, and the first
// '>' or '"' is the only viable end of [^>"]*; only the final \s*$ backtracks,
// to the last position in its run where $ holds.
func (m *includeMatcher) matchAt(p int) int {
	s := m.s
	q := m.skipSpace(p)
	if q >= len(s) || s[q] != '#' {
		return -1
	}
	q = m.skipSpace(q + 1)
	if !bytes.HasPrefix(s[q:], []byte("include")) {
		return -1
	}
	q = m.skipSpace(q + len("include"))
	if q >= len(s) || (s[q] != '<' && s[q] != '"') {
		return -1
	}
	c := m.closeBracket(q + 1)
	if c < 0 {
		return -1
	}
	r := c + 1
	t := m.skipSpace(r)
	if t == len(s) {
		return t // $ at the end of the string
	}
	if nl := bytes.LastIndexByte(s[r:t], '\n'); nl >= 0 {
		return r + nl // $ just before a "\n"
	}
	return -1
}

// removeIncludes is step 3 of NormalizeProgram, in place. Like Python's
// sub, it searches from the end of the previous match; in MULTILINE mode ^
// holds at 0 and right after every "\n" of the whole string.
func removeIncludes(s []byte) []byte {
	if !bytes.Contains(s, []byte("include")) {
		return s
	}
	m := &includeMatcher{s: s, runFrom: -1, runTo: -1, closeFrom: len(s) + 1, closeAt: -1}
	w := 0      // s[:w] is the result so far
	copied := 0 // s[:copied] has been handled
	p := 0      // candidate start
	for p <= len(s) {
		if p == 0 || s[p-1] == '\n' {
			if e := m.matchAt(p); e >= 0 {
				w += copy(s[w:], s[copied:p])
				copied, p = e, e
				continue
			}
		}
		k := bytes.IndexByte(s[p:], '\n')
		if k < 0 {
			break
		}
		p += k + 1
	}
	if copied == 0 {
		return s
	}
	w += copy(s[w:], s[copied:])
	return s[:w]
}

// removeSpaceInPlace is removeSpace (step 4) on b, in place.
func removeSpaceInPlace(b []byte) []byte {
	w, kept := 0, 0 // b[:w] is the result; b[kept:i] is kept, not copied yet
	for i := 0; i < len(b); {
		space, n := spaceAt(b, i)
		if space {
			w += copy(b[w:], b[kept:i])
			kept = i + n
		}
		i += n
	}
	if kept == 0 {
		return b
	}
	w += copy(b[w:], b[kept:])
	return b[:w]
}

// spaceAt reports whether the rune at s[i] is whitespace (IsSpace) and its
// length in bytes (1 for a byte that is not valid UTF-8, which is never
// whitespace). ASCII is tested directly: sources are mostly ASCII.
func spaceAt(s []byte, i int) (space bool, n int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiSpace(c), 1
	}
	r, n := utf8.DecodeRune(s[i:])
	return IsSpace(r), n
}

// spaceAtString is spaceAt on a string.
func spaceAtString(s string, i int) (space bool, n int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiSpace(c), 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return IsSpace(r), n
}

// asciiSpace is IsSpace below 0x80.
func asciiSpace(c byte) bool { return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) }
