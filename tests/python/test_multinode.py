"""Fast versions of the multi-node concurrency test (tests/multinode/).

The same worker (four phases: unique, contested, cross reads, overwrite) and
the same verifier as the Slurm run and the torture run, on a small scale:

* four processes on one directory, and on the FUSE test bed (2 simulated
  nodes x 2 processes: fcntl locks local to each mount, link atomic across);
* the same with SIGKILLs (of the lock holder, of random workers, and a
  failpoint that kills a worker inside its first commit) and restarts;
* the negative control: the lock switched off (failpoints build,
  lock-disabled=on) must fail verification;
* launch_test.sh: usage errors, DRY_RUN output, and a full run through a
  stand-in srun that runs each worker locally;
* the verifier on hand-made bad databases and logs: each defect is caught.

The FUSE tests skip, saying why, where the bed cannot run (not root, no
/dev/fuse, build/fusebed missing and not buildable).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MULTINODE = REPO / "tests" / "multinode"
sys.path.insert(0, str(MULTINODE))

import harness  # noqa: E402
import plan  # noqa: E402
import verify_results  # noqa: E402

LAUNCH = MULTINODE / "launch_test.sh"
NORMAL_LIB = REPO / "python" / "tirastore" / "libtirastore.so"


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


def _fleet(dbs: list[Path], log_dir: Path, nrecords: int, ncontested: int, env_for=None,
           kill_rate=0.0, max_kills=0, holder_bias=0.5, stale=1.0, max_runs=6, deadline=90,
           sample=6, immune=()):
    """Run len(dbs) workers, worker w on dbs[w] (its node's view of the DB)."""
    n = len(dbs)
    members = []
    for w, db in enumerate(dbs):
        node = db.parent.parent.name  # the mount (m0, m1) on the bed

        def cmd_for(run, w=w, db=db, node=node):
            return harness.worker_cmd(db, w, n, nrecords, ncontested, log_dir, node=node, seed=run,
                                      stale=stale, lock_timeout=60, sample=sample)

        def env(run, w=w):
            return env_for(w, run) if env_for else {"TIRASTORE_LIB": str(NORMAL_LIB),
                                                    "TIRASTORE_FAILPOINTS": ""}

        members.append(harness.Member(w=w, node=0, cmd_for=cmd_for, env_for=env,
                                      killable=w not in immune))
    lock = dbs[0].parent / "cache.db.lock"
    fleet = harness.Fleet(members, lock_path=lock, log_dir=log_dir, kill_rate=kill_rate,
                          holder_bias=holder_bias, max_kills=max_kills, max_runs=max_runs,
                          deadline=deadline, seed=7)
    return fleet.run()


def _verify(db: Path, log_dir: Path, nworkers: int, nrecords: int, ncontested: int, distinct=""):
    return verify_results.verify(db, log_dir, nworkers, nrecords, ncontested, distinct)


def _bed_dbs(bed, name: str, nworkers: int) -> tuple[list[Path], Path]:
    """Worker w's path of the DB (through mount w % 2) and the backing path."""
    sub = f"{name}/cache.db"
    return [bed.mounts[w % len(bed.mounts)] / sub for w in range(nworkers)], bed.backing / sub


# ---------------------------------------------------------------------------
# (a) four phases, no faults
# ---------------------------------------------------------------------------


# Without faults nothing is to be broken: a stale timeout no stall of a
# loaded machine reaches (two fast tiers at once stalled a holder 5.5 s,
# past the 1 s the kill tests use to recover quickly).
NO_FAULT_STALE = 60.0


def test_four_phases_one_directory(tmp_path):
    db, logs = tmp_path / "shared" / "cache.db", tmp_path / "logs"
    res = _fleet([db] * 4, logs, nrecords=10, ncontested=5, stale=NO_FAULT_STALE)
    assert not res.failed and not res.timed_out, res
    v, summary = _verify(db, logs, 4, 10, 5)
    assert v == []
    assert summary["info"]["records in db"] == 4 * 10 + 5
    assert summary["info"]["contested records with a winner"] == 5


def test_four_phases_fuse_bed(bed, tmp_path):
    dbs, backing_db = _bed_dbs(bed, "a", 4)
    logs = tmp_path / "logs"
    res = _fleet(dbs, logs, nrecords=10, ncontested=5, stale=NO_FAULT_STALE)
    assert not res.failed and not res.timed_out, res
    v, summary = _verify(backing_db, logs, 4, 10, 5)
    assert v == []
    assert summary["info"]["nodes seen"] == 2
    assert summary["info"]["records in db"] == 4 * 10 + 5


# ---------------------------------------------------------------------------
# (b) SIGKILL and restart
# ---------------------------------------------------------------------------


def test_kill_and_restart_fuse_bed(bed, tmp_path, failpoints_lib):
    nworkers, nrecords, ncontested = 4, 10, 5
    dbs, backing_db = _bed_dbs(bed, "b", nworkers)
    logs = tmp_path / "logs"

    def env_for(w, run):
        fps = "lock-acquired=sleep(25)"  # hold the lock longer: kills land inside it
        if w == 1 and run == 1:
            fps += ";before-commit=kill"  # dies inside its first commit, for sure (immune
            # to the external killer, so that nothing else kills it first)
        elif w == 2 and run == 1:
            fps += ";after-commit=kill@0.3"  # committed, never acknowledged
        elif w == 3 and run <= 2:
            fps += ";before-commit=kill@0.1"
        return {"TIRASTORE_LIB": str(failpoints_lib), "TIRASTORE_FAILPOINTS": fps}

    res = _fleet(dbs, logs, nrecords, ncontested, env_for=env_for, kill_rate=2.0, max_kills=6,
                 holder_bias=0.7, stale=1.0, max_runs=6, immune=(1,))
    assert not res.failed and not res.timed_out, res
    assert res.self_kills >= 1, "the before-commit=kill failpoint did not fire"
    assert res.runs > nworkers, "no worker was restarted"
    v, summary = _verify(backing_db, logs, nworkers, nrecords, ncontested)
    assert v == [], f"{res}\n" + "\n".join(v)
    assert summary["info"]["killed runs"] >= 1


# ---------------------------------------------------------------------------
# (c) negative control: no lock
# ---------------------------------------------------------------------------

DAMAGE = re.compile(r"integrity_check|LOST|malformed|stored \d+ times|returned True \d+ times|"
                    r"no planned value|was told it won|acknowledged record not found|unexpected value|"
                    r"cannot read the database")


def _no_lock_env(failpoints_lib):
    def env_for(w, run):
        # before-commit=sleep(5) widens the unprotected window: the interleaving
        # of writers becomes certain rather than likely.
        return {"TIRASTORE_LIB": str(failpoints_lib),
                "TIRASTORE_FAILPOINTS": "lock-disabled=on;before-commit=sleep(5)"}
    return env_for


def test_negative_control_fuse_bed(bed, tmp_path, failpoints_lib):
    dbs, backing_db = _bed_dbs(bed, "c", 4)
    logs = tmp_path / "logs"
    harness.create_db(dbs[0])  # the writers race on records, not on creating the file
    _fleet(dbs, logs, nrecords=10, ncontested=5, env_for=_no_lock_env(failpoints_lib))
    v, _ = _verify(backing_db, logs, 4, 10, 5)
    damage = [x for x in v if DAMAGE.search(x)]
    assert damage, "without the lock the run must lose or corrupt data; violations: " + "\n".join(v[:20])


def test_negative_control_one_directory(tmp_path, failpoints_lib):
    # The engine opens SQLite with the unix-none VFS (no POSIX locks): without
    # the hard-link lock nothing serializes, even on one node.
    db, logs = tmp_path / "shared" / "cache.db", tmp_path / "logs"
    harness.create_db(db)
    _fleet([db] * 4, logs, nrecords=10, ncontested=5, env_for=_no_lock_env(failpoints_lib))
    v, _ = _verify(db, logs, 4, 10, 5)
    assert [x for x in v if DAMAGE.search(x)], "\n".join(v[:20])


# ---------------------------------------------------------------------------
# (d) launch_test.sh
# ---------------------------------------------------------------------------


def _launch(args, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    e.pop("TIRASTORE_TEST_DIR", None)
    e.update(env)
    return subprocess.run(["bash", str(LAUNCH), *args], env=e, capture_output=True, text=True,
                          timeout=120)


def test_launch_script_syntax():
    assert subprocess.run(["bash", "-n", str(LAUNCH)]).returncode == 0


@pytest.mark.parametrize("args, env, message", [
    ([], {"TIRASTORE_TEST_DIR": "/x"}, "usage:"),
    (["4", "10"], {"TIRASTORE_TEST_DIR": "/x"}, "usage:"),
    (["4", "10", "5"], {}, "TIRASTORE_TEST_DIR is not set"),
    (["four", "10", "5"], {"TIRASTORE_TEST_DIR": "/x"}, "NWORKERS must be a positive integer"),
    (["4", "0", "5"], {"TIRASTORE_TEST_DIR": "/x"}, "NRECORDS must be at least 1"),
    (["4", "10", "-1"], {"TIRASTORE_TEST_DIR": "/x"}, "NCONTESTED must be a positive integer"),
])
def test_launch_usage_errors(args, env, message):
    r = _launch(args, DRY_RUN="1", **env)
    assert r.returncode == 2
    assert message in r.stderr
    assert "srun" not in r.stdout


def test_launch_dry_run(tmp_path):
    r = _launch(["3", "7", "2"], DRY_RUN="1", TIRASTORE_TEST_DIR=str(tmp_path), SLURM_PARTITION="batch")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    sruns = [x for x in lines if x.startswith("srun ")]
    assert len(sruns) == 3
    run_dir = re.search(r"(\S+/run_\S+)/db ", r.stdout).group(1)
    assert run_dir.startswith(str(tmp_path) + "/run_")
    for w, line in enumerate(sruns):
        assert line.endswith(" &")
        assert "--nodes=1 --ntasks=1 --partition=batch --exclusive" in line
        assert f"{MULTINODE}/worker.py --db {run_dir}/db/cache.db --worker-id {w} --nworkers 3 " \
               f"--nrecords 7 --ncontested 2 --log {run_dir}/logs" in line
    assert lines[-2] == "wait"
    assert lines[-1].endswith(f"verify_results.py --db {run_dir}/db/cache.db --log {run_dir}/logs "
                              "--nworkers 3 --nrecords 7 --ncontested 2 --distinct-hosts")
    assert not any(tmp_path.iterdir()), "a dry run must not create anything"
    # no partition: no --partition; inside a big enough allocation: --relative=w
    r = _launch(["2", "1", "1"], DRY_RUN="1", TIRASTORE_TEST_DIR=str(tmp_path), SLURM_JOB_ID="42",
                SLURM_JOB_NUM_NODES="2", EXTRA_SRUN_ARGS="--time=00:10:00 --account=proj")
    sruns = [x for x in r.stdout.splitlines() if x.startswith("srun ")]
    assert "--partition" not in r.stdout
    assert "--relative=0 " in sruns[0] and "--relative=1 " in sruns[1]
    assert all("--time=00:10:00 --account=proj" in x and "--exclusive" not in x for x in sruns)


FAKE_SRUN = """#!/usr/bin/env bash
# Stand-in for srun: drops srun's options, honours --output, runs the command here.
out=/dev/stdout
while [ $# -gt 0 ]; do
    case "$1" in
        --output=*) out=${1#--output=}; shift ;;
        --*) shift ;;
        *) break ;;
    esac
done
exec "$@" >"$out" 2>&1
"""


def test_launch_with_stand_in_srun(tmp_path):
    srun = tmp_path / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    base = dict(TIRASTORE_TEST_DIR=str(tmp_path / "lustre"), SRUN=str(srun), PYTHON=sys.executable,
                STALE_LOCK_TIMEOUT="5", TIRASTORE_LIB=str(NORMAL_LIB))
    r = _launch(["3", "6", "3"], REQUIRE_DISTINCT_HOSTS="0", **base)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "0 failed" in r.stdout
    # All workers ran on this one host: the distinct-host check must object.
    r = _launch(["2", "2", "1"], **base)
    assert r.returncode == 1
    assert "ran on the same host" in r.stdout


# ---------------------------------------------------------------------------
# (e) the verifier catches hand-made defects
# ---------------------------------------------------------------------------

W, R, C = 3, 6, 3


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    db, logs = d / "db" / "cache.db", d / "logs"
    res = _fleet([db] * W, logs, R, C, sample=3)
    assert not res.failed
    v, _ = _verify(db, logs, W, R, C)
    assert v == [], v
    return d


@pytest.fixture
def bad_run(good_run, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(good_run, d)
    return d


def _sql(db: Path, *stmts) -> None:
    conn = sqlite3.connect(str(db))
    try:
        for s in stmts:
            conn.execute(*s) if isinstance(s, tuple) else conn.execute(s)
        conn.commit()
    finally:
        conn.close()


def _log_entries(d: Path, w: int) -> list[dict]:
    return [json.loads(x) for x in (d / "logs" / f"worker-{w}.jsonl").read_text().splitlines()]


def _write_log(d: Path, w: int, entries: list[dict]) -> None:
    (d / "logs" / f"worker-{w}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))


def _key_unique(w, i):
    r = plan.unique_record(w, i)
    return plan.record_key(r["source"], r["schedule"])


def _key_contested(c):
    r = plan.contested_record(0, c)
    return plan.record_key(r["source"], r["schedule"])


def _check(d: Path, pattern: str) -> list[str]:
    v, _ = _verify(d / "db" / "cache.db", d / "logs", W, R, C)
    assert any(re.search(pattern, x) for x in v), f"{pattern!r} not among {v}"
    return v


def test_verifier_passes_the_good_run(bad_run):
    assert _verify(bad_run / "db" / "cache.db", bad_run / "logs", W, R, C)[0] == []


def test_verifier_catches_a_lost_acknowledged_record(bad_run):
    _sql(bad_run / "db" / "cache.db", ("DELETE FROM records WHERE key=?", (_key_unique(1, 2),)))
    _check(bad_run, r"unique record \(w1, 2\): LOST")


def test_verifier_catches_a_duplicate_winner(bad_run):
    c = 1
    winner = next(w for w in range(W) for e in _log_entries(bad_run, w)
                  if e.get("op") == "contested" and e["c"] == c and e["returned"])
    other = (winner + 1) % W
    entries = _log_entries(bad_run, other)
    for e in entries:
        if e.get("op") == "contested" and e["c"] == c:
            e["returned"] = True
    _write_log(bad_run, other, entries)
    _check(bad_run, rf"contested record {c}: record\(\) returned True 2 times")


def test_verifier_catches_a_bad_value(bad_run):
    _sql(bad_run / "db" / "cache.db", ("UPDATE records SET result_json=? WHERE key=?",
                                       ('{"is_legal":true,"execution_times":[9.5]}', _key_unique(2, 0))))
    _check(bad_run, r"value .*9\.5.* is no planned value")


def test_verifier_catches_a_wrong_winner_value(bad_run):
    c = 2
    winner = next(w for w in range(W) for e in _log_entries(bad_run, w)
                  if e.get("op") == "contested" and e["c"] == c and e["returned"])
    loser = (winner + 1) % W
    r = plan.contested_record(loser, c)
    _sql(bad_run / "db" / "cache.db", ("UPDATE records SET result_json=?, source_project=? WHERE key=?",
                                       (plan.result_json(True, r["times"]), plan.project(loser),
                                        _key_contested(c))))
    _check(bad_run, rf"worker {winner} was told it won, but the stored value is worker {loser}'s")


def test_verifier_catches_a_duplicate_row(bad_run):
    # A table without its primary key, as a corrupted index would allow.
    db = bad_run / "db" / "cache.db"
    _sql(db, "CREATE TABLE r2 AS SELECT * FROM records", "DROP TABLE records",
         "ALTER TABLE r2 RENAME TO records",
         ("INSERT INTO records SELECT * FROM records WHERE key=?", (_key_unique(0, 1),)))
    _check(bad_run, r"stored 2 times")


def test_verifier_catches_unexpected_and_unacknowledged_records(bad_run):
    db = bad_run / "db" / "cache.db"
    ph = plan.program_hash(plan.unique_record(0, 0)["source"])
    _sql(db, ("INSERT INTO records VALUES (?,?,?,?,?,?,?,?,?)",
              ("f" * 64, ph, "R(L0,comps=['x'])", '{"is_legal":false,"execution_times":null}',
               "h", "u", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00", "p")))
    # worker 1 "forgets" it acknowledged (1, 3): present, never acknowledged, nobody killed
    entries = [e for e in _log_entries(bad_run, 1) if not (e.get("op") == "unique" and e["i"] == 3)]
    _write_log(bad_run, 1, entries)
    v = _check(bad_run, r"unexpected record ffffffffffff")
    assert any("unique record (w1, 3): present but never acknowledged" in x for x in v)


def test_verifier_catches_logged_errors_and_unfinished_workers(bad_run):
    entries = _log_entries(bad_run, 0)
    entries = [e for e in entries if e.get("op") != "done"]
    entries.append({"w": 0, "pid": 1, "op": "error", "phase": "unique", "type": "sqlite3.DatabaseError",
                    "message": "database disk image is malformed"})
    _write_log(bad_run, 0, entries)
    v = _check(bad_run, r"logged an error .*malformed")
    assert any("worker 0: never finished" in x for x in v)


def test_verifier_catches_leftover_lock_journal_and_claim(bad_run):
    dbdir = bad_run / "db"
    (dbdir / "cache.db.lock").write_text('{"hostname": "x", "pid": 1, "timestamp": 1.0}')
    (dbdir / "cache.db-journal").write_bytes(b"\0" * 512)
    (dbdir / ".lock_somehost_4242_abcdefgh").write_text("{}")
    v = _check(bad_run, r"lock file left behind")
    assert any("cache.db-journal left behind" in x for x in v)
    assert any("ticket file left behind" in x for x in v)


def test_verifier_catches_a_corrupt_file(bad_run):
    db = bad_run / "db" / "cache.db"
    data = bytearray(db.read_bytes())
    page = 4096 if len(data) > 8192 else 1024
    for off in range(page + 8, min(len(data), 3 * page), 7):
        data[off] = 0xA5
    db.write_bytes(bytes(data))
    _check(bad_run, r"integrity_check|cannot read the database|malformed")


def test_verifier_checks_distinct_hosts(bad_run):
    v, _ = _verify(bad_run / "db" / "cache.db", bad_run / "logs", W, R, C, distinct="hosts")
    assert any("ran on the same host" in x for x in v)
    for w in range(W):
        entries = _log_entries(bad_run, w)
        for e in entries:
            if e.get("op") == "start":
                e["hostname"] = f"node{w:03d}"
        _write_log(bad_run, w, entries)
        _sql(bad_run / "db" / "cache.db", ("UPDATE records SET hostname=? WHERE source_project=?",
                                           (f"node{w:03d}", plan.project(w))))
    v, summary = _verify(bad_run / "db" / "cache.db", bad_run / "logs", W, R, C, distinct="hosts")
    assert v == [] and summary["info"]["distinct hosts"] == W
    # a record whose hostname is not its writer's host
    _sql(bad_run / "db" / "cache.db", ("UPDATE records SET hostname='elsewhere' WHERE key=?",
                                       (_key_unique(1, 1),)))
    _check(bad_run, r"hostname 'elsewhere', but its writer \(worker 1\) ran on \['node001'\]")


# ---- the torture's claim verifier, on logs written by hand -------------------

LEASE = 4.0


def _claim_run(tmp_path, holder_recorded: float, taker_measuring: float, killed_holder: bool = False):
    """One claim schedule measured by two claimers: claimer 0 asks at t=100
    and claims it (measuring at 100.01), then records at holder_recorded
    (True; unless killed_holder: its run dies inside the claim); claimer 1
    asks at 101 and measures it at taker_measuring (its record False, or
    True if the holder died). Returns verify_claims's violations and
    figures."""
    key, spec = next(iter(plan.claim_plan(1).items()))
    logs = tmp_path / "logs"
    logs.mkdir()

    def write(w, pid, entries):
        runs = [(pid, [{"op": "start", "hostname": "h"}, *entries, {"op": "done", "errors": 0}])]
        if killed_holder and w == 0:  # killed inside the claim, then restarted
            runs = [(pid, runs[0][1][:-1]), (pid + 100, [{"op": "start", "hostname": "h"},
                                                         {"op": "done", "errors": 0}])]
        with open(logs / f"claim-{w}.jsonl", "w") as f:
            for p, es in runs:
                for e in es:
                    f.write(json.dumps({"w": w, "pid": p, "t": e.pop("t", 0.0), **e}) + "\n")

    held = [{"op": "measuring", "s": 0, "asked": 100.0, "t": 100.01}]
    if not killed_holder:
        held.append({"op": "recorded", "s": 0, "returned": True, "taken_over": False, "t": holder_recorded})
    write(0, 10, held)
    write(1, 11, [{"op": "measuring", "s": 0, "asked": 101.0, "t": taker_measuring},
                  {"op": "recorded", "s": 0, "returned": killed_holder, "taken_over": False,
                   "t": taker_measuring + 0.05}])
    stored = (1, 11) if killed_holder else (0, 10)
    rows = {key: (spec["schedule"], spec["program_hash"],
                  json.dumps({"is_legal": True, "execution_times": plan.claim_times(0, *stored)}),
                  plan.project(stored[0]))}
    v, figures, _ = verify_results.verify_claims(logs, [0, 1], 1, rows, [], LEASE)
    return v, figures["info"]


def test_claim_verifier_takeover_of_a_killed_holder(tmp_path):
    v, info = _claim_run(tmp_path, 0.0, 105.0, killed_holder=True)
    assert v == [] and info["schedules measured again after a kill inside the claim"] == 1


def test_claim_verifier_a_live_claim_taken_over_after_its_lease(tmp_path):
    """A live holder whose record waited for the lock past its lease: the
    taker's claim a lease after the holder asked is the lease's rule."""
    v, info = _claim_run(tmp_path, 105.5, 104.5)
    assert v == []
    assert info["live claims taken over after their lease (renewals waited for the lock)"] == 1
    assert info["schedules measured again after a kill inside the claim"] == 0


@pytest.mark.parametrize("holder_recorded, taker_measuring", [
    (105.5, 103.0),  # taken over before the holder's lease could run out
    (103.5, 104.5),  # the holder recorded within its lease: nothing expired
    (100.5, 100.9),  # both within the lease
])
def test_claim_verifier_negative_control_a_live_claim_measured_twice(tmp_path, holder_recorded, taker_measuring):
    v, _ = _claim_run(tmp_path, holder_recorded, taker_measuring)
    assert any("MEASURED TWICE" in x for x in v), v
