"""export() byte-exactness and backup() (docs/api.md + docs/COMPAT.md)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import (
    ON_PG,
    RECORD_COLUMNS,
    leftover_lock_files,
    sqlite_only,
    SCHED_I,
    SCHED_R,
    SCHED_S,
    SRC_BLUR,
    TEST_CPU,
    TEST_SLURM,
    oracle_normalize_schedule,
    oracle_program_hash,
    raw_query,
)

from tirastore import TiraStore


def _populate(store):
    """Record a varied data set; return the expected export dict (spec algorithm)."""
    progs = []  # (name, source, [(schedule, is_legal, times), ...]) in recording order
    blur_a = "void blur() { int a = 1; }"
    blur_b = "void blur() { int b = 2; /* v2 */ }"
    abc = "// café\n#include <x.h>\nvoid abc() { puts(\"日本 😀\"); }\n"
    zeta = "void zeta() {}"
    upper = "void Upper() {}"
    emile = "void émile() {}"
    plan = [
        ("blur", blur_a, SCHED_S, True, [0.04, 1e-05, 1234567.0, 3]),
        ("zeta", zeta, SCHED_R, False, None),
        ("blur", blur_b, 'I( L0, L1, comps=["c1"])', False, []),
        ("abc", abc, "R(L0,comps=['ç'])", True, [1.0, 2]),
        ("blur", blur_a, SCHED_I, False, None),
        ("Upper", upper, "T2(L0,L1,32,32,comps=[c])", True, [0.5]),
        ("émile", emile, "U(L1,8,comps=['é'])", True, [1e16, -0.0]),
        ("zeta", zeta, "F(L0,comps=[a,b])", True, [0.1]),
    ]
    for name, src, sched, legal, times in plan:
        assert store.record(name, src, sched, legal, times) is True
        time.sleep(0.002)  # distinct creation dates

    # the spec's algorithm, written out independently
    by_prog: dict[tuple[str, str], dict] = {}
    for name, src, sched, legal, times in plan:
        h = oracle_program_hash(src)
        by_prog.setdefault((name, h), {"name": name, "src": src, "records": []})
        by_prog[(name, h)]["records"].append(
            {
                "schedule_str": oracle_normalize_schedule(sched),
                "is_legal": legal,
                "execution_times": None if times is None else list(times),
            }
        )
    ordered = [by_prog[k] for k in sorted(by_prog)]
    name_counts: dict[str, int] = {}
    for p in ordered:
        name_counts[p["name"]] = name_counts.get(p["name"], 0) + 1
    seen: dict[str, int] = {}
    out: dict[str, dict] = {}
    for p in ordered:
        n = p["name"]
        if name_counts[n] > 1:
            seen[n] = seen.get(n, 0) + 1
            key = f"{n}_v{seen[n]}"
        else:
            key = n
        out[key] = {
            "Tiramisu_cpp": p["src"],
            "schedules_list": p["records"],
            "program_name": n,
        }
    return out


def test_export_json_exact_bytes(store, tmp_path):
    expected = _populate(store)
    assert list(expected)[:3] == ["Upper", "abc", "blur_v1"]  # binary name order
    assert "blur_v2" in expected and "blur" not in expected
    out = store.export(tmp_path / "dataset.json", fmt="json")
    assert isinstance(out, Path)
    assert out == (tmp_path / "dataset.json").resolve()
    want = json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
    got = out.read_bytes()
    assert got == want.encode("utf-8")


def test_export_json_is_default_format(store, tmp_path):
    expected = _populate(store)
    out = store.export(tmp_path / "d.json")
    assert out.read_text(encoding="utf-8") == json.dumps(expected, indent=2, ensure_ascii=False) + "\n"


def test_export_jsonl_exact_bytes(store, tmp_path):
    expected = _populate(store)
    out = store.export(str(tmp_path / "dataset.jsonl"), fmt="jsonl")
    assert isinstance(out, Path)
    want = "".join(json.dumps({k: v}, ensure_ascii=False) + "\n" for k, v in expected.items())
    assert out.read_bytes() == want.encode("utf-8")
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(expected)


def test_export_v_suffix_follows_program_hash_order(store, tmp_path):
    srcs = [f"void blur() {{ return {i}; }}" for i in range(4)]
    for s in srcs:
        store.record("blur", s, SCHED_R, True, [1.0])
    data = json.loads(store.export(tmp_path / "x.json").read_text(encoding="utf-8"))
    assert list(data) == ["blur_v1", "blur_v2", "blur_v3", "blur_v4"]
    by_hash = sorted(srcs, key=oracle_program_hash)
    assert [data[f"blur_v{i + 1}"]["Tiramisu_cpp"] for i in range(4)] == by_hash
    assert all(v["program_name"] == "blur" for v in data.values())


def test_export_value_key_order(store, tmp_path):
    store.record("blur", SRC_BLUR, SCHED_S, True, [0.04])
    text = store.export(tmp_path / "x.json").read_text(encoding="utf-8")
    data = json.loads(text)
    assert list(data["blur"]) == ["Tiramisu_cpp", "schedules_list", "program_name"]
    assert list(data["blur"]["schedules_list"][0]) == ["schedule_str", "is_legal", "execution_times"]


def test_export_empty_db(store, tmp_path):
    assert store.export(tmp_path / "e.json").read_bytes() == b"{}\n"
    assert store.export(tmp_path / "e.jsonl", fmt="jsonl").read_bytes() == b""


def test_export_program_without_records(store, tmp_path):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    store.delete(store.keys()[0])
    data = json.loads(store.export(tmp_path / "x.json").read_text(encoding="utf-8"))
    assert data == {"blur": {"Tiramisu_cpp": SRC_BLUR, "schedules_list": [], "program_name": "blur"}}


def test_export_overwrites_existing_file(store, tmp_path):
    target = tmp_path / "x.json"
    target.write_text("old content that is much longer than the new export " * 10)
    store.export(target)
    assert target.read_bytes() == b"{}\n"


def test_export_relative_path_resolved(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = store.export("rel.json")
    assert out == (tmp_path / "rel.json").resolve()
    assert out.is_absolute() and out.exists()


@pytest.mark.parametrize("fmt", ["xml", "JSON", "Jsonl", "", "csv", " json"])
def test_export_bad_format(store, tmp_path, fmt):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    target = tmp_path / "bad.out"
    with pytest.raises(ValueError):
        store.export(target, fmt=fmt)
    assert not target.exists()
    assert store.count() == 1


# ---------------------------------------------------------------------------
# backup
# ---------------------------------------------------------------------------


def _dump(db) -> dict[str, list]:
    """The rows of the original's tables, on either backend (a server's own
    db_meta row, postgres_schema, and its records.rowid left out)."""
    if not (isinstance(db, str) and db.startswith("postgresql://")):
        conn = sqlite3.connect(str(db))
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
    cols = {"db_meta": "key, value", "programs": "program_hash, program_name, source_code",
            "records": ", ".join(RECORD_COLUMNS)}
    return {
        t: sorted(tuple(r.values()) for r in raw_query(db, f"SELECT {c} FROM {t}") if r.get("key") != "postgres_schema")
        for t, c in cols.items()
    }


@pytest.fixture
def bk_cleanup():
    made = []
    yield made
    for p in made:
        p.unlink(missing_ok=True)


def test_backup_default_path(store, db_path, bk_cleanup):
    store.record_many(
        "blur",
        SRC_BLUR,
        [
            {"tiralib_schedule_string": SCHED_S, "is_legal": True, "execution_times": [0.04]},
            {"tiralib_schedule_string": SCHED_I, "is_legal": False, "execution_times": None},
        ],
    )
    before = datetime.now(timezone.utc).replace(microsecond=0)
    bk = store.backup()
    after = datetime.now(timezone.utc)
    assert isinstance(bk, Path)
    if ON_PG:  # beside nothing: in the working directory, named after the database
        assert bk.parent == Path.cwd()
        m = re.fullmatch(r"tira_(\d{8}T\d{6}Z)\.db", bk.name)
        bk_cleanup.append(bk)
    else:
        assert bk.parent == db_path.resolve().parent
        m = re.fullmatch(r"cache_(\d{8}T\d{6}Z)\.db", bk.name)
    assert m, bk.name
    ts = datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    assert before <= ts <= after
    assert bk.exists()
    assert _dump(bk) == _dump(db_path)


def test_backup_default_name_uses_stem(make_store, tmp_path):
    s = make_store(tmp_path / "data.sqlite")
    bk = s.backup()
    assert re.fullmatch(r"data_\d{8}T\d{6}Z\.db", bk.name), bk.name
    assert bk.parent == tmp_path.resolve()


@pytest.mark.parametrize("as_str", [True, False])
def test_backup_custom_path(store, db_path, tmp_path, as_str):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0, 2])
    target = tmp_path / "sub_backup.db"
    bk = store.backup(str(target) if as_str else target)
    assert isinstance(bk, Path)
    assert bk == target.resolve()
    assert _dump(bk) == _dump(db_path)


def test_backup_relative_path_resolved(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bk = store.backup("rel_backup.db")
    assert bk == (tmp_path / "rel_backup.db").resolve()
    assert bk.exists()


def test_backup_is_usable_store(store, tmp_path):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0, 2])
    bk = store.backup(tmp_path / "bk.db")
    store.record("blur", SRC_BLUR, SCHED_S, True, [3.0])  # after the snapshot
    with TiraStore(bk, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM) as b:
        assert b.writes_allowed is True
        assert b.count() == 1
        assert b.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [1.0, 2]
        assert b.lookup("blur", SRC_BLUR, SCHED_S) is None
    assert raw_query(bk, "SELECT value FROM db_meta WHERE key='cpu_model'") == [{"value": TEST_CPU}]


# ---------------------------------------------------------------------------
# filesystem errors: the original raised what open() / shutil.copy2 raise
# ---------------------------------------------------------------------------


def test_export_to_missing_directory_raises_file_not_found(store, tmp_path):
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    with pytest.raises(FileNotFoundError):
        store.export(tmp_path / "no_such_dir" / "x.json")
    assert store.count() == 1
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".lock_")) == ([] if ON_PG else ["cache.db"])
    assert leftover_lock_files(tmp_path) == []


def test_backup_creates_a_missing_directory(store, tmp_path):
    """Unlike the original (shutil.copy2 raised FileNotFoundError), a backup
    creates its directory, as opening a database does."""
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    out = store.backup(tmp_path / "no_such_dir" / "deeper" / "x.db")
    assert out == tmp_path / "no_such_dir" / "deeper" / "x.db"
    assert sqlite3.connect(out).execute("SELECT COUNT(*) FROM records").fetchone() == (1,)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(NotADirectoryError):
        store.backup(tmp_path / "a_file" / "x.db")
    assert store.count() == 1
    assert leftover_lock_files(tmp_path) == []


def test_export_non_finite_values_from_original_db(tmp_path):
    """The original's json.dump writes NaN/Infinity tokens; so must export."""
    import math

    from conftest import create_original_db, original_insert

    db = tmp_path / "o.db"
    create_original_db(db)
    original_insert(db, "a", "int a;", SCHED_R,
                    '{"is_legal":true,"execution_times":[NaN,Infinity,-Infinity,1]}')
    expected = {
        "a": {
            "Tiramisu_cpp": "int a;",
            "schedules_list": [
                {"schedule_str": SCHED_R, "is_legal": True,
                 "execution_times": [math.nan, math.inf, -math.inf, 1]}
            ],
            "program_name": "a",
        }
    }
    with TiraStore(db, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM) as s:
        j = s.export(tmp_path / "o.json")
        jl = s.export(tmp_path / "o.jsonl", fmt="jsonl")
    assert j.read_text(encoding="utf-8") == json.dumps(expected, indent=2, ensure_ascii=False) + "\n"
    assert jl.read_text(encoding="utf-8") == json.dumps(expected, ensure_ascii=False) + "\n"


@sqlite_only
def test_a_result_that_is_not_json_is_skipped_and_reported(tmp_path):
    """One record whose result_json is not JSON and one whose is JSON but
    not an object (any writer of a 0666 database can plant them) do not
    make stats and export fail for the whole database: stats counts them
    in total_records only, export leaves them out, and both say so with a
    TiraStoreWarning naming the same count; so does the command line, which
    exits 0."""
    import subprocess
    import sys
    import warnings

    from tirastore import TiraStoreWarning

    db = tmp_path / "c.db"
    with TiraStore(db, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM) as s:
        for i, legal in enumerate((True, False, True, True)):
            s.record("p", "void f(){}", f"U(L0,{i + 2},comps=['c'])", legal, [float(i)] if legal else None)
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE records SET result_json = '{not json' WHERE schedule = ?", ("U(L0,4,comps=['c'])",))
        con.execute("UPDATE records SET result_json = '[1, 2]' WHERE schedule = ?", ("U(L0,5,comps=['c'])",))
    con.close()
    with TiraStore(db, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM) as s:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            st = s.stats()
            out = s.export(tmp_path / "e.json")
    assert (st["total_records"], st["legal_records"], st["illegal_records"]) == (4, 1, 1), st
    assert [w.category for w in caught] == [TiraStoreWarning, TiraStoreWarning], caught
    assert all("2 record(s)" in str(w.message) and str(db) in str(w.message) for w in caught), caught
    assert caught[0].filename == __file__, "the warning points at the caller's line"
    exported = json.loads(out.read_text())
    assert [x["schedule_str"] for x in exported["p"]["schedules_list"]] == ["U(L0,2,comps=['c'])",
                                                                           "U(L0,3,comps=['c'])"]
    for args in (["stats", str(db)], ["export", str(db), str(tmp_path / "c.json")]):
        r = subprocess.run([sys.executable, "-m", "tirastore", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "warning: 2 record(s)" in r.stderr, (args, r.stdout, r.stderr)


def test_export_with_runs_carries_each_run_and_its_context_through_import(tmp_path):
    """export(runs=True) and `tirastore export --runs` write the same file:
    each schedule with its runs (times, run context, fingerprint, load,
    date; an illegal one's run has no time, only where it was judged);
    `tirastore import` of it gives the new database the same runs().
    A plain export carries none (the original's format): imported, the
    record has one run without a context, as a record the original wrote."""
    import subprocess
    import sys

    a, sched = tmp_path / "a.db", "U(L0,2,comps=['c'])"
    with TiraStore(a, cpu_model=TEST_CPU, tools={"gcc": "13.2"}) as s:
        s.record("blur", "void f() {}", sched, True, [0.04, 0.041])
        s.record("blur", "void f() {}", "U(L0,3,comps=['c'])", False, None)
        expected = s.runs("blur", "void f() {}", sched)
        with_runs = s.export(tmp_path / "runs.json", runs=True)
        plain = s.export(tmp_path / "plain.json")
    cli = tmp_path / "cli.json"
    r = subprocess.run([sys.executable, "-m", "tirastore", "export", str(a), str(cli), "--runs"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and cli.read_bytes() == with_runs.read_bytes(), r.stderr
    [timed, illegal] = json.loads(with_runs.read_text())["blur"]["schedules_list"]
    assert [run["context"]["tools"] for run in timed["runs"]] == [{"gcc": "13.2"}], timed
    assert [(run["count"], run["context"]["tools"]) for run in illegal["runs"]] == [(0, {"gcc": "13.2"})], illegal
    assert all("runs" not in x for x in json.loads(plain.read_text())["blur"]["schedules_list"])
    for source, db in ((with_runs, tmp_path / "b.db"), (plain, tmp_path / "p.db")):
        r = subprocess.run([sys.executable, "-m", "tirastore", "import", str(db), str(source),
                            "--allow-cpu-mismatch"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    with TiraStore(tmp_path / "b.db") as s:  # made by the command: this machine's CPU
        assert s.runs("blur", "void f() {}", sched) == expected
    with TiraStore(tmp_path / "p.db") as s:
        [run] = s.runs("blur", "void f() {}", sched)
    assert (run["times"], run["context"], run["fingerprint"]) == ([0.04, 0.041], None, ""), run


def test_export_onto_a_directory_raises_is_a_directory(store, tmp_path):
    with pytest.raises(IsADirectoryError):
        store.export(tmp_path)


@sqlite_only
def test_backup_onto_the_database_itself_is_refused(store):
    with pytest.raises(ValueError, match="database itself"):
        store.backup(store.db_path)
    assert store.count() == 0


WRITER = """
import sys
from tirastore import TiraStore
db, w, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with TiraStore(db, cpu_model=sys.argv[4], allow_cpu_mismatch=True) as s:
    for i in range(n):
        s.record(f"writer{w}", f"void w{w}() {{}}", f"S(L0,L1,{i + 1},8,comps=['c1'])", True, [float(i)])
"""


def _written_since(db, mtime_ns: int, timeout: float) -> bool:
    """Waits until db's file is modified after mtime_ns (a writer's commit
    reached it), for at most timeout seconds; True if it was."""
    deadline = time.monotonic() + timeout
    while os.stat(db).st_mtime_ns == mtime_ns:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _backups_while_four_write(tmp_path, take) -> list:
    """Backups taken by take(path) while 4 processes record, one record per
    transaction, on a database big enough for several backup steps; returns
    what is wrong with each backup (nothing, if it is a valid database holding
    for every writer a prefix of its records: a copy spanning commits shows a
    gap, a torn page or a broken index)."""
    import subprocess
    import sys

    from conftest import TEST_CPU

    db = tmp_path / "cache.db"
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        # More than 1,024 pages (several steps).
        s.record_many("ballast", "void ballast() {}", [
            {"tiralib_schedule_string": f"S(L0,L1,{i},4,comps=['c1'])", "is_legal": True,
             "execution_times": [float(i)] * 40} for i in range(1, 12001)])
    assert db.stat().st_size > 1024 * 4096
    before = os.stat(db).st_mtime_ns
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(w), "150", TEST_CPU]) for w in range(4)]
    backups = []
    try:
        # Backups taken before the first commit would prove nothing.
        assert _written_since(db, before, 120), "no writer wrote within 120 s"
        while any(p.poll() is None for p in writers) and len(backups) < 8:
            backups.append(tmp_path / f"b{len(backups)}.db")
            take(db, backups[-1])
    finally:
        for p in writers:
            assert p.wait(timeout=300) == 0
    assert backups
    wrong = []
    for b in backups:
        try:
            con = sqlite3.connect(b)
            if (ic := con.execute("PRAGMA integrity_check").fetchall()) != [("ok",)]:
                wrong.append(f"{b.name}: integrity_check {ic[:3]}")
                continue
            for w in range(4):
                rows = con.execute(
                    "SELECT r.schedule FROM records r JOIN programs p USING (program_hash) WHERE p.program_name = ?",
                    (f"writer{w}",)).fetchall()
                got = sorted(int(s[0].split(",")[2]) for s in rows)
                if got != list(range(1, len(got) + 1)):
                    wrong.append(f"{b.name}: writer{w} has {got[:10]}...")
            if (n := con.execute("SELECT COUNT(*) FROM records WHERE schedule LIKE '%,4,comps%'").fetchone()) != (12000,):
                wrong.append(f"{b.name}: {n} ballast records")
        except sqlite3.DatabaseError as e:
            wrong.append(f"{b.name}: {e}")
        finally:
            con.close()
    return wrong


def test_backup_while_four_processes_write_is_consistent(tmp_path):
    """Backups taken in steps (the lock released between them) while 4
    processes record are valid databases holding a prefix of every writer's
    records."""
    from conftest import TEST_CPU

    def backup(db, path):
        with TiraStore(db, cpu_model=TEST_CPU) as s:
            s.backup(path)

    assert _backups_while_four_write(tmp_path, backup) == []


def test_negative_control_a_copy_in_steps_without_the_lock_is_caught(tmp_path):
    """The same backups taken as a copy of the file in 4 MiB steps with the
    writers' pace between them, neither under the lock nor restarted after a
    write (as `cp` during writes, or a backup step outside the lock, would):
    the checks above find at least one of them wrong. Each step waits for
    a commit (up to 2 s), so that every copy spans writes however slowly
    the writers run on a busy machine."""

    def raw_copy(db, path):
        with open(db, "rb") as src, open(path, "wb") as dst:
            while True:
                seen = os.fstat(src.fileno()).st_mtime_ns
                if not (chunk := src.read(1024 * 4096)):
                    break
                dst.write(chunk)
                _written_since(db, seen, 2)

    assert _backups_while_four_write(tmp_path, raw_copy) != []
