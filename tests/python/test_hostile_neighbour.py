"""A hostile neighbour on the node: another user plants names in /dev/shm
before root's stores use a database.

/dev/shm is shared by every user of a node, and fs.protected_symlinks may
be 0. The engine keeps nothing there, nor anywhere outside the database's
directory: the lock, the database and its journal are all its files. This
test plants, as another user, what a hostile neighbour would plant for an
engine that did keep node-local files (as earlier versions did, in
/dev/shm/tirastore-<euid>, as gate-<h>, spool-<h> and changes-<h>, <h> being
the first 24 hex digits of the SHA-256 of the lock path), and proves that
none of it is used, changed or waited for.

Each scenario runs in a mount namespace of its own with a fresh tmpfs on
/dev/shm (unshare -m), so that it neither sees nor disturbs the stores of
other tests on this machine. The attacker runs as uid 65534 (setpriv), has
no access to the database's directory (root-only, 0700), and plants,
before root opens the store: (a) symlinks to root-owned canary files
(mode 0644, known content; one per name); (b) its own 0666 files and 0777
directories, with F_SETLK write locks held on the whole files by a live
process; (c) FIFOs; at the private directory's name itself (as its own
directory, a symlink to one, a FIFO) and at every name inside. Then one
root process records and looks up 50 records and four concurrent ones 20
each, with lock_timeout=10. Asserted: the canaries' content and mode, and
the mode, owner and content of every planted file, are unchanged; nothing
new appears under /dev/shm; every record is there; each store finishes in
under 10 s (well under 1 s here: a store that blocked on a planted lock or
FIFO would take lock_timeout or hang); and no store warns.

The negative control runs a store that, after its work, does what a store
trusting the planted names would do (writes through the gate's name,
creates a file under /dev/shm): the checks above catch both.
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

from conftest import TEST_CPU, TEST_SLURM

REPO = Path(__file__).resolve().parents[2]

ATTACKER_UID = 65534


def _namespace_unavailable() -> str:
    if sys.platform != "linux":
        return "Linux only"
    if os.geteuid() != 0:
        return "needs root (a mount namespace, and setpriv to another uid)"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o mode=1777 tmpfs /dev/shm"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot make a mount namespace with its own /dev/shm: {r.stderr.strip()}"
    return ""


_WHY = _namespace_unavailable()
pytestmark = pytest.mark.skipif(bool(_WHY), reason=_WHY)

CANARY = b"root's canary: this content and mode 0644 must never change\n" * 4

# The attacker, as uid 65534: plants, prints "ready", and holds its locks
# (and FIFOs open for nobody) until its stdin closes.
ATTACKER = textwrap.dedent(r"""
    import fcntl, json, os, sys
    a = json.loads(sys.argv[1])
    os.umask(0)
    held = []

    def plant(d):
        for kind, name in a["names"].items():
            q = os.path.join(d, name)
            if a["kind"] == "symlinks":
                os.symlink(a["canaries"][kind], q)
            elif a["kind"] == "locked":
                if kind == "spool":
                    os.mkdir(q, 0o777)
                else:
                    fd = os.open(q, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
                    os.write(fd, b"the attacker's own file\n" * 8)
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # F_SETLK, whole file
                    held.append(fd)
            elif a["kind"] == "fifos":
                os.mkfifo(q, 0o666)

    priv = a["priv"]
    if a["where"] == "dir":
        os.mkdir(priv, 0o777)
        plant(priv)
    elif a["where"] == "link":
        evil = "/dev/shm/evil"
        os.mkdir(evil, 0o777)
        plant(evil)
        os.symlink(evil, priv)
    elif a["where"] == "fifo":
        os.mkfifo(priv, 0o666)
    print("ready", flush=True)
    sys.stdin.read()
""")

# One root store: records and looks up its share, prints what happened.
CHILD = textwrap.dedent(r"""
    import json, sys, time, warnings
    a = json.loads(sys.argv[1])
    out = {"warnings": [], "found": 0, "error": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.monotonic()
        try:
            import tirastore
            s = tirastore.TiraStore(a["db"], lock_timeout=a["lock_timeout"], cpu_model=a["cpu"], slurm_cpus=a["slurm"])
            sched = lambda i: "S(L0,L1,%d,%d,comps=['c1'])" % (a["tag"], i)
            for i in range(a["n"]):
                s.record("prog", "void f(){}", sched(i), True, [float(i)])
            out["found"] = sum(s.lookup("prog", "void f(){}", sched(i)) is not None for i in range(a["n"]))
            s.close()
            if a["control"]:
                # What a store that trusted the planted names would do.
                with open(a["control"]["gate"], "ab") as f:
                    f.write(b"written through a planted name\n")
                open("/dev/shm/tirastore-control", "w").close()
        except Exception as e:
            out["error"] = "%s: %s" % (type(e).__name__, e)
        out["elapsed"] = time.monotonic() - t0
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    print(json.dumps(out), flush=True)
""")

# The scenario, as root in the namespace: plant (via the attacker), run the
# stores, look at what changed.
DRIVER = textwrap.dedent(r"""
    import hashlib, json, os, sqlite3, subprocess, sys, time
    from pathlib import Path
    a = json.loads(sys.argv[1])
    work = Path(a["work"])
    os.chmod(work, 0o700)  # root-only: the attacker cannot reach the database
    (work / "db").mkdir()
    os.chmod(work / "db", 0o1777)  # as the original makes it (no warning about lock ticket files)
    db = work / "db" / "cache.db"
    # Root's files that planted symlinks point at, one per name.
    canaries = {k: work / f"canary-{k}" for k in ("gate", "spool", "changes")}
    for c in canaries.values():
        c.write_bytes(a["canary_text"].encode())
        os.chmod(c, 0o644)
    lock = str(db.resolve().with_suffix(".db.lock"))
    h = hashlib.sha256(lock.encode()).hexdigest()[:24]
    priv = Path("/dev/shm") / f"tirastore-{os.geteuid()}"
    names = {k: f"{k}-{h}" for k in ("gate", "spool", "changes")}
    attacker = ["setpriv", "--reuid=%d" % a["uid"], "--regid=%d" % a["uid"], "--clear-groups",
                sys.executable, "-c", a["attacker"]]

    def snapshot():
        snap = {}
        for dirpath, dirnames, filenames in os.walk("/dev/shm"):
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                st = os.lstat(p)
                content = None
                if os.path.isfile(p) and not os.path.islink(p):
                    content = hashlib.sha256(open(p, "rb").read()).hexdigest()
                snap[p] = [st.st_mode, st.st_uid, st.st_ino, content]
        return snap

    holder = None
    if a["where"]:
        spec = {"kind": a["kind"], "where": a["where"], "priv": str(priv), "names": names,
                "canaries": {k: str(c) for k, c in canaries.items()}}
        holder = subprocess.Popen(attacker + [json.dumps(spec)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, cwd="/")
        assert holder.stdout.readline().strip() == "ready", "the attacker did not start"
    before = snapshot()

    def child(tag, n):
        control = {"gate": str(priv / names["gate"])} if a["control"] and tag == 0 else None
        spec = {"db": str(db), "tag": tag, "n": n, "lock_timeout": a["lock_timeout"], "cpu": a["cpu"], "slurm": a["slurm"],
                "control": control}
        return subprocess.Popen([sys.executable, "-c", a["child"], json.dumps(spec)], stdout=subprocess.PIPE, text=True)

    runs = []
    p = child(0, a["single"])
    runs.append(json.loads(p.communicate(timeout=300)[0]))
    ps = [child(i + 1, a["each"]) for i in range(a["procs"])]
    runs += [json.loads(p.communicate(timeout=300)[0]) for p in ps]
    after = snapshot()
    if holder:
        holder.stdin.close()
        holder.wait(timeout=30)
    count = None
    if db.exists():
        c = sqlite3.connect(str(db))
        count = c.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        c.close()
    print(json.dumps({
        "runs": runs, "count": count, "priv": str(priv), "names": names,
        "canaries_changed": sorted(k for k, c in canaries.items() if c.read_bytes() != a["canary_text"].encode()
                                   or (os.stat(c).st_mode & 0o7777) != 0o644),
        "changed": sorted(p for p in before if p in after and after[p] != before[p]),
        "vanished": sorted(p for p in before if p not in after),
        "new": sorted(p for p in after if p not in before),
        "shm_left": sorted(os.listdir("/dev/shm")),
    }))
""")

SINGLE, PROCS, EACH = 50, 4, 20
BOUND = 10.0  # seconds per store, asserted; measured well under 1 s here


def run_scenario(tmp_path: Path, kind: str, where: str, control: bool = False) -> dict:
    work = tmp_path / "work"
    work.mkdir()
    spec = {"work": str(work), "kind": kind, "where": where, "uid": ATTACKER_UID, "attacker": ATTACKER,
            "child": CHILD, "canary_text": CANARY.decode(), "cpu": TEST_CPU, "slurm": TEST_SLURM,
            "lock_timeout": 10, "single": SINGLE, "procs": PROCS, "each": EACH, "control": control}
    # The stores use the namespace's /dev/shm, where the attacker plants.
    env = {k: v for k, v in os.environ.items() if k != "TIRASTORE_FAILPOINTS"}
    cmd = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"', "sh",
           sys.executable, "-c", DRIVER, json.dumps(spec)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, f"driver failed:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_stores(res: dict) -> float:
    """Every store finished in time with all its records and no warning;
    returns the slowest store's time."""
    assert res["count"] == SINGLE + PROCS * EACH, res
    for run in res["runs"]:
        assert run["error"] is None, run
        assert run["elapsed"] < BOUND, run
        assert run["warnings"] == [], run
    assert res["runs"][0]["found"] == SINGLE and all(r["found"] == EACH for r in res["runs"][1:]), res["runs"]
    return max(r["elapsed"] for r in res["runs"])


# name: (what the attacker plants, where)
SCENARIOS = {
    "symlinks-in-their-dir": ("symlinks", "dir"),
    "symlink-to-their-dir": ("symlinks", "link"),
    "locked-files-in-their-dir": ("locked", "dir"),
    "fifos-in-their-dir": ("fifos", "dir"),
    "fifo-as-dir": ("", "fifo"),
}


def untouched(res: dict) -> None:
    assert res["canaries_changed"] == [], "root's files were changed through planted names"
    assert res["changed"] == [] and res["vanished"] == [], res  # the attacker's files and modes stay as planted
    assert res["new"] == [], res  # nothing created under /dev/shm


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_planted_names_are_not_used(tmp_path, name):
    kind, where = SCENARIOS[name]
    res = run_scenario(tmp_path, kind, where)
    slowest = check_stores(res)
    print(f"{name}: slowest store {slowest:.2f}s")
    untouched(res)


def test_clean_node_leaves_nothing(tmp_path):
    """Without a neighbour: no warning, and nothing left under /dev/shm."""
    res = run_scenario(tmp_path, "none", "")
    slowest = check_stores(res)
    print(f"clean: slowest store {slowest:.2f}s")
    assert res["shm_left"] == [], res


def test_negative_control_a_store_that_trusts_planted_names(tmp_path):
    """A store that writes through a planted name and creates a file under
    /dev/shm (the control's extra steps) is caught by the checks of
    test_planted_names_are_not_used."""
    res = run_scenario(tmp_path, "symlinks", "dir", control=True)
    check_stores(res)
    assert res["canaries_changed"] == ["gate"], res
    assert res["new"] == ["/dev/shm/tirastore-control"], res
    with pytest.raises(AssertionError):
        untouched(res)
