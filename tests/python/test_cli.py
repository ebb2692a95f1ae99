"""The ``tirastore`` command (python -m tirastore): one test per subcommand,
its failure exits (missing file, corrupt file, held lock, missing entry,
usage), --json and --help."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TEST_CPU, import_dev_dependency
from tirastore import TiraStore

SRC = "void blur() {}"


def tirastore(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tirastore", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


@pytest.fixture(scope="session")
def db_template(tmp_path_factory) -> Path:
    """The subcommands' database, built once per session: six schedules
    of blur (two illegal), one of sharpen, one kernel config."""
    path = tmp_path_factory.mktemp("cli-db") / "cache.db"
    with TiraStore(path, cpu_model=TEST_CPU, source_project="proj") as s:
        for i in range(6):
            legal = i % 3 != 0
            s.record("blur", SRC, f"S(L0,L1,{i + 1},8,comps=['c1'])", legal, [0.5 / (i + 1)] if legal else None)
        s.record("sharpen", "void sharpen() {}", "R(L0,comps=['c1'])", True, [1.0])
        s._call("config_put", device="gpu:0", op_id="mm@v1", call_key="m=64", value={"block_m": 64})
    return path


@pytest.fixture
def db(db_template, tmp_path) -> Path:
    """A copy of db_template (content and mode) of the test's own."""
    path = tmp_path / "cache.db"
    shutil.copy(db_template, path)
    return path


def test_help_of_every_subcommand():
    top = tirastore("--help")
    assert top.returncode == 0 and "stats" in top.stdout and "Exit status" in top.stdout
    for cmd in (["stats"], ["export"], ["import"], ["merge"], ["backup"], ["check"], ["claims"], ["plot"], ["lock"], ["lock", "status"], ["lock", "break"],
                ["config"], ["config", "list"], ["config", "get"],
                ["config", "delete"], ["config", "import-ejkernel"], ["config", "export-ejkernel"]):
        r = tirastore(*cmd, "--help")
        assert r.returncode == 0 and "usage: tirastore" in r.stdout, (cmd, r.stderr)
    assert tirastore("--version").stdout.startswith("tirastore ")
    inc = tirastore("--include")
    assert inc.returncode == 0 and (Path(inc.stdout.strip()) / "tirastore.h").is_file()


def test_usage_errors_exit_2(db):
    for cmd in ([], ["frobnicate"], ["stats"], ["stats", db, "--by", "user"], ["export", db],
                ["stats", db, "--lock-timeout", "soon"], ["config"]):
        r = tirastore(*cmd)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "usage:" in r.stderr


def test_stats(db):
    r = tirastore("stats", db)
    assert r.returncode == 0, r.stderr
    assert "records         7 (5 legal, 2 illegal)" in r.stdout
    assert "programs        2" in r.stdout and TEST_CPU in r.stdout and "config entries  1" in r.stdout
    doc = json.loads(tirastore("stats", db, "--json").stdout)
    assert (doc["total_records"], doc["total_programs"], doc["config_entries"]) == (7, 2, 1)
    assert doc["file_size"] == db.stat().st_size and doc["users"] and doc["source_projects"] == ["proj"]
    by = json.loads(tirastore("stats", db, "--by", "program", "--json").stdout)["programs"]
    assert [(p["program_name"], p["records"], p["legal"], p["illegal"]) for p in by] == [("blur", 6, 4, 2), ("sharpen", 1, 1, 0)]
    table = tirastore("stats", db, "--by", "program").stdout
    assert "program  hash" in table and "blur" in table
    # The noise policy and how many timed records meet it (one time each: stable).
    assert doc["stability"] == {"policy": {"max_spread": 0.05, "max_remeasures": 3}, "timed": 5, "unstable": 0,
                                "median_spread": 0.0, "timed_out": 0, "compile_failures": 0}
    assert "spread <= 5% (PolyBench's rule)" in r.stdout and "5 of 5 timed records stable" in r.stdout
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        s.record("sharpen", "void sharpen() {}", "U(L0,2,comps=['c1'])", True, [1.0, 1.5, 0.6, 1.4, 0.8])
    doc = json.loads(tirastore("stats", db, "--json").stdout)
    assert (doc["stability"]["timed"], doc["stability"]["unstable"]) == (6, 1)


def test_stats_of_a_program_shows_each_records_statistics(tmp_path):
    """`stats --program NAME`: every record of every source version of the
    program with the library's statistics of its times (count, min,
    median, MAD, spread, stable by the noise policy), the timed ones
    fastest first, then the censored and the illegal; and the median
    spread of the database is the median of an even count (the mean of
    the middle two). An unknown name is an error naming it."""
    db = tmp_path / "s.db"
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        s.record("blur", "void f() {}", "U(L0,2,comps=['c'])", True, [1.0, 1.1, 0.9, 1.0, 1.0])
        s.record("blur", "void f() {}", "U(L0,3,comps=['c'])", True, [0.5, 0.6])
        s.record("blur", "void f() {}", "U(L0,4,comps=['c'])", False, None)
        s.record("blur", "void f() {}", "U(L0,5,comps=['c'])", True, None, censored="timeout", timed_out_after=30.0)
        s.record("blur", "void f2() {}", "U(L0,6,comps=['c'])", True, [2.0])
        s.record("sharpen", "void g() {}", "U(L0,2,comps=['c'])", True, [1.0, 1.2])
    doc = json.loads(tirastore("stats", db, "--program", "blur", "--json").stdout)
    rows = [(r["schedule"][:7], r["count"], r["min"], r["median"], r["stable"], r["censored"]) for r in doc["records"]]
    assert rows == [("U(L0,3,", 2, 0.5, 0.55, False, None), ("U(L0,2,", 5, 0.9, 1.0, True, None),
                    ("U(L0,6,", 1, 2.0, 2.0, True, None), ("U(L0,5,", 1, 30.0, 30.0, None, "timeout"),
                    ("U(L0,4,", 0, None, None, None, None)], rows
    first = doc["records"][0]
    assert first["mad"] == pytest.approx(0.05) and first["spread"] == pytest.approx(0.05 / 0.55), first
    assert len({r["program_hash"] for r in doc["records"]}) == 2
    # Spreads 0, 0 (blur), 0.05/0.55 twice (blur, sharpen): the median is
    # their middle two's mean, not the upper one.
    assert doc["stability"]["median_spread"] == pytest.approx(0.05 / 0.55 / 2), doc["stability"]
    text = tirastore("stats", db, "--program", "blur").stdout
    assert "schedule" in text and "MAD" in text and "unstable" in text and "timed out after 30" in text, text
    assert text.index("U(L0,3,") < text.index("U(L0,2,") < text.index("U(L0,4,"), text
    r = tirastore("stats", db, "--program", "nope")
    assert r.returncode == 1 and "no program named 'nope'" in r.stderr, r.stderr


def test_a_missing_database_is_never_created(tmp_path):
    typo = tmp_path / "typo" / "cahce.db"
    for cmd in (["stats", typo], ["export", typo, tmp_path / "x.json"], ["backup", typo, tmp_path / "b.db"],
                ["config", "list", typo], ["plot", typo, "--program", "p", "-o", tmp_path / "p.png"]):
        r = tirastore(*cmd)
        assert r.returncode == 1, (cmd, r.stderr)
        assert "no database at" in r.stderr and "none was created" in r.stderr
    assert not (tmp_path / "typo").exists() and sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("value", ["nan", "inf", "soon"])
def test_a_timeout_that_is_not_a_number_is_a_usage_error(db, value):
    for option in ("--lock-timeout", "--stale-lock-timeout"):
        r = tirastore("check", db, option, value)
        assert r.returncode == 2, (option, value, r.stderr)
        assert f"argument {option}: {value!r} is not a number of seconds" in r.stderr, r.stderr


def test_a_refused_input_creates_no_database(tmp_path):
    """import and config import-ejkernel create their database, but only
    for an input they can read: a file that is not an export (or not a
    PersistentCache file), a first program that is not one, or a device is
    refused before the database is made."""
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"blur": {"Tiramisu_cpp": "void blur() {}", "schedules_list": "oops",
                                          "program_name": "blur"}}, indent=2))
    nameless = tmp_path / "nameless.json"
    nameless.write_text(json.dumps({"blur": {"Tiramisu_cpp": "void blur() {}", "schedules_list": []}}, indent=2))
    for cmd, says in ((["import", "{db}", bad], "is not a TiraStore export"),
                      (["import", "{db}", wrong], "program 'blur': schedules_list is not a list"),
                      (["import", "{db}", nameless], "program 'blur': program_name is missing"),
                      (["import", "{db}", "/dev/null"], "is a character device"),
                      (["config", "import-ejkernel", "{db}", bad], "is not a PersistentCache file"),
                      (["config", "import-ejkernel", "{db}", "/dev/null"], "is a character device")):
        db = tmp_path / "new" / "cache.db"
        r = tirastore(*[str(db) if a == "{db}" else a for a in cmd])
        assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert not (tmp_path / "new").exists(), cmd
    good = tmp_path / "good.json"
    good.write_text("{}")
    assert tirastore("import", tmp_path / "new" / "cache.db", good).returncode == 0  # control: a good one does


def test_an_empty_file_is_not_made_a_database_by_a_reading_command(tmp_path):
    """An empty file is not an existing database: the commands that open
    existing databases only (and TiraStore(create=False)) refuse it and
    leave it empty. TiraStore() with create=True, as the original, makes a
    database in it."""
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"")
    for cmd in (["stats", notes], ["claims", notes], ["export", notes, tmp_path / "x.json"], ["config", "list", notes]):
        r = tirastore(*cmd)
        assert r.returncode == 1, (cmd, r.stdout, r.stderr)
        assert f"{notes} is an empty file, not a database" in r.stderr and "Traceback" not in r.stderr, (cmd, r.stderr)
    with pytest.raises(sqlite3.DatabaseError, match="is an empty file, not a database"):
        TiraStore(notes, cpu_model=TEST_CPU, create=False)
    assert notes.read_bytes() == b"" and sorted(os.listdir(tmp_path)) == ["notes.txt"]
    with TiraStore(notes, cpu_model=TEST_CPU) as s:
        assert s.count() == 0
    assert notes.stat().st_size > 0
    # The commands that create their destination make one in an empty file.
    dump = tmp_path / "dump.json"
    dump.write_text("{}")
    for cmd in (["import", "{db}", dump], ["merge", "{db}", notes], ["config", "import-ejkernel", "{db}", dump]):
        target = tmp_path / f"empty-{cmd[0]}.db"
        target.write_bytes(b"")
        r = tirastore(*[target if a == "{db}" else a for a in cmd])
        assert r.returncode == 0 and target.stat().st_size > 0, (cmd, r.stderr)


def test_a_corrupt_file_exits_1(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database" * 100)
    r = tirastore("stats", bad)
    assert r.returncode == 1 and "tirastore: error:" in r.stderr and "Traceback" not in r.stderr
    assert bad.read_bytes() == b"this is not a database" * 100


def test_a_held_lock_exits_1_naming_the_holder(db):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = db.with_suffix(".db.lock")
        lock.write_text(json.dumps({"hostname": socket.gethostname(), "pid": holder.pid, "timestamp": time.time()}))
        r = tirastore("stats", db, "--lock-timeout", "0.2")
        assert r.returncode == 1, r.stderr
        assert str(holder.pid) in r.stderr and "Traceback" not in r.stderr
    finally:
        holder.kill()
        holder.wait()
        db.with_suffix(".db.lock").unlink(missing_ok=True)


def test_export_both_formats(db, tmp_path):
    for fmt in ("json", "jsonl"):
        out = tmp_path / f"dump.{fmt}"
        r = tirastore("export", db, out, "--format", fmt, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"path": str(out), "format": fmt, "records": 7}
        with TiraStore(db, cpu_model=TEST_CPU) as s:
            assert out.read_bytes() == s.export(tmp_path / f"api.{fmt}", fmt=fmt).read_bytes()


def test_backup_creates_its_directory_and_is_a_valid_copy(db, tmp_path):
    r = tirastore("backup", db, f"{tmp_path}/snapshots/today/")  # a trailing slash: a directory
    assert r.returncode == 0, r.stderr
    out = tmp_path / "snapshots" / "today" / "cache.db"
    assert out.is_file() and str(out) in r.stdout
    con = sqlite3.connect(out)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert con.execute("SELECT COUNT(*) FROM records").fetchone() == (7,)
    doc = json.loads(tirastore("backup", db, tmp_path / "named.db", "--json").stdout)
    assert doc["path"] == str(tmp_path / "named.db") and doc["size"] > 0


def test_config_commands(db, tmp_path):
    listed = json.loads(tirastore("config", "list", db, "--json").stdout)
    assert [(e["device"], e["op_id"], e["call_key"], e["value"]) for e in listed] == [("gpu:0", "mm@v1", "m=64", {"block_m": 64})]
    assert "gpu:0" in tirastore("config", "list", db, "--device", "gpu:0").stdout
    assert "(no entries)" in tirastore("config", "list", db, "--op", "other").stdout
    got = tirastore("config", "get", db, "gpu:0", "mm@v1", "m=64")
    assert got.returncode == 0 and json.loads(got.stdout) == {"block_m": 64}
    missing = tirastore("config", "get", db, "gpu:0", "mm@v1", "m=128")
    assert missing.returncode == 1 and "no entry gpu:0|mm@v1|m=128" in missing.stderr
    # export-ejkernel writes the seed's format; import-ejkernel reads it into a new database
    seed = tmp_path / "matmul.json"
    assert tirastore("config", "export-ejkernel", db, seed).returncode == 0
    assert seed.read_text() == json.dumps({"gpu:0|mm@v1|m=64": {"block_m": 64}})
    other = tmp_path / "other.db"
    imp = tirastore("config", "import-ejkernel", other, seed, "--json")
    assert imp.returncode == 0, imp.stderr
    assert json.loads(imp.stdout)["added"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    r = tirastore("config", "import-ejkernel", other, bad)
    assert r.returncode == 1 and "not an object" in r.stderr
    assert tirastore("config", "delete", other, "gpu:0", "mm@v1", "m=64").returncode == 0
    assert tirastore("config", "delete", other, "gpu:0", "mm@v1", "m=64").returncode == 1
    assert json.loads(tirastore("config", "list", other, "--json").stdout) == []


def test_config_commands_with_namespaces(db, tmp_path):
    """--namespace picks one cache of the database: list shows every
    namespace (with a namespace column once one is not ""), the others
    work in "" unless told."""
    plain = tirastore("config", "list", db).stdout
    assert "namespace" not in plain.splitlines()[0]  # only the namespace "": no column
    seed = tmp_path / "attn.json"
    seed.write_text('{"gpu:0|mm@v1|m=64": {"block_m": 32}}')
    imp = tirastore("config", "import-ejkernel", db, seed, "--namespace", "flash-attn", "--json")
    assert imp.returncode == 0 and json.loads(imp.stdout)["added"] == 1, imp.stderr
    listed = json.loads(tirastore("config", "list", db, "--json").stdout)
    assert [(e["namespace"], e["value"]) for e in listed] == [("", {"block_m": 64}), ("flash-attn", {"block_m": 32})]
    table = tirastore("config", "list", db).stdout.splitlines()
    assert table[0].split()[:2] == ["namespace", "device"] and table[3].startswith("flash-attn")
    one = json.loads(tirastore("config", "list", db, "--namespace", "flash-attn", "--json").stdout)
    assert [e["namespace"] for e in one] == ["flash-attn"]
    got = tirastore("config", "get", db, "gpu:0", "mm@v1", "m=64", "--namespace", "flash-attn")
    assert got.returncode == 0 and json.loads(got.stdout) == {"block_m": 32}
    assert json.loads(tirastore("config", "get", db, "gpu:0", "mm@v1", "m=64").stdout) == {"block_m": 64}
    out = tmp_path / "out.json"
    assert tirastore("config", "export-ejkernel", db, out, "--namespace", "flash-attn").returncode == 0
    assert json.loads(out.read_text()) == {"gpu:0|mm@v1|m=64": {"block_m": 32}}
    assert tirastore("config", "delete", db, "gpu:0", "mm@v1", "m=64", "--namespace", "flash-attn").returncode == 0
    missing = tirastore("config", "delete", db, "gpu:0", "mm@v1", "m=64", "--namespace", "flash-attn")
    assert missing.returncode == 1 and "no entry gpu:0|mm@v1|m=64 in namespace flash-attn" in missing.stderr
    assert [e["namespace"] for e in json.loads(tirastore("config", "list", db, "--json").stdout)] == [""]


def test_config_commands_on_an_ejkernel_json_path(tmp_path):
    """DB given as a cache's .json path: its directory's database, and its
    stem as the namespace unless --namespace says otherwise."""
    from tirastore import PersistentCache

    d = tmp_path / "ejkernel-presistent-cache"
    for op, v in (("flash-attn", 1), ("mla", 2)):
        with PersistentCache(op, path=d / f"{op}.json") as c:
            c.put("cpu", "k@v1", "sig", v)
    listed = json.loads(tirastore("config", "list", d / "flash-attn.json", "--json").stdout)
    assert [(e["namespace"], e["value"]) for e in listed] == [("flash-attn", 1)]
    assert tirastore("config", "get", d / "mla.json", "cpu", "k@v1", "sig").stdout.strip() == "2"
    every = json.loads(tirastore("config", "list", d / "persistent-cache.tirastore.db", "--json").stdout)
    assert sorted(e["namespace"] for e in every) == ["flash-attn", "mla"]
    typo = tirastore("config", "list", d / "typo" / "x.json")
    assert typo.returncode != 0 and not (d / "typo").exists()  # a tool creates nothing


def test_plot(db, tmp_path):
    import_dev_dependency("matplotlib")
    out = tmp_path / "blur.png"
    r = tirastore("plot", db, "--program", "blur", "-o", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
    r = tirastore("plot", db, "--program", "nonexistent", "-o", tmp_path / "x.png")
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_plot_without_matplotlib_says_how_to_install(db, tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nclass _Block:\n    def find_spec(self, name, *a):\n"
        "        if name == 'matplotlib' or name.startswith('matplotlib.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'matplotlib'\", name=name)\n"
        "sys.meta_path.insert(0, _Block())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(blocker) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "tirastore", "plot", str(db), "--program", "blur", "-o", str(tmp_path / "p.png")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1, r.stderr
    assert 'pip install "tirastore[plot]"' in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "p.png").exists()


def _go_record(pid: int) -> str:
    """A Go holder's lock record for process pid of this host."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    start = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22
    return json.dumps({
        "hostname": socket.gethostname(), "pid": pid, "timestamp": time.time(),
        "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "pid_ns": os.stat("/proc/self/ns/pid").st_ino, "start_time": start, "heartbeat_interval": 5.0,
    })


def test_lock_status_and_break(db):
    lock = db.with_suffix(".db.lock")
    free = tirastore("lock", "status", db, "--json")
    assert free.returncode == 0 and json.loads(free.stdout)["held"] is False
    assert tirastore("lock", "status", db.with_name("typo.db")).returncode == 1
    # An original worker's record on another node, older than the stale timeout: abandoned.
    lock.write_text(json.dumps({"hostname": "node17", "pid": 4242, "timestamp": time.time() - 3600}))
    st = tirastore("lock", "status", db)
    assert st.returncode == 1 and "node17 pid 4242" in st.stdout and "stale" in st.stdout
    br = tirastore("lock", "break", db, "--json")
    assert br.returncode == 0 and json.loads(br.stdout)["broken"] is True and not lock.exists()
    # A recent one: refused without --force, broken with it.
    lock.write_text(json.dumps({"hostname": "node17", "pid": 4242, "timestamp": time.time()}))
    r = tirastore("lock", "break", db)
    assert r.returncode == 1 and "force" in r.stderr and lock.exists()
    assert tirastore("lock", "break", db, "--force").returncode == 0 and not lock.exists()
    # A live process of this host: never broken, even with --force; a dead one is.
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(_go_record(holder.pid))
        st = json.loads(tirastore("lock", "status", db, "--json").stdout)
        assert st["holder"]["on_this_host"] and st["holder"]["alive"] is True
        r = tirastore("lock", "break", db, "--force")
        assert r.returncode == 1 and "alive" in r.stderr and lock.exists()
    finally:
        holder.kill()
        holder.wait()
    st = tirastore("lock", "status", db)
    assert st.returncode == 1 and "dead" in st.stdout
    assert tirastore("lock", "break", db).returncode == 0 and not lock.exists()
    assert [p.name for p in db.parent.iterdir() if p.name.startswith(".lock_")] == []


def test_export_import_export_gives_identical_files(db, tmp_path):
    for fmt in ("json", "jsonl"):
        first = tmp_path / f"first.{fmt}"
        assert tirastore("export", db, first, "--format", fmt).returncode == 0
        fresh = tmp_path / f"fresh-{fmt}.db"
        r = tirastore("import", fresh, first, "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert (doc["records"], doc["added"], doc["same"], doc["created"]) == (7, 7, 0, True)
        second = tmp_path / f"second.{fmt}"
        assert tirastore("export", fresh, second, "--format", fmt).returncode == 0
        assert second.read_bytes() == first.read_bytes()
        again = json.loads(tirastore("import", fresh, first, "--json").stdout)
        assert (again["added"], again["same"], again["created"]) == (0, 7, False)


def test_import_conflicts_and_failures(db, tmp_path):
    dump = tmp_path / "dump.jsonl"
    assert tirastore("export", db, dump, "--format", "jsonl").returncode == 0
    edited = tmp_path / "edited.jsonl"
    edited.write_text(dump.read_text().replace("0.25", "7.5"))
    listed = tmp_path / "conflicts.jsonl"
    # db was made with the test CPU model: importing into it needs the override.
    r = tirastore("import", db, edited, "--conflicts", listed, "--json", "--allow-cpu-mismatch")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["conflicts"] == 1 and doc["replaced"] == 0
    [c] = [json.loads(line) for line in listed.read_text().splitlines()]
    assert c["program_name"] == "blur" and c["stored"]["execution_times"] == [0.25] and c["incoming"]["execution_times"] == [7.5]
    assert json.loads(tirastore("import", db, edited, "--overwrite", "--json", "--allow-cpu-mismatch").stdout)["replaced"] == 1
    missing = tirastore("import", tmp_path / "new.db", tmp_path / "nothere.jsonl")
    assert missing.returncode == 1 and not (tmp_path / "new.db").exists()
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "p": {"Tiramisu_cpp": 1}\n}\n')
    r = tirastore("import", db, bad, "--allow-cpu-mismatch")
    assert r.returncode == 1 and "not a string" in r.stderr
    other_cpu = tmp_path / "other.db"
    TiraStore(other_cpu, cpu_model="Another CPU").close()
    r = tirastore("import", other_cpu, dump)
    assert r.returncode == 1 and "CPU" in r.stderr
    assert tirastore("import", other_cpu, dump, "--allow-cpu-mismatch").returncode == 0


def _import_from(db: Path, source: Path, env: dict) -> tuple[str, float]:
    """`tirastore import DB SOURCE` with SIGINT sent after 1 s if it has not
    ended: "ended <status>" and when, or "hung" (still running 1 s after
    the SIGINT: Ctrl-C does not stop it)."""
    import signal

    p = subprocess.Popen([sys.executable, "-m", "tirastore", "import", str(db), str(source), "--allow-cpu-mismatch"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    t0 = time.monotonic()
    try:
        try:
            p.wait(timeout=6)  # a refusal comes at once; startup on a busy machine is slow
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=1)
            except subprocess.TimeoutExpired:
                return "hung", time.monotonic() - t0
        return f"ended {p.returncode}: {p.stderr.read()}", time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()


def test_import_from_a_fifo_is_refused_at_once(db, tmp_path):
    """A FIFO as the export (a typo, or `<(zcat ...)`) is refused at once,
    saying why and what to do: it would block open(2) until a writer came,
    past Ctrl-C, and a pipe cannot be read in slices by offset."""
    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    out, _ = _import_from(db, fifo, dict(os.environ))
    assert out.startswith("ended 1:") and "is a FIFO" in out and "write the stream to a file first" in out, out


def test_import_from_a_pipe_by_name_is_refused_saying_so(db, tmp_path):
    """A pipe named by a path (`tirastore import DB /dev/stdin < x`, a
    shell's `<(zcat x.gz)`) resolves to no file: it is refused as a pipe,
    with what to do, not as a missing /proc/PID/fd/pipe:[N] file. Fails
    where the path is resolved and opened as given (the ENOENT it gave)."""
    dump = tmp_path / "dump.json"
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        s.export(dump)
    with open(dump, "rb") as f:
        p = subprocess.Popen([sys.executable, "-m", "tirastore", "import", str(db), "/dev/stdin"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = p.communicate(f.read(), timeout=60)
    err = err.decode()
    assert p.returncode == 1 and "/dev/stdin is a pipe" in err and "write the stream to a file first" in err, err
    r = subprocess.run(["bash", "-c", f'exec "$0" -m tirastore import "$1" <(cat "$2")', sys.executable, str(db), str(dump)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 1 and "is a pipe" in r.stderr and "pipe:[" not in r.stderr, r.stderr


def test_negative_control_import_opening_a_fifo_ignores_ctrl_c(db, tmp_path, failpoints_lib):
    """NEGATIVE CONTROL: opened as before (shareddir-trust), the FIFO blocks
    the import in open(2), and Ctrl-C does not end it."""
    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    env = dict(os.environ, TIRASTORE_LIB=str(failpoints_lib), TIRASTORE_FAILPOINTS="shareddir-trust=on")
    out, _ = _import_from(db, fifo, env)
    assert out == "hung", out


def test_merge(db, tmp_path):
    other = tmp_path / "clusterB.db"
    with TiraStore(other, cpu_model=TEST_CPU, source_project="B") as s:
        s.record("blur", SRC, "S(L0,L1,2,8,comps=['c1'])", True, [0.25])  # the same as db's
        s.record("blur", SRC, "S(L0,L1,3,8,comps=['c1'])", True, [9.0])  # measured in both: samples merged
        s.record("blur", SRC, "S(L0,L1,1,8,comps=['c1'])", True, [7.0])  # illegal in db: a conflict
        for i in range(30):
            s.record(f"p{i:02d}", f"void p{i}() {{}}", "R(L0,comps=['c1'])", True, [float(i)])
        stamp = s.lookup("p07", "void p7() {}", "R(L0,comps=['c1'])")
    listed = tmp_path / "conflicts.jsonl"
    r = tirastore("merge", db, other, "--conflicts", listed, "--json")
    assert r.returncode == 0, r.stderr
    [rep] = json.loads(r.stdout)["sources"]
    assert (rep["records"], rep["added"], rep["same"], rep["merged"], rep["conflicts"], rep["replaced"]) == (33, 30, 1, 1, 1, 0)
    assert len(listed.read_text().splitlines()) == 1
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        assert s.count() == 37
        got = s.lookup("p07", "void p7() {}", "R(L0,comps=['c1'])")
        assert (got.hostname, got.creation_date, got.source_project) == (stamp.hostname, stamp.creation_date, "B")
        both = s.lookup("blur", SRC, "S(L0,L1,3,8,comps=['c1'])")
        assert both.execution_times == [0.5 / 3, 9.0]  # every sample of both
        runs = s.runs("blur", SRC, "S(L0,L1,3,8,comps=['c1'])")
        assert [r["times"] for r in runs] == [[0.5 / 3], [9.0]] and all(r["context"] for r in runs)
    again = json.loads(tirastore("merge", db, other, "--json").stdout)["sources"][0]
    assert (again["added"], again["same"], again["merged"], again["conflicts"]) == (0, 32, 0, 1)
    over = json.loads(tirastore("merge", db, other, "--overwrite", "--json").stdout)["sources"][0]
    assert over["replaced"] == 2
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        assert s.lookup("blur", SRC, "S(L0,L1,3,8,comps=['c1'])").execution_times == [9.0]
    # Another CPU: refused unless allowed; a missing source: nothing written, not created.
    xeon = tmp_path / "xeon.db"
    with TiraStore(xeon, cpu_model="Xeon") as s:
        s.record("q", "void q() {}", "R(L0,comps=['c1'])", True, [1.0])
    r = tirastore("merge", db, xeon)
    assert r.returncode == 1 and "not comparable" in r.stderr
    assert tirastore("merge", db, xeon, "--allow-cpu-mismatch").returncode == 0
    r = tirastore("merge", tmp_path / "new.db", tmp_path / "typo.db")
    assert r.returncode == 1 and not (tmp_path / "new.db").exists()
    # Into a new database: created on purpose, with both sources' records.
    r = tirastore("merge", tmp_path / "all.db", db, other, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["created"] is True


def test_check_and_repair(db, tmp_path):
    ok = tirastore("check", db, "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    rep = json.loads(ok.stdout)
    assert rep["ok"] and rep["tables"]["integrity"] == ["ok"] and rep["records"] == 7 and rep["schema_version"] == "2"
    # A node died holding the lock (an original worker's record, an hour old) and
    # a dead process of this host left its ticket file.
    lock = db.with_suffix(".db.lock")
    lock.write_text(json.dumps({"hostname": "node17", "pid": 4242, "timestamp": time.time() - 3600}))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ticket = db.parent / f".lock_{socket.gethostname()}_{dead.pid}_leftover"
    rec = json.loads(_go_record(os.getpid()))
    rec["pid"], rec["start_time"] = dead.pid, 1
    ticket.write_text(json.dumps(rec))
    r = tirastore("check", db, "--lock-timeout", "0.5")
    assert r.returncode == 1 and "abandoned" in r.stdout and "leftover tickets 1" in r.stdout, r.stdout + r.stderr
    assert lock.exists() and ticket.exists()
    r = tirastore("check", db, "--repair", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["lock"]["broken"] and len(rep["repaired"]) == 2
    assert not lock.exists() and not ticket.exists()
    # Orphan records and a result that is not JSON: reported, exit 1, not repaired.
    con = sqlite3.connect(db)
    con.execute("DELETE FROM programs WHERE program_name = 'sharpen'")
    con.execute("UPDATE records SET result_json = 'oops' WHERE rowid = (SELECT MIN(rowid) FROM records)")
    con.commit()
    con.close()
    rep = json.loads(tirastore("check", db, "--repair", "--json").stdout)
    assert not rep["ok"] and rep["tables"]["orphan_records"] == 1 and rep["tables"]["bad_results"] == 1
    assert tirastore("check", tmp_path / "typo.db").returncode == 1


def test_check_a_corrupt_database(tmp_path):
    db = tmp_path / "cache.db"
    with TiraStore(db, cpu_model=TEST_CPU) as s:
        s.record_many("p", SRC, [{"tiralib_schedule_string": f"S(L0,L1,{i},8,comps=['c1'])", "is_legal": True,
                                  "execution_times": [float(i)] * 50} for i in range(1, 400)])
    data = bytearray(db.read_bytes())
    page = 4096
    for off in range(3 * page, min(len(data), 8 * page)):  # some pages past the header: garbage
        data[off] = 0x5A
    db.write_bytes(bytes(data))
    r = tirastore("check", db)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "integrity" in (r.stdout + r.stderr)


def test_claims_lists_who_measures_what(db):
    r = tirastore("claims", db)
    assert r.returncode == 0 and "nobody is measuring" in r.stdout, r.stdout + r.stderr
    # A claimer that died holding its claim (SIGKILL), in a Slurm job.
    code = ("import os, sys, signal; from tirastore import TiraStore; "
            f"s = TiraStore(sys.argv[1], cpu_model={TEST_CPU!r}); "
            "s.lookup_or_claim('blur', 'void blur() {}', \"U(L0,4,comps=['c1'])\", lease=90); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    dead = subprocess.run([sys.executable, "-c", code, str(db)], env={**os.environ, "SLURM_JOB_ID": "4242"}, timeout=60)
    assert dead.returncode == -9
    rep = json.loads(tirastore("claims", db, "--json").stdout)
    assert len(rep) == 1
    (c,) = rep
    assert c["slurm_job_id"] == "4242" and c["lease"] == 90 and c["dead"] is True
    assert c["hostname"] == socket.gethostname() and c["tiralib_schedule_string"] == "U(L0,4,comps=['c1'])"
    text = tirastore("claims", db).stdout
    assert "4242" in text and "dead" in text and "90s" in text, text
    assert tirastore("claims", db.parent / "typo.db").returncode == 1


def _forged(text: str) -> list[str]:
    """Lines of text that a path with control characters forged: one that
    starts with the text after the path's newline, or any ANSI escape."""
    return [line for line in text.splitlines() if line.startswith("PROBLEM forged") or "\x1b" in line]


def test_control_characters_in_a_path_are_escaped_in_text_output(db_template, tmp_path):
    """A database path holding a newline and an ANSI escape (another user
    may name a shared database so) is shown escaped in check's, stats'
    and lock status's text and in an error: no line is forged, no colour
    is changed. Control: the same path printed as is forges a line."""
    evil = tmp_path / "a\nPROBLEM forged \x1b[31mred.db"
    shutil.copy(db_template, evil)
    control = subprocess.run([sys.executable, "-c", "import sys; print(sys.argv[1])", str(evil)],
                             capture_output=True, text=True, timeout=60)
    assert _forged(control.stdout), "the detector must catch a path printed as is"
    missing = tmp_path / "no\nPROBLEM forged \x1b[31mred.db"
    for args in (["check", evil], ["stats", evil], ["lock", "status", evil], ["import", evil, missing]):
        r = tirastore(*args)
        assert not _forged(r.stdout) and not _forged(r.stderr), (args, r.stdout, r.stderr)
        assert "\\nPROBLEM forged \\x1b[31mred.db" in r.stdout + r.stderr, (args, r.stdout, r.stderr)
