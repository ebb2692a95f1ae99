"""The examples in examples/ run cleanly and print what they promise.

Each example runs as a subprocess, the way a user runs it. The C++ harness
is compiled with g++ against build/libtirastore.so (skipped without g++ or
without the built library).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import tirastore
from conftest import import_dev_dependency
from tirastore import _native

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
BUILD_LIB = REPO / "build" / "libtirastore.so"


def run(args: list, timeout: float = 120, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    assert proc.returncode == 0, (
        f"{args} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    return proc


def lookup(db: Path, name: str, source: str, schedule: str):
    with tirastore.TiraStore(db) as store:
        return store.lookup(name, source, schedule)


# ---------------------------------------------------------------------------
# quickstart.py
# ---------------------------------------------------------------------------


def test_quickstart_temp_dir():
    out = run([sys.executable, EXAMPLES / "quickstart.py"]).stdout
    assert "record() wrote a new record: True" in out
    assert "is_legal        = True" in out
    assert "execution_times = [0.042, 0.039, 0.041]" in out
    assert "source_project  = autoscheduler-v2" in out
    assert "lookup() of an unmeasured schedule: None" in out
    assert "record_many() wrote 2 new record(s) of 3" in out
    assert "total_records    3" in out


def test_quickstart_db_argument(tmp_path):
    db = tmp_path / "sub" / "qs.db"
    run([sys.executable, EXAMPLES / "quickstart.py", db])
    assert db.exists()
    assert (tmp_path / "sub" / "dataset.json").exists()
    r = lookup(db, "blur", "void blur() { ... }", "S(L0,L1,4,8,comps=['c1'])")
    assert r is not None and r.execution_times == [0.042, 0.039, 0.041]
    # A second run on the same database finds everything already there.
    out = run([sys.executable, EXAMPLES / "quickstart.py", db]).stdout
    assert "record() wrote a new record: False" in out
    assert "record_many() wrote 0 new record(s)" in out


# ---------------------------------------------------------------------------
# notebook_ctypes.py
# ---------------------------------------------------------------------------


def test_notebook_ctypes(tmp_path):
    db = tmp_path / "nb.db"
    env = dict(os.environ, TIRASTORE_LIB=str(_native.library_path().resolve()))
    out = run([sys.executable, EXAMPLES / "notebook_ctypes.py", db], env=env).stdout
    assert f"libtirastore {tirastore.__version__} via ctypes" in out
    assert "record -> True" in out
    assert "execution_times  [1.25, 1.21, 1.23]" in out
    assert "source_project   notebook" in out
    assert "count -> 1" in out
    assert out.rstrip().endswith("closed")
    r = lookup(db, "matmul", "void matmul() { /* C[i][j] += A[i][k] * B[k][j] */ }",
               "T2(L0,L1,32,32,comps=['c1'])|U(L2,4,comps=['c1'])")
    assert r is not None and r.is_legal and r.source_project == "notebook"


def test_notebook_ctypes_bad_library(tmp_path):
    env = dict(os.environ, TIRASTORE_LIB=str(tmp_path / "missing.so"))
    proc = subprocess.run([sys.executable, str(EXAMPLES / "notebook_ctypes.py"), str(tmp_path / "x.db")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert "notebook_ctypes: cannot load" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------
# In a Jupyter kernel: notebook.ipynb, notebook_ctypes.py pasted into a cell,
# and README.md's ctypes snippet. Each runs in a fresh kernel of this Python
# (ipykernel), started by nbclient as Jupyter would, over Unix sockets in the
# test's own directory (no TCP port to share with anything else).
# ---------------------------------------------------------------------------


def run_in_kernel(cells: list[str] | None, cwd: Path, env: dict, notebook: Path | None = None,
                  allow_errors: bool = False) -> list[str]:
    """Execute a notebook (or *cells* as one) in a new kernel in *cwd*; return each code cell's output text.

    A cell that raises fails the test with the kernel's traceback, unless *allow_errors*.
    """
    nbformat = import_dev_dependency("nbformat")
    nbclient = import_dev_dependency("nbclient")
    from jupyter_client.manager import AsyncKernelManager

    if notebook is not None:
        nb = nbformat.read(notebook, as_version=4)
    else:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells or []])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    # A socket path must fit in 107 bytes: a short directory of the run's TMPDIR.
    sockets = tempfile.mkdtemp(prefix="nb-")
    km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "k"))
    client = nbclient.NotebookClient(nb, km=km, timeout=120, startup_timeout=120, allow_errors=allow_errors,
                                     resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute(env=env)
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail(f"a cell raised in the kernel:\n{e}")
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        parts = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                parts.append(o["text"])
            elif o.get("output_type") == "error":
                parts.append(f"{o['ename']}: {o['evalue']}")
            elif "text/plain" in o.get("data", {}):
                parts.append(o["data"]["text/plain"])
        texts.append("".join(parts))
    return texts


def kernel_env(tmp_path: Path, with_lib: bool = True) -> dict:
    (tmp_path / "home").mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(tmp_path / "home"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTER_PLATFORM_DIRS="1")
    env.pop("TIRASTORE_LIB", None)
    if with_lib:
        env["TIRASTORE_LIB"] = str(_native.library_path().resolve())
    return env


def test_notebook_runs_in_a_fresh_kernel(tmp_path):
    """examples/notebook.ipynb, as is, from its own directory: it finds the checkout's library itself."""
    lib = REPO / "python" / "tirastore" / "libtirastore.so"
    if not lib.is_file() and not BUILD_LIB.is_file():
        pytest.skip("the library is not built in this checkout (./build.sh)")
    # The kernel gets no TIRASTORE_LIB: the notebook's own search is under test.
    outputs = run_in_kernel(None, EXAMPLES, kernel_env(tmp_path, with_lib=False), notebook=EXAMPLES / "notebook.ipynb")
    text = "\n".join(outputs)
    assert f"libtirastore {tirastore.__version__}" in text
    assert "record -> True" in text
    assert "execution_times  [1.25, 1.21, 1.23]" in text
    assert "source_project   notebook" in text
    assert "count -> 1" in text
    assert outputs[-1].strip() == "closed"
    # The notebook wrote into a temporary directory, nothing beside itself.
    assert not list(EXAMPLES.glob("*.db*"))


def notebook_script_cells(hide_kernel: bool) -> list[str]:
    src = (EXAMPLES / "notebook_ctypes.py").read_text()
    if not hide_kernel:
        return [src]
    # The negative control: the script cannot tell it runs in a kernel, so it
    # reads the kernel's command line (["...ipykernel_launcher.py", "-f", ...]).
    return ["import sys\n_ipk = sys.modules.pop('ipykernel')", src, "sys.modules['ipykernel'] = _ipk"]


@pytest.mark.parametrize("hide_kernel", [False, True], ids=["pasted", "negative-control-argv-read"])
def test_notebook_ctypes_pasted_into_a_cell(tmp_path, hide_kernel):
    """The script pasted into a cell: no __file__, and the kernel's argv is not a database path."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    cells = notebook_script_cells(hide_kernel)
    if not hide_kernel:
        (out,) = run_in_kernel(cells, cwd, kernel_env(tmp_path))
        assert "record -> True" in out and "count -> 1" in out and out.rstrip().endswith("closed")
        assert "SystemExit" not in out
        assert list(cwd.iterdir()) == [], "the pasted script wrote into the kernel's directory"
        return
    run_in_kernel(cells, cwd, kernel_env(tmp_path), allow_errors=True)
    # What the guard prevents: a database named after the kernel's "-f" flag.
    assert (cwd / "-f").exists(), sorted(p.name for p in cwd.iterdir())


def readme_ctypes_snippet() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Python with ctypes only"):]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "no ```python block under README.md's '### Python with ctypes only'"
    return m.group(1)


def test_readme_ctypes_snippet_runs_in_a_kernel(tmp_path):
    """README.md's ctypes snippet, pasted into a cell as a reader would."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    (out,) = run_in_kernel([readme_ctypes_snippet()], cwd, kernel_env(tmp_path))
    assert "'is_legal': True" in out and "'execution_times': [0.5]" in out, out
    with tirastore.TiraStore(cwd / "cache.db") as store:
        r = store.lookup("blur", "void blur(){}", "U(L0,4,comps=['c1'])")
    assert r is not None and r.source_project == "nb"


def test_readme_lists_every_subcommand():
    """The README's `tirastore` block names every subcommand, one line each,
    and each action of a group (`lock status`, `config get`, ...)."""
    from tirastore import cli

    def commands(parser: argparse.ArgumentParser) -> dict:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return subs[0].choices if subs else {}

    expected = []
    for name, p in commands(cli._parser()).items():
        actions = commands(p)
        expected += [f"{name} {a}" for a in actions] if actions else [name]
    text = (REPO / "README.md").read_text()
    section = text[text.index("## The `tirastore` command"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    listed = []
    for line in block.splitlines():
        if line.startswith("tirastore "):
            words = line.split()
            listed.append(" ".join(words[1:3]) if " ".join(words[1:3]) in expected else words[1])
    assert sorted(set(listed)) == sorted(expected), (listed, sorted(expected))
    assert len(listed) == len(set(listed)), "a subcommand listed twice"


# ---------------------------------------------------------------------------
# demo.py
# ---------------------------------------------------------------------------


def run_demo(db: Path, *extra: str) -> dict:
    out = run([sys.executable, EXAMPLES / "demo.py", "--db", db, "--workers", "2", "--schedules", "10",
               "--quiet", "--json", *extra], timeout=180).stdout
    return json.loads(out)


def test_demo_two_passes(tmp_path):
    db = tmp_path / "demo" / "cache.db"
    summary = run_demo(db, "--passes", "2")
    tasks = summary["tasks"]
    first, second = summary["passes"]
    assert tasks == 4 * 10
    # Pass 1 on a new database: everything missed once was written once.
    assert first["misses"] >= tasks
    assert first["written"] == tasks == first["db_records"]
    assert first["written"] + first["already"] == first["misses"]
    # Pass 2: all hits.
    assert second["misses"] == 0
    assert second["written"] == 0
    assert second["hits"] == second["lookups"] == first["lookups"]
    assert second["db_records"] == tasks
    assert second["saved_s"] > 0
    with tirastore.TiraStore(db) as store:
        stats = store.stats()
    assert stats["total_records"] == tasks
    assert stats["source_projects"] == ["demo-autoscheduler"]
    assert 0 < stats["illegal_records"] < tasks


def test_demo_rerun_is_all_hits_and_table_output(tmp_path):
    db = tmp_path / "cache.db"
    run_demo(db, "--passes", "1")
    out = run([sys.executable, EXAMPLES / "demo.py", "--db", db, "--workers", "2", "--schedules", "10",
               "--passes", "1"], timeout=180)
    # No TTY here: progress comes as whole lines on stderr, never "\r".
    assert "\r" not in out.stderr
    assert "pass 1/1" in out.stderr
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["pass", "lookups"])
    row = lines[header + 2].split()
    assert row[0] == "1"
    lookups, hits, misses, written = map(int, row[1:5])
    assert (hits, misses, written) == (lookups, 0, 0)
    # It ends naming the next commands, runnable as printed.
    nxt = lines[lines.index("Next, try:") + 1:]
    commands = [shlex.split(line.split("  #")[0]) for line in nxt]
    assert [c[-2] for c in commands[:2]] == ["stats", "dashboard"] and commands[2][-1] == "--help"
    assert all(c[-1] == str(db) for c in commands[:2])
    stats = run(commands[0], timeout=60).stdout
    assert "records" in stats


def test_demo_bad_arguments(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "demo.py"), "--db", str(tmp_path / "x.db"),
                           "--workers", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--workers must be at least 1" in proc.stderr


# ---------------------------------------------------------------------------
# harness.cpp
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        pytest.skip("no C++ compiler (g++)")
    if not BUILD_LIB.exists():
        pytest.skip(f"{BUILD_LIB} is not built (./build.sh)")
    exe = tmp_path_factory.mktemp("harness") / "harness"
    proc = subprocess.run(
        [cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{REPO / 'include'}", str(EXAMPLES / "harness.cpp"),
         f"-L{BUILD_LIB.parent}", "-ltirastore", f"-Wl,-rpath,{BUILD_LIB.parent}", "-o", str(exe)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"g++ failed:\n{proc.stderr}"
    return exe


def test_harness(harness, tmp_path):
    db = tmp_path / "harness.db"
    out = run([harness, db]).stdout.splitlines()
    assert out[0] == f"tirastore {tirastore.__version__}"
    assert out[1].startswith("open:   {") and '"source_project":"cpp-harness"' in out[1]
    assert out[2] == "lookup: null"
    assert out[3] == "record: true"
    found = json.loads(out[4].removeprefix("lookup: "))
    assert found["is_legal"] is True
    assert found["execution_times"] == [0.042, 0.039, 0.041]
    assert found["schedule"] == "S(L0,L1,4,8,comps=['c1'])"
    assert found["source_project"] == "cpp-harness"
    assert out[5] == "count:  1"
    assert out[6] == "closed"
    # Python sees the C++ client's record (same key derivation).
    r = lookup(db, "blur", "void blur() {\n    var i(\"i\", 0, 1024), j(\"j\", 0, 1024);\n"
                           "    computation c1(\"c1\", {i, j}, in(i, j) + in(i, j + 1));\n}\n",
               "S(L0,L1,4,8,comps=['c1'])")
    assert r is not None and r.source_project == "cpp-harness"
    # A second run: the record is already there.
    out = run([harness, db]).stdout.splitlines()
    assert out[2].startswith("lookup: {")
    assert out[3] == "record: false (already stored)"


def test_harness_reports_errors(harness, tmp_path):
    # The database's directory cannot be created (a file is in the way):
    # open fails, exit status 1, the library's message on stderr.
    (tmp_path / "file").write_text("not a directory")
    proc = subprocess.run([str(harness), str(tmp_path / "file" / "cache.db")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert "harness: tirastore_open(" in proc.stderr and "failed with status" in proc.stderr
    proc = subprocess.run([str(harness)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage:" in proc.stderr


# ---------------------------------------------------------------------------
# autotune_cache.py
# ---------------------------------------------------------------------------


def run_autotune(cwd: Path, workers: int) -> tuple[int, int, int]:
    """Run the example in *cwd* (default cache path); return (tuned, lost, avoided)."""
    out = run([sys.executable, EXAMPLES / "autotune_cache.py", "--workers", workers], cwd=cwd).stdout
    last = out.rstrip().splitlines()[-1]
    m = re.match(rf"{workers} workers, (\d+) signatures: (\d+) tuned \((\d+) of them lost the race to store\), "
                 r"(\d+) avoided; ", last)
    assert m, out
    sigs, tuned, lost, avoided = map(int, m.groups())
    assert sigs == 4 and tuned + avoided == workers * sigs, out
    return tuned, lost, avoided


def test_autotune_cache_shares_configs(tmp_path, monkeypatch):
    # The example as a module, for its signatures and config class (a
    # dataclass's module must be in sys.modules while it is defined).
    spec = importlib.util.spec_from_file_location("autotune_cache", EXAMPLES / "autotune_cache.py")
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "autotune_cache", example)
    spec.loader.exec_module(example)
    keys = sorted(example.call_key(s) for s in example.SIGNATURES)

    tuned, lost, _ = run_autotune(tmp_path, 2)
    # Every signature tuned at least once, and exactly one put per signature won.
    assert tuned >= len(keys) and tuned - lost == len(keys)
    # The default path is a .json one: the entries live in the database beside it.
    json_path = tmp_path / "tirastore-demo" / "autotune.json"
    assert json_path.with_name("persistent-cache.tirastore.db").exists() and not json_path.exists()
    with tirastore.PersistentCache("blocked_matmul", path=json_path, cfg_type=example.BlockConfig) as cache:
        entries = cache.entries()
        assert sorted(e.call_key for e in entries) == keys  # one entry per signature
        assert {(e.device, e.op_id) for e in entries} == {(example.DEVICE, example.OP_ID)}
        first = {e.call_key: e for e in entries}
        for e in entries:
            assert set(e.value) == {"block_i", "block_k", "best_ms"}
            cfg = cache.get(e.device, e.op_id, e.call_key)
            assert isinstance(cfg, example.BlockConfig) and cfg.block_i == e.value["block_i"]

    # A second run on the same cache tunes nothing and changes nothing.
    assert run_autotune(tmp_path, 2) == (0, 0, 2 * len(keys))
    with tirastore.PersistentCache("blocked_matmul", path=json_path) as cache:
        assert {e.call_key: e for e in cache.entries()} == first


def test_autotune_cache_bad_arguments(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "autotune_cache.py"), "--workers", "0"], check=False,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert "--workers must be at least 1" in proc.stderr
    assert not (tmp_path / "tirastore-demo").exists()


# ---------------------------------------------------------------------------
# tiralib_worker.py
# ---------------------------------------------------------------------------


def _tiralib_example():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import tiralib_standin
        import tiralib_worker
    finally:
        sys.path.remove(str(EXAMPLES))
    return tiralib_standin, tiralib_worker


def test_tiralib_worker_measures_each_schedule_once(tmp_path):
    standin, worker = _tiralib_example()
    program = standin.TiramisuProgram.from_name("function_example")
    legal = 0
    for actions in worker.SPACE:
        s = standin.Schedule(program)
        s.add_optimizations(actions)
        legal += s.is_legal() if actions else 1
    assert 0 < legal < len(worker.SPACE)  # the space has illegal schedules too
    db = tmp_path / "tw.db"
    out = run([sys.executable, EXAMPLES / "tiralib_worker.py", "--db", db, "--workers", "3"], cwd=tmp_path).stdout
    assert f"{legal} measurements by 3 workers of {len(worker.SPACE)} schedules" in out, out
    again = run([sys.executable, EXAMPLES / "tiralib_worker.py", "--db", db, "--workers", "2"], cwd=tmp_path).stdout
    assert f"0 measurements by 2 workers of {len(worker.SPACE)} schedules" in again, again
    with tirastore.TiraStore(db) as store:
        assert store.stats()["total_records"] == len(worker.SPACE)


def test_tiralib_worker_records_a_budget_that_ran_out_as_a_timeout(tmp_path):
    db = tmp_path / "tw.db"
    out = run([sys.executable, EXAMPLES / "tiralib_worker.py", "--db", db, "--workers", "2", "--budget-ms", "20"],
              cwd=tmp_path).stdout
    assert "timed out" in out
    r = run([sys.executable, "-m", "tirastore", "stats", db]).stdout
    assert re.search(r"censored +[1-9]\d* timed out", r), r
