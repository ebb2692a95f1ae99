"""Faults a user will meet on a cluster filesystem, each with a clear error
and nothing lost: a read-only or full directory, a file that is not a
database, a database from a newer schema, a directory that vanishes, a
foreign POSIX lock on the database, a directory another user owns."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import TEST_CPU, leftover_lock_files
from tirastore import TiraStore

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="mounting a tmpfs and switching users needs root")

SCHED = "U(L0,4,comps=['c1'])"


def _sched(i: int) -> str:
    return f"S(L0,L1,{i},8,comps=['c1'])"


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        for flags in ([], ["-f"], ["-l"]):
            if subprocess.run(["umount", *flags, str(path)], capture_output=True).returncode == 0:
                break


def _no_lock_left(d: Path) -> None:
    left = leftover_lock_files(d)
    assert left == [], left


@needs_root
def test_read_only_directory(tmp_path):
    mnt = tmp_path / "ro"
    with tmpfs(mnt, "4m"):
        with TiraStore(mnt / "cache.db", cpu_model=TEST_CPU) as s:
            s.record("p", "src", SCHED, True, [1.0])
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        with pytest.raises(OSError) as e:
            TiraStore(mnt / "cache.db", cpu_model=TEST_CPU)
        assert e.value.errno == errno.EROFS  # as Python's own open() reports it
        assert str(mnt) in str(e.value) and "read-only" in str(e.value)
        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
        with TiraStore(mnt / "cache.db", cpu_model=TEST_CPU) as s:
            assert s.lookup("p", "src", SCHED).execution_times == [1.0]
        _no_lock_left(mnt)


@needs_root
def test_directory_full(tmp_path):
    """ENOSPC mid-write: a clear OSError, the database intact, no lock left,
    and every record acknowledged before the disk filled still there."""
    mnt = tmp_path / "full"
    with tmpfs(mnt, "256k"):
        s = TiraStore(mnt / "cache.db", cpu_model=TEST_CPU)
        acked = []
        big = "x" * 20000
        # SQLite reports SQLITE_FULL (sqlite3.OperationalError, as the
        # original raised); the ticket file may instead hit ENOSPC (OSError).
        with pytest.raises((OSError, sqlite3.OperationalError)) as e:
            for i in range(1000):
                if s.record(f"p{i}", big + str(i), SCHED, True, [float(i)]):
                    acked.append(i)
        assert getattr(e.value, "errno", None) == errno.ENOSPC or "full" in str(e.value).lower(), e.value
        assert str(mnt) in str(e.value)
        assert acked, "the disk filled before any record was written"
        _no_lock_left(mnt)
        (mnt / "filler").unlink(missing_ok=True)
        for i in acked:
            assert s.lookup(f"p{i}", big + str(i), SCHED).execution_times == [float(i)]
        s.close()
        with sqlite3.connect(mnt / "cache.db") as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == len(acked)


def test_not_a_database(tmp_path):
    db = tmp_path / "cache.db"
    db.write_bytes(b"this is a text file, not SQLite\n" * 200)
    with pytest.raises(sqlite3.DatabaseError) as e:
        TiraStore(db, cpu_model=TEST_CPU)
    assert str(db) in str(e.value)
    _no_lock_left(tmp_path)


def test_database_from_a_newer_schema(tmp_path):
    db = tmp_path / "cache.db"
    TiraStore(db, cpu_model=TEST_CPU).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE db_meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(sqlite3.DatabaseError, match="newer"):
        TiraStore(db, cpu_model=TEST_CPU)


def test_directory_vanishes(tmp_path):
    d = tmp_path / "shared"
    s = TiraStore(d / "cache.db", cpu_model=TEST_CPU)
    s.record("p", "src", SCHED, True, [1.0])
    shutil.rmtree(d)
    with pytest.raises(FileNotFoundError) as e:
        s.lookup("p", "src", SCHED)
    assert str(d) in str(e.value)
    with pytest.raises(FileNotFoundError):
        s.record("p", "src", _sched(2), True, [1.0])
    assert not d.exists()  # nothing recreated behind the user's back
    s.close()


def test_foreign_posix_lock_does_not_block(tmp_path):
    """SQLite's unix-none VFS: a POSIX lock on the database (held by some
    other program, or meaningless across nodes on Lustre) neither blocks nor
    fails an operation; our hard-link lock is what serializes."""
    db = tmp_path / "cache.db"
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        s.record("p", "src", SCHED, True, [1.0])
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sqlite3, sys, time
            c = sqlite3.connect({str(db)!r}, isolation_level=None)
            c.execute("BEGIN EXCLUSIVE")
            print("locked", flush=True)
            time.sleep(30)
        """)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with TiraStore(db, cpu_model=TEST_CPU, lock_timeout=5) as s:
            assert s.lookup("p", "src", SCHED).execution_times == [1.0]
            assert s.record("p", "src", _sched(3), True, [2.0])
    finally:
        holder.kill()
        holder.wait()


def _run_as_nobody(body: str) -> subprocess.CompletedProcess:
    """Run Python code as user nobody. The interpreter and the library are
    loaded as root first (they live under root's home), then the process
    drops its privileges, as a job of another user would be."""
    nobody = pwd.getpwnam("nobody")
    # The library loads on its first call: loaded here, as root, on purpose.
    code = "import os, tirastore\ntirastore._native.ensure_loaded()\n" \
        f"os.setgroups([]); os.setgid({nobody.pw_gid}); os.setuid({nobody.pw_uid})\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.fixture
def shared_tmp():
    """A directory every user can reach (pytest's own tmp root is 0700)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="tirastore-faults-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@needs_root
def test_directory_not_writable_by_this_user(shared_tmp):
    """Another user's private directory: a PermissionError that names it."""
    tmp_path = shared_tmp
    d = tmp_path / "private"
    with TiraStore(d / "cache.db", cpu_model=TEST_CPU) as s:
        s.record("p", "src", SCHED, True, [1.0])
    d.chmod(0o755)
    (d / "cache.db").chmod(0o644)
    out = _run_as_nobody(f"""
        try:
            tirastore.TiraStore({str(d / 'cache.db')!r}, cpu_model={TEST_CPU!r}, lock_timeout=5)
        except PermissionError as e:
            print("PermissionError:", e)
    """)
    assert "PermissionError:" in out.stdout, out.stdout + out.stderr
    assert str(d) in out.stdout and "create ticket" in out.stdout  # the directory, not the path to it


@needs_root
def test_another_users_abandoned_lock(shared_tmp):
    """A lock of another user that is abandoned but, in the sticky (1777)
    directory, cannot be removed by us: the TimeoutError says so and names
    the lock, its holder and the permission error."""
    d = shared_tmp / "shared"
    TiraStore(d / "cache.db", cpu_model=TEST_CPU).close()  # creates d with mode 1777
    lock = d / "cache.db.lock"
    # Root's lock, written by the original protocol an hour ago: stale.
    lock.write_text(json.dumps({"hostname": "node042", "pid": 4242, "timestamp": time.time() - 3600}))
    lock.chmod(0o644)
    out = _run_as_nobody(f"""
        try:
            tirastore.TiraStore({str(d / 'cache.db')!r}, cpu_model={TEST_CPU!r}, lock_timeout=1)
        except TimeoutError as e:
            print("TimeoutError:", e)
    """)
    assert "TimeoutError:" in out.stdout, out.stdout + out.stderr
    msg = out.stdout
    assert str(lock) in msg and "node042" in msg and "4242" in msg
    assert "could not be removed" in msg
    assert "operation not permitted" in msg or "permission denied" in msg  # EPERM in a sticky directory
    assert lock.exists()
