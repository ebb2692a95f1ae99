"""tirastore.PersistentCache against the released ejkernel's class, as oracle.

The class ejkernel users install (``ejkernel/ops/config/persistent.py`` of
the release in the project's ejkernel venv, loaded alone: it needs only the
standard library) and ours get the same inputs: every constructor form and
argument ejkernel's own code uses, the environment, the fallbacks, ``~``,
truth value and return types. Ours must reach the same place and answer
the same, except that no put is lost; the two read each other's JSON files.
Also here: ours is lazy (constructing creates and opens nothing; a get of
a missing database creates nothing; the first put creates) and private by
default, and 39 operations make one database.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import warnings
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tirastore import PersistentCache, TiraStoreWarning

REPO = Path(__file__).resolve().parents[2]
DB_NAME = "persistent-cache.tirastore.db"

# Every operation name ejkernel 0.0.80.x gives a cache at import (its
# modules/operations/*.py), and the path form of modules/base.py.
EJKERNEL_OPNAMES = [
    "decode-attention", "all-gather-matmul", "page-attention", "multi_latent_ragged_page_attention",
    "unified-attention", "rwkv7", "rwkv7_mul", "state_space_v1", "grouped-matmul", "mla",
    "ragged-page-attention", "quantized-matmul", "ragged_page_attention_v3_turboquant", "blocksparse",
    "kernel_delta_attention", "gated_delta_rule", "reduce-scatter-matmul", "rwkv4", "dsa", "pooling",
    "ragged_gated_delta_rule", "ragged_page_attention_v2_turboquant", "nsa", "prefill-page-attention",
    "recurrent", "gla", "rwkv6", "ragged-page-attention-v3", "flash-attn", "state_space_v2",
    "ragged-decode-attention", "attention", "ring-attention", "fused_cross_entropy", "fused_kl_divergence",
    "lightning-attention",
]


def released_module_path() -> Path:
    """ejkernel's persistent.py in the project's ejkernel venv (``make ejkernel-venv``)."""
    import ejkernel_env  # noqa: PLC0415

    found = sorted(ejkernel_env.venv_dir().glob("lib/python*/site-packages/ejkernel/ops/config/persistent.py"))
    assert found, f"no ejkernel in {ejkernel_env.venv_dir()}: run {ejkernel_env.MAKE_TARGET}"
    return found[0]


@pytest.fixture(scope="module")
def Released():
    path = released_module_path()
    spec = importlib.util.spec_from_file_location("released_persistent", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.PersistentCache


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A home, a working directory and a temporary directory of the test's own."""
    home, work, tmp = tmp_path / "home", tmp_path / "work", tmp_path / "tmp"
    for d in (home, work, tmp):
        d.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("EJKERNEL_PERSISTENT_CACHE_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.chdir(work)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    return tmp_path


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@dataclass
class Cfg:
    block: int
    warps: int


def both_put_and_get(Released, args: tuple, kwargs: dict[str, Any], coords=("cpu|cpu", "op@v1", "k")) -> tuple:
    """Construct both classes on the same arguments, put one value with
    each, and return (released, ours) with the places they reached."""
    rel = Released(*args, **kwargs)
    rel.put(*coords, {"block": 64, "warps": 4})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TiraStoreWarning)
        ours = PersistentCache(*args, **kwargs)
        ours.put(*coords, {"block": 64, "warps": 4})
    return rel, ours


# -- places -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, args, kwargs",
    [
        (None, ("flash-attn",), {"cfg_type": Cfg}),  # ejkernel's operations
        (None, ("decode-attention",), {}),
        (None, ("{abs}/kernel_cache",), {}),  # modules/base.py: a path as the opname
        (None, ("sub/dir/op",), {}),
        ("{root}/shared-cache", ("flash-attn",), {}),
        ("~/env-cache", ("flash-attn",), {}),
        ("", ("flash-attn",), {}),  # set but empty: the working directory
        (None, ("x",), {"path": "~/tuning/matmul.json"}),
        (None, ("x",), {"path": "{abs}/tuning/mm.json"}),
        (None, ("x",), {"path": "rel/t.json"}),
    ],
)
def test_same_place_as_the_released_class(Released, world, monkeypatch, env, args, kwargs):
    fill = {"abs": str(world / "abs"), "root": str(world)}
    args = tuple(a.format(**fill) for a in args)
    kwargs = {k: (v.format(**fill) if isinstance(v, str) else v) for k, v in kwargs.items()}
    if env is not None:
        monkeypatch.setenv("EJKERNEL_PERSISTENT_CACHE_DIR", env.format(**fill))
    rel, ours = both_put_and_get(Released, args, kwargs)
    assert ours.path == rel.path
    json_file = Path(rel.path).absolute()
    assert json_file.is_file()
    assert ours.db_path == json_file.parent / DB_NAME
    assert ours.db_path.is_file()
    assert ours.namespace == json_file.name[: -len(".json")]
    # Entries are visible to the other class's files: ejkernel's JSON file
    # is imported by a new cache of ours, ours exported is read by ejkernel's.
    rel.put("cpu|cpu", "op@v1", "from-ejkernel", [1, 2])
    fresh = PersistentCache(*args, **{k: v for k, v in kwargs.items() if k != "cfg_type"})
    assert fresh.get("cpu|cpu", "op@v1", "k") == Namespace(block=64, warps=4)
    out = ours.export_json(json_file.parent / "exported.json")
    assert Released("x", path=str(out)).get("cpu|cpu", "op@v1", "k") == Namespace(block=64, warps=4)
    ours.close()
    fresh.close()


def test_fallbacks_as_the_released_class_and_no_put_lost(Released, world, monkeypatch):
    blocker = world / "file"
    blocker.write_text("")
    monkeypatch.setenv("HOME", str(blocker / "home"))  # ~ cannot be made: the working directory's
    rel, ours = both_put_and_get(Released, ("flash-attn",), {})
    assert ours.path == rel.path == str(world / "work" / ".ejkernel-presistent-cache" / "flash-attn.json")
    (world / "work" / ".ejkernel-presistent-cache" / "flash-attn.json").unlink()
    ours.close()
    (world / "work" / ".ejkernel-presistent-cache" / DB_NAME).unlink()
    for p in (world / "work" / ".ejkernel-presistent-cache").iterdir():
        p.unlink()
    (world / "work" / ".ejkernel-presistent-cache").rmdir()
    (world / "work" / ".ejkernel-presistent-cache").write_text("")  # then the temporary directory's
    rel, ours = both_put_and_get(Released, ("flash-attn",), {})
    assert ours.path == rel.path == str(world / "tmp" / "ejkernel-presistent-cache" / "flash-attn.json")
    ours.close()
    for p in (world / "tmp" / "ejkernel-presistent-cache").iterdir():
        p.unlink()
    (world / "tmp" / "ejkernel-presistent-cache").rmdir()
    (world / "tmp" / "ejkernel-presistent-cache").write_text("")  # then nowhere
    rel = Released("flash-attn")
    rel.put("d", "o", "k", {"a": 1})
    assert rel.get("d", "o", "k") is None  # ejkernel's class keeps nothing
    ours = PersistentCache("flash-attn")
    with pytest.warns(TiraStoreWarning, match="no directory can hold the cache"):
        assert ours.put("d", "o", "k", {"a": 1}) is True
    assert ours.get("d", "o", "k") == Namespace(a=1)  # ours keeps it in the process
    assert bool(ours) and len(ours) == 1


def test_the_constructor_never_raises(Released, world, monkeypatch):
    """ejkernel builds its caches while it is imported: a constructor that
    raises breaks `import ejkernel`. Ours never raises for a place (the
    released one does for an unknown ~user); a wrong type of path is a
    TypeError in both."""
    blocker = world / "file"
    blocker.write_text("")
    for env in (str(blocker / "x"), "~nosuchuser-here/x", "/proc/1/nope"):
        monkeypatch.setenv("EJKERNEL_PERSISTENT_CACHE_DIR", env)
        c = PersistentCache("op")  # constructs, whatever the place
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            assert c.get("d", "o", "k") is None  # the first use falls back, as ejkernel's class does
        c.close()
    monkeypatch.setenv("EJKERNEL_PERSISTENT_CACHE_DIR", "~nosuchuser-here/x")
    with pytest.raises(RuntimeError):
        Released("op")
    for bad in (b"bytes.json", 3.5):
        with pytest.raises(TypeError):
            Released("op", path=bad)
        with pytest.raises(TypeError):
            PersistentCache("op", path=bad)
    monkeypatch.delenv("EJKERNEL_PERSISTENT_CACHE_DIR")
    assert PersistentCache(42).path == Released(42).path  # as f"{opname}.json"


# -- truth value and return types ----------------------------------------------------


def test_truth_value_and_return_types_match(Released, world):
    def loader(v):
        return {"loaded": v} if isinstance(v, int) else v

    for kwargs in ({}, {"cfg_type": Cfg}, {"loader": loader}, {"loader": loader, "cfg_type": None}):
        rel = Released("types", **kwargs)
        ours = PersistentCache("types", **kwargs)
        assert bool(rel) is True and bool(ours) is True  # an empty cache is true too
        assert ours.get("d", "o", "missing") is None and rel.get("d", "o", "missing") is None
        assert not (world / "home" / "ejkernel-presistent-cache" / DB_NAME).exists()
        values = {"dict": {"block": 1, "warps": 2}, "list": [1, 2], "int": 7, "str": "s", "none": None,
                  "float": 1.5, "nested": {"block": {"a": [1]}, "warps": 0}}
        for k, v in values.items():
            if kwargs.get("cfg_type") is Cfg and isinstance(v, dict) and set(v) != {"block", "warps"}:
                continue
            rel.put("d", "o", k, v)
            ours.put("d", "o", k, v)
        for k in values:
            if kwargs.get("cfg_type") is Cfg and isinstance(values[k], dict) and set(values[k]) != {"block", "warps"}:
                continue
            got, want = ours.get("d", "o", k), rel.get("d", "o", k)
            assert type(got) is type(want) and got == want, (kwargs, k)
        put_dc = Cfg(block=3, warps=1)
        rel.put("d", "o", "dc", put_dc)
        ours.put("d", "o", "dc", put_dc)
        assert ours.get("d", "o", "dc") == rel.get("d", "o", "dc")
        ours.close()
        ours_db = world / "home" / "ejkernel-presistent-cache" / DB_NAME
        ours_db.unlink()
        for p in ours_db.parent.iterdir():
            p.unlink()


# -- lazy and few files ----------------------------------------------------------------


def test_constructing_creates_and_opens_nothing(world, tmp_path):
    """39 caches constructed under strace: no system call names a cache
    directory, and nothing appears on disk."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "python")!r})
        from tirastore import PersistentCache
        print("BEGIN", flush=True)
        caches = [PersistentCache(op) for op in {EJKERNEL_OPNAMES!r}]
        caches.append(PersistentCache({str(world / "abs" / "kernel_cache")!r}))
        print("END", flush=True)
        assert all(caches)
    """)
    trace = tmp_path / "trace"
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=%file,%desc", "-o", str(trace), sys.executable, "-c", script],
                   check=True, env=dict(os.environ), cwd=world / "work", capture_output=True, timeout=120)
    lines = trace.read_text().splitlines()
    begin = next(i for i, l in enumerate(lines) if 'write(1, "BEGIN' in l)
    end = next(i for i, l in enumerate(lines) if 'write(1, "END' in l)
    between = [l for l in lines[begin + 1:end] if "ejkernel-presistent-cache" in l or "kernel_cache" in l
               or "tirastore" in l]
    assert between == []
    assert files_under(world / "home") == [] and files_under(world / "work") == []


def test_gets_create_nothing_and_the_first_put_creates_one_database(world):
    caches = [PersistentCache(op) for op in EJKERNEL_OPNAMES]
    for c in caches:
        assert c.get("cpu", f"{c.namespace}@v1", "k") is None
        assert len(c) == 0
    assert files_under(world / "home") == []
    for c in caches:
        c.put("cpu", "same-op@v1", "k", {"op": c.namespace})  # one key, 39 namespaces
    d = world / "home" / "ejkernel-presistent-cache"
    names = {p.name for p in d.iterdir()}
    tickets = {n for n in names if n.startswith(f".lock_{socket.gethostname()}_{os.getpid()}_")}
    assert names - tickets == {DB_NAME} and len(tickets) == 1, names  # one database, one ticket of this process
    for c in caches:
        assert c.get("cpu", "same-op@v1", "k") == Namespace(op=c.namespace)
        assert len(c) == 1
        c.close()
    assert {p.name for p in d.iterdir()} == {DB_NAME}  # the last close removed the ticket


def test_legacy_json_files_go_into_their_own_namespaces_once(Released, world):
    for op, v in (("flash-attn", 1), ("decode-attention", 2)):
        rel = Released(op)
        rel.put("cpu", "shared@v1", "k", {"v": v})  # the same key in two files
    a, b = PersistentCache("flash-attn"), PersistentCache("decode-attention")
    assert a.get("cpu", "shared@v1", "k") == Namespace(v=1)
    assert b.get("cpu", "shared@v1", "k") == Namespace(v=2)
    assert a.imported["added"] == 1 and b.imported["added"] == 1
    a.close()
    b.close()
    again = PersistentCache("flash-attn")
    again.get("cpu", "shared@v1", "k")
    assert again.imported["skipped"]
    again.close()


# -- private by default -------------------------------------------------------------------


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.mark.parametrize("where", ["default", "tilde", "env"])
def test_private_by_default_like_the_released_class(Released, world, monkeypatch, where):
    args: tuple = ("flash-attn",)
    kwargs: dict = {}
    if where == "tilde":
        kwargs = {"path": "~/t/flash-attn.json"}
    elif where == "env":
        monkeypatch.setenv("EJKERNEL_PERSISTENT_CACHE_DIR", str(world / "home" / "envdir"))
    rel = Released(*args, **kwargs)
    rel.put("d", "o", "k", 1)
    rel_file = Path(rel.path)
    rel_modes = {"dir": stat.S_IMODE(rel_file.parent.stat().st_mode), "file": stat.S_IMODE(rel_file.stat().st_mode)}
    for p in sorted(rel_file.parent.iterdir()):
        p.unlink()
    rel_file.parent.rmdir()
    ours = PersistentCache(*args, **kwargs)
    ours.put("d", "o", "k", 1)
    ours.get("d", "o", "k")
    db = Path(ours.db_path)
    assert stat.S_IMODE(db.parent.stat().st_mode) == rel_modes["dir"]
    assert stat.S_IMODE(db.stat().st_mode) == rel_modes["file"] == 0o600
    for name, mode in modes(db.parent).items():
        assert mode & 0o002 == 0, (name, oct(mode))  # nothing writable by others
        assert not (mode & stat.S_ISVTX), (name, oct(mode))
    ours.close()


def test_shared_modes_only_on_request(world):
    group = world / "group"
    group.mkdir()
    group.chmod(0o2770)
    c = PersistentCache("op", path=group / "op.json")
    c.put("d", "o", "k", 1)
    assert stat.S_IMODE(Path(c.db_path).stat().st_mode) == 0o660
    c.close()
    everyone = world / "everyone"
    c = PersistentCache("op", path=everyone / "op.json", shared=True)
    c.put("d", "o", "k", 1)
    assert stat.S_IMODE(Path(c.db_path).stat().st_mode) == 0o666
    assert stat.S_IMODE(everyone.stat().st_mode) == 0o1777
    c.close()
    sticky = world / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # a world-writable directory is not a request to share
    c = PersistentCache("op", path=sticky / "op.json")
    c.put("d", "o", "k", 1)
    assert stat.S_IMODE(Path(c.db_path).stat().st_mode) == 0o600
    c.close()
    with pytest.raises(TypeError, match="shared"):
        PersistentCache("op", shared="yes")
    from tirastore import _native

    with pytest.raises(ValueError, match=r'sharing must be one of \["all" "group" "private"\], got "world"'):
        _native.open_store(str(world / "x.db"), {"sharing": "world"})
    assert not (world / "x.db").exists()


def test_a_private_cache_uses_no_file_of_another_user(world):
    if os.geteuid() != 0:
        pytest.skip("giving files to another user needs root")
    sticky = world / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    planted = sticky / "op.json"
    planted.write_text(json.dumps({"d|o|k": {"evil": 1}}))
    os.chown(planted, 65534, 65534)
    c = PersistentCache("op", path=planted)
    with pytest.warns(TiraStoreWarning, match=r"uid 65534.*not imported"):
        assert c.get("d", "o", "k") is None
    c.put("d", "o", "k2", 1)
    assert c.get("d", "o", "k") is None
    c.close()
    os.chown(sticky / DB_NAME, 65534, 65534)
    c = PersistentCache("op", path=planted)
    with pytest.raises(PermissionError, match="uid 65534"):
        c.get("d", "o", "k2")


def test_caches_of_one_database_share_one_store_and_close_alone(world):
    a, b = PersistentCache("flash-attn"), PersistentCache("mla")
    a.put("d", "o", "k", 1)
    b.put("d", "o", "k", 2)
    assert a._store is b._store  # one connection, one lock ticket
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.get("d", "o", "k")
    assert b.get("d", "o", "k") == 2 and not b._store.closed
    b.close()
    assert b._store.closed  # the last cache closed the store


def test_threads_first_calls_open_once(world):
    import threading

    c = PersistentCache("flash-attn")
    c.put("d", "o", "k", 1)
    c.close()
    c = PersistentCache("flash-attn")
    start = threading.Barrier(8)
    got = []

    def first_get():
        start.wait()
        got.append(c.get("d", "o", "k"))

    threads = [threading.Thread(target=first_get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [1] * 8
    from tirastore import persistent_cache

    assert persistent_cache._open_dbs[c._key][1] == 1  # one open, counted once
    c.close()
