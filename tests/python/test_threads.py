"""Threads: one TiraStore shared by 8 Python threads gives correct results,
and the library releases the GIL while it works, so other threads run while
a call waits for the lock."""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from pathlib import Path

import pytest

from conftest import TEST_CPU
from tirastore import TiraStore, _native

SRC = "void kernel() { int i; }"


def _sched(t: int, i: int) -> str:
    return f"S(L0,L1,{t},{i},comps=['c{t}'])"


def test_eight_threads_share_one_store(tmp_path):
    store = TiraStore(tmp_path / "cache.db", cpu_model=TEST_CPU)
    errors: list[BaseException] = []
    wins = [0] * 8

    def work(t: int) -> None:
        try:
            for i in range(60):
                assert store.record(f"p{t}", SRC + str(t), _sched(t, i), True, [float(t), float(i)])
                r = store.lookup(f"p{t}", SRC + str(t), _sched(t, i))
                assert r.execution_times == [float(t), float(i)]
                # a contested record: exactly one thread wins it
                wins[t] += store.record("shared", SRC, f"U(L0,{i % 5 + 1},comps=['s'])", True, [float(t)])
                assert store.contains("shared", SRC, f"U(L0,{i % 5 + 1},comps=['s'])")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert sum(wins) == 5
    assert store.count() == 8 * 60 + 5
    for t in range(8):
        assert len(store.get_program_records(f"p{t}", SRC + str(t))) == 60
    store.close()


def _hold_lock(lock_path: Path) -> None:
    """Take the database's lock the original's way (ticket + link) as if a
    live process on another node held it."""
    ticket = lock_path.parent / f".lock_othernode_1_{os.getpid()}"
    ticket.write_text(json.dumps({"hostname": "othernode", "pid": 1, "timestamp": time.time()}))
    os.link(ticket, lock_path)
    ticket.unlink()


def _progress_while_blocked(call) -> tuple[int, float, object]:
    """Run call() in a thread while the main thread counts; returns how many
    times the main thread got to run per 10 ms slot during the call, how
    long the call took, and what it returned (or raised)."""
    done = threading.Event()
    result: list = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as e:  # noqa: BLE001
            result.append(e)
        done.set()

    th = threading.Thread(target=run)
    start = time.monotonic()
    th.start()
    ticks = 0
    while not done.is_set():
        time.sleep(0.01)  # yields the GIL; needs it back to continue
        ticks += 1
    th.join()
    elapsed = time.monotonic() - start
    return ticks, elapsed, result[0]


def test_gil_released_while_waiting_for_the_lock(tmp_path, record_property):
    """8 threads block on a lock held elsewhere for ~1 s; meanwhile the main
    thread keeps running (it needs the GIL ~100 times). A binding that held
    the GIL during the call (ctypes.PyDLL, the negative control) starves it."""
    db = tmp_path / "cache.db"
    store = TiraStore(db, cpu_model=TEST_CPU, lock_timeout=1.0)
    store.record("p", SRC, _sched(0, 0), True, [1.0])
    lock = tmp_path / "cache.db.lock"
    _hold_lock(lock)

    def eight_blocked_lookups():
        errs = []

        def one():
            try:
                # A key the store has not read: a cached one would be
                # answered at once, without the lock.
                store.lookup("p", SRC, _sched(0, 1))
            except TimeoutError as e:
                errs.append(e)

        ths = [threading.Thread(target=one) for _ in range(8)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        return errs

    ticks, elapsed, errs = _progress_while_blocked(eight_blocked_lookups)
    assert len(errs) == 8 and all(isinstance(e, TimeoutError) for e in errs), errs  # all waited for the lock
    record_property("main_thread_ticks_during_blocked_calls", ticks)
    print(f"\nGIL released: main thread ran {ticks} times in {elapsed:.2f} s while 8 threads waited for the lock")
    assert elapsed >= 1.0
    assert ticks >= 0.5 * elapsed / 0.01  # ran most of its 10 ms slots

    # Negative control: the same library called through ctypes.PyDLL keeps
    # the GIL for the whole call, and the main thread cannot run.
    pydll = ctypes.PyDLL(str(_native.library_path()))
    pydll.tirastore_free.argtypes = [ctypes.c_void_p]
    pydll.tirastore_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64),
                                     ctypes.POINTER(ctypes.c_void_p)]
    options = json.dumps({"cpu_model": TEST_CPU, "lock_timeout": 1.0}).encode()

    def held_gil_wait() -> int:
        # Opening waits for the lock, here for 1 s, holding the GIL.
        h, out = ctypes.c_uint64(), ctypes.c_void_p()
        status = pydll.tirastore_open(str(db).encode(), options, ctypes.byref(h), ctypes.byref(out))
        pydll.tirastore_free(out)
        return status

    ticks_held, elapsed_held, status = _progress_while_blocked(held_gil_wait)
    assert status == 5  # TIRASTORE_ERR_TIMEOUT: it waited for the lock
    print(f"negative control (GIL held): main thread ran {ticks_held} times in {elapsed_held:.2f} s")
    assert elapsed_held >= 1.0
    assert ticks_held <= 0.2 * elapsed_held / 0.01
    lock.unlink()
    store.close()
