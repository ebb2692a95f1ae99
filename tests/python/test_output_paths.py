"""A typo in an output path never destroys a database.

Every output (TiraStore.export in both formats, backup,
PersistentCache.export_json, plot_program, and the CLI's export, backup,
config export-ejkernel, plot and the --conflicts file of import and merge)
refuses, with a ValueError naming what the path is and before anything is
written, the database itself (by name, through a link of the caller, or as
a hard link), each of its files (lock, break lock, a lock moved aside, a
ticket file, journal, -wal, -shm) and another database. Afterwards the
database has the same bytes, its lock does not exist, no temporary file is
left, and its records, config entries, claims and db_meta read as before
with integrity_check ok.

No database is made (TiraStore(), import, merge, config import-ejkernel)
at the name of the database's lock file, break lock or journal either.

The negative controls run the same calls with the failpoints build's
output-trust switch, which skips the engine's check: the same assertions
then catch the database replaced by a JSON file, the lock written over (the
next open waits for it and times out), another database replaced, and a
database made at the lock's name (which holds the lock for good).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Optional

import pytest

from conftest import TEST_CPU

from tirastore import PersistentCache, TiraStore

SRC = "void blur() {}"

# The outputs of the library's API, run by DRIVER.
API_OUTPUTS = ["export", "export_jsonl", "backup", "export_json"]

# A driver process: runs each (output, target) of its spec and prints one
# JSON line per case: the exception's class and message, or "" when written.
DRIVER = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    from tirastore import TiraStore, PersistentCache
    spec = json.loads(sys.argv[1])
    out = []
    for api, target in spec["cases"]:
        try:
            if api == "plot":
                from tirastore.plot import plot_program
                db = spec["plot_db"] if target == spec["plot_db"] else spec["db"]
                with TiraStore(db, create=False, allow_cpu_mismatch=True, lock_timeout=5) as s:
                    plot_program(s, "blur", target)
            elif api == "export_json":
                with PersistentCache("t", path=spec["db"], create=False, lock_timeout=5) as c:
                    c.export_json(target)
            elif api == "export_json_seed":
                with PersistentCache("t", path=spec["seed"], lock_timeout=5) as c:
                    c.export_json(target)
            else:
                with TiraStore(spec["db"], create=False, allow_cpu_mismatch=True, lock_timeout=5) as s:
                    if api == "export":
                        s.export(target)
                    elif api == "export_jsonl":
                        s.export(target, fmt="jsonl")
                    elif api == "backup":
                        s.backup(target)
            out.append([api, target, "", ""])
        except Exception as e:
            out.append([api, target, type(e).__name__, str(e)])
    print(json.dumps(out))
""")


def _env(lib: Optional[Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TIRASTORE_FAILPOINTS", "TIRASTORE_LIB")}
    if lib is not None:  # the negative control: the check skipped
        env["TIRASTORE_LIB"] = str(lib)
        env["TIRASTORE_FAILPOINTS"] = "output-trust=on"
    return env


def run_api(spec: dict[str, Any], cases: list[tuple[str, str]], lib: Optional[Path] = None) -> list[list[str]]:
    r = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(dict(spec, cases=cases), default=str)], capture_output=True,
                       text=True, env=_env(lib), timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_cli(*args: Any, lib: Optional[Path] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tirastore", *map(str, args)], capture_output=True, text=True,
                          env=_env(lib), timeout=300)


@pytest.fixture
def world(tmp_path) -> dict[str, Any]:
    """A shared database (mode 1777 directory) with records, config entries,
    a claim of a killed measurer and db_meta; another database beside it; a
    hard link to it; a caller's link to its directory; a database named like
    a plot; and a PersistentCache seed with its companion database."""
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o1777)
    db = d / "cache.db"
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        for i in range(6):
            s.record("blur", SRC, f"S(L0,L1,{i + 1},8,comps=['c1'])", i % 3 != 0, [0.5 / (i + 1)] if i % 3 else None)
        s._call("config_put", device="gpu:0", op_id="mm@v1", call_key="m=64", value={"block_m": 64})
    code = ("import os, signal, sys; from tirastore import TiraStore; "
            f"s = TiraStore(sys.argv[1], cpu_model={TEST_CPU!r}); "
            "s.lookup_or_claim('blur', 'void blur() {}', \"U(L0,4,comps=['c1'])\", lease=90); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    assert subprocess.run([sys.executable, "-c", code, str(db)], timeout=60).returncode == -signal.SIGKILL
    with TiraStore(d / "other.db", cpu_model=TEST_CPU) as s:
        s.record("other", "void other() {}", "R(L0,comps=['c1'])", True, [2.0])
    for name in ("other.png", "img.png"):
        with TiraStore(d / name, cpu_model=TEST_CPU) as s:
            s.record("blur", SRC, "R(L0,comps=['c1'])", True, [1.0])
    os.link(db, d / "hardlink.db")
    os.link(db, d / "link.png")
    (tmp_path / "alias").symlink_to(d)  # the caller's own link: followed
    with PersistentCache("t", path=d / "seed.json") as c:
        c.put("gpu:0", "mm@v1", "m=32", {"block_m": 32})
    return {"dir": d, "db": db, "alias": tmp_path / "alias", "other": d / "other.db", "seed": d / "seed.json",
            "plot_db": d / "img.png"}


def targets(w: dict[str, Any]) -> dict[str, str]:
    """The refused outputs for the database cache.db, and what the error says."""
    d, db = w["dir"], w["db"]
    host = socket.gethostname()
    return {
        str(db): "is the database itself",
        str(w["alias"] / "cache.db"): "is the database itself",
        str(d / "hardlink.db"): "itself under another name",
        str(d / "cache.db.lock"): "is the lock file of the database",
        str(d / "cache.db.lock.break"): "is the break lock of the database",
        str(d / f"cache.db.lock.stale.{host}.4242.abcdefgh"): "is a lock moved aside by a breaker",
        str(d / f".lock_{host}_4242_abcdefgh"): "is a lock ticket file",
        str(d / "cache.db-journal"): "is the journal of the database",
        str(d / "cache.db-wal"): "is the write-ahead log of the database",
        str(d / "cache.db-shm"): "is the shared-memory index of the database",
        str(w["other"]): "is an existing SQLite database",
    }


def state(w: dict[str, Any]) -> dict[str, Any]:
    """What must not change: the databases' bytes, what they hold, the lock,
    the names in the directory (temporary files, planted outputs)."""
    d, db = w["dir"], w["db"]
    st: dict[str, Any] = {
        "bytes": {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                  for p in (db, w["other"], d / "img.png", d / "other.png", d / "persistent-cache.tirastore.db")},
        # Ticket files of the processes that ran come and go; every other name stays.
        "names": sorted(p.name for p in d.iterdir() if not p.name.startswith(".lock_")),
        "ticket_names": sorted(p.name for p in d.iterdir() if p.name.startswith(".lock_") and "4242" in p.name),
    }
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            st["integrity"] = con.execute("PRAGMA integrity_check").fetchall()
            for table, order in (("records", "key"), ("config_entries", "key"), ("claims", "key"),
                                 ("db_meta", "key"), ("programs", "program_hash")):
                st[table] = con.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        st["integrity"] = f"not a database: {e}"
    return st


def problems(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    found = []
    for name, digest in before["bytes"].items():
        if after["bytes"][name] != digest:
            found.append(f"{name} changed")
    if after["integrity"] != [("ok",)]:
        found.append(f"integrity: {after['integrity']}")
    for table in ("records", "config_entries", "claims", "db_meta", "programs"):
        if after.get(table) != before[table]:
            found.append(f"{table} changed")
    new = sorted(set(after["names"]) - set(before["names"]))
    gone = sorted(set(before["names"]) - set(after["names"]))
    if new or gone:
        found.append(f"names: new {new}, gone {gone}")
    if after["ticket_names"] != before["ticket_names"]:
        found.append(f"ticket names: {after['ticket_names']}")
    return found


def lock_free(db: Path) -> bool:
    """Whether the database can be used at once (no lock written over)."""
    try:
        with TiraStore(db, create=False, allow_cpu_mismatch=True, lock_timeout=1) as s:
            s.count()
    except TimeoutError:
        return False
    return True


def test_api_outputs_refuse_the_database_its_files_and_other_databases(world):
    before = state(world)
    assert before["integrity"] == [("ok",)] and len(before["claims"]) == 1 and len(before["config_entries"]) == 1
    refused = targets(world)
    cases = [(api, t) for api in API_OUTPUTS for t in refused]
    plots = {str(world["dir"] / "link.png"): "itself under another name",
             str(world["dir"] / "other.png"): "is an existing SQLite database",
             str(world["dir"] / ".lock_h_1_abcdefgh.png"): "is a lock ticket file",
             str(world["plot_db"]): "is the database itself"}
    cases += [("plot", t) for t in plots]
    seed = {str(world["dir"] / "persistent-cache.tirastore.db"): "is the database itself",
            str(world["dir"] / "persistent-cache.tirastore.db.lock"): "is the lock file of the database",
            str(world["dir"] / "persistent-cache.tirastore.db-journal"): "is the journal of the database"}
    cases += [("export_json_seed", t) for t in seed]
    results = run_api(world, cases)
    assert len(results) == len(cases)
    for api, target, kind, message in results:
        want = {**refused, **plots, **seed}[target]
        if api == "backup" and target == str(world["other"]):
            want = "is another TiraStore database"
        assert kind == "ValueError", (api, target, kind, message)
        assert want in message and "nothing was written" in message, (api, target, message)
    assert problems(before, state(world)) == []
    assert lock_free(world["db"])


def test_ordinary_outputs_still_work(world):
    d = world["dir"]
    results = run_api(world, [("export", str(d / "dump.json")), ("export_jsonl", str(d / "dump.jsonl")),
                              ("backup", str(d / "snap") + "/"), ("backup", str(d / "snap") + "/"),
                              ("export_json", str(d / "entries.json")), ("plot", str(d / "blur.png"))])
    assert [r[2:] for r in results] == [["", ""]] * 6, results
    assert json.loads((d / "dump.json").read_text())["blur"]["program_name"] == "blur"
    assert json.loads((d / "entries.json").read_text()) == {"gpu:0|mm@v1|m=64": {"block_m": 64}}
    assert (d / "blur.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with TiraStore(d / "snap" / "cache.db", create=False, allow_cpu_mismatch=True) as s:
        assert s.count() == 6
    # Every file written has the mode the umask gives (0666 less it), the
    # backup its database's.
    umask = os.umask(0)
    os.umask(umask)
    assert (d / "dump.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (d / "snap" / "cache.db").stat().st_mode & 0o777 == world["db"].stat().st_mode & 0o777
    assert not [p for p in d.rglob("*") if ".tmp-" in p.name]


CLI_TARGETS = ["cache.db", "hardlink.db", "cache.db.lock", "cache.db-journal", f".lock_{socket.gethostname()}_4242_abcdefgh",
               "other.db"]


def cli_cases(w: dict[str, Any], tmp_path: Path) -> list[tuple[list[Any], str, str]]:
    """(argv, target, what the error names) of every CLI output."""
    d, db = w["dir"], w["db"]
    # An export with a record the database lacks, and a source database:
    # a refused import or merge must not write it.
    extra = tmp_path / "extra.db"
    with TiraStore(extra, cpu_model=TEST_CPU) as s:
        s.record("new", "void new() {}", "R(L0,comps=['c1'])", True, [3.0])
        dump = s.export(tmp_path / "extra.json")
    want = targets(w)
    cases = []
    for name in CLI_TARGETS:
        t = d / name
        what = want[str(t)]
        cases += [
            (["export", db, t], str(t), what),
            (["export", db, t, "--format", "jsonl"], str(t), what),
            (["backup", db, t], str(t), "is another TiraStore database" if name == "other.db" else what),
            (["config", "export-ejkernel", db, t], str(t), what),
            (["import", db, dump, "--conflicts", t, "--allow-cpu-mismatch"], str(t), what),
            (["merge", db, extra, "--conflicts", t], str(t), what),
        ]
    cases += [
        (["import", db, dump, "--conflicts", dump, "--allow-cpu-mismatch"], str(dump), "is the file this call reads"),
        (["merge", db, extra, "--conflicts", extra], str(extra), "is the database itself"),
        (["plot", db, "--program", "blur", "-o", d / "link.png"], str(d / "link.png"), "itself under another name"),
        (["plot", db, "--program", "blur", "-o", d / "other.png"], str(d / "other.png"), "is an existing SQLite database"),
    ]
    return cases


def test_cli_outputs_refuse_the_database_its_files_and_other_databases(world, tmp_path):
    cases = cli_cases(world, tmp_path)
    before = state(world)
    extra_before = hashlib.sha256((tmp_path / "extra.db").read_bytes()).hexdigest()
    for argv, target, what in cases:
        r = run_cli(*argv)
        assert r.returncode == 1, (argv, r.stdout, r.stderr)
        assert "tirastore: error:" in r.stderr and what in r.stderr and "nothing was written" in r.stderr, (argv, r.stderr)
        assert "Traceback" not in r.stderr
    assert problems(before, state(world)) == []
    assert hashlib.sha256((tmp_path / "extra.db").read_bytes()).hexdigest() == extra_before
    assert lock_free(world["db"])
    # The same commands with a free name write: the conflicts file is renamed
    # into place when the command succeeds.
    d = world["dir"]
    listed = d / "conflicts.jsonl"
    assert run_cli("merge", world["db"], tmp_path / "extra.db", "--conflicts", listed).returncode == 0
    assert listed.exists() and listed.read_text() == ""
    assert run_cli("plot", world["db"], "--program", "blur", "-o", d / "blur.svg").returncode == 0
    assert not [p for p in d.iterdir() if ".tmp-" in p.name]


def test_an_output_to_a_pipe_is_refused_saying_so(world):
    """/dev/stdout on a pipe resolves to /proc/<pid>/fd/pipe:[...], a name
    that is nowhere: each output given it is refused as a FIFO, naming the
    path as given, and nothing is written."""
    db = world["db"]
    before = state(world)
    for argv in (["export", db, "/dev/stdout"], ["export", db, "/dev/stdout", "--format", "jsonl"],
                 ["backup", db, "/dev/stdout"], ["config", "export-ejkernel", db, "/dev/stdout"]):
        r = run_cli(*argv)  # its stdout is a pipe
        assert r.returncode == 1 and r.stdout == "", (argv, r.stdout, r.stderr)
        assert " /dev/stdout is a FIFO owned by uid " in r.stderr and "give a file name" in r.stderr, (argv, r.stderr)
    assert problems(before, state(world)) == []


# The names of the database's own files: a database made at one of them
# would hold the lock for good, or stand where SQLite looks for the
# database's journal.
COMPANION_NAMES = ["cache.db.lock", "cache.db.lock.break", "cache.db-journal", "cache.db-wal", "cache.db-shm"]

# Each way a database is made at a path given by the user: the library, and
# the CLI commands that create their target.
MAKERS = textwrap.dedent("""
    import json, subprocess, sys, warnings
    warnings.simplefilter("ignore")
    from tirastore import TiraStore
    target, dump, db, seed = sys.argv[1:5]
    out = []
    try:
        TiraStore(target, lock_timeout=5).close()
        out.append(["TiraStore", ""])
    except Exception as e:
        out.append(["TiraStore", f"{type(e).__name__}: {e}"])
    for argv in (["import", target, dump], ["merge", target, db, "--lock-timeout", "5"],
                 ["config", "import-ejkernel", target, seed, "--lock-timeout", "5"]):
        r = subprocess.run([sys.executable, "-m", "tirastore", *argv], capture_output=True, text=True, timeout=120)
        out.append([argv[0], "" if r.returncode == 0 else r.stderr.strip()])
    print(json.dumps(out))
""")


def make_databases_at(w: dict[str, Any], tmp_path: Path, name: str, lib: Optional[Path] = None) -> list[list[str]]:
    dump, seed = tmp_path / "dump.json", tmp_path / "seed-import.json"
    if not dump.exists():
        with TiraStore(w["db"], create=False, allow_cpu_mismatch=True) as s:
            s.export(dump)
        seed.write_text(json.dumps({"gpu:0|mm@v1|m=16": {"block_m": 16}}))
    target = w["dir"] / name
    r = subprocess.run([sys.executable, "-c", MAKERS, str(target), str(dump), str(w["db"]), str(seed)],
                       capture_output=True, text=True, env=_env(lib), timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", COMPANION_NAMES)
def test_no_database_is_made_at_the_name_of_a_databases_file(world, tmp_path, name):
    """TiraStore(), import, merge and config import-ejkernel given the name
    of the database's lock file or journal (a typo) refuse with a
    ValueError naming it, and make nothing there: the database is as
    before and free to use."""
    before = state(world)
    for maker, err in make_databases_at(world, tmp_path, name):
        assert err, f"{maker} made a database at {name}"
        assert f"{world['dir'] / name} is the name of the " in err and "no database is opened or made there" in err, err
        assert maker != "TiraStore" or err.startswith("ValueError: "), err
    assert problems(before, state(world)) == []
    assert lock_free(world["db"])


# -- negative controls: the check skipped (failpoints build, output-trust) ------------------


def test_negative_control_a_database_made_at_the_lock_blocks_everyone(world, tmp_path, failpoints_lib):
    before = state(world)
    made = make_databases_at(world, tmp_path, "cache.db.lock", lib=failpoints_lib)
    assert made[0] == ["TiraStore", ""], made  # nothing refused it
    assert "names: new ['cache.db.lock'], gone []" in problems(before, state(world))
    assert not lock_free(world["db"])


def test_negative_control_export_over_the_database_destroys_it(world, failpoints_lib):
    before = state(world)
    [res] = run_api(world, [("export", str(world["db"]))], lib=failpoints_lib)
    assert res[2] == "", res  # nothing refused it
    found = problems(before, state(world))
    assert "cache.db changed" in found and any(p.startswith("integrity: not a database") for p in found), found


def test_negative_control_export_over_the_lock_blocks_everyone(world, failpoints_lib):
    before = state(world)
    [res] = run_api(world, [("export_jsonl", str(world["dir"] / "cache.db.lock"))], lib=failpoints_lib)
    assert res[2] == "", res
    found = problems(before, state(world))
    assert any("cache.db.lock" in p for p in found), found
    assert not lock_free(world["db"])


def test_negative_control_backup_over_another_database_replaces_it(world, failpoints_lib):
    before = state(world)
    [res] = run_api(world, [("backup", str(world["other"]))], lib=failpoints_lib)
    assert res[2] == "", res
    assert "other.db changed" in problems(before, state(world))
    with TiraStore(world["other"], create=False, allow_cpu_mismatch=True) as s:
        assert s.get_program_source("other") == []  # its records are gone


def test_negative_control_cli_export_over_the_database(world, failpoints_lib):
    before = state(world)
    r = run_cli("export", world["db"], world["db"], lib=failpoints_lib)
    assert r.returncode == 0, r.stderr
    found = problems(before, state(world))
    assert "cache.db changed" in found and "claims changed" in found, found


def test_a_server_store_refuses_other_databases(pg_cluster, tmp_path):
    """A store on PostgreSQL has no files of its own: its outputs refuse another
    database (and the lock family's names), and a backup replaces only an
    earlier backup of the same database."""
    from conftest import new_pg_url

    other = tmp_path / "other.db"
    with TiraStore(other, cpu_model=TEST_CPU) as s:
        s.record("other", "void other() {}", "R(L0,comps=['c1'])", True, [2.0])
    digest = hashlib.sha256(other.read_bytes()).hexdigest()
    with TiraStore(new_pg_url(pg_cluster), cpu_model=TEST_CPU) as s:
        s.record("blur", SRC, "R(L0,comps=['c1'])", True, [1.0])
        for call in (lambda p: s.export(p), lambda p: s.export(p, fmt="jsonl"), s.backup):
            with pytest.raises(ValueError, match="nothing was written"):
                call(other)
            with pytest.raises(ValueError, match="lock file of a TiraStore database"):
                call(tmp_path / "other.db.lock")
        assert s.backup(tmp_path / "snap.db") == s.backup(tmp_path / "snap.db")  # again, over its own backup
        assert s.export(tmp_path / "dump.json").exists()
    assert hashlib.sha256(other.read_bytes()).hexdigest() == digest
    with TiraStore(tmp_path / "snap.db", create=False, allow_cpu_mismatch=True) as b:
        assert b.count() == 1
