"""TiraStore.record and record_many by program hash and by source give one answer.

A record or record_many of a program its store has written before sends
the method the program's hash (program_hash) instead of its source, so
that a long source is not encoded and parsed again at every write; the
engine then skips the source and the program row. Every other write sends
the source. These tests ask both the same things and compare: rows of
every shape, what they return, errors of every kind, threads, and that
the hash is sent when it should be. Runs on both backends (Makefile,
PG_API_TESTS).
"""

from __future__ import annotations

import math
import threading

import pytest

from conftest import SCHED_S, SRC_BLUR, ON_PG, remove_programs
from tirastore import _native


@pytest.fixture
def hash_calls(monkeypatch):
    """Counts the writes (record's and record_many's) the package sends by program hash."""
    calls = []
    real = _native.call

    def spy(handle, method, **args):
        if method in ("record", "record_many") and "program_hash" in args:
            calls.append(args)
        return real(handle, method, **args)

    monkeypatch.setattr(_native, "call", spy)
    return calls


def _by_source(store, name, source, schedule, is_legal, times, overwrite=False):
    """The record by source, as the package sends a program's first."""
    return _native.call(store._handle, "record", program_name=name, program_source_code=source,
                        tiralib_schedule_string=schedule, is_legal=is_legal, execution_times=times,
                        overwrite=overwrite)


def _many_by_source(store, name, source, entries, overwrite=False):
    """record_many by source."""
    return _native.call(store._handle, "record_many", program_name=name, program_source_code=source,
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


def test_hash_and_source_store_the_same_rows(store, hash_calls):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])  # by source: the program is written
    hash_calls.clear()
    for i, (legal, times) in enumerate(SHAPES):
        hashed, sourced = f"U(L0,{i + 10},comps=['c1'])", f"U(L1,{i + 10},comps=['c1'])"
        assert store.record("blur", SRC_BLUR, hashed, legal, times) is True
        assert _by_source(store, "blur", SRC_BLUR, sourced, legal, times) is True
        a, b = store.lookup("blur", SRC_BLUR, hashed), store.lookup("blur", SRC_BLUR, sourced)
        assert a.is_legal is b.is_legal is legal
        assert _same_times(a.execution_times, b.execution_times), (legal, times)
        assert (a.hostname, a.username, a.source_project) == (b.hostname, b.username, b.source_project)
    assert len(hash_calls) == len(SHAPES)


def test_what_a_record_returns(store, hash_calls):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [2.0]) is False  # exists
    assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [1.0]
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [3.0], overwrite=True) is True
    assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [3.0]
    assert store.record("blur", SRC_BLUR, "R(L0,comps=['c1'])", False, None) is True
    assert len(hash_calls) == 3


def test_the_first_record_of_each_store_sends_the_source(store, make_store, db_path, hash_calls):
    """A store records by hash only the programs it has written itself."""
    source = SRC_BLUR + "// a source no other test records\n"
    assert store.record("blur", source, SCHED_S, True, [1.0])
    assert hash_calls == []
    assert store.record("blur", source, "R(L0,comps=['c1'])", True, [1.0])
    assert len(hash_calls) == 1
    other = make_store(db_path)
    assert other.record("blur", source, "R(L1,comps=['c1'])", True, [1.0])
    assert len(hash_calls) == 1


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
    ("blur", "S(L0,\ud800)", True, [1.0], False),  # a lone surrogate: the package refuses it
    (7, "R(L3,comps=['c1'])", True, [1.0], False),
    ("blur", b"R(L3)", True, [1.0], False),
    ("blur", "R(L3,comps=['c1'])", 1, [1.0], False),
    ("blur", "R(L3,comps=['c1'])", True, [1.0], "yes"),
]


@pytest.mark.parametrize("i", range(len(BAD_RECORDS)))
def test_hash_and_source_raise_the_same_error(store, hash_calls, i):
    name, sched, legal, times, overwrite = BAD_RECORDS[i]
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])  # the program is written
    hashed = _error(lambda: store.record(name, SRC_BLUR, sched, legal, times, overwrite))
    assert len(hash_calls) == 1
    sourced = _error(lambda: _by_source(store, name, SRC_BLUR, sched, legal, times, overwrite))
    assert hashed is not None and hashed == sourced
    assert store.count() == 1


def _entries(scheds, legal, times):
    return [{"tiralib_schedule_string": s, "is_legal": legal, "execution_times": times} for s in scheds]


def test_record_many_hash_and_source_store_the_same_rows(store, hash_calls):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    hash_calls.clear()
    floats = [(True, [0.042, 0.039]), (False, None), (True, [1e308, 1e-300, -0.0, 1e16, 1e-05, 5e-324]),
              (True, [0.1] * 500), (False, []), (True, [1234567.0, 0.0001])]
    for i, (legal, times) in enumerate(floats):
        hashed, sourced = [f"U(L0,{i + 10},comps=['c{j}'])" for j in range(3)], [f"U(L1,{i + 10},comps=['c{j}'])" for j in range(3)]
        assert store.record_many("blur", SRC_BLUR, _entries(hashed, legal, times)) == 3
        assert _many_by_source(store, "blur", SRC_BLUR, _entries(sourced, legal, times)) == 3
        for a, b in zip(hashed, sourced):
            ra, rb = store.lookup("blur", SRC_BLUR, a), store.lookup("blur", SRC_BLUR, b)
            assert ra.is_legal is rb.is_legal is legal
            assert _same_times(ra.execution_times, rb.execution_times), (legal, times)
    assert len(hash_calls) == len(floats)
    # Other numbers, and entries of other shapes, by hash too; an int keeps its text.
    hash_calls.clear()
    assert store.record_many("blur", SRC_BLUR, _entries(["R(L7,comps=['c1'])"], True, [1, 12345678901234567890])) == 1
    assert store.lookup("blur", SRC_BLUR, "R(L7,comps=['c1'])").execution_times == [1, 12345678901234567890]
    assert store.record_many("blur", SRC_BLUR, [{"tiralib_schedule_string": "R(L8,comps=['c1'])", "is_legal": False}]) == 1
    assert len(hash_calls) == 2


def test_what_a_record_many_returns(store, hash_calls):
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    scheds = [SCHED_S, "R(L0,comps=['c1'])", "R(L1,comps=['c1'])"]
    assert store.record_many("blur", SRC_BLUR, _entries(scheds, True, [2.0])) == 2  # one exists
    assert store.record_many("blur", SRC_BLUR, _entries(scheds, True, [3.0])) == 0
    assert store.record_many("blur", SRC_BLUR, _entries(scheds, True, [4.0]), overwrite=True) == 3
    assert store.record_many("blur", SRC_BLUR, []) == 0
    assert [store.lookup("blur", SRC_BLUR, s).execution_times for s in scheds] == [[4.0]] * 3
    assert len(hash_calls) == 4


BAD_ENTRIES = [
    _entries(["R(L3,comps=['c1'])", "not a schedule"], True, [1.0]),
    _entries(["R(L3,comps=['c1'])", "R(L4,comps=['c1'])\x00"], True, [1.0]),
    _entries(["R(L3,comps=['c1'])"], True, [float("nan")]),
    _entries(["R(L3,comps=['c1'])"], True, [1.0, float("-inf")]),
    _entries(["R(L3,comps=['c1'])"], True, None),
    _entries(["R(L3,comps=['c1'])"], True, []),
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
def test_record_many_hash_and_source_raise_the_same_error(store, hash_calls, i):
    entries = BAD_ENTRIES[i]
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    hashed = _error(lambda: store.record_many("blur", SRC_BLUR, entries))
    assert len(hash_calls) == 1
    sourced = _error(lambda: _many_by_source(store, "blur", SRC_BLUR, entries))
    assert hashed is not None and hashed == sourced
    assert store.count() == 1


@pytest.mark.skipif(ON_PG, reason="the program removed by SQL on the file")
def test_record_many_after_the_program_was_removed(store, db_path, hash_calls):
    """record_many by hash of a program the database lost: the library
    refuses it by hash, and the package writes again with the
    source (were the refusal not caught, ProgramNotStoredError would
    reach the caller)."""
    assert store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    remove_programs(db_path)
    assert store.record_many("blur", SRC_BLUR, _entries(["R(L0,comps=['c1'])"], True, [2.0])) == 1
    assert len(hash_calls) == 1
    assert store.lookup("blur", SRC_BLUR, "R(L0,comps=['c1'])").execution_times == [2.0]
    assert store.record_many("blur", SRC_BLUR, _entries(["R(L1,comps=['c1'])"], True, [3.0])) == 1
    assert len(hash_calls) == 2  # by hash again: the program is back


def test_a_closed_store_says_so_by_hash_and_by_source(store):
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    store.close()
    hashed = _error(lambda: store.record("blur", SRC_BLUR, "R(L0,comps=['c1'])", True, [1.0]))
    sourced = _error(lambda: _by_source(store, "blur", SRC_BLUR, "R(L0,comps=['c1'])", True, [1.0]))
    assert hashed is not None and hashed == sourced and hashed[0] is ValueError


def test_threads_each_get_their_own_answer(store, hash_calls):
    """Threads share nothing of a call (which releases the GIL): every
    write returns its own answer: True for a
    new key, False for one that exists, 1 for a record_many of one of each,
    while a thread busy in Python makes each returning call wait for the
    GIL."""
    store.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    existing = [f"U(L{i % 7},{i},comps=['c1'])" for i in range(20)]
    store.record_many("blur", SRC_BLUR, [
        {"tiralib_schedule_string": s, "is_legal": True, "execution_times": [1.0]} for s in existing])
    hash_calls.clear()
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
    assert len(hash_calls) == 6 * 60
    assert store.count() == 1 + len(existing) + 6 * 40
