package schedule

import (
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

// referenceScript is testdata/reference.py, the one reference of the
// schedule and program rules that every test judges the engine by (the
// Python tests import it too): the original's rules from COMPAT.md, with
// Python's own re, so that \s, \d, \w, ^, $ and backtracking are the real
// thing. Run as a program it answers one JSON request (pyIn) per line with
// one JSON line (pyOut).
func referenceScript(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "reference.py"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type pyIn struct {
	Schedules []string `json:"schedules"`
	Programs  []string `json:"programs"`
}

type pyOut struct {
	Norm      []string `json:"norm"`
	Valid     [][2]any `json:"valid"`
	NormValid [][2]any `json:"normvalid"`
	Prog      []string `json:"prog"`
	Idem      []string `json:"idem"`
}

// gen produces random schedules and programs that stress the grammar.
type gen struct {
	r    *rand.Rand
	errs int // 1 in errs grammar choices is a deliberate mistake
}

// newGen returns a generator with a fixed seed, for reproducible runs.
func newGen(seed int64) *gen { return &gen{r: rand.New(rand.NewSource(seed)), errs: 10} }

// bad reports whether to make a deliberate mistake at this choice.
func (g *gen) bad() bool { return g.r.Intn(g.errs) == 0 }

func (g *gen) pick(xs ...string) string { return xs[g.r.Intn(len(xs))] }

var (
	genSpaces = []string{" ", "  ", "\t", "\n", "\r\n", "\u3000", "\u0085", "\u00a0", "\u1680",
		"\u2009", "\u2028", "\u2029", "\u202f", "\u205f", "\x1c", "\x1f", "\x0b", "\x0c"}
	genNotSpaces = []string{"\u200b", "\u180e", "\ufeff", "\u2060", "\x1b", "\u0000"}
	genDigits    = []string{"0", "1", "7", "9", "\u0661", "\u0660", "\u0967", "\uff11",
		"\U0001D7CE", "\u0f20", "\u1040"}
	genNotDigits = []string{"\u00b2", "\u00bd", "\u216b", "\U0001E4F0", "\U00011F50", "a", "\u3007"}
	genWordStart = []string{"a", "c", "Z", "_", "x"}
	genNotStart  = []string{"\u00e9", "1", "\u4e2d", "-", "\u0301", "\u00b2"}
	genWordRest  = []string{"a", "b", "1", "_", "Z", "\u00e9", "\u4e2d", "\u00b2", "\u00bd",
		"\u216b", "\U0001D7CE", "\u0661", "\u02b0", "\u3007", "\u01c5", "\u00aa"}
	genNotWordRest = []string{"\u0301", "\u00b7", "-", "\U0001E4D0", "\U00011F00", "\u200d", "\u2160\u0308"}
	genQuoted      = []string{"a", "b", "c1", ",", "]", "[", "(", ")", "|", "'", `"`, " ", "=",
		"\\", "\x00", "\x7f", "\u00ad", "\u0378", "\ue000", "\U0010ffff", "\U0001F600",
		"\u200b", "\u00e9", "comps=["}
	genNames = []string{"S", "I", "R", "P", "T2", "T3", "U", "F", "S", "R", "T2", "T3",
		"D", "E", "M", "TG", "T", "T10", "s", "r", "SS", "Rx", "", "X", "T2x", "\u00c9", "1S",
		"TG2", "DD", "d", "tg", "G", "MM"}
	// genKnown is every known transformation name, TiraLib's D, E, M and TG
	// among them.
	genKnown = []string{"S", "I", "R", "P", "T2", "T3", "U", "F", "D", "E", "M", "TG"}
)

func (g *gen) digits() string {
	var b strings.Builder
	for n := 1 + g.r.Intn(3); n > 0; n-- {
		if g.bad() {
			b.WriteString(g.pick(genNotDigits...))
		} else if g.r.Intn(4) == 0 {
			b.WriteString(g.pick(genDigits...))
		} else {
			b.WriteString(strconv.Itoa(g.r.Intn(10)))
		}
	}
	if g.bad() {
		return g.pick("", "x", b.String()+g.pick(genDigits...))
	}
	return b.String()
}

func (g *gen) compName() string {
	var b strings.Builder
	switch g.r.Intn(6) {
	case 0, 1:
		q := g.pick("'", `"`)
		if g.bad() {
			q = ""
		}
		b.WriteString(q)
		for n := g.r.Intn(5); n > 0; n-- {
			if c := g.pick(genQuoted...); g.r.Intn(3) == 0 && (c != q && c != "|" || g.bad()) {
				b.WriteString(c)
			} else {
				b.WriteString(g.pick("a", "b", "c", "1", "_"))
			}
		}
		if !g.bad() {
			b.WriteString(q)
		} else {
			b.WriteString(g.pick("'", `"`, ""))
		}
	case 2:
		if g.bad() {
			return ""
		}
		return "c"
	default:
		if g.bad() {
			b.WriteString(g.pick(genNotStart...))
		} else {
			b.WriteString(g.pick(genWordStart...))
		}
		for n := g.r.Intn(4); n > 0; n-- {
			if g.bad() {
				b.WriteString(g.pick(genNotWordRest...))
			} else if g.r.Intn(3) == 0 {
				b.WriteString(g.pick(genWordRest...))
			} else {
				b.WriteString(g.pick("0", "1", "a", "_"))
			}
		}
	}
	return b.String()
}

func (g *gen) comps() string {
	var b strings.Builder
	open := "comps=["
	if g.bad() {
		open = g.pick("COMPS=[", "comps[", "comps=", "comp=[", "")
	}
	b.WriteString(open)
	for n := g.r.Intn(4); n >= 0; n-- {
		b.WriteString(g.compName())
		if n > 0 {
			if g.bad() {
				b.WriteString(g.pick("", ",,", "]", "|"))
			} else {
				b.WriteString(",")
			}
		}
	}
	if g.bad() {
		b.WriteString(g.pick("", "]]", "),"))
	} else {
		b.WriteString("]")
	}
	return b.String()
}

func (g *gen) transformation() string {
	name := g.pick(genKnown...)
	if g.bad() {
		name = g.pick(genNames...)
	}
	args, ok := transformations[name]
	if !ok || g.bad() {
		args = transformations[g.pick(genKnown...)]
	}
	loops := 0 // how many loop levels argLoops wrote, for argSizes
	var b strings.Builder
	b.WriteString(name)
	if g.bad() {
		b.WriteString(g.pick("", "[", "(("))
	} else {
		b.WriteString("(")
	}
	for i, k := range args {
		if i > 0 {
			if g.bad() {
				b.WriteString(g.pick("", ";", ",,"))
			} else {
				b.WriteString(",")
			}
		}
		switch k {
		case argLoop:
			if g.bad() {
				b.WriteString(g.pick("l", "", "LL"))
			} else {
				b.WriteString("L")
			}
			b.WriteString(g.digits())
		case argInt, argSInt:
			if (k == argSInt && g.r.Intn(3) == 0) || g.bad() {
				b.WriteString(g.pick("-", "-", "--", "+")) // "-": valid for SINT only
			}
			b.WriteString(g.digits())
		case argComps:
			b.WriteString(g.comps())
		case argLoops:
			loops = 1 + g.r.Intn(3)
			b.WriteString(g.list(loops, "", "", func() string {
				if g.bad() {
					return g.pick("l", "", "LL", "L-") + g.digits()
				}
				return "L" + g.digits()
			}))
		case argSizes:
			n := loops
			if n == 0 || g.bad() { // as many sizes as loop levels, or not
				n = g.r.Intn(4)
			}
			b.WriteString(g.list(n, "", "", func() string {
				if g.bad() {
					return g.pick("-", "+", "L") + g.digits()
				}
				return g.digits()
			}))
		case argMatrix:
			count := []int{1, 4, 4, 9, 9, 16}[g.r.Intn(6)]
			if g.r.Intn(5) == 0 { // a count that is not a square
				count = []int{0, 2, 3, 5, 8, 10}[g.r.Intn(6)]
			}
			wrong := -1 // the one entry with a mistake, if any
			if g.bad() {
				wrong = g.r.Intn(count + 1)
			}
			i := -1
			b.WriteString(g.list(count, "[", "]", func() string {
				i++
				switch {
				case i == wrong:
					return g.pick("--", "+", "", "L", "1.0", "-") + g.digits()
				case g.r.Intn(4) == 0:
					return g.pick("", "-") + g.pick(genDigits...)
				case g.r.Intn(3) == 0:
					return "-" + strconv.Itoa(g.r.Intn(5))
				}
				return strconv.Itoa(g.r.Intn(3))
			}))
		case argDistribution:
			open := "distribution="
			if g.bad() {
				open = g.pick("distribution", "Distribution=", "distrib=", "", "comps=")
			}
			b.WriteString(open)
			b.WriteString(g.list(1+g.r.Intn(3), "[", "]", func() string {
				var w strings.Builder
				for n := g.r.Intn(3); n >= 0; n-- {
					w.WriteString(g.compName())
					if n > 0 {
						w.WriteString(",")
					}
				}
				if g.bad() {
					return g.pick("", "[]", "[[", w.String(), "["+w.String(), w.String()+"]")
				}
				return "[" + w.String() + "]"
			}))
		}
	}
	if g.bad() {
		b.WriteString(g.pick("", "))", ")x"))
	} else {
		b.WriteString(")")
	}
	return b.String()
}

// list writes n items joined by ",", between open and close, and now and
// then makes a mistake in the brackets or in one joint (one per list, so
// that long lists, such as a 4x4 matrix, are still often right).
func (g *gen) list(n int, open, close string, item func() string) string {
	var b strings.Builder
	if open != "" && g.bad() {
		open = g.pick("", "(", "[[")
	}
	b.WriteString(open)
	wrong := -1
	if n > 1 && g.bad() {
		wrong = 1 + g.r.Intn(n-1)
	}
	for i := 0; i < n; i++ {
		if i == wrong {
			b.WriteString(g.pick("", ";", ",,", "],["))
		} else if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(item())
	}
	if close != "" && g.bad() {
		close = g.pick("", ")", "]]", ",]")
	}
	b.WriteString(close)
	return b.String()
}

func (g *gen) randomRune() string {
	var r rune
	switch g.r.Intn(3) {
	case 0:
		r = rune(g.r.Intn(0x80))
	case 1:
		r = rune(g.r.Intn(0x10000))
	default:
		r = rune(g.r.Intn(utf8.MaxRune + 1))
	}
	if !utf8.ValidRune(r) {
		r = 0xFFFD
	}
	return string(r)
}

// mutate applies a few random edits at rune boundaries.
func (g *gen) mutate(s string, pieces func() string) string {
	for n := g.r.Intn(4); n > 0; n-- {
		rs := []rune(s)
		pos := g.r.Intn(len(rs) + 1)
		switch g.r.Intn(5) {
		case 0: // insert whitespace, or something that looks like it
			s = string(rs[:pos]) + g.pick(append(genSpaces, genNotSpaces...)...) + string(rs[pos:])
		case 1: // insert a piece
			s = string(rs[:pos]) + pieces() + string(rs[pos:])
		case 2: // insert any rune
			s = string(rs[:pos]) + g.randomRune() + string(rs[pos:])
		case 3: // delete a rune
			if pos < len(rs) {
				s = string(rs[:pos]) + string(rs[pos+1:])
			}
		case 4: // duplicate a span
			end := pos + g.r.Intn(len(rs)-pos+1)
			s = string(rs[:end]) + string(rs[pos:end]) + string(rs[end:])
		}
	}
	return s
}

func (g *gen) schedule() string {
	g.errs = []int{3, 10, 40, 200, 1000}[g.r.Intn(5)]
	var b strings.Builder
	if g.bad() {
		b.WriteString("|")
	}
	for n := g.r.Intn(4); n >= 0; n-- {
		b.WriteString(g.transformation())
		if n > 0 {
			if g.bad() {
				b.WriteString(g.pick("||", "| |", ""))
			} else {
				b.WriteString("|")
			}
		}
	}
	if g.bad() {
		b.WriteString("|")
	}
	s := b.String()
	// Sprinkle whitespace between runes.
	if g.r.Intn(2) == 0 {
		rs := []rune(s)
		var w strings.Builder
		for _, r := range rs {
			if g.r.Intn(8) == 0 {
				w.WriteString(g.pick(genSpaces...))
			}
			if g.bad() && g.r.Intn(4) == 0 {
				w.WriteString(g.pick(genNotSpaces...))
			}
			w.WriteRune(r)
		}
		s = w.String()
	}
	if g.r.Intn(5) == 0 {
		s = g.mutate(s, func() string {
			return g.pick("|", "(", ")", ",", "]", "[", "comps=[", "'", `"`, "-", "L", "T2", "TG", "M([",
				"distribution=[", ",[", "],", g.compName(), g.digits())
		})
	}
	return s
}

var genProgramPieces = []string{
	"#include <stdio.h>", `  #  include "a.h"  `, "#include <a", "b>", `#include "x>`,
	"#include<>", "# include <x> y", "#includex <a>", "#include <a>", "\t#include \"b\"\t",
	"#define N 10", "int main() {", "}", "x = y / z;", "/* c */", "/*", "*/", "/* multi",
	"line */", "// c", "//", "a // b", "/", "*", `"`, "<", ">", "#", "include", "\u3000",
	"\u0085", "\u200b", "\u00e9", "\U0001D7CE", "\t", " ", "\r",
	`for (int i=0;i<N;i++) a[i] = b[i] > c ? "s" : 'c';`,
}

func (g *gen) program() string {
	var b strings.Builder
	for n := g.r.Intn(12); n > 0; n-- {
		b.WriteString(g.pick(genProgramPieces...))
		b.WriteString(g.pick("\n", "\n", "\n", "\n", "\r\n", "", " ", "\u2028", "\n\n", "\n \t\n", "\n\u3000\n", "\x0b\n"))
	}
	s := b.String()
	if g.r.Intn(5) == 0 {
		s = g.mutate(s, func() string { return g.pick(genProgramPieces...) })
	}
	return s
}

func TestDifferentialPython(t *testing.T) {
	seed := int64(20240611)
	if v := os.Getenv("TIRASTORE_DIFF_SEED"); v != "" {
		seed, _ = strconv.ParseInt(v, 10, 64)
	}
	nSched, nProg := 8000, 4000
	if testing.Short() {
		nSched, nProg = 1500, 800
	}
	g := newGen(seed)
	var in pyIn
	for _, c := range normalizeCases {
		in.Schedules = append(in.Schedules, c.in)
	}
	for _, c := range validateCases {
		in.Schedules = append(in.Schedules, c.in)
	}
	for _, c := range programCases {
		in.Programs = append(in.Programs, c.in)
	}
	for i := 0; i < nSched; i++ {
		in.Schedules = append(in.Schedules, g.schedule())
	}
	for i := 0; i < nProg; i++ {
		in.Programs = append(in.Programs, g.program())
	}
	// JSON cannot carry invalid UTF-8; those cases are covered by unit tests.
	in.Schedules = validOnly(in.Schedules)
	in.Programs = validOnly(in.Programs)

	var out pyOut
	pytest.RunJSON(t, referenceScript(t), in, &out)
	if len(out.Norm) != len(in.Schedules) || len(out.Prog) != len(in.Programs) {
		t.Fatalf("python returned %d/%d results for %d/%d inputs", len(out.Norm), len(out.Prog), len(in.Schedules), len(in.Programs))
	}
	if len(out.Idem) != 0 {
		t.Errorf("the reference normalize_schedule is not idempotent on %q", out.Idem)
	}

	fails := 0
	report := func(format string, args ...any) {
		fails++
		if fails <= 25 {
			t.Errorf(format, args...)
		}
	}
	valid, normValid, differ := 0, 0, 0
	for i, s := range in.Schedules {
		n := Normalize(s)
		if n != out.Norm[i] {
			report("Normalize(%q) = %q, python %q", s, n, out.Norm[i])
		}
		ok, reason := Validate(s)
		if ok != out.Valid[i][0] || reason != out.Valid[i][1] {
			report("Validate(%q) = (%v, %q), python (%v, %q)", s, ok, reason, out.Valid[i][0], out.Valid[i][1])
		}
		nok, nreason := Validate(n)
		if nok != out.NormValid[i][0] || nreason != out.NormValid[i][1] {
			report("Validate(Normalize(%q)) = (%v, %q), python (%v, %q)", s, nok, nreason, out.NormValid[i][0], out.NormValid[i][1])
		}
		if ok {
			valid++
		}
		if nok {
			normValid++
		}
		if ok != nok {
			differ++
		}
	}
	changed := 0
	for i, p := range in.Programs {
		got := NormalizeProgram(p)
		if got != out.Prog[i] {
			report("NormalizeProgram(%q) = %q, python %q", p, got, out.Prog[i])
		}
		if got != removeSpace(p) {
			changed++
		}
	}
	if fails > 25 {
		t.Errorf("... %d mismatches in all", fails)
	}
	t.Logf("seed %d: %d schedules (%d valid raw, %d valid normalized, %d differ), %d programs (%d with comments/includes removed)",
		seed, len(in.Schedules), valid, normValid, differ, len(in.Programs), changed)
}

func validOnly(xs []string) []string {
	out := xs[:0]
	for _, x := range xs {
		if utf8.ValidString(x) {
			out = append(out, x)
		}
	}
	return out
}
