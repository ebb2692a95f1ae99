"""Interoperability with databases and locks of the original Python TiraStore.

(1) a DB built with the stdlib sqlite3 module exactly as the original writes
    it is readable by tirastore;
(2) a DB written by tirastore has exactly the original's schema, metadata,
    keys and stored values.
"""

from __future__ import annotations

import json
import math
import os
import warnings
import sqlite3
import stat
from datetime import datetime
from pathlib import Path

import pytest

from conftest import (
    ISO_UTC_RE,
    SCHED_I,
    SCHED_R,
    SCHED_S,
    SRC_BLUR,
    TEST_CPU,
    TEST_SLURM,
    create_original_db,
    expected_key,
    expected_result_json,
    leftover_lock_files,
    oracle_normalize_schedule,
    oracle_program_hash,
    original_insert,
    raw_meta,
    raw_programs,
    raw_query,
    raw_records,
)

from tirastore import LookupResult, TiraStore, TiraStoreWarning

ORIG_SRC_A = "// original program A\n#include <tiramisu/tiramisu.h>\nvoid a() {\n  int x = 0;\n}\n"
ORIG_SRC_B = "void b() { /* b */ float y = 1.0; }"
ORIG_SRC_U = "void ü() { puts(\"日本語 😀\"); }\u3000\n"

# (program_name, source, schedule as the caller would write it, result_json
#  exactly as stored by the original, expected is_legal, expected times,
#  creation_date)
ORIGINAL_ROWS = [
    ("a", ORIG_SRC_A, SCHED_S, '{"is_legal":true,"execution_times":[1]}', True, [1],
     "2026-02-21T15:30:12.000001+00:00"),
    ("a", ORIG_SRC_A, 'I( L0, L1, comps=["c1"] )', '{"is_legal":true,"execution_times":[1.0]}',
     True, [1.0], "2026-02-21T15:30:13+00:00"),
    ("a", ORIG_SRC_A, SCHED_R, '{"is_legal":true,"execution_times":[1e-05]}', True, [1e-05],
     "2026-02-21T15:30:14.500000+00:00"),
    ("a", ORIG_SRC_A, "P(L0,comps=['c1'])", '{"is_legal":true,"execution_times":[NaN]}', True,
     [math.nan], "2026-02-21T15:30:15.250000+00:00"),
    ("a", ORIG_SRC_A, "F(L0,comps=['c1'])",
     '{"is_legal":true,"execution_times":[Infinity,-Infinity,0.042]}', True,
     [math.inf, -math.inf, 0.042], "2026-02-21T15:30:16.000002+00:00"),
    ("b", ORIG_SRC_B, "T2(L0,L1,32,32,comps=['c'])", '{"is_legal":false,"execution_times":null}',
     False, None, "2026-02-21T15:30:17.123456+00:00"),
    ("b", ORIG_SRC_B, "U(L1,8,comps=['c'])", '{"is_legal":false,"execution_times":[]}', False, [],
     "2026-02-21T15:30:18.123456+00:00"),
    ("b", ORIG_SRC_B, "T3(L0,L1,L2,4,4,4,comps=['c'])",
     '{"is_legal":true,"execution_times":[0.042,1234567.0,1e+16,3,-2.5]}', True,
     [0.042, 1234567.0, 1e16, 3, -2.5], "2026-02-21T15:30:19.123456+00:00"),
    ("ü", ORIG_SRC_U, "R(L0,comps=['ç😀'])", '{"is_legal":true,"execution_times":[2.5]}', True,
     [2.5], "2026-02-21T15:30:20.123456+00:00"),
    ("ü", ORIG_SRC_U, "", '{"is_legal":true,"execution_times":[7]}', True, [7],
     "2026-02-21T15:30:21.123456+00:00"),
]


def _same_times(got, want):
    if want is None:
        return got is None
    if not isinstance(got, list) or len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if type(g) is not type(w):
            return False
        if isinstance(w, float) and math.isnan(w):
            if not math.isnan(g):
                return False
        elif g != w:
            return False
    return True


@pytest.fixture
def original_db(tmp_path):
    db = tmp_path / "orig.db"
    create_original_db(db, cpu_model="Original CPU", slurm_cpus="N/A")
    keys = []
    for name, src, sched, rj, _, _, cdate in ORIGINAL_ROWS:
        keys.append(
            original_insert(db, name, src, sched, rj, creation_date=cdate,
                            hostname="node042", username="olduser",
                            source_project="autoscheduler-v2")
        )
    return db, keys


def test_reads_original_database(original_db, capfd):
    db, keys = original_db
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = TiraStore(db, cpu_model="Original CPU", slurm_cpus="8", source_project="new")
    try:
        assert "mismatch" not in capfd.readouterr().out
        assert not [w for w in caught if "mismatch" in str(w.message)]
        assert s.writes_allowed is True
        assert s.cpu_model == "Original CPU"
        assert s.slurm_cpus == "N/A"
        assert s.count() == len(ORIGINAL_ROWS)
        assert s.program_count() == 3
        for (name, src, sched, rj, legal, times, cdate), key in zip(ORIGINAL_ROWS, keys):
            r = s.lookup(name, src, sched)
            assert r is not None, (name, sched)
            assert r.is_legal is legal
            assert _same_times(r.execution_times, times), (rj, r.execution_times)
            assert r.schedule == oracle_normalize_schedule(sched)
            assert r.hostname == "node042"
            assert r.username == "olduser"
            assert r.source_project == "autoscheduler-v2"
            assert r.creation_date == cdate
            assert r.update_date == cdate
            assert s.contains(name, src, sched) is True
            row = s.get(key)
            assert row["result_json"] == rj
            assert row["program_name"] == name
            assert row["source_code"] == src
        # keys() ordered by creation_date (as text)
        assert s.keys() == keys
        assert s.keys(limit=3, offset=2) == keys[2:5]
    finally:
        s.close()


def test_reads_original_program_queries(original_db):
    db, _ = original_db
    with TiraStore(db, cpu_model="Original CPU") as s:
        recs = s.get_program_records("a", ORIG_SRC_A)
        assert [r.schedule for r in recs] == [
            oracle_normalize_schedule(row[2]) for row in ORIGINAL_ROWS[:5]
        ]
        assert all(isinstance(r, LookupResult) for r in recs)
        assert math.isnan(recs[3].execution_times[0])
        assert s.get_program_source("ü") == [
            {"program_hash": oracle_program_hash(ORIG_SRC_U), "source_code": ORIG_SRC_U}
        ]


def test_cosmetic_variants_hit_original_records(original_db):
    db, _ = original_db
    with TiraStore(db, cpu_model="Original CPU") as s:
        variant = "void a(){int x=0;}  // reformatted"
        r = s.lookup("a", variant, "S( L0 , L1 , 4 , 8 , comps = [ \"c1\" ] )")
        assert r is not None and r.execution_times == [1]


def test_writes_into_original_database(original_db):
    db, keys = original_db
    before_rows = raw_records(db)
    with TiraStore(db, cpu_model="Original CPU", source_project="new") as s:
        assert s.record("a", ORIG_SRC_A, SCHED_S, True, [9.0]) is False  # exists
        assert s.record("a", ORIG_SRC_A, "U(L0,2,comps=['c1'])", True, [0.5]) is True
        assert s.record("c", "void c(){}", SCHED_R, False) is True
        assert s.count() == len(ORIGINAL_ROWS) + 2
    after = raw_records(db)
    for k, row in before_rows.items():
        assert after[k] == row  # untouched
    new_key = expected_key(ORIG_SRC_A, "U(L0,2,comps=['c1'])")
    assert after[new_key]["result_json"] == '{"is_legal":true,"execution_times":[0.5]}'
    assert after[new_key]["program_hash"] == oracle_program_hash(ORIG_SRC_A)
    assert raw_programs(db)[oracle_program_hash("void c(){}")]["program_name"] == "c"
    assert leftover_lock_files(db.parent) == []


def test_original_overwrite_keeps_creation_date(original_db):
    db, keys = original_db
    with TiraStore(db, cpu_model="Original CPU", source_project="new") as s:
        assert s.record("a", ORIG_SRC_A, SCHED_S, False, None, overwrite=True) is True
        r = s.lookup("a", ORIG_SRC_A, SCHED_S)
        assert r.creation_date == ORIGINAL_ROWS[0][6]
        assert r.update_date > r.creation_date
        assert r.source_project == "new"
        assert r.is_legal is False and r.execution_times is None


def test_original_db_cpu_mismatch(original_db, capfd):
    db, _ = original_db
    capfd.readouterr()
    # The original printed the banner to stdout; the same text is a warning here.
    with pytest.warns(TiraStoreWarning, match="CPU metadata mismatch"):
        s = TiraStore(db, cpu_model="Some Other CPU")
    with s:
        assert capfd.readouterr().out == ""
        assert s.writes_allowed is False
        assert s.lookup("a", ORIG_SRC_A, SCHED_S).execution_times == [1]


def test_stats_on_original_db_without_non_finite(tmp_path):
    db = tmp_path / "o.db"
    create_original_db(db, cpu_model="C", slurm_cpus="2")
    original_insert(db, "a", ORIG_SRC_A, SCHED_S, '{"is_legal":true,"execution_times":[1]}',
                    username="u1", source_project="p1")
    original_insert(db, "a", ORIG_SRC_A, SCHED_R, '{"is_legal":false,"execution_times":null}',
                    username="u2", source_project="p2",
                    creation_date="2026-02-21T15:30:13+00:00")
    with TiraStore(db, cpu_model="C", slurm_cpus="2") as s:
        st = s.stats()
        assert st["total_records"] == 2
        assert st["legal_records"] == 1
        assert st["illegal_records"] == 1
        assert st["total_programs"] == 1
        assert sorted(st["users"]) == ["u1", "u2"]
        assert sorted(st["source_projects"]) == ["p1", "p2"]
        assert st["cpu_model"] == "C" and st["slurm_cpus"] == "2"


def test_export_of_original_db(tmp_path):
    db = tmp_path / "o.db"
    create_original_db(db)
    original_insert(db, "a", ORIG_SRC_A, SCHED_S,
                    '{"is_legal":true,"execution_times":[1,1.0,1e-05]}',
                    creation_date="2026-02-21T15:30:12+00:00")
    original_insert(db, "a", ORIG_SRC_A, SCHED_R, '{"is_legal":false,"execution_times":null}',
                    creation_date="2026-02-21T15:30:13+00:00")
    with TiraStore(db, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM) as s:
        out = s.export(tmp_path / "o.json")
    expected = {
        "a": {
            "Tiramisu_cpp": ORIG_SRC_A,
            "schedules_list": [
                {"schedule_str": SCHED_S, "is_legal": True, "execution_times": [1, 1.0, 1e-05]},
                {"schedule_str": SCHED_R, "is_legal": False, "execution_times": None},
            ],
            "program_name": "a",
        }
    }
    assert out.read_text(encoding="utf-8") == json.dumps(expected, indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------
# (2) what tirastore writes
# ---------------------------------------------------------------------------

EXPECTED_COLUMNS = {
    # name: [(cid, name, type, notnull, dflt_value, pk)]
    "db_meta": [
        (0, "key", "TEXT", 0, None, 1),
        (1, "value", "TEXT", 1, None, 0),
    ],
    "programs": [
        (0, "program_hash", "TEXT", 0, None, 1),
        (1, "program_name", "TEXT", 1, None, 0),
        (2, "source_code", "TEXT", 1, None, 0),
    ],
    "records": [
        (0, "key", "TEXT", 0, None, 1),
        (1, "program_hash", "TEXT", 1, None, 0),
        (2, "schedule", "TEXT", 1, None, 0),
        (3, "result_json", "TEXT", 1, None, 0),
        (4, "hostname", "TEXT", 1, None, 0),
        (5, "username", "TEXT", 1, None, 0),
        (6, "creation_date", "TEXT", 1, None, 0),
        (7, "update_date", "TEXT", 1, None, 0),
        (8, "source_project", "TEXT", 1, "''", 0),
    ],
}


def _table_info(db: Path, table: str) -> list[tuple]:
    conn = sqlite3.connect(str(db))
    try:
        return [tuple(r) for r in conn.execute(f"PRAGMA table_info({table})").fetchall()]
    finally:
        conn.close()


def _reference_schema(tmp_path: Path) -> Path:
    ref = tmp_path / "reference_schema.db"
    create_original_db(ref)
    return ref


def test_written_db_schema_matches_original(store, db_path, tmp_path):
    store.record("blur", SRC_BLUR, SCHED_S, True, [0.042, 1e-05, 1234567.0])
    tables = {
        r["name"]
        for r in raw_query(db_path, "SELECT name FROM sqlite_master WHERE type='table'")
        if not r["name"].startswith("sqlite_")
    }
    # The original's tables, and this engine's runs tables, which the
    # original's readers and writers never name.
    assert tables == {"db_meta", "programs", "records", "record_runs", "record_run_batches", "run_contexts"}
    ref = _reference_schema(tmp_path)
    for t, cols in EXPECTED_COLUMNS.items():
        assert _table_info(db_path, t) == cols, t
        assert _table_info(ref, t) == cols, t  # self-check of the expectation
    conn = sqlite3.connect(str(db_path))
    try:
        fks = conn.execute("PRAGMA foreign_key_list(records)").fetchall()
        assert [(r[2], r[3], r[4]) for r in fks] == [("programs", "program_hash", "program_hash")]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "delete"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # no views or triggers an old reader would not expect
        others = conn.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('view','trigger')"
        ).fetchall()
        assert others == []
    finally:
        conn.close()
    assert not Path(str(db_path) + "-wal").exists()
    assert not Path(str(db_path) + "-shm").exists()


def test_written_db_meta(make_store, db_path):
    before = datetime.now().astimezone()
    s = make_store(db_path, cpu_model="Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", slurm_cpus="8")
    meta = raw_meta(db_path)
    assert meta["schema_version"] == "2"
    assert meta["cpu_model"] == "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"
    assert meta["slurm_cpus"] == "8"
    assert ISO_UTC_RE.match(meta["created_at"]), meta["created_at"]
    created = datetime.fromisoformat(meta["created_at"])
    assert abs((created - before).total_seconds()) < 60
    assert s.stats()["cpu_model"] == "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"


def test_written_keys_and_values(store, db_path):
    cases = [
        ("blur", SRC_BLUR, 'S( L0 , L1 , 4 , 8 , comps = ["c1"] )', True, [0.042, 1e-05, 1234567.0]),
        ("blur", SRC_BLUR, "I(L0,L1,comps=[c1, 'c2'])", False, None),
        ("ünï", "void ü() { puts(\"日本語 😀\"); /* ç */ }\u3000", "R(L0,comps=['é😀<>&/\"\\\x7f\x01'])",
         True, [1, 2.5]),
        ("emoji", "int main(){return 0;} // 😀", "T3(L\u0661,L1,L2,4,\u0664,4,comps=[c])", True, [3.0]),
        ("empty", "", "", False, []),
    ]
    for name, src, sched, legal, times in cases:
        assert store.record(name, src, sched, legal, times) is True
    rows = raw_records(db_path)
    progs = raw_programs(db_path)
    assert len(rows) == len(cases)
    for name, src, sched, legal, times in cases:
        key = expected_key(src, sched)
        assert key in rows, (name, sched)
        row = rows[key]
        assert row["schedule"] == oracle_normalize_schedule(sched)
        assert row["program_hash"] == oracle_program_hash(src)
        assert row["result_json"] == expected_result_json(legal, times)
        assert progs[oracle_program_hash(src)]["source_code"] == src
        assert progs[oracle_program_hash(src)]["program_name"] == name
        # the original reader can parse what was written
        parsed = json.loads(row["result_json"])
        assert list(parsed) == ["is_legal", "execution_times"]


def test_key_canonical_json_escaping(store, db_path):
    # characters that the canonical JSON must escape as \uXXXX / surrogate pairs
    sched = "R(L0,comps=['é😀<>&/\"\\\x7f\x01\u2028'])"
    store.record("x", "int x;", sched, False)
    norm = oracle_normalize_schedule(sched)
    assert "\u2028" not in norm  # U+2028 is whitespace and is removed
    blob = '{"program_hash":"%s","tiralib_schedule_string":"%s"}' % (
        oracle_program_hash("int x;"),
        "R(L0,comps=['\\u00e9\\ud83d\\ude00<>&/\\\"\\\\\\u007f\\u0001'])",
    )
    import hashlib

    assert hashlib.sha256(blob.encode()).hexdigest() == expected_key("int x;", sched)
    assert list(raw_records(db_path)) == [expected_key("int x;", sched)]


def test_db_file_mode_and_parent_dir(tmp_path):
    old = os.umask(0o022)
    try:
        db = tmp_path / "new" / "sub" / "cache.db"
        s = TiraStore(db, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM)
        s.close()
    finally:
        os.umask(old)
    assert db.exists()
    assert stat.S_IMODE(db.stat().st_mode) == 0o666
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o1777
    assert leftover_lock_files(db.parent) == []


@pytest.mark.parametrize("mode", [0o755, 0o2770, 0o777])
def test_existing_parent_dir_keeps_its_mode(tmp_path, mode):
    """COMPAT's 1777 is only for a directory the library creates: an existing
    directory keeps its mode, and when other users could not create lock ticket
    files in it and the caller asked to share (shared=True), one
    TiraStoreWarning (a RuntimeWarning) names it; unasked, a personal
    database's directory is no news. (Negative control: a directory
    the library creates does get 1777, test_db_file_mode_and_parent_dir.)"""
    d = tmp_path / "project"
    d.mkdir()
    os.chmod(d, mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TiraStore(d / "mine.db", cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM).close()  # not asked: silent
        TiraStore(d / "cache.db", cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM, shared=True).close()
        TiraStore(d / "cache.db", cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM, shared=True).close()  # not created
    assert stat.S_IMODE(d.stat().st_mode) == mode
    about = [w for w in caught if "does not let other users" in str(w.message)]
    if mode & 0o002:
        assert about == []
    else:
        assert len(about) == 1 and about[0].category is TiraStoreWarning, [str(w.message) for w in caught]
        assert issubclass(TiraStoreWarning, RuntimeWarning)
        assert str(d) in str(about[0].message) and f"{mode:04o}" in str(about[0].message)


def test_open_existing_does_not_rewrite_meta(tmp_path):
    db = tmp_path / "cache.db"
    create_original_db(db, cpu_model="C1", slurm_cpus="2", created_at="2020-01-01T00:00:00+00:00")
    with TiraStore(db, cpu_model="C1", slurm_cpus="2") as s:
        s.record("a", "int a;", SCHED_R, False)
    meta = raw_meta(db)
    for k, v in {
        "schema_version": "2",
        "cpu_model": "C1",
        "slurm_cpus": "2",
        "created_at": "2020-01-01T00:00:00+00:00",
    }.items():
        assert meta[k] == v, k


@pytest.mark.parametrize(
    "stored, legal, times",
    [
        # other spellings a Python json.loads reader accepts
        ('{"is_legal": true, "execution_times": [1.0, 2]}', True, [1.0, 2]),
        ('{"execution_times":[1.5],"is_legal":true}', True, [1.5]),
        ('{"is_legal":true,"execution_times":[1E5,1e+5,-0,-0.0,1.0e-5]}', True,
         [100000.0, 100000.0, 0, -0.0, 1e-05]),
        ('{"is_legal":true,"execution_times":[12345678901234567890123]}', True,
         [12345678901234567890123]),
        ('{"is_legal":false}', False, None),
        (' {"is_legal":true,"execution_times":[1]}\n', True, [1]),
    ],
)
def test_reads_lenient_result_json(tmp_path, stored, legal, times):
    db = tmp_path / "o.db"
    create_original_db(db)
    original_insert(db, "a", "int a;", SCHED_R, stored)
    with TiraStore(db, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM) as s:
        r = s.lookup("a", "int a;", SCHED_R)
        assert r.is_legal is legal
        assert _same_times(r.execution_times, times), r.execution_times
        if times:
            assert [math.copysign(1, x) for x in r.execution_times] == [
                math.copysign(1, x) for x in times
            ]
