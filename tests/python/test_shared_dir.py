"""Another user of the node plants names in the database's own directory.

The directory of a database is often mode 1777 (the original made it so,
and users keep it so to share the database), and fs.protected_symlinks and
fs.protected_fifos may be 0: anyone can create any name there that does
not exist yet. Three attacks, each run for real by uid 65534
against root's stores (setpriv), each with a negative control on the
failpoints build that switches the guard off and shows that the test
catches the old behaviour:

1. A FIFO at a name the library opens blocked every store in open(2),
   past lock_timeout and Ctrl-C. Now: every store returns or raises
   within lock_timeout (+ 3 s of slack), naming the file and its owner;
   Ctrl-C works while it waits. The names are the documented ones
   (docs/lock-protocol.md, "The database directory"), and a test checks
   with strace that the library opens no other name there
   (shareddir-trust: the store hangs).
2. A symbolic link made root create a 0666 file where the planter chose.
   Now another user's link is never followed (PermissionError naming it);
   the caller's own links and root's still are (link-trust: the file is
   created through the link).
3. A planted journal, built from a modified copy, was rolled back into a
   0644 database it could not write. Now a journal is rolled back only if
   the journal rule trusts it: else a sqlite3.DatabaseError naming it and
   its owner, `tirastore check` reports it foreign and `check --repair`
   moves it aside; a mixed fleet of users sharing a 0666 database still
   rolls back each other's crashed writers (journal-trust: the planted
   journal rewrites the record).

Every scenario ends by checking that every acknowledged record is there
and that PRAGMA integrity_check says ok.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Optional

import pytest

from conftest import TEST_CPU, TEST_SLURM, blocked_opening_a_fifo, sqlite_only

REPO = Path(__file__).resolve().parents[2]
DB_NAME = "persistent-cache.tirastore.db"  # a PersistentCache's database in its directory
ATTACKER = 65534  # nobody: the other user of the node
THIRD = 65533  # a third user of a shared database

pytestmark = [
    sqlite_only,
    pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0 or shutil.which("setpriv") is None,
                       reason="needs Linux, root and setpriv (to act as other users)"),
]

SCHED = "S(L0,L1,{i},8,comps=['c1'])"
SOURCE = "void f(){}"


@pytest.fixture
def shared(tmp_path):
    """A directory like a project's on Lustre: 1777, reachable by every
    user (pytest's own tmp_path is root-only), with a root-only directory
    beside it (0700) that holds what the attacker must never reach."""
    base = Path(tempfile.mkdtemp(prefix="tirastore-shared-", dir="/tmp"))
    os.chmod(base, 0o711)
    d = base / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    private = base / "root-only"
    private.mkdir(mode=0o700)
    try:
        yield d, private
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_user(uid: int, code: str, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run Python code as uid (and gid) uid, with no supplementary groups."""
    cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-c", code, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if check:
        assert r.returncode == 0, f"as uid {uid}: {r.stdout}\n{r.stderr}"
    return r


def plant(what: str, path: Path, target: str = "") -> None:
    """The attacker (uid 65534) creates path: a FIFO, a symlink to target,
    or a directory."""
    code = {
        "fifo": "import os, sys; os.mkfifo(sys.argv[1], 0o644)",
        "symlink": "import os, sys; os.symlink(sys.argv[2], sys.argv[1])",
    }[what]
    as_user(ATTACKER, code, str(path), target)


def child_env(lib: Path | None = None, failpoints: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIRASTORE_")}
    env["PYTHONPATH"] = str(REPO / "python")
    if lib is not None:
        env["TIRASTORE_LIB"] = str(lib)
        env["TIRASTORE_FAILPOINTS"] = failpoints
    return env


def make_db(db: Path, n: int = 5) -> list[str]:
    """Root's database with n acknowledged records; returns their schedules."""
    code = textwrap.dedent("""
        import sys, tirastore
        s = tirastore.TiraStore(sys.argv[1], cpu_model=sys.argv[2], slurm_cpus=sys.argv[3])
        for i in range(int(sys.argv[4])):
            assert s.record("prog", %r, %r.format(i=i), True, [float(i)])
        s.close()
    """) % (SOURCE, SCHED)
    r = subprocess.run([sys.executable, "-c", code, str(db), TEST_CPU, TEST_SLURM, str(n)],
                       capture_output=True, text=True, env=child_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    return [SCHED.format(i=i) for i in range(n)]


def raw_records(db: Path) -> dict[str, str]:
    """schedule -> result_json, read with Python's own sqlite3 (no rollback
    of anything: read-only, immutable view of the file as it is)."""
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return dict(con.execute("SELECT schedule, result_json FROM records"))
    finally:
        con.close()


# ---------------------------------------------------------------------------
# 1. FIFOs: no store ever blocks in open(2)
# ---------------------------------------------------------------------------

LOCK_TIMEOUT = 2.0

# One operation in a fresh process, timed from inside; prints a JSON line.
OP = textwrap.dedent("""
    import json, subprocess, sys, time
    op, db, lt, cpu, slurm, sched = sys.argv[1:7]
    lt = float(lt)
    out = {"op": op, "error": None}
    t0 = time.monotonic()
    try:
        if op in ("lock status", "check"):
            r = subprocess.run([sys.executable, "-m", "tirastore", *op.split(), "--lock-timeout", str(lt), db],
                               capture_output=True, text=True)
            out["rc"] = r.returncode
            out["text"] = r.stdout + r.stderr
            if r.returncode not in (0, 1):
                out["error"] = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "rc %d" % r.returncode
        else:
            import tirastore
            t0 = time.monotonic()  # from the store's open: the import is not what is timed
            s = tirastore.TiraStore(db, lock_timeout=lt, cpu_model=cpu, slurm_cpus=slurm)
            if op == "lookup":
                out["found"] = s.lookup("prog", "void f(){}", sched) is not None
            elif op == "record":
                out["acked"] = s.record("prog", "void f(){}", sched, True, [42.0])
            s.close()
    except BaseException as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    out["elapsed"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
""")

OPS = ["lookup", "record", "lock status", "check"]


def run_hung_or_done(cmd: list, env: dict) -> Optional[tuple[str, str]]:
    """Run cmd in a session of its own; its (stdout, stderr), or None when
    it hung (the failure these tests exist for): a process of the session
    blocked in open(2) of a FIFO, or still running at lock_timeout + 10 s.
    A hung session is killed, with the command it started (a hung
    `tirastore check` would otherwise stay blocked in open(2) for good)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    end = time.monotonic() + LOCK_TIMEOUT + 10
    while p.poll() is None and time.monotonic() < end and not blocked_opening_a_fifo(p.pid, group=True):
        time.sleep(0.02)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None
    return p.communicate()


def run_op(op: str, db: Path, env: dict, sched: str) -> dict:
    """One operation in a fresh process (see run_hung_or_done)."""
    done = run_hung_or_done([sys.executable, "-c", OP, op, str(db), str(LOCK_TIMEOUT), TEST_CPU, TEST_SLURM, sched],
                            env)
    if done is None:
        return {"op": op, "hung": True}
    out, err = done
    assert out.strip(), f"{op}: no output\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def planted_names(db: Path) -> dict[str, str]:
    """Every name the library opens in the database's directory, as in
    docs/lock-protocol.md ("The database directory"), by what it is. The
    ticket files and moved-aside locks have random parts: a name of each
    pattern is planted, of a dead pid of this host, which the sweep looks
    at."""
    host = os.uname().nodename
    lock = db.with_suffix(".db.lock").name
    return {
        "database": db.name,
        "journal": db.name + "-journal",
        "lock": lock,
        "break lock": lock + ".break",
        "wal": db.name + "-wal",
        "shm": db.name + "-shm",
        "ticket": f".lock_{host}_999999_fifofifo",
        "aside": f"{lock}.stale.{host}.999999.fifofifo",
        "break aside": f"{lock}.break.stale.{host}.999999.fifofifo",
    }


def fifo_scenario(shared_dir: Path, what: str, env: dict, link: bool = False) -> tuple[list[dict], dict, Path]:
    """Plant a FIFO at the name of what (or, with link, a symlink to a FIFO
    of the attacker's there), run every operation, and return the results,
    the acknowledged records and the database."""
    d = shared_dir / what.replace(" ", "-")
    d.mkdir()
    os.chmod(d, 0o1777)
    db = d / "c.db"
    acked = {} if what == "database" else {s: None for s in make_db(db)}
    name = planted_names(db)[what]
    if what == "break lock":
        # A lock to break: a Python worker's record an hour old, stale at
        # once (no heartbeat), so the stores try the break lock.
        lock = db.with_suffix(".db.lock")
        lock.write_text(json.dumps({"hostname": "gone", "pid": 999999, "timestamp": time.time() - 3600}))
        acked = {s: None for s in raw_records(db)}
    if link:
        theirs = shared_dir / f"their-fifo-{what.replace(' ', '-')}"
        plant("fifo", theirs)
        plant("symlink", d / name, str(theirs))
    else:
        plant("fifo", d / name)
    results = []
    for op in OPS:
        sched = SCHED.format(i=1) if op == "lookup" else SCHED.format(i=100 + OPS.index(op))
        res = run_op(op, db, env, sched)
        results.append(res)
        if res.get("acked"):
            acked[sched] = None
    return results, acked, db


def violations(results: list[dict], planted: str) -> list[str]:
    """What is wrong with the operations' outcomes: a hang, a return later
    than lock_timeout + 3 s (the slack a machine running two test suites on
    2 cores needs; `lock status` and `check` start a Python each), or an
    error that names neither the planted file nor its owner."""
    bad = []
    for r in results:
        if r.get("hung"):
            bad.append(f"{r['op']}: hung (killed after lock_timeout + 10 s)")
            continue
        if r["elapsed"] > LOCK_TIMEOUT + 3:
            bad.append(f"{r['op']}: took {r['elapsed']:.1f}s > lock_timeout + 3 s")
        text = r.get("error") or ""
        if r["op"] in ("lock status", "check") and r.get("rc") == 1:
            text = r["text"]  # problems found: the report must name the culprit
        if text and "fifofifo" not in planted and planted in text and "uid 65534" not in text:
            bad.append(f"{r['op']}: the error names {planted} but not its owner: {text}")
    return bad


FIFO_NAMES = sorted(planted_names(Path("/x/c.db")))


@pytest.mark.parametrize("what", FIFO_NAMES)
def test_a_fifo_at_any_name_blocks_no_store(shared, what):
    shared_dir, _ = shared
    results, acked, db = fifo_scenario(shared_dir, what, child_env())
    planted = planted_names(db)[what]
    assert violations(results, planted) == [], results
    errors = [r for r in results if r.get("error")]
    if what in ("journal", "lock", "database"):
        # These names are in the way: the stores say so, naming the file
        # and its owner (the FIFO is "uid 65534 (nobody)").
        assert errors, results
        for r in errors:
            assert planted in r["error"] and "uid 65534" in r["error"], r
    elif what == "break lock":
        # A stale lock whose break lock is a FIFO: the breakers judge the
        # FIFO by its inode alone (it is never opened) and time out
        # meanwhile, saying what keeps the lock.
        assert errors, results
        for r in errors:
            assert r["error"].startswith("TimeoutError") and planted in r["error"] and "uid 65534" in r["error"], r
    else:
        # The others are ignored: every operation works.
        assert errors == [], results
        assert next(r for r in results if r["op"] == "lookup")["found"] is True, results
    # Nothing acknowledged is lost; integrity ok (once the FIFO is gone).
    (db.parent / planted).unlink()
    if acked:
        assert set(acked) <= set(raw_records(db)), (sorted(acked), results)


def test_a_symlink_to_a_fifo_as_the_lock_blocks_no_store(shared):
    shared_dir, _ = shared
    results, acked, db = fifo_scenario(shared_dir, "lock", child_env(), link=True)
    assert violations(results, db.with_suffix(".db.lock").name) == [], results
    for r in results:
        if r.get("error"):
            assert "symbolic link" in r["error"] and "uid 65534" in r["error"], r
    (db.with_suffix(".db.lock")).unlink()
    assert set(acked) <= set(raw_records(db))


@pytest.mark.parametrize("what", ["journal", "lock"])
def test_negative_control_fifo_blocks_the_unguarded_store(shared, what, failpoints_lib):
    """shareddir-trust switches off O_NONBLOCK and the fstat checks (Go and
    the VFS): the lookup blocks in open(2) and the test sees it."""
    shared_dir, _ = shared
    results, _, db = fifo_scenario(shared_dir, what, child_env(failpoints_lib, "shareddir-trust=on"))
    bad = violations(results, planted_names(db)[what])
    assert any("lookup: hung" in b for b in bad), results
    (db.parent / planted_names(db)[what]).unlink()


SEED = textwrap.dedent("""
    import json, sys, time, warnings
    out = {"error": None}
    t0 = time.monotonic()
    try:
        import tirastore
        c = tirastore.PersistentCache("op", path=sys.argv[1], lock_timeout=float(sys.argv[2]))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out["acked"] = c.put("cpu", "op@1", "k", {"b": 1})  # the first use skips the seed
        out["warnings"] = [str(w.message) for w in seen]
        c.import_json()  # asked for: opened, and refused
        c.close()
    except Exception as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    out["elapsed"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
""")


def seed_fifo_scenario(shared_dir: Path, env: dict) -> dict:
    """A FIFO at the seed JSON of a PersistentCache, beside its database:
    the first use skips it (not a regular file), import_json() opens it."""
    plant("fifo", shared_dir / "t.json")
    done = run_hung_or_done([sys.executable, "-c", SEED, str(shared_dir / "t.json"), str(LOCK_TIMEOUT)], env)
    if done is None:
        return {"op": "PersistentCache", "hung": True}
    return {"op": "PersistentCache", **json.loads(done[0].strip().splitlines()[-1])}


def test_a_fifo_at_a_persistent_cache_seed_blocks_nothing(shared):
    res = seed_fifo_scenario(shared[0], child_env())
    assert violations([res], "t.json") == [], res
    assert res["acked"] is True and any("t.json is not a regular file" in w for w in res["warnings"]), res
    assert res["error"].startswith("OSError") and "t.json" in res["error"] and "uid 65534" in res["error"], res


def test_negative_control_fifo_at_the_seed_blocks_the_unguarded_cache(shared, failpoints_lib):
    res = seed_fifo_scenario(shared[0], child_env(failpoints_lib, "shareddir-trust=on"))
    assert res.get("hung"), res


def test_the_library_opens_no_other_name_in_the_directory(shared):
    """The planted names are every name the library opens there: a store's
    whole life (create, record, record_many, lookups, claims, lock status,
    check, close) and a PersistentCache with its seed JSON beside its
    database, under strace, list them."""
    if shutil.which("strace") is None:
        pytest.skip("strace not found (Debian package strace)")
    shared_dir, _ = shared
    db = shared_dir / "c.db"
    log = shared_dir.parent / "strace.log"
    code = textwrap.dedent("""
        import subprocess, sys, tirastore
        db = sys.argv[1]
        s = tirastore.TiraStore(db, cpu_model=sys.argv[2], slurm_cpus=sys.argv[3])
        s.record("prog", "void f(){}", "U(L0,4,comps=['c'])", True, [1.0])
        s.record_many("prog", "void f(){}", [{"tiralib_schedule_string": "U(L0,%d,comps=['c'])" % i,
                                               "is_legal": True, "execution_times": [1.0]} for i in range(5, 9)])
        s.lookup("prog", "void f(){}", "U(L0,4,comps=['c'])")
        c = s.lookup_or_claim("prog", "void f(){}", "U(L0,2,comps=['c'])")
        c.record(True, [2.0])
        s.close()
        cache = tirastore.PersistentCache("op", path=sys.argv[4])
        cache.put("cpu", "op@1", "k2", {"b": 2})
        cache.get("cpu", "op@1", "k")
        cache.close()
        for cmd in (["lock", "status"], ["check"]):
            subprocess.run([sys.executable, "-m", "tirastore", *cmd, db], check=True, capture_output=True)
    """)
    seed = shared_dir / "t.json"
    seed.write_text(json.dumps({"cpu|op@1|k": {"b": 1}}))
    r = subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=open,openat,creat", "-o", str(log),
                        sys.executable, "-c", code, str(db), TEST_CPU, TEST_SLURM, str(seed)],
                       capture_output=True, text=True, env=child_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    opened = set()
    d = str(shared_dir)
    for line in log.read_text().splitlines():
        m = re.search(r'open(?:at)?\((?:AT_FDCWD|-?\d+)(?:<([^>]*)>)?, "([^"]*)"', line)
        if not m:
            continue
        base, name = m.group(1), m.group(2)
        path = name if name.startswith("/") else os.path.join(base or os.getcwd(), name)
        if os.path.dirname(os.path.normpath(path)) == d:
            opened.add(os.path.basename(path))
    host = os.uname().nodename
    known = set(planted_names(db).values()) | set(planted_names(shared_dir / DB_NAME).values()) | {"t.json"}
    patterns = [re.compile(rf"\.lock_{re.escape(host)}_\d+_\w+"), re.compile(r"c_\d{8}T\d{6}Z\.db"),
                re.compile(r"\..*\.tmp.*"), re.compile(r".*\.tmp-\w+")]
    unknown = sorted(n for n in opened if n not in known and not any(p.fullmatch(n) for p in patterns))
    assert {"c.db", "c.db-journal", "c.db.lock", "t.json", DB_NAME} <= opened, sorted(opened)
    assert unknown == [], f"the library opens names the FIFO test does not plant: {unknown}"


CTRL_C = textwrap.dedent("""
    import sys, tirastore
    print("opening", flush=True)
    try:
        tirastore.TiraStore(sys.argv[1], lock_timeout=60, cpu_model=sys.argv[2], slurm_cpus=sys.argv[3])
        print("opened")
    except KeyboardInterrupt:
        print("interrupted", flush=True)
""")


def ctrl_c_scenario(shared_dir: Path, env: dict) -> tuple[str, float]:
    d = shared_dir / "ctrl-c"
    d.mkdir()
    os.chmod(d, 0o1777)
    db = d / "c.db"
    make_db(db)
    plant("fifo", db.with_suffix(".db.lock"))
    p = subprocess.Popen([sys.executable, "-c", CTRL_C, str(db), TEST_CPU, TEST_SLURM],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "opening"
        time.sleep(1.5)  # waiting for the lock by now
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        # Hung: not interrupted within 10 s, or still blocked in open(2)
        # of the FIFO 2 s after SIGINT (the bound the guarded store meets).
        while p.poll() is None and time.monotonic() - t0 < 10:
            if time.monotonic() - t0 > 2 and blocked_opening_a_fifo(p.pid):
                break
            time.sleep(0.02)
        if p.poll() is None:
            return "hung", time.monotonic() - t0
        out, _ = p.communicate()
        return out.strip(), time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_ctrl_c_works_while_a_fifo_holds_the_lock_name(shared):
    out, after = ctrl_c_scenario(shared[0], child_env())
    assert out == "interrupted", out
    assert after < 2, f"KeyboardInterrupt came {after:.1f}s after SIGINT"


def test_negative_control_ctrl_c_cannot_interrupt_a_blocking_open(shared, failpoints_lib):
    out, _ = ctrl_c_scenario(shared[0], child_env(failpoints_lib, "shareddir-trust=on"))
    assert out == "hung", out


# ---------------------------------------------------------------------------
# 2. Symbolic links: only the caller's and root's are followed
# ---------------------------------------------------------------------------

OPEN = textwrap.dedent("""
    import json, sys
    out = {"error": None}
    try:
        import tirastore
        kind = sys.argv[2]
        if kind == "store":
            s = tirastore.TiraStore(sys.argv[1], cpu_model=sys.argv[3], slurm_cpus=sys.argv[4])
            out["acked"] = s.record("prog", "void f(){}", "U(L0,4,comps=['c'])", True, [1.0])
            out["db_path"] = str(s.db_path)
            s.close()
        elif kind == "cache":
            c = tirastore.PersistentCache("op", path=sys.argv[1])
            out["acked"] = c.put("cpu", "op@1", "k", {"b": 1})
            c.close()
        elif kind == "export":
            s = tirastore.TiraStore(sys.argv[5], cpu_model=sys.argv[3], slurm_cpus=sys.argv[4])
            s.export(sys.argv[1])
            s.close()
    except Exception as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(out))
""")


def open_through(path: Path, kind: str = "store", env: dict | None = None, uid: int = 0, other: str = "") -> dict:
    args = [str(path), kind, TEST_CPU, TEST_SLURM, other]
    if uid:
        r = as_user(uid, OPEN, *args, env=env or child_env())
    else:
        r = subprocess.run([sys.executable, "-c", OPEN, *args], capture_output=True, text=True,
                           env=env or child_env(), timeout=60)
        assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def snapshot(d: Path) -> dict:
    return {p.name: (p.lstat().st_mode, p.lstat().st_uid, p.lstat().st_size) for p in d.iterdir()}


@pytest.mark.parametrize("kind", ["store", "cache", "component", "existing-empty", "export"])
def test_another_users_link_is_never_followed(shared, kind):
    """The attacker's link in the shared directory points into root's
    private directory; root's call through it is a PermissionError naming
    the link and its owner, and nothing in the private directory is
    created or changed."""
    shared_dir, private = shared
    target = private / "a.db"
    if kind == "existing-empty":
        target.touch(mode=0o600)
    before = snapshot(private)
    if kind == "store" or kind == "existing-empty":
        plant("symlink", shared_dir / "new.db", str(target))
        res = open_through(shared_dir / "new.db")
        link = shared_dir / "new.db"
    elif kind == "cache":
        # PersistentCache's database beside its .json: persistent-cache.tirastore.db.
        plant("symlink", shared_dir / DB_NAME, str(target))
        res = open_through(shared_dir / "t.json", "cache")
        link = shared_dir / DB_NAME
    elif kind == "component":
        plant("symlink", shared_dir / "sub", str(private))
        res = open_through(shared_dir / "sub" / "a.db")
        link = shared_dir / "sub"
    else:  # an export path
        plant("symlink", shared_dir / "out.json", str(private / "out.json"))
        res = open_through(shared_dir / "out.json", "export", other=str(shared_dir / "mine.db"))
        link = shared_dir / "out.json"
    assert res["error"] is not None and res["error"].startswith("PermissionError"), res
    assert str(link) in res["error"] and "uid 65534" in res["error"], res
    assert snapshot(private) == before, "the call created or changed a file through the planted link"


def test_negative_control_link_trust_creates_through_the_link(shared, failpoints_lib):
    shared_dir, private = shared
    plant("symlink", shared_dir / "new.db", str(private / "a.db"))
    res = open_through(shared_dir / "new.db", env=child_env(failpoints_lib, "link-trust=on"))
    assert res["error"] is None, res
    assert (private / "a.db").exists() and (private / "a.db").stat().st_mode & 0o777 == 0o666


def test_own_and_roots_links_are_followed(shared):
    """A user's own link to their own database elsewhere, and root's links
    used by anyone, keep working."""
    shared_dir, private = shared
    # Root's own link, used by root.
    (shared_dir / "mine.db").symlink_to(private / "real.db")
    res = open_through(shared_dir / "mine.db")
    assert res["error"] is None and res["acked"] is True, res
    assert res["db_path"] == str(private / "real.db")
    # The attacker's own link to the attacker's own database, used by them.
    theirs = shared_dir / "theirs"
    as_user(ATTACKER, "import os, sys; os.mkdir(sys.argv[1], 0o700); os.symlink(sys.argv[1] + '/real.db', sys.argv[2])",
            str(theirs), str(shared_dir / "their-link.db"))
    res = open_through(shared_dir / "their-link.db", uid=ATTACKER)
    assert res["error"] is None and res["acked"] is True, res
    assert (theirs / "real.db").stat().st_uid == ATTACKER
    # Root's link in the shared directory, used by the attacker.
    root_dir = shared_dir / "root-shared"
    root_dir.mkdir()
    os.chmod(root_dir, 0o1777)
    (shared_dir / "root-link.db").symlink_to(root_dir / "shared.db")
    res = open_through(shared_dir / "root-link.db", uid=ATTACKER)
    assert res["error"] is None and res["acked"] is True, res


# ---------------------------------------------------------------------------
# 3. Journals: one planted by another user is never rolled back
# ---------------------------------------------------------------------------

# The attacker's tool: from root's readable database, a modified copy (one
# record's times changed), and a rollback journal whose page images are
# the modified pages, in SQLite's journal format
# (https://www.sqlite.org/fileformat.html#the_rollback_journal). SQLite
# rolls a hot journal back by writing its page images into the database.
FORGE = textwrap.dedent(r"""
    import os, shutil, sqlite3, struct, sys
    db, sched, out = sys.argv[1], sys.argv[2], sys.argv[3]
    work = os.path.join(os.path.dirname(out), ".forge-%d" % os.getpid())
    os.mkdir(work)
    copy = os.path.join(work, "copy.db")
    shutil.copyfile(db, copy)
    con = sqlite3.connect(copy)
    n = con.execute("UPDATE records SET result_json = ? WHERE schedule = ?",
                    ('{"is_legal":true,"execution_times":[666.0]}', sched)).rowcount
    con.commit()
    con.close()
    assert n == 1
    orig, mod = open(db, "rb").read(), open(copy, "rb").read()
    page = struct.unpack(">H", orig[16:18])[0] or 65536
    assert len(orig) == len(mod)
    nonce, sector = 0x5eed1e55, 512
    recs = b""
    nrec = 0
    for pgno in range(1, len(mod) // page + 1):
        data = mod[(pgno - 1) * page:pgno * page]
        if data == orig[(pgno - 1) * page:pgno * page]:
            continue
        ck = nonce
        i = page - 200
        while i > 0:
            ck += data[i]
            i -= 200
        recs += struct.pack(">I", pgno) + data + struct.pack(">I", ck & 0xffffffff)
        nrec += 1
    hdr = bytes.fromhex("d9d505f920a163d7") + struct.pack(">IIIII", nrec, nonce, len(mod) // page, sector, page)
    hdr += b"\0" * (sector - len(hdr))
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, hdr + recs)
    os.close(fd)
    shutil.rmtree(work)
""")


def journal_scenario(shared_dir: Path, env: dict) -> tuple[Path, list[str], dict]:
    """Root's 0644 database, a journal forged and planted by the attacker;
    returns the database, its schedules and root's lookup of the record
    the journal rewrites."""
    d = shared_dir / "journal"
    d.mkdir()
    os.chmod(d, 0o1777)
    db = d / "c.db"
    scheds = make_db(db)
    os.chmod(db, 0o644)  # the attacker can read it, not write it
    as_user(ATTACKER, FORGE, str(db), scheds[2], str(d / "c.db-journal"))
    code = textwrap.dedent("""
        import json, sys, tirastore
        out = {"error": None}
        try:
            s = tirastore.TiraStore(sys.argv[1], cpu_model=sys.argv[2], slurm_cpus=sys.argv[3], lock_timeout=5)
            r = s.lookup("prog", "void f(){}", sys.argv[4])
            out["times"] = r.execution_times
            s.close()
        except Exception as e:
            out["error"] = "%s: %s" % (type(e).__name__, e)
        print(json.dumps(out))
    """)
    r = subprocess.run([sys.executable, "-c", code, str(db), TEST_CPU, TEST_SLURM, scheds[2]],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return db, scheds, json.loads(r.stdout.strip().splitlines()[-1])


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tirastore", *args], capture_output=True, text=True,
                          env=child_env(), timeout=60)


def test_a_planted_journal_is_never_rolled_back(shared):
    db, scheds, res = journal_scenario(shared[0], child_env())
    before, records_before = db.read_bytes(), raw_records(db)
    assert res["error"] is not None and res["error"].startswith("DatabaseError"), res
    assert "c.db-journal" in res["error"] and "uid 65534" in res["error"], res
    assert db.read_bytes() == before, "the refused journal changed the database"
    # check names it, with the two choices: it may be a crashed writer's
    # as well as a forgery. --repair neither applies it nor moves it.
    r = cli("check", "--json", str(db))
    rep = json.loads(r.stdout)
    assert rep["ok"] is False and rep["hot_journal"] is False, rep
    assert rep["foreign_journal"]["owner_uid"] == ATTACKER, rep
    assert any("--discard-journal" in p for p in rep["problems"]), rep
    r = cli("check", "--repair", "--json", str(db))
    rep = json.loads(r.stdout)
    assert not rep["foreign_journal"]["moved_to"] and (db.parent / "c.db-journal").exists(), rep
    assert db.read_bytes() == before
    # --discard-journal moves it aside, never applies it.
    r = cli("check", "--discard-journal", "--json", str(db))
    rep = json.loads(r.stdout)
    moved = rep["foreign_journal"]["moved_to"]
    assert moved and Path(moved).exists() and not (db.parent / "c.db-journal").exists(), rep
    assert rep["tables"]["integrity"] == ["ok"], rep
    # Every record as root wrote it (the file itself changed: check leaves
    # its summary in db_meta once the journal is out of the way).
    records = raw_records(db)
    assert records == records_before, "check --discard-journal applied the journal"
    assert set(scheds) <= set(records) and "666.0" not in records[scheds[2]], records


def test_negative_control_journal_trust_lets_the_journal_rewrite_a_record(shared, failpoints_lib):
    _, _, res = journal_scenario(shared[0], child_env(failpoints_lib, "journal-trust=on"))
    assert res["error"] is None and res["times"] == [666.0], res


CRASH = textwrap.dedent("""
    import os, sys, tirastore
    s = tirastore.TiraStore(sys.argv[1], cpu_model=sys.argv[2], slurm_cpus=sys.argv[3])
    tag = os.getuid()
    assert s.record("prog", "void f(){}", "S(L0,L1,1,%d,comps=['c1'])" % tag, True, [1.0])
    print("acked", flush=True)
    os.environ["TIRASTORE_FAILPOINTS"] = "db-write=stop"
    s.record_many("prog", "void f(){}", [{"tiralib_schedule_string": "S(L0,L1,%d,%d,comps=['c1'])" % (100 + j, tag),
                                          "is_legal": True, "execution_times": [float(k) for k in range(50)]}
                                         for j in range(500)])
    print("survived", flush=True)
""")


@pytest.mark.parametrize("dirmode,next_uid", [(0o1777, 0), (0o777, THIRD)])
def test_a_crashed_writer_of_another_user_is_rolled_back_on_a_shared_database(shared, failpoints_lib, dirmode, next_uid):
    """The original's databases are 0666: a fleet of users shares one. The
    journal of a writer of uid 65534 killed in the middle of its commit
    (SIGSTOP at its first database write, the journal synced; then SIGKILL)
    is rolled back by the next user: root in a sticky directory, uid 65533
    in a plain 0777 one (in a sticky one only the writer or root could
    remove the dead writer's lock and journal)."""
    shared_dir, _ = shared
    d = shared_dir / "fleet"
    d.mkdir()
    os.chmod(d, dirmode)
    db = d / "c.db"
    make_db(db)
    assert db.stat().st_mode & 0o777 == 0o666
    p = subprocess.Popen(["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups",
                          sys.executable, "-c", CRASH, str(db), TEST_CPU, TEST_SLURM],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=child_env(failpoints_lib, ""))
    try:
        assert p.stdout.readline().strip() == "acked"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(f"/proc/{p.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.05)
        else:
            pytest.fail("the writer never reached its first database write")
    finally:
        p.kill()
        p.wait()
    journal = d / "c.db-journal"
    assert journal.exists() and journal.stat().st_uid == ATTACKER and journal.stat().st_size > 0
    res = open_through(db, uid=next_uid) if next_uid else open_through(db)
    assert res["error"] is None and res["acked"] is True, res
    assert not journal.exists()
    records = raw_records(db)
    assert f"S(L0,L1,1,{ATTACKER},comps=['c1'])" in records  # acknowledged before the crash
    assert not any(s.startswith("S(L0,L1,100,") for s in records)  # the crashed transaction, rolled back


# ---------------------------------------------------------------------------
# 5. A chmod of the database, then a crash in the middle of a commit
# ---------------------------------------------------------------------------

# A worker that opened a 0666 database: one acknowledged record, then (once
# the owner has tightened the database) a commit stopped at its third
# database write by the failpoint (the test then kills it): the database
# holds two pages of an uncommitted transaction, the journal all it needs.
CHMOD_CRASH = textwrap.dedent("""
    import os, sys, tirastore
    s = tirastore.TiraStore(sys.argv[1], cpu_model=sys.argv[2], slurm_cpus=sys.argv[3])
    assert s.record("prog", "void f(){}", "S(L0,L1,1,%d,comps=['c1'])" % os.getuid(), True, [1.0])
    print("acked", flush=True)
    assert sys.stdin.readline().strip() == "go"
    # Small enough for SQLite's page cache: a larger transaction spills
    # its new pages to the file first, and its third write would change
    # no page the database had.
    os.environ["TIRASTORE_FAILPOINTS"] = os.environ.get("TIRASTORE_FAILPOINTS", "") + ";db-write=stop@3"
    s.record_many("prog", "void f(){}", [{"tiralib_schedule_string": "S(L0,L1,%d,9,comps=['c1'])" % (100 + j),
                                          "is_legal": True, "execution_times": [float(k) for k in range(50)]}
                                         for j in range(1000)])
    print("survived", flush=True)
""")


def chmod_crash(d: Path, uid: int, env: dict) -> tuple[Path, dict[str, str]]:
    """Root's 0666 database in d, a worker of uid written into it, the
    database chmod'ed 0644, the worker killed in the middle of its next
    commit. Returns the database and the records committed (read before
    the crash)."""
    os.chmod(d, 0o1777)
    db = d / "c.db"
    make_db(db)
    assert db.stat().st_mode & 0o777 == 0o666
    cmd = [sys.executable, "-c", CHMOD_CRASH, str(db), TEST_CPU, TEST_SLURM]
    if uid:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    try:
        assert p.stdout.readline().strip() == "acked", p.stderr.read()
        committed = raw_records(db)
        os.chmod(db, 0o644)
        p.stdin.write("go\n")
        p.stdin.flush()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            with open(f"/proc/{p.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.02)
        else:
            pytest.fail(f"the worker never reached its third database write: {p.stderr.read()}")
    finally:
        p.kill()
        p.wait()
        p.stdin.close()
        p.stdout.close()
        p.stderr.close()
    journal = d / "c.db-journal"
    assert journal.stat().st_size > 0 and journal.stat().st_uid == uid
    return db, committed


def integrity(db: Path) -> str:
    """PRAGMA integrity_check of the file as it is (no journal applied)."""
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        return "; ".join(r[0] for r in con.execute("PRAGMA integrity_check"))
    except sqlite3.DatabaseError as e:
        return str(e)
    finally:
        con.close()


def test_a_writer_killed_after_a_chmod_is_rolled_back(shared, failpoints_lib):
    """The database's owner tightens it (0666 to 0644) while a worker of
    theirs has it open; the worker is killed in the middle of a commit. Its
    journal has the database's new mode, so the next open rolls it back:
    integrity ok, exactly the committed records."""
    d = shared[0] / "chmod"
    d.mkdir()
    db, committed = chmod_crash(d, 0, child_env(failpoints_lib, ""))
    assert (d / "c.db-journal").stat().st_mode & 0o777 == 0o644
    res = open_through(db)
    assert res["error"] is None and res["acked"] is True, res
    assert not (d / "c.db-journal").exists()
    records = raw_records(db)  # integrity ok
    del records["U(L0,4,comps=['c'])"]  # open_through's own record
    assert records == committed


def test_negative_control_a_journal_with_the_old_mode_is_refused(shared, failpoints_lib):
    """NEGATIVE CONTROL: a worker that keeps the mode it saw at its first
    journal (journal-mode-cached) leaves a 0666 journal beside a 0644
    database, which the next open refuses."""
    d = shared[0] / "chmod"
    d.mkdir()
    db, _ = chmod_crash(d, 0, child_env(failpoints_lib, "journal-mode-cached=on"))
    assert (d / "c.db-journal").stat().st_mode & 0o777 == 0o666
    res = open_through(db)
    assert res["error"] is not None and "--apply-journal" in res["error"], res


def copy_scenario(d: Path, to: Path) -> Path:
    """A copy of d's database and journal (modes and owners kept)."""
    to.mkdir()
    os.chmod(to, 0o1777)
    for name in ("c.db", "c.db-journal"):
        shutil.copy2(d / name, to / name)
        st = (d / name).stat()
        os.chown(to / name, st.st_uid, st.st_gid)
    return to / "c.db"


def test_check_applies_another_users_journal_only_when_told(shared, failpoints_lib):
    """The worker is another user's (the database was 0666): after the chmod
    its journal is refused (its owner is not the database's). The open
    names the two commands; `check --repair` leaves the journal where it is
    (the database is half-written without it), and `check --apply-journal`
    rolls it back: integrity ok, exactly the committed records. Moving it
    aside instead (`--discard-journal`, on a copy) leaves a corrupt
    database: the journal was needed, and nothing discards it unasked."""
    d = shared[0] / "chmod"
    d.mkdir()
    db, committed = chmod_crash(d, ATTACKER, child_env(failpoints_lib, ""))
    journal = d / "c.db-journal"
    copy = copy_scenario(d, shared[0] / "copy")
    before = db.read_bytes()
    res = open_through(db)
    assert res["error"] is not None and "--apply-journal" in res["error"] and "--discard-journal" in res["error"], res
    assert "uid 65534" in res["error"], res
    r = cli("check", "--repair", "--json", str(db))
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and rep["ok"] is False and rep["foreign_journal"]["moved_to"] in ("", None), rep
    assert any("--apply-journal" in p for p in rep["problems"]), rep
    assert journal.exists() and db.read_bytes() == before
    r = cli("check", "--apply-journal", "--json", str(db))
    rep = json.loads(r.stdout)
    assert rep["tables"]["integrity"] == ["ok"], rep
    assert not journal.exists() and Path(rep["foreign_journal"]["moved_to"]).exists(), rep
    assert raw_records(db) == committed
    # The same database with the journal discarded: corrupt.
    r = cli("check", "--discard-journal", "--json", str(copy))
    rep = json.loads(r.stdout)
    assert not (copy.parent / "c.db-journal").exists(), rep
    assert integrity(copy) != "ok"


def test_check_apply_journal_refuses_what_no_writer_left(shared):
    """--apply-journal never applies a journal that cannot be a crashed
    writer's: a journal planted by another user beside a database it cannot
    write is applied only if its owner vets it, and one that is a link
    to another file is refused outright."""
    db, scheds, _ = journal_scenario(shared[0], child_env())
    journal = db.parent / "c.db-journal"
    as_user(ATTACKER, "import os, sys; os.link(sys.argv[1], sys.argv[2])", str(journal), str(db.parent / "second"))
    before = db.read_bytes()
    r = cli("check", "--apply-journal", "--json", str(db))
    rep = json.loads(r.stdout)
    assert r.returncode == 1 and any("cannot be applied" in p for p in rep["problems"]), rep
    assert journal.exists() and db.read_bytes() == before
