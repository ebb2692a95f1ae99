package schedule

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// argKind is one argument slot of a transformation's grammar.
type argKind uint8

const (
	argLoop         argKind = iota // LX    = L\d+
	argInt                         // INT   = \d+
	argSInt                        // SINT  = -?\d+
	argComps                       // COMPS = comps=\[CN(,CN)*\]
	argLoops                       // LX(,LX)*
	argSizes                       // INT(,INT)*, as many as the argLoops before
	argMatrix                      // \[SINT(,SINT)*\], a perfect square of them
	argDistribution                // distribution=\[GROUP(,GROUP)*\], GROUP = \[CN(,CN)*\]
)

// transformations is the table of known transformation names and their
// argument lists; every pattern is ^NAME\(ARG(,ARG)*\)$. The first eight are
// the original's, each with COMPS last. D, E, M and TG are the other actions
// TiraLib prints (its str_representation), which the original rejects as
// unknown: a schedule TiraLib explores must be recordable here. Their COMPS is
// the same rule, so Normalize rewrites it as for the others and record keys
// are the original's (docs/COMPAT.md, "Schedule normalization and
// validation"); D's comes before its groups, TG has k loop levels then k tile
// sizes, M a flattened square matrix of signed entries.
var transformations = map[string][]argKind{
	"S":  {argLoop, argLoop, argSInt, argSInt, argComps},
	"I":  {argLoop, argLoop, argComps},
	"R":  {argLoop, argComps},
	"P":  {argLoop, argComps},
	"T2": {argLoop, argLoop, argInt, argInt, argComps},
	"T3": {argLoop, argLoop, argLoop, argInt, argInt, argInt, argComps},
	"U":  {argLoop, argInt, argComps},
	"F":  {argLoop, argComps},
	"D":  {argLoop, argComps, argDistribution},
	"E":  {argComps},
	"M":  {argMatrix, argComps},
	"TG": {argLoops, argSizes, argComps},
}

// Validate implements the original's validate_schedule, which record and
// record_many call (on the normalized schedule) before writing, so the same
// strings must be accepted and the same reasons given: (true, "") for a valid
// or empty schedule, else (false, reason) with one of
//
//	Empty segment in schedule (leading, trailing, or double '|').
//	Unrecognized token (does not start with a transformation name): <repr>
//	Unknown transformation: <repr name> in <repr token>
//	Malformed <name> transformation: <repr token>
//
// where <repr> is Python's repr() of the segment. Whitespace is removed
// first, so a non-empty all-whitespace input is an empty segment, although
// Normalize turns it into the valid "". Digits are Unicode decimals and
// unquoted comp names continue with Unicode word characters, exactly as
// Python's \d and \w.
//
// It also accepts TiraLib's D, E, M and TG (see transformations), which is
// the one place it departs from the original. An M whose entries are well
// formed but do not make a square matrix has " (<n> entries do not make a
// square matrix)" after the usual reason, since nothing else in the text
// shows what is wrong.
func Validate(s string) (ok bool, reason string) {
	if s == "" {
		return true, ""
	}
	s = removeSpace(s)
	for _, tok := range strings.Split(s, "|") {
		if tok == "" {
			return false, "Empty segment in schedule (leading, trailing, or double '|')."
		}
		name := leadingName(tok)
		if name == "" {
			return false, "Unrecognized token (does not start with a transformation name): " + Repr(tok)
		}
		args, known := transformations[name]
		if !known {
			return false, "Unknown transformation: " + Repr(name) + " in " + Repr(tok)
		}
		if ok, why := matchTransformation(tok[len(name):], args); !ok {
			return false, "Malformed " + name + " transformation: " + Repr(tok) + why
		}
	}
	return true, ""
}

// leadingName returns the match of ^[A-Z][A-Z0-9]* (ASCII only), or "".
func leadingName(tok string) string {
	if tok == "" || tok[0] < 'A' || tok[0] > 'Z' {
		return ""
	}
	i := 1
	for i < len(tok) && ((tok[i] >= 'A' && tok[i] <= 'Z') || (tok[i] >= '0' && tok[i] <= '9')) {
		i++
	}
	return tok[:i]
}

// matchTransformation reports whether rest (the token after its name) is
// exactly "(" args ")", and if not, anything to add to the reason. Each piece
// of the grammar is decided by its next character (quoted names end at their
// first closing quote, digit and word runs are followed by a non-digit /
// non-word delimiter, a "," inside TG's lists by the rune after it), so this
// deterministic scan accepts exactly the language of the original's
// backtracking regular expressions and of the reference's for D, E, M, TG.
func matchTransformation(rest string, args []argKind) (bool, string) {
	p := &scanner{s: rest}
	if !p.lit("(") {
		return false, ""
	}
	loops, entries := 0, 0
	for n, kind := range args {
		if n > 0 && !p.lit(",") {
			return false, ""
		}
		var ok bool
		switch kind {
		case argLoop:
			ok = p.lit("L") && p.digits()
		case argInt:
			ok = p.digits()
		case argSInt:
			p.lit("-")
			ok = p.digits()
		case argComps:
			ok = p.lit("comps=") && p.list(p.compName)
		case argLoops:
			ok = p.lit("L") && p.digits()
			for loops = 1; ok && p.commaThen(isL); loops++ {
				ok = p.lit("L") && p.digits()
			}
		case argSizes:
			ok = p.digits()
			sizes := 1
			for ; ok && p.commaThen(isDecimal); sizes++ {
				ok = p.digits()
			}
			ok = ok && sizes == loops
		case argMatrix:
			ok = p.list(func() bool {
				entries++
				p.lit("-")
				return p.digits()
			})
		case argDistribution:
			ok = p.lit("distribution=") && p.list(func() bool { return p.list(p.compName) })
		}
		if !ok {
			return false, ""
		}
	}
	if !p.lit(")") || p.i != len(p.s) {
		return false, ""
	}
	if entries > 0 && !isSquare(entries) {
		return false, " (" + strconv.Itoa(entries) + " entries do not make a square matrix)"
	}
	return true, ""
}

func isL(r rune) bool { return r == 'L' }

// isSquare reports whether n is the square of an integer.
func isSquare(n int) bool {
	r := 0
	for r*r < n {
		r++
	}
	return r*r == n
}

// scanner is a cursor over a whitespace-free token.
type scanner struct {
	s string
	i int
}

// lit consumes the literal t if it comes next.
func (p *scanner) lit(t string) bool {
	if strings.HasPrefix(p.s[p.i:], t) {
		p.i += len(t)
		return true
	}
	return false
}

// digits consumes \d+ (Unicode decimal digits).
func (p *scanner) digits() bool {
	start := p.i
	for p.i < len(p.s) {
		r, n := utf8.DecodeRuneInString(p.s[p.i:])
		if !isDecimal(r) {
			break
		}
		p.i += n
	}
	return p.i > start
}

// commaThen consumes a "," if the rune after it satisfies next: in TG's
// lists, such a "," continues the list, any other ends it.
func (p *scanner) commaThen(next func(rune) bool) bool {
	if !strings.HasPrefix(p.s[p.i:], ",") {
		return false
	}
	if r, _ := utf8.DecodeRuneInString(p.s[p.i+1:]); !next(r) {
		return false
	}
	p.i++
	return true
}

// list consumes \[ITEM(,ITEM)*\], where item consumes one ITEM.
func (p *scanner) list(item func() bool) bool {
	if !p.lit("[") {
		return false
	}
	for {
		if !item() {
			return false
		}
		if p.lit("]") {
			return true
		}
		if !p.lit(",") {
			return false
		}
	}
}

// compName consumes one CN = '[^']*' | "[^"]*" | [A-Za-z_]\w*.
func (p *scanner) compName() bool {
	if p.i >= len(p.s) {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '\'' || c == '"':
		end := strings.IndexByte(p.s[p.i+1:], c)
		if end < 0 {
			return false
		}
		p.i += end + 2
		return true
	case c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'):
		p.i++
		for p.i < len(p.s) {
			r, n := utf8.DecodeRuneInString(p.s[p.i:])
			if !isWord(r) {
				break
			}
			p.i += n
		}
		return true
	}
	return false
}
