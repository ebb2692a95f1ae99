package schedule

import (
	"strings"
	"unicode/utf8"
)

// argKind is one argument slot of a transformation's grammar.
type argKind uint8

const (
	argLoop  argKind = iota // LX   = L\d+
	argInt                  // INT  = \d+
	argSInt                 // SINT = -?\d+
	argComps                // COMPS = comps=\[CN(,CN)*\]
)

// transformations is the original's table of known transformation names and
// their argument lists; every pattern is ^NAME\(ARG(,ARG)*\)$ with COMPS
// always last.
var transformations = map[string][]argKind{
	"S":  {argLoop, argLoop, argSInt, argSInt, argComps},
	"I":  {argLoop, argLoop, argComps},
	"R":  {argLoop, argComps},
	"P":  {argLoop, argComps},
	"T2": {argLoop, argLoop, argInt, argInt, argComps},
	"T3": {argLoop, argLoop, argLoop, argInt, argInt, argInt, argComps},
	"U":  {argLoop, argInt, argComps},
	"F":  {argLoop, argComps},
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
		if !matchTransformation(tok[len(name):], args) {
			return false, "Malformed " + name + " transformation: " + Repr(tok)
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
// exactly "(" args ")". Each piece of the grammar is decided by its next
// character (quoted names end at their first closing quote, digit and word
// runs are followed by a non-digit / non-word delimiter), so this
// deterministic scan accepts exactly the language of the original's
// backtracking regular expressions.
func matchTransformation(rest string, args []argKind) bool {
	p := &scanner{s: rest}
	if !p.lit("(") {
		return false
	}
	for n, kind := range args {
		if n > 0 && !p.lit(",") {
			return false
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
			ok = p.comps()
		}
		if !ok {
			return false
		}
	}
	return p.lit(")") && p.i == len(p.s)
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

// comps consumes comps=\[CN(,CN)*\].
func (p *scanner) comps() bool {
	if !p.lit(compsOpen) {
		return false
	}
	for {
		if !p.compName() {
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
