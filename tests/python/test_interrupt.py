"""Ctrl-C: a call waiting for a lock held by another process raises
KeyboardInterrupt within 1 s of SIGINT and leaves no lock or ticket file of
its own behind; a wait longer than the store's lock_timeout raises
TimeoutError naming the holder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import TEST_CPU
from tirastore import TiraStore

REPO = Path(__file__).resolve().parents[2]
FP_LIB = REPO / "build" / "failpoints" / "libtirastore.so"

CHILD = textwrap.dedent("""
    import sys, time
    import tirastore
    s = tirastore.TiraStore(sys.argv[1], cpu_model=%r, lock_timeout=float(sys.argv[2]))
    print("opened", flush=True)
    sys.stdin.readline()  # the parent now holds the lock
    print("waiting", flush=True)
    try:
        s.lookup("p", "src", "U(L0,4,comps=['c'])")
        print("returned", flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", time.monotonic(), flush=True)
    except TimeoutError as e:
        print("TimeoutError", time.monotonic(), e, flush=True)
""") % TEST_CPU


def _hold_lock(db: Path) -> Path:
    """A live holder on another node: never stale, never dead here."""
    lock = db.with_suffix(".db.lock")
    ticket = db.parent / ".lock_othernode_4242_abcdefgh"
    ticket.write_text(json.dumps({"hostname": "othernode", "pid": 4242, "timestamp": time.time() + 3600}))
    os.link(ticket, lock)
    return lock


def _start_blocked_child(db: Path, args: list[str], env=None, code: str = CHILD) -> subprocess.Popen:
    """A child that opens a store, then blocks on the lock we take."""
    p = subprocess.Popen([sys.executable, "-c", code, str(db), *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "opened", p.stderr.read()
    _hold_lock(db)
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "waiting"
    return p


def _interrupt_child(db: Path, env: dict, lock_timeout: float) -> tuple[str, float]:
    """Start a child that blocks on the lock, SIGINT it, return its verdict
    and how long after the signal it reacted."""
    p = _start_blocked_child(db, [str(lock_timeout)], env)
    time.sleep(0.5)  # well into the wait
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    line = p.stdout.readline().split()
    p.wait(timeout=60)
    assert line, p.stderr.read()
    return line[0], float(line[1]) - sent


def test_ctrl_c_interrupts_a_lock_wait(tmp_path):
    db = tmp_path / "cache.db"
    TiraStore(db, cpu_model=TEST_CPU).close()
    verdict, delay = _interrupt_child(db, dict(os.environ), lock_timeout=60)
    lock = db.with_suffix(".db.lock")
    print(f"\nKeyboardInterrupt {delay * 1000:.0f} ms after SIGINT")
    assert verdict == "KeyboardInterrupt"
    assert delay < 1.0
    # Only the foreign holder's files remain: no ticket of the child's.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock_othernode_4242_abcdefgh", "cache.db", "cache.db.lock"]
    assert lock.exists()


@pytest.mark.skipif(not FP_LIB.exists(), reason=f"{FP_LIB} not built (./build.sh failpoints)")
def test_without_the_mechanism_ctrl_c_waits_for_the_lock_timeout(tmp_path):
    """Negative control: with SIGINT handling switched off (failpoints build)
    the same child only reacts when its 3 s lock timeout expires."""
    db = tmp_path / "cache.db"
    TiraStore(db, cpu_model=TEST_CPU).close()
    env = dict(os.environ, TIRASTORE_LIB=str(FP_LIB), TIRASTORE_FAILPOINTS="interrupt-disabled=on")
    verdict, delay = _interrupt_child(db, env, lock_timeout=3)
    assert delay > 1.5, (verdict, delay)


def test_lock_timeout_names_the_holder(tmp_path):
    db = tmp_path / "cache.db"
    store = TiraStore(db, cpu_model=TEST_CPU, lock_timeout=0.5)
    _hold_lock(db)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        store.count()
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert "othernode" in msg and "4242" in msg and str(db.with_suffix(".db.lock")) in msg
    store.close()


def test_ignored_sigint_stays_ignored(tmp_path):
    """A job started with SIGINT ignored (nohup-like) keeps waiting."""
    db = tmp_path / "cache.db"
    TiraStore(db, cpu_model=TEST_CPU).close()
    code = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" + CHILD
    p = _start_blocked_child(db, ["2"], code=code)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    assert p.stdout.readline().split()[0] == "TimeoutError"
    p.wait(timeout=30)
