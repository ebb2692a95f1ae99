"""Claims with leases: no schedule is measured twice.

Workers run as separate processes (``python -c WORKER``), each over the same
schedules in its own random order, logging every measurement it makes to a
file of its own; the logs show which schedules were measured more than once.
Another node is simulated with ``unshare --uts --mount`` (its own host name
and a private /dev/shm), as in test_stall.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import TEST_CPU, other_node_prefix, sqlite_only
from tirastore import Claim, LookupResult, TiraStore

SRC = "void search() { /* the program */ }"
SCHEDS = [f"S(L0,L1,{i},{j},comps=['c1'])" for i in range(1, 11) for j in range(1, 11)]

WORKER = r"""
import os, random, sys, time
from pathlib import Path
from tirastore import Claim, TiraStore
db, wid, mode, log, go, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], Path(sys.argv[5]), sys.argv[6]
src = "void search() { /* the program */ }"
scheds = [f"S(L0,L1,{i},{j},comps=['c1'])" for i in range(1, 11) for j in range(1, 11)]
rng = random.Random(wid)
rng.shuffle(scheds)
with TiraStore(db, cpu_model=cpu) as s, open(log, "a") as f:
    Path(log + ".ready").touch()
    while not go.exists():
        time.sleep(0.001)
    for sc in scheds:
        if mode.startswith("claim"):
            got = s.lookup_or_claim("search", src, sc, lease=30)
            if isinstance(got, Claim):
                f.write(sc + "\n"); f.flush()
                time.sleep(rng.uniform(0.02, 0.05))
                # Beside original workers (claim-mixed) a record may find theirs.
                assert got.record(True, [0.1 * wid]) or mode == "claim-mixed", sc
            else:
                assert got is not None and got.is_legal, (sc, got)
        else:
            if s.lookup("search", src, sc) is None:
                f.write(sc + "\n"); f.flush()
                time.sleep(rng.uniform(0.02, 0.05))
                s.record("search", src, sc, True, [0.1 * wid])
"""


def _start_together(procs: list, logs: list, go: Path) -> None:
    """Let the workers go once each has opened its store (its log's .ready
    file), so that they all meet the schedules at once, however loaded the
    machine is."""
    end = time.monotonic() + 120
    while not all(Path(f"{log}.ready").exists() for log in logs):
        assert all(p.poll() is None for p in procs), "a worker ended before it was ready"
        assert time.monotonic() < end, "the workers did not open their stores"
        time.sleep(0.01)
    go.touch()


def _fleet(tmp_path: Path, db, mode: str, n: int = 16) -> Counter:
    TiraStore(db, cpu_model=TEST_CPU).close()
    go = tmp_path / "go"
    logs = [tmp_path / f"w{w}.log" for w in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(db), str(w), mode, str(logs[w]), str(go), TEST_CPU])
             for w in range(n)]
    _start_together(procs, logs, go)
    for p in procs:
        assert p.wait(timeout=300) == 0
    measured = Counter(line for log in logs for line in log.read_text().splitlines())
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        assert s.count() == len(SCHEDS)
        assert all(isinstance(r, LookupResult) for r in s.lookup_many("search", SRC, SCHEDS))
        assert s.claims() == []
    return measured


def test_sixteen_workers_measure_every_schedule_once(tmp_path, db_path):
    measured = _fleet(tmp_path, db_path, "claim")
    assert sorted(measured) == sorted(SCHEDS)
    assert max(measured.values()) == 1, [s for s, n in measured.items() if n > 1]


def test_negative_control_plain_lookup_record_measures_twice(tmp_path, db_path):
    measured = _fleet(tmp_path, db_path, "plain")
    assert sorted(measured) == sorted(SCHEDS)
    assert sum(measured.values()) > len(SCHEDS), "no schedule was measured twice without claims"


HOLDER = r"""
import os, sys, time
from pathlib import Path
from tirastore import TiraStore
db, cpu, sched, lease, ready, resume = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), Path(sys.argv[5]), Path(sys.argv[6])
s = TiraStore(db, cpu_model=cpu)
c = s.lookup_or_claim("search", "void search() { /* the program */ }", sched, lease=lease)
ready.write_text(os.uname().nodename)
while not resume.exists():
    time.sleep(0.01)
print("taken_over" if c.taken_over else "held", c.record(True, [9.0]), flush=True)
s.close()
"""


def _other_node_prefix() -> list[str] | None:
    return other_node_prefix("stall-node2")


def _start_holder(tmp_path: Path, db: Path, lease: float, prefix: list[str] = ()) -> tuple[subprocess.Popen, Path]:
    ready, resume = tmp_path / "ready", tmp_path / "resume"
    p = subprocess.Popen([*prefix, sys.executable, "-c", HOLDER, str(db), TEST_CPU, SCHEDS[0], str(lease), str(ready),
                          str(resume)], stdout=subprocess.PIPE, text=True)
    end = time.monotonic() + 60
    while not ready.exists():
        assert p.poll() is None and time.monotonic() < end, "the holder did not claim"
        time.sleep(0.01)
    return p, resume


def _wait_in_thread(store: TiraStore) -> tuple[threading.Thread, dict]:
    got: dict = {}

    def run():
        t0 = time.monotonic()
        try:
            got["outcome"] = store.lookup_or_claim("search", SRC, SCHEDS[0])
        except Exception as e:  # reported by the test
            got["error"] = e
        got["after"] = time.monotonic() - t0

    t = threading.Thread(target=run)
    t.start()
    return t, got


@pytest.mark.parametrize("where", ["same-host", "negative-control-other-node"])
def test_killed_claimer_is_taken_over_at_once_on_its_host(tmp_path, db_path, where):
    """A claimer killed with SIGKILL mid-measurement: a waiter on its host
    takes over at once (the dead-process rule), well before the 30 s lease:
    within 5 s, a bound that a machine running two test suites on 2 cores
    keeps (a second is typical). The negative control puts the claimer on
    another simulated node, where nothing proves it dead: the waiter then
    waits for the lease and has not taken over in 6 s."""
    prefix = []
    if where != "same-host":
        prefix = _other_node_prefix()
        if prefix is None:
            pytest.skip("cannot simulate another node here: needs root and unshare --uts --mount")
    db = db_path
    with TiraStore(db, cpu_model=TEST_CPU, lock_timeout=6 if prefix else None) as s:
        holder, _ = _start_holder(tmp_path, db, 30.0, prefix)
        time.sleep(0.3)
        t, got = _wait_in_thread(s)
        time.sleep(0.5)
        killed = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)  # under unshare too: sh exec'ed python, one pid
        holder.wait()
        t.join(timeout=60)
        took = time.monotonic() - killed
        if not prefix:
            assert isinstance(got.get("outcome"), Claim), got
            assert took < 5.0, f"taken over {took:.2f}s after the kill"
            assert got["outcome"].record(True, [1.0])
        else:
            assert isinstance(got.get("error"), TimeoutError), got
            assert "claimed by" in str(got["error"]) and "stall-node2" in str(got["error"]), got


@pytest.mark.parametrize("late", ["late-record-wins", "late-record-loses"])
def test_stopped_claimer_on_another_node_is_taken_over_after_its_lease(tmp_path, db_path, late):
    """A claimer SIGSTOPped on another simulated node loses its claim after
    its lease plus a small margin; after SIGCONT its late record stores the
    result if the taker has not recorded yet, ending the taker's claim (the
    taker's record then returns False), and returns False if the taker has.
    Exactly one record."""
    prefix = _other_node_prefix()
    if prefix is None:
        pytest.skip("cannot simulate another node here: needs root and unshare --uts --mount")
    db = db_path
    lease = 2.0
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        holder, resume = _start_holder(tmp_path, db, lease, prefix)
        pid = holder.pid  # unshare and sh exec'ed python: one pid
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            t, got = _wait_in_thread(s)
            t.join(timeout=60)
            took = time.monotonic() - stopped
            claim = got.get("outcome")
            assert isinstance(claim, Claim), got
            assert lease - 0.2 < took < lease + 1.5, f"taken over {took:.2f}s after SIGSTOP, lease {lease}s"
            if late == "late-record-loses":
                assert claim.record(True, [1.0])
        finally:
            os.kill(pid, signal.SIGCONT)
        resume.touch()
        out, _ = holder.communicate(timeout=60)
        assert holder.returncode == 0
        if late == "late-record-wins":
            assert out.split()[1] == "True", out
            assert s.claims() == []  # the taker's claim ended with the record (a dead taker's would stay)
            assert claim.record(True, [1.0]) is False
        else:
            assert out.split()[1] == "False", out
        rows = s.get_program_records("search", SRC)
        assert len(rows) == 1
        assert rows[0].hostname == ("stall-node2" if late == "late-record-wins" else os.uname().nodename)
        assert s.claims() == []


def test_negative_control_a_renewing_claimer_on_another_node_keeps_its_claim(tmp_path, db_path):
    """The same claimer, not stopped, renews its claim: a waiter has not taken
    it over after several leases (so the takeover above is the lease's)."""
    prefix = _other_node_prefix()
    if prefix is None:
        pytest.skip("cannot simulate another node here: needs root and unshare --uts --mount")
    db = db_path
    with TiraStore(db, cpu_model=TEST_CPU, lock_timeout=3.5) as s:
        holder, resume = _start_holder(tmp_path, db, 1.0, prefix)
        t, got = _wait_in_thread(s)
        t.join(timeout=60)
        assert isinstance(got.get("error"), TimeoutError), got
        resume.touch()
        out, _ = holder.communicate(timeout=60)
        assert out.split() == ["held", "True"], out


def test_claim_api(tmp_path, db_path):
    db = db_path
    with TiraStore(db, cpu_model=TEST_CPU) as a, TiraStore(db, cpu_model=TEST_CPU) as b:
        c = a.lookup_or_claim("search", SRC, SCHEDS[0], lease=5)
        assert isinstance(c, Claim) and c.lease == 5 and not c.ended
        assert b.lookup_or_claim("search", SRC, SCHEDS[0], wait=False) is None
        (info,) = b.claims()
        assert info.pid == os.getpid() and info.lease == 5 and info.tiralib_schedule_string == SCHEDS[0]
        assert not info.dead and info.program_name == "search"
        # An exception in the with block releases the claim; so does leaving
        # it without a record.
        with pytest.raises(RuntimeError):
            with c:
                raise RuntimeError("compilation failed")
        assert c.ended and b.claims() == []
        c2 = b.lookup_or_claim("search", SRC, SCHEDS[0], wait=False)
        assert isinstance(c2, Claim)
        with pytest.raises(TypeError, match="cannot be pickled"):
            import pickle

            pickle.dumps(c2)
        assert c2.record(True, [0.25]) is True
        with pytest.raises(ValueError, match="recorded or released"):
            c2.record(True, [0.25])
        c2.release()  # ended: nothing
        assert a.lookup_or_claim("search", SRC, SCHEDS[0]).execution_times == [0.25]
        # Bad input: a clear error, nothing claimed.
        with pytest.raises(ValueError, match="Invalid schedule"):
            a.lookup_or_claim("search", SRC, "S(L0")
        with pytest.raises(ValueError, match="lease"):
            a.lookup_or_claim("search", SRC, SCHEDS[1], lease=-1)
        with pytest.raises(ValueError, match="lease"):
            a.lookup_or_claim("search", SRC, SCHEDS[1], lease=float("nan"))
        with pytest.raises(TypeError):
            a.lookup_or_claim("search", SRC, SCHEDS[1], wait="yes")
        with pytest.raises(ValueError, match=r"schedules\[1\]"):
            a.lookup_many_or_claim("search", SRC, [SCHEDS[1], "nope"])
        assert a.claims() == []
        # An invalid result is refused and the claim stays held.
        c3 = a.lookup_or_claim("search", SRC, SCHEDS[1])
        with pytest.raises(ValueError):
            c3.record(True, None)
        assert not c3.ended and len(a.claims()) == 1
        c3.release()
        # The batch form: recorded, claimed, busy.
        mine = b.lookup_or_claim("search", SRC, SCHEDS[2])
        out = a.lookup_many_or_claim("search", SRC, SCHEDS[:4])
        assert isinstance(out[0], LookupResult) and isinstance(out[1], Claim) and out[2] is None
        assert isinstance(out[3], Claim)
        mine.record(False)
        for c in (out[1], out[3]):
            c.release()


def test_closing_releases_held_claims(tmp_path, db_path):
    db = db_path
    with TiraStore(db, cpu_model=TEST_CPU) as a:
        a.lookup_or_claim("search", SRC, SCHEDS[0])
        b = TiraStore(db, cpu_model=TEST_CPU)
        b.lookup_or_claim("search", SRC, SCHEDS[1])
        b.close()
        assert [c.tiralib_schedule_string for c in a.claims()] == [SCHEDS[0]]


def test_cpu_mismatch_claims_nothing(tmp_path, db_path):
    db = db_path
    TiraStore(db, cpu_model=TEST_CPU).close()
    with pytest.warns(Warning):
        other = TiraStore(db, cpu_model="Another CPU")
    with other:
        with pytest.raises(PermissionError):
            other.lookup_or_claim("search", SRC, SCHEDS[0])
        assert other.claims() == []


ORIGINAL = r"""
import random, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from test_mixed_fleet import OriginalStore
db, wid, log, go = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
src = "void search() { /* the program */ }"
scheds = [f"S(L0,L1,{i},{j},comps=['c1'])" for i in range(1, 11) for j in range(1, 11)]
rng = random.Random(1000 + wid)
rng.shuffle(scheds)
s = OriginalStore(Path(db), "orig", 600.0)
with open(log, "a") as f:
    Path(log + ".ready").touch()
    while not go.exists():
        time.sleep(0.001)
    for sc in scheds:
        if s.lookup(src, sc) is None:
            f.write(sc + "\n"); f.flush()
            time.sleep(rng.uniform(0.02, 0.05))
            s.record("search", src, sc, True, [0.5])
"""


@sqlite_only
def test_mixed_fleet_original_workers_beside_claimers(tmp_path):
    """Workers of the original's protocol (test_mixed_fleet.OriginalStore: its
    lock, its SQL, no notion of claims) and claimers share one database and
    the same schedules: the originals keep working (they measure what they
    miss and record; a claimer's record then returns False), every schedule
    is recorded exactly once, and no two claimers measured one schedule."""
    import plan  # tests/multinode, on the path through test_mixed_fleet

    import test_mixed_fleet  # noqa: F401

    db = tmp_path / "cache.db"
    test_mixed_fleet.OriginalStore(db, "orig", 600.0)  # the original creates the database
    go = tmp_path / "go"
    here = str(Path(__file__).resolve().parent)
    procs, claimer_logs, orig_logs = [], [], []
    for w in range(8):
        log = tmp_path / f"c{w}.log"
        claimer_logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, str(db), str(w), "claim-mixed",
                                       str(log), str(go), plan.TEST_CPU]))
    for w in range(4):
        log = tmp_path / f"o{w}.log"
        orig_logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-c", ORIGINAL, str(db), str(w), str(log), str(go), here]))
    _start_together(procs, claimer_logs + orig_logs, go)
    for p in procs:
        assert p.wait(timeout=300) == 0
    by_claimers = Counter(line for log in claimer_logs for line in log.read_text().splitlines())
    by_originals = Counter(line for log in orig_logs for line in log.read_text().splitlines())
    assert max(by_claimers.values()) == 1, [s for s, n in by_claimers.items() if n > 1]
    assert set(by_claimers) | set(by_originals) == set(SCHEDS)
    assert by_originals, "the original workers measured nothing"
    import sqlite3

    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT schedule) FROM records").fetchone() == (100, 100)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert con.execute("SELECT COUNT(*) FROM claims").fetchone() == (0,)
    con.close()


WAITER = r"""
import sys, time
from tirastore import TiraStore
s = TiraStore(sys.argv[1], cpu_model=sys.argv[2], lock_timeout=float(sys.argv[3]))
print("waiting", flush=True)
try:
    s.lookup_or_claim("search", "void search() { /* the program */ }", sys.argv[4])
    print("returned", time.monotonic(), flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", time.monotonic(), flush=True)
except TimeoutError as e:
    print("TimeoutError", time.monotonic(), e, flush=True)
"""

FP_LIB = Path(__file__).resolve().parents[2] / "build" / "failpoints" / "libtirastore.so"


@pytest.mark.parametrize("control", [False, True], ids=["ctrl-c", "negative-control-interrupts-off"])
def test_ctrl_c_interrupts_a_wait_for_a_claim(tmp_path, db_path, control):
    """SIGINT to a worker waiting for another worker's claim raises
    KeyboardInterrupt within 1 s; with the library's Ctrl-C handling off
    (failpoint interrupt-disabled) it waits on until lock_timeout."""
    if control and not FP_LIB.exists():
        pytest.skip(f"{FP_LIB} not built (./build.sh failpoints)")
    env = dict(os.environ)
    if control:
        env.update(TIRASTORE_LIB=str(FP_LIB), TIRASTORE_FAILPOINTS="interrupt-disabled=on")
    db = db_path
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        claim = s.lookup_or_claim("search", SRC, SCHEDS[0])
        p = subprocess.Popen([sys.executable, "-c", WAITER, str(db), TEST_CPU, "4", SCHEDS[0]],
                             stdout=subprocess.PIPE, text=True, env=env)
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.8)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline().split()
        p.wait(timeout=60)
        claim.release()
    if control:  # Python's own handler runs once the call returns, at the 4 s lock_timeout
        assert float(line[1]) - sent > 1.5, line
    else:
        assert line[0] == "KeyboardInterrupt", line
        assert float(line[1]) - sent < 1.0, f"interrupted {float(line[1]) - sent:.2f}s after SIGINT"


def test_waiting_on_ones_own_claim_says_so(tmp_path, db_path):
    """A worker that asks again for a schedule it holds the claim of waits
    for itself: the TimeoutError says the holder is this very process and
    what to do. Control: the same wait on another process's claim names
    that process, without saying so."""
    db = db_path
    with TiraStore(db, cpu_model=TEST_CPU, lock_timeout=0.5) as s:
        claim = s.lookup_or_claim("search", SRC, SCHEDS[0])
        with pytest.raises(TimeoutError, match="this very process, a claim it has not recorded or released"):
            s.lookup_or_claim("search", SRC, SCHEDS[0])
        assert s.lookup_or_claim("search", SRC, SCHEDS[0], wait=False) is None
        claim.release()
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        claim = s.lookup_or_claim("search", SRC, SCHEDS[0])
        p = subprocess.run([sys.executable, "-c", WAITER, str(db), TEST_CPU, "0.5", SCHEDS[0]], capture_output=True,
                           text=True, timeout=120)
        claim.release()
    assert "TimeoutError" in p.stdout and f"pid {os.getpid()}" in p.stdout, p
    assert "this very process" not in p.stdout, p.stdout
