"""tirastore.PersistentCache: ejKernel's kernel-config cache, drop-in.

The seed's behaviour (constructor, default path, get/put and their
serialization rules), what it lacks (no lost updates, puts seen at once by
other processes, delete/len/iteration/clear, overwrite=False), and its JSON
files (imported once and never twice, never rewritten unless exported).
The seed's write pattern, re-created in seed_cache.py, is the negative
control of the lost-update test; the cache trusted blindly (failpoint
cache-trust) is the negative control of the freshness test.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import textwrap
import warnings
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import TEST_CPU
from tirastore import ConfigEntry, PersistentCache, TiraStore, TiraStoreWarning

REPO = Path(__file__).resolve().parents[2]
DB_NAME = "persistent-cache.tirastore.db"
FP_LIB = REPO / "build" / "failpoints" / "libtirastore.so"
HERE = Path(__file__).resolve().parent


@dataclass
class BlockCfg:
    block_m: int
    block_n: int


class PydanticLike:
    """An object with pydantic v2's model_dump() (no pydantic needed)."""

    def __init__(self, **fields):
        self.fields = fields

    def model_dump(self):
        return dict(self.fields)


@dataclass
class DataclassWithModelDump:
    x: int

    def model_dump(self):
        return {"from": "model_dump"}


@pytest.fixture
def cache(tmp_path):
    c = PersistentCache("matmul", path=tmp_path / "matmul.json")
    yield c
    c.close()


# -- constructor and paths ------------------------------------------------------


def test_default_path_is_the_seeds(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("EJKERNEL_PERSISTENT_CACHE_DIR", raising=False)
    with PersistentCache("flash_attn") as c:
        assert c.path == str(tmp_path / "ejkernel-presistent-cache" / "flash_attn.json")
        assert c.json_path == tmp_path / "ejkernel-presistent-cache" / "flash_attn.json"
        assert c.db_path == tmp_path / "ejkernel-presistent-cache" / DB_NAME
        assert c.namespace == "flash_attn"
        assert c.get("d", "o", "k") is None and not c.db_path.exists()  # a get creates nothing
        c.put("d", "o", "k", 1)
        assert c.db_path.is_file() and not c.json_path.exists()  # the JSON file is never written on its own
        assert c.imported is None  # no file to import


def test_paths_json_database_and_pathlike(tmp_path):
    with PersistentCache("op", path=str(tmp_path / "sub" / "cfg.json")) as c:
        assert c.path == str(tmp_path / "sub" / "cfg.json")
        assert c.db_path == tmp_path / "sub" / DB_NAME and c.namespace == "cfg"
    with PersistentCache("op", path=tmp_path / "shared.db") as c:
        assert c.db_path == tmp_path / "shared.db" and c.json_path is None and c.imported is None
        with pytest.raises(ValueError, match="has no JSON file"):
            c.export_json()
    with pytest.raises(TypeError, match=r"PersistentCache\(\): path must be str or os.PathLike"):
        PersistentCache("op", path=42)
    assert PersistentCache(None).path.endswith("/None.json")  # as ejkernel's f"{opname}.json"
    c = PersistentCache("op", path=str(tmp_path / "a\x00.json"))  # the constructor never raises for a value
    with pytest.raises(ValueError, match="NUL"):
        c.get("d", "o", "k")


# Locations and whether the engine takes each for a URL (True) or a file
# path (False). "://" anywhere, or a postgres prefix alone, would get some
# of them wrong (checked below, so that the table keeps telling rules apart).
URL_TABLE = [
    ("postgresql://db.example.org/tira", True),
    ("postgres://u:secret@h:5433/db?sslmode=require", True),
    ("POSTGRESQL://h/db", True),
    ("postgres://", True),
    ("postgresql:///db?host=/nonexistent", True),
    ("mysql://u:secret@h/db", True),
    ("http://x", True),
    ("file:///tmp/x.db", True),
    ("a+b.c-d://x", True),
    ("x1://y", True),
    ("postgresql:/h/db", False),
    ("postgresql", False),
    ("1abc://x", False),
    ("+x://y", False),
    ("re sults://x", False),
    ("runs/a://b.db", False),
    ("./x://y", False),
    ("://x", False),
    ("\u00e9://x", False),
    ("po\u017ftgres://h/db", False),  # Go's ToLower keeps the long s: not postgres, not a scheme
    ("c:/x.db", False),
    ("x.db", False),
]


def _engine_takes_for_a_url(location: str) -> bool:
    """The engine's own verdict, without a server: the lock's status
    refuses a server's URL (it has no lock file), an open that creates
    nothing refuses a URL of another kind, and to both a file path is a
    missing database."""
    from tirastore import _native

    try:
        _native.call(0, "lock_status", db_path=location, stale_lock_timeout=None)
    except ValueError:
        return True
    except FileNotFoundError:
        pass
    try:
        TiraStore(location, allow_cpu_mismatch=True, create=False).close()
    except ValueError:
        return True
    except FileNotFoundError:
        return False
    raise AssertionError(f"{location!r} opened a database")


def test_the_url_rule_is_the_engines(tmp_path, monkeypatch):
    """PersistentCache.db_path decides without opening whether its database
    is a URL (tirastore.store._is_url): the engine's rule, on every location
    of the table, so that the two cannot drift apart."""
    from tirastore.store import _is_url

    monkeypatch.chdir(tmp_path)
    for location, url in URL_TABLE:
        assert _engine_takes_for_a_url(location) is url, location
        assert _is_url(location) is url, location
    assert list(tmp_path.iterdir()) == []
    # Negative controls: the looser rules this table tells apart.
    assert any(("://" in loc) != url for loc, url in URL_TABLE)
    assert any(loc.lower().startswith(("postgresql://", "postgres://")) != url for loc, url in URL_TABLE)


def test_db_path_of_a_url_is_the_stores_and_a_path_opens_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="a URL of a kind TiraStore does not know"):
        PersistentCache("op", path="mysql://u:secret@h/db").db_path
    # A path with "://" inside is a file's: its db_path opens and creates nothing.
    c = PersistentCache("op", path=f"{tmp_path}/runs/a://b.db")  # pathlib would fold the "//"
    assert c.db_path == tmp_path / "runs" / "a:" / "b.db"
    assert list(tmp_path.iterdir()) == []


def test_one_database_holds_records_and_configs_and_ignores_the_cpu_check(tmp_path):
    db = tmp_path / "both.db"
    with TiraStore(db, cpu_model="Another CPU") as store:
        assert store.record("p", "void p(){}", "R(L0,comps=['c1'])", True, [0.1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", TiraStoreWarning)  # no CPU-mismatch banner: it is about records
        with PersistentCache("op", path=db) as c:
            assert c.put("gpu:0", "mm", "k", [1, 2])
            assert c.get("gpu:0", "mm", "k") == [1, 2]
    with TiraStore(db, cpu_model="Another CPU") as store:
        assert store.count() == 1
        assert store.lookup("p", "void p(){}", "R(L0,comps=['c1'])").execution_times == [0.1]


# -- get and put as the seed ----------------------------------------------------


def test_get_miss_is_none_and_dicts_become_namespaces(cache):
    assert cache.get("gpu:0", "mm", "k") is None
    assert cache.put("gpu:0", "mm", "k", {"block_m": 64, "num_warps": 4}) is True
    got = cache.get("gpu:0", "mm", "k")
    assert isinstance(got, Namespace) and got == Namespace(block_m=64, num_warps=4)
    cache.put("gpu:0", "mm", "list", [1, 2.5, None])
    cache.put("gpu:0", "mm", "int", 7)
    assert cache.get("gpu:0", "mm", "list") == [1, 2.5, None]
    assert cache.get("gpu:0", "mm", "int") == 7
    cache.put("gpu:0", "mm", "null", None)
    assert cache.get("gpu:0", "mm", "null") is None  # as the seed: a stored None reads as a miss
    assert ("gpu:0", "mm", "null") in cache


def test_cfg_type_and_loader(tmp_path):
    with PersistentCache("op", path=tmp_path / "a.json", cfg_type=BlockCfg) as c:
        c.put("d", "op", "k", BlockCfg(128, 64))
        assert c.get("d", "op", "k") == BlockCfg(128, 64)
    # The loader applies first; its dict result then goes through cfg_type.
    seen = []

    def loader(raw):
        seen.append(raw)
        return {"block_m": raw["block_m"] * 2, "block_n": raw["block_n"]}

    with PersistentCache("op", path=tmp_path / "a.json", loader=loader, cfg_type=BlockCfg) as c:
        assert c.get("d", "op", "k") == BlockCfg(256, 64)
        assert seen == [{"block_m": 128, "block_n": 64}]
    with PersistentCache("op", path=tmp_path / "a.json", loader=lambda raw: (raw["block_m"], raw["block_n"])) as c:
        assert c.get("d", "op", "k") == (128, 64)  # not a dict: returned as the loader made it
        assert c.get("d", "op", "missing") is None  # the loader never sees a miss


def test_serialization_priority(cache):
    # 1. the dumper, over everything else
    with PersistentCache("op", path=cache.db_path, dumper=lambda cfg: {"dumped": True}) as c:
        assert c.put("d", "op", "dumper", BlockCfg(1, 2))
        assert c.get("d", "op", "dumper") == Namespace(dumped=True)
    # 2. a dataclass's asdict, even when it also has model_dump
    cache.put("d", "op", "dataclass", DataclassWithModelDump(3))
    assert cache.get("d", "op", "dataclass") == Namespace(x=3)
    # 3. model_dump() (pydantic v2)
    cache.put("d", "op", "pydantic", PydanticLike(block_m=32, stages=3))
    assert cache.get("d", "op", "pydantic") == Namespace(block_m=32, stages=3)
    # 4. the raw value
    cache.put("d", "op", "raw", {"nested": {"a": [1, {"b": "é"}]}})
    assert cache.get("d", "op", "raw") == Namespace(nested={"a": [1, {"b": "é"}]})


def test_nan_and_infinities_as_python_json_writes_them(cache):
    cache.put("d", "op", "k", {"score": float("nan"), "hi": float("inf"), "lo": float("-inf")})
    got = cache.get("d", "op", "k")
    assert math.isnan(got.score) and got.hi == math.inf and got.lo == -math.inf
    raw = sqlite3.connect(cache.db_path).execute("SELECT value_json FROM config_entries").fetchone()[0]
    assert raw == '{"score":NaN,"hi":Infinity,"lo":-Infinity}'


@pytest.mark.parametrize("bad", [b"bytes", {1, 2}, object(), {"k": [1, 2j]}])
def test_a_value_json_cannot_store_is_a_type_error_naming_the_key(cache, bad):
    with pytest.raises(TypeError, match=r"PersistentCache\.put\(\): the value of key 'gpu:0\|mm\|sig' in namespace matmul is not JSON serializable"):
        cache.put("gpu:0", "mm", "sig", bad)
    assert len(cache) == 0


def test_bad_arguments(cache):
    with pytest.raises(TypeError, match=r"PersistentCache\.get\(\): device must be str, not int"):
        cache.get(0, "mm", "k")
    with pytest.raises(TypeError, match=r"PersistentCache\.get\(\): op_id must be str, not list"):
        cache.get("d", ["mm"], "k")
    with pytest.raises(TypeError, match=r"PersistentCache\.put\(\): call_key must be str, not None"):
        cache.put("d", "mm", None, 1)
    with pytest.raises(ValueError, match="NUL"):
        cache.put("d", "mm", "k\x00", 1)
    with pytest.raises(ValueError, match="surrogate"):
        cache.get("d", "mm", "\udc80")
    with pytest.raises(TypeError, match="overwrite must be bool"):
        cache.put("d", "mm", "k", 1, overwrite="yes")
    assert len(cache) == 0


# -- beyond the seed --------------------------------------------------------------


def test_overwrite_false_lets_tuners_agree_on_the_first(cache):
    assert cache.put("d", "op", "k", {"v": 1}, overwrite=False) is True
    assert cache.put("d", "op", "k", {"v": 2}, overwrite=False) is False
    assert cache.get("d", "op", "k").v == 1
    assert cache.put("d", "op", "k", {"v": 3}) is True  # the seed's default: last writer wins
    assert cache.get("d", "op", "k").v == 3


def test_delete_len_iteration_clear(cache):
    for coords in [("gpu:1", "attn", "b"), ("gpu:0", "mm", "a"), ("gpu:0", "attn", "a")]:
        cache.put(*coords, {"c": list(coords)})
    assert len(cache) == 3
    assert list(cache) == [("gpu:0", "attn", "a"), ("gpu:0", "mm", "a"), ("gpu:1", "attn", "b")]
    assert [e.call_key for e in cache.entries(device="gpu:0")] == ["a", "a"]
    assert [(e.device, e.op_id) for e in cache.entries(op_id="attn")] == [("gpu:0", "attn"), ("gpu:1", "attn")]
    assert [k for k, _ in cache.items(device="gpu:0", op_id="mm")] == [("gpu:0", "mm", "a")]
    assert dict(cache.items())[("gpu:1", "attn", "b")] == Namespace(c=["gpu:1", "attn", "b"])
    e = cache.entries(device="gpu:1")[0]
    assert isinstance(e, ConfigEntry) and e.value == {"c": ["gpu:1", "attn", "b"]}
    assert e.hostname and e.username and e.creation_date == e.update_date
    assert ("gpu:0", "mm", "a") in cache and ("gpu:0", "mm", "z") not in cache and "gpu:0" not in cache
    assert cache.delete("gpu:0", "mm", "a") is True
    assert cache.delete("gpu:0", "mm", "a") is False
    assert cache.get("gpu:0", "mm", "a") is None
    assert cache.clear() == 2
    assert len(cache) == 0 and list(cache) == []


def test_overwrite_keeps_the_creation_date(cache):
    cache.put("d", "op", "k", 1)
    first = cache.entries()[0]
    cache.put("d", "op", "k", 2)
    second = cache.entries()[0]
    assert second.creation_date == first.creation_date and second.update_date >= first.update_date
    assert second.value == 2


def test_closed_cache(tmp_path):
    c = PersistentCache("op", path=tmp_path / "c.json")
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(ValueError, match="closed"):
        c.get("d", "op", "k")
    with pytest.raises(ValueError, match="closed"):
        c.put("d", "op", "k", 1)


def _child_put_get(cache, q):
    cache.put("gpu:0", "mm", "from-child", {"pid": os.getpid()})
    q.put(cache.get("gpu:0", "mm", "parent").v)


def test_works_in_forked_and_spawned_children(cache):
    cache.put("gpu:0", "mm", "parent", {"v": 5})
    for method in ("fork", "spawn"):
        ctx = multiprocessing.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=_child_put_get, args=(cache, q))
        p.start()
        assert q.get(timeout=60) == 5
        p.join(60)
        assert p.exitcode == 0
        assert cache.get("gpu:0", "mm", "from-child").pid == p.pid


# -- existing JSON files ------------------------------------------------------------


def write_seed_file(path: Path, data: dict) -> bytes:
    """Write path as the seed's put does (json.dump of the whole dict)."""
    path.write_text(json.dumps(data))
    return path.read_bytes()


def test_an_existing_file_is_imported_once_and_left_as_it_was(tmp_path):
    path = tmp_path / "matmul.json"
    data = {"gpu:0|matmul@v1|m=1024": {"block_m": 128, "score": float("nan")}, "gpu:0|matmul@v1|m=2048": [64, 4]}
    before = write_seed_file(path, data)
    mtime = path.stat().st_mtime_ns
    with PersistentCache("matmul", path=path) as c:
        got = c.get("gpu:0", "matmul@v1", "m=1024")
        assert c.imported["added"] == 2 and c.imported["skipped"] is False
        assert got.block_m == 128 and math.isnan(got.score)
        assert c.get("gpu:0", "matmul@v1", "m=2048") == [64, 4]
        c.put("gpu:0", "matmul@v1", "m=4096", {"block_m": 256})
        c.delete("gpu:0", "matmul@v1", "m=2048")
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime  # never rewritten behind old readers
    # Opened again: not imported twice (the delete stays, nothing is duplicated or reset).
    with warnings.catch_warnings():
        warnings.simplefilter("error", TiraStoreWarning)
        with PersistentCache("matmul", path=path) as c:
            assert c.get("gpu:0", "matmul@v1", "m=2048") is None
            assert c.imported["skipped"] is True and c.imported["changed"] is False
            assert len(c) == 2
    rows = sqlite3.connect(tmp_path / DB_NAME).execute("SELECT path, entries FROM config_imports").fetchall()
    assert rows == [(str(path), 2)]


def test_a_file_changed_after_the_import_is_reported_and_import_json_merges_it(tmp_path):
    path = tmp_path / "op.json"
    write_seed_file(path, {"d|op|a": 1})
    with PersistentCache("op", path=path) as c:
        c.put("d", "op", "mine", 10)
    # An old tuner goes on writing the file during a migration.
    write_seed_file(path, {"d|op|a": 2, "d|op|b": 3, "d|op|mine": 99})
    c = PersistentCache("op", path=path)
    with pytest.warns(TiraStoreWarning, match=r"op\.json changed since it was imported.*import_json\(\)") as rec:
        assert c.get("d", "op", "b") is None  # not imported on its own
    assert rec[0].filename == __file__  # the warning points at the caller's line
    res = c.import_json()
    assert (res["entries"], res["added"], res["kept"], res["replaced"]) == (3, 1, 2, 0)
    assert (c.get("d", "op", "a"), c.get("d", "op", "b"), c.get("d", "op", "mine")) == (1, 3, 10)
    res = c.import_json(overwrite=True)
    assert (res["added"], res["replaced"]) == (0, 3)
    assert c.get("d", "op", "mine") == 99
    c.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TiraStoreWarning)  # imported as it is now: nothing to report
        with PersistentCache("op", path=path) as c:
            len(c)


def test_export_writes_the_seeds_format_and_the_seed_reads_it(tmp_path):
    sys.path.insert(0, str(HERE))
    from seed_cache import SeedPersistentCache

    path = tmp_path / "op.json"
    with PersistentCache("op", path=path) as c:
        c.put("gpu:1", "op", "b", {"é": [1.5, None, True], "nan": float("nan")})
        c.put("gpu:0", "op", "a", BlockCfg(16, 32))
        out = c.export_json()
        assert out == path
        expected = {
            "gpu:0|op|a": {"block_m": 16, "block_n": 32},
            "gpu:1|op|b": {"é": [1.5, None, True], "nan": float("nan")},
        }
        assert path.read_text() == json.dumps(expected)  # byte for byte what json.dump writes
        seed = SeedPersistentCache("op", path=str(path))
        assert seed.get("gpu:0", "op", "a") == Namespace(block_m=16, block_n=32)
        # Exported to its own file: no "changed" warning at the next open.
        assert c.export_json(tmp_path / "copy.json") == tmp_path / "copy.json"
    with warnings.catch_warnings():
        warnings.simplefilter("error", TiraStoreWarning)
        with PersistentCache("op", path=path) as c:
            len(c)
            assert c.imported["skipped"] and not c.imported["changed"]
    with PersistentCache("op", path=tmp_path / "empty.json") as c:
        c.export_json()
    assert (tmp_path / "empty.json").read_text() == "{}"


@pytest.mark.parametrize(
    "content, message",
    [
        ("[1, 2]", "top level is not an object"),
        ('{"d|op|a": 1,', "not a PersistentCache file"),
        ('{"d|op|a": 1, "no-bars": 2}', r"key 'no-bars' is not \"device\|op_id\|call_key\""),
        ('{"d|op\\u0000|a": 1}', "NUL"),
    ],
)
def test_a_malformed_file_imports_nothing_and_is_left_alone(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    c = PersistentCache("op", path=path)  # ejkernel's class raised here, at import ejkernel
    with pytest.warns(TiraStoreWarning, match=message) as rec:
        assert c.get("d", "op", "a") is None
    assert str(path) in str(rec[0].message) and "nothing of it is imported" in str(rec[0].message)
    assert rec[0].filename == __file__
    assert path.read_text() == content
    c.put("d", "op", "b", 1)  # the cache works without it
    assert len(c) == 1 and c.imported is None
    with pytest.raises(ValueError, match=message):
        c.import_json()  # asked for: the error itself
    c.close()


def test_import_json_errors(cache, tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.json"):
        cache.import_json(tmp_path / "nothing.json")
    with pytest.raises(IsADirectoryError):
        cache.import_json(tmp_path)
    with pytest.raises(TypeError, match=r"PersistentCache\.import_json\(\): overwrite must be bool"):
        cache.import_json(tmp_path / "x.json", overwrite=1)


IMPORTER = textwrap.dedent(
    """
    import json, sys
    from tirastore import PersistentCache
    c = PersistentCache("op", path=sys.argv[1])
    len(c)  # the first use imports
    print(json.dumps(c.imported))
    """
)


def test_concurrent_openers_import_once(tmp_path):
    path = tmp_path / "op.json"
    write_seed_file(path, {f"d|op|{i}": i for i in range(500)})
    procs = [subprocess.Popen([sys.executable, "-c", IMPORTER, str(path)], stdout=subprocess.PIPE, text=True) for _ in range(8)]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        results.append(json.loads(out))
    assert sorted(r["skipped"] for r in results) == [False] + [True] * 7
    assert sum(r["added"] for r in results) == 500
    with PersistentCache("op", path=path) as c:
        assert len(c) == 500 and c.get("d", "op", "499") == 499


# -- many processes -------------------------------------------------------------------

PUTTER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[4])
    impl, path, worker = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if impl == "tirastore":
        from tirastore import PersistentCache as Cache
    else:
        from seed_cache import SeedPersistentCache as Cache
    c = Cache("op", path=path)
    start = float(sys.argv[5])
    while time.time() < start:
        time.sleep(0.001)
    for i in range(200):
        c.put("gpu:0", "matmul@v1", f"w{worker}-{i}", {"worker": worker, "i": i})
    """
)


def run_putters(impl: str, path: Path) -> None:
    import time

    start = time.time() + 1.5  # every process loaded and waiting: the puts overlap
    procs = [
        subprocess.Popen([sys.executable, "-c", PUTTER, impl, str(path), str(w), str(HERE), str(start)]) for w in range(8)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0


def test_eight_processes_lose_no_put(tmp_path):
    path = tmp_path / "cfg.json"
    run_putters("tirastore", path)
    with PersistentCache("op", path=path) as c:
        assert len(c) == 1600
        for w in range(8):
            for i in (0, 101, 199):
                assert c.get("gpu:0", "matmul@v1", f"w{w}-{i}") == Namespace(worker=w, i=i)


def test_negative_control_the_seeds_write_pattern_loses_puts(tmp_path):
    path = tmp_path / "cfg.json"
    run_putters("seed", path)
    kept = len(json.loads(path.read_text()))
    assert kept < 1600, "the seed's pattern kept every put: the lost-update test above could not fail"


OBSERVER = textwrap.dedent(
    """
    import json, sys
    from tirastore import PersistentCache
    c = PersistentCache("op", path=sys.argv[1])
    for line in sys.stdin:
        key = json.loads(line)
        print(json.dumps(c.get("d", "op", key)), flush=True)
    """
)


def freshness(tmp_path: Path, switch: str | None) -> list[str]:
    """A long-lived process asks for keys while other processes put,
    overwrite, delete and clear; returns its stale answers."""
    db = tmp_path / "fresh.db"
    env = {k: v for k, v in os.environ.items() if k != "TIRASTORE_FAILPOINTS"}
    obs_env = dict(env)
    if switch:
        obs_env["TIRASTORE_LIB"] = str(FP_LIB)
        obs_env["TIRASTORE_FAILPOINTS"] = switch + "=on"

    def other(code: str) -> None:
        script = f"from tirastore import PersistentCache\nc = PersistentCache('op', path={str(db)!r})\n" + code
        subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)

    other("c.put('d', 'op', 'a', 1)")
    obs = subprocess.Popen([sys.executable, "-c", OBSERVER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=obs_env)
    truth = {"a": 1}
    wrong = []

    def check(step: str) -> None:
        for key in ("a", "b", "c"):
            for _ in range(2):  # the second answer comes from the observer's cache
                obs.stdin.write(json.dumps(key) + "\n")
                obs.stdin.flush()
                got = json.loads(obs.stdout.readline())
                if got != truth.get(key):
                    wrong.append(f"{step}: get {key} -> {got}, want {truth.get(key)}")

    check("start")
    other("c.put('d', 'op', 'b', 2)")
    truth["b"] = 2
    check("after another process put a key seen missing")
    other("c.put('d', 'op', 'a', -1)")
    truth["a"] = -1
    check("after another process overwrote a key")
    other("c.delete('d', 'op', 'b')")
    del truth["b"]
    check("after another process deleted a key")
    other("c.put('d', 'op', 'c', 3); c.clear(); c.put('d', 'op', 'a', 4)")
    truth = {"a": 4}
    check("after another process cleared and put")
    obs.stdin.close()
    assert obs.wait(timeout=60) == 0
    return wrong


def test_a_put_is_seen_by_other_processes_at_once(tmp_path):
    assert freshness(tmp_path, None) == []


def test_negative_control_cache_trusted_blindly(tmp_path, failpoints_lib):
    wrong = freshness(tmp_path, "cache-trust")
    assert wrong, "with the cache trusted blindly the observer still answered right: the check above could not fail"


def _retune_elsewhere(db: Path, cpu_model: str) -> None:
    """Make every config entry look tuned on a CPU model other than this
    one: a context like this process's with another cpu_model, stored under
    its fingerprint (as the library names contexts: the SHA-256 of their
    canonical JSON)."""
    import hashlib

    con = sqlite3.connect(db)
    try:
        [(text,)] = con.execute("SELECT context_json FROM run_contexts").fetchall()
        ctx = json.loads(text)
        ctx["cpu_model"] = cpu_model
        other = json.dumps(ctx, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        fp = hashlib.sha256(other.encode()).hexdigest()[:32]
        con.execute("INSERT INTO run_contexts VALUES (?, ?)", (fp, other))
        con.execute("UPDATE config_entries SET context = ?", (fp,))
        con.commit()
    finally:
        con.close()


def test_device_fingerprints(tmp_path):
    """ejkernel's fingerprint of a CPU ("cpu|") names no model: a
    configuration tuned on another CPU model is a miss unless asked; a GPU's
    fingerprint names the GPU, and another GPU's configuration is served
    only when asked, as a starting point."""
    path = tmp_path / "mm.json"
    cache = PersistentCache("mm", path)
    assert cache.put("cpu|", "mm@v1", "m=64", {"block": 64})
    assert cache.put("NVIDIA A100-SXM4-80GB|cuda 12.2", "mm@v1", "m=64", {"block": 128})
    assert cache.get("cpu|", "mm@v1", "m=64") == Namespace(block=64)
    cache.close()
    _retune_elsewhere(tmp_path / "persistent-cache.tirastore.db", "Some Other CPU @ 1.0GHz")
    here = PersistentCache("mm", path)
    assert here.get("cpu|", "mm@v1", "m=64") is None
    assert here.get("NVIDIA A100-SXM4-80GB|cuda 12.2", "mm@v1", "m=64") == Namespace(block=128)
    assert here.get("NVIDIA H100|cuda 12.4", "mm@v1", "m=64") is None
    asked = PersistentCache("mm", path, other_devices=True)
    assert asked.get("cpu|", "mm@v1", "m=64") == Namespace(block=64)
    assert asked.get("NVIDIA H100|cuda 12.4", "mm@v1", "m=64") is not None  # another GPU's, to start from
    assert asked.get("NVIDIA H100|cuda 12.4", "mm@v1", "m=32") is None
    # Tuned here again: served.
    assert here.put("cpu|", "mm@v1", "m=64", {"block": 32})
    assert here.get("cpu|", "mm@v1", "m=64") == Namespace(block=32)
    with pytest.raises(TypeError):
        PersistentCache("mm", path, other_devices="yes")
    for c in (here, asked):
        c.close()
