"""Censored results: a run stopped at its time limit, a schedule that did
not compile. Each is told apart from an illegal schedule by this library,
read sensibly by the original's workers (which see only is_legal and
execution_times), carried by export, import and merge, and counted by
`tirastore stats`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ON_PG, TEST_CPU, create_original_db, original_insert, raw_records, sqlite_only

PROG = "void blur() { /* ... */ }"
T = "R(L0,comps=['c1'])"
U = "U(L0,4,comps=['c1'])"
P = "P(L0,comps=['c1'])"


def tirastore_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tirastore", *args], capture_output=True, text=True, timeout=120)


def test_a_timeout_is_a_lower_bound(store):
    assert store.record("blur", PROG, T, True, censored="timeout", timed_out_after=30)
    r = store.lookup("blur", PROG, T)
    assert (r.is_legal, r.execution_times, r.censored, r.timed_out_after) == (True, [30], "timeout", 30)
    assert r.stats.lower_bound and r.median == 30 and r.count == 1
    assert r.stable is None  # a bound has no noise to judge
    assert r.to_dict()["execution_times"] == [30]  # the original's keys only


def test_a_compile_failure_is_not_an_illegal_schedule(store):
    assert store.record("blur", PROG, U, False, censored="compile_failure")
    assert store.record("blur", PROG, P, False, None)
    failed, illegal = store.lookup("blur", PROG, U), store.lookup("blur", PROG, P)
    assert (failed.is_legal, failed.execution_times, failed.censored) == (False, None, "compile_failure")
    assert (illegal.is_legal, illegal.censored) == (False, None)
    assert failed.stats is None and failed.timed_out_after is None


@pytest.mark.parametrize("is_legal, kwargs, exc, says", [
    (False, dict(censored="timeout", timed_out_after=3), ValueError, "is_legal True"),
    (True, dict(censored="timeout", timed_out_after=3, execution_times=[1.0]), ValueError, "no execution_times"),
    (True, dict(censored="timeout"), ValueError, "needs timed_out_after"),
    (True, dict(censored="timeout", timed_out_after=-1), ValueError, "positive"),
    (True, dict(censored="timeout", timed_out_after=float("inf")), ValueError, "finite"),
    (True, dict(censored="timeout", timed_out_after="3"), TypeError, "timed_out_after must be int or float"),
    (True, dict(censored="crashed"), ValueError, "'timeout' or 'compile_failure'"),
    (True, dict(censored=1), TypeError, "censored must be str or None"),
    (True, dict(censored="compile_failure"), ValueError, "is_legal False"),
    (True, dict(execution_times=[1.0], timed_out_after=3), ValueError, "only with censored='timeout'"),
])
def test_a_censored_result_that_does_not_fit_is_refused(store, is_legal, kwargs, exc, says):
    times = kwargs.pop("execution_times", None)
    with pytest.raises(exc, match=says):
        store.record("blur", PROG, T, is_legal, times, **kwargs)
    assert store.lookup("blur", PROG, T) is None


def test_record_many_takes_censored_entries_and_names_a_bad_one(store):
    good = [
        {"tiralib_schedule_string": T, "is_legal": True, "execution_times": None, "censored": "timeout", "timed_out_after": 2.5},
        {"tiralib_schedule_string": U, "is_legal": False, "execution_times": None, "censored": "compile_failure"},
    ]
    bad = good + [{"tiralib_schedule_string": P, "is_legal": True, "execution_times": None, "censored": "timeout"}]
    with pytest.raises(ValueError, match=r"schedules\[2\]"):
        store.record_many("blur", PROG, bad)
    assert store.lookup("blur", PROG, T) is None  # all or nothing
    assert store.record_many("blur", PROG, good) == 2
    assert [store.lookup("blur", PROG, s).censored for s in (T, U)] == ["timeout", "compile_failure"]


def test_a_claim_records_a_timeout_and_it_is_a_hit_never_remeasured(store):
    c = store.lookup_or_claim("blur", PROG, T)
    assert c.record(True, censored="timeout", timed_out_after=10.0)
    hit = store.lookup_or_claim("blur", PROG, T, remeasure_unstable=True)
    assert hit.censored == "timeout" and hit.timed_out_after == 10.0


@sqlite_only
def test_the_original_reads_a_censored_record_by_its_two_keys(store, db_path):
    store.record("blur", PROG, T, True, censored="timeout", timed_out_after=30.0)
    store.record("blur", PROG, U, False, censored="compile_failure")
    rows = {r["schedule"]: r["result_json"] for r in raw_records(db_path).values()}
    assert rows[T] == '{"is_legal":true,"execution_times":[30.0],"censored":"timeout"}'
    assert rows[U] == '{"is_legal":false,"execution_times":null,"censored":"compile_failure"}'
    # The original's reader: json.loads, then its two keys.
    old = {s: json.loads(rj) for s, rj in rows.items()}
    assert (old[T]["is_legal"], old[T]["execution_times"]) == (True, [30.0])  # legal, at least as slow as its limit
    assert (old[U]["is_legal"], old[U]["execution_times"]) == (False, None)  # skipped as illegal


@sqlite_only
def test_a_censored_key_that_does_not_fit_its_record_is_ignored(tmp_path, make_store):
    db = tmp_path / "old.db"
    create_original_db(db, cpu_model=TEST_CPU)
    original_insert(db, "blur", PROG, T, '{"is_legal":true,"execution_times":[1.0,2.0],"censored":"timeout"}')
    original_insert(db, "blur", PROG, U, '{"is_legal":true,"execution_times":[1.0],"censored":"compile_failure"}')
    original_insert(db, "blur", PROG, P, '{"is_legal":false,"execution_times":null,"censored":["timeout"]}')
    s = make_store(db)
    for sched, legal in ((T, True), (U, True), (P, False)):
        r = s.lookup("blur", PROG, sched)
        assert r.is_legal is legal and r.censored is None, sched
    assert s.lookup("blur", PROG, T).stats.lower_bound is False


@sqlite_only
def test_an_original_overwrite_ends_the_censoring(store, db_path):
    store.record("blur", PROG, T, True, censored="timeout", timed_out_after=30.0)
    # The original's overwrite rewrites result_json in its own form.
    import sqlite3
    with sqlite3.connect(str(db_path)) as conn:
        conn.execute("UPDATE records SET result_json = ? WHERE schedule = ?", ('{"is_legal":true,"execution_times":[4.2]}', T))
    r = store.lookup("blur", PROG, T)
    assert (r.censored, r.execution_times, r.stats.lower_bound) == (None, [4.2], False)


@sqlite_only
def test_export_import_and_merge_carry_it(make_store, tmp_path):
    src = make_store(tmp_path / "a.db")
    src.record("blur", PROG, T, True, censored="timeout", timed_out_after=7.5)
    src.record("blur", PROG, U, False, censored="compile_failure")
    src.record("blur", PROG, P, True, [0.5])
    out = src.export(tmp_path / "out.json")
    items = {i["schedule_str"]: i for i in json.loads(out.read_text())["blur"]["schedules_list"]}
    assert items[T]["censored"] == "timeout" and items[T]["execution_times"] == [7.5]
    assert "censored" not in items[P]
    src.close()
    make_store(tmp_path / "b.db").close()  # of the tests' CPU, as the CLI is told to allow
    r = tirastore_cli("import", "--allow-cpu-mismatch", str(tmp_path / "b.db"), str(out))
    assert r.returncode == 0, r.stderr
    b = make_store(tmp_path / "b.db")
    assert (b.lookup("blur", PROG, T).timed_out_after, b.lookup("blur", PROG, U).censored) == (7.5, "compile_failure")
    # A schedule measured in one store and timed out in the other: a
    # conflict, never a bound mixed into the samples.
    c = make_store(tmp_path / "c.db")
    c.record("blur", PROG, T, True, [0.25, 0.26])
    c.close()
    b.close()
    r = tirastore_cli("merge", "--json", "--allow-cpu-mismatch", str(tmp_path / "c.db"), str(tmp_path / "b.db"))
    assert r.returncode == 0, r.stderr
    merged = json.loads(r.stdout)
    assert merged["sources"][0]["conflicts"] == 1, merged
    c = make_store(tmp_path / "c.db")
    assert c.lookup("blur", PROG, T).execution_times == [0.25, 0.26]


@sqlite_only
def test_stats_counts_the_censored_records(store, db_path):
    store.record("blur", PROG, T, True, censored="timeout", timed_out_after=7.5)
    store.record("blur", PROG, U, False, censored="compile_failure")
    store.record("blur", PROG, P, True, [0.5, 0.5])
    r = tirastore_cli("stats", str(db_path))
    assert r.returncode == 0, r.stderr
    assert "1 timed out (their limit a lower bound), 1 failed to compile" in r.stdout
    assert "1 of 1 timed records stable" in r.stdout


@pytest.mark.skipif(ON_PG, reason="checked once")
def test_a_hand_made_result_computes_its_bound():
    from tirastore import LookupResult

    r = LookupResult(True, [3.0], T, "h", "u", "d", "d", "", censored="timeout")
    assert r.stats.lower_bound and r.timed_out_after == 3.0
