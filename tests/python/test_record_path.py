"""TiraStore.record's and record_many's two paths give one answer.

A record of a program its store has written before goes through
tirastore_record: texts by length, execution_times as JSON, no reply to
decode; a record_many of such a program whose entries are dicts
of a str, a bool and floats goes through tirastore_record_many, the entries
as arrays. Every other write goes through tirastore_call's JSON.
These tests ask both paths the same things and compare: rows of every
shape, what they return, errors of every kind, threads, and that the fast
path is the one taken when it should be. Runs on both backends
(Makefile, PG_API_TESTS).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from conftest import SCHED_S, SRC_BLUR, ON_PG, remove_programs, threads_test_under_shared_replies
from tirastore import _native, make_program_hash


@pytest.fixture
def fast_calls(monkeypatch):
    """Counts the calls of the fast paths (record's and record_many's)."""
    calls = []
    for name in ("record_by_hash", "record_many_by_hash"):
        real = getattr(_native, name)

        def spy(*a, real=real):
            calls.append(a)
            return real(*a)

        monkeypatch.setattr(_native, name, spy)
    return calls


def _by_json(store, name, source, schedule, is_legal, times, overwrite=False):
    """The record through tirastore_call by program hash, as the package
    sent it before tirastore_record."""
    return _native.call(store._handle, "record", program_name=name, program_hash=make_program_hash(source),
                        tiralib_schedule_string=schedule, is_legal=is_legal, execution_times=times,
                        overwrite=overwrite)


def _many_by_json(store, name, source, entries, overwrite=False):
    """record_many through tirastore_call by program hash."""
    return _native.call(store._handle, "record_many", program_name=name, program_hash=make_program_hash(source),
                        schedules=entries, overwrite=overwrite)


def _same_times(a, b):
    """Lists of times equal, NaN included, ints and floats told apart."""
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(
        type(x) is type(y) and (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)))
        for x, y in zip(a, b)
    )


SHAPES = [
    (True, [0.042, 0.039, 0.041]),
    (False, None),
    (True, [1, 2.5, 3]),
    (True, [1e308, 1e-300, 12345678901234567890, -0.0]),
    (True, [0.1] * 2000),
    (False, []),
    (True, (0.5, 0.25)),  # a tuple: a list in JSON
]


def test_both_paths_store_the_same_rows(store, fast_calls):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])  # by source: the program is written
    fast_calls.clear()
    for i, (legal, times) in enumerate(SHAPES):
        fast, slow = f"U(L0,{i + 10},comps=['c1'])", f"U(L1,{i + 10},comps=['c1'])"
        assert store.record("blur", SRC_BLUR, fast, legal, times) is True
        assert _by_json(store, "blur", SRC_BLUR, slow, legal, times) is True
        a, b = store.lookup("blur", SRC_BLUR, fast), store.lookup("blur", SRC_BLUR, slow)
        assert a.is_legal is b.is_legal is legal
        assert _same_times(a.execution_times, b.execution_times), (legal, times)
        assert (a.hostname, a.username, a.source_project) == (b.hostname, b.username, b.source_project)
    assert len(fast_calls) == len(SHAPES)


def test_what_a_record_returns(store, fast_calls):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [2.0]) is False  # exists
    assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [1.0]
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [3.0], overwrite=True) is True
    assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [3.0]
    assert store.record("blur", SRC_BLUR, "R(L0,comps=['c1'])", False, None) is True
    assert len(fast_calls) == 3


def test_the_first_record_of_each_store_sends_the_source(store, make_store, db_path, fast_calls):
    """A store records by hash only the programs it has written itself."""
    source = SRC_BLUR + "// a source no other test records\n"
    assert store.record("blur", source, SCHED_S, True, [1.0])
    assert fast_calls == []
    assert store.record("blur", source, "R(L0,comps=['c1'])", True, [1.0])
    assert len(fast_calls) == 1
    other = make_store(db_path)
    assert other.record("blur", source, "R(L1,comps=['c1'])", True, [1.0])
    assert len(fast_calls) == 1


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - compared below
        return type(e), str(e)
    return None


BAD_RECORDS = [
    # name, schedule, is_legal, execution_times, overwrite
    ("blur", "S(L0,L1,4,8,comps=['c1'])\x00x", True, [1.0], False),  # NUL in the schedule
    ("bl\x00ur", "R(L2,comps=['c1'])", True, [1.0], False),  # NUL in the name
    ("blur", "not a schedule", True, [1.0], False),
    ("blur", "R(L3,comps=['c1'])", True, [float("nan")], False),
    ("blur", "R(L3,comps=['c1'])", True, [float("inf")], False),
    ("blur", "R(L3,comps=['c1'])", True, None, False),  # legal without times
    ("blur", "R(L3,comps=['c1'])", True, [], False),
    ("blur", "R(L3,comps=['c1'])", True, ["1.0"], False),
    ("blur", "R(L3,comps=['c1'])", True, [[1.0]], False),
    ("blur", "R(L3,comps=['c1'])", True, {"t": 1.0}, False),
    ("blur", "R(L3,comps=['c1'])", True, [b"1"], False),  # not JSON: the library's marker
    ("blur", "R(L3,comps=['c1'])", True, 1.0, False),
    # what the fast path leaves to the JSON path
    ("blur", "S(L0,\ud800)", True, [1.0], False),  # a lone surrogate
    (7, "R(L3,comps=['c1'])", True, [1.0], False),
    ("blur", b"R(L3)", True, [1.0], False),
    ("blur", "R(L3,comps=['c1'])", 1, [1.0], False),
    ("blur", "R(L3,comps=['c1'])", True, [1.0], "yes"),
]


@pytest.mark.parametrize("i", range(len(BAD_RECORDS)))
def test_both_paths_raise_the_same_error(store, fast_calls, i):
    name, sched, legal, times, overwrite = BAD_RECORDS[i]
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])  # the program is written
    fast = _error(lambda: store.record(name, SRC_BLUR, sched, legal, times, overwrite))
    assert len(fast_calls) == (1 if i < 12 else 0)  # the first twelve are the library's to refuse
    slow = _error(lambda: _by_json(store, name, SRC_BLUR, sched, legal, times, overwrite))
    assert fast is not None and fast == slow
    assert store.count() == 1


def _entries(scheds, legal, times):
    return [{"tiralib_schedule_string": s, "is_legal": legal, "execution_times": times} for s in scheds]


def test_record_many_both_paths_store_the_same_rows(store, fast_calls):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    fast_calls.clear()
    floats = [(True, [0.042, 0.039]), (False, None), (True, [1e308, 1e-300, -0.0, 1e16, 1e-05, 5e-324]),
              (True, [0.1] * 500), (False, []), (True, [1234567.0, 0.0001])]
    for i, (legal, times) in enumerate(floats):
        fast, slow = [f"U(L0,{i + 10},comps=['c{j}'])" for j in range(3)], [f"U(L1,{i + 10},comps=['c{j}'])" for j in range(3)]
        assert store.record_many("blur", SRC_BLUR, _entries(fast, legal, times)) == 3
        assert _many_by_json(store, "blur", SRC_BLUR, _entries(slow, legal, times)) == 3
        for a, b in zip(fast, slow):
            ra, rb = store.lookup("blur", SRC_BLUR, a), store.lookup("blur", SRC_BLUR, b)
            assert ra.is_legal is rb.is_legal is legal
            assert _same_times(ra.execution_times, rb.execution_times), (legal, times)
    assert len(fast_calls) == len(floats)
    # Other numbers, and entries of other shapes, go through the JSON path, which keeps an int's text.
    fast_calls.clear()
    assert store.record_many("blur", SRC_BLUR, _entries(["R(L7,comps=['c1'])"], True, [1, 12345678901234567890])) == 1
    assert store.lookup("blur", SRC_BLUR, "R(L7,comps=['c1'])").execution_times == [1, 12345678901234567890]
    assert store.record_many("blur", SRC_BLUR, [{"tiralib_schedule_string": "R(L8,comps=['c1'])", "is_legal": False}]) == 1
    assert fast_calls == []


def test_what_a_record_many_returns(store, fast_calls):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    scheds = [SCHED_S, "R(L0,comps=['c1'])", "R(L1,comps=['c1'])"]
    assert store.record_many("blur", SRC_BLUR, _entries(scheds, True, [2.0])) == 2  # one exists
    assert store.record_many("blur", SRC_BLUR, _entries(scheds, True, [3.0])) == 0
    assert store.record_many("blur", SRC_BLUR, _entries(scheds, True, [4.0]), overwrite=True) == 3
    assert store.record_many("blur", SRC_BLUR, []) == 0  # by JSON
    assert [store.lookup("blur", SRC_BLUR, s).execution_times for s in scheds] == [[4.0]] * 3
    assert len(fast_calls) == 3


BAD_ENTRIES = [
    _entries(["R(L3,comps=['c1'])", "not a schedule"], True, [1.0]),
    _entries(["R(L3,comps=['c1'])", "R(L4,comps=['c1'])\x00"], True, [1.0]),
    _entries(["R(L3,comps=['c1'])"], True, [float("nan")]),
    _entries(["R(L3,comps=['c1'])"], True, [1.0, float("-inf")]),
    _entries(["R(L3,comps=['c1'])"], True, None),
    _entries(["R(L3,comps=['c1'])"], True, []),
    # what the fast path leaves to the JSON path
    _entries(["R(L3,comps=['c1'])"], True, ["1.0"]),
    _entries(["R(L3,comps=['c1'])"], 1, [1.0]),
    _entries([7], True, [1.0]),
    _entries(["S(L0,\ud800)"], True, [1.0]),
    _entries(["R(L3,comps=['c1'])"], True, (1.0,)) + _entries(["R(L4,comps=['c1'])"], True, {"t": 1.0}),
    [{"tiralib_schedule_string": "R(L3,comps=['c1'])", "execution_times": [1.0]}],  # no is_legal
    [["R(L3,comps=['c1'])", True, [1.0]]],
    [{**_entries(["R(L3,comps=['c1'])"], True, [1.0])[0], ("a", "b"): 1}],  # a key JSON cannot write
    [{**_entries(["R(L3,comps=['c1'])"], True, [1.0])[0], "extra": 1}, 5],
    ("R(L3,comps=['c1'])",),
    "R(L3,comps=['c1'])",
    None,
]


@pytest.mark.parametrize("i", range(len(BAD_ENTRIES)))
def test_record_many_both_paths_raise_the_same_error(store, fast_calls, i):
    entries = BAD_ENTRIES[i]
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    fast = _error(lambda: store.record_many("blur", SRC_BLUR, entries))
    assert len(fast_calls) == (1 if i < 6 else 0)  # the first six are the library's to refuse
    slow = _error(lambda: _many_by_json(store, "blur", SRC_BLUR, entries))
    assert fast is not None and fast == slow
    assert store.count() == 1


@pytest.mark.skipif(ON_PG, reason="the program removed by SQL on the file")
def test_record_many_after_the_program_was_removed(store, db_path, fast_calls):
    """record_many by hash of a program the database lost: the library
    refuses it on the fast path, and the package writes again with the
    source (were the refusal not caught, ProgramNotStoredError would
    reach the caller)."""
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    remove_programs(db_path)
    assert store.record_many("blur", SRC_BLUR, _entries(["R(L0,comps=['c1'])"], True, [2.0])) == 1
    assert len(fast_calls) == 1
    assert store.lookup("blur", SRC_BLUR, "R(L0,comps=['c1'])").execution_times == [2.0]
    assert store.record_many("blur", SRC_BLUR, _entries(["R(L1,comps=['c1'])"], True, [3.0])) == 1
    assert len(fast_calls) == 2  # by hash again: the program is back


def test_a_closed_store_says_so_on_both_paths(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    store.close()
    fast = _error(lambda: store.record("blur", SRC_BLUR, "R(L0,comps=['c1'])", True, [1.0]))
    slow = _error(lambda: _by_json(store, "blur", SRC_BLUR, "R(L0,comps=['c1'])", True, [1.0]))
    assert fast is not None and fast == slow and fast[0] is ValueError


def test_threads_each_get_their_own_answer(store, fast_calls):
    """Threads share nothing of a call: each has its out cells (the call
    releases the GIL), and every write returns its own answer: True for a
    new key, False for one that exists, 1 for a record_many of one of each,
    while a thread busy in Python makes each returning call wait for the
    GIL."""
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    existing = [f"U(L{i % 7},{i},comps=['c1'])" for i in range(20)]
    store.record_many("blur", SRC_BLUR, [
        {"tiralib_schedule_string": s, "is_legal": True, "execution_times": [1.0]} for s in existing])
    fast_calls.clear()
    wrong = []

    def worker(k):
        for n in range(60):
            if n % 3 == 2:  # one new key and one that exists: 1 written
                s, want = f"S(L{k},L{n},4,8,comps=['c1'])", 1
                got = store.record_many("blur", SRC_BLUR, [
                    {"tiralib_schedule_string": x, "is_legal": True, "execution_times": [float(n)]}
                    for x in (s, existing[(k + n) % len(existing)])])
            else:
                if n % 3:
                    s, want = existing[(k + n) % len(existing)], False
                else:
                    s, want = f"S(L{k},L{n},4,8,comps=['c1'])", True
                got = store.record("blur", SRC_BLUR, s, True, [float(n)])
            if got is not want and not (type(want) is int and got == want):
                wrong.append((s, got))

    done = threading.Event()

    def busy():  # holds the GIL between the workers' calls: a returning call waits for it
        while not done.is_set():
            sum(range(1000))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    spinner = threading.Thread(target=busy)
    spinner.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    spinner.join()
    assert wrong == []
    assert len(fast_calls) == 6 * 60
    assert store.count() == 1 + len(existing) + 6 * 40


@pytest.mark.skipif(ON_PG, reason="the child would start a PostgreSQL cluster of its own; the cells are the same on both")
def test_threads_negative_control(tmp_path):
    """The threads test catches out cells shared by every thread: run in a
    child with that fault, it fails, at least once in five tries."""
    outcomes = threads_test_under_shared_replies(Path(__file__), tmp_path, tries=5)
    assert any(rc != 0 for rc in outcomes), outcomes
