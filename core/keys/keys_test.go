package keys

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tirastore/tirastore/core/internal/pytest"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/tuning"
)

// Vectors computed once with CPython 3.11 (hashlib + json) from the original's
// rules; they pin the values independently of python3 being installed.
func TestKnownVectors(t *testing.T) {
	const blur = "0d57ee02086a803dbbc6a684529b22fa0468d08e8a64cd4c3a53a800d2ea119b"
	progs := []struct{ src, want string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"void blur() { ... }", blur},
		{"#include <a.h>\n// c\nvoid blur() { /* x */ ... }\n", blur},
	}
	for _, c := range progs {
		if got := ProgramHash(c.src); got != c.want {
			t.Errorf("ProgramHash(%q) = %s, want %s", c.src, got, c.want)
		}
	}
	recs := []struct{ hash, sched, want string }{
		{blur, "S(L0,L1,4,8,comps=['c1'])", "4530705a2687a2b199aa1226479c17e48e542633e0f77bf4b29a13404efe5902"},
		{blur, `S( L0, L1, 4, 8, comps=["c1"] )`, "4530705a2687a2b199aa1226479c17e48e542633e0f77bf4b29a13404efe5902"},
		{blur, "", "fe7da792c9097f31cd1cb53f4b9dcfdf1b63a8d2bbba2da918b2e8208d1f3fc7"},
		{"", "R(L0,comps=[\"\u00e9\\ \U0001F600\x7f\"])", "59f7d6ec080c803d7d95f9db1ecb4546f272247a8d23a93ec47a81a992598068"},
		// Python: json.dumps of a str decoded with errors="surrogateescape".
		{"x", "comps=[\xff]", "1a6b29cb1ea8892269f4577b37015beadde8056c119d20c1d69de747c577b394"},
	}
	for _, c := range recs {
		if got := RecordKey(c.hash, c.sched); got != c.want {
			t.Errorf("RecordKey(%q, %q) = %s, want %s", c.hash, c.sched, got, c.want)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	cases := []struct{ hash, sched, want string }{
		{"h", "", `{"program_hash":"h","tiralib_schedule_string":""}`},
		{"h", "comps=['a']", `{"program_hash":"h","tiralib_schedule_string":"comps=['a']"}`},
		{`"\`, "\n\r\t\b\f\x00\x1f\x7f</>&", `{"program_hash":"\"\\","tiralib_schedule_string":"\n\r\t\b\f\u0000\u001f\u007f</>&"}`},
		{"\u00e9\u2028", "\U0001F600", `{"program_hash":"\u00e9\u2028","tiralib_schedule_string":"\ud83d\ude00"}`},
		{"a\xffb", "\xed\xa0\x80\u00e9", `{"program_hash":"a\udcffb","tiralib_schedule_string":"\udced\udca0\udc80\u00e9"}`},
	}
	for _, c := range cases {
		if got := string(canonicalJSON(c.hash, c.sched)); got != c.want {
			t.Errorf("canonicalJSON(%q, %q) = %s, want %s", c.hash, c.sched, got, c.want)
		}
	}
}

// TestRecordKeyNormalizes checks that spellings of one schedule share a key
// and that different programs or schedules do not.
func TestRecordKeyNormalizes(t *testing.T) {
	h := ProgramHash("int x;")
	if ProgramHash("int   x; // comment") != h {
		t.Error("cosmetic program change altered the hash")
	}
	a := RecordKey(h, "R(L0,comps=['c1'])")
	for _, s := range []string{`R( L0 , comps=["c1"] )`, "R(L0,\u3000comps=[c1])", "R(L0,comps=['\"c1\"'])"} {
		if RecordKey(h, s) != a {
			t.Errorf("RecordKey differs for %q", s)
		}
	}
	if RecordKey(h, "R(L0,comps=[\u200bc1])") == a {
		t.Error("U+200B is not whitespace and must change the key")
	}
	if RecordKey(ProgramHash("int y;"), "R(L0,comps=['c1'])") == a {
		t.Error("different programs share a key")
	}
	if len(a) != 64 || strings.ToLower(a) != a {
		t.Errorf("key %q is not lowercase hex SHA-256", a)
	}
}

// pythonKeys computes program hashes and record keys with the tests' one
// reference of the rules (core/schedule/testdata/reference.py, whose
// directory is its first argument).
const pythonKeys = `
import json, sys
sys.path.insert(0, sys.argv[1])
import reference

def dec(x):
    # Inputs travel as hex of their bytes; invalid UTF-8 becomes lone
    # surrogates as with surrogateescape.
    return bytes.fromhex(x).decode("utf-8", "surrogateescape")

out = []
for c in json.load(sys.stdin):
    src, h, sched = dec(c["src"]), dec(c["hash"]), dec(c["sched"])
    ph = reference.program_hash(src) if c["valid"] else ""
    out.append([ph, reference.record_key_for_hash(ph if c["useph"] else h, sched)])
json.dump(out, sys.stdout)
`

type keyCase struct {
	Src   string `json:"src"`
	Hash  string `json:"hash"`
	Sched string `json:"sched"`
	Valid bool   `json:"valid"` // src is valid UTF-8 (Python can hash it)
	UsePH bool   `json:"useph"` // the record key uses the program hash
}

var keyPieces = []string{
	"int", " ", "x", ";", "\n", "\r\n", "\t", "/* c */", "// c\n", "#include <a.h>\n",
	"\n\n  #include \"b\"  \n\n", "\u00e9", "\u4e2d", "\U0001F600", "\U0010FFFF", "\u2028",
	"\u3000", "\u0085", "\u200b", "\x00", "\x01", "\x1f", "\x7f", "\\", `"`, "'", "<", ">",
	"&", "/", "\b", "\f", "\ufeff", "\ud7ff", "\ue000",
	"S(L0,L1,4,8,comps=['c1'])", "R(L0,comps=[\"a\", b])", "comps=[", "]", ",", "|",
}

func TestDifferentialPython(t *testing.T) {
	pytest.Python(t)
	r := rand.New(rand.NewSource(42))
	piece := func() string { return keyPieces[r.Intn(len(keyPieces))] }
	text := func(n int) string {
		var b strings.Builder
		for i := r.Intn(n); i > 0; i-- {
			if r.Intn(15) == 0 {
				b.WriteRune(rune(r.Intn(0x110000))) // a surrogate becomes U+FFFD
			} else {
				b.WriteString(piece())
			}
		}
		return b.String()
	}
	n := 3000
	if testing.Short() {
		n = 500
	}
	var cases []keyCase
	var srcs, hashes, scheds []string
	for i := 0; i < n; i++ {
		src, h, sched := text(20), text(4), text(12)
		if r.Intn(20) == 0 { // stray bytes: only the record key is comparable
			sched += "\xff"
			if r.Intn(2) == 0 {
				h = "\xc3" + h
			}
		}
		if r.Intn(3) == 0 {
			h = ProgramHash(src)
		}
		srcs, hashes, scheds = append(srcs, src), append(hashes, h), append(scheds, sched)
		hx := func(s string) string { return strings.ToLower(hexOf(s)) }
		cases = append(cases, keyCase{Src: hx(src), Hash: hx(h), Sched: hx(sched), Valid: utf8.ValidString(src), UsePH: i%2 == 0 && utf8.ValidString(src)})
	}
	var out [][2]string
	ref, err := filepath.Abs(filepath.Join("..", "schedule", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	pytest.RunJSON(t, pythonKeys, cases, &out, ref)
	if len(out) != len(cases) {
		t.Fatalf("python output: %d results for %d cases", len(out), len(cases))
	}
	fails := 0
	for i, c := range cases {
		h := hashes[i]
		if c.Valid {
			ph := ProgramHash(srcs[i])
			if ph != out[i][0] {
				fails++
				t.Errorf("ProgramHash(%q) = %s, python %s", srcs[i], ph, out[i][0])
			}
			if c.UsePH {
				h = ph
			}
		}
		if got := RecordKey(h, scheds[i]); got != out[i][1] {
			fails++
			t.Errorf("RecordKey(%q, %q) = %s, python %s", h, scheds[i], got, out[i][1])
		}
		if fails > 20 {
			t.Fatal("too many mismatches")
		}
	}
	t.Logf("%d cases compared with python3", len(cases))
}

func hexOf(s string) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, digits[s[i]>>4], digits[s[i]&0xF])
	}
	return string(b)
}

// RecordKeyNormalized is RecordKey minus the normalization it skips.
func TestRecordKeyNormalized(t *testing.T) {
	for _, s := range []string{"", "S(L0,L1,4,8,comps=['c1'])", " S( L0 , L1,4,8 ,comps=[\"c1\", 'c2'])|U(L2,4,comps=[c1])", "I(L١,L2,comps=[x])\u3000", "\u00a0"} {
		h := ProgramHash("void f(){}")
		if got, want := RecordKeyNormalized(h, schedule.Normalize(s)), RecordKey(h, s); got != want {
			t.Errorf("%q: %s != %s", s, got, want)
		}
	}
}

// The plain-ASCII shortcut of canonicalJSON writes what the encoder writes.
func TestCanonicalJSONShortcut(t *testing.T) {
	for _, s := range []string{"", "S(L0,L1,4,8,comps=['c1'])", "a b~!#$%&'()*+,-./:;<=>?@[]^_`{|}", "x\"y", "x\\y", "\x7f", "é", "\t"} {
		obj := pyjson.NewObject()
		obj.Set("program_hash", "abc")
		obj.Set("tiralib_schedule_string", s)
		want, err := pyjson.Marshal(obj, pyjson.Canonical)
		if err != nil {
			t.Fatal(err)
		}
		if got := canonicalJSON("abc", s); string(got) != string(want) {
			t.Errorf("%q: %s, want %s", s, got, want)
		}
	}
}

// TestProgramHashLarge: a source from tuning.ScratchInMemoryMap bytes on is
// normalized in mapped memory, with the same hash as the small path's.
func TestProgramHashLarge(t *testing.T) {
	line := "  #include <x.h>\n /* c */ a[i] = b[i]; // note\n\t\"q\" é\u2003\n"
	src := strings.Repeat(line, tuning.ScratchInMemoryMap/len(line)+1)
	if len(src) < tuning.ScratchInMemoryMap {
		t.Fatal("the source is too short for the mapped path")
	}
	sum := sha256.Sum256([]byte(schedule.NormalizeProgram(src)))
	if got, want := ProgramHash(src), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("ProgramHash = %s, sha256(NormalizeProgram) = %s", got, want)
	}
	if got := ProgramHash(src[:100]); got != ProgramHash(strings.Clone(src[:100])) {
		t.Fatal("not deterministic")
	}
}
