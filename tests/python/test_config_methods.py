"""The kernel-config cache's C methods (config_*), through the binding's
native layer: what the PersistentCache class (issue 16) is built on."""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest

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
