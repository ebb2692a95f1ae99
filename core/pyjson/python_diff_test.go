package pyjson

// Differential tests against the real thing: CPython's json module. They
// are skipped when python3 is not installed.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tirastore/tirastore/core/internal/pytest"
)

// pyLines runs script with stdin and returns its stdout lines, noting when
// the interpreter is not the 3.11 this package mirrors.
func pyLines(t *testing.T, script string, stdin []byte, args ...string) []string {
	t.Helper()
	v, err := pytest.Version(t)
	if err != nil {
		t.Skipf("python3 does not run: %v", err)
	}
	if v != "3.11" {
		t.Logf("python3 is %s; this package mirrors 3.11", v)
	}
	return pytest.Lines(pytest.Run(t, script, stdin, args...))
}

func unhex(t *testing.T, s string) string {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex from python: %q", s)
	}
	return string(b)
}

// pyOptions is the list of json.dumps argument sets every value is
// checked with, as [sort_keys, ensure_ascii, indent, item_sep, key_sep].
var pyOptions = func() []Options {
	opts := []Options{
		Canonical, Compact, Default,
		{Indent: -1, ItemSep: ", ", KeySep: ": "},
		{SortKeys: true, Indent: -1, ItemSep: ",", KeySep: ":"},
		{EnsureASCII: true, Indent: 2, ItemSep: ", ", KeySep: ": "}, // trailing spaces
		{EnsureASCII: true, Indent: 3, ItemSep: " ; ", KeySep: " = "},
		{SortKeys: true, Indent: -1, ItemSep: "", KeySep: ""},
	}
	for _, ind := range []int{0, 2, 4} {
		for _, sk := range []bool{false, true} {
			for _, ea := range []bool{false, true} {
				opts = append(opts, Options{SortKeys: sk, EnsureASCII: ea, Indent: ind, ItemSep: ",", KeySep: ": "})
			}
		}
	}
	return opts
}()

func pyOptionsArg(t *testing.T) string {
	var rows [][]any
	for _, o := range pyOptions {
		var ind any
		if o.Indent >= 0 {
			ind = o.Indent
		}
		rows = append(rows, []any{o.SortKeys, o.EnsureASCII, ind, o.ItemSep, o.KeySep})
	}
	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const pyFloats = `
import sys, json, struct
out = []
for line in sys.stdin:
    f = struct.unpack('<d', int(line, 16).to_bytes(8, 'little'))[0]
    out.append(json.dumps(f) + ' ' + repr(f))
print('\n'.join(out))
`

func TestPythonFormatFloat(t *testing.T) {
	t.Parallel()
	r := newRand(1)
	var fs []float64
	for k := -330; k <= 310; k++ { // every power of ten and its neighbours
		f, _ := strconv.ParseFloat(fmt.Sprintf("1e%d", k), 64)
		fs = append(fs, f, math.Nextafter(f, 0), math.Nextafter(f, math.Inf(1)), 5*f, 9.5*f)
	}
	for e := -1074; e <= 1023; e++ {
		fs = append(fs, math.Ldexp(1, e), math.Ldexp(1.5, e))
	}
	for i := 0; i < 60000; i++ {
		fs = append(fs, randFloat(r))
	}
	var in bytes.Buffer
	for _, f := range fs {
		fmt.Fprintf(&in, "%x\n", math.Float64bits(f))
	}
	lines := pyLines(t, pyFloats, in.Bytes())
	if len(lines) != len(fs) {
		t.Fatalf("python returned %d lines for %d floats", len(lines), len(fs))
	}
	bad := 0
	for i, f := range fs {
		dumps, repr, _ := strings.Cut(lines[i], " ")
		got := FormatFloat(f)
		if got != dumps {
			t.Errorf("FormatFloat(%x) = %q, json.dumps = %q", math.Float64bits(f), got, dumps)
			bad++
		}
		if !math.IsNaN(f) && !math.IsInf(f, 0) && got != repr {
			t.Errorf("FormatFloat(%x) = %q, repr = %q", math.Float64bits(f), got, repr)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many mismatches")
		}
	}
	t.Logf("%d floats identical to json.dumps and repr", len(fs))
}

const pyNumbers = `
import sys, json, struct
out = []
for line in sys.stdin:
    s = line.strip()
    v = json.loads(s)
    bits = struct.pack('<d', float(v)).hex() if isinstance(v, float) else '-'
    out.append(json.dumps(v) + ' ' + bits)
print('\n'.join(out))
`

func TestPythonNumbers(t *testing.T) {
	t.Parallel()
	r := newRand(2)
	var ns []Number
	for i := 0; i < 20000; i++ {
		if i%4 == 0 {
			ns = append(ns, Number(randIntText(r)))
		} else {
			ns = append(ns, Number(randFloatText(r)))
		}
	}
	var in bytes.Buffer
	for _, n := range ns {
		in.WriteString(string(n) + "\n")
	}
	lines := pyLines(t, pyNumbers, in.Bytes())
	if len(lines) != len(ns) {
		t.Fatalf("python returned %d lines for %d numbers", len(lines), len(ns))
	}
	for i, n := range ns {
		dumps, bits, _ := strings.Cut(lines[i], " ")
		got, err := Marshal(n, Default)
		if err != nil || string(got) != dumps {
			t.Fatalf("Marshal(Number(%q)) = %q, %v; json.dumps(json.loads()) = %q", n, got, err, dumps)
		}
		if bits == "-" {
			if !n.IsInt() {
				t.Fatalf("Number(%q): Python made an int, IsInt() = false", n)
			}
			continue
		}
		if n.IsInt() {
			t.Fatalf("Number(%q): Python made a float, IsInt() = true", n)
		}
		f, err := n.Float64()
		var le [8]byte
		u := math.Float64bits(f)
		for j := range le {
			le[j] = byte(u >> (8 * j))
		}
		if math.IsNaN(f) && bits == "000000000000f87f" {
			continue // NaN payloads differ and never reach the JSON text
		}
		if err != nil || hex.EncodeToString(le[:]) != bits {
			t.Fatalf("Number(%q).Float64() = %v (%x), %v; Python float bits %s", n, f, u, err, bits)
		}
	}
	t.Logf("%d number literals identical to json.loads+json.dumps", len(ns))
}

const pyBuild = `
import sys, json, struct
def build(n):
    t = n[0]
    if t == 'z': return None
    if t == 'b': return n[1]
    if t == 's': return ''.join(map(chr, n[1]))
    if t == 'i': return int(n[1])
    if t == 'f': return struct.unpack('<d', int(n[1], 16).to_bytes(8, 'little'))[0]
    if t == 'F': return float(n[1])
    if t == 'l': return [build(x) for x in n[1]]
    if t == 'o':
        d = {}
        for k, v in n[1]:
            d[''.join(map(chr, k))] = build(v)
        return d
    if t == 'm':  # a Go map: Marshal always writes it sorted
        return dict(sorted((''.join(map(chr, k)), build(v)) for k, v in n[1]))
    raise ValueError(t)
opts = json.loads(sys.argv[1])
out = []
for line in sys.stdin:
    v = build(json.loads(line))
    for sk, ea, ind, isep, ksep in opts:
        s = json.dumps(v, sort_keys=sk, ensure_ascii=ea, indent=ind, separators=(isep, ksep))
        out.append(s.encode('utf-8').hex())
print('\n'.join(out))
`

func TestPythonMarshal(t *testing.T) {
	t.Parallel()
	r := newRand(3)
	const cases = 3000
	var vals []any
	var in bytes.Buffer
	for i := 0; i < cases; i++ {
		v, n := randValue(r, 1+i%5)
		vals = append(vals, v)
		b, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(b)
		in.WriteByte('\n')
	}
	lines := pyLines(t, pyBuild, in.Bytes(), pyOptionsArg(t))
	if len(lines) != cases*len(pyOptions) {
		t.Fatalf("python returned %d lines, want %d", len(lines), cases*len(pyOptions))
	}
	checked := 0
	for i, v := range vals {
		for j, o := range pyOptions {
			want := unhex(t, lines[i*len(pyOptions)+j])
			got, err := Marshal(v, o)
			if err != nil || string(got) != want {
				t.Fatalf("case %d options %+v:\nMarshal    %q (err %v)\njson.dumps %q", i, o, got, err, want)
			}
			// Python's own output must parse and re-marshal to itself
			// (when the separators leave it valid JSON).
			if strings.TrimSpace(o.ItemSep) != "," || strings.TrimSpace(o.KeySep) != ":" {
				checked++
				continue
			}
			pv, err := Parse([]byte(want))
			if err != nil {
				t.Fatalf("Parse(json.dumps output %q): %v", want, err)
			}
			again, err := Marshal(pv, o)
			if err != nil || string(again) != want {
				t.Fatalf("Marshal(Parse(%q)) = %q, %v", want, again, err)
			}
			checked++
		}
	}
	t.Logf("%d values x %d option sets = %d outputs identical to json.dumps (and parse round trips)", cases, len(pyOptions), checked)
}

const pyParse = `
import sys, json
opts = json.loads(sys.argv[1])
out = []
for line in sys.stdin:
    b = bytes.fromhex(line.strip())
    try:
        s = b.decode('utf-8')
    except UnicodeDecodeError:
        out.append('U'); continue
    try:
        v = json.loads(s)
    except json.JSONDecodeError as e:
        out.append('E %d %s' % (e.pos, e.msg.encode().hex())); continue
    except RecursionError:
        out.append('R'); continue
    except ValueError as e:
        out.append('V'); continue
    try:
        json.dumps(v, ensure_ascii=False).encode('utf-8')
    except UnicodeEncodeError:
        out.append('S'); continue
    res = [json.dumps(v, sort_keys=sk, ensure_ascii=ea, indent=ind, separators=(isep, ksep)).encode('utf-8').hex()
           for sk, ea, ind, isep, ksep in opts]
    out.append('O ' + ' '.join(res))
print('\n'.join(out))
`

func TestPythonParse(t *testing.T) {
	t.Parallel()
	r := newRand(4)
	var texts [][]byte
	for i := 0; i < 6000; i++ {
		txt := randJSONText(r, 1+i%5)
		if i%2 == 1 {
			txt = mutate(r, txt)
		}
		texts = append(texts, txt)
	}
	// Hand-picked edge cases on top of the random ones.
	for _, s := range []string{
		"", " ", "\ufeff1", `"\ud800"`, `"\ud800\u0041"`, `"x\ud83d`, `"\ud83d\ude00"`, `"\u1234`,
		`{"a":1,"a":2,"b":3,"a":4}`, `[1e400, -1e400, 1e-400, -0, -0.0, NaN]`, "[\"\x7f\"]",
		strings.Repeat("9", MaxIntDigits), strings.Repeat("9", MaxIntDigits+1),
		strings.Repeat("[", 50) + strings.Repeat("]", 50),
	} {
		texts = append(texts, []byte(s))
	}
	var in bytes.Buffer
	for _, txt := range texts {
		in.WriteString(hex.EncodeToString(txt))
		in.WriteByte('\n')
	}
	lines := pyLines(t, pyParse, in.Bytes(), pyOptionsArg(t))
	if len(lines) != len(texts) {
		t.Fatalf("python returned %d lines for %d texts", len(lines), len(texts))
	}
	stats := map[string]int{}
	for i, txt := range texts {
		line := lines[i]
		v, err := Parse(txt)
		var se *SyntaxError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("Parse(%q) returned a non-SyntaxError %T", txt, err)
		}
		tag := line[:1]
		stats[tag]++
		switch tag {
		case "O":
			if err != nil {
				t.Fatalf("Parse(%q) error %v; Python accepted it", txt, err)
			}
			outs := strings.Fields(line[2:])
			for j, o := range pyOptions {
				want := unhex(t, outs[j])
				got, err := Marshal(v, o)
				if err != nil || string(got) != want {
					t.Fatalf("text %q options %+v:\nMarshal(Parse) %q (err %v)\njson.dumps     %q", txt, o, got, err, want)
				}
			}
		case "U":
			if err == nil || !strings.HasPrefix(se.Msg, "Invalid UTF-8") {
				t.Fatalf("Parse(%q) = %v; want invalid UTF-8 error (Python's decode failed)", txt, err)
			}
		case "S":
			if err == nil || !strings.HasPrefix(se.Msg, "Lone surrogate") {
				t.Fatalf("Parse(%q) = %v; want lone surrogate error (Python built a lone surrogate)", txt, err)
			}
		case "V":
			if err == nil || !strings.HasPrefix(se.Msg, "Exceeds the limit") {
				t.Fatalf("Parse(%q) = %v; want integer digit limit error (Python raised ValueError)", txt, err)
			}
		case "E":
			f := strings.Fields(line)
			pos, _ := strconv.Atoi(f[1])
			msg := unhex(t, f[2])
			if err == nil {
				t.Fatalf("Parse(%q) accepted; Python: %s at char %d", txt, msg, pos)
			}
			gotPos := utf8.RuneCount(txt[:se.Offset])
			if strings.HasPrefix(se.Msg, "Lone surrogate") && (gotPos <= pos || msg == "Unterminated string starting at") {
				stats["E (lone surrogate first)"]++
				continue // we stop at the lone surrogate Python let through
			}
			if se.Msg != msg || gotPos != pos {
				t.Fatalf("Parse(%q): %q at char %d; Python: %q at char %d", txt, se.Msg, gotPos, msg, pos)
			}
		default:
			t.Fatalf("Parse(%q): unexpected Python result %q", txt, line)
		}
	}
	t.Logf("%d texts agree with json.loads: %v", len(texts), stats)
}
