"""The reference of the schedule, program and key rules: the one oracle the
tests judge the engine by (core/schedule's differential and fuzz tests,
core/keys' differential test, tests/python through conftest.py and the
torture run's plan, tests/multinode/plan.py).

Written from docs/COMPAT.md, with Python's own `re` on str patterns, whose
\\s, \\d and \\w are exactly the original's (str.isspace(),
str.isdecimal(), "_" or str.isalnum()), as are its backtracking, ^ and $.
It never calls the library under test.

Run as a program it answers requests, one JSON object per line on stdin,
one JSON line on stdout each:
  {"schedules": [...], "programs": [...]}  ->  {"norm": [...], "valid":
      [[ok, reason], ...], "normvalid": [...], "prog": [...], "idem": [...]}
where idem lists the schedules whose normalization is not idempotent.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys

_COMPS_BLOCK = re.compile(r"comps=\[([^\]]*)\]")
_Q = r"""(?:'[^']*'|"[^"]*")"""
_CN = r"(?:" + _Q + r"|[A-Za-z_]\w*)"
_COMPS = r"comps=\[" + _CN + r"(?:," + _CN + r")*\]"
_LX, _INT, _SINT = r"L\d+", r"\d+", r"-?\d+"
# Each transformation's arguments, in order: the original's grammar.
GRAMMAR = {
    "S": [_LX, _LX, _SINT, _SINT, _COMPS],
    "I": [_LX, _LX, _COMPS],
    "R": [_LX, _COMPS],
    "P": [_LX, _COMPS],
    "T2": [_LX, _LX, _INT, _INT, _COMPS],
    "T3": [_LX, _LX, _LX, _INT, _INT, _INT, _COMPS],
    "U": [_LX, _INT, _COMPS],
    "F": [_LX, _COMPS],
}
# The other actions TiraLib prints, which this library accepts and the
# original rejects as unknown. Group 1 of M is its entries (a perfect square
# of them); groups 1 and 2 of TG its loop levels and its tile sizes (as many
# of each).
_GROUP = r"\[" + _CN + r"(?:," + _CN + r")*\]"
GRAMMAR_TIRALIB = {
    "D": [_LX, _COMPS, r"distribution=\[" + _GROUP + r"(?:," + _GROUP + r")*\]"],
    "E": [_COMPS],
    "M": [r"\[(" + _SINT + r"(?:," + _SINT + r")*)\]", _COMPS],
    "TG": [r"(" + _LX + r"(?:," + _LX + r")*)", r"(" + _INT + r"(?:," + _INT + r")*)", _COMPS],
}
_PATTERNS = {k: re.compile(k + r"\(" + ",".join(v) + r"\)") for k, v in {**GRAMMAR, **GRAMMAR_TIRALIB}.items()}
_NAME = re.compile(r"[A-Z][A-Z0-9]*")


def strip_ws(s: str) -> str:
    """s without every character for which str.isspace() is true."""
    return re.sub(r"\s+", "", s)


def normalize_schedule(s: str) -> str:
    if not s:
        return ""
    s = strip_ws(s)

    def fix(m: re.Match) -> str:
        items = m.group(1).split(",")
        return "comps=[" + ",".join("'" + it.strip("'\"") + "'" for it in items) + "]"

    return _COMPS_BLOCK.sub(fix, s)


def validate_schedule(s: str) -> tuple[bool, str]:
    if not s:
        return True, ""
    for seg in strip_ws(s).split("|"):
        if not seg:
            return False, "Empty segment in schedule (leading, trailing, or double '|')."
        m = _NAME.match(seg)
        if not m:
            return False, f"Unrecognized token (does not start with a transformation name): {seg!r}"
        name = m.group(0)
        rule = _PATTERNS.get(name)
        if rule is None:
            return False, f"Unknown transformation: {name!r} in {seg!r}"
        m = rule.fullmatch(seg)
        if not m or (name == "TG" and m.group(1).count(",") != m.group(2).count(",")):
            return False, f"Malformed {name} transformation: {seg!r}"
        if name == "M":
            n = m.group(1).count(",") + 1
            if math.isqrt(n) ** 2 != n:
                return False, f"Malformed M transformation: {seg!r} ({n} entries do not make a square matrix)"
    return True, ""


def normalize_program(src: str) -> str:
    if not src:
        return ""
    text = re.sub(r"/\*.*?\*/", "", src, flags=re.DOTALL)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'^\s*#\s*include\s*[<"][^>"]*[>"]\s*$', "", text, flags=re.MULTILINE)
    return strip_ws(text)


def program_hash(src: str) -> str:
    """The SHA-256 of the normalized program, as the program_hash column."""
    return hashlib.sha256(normalize_program(src).encode("utf-8")).hexdigest()


def canonical_json(obj) -> str:
    """The original's canonical JSON: sorted keys, no spaces, ASCII only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def record_key_for_hash(ph: str, schedule: str) -> str:
    """The record key of a program hash and a schedule."""
    doc = {"program_hash": ph, "tiralib_schedule_string": normalize_schedule(schedule)}
    return hashlib.sha256(canonical_json(doc).encode("utf-8")).hexdigest()


def record_key(src: str, schedule: str) -> str:
    """The record key of a program's source and a schedule."""
    return record_key_for_hash(program_hash(src), schedule)


def answer(req: dict) -> dict:
    out: dict = {"norm": [], "valid": [], "normvalid": [], "prog": [], "idem": []}
    for s in req.get("schedules", []):
        n = normalize_schedule(s)
        out["norm"].append(n)
        out["valid"].append(list(validate_schedule(s)))
        out["normvalid"].append(list(validate_schedule(n)))
        if normalize_schedule(n) != n:
            out["idem"].append(s)
    for p in req.get("programs", []):
        out["prog"].append(normalize_program(p))
    return out


if __name__ == "__main__":
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(answer(json.loads(line))) + "\n")
            sys.stdout.flush()
