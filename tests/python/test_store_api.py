"""Every public TiraStore method, its return types and its error paths."""

from __future__ import annotations

import dataclasses
import getpass
import math
import os
import socket
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conftest import (
    ON_PG,
    RECORD_COLUMNS,
    ISO_UTC_RE,
    SCHED_I,
    SCHED_R,
    SCHED_S,
    SRC_BLUR,
    TEST_CPU,
    TEST_PROJECT,
    TEST_SLURM,
    expected_key,
    expected_result_json,
    leftover_lock_files,
    oracle_normalize_schedule,
    oracle_program_hash,
    raw_programs,
    raw_records,
    remove_programs,
    sqlite_only,
)

from tirastore import LookupResult, TiraStore

GET_KEYS = {*RECORD_COLUMNS, "program_name", "source_code"}
RESULT_FIELDS = [
    "is_legal",
    "execution_times",
    "schedule",
    "hostname",
    "username",
    "creation_date",
    "update_date",
    "source_project",
]


def _parse_iso(s: str) -> datetime:
    assert ISO_UTC_RE.match(s), s
    return datetime.fromisoformat(s)


# ---------------------------------------------------------------------------
# construction, attributes, repr, close
# ---------------------------------------------------------------------------


def test_constructor_attributes(store, db_path):
    if ON_PG:  # a server's database: its URL (without a password), a str
        assert store.db_path == db_path
        assert isinstance(store.db_path, str)
    else:
        assert isinstance(store.db_path, Path)
        assert store.db_path == db_path.resolve()
    assert store.source_project == TEST_PROJECT
    assert store.allow_cpu_mismatch is False
    assert store.writes_allowed is True
    assert store.cpu_model == TEST_CPU
    assert store.slurm_cpus == TEST_SLURM
    assert ON_PG or db_path.exists()


def test_constructor_defaults(tmp_path):
    s = TiraStore(tmp_path / "d.db", cpu_model=TEST_CPU, slurm_cpus="2")
    try:
        assert s.source_project == ""
        assert s.allow_cpu_mismatch is False
        assert s.writes_allowed is True
    finally:
        s.close()


def test_db_path_accepts_str_and_resolves_relative(tmp_path, monkeypatch, make_store):
    monkeypatch.chdir(tmp_path)
    s = make_store("rel.db")
    assert s.db_path == (tmp_path / "rel.db").resolve()
    assert s.db_path.is_absolute()
    assert (tmp_path / "rel.db").exists()


def test_db_path_resolves_symlinks(tmp_path, make_store):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    s = make_store(link / "c.db")
    assert s.db_path == (real / "c.db").resolve()
    assert (real / "c.db").exists()


def test_repr(store, db_path):
    r = repr(store)
    assert "TiraStore" in r
    assert (db_path if ON_PG else str(db_path.resolve())) in r
    assert TEST_PROJECT in r
    assert "writes_allowed" in r and "True" in r


def test_close_then_use_raises(store, tmp_path):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    store.close()
    for call in (
        lambda: store.lookup("blur", SRC_BLUR, SCHED_R),
        lambda: store.record("blur", SRC_BLUR, SCHED_S, True, [1.0]),
        lambda: store.record_many("blur", SRC_BLUR, []),
        lambda: store.contains("blur", SRC_BLUR, SCHED_R),
        lambda: store.count(),
        lambda: store.program_count(),
        lambda: store.stats(),
        lambda: store.keys(),
        lambda: store.get("0" * 64),
        lambda: store.delete("0" * 64),
        lambda: store.get_program_source("blur"),
        lambda: store.get_program_records("blur", SRC_BLUR),
        lambda: store.export(tmp_path / "x.json"),
        lambda: store.backup(),
    ):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_close_is_idempotent(store):
    store.close()
    store.close()
    assert store.closed


def test_context_manager(db_path):
    with TiraStore(db_path, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM) as s:
        assert isinstance(s, TiraStore)
        assert s.record("blur", SRC_BLUR, SCHED_R, True, [0.5]) is True
    with pytest.raises(ValueError, match="closed"):
        s.count()
    with TiraStore(db_path, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM) as s2:
        assert s2.count() == 1


def test_context_manager_does_not_swallow_exceptions(db_path):
    with pytest.raises(KeyError):
        with TiraStore(db_path, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM):
            raise KeyError("boom")


def test_two_stores_on_same_file_see_each_other(make_store, db_path):
    a = make_store(db_path)
    b = make_store(db_path)
    a.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    assert b.contains("blur", SRC_BLUR, SCHED_R)
    assert b.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [1.0]


# ---------------------------------------------------------------------------
# LookupResult
# ---------------------------------------------------------------------------


def test_lookup_result_dataclass_fields():
    # The original's fields, in its order, then whether the times meet the
    # noise policy and whether the result is censored (with defaults:
    # LookupResult(**to_dict()) still works).
    assert dataclasses.is_dataclass(LookupResult)
    assert [f.name for f in dataclasses.fields(LookupResult)] == RESULT_FIELDS + ["stable", "censored"]
    made = LookupResult(**{f: None for f in RESULT_FIELDS})
    assert made.stable is None and made.censored is None


def test_lookup_result_to_dict(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [0.042, 0.039, 0.041])
    r = store.lookup("blur", SRC_BLUR, SCHED_S)
    assert isinstance(r, LookupResult)
    d = r.to_dict()
    assert isinstance(d, dict)
    assert list(d.keys()) == RESULT_FIELDS
    for f in RESULT_FIELDS:
        assert d[f] == getattr(r, f)


def test_lookup_result_constructible():
    r = LookupResult(True, [1.0], "R(L0,comps=['c'])", "h", "u", "c", "u2", "p")
    assert r.to_dict()["hostname"] == "h"


# ---------------------------------------------------------------------------
# record / lookup / contains
# ---------------------------------------------------------------------------


def test_record_and_lookup_roundtrip(store):
    before = datetime.now(timezone.utc)
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [0.042, 0.039, 0.041]) is True
    after = datetime.now(timezone.utc)
    r = store.lookup("blur", SRC_BLUR, SCHED_S)
    assert r.is_legal is True
    assert r.execution_times == [0.042, 0.039, 0.041]
    assert isinstance(r.execution_times, list)
    assert r.schedule == SCHED_S
    assert r.hostname == socket.gethostname()
    assert r.username == getpass.getuser()
    assert r.source_project == TEST_PROJECT
    c = _parse_iso(r.creation_date)
    assert before - timedelta(seconds=2) <= c <= after + timedelta(seconds=2)
    assert r.update_date == r.creation_date


def test_lookup_missing_returns_none(store):
    assert store.lookup("blur", SRC_BLUR, SCHED_S) is None
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    assert store.lookup("blur", SRC_BLUR, SCHED_I) is None
    assert store.lookup("blur", "void other() {}", SCHED_S) is None


def test_lookup_invalid_schedule_is_just_a_miss(store):
    # the original validates only on write
    assert store.lookup("blur", SRC_BLUR, "not a schedule") is None
    assert store.contains("blur", SRC_BLUR, "X(L0)") is False


def test_record_illegal_without_times(store):
    assert store.record("blur", SRC_BLUR, SCHED_I, False, None) is True
    r = store.lookup("blur", SRC_BLUR, SCHED_I)
    assert r.is_legal is False
    assert r.execution_times is None


def test_record_illegal_default_times(store):
    assert store.record("blur", SRC_BLUR, SCHED_I, False) is True
    assert store.lookup("blur", SRC_BLUR, SCHED_I).execution_times is None


def test_record_illegal_with_empty_list_and_with_times(store):
    assert store.record("blur", SRC_BLUR, SCHED_I, False, []) is True
    assert store.lookup("blur", SRC_BLUR, SCHED_I).execution_times == []
    assert store.record("blur", SRC_BLUR, SCHED_R, False, [0.5]) is True
    assert store.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [0.5]


def test_record_keyword_arguments(store):
    assert (
        store.record(
            program_name="blur",
            program_source_code=SRC_BLUR,
            tiralib_schedule_string=SCHED_S,
            is_legal=True,
            execution_times=[0.04],
            overwrite=False,
        )
        is True
    )
    assert store.lookup(
        program_name="blur", program_source_code=SRC_BLUR, tiralib_schedule_string=SCHED_S
    ).execution_times == [0.04]
    assert store.contains(
        program_name="blur", program_source_code=SRC_BLUR, tiralib_schedule_string=SCHED_S
    ) is True


def test_empty_schedule_is_valid(store):
    assert store.record("blur", SRC_BLUR, "", True, [1.0]) is True
    assert store.lookup("blur", SRC_BLUR, "").execution_times == [1.0]
    assert store.lookup("blur", SRC_BLUR, "  \u3000 ").execution_times == [1.0]


@pytest.mark.parametrize("times", [None, []])
def test_record_legal_requires_times(store, times):
    with pytest.raises(ValueError) as ei:
        store.record("blur", SRC_BLUR, SCHED_S, True, times)
    assert str(ei.value) == (
        "execution_times must be provided (non-empty list) when is_legal is True."
    )
    assert store.count() == 0
    assert store.program_count() == 0


def test_record_legal_requires_times_default(store):
    with pytest.raises(ValueError, match="execution_times must be provided"):
        store.record("blur", SRC_BLUR, SCHED_S, True)
    assert store.count() == 0


@pytest.mark.parametrize(
    "sched, reason",
    [
        ("X(L0)", "Unknown transformation: 'X' in 'X(L0)'"),
        ("R(L0)", "Malformed R transformation: 'R(L0)'"),
        ("R(L0,comps=[c])|", "Empty segment in schedule (leading, trailing, or double '|')."),
        ("(L0)", "Unrecognized token (does not start with a transformation name): '(L0)'"),
        ("T2(L0,L1,-4,8)", "Malformed T2 transformation: 'T2(L0,L1,-4,8)'"),
        # the normalized form is what gets validated and quoted
        ("R( L0 )", "Malformed R transformation: 'R(L0)'"),
        # normalization quotes comp names; the reason shows the segment as
        # Python's repr() does (double quotes around a text with ' in it)
        ("R(L0,comps=[c],)", "Malformed R transformation: \"R(L0,comps=['c'],)\""),
        ("X(L0,comps=[c])", "Unknown transformation: 'X' in \"X(L0,comps=['c'])\""),
    ],
)
def test_record_invalid_schedule(store, sched, reason):
    with pytest.raises(ValueError) as ei:
        store.record("blur", SRC_BLUR, sched, False, None)
    assert str(ei.value) == "Invalid schedule string: " + reason
    assert str(ei.value).startswith("Invalid schedule string: ")
    assert store.count() == 0
    assert store.program_count() == 0


def test_record_validates_normalized_form(store):
    # comps=[] is malformed as such, but normalizes to comps=[''] which is valid
    assert store.record("blur", SRC_BLUR, "R(L0,comps=[])", True, [1.0]) is True
    r = store.lookup("blur", SRC_BLUR, "R(L0,comps=[''])")
    assert r is not None and r.schedule == "R(L0,comps=[''])"


def test_record_returns_false_when_exists(store):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0]) is True
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [2.0]) is False
    assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [1.0]
    assert store.count() == 1


def test_overwrite_keeps_creation_date_updates_update_date(make_store, db_path):
    s1 = make_store(db_path, source_project="first")
    assert s1.record("blur", SRC_BLUR, SCHED_S, True, [1.0]) is True
    r1 = s1.lookup("blur", SRC_BLUR, SCHED_S)
    time.sleep(0.05)
    s2 = make_store(db_path, source_project="second")
    assert s2.record("blur", SRC_BLUR, SCHED_S, False, None, overwrite=True) is True
    r2 = s2.lookup("blur", SRC_BLUR, SCHED_S)
    assert r2.is_legal is False and r2.execution_times is None
    assert r2.creation_date == r1.creation_date
    assert r2.update_date > r1.update_date
    assert _parse_iso(r2.update_date) > _parse_iso(r1.update_date)
    assert r2.source_project == "second"
    assert s2.count() == 1


def test_overwrite_on_missing_record_inserts(store):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0], overwrite=True) is True
    r = store.lookup("blur", SRC_BLUR, SCHED_S)
    assert r.creation_date == r.update_date


def test_cosmetic_variants_share_a_record(store):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    src2 = "#include <tiramisu.h>\n" + SRC_BLUR.replace(" ", "  ") + "// trailing\n"
    sched2 = 'R( L0 , comps=["c1"] )'
    assert store.contains("blur", src2, sched2)
    assert store.lookup("blur", src2, sched2).execution_times == [1.0]
    assert store.record("blur", src2, sched2, True, [2.0]) is False
    assert store.count() == 1
    assert store.program_count() == 1


def test_program_name_is_not_part_of_the_key(store):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    assert store.lookup("other_name", SRC_BLUR, SCHED_R).execution_times == [1.0]
    assert store.contains("other_name", SRC_BLUR, SCHED_R) is True
    assert store.record("other_name", SRC_BLUR, SCHED_R, True, [3.0]) is False


def test_first_program_name_wins(store, db_path):
    store.record("first", SRC_BLUR, SCHED_R, True, [1.0])
    cosmetic = "// a comment\n" + SRC_BLUR
    store.record("second", cosmetic, SCHED_S, True, [2.0])
    assert store.program_count() == 1
    progs = raw_programs(db_path)
    assert len(progs) == 1
    (p,) = progs.values()
    assert p["program_name"] == "first"
    assert p["source_code"] == SRC_BLUR  # original text of the first insert
    assert store.get_program_source("second") == []
    assert store.get(expected_key(cosmetic, SCHED_S))["program_name"] == "first"


def test_contains(store):
    assert store.contains("blur", SRC_BLUR, SCHED_S) is False
    store.record("blur", SRC_BLUR, SCHED_S, False)
    assert store.contains("blur", SRC_BLUR, SCHED_S) is True


def test_stored_columns(store, db_path):
    store.record("blur", SRC_BLUR, 'S( L0, L1, 4, 8, comps=["c1"] )', True, [0.5, 2])
    rows = raw_records(db_path)
    key = expected_key(SRC_BLUR, SCHED_S)
    assert list(rows) == [key]
    row = rows[key]
    assert row["program_hash"] == oracle_program_hash(SRC_BLUR)
    assert row["schedule"] == SCHED_S
    assert row["result_json"] == '{"is_legal":true,"execution_times":[0.5,2]}'
    assert row["hostname"] == socket.gethostname()
    assert row["username"] == getpass.getuser()
    assert row["source_project"] == TEST_PROJECT
    assert ISO_UTC_RE.match(row["creation_date"])
    assert row["creation_date"] == row["update_date"]
    progs = raw_programs(db_path)
    assert progs[oracle_program_hash(SRC_BLUR)] == {
        "program_hash": oracle_program_hash(SRC_BLUR),
        "program_name": "blur",
        "source_code": SRC_BLUR,
    }


def test_username_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGNAME", "alice_tira")
    s = TiraStore(tmp_path / "u.db", cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM)
    try:
        s.record("blur", SRC_BLUR, SCHED_R, False)
        assert s.lookup("blur", SRC_BLUR, SCHED_R).username == "alice_tira"
    finally:
        s.close()


# ---------------------------------------------------------------------------
# execution_times representation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "times, expected_json",
    [
        ([0.042, 1e-05, 1234567.0], "[0.042,1e-05,1234567.0]"),
        ([1.0], "[1.0]"),
        ([1, 2], "[1,2]"),
        ([1, 2.5, 3], "[1,2.5,3]"),
        ([0.1, 1 / 3], "[0.1,0.3333333333333333]"),
        ([1e16, 1.5e16, 1e15], "[1e+16,1.5e+16,1000000000000000.0]"),
        ([1e-4, 9.999e-05], "[0.0001,9.999e-05]"),
        ([-0.0, 0.0, 0], "[-0.0,0.0,0]"),
        ([5e-324, 1.7976931348623157e308], "[5e-324,1.7976931348623157e+308]"),
        ([123456789012345.6], "[123456789012345.6]"),
        ([-2.5, -3], "[-2.5,-3]"),
        ([2**53 + 1], "[9007199254740993]"),
        ([0.30000000000000004], "[0.30000000000000004]"),
    ],
)
def test_result_json_float_format(store, db_path, times, expected_json):
    store.record("blur", SRC_BLUR, SCHED_S, True, times)
    row = raw_records(db_path)[expected_key(SRC_BLUR, SCHED_S)]
    assert row["result_json"] == '{"is_legal":true,"execution_times":' + expected_json + "}"
    assert row["result_json"] == expected_result_json(True, times)


def test_result_json_exact_example(store, db_path):
    store.record("blur", SRC_BLUR, SCHED_S, True, [0.042, 1e-05, 1234567.0])
    row = raw_records(db_path)[expected_key(SRC_BLUR, SCHED_S)]
    assert row["result_json"] == '{"is_legal":true,"execution_times":[0.042,1e-05,1234567.0]}'


def test_result_json_illegal(store, db_path):
    store.record("blur", SRC_BLUR, SCHED_I, False, None)
    store.record("blur", SRC_BLUR, SCHED_R, False, [])
    rows = raw_records(db_path)
    assert rows[expected_key(SRC_BLUR, SCHED_I)]["result_json"] == (
        '{"is_legal":false,"execution_times":null}'
    )
    assert rows[expected_key(SRC_BLUR, SCHED_R)]["result_json"] == (
        '{"is_legal":false,"execution_times":[]}'
    )


def test_int_and_float_types_survive_roundtrip(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    store.record("blur", SRC_BLUR, SCHED_R, True, [1, 2])
    store.record("blur", SRC_BLUR, SCHED_I, True, [3, 4.0, 2**53 + 1])
    a = store.lookup("blur", SRC_BLUR, SCHED_S).execution_times
    assert a == [1.0] and type(a[0]) is float
    b = store.lookup("blur", SRC_BLUR, SCHED_R).execution_times
    assert b == [1, 2] and all(type(x) is int for x in b)
    c = store.lookup("blur", SRC_BLUR, SCHED_I).execution_times
    assert [type(x) for x in c] == [int, float, int]
    assert c == [3, 4.0, 2**53 + 1]


def test_floats_roundtrip_exactly(store):
    vals = [0.1, 1 / 3, 2 / 3, 1e-300, 1e300, 123.456, 5e-324, math.pi, -math.e]
    store.record("blur", SRC_BLUR, SCHED_S, True, vals)
    got = store.lookup("blur", SRC_BLUR, SCHED_S).execution_times
    assert got == vals
    assert all(type(x) is float for x in got)
    assert [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in vals]


def test_tuple_times_accepted(store, db_path):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, (1.5, 2)) is True
    assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [1.5, 2]
    row = raw_records(db_path)[expected_key(SRC_BLUR, SCHED_S)]
    assert row["result_json"] == '{"is_legal":true,"execution_times":[1.5,2]}'


# ---------------------------------------------------------------------------
# record_many
# ---------------------------------------------------------------------------


def _entries():
    return [
        {"tiralib_schedule_string": SCHED_S, "is_legal": True, "execution_times": [0.04]},
        {"tiralib_schedule_string": SCHED_I, "is_legal": False, "execution_times": None},
        {"tiralib_schedule_string": SCHED_R, "is_legal": True, "execution_times": [0.03, 0.031]},
    ]


def test_record_many_basic(store, db_path):
    n = store.record_many("blur", SRC_BLUR, _entries())
    assert n == 3 and type(n) is int
    assert store.count() == 3
    assert store.program_count() == 1
    assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [0.04]
    assert store.lookup("blur", SRC_BLUR, SCHED_I).is_legal is False
    assert store.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [0.03, 0.031]
    rows = raw_records(db_path)
    assert set(rows) == {expected_key(SRC_BLUR, e["tiralib_schedule_string"]) for e in _entries()}
    for e in _entries():
        row = rows[expected_key(SRC_BLUR, e["tiralib_schedule_string"])]
        assert row["result_json"] == expected_result_json(e["is_legal"], e["execution_times"])
        assert row["schedule"] == oracle_normalize_schedule(e["tiralib_schedule_string"])


def test_record_many_keyword_arguments(store):
    n = store.record_many(
        program_name="blur", program_source_code=SRC_BLUR, schedules=_entries(), overwrite=False
    )
    assert n == 3


def test_record_many_execution_times_key_optional_when_illegal(store):
    n = store.record_many(
        "blur", SRC_BLUR, [{"tiralib_schedule_string": SCHED_I, "is_legal": False}]
    )
    assert n == 1
    assert store.lookup("blur", SRC_BLUR, SCHED_I).execution_times is None


def test_record_many_skips_existing_without_overwrite(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [9.0])
    assert store.record_many("blur", SRC_BLUR, _entries()) == 2
    assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [9.0]
    assert store.count() == 3


def test_record_many_overwrite(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [9.0])
    c0 = store.lookup("blur", SRC_BLUR, SCHED_S).creation_date
    time.sleep(0.02)
    assert store.record_many("blur", SRC_BLUR, _entries(), overwrite=True) == 3
    r = store.lookup("blur", SRC_BLUR, SCHED_S)
    assert r.execution_times == [0.04]
    assert r.creation_date == c0
    assert r.update_date > c0


def test_record_many_empty_list(store):
    assert store.record_many("blur", SRC_BLUR, []) == 0
    assert store.count() == 0


def test_record_many_duplicate_in_batch(store):
    entries = [
        {"tiralib_schedule_string": SCHED_R, "is_legal": True, "execution_times": [1.0]},
        {"tiralib_schedule_string": 'R( L0, comps=["c1"])', "is_legal": True, "execution_times": [2.0]},
    ]
    assert store.record_many("blur", SRC_BLUR, entries) == 1
    assert store.count() == 1
    assert store.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [1.0]


def test_record_many_duplicate_in_batch_with_overwrite(store):
    """With overwrite every entry counts, as the original's upsert per entry
    did, and the last one given stays."""
    entries = [
        {"tiralib_schedule_string": SCHED_R, "is_legal": True, "execution_times": [1.0]},
        {"tiralib_schedule_string": 'R( L0, comps=["c1"])', "is_legal": True, "execution_times": [2.0]},
    ]
    assert store.record_many("blur", SRC_BLUR, entries, overwrite=True) == 2
    assert store.count() == 1
    assert store.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [2.0]


def test_record_many_tuple_of_entries(store):
    assert store.record_many("blur", SRC_BLUR, tuple(_entries())) == 3


def test_record_many_invalid_schedule_writes_nothing(store):
    store.record("x", "int x;", SCHED_R, True, [1.0])
    entries = _entries() + [
        {"tiralib_schedule_string": "R(L0)", "is_legal": False, "execution_times": None}
    ]
    with pytest.raises(ValueError) as ei:
        store.record_many("blur", SRC_BLUR, entries)
    assert str(ei.value) == (
        "schedules[3]: Invalid schedule string: Malformed R transformation: 'R(L0)'"
    )
    assert store.count() == 1
    assert store.program_count() == 1
    assert store.get_program_source("blur") == []


def test_record_many_missing_times_writes_nothing(store):
    entries = _entries()
    entries[1] = {"tiralib_schedule_string": SCHED_I, "is_legal": True, "execution_times": []}
    with pytest.raises(ValueError) as ei:
        store.record_many("blur", SRC_BLUR, entries)
    assert str(ei.value) == (
        "schedules[1]: execution_times must be provided (non-empty list) when is_legal is True."
    )
    assert store.count() == 0
    assert store.program_count() == 0


def test_record_many_first_error_reported(store):
    entries = [
        {"tiralib_schedule_string": SCHED_R, "is_legal": True, "execution_times": [1.0]},
        {"tiralib_schedule_string": "X(L0,comps=[c])", "is_legal": False, "execution_times": None},
        {"tiralib_schedule_string": "R(L0)", "is_legal": False, "execution_times": None},
    ]
    with pytest.raises(ValueError) as ei:
        store.record_many("blur", SRC_BLUR, entries)
    assert str(ei.value).startswith("schedules[1]: Invalid schedule string: Unknown transformation")
    assert store.count() == 0


# ---------------------------------------------------------------------------
# get_program_source / get_program_records
# ---------------------------------------------------------------------------


def test_get_program_source_ordered_by_hash(store):
    sources = [f"void blur() {{ return {i}; }}" for i in range(6)]
    for src in sources:
        store.record("blur", src, SCHED_R, True, [1.0])
    store.record("other", "int other;", SCHED_R, True, [1.0])
    got = store.get_program_source("blur")
    assert isinstance(got, list)
    expected = sorted(
        ({"program_hash": oracle_program_hash(s), "source_code": s} for s in sources),
        key=lambda d: d["program_hash"],
    )
    assert got == expected
    for d in got:
        assert set(d) == {"program_hash", "source_code"}


def test_get_program_source_unknown(store):
    assert store.get_program_source("nope") == []


def test_get_program_source_keeps_original_text(store):
    src = "/* ü */\n#include <x.h>\nvoid f() {\n\treturn;\n}\n"
    store.record("f", src, SCHED_R, False)
    assert store.get_program_source("f") == [
        {"program_hash": oracle_program_hash(src), "source_code": src}
    ]


def test_get_program_records(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    time.sleep(0.002)
    store.record("blur", SRC_BLUR, 'I( L0, L1, comps=["c1"])', False, None)
    time.sleep(0.002)
    store.record("blur", SRC_BLUR, SCHED_R, True, [2, 3])
    store.record("other", "int other;", SCHED_R, True, [1.0])
    recs = store.get_program_records("blur", "// cosmetic\n" + SRC_BLUR)
    assert isinstance(recs, list) and all(isinstance(r, LookupResult) for r in recs)
    assert [r.schedule for r in recs] == [SCHED_S, SCHED_I, SCHED_R]
    assert [r.execution_times for r in recs] == [[1.0], None, [2, 3]]
    assert [r.is_legal for r in recs] == [True, False, True]
    dates = [r.creation_date for r in recs]
    assert dates == sorted(dates)
    assert store.get_program_records("blur", "void unknown(){}") == []


# ---------------------------------------------------------------------------
# keys / get / put / delete / count / program_count / stats
# ---------------------------------------------------------------------------


def _three(store):
    out = []
    for sched in (SCHED_S, SCHED_I, SCHED_R):
        store.record("blur", SRC_BLUR, sched, False)
        out.append(expected_key(SRC_BLUR, sched))
        time.sleep(0.002)
    return out


def test_keys_ordering_and_pagination(store):
    ks = _three(store)
    assert store.keys() == ks
    assert store.keys(limit=2) == ks[:2]
    assert store.keys(limit=2, offset=1) == ks[1:]
    assert store.keys(2, 2) == ks[2:]
    assert store.keys(limit=10, offset=5) == []
    assert store.keys(limit=0, offset=1) == ks  # paginates only when limit > 0
    assert store.keys(limit=-1, offset=2) == ks
    assert all(type(k) is str for k in store.keys())


def test_keys_empty(store):
    assert store.keys() == []


def test_get(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [0.5])
    key = expected_key(SRC_BLUR, SCHED_S)
    row = store.get(key)
    assert isinstance(row, dict)
    assert set(row) == GET_KEYS
    assert row["key"] == key
    assert row["program_hash"] == oracle_program_hash(SRC_BLUR)
    assert row["schedule"] == SCHED_S
    assert row["result_json"] == '{"is_legal":true,"execution_times":[0.5]}'
    assert row["program_name"] == "blur"
    assert row["source_code"] == SRC_BLUR
    assert row["source_project"] == TEST_PROJECT
    assert row["hostname"] == socket.gethostname()
    assert row["username"] == getpass.getuser()
    assert row["creation_date"] == row["update_date"]


def test_get_missing(store):
    assert store.get("0" * 64) is None
    assert store.get("") is None


def test_put_and_delete(store, db_path):
    store.record("blur", SRC_BLUR, SCHED_S, True, [0.5])
    h = oracle_program_hash(SRC_BLUR)
    key = expected_key(SRC_BLUR, SCHED_R)
    rj = '{"is_legal":false,"execution_times":null}'
    assert store.put(key, h, SCHED_R, rj) is True
    assert store.count() == 2
    r = store.lookup("blur", SRC_BLUR, SCHED_R)
    assert r.is_legal is False and r.execution_times is None
    assert r.source_project == TEST_PROJECT
    assert store.get(key)["result_json"] == rj
    # exists, no overwrite
    assert store.put(key, h, SCHED_R, '{"is_legal":true,"execution_times":[7.0]}') is False
    assert store.get(key)["result_json"] == rj
    created = store.get(key)["creation_date"]
    time.sleep(0.01)
    assert store.put(key, h, SCHED_R, '{"is_legal":true,"execution_times":[7.0]}', overwrite=True) is True
    row = store.get(key)
    assert row["result_json"] == '{"is_legal":true,"execution_times":[7.0]}'
    assert row["creation_date"] == created and row["update_date"] > created
    assert store.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [7.0]
    # delete
    assert store.delete(key) is True
    assert store.delete(key) is False
    assert store.get(key) is None
    assert store.count() == 1
    assert store.program_count() == 1  # programs are never deleted
    assert store.contains("blur", SRC_BLUR, SCHED_S)


def test_put_arbitrary_key(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [0.5])
    h = oracle_program_hash(SRC_BLUR)
    assert store.put("my-admin-key", h, "anything", '{"is_legal":false,"execution_times":null}') is True
    assert store.get("my-admin-key")["schedule"] == "anything"
    assert "my-admin-key" in store.keys()


def test_put_unknown_program_hash_fails(store):
    with pytest.raises(ValueError, match="is not in the programs table"):
        store.put("k" * 64, "f" * 64, SCHED_R, '{"is_legal":false,"execution_times":null}')
    assert store.count() == 0
    # the store keeps working
    assert store.record("blur", SRC_BLUR, SCHED_R, False) is True


def test_delete_missing(store):
    assert store.delete("0" * 64) is False


def test_counts(store):
    assert store.count() == 0 and type(store.count()) is int
    assert store.program_count() == 0 and type(store.program_count()) is int
    store.record_many("blur", SRC_BLUR, _entries())
    store.record("other", "int other;", SCHED_R, True, [1.0])
    assert store.count() == 4
    assert store.program_count() == 2


def test_stats(make_store, db_path):
    s1 = make_store(db_path, source_project="p1")
    s1.record_many("blur", SRC_BLUR, _entries())
    s2 = make_store(db_path, source_project="p2")
    s2.record("other", "int other;", SCHED_R, False)
    st = s2.stats()
    assert isinstance(st, dict)
    assert set(st) == {
        "total_records",
        "legal_records",
        "illegal_records",
        "total_programs",
        "source_projects",
        "users",
        "cpu_model",
        "slurm_cpus",
    }
    assert st["total_records"] == 4
    assert st["legal_records"] == 2
    assert st["illegal_records"] == 2
    assert st["total_programs"] == 2
    assert isinstance(st["source_projects"], list)
    assert sorted(st["source_projects"]) == ["p1", "p2"]
    assert st["users"] == [getpass.getuser()]
    assert st["cpu_model"] == TEST_CPU
    assert st["slurm_cpus"] == TEST_SLURM


def test_stats_empty(store):
    st = store.stats()
    assert st["total_records"] == 0
    assert st["legal_records"] == 0
    assert st["illegal_records"] == 0
    assert st["total_programs"] == 0
    assert st["source_projects"] == []
    assert st["users"] == []


def test_no_lock_files_left_after_operations(store, db_path, tmp_path):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    store.record_many("blur", SRC_BLUR, _entries())
    store.lookup("blur", SRC_BLUR, SCHED_R)
    store.contains("blur", SRC_BLUR, SCHED_R)
    store.keys()
    store.stats()
    store.get(expected_key(SRC_BLUR, SCHED_R))
    store.delete(expected_key(SRC_BLUR, SCHED_R))
    store.get_program_records("blur", SRC_BLUR)
    store.get_program_source("blur")
    store.export(tmp_path / "out.json")
    store.backup(tmp_path / "bk.db")
    _ = store.cpu_model, store.slurm_cpus
    with pytest.raises(ValueError):
        store.record("blur", SRC_BLUR, "R(L0)", False)
    assert leftover_lock_files(tmp_path) == []
    assert not Path(str(db_path) + ".lock").exists()
    store.close()
    assert leftover_lock_files(tmp_path) == []
    assert not (tmp_path / "cache.db-journal").exists()
    assert not (tmp_path / "cache.db-wal").exists()


def test_big_ints_and_many_floats_roundtrip(store, db_path):
    import random

    rng = random.Random(7)
    floats = [rng.uniform(-1e3, 1e3) * 10 ** rng.randint(-30, 30) for _ in range(300)]
    floats += [float(rng.randint(-10**17, 10**17)) for _ in range(100)]
    floats += [1e22, 1e-7, 0.000123, 1e21, 9.999999999999999e15, 2.5e-8]
    store.record("blur", SRC_BLUR, SCHED_S, True, floats)
    ints = [2**70, -(2**63), 2**64 - 1, 0, -1]
    store.record("blur", SRC_BLUR, SCHED_R, True, ints)
    rows = raw_records(db_path)
    assert rows[expected_key(SRC_BLUR, SCHED_S)]["result_json"] == expected_result_json(True, floats)
    assert rows[expected_key(SRC_BLUR, SCHED_R)]["result_json"] == expected_result_json(True, ints)
    got_f = store.lookup("blur", SRC_BLUR, SCHED_S).execution_times
    assert got_f == floats and all(type(x) is float for x in got_f)
    got_i = store.lookup("blur", SRC_BLUR, SCHED_R).execution_times
    assert got_i == ints and all(type(x) is int for x in got_i)


def test_threads_sharing_one_store_and_separate_stores(make_store, db_path):
    import threading

    shared = make_store(db_path)
    separate = [make_store(db_path) for _ in range(4)]
    errors, wins = [], []

    def worker(w, st):
        try:
            for i in range(40):
                assert st.record("w", f"void w{w}() {{}}", f"U(L0,{i},comps=[c])", True, [float(i)])
                if st.record("c", "void c() {}", f"U(L1,{i},comps=[c])", True, [float(w)]):
                    wins.append(i)
                r = st.lookup("w", f"void w{w}() {{}}", f"U(L0,{i},comps=[c])")
                assert r.execution_times == [float(i)]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(w, shared)) for w in range(4)]
    threads += [threading.Thread(target=worker, args=(4 + w, separate[w])) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert sorted(wins) == list(range(40))
    assert shared.count() == 8 * 40 + 40
    assert leftover_lock_files(shared) == []


def _sent_programs(monkeypatch):
    """Spy on the library calls: (method, "hash" or "source") of each."""
    from tirastore import _native

    sent = []
    real = _native.call

    def spy(handle, method, **args):
        if "program_hash" in args or "program_source_code" in args:
            sent.append((method, "hash" if "program_hash" in args else "source"))
        return real(handle, method, **args)

    monkeypatch.setattr(_native, "call", spy)
    return sent


def test_records_by_program_hash(store, monkeypatch):
    """Once a store has written a program by its source, its records and
    record_many send the program's hash instead: a long source is not
    encoded and parsed again at every write. Another store, or another
    source, still goes by source first."""
    from tirastore import _native

    sent = _sent_programs(monkeypatch)
    src = "void written() { /* " + "x" * 2000 + " */ }"
    assert store.record("written", src, SCHED_S, True, [1.0])
    assert store.record("written", src, SCHED_R, False, None)
    assert store.record_many("written", src, [{"tiralib_schedule_string": SCHED_I, "is_legal": True,
                                               "execution_times": [2.0]}]) == 1
    assert not store.record("written", src, SCHED_S, True, [9.0])  # exists
    assert store.record("written", src, SCHED_S, True, [3.0], overwrite=True)
    assert sent == [("record", "source")] + [("record", "hash"), ("record_many", "hash")] + [("record", "hash")] * 2
    assert store.lookup("written", src, SCHED_S).execution_times == [3.0]
    assert store.lookup("written", src, SCHED_I).execution_times == [2.0]
    assert [p["source_code"] for p in store.get_program_source("written")] == [src]
    # Bad input by hash is refused as it is by source.
    with pytest.raises(ValueError, match="Invalid schedule"):
        store.record("written", src, "not a schedule", True, [1.0])
    with pytest.raises(ValueError, match="program_hash must be 64 lowercase"):
        _native.call(store._handle, "record", program_name="w", program_hash="abc", tiralib_schedule_string=SCHED_S,
                     is_legal=True, execution_times=[1.0])
    with pytest.raises(TypeError, match="not both"):
        _native.call(store._handle, "record", program_name="w", program_hash="a" * 64, program_source_code=src,
                     tiralib_schedule_string=SCHED_S, is_legal=True, execution_times=[1.0])
    del sent[:]
    assert store.record("other", "void other() {}", SCHED_S, True, [1.0])
    assert sent == [("record", "source")]


def test_record_by_hash_of_a_program_not_stored(store):
    """The methods record and record_many by program_hash of a program the
    database does not have write nothing and say so, with their own status
    and class."""
    import tirastore
    from tirastore import _native
    from tirastore.errors import ProgramNotStoredError

    h = tirastore.make_program_hash("void never_stored() {}")
    for method, args in [("record", {"tiralib_schedule_string": SCHED_S, "is_legal": True, "execution_times": [1.0]}),
                         ("record_many", {"schedules": [{"tiralib_schedule_string": SCHED_S, "is_legal": True,
                                                         "execution_times": [1.0]}]})]:
        with pytest.raises(ProgramNotStoredError, match="program_hash " + h + " is not stored"):
            _native.call(store._handle, method, program_name="never", program_hash=h, **args)
    assert store.count() == 0 and store.program_count() == 0
    assert issubclass(ProgramNotStoredError, LookupError)


@sqlite_only
def test_records_by_hash_after_the_program_was_removed(store, db_path, monkeypatch):
    """A store that writes by hash a program removed from the database
    meanwhile (by SQL here; a database replaced at its path is the same)
    gets the library's refusal and writes again with the source: the record
    is written, with its program row. (Were the program row not required,
    the record would be written without it; were the refusal not caught,
    the call would raise ProgramNotStoredError.)"""
    src = "void removed() {}"
    assert store.record("removed", src, SCHED_S, True, [1.0])
    remove_programs(db_path)
    sent = _sent_programs(monkeypatch)
    assert store.record("removed", src, SCHED_R, True, [2.0])
    assert sent == [("record", "hash"), ("record", "source")]
    assert [p["source_code"] for p in store.get_program_source("removed")] == [src]
    assert store.lookup("removed", src, SCHED_R).execution_times == [2.0]
    assert store.record("removed", src, SCHED_I, True, [3.0])
    assert sent[2:] == [("lookup", "hash"), ("record", "hash")]


def test_reads_by_program_hash(store):
    """The C ABI's reads accept program_hash (what make_program_hash returns)
    instead of program_source_code; the Python package uses it after a
    first successful read by source."""
    import tirastore
    from tirastore import _native

    src, sched = "void hashed() {}", "S(L0,L1,4,8,comps=['c1'])"
    assert store.record("hashed", src, sched, True, [1.5])
    h = tirastore.make_program_hash(src)
    got = _native.call(store._handle, "lookup", program_name="hashed", program_hash=h, tiralib_schedule_string=sched)
    assert got["execution_times"] == [1.5]
    assert _native.call(store._handle, "contains", program_name="x", program_hash=h, tiralib_schedule_string=sched) is True
    many = _native.call(store._handle, "lookup_many", program_name="x", program_hash=h, schedules=[sched, "R(L0,comps=[c])"])
    assert many[0]["execution_times"] == [1.5] and many[1] is None
    with pytest.raises(TypeError, match="not both"):
        _native.call(store._handle, "lookup", program_name="x", program_source_code=src, program_hash=h,
                     tiralib_schedule_string=sched)
    for bad in ["", "ABC", h.upper(), h[:-1], h + "0", "g" * 64]:
        with pytest.raises(ValueError, match="program_hash must be 64 lowercase"):
            _native.call(store._handle, "lookup", program_name="x", program_hash=bad, tiralib_schedule_string=sched)
    # The package: the first lookup goes by source, later ones by hash, and
    # both give the same answers.
    for _ in range(3):
        assert store.lookup("hashed", src, sched).execution_times == [1.5]
        assert store.contains("hashed", src, sched)
        assert store.lookup("hashed", src, "R(L0,comps=[c])") is None


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@sqlite_only
def test_who_may_use_a_new_database(tmp_path, umask_022):
    """shared=None (the default) makes a new database as the original did,
    0666 whatever the umask, a directory it creates 1777, and says nothing
    of an existing 0755 directory; shared=True says that others cannot use
    it there; shared=False makes it 0600 (a new directory as the umask
    makes it), and its export and backup are 0600 too. The default's 0666
    is the control: the same calls without shared=False leave others in."""
    import subprocess
    import sys
    import warnings

    from tirastore import TiraStoreWarning

    tmp_path.chmod(0o755)

    def make(path, **kw):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with TiraStore(path, cpu_model=TEST_CPU, **kw) as s:
                s.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
                s.export(path.with_suffix(".json"))
                s.backup(path.with_suffix(".bak"))
        return [str(w.message) for w in caught if w.category is TiraStoreWarning]

    def mode(p):
        return p.stat().st_mode & 0o7777

    assert make(tmp_path / "default.db") == []
    assert (mode(tmp_path / "default.db"), mode(tmp_path / "default.json"), mode(tmp_path / "default.bak")) == (
        0o666, 0o644, 0o666)
    [said] = make(tmp_path / "shared.db", shared=True)
    assert "chmod 1777" in said and "shared.db" in said
    assert make(tmp_path / "new" / "private.db", shared=False) == []
    private = tmp_path / "new" / "private.db"
    assert (mode(private), mode(private.with_suffix(".json")), mode(private.with_suffix(".bak"))) == (
        0o600, 0o600, 0o600)
    assert mode(private.parent) == 0o755
    make(tmp_path / "made" / "default.db")
    assert mode(tmp_path / "made") == 0o1777
    with pytest.raises(TypeError, match="shared must be None or a bool"):
        TiraStore(tmp_path / "x.db", shared="no")
    # The command line's targets: --private.
    for args in (["import", tmp_path / "imported.db", private.with_suffix(".json"), "--private"],
                 ["merge", "--private", tmp_path / "merged.db", private]):
        r = subprocess.run([sys.executable, "-m", "tirastore", *map(str, args), "--allow-cpu-mismatch"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    assert mode(tmp_path / "imported.db") == mode(tmp_path / "merged.db") == 0o600
