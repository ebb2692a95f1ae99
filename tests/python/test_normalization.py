"""Schedule/program normalization, validation, hashing (COMPAT.md).

Explicit expected values are written by hand from the spec; a differential
test additionally compares the library with the independent oracles in
conftest.py over a seeded corpus.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import random

import pytest

from conftest import (
    oracle_normalize_program,
    oracle_normalize_schedule,
    oracle_program_hash,
    oracle_validate_schedule,
)

import tirastore
from tirastore import (
    make_program_hash,
    normalize_program,
    normalize_schedule,
    validate_schedule,
)

# Every character Python's str.isspace() accepts (COMPAT.md "Whitespace").
PY_WHITESPACE = (
    [chr(c) for c in range(0x09, 0x0E)]
    + [chr(c) for c in range(0x1C, 0x20)]
    + ["\u0020", "\u0085", "\u00a0", "\u1680"]
    + [chr(c) for c in range(0x2000, 0x200B)]
    + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
)
# Look-alikes that are NOT whitespace for Python.
NOT_WHITESPACE = ["\u200b", "\ufeff", "\u180e", "\u200c", "\u200d", "\u2060"]


def test_whitespace_table_matches_python():
    # sanity check of the test data itself
    assert all(c.isspace() for c in PY_WHITESPACE)
    assert not any(c.isspace() for c in NOT_WHITESPACE)
    assert {chr(c) for c in range(0x110000) if chr(c).isspace()} == set(PY_WHITESPACE)


def test_version_matches_metadata():
    assert isinstance(tirastore.__version__, str)
    assert tirastore.__version__ == importlib.metadata.version("tirastore")


def test_public_names_importable():
    for name in (
        "TiraStore",
        "LookupResult",
        "normalize_schedule",
        "validate_schedule",
        "normalize_program",
        "make_program_hash",
        "LockLostError",
        "TiraStoreWarning",
    ):
        assert hasattr(tirastore, name), name
        assert name in tirastore.__all__, name
    assert issubclass(tirastore.TiraStoreWarning, RuntimeWarning)
    assert tirastore.TiraStoreWarning.__module__ == "tirastore.errors"


# ---------------------------------------------------------------------------
# normalize_schedule
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("", ""),
        ("   ", ""),
        ("\t\n", ""),
        ("R(L0,comps=['c1'])", "R(L0,comps=['c1'])"),
        ('R( L0 , comps=["c1"] )', "R(L0,comps=['c1'])"),
        ("comps=[\"a\", 'b']", "comps=['a','b']"),
        ("comps=[]", "comps=['']"),
        ("comps=[a,b]", "comps=['a','b']"),
        ("comps=[ a , b ]", "comps=['a','b']"),
        ("comps=['\"a\"']", "comps=['a']"),
        ("comps=[\"'a'\"]", "comps=['a']"),
        ("comps=['a\"b']", "comps=['a\"b']"),
        # quoted names containing commas are split (original behaviour)
        ("comps=['a,b']", "comps=['a','b']"),
        ("comps=[\"x, y\",z]", "comps=['x','y','z']"),
        ("comps=[,]", "comps=['','']"),
        ("comps=['']", "comps=['']"),
        ("comps=[a]]", "comps=['a']]"),
        ("comps=[a", "comps=[a"),  # no closing bracket: untouched
        ("COMPS=[a]", "COMPS=[a]"),  # case-sensitive
        ("comps = [ a ]", "comps=['a']"),  # whitespace removed first
        (
            "I(L0,L1,comps=[a])|R(L0,comps=[\"b\"])",
            "I(L0,L1,comps=['a'])|R(L0,comps=['b'])",
        ),
        (
            "S(L0, L1, -4, 8, comps=[\"c1\", \"c2\"])",
            "S(L0,L1,-4,8,comps=['c1','c2'])",
        ),
        ("R(L0,comps=['é😀'])", "R(L0,comps=['é😀'])"),
        ("R(L0,comps=['a b'])", "R(L0,comps=['ab'])"),
        ("not a schedule at all", "notascheduleatall"),
    ],
)
def test_normalize_schedule_cases(raw, expected):
    assert normalize_schedule(raw) == expected
    assert oracle_normalize_schedule(raw) == expected  # oracle self-check


@pytest.mark.parametrize("ws", PY_WHITESPACE, ids=lambda c: f"U+{ord(c):04X}")
def test_normalize_schedule_removes_every_python_whitespace(ws):
    raw = f"{ws}R({ws}L0{ws},{ws}comps=[{ws}'c1'{ws}]{ws}){ws}"
    assert normalize_schedule(raw) == "R(L0,comps=['c1'])"


@pytest.mark.parametrize("ch", NOT_WHITESPACE, ids=lambda c: f"U+{ord(c):04X}")
def test_normalize_schedule_keeps_non_whitespace_lookalikes(ch):
    raw = f"R(L0,{ch}comps=['c1'])"
    assert normalize_schedule(raw) == raw


def test_normalize_schedule_specific_unicode_spaces():
    assert normalize_schedule("R(L0,\u3000comps=['c1'])") == "R(L0,comps=['c1'])"
    assert normalize_schedule("R(L0,\u0085comps=['c1'])") == "R(L0,comps=['c1'])"
    assert normalize_schedule("R(L0,\u00a0comps=['c1'])") == "R(L0,comps=['c1'])"
    assert normalize_schedule("R(L0,\u200bcomps=['c1'])") == "R(L0,\u200bcomps=['c1'])"


def test_normalize_schedule_idempotent():
    for raw in [
        "comps=[\"a\", 'b']",
        "comps=[]",
        "S(L0,L1,4,8,comps=['c1'])| R(L0, comps=[x])",
        "comps=['a,b']",
    ]:
        once = normalize_schedule(raw)
        assert normalize_schedule(once) == once


def test_normalize_schedule_returns_str():
    assert type(normalize_schedule("R(L0,comps=[a])")) is str
    assert type(normalize_schedule("")) is str


@pytest.mark.parametrize("bad", [5, b"R(L0,comps=[a])", ["R(L0,comps=[a])"]])
def test_normalize_schedule_type_error(bad):
    with pytest.raises(TypeError):
        normalize_schedule(bad)


# The original starts with `if not s: return ""` (normalize_schedule,
# normalize_program) and `if not s: return True, ""` (validate_schedule);
# make_program_hash hashes normalize_program's "" then.
FALSY = [None, "", 0, 0.0, False, b"", [], (), {}]
FALSY_IDS = ["None", "empty-str", "0", "0.0", "False", "empty-bytes", "empty-list", "empty-tuple", "empty-dict"]


@pytest.mark.parametrize("falsy", FALSY, ids=FALSY_IDS)
def test_helpers_take_any_falsy_argument_as_empty(falsy):
    assert normalize_schedule(falsy) == ""
    assert type(normalize_schedule(falsy)) is str
    assert normalize_program(falsy) == ""
    assert validate_schedule(falsy) == (True, "")
    assert make_program_hash(falsy) == hashlib.sha256(b"").hexdigest() == oracle_program_hash("")


@pytest.mark.parametrize(
    "func, arg, bad, type_name",
    [
        (normalize_schedule, "schedule", b"R(L0,comps=[a])", "bytes"),
        (normalize_schedule, "schedule", 5, "int"),
        (validate_schedule, "schedule", ["R(L0,comps=[a])"], "list"),
        (normalize_program, "source", b"int x;", "bytes"),
        (make_program_hash, "source", 1.5, "float"),
        (make_program_hash, "source", {"int x;"}, "set"),
    ],
)
def test_helper_type_errors_name_function_and_argument(func, arg, bad, type_name):
    msg = f"{func.__name__}(): {arg} must be str, not {type_name}"
    with pytest.raises(TypeError) as e:
        func(bad)
    assert str(e.value) == msg


# ---------------------------------------------------------------------------
# validate_schedule
# ---------------------------------------------------------------------------

VALID_SCHEDULES = [
    "",
    "S(L0,L1,4,8,comps=['c1'])",
    "S(L0,L1,-4,-8,comps=[c1])",
    "S(L0,L1,0,-0,comps=[c1])",
    "I(L0,L1,comps=[\"a\",b])",
    "R(L0,comps=['c1'])",
    "P(L2,comps=['c'])",
    "T2(L0,L1,32,32,comps=['c'])",
    "T3(L0,L1,L2,4,4,4,comps=['c'])",
    "U(L1,8,comps=['c'])",
    "F(L0,comps=['c1','c2'])",
    "S(L0,L1,4,8,comps=['c1'])|I(L0,L1,comps=['c1'])|R(L0,comps=['c1'])",
    "R(L10,comps=['c1'])",
    "R(L007,comps=['c1'])",
    "R(L\u0661,comps=[c])",  # L١ Arabic-Indic digit
    "T2(L0,L1,\u0663\u0662,4,comps=[c])",  # ٣٢
    "R(L\uff10,comps=[c])",  # fullwidth digit zero is decimal
    "R(L0,comps=[''])",
    "R(L0,comps=[\"\"])",
    "R(L0,comps=[\"a'b\"])",
    "R(L0,comps=['a\"b'])",
    "R(L0,comps=['a,b'])",  # comma inside quotes is fine for the grammar
    "R(L0,comps=['a]b'])",
    "R(L0,comps=['a(b)'])",
    "R(L0,comps=[_x])",
    "R(L0,comps=[x_1\u00e9])",  # é is alnum
    "R(L0,comps=[a\u00bd])",  # ½ is numeric -> alnum
    "R(L0,comps=[a\u00b2])",  # ² is a digit -> alnum
    "R(L0,comps=[a\u00aa])",  # ª is alpha
    "R(L0,comps=[a\u0663])",
    "R(L0,comps=['\u65e5\u672c'])",
    "R( L0 , comps = [ 'c' ] )",  # whitespace ignored
    "R(L0,comps=['c'])\u3000",
    "\u0085R(L0,comps=['c'])",
    "R(L0,comps=[a,'b',\"c\"])",
    # TiraLib's other actions, which the original rejected as unknown
    "D(L1,comps=[comp05],distribution=[['comp05'], ['comp06'], ['comp03', 'comp04']])",
    "E(comps=['comp'])",
    "M([1, 0, 0, 1],comps=['comp00'])",
    "M([-1],comps=[c])",
    "TG(L1,L2,10,5,comps=['R_up_init', 'R_up', 'A_out'])",
    "TG(L\u0661,32,comps=[c])",
]

INVALID_SCHEDULES = [
    "|",
    "||",
    "R(L0,comps=['c'])|",
    "|R(L0,comps=['c'])",
    "R(L0,comps=['c'])||R(L0,comps=['c'])",
    "R(L0,comps=[])",  # empty comps list is malformed (before normalization)
    "R(L0,comps=[,])",
    "R(L0,comps=['c'],)",
    "R(L0,comps=['c']",
    "R(L0,comps=['c']))",
    "R(L0,comps=['c'])x",
    "R(L0)",
    "R(L0,['c'])",
    "R(L0,comps=(c))",
    "R(L-1,comps=[c])",
    "R(l0,comps=[c])",
    "R(0,comps=[c])",
    "R(L,comps=[c])",
    "R(L0,L1,comps=[c])",
    "R(L\u00b2,comps=[c])",  # superscript two: isdigit but not isdecimal
    "R(L\u216b,comps=[c])",  # roman numeral twelve: numeric, not decimal
    "R(L0,comps=[1a])",
    "R(L0,comps=[a.b])",
    "R(L0,comps=[a-b])",
    "R(L0,comps=[\u00e9])",  # identifiers start with an ASCII letter or _
    "R(L0,comps=[a\u0301])",  # combining mark is not alnum
    "R(L0,comps=['a'b'])",
    "R(L0,comps=[\"a\"b\"])",
    "R(L0,comps=['a)",
    "R(L0,\u200bcomps=['c'])",  # zero-width space is not whitespace
    "S(L0,L1,4,comps=[c])",
    "S(L0,L1,4,8)",
    "S(L0,L1,+4,8,comps=[c])",
    "S(L0,L1,4.0,8,comps=[c])",
    "S(L0,L1,--4,8,comps=[c])",
    "T2(L0,L1,-4,8,comps=[c])",
    "T2(L0,L1,4,-8,comps=[c])",
    "U(L0,-2,comps=[c])",
    "T3(L0,L1,L2,4,4,-4,comps=[c])",
    "T3(L0,L1,4,4,4,comps=[c])",
    "I(L0,comps=[c])",
    "P(L0,L1,comps=[c])",
    "F(L0,1,comps=[c])",
    "X(L0,comps=[c])",
    "T4(L0,L1,4,4,comps=[c])",
    "S2(L0,L1,4,8,comps=[c])",
    "SI(L0,comps=[c])",
    "T(L0,comps=[c])",
    "r(L0,comps=[c])",
    "(L0,comps=[c])",
    "0R(L0,comps=[c])",
    "\u015a(L0,comps=[c])",
    "comps=['c']",
    "S",
    "R(L0,comps=[c]);R(L0,comps=[c])",
    "D(L1,comps=[a])",
    "D(L1,comps=[a],distribution=[a])",
    "D(L1,comps=[a],distribution=[[]])",
    "E(comps=[])",
    "M([1,0,0],comps=[c])",
    "M([],comps=[c])",
    "M([1,0,0,+1],comps=[c])",
    "TG(L0,L1,32,comps=[c])",
    "TG(L0,-32,comps=[c])",
    "TG2(L0,4,comps=[c])",
]


@pytest.mark.parametrize("sched", VALID_SCHEDULES)
def test_validate_accepts(sched):
    ok, reason = validate_schedule(sched)
    assert (ok, reason) == (True, "")
    assert oracle_validate_schedule(sched) == (True, "")  # oracle self-check


@pytest.mark.parametrize("sched", INVALID_SCHEDULES)
def test_validate_rejects(sched):
    ok, reason = validate_schedule(sched)
    assert ok is False
    assert isinstance(reason, str) and reason
    assert oracle_validate_schedule(sched)[0] is False  # oracle self-check


def test_validate_returns_tuple_of_bool_and_str():
    res = validate_schedule("R(L0,comps=[c])")
    assert isinstance(res, tuple) and len(res) == 2
    assert res[0] is True and res[1] == ""
    res = validate_schedule("R(L0)")
    assert isinstance(res, tuple) and res[0] is False and isinstance(res[1], str)


@pytest.mark.parametrize(
    "sched, reason",
    [
        ("|", "Empty segment in schedule (leading, trailing, or double '|')."),
        ("R(L0,comps=[c])|", "Empty segment in schedule (leading, trailing, or double '|')."),
        ("|R(L0,comps=[c])", "Empty segment in schedule (leading, trailing, or double '|')."),
        (
            "R(L0,comps=[c])||R(L0,comps=[c])",
            "Empty segment in schedule (leading, trailing, or double '|').",
        ),
        (
            "(L0,comps=[c])",
            "Unrecognized token (does not start with a transformation name): '(L0,comps=[c])'",
        ),
        (
            "r(L0,comps=[c])",
            "Unrecognized token (does not start with a transformation name): 'r(L0,comps=[c])'",
        ),
        ("X(L0,comps=[c])", "Unknown transformation: 'X' in 'X(L0,comps=[c])'"),
        ("T4(L0,L1,4,4,comps=[c])", "Unknown transformation: 'T4' in 'T4(L0,L1,4,4,comps=[c])'"),
        ("SI(L0,comps=[c])", "Unknown transformation: 'SI' in 'SI(L0,comps=[c])'"),
        ("S(L0,L1,4,8)", "Malformed S transformation: 'S(L0,L1,4,8)'"),
        ("I(L0,comps=[c])", "Malformed I transformation: 'I(L0,comps=[c])'"),
        ("R(L0)", "Malformed R transformation: 'R(L0)'"),
        ("P(L0,L1,comps=[c])", "Malformed P transformation: 'P(L0,L1,comps=[c])'"),
        ("T2(L0,L1,-4,8,comps=[c])", "Malformed T2 transformation: 'T2(L0,L1,-4,8,comps=[c])'"),
        ("T3(L0,L1,4,4,4,comps=[c])", "Malformed T3 transformation: 'T3(L0,L1,4,4,4,comps=[c])'"),
        ("U(L0,-2,comps=[c])", "Malformed U transformation: 'U(L0,-2,comps=[c])'"),
        ("F(L0,1,comps=[c])", "Malformed F transformation: 'F(L0,1,comps=[c])'"),
        ("D(L1,comps=[a])", "Malformed D transformation: 'D(L1,comps=[a])'"),
        ("TG(L0,L1,32,comps=[c])", "Malformed TG transformation: 'TG(L0,L1,32,comps=[c])'"),
        # a well-formed M whose entries are no square matrix says so
        (
            "M([1,0,0],comps=[c])",
            "Malformed M transformation: 'M([1,0,0],comps=[c])' (3 entries do not make a square matrix)",
        ),
        ("S", "Malformed S transformation: 'S'"),
        # whitespace is removed before the segment is quoted in the reason
        ("R( L0 )", "Malformed R transformation: 'R(L0)'"),
        # the first bad segment is the one reported
        (
            "R(L0,comps=[c])|X(L0)|R(L0)",
            "Unknown transformation: 'X' in 'X(L0)'",
        ),
        (
            "R(L0)|X(L0)",
            "Malformed R transformation: 'R(L0)'",
        ),
    ],
)
def test_validate_reason_messages(sched, reason):
    assert validate_schedule(sched) == (False, reason)
    assert oracle_validate_schedule(sched) == (False, reason)  # oracle self-check


@pytest.mark.parametrize(
    "sched, prefix",
    [
        ("X(L0,comps=['c'])", "Unknown transformation: 'X' in "),
        ("R(L0,comps=['c'],)", "Malformed R transformation: "),
        ("r(L0,comps=['c'])", "Unrecognized token (does not start with a transformation name): "),
    ],
)
def test_validate_reason_prefix_with_quotes(sched, prefix):
    ok, reason = validate_schedule(sched)
    assert ok is False
    assert reason.startswith(prefix)


def test_validate_reason_quotes_like_python_repr():
    # The original formats the segment with Python's repr(): a segment that
    # contains single quotes (but no double quotes) is shown in double quotes.
    seg = "R(L0,comps=['c'],)"
    assert validate_schedule(seg) == (False, f"Malformed R transformation: {seg!r}")
    seg2 = "X(L0,comps=[\"c\"])"
    assert validate_schedule(seg2) == (False, f"Unknown transformation: 'X' in {seg2!r}")


def test_negative_tiling_factors_only_for_S():
    assert validate_schedule("S(L0,L1,-1,-32,comps=[c])") == (True, "")
    assert validate_schedule("T2(L0,L1,-1,32,comps=[c])")[0] is False
    assert validate_schedule("T3(L0,L1,L2,-1,2,3,comps=[c])")[0] is False
    assert validate_schedule("U(L0,-4,comps=[c])")[0] is False


def test_empty_comps_valid_only_after_normalization():
    raw = "R(L0,comps=[])"
    assert validate_schedule(raw)[0] is False
    norm = normalize_schedule(raw)
    assert norm == "R(L0,comps=[''])"
    assert validate_schedule(norm) == (True, "")


@pytest.mark.parametrize("bad", [5, b"R(L0,comps=[a])", ["R(L0,comps=[a])"]])
def test_validate_schedule_type_error(bad):
    with pytest.raises(TypeError):
        validate_schedule(bad)


# ---------------------------------------------------------------------------
# normalize_program / make_program_hash
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, expected",
    [
        ("", ""),
        ("   \n\t", ""),
        ("int a = 1;\n", "inta=1;"),
        ("/* x\n y */int a;", "inta;"),
        ("a/* 1 */b/* 2 */c", "abc"),  # shortest match
        ("a/* 1 /* 2 */b */c", "ab*/c"),  # no nesting
        ("a /* unterminated", "a/*unterminated"),
        ("a // comment\nb", "ab"),
        ("a // comment\r\nb", "ab"),  # \r is whitespace, removed at the end
        ("a//c1\nb//c2", "ab"),
        ("#include <stdio.h>\nint main(){}", "intmain(){}"),
        ('#include "foo.h"\nint x;', "intx;"),
        ('  #  include   "foo.h"  \nint x;', "intx;"),
        ("\t#include<tiramisu/tiramisu.h>\nint x;", "intx;"),
        ("#include <a.h>\r\nint x;\r\n", "intx;"),
        ("int x; #include <a.h>\n", "intx;#include<a.h>"),  # not at line start
        ("#include <a.h> int x;\n", "#include<a.h>intx;"),  # trailing text
        ("#include foo.h\n", "#includefoo.h"),  # no brackets
        ("#define N 10\n", "#defineN10"),
        ("#   include <a.h>\n#include \"b.h\"\nint y;", "inty;"),
        ("// /* \n x */ y", ""),  # block comment removed first, then //
        ("x /* // */ y", "xy"),
        ('char *u = "http://x";', 'char*u="http:'),  # // inside a string too
        ("\u3000int\u00a0x;\u0085", "intx;"),
        ("int\u200bx;", "int\u200bx;"),  # zero-width space is not whitespace
        ("\u3000#include <a.h>\nint x;", "intx;"),  # unicode ws before '#'
        ("void f() { /* café */ return; } // ü", "voidf(){return;}"),
        ("int 日本 = 1;", "int日本=1;"),
    ],
)
def test_normalize_program_cases(src, expected):
    assert normalize_program(src) == expected
    assert oracle_normalize_program(src) == expected  # oracle self-check


@pytest.mark.parametrize("ws", PY_WHITESPACE, ids=lambda c: f"U+{ord(c):04X}")
def test_normalize_program_removes_every_python_whitespace(ws):
    assert normalize_program(f"int{ws}x{ws}={ws}1;{ws}") == "intx=1;"


def test_normalize_program_include_spanning_lines_like_python_re():
    # [^>"]* may run across newlines in the original's regex
    src = '#include "a\nint x;\n"\nint y;'
    assert normalize_program(src) == oracle_normalize_program(src) == "inty;"


def test_make_program_hash_known_values():
    assert make_program_hash("") == hashlib.sha256(b"").hexdigest()
    assert make_program_hash("int x;") == hashlib.sha256(b"intx;").hexdigest()
    assert make_program_hash("int 日本;") == hashlib.sha256("int日本;".encode("utf-8")).hexdigest()


def test_make_program_hash_is_lowercase_hex():
    h = make_program_hash(SRC := "void f(){}")
    assert len(h) == 64 and h == h.lower() and all(c in "0123456789abcdef" for c in h)
    assert h == oracle_program_hash(SRC)


def test_make_program_hash_cosmetic_variants_equal():
    a = "#include <x.h>\nvoid blur() { int x = 1; }\n"
    b = "/* header */\n#include \"y.h\"\nvoid   blur(){\n  int x=1; // set\n}"
    assert make_program_hash(a) == make_program_hash(b)
    assert make_program_hash(a) != make_program_hash("void blur() { int x = 2; }")


def test_make_program_hash_non_ascii_and_astral():
    src = "// коммент\nvoid f() { puts(\"😀 café\"); }\u3000"
    assert make_program_hash(src) == oracle_program_hash(src)


@pytest.mark.parametrize("bad", [5, b"int x;", ["int x;"]])
def test_program_functions_type_error(bad):
    with pytest.raises(TypeError):
        normalize_program(bad)
    with pytest.raises(TypeError):
        make_program_hash(bad)


# ---------------------------------------------------------------------------
# Differential test against the oracles on a seeded corpus
# ---------------------------------------------------------------------------

_FRAGMENTS = [
    "S", "I", "R", "P", "T2", "T3", "U", "F", "X", "T", "s", "(", ")", ",", "|",
    "D", "E", "M", "TG", "[", "[1,0,0,1]", "distribution=[", "['c1']", "-1",
    "L0", "L1", "L12", "L\u0661", "L\u00b2", "L", "4", "-4", "32", "\u0663", "-",
    "comps=[", "]", "comps=[]", "'c1'", '"c2"', "c3", "_x", "\u00e9", "a\u00bd",
    "'a,b'", "'", '"', " ", "\u3000", "\u00a0", "\u0085", "\u200b", "\t", "\n",
    "comps=['c1'])", "comps=[c,'d'])",
]

_GOOD = [
    "S(L0,L1,4,8,comps=['c1'])", "S(L0,L1,-4,8,comps=[c1])", "I(L0,L1,comps=[a])",
    "R(L0,comps=['c1'])", "P(L1,comps=[\"x\"])", "T2(L0,L1,32,32,comps=[c])",
    "T3(L0,L1,L2,4,4,4,comps=[c])", "U(L1,8,comps=[c])", "F(L0,comps=[c1,c2])",
    "D(L0,comps=[c1],distribution=[['c1'], ['c2', \"c3\"]])", "E(comps=['c1'])",
    "M([1, 0, -1, 1],comps=['c1'])", "TG(L0,L1,L2,8,16,32,comps=['c1', 'c2'])",
]


def _corpus(n: int = 3000) -> list[str]:
    rng = random.Random(20260221)
    out = list(_GOOD)
    for _ in range(n):
        kind = rng.random()
        if kind < 0.4:
            # mutate a good schedule
            s = rng.choice(_GOOD)
            pos = rng.randrange(len(s) + 1)
            op = rng.random()
            if op < 0.4:
                s = s[:pos] + rng.choice(_FRAGMENTS) + s[pos:]
            elif op < 0.7 and len(s) > 1:
                s = s[:pos] + s[pos + 1:]
            else:
                s = s + "|" + rng.choice(_GOOD)
        elif kind < 0.6:
            s = "|".join(rng.choice(_GOOD) for _ in range(rng.randint(1, 4)))
            s = "".join(ch + (rng.choice([" ", "\u3000", "\t", ""]) if rng.random() < 0.2 else "") for ch in s)
        else:
            s = "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(1, 12)))
        out.append(s)
    return out


def test_differential_validate_and_normalize_schedule():
    mismatches = []
    for s in _corpus():
        got_n = normalize_schedule(s)
        exp_n = oracle_normalize_schedule(s)
        if got_n != exp_n:
            mismatches.append(("normalize", s, exp_n, got_n))
        got_v = validate_schedule(s)
        exp_v = oracle_validate_schedule(s)
        if tuple(got_v) != exp_v:
            mismatches.append(("validate", s, exp_v, got_v))
        got_vn = validate_schedule(exp_n)
        exp_vn = oracle_validate_schedule(exp_n)
        if tuple(got_vn) != exp_vn:
            mismatches.append(("validate(normalized)", exp_n, exp_vn, got_vn))
    assert not mismatches, "first mismatches: " + repr(mismatches[:10])


def test_differential_normalize_program():
    rng = random.Random(42)
    pieces = [
        "int", " ", "x", ";", "\n", "\r\n", "/*", "*/", "//", "#include", "#", "include",
        "<a.h>", '"b.h"', "<", ">", '"', "\t", "\u3000", "\u00a0", "é", "😀", "{", "}",
        "  #  include <c.h>  \n",
    ]
    mismatches = []
    for _ in range(2000):
        src = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        if normalize_program(src) != oracle_normalize_program(src):
            mismatches.append((src, oracle_normalize_program(src), normalize_program(src)))
        elif make_program_hash(src) != oracle_program_hash(src):
            mismatches.append(("hash", src))
    assert not mismatches, "first mismatches: " + repr(mismatches[:10])


def test_all_code_points_whitespace_in_one_call():
    every = "".join(chr(c) for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF)
    assert normalize_schedule(every) == oracle_normalize_schedule(every)
    # no "//", "/*" or "#include" occurs in this text: only whitespace goes
    assert normalize_program(every) == "".join(ch for ch in every if not ch.isspace())


def _class_edges() -> list[int]:
    """Every code point where str.isdecimal(), the identifier tail class
    (isalnum or "_") or str.isspace() changes, with its neighbours, and
    every 61st code point: the classes' edges, where a wrong table would
    show."""
    def key(c: str) -> tuple:
        return (c.isdecimal(), c.isalnum() or c == "_", c.isspace())

    out, prev = set(range(1, 0x80)), key(chr(0))
    for cp in range(1, 0x110000):
        k = key(chr(cp))
        if k != prev:
            out.update((cp - 1, cp, cp + 1))
        prev = k
    out.update(range(1, 0x110000, 61))
    return sorted(cp for cp in out if 0 < cp < 0x110000)


@pytest.mark.parametrize("points", [pytest.param("edges"), pytest.param("all", marks=pytest.mark.soak)])
def test_all_code_points_digit_and_word_classes(points):
    """Every code point (in the fast tier: the classes' edges and a stride)
    as a loop-level digit, identifier tail and head."""
    bad = []
    for cp in (_class_edges() if points == "edges" else range(1, 0x110000)):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        for s in (f"R(L{ch},comps=[c])", f"R(L0,comps=[a{ch}])", f"R(L0,comps=[{ch}])",
                  f"T2(L0,L1,{ch},4,comps=[c])"):
            if tuple(validate_schedule(s)) != oracle_validate_schedule(s):
                bad.append((hex(cp), s))
                break
        if len(bad) > 20:
            break
    assert not bad, bad
