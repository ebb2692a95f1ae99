"""Every piece of advice about the lock, claims and check
names a command that works, and that command then does it.

Each test reads the advice from what the library says (lock status, check,
a lock's timeout error, a refused journal), runs exactly the command between
its backquotes, and checks the thing is gone. The negative controls run the
command a wrong advice would give (the plain `lock break` for a lock file
that is not a record and changed recently, which the CLI once advised; the
advised command without the stale timeout the advice repeats; the advised
command as a user who may not remove the file) and show that it does not
work, so that these tests catch advice that does not.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import TEST_CPU

from tirastore import TiraStore

ADVICE = re.compile(r"`(tirastore [^`]+)`")
NOBODY = 65534


def tirastore(*args: Any, as_uid: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tirastore", *map(str, args)]
    if as_uid is not None:
        cmd = ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def advised(text: str) -> list[list[str]]:
    """The commands an advice names, as argument lists without "tirastore"."""
    cmds = [shlex.split(c) for c in ADVICE.findall(text)]
    assert cmds and all(c[0] == "tirastore" for c in cmds), text
    return [c[1:] for c in cmds]


def follow(cmd: list[str], as_uid: int | None = None) -> subprocess.CompletedProcess:
    return tirastore(*cmd, as_uid=as_uid)


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "cache.db"
    with TiraStore(path, cpu_model=TEST_CPU) as s:
        s.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [1.0])
    return path


def lock_of(db: Path) -> Path:
    return db.with_suffix(".db.lock")


def test_a_lock_file_that_is_not_a_record_and_changed_recently(db):
    lock = lock_of(db)
    lock.write_text("garbage")
    st = tirastore("lock", "status", db)
    assert st.returncode == 1 and "not a lock record" in st.stdout, st.stdout + st.stderr
    plain, force = advised(st.stdout)
    assert plain == ["lock", "break", str(db)] and force == ["lock", "break", "--force", str(db)]
    # Negative control: the plain break (what the CLI used to advise at once)
    # refuses a file that may be a lock being written, and says what forces.
    r = follow(plain)
    assert r.returncode == 1 and lock.exists()
    assert advised(r.stderr) == [force], r.stderr
    # check says the same, and --repair does not remove it.
    ck = tirastore("check", db)
    assert ck.returncode == 1 and advised(ck.stdout) == [plain, force], ck.stdout
    assert tirastore("check", "--repair", db).returncode == 1 and lock.exists()
    # The forced break does what it says.
    r = follow(force)
    assert r.returncode == 0 and not lock.exists(), r.stdout + r.stderr
    assert tirastore("check", db).returncode == 0


def test_a_lock_file_that_is_not_a_record_and_old(db):
    lock = lock_of(db)
    lock.write_text("garbage")
    time.sleep(1.3)
    st = tirastore("lock", "status", "--stale-lock-timeout", "1", db)
    assert st.returncode == 1 and "looks abandoned" in st.stdout, st.stdout
    [cmd] = advised(st.stdout)
    assert cmd == ["lock", "break", "--stale-lock-timeout", "1", str(db)]
    # Negative control: without the timeout the advice repeats, the break
    # judges by the default (600 s) and refuses.
    without = [a for a in cmd if a not in ("--stale-lock-timeout", "1")]
    assert follow(without).returncode == 1 and lock.exists()
    r = follow(cmd)
    assert r.returncode == 0 and "broke the lock" in r.stdout and not lock.exists(), r.stdout + r.stderr
    # check advises its --repair, which then removes it and checks the tables.
    lock.write_text("garbage")
    time.sleep(1.3)
    ck = tirastore("check", "--stale-lock-timeout", "1", db)
    assert ck.returncode == 1 and "abandoned" in ck.stdout, ck.stdout
    [cmd] = advised(ck.stdout)
    assert cmd == ["check", "--repair", "--stale-lock-timeout", "1", str(db)]
    r = follow(cmd + ["--json"])
    rep = json.loads(r.stdout)
    assert r.returncode == 0 and rep["lock"]["broken"] and rep["tables"]["integrity"] == ["ok"], r.stdout
    assert not lock.exists()


def test_the_timeout_of_a_waiter_names_what_removes_the_lock(db):
    lock = lock_of(db)
    lock.write_text("{not json")
    with pytest.raises(TimeoutError) as e:
        with TiraStore(db, cpu_model=TEST_CPU, lock_timeout=0.5) as s:
            s.count()
    assert "is not a lock record" in str(e.value)
    cmds = advised(str(e.value))
    assert cmds[-1] == ["lock", "break", "--force", str(db)], str(e.value)
    assert follow(cmds[-1]).returncode == 0 and not lock.exists()
    with TiraStore(db, cpu_model=TEST_CPU, lock_timeout=5) as s:
        assert s.count() == 1


def test_stale_and_dead_holders(db):
    lock = lock_of(db)
    # An original worker's record an hour old: stale.
    lock.write_text(json.dumps({"hostname": "node17", "pid": 4242, "timestamp": time.time() - 3600}))
    st = tirastore("lock", "status", db)
    assert st.returncode == 1 and advised(st.stdout) == [["lock", "break", str(db)]], st.stdout
    assert follow(["lock", "break", str(db)]).returncode == 0 and not lock.exists()
    # A Go holder of this host whose process is gone: dead.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({
        "hostname": socket.gethostname(), "pid": dead.pid, "timestamp": time.time(), "start_time": 1,
        "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "pid_ns": os.stat("/proc/self/ns/pid").st_ino, "heartbeat_interval": 5.0,
    }))
    ck = tirastore("check", db)
    assert ck.returncode == 1, ck.stdout
    [cmd] = advised(ck.stdout)
    assert cmd == ["check", "--repair", str(db)]
    assert follow(cmd).returncode == 0 and not lock.exists()


def test_an_overdue_heartbeat_holder(db):
    lock = lock_of(db)
    lock.write_text(json.dumps({"hostname": "node17", "pid": 4242, "timestamp": time.time() - 30,
                                "heartbeat_interval": 0.2}))
    st = tirastore("lock", "status", "--stale-lock-timeout", "2", db)
    assert st.returncode == 1 and "while watched" in st.stdout, st.stdout
    [cmd] = advised(st.stdout)
    r = follow(cmd)
    assert r.returncode == 0 and not lock.exists(), r.stdout + r.stderr


def test_leftover_lock_tickets_and_stale_measurement_claims(db):
    # A claimer killed while measuring, and the ticket file of a dead process.
    code = ("import os, signal, sys; from tirastore import TiraStore; "
            f"s = TiraStore(sys.argv[1], cpu_model={TEST_CPU!r}); "
            "s.lookup_or_claim('blur', 'void blur() {}', \"U(L0,4,comps=['c1'])\", lease=90); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    assert subprocess.run([sys.executable, "-c", code, str(db)], timeout=60).returncode == -signal.SIGKILL
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ticket = db.parent / f".lock_{socket.gethostname()}_{dead.pid}_leftover"
    ticket.write_text(json.dumps({
        "hostname": socket.gethostname(), "pid": dead.pid, "timestamp": time.time(), "start_time": 1,
        "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "pid_ns": os.stat("/proc/self/ns/pid").st_ino,
    }))
    ck = tirastore("check", db)
    assert ck.returncode == 1 and "leftover lock ticket files" in ck.stdout and "measurement claim" in ck.stdout, ck.stdout
    cmds = advised(ck.stdout)
    assert cmds == [["check", "--repair", str(db)]] * 2, ck.stdout
    assert follow(cmds[0]).returncode == 0
    assert not ticket.exists()
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        assert s.claims() == []
    assert tirastore("check", db).returncode == 0


def test_a_foreign_journal(db):
    journal = Path(str(db) + "-journal")
    os.mkfifo(journal)
    with pytest.raises(Exception) as e:
        with TiraStore(db, cpu_model=TEST_CPU, lock_timeout=5) as s:
            s.count()
    [cmd] = advised(str(e.value))
    assert cmd == ["check", "--repair", str(db)], str(e.value)
    ck = tirastore("check", db)
    assert ck.returncode == 1 and {tuple(c) for c in advised(ck.stdout)} == {tuple(cmd)}, ck.stdout
    r = follow(cmd)
    assert r.returncode == 0 and not journal.exists(), r.stdout + r.stderr
    with TiraStore(db, cpu_model=TEST_CPU, lock_timeout=5) as s:
        assert s.count() == 1


@pytest.fixture
def sticky_db():
    """A database with one record in a sticky 1777 directory that every
    user can reach (pytest's tmp_path is root's alone)."""
    top = Path(tempfile.mkdtemp(prefix="tirastore-advice-"))
    try:
        top.chmod(0o755)
        shared = top / "shared"
        shared.mkdir()
        shared.chmod(0o1777)
        db = shared / "cache.db"
        with TiraStore(db, cpu_model=TEST_CPU) as s:
            s.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [1.0])
        yield db
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: setpriv to another uid")
def test_another_users_lock_in_a_sticky_directory(sticky_db):
    """The advice says who may remove a lock this user may not; the advised
    command run by another user fails (the negative control), by them works."""
    db = sticky_db
    lock = lock_of(db)
    lock.write_text(json.dumps({"hostname": "node17", "pid": 4242, "timestamp": time.time() - 3600}))
    lock.chmod(0o644)
    st = tirastore("lock", "status", db, as_uid=NOBODY)
    assert st.returncode == 1 and "run by root" in st.stdout and "sticky" in st.stdout, st.stdout + st.stderr
    [cmd] = advised(st.stdout)
    r = follow(cmd, as_uid=NOBODY)
    assert r.returncode == 1 and lock.exists(), r.stdout + r.stderr
    assert "cannot remove the lock" in r.stderr and "run by root" in r.stderr, r.stderr
    r = follow(cmd)  # as root, whom the advice names
    assert r.returncode == 0 and not lock.exists(), r.stdout + r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: setpriv to another uid")
@pytest.mark.parametrize("command", [("lock", "status"), ("lock", "break"), ("check", "--repair")])
def test_a_lock_this_user_cannot_read(sticky_db, command):
    """A lock file of root's with mode 0000: lock status, lock break and
    check --repair run by another user fail with a PermissionError naming
    the owner, the mode and the commands that work, run by whom (not just
    "[Errno 13]"); so does a store's timeout. The advised commands, run by
    the user the advice names, show the holder and remove the lock."""
    db = sticky_db
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock = lock_of(db)
    lock.write_text(json.dumps({"hostname": socket.gethostname(), "pid": dead.pid, "timestamp": time.time() - 3600}))
    lock.chmod(0)
    r = tirastore(*command, db, as_uid=NOBODY)
    assert r.returncode == 1 and "PermissionError" not in r.stderr, r.stderr  # no traceback
    assert "owned by uid 0 (root), mode 0000" in r.stderr and "run by root" in r.stderr, r.stderr
    status, brk = advised(r.stderr)
    assert status == ["lock", "status", str(db)] and brk == ["lock", "break", str(db)], r.stderr
    code = ("import sys, tirastore\n"
            "try:\n"
            "    tirastore.TiraStore(sys.argv[1], cpu_model=sys.argv[2], lock_timeout=1).count()\n"
            "except TimeoutError as e:\n"
            "    print(e)\n")
    t = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                        "-c", code, str(db), TEST_CPU], capture_output=True, text=True, timeout=120)
    assert [status, brk] == advised(t.stdout), t.stdout + t.stderr
    r = follow(status)  # as root, whom the advice names
    assert r.returncode == 1 and f"pid {dead.pid}" in r.stdout and "looks abandoned" in r.stdout, r.stdout + r.stderr
    r = follow(brk)
    assert r.returncode == 0 and not lock.exists(), r.stdout + r.stderr
