package schedule

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// The fuzz oracles below are Go regexps built from the generated Python
// character classes. Go's regexp picks the same (leftmost-first, greedy /
// lazy) match as Python's backtracking engine for these patterns, so they
// give a second, independent implementation that needs no python3.

// class renders ranges as a regexp character class body.
func class(table []runeRange) string {
	var b strings.Builder
	for _, r := range table {
		fmt.Fprintf(&b, `\x{%x}-\x{%x}`, r[0], r[1])
	}
	return b.String()
}

type oracles struct {
	space, comps, block, line, include, name *regexp.Regexp
	patterns                                 map[string]*regexp.Regexp
}

var (
	oracleOnce sync.Once
	oracle     oracles
)

func getOracles() *oracles {
	oracleOnce.Do(func() {
		s := "[" + class(spaceRanges) + "]"
		d := "[" + class(decimalRanges) + "]"
		w := "[" + class(wordRanges) + "]"
		oracle.space = regexp.MustCompile(s + "+")
		oracle.comps = regexp.MustCompile(`comps=\[([^\]]*)\]`)
		oracle.block = regexp.MustCompile(`(?s)/\*.*?\*/`)
		oracle.line = regexp.MustCompile(`//[^\n]*`)
		oracle.include = regexp.MustCompile(`(?m)^` + s + `*#` + s + `*include` + s + `*[<"][^>"]*[>"]` + s + `*$`)
		oracle.name = regexp.MustCompile(`^([A-Z][A-Z0-9]*)`)
		cn := `(?:'[^']*'|"[^"]*"|[A-Za-z_]` + w + `*)`
		comps := `comps=\[` + cn + `(?:,` + cn + `)*\]`
		lx, in, sin := `L`+d+`+`, d+`+`, `-?`+d+`+`
		args := map[string][]string{
			"S": {lx, lx, sin, sin, comps}, "I": {lx, lx, comps}, "R": {lx, comps},
			"P": {lx, comps}, "T2": {lx, lx, in, in, comps},
			"T3": {lx, lx, lx, in, in, in, comps}, "U": {lx, in, comps}, "F": {lx, comps},
		}
		oracle.patterns = map[string]*regexp.Regexp{}
		for k, v := range args {
			oracle.patterns[k] = regexp.MustCompile(`^` + k + `\(` + strings.Join(v, ",") + `\)$`)
		}
	})
	return &oracle
}

func (o *oracles) normalize(s string) string {
	if s == "" {
		return ""
	}
	s = o.space.ReplaceAllString(s, "")
	return o.comps.ReplaceAllStringFunc(s, func(m string) string {
		items := strings.Split(m[len("comps=["):len(m)-1], ",")
		for i, it := range items {
			items[i] = "'" + strings.Trim(it, `'"`) + "'"
		}
		return "comps=[" + strings.Join(items, ",") + "]"
	})
}

func (o *oracles) validate(s string) (bool, string) {
	if s == "" {
		return true, ""
	}
	s = o.space.ReplaceAllString(s, "")
	for _, tok := range strings.Split(s, "|") {
		if tok == "" {
			return false, "empty"
		}
		name := o.name.FindString(tok)
		if name == "" {
			return false, "unrecognized"
		}
		p, ok := o.patterns[name]
		if !ok {
			return false, "unknown " + name
		}
		if !p.MatchString(tok) {
			return false, "malformed " + name
		}
	}
	return true, ""
}

func (o *oracles) normalizeProgram(s string) string {
	if s == "" {
		return ""
	}
	s = o.block.ReplaceAllString(s, "")
	s = o.line.ReplaceAllString(s, "")
	s = o.include.ReplaceAllString(s, "")
	return o.space.ReplaceAllString(s, "")
}

// reasonKind maps a Validate reason to the oracle's short form.
func reasonKind(reason string) string {
	switch {
	case reason == "":
		return ""
	case strings.HasPrefix(reason, "Empty segment"):
		return "empty"
	case strings.HasPrefix(reason, "Unrecognized token"):
		return "unrecognized"
	case strings.HasPrefix(reason, "Unknown transformation: "):
		name := strings.TrimPrefix(reason, "Unknown transformation: '")
		return "unknown " + name[:strings.IndexByte(name, '\'')]
	case strings.HasPrefix(reason, "Malformed "):
		return "malformed " + strings.Fields(reason)[1]
	}
	return "?" + reason
}

func FuzzSchedule(f *testing.F) {
	for _, c := range normalizeCases {
		f.Add(c.in)
	}
	for _, c := range validateCases {
		f.Add(c.in)
	}
	for _, c := range programCases {
		f.Add(c.in)
	}
	o := getOracles()
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		// Idempotence holds for the original (checked against the Python
		// reference in TestDifferentialPython) and follows from the rules:
		// rewriting a block never adds or removes a "]" or a "comps=[".
		// Invalid UTF-8 is excluded: removing a space between two stray
		// bytes can join them into a new rune (even a space), which no
		// Python str can exhibit.
		if nn := Normalize(n); nn != n && utf8.ValidString(s) {
			t.Fatalf("Normalize not idempotent: %q -> %q -> %q", s, n, nn)
		}
		if want := o.normalize(s); n != want {
			t.Fatalf("Normalize(%q) = %q, oracle %q", s, n, want)
		}
		ok, reason := Validate(s)
		if wok, wr := o.validate(s); ok != wok || reasonKind(reason) != wr {
			t.Fatalf("Validate(%q) = (%v, %q), oracle (%v, %q)", s, ok, reason, wok, wr)
		}
		if ok != (reason == "") {
			t.Fatalf("Validate(%q) = (%v, %q)", s, ok, reason)
		}
		Validate(n)
		p := NormalizeProgram(s)
		if want := o.normalizeProgram(s); p != want {
			t.Fatalf("NormalizeProgram(%q) = %q, oracle %q", s, p, want)
		}
		// NormalizeProgram is not idempotent in general (removing spaces can
		// form new comments: "/ * x * /"), so only absence of spaces is checked.
		for _, out := range []string{n, p} {
			if !utf8.ValidString(s) {
				break // stray bytes can join into a space, see above
			}
			for _, r := range out {
				if IsSpace(r) {
					t.Fatalf("whitespace %U left in %q (input %q)", r, out, s)
				}
			}
		}
		if r := Repr(s); !utf8.ValidString(r) {
			t.Fatalf("Repr(%q) is not valid UTF-8", s)
		}
	})
}

// TestOraclesAgree runs the regexp oracles over the differential generator,
// so the cross-check also runs where python3 is missing.
func TestOraclesAgree(t *testing.T) {
	o := getOracles()
	check := func(s string) {
		if got, want := Normalize(s), o.normalize(s); got != want {
			t.Errorf("Normalize(%q) = %q, oracle %q", s, got, want)
		}
		ok, reason := Validate(s)
		if wok, wr := o.validate(s); ok != wok || reasonKind(reason) != wr {
			t.Errorf("Validate(%q) = (%v, %q), oracle (%v, %q)", s, ok, reason, wok, wr)
		}
		if got, want := NormalizeProgram(s), o.normalizeProgram(s); got != want {
			t.Errorf("NormalizeProgram(%q) = %q, oracle %q", s, got, want)
		}
	}
	g := newGen(7)
	for i := 0; i < 3000; i++ {
		check(g.schedule())
		check(g.program())
	}
}
