"""TiraStore.lookup by program hash and by source give one answer.

A lookup of a program whose hash the package knows (after one read that
sent the source) sends the method "lookup" the hash (program_hash)
instead of the source, so that a long source is not encoded and parsed
again at every lookup; the engine finds the program by either. These
tests ask both the same questions and compare: results of every stored
shape, errors of every kind, threads, and that the hash is sent when it
should be. Runs on both backends (Makefile, PG_API_TESTS).
"""

from __future__ import annotations

import math
import threading

import pytest

from conftest import SCHED_S, SRC_BLUR, ON_PG, create_original_db, original_insert
from tirastore import LookupResult, _native


def _by_source(store, name, source, schedule):
    """The lookup by source, as the package sends it before it knows the hash."""
    found = store._call("lookup", program_name=name, program_source_code=source, tiralib_schedule_string=schedule)
    return None if found is None else LookupResult(**found)


@pytest.fixture
def hash_calls(monkeypatch):
    """Counts the lookups the package sends by program hash."""
    calls = []
    real = _native.call

    def spy(handle, method, **args):
        if method == "lookup" and "program_hash" in args:
            calls.append(args)
        return real(handle, method, **args)

    monkeypatch.setattr(_native, "call", spy)
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
    ("U(L0,8,comps=['c1'])", True, [0.1] * 2000),  # a long reply
    ("P(L0,comps=['c1','c2'])", False, []),
]


def test_hash_and_source_agree_on_every_stored_shape(store, hash_calls):
    for sched, legal, times in MEASUREMENTS:
        assert store.record("blur", SRC_BLUR, sched, legal, times)
    store.lookup("blur", SRC_BLUR, "R(L9,comps=['c1'])")  # a read that sent the source (or had sent it)
    hash_calls.clear()
    for sched, legal, times in MEASUREMENTS:
        spaced = sched.replace(",", " , ").replace("'", '"')
        hashed = store.lookup("blur", SRC_BLUR, spaced)
        assert hashed is not None and hashed.execution_times == times and hashed.is_legal is legal
        assert _same(hashed, _by_source(store, "blur", SRC_BLUR, spaced)), sched
    assert store.lookup("blur", SRC_BLUR, "R(L8,comps=['c1'])") is None
    assert len(hash_calls) == len(MEASUREMENTS) + 1


def test_the_first_use_of_a_source_sends_it(store, hash_calls):
    """A source's first read, or its first record, sends it (the library
    checks it, the package learns its hash); the reads after it go by
    hash."""
    source = SRC_BLUR + "// a source no other test reads\n"
    assert store.lookup("blur", source, SCHED_S) is None
    assert hash_calls == []
    assert store.lookup("blur", source, SCHED_S) is None
    assert len(hash_calls) == 1
    written = SRC_BLUR + "// a source no other test writes\n"
    store.record("blur", written, SCHED_S, True, [1.0])
    assert len(hash_calls) == 1
    assert store.lookup("blur", written, SCHED_S).execution_times == [1.0]
    assert len(hash_calls) == 2


def test_each_call_returns_a_new_result(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0, 2.0])
    store.lookup("blur", SRC_BLUR, SCHED_S)
    a = store.lookup("blur", SRC_BLUR, SCHED_S)
    a.execution_times.append(3.0)
    a.is_legal = False
    b = store.lookup("blur", SRC_BLUR, SCHED_S)
    assert b.execution_times == [1.0, 2.0] and b.is_legal is True


@pytest.mark.skipif(ON_PG, reason="an original writer's file")
def test_an_original_writers_odd_results(tmp_path, make_store, hash_calls):
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
    hash_calls.clear()
    for sched in odd:
        hashed = store.lookup("blur", SRC_BLUR, sched)
        assert hashed is not None and hashed.hostname == "n\u00e9ud-\U0001f600" and hashed.source_project == 'q"uote\\'
        assert _same(hashed, _by_source(store, "blur", SRC_BLUR, sched)), sched
    assert len(hash_calls) == len(odd)


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - compared below
        return type(e), str(e)
    return None


BAD_CALLS = [
    ("blur", "S(L0,L1,4,8,comps=['c1'])\x00x"),  # NUL in the schedule
    ("bl\x00ur", SCHED_S),  # NUL in the name
    ("blur", "S(L0,\ud800)"),  # a lone surrogate: the package reports it
    ("bl\udfffur", SCHED_S),
    (7, SCHED_S),  # wrong types: the library names them
    ("blur", b"S(L0)"),
    ("blur", None),
]


@pytest.mark.parametrize("name,sched", BAD_CALLS)
def test_hash_and_source_raise_the_same_error(store, name, sched):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    assert store.lookup("blur", SRC_BLUR, SCHED_S) is not None  # the hash is known from here on
    hashed = _error(lambda: store.lookup(name, SRC_BLUR, sched))
    sourced = _error(lambda: _by_source(store, name, SRC_BLUR, sched))
    assert hashed is not None and hashed == sourced


def test_a_closed_store_says_so_by_hash_and_by_source(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    store.lookup("blur", SRC_BLUR, SCHED_S)
    store.close()
    hashed = _error(lambda: store.lookup("blur", SRC_BLUR, SCHED_S))
    sourced = _error(lambda: _by_source(store, "blur", SRC_BLUR, SCHED_S))
    assert hashed is not None and hashed == sourced and hashed[0] is ValueError


def test_threads_each_get_their_own_answer(store, hash_calls):
    """Threads share nothing of a call (which releases the GIL): every
    answer is the one of its key, short replies and long ones alike."""
    scheds = [f"U(L{i % 7},{i},comps=['c1'])" for i in range(40)]
    want = {s: ([float(i)] * (1 + (i % 3) * 400)) for i, s in enumerate(scheds)}
    store.record_many("blur", SRC_BLUR, [
        {"tiralib_schedule_string": s, "is_legal": True, "execution_times": t} for s, t in want.items()])
    store.lookup("blur", SRC_BLUR, scheds[0])
    hash_calls.clear()
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
    assert len(hash_calls) == 6 * 300


def test_lookup_or_claim_hits_answer_as_lookup(store, monkeypatch):
    """lookup_or_claim answers a hit as lookup does, by program hash once
    the hash is known; the library judges the lease first, hit or not (a
    bad one is an error even on a hit)."""
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    store.lookup("blur", SRC_BLUR, SCHED_S)
    sent = []
    real = _native.call

    def spy(handle, method, **args):
        sent.append((method, "program_hash" in args))
        return real(handle, method, **args)

    monkeypatch.setattr(_native, "call", spy)
    got = store.lookup_or_claim("blur", SRC_BLUR, SCHED_S)
    assert isinstance(got, LookupResult) and got.execution_times == [1.0]
    assert _same(got, _by_source(store, "blur", SRC_BLUR, SCHED_S))
    assert sent[0] == ("lookup_or_claim", True)
    with pytest.raises(ValueError):
        store.lookup_or_claim("blur", SRC_BLUR, SCHED_S, lease=-1.0)
    claim = store.lookup_or_claim("blur", SRC_BLUR, "R(L5,comps=['c1'])")  # a miss: claimed by the JSON path
    assert claim is not None and not isinstance(claim, LookupResult)
    claim.release()
