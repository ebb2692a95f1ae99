"""TiraStore.lookup's two paths give one answer.

A lookup of a program whose hash the package knows (after one read that
sent the source) goes through tirastore_lookup: texts by length, no JSON
but the result's, as an array. Every other lookup goes through
tirastore_call's JSON. These tests ask both paths the same questions and
compare: results of every stored shape, errors of every kind, threads,
and that the fast path is the one taken when it should be. Runs on both
backends (Makefile, PG_API_TESTS).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from conftest import SCHED_S, SRC_BLUR, ON_PG, create_original_db, original_insert, threads_test_under_shared_replies
from tirastore import LookupResult, _native


def _by_json(store, name, source, schedule):
    """The lookup through tirastore_call, as the package sends it before it knows the hash."""
    found = store._call("lookup", program_name=name, program_source_code=source, tiralib_schedule_string=schedule)
    return None if found is None else LookupResult(**found)


@pytest.fixture
def fast_calls(monkeypatch):
    """Counts the calls of the fast path."""
    calls = []
    real = _native.lookup_by_hash

    def spy(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(_native, "lookup_by_hash", spy)
    return calls


def _same(a, b):
    """LookupResults equal, NaN included, ints and floats told apart."""
    if a is None or b is None:
        return a is b
    da, db = a.to_dict(), b.to_dict()
    ta, tb = da.pop("execution_times"), db.pop("execution_times")
    if da != db or (ta is None) != (tb is None):
        return False
    if ta is None:
        return True
    return len(ta) == len(tb) and all(
        type(x) is type(y) and (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)))
        for x, y in zip(ta, tb)
    )


MEASUREMENTS = [
    ("S(L0,L1,4,8,comps=['c1'])", True, [0.042, 0.039, 0.041]),
    ("I(L0,L1,comps=['c1'])", False, None),
    ("R(L0,comps=['c1'])", True, [1, 2.5, 3]),
    ("U(L0,4,comps=['c1'])", True, [1e308, 1e-300, 12345678901234567890]),
    ("U(L0,8,comps=['c1'])", True, [0.1] * 2000),  # a reply larger than the package's buffer
    ("P(L0,comps=['c1','c2'])", False, []),
]


def test_both_paths_agree_on_every_stored_shape(store, fast_calls):
    for sched, legal, times in MEASUREMENTS:
        assert store.record("blur", SRC_BLUR, sched, legal, times)
    store.lookup("blur", SRC_BLUR, "R(L9,comps=['c1'])")  # a read that sent the source (or had sent it)
    fast_calls.clear()
    for sched, legal, times in MEASUREMENTS:
        spaced = sched.replace(",", " , ").replace("'", '"')
        fast = store.lookup("blur", SRC_BLUR, spaced)
        assert fast is not None and fast.execution_times == times and fast.is_legal is legal
        assert _same(fast, _by_json(store, "blur", SRC_BLUR, spaced)), sched
    assert store.lookup("blur", SRC_BLUR, "R(L8,comps=['c1'])") is None
    assert len(fast_calls) == len(MEASUREMENTS) + 1


def test_the_first_use_of_a_source_sends_it(store, fast_calls):
    """A source's first read, or its first record, sends it (the library
    checks it, the package learns its hash); the reads after it go by
    hash."""
    source = SRC_BLUR + "// a source no other test reads\n"
    assert store.lookup("blur", source, SCHED_S) is None
    assert fast_calls == []
    assert store.lookup("blur", source, SCHED_S) is None
    assert len(fast_calls) == 1
    written = SRC_BLUR + "// a source no other test writes\n"
    store.record("blur", written, SCHED_S, True, [1.0])
    assert len(fast_calls) == 1
    assert store.lookup("blur", written, SCHED_S).execution_times == [1.0]
    assert len(fast_calls) == 2


def test_each_call_returns_a_new_result(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0, 2.0])
    store.lookup("blur", SRC_BLUR, SCHED_S)
    a = store.lookup("blur", SRC_BLUR, SCHED_S)
    a.execution_times.append(3.0)
    a.is_legal = False
    b = store.lookup("blur", SRC_BLUR, SCHED_S)
    assert b.execution_times == [1.0, 2.0] and b.is_legal is True


@pytest.mark.skipif(ON_PG, reason="an original writer's file")
def test_an_original_writers_odd_results(tmp_path, make_store, fast_calls):
    db = tmp_path / "old.db"
    create_original_db(db)
    odd = {
        "S(L0,L1,4,8,comps=['c1'])": '{"is_legal": 1, "execution_times": [NaN, -Infinity, 2]}',
        "R(L0,comps=['c1'])": '{"execution_times": [1.5], "is_legal": true, "extra": {"x": [1]}}',
        "I(L0,L1,comps=['c1'])": '{"is_legal": false}',
    }
    for sched, rj in odd.items():
        original_insert(db, "blur", SRC_BLUR, sched, rj, hostname="n\u00e9ud-\U0001f600", source_project='q"uote\\')
    store = make_store(db)
    store.lookup("blur", SRC_BLUR, "R(L9,comps=['c1'])")
    fast_calls.clear()
    for sched in odd:
        fast = store.lookup("blur", SRC_BLUR, sched)
        assert fast is not None and fast.hostname == "n\u00e9ud-\U0001f600" and fast.source_project == 'q"uote\\'
        assert _same(fast, _by_json(store, "blur", SRC_BLUR, sched)), sched
    assert len(fast_calls) == len(odd)


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - compared below
        return type(e), str(e)
    return None


BAD_CALLS = [
    ("blur", "S(L0,L1,4,8,comps=['c1'])\x00x"),  # NUL in the schedule
    ("bl\x00ur", SCHED_S),  # NUL in the name
    ("blur", "S(L0,\ud800)"),  # a lone surrogate: the JSON path reports it
    ("bl\udfffur", SCHED_S),
    (7, SCHED_S),  # wrong types: the JSON path names them
    ("blur", b"S(L0)"),
    ("blur", None),
]


@pytest.mark.parametrize("name,sched", BAD_CALLS)
def test_both_paths_raise_the_same_error(store, name, sched):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    assert store.lookup("blur", SRC_BLUR, SCHED_S) is not None  # the hash is known from here on
    fast = _error(lambda: store.lookup(name, SRC_BLUR, sched))
    slow = _error(lambda: _by_json(store, name, SRC_BLUR, sched))
    assert fast is not None and fast == slow


def test_a_closed_store_says_so_on_both_paths(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    store.lookup("blur", SRC_BLUR, SCHED_S)
    store.close()
    fast = _error(lambda: store.lookup("blur", SRC_BLUR, SCHED_S))
    slow = _error(lambda: _by_json(store, "blur", SRC_BLUR, SCHED_S))
    assert fast is not None and fast == slow and fast[0] is ValueError


def test_threads_each_get_their_own_answer(store, fast_calls):
    """Threads share nothing of a call: each has its reply buffer (the call
    releases the GIL), and every answer is the one of its key, small
    replies and replies larger than the buffer alike."""
    scheds = [f"U(L{i % 7},{i},comps=['c1'])" for i in range(40)]
    want = {s: ([float(i)] * (1 + (i % 3) * 400)) for i, s in enumerate(scheds)}
    store.record_many("blur", SRC_BLUR, [
        {"tiralib_schedule_string": s, "is_legal": True, "execution_times": t} for s, t in want.items()])
    store.lookup("blur", SRC_BLUR, scheds[0])
    fast_calls.clear()
    wrong = []

    def worker(k):
        for n in range(300):
            s = scheds[(k * 7 + n) % len(scheds)]
            got = store.lookup("blur", SRC_BLUR, s)
            if got is None or got.execution_times != want[s] or got.schedule != s:
                wrong.append((s, got and got.schedule))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert len(fast_calls) == 6 * 300


@pytest.mark.skipif(ON_PG, reason="the child would start a PostgreSQL cluster of its own; the buffer is the same on both")
def test_threads_negative_control(tmp_path):
    """The threads test catches one buffer shared by every thread: run in
    a child with that fault, it fails (or the child dies of it), at least
    once in three tries."""
    outcomes = threads_test_under_shared_replies(Path(__file__), tmp_path, tries=3)
    assert any(rc != 0 for rc in outcomes), outcomes


def test_lookup_or_claim_hits_take_the_hot_path(store, fast_calls):
    """lookup_or_claim with the default lease and wait answers a hit as
    lookup does; with a lease given, the library judges the lease first,
    hit or not (a bad one is an error even on a hit)."""
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    store.lookup("blur", SRC_BLUR, SCHED_S)
    fast_calls.clear()
    got = store.lookup_or_claim("blur", SRC_BLUR, SCHED_S)
    assert isinstance(got, LookupResult) and got.execution_times == [1.0]
    assert _same(got, _by_json(store, "blur", SRC_BLUR, SCHED_S)) and len(fast_calls) == 1
    with pytest.raises(ValueError):
        store.lookup_or_claim("blur", SRC_BLUR, SCHED_S, lease=-1.0)
    assert len(fast_calls) == 1
    claim = store.lookup_or_claim("blur", SRC_BLUR, "R(L5,comps=['c1'])")  # a miss: claimed by the JSON path
    assert claim is not None and not isinstance(claim, LookupResult)
    claim.release()
