"""The two performance shortcuts never return a stale or wrong answer across
processes.

* The kept connection: a store keeps one SQLite connection open across
  operations; SQLite revalidates it under the lock (change counter, hot
  journal).
* The lookup cache: a repeated lookup/contains is answered without the lock
  when one read of the database header shows that nothing committed since
  the answer was read.

A long-lived "observer" process keeps one store open, and between its
questions other processes record, overwrite, delete, crash in the middle of
a commit, or replace the database file. Every answer is checked against
what the other processes acknowledged. Negative controls: with the cache
trusted blindly (failpoint switch cache-trust), or the connection in SQLite's exclusive mode (sqlite-exclusive), the same
scenario returns stale answers, which shows that the checks here can fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import TEST_CPU, expected_key

REPO = Path(__file__).resolve().parents[2]
FP_LIB = REPO / "build" / "failpoints" / "libtirastore.so"

SRC = "void f(){}"


def sched(i: int) -> str:
    return f"S(L0,L1,{i},8,comps=['c1'])"


# The observer: reads commands on stdin, answers with JSON on stdout.
OBSERVER = textwrap.dedent(
    """
    import json, sys
    import tirastore
    s = tirastore.TiraStore(sys.argv[1], cpu_model=%r)
    sched = lambda i: f"S(L0,L1,{i},8,comps=['c1'])"
    for line in sys.stdin:
        cmd = json.loads(line)
        op, i = cmd["op"], cmd.get("i")
        if op == "lookup":
            r = s.lookup("prog", %r, sched(i))
            out = None if r is None else r.execution_times
        elif op == "contains":
            out = s.contains("prog", %r, sched(i))
        elif op == "lookup_many":
            out = [None if r is None else r.execution_times for r in s.lookup_many("prog", %r, [sched(j) for j in cmd["js"]])]
        elif op == "count":
            out = s.count()
        elif op == "get_records":
            out = sorted(r.schedule for r in s.get_program_records("prog", %r))
        print(json.dumps(out), flush=True)
    """
) % (TEST_CPU, SRC, SRC, SRC, SRC)


class Observer:
    def __init__(self, db: Path, env: dict[str, str]):
        self.p = subprocess.Popen(
            [sys.executable, "-c", OBSERVER, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ask(self, op: str, **kw):
        self.p.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, f"observer died (exit {self.p.poll()})"
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=60) == 0


def writer(db: Path, code: str, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run code in another process with `s` an open store on db."""
    script = (
        "import tirastore, sys\n"
        f"s = tirastore.TiraStore({str(db)!r}, cpu_model={TEST_CPU!r})\n"
        "sched = lambda i: f\"S(L0,L1,{i},8,comps=['c1'])\"\n" + textwrap.dedent(code)
    )
    env = env or {k: v for k, v in os.environ.items() if k != "TIRASTORE_FAILPOINTS"}
    return subprocess.run([sys.executable, "-c", script], env=env, check=check, capture_output=True, text=True)


def observer_env(switch: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TIRASTORE_FAILPOINTS"}
    if switch:
        env["TIRASTORE_LIB"] = str(FP_LIB)
        env["TIRASTORE_FAILPOINTS"] = switch + "=on"
    return env


def scenario(tmp_path: Path, switch: str | None) -> list[str]:
    """Run the scenario; return every disagreement between the observer and
    what the writers acknowledged (empty: all answers were fresh)."""
    db = tmp_path / "cache.db"
    writer(db, "for i in range(5): s.record('prog', %r, sched(i), True, [float(i)])" % SRC)
    obs = Observer(db, observer_env(switch))
    truth = {i: [float(i)] for i in range(5)}
    wrong: list[str] = []

    def check(step: str):
        for i in range(8):
            got = obs.ask("lookup", i=i)
            if got != truth.get(i):
                wrong.append(f"{step}: lookup {i} -> {got}, want {truth.get(i)}")
            if obs.ask("contains", i=i) != (i in truth):
                wrong.append(f"{step}: contains {i} wrong")
        many = obs.ask("lookup_many", js=list(range(8)))
        if many != [truth.get(i) for i in range(8)]:
            wrong.append(f"{step}: lookup_many -> {many}")
        if obs.ask("count") != len(truth):
            wrong.append(f"{step}: count {obs.ask('count')} != {len(truth)}")
        if obs.ask("get_records") != sorted(sched(i) for i in truth):
            wrong.append(f"{step}: get_program_records stale")

    check("start")
    # Every key was read under the lock once: now hits and misses alike are
    # answered from the observer's cache.
    check("warm (answered from the cache)")
    # A new record the observer has seen absent (cached "absent").
    writer(db, "assert s.record('prog', %r, sched(5), True, [5.5])" % SRC)
    truth[5] = [5.5]
    check("after another process recorded a new key")
    # An overwrite of a key the observer has cached.
    writer(db, "assert s.record('prog', %r, sched(1), True, [-1.0], overwrite=True)" % SRC)
    truth[1] = [-1.0]
    check("after another process overwrote a key")
    # A delete, then a record: two commits the observer never saw.
    writer(db, "assert s.delete(%r)\nassert s.record('prog', %r, sched(6), True, [6.0])" % (expected_key(SRC, sched(2)), SRC))
    del truth[2]
    truth[6] = [6.0]
    check("after another process deleted a key, then recorded one")
    # A writer killed in the middle of a commit that spills pages into the
    # database file: nothing of it may become visible; the next holder rolls
    # it back.
    if FP_LIB.exists():
        env = observer_env(None)
        env["TIRASTORE_LIB"] = str(FP_LIB)
        env["TIRASTORE_FAILPOINTS"] = "before-commit=kill"
        r = writer(
            db,
            "s.record_many('prog', %r, [{'tiralib_schedule_string': sched(100 + j), 'is_legal': True,"
            " 'execution_times': [float(k) + 0.5 for k in range(120)]} for j in range(3000)])" % SRC,
            env=env,
            check=False,
        )
        assert r.returncode == -9, r.stderr
        check("after a writer was killed mid-commit")
    # The database replaced by another file (a restore by rename).
    other = tmp_path / "other.db"
    shutil.copy(db, other)
    writer(other, "assert s.record('prog', %r, sched(3), True, [33.0], overwrite=True)" % SRC)
    os.replace(other, db)
    truth[3] = [33.0]
    check("after the database file was replaced")
    obs.close()
    return wrong


def test_answers_are_fresh_across_processes(tmp_path):
    wrong = scenario(tmp_path, None)
    assert wrong == []


@pytest.mark.skipif(not FP_LIB.exists(), reason="failpoints build missing (./build.sh failpoints)")
def test_negative_control_cache_trusted_blindly(tmp_path):
    wrong = scenario(tmp_path, "cache-trust")
    assert any("lookup" in w or "contains" in w for w in wrong), "the scenario did not catch a blindly trusted cache"


@pytest.mark.skipif(not FP_LIB.exists(), reason="failpoints build missing (./build.sh failpoints)")
def test_negative_control_connection_never_revalidated(tmp_path):
    wrong = scenario(tmp_path, "sqlite-exclusive")
    assert any("count" in w or "get_program_records" in w for w in wrong), (
        "the scenario did not catch a connection that never rereads changed pages"
    )


def test_fresh_connection_mode_agrees(tmp_path, monkeypatch):
    """TIRASTORE_CONNECTION=fresh (what NFS gets) answers the same."""
    monkeypatch.setenv("TIRASTORE_CONNECTION", "fresh")
    assert scenario(tmp_path, None) == []
