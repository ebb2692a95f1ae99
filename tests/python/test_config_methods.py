"""The kernel-config cache's C methods (config_*), through the binding's
native layer: what the PersistentCache class is built on."""
from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import sqlite_only
from tirastore import TiraStore, _native


@pytest.fixture
def handle(db_path):
    store = TiraStore(str(db_path), cpu_model="X")
    yield store, store._handle
    store.close()


def put(h, key, value, **kw):
    d, op, ck = key
    return _native.call(h, "config_put", device=d, op_id=op, call_key=ck, value=value, **kw)


def get(h, key):
    d, op, ck = key
    return _native.call(h, "config_get", device=d, op_id=op, call_key=ck)


def test_put_get_round_trip(handle):
    _, h = handle
    key = ("gpu:0", "matmul@v1", "sig")
    value = {"block_m": 128, "ratio": 0.5, "flags": [True, None], "score": float("nan"), "big": float("inf")}
    assert put(h, key, value) is True
    e = get(h, key)
    assert (e["device"], e["op_id"]) == key[:2]
    assert e["call_key"] == "sig"
    assert math.isnan(e["value"].pop("score")) and e["value"].pop("big") == math.inf
    value.pop("score"), value.pop("big")
    assert e["value"] == value
    assert e["creation_date"] == e["update_date"] and e["hostname"] and e["username"]
    assert get(h, ("gpu:0", "matmul@v1", "other")) is None


def test_overwrite_false_keeps_the_first(handle):
    _, h = handle
    key = ("tpu:v4", "attn", "k")
    assert put(h, key, {"a": 1}, overwrite=False) is True
    assert put(h, key, {"a": 2}, overwrite=False) is False
    assert get(h, key)["value"] == {"a": 1}
    assert put(h, key, {"a": 3}) is True  # the default: the last writer wins, as in the seed
    assert get(h, key)["value"] == {"a": 3}


def test_errors_name_the_key_and_argument(handle):
    _, h = handle
    with pytest.raises(TypeError, match=r"value of key 'gpu:0\|mm\|k' is not JSON serializable.*bytes"):
        put(h, ("gpu:0", "mm", "k"), {"x": [1, b"raw"]})
    with pytest.raises(TypeError, match="device must be str, not int"):
        _native.call(h, "config_put", device=0, op_id="mm", call_key="k", value=1)
    with pytest.raises(TypeError, match="missing argument value"):
        _native.call(h, "config_put", device="d", op_id="mm", call_key="k")
    with pytest.raises(ValueError, match="NUL"):
        put(h, ("gpu\x000", "mm", "k"), 1)
    assert _native.call(h, "config_len") == 0  # nothing half-written


def test_entries_delete_len_clear(handle):
    _, h = handle
    for key in [("gpu:1", "attn", "b"), ("gpu:0", "mm", "a"), ("gpu:0", "attn", "a")]:
        put(h, key, 1)
    keys = lambda **kw: [(e["device"], e["op_id"], e["call_key"]) for e in _native.call(h, "config_entries", **kw)]
    assert keys(device="gpu:0") == [("gpu:0", "attn", "a"), ("gpu:0", "mm", "a")]
    assert keys(op_id="attn") == [("gpu:0", "attn", "a"), ("gpu:1", "attn", "b")]
    assert len(keys()) == _native.call(h, "config_len") == 3
    d, op, ck = "gpu:0", "mm", "a"
    assert _native.call(h, "config_delete", device=d, op_id=op, call_key=ck) is True
    assert _native.call(h, "config_delete", device=d, op_id=op, call_key=ck) is False
    assert _native.call(h, "config_clear") == 2
    assert _native.call(h, "config_len") == 0


def test_a_put_is_seen_by_another_process_at_once(handle, tmp_path):
    store, h = handle
    key = ("gpu:0", "mm", "shared")
    assert get(h, key) is None
    child = textwrap.dedent("""
        import sys
        from tirastore import TiraStore, _native
        s = TiraStore(sys.argv[1], cpu_model="X")
        print(_native.call(s._handle, "config_put", device="gpu:0", op_id="mm", call_key="shared", value={"bm": 64}))
        s.close()
    """)
    out = subprocess.run([sys.executable, "-c", child, store.db_path], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
    assert get(h, key)["value"] == {"bm": 64}


# -- namespaces ---------------------------------------------------------------
# One database holds many caches (ejKernel's one per operation): an entry is
# named by its namespace ("" by default, the namespace of every entry written
# before namespaces) and its key.


def test_namespaces_keep_entries_apart(handle, tmp_path):
    _, h = handle
    d, op, ck = "gpu:0", "fa@v1", "sig"
    call = lambda method, **kw: _native.call(h, method, **kw)
    assert put(h, (d, op, ck), "default") is True
    assert call("config_put", namespace="flash-attn", device=d, op_id=op, call_key=ck, value={"bm": 64}) is True
    assert call("config_put", namespace="flash-attn", device=d, op_id=op, call_key=ck, value=0, overwrite=False) is False
    assert call("config_put", namespace="matmul", device="gpu:1", op_id=op, call_key=ck, value=[1]) is True
    assert get(h, (d, op, ck))["value"] == "default"  # no namespace: ""
    e = call("config_get", namespace="flash-attn", device=d, op_id=op, call_key=ck)
    assert (e["namespace"], e["value"]) == ("flash-attn", {"bm": 64})
    assert call("config_value", namespace="flash-attn", device=d, op_id=op, call_key=ck) == [{"bm": 64}]
    assert call("config_get", namespace="other", device=d, op_id=op, call_key=ck) is None
    lens = [call("config_len", **kw) for kw in ({}, {"namespace": ""}, {"namespace": "flash-attn"}, {"namespace": "x"})]
    assert lens == [1, 1, 1, 0]

    listed = lambda **kw: [(e["namespace"], e["device"], e["value"]) for e in call("config_entries", **kw)]
    assert listed() == [("", d, "default")]
    assert listed(namespace="matmul") == [("matmul", "gpu:1", [1])]
    assert listed(namespace=None) == [("", d, "default"), ("flash-attn", d, {"bm": 64}), ("matmul", "gpu:1", [1])]
    assert listed(namespace=None, device="gpu:1") == [("matmul", "gpu:1", [1])]

    # Import into a namespace, once by the file's path; export one namespace.
    seed = tmp_path / "attn.json"
    seed.write_text('{"gpu:0|fa@v1|sig": 7, "gpu:0|fa@v1|other": 8}')
    res = call("config_import", namespace="attn", path=str(seed), once=True)
    assert (res["added"], res["kept"]) == (2, 0)
    assert call("config_import", namespace="x", path=str(seed), once=True)["skipped"] is True
    assert call("config_len", namespace="attn") == 2 and call("config_len", namespace="x") == 0
    out = call("config_export", namespace="flash-attn", output_path=str(tmp_path / "fa.json"))
    assert out["entries"] == 1 and (tmp_path / "fa.json").read_text() == '{"gpu:0|fa@v1|sig": {"bm": 64}}'

    assert call("config_delete", namespace="attn", device=d, op_id=op, call_key=ck) is True
    assert call("config_delete", namespace="attn", device=d, op_id=op, call_key=ck) is False
    assert call("config_clear", namespace="attn") == 1
    assert [e["namespace"] for e in call("config_entries", namespace=None)] == ["", "flash-attn", "matmul"]


def test_namespace_argument_errors(handle):
    _, h = handle
    key = dict(device="d", op_id="o", call_key="k")
    with pytest.raises(TypeError, match=r"PersistentCache.get\(\): namespace must be str, not int"):
        _native.call(h, "config_get", namespace=1, **key)
    with pytest.raises(TypeError, match="namespace must be str, not None"):
        _native.call(h, "config_put", namespace=None, value=1, **key)
    with pytest.raises(TypeError, match="namespace must be str or None, not list"):
        _native.call(h, "config_entries", namespace=[])
    with pytest.raises(ValueError, match="namespace contains a NUL"):
        _native.call(h, "config_len", namespace="a\x00b")
    with pytest.raises(ValueError, match="namespace contains a lone surrogate"):
        _native.call(h, "config_clear", namespace="\ud800")
    with pytest.raises(TypeError, match=r"value of key 'd\|o\|k' in namespace fa is not JSON serializable"):
        _native.call(h, "config_put", namespace="fa", value=b"raw", **key)
    assert _native.call(h, "config_entries", namespace=None) == []


def test_a_backup_keeps_the_namespaces(handle, tmp_path):
    store, h = handle
    for ns, value in [("", 1), ("flash-attn", 2), ("matmul", 3)]:
        _native.call(h, "config_put", namespace=ns, device="gpu:0", op_id="op", call_key="k", value=value)
    entries = lambda hh: [(e["namespace"], e["call_key"], e["value"]) for e in _native.call(hh, "config_entries", namespace=None)]
    before = entries(h)
    copy = store.backup(tmp_path / "copy.db")  # a SQLite file, from either backend
    with TiraStore(str(copy), cpu_model="X") as c:
        assert entries(c._handle) == before == [("", "k", 1), ("flash-attn", "k", 2), ("matmul", "k", 3)]


# -- a database written before namespaces --------------------------------------

OLD_CONFIG_DDL = """CREATE TABLE config_entries (
    key            TEXT PRIMARY KEY,
    device         TEXT NOT NULL,
    op_id          TEXT NOT NULL,
    call_key       TEXT NOT NULL,
    value_json     TEXT NOT NULL,
    hostname       TEXT NOT NULL,
    username       TEXT NOT NULL,
    creation_date  TEXT NOT NULL,
    update_date    TEXT NOT NULL
)"""
OLD_ROWS = 30


def old_database(path):
    """A database whose config table has the layout of before namespaces."""
    TiraStore(str(path), cpu_model="X").close()
    con = sqlite3.connect(path)
    con.execute(OLD_CONFIG_DDL)
    con.execute("CREATE INDEX idx_config_entries_device_op_id ON config_entries (device, op_id)")
    con.executemany("INSERT INTO config_entries VALUES (?, ?, 'op', ?, ?, 'h', 'u', 'c', 'u')",
                    [(f"gpu:0|op|k{i:02}", "gpu:0", f"k{i:02}", str(i)) for i in range(OLD_ROWS)])
    con.commit()
    con.close()


def table_shape(path):
    """The config tables' names and the columns of config_entries."""
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"
                                            " AND name LIKE 'config%' ORDER BY 1")]
        cols = [r[1] for r in con.execute("PRAGMA table_info(config_entries)")]
    finally:
        con.close()
    return tables, cols


@sqlite_only
def test_an_old_table_is_read_then_rebuilt_by_the_first_write(db_path):
    old_database(db_path)
    with TiraStore(str(db_path), cpu_model="X") as s:
        h = s._handle
        rows = _native.call(h, "config_entries", namespace=None)
        assert len(rows) == OLD_ROWS and {e["namespace"] for e in rows} == {""}
        assert get(h, ("gpu:0", "op", "k03"))["value"] == 3
        assert table_shape(db_path)[1][0] == "key"  # reads changed nothing
        assert _native.call(h, "config_put", namespace="fa", device="gpu:0", op_id="op", call_key="k03", value="fa") is True
        assert get(h, ("gpu:0", "op", "k03"))["value"] == 3
        assert len(_native.call(h, "config_entries")) == OLD_ROWS
    tables, cols = table_shape(db_path)
    assert tables == ["config_entries"] and cols[:2] == ["namespace", "key"]


# The rebuild is inside the first write's transaction: a writer killed in the
# middle of it (the old table renamed away, the new one not there yet), or
# whose write fails after it, leaves the old table with every row. The
# negative control commits each step of the rebuild on its own: the killed
# writer then leaves neither table, and the entries are gone.
REBUILD_CHILD = """
import sys
from tirastore import TiraStore, _native
s = TiraStore(sys.argv[1], cpu_model="X")
print("ready", flush=True)
_native.call(s._handle, "config_put", namespace="fa", device="gpu:0", op_id="op", call_key="new", value=1)
print("written", flush=True)
"""


@sqlite_only
@pytest.mark.parametrize("points, control", [
    ("config-rebuilding=kill", False),
    ("before-commit=panic", False),
    ("config-rebuilding=kill;config-rebuild-apart=on", True),
])
def test_a_failed_rebuild_leaves_the_old_table(db_path, failpoints_lib, points, control):
    old_database(db_path)
    env = {k: v for k, v in os.environ.items() if k not in ("TIRASTORE_FAILPOINTS", "TIRASTORE_LIB")}
    env.update(TIRASTORE_LIB=str(failpoints_lib), TIRASTORE_FAILPOINTS=points)
    r = subprocess.run([sys.executable, "-c", REBUILD_CHILD, str(db_path)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.stdout.startswith("ready") and "written" not in r.stdout, (r.stdout, r.stderr)
    if "kill" in points:
        assert r.returncode == -signal.SIGKILL, r.stderr
    else:
        assert "RuntimeError" in r.stderr and "failpoint before-commit" in r.stderr, r.stderr
    with TiraStore(str(db_path), cpu_model="X") as s:  # rolls a killed writer's journal back
        rows = _native.call(s._handle, "config_entries", namespace=None)
    tables, cols = table_shape(db_path)
    if control:
        assert tables == ["config_entries_keyed"] and rows == [], (tables, len(rows))
        return
    assert tables == ["config_entries"] and "namespace" not in cols
    assert [(e["namespace"], e["call_key"], e["value"]) for e in rows] == [("", f"k{i:02}", i) for i in range(OLD_ROWS)]
