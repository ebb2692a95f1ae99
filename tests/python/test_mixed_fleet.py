"""A mixed fleet: processes speaking the ORIGINAL TiraStore's protocol and
processes using this library write one database at the same time.

The original-protocol writer below is written in this file from
docs/COMPAT.md (stdlib only, nothing imported from the original or
from the library): the hard-link lock (a ticket file ``.lock_<host>_<pid>_...``
holding the JSON {"hostname", "pid", "timestamp"}, link() to the lock path,
exponential backoff with jitter, the stale rule, release = unlink the lock
then the ticket), and per operation one stdlib sqlite3 connection with
journal_mode=DELETE, synchronous=FULL, busy_timeout=0, foreign_keys=ON:
insert the program if absent, then the record if absent. It runs the same
four phases and writes the same acknowledgement log as
tests/multinode/worker.py, so tests/multinode/verify_results.py judges the
whole fleet; afterwards every record each side acknowledged is looked up
from the other side.

Run as a script (``--orig-worker ...``) it is one original-protocol worker.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import random
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MULTINODE = REPO / "tests" / "multinode"
sys.path.insert(0, str(MULTINODE))

import plan  # noqa: E402

# ---------------------------------------------------------------------------
# The original's protocol (from COMPAT.md)
# ---------------------------------------------------------------------------


class OriginalLock:
    """The original hard-link lock on <db>.with_suffix('.db.lock')."""

    def __init__(self, db: Path, stale_lock_timeout: float = 600.0, timeout: float = 300.0):
        self.path = Path(db).resolve().with_suffix(".db.lock")
        self.stale = stale_lock_timeout
        self.timeout = timeout
        self.host = socket.gethostname()
        self.ticket = None

    def acquire(self) -> None:
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        while True:
            fd, ticket = tempfile.mkstemp(prefix=f".lock_{self.host}_{os.getpid()}_", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump({"hostname": self.host, "pid": os.getpid(), "timestamp": time.time()}, f)
            try:
                os.link(ticket, self.path)
                self.ticket = ticket
                return
            except FileExistsError:
                os.unlink(ticket)
            if self._break_if_stale():
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not acquire {self.path} within {self.timeout} s")
            time.sleep(random.uniform(0, delay))
            delay = min(delay * 2, 0.5)

    def _break_if_stale(self) -> bool:
        try:
            info = json.loads(self.path.read_text())
            age = time.time() - float(info["timestamp"])
        except (OSError, ValueError, KeyError, TypeError):
            return False  # gone, or unparseable: never broken
        if age > self.stale:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            return True
        return False

    def release(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.unlink(self.ticket)
        self.ticket = None


SCHEMA = [
    "CREATE TABLE IF NOT EXISTS db_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS programs (program_hash TEXT PRIMARY KEY, program_name TEXT NOT NULL,"
    " source_code TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY,"
    " program_hash TEXT NOT NULL REFERENCES programs(program_hash),"
    " schedule TEXT NOT NULL, result_json TEXT NOT NULL, hostname TEXT NOT NULL,"
    " username TEXT NOT NULL, creation_date TEXT NOT NULL, update_date TEXT NOT NULL,"
    " source_project TEXT NOT NULL DEFAULT '')",
]


class OriginalStore:
    """The original's store: lock -> connect -> work -> close -> release."""

    def __init__(self, db: Path, source_project: str, stale_lock_timeout: float, use_lock: bool = True,
                 widen_ms: int = 0):
        self.db = Path(db).resolve()
        self.db.parent.mkdir(parents=True, exist_ok=True)  # the original: mkdir -p, mode 1777
        try:
            os.chmod(self.db.parent, 0o1777)
        except OSError:
            pass
        self.project = source_project
        self.lock = OriginalLock(self.db, stale_lock_timeout)
        self.use_lock = use_lock
        self.widen = widen_ms / 1000
        self.host = socket.gethostname()
        self.user = getpass.getuser()
        self._run(self._init)

    def _run(self, fn):
        if self.use_lock:
            self.lock.acquire()
        try:
            conn = sqlite3.connect(str(self.db), timeout=0)
            try:
                for p in ("journal_mode=DELETE", "synchronous=FULL", "busy_timeout=0", "foreign_keys=ON"):
                    conn.execute(f"PRAGMA {p}")
                return fn(conn)
            finally:
                conn.close()
        finally:
            if self.use_lock:
                self.lock.release()

    def _init(self, conn):
        for stmt in SCHEMA:
            conn.execute(stmt)
        meta = {"schema_version": "2", "cpu_model": plan.TEST_CPU, "slurm_cpus": plan.TEST_SLURM,
                "created_at": datetime.now(timezone.utc).isoformat()}
        for k, v in meta.items():
            conn.execute("INSERT OR IGNORE INTO db_meta (key, value) VALUES (?, ?)", (k, v))
        conn.commit()
        got = dict(conn.execute("SELECT key, value FROM db_meta").fetchall())
        if got.get("cpu_model") != plan.TEST_CPU:
            raise PermissionError(f"CPU metadata mismatch: {got.get('cpu_model')!r}")

    def record(self, name, source, schedule, is_legal, times, overwrite=False) -> bool:
        ph = plan.program_hash(source)
        key = plan.record_key(source, schedule)
        norm = plan.normalize_schedule(schedule)
        rj = plan.result_json(is_legal, times)

        def work(conn):
            now = datetime.now(timezone.utc).isoformat()
            if conn.execute("SELECT 1 FROM programs WHERE program_hash=?", (ph,)).fetchone() is None:
                conn.execute("INSERT INTO programs (program_hash, program_name, source_code) VALUES (?,?,?)",
                             (ph, name, source))
            exists = conn.execute("SELECT 1 FROM records WHERE key=?", (key,)).fetchone() is not None
            if exists and not overwrite:
                conn.commit()
                return False
            if exists:
                conn.execute("UPDATE records SET program_hash=?, schedule=?, result_json=?, hostname=?,"
                             " username=?, update_date=?, source_project=? WHERE key=?",
                             (ph, norm, rj, self.host, self.user, now, self.project, key))
            else:
                conn.execute("INSERT INTO records (key, program_hash, schedule, result_json, hostname,"
                             " username, creation_date, update_date, source_project)"
                             " VALUES (?,?,?,?,?,?,?,?,?)",
                             (key, ph, norm, rj, self.host, self.user, now, now, self.project))
            if self.widen:
                time.sleep(self.widen)
            conn.commit()
            return True

        return self._run(work)

    def lookup(self, source, schedule):
        key = plan.record_key(source, schedule)
        row = self._run(lambda c: c.execute(
            "SELECT result_json, schedule, source_project FROM records WHERE key=?", (key,)).fetchone())
        if row is None:
            return None
        v = json.loads(row[0])
        return v["is_legal"], v["execution_times"], row[2], row[1]


def orig_worker(argv) -> int:
    """One original-protocol worker: worker.py's phases and log format."""
    ap = argparse.ArgumentParser()
    for a in ("--db", "--log", "--node"):
        ap.add_argument(a, default="")
    for a in ("--worker-id", "--nworkers", "--nrecords", "--ncontested", "--seed", "--sample", "--widen"):
        ap.add_argument(a, type=int, default=0)
    ap.add_argument("--stale-lock-timeout", type=float, default=600.0)
    ap.add_argument("--no-lock", action="store_true")
    a = ap.parse_args(argv)
    w, log_dir = a.worker_id, Path(a.log)
    log_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_dir / f"worker-{w}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rng = random.Random(a.seed * 7919 + w)
    errors = 0

    def log(**e):
        os.write(fd, (json.dumps({"w": w, "pid": os.getpid(), **e, "t": time.time()}) + "\n").encode())
        os.fsync(fd)

    def error(phase, exc, **ids):
        nonlocal errors
        errors += 1
        t = type(exc)
        log(op="error", phase=phase, type=(t.__name__ if t.__module__ == "builtins" else
                                           f"{t.__module__}.{t.__name__}"), message=str(exc)[:300], **ids)
        if errors >= 25:
            log(op="abort", errors=errors)
            sys.exit(1)

    log(op="start", hostname=socket.gethostname(), node=a.node, mount="", db=a.db, lib="original-protocol")
    try:
        store = OriginalStore(Path(a.db), plan.project(w), a.stale_lock_timeout, not a.no_lock, a.widen)
    except Exception as e:  # noqa: BLE001
        error("open", e)
        log(op="exit", errors=errors)
        return 1

    def write(phase, r, overwrite=False, **ids):
        t0 = time.monotonic()
        try:
            ret = store.record(r["name"], r["source"], r["schedule"], r["is_legal"], r["times"], overwrite)
        except Exception as e:  # noqa: BLE001
            return error(phase, e, **ids)
        log(op=phase, **ids, key=plan.record_key(r["source"], r["schedule"]), is_legal=r["is_legal"],
            times=r["times"], returned=ret, dt=round(time.monotonic() - t0, 6))
        return ret

    def read(r, expect, **ids):
        nonlocal errors
        t0 = time.monotonic()
        try:
            got = store.lookup(r["source"], r["schedule"])
        except Exception as e:  # noqa: BLE001
            return error("read", e, **ids)
        if got is None or got[:3] not in expect or got[3] != plan.normalize_schedule(r["schedule"]):
            errors += 1
            log(op="error", phase="read", type="Mismatch", message=f"got {got!r}, expected {expect!r}", **ids)
        log(op="read", **ids, found=got is not None, dt=round(time.monotonic() - t0, 6))

    for i in range(a.nrecords):
        write("unique", plan.unique_record(w, i), i=i)
    won = set()
    order = list(range(a.ncontested))
    rng.shuffle(order)
    for c in order:
        if write("contested", plan.contested_record(w, c), c=c):
            won.add(c)
    for i in range(a.nrecords):
        r = plan.unique_record(w, i)
        read(r, [(r["is_legal"], r["times"], plan.project(w))], kind="own", i=i)
    for c in range(a.ncontested):
        vals = [(True, plan.contested_record(x, c)["times"], plan.project(x)) for x in range(a.nworkers)]
        if c == plan.OVERWRITE_CONTESTED:
            vals.append((True, plan.overwrite_record(c)["times"], plan.project(plan.OVERWRITE_WORKER)))
        elif c in won:
            vals = [(True, plan.contested_record(w, c)["times"], plan.project(w))]
        read(plan.contested_record(w, c), vals, kind="contested", c=c)
    others = []
    for f in log_dir.glob("worker-*.jsonl"):
        for line in f.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("op") == "unique" and e.get("w") != w and "returned" in e:
                others.append(e)
    for e in rng.sample(others, min(a.sample, len(others))):
        r = plan.unique_record(e["w"], e["i"])
        read(r, [(r["is_legal"], r["times"], plan.project(e["w"]))], kind="other", ow=e["w"], i=e["i"])
    if w == plan.OVERWRITE_WORKER and a.ncontested > plan.OVERWRITE_CONTESTED:
        write("overwrite", plan.overwrite_record(), overwrite=True, c=plan.OVERWRITE_CONTESTED)
    log(op="done", errors=errors)
    return 0 if errors == 0 else 1


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--orig-worker":
    sys.exit(orig_worker(sys.argv[2:]))


# ---------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------

import pytest  # noqa: E402

import harness  # noqa: E402
import verify_results  # noqa: E402

NORMAL_LIB = REPO / "python" / "tirastore" / "libtirastore.so"
NW, NR, NC = 8, 8, 5  # 4 original-protocol + 4 library workers

DAMAGE = re.compile(r"integrity_check|LOST|malformed|stored \d+ times|returned True \d+ times|"
                    r"no planned value|was told it won|not found|expected|cannot read the database")


def _orig_cmd(db, w, log_dir, node, stale, no_lock=False, widen=0):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--orig-worker", "--db", str(db),
           "--worker-id", str(w), "--nworkers", str(NW), "--nrecords", str(NR), "--ncontested", str(NC),
           "--log", str(log_dir), "--node", node, "--seed", "1", "--sample", "6",
           "--stale-lock-timeout", str(stale), "--widen", str(widen)]
    return cmd + (["--no-lock"] if no_lock else [])


def _run_mixed(dbs, log_dir, orig_parity, no_lock=False, failpoints_lib=None, stale=30.0):
    """Worker w (w % 2 == orig_parity: original protocol, else library) on dbs[w]."""
    members = []
    for w, db in enumerate(dbs):
        node = db.parent.parent.name
        if w % 2 == orig_parity:
            cmd = _orig_cmd(db, w, log_dir, node, stale, no_lock=no_lock, widen=5 if no_lock else 0)
            env = {}
        else:
            cmd = harness.worker_cmd(db, w, NW, NR, NC, log_dir, node=node, seed=1, stale=stale,
                                     lock_timeout=120, sample=6)
            if no_lock:
                env = {"TIRASTORE_LIB": str(failpoints_lib),
                       "TIRASTORE_FAILPOINTS": "lock-disabled=on;before-commit=sleep(5)"}
            else:
                env = {"TIRASTORE_LIB": str(NORMAL_LIB), "TIRASTORE_FAILPOINTS": ""}
        members.append(harness.Member(w=w, node=0, cmd_for=lambda run, c=cmd: c,
                                      env_for=lambda run, e=env: e))
    fleet = harness.Fleet(members, lock_path=dbs[0].parent / "cache.db.lock", log_dir=log_dir,
                          max_runs=1, deadline=120)
    return fleet.run()


def _acked(log_dir: Path) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for f in log_dir.glob("worker-*.jsonl"):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e.get("op") in ("unique", "contested", "overwrite") and "returned" in e:
                out.setdefault(e["w"], []).append(e)
    return out


LIB_LOOKUP = """
import json, sys
sys.path[:0] = [sys.argv[2], sys.argv[3]]
import plan, tirastore
s = tirastore.TiraStore(sys.argv[1], cpu_model=plan.TEST_CPU, slurm_cpus=plan.TEST_SLURM)
out = []
for kind, w, n in json.load(sys.stdin):
    r = plan.unique_record(w, n) if kind == "unique" else plan.contested_record(w, n)
    got = s.lookup(r["name"], r["source"], r["schedule"])
    out.append(None if got is None else [got.is_legal, got.execution_times, got.source_project,
                                         got.schedule])
print(json.dumps(out))
"""


def _cross_lookups(db: Path, log_dir: Path, orig_parity: int) -> None:
    """Every record one side acknowledged is found, with its value, by the other."""
    acked = _acked(log_dir)
    orig_written, lib_written = [], []
    for w, entries in acked.items():
        for e in entries:
            if e["op"] == "unique" or (e["op"] == "contested" and e["returned"]):
                item = ("unique", w, e["i"]) if e["op"] == "unique" else ("contested", w, e["c"])
                (orig_written if w % 2 == orig_parity else lib_written).append(item)
    assert orig_written and lib_written
    # library lookups of the original-protocol side's records (in a child: the
    # library of this checkout, whatever tirastore this interpreter imports)
    r = subprocess.run([sys.executable, "-c", LIB_LOOKUP, str(db), str(MULTINODE), str(REPO / "python")],
                       input=json.dumps(orig_written), capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TIRASTORE_LIB": str(NORMAL_LIB), "TIRASTORE_FAILPOINTS": ""})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    ow_key = None
    if NC > plan.OVERWRITE_CONTESTED:
        o = plan.overwrite_record()
        ow_key = plan.record_key(o["source"], o["schedule"])
    for (kind, w, n), g in zip(orig_written, got):
        spec = plan.unique_record(w, n) if kind == "unique" else plan.contested_record(w, n)
        assert g is not None, f"the library does not find {kind} record {w}/{n} written by the original"
        if plan.record_key(spec["source"], spec["schedule"]) == ow_key:
            continue  # overwritten since
        assert g == [spec["is_legal"], spec["times"], plan.project(w),
                     plan.normalize_schedule(spec["schedule"])]
    # original-protocol lookups (stdlib sqlite3, keys via hashlib) of the library's records
    store = OriginalStore(db, "checker", 600.0)
    for kind, w, n in lib_written:
        spec = plan.unique_record(w, n) if kind == "unique" else plan.contested_record(w, n)
        g = store.lookup(spec["source"], spec["schedule"])
        assert g is not None, f"the original protocol does not find {kind} record {w}/{n} of the library"
        if plan.record_key(spec["source"], spec["schedule"]) == ow_key:
            continue
        assert g == (spec["is_legal"], spec["times"], plan.project(w),
                     plan.normalize_schedule(spec["schedule"]))


def _no_leftovers(dbdir: Path) -> None:
    left = [p.name for p in dbdir.iterdir() if p.name.startswith(".lock_") or p.name.endswith(".db.lock")
            or p.name.endswith("-journal")]
    assert left == []


def _check_good(db: Path, log_dir: Path, orig_parity: int, nodes: int) -> None:
    v, summary = verify_results.verify(db, log_dir, NW, NR, NC)
    assert v == [], "\n".join(v)
    assert summary["info"]["records in db"] == NW * NR + NC
    assert summary["info"]["nodes seen"] == nodes
    _cross_lookups(db, log_dir, orig_parity)
    _no_leftovers(db.parent)
    # both sides wrote: writers of the stored rows
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        projects = {p for (p,) in conn.execute("SELECT source_project FROM records")}
    finally:
        conn.close()
    assert {plan.project(w) for w in range(NW)} <= projects


def test_mixed_fleet_one_directory(tmp_path):
    db, logs = tmp_path / "node" / "shared" / "cache.db", tmp_path / "logs"
    res = _run_mixed([db] * NW, logs, orig_parity=1)
    assert not res.failed and not res.timed_out, res
    _check_good(db, logs, orig_parity=1, nodes=1)


def test_mixed_fleet_fuse_bed(bed, tmp_path):
    # workers alternate between the two mounts; the original-protocol workers
    # are the even ones here, so worker 0's overwrite goes through them
    sub = "mixed/cache.db"
    dbs = [bed.mounts[(w // 2) % 2] / sub for w in range(NW)]
    logs = tmp_path / "logs"
    res = _run_mixed(dbs, logs, orig_parity=0)
    assert not res.failed and not res.timed_out, res
    _check_good(bed.backing / sub, logs, orig_parity=0, nodes=2)


def _negative(db_for_verify, dbs, logs, failpoints_lib):
    harness.create_db(dbs[0])  # the writers race on records, not on creating the file
    _run_mixed(dbs, logs, orig_parity=1, no_lock=True, failpoints_lib=failpoints_lib)
    v, _ = verify_results.verify(db_for_verify, logs, NW, NR, NC)
    damage = [x for x in v if DAMAGE.search(x)]
    assert damage, "with the lock skipped on both sides the fleet must lose or corrupt data: " + \
        "\n".join(v[:20])


def test_mixed_fleet_negative_control_one_directory(tmp_path, failpoints_lib):
    db, logs = tmp_path / "node" / "shared" / "cache.db", tmp_path / "logs"
    _negative(db, [db] * NW, logs, failpoints_lib)


def test_mixed_fleet_negative_control_fuse_bed(bed, tmp_path, failpoints_lib):
    sub = "mixed-neg/cache.db"
    dbs = [bed.mounts[(w // 2) % 2] / sub for w in range(NW)]
    _negative(bed.backing / sub, dbs, tmp_path / "logs", failpoints_lib)
