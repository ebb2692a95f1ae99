"""The schedules TiraLib prints: D, E, M and TG besides the original's eight
(COMPAT.md, "Schedule normalization and validation").

core/schedule/testdata/tiralib_schedules.txt holds strings printed by
TiraLib's own action classes (its header says how they were made): each must
validate as printed and normalized, normalize idempotently, agree with the
reference, and be recordable under the key the original computes. Where
TiraLib itself is importable, its actions are built here and checked the
same way.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import (
    SRC_BLUR,
    expected_key,
    oracle_normalize_schedule,
    oracle_validate_schedule,
    raw_records,
)

from tirastore import normalize_schedule, validate_schedule

TIRALIB_FILE = Path(__file__).resolve().parents[2] / "core/schedule/testdata/tiralib_schedules.txt"
SCHEDULES = [
    line for line in TIRALIB_FILE.read_text(encoding="utf-8").splitlines()
    if line and not line.startswith("#")
]
ACTIONS = {"S", "I", "R", "P", "T2", "T3", "U", "F", "D", "E", "M", "TG"}


def _names(schedule: str) -> list[str]:
    return [re.match(r"[A-Z][A-Z0-9]*", seg).group(0) for seg in schedule.split("|")]


def _problems(schedule: str) -> list[str]:
    """What is wrong with one TiraLib schedule, through the public API."""
    out = []
    norm = normalize_schedule(schedule)
    if validate_schedule(schedule) != (True, ""):
        out.append(f"rejected as printed: {validate_schedule(schedule)}")
    if validate_schedule(norm) != (True, ""):
        out.append(f"rejected normalized: {validate_schedule(norm)}")
    if normalize_schedule(norm) != norm:
        out.append("normalization not idempotent")
    if norm != oracle_normalize_schedule(schedule):
        out.append(f"normalized {norm!r}, reference {oracle_normalize_schedule(schedule)!r}")
    if oracle_validate_schedule(schedule) != (True, "") or oracle_validate_schedule(norm) != (True, ""):
        out.append("the reference rejects it")
    return out


def test_file_has_every_action():
    seen = {name for s in SCHEDULES for name in _names(s)}
    assert seen == ACTIONS
    assert any("|" in s for s in SCHEDULES)


def test_tiralib_schedules_validate():
    bad = [(s, p) for s in SCHEDULES if (p := _problems(s))]
    assert not bad, f"{len(bad)} of {len(SCHEDULES)}; first: {bad[:5]}"


def _samples() -> list[str]:
    """The first schedule of each action alone, and the longest schedule of
    several."""
    out = {}
    for s in SCHEDULES:
        names = _names(s)
        if len(names) == 1:
            out.setdefault(names[0], s)
    return list(out.values()) + [max((s for s in SCHEDULES if "|" in s), key=len)]


@pytest.mark.parametrize("sched", _samples(), ids=lambda s: s.split("(")[0] + ("+" if "|" in s else ""))
def test_record_and_lookup(store, db_path, sched):
    """Recorded under the original's key (an old worker finds it), stored
    normalized, found by its printed and its normalized spelling."""
    norm = normalize_schedule(sched)
    assert store.record("tiralib", SRC_BLUR, sched, True, [0.5, 0.25]) is True
    for spelling in (sched, norm):
        r = store.lookup("tiralib", SRC_BLUR, spelling)
        assert r is not None and r.schedule == norm and r.execution_times == [0.5, 0.25]
    row = raw_records(db_path)[expected_key(SRC_BLUR, sched)]
    assert row["schedule"] == norm


@pytest.mark.parametrize(
    "sched, reason",
    [
        ("D(L1,comps=[a],distribution=[])", "Malformed D transformation: 'D(L1,comps=[a],distribution=[])'"),
        ("E(L0,comps=[a])", "Malformed E transformation: 'E(L0,comps=[a])'"),
        (
            "M([1,0,0],comps=[c])",
            "Malformed M transformation: 'M([1,0,0],comps=[c])' (3 entries do not make a square matrix)",
        ),
        ("M([1,0,0,+1],comps=[c])", "Malformed M transformation: 'M([1,0,0,+1],comps=[c])'"),
        ("TG(L0,L1,32,comps=[c])", "Malformed TG transformation: 'TG(L0,L1,32,comps=[c])'"),
        ("TG2(L0,4,comps=[c])", "Unknown transformation: 'TG2' in 'TG2(L0,4,comps=[c])'"),
    ],
)
def test_malformed_tiralib_actions(store, sched, reason):
    assert validate_schedule(sched) == (False, reason)
    assert oracle_validate_schedule(sched) == (False, reason)
    with pytest.raises(ValueError) as ei:
        store.record("tiralib", SRC_BLUR, sched, False, None)
    # record validates the normalized form, which quotes the comp names
    assert str(ei.value) == "Invalid schedule string: " + validate_schedule(normalize_schedule(sched))[1]
    assert store.count() == 0


# ---------------------------------------------------------------------------
# Live: TiraLib's own classes, when it is importable
# ---------------------------------------------------------------------------

# gramschmidt's loop nest (TiraLib's examples) as the ISL AST text its
# TiramisuTree.from_isl_ast_string_list reads, so that no Tiramisu build is
# needed.
_GRAMSCHMIDT = """0|iterator|k|0|k <= 29|1
1|computation|nrm_init
1|iterator|i|0|i <= 19|1
2|computation|nrm_comp
1|computation|R_diag
1|iterator|i|0|i <= 19|1
2|computation|Q_out
1|iterator|j|k + 1|j <= 29|1
2|computation|R_up_init
2|iterator|i|0|i <= 19|1
3|computation|R_up
2|iterator|i|0|i <= 19|1
3|computation|A_out"""


@pytest.fixture
def tiralib(monkeypatch):
    """TiraLib's Schedule, a program of the gramschmidt loop nest, and one
    maker per kind of action (a new action each call)."""
    tt = pytest.importorskip("tiralib.tiramisu")
    ta = tt.tiramisu_actions
    # After a fusion, distribution or tiling, Schedule asks a Tiramisu
    # build for the new loop nest; the tree is kept as it is instead, which
    # changes nothing in how an action prints.
    monkeypatch.setattr(tt.Schedule, "update_tree_from_isl_ast", lambda self: None)
    prog = tt.TiramisuProgram()
    prog.tree = tt.TiramisuTree.from_isl_ast_string_list(_GRAMSCHMIDT.split("\n"))
    makers = [
        lambda: ta.Parallelization([("nrm_init", 0)]),
        lambda: ta.Reversal([("nrm_comp", 1)]),
        lambda: ta.Interchange([("R_up", 1), ("R_up", 2)]),
        lambda: ta.Skewing([("R_up", 1), ("R_up", 2), 1, -1]),
        lambda: ta.Tiling2D([("R_up", 1), ("R_up", 2), 32, 8]),
        lambda: ta.Tiling3D([("R_up", 0), ("R_up", 1), ("R_up", 2), 4, 4, 4]),
        lambda: ta.TilingGeneral([("R_up_init", 1), ("R_up", 2), 10, 5]),
        lambda: ta.Unrolling([("R_up", 2), 4]),
        lambda: ta.Fusion([("nrm_comp", 1), ("Q_out", 1)]),
        lambda: ta.Distribution([("R_up_init", 1)]),
        lambda: ta.Distribution(
            [("nrm_init", 0)], [["nrm_init", "R_diag"], [("nrm_comp", 1)], [("Q_out", 1)], [("R_up_init", 1)]]
        ),
        lambda: ta.Expansion(["nrm_comp"]),
        lambda: ta.MatrixTransform([1, 0, 0, 0, 0, 1, 0, 1, 0], ["R_up"]),
        lambda: ta.MatrixTransform([-1], ["nrm_init"]),
    ]
    return tt.Schedule, prog, makers


def test_live_tiralib_actions(tiralib):
    Schedule, prog, makers = tiralib
    printed = []
    for make in makers:
        sched = Schedule(prog)
        sched.add_optimizations([make()])
        printed.append(str(sched))
    whole = Schedule(prog)
    whole.add_optimizations([make() for make in makers])
    printed.append(str(whole))
    assert "|".join(printed[:-1]) == printed[-1]
    assert set(_names(printed[-1])) == ACTIONS
    bad = [(s, p) for s in printed if (p := _problems(s))]
    assert not bad


def test_live_tiralib_reads_normalized_schedules(tiralib):
    """TiraLib's own Schedule.from_sched_str reads a normalized schedule as
    it reads the printed one (errors included: its parser does not know
    every action, and rebuilds some on other computations than it printed)."""
    Schedule, prog, makers = tiralib

    def parsed(s: str):
        try:
            return [str(a) for a in Schedule.from_sched_str(s, prog).optims_list]
        except Exception as e:  # TiraLib's own limits, the same both ways
            return type(e).__name__

    for make in makers:
        sched = Schedule(prog)
        sched.add_optimizations([make()])
        s = str(sched)
        assert parsed(normalize_schedule(s)) == parsed(s), s
        if s[0] in "DE":
            assert parsed(s) == [s]
