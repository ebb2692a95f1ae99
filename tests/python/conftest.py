"""Shared fixtures and independent oracles for the tirastore Python test suite.

Everything in this file is written from docs/COMPAT.md and the
original README: the oracles below use only Python's re/hashlib/json/sqlite3
and never call into the library under test, so they can judge it.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Optional

import pytest

# Values used for stores created by the fixtures.  Explicit values keep the
# tests independent of the machine's CPU and of SLURM_CPUS_PER_TASK.
TEST_CPU = "Test CPU Model @ 1.00GHz"
TEST_SLURM = "4"
TEST_PROJECT = "proj-A"

SRC_BLUR = "void blur() {\n  /* body */\n  int x = 1; // one\n}\n"
SCHED_S = "S(L0,L1,4,8,comps=['c1'])"
SCHED_I = "I(L0,L1,comps=['c1'])"
SCHED_R = "R(L0,comps=['c1'])"

RECORD_COLUMNS = [
    "key",
    "program_hash",
    "schedule",
    "result_json",
    "hostname",
    "username",
    "creation_date",
    "update_date",
    "source_project",
]

# Schema of the original (COMPAT.md, schema_version 2), verbatim.
ORIGINAL_SCHEMA_SQL = [
    "CREATE TABLE IF NOT EXISTS db_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    """CREATE TABLE IF NOT EXISTS programs (
        program_hash TEXT PRIMARY KEY, program_name TEXT NOT NULL,
        source_code TEXT NOT NULL);""",
    """CREATE TABLE IF NOT EXISTS records (
        key TEXT PRIMARY KEY,
        program_hash TEXT NOT NULL REFERENCES programs(program_hash),
        schedule TEXT NOT NULL, result_json TEXT NOT NULL,
        hostname TEXT NOT NULL, username TEXT NOT NULL,
        creation_date TEXT NOT NULL, update_date TEXT NOT NULL,
        source_project TEXT NOT NULL DEFAULT '');""",
]

ISO_UTC_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?\+00:00$"
)


# The backend the store fixtures open: "sqlite" (a file, the default) or
# "postgresql" (a schema of a throwaway PostgreSQL cluster that the session
# starts, tests/pg/pgcluster.py). `make test` runs the API modules on both.
BACKEND = os.environ.get("TIRASTORE_TEST_BACKEND", "sqlite")
if BACKEND not in ("sqlite", "postgresql"):
    raise RuntimeError(f"TIRASTORE_TEST_BACKEND={BACKEND!r}: sqlite or postgresql")
ON_PG = BACKEND == "postgresql"

sqlite_only = pytest.mark.skipif(ON_PG, reason="about the SQLite file (its lock, its bytes, its directory)")
"""Marks a test of what only the SQLite-file backend has."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "soak: the long tier (`make soak`): fleets, stress runs and soaks at full size; "
        "`make test` deselects it (-m 'not soak')")
    if os.geteuid() == 0:
        closed = _closed_to_others(Path(__file__).resolve().parents[2])
        if closed is not None:
            raise pytest.UsageError(
                f"{closed} is mode {closed.stat().st_mode & 0o777:04o}: the tests that run as another user "
                f"(uid 65534, the hostile neighbour) cannot reach this checkout through it and would fail "
                f"with 'No module named tirastore'; clone into a directory other users can traverse, "
                f"or give it o+x")


def _closed_to_others(path: Path) -> Path | None:
    """The first directory from / down to *path* that users other than its
    owner and group cannot traverse (no o+x), or None."""
    for d in reversed([path, *path.parents]):
        if not d.stat().st_mode & 0o001:
            return d
    return None


def tiered(fast: Any, soak: Any, name: str = "n") -> list:
    """The parameters of a test that runs at two sizes: *fast* in `make test`
    (big enough to show the property, its negative control included) and
    *soak*, marked soak, in `make soak`."""
    return [pytest.param(fast, id=f"{name}{fast}"),
            pytest.param(soak, id=f"{name}{soak}", marks=pytest.mark.soak)]


# Modules whose module- or session-scoped fixtures are costly (a wheel
# built, a browser, a PostgreSQL cluster, a FUSE bed, a fleet's run): under
# pytest-xdist each runs whole on one worker, so that they are built once,
# and first, since they hold the longest tests. (A scheduler of our own
# rather than --dist loadgroup, whose xdist_group marks pytest 9.2 no
# longer carries to the scheduler.)
ONE_WORKER_MODULES = ("test_packaging", "test_postgres", "test_pgbouncer", "test_dashboard", "test_examples",
                      "test_multinode", "test_mixed_fleet", "test_ejkernel", "test_slurm", "test_slurm_claims")


def _one_worker(nodeid: str) -> bool:
    return Path(nodeid.split("::", 1)[0]).stem in ONE_WORKER_MODULES


def pytest_xdist_make_scheduler(config, log):
    """With -n (--dist load, the default): each test on the next free
    worker, but a module of ONE_WORKER_MODULES whole on one."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("::", 1)[0] if _one_worker(nodeid) else nodeid

    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """ONE_WORKER_MODULES first: their tests are the longest."""
    items.sort(key=lambda item: not _one_worker(item.nodeid))


# ---------------------------------------------------------------------------
# Isolation: nothing a test reads or writes is shared with anything outside
# the test run (docs/design.md, "Tests and tiers").
# ---------------------------------------------------------------------------

_OTHER_NODE: Optional[list] = None


def other_node_prefix(hostname: str = "stall-node2") -> Optional[list]:
    """A command prefix that runs a command as on another node of the
    cluster, or None where it cannot (needs root and unshare): its own host
    name (a UTS namespace) and its own node-local memory (a mount namespace
    with a fresh tmpfs on /dev/shm), the database's directory shared as on a
    cluster filesystem."""
    global _OTHER_NODE
    import subprocess

    if _OTHER_NODE is None:
        ok = bool(shutil.which("unshare")) and os.geteuid() == 0 and subprocess.run(
            ["unshare", "--uts", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm && hostname probe-node"],
            capture_output=True, timeout=20).returncode == 0
        _OTHER_NODE = [ok]
    if not _OTHER_NODE[0]:
        return None
    return ["unshare", "--uts", "--mount", "sh", "-c",
            f'mount -t tmpfs tmpfs /dev/shm && hostname {hostname} && exec "$@"', "sh"]


# Where each test's own directories are made: a directory of this process
# in the run's temporary directory (tests/isolate's, which other users may
# pass through but not list), removed when the process ends. (Not each
# test's own at its end: a session's PostgreSQL cluster lives in the
# TMPDIR of the test that started it.) Short names: a socket path in a
# test's TMPDIR must stay under 108 bytes.
_TEST_ENVS = tempfile.mkdtemp(prefix="envs-")
os.chmod(_TEST_ENVS, 0o711)
atexit.register(shutil.rmtree, _TEST_ENVS, True)


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch):
    """Every test runs with a HOME, a TMPDIR and a working directory of its
    own, empty: nothing it writes by default (~/ejkernel-presistent-cache,
    ./.ejkernel-presistent-cache, files named after a pid in $TMPDIR) meets
    another test, another run or another user. They are not in pytest's
    tmp_path tree (mode 0700): a test may start a process as another user
    (a PostgreSQL server, a stranger) on a directory it makes in TMPDIR,
    so TMPDIR and the directories above it let others pass through (0711),
    never list or create."""
    env = Path(tempfile.mkdtemp(prefix="e-", dir=_TEST_ENVS))
    env.chmod(0o711)
    (env / "home").mkdir(mode=0o700)
    (env / "tmp").mkdir(mode=0o711)
    (env / "cwd").mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(env / "home"))
    monkeypatch.setenv("TMPDIR", str(env / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(env / "tmp"))
    monkeypatch.chdir(env / "cwd")


# ---------------------------------------------------------------------------
# Independent oracles (from COMPAT.md)
# ---------------------------------------------------------------------------


# The schedule, program and key rules: the one reference, shared with the
# Go tests (core/schedule/testdata/reference.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "schedule" / "testdata"))
import reference  # noqa: E402

strip_ws = reference.strip_ws
oracle_normalize_schedule = reference.normalize_schedule
oracle_validate_schedule = reference.validate_schedule
oracle_normalize_program = reference.normalize_program
oracle_program_hash = reference.program_hash
canonical_json = reference.canonical_json
expected_key = reference.record_key  # the record key, independently of the library


def expected_result_json(is_legal: bool, times: Optional[Iterable[Any]]) -> str:
    """What the original writes into result_json."""
    t = None if times is None else list(times)
    return json.dumps(
        {"is_legal": is_legal, "execution_times": t},
        separators=(",", ":"),
        ensure_ascii=True,
    )


# ---------------------------------------------------------------------------
# Raw database helpers (stdlib sqlite3 only)
# ---------------------------------------------------------------------------


def _is_url(db: Any) -> bool:
    return isinstance(db, str) and db.startswith("postgresql://")


def _pg_schema(url: str) -> str:
    """The schema a test URL (pgcluster.Cluster.url) puts first on the search_path."""
    from urllib.parse import parse_qs, urlsplit

    opts = parse_qs(urlsplit(url).query).get("options", [""])[0]
    return opts.split("search_path=", 1)[1].split()[0] if "search_path=" in opts else "public"


def raw_connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(db))
    conn.row_factory = sqlite3.Row
    return conn


def remove_programs(db: Path) -> None:
    """Delete every record and program of a database file by SQL: a
    database that no longer has the programs a store wrote."""
    conn = sqlite3.connect(str(db))
    with conn:
        conn.execute("DELETE FROM records")
        conn.execute("DELETE FROM programs")
    conn.close()


def raw_query(db: Path, sql: str, params: tuple = ()) -> list[dict]:
    """Rows of sql on the database, read by sqlite3, or by psql for a
    test cluster's URL (params are then not supported)."""
    if _is_url(db):
        assert not params, "raw_query on PostgreSQL takes no parameters"
        return _pg_cluster.query_json(sql, schema=_pg_schema(db))
    conn = raw_connect(db)
    try:
        return [dict(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def raw_records(db: Path) -> dict[str, dict]:
    return {r["key"]: r for r in raw_query(db, "SELECT * FROM records")}


def raw_programs(db: Path) -> dict[str, dict]:
    return {r["program_hash"]: r for r in raw_query(db, "SELECT * FROM programs")}


def raw_meta(db: Path) -> dict[str, str]:
    return {r["key"]: r["value"] for r in raw_query(db, "SELECT * FROM db_meta")}


def create_original_db(
    db: Path,
    cpu_model: str = TEST_CPU,
    slurm_cpus: str = TEST_SLURM,
    created_at: str = "2026-02-21T15:30:12.123456+00:00",
) -> None:
    """Create an empty DB exactly as the original would (schema + db_meta)."""
    conn = sqlite3.connect(str(db))
    try:
        conn.execute("PRAGMA journal_mode=DELETE;")
        for stmt in ORIGINAL_SCHEMA_SQL:
            conn.execute(stmt)
        for k, v in (
            ("schema_version", "2"),
            ("cpu_model", cpu_model),
            ("slurm_cpus", slurm_cpus),
            ("created_at", created_at),
        ):
            conn.execute("INSERT OR IGNORE INTO db_meta (key, value) VALUES (?, ?)", (k, v))
        conn.commit()
    finally:
        conn.close()
    os.chmod(db, 0o666)


def original_insert(
    db: Path,
    program_name: str,
    source: str,
    schedule: str,
    result_json: str,
    hostname: str = "node042",
    username: str = "olduser",
    creation_date: str = "2026-02-21T15:30:12.123456+00:00",
    update_date: Optional[str] = None,
    source_project: str = "old-project",
) -> str:
    """Insert one record the way the original does; returns its key."""
    h = oracle_program_hash(source)
    key = expected_key(source, schedule)
    conn = sqlite3.connect(str(db))
    try:
        conn.execute("PRAGMA foreign_keys=ON;")
        if conn.execute("SELECT 1 FROM programs WHERE program_hash=?", (h,)).fetchone() is None:
            conn.execute(
                "INSERT INTO programs (program_hash, program_name, source_code) VALUES (?, ?, ?)",
                (h, program_name, source),
            )
        conn.execute(
            "INSERT INTO records (key, program_hash, schedule, result_json, hostname, "
            "username, creation_date, update_date, source_project) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                key,
                h,
                oracle_normalize_schedule(schedule),
                result_json,
                hostname,
                username,
                creation_date,
                update_date or creation_date,
                source_project,
            ),
        )
        conn.commit()
    finally:
        conn.close()
    return key


def lock_path_for(db: Path) -> Path:
    return Path(db).resolve().with_suffix(".db.lock")


def _live_ticket(p: Path) -> bool:
    """A lock ticket file that an open store keeps for its next operation: named
    after a live process, and not (also) the lock."""
    # .lock_<hostname>_<pid>_<8 random characters, "_" among them>
    try:
        pid = int(p.name[:-9].rsplit("_", 1)[1])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    return p.stat().st_nlink == 1


def leftover_lock_files(directory: Any) -> list[str]:
    """Lock files, and ticket files of processes that are gone, left in
    *directory* (or beside a store's database file; none for a store on a
    server). (An open store keeps one ticket file between operations; it
    is removed when the store is closed.)"""
    if hasattr(directory, "db_path"):
        if not isinstance(directory.db_path, Path):
            return []
        directory = directory.db_path.parent
    return sorted(
        p.name
        for p in Path(directory).iterdir()
        if p.name.endswith(".db.lock") or (p.name.startswith(".lock_") and not _live_ticket(p))
    )


def write_fake_lock(lock: Path, age_seconds: float = 0.0, hostname: str = "other-node",
                    pid: int = 999999) -> None:
    """Hold the lock the way another (original) holder would."""
    payload = json.dumps(
        {"hostname": hostname, "pid": pid, "timestamp": time.time() - age_seconds}
    )
    lock.write_text(payload, encoding="utf-8")


def blocked_opening_a_fifo(pid: int, group: bool = False) -> bool:
    """Whether a thread of process pid (group: of any process of the
    process group pid) sleeps in open(2) of a FIFO that nobody has open at
    the other end (the kernel's wait_for_partner): a hang seen as it
    happens, not guessed from a timeout."""
    pids = [pid]
    if group:
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[2]) == pid:
                    pids.append(int(stat.parent.name))
            except (OSError, ValueError, IndexError):
                pass
    for p in pids:
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:  # gone
            continue
        for t in tasks:
            try:
                if Path(f"/proc/{p}/task/{t}/wchan").read_text().strip() == "wait_for_partner":
                    return True
            except OSError:
                pass
    return False


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


@pytest.fixture
def tirastore_mod():
    import tirastore

    return tirastore


_pg_cluster = None  # the session's throwaway cluster (ON_PG)
_pg_schemas = 0


def import_dev_dependency(name: str):
    """The module name, a dev dependency of pyproject.toml: pytest.importorskip,
    except under CI=true, where the Makefile has installed every one and a
    missing one fails the test rather than skip it unseen."""
    if os.environ.get("CI") == "true":
        import importlib

        try:
            return importlib.import_module(name)
        except ImportError as e:
            pytest.fail(f"{name} is a dev dependency (pyproject.toml) and is missing: {e}")
    return pytest.importorskip(name)


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL cluster for the session (tests/pg/pgcluster.py);
    skipped where PostgreSQL is not installed, except under CI=true."""
    global _pg_cluster
    sys.path.insert(0, str(_REPO / "tests" / "pg"))
    import pgcluster

    if _pg_cluster is None:
        try:
            _pg_cluster = pgcluster.start()
        except pgcluster.Unavailable as e:
            if os.environ.get("CI") == "true":
                pytest.fail(str(e))
            pytest.skip(str(e))
    yield _pg_cluster


def pytest_sessionfinish(session, exitstatus):
    if _pg_cluster is not None:
        _pg_cluster.stop()


def new_pg_url(cluster) -> str:
    """The URL of a new, empty schema of the cluster (one per test)."""
    global _pg_schemas
    _pg_schemas += 1
    return cluster.new_schema(f"t{os.getpid()}_{_pg_schemas}")


@pytest.fixture
def db_path(request, tmp_path: Path):
    """The test's database: a file in tmp_path, or on PostgreSQL a new schema's URL."""
    if ON_PG:
        return new_pg_url(request.getfixturevalue("pg_cluster"))
    return tmp_path / "cache.db"


@pytest.fixture
def make_store(db_path):
    """Factory: make_store(path=None, **kwargs) -> TiraStore, closed at teardown;
    path None is the test's db_path."""
    from tirastore import TiraStore

    opened = []

    def _make(path: Optional[Path] = None, **kwargs):
        kwargs.setdefault("source_project", TEST_PROJECT)
        kwargs.setdefault("cpu_model", TEST_CPU)
        kwargs.setdefault("slurm_cpus", TEST_SLURM)
        s = TiraStore(path if path is not None else db_path, **kwargs)
        opened.append(s)
        return s

    yield _make
    for s in opened:
        try:
            s.close()
        except Exception:
            pass


@pytest.fixture
def store(make_store, db_path):
    return make_store(db_path)


# ---------------------------------------------------------------------------
# The FUSE test bed and the failpoints build, shared by the multi-node and
# mixed-fleet tests (tests/multinode/harness.py drives build/fusebed).
# ---------------------------------------------------------------------------

import subprocess  # noqa: E402

_REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_REPO / "tests" / "multinode"))

import harness  # noqa: E402


def _try_make(target_path: Path, cmd: list[str]) -> str:
    """Build target_path with cmd if missing; '' on success, else why not."""
    if target_path.exists():
        return ""
    try:
        r = subprocess.run(cmd, cwd=_REPO, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{' '.join(cmd)} failed: {e}"
    if r.returncode != 0 or not target_path.exists():
        return f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()[-300:]}"
    return ""


@pytest.fixture(scope="session")
def failpoints_lib() -> Path:
    why = _try_make(harness.FAILPOINTS_LIB, ["./build.sh", "failpoints"])
    if why:
        pytest.skip(f"the failpoints build is unavailable: {why}")
    return harness.FAILPOINTS_LIB


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    """A FUSE bed: one backing directory, two mounts (two simulated nodes)."""
    why = harness.bed_unavailable_reason()
    if why and str(harness.FUSEBED) in why:  # only the binary is missing: build it
        build_why = _try_make(harness.FUSEBED, ["make", "-s", "fusebed"])
        why = harness.bed_unavailable_reason() if not build_why else f"{why}; {build_why}"
    if why:
        pytest.skip(f"FUSE test bed unavailable: {why}")
    root = tmp_path_factory.mktemp("bed")
    b = harness.FuseBed(root / "backing", [root / "m0", root / "m1"], log=root / "fusebed.log")
    try:
        b.start()
    except harness.BedUnavailable as e:
        pytest.skip(f"FUSE test bed unavailable: {e}")
    try:
        yield b
    finally:
        b.stop()
        assert not any(os.path.ismount(m) for m in b.mounts), "the bed left a mount behind"
