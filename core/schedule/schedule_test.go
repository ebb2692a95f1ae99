package schedule

import (
	"testing"
	"unicode/utf8"
)

const (
	reasonEmpty = "Empty segment in schedule (leading, trailing, or double '|')."
	reasonUnrec = "Unrecognized token (does not start with a transformation name): "
)

// normalizeCases are inputs and the original's normalize_schedule output.
var normalizeCases = []struct{ in, want string }{
	{"", ""},
	{"   ", ""},
	{"\u3000\u0085\t\n", ""},
	{"S(L0,L1,4,8,comps=['c1'])", "S(L0,L1,4,8,comps=['c1'])"},
	{`R( L0 , comps=["c1"] )`, "R(L0,comps=['c1'])"},
	{`comps=["a", 'b']`, "comps=['a','b']"},
	{"comps=[]", "comps=['']"},
	{"comps=[,]", "comps=['','']"},
	{"comps=[a, b ,c]", "comps=['a','b','c']"},
	{`comps=['"a"'']`, "comps=['a']"},
	{"comps=[a'b]", "comps=['a'b']"},
	{`comps=["a'b"]`, "comps=['a'b']"},
	{"comps=['a,b']", "comps=['a','b']"},
	{"comps=['a]']", "comps=['a']']"},              // a quoted ']' ends the block
	{"comps=[comps=[a]]", "comps=['comps=[a']]"},   // nested: up to the first ']'
	{"comps=[a", "comps=[a"},                       // unterminated: untouched
	{"comps=[a|comps=[b]", "comps=['a|comps=[b']"}, // one block across '|'
	{"comps=[a]|comps=[b", "comps=['a']|comps=[b"}, // second unterminated
	{"comps=[a]]", "comps=['a']]"},                 // stray ']'
	{`x]comps=[a],comps=[ "b" ,c]`, "x]comps=['a'],comps=['b','c']"},
	{"COMPS=[a]", "COMPS=[a]"},                     // case-sensitive
	{"comps =[a]", "comps=['a']"},                  // whitespace goes first
	{"comps=[a\u3000b]", "comps=['ab']"},           // U+3000 is whitespace
	{"comps=[a\u200bb]", "comps=['a\u200bb']"},     // U+200B is not
	{"comps=[a\u180eb]", "comps=['a\u180eb']"},     // nor U+180E (Unicode >= 6.3)
	{"comps=[a\x1cb\x1fc]", "comps=['abc']"},       // U+001C..U+001F are
	{"comps=[\U0001F600]", "comps=['\U0001F600']"}, // astral kept
	{"R(L0,comps=[\xff])", "R(L0,comps=['\xff'])"}, // invalid UTF-8 byte kept
	{"comps=[\u00a0'a'\u2028,\u2029\"b\"]", "comps=['a','b']"},
	// TiraLib's actions: the same rule, nothing else (D's groups are no
	// comps=[...] block).
	{"D(L1,comps=[comp05],distribution=[['comp05'], [\"comp06\"]])",
		"D(L1,comps=['comp05'],distribution=[['comp05'],[\"comp06\"]])"},
	{"M([1, 0, 0, -1],comps=[c])", "M([1,0,0,-1],comps=['c'])"},
	{"TG(L1,L2,10,5,comps=['a', \"b\"])", "TG(L1,L2,10,5,comps=['a','b'])"},
}

func TestNormalize(t *testing.T) {
	for _, c := range normalizeCases {
		if got := Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := Normalize(Normalize(c.in)); got != c.want {
			t.Errorf("Normalize not idempotent on %q: %q", c.in, got)
		}
	}
}

// validateCases are inputs and the original's validate_schedule reason
// ("" means valid), then TiraLib's D, E, M and TG, which the original calls
// unknown and this library accepts.
var validateCases = []struct{ in, reason string }{
	{"", ""},
	{"S(L0,L1,4,8,comps=['c1'])", ""},
	{"S(L0,L1,-4,-8,comps=['c1'])", ""},
	{"S ( L0 , L1 , 4 , 8 , comps = [ 'c1' , \"c2\" ] )", ""},
	{"I(L0,L1,comps=[\"a\",'b',c_1])", ""},
	{"R(L0,comps=[c])|P(L1,comps=[c])|F(L2,comps=[c])", ""},
	{"T2(L0,L1,32,32,comps=[c])|T3(L0,L1,L2,4,4,4,comps=[c])|U(L0,8,comps=[c])", ""},
	{"R(L0,comps=[''])", ""},
	{`R(L0,comps=[""])`, ""},
	{"R(L0,comps=['a,b',c])", ""},
	{`R(L0,comps=['a]',"b)"])`, ""},
	{`R(L0,comps=['a"b'])`, ""},
	{`R(L0,comps=["a'b"])`, ""},
	{"R(L0,comps=['(',')','='])", ""},
	{"R(L0,comps=[_x,x_,X9])", ""},
	{"R(L0,comps=[x\u00e9])", ""},       // \w continues with Unicode letters
	{"R(L0,comps=[c\u00b2])", ""},       // '²' isalnum (isdigit)
	{"R(L0,comps=[c\u00bd\u216b])", ""}, // '½' and 'Ⅻ' are numeric
	{"R(L0,comps=[x\U0001D7CE])", ""},   // astral Nd
	{"R(L\u0661,comps=[a])", ""},        // Arabic-Indic digit
	{"S(L\u0967,L\uff11,-\u0661,\U0001D7CE,comps=[a])", ""},
	{"R(L0,\u3000comps=[c])", ""}, // U+3000 removed
	{"R(L\u00850,comps=[c])", ""}, // U+0085 removed
	{"R(L0,\x1ccomps=[c])", ""},   // U+001C removed (Go's unicode.IsSpace disagrees)
	{"   ", reasonEmpty},          // whitespace-only is not "empty"
	{"|", reasonEmpty},
	{"R(L0,comps=[a])|", reasonEmpty},
	{"|R(L0,comps=[a])", reasonEmpty},
	{"R(L0,comps=[a])||R(L0,comps=[a])", reasonEmpty},
	{"R(L0,comps=[a])| |R(L0,comps=[a])", reasonEmpty},
	{"r(L0,comps=[a])", reasonUnrec + "'r(L0,comps=[a])'"},
	{"(L0)", reasonUnrec + "'(L0)'"},
	{"1S(L0)", reasonUnrec + "'1S(L0)'"},
	{"\u00c9(L0)", reasonUnrec + "'\u00c9(L0)'"},
	{"R(L0,comps=[a])|x", reasonUnrec + "'x'"},
	{"T10(L0,comps=[a])", "Unknown transformation: 'T10' in 'T10(L0,comps=[a])'"},
	{"T(L0,comps=[a])", "Unknown transformation: 'T' in 'T(L0,comps=[a])'"},
	{"SS(L0)", "Unknown transformation: 'SS' in 'SS(L0)'"},
	{"S2(L0)", "Unknown transformation: 'S2' in 'S2(L0)'"},
	{"Rx(L0,comps=[a])", "Malformed R transformation: 'Rx(L0,comps=[a])'"},
	{"T2x(L0,L1,1,2,comps=[a])", "Malformed T2 transformation: 'T2x(L0,L1,1,2,comps=[a])'"},
	{"T2(L0,L1,-4,8,comps=['c1'])", `Malformed T2 transformation: "T2(L0,L1,-4,8,comps=['c1'])"`},
	{"T3(L0,L1,L2,4,-4,4,comps=[c])", "Malformed T3 transformation: 'T3(L0,L1,L2,4,-4,4,comps=[c])'"},
	{"U(L0,-4,comps=[c])", "Malformed U transformation: 'U(L0,-4,comps=[c])'"},
	{"S(L0,L1,--4,8,comps=[a])", "Malformed S transformation: 'S(L0,L1,--4,8,comps=[a])'"},
	{"S(L0,L1,+4,8,comps=[a])", "Malformed S transformation: 'S(L0,L1,+4,8,comps=[a])'"},
	{"S(L,L1,4,8,comps=[a])", "Malformed S transformation: 'S(L,L1,4,8,comps=[a])'"},
	{"S(L-1,L1,4,8,comps=[a])", "Malformed S transformation: 'S(L-1,L1,4,8,comps=[a])'"},
	{"S(l0,L1,4,8,comps=[a])", "Malformed S transformation: 'S(l0,L1,4,8,comps=[a])'"},
	{"I(L0,comps=[a])", "Malformed I transformation: 'I(L0,comps=[a])'"},
	{"R(L0,L1,comps=[a])", "Malformed R transformation: 'R(L0,L1,comps=[a])'"},
	{"R(L0)", "Malformed R transformation: 'R(L0)'"},
	{"R(L0,comps=[])", "Malformed R transformation: 'R(L0,comps=[])'"},
	{"R(L0,comps=[a,])", "Malformed R transformation: 'R(L0,comps=[a,])'"},
	{"R(L0,comps=[,a])", "Malformed R transformation: 'R(L0,comps=[,a])'"},
	{"R(L0,comps=[a,,b])", "Malformed R transformation: 'R(L0,comps=[a,,b])'"},
	{"R(L0,comps=[a]", "Malformed R transformation: 'R(L0,comps=[a]'"},
	{"R(L0,comps=[a]))", "Malformed R transformation: 'R(L0,comps=[a]))'"},
	{"R(L0,comps=[a])x", "Malformed R transformation: 'R(L0,comps=[a])x'"},
	{"R(L0,comps=a)", "Malformed R transformation: 'R(L0,comps=a)'"},
	{"R(L0,COMPS=[a])", "Malformed R transformation: 'R(L0,COMPS=[a])'"},
	{"R(L0,comps=[1x])", "Malformed R transformation: 'R(L0,comps=[1x])'"},
	{"R(L0,comps=[\u00e9])", "Malformed R transformation: 'R(L0,comps=[\u00e9])'"},
	{"R(L0,comps=[a-b])", "Malformed R transformation: 'R(L0,comps=[a-b])'"},
	{"R(L0,comps=[c\u0301])", "Malformed R transformation: 'R(L0,comps=[c\u0301])'"}, // Mn: not \w, printable
	{"R(L\u00b2,comps=[c])", "Malformed R transformation: 'R(L\u00b2,comps=[c])'"},   // '²' is not decimal
	{"R(L\u2167,comps=[c])", "Malformed R transformation: 'R(L\u2167,comps=[c])'"},   // 'Ⅷ' is not decimal
	{"R(L0,comps=['a'b'])", `Malformed R transformation: "R(L0,comps=['a'b'])"`},
	{"R(L0,comps=['a\"b')", `Malformed R transformation: 'R(L0,comps=[\'a"b\')'`},
	{`R(L0,comps=["a])`, `Malformed R transformation: 'R(L0,comps=["a])'`},
	{"R(L0,comps=['a|b'])", `Malformed R transformation: "R(L0,comps=['a"`},
	{`R(L0,comps=[a\b])`, `Malformed R transformation: 'R(L0,comps=[a\\b])'`},
	{"R(L0,\u200bcomps=[c])", `Malformed R transformation: 'R(L0,\u200bcomps=[c])'`},
	{"R(L0,comps=[c\x00\x7f])", `Malformed R transformation: 'R(L0,comps=[c\x00\x7f])'`},
	{"R(L0,comps=[c\u00ad\u0378\ue000])", `Malformed R transformation: 'R(L0,comps=[c\xad\u0378\ue000])'`},
	{"R(L0,comps=[c\U0010ffff\U0001F600])", "Malformed R transformation: 'R(L0,comps=[c\\U0010ffff\U0001F600])'"},
	// Unicode 15 additions are not letters/digits for CPython 3.11.
	{"R(L0,comps=[x\U0001E4D0])", `Malformed R transformation: 'R(L0,comps=[x\U0001e4d0])'`},
	{"R(L\U0001E4F0,comps=[a])", `Malformed R transformation: 'R(L\U0001e4f0,comps=[a])'`},
	{"R(L0,comps=[c\xff])", `Malformed R transformation: 'R(L0,comps=[c\udcff])'`},
	{"T2(L0,L1,4,8,comps=[a])|R(L0,comps=[])|r", "Malformed R transformation: 'R(L0,comps=[])'"},
	{"D(L1,comps=[comp05],distribution=[['comp05'], ['comp06'], ['comp03', 'comp04']])", ""},
	{`D(L0,comps=['a'],distribution=[[a],["b",c_1,'d']])`, ""},
	{"E(comps=['comp'])", ""},
	{"M([1, 0, 0, 1],comps=['comp00'])", ""},
	{"M([-1],comps=[c])", ""},
	{"M([1,0,0,0,-1,0,0,0,\u0661],comps=[c])", ""},
	{"TG(L1,L2,10,5,comps=['R_up_init', 'R_up', 'A_out'])", ""},
	{"TG(L0,32,comps=[c])", ""},
	{"TG(L\u0661,L1,L2,4,\u0664,4,comps=[c])", ""},
	{"S(L0,L1,1,-1,comps=[a])|D(L0,comps=[a],distribution=[[a],[b]])|E(comps=[b])|M([0,1,1,0],comps=[a])|TG(L0,8,comps=[a,b])", ""},
	{"D(L1,comps=[a])", "Malformed D transformation: 'D(L1,comps=[a])'"},
	{"D(L1,comps=[a],distribution=[])", "Malformed D transformation: 'D(L1,comps=[a],distribution=[])'"},
	{"D(L1,comps=[a],distribution=[[]])", "Malformed D transformation: 'D(L1,comps=[a],distribution=[[]])'"},
	{"D(L1,comps=[a],distribution=[a])", "Malformed D transformation: 'D(L1,comps=[a],distribution=[a])'"},
	{"D(L1,comps=[a],distribution=[[a],])", "Malformed D transformation: 'D(L1,comps=[a],distribution=[[a],])'"},
	{"D(L1,comps=[a],distribution=[[a]],)", "Malformed D transformation: 'D(L1,comps=[a],distribution=[[a]],)'"},
	{"D(comps=[a],distribution=[[a]])", "Malformed D transformation: 'D(comps=[a],distribution=[[a]])'"},
	{"D(L1,distribution=[[a]],comps=[a])", "Malformed D transformation: 'D(L1,distribution=[[a]],comps=[a])'"},
	{"D(L1,comps=[a],distribution=[[1x]])", "Malformed D transformation: 'D(L1,comps=[a],distribution=[[1x]])'"},
	{"E(comps=[])", "Malformed E transformation: 'E(comps=[])'"},
	{"E(L0,comps=[a])", "Malformed E transformation: 'E(L0,comps=[a])'"},
	{"E()", "Malformed E transformation: 'E()'"},
	{"M([],comps=[c])", "Malformed M transformation: 'M([],comps=[c])'"},
	{"M([1,0,0],comps=[c])", "Malformed M transformation: 'M([1,0,0],comps=[c])' (3 entries do not make a square matrix)"},
	{"M([1,0,0],comps=[c]", "Malformed M transformation: 'M([1,0,0],comps=[c]'"}, // not square, and malformed anyway
	{"M([1,0,0,+1],comps=[c])", "Malformed M transformation: 'M([1,0,0,+1],comps=[c])'"},
	{"M([1,0,0,1])", "Malformed M transformation: 'M([1,0,0,1])'"},
	{"M(1,0,0,1,comps=[c])", "Malformed M transformation: 'M(1,0,0,1,comps=[c])'"},
	{"M([1.0],comps=[c])", "Malformed M transformation: 'M([1.0],comps=[c])'"},
	{"Mx([1],comps=[c])", "Malformed M transformation: 'Mx([1],comps=[c])'"},
	{"TG(L0,L1,32,comps=[c])", "Malformed TG transformation: 'TG(L0,L1,32,comps=[c])'"},
	{"TG(L0,32,32,comps=[c])", "Malformed TG transformation: 'TG(L0,32,32,comps=[c])'"},
	{"TG(L0,L1,comps=[c])", "Malformed TG transformation: 'TG(L0,L1,comps=[c])'"},
	{"TG(32,comps=[c])", "Malformed TG transformation: 'TG(32,comps=[c])'"},
	{"TG(L0,-32,comps=[c])", "Malformed TG transformation: 'TG(L0,-32,comps=[c])'"},
	{"TG(L0,L1,32,L2,32,comps=[c])", "Malformed TG transformation: 'TG(L0,L1,32,L2,32,comps=[c])'"},
	{"TG(comps=[c])", "Malformed TG transformation: 'TG(comps=[c])'"},
	{"TG2(L0,4,comps=[c])", "Unknown transformation: 'TG2' in 'TG2(L0,4,comps=[c])'"},
	{"DE(comps=[a])", "Unknown transformation: 'DE' in 'DE(comps=[a])'"},
	{"G(L0,4,comps=[c])", "Unknown transformation: 'G' in 'G(L0,4,comps=[c])'"},
}

func TestValidate(t *testing.T) {
	for _, c := range validateCases {
		ok, reason := Validate(c.in)
		if ok != (c.reason == "") || reason != c.reason {
			t.Errorf("Validate(%q) = (%v, %q), want %q", c.in, ok, reason, c.reason)
		}
	}
}

// TestNormalizeThenValidate pins the places where validating the normalized
// schedule (what record does) disagrees with validating the raw text.
func TestNormalizeThenValidate(t *testing.T) {
	cases := []struct {
		in            string
		raw, afterNrm bool
	}{
		{"   ", false, true},                      // "Empty segment" vs ""
		{"R(L0,comps=[])", false, true},           // [] becomes ['']
		{"R(L0,comps=[1x])", false, true},         // any text becomes quoted
		{"R(L0,comps=[\u00e9,a-b])", false, true}, //
		{`R(L0,comps=['a"])`, false, true},        // quotes stripped, rewrapped
		{"R(L0,comps=['a]'])", true, false},       // quoted ']' ends the block
		{`R(L0,comps=["a'b"])`, true, false},      // ' inside "..." rewrapped in '...'
		{"R(L0,comps=['a,b'])", true, true},       // valid both ways, but 2 comps after
		{"R(L0,comps=['a|b'])", false, false},     // '|' splits before anything
		{"R(L0,comps=[a,])", false, true},         // empty item becomes ''
		// D's groups are not a comps=[...] block: normalizing leaves them.
		{"D(L0,comps=[1x],distribution=[[a]])", false, true},
		{"D(L0,comps=[a],distribution=[[1x]])", false, false},
	}
	for _, c := range cases {
		raw, _ := Validate(c.in)
		nrm, _ := Validate(Normalize(c.in))
		if raw != c.raw || nrm != c.afterNrm {
			t.Errorf("%q: Validate=%v, Validate(Normalize)=%v; want %v, %v", c.in, raw, nrm, c.raw, c.afterNrm)
		}
	}
}

// programCases are inputs and the original's normalize_program output.
var programCases = []struct{ in, want string }{
	{"", ""},
	{" \n\t", ""},
	{"int x; // c\nint y;", "intx;inty;"},
	{"/* a\n b */int/**/x;", "intx;"},
	{"/* unterminated\nint x;", "/*unterminatedintx;"},
	{"a /* b */ c */ d", "ac*/d"},
	{"/*/ x */y", "y"},
	{"a // b /* c\nd */ e", "a"}, // block comments go first
	{"a/* x */ / b", "a/b"},
	{"a/\n/b", "a//b"}, // "//" formed only by whitespace removal stays
	{"a///b\nc", "ac"},
	{"#include <stdio.h>\nint main(){}", "intmain(){}"},
	{"  #  include \"a.h\"  \nx", "x"},
	{"#include<a>", ""},
	{"#include <>", ""},
	{"#include <a\nb>\nx", "x"},              // [^>"]* crosses lines
	{"#include <a\" x", "#include<a\"x"},     // no $ after the bracket
	{"#include \"a> x\ny", "#include\"a>xy"}, // closes at the first > or "
	{"#include <a> x\ny", "#include<a>xy"},
	{"x #include <a>\ny", "x#include<a>y"},
	{"#include <a>\r\nx", "x"},
	{"#include <a>\u2028x", "#include<a>x"}, // U+2028 is space, not a line end
	{"#include <a>\u2028\nx", "x"},
	{"\u3000#\u3000include\u3000<a>\u3000\nx", "x"},
	{"#\u200binclude <a>\nx", "#\u200binclude<a>x"},
	{"#define X 1\n#include \"b.h\"\n", "#defineX1"},
	{"// #include <a>\n#include <b>", ""},
	{"/* x */#include <a>\ny", "y"},
	{"x/* y\n*/#include <a>\nz", "x#include<a>z"}, // not at a line start any more
	{"#include <a>\n\n#include <b>\nint", "int"},
	{"x\n\n#include <a>\n\ny", "xy"},
	{"#include <a> #include <b>\nc", "#include<a>#include<b>c"}, // text after the first '>'
	{"#import <a>", "#import<a>"},
	{"#include", "#include"},
	{"#includes <a>", "#includes<a>"},
	{"#include <a>>\nx", "#include<a>>x"},
	{"int \U0001F600 = 1; // \U0001F600\n", "int\U0001F600=1;"},
}

func TestNormalizeProgram(t *testing.T) {
	for _, c := range programCases {
		if got := NormalizeProgram(c.in); got != c.want {
			t.Errorf("NormalizeProgram(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestNormalizeProgramLarge checks that pathological inputs stay fast (the
// include emulation memoizes its scans) and still give the right answer.
func TestNormalizeProgramLarge(t *testing.T) {
	var b []byte
	for i := 0; i < 50000; i++ {
		b = append(b, "\n\n#include <a\n"...)
	}
	got := NormalizeProgram(string(b) + "x")
	// The first '>' never comes, so nothing is an include.
	want := removeSpace(string(b)) + "x"
	if got != want {
		t.Fatalf("large input: got %d bytes, want %d", len(got), len(want))
	}
	b = b[:0]
	for i := 0; i < 50000; i++ {
		b = append(b, " \n #include <a> \n"...)
	}
	if got := NormalizeProgram(string(b) + "y"); got != "y" {
		t.Fatalf("many includes: got %q", got[:min(len(got), 40)])
	}
}

// TestIsSpaceContract checks IsSpace against the exact list in COMPAT.md.
func TestIsSpaceContract(t *testing.T) {
	want := func(r rune) bool {
		switch {
		case r >= 0x09 && r <= 0x0D, r >= 0x1C && r <= 0x20, r == 0x85, r == 0xA0,
			r == 0x1680, r >= 0x2000 && r <= 0x200A, r == 0x2028, r == 0x2029,
			r == 0x202F, r == 0x205F, r == 0x3000:
			return true
		}
		return false
	}
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if IsSpace(r) != want(r) {
			t.Errorf("IsSpace(%U) = %v", r, IsSpace(r))
		}
	}
	if IsSpace(-1) || IsSpace(utf8.MaxRune+1) {
		t.Error("IsSpace true outside the code space")
	}
}

func TestPyRepr(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "''"},
		{"a", "'a'"},
		{"'", `"'"`},
		{`"`, `'"'`},
		{`'"`, `'\'"'`},
		{`\`, `'\\'`},
		{"\t\n\r\x00\x1f\x7f", `'\t\n\r\x00\x1f\x7f'`},
		{"\u0080\u00a0\u00ad\u00e9", `'\x80\xa0\xad` + "\u00e9'"},
		{"\u2028\u200b\u3000\ufeff", `'\u2028\u200b\u3000\ufeff'`},
		{"\U0001F600\U000E0001\U0010FFFF", "'\U0001F600\\U000e0001\\U0010ffff'"},
		{"\xed\xa0\x80", `'\udced\udca0\udc80'`},
	}
	for _, c := range cases {
		if got := Repr(c.in); got != c.want {
			t.Errorf("Repr(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
