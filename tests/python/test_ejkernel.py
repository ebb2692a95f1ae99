"""tirastore.PersistentCache in the released ejkernel, proven with ejkernel itself.

Every case runs real ejkernel (the PyPI release, with CPU jax, in the venv
that `make ejkernel-venv` builds: tests/python/ejkernel_env.py) in worker
processes (tests/python/ejkernel_worker.py) that autotune flash_attention's
forward pass on CPU, each on shapes of its own, with HOME and
EJKERNEL_PERSISTENT_CACHE_DIR in a temporary directory. The workers wait at
a barrier after `import ejkernel` (every cache built) and before tuning, so
that ejkernel's own class, which reads its JSON file once at construction
and rewrites it whole on every put, loses the puts of all but one worker
for certain, not by chance of timing: that is the negative control of the
eight-tuner case.

The eight-tuner run (sixteen ejkernel processes, and eight more for its
negative control) is in the soak tier (`make soak`); the fast tier runs the
two-process case of ejkernel's default JSON location.

The tests FAIL, not skip, when the venv is missing: `make test` and
`make soak` build it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest

import ejkernel_env

HERE = Path(__file__).resolve().parent
WORKER = HERE / "ejkernel_worker.py"
OURS = "tirastore.persistent_cache.PersistentCache"
THEIRS = "ejkernel.ops.config.persistent.PersistentCache"
OPNAME = "flash-attn"  # the flash_attention module's cache
DEFAULT_DIR = "ejkernel-presistent-cache"  # ejkernel's spelling, under ~

NWORKERS = 8
# Worker i's shapes [batch, seq, heads, head_dim]: the batch tells the
# workers apart, so that all 16 call keys differ.
SHAPES = [[[i + 1, 64, 1, 32], [i + 1, 128, 2, 64]] for i in range(NWORKERS)]
WORKER_TIMEOUT = 300.0

Coords = tuple[str, str, str]


@pytest.fixture(scope="module")
def venv_python() -> Path:
    why = ejkernel_env.missing_reason()
    if why:
        pytest.fail(why, pytrace=False)
    return ejkernel_env.python(ejkernel_env.venv_dir())


def worker_env(home: Path, cache_dir: Optional[Path]) -> dict[str, str]:
    """The workers' environment: this tree's package, the HOME and cache
    directory of the case, CPU jax."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EJKERNEL_", "PYTHON", "VIRTUAL_ENV", "JAX_", "XLA_"))}
    env.update(HOME=str(home), PYTHONPATH=str(HERE.parents[1] / "python"), JAX_PLATFORMS="cpu",
               PYTHONDONTWRITEBYTECODE="1")
    if cache_dir is not None:
        env["EJKERNEL_PERSISTENT_CACHE_DIR"] = str(cache_dir)
    return env


def run_workers(python: Path, work: Path, env: dict[str, str], patch: bool,
                shapes: list[list[list[int]]]) -> list[dict[str, Any]]:
    """Run one worker per entry of shapes at once, behind a barrier; their
    reports in order. A worker that fails stops the others and the test."""
    barrier = work / f"barrier-{time.monotonic_ns()}"
    procs = []
    for sh in shapes:
        spec = {"patch": patch, "shapes": sh, "barrier": {"dir": str(barrier), "n": len(shapes)}}
        procs.append(subprocess.Popen([str(python), str(WORKER), json.dumps(spec)], cwd=work, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, umask=0o022))
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT
        while any(p.poll() is None for p in procs):
            bad = [p for p in procs if p.poll() not in (None, 0)]
            if bad or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    reports = []
    for i, p in enumerate(procs):
        out, err = p.communicate()
        if p.returncode != 0:
            pytest.fail(f"worker {i} (patch={patch}) exited {p.returncode}:\n{err[-3000:]}", pytrace=False)
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def chosen(report: dict[str, Any]) -> dict[Coords, Any]:
    return {(d, o, c): cfg for d, o, c, cfg in report["chosen"]}


def all_chosen(reports: list[dict[str, Any]]) -> dict[Coords, Any]:
    out: dict[Coords, Any] = {}
    for r in reports:
        out.update(chosen(r))
    return out


def tuned(reports: list[dict[str, Any]], cls: str, nkeys: int) -> dict[Coords, Any]:
    """Check that every worker used class cls and tuned (timed) its own
    nkeys call keys, all different; the configs chosen, by coordinates."""
    for i, r in enumerate(reports):
        assert r["cache_class"] == cls, f"worker {i}: {r['cache_class']}"
        assert len(r["chosen"]) == nkeys, f"worker {i} chose {len(r['chosen'])} configs: {r['chosen']}"
        assert r["measure_calls"] >= nkeys, f"worker {i} did not autotune: {r}"
    union = all_chosen(reports)
    assert len(union) == nkeys * len(reports), "the workers' call keys are not all different"
    return union


def json_keys(path: Path) -> set[str]:
    return set(json.loads(path.read_text()))


def is_sqlite(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def check_files(cache_dir: Path, legacy: tuple[str, ...] = ()) -> None:
    """One database in the cache directory (with at most its lock and
    SQLite's transient files beside it, and the legacy JSON files that were
    there), and nothing more open than what ejkernel's own class creates
    under umask 022: files 0600 (tempfile's), directories 0755. Every
    problem is listed, not only the first."""
    assert cache_dir.is_dir(), f"{cache_dir} was not created"
    names = sorted(p.name for p in cache_dir.iterdir())
    problems = []
    dbs = [n for n in names if is_sqlite(cache_dir / n)]
    if len(dbs) != 1:
        problems.append(f"{len(dbs)} databases, expected one: {dbs}")
    extra = set(names) - set(legacy) - {f"{db}{suffix}" for db in dbs for suffix in ("", ".lock", "-journal", "-wal", "-shm")}
    if extra:
        problems.append(f"other files than a database's: {sorted(extra)}")
    modes: dict[str, list[str]] = {}
    for p in [cache_dir, *cache_dir.rglob("*")]:
        if p.name in legacy:
            continue
        mode = stat.S_IMODE(p.lstat().st_mode)
        limit = 0o755 if p.is_dir() else 0o600
        if mode & ~limit:
            modes.setdefault(f"{mode:04o} (at most {limit:04o})", []).append(p.name)
    for mode, who in sorted(modes.items()):
        problems.append(f"mode {mode}: {len(who)} entries: {who[:5]}{' ...' if len(who) > 5 else ''}")
    assert not problems, f"in {cache_dir}:\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------------------
# Eight tuners at once, with our class (EJKERNEL_PERSISTENT_CACHE_DIR)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eight_ours(venv_python, tmp_path_factory):
    """Eight patched workers tune at once, then eight more run on the same
    shapes, each on another worker's (so that every hit crosses processes)."""
    work = tmp_path_factory.mktemp("ejk-ours")
    home, cache_dir = work / "home", work / "shared-cache"
    home.mkdir()
    env = worker_env(home, cache_dir)
    first = run_workers(venv_python, work, env, True, SHAPES)
    rotated = SHAPES[1:] + SHAPES[:1]
    second = run_workers(venv_python, work, env, True, rotated)
    return {"home": home, "cache_dir": cache_dir, "first": first, "second": second}


def read_back(home: Path, cache_dir: Path, keys, monkeypatch) -> dict[Coords, Any]:
    """The configs stored for keys, read in this process through
    tirastore.PersistentCache built as ejkernel builds it (missing ones
    left out)."""
    import tirastore

    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EJKERNEL_PERSISTENT_CACHE_DIR", str(cache_dir))
    cache = tirastore.PersistentCache(OPNAME)
    try:
        got = {k: cache.get(*k) for k in keys}
    finally:
        cache.close()
    return {k: vars(v) for k, v in got.items() if v is not None}


@pytest.mark.soak
def test_eight_tuners_keep_every_config(eight_ours, monkeypatch):
    union = tuned(eight_ours["first"], OURS, 2)
    stored = read_back(eight_ours["home"], eight_ours["cache_dir"], union, monkeypatch)
    lost = sorted(set(union) - set(stored))
    assert not lost, f"{len(lost)} of {len(union)} tuned configs lost: {lost}"
    assert stored == union


@pytest.mark.soak
def test_second_run_finds_every_config(eight_ours):
    first, second = eight_ours["first"], eight_ours["second"]
    union = all_chosen(first)
    for i, r in enumerate(second):
        assert r["cache_class"] == OURS
        assert r["measure_calls"] == 0, f"worker {i} of the second run timed kernels again: {r['measure_calls']} calls"
        assert chosen(r) == chosen(first[(i + 1) % NWORKERS]), f"worker {i}: other configs than the first run's"
    assert all_chosen(second) == union


@pytest.mark.soak
def test_eight_tuners_files(eight_ours):
    check_files(eight_ours["cache_dir"])
    home_default = eight_ours["home"] / DEFAULT_DIR
    assert not home_default.exists(), (
        f"EJKERNEL_PERSISTENT_CACHE_DIR was set, yet {home_default} holds {sorted(os.listdir(home_default))}")


# ---------------------------------------------------------------------------
# The negative control: ejkernel's own class loses puts
# ---------------------------------------------------------------------------


@pytest.mark.soak
def test_ejkernels_own_class_loses_puts(venv_python, tmp_path, eight_ours, monkeypatch):
    home, cache_dir = tmp_path / "home", tmp_path / "shared-cache"
    home.mkdir()
    reports = run_workers(venv_python, tmp_path, worker_env(home, cache_dir), False, SHAPES)
    union = tuned(reports, THEIRS, 2)
    on_disk = json_keys(cache_dir / f"{OPNAME}.json")
    tuned_keys = {"|".join(k) for k in union}
    assert on_disk <= tuned_keys
    assert len(on_disk) < len(tuned_keys), "ejkernel's own class kept every put: the control does not control"
    # The same workload with our class kept all of them.
    ours = all_chosen(eight_ours["first"])
    kept = read_back(eight_ours["home"], eight_ours["cache_dir"], ours, monkeypatch)
    assert len(kept) == len(ours) == len(tuned_keys)


@pytest.mark.soak
def test_ejkernels_class_reads_our_json_export(venv_python, tmp_path, eight_ours, monkeypatch):
    """The other way: ejkernel's own class, unpatched, reads a JSON file that
    our cache exported (export_json) and times nothing."""
    import tirastore

    monkeypatch.setenv("HOME", str(eight_ours["home"]))
    monkeypatch.setenv("EJKERNEL_PERSISTENT_CACHE_DIR", str(eight_ours["cache_dir"]))
    exported = tmp_path / "exported"
    exported.mkdir()
    cache = tirastore.PersistentCache(OPNAME)
    try:
        cache.export_json(exported / f"{OPNAME}.json")
    finally:
        cache.close()
    # A shape of each of two workers of the eight (a report lists its
    # configs in the order of its calls).
    first = eight_ours["first"]
    shapes = [SHAPES[0][0], SHAPES[5][1]]
    want = dict([list(chosen(first[0]).items())[0], list(chosen(first[5]).items())[1]])
    home = tmp_path / "home"
    home.mkdir()
    (r,) = run_workers(venv_python, tmp_path, worker_env(home, exported), False, [shapes])
    assert r["cache_class"] == THEIRS
    assert r["measure_calls"] == 0, f"ejkernel's class timed kernels again: {r['measure_calls']} calls"
    assert chosen(r) == want


# ---------------------------------------------------------------------------
# A JSON cache of ejkernel's own class, in the default location (~)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home_json(venv_python, tmp_path_factory):
    """One worker with ejkernel's own class tunes into ~/ejkernel-presistent-cache
    (no EJKERNEL_PERSISTENT_CACHE_DIR), then one patched worker runs the same shapes."""
    work = tmp_path_factory.mktemp("ejk-home")
    home = work / "home"
    home.mkdir()
    env = worker_env(home, None)
    cache_dir = home / DEFAULT_DIR
    legacy = cache_dir / f"{OPNAME}.json"
    (theirs,) = run_workers(venv_python, work, env, False, [SHAPES[0]])
    before = legacy.read_bytes() if legacy.exists() else None
    (ours,) = run_workers(venv_python, work, env, True, [SHAPES[0]])
    return {"home": home, "cache_dir": cache_dir, "legacy": legacy, "theirs": theirs, "ours": ours, "before": before}


def test_json_cache_of_ejkernels_class_is_picked_up(home_json):
    theirs, ours, legacy = home_json["theirs"], home_json["ours"], home_json["legacy"]
    configs = tuned([theirs], THEIRS, 2)
    assert theirs["cache_path"] == str(legacy)
    assert home_json["before"] is not None and json_keys(legacy) == {"|".join(k) for k in configs}
    assert ours["cache_class"] == OURS
    assert ours["measure_calls"] == 0, f"the patched worker timed kernels again: {ours['measure_calls']} calls"
    assert chosen(ours) == configs
    assert legacy.read_bytes() == home_json["before"], "the JSON file of ejkernel's class was rewritten"


def test_home_files(home_json):
    check_files(home_json["cache_dir"], legacy=(home_json["legacy"].name,))
