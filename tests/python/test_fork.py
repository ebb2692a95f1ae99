"""A TiraStore made (and used) in a parent keeps working in forked children.

The engine is a Go c-shared library, and Go's runtime does not survive
fork(): without tirastore's fork handling a child could not use the
library (the C entry points refuse with TIRASTORE_ERR_FORKED, where the Go
runtime would otherwise hang; see the "Fork safety" notes of
tirastore._native and tests/c/test_fork.c; the negative control below shows
the child failing). These tests cover os.fork(), multiprocessing with each
start method, grandchildren, and a 1,000-fork stress run under GC churn.
Figures (fork+first-call latency, child RSS overhead) are printed; run with
``-s`` to see them.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tirastore import TiraStore, _native

from conftest import TEST_CPU, TEST_SLURM, tiered

SRC = "void kernel(int n) {\n  for (int i = 0; i < n; i++) a[i] = b[i];\n}\n"
PROGRAM = "kernel"

# A child that does not finish in this many seconds is considered hung.
CHILD_TIMEOUT = 60.0


def sched(i: int, tag: int = 0) -> str:
    return f"S(L{i},L{tag},4,8,comps=['c{tag}'])"


def times(i: int, tag: int = 0) -> list:
    return [round(0.001 * i + tag, 6), float(tag)]


def new_store(path: Path) -> TiraStore:
    return TiraStore(path, source_project="fork-test", cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM)


def rollup() -> dict:
    """Rss and Private_* of this process, in kB (from /proc/self/smaps_rollup)."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Private_Clean:", "Private_Dirty:", "Anonymous:"):
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def wait_all(pids: list[int], timeout: float) -> dict[int, object]:
    """waitpid every pid within timeout; kills and reports ("hung") the ones that hang.

    Others report their exit code (negative: killed by that signal)."""
    deadline = time.monotonic() + timeout
    status = {}
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status[pid] = os.waitstatus_to_exitcode(st)
                pending.discard(pid)
        if pending:
            time.sleep(0.005)
    for pid in pending:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status[pid] = "hung"
    return status


def in_child(fn) -> int:
    """Fork; run fn() in the child (exit 0 if it returns truthy, 1 if falsy, 2 on error)."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if fn() else 1
        except BaseException:  # noqa: BLE001 - report anything as a failure code
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


# ---------------------------------------------------------------------------
# os.fork
# ---------------------------------------------------------------------------


def test_os_fork_child_uses_parents_store(tmp_path):
    store = new_store(tmp_path / "cache.db")
    assert store.record(PROGRAM, SRC, sched(1), True, times(1)) is True
    parent_gen = _native.lib_copy
    r, w = os.pipe()

    def child():
        os.close(r)
        t0 = time.perf_counter()
        before = rollup()
        found = store.lookup(PROGRAM, SRC, sched(1))
        t1 = time.perf_counter()
        after = rollup()
        ok = (
            found is not None
            and found.execution_times == times(1)
            and store.record(PROGRAM, SRC, sched(2), False, None) is True
            and store.contains(PROGRAM, SRC, sched(2))
            and store.count() == 2
            and _native.lib_copy == parent_gen + 1
        )
        os.write(w, repr((t1 - t0, before, after, _native.loaded_from)).encode())
        store.close()  # closes the child's handle only
        return ok

    t_fork = time.perf_counter()
    pid = in_child(child)
    os.close(w)
    report = b""
    while chunk := os.read(r, 4096):
        report += chunk
    os.close(r)
    assert wait_all([pid], CHILD_TIMEOUT) == {pid: 0}
    total = time.perf_counter() - t_fork
    first_call, before, after, loaded_from = eval(report.decode())  # noqa: S307 - our own repr
    print(
        f"\nfork: child's first call {first_call * 1e3:.1f} ms (fork..child exit {total * 1e3:.1f} ms); "
        f"child RSS {before['Rss'] / 1024:.1f} -> {after['Rss'] / 1024:.1f} MiB "
        f"(+{(after['Rss'] - before['Rss']) / 1024:.1f} MiB, private dirty "
        f"+{(after['Private_Dirty'] - before['Private_Dirty']) / 1024:.1f} MiB); copy {loaded_from}"
    )
    assert loaded_from != _native.loaded_from
    assert first_call < 5.0
    assert after["Rss"] - before["Rss"] < 200 * 1024
    # The parent is untouched: same generation, same handle, sees the child's record.
    assert _native.lib_copy == parent_gen
    assert store.lookup(PROGRAM, SRC, sched(2)).is_legal is False
    assert store.count() == 2
    store.close()


def test_fork_before_any_store_call_and_utilities(tmp_path):
    """Module-level utilities (handle 0) and a store opened in the child work too."""
    import tirastore

    def child():
        s = new_store(tmp_path / "child.db")
        ok = s.record(PROGRAM, SRC, sched(3), True, [1.0]) and s.count() == 1
        s.close()
        return ok and tirastore.normalize_schedule(" R(L0, comps=[c])") == "R(L0,comps=['c'])"

    pid = in_child(child)
    assert wait_all([pid], CHILD_TIMEOUT) == {pid: 0}
    assert tirastore.validate_schedule("R(L0,comps=['c'])") == (True, "")


def test_fallback_to_temporary_file(tmp_path, monkeypatch):
    """Where memfd cannot be used, the fresh copy comes from an unlinked temporary file."""
    store = new_store(tmp_path / "cache.db")
    store.record(PROGRAM, SRC, sched(1), True, times(1))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()

    def child():
        def no_memfd(*a, **k):
            raise OSError(38, "memfd_create disabled by the test")

        os.memfd_create = no_memfd
        import tempfile

        tempfile.tempdir = str(tmpdir)
        ok = store.lookup(PROGRAM, SRC, sched(1)).execution_times == times(1)
        return ok and _native.loaded_from.startswith(str(tmpdir)) and not os.listdir(tmpdir)

    pid = in_child(child)
    assert wait_all([pid], CHILD_TIMEOUT) == {pid: 0}
    store.close()


def test_closed_store_stays_closed_in_child(tmp_path):
    store = new_store(tmp_path / "cache.db")
    store.close()

    def child():
        try:
            store.count()
        except ValueError as e:
            return "closed" in str(e)
        return False

    pid = in_child(child)
    assert wait_all([pid], CHILD_TIMEOUT) == {pid: 0}


def test_child_threads_race_on_first_call(tmp_path):
    store = new_store(tmp_path / "cache.db")
    store.record(PROGRAM, SRC, sched(1), True, times(1))

    def child():
        results, copies = [], set()

        def work():
            for _ in range(20):
                results.append(store.lookup(PROGRAM, SRC, sched(1)).execution_times == times(1))
            copies.add(_native.loaded_from)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return len(results) == 160 and all(results) and len(copies) == 1

    pid = in_child(child)
    assert wait_all([pid], CHILD_TIMEOUT) == {pid: 0}
    store.close()


def test_grandchildren(tmp_path):
    """Fork of a fork (of a fork): each generation loads its own copy and re-opens."""
    store = new_store(tmp_path / "cache.db")
    store.record(PROGRAM, SRC, sched(0), True, times(0))

    def level(depth: int, tag: int, use_before_fork: bool):
        def run():
            if use_before_fork:  # this generation loads its copy before forking the next
                assert store.lookup(PROGRAM, SRC, sched(0)).execution_times == times(0)
            if depth < 3:
                pid = in_child(level(depth + 1, tag, use_before_fork))
                if wait_all([pid], CHILD_TIMEOUT) != {pid: 0}:
                    return False
            # After our child finished, we still work (its copy was its own).
            ok = store.record(PROGRAM, SRC, sched(depth, tag), True, times(depth, tag))
            return ok and store.lookup(PROGRAM, SRC, sched(depth, tag)).execution_times == times(depth, tag)

        return run

    for tag, use_before_fork in ((1, True), (2, False)):
        pid = in_child(level(1, tag, use_before_fork))
        assert wait_all([pid], CHILD_TIMEOUT) == {pid: 0}
        for depth in (1, 2, 3):
            assert store.lookup(PROGRAM, SRC, sched(depth, tag)).execution_times == times(depth, tag)
    assert store.count() == 7
    store.close()


def test_pickle_round_trip_reopens(tmp_path):
    store = new_store(tmp_path / "cache.db")
    store.record(PROGRAM, SRC, sched(1), True, times(1))
    copy = pickle.loads(pickle.dumps(store))
    assert copy.db_path == store.db_path and copy.source_project == "fork-test"
    assert copy.lookup(PROGRAM, SRC, sched(1)).execution_times == times(1)
    copy.close()
    assert store.count() == 1  # the original's handle is its own
    store.close()
    closed = pickle.loads(pickle.dumps(store))
    with pytest.raises(ValueError, match="closed"):
        closed.count()


# ---------------------------------------------------------------------------
# multiprocessing, each start method
# ---------------------------------------------------------------------------

# The store the parent made, inherited by fork workers that are not passed one.
_INHERITED: TiraStore | None = None

N_TASKS = 40
OPS_PER_TASK = 25  # 40 x 25 = 1,000 operations per pool
N_SEEDED = 50


def _pool_task(args):
    """25 mixed operations; returns (task, mismatches, written) with written = {schedule: (legal, times)}."""
    store, task = args
    if store is None:
        store = _INHERITED
    rng = random.Random(task)
    mismatches = []
    written = {}
    tag = 100 + task
    i = 0
    while i < OPS_PER_TASK:
        op = rng.choice(("lookup", "record", "contains", "record_many"))
        if op == "lookup":
            k = rng.randrange(N_SEEDED)
            got = store.lookup(PROGRAM, SRC, sched(k))
            if got is None or got.execution_times != times(k) or got.source_project != "fork-test":
                mismatches.append(("lookup", k, got))
        elif op == "contains":
            k = rng.randrange(N_SEEDED)
            if not store.contains(PROGRAM, SRC, sched(k)):
                mismatches.append(("contains", k))
            if store.contains(PROGRAM, SRC, sched(10_000 + i, tag)):
                mismatches.append(("contains-miss", i))
        elif op == "record":
            legal = bool(i % 2)
            if not store.record(PROGRAM, SRC, sched(i, tag), legal, times(i, tag) if legal else None):
                mismatches.append(("record", i))
            written[sched(i, tag)] = (legal, times(i, tag) if legal else None)
        else:
            entries = [
                {"tiralib_schedule_string": sched(1000 + 3 * i + j, tag), "is_legal": True,
                 "execution_times": times(1000 + 3 * i + j, tag)}
                for j in range(3)
            ]
            if store.record_many(PROGRAM, SRC, entries) != 3:
                mismatches.append(("record_many", i))
            for e in entries:
                written[e["tiralib_schedule_string"]] = (True, e["execution_times"])
        i += 1
    return task, mismatches, written, (os.getpid(), _native.lib_copy)


@pytest.mark.parametrize(
    "method,pass_store",
    [("fork", False), ("fork", True), ("forkserver", True), ("spawn", True)],
    ids=["fork-inherited", "fork-pickled", "forkserver", "spawn"],
)
def test_pool_start_methods(tmp_path, method, pass_store):
    global _INHERITED
    store = new_store(tmp_path / "cache.db")
    store.record_many(
        PROGRAM, SRC,
        [{"tiralib_schedule_string": sched(k), "is_legal": True, "execution_times": times(k)} for k in range(N_SEEDED)],
    )
    assert store.count() == N_SEEDED  # the parent has used its store
    _INHERITED = store
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        # The server imports tirastore (loading the library) before it forks
        # the workers, so they go through the reload as fork workers do.
        ctx.set_forkserver_preload(["tirastore"])
    tasks = [(store if pass_store else None, t) for t in range(N_TASKS)]
    t0 = time.perf_counter()
    try:
        with ctx.Pool(8) as pool:
            res = pool.map_async(_pool_task, tasks, chunksize=1)
            results = res.get(timeout=90)
    finally:
        _INHERITED = None
    elapsed = time.perf_counter() - t0
    written = {}
    for task, mismatches, w, _pid in results:
        assert mismatches == [], (task, mismatches)
        written.update(w)
    workers = {r[3] for r in results}
    print(f"\n{method} pool (store {'pickled' if pass_store else 'inherited'}): "
          f"{N_TASKS * OPS_PER_TASK} ops in {elapsed:.2f} s, {len(workers)} workers, "
          f"worker generations {sorted({g for _, g in workers})}")
    # fork and forkserver workers are forked children (a fresh copy, generation
    # 1); spawn workers load the library at import (generation 0).
    assert {g for _, g in workers} == ({0} if method == "spawn" else {1})
    # Record by record, in the parent, with the parent's own (still valid) handle.
    assert store.count() == N_SEEDED + len(written)
    for s, (legal, t) in written.items():
        got = store.lookup(PROGRAM, SRC, s)
        assert got is not None and got.is_legal is legal and got.execution_times == t, s
        assert got.source_project == "fork-test"
    for k in range(N_SEEDED):
        assert store.lookup(PROGRAM, SRC, sched(k)).execution_times == times(k)
    store.close()


# ---------------------------------------------------------------------------
# Stress: forks under GC churn (100 in the fast tier, 1,000 in the soak tier)
# ---------------------------------------------------------------------------

BATCH = 50


def _churn(n: int) -> None:
    junk = []
    for i in range(n):
        junk.append([{"k": i, "v": [i] * 8} for _ in range(20)])
        if len(junk) > 50:
            del junk[:25]
        if i % 50 == 0:
            gc.collect()


@pytest.mark.parametrize("n_forks", tiered(100, 1000, "forks"))
def test_stress_forks_under_gc_churn(tmp_path, n_forks):
    """n_forks children, forked in batches of BATCH while a thread of the
    parent churns its Go heap (lookups, stats) and Python's GC, each look up,
    churn and record through the parent's store: none fails or hangs, and
    every record is there."""
    store = new_store(tmp_path / "cache.db")
    store.record_many(
        PROGRAM, SRC,
        [{"tiralib_schedule_string": sched(k), "is_legal": True, "execution_times": times(k)} for k in range(N_SEEDED)],
    )
    stop = threading.Event()
    churn_calls = [0]

    def parent_churn():
        # Go heap churn (lookups, stats) and Python GC churn while the parent forks.
        while not stop.is_set():
            for k in range(N_SEEDED):
                store.lookup(PROGRAM, SRC, sched(k))
            store.stats()
            churn_calls[0] += N_SEEDED + 1
            _churn(100)
            time.sleep(0.005)  # leave the two cores mostly to the children

    churner = threading.Thread(target=parent_churn, daemon=True)
    churner.start()

    def child_for(n: int):
        def run():
            _churn(40)  # allocation churn with a full gc.collect() before the first call
            k = n % N_SEEDED
            if store.lookup(PROGRAM, SRC, sched(k)).execution_times != times(k):
                return False
            for j in range(10):  # churn the child's Go heap, with young-generation collections
                store.contains(PROGRAM, SRC, sched(j))
                junk = [[j] * 16 for _ in range(200)]
                del junk
                gc.collect(j % 2)
            if not store.record(PROGRAM, SRC, sched(n, 7), True, times(n, 7)):
                return False
            return store.contains(PROGRAM, SRC, sched(n, 7))

        return run

    statuses = {}
    t0 = time.perf_counter()
    try:
        for start in range(0, n_forks, BATCH):
            pids = [in_child(child_for(n)) for n in range(start, start + BATCH)]
            gc.collect()
            batch = wait_all(pids, CHILD_TIMEOUT)
            statuses.update(batch)
            bad = {p: s for p, s in batch.items() if s != 0}
            assert not bad, f"batch at {start}: children failed or hung: {bad}"
    finally:
        stop.set()
        churner.join(timeout=60)
    elapsed = time.perf_counter() - t0
    assert len(statuses) == n_forks and set(statuses.values()) == {0}
    print(f"\nstress: {n_forks} forks in batches of {BATCH}: {elapsed:.1f} s "
          f"({elapsed / n_forks * 1e3:.1f} ms/fork wall), parent churn calls {churn_calls[0]}")
    assert churn_calls[0] > 0
    assert store.count() == N_SEEDED + n_forks
    for n in range(n_forks):
        assert store.lookup(PROGRAM, SRC, sched(n, 7)).execution_times == times(n, 7)
    store.close()


# ---------------------------------------------------------------------------
# Negative control: without the reload, a forked child cannot use the store
# ---------------------------------------------------------------------------

_CONTROL = textwrap.dedent(
    """
    import os, signal, sys, time
    from tirastore import TiraStore
    s = TiraStore(sys.argv[1], cpu_model="cpu", slurm_cpus="1")
    s.record("p", "void f() {}", "R(L0,comps=['c'])", True, [1.0])
    pid = os.fork()
    if pid == 0:
        try:
            s.lookup("p", "void f() {}", "R(L0,comps=['c'])")
            s.count()
        except RuntimeError as e:  # the library's fork guard
            os._exit(3 if "fork()" in str(e) else 4)
        os._exit(0)
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            print("EXITED", os.waitstatus_to_exitcode(st), flush=True)
            sys.exit(0)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    print("HUNG", flush=True)
    """
)


@pytest.mark.parametrize("reload,expected", [("0", "EXITED 3"), ("1", "EXITED 0")])
def test_negative_control_without_reload_child_fails(tmp_path, reload, expected):
    env = dict(os.environ, TIRASTORE_FORK_RELOAD=reload)
    out = subprocess.run(
        [sys.executable, "-c", _CONTROL, str(tmp_path / "c.db"), "5"],
        env=env, capture_output=True, text=True, timeout=60, start_new_session=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected, (out.stdout, out.stderr)


# ---------------------------------------------------------------------------
# Signal chaining through two runtimes
# ---------------------------------------------------------------------------

_SEGV = textwrap.dedent(
    """
    import ctypes, faulthandler, os, sys, time
    from tirastore import TiraStore
    s = TiraStore(sys.argv[1], cpu_model="cpu", slurm_cpus="1")
    s.count()
    faulthandler.enable()
    pid = os.fork()
    if pid == 0:
        s.count()  # loads the fresh copy: its SIGSEGV handler now sits in front
        ctypes.string_at(0)  # a fault outside Go: forwarded fresh Go -> dead Go -> faulthandler
        os._exit(0)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            print("STATUS", os.waitstatus_to_exitcode(st), flush=True)
            sys.exit(0)
        time.sleep(0.01)
    os.kill(pid, 9)
    print("HUNG", flush=True)
    """
)


def test_fault_outside_go_in_reloaded_child_reaches_python(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _SEGV, str(tmp_path / "c.db")],
        capture_output=True, text=True, timeout=60, start_new_session=True,
    )
    assert out.stdout.strip() == f"STATUS {-signal.SIGSEGV}", (out.stdout, out.stderr)
    assert "Fatal Python error: Segmentation fault" in out.stderr


_SIGINT = textwrap.dedent(
    """
    import os, signal, sys, tempfile, threading, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from conftest import lock_path_for, write_fake_lock
    from tirastore import TiraStore
    db = Path(sys.argv[1])
    s = TiraStore(db, cpu_model="cpu", slurm_cpus="1", lock_timeout=3)
    s.count()
    write_fake_lock(lock_path_for(db), hostname="other-node")
    def wait_for_lock():
        try:
            s.record("p", "void f() {}", "R(L0,comps=['c'])", True, [1.0])
        except TimeoutError:
            pass
    t = threading.Thread(target=wait_for_lock)
    t.start()
    time.sleep(0.3)  # the waiting call has armed the library's SIGINT handler
    pid = os.fork()
    if pid == 0:
        try:
            # the fresh copy is loaded (the parent's database stays locked)
            TiraStore(db.with_name("other.db"), cpu_model="cpu", slurm_cpus="1").count()
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(2)
            os._exit(3)  # SIGINT swallowed by the dead runtime's handler
        except KeyboardInterrupt:
            os._exit(0)
    _, st = os.waitpid(pid, 0)
    print("CHILD", os.waitstatus_to_exitcode(st), flush=True)
    t.join()
    """
)


def test_ctrl_c_in_child_forked_during_a_lock_wait(tmp_path):
    """A fork while another thread waits for the lock: the child still gets KeyboardInterrupt."""
    out = subprocess.run(
        [sys.executable, "-c", _SIGINT, str(tmp_path / "c.db"), str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=60, start_new_session=True,
    )
    assert out.stdout.strip() == "CHILD 0", (out.stdout, out.stderr)


# ---------------------------------------------------------------------------
# A lock another thread of the parent held at the fork
# ---------------------------------------------------------------------------


def _fork_while_held(lock, child_fn, timeout: float):
    """Fork while another thread holds lock; the child runs child_fn. The
    child's status (0, an exit code, or "hung")."""
    held, release = threading.Event(), threading.Event()

    def holder():
        with lock:
            held.set()
            release.wait(60)

    t = threading.Thread(target=holder, daemon=True)
    t.start()
    assert held.wait(30)
    try:
        pid = in_child(child_fn)
    finally:
        release.set()
        t.join(60)
    return wait_all([pid], timeout)[pid]


def _ffi_lock_scenario(tmp_path, timeout):
    store = new_store(tmp_path / "cache.db")
    store.record(PROGRAM, SRC, sched(1), True, times(1))
    # cffi's lock: what a parent thread holds while it makes its first call
    # of a library function (the soak's 1,000 forks caught it so).
    return _fork_while_held(_native.ffi._lock, lambda: store.lookup(PROGRAM, SRC, sched(1)) is not None, timeout)


def _cache_lock_scenario(tmp_path, timeout):
    from tirastore import PersistentCache, persistent_cache

    PersistentCache("a", path=str(tmp_path / "a.json")).put("cpu", "op", "k", {"x": 1})
    return _fork_while_held(persistent_cache._open_dbs_lock,
                            lambda: PersistentCache("b", path=str(tmp_path / "b.json")).put("cpu", "op", "k", {"x": 2}),
                            timeout)


@pytest.mark.parametrize("scenario", [_ffi_lock_scenario, _cache_lock_scenario], ids=["cffi", "cache"])
def test_a_lock_held_by_another_thread_at_the_fork(tmp_path, scenario):
    """A child forked while another thread of the parent held a lock of the
    package (cffi's, which the child's load of its fresh copy takes; the
    caches' table of open databases) gets a new one, and works."""
    assert scenario(tmp_path, CHILD_TIMEOUT) == 0


@pytest.mark.parametrize("module,scenario", [("_native", _ffi_lock_scenario), ("persistent_cache", _cache_lock_scenario)],
                         ids=["cffi", "cache"])
def test_negative_control_an_inherited_lock_hangs_the_child(tmp_path, monkeypatch, module, scenario):
    """NEGATIVE CONTROL: without the new locks, the same child hangs."""
    import importlib

    monkeypatch.setattr(importlib.import_module(f"tirastore.{module}"), "_reset_inherited_locks", lambda: None)
    assert scenario(tmp_path, 10) == "hung"
