"""Thousands of workers on one PostgreSQL: PgBouncer in transaction
pooling mode in front of a server of max_connections 40, a pool of 20
server connections, 500 worker processes with pool_mode=transaction in
their URL (tests/pg/pgbouncer.py starts Debian's pgbouncer).

The fleet (pgbouncer_fleet.py, forked from one interpreter) records its
own schedules, contested schedules and claimed schedules while PgBouncer
and then the server are restarted under it; every count is exact, and
nothing acknowledged is lost. The negative control runs a small fleet
with pgx's default query mode (prepared statements cached per
connection), which fails through the pooler."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import TEST_CPU, tiered

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "pg"))
import pgbouncer  # noqa: E402
import pgcluster  # noqa: E402

FLEET = Path(__file__).resolve().parent / "pgbouncer_fleet.py"


@pytest.fixture(scope="module")
def pooled():
    """A cluster of max_connections 40 and a PgBouncer (transaction
    pooling, 20 server connections) in front of it."""
    try:
        cluster = pgcluster.start(max_connections=40)
    except pgcluster.Unavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(str(e))
        pytest.skip(str(e))
    try:
        bouncer = pgbouncer.start(cluster, pool_size=20, mode="transaction")
    except pgbouncer.Unavailable as e:
        cluster.stop()
        if os.environ.get("CI") == "true":
            pytest.fail(str(e))
        pytest.skip(str(e))
    yield cluster, bouncer
    bouncer.stop()
    cluster.stop()


def _new_db(cluster, name: str) -> None:
    cluster.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', db="postgres")
    cluster.psql(f'CREATE DATABASE "{name}"', db="postgres")


def _log(d: Path, w: int) -> list[dict]:
    p = d / f"w{w}.log"
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []


def _entries(d: Path, workers: int) -> list[tuple[int, dict]]:
    return [(w, e) for w in range(workers) for e in _log(d, w)]


def _error_kinds(errors: list) -> dict:
    """How many failed calls of each kind, by their message's start."""
    kinds: dict = {}
    for _, e in errors:
        what = next(k for k in ("open", "own", "contested", "measured", "claim") if k in e)
        msg = e["error"]
        at = msg.find("cannot ")  # after the database's URL, when there is one
        k = (what, re.sub(r"[0-9]+", "N", msg[max(at, 0):])[:160])
        kinds[k] = kinds.get(k, 0) + 1
    return kinds


def _opened(d: Path) -> set[int]:
    return {int(p.name.removeprefix("opened-")) for p in d.glob("opened-*")}


def _open_errors(d: Path, workers: int, opened: set[int]) -> list:
    """The failed opens, read from the logs of the workers not opened."""
    return [e for w in range(workers) if w not in opened for e in _log(d, w) if "open" in e]


def _run_fleet(tmp_path: Path, url: str, workers: int, iterations: int, gates: dict, contested: int = 50,
               claimed: int = 100, must_open: bool = True) -> tuple[list, dict]:
    """Run the fleet, once every worker has opened its store (must_open:
    else the test fails) or failed to; gates maps an iteration to the
    function the test runs when half the fleet waits before it. Returns
    the log entries and what the run saw (the peak of server
    connections)."""
    d = tmp_path / "fleet"
    d.mkdir()
    spec = {"dir": str(d), "url": url, "cpu": TEST_CPU, "workers": workers, "iterations": iterations,
            "gates": sorted(gates), "contested": contested, "claimed": claimed}
    (d / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen([sys.executable, str(FLEET), str(d / "spec.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: dict = {}
    try:
        end = time.monotonic() + 300
        while True:
            opened = _opened(d)
            failed = _open_errors(d, workers, opened)
            assert not (failed and must_open), f"the fleet's stores did not all open: {failed[:3]}"
            if len(opened) + len(failed) >= workers:
                break
            assert proc.poll() is None and time.monotonic() < end, "the fleet's stores did not open"
            time.sleep(0.05)
        (d / "go").touch()
        for gate in sorted(gates):
            end = time.monotonic() + 300
            while len(list(d.glob(f"at-{gate}-*"))) < workers // 2:
                assert proc.poll() is None and time.monotonic() < end, "the fleet did not reach its gate"
                time.sleep(0.05)
            gates[gate]()
            (d / f"go-{gate}").touch()
        stdout, stderr = proc.communicate(timeout=600)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # the fleet and its workers
        proc.wait()
        raise
    assert proc.returncode == 0, stderr[-3000:]
    return _entries(d, workers), out


def _server_conns(cluster) -> int:
    return int(cluster.psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                            "AND application_name = 'tirastore'", db="postgres").strip() or 0)


@pytest.mark.parametrize("workers", tiered(40, 500, "workers"))
def test_a_fleet_through_pgbouncer_with_restarts(tmp_path, pooled, workers):
    """500 processes (40 in the fast tier: still twice the pool) through
    PgBouncer (20 server connections, the server's
    max_connections 40): PgBouncer is restarted (SIGTERM: every client cut
    off) while half the fleet is mid-call, then the server (immediate, as
    after a crash). Every call succeeds; every own record is acknowledged
    True and stored; each contested schedule has exactly one winner, whose
    value is stored; each claimed schedule is measured exactly once, and
    every other asker gets that measurement; no claim is left; the server
    never has more connections of the fleet than the pool."""
    cluster, bouncer = pooled
    _new_db(cluster, "fleet")
    iterations, contested, claimed = 6, workers // 10, workers // 5
    peak = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], _server_conns(cluster))
            except RuntimeError:
                pass  # the server restarting
            stop.wait(0.25)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        entries, _ = _run_fleet(tmp_path, bouncer.url("fleet"), workers, iterations,
                                {2: bouncer.restart, 4: lambda: cluster.restart(mode="immediate")},
                                contested=contested, claimed=claimed)
    finally:
        stop.set()
        t.join()
    errors = [(w, e) for w, e in entries if "error" in e]
    assert errors == [], (len(errors), _error_kinds(errors), errors[:5])
    own = [(w, e) for w, e in entries if "own" in e]
    assert len(own) == workers * iterations
    assert all(e["ack"] is True for _, e in own), [e for _, e in own if e["ack"] is not True][:3]

    rows = {r["schedule"]: json.loads(r["result_json"])["execution_times"][0]
            for r in cluster.query_json("SELECT schedule, result_json FROM records", db="fleet")}
    assert len(rows) == workers * iterations + contested + claimed
    assert all(rows.get(e["own"]) == float(w) for w, e in own)

    winners: dict[str, list[int]] = {}
    for w, e in entries:
        if "contested" in e:
            winners.setdefault(e["contested"], [])
            if e["won"]:
                winners[e["contested"]].append(w)
    assert len(winners) == contested
    for sched, ws in winners.items():
        assert len(ws) == 1, f"{sched}: winners {ws}"
        assert rows[sched] == float(ws[0])

    measured: dict[str, list[int]] = {}
    hits: dict[str, list[float]] = {}
    for w, e in entries:
        if "measured" in e:
            assert e["recorded"] is True, e
            measured.setdefault(e["claim"], []).append(w)
        elif "hit" in e:
            hits.setdefault(e["claim"], []).append(e["hit"])
    assert len(measured) == claimed
    for sched, ws in measured.items():
        assert len(ws) == 1, f"{sched} measured by {ws}"
        assert rows[sched] == float(ws[0])
        assert all(h == float(ws[0]) for h in hits.get(sched, []))
    assert sum(len(h) for h in hits.values()) + claimed == workers * (iterations // 2)
    assert cluster.query_json("SELECT key FROM claims", db="fleet") == []
    assert 0 < peak[0] <= bouncer.pool_size, peak[0]


def test_negative_control_cached_statements_fail_through_pgbouncer(tmp_path, pooled):
    """The old query mode, pgx's prepared statements cached per connection
    (default_query_exec_mode=cache_statement), fails through transaction
    pooling: a statement prepared on one server connection is missing on
    the next (PgBouncer < 1.21)."""
    cluster, bouncer = pooled
    if tuple(int(x) for x in bouncer.version.split(".")[:2]) >= (1, 21):
        pytest.skip(f"PgBouncer {bouncer.version} may carry prepared statements (max_prepared_statements)")
    _new_db(cluster, "cached")
    url = bouncer.url("cached", default_query_exec_mode="cache_statement")
    entries, _ = _run_fleet(tmp_path, url, workers=16, iterations=6, gates={}, must_open=False)
    errors = [e["error"] for _, e in entries if "error" in e]
    assert errors, "cached prepared statements worked through transaction pooling"
    assert all("prepared statement" in m for m in errors), errors[:3]
