"""A lock holder that stalls past stale_lock_timeout (SIGSTOP, as Slurm's
suspend does) must never write after its lock was broken, and must not block
the other processes of its node.

Scenario: process A runs one record_many of 30,000 new schedules with
stale_lock_timeout=3 and stops itself (failpoint action "stop") at a chosen
moment while it holds the lock; once it has stopped, process C records new
schedules one at a time; after C's first acknowledgement A gets SIGCONT,
and C goes on until A has logged its outcome and C has had one more
acknowledgement after it (events, not fixed sleeps: every wait of the
test is for a process's state or a line it logged). C runs on the same
node or on a simulated other node (own UTS and mount namespaces:
its own host name and a private tmpfs on /dev/shm). Then: integrity_check
is ok, every record C acknowledged is present, A's call raised
LockLostError and its rows are all or nothing, and C got its first
acknowledgement within stale_lock_timeout plus a margin.

The negative control runs the same with the fence switched off (failpoint
switch fence-disabled): A then writes after its lock was broken, and the
checks above must catch it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import other_node_prefix, raw_connect

HERE = Path(__file__).resolve().parent
WORKER = HERE / "stall_worker.py"
sys.path.insert(0, str(HERE))
import stall_worker  # noqa: E402

N = 30_000
STALE = stall_worker.STALE
MARGIN = 3.0  # seconds beyond stale_lock_timeout for C's first acknowledgement

# Where A stops: before its first write (the lock just taken), in the middle
# of its transaction (statements run, the page cache spilled into the
# database file, not committed), and between the journal's sync and the
# commit (the first write to the database file, in the VFS).
MOMENTS = {
    "before-first-write": "lock-acquired=stop",
    "mid-transaction": "before-commit=stop",
    "journal-synced": "db-write=stop",
}


def _other_node_prefix() -> list[str] | None:
    """A command prefix that runs C as on another node, or None if unshare cannot."""
    return other_node_prefix("stall-node2")


def _entries(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _wait(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def _files(db: Path) -> dict[str, str]:
    """The database's and its journal's content, by name (hashes)."""
    out = {}
    for p in (db, db.with_name(db.name + "-journal")):
        if p.exists():
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _run_scenario(tmp_path: Path, lib: Path, moment: str, placement: str, fence: bool,
                  quiet: bool = False) -> dict:
    """Runs the scenario once and returns what the checks need. quiet: C
    stops after its first acknowledgement, before A resumes, and the
    database files are compared before and after A's resumption."""
    db = tmp_path / "stall.db"
    env = dict(os.environ, TIRASTORE_LIB=str(lib), PYTHONPATH=str(HERE.parent.parent / "python"))
    env.pop("TIRASTORE_FAILPOINTS", None)
    if not fence:
        env["TIRASTORE_FAILPOINTS"] = "fence-disabled=on"
    # Create the database first, so that A's stop points are its batch's.
    subprocess.run([sys.executable, "-c", "import sys; from tirastore import TiraStore; "
                    "TiraStore(sys.argv[1], cpu_model='stall-cpu', slurm_cpus='N/A').close()", str(db)],
                   env=env, check=True, timeout=60)
    a_out, c_out, stop = tmp_path / "a.jsonl", tmp_path / "c.jsonl", tmp_path / "stop"
    a_fps = MOMENTS[moment] + ("" if fence else ";fence-disabled=on")
    a = subprocess.Popen([sys.executable, str(WORKER), "batch", str(db), str(a_out), str(N), a_fps], env=env)
    c_env = dict(env)
    prefix: list[str] = []
    if placement == "other-node":
        prefix = _other_node_prefix() or []
    c = None
    try:
        _wait(lambda: _state(a.pid) in ("T", "t") or a.poll() is not None, 60, "A to stop itself")
        assert a.poll() is None, f"A ended before stopping: {_entries(a_out)}"
        c_start = time.time()
        c = subprocess.Popen(prefix + [sys.executable, str(WORKER), "single", str(db), str(c_out), str(stop)],
                             env=c_env)
        _wait(lambda: any("ack" in e for e in _entries(c_out)) or c.poll() is not None,
              STALE + 30, "C's first acknowledgement")
        first_ack = min((e["t"] for e in _entries(c_out) if "ack" in e), default=None)
        if quiet:
            stop.touch()
            c.wait(timeout=60)
            before = _files(db)
        os.kill(a.pid, signal.SIGCONT)
        if not quiet:
            # C goes on beside the resumed A: until A has logged its outcome
            # and C has been acknowledged once more after it.
            _wait(lambda: any("done" in e for e in _entries(a_out)) or a.poll() is not None, 120,
                  "A's outcome after its resumption")
            a_end = max((e.get("t", 0.0) for e in _entries(a_out) if "done" in e), default=time.time())
            _wait(lambda: any(e["t"] > a_end for e in _entries(c_out) if "ack" in e) or c.poll() is not None,
                  STALE + 30, "an acknowledgement of C after A's outcome")
            stop.touch()
            c.wait(timeout=60)
        a.wait(timeout=120)
        after = _files(db)
    finally:
        for p in (a, c):
            if p is not None and p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
    try:
        with raw_connect(db) as conn:
            integrity = conn.execute("PRAGMA integrity_check").fetchall()
            present = {r[0] for r in conn.execute("SELECT schedule FROM records")}
    except sqlite3.DatabaseError as e:  # "database disk image is malformed"
        integrity, present = [(str(e),)], set()
    a_result = [e for e in _entries(a_out) if "done" in e]
    return {
        "integrity": [r[0] for r in integrity],
        "present": present,
        "acked": [e["ack"] for e in _entries(c_out) if "ack" in e],
        "a_result": a_result[-1] if a_result else None,
        "c_result": [e for e in _entries(c_out) if "done" in e],
        "first_ack_after": None if first_ack is None else first_ack - c_start,
        "changed_by_a": quiet and before != after,
    }


def _problems(r: dict) -> list[str]:
    """Everything the scenario forbids; empty when the run is correct."""
    out = []
    if r["integrity"] != ["ok"]:
        out.append(f"integrity_check: {r['integrity'][:3]}")
    lost = [s for s in r["acked"] if s not in r["present"]]
    if lost:
        out.append(f"{len(lost)} of C's {len(r['acked'])} acknowledged records are missing")
    batch = set(stall_worker.batch_schedules(N))
    n_a = len(batch & r["present"])
    a = r["a_result"]
    if a is None:
        out.append("A logged no outcome")
    elif a.get("error"):
        if "LockLostError" not in a["mro"] or "OperationalError" not in a["mro"]:
            out.append(f"A raised {a['error']}, not LockLostError: {a['message']}")
        if n_a not in (0, N):
            out.append(f"A raised but {n_a} of its {N} rows are present (not all or nothing)")
    else:
        out.append(f"A reported success ({a['done']} written) although its lock was broken while it was stopped")
    # A stopped before its commit, and C wrote while it was stopped, so A's
    # lock was broken before A could commit: none of its rows may be there.
    if 0 < n_a:
        out.append(f"{n_a} of A's rows were committed after its lock was broken")
    return out


PLACEMENTS = ["same-node", "other-node"]


def _matrix() -> list:
    """Every moment at every placement: in the fast tier each moment once,
    the placements taking turns, the other cases in the soak tier."""
    return [pytest.param(m, p, id=f"{m}-{p}", marks=() if j == i % len(PLACEMENTS) else pytest.mark.soak)
            for i, m in enumerate(MOMENTS) for j, p in enumerate(PLACEMENTS)]


@pytest.mark.parametrize("moment,placement", _matrix())
def test_stalled_holder_is_fenced(tmp_path, failpoints_lib, moment, placement):
    if placement == "other-node" and _other_node_prefix() is None:
        pytest.skip("cannot simulate another node here: needs root and unshare --uts --mount")
    r = _run_scenario(tmp_path, failpoints_lib, moment, placement, fence=True)
    assert r["acked"], f"C acknowledged nothing: {r['c_result']}"
    assert not _problems(r), _problems(r)
    assert r["a_result"].get("error") == "LockLostError", r["a_result"]
    assert "was broken by another process" in r["a_result"]["message"], r["a_result"]
    assert r["first_ack_after"] is not None and r["first_ack_after"] < STALE + MARGIN, \
        f"C's first acknowledgement came {r['first_ack_after']}s after it started"


@pytest.mark.parametrize("fence", [True, False], ids=["fenced", "negative-control-unfenced"])
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_resumed_holder_writes_nothing(tmp_path, failpoints_lib, moment, fence):
    """Once C has broken the lock and finished, A's resumption must not change
    a byte of the database or its journal. With the fence switched off (the
    negative control) A commits after its lock was broken, and this test, like
    the scenario's checks, catches it."""
    r = _run_scenario(tmp_path, failpoints_lib, moment, "same-node", fence=fence, quiet=True)
    assert r["acked"], f"C acknowledged nothing: {r['c_result']}"
    if fence:
        assert not r["changed_by_a"], "the resumed holder wrote to the database after its lock was broken"
        assert not _problems(r), _problems(r)
    elif moment == "before-first-write":
        # Unfenced, A writes its whole batch after the break: caught as a
        # change and as rows committed after the break.
        assert r["changed_by_a"] and _problems(r), r["a_result"]
    else:
        assert r["changed_by_a"], f"the control did not write after the break: {r['a_result']}"
