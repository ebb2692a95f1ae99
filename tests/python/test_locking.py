"""The hard-link lock: its path, content, staleness and cross-process exclusion."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import (
    SCHED_R,
    SRC_BLUR,
    TEST_CPU,
    TEST_SLURM,
    expected_key,
    leftover_lock_files,
    lock_path_for,
    raw_records,
    write_fake_lock,
)

from tirastore import TiraStore


def _open(db, **kw):
    kw.setdefault("cpu_model", TEST_CPU)
    kw.setdefault("slurm_cpus", TEST_SLURM)
    return TiraStore(db, **kw)


@pytest.mark.parametrize(
    "db_name, lock_name, decoy",
    [
        ("cache.db", "cache.db.lock", None),
        ("cache.sqlite", "cache.db.lock", "cache.sqlite.lock"),
        ("cache", "cache.db.lock", "cache.lock"),
        ("a.b.c", "a.b.db.lock", "a.b.c.lock"),
        (".hidden", ".hidden.db.lock", ".db.lock"),
    ],
)
def test_lock_path(tmp_path, db_name, lock_name, decoy):
    # independent computation of the rule
    assert lock_path_for(tmp_path / db_name).name == lock_name
    db = tmp_path / db_name
    s = _open(db, lock_timeout=0.5)
    try:
        s.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
        if decoy:
            write_fake_lock(tmp_path / decoy)  # not the lock: must not block
            assert s.count() == 1
            (tmp_path / decoy).unlink()
        lock = tmp_path / lock_name
        write_fake_lock(lock)  # held by someone else, fresh
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            s.count()
        assert time.monotonic() - t0 < 30
        assert lock.exists()  # a fresh lock is never broken
        lock.unlink()
        assert s.count() == 1
    finally:
        s.close()
    names = leftover_lock_files(tmp_path)
    assert names == [], names


def test_lock_path_relative_db_is_resolved(tmp_path, monkeypatch):
    sub = tmp_path / "d"
    sub.mkdir()
    monkeypatch.chdir(sub)
    s = _open("rel.db", lock_timeout=0.5)
    try:
        write_fake_lock(sub / "rel.db.lock")
        monkeypatch.chdir(tmp_path)  # cwd change must not move the lock
        with pytest.raises(TimeoutError):
            s.count()
        (sub / "rel.db.lock").unlink()
        assert s.count() == 0
    finally:
        s.close()


def test_lock_timeout_raises_timeout_error(tmp_path):
    db = tmp_path / "cache.db"
    s = _open(db, lock_timeout=1.0)
    try:
        write_fake_lock(tmp_path / "cache.db.lock")
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            s.lookup("blur", SRC_BLUR, SCHED_R)
        elapsed = time.monotonic() - t0
        assert 0.5 <= elapsed < 30, elapsed
        with pytest.raises(TimeoutError):
            s.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
        (tmp_path / "cache.db.lock").unlink()
        assert s.count() == 0  # nothing was written while locked out
    finally:
        s.close()
    assert leftover_lock_files(tmp_path) == []


def test_constructor_waits_for_lock_too(tmp_path):
    db = tmp_path / "cache.db"
    write_fake_lock(tmp_path / "cache.db.lock")
    with pytest.raises(TimeoutError):
        _open(db, lock_timeout=0.5)
    (tmp_path / "cache.db.lock").unlink()


def test_stale_lock_is_broken(tmp_path):
    db = tmp_path / "cache.db"
    s = _open(db, stale_lock_timeout=600.0, lock_timeout=30.0)
    try:
        s.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
        write_fake_lock(tmp_path / "cache.db.lock", age_seconds=1000)
        t0 = time.monotonic()
        assert s.count() == 1
        assert time.monotonic() - t0 < 20
        assert not (tmp_path / "cache.db.lock").exists()
    finally:
        s.close()
    assert leftover_lock_files(tmp_path) == []


def test_stale_timeout_is_honoured(tmp_path):
    db = tmp_path / "cache.db"
    s = _open(db, stale_lock_timeout=5000.0, lock_timeout=0.5)
    try:
        write_fake_lock(tmp_path / "cache.db.lock", age_seconds=1000)
        with pytest.raises(TimeoutError):
            s.count()
        assert (tmp_path / "cache.db.lock").exists()
    finally:
        (tmp_path / "cache.db.lock").unlink()
        s.close()


def test_unparseable_lock_is_never_broken(tmp_path):
    db = tmp_path / "cache.db"
    s = _open(db, stale_lock_timeout=1.0, lock_timeout=1.0)
    lock = tmp_path / "cache.db.lock"
    try:
        lock.write_text("this is not json")
        old = time.time() - 100000
        os.utime(lock, (old, old))
        with pytest.raises(TimeoutError):
            s.count()
        assert lock.exists() and lock.read_text() == "this is not json"
    finally:
        if lock.exists():
            lock.unlink()
        s.close()


def test_waits_for_a_lock_released_by_another_process(tmp_path):
    db = tmp_path / "cache.db"
    s = _open(db, lock_timeout=60.0)
    try:
        s.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
        lock = tmp_path / "cache.db.lock"
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(
                    """
                    import json, os, socket, sys, time
                    lock = sys.argv[1]
                    tmp = os.path.join(os.path.dirname(lock), ".lock_%s_%d_x" % (socket.gethostname(), os.getpid()))
                    with open(tmp, "w") as f:
                        json.dump({"hostname": socket.gethostname(), "pid": os.getpid(), "timestamp": time.time()}, f)
                    os.link(tmp, lock)
                    print("held", flush=True)
                    time.sleep(1.5)
                    os.unlink(lock)
                    os.unlink(tmp)
                    """
                ),
                str(lock),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "held"
            t0 = time.monotonic()
            assert s.count() == 1
            waited = time.monotonic() - t0
            assert waited >= 0.8, waited
        finally:
            holder.wait(timeout=30)
    finally:
        s.close()
    assert leftover_lock_files(tmp_path) == []


_WORKER_OPS = textwrap.dedent(
    """
    import sys
    from tirastore import TiraStore
    s = TiraStore(sys.argv[1], cpu_model=sys.argv[2], slurm_cpus=sys.argv[3])
    print("ready", flush=True)
    src = "void f() {}"
    s.record("f", src, "R(L0,comps=['c'])", True, [1.0])
    for i in range(int(sys.argv[4])):
        s.lookup("f", src, "R(L0,comps=['c'])")
        s.contains("f", src, "R(L0,comps=['x%d'])" % i)
    s.close()
    """
)


def test_lock_file_content_is_original_compatible(tmp_path):
    """While held, the lock file is JSON {hostname, pid, timestamp} (COMPAT.md)."""
    db = tmp_path / "cache.db"
    _open(db).close()
    lock = tmp_path / "cache.db.lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER_OPS, str(db), TEST_CPU, TEST_SLURM, "1500"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    samples = []
    ticket_names = set()
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            data = lock.read_text(encoding="utf-8")
        except (FileNotFoundError, OSError):
            data = None
        if data:
            samples.append(data)
        if len(ticket_names) < 5:
            try:
                for n in os.listdir(tmp_path):
                    if n.startswith(".lock_"):
                        ticket_names.add(n)
            except OSError:
                pass
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert samples, "never observed the lock file while the worker was running"
    host = socket.gethostname()
    now = time.time()
    for data in samples[:200]:
        info = json.loads(data)
        assert set(info) >= {"hostname", "pid", "timestamp"}
        assert info["hostname"] == host
        assert info["pid"] == proc.pid
        assert isinstance(info["timestamp"], (int, float)) and not isinstance(info["timestamp"], bool)
        assert now - 300 < info["timestamp"] <= now + 1
    assert ticket_names, "never saw a ticket file while the worker was running"
    for n in ticket_names:
        assert n.startswith(f".lock_{host}_{proc.pid}_"), n
    assert leftover_lock_files(tmp_path) == []


_CONTENDER = textwrap.dedent(
    """
    import json, sys
    from tirastore import TiraStore
    db, wid, n_unique, n_contested = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    s = TiraStore(db, source_project="w%d" % wid, cpu_model=sys.argv[5], slurm_cpus=sys.argv[6])
    src = "void contested() {}"
    won = []
    for i in range(n_unique):
        assert s.record("w%d" % wid, "void w%d() {}" % wid, "U(L0,%d,comps=['c'])" % i, True, [float(i), wid])
    for i in range(n_contested):
        if s.record("contested", src, "U(L1,%d,comps=['c'])" % i, True, [float(wid)]):
            won.append(i)
    s.close()
    print(json.dumps(won))
    """
)


def test_multi_process_contention(tmp_path):
    db = tmp_path / "cache.db"
    _open(db).close()
    n_workers, n_unique, n_contested = 4, 30, 15
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONTENDER, str(db), str(w), str(n_unique), str(n_contested),
             TEST_CPU, TEST_SLURM],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(n_workers)
    ]
    wins = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        wins.append(json.loads(out.strip().splitlines()[-1]))
    all_wins = sorted(i for w in wins for i in w)
    assert all_wins == list(range(n_contested)), wins  # exactly one winner each
    with _open(db) as s:
        assert s.count() == n_workers * n_unique + n_contested
        assert s.program_count() == n_workers + 1
        for w in range(n_workers):
            for i in range(n_unique):
                r = s.lookup(f"w{w}", f"void w{w}() {{}}", f"U(L0,{i},comps=['c'])")
                assert r is not None and r.execution_times == [float(i), w]
                assert r.source_project == f"w{w}"
        for i in range(n_contested):
            r = s.lookup("contested", "void contested() {}", f"U(L1,{i},comps=['c'])")
            winner = [w for w in range(n_workers) if i in wins[w]][0]
            assert r.execution_times == [float(winner)]
            assert r.source_project == f"w{winner}"
    assert leftover_lock_files(tmp_path) == []


_ORIGINAL_STYLE_WRITER = textwrap.dedent(
    """
    # Writes records the way the original does, honouring the original's lock
    # protocol (ticket file + link()), written from COMPAT.md.
    import hashlib, json, os, random, socket, sqlite3, sys, time
    from datetime import datetime, timezone
    db, n = sys.argv[1], int(sys.argv[2])
    lock = os.path.splitext(db)[0] + ".db.lock"
    host = socket.gethostname()
    def acquire():
        delay = 0.001
        while True:
            ticket = os.path.join(os.path.dirname(lock), ".lock_%s_%d_%f" % (host, os.getpid(), random.random()))
            with open(ticket, "w") as f:
                json.dump({"hostname": host, "pid": os.getpid(), "timestamp": time.time()}, f)
            try:
                os.link(ticket, lock)
                return ticket
            except OSError:
                os.unlink(ticket)
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.05)
    src = "void orig() {}"
    ph = hashlib.sha256("voidorig(){}".encode()).hexdigest()
    for i in range(n):
        sched = "U(L2,%d,comps=['c'])" % i
        key = hashlib.sha256(json.dumps({"program_hash": ph, "tiralib_schedule_string": sched},
                             sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        now = datetime.now(timezone.utc).isoformat()
        ticket = acquire()
        try:
            conn = sqlite3.connect(db, timeout=0)
            conn.execute("PRAGMA busy_timeout=0")
            conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("INSERT OR IGNORE INTO programs VALUES (?,?,?)", (ph, "orig", src))
            conn.execute("INSERT INTO records VALUES (?,?,?,?,?,?,?,?,?)",
                         (key, ph, sched, json.dumps({"is_legal": True, "execution_times": [float(i)]},
                          separators=(",", ":")), host, "orig", now, now, "orig-proj"))
            conn.commit()
            conn.close()
        finally:
            os.unlink(lock)
            os.unlink(ticket)
    print("done")
    """
)


def test_mutual_exclusion_with_original_style_writer(tmp_path):
    db = tmp_path / "cache.db"
    s = _open(db, lock_timeout=120.0)
    n = 150
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _ORIGINAL_STYLE_WRITER, str(db), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n):
            assert s.record("mine", "void mine() {}", f"U(L3,{i},comps=['c'])", True, [float(i)]) is True
            s.lookup("orig", "void orig() {}", f"U(L2,{i},comps=['c'])")
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert s.count() == 2 * n
        for i in range(n):
            r = s.lookup("orig", "void orig() {}", f"U(L2,{i},comps=['c'])")
            assert r is not None and r.execution_times == [float(i)]
            assert r.source_project == "orig-proj"
    finally:
        s.close()
    rows = raw_records(db)
    assert expected_key("void mine() {}", "U(L3,0,comps=['c'])") in rows
    assert leftover_lock_files(tmp_path) == []
