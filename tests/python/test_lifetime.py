"""Lifetime of a TiraStore: close, context manager, garbage collection of an
unclosed store, use after close, interpreter exit with a store open, many
stores at once, the same database opened twice in one process."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import TEST_CPU
from tirastore import TiraStore, _native

SRC = "void f() {}"
S = "U(L0,4,comps=['c'])"


def _handle_is_open(handle: int) -> bool:
    try:
        _native.call(handle, "count")
        return True
    except ValueError as e:
        assert "closed" in str(e)
        return False


def test_close_and_context_manager(tmp_path):
    s = TiraStore(tmp_path / "a.db", cpu_model=TEST_CPU)
    h = s._handle
    assert _handle_is_open(h) and not s.closed
    s.close()
    assert s.closed and not _handle_is_open(h)
    s.close()  # harmless
    with pytest.raises(ValueError, match="closed"):
        s.count()
    # The engine's closed-store message (core.ErrClosed), not a complaint
    # about a handle number: the store keeps its handle, which the library
    # remembers as closed.
    for call in (lambda: s.lookup("p", SRC, S), lambda: s.record("p", SRC, S, True, [1.0]), s.stats):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == "cannot operate on a closed TiraStore"
    # Negative control: a number the library never gave out is not "closed".
    with pytest.raises(ValueError, match=rf"^unknown or closed TiraStore handle {h + 10**6}$"):
        _native.call(h + 10**6, "count")
    with TiraStore(tmp_path / "a.db", cpu_model=TEST_CPU) as s2:
        h2 = s2._handle
        s2.record("p", SRC, S, True, [1.0])
    assert not _handle_is_open(h2)
    with pytest.raises(ValueError, match="closed"):
        s2.lookup("p", SRC, S)


def test_garbage_collected_store_releases_its_handle(tmp_path):
    s = TiraStore(tmp_path / "a.db", cpu_model=TEST_CPU)
    h = s._handle
    del s
    gc.collect()
    assert not _handle_is_open(h)


def test_interpreter_exit_with_a_store_open(tmp_path):
    db = tmp_path / "d" / "a.db"  # a directory the library creates: no mode warning
    code = textwrap.dedent(f"""
        import tirastore
        s = tirastore.TiraStore({str(db)!r}, cpu_model={TEST_CPU!r})
        s.record("p", {SRC!r}, {S!r}, True, [1.0])
        keep = [s, tirastore.TiraStore({str(db)!r}, cpu_model={TEST_CPU!r})]
        print("bye")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "bye", out.stderr
    assert out.stderr == ""
    assert sorted(p.name for p in db.parent.iterdir()) == ["a.db"]  # no lock, claim or journal left
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        assert s.lookup("p", SRC, S).execution_times == [1.0]


def test_many_stores_at_once(tmp_path):
    stores = [TiraStore(tmp_path / f"db{i}" / "cache.db", cpu_model=TEST_CPU, source_project=f"p{i}") for i in range(40)]
    assert len({s._handle for s in stores}) == 40
    for i, s in enumerate(stores):
        assert s.record("p", SRC, S, True, [float(i)])
    for i, s in enumerate(stores):
        r = s.lookup("p", SRC, S)
        assert r.execution_times == [float(i)] and r.source_project == f"p{i}"
        assert s.count() == 1
    for s in stores:
        s.close()


def test_same_database_twice_in_one_process(tmp_path):
    """Two stores on one file are two lock users: their threads exclude each
    other through the lock file, as two processes would."""
    db = tmp_path / "cache.db"
    a = TiraStore(db, cpu_model=TEST_CPU, source_project="a")
    b = TiraStore(db, cpu_model=TEST_CPU, source_project="b")
    assert a.record("p", SRC, S, True, [1.0])
    assert b.lookup("p", SRC, S).source_project == "a"
    assert not b.record("p", SRC, S, True, [2.0])
    wins = {"a": 0, "b": 0}

    def run(store, name):
        for i in range(100):
            wins[name] += store.record("q", SRC, f"S(L0,L1,{i},8,comps=['c'])", True, [float(i)])

    ts = [threading.Thread(target=run, args=(a, "a")), threading.Thread(target=run, args=(b, "b"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert wins["a"] + wins["b"] == 100
    assert a.count() == b.count() == 101
    a.close()
    assert b.count() == 101  # closing one leaves the other working
    b.close()
