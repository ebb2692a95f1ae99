package schedule

import (
	"strings"
	"unicode/utf8"
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
// Empty input gives "".
func NormalizeProgram(src string) string {
	if src == "" {
		return ""
	}
	s := removeBlockComments(src)
	s = removeLineComments(s)
	s = removeIncludes(s)
	return removeSpace(s)
}

// removeBlockComments is step 1 of NormalizeProgram.
func removeBlockComments(s string) string {
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(s[i:], "/*")
		if j < 0 {
			break
		}
		start := i + j
		k := strings.Index(s[start+2:], "*/")
		if k < 0 {
			// No terminator after this opener, so none after any later one.
			break
		}
		b.WriteString(s[i:start])
		i = start + 2 + k + 2
	}
	if i == 0 {
		return s
	}
	b.WriteString(s[i:])
	return b.String()
}

// removeLineComments is step 2 of NormalizeProgram.
func removeLineComments(s string) string {
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(s[i:], "//")
		if j < 0 {
			break
		}
		start := i + j
		end := len(s)
		if k := strings.IndexByte(s[start:], '\n'); k >= 0 {
			end = start + k
		}
		b.WriteString(s[i:start])
		i = end
	}
	if i == 0 {
		return s
	}
	b.WriteString(s[i:])
	return b.String()
}

// includeMatcher emulates Python's re.sub for the #include pattern of step 3
// of NormalizeProgram. It memoizes the last whitespace run and the last
// closing-bracket search so that pathological inputs (long runs of blank
// lines, many unterminated "#include <") stay linear instead of quadratic.
type includeMatcher struct {
	s string

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
		r, n := utf8.DecodeRuneInString(m.s[j:])
		if !IsSpace(r) {
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
	at := strings.IndexAny(m.s[i:], `>"`)
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
	if !strings.HasPrefix(s[q:], "include") {
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
	if nl := strings.LastIndexByte(s[r:t], '\n'); nl >= 0 {
		return r + nl // $ just before a "\n"
	}
	return -1
}

// removeIncludes is step 3 of NormalizeProgram. Like Python's sub, it
// searches from the end of the previous match; in MULTILINE mode ^ holds at
// 0 and right after every "\n" of the whole string.
func removeIncludes(s string) string {
	if !strings.Contains(s, "include") {
		return s
	}
	m := &includeMatcher{s: s, runFrom: -1, runTo: -1, closeFrom: len(s) + 1, closeAt: -1}
	var b strings.Builder
	copied := 0 // s[:copied] has been handled
	p := 0      // candidate start
	for p <= len(s) {
		if p == 0 || s[p-1] == '\n' {
			if e := m.matchAt(p); e >= 0 {
				b.WriteString(s[copied:p])
				copied, p = e, e
				continue
			}
		}
		k := strings.IndexByte(s[p:], '\n')
		if k < 0 {
			break
		}
		p += k + 1
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}
