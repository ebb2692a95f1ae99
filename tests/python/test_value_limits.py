"""The limits of what a store accepts (core/limits, docs/limits.md).

Depth. A JSON value nested 990 levels deep (the engine's parser allows
1000) used to be stored, and then every Python reader of the cache raised
RecursionError: CPython's json counts each level against the recursion
limit together with its caller's frames. Now every write refuses a value
deeper than ``max_value_depth`` (100) with a ValueError naming it and the
limit, and a deeper value stored anyway (planted here with sqlite3, as an
old writer could have) is refused where it would be decoded, named, while
the listings read the other entries; ``tirastore check`` lists it. The
scenario runs in a child process (its readers at a pytest-like stack depth,
and at a much deeper one for the values within the limit) so that its
negative control can run it on the failpoints build with the limit turned
off (value-depth-unlimited): the readers then fail with RecursionError and
the scenario's assertions fail.

Size. Recording a 300 MiB source aborted the process with Go's "fatal
error: out of memory" under an address-space limit. Now a text longer than
``max_text_bytes`` (256 MiB) is refused with a ValueError before anything
is built of it (Python sends a marker instead of the text), and a record
costs about three times its source. The scenario runs in a child process
with RLIMIT_AS; its negative control runs it with the size limit lifted
(text-size-unchecked) and the child dies of Go's out of memory.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import conftest
from conftest import SCHED_R, SRC_BLUR, TEST_CPU, TEST_SLURM, sqlite_only

pytestmark = sqlite_only  # the scenarios plant values with sqlite3 and open files

DEPTH_DRIVER = r'''
import contextlib, ctypes, io, json, sqlite3, sys, warnings
from pathlib import Path

spec = json.loads(sys.argv[1])
work, LIMIT, FRAMES, DEEP = Path(spec["work"]), spec["limit"], spec["frames"], spec["deep"]
SRC, SCHED = spec["src"], spec["sched"]

import tirastore
from tirastore import PersistentCache, TiraStore, _native
from tirastore.cli import main as cli

warnings.simplefilter("ignore")  # the stores' notices about their directory


def nest(n):
    v = 1
    for _ in range(n):
        v = [v]
    return v


def result_json(depth):
    """A result_json nested depth levels deep (the object is one)."""
    return json.dumps({"is_legal": True, "execution_times": nest(depth - 1)})


def at_depth(frames, fn):
    def down(k):
        return fn() if k == 0 else down(k - 1)
    return down(frames)


out = {}


def run(name, fn, frames=FRAMES):
    """fn's outcome, called below `frames` frames of this process's own."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = at_depth(frames, fn)
        try:
            json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            value = repr(value)[:200]
        out[name] = {"ok": value, "warnings": [str(w.message) for w in caught]}
    except BaseException as e:
        out[name] = {"error": type(e).__name__, "message": str(e)[:600]}


def quietly(argv):
    """The CLI's exit status, stdout and stderr."""
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        status = cli(argv)
    return [status, o.getvalue(), e.getvalue()]


# --- writes: the kernel-config cache ---------------------------------------
cache = PersistentCache("t", path=str(work / "cache.db"))
run("put_over", lambda: cache.put("gpu", "op", "over", nest(LIMIT + 1)))
run("put_at", lambda: cache.put("gpu", "op", "at", nest(LIMIT)))


def written_deep(fn):
    """fn run as a writer with a recursion limit raised for its json.dumps
    (or a C caller) would: the value reaches the engine."""
    sys.setrecursionlimit(3000)
    try:
        return fn()
    finally:
        sys.setrecursionlimit(1000)


run("put_deep", lambda: written_deep(lambda: cache.put("gpu", "op", "deep", nest(DEEP))), frames=0)
run("get_at", lambda: cache.get("gpu", "op", "at") == nest(LIMIT), frames=700)  # an autotuner's frames

# --- writes: the C API, through ctypes --------------------------------------
lib = ctypes.CDLL(str(_native.library_path()))
lib.tirastore_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_void_p)]
lib.tirastore_call.argtypes = [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.tirastore_free.argtypes = [ctypes.c_void_p]


def c_reply(status, o):
    doc = json.loads(ctypes.string_at(o.value).decode())
    lib.tirastore_free(o)
    return [status, doc]


h, o = ctypes.c_uint64(), ctypes.c_void_p()
c_reply(lib.tirastore_open(str(work / "c.db").encode(), None, ctypes.byref(h), ctypes.byref(o)), o)


def c_put(name, value):
    o = ctypes.c_void_p()
    args = json.dumps({"device": "gpu", "op_id": "op", "call_key": name, "value": value}).encode()
    return c_reply(lib.tirastore_call(h, b"config_put", args, ctypes.byref(o)), o)


run("c_over", lambda: c_put("over", nest(LIMIT + 1)), frames=0)
run("c_at", lambda: c_put("at", nest(LIMIT)), frames=0)

# --- writes: records ---------------------------------------------------------
store = TiraStore(str(work / "records.db"), cpu_model="c", slurm_cpus="1")
store.record("p", SRC, SCHED, True, [1.0])
row = store.get(store.keys()[0])
put = lambda depth: store.put(row["key"], row["program_hash"], row["schedule"], result_json(depth), overwrite=True)
run("rput_over", lambda: put(LIMIT + 1))
run("rput_at", lambda: put(LIMIT))
run("lookup_at", lambda: store.lookup("p", SRC, SCHED).execution_times == nest(LIMIT - 1), frames=700)
run("record_nested", lambda: store.record("p", SRC, "U(L0,4,comps=['c1'])", True, nest(LIMIT + 1)))

# --- writes: a seed JSON file, a merge ---------------------------------------
(work / "seed.json").write_text(json.dumps({"gpu|op|fine": {"x": 1}, "gpu|op|seeded": nest(LIMIT + 1)}))
run("seed_open", lambda: PersistentCache("t", path=str(work / "seed.json")).get("gpu", "op", "fine"))
run("seed_import", lambda: cache.import_json(str(work / "seed.json"))["added"])
src = TiraStore(str(work / "src.db"), cpu_model="c", slurm_cpus="1")
src.record("q", SRC + "\nint q;", SCHED, True, [2.0])
src.close()
with sqlite3.connect(work / "src.db") as con:
    con.execute("UPDATE records SET result_json = ?", (result_json(LIMIT + 1),))
con.close()
run("merge", lambda: store._call("merge", source_path=str(work / "src.db"), after=None, max_records=0,
                                 overwrite=False, allow_cpu_mismatch=True, list_conflicts=False)["added"])

# --- readers of values planted past the engine -------------------------------
with sqlite3.connect(work / "cache.db") as con:
    con.execute("INSERT INTO config_entries (key, device, op_id, call_key, value_json, hostname, username,"
                " creation_date, update_date) VALUES (?, ?, ?, ?, ?, 'h', 'u', 'd', 'd')",
                ("gpu|op|planted", "gpu", "op", "planted", written_deep(lambda: json.dumps(nest(DEEP)))))
con.close()
with sqlite3.connect(work / "records.db") as con:
    con.execute("UPDATE records SET result_json = ? WHERE key = ?", (written_deep(lambda: result_json(DEEP)), row["key"]))
con.close()
run("list", lambda: sorted(k for _, _, k in cache))
run("entries", lambda: sorted(e.call_key for e in cache.entries()))
run("items", lambda: sorted(k for (_, _, k), _ in cache.items()))
run("get_planted", lambda: cache.get("gpu", "op", "planted"))
run("get_other", lambda: cache.get("gpu", "op", "at") == nest(LIMIT))
run("lookup_planted", lambda: store.lookup("p", SRC, SCHED))
run("program_records", lambda: store.get_program_records("p", SRC))
cache.close()
store.close()
run("cli_list", lambda: quietly(["config", "list", str(work / "cache.db"), "--json"]))
run("cli_check", lambda: quietly(["check", str(work / "cache.db"), "--json"]))
run("cli_check_records", lambda: quietly(["check", str(work / "records.db"), "--json"]))
print(json.dumps(out))
'''

LIMIT = 100
FRAMES = 100  # about what pytest puts under a test
DEEP = 990


def run_depth_scenario(tmp_path: Path, lib: Path | None = None) -> dict:
    work = tmp_path / "work"
    work.mkdir()
    spec = {"work": str(work), "limit": LIMIT, "frames": FRAMES, "deep": DEEP, "src": SRC_BLUR, "sched": SCHED_R}
    env = {k: v for k, v in os.environ.items() if k not in ("TIRASTORE_FAILPOINTS", "TIRASTORE_LIB")}
    if lib is not None:
        env["TIRASTORE_LIB"] = str(lib)
        env["TIRASTORE_FAILPOINTS"] = "value-depth-unlimited=on"
    r = subprocess.run([sys.executable, "-c", DEPTH_DRIVER, json.dumps(spec)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, f"driver failed:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def refused(outcome: dict, *parts: str) -> None:
    assert outcome.get("error") == "ValueError", outcome
    for part in parts:
        assert part in outcome["message"], (part, outcome["message"])


def check_depth_limited(out: dict) -> None:
    """What the scenario must show with the limit: every write of a value
    deeper than 100 levels refused, naming it and the limit; the values at
    the limit written and read back from deep stacks; the planted values
    refused by name, the other entries listed; check reporting them."""
    for name, o in out.items():
        assert o.get("error") != "RecursionError", (name, o)
    over = f"{LIMIT + 1} levels deep; a stored JSON value may nest at most {LIMIT} levels"
    refused(out["put_over"], "config gpu|op|over: the value", over)
    refused(out["put_deep"], "config gpu|op|deep", f"{DEEP} levels deep")
    assert out["put_at"]["ok"] is True and out["get_at"]["ok"] is True, (out["put_at"], out["get_at"])
    status, reply = out["c_over"]["ok"]
    assert status != 0 and reply["error"]["type"] == "ValueError" and over in reply["error"]["message"], reply
    assert out["c_at"]["ok"] == [0, {"result": True}], out["c_at"]
    refused(out["rput_over"], "result_json", over)
    assert out["rput_at"]["ok"] is True and out["lookup_at"]["ok"] is True, (out["rput_at"], out["lookup_at"])
    assert out["record_nested"].get("error") == "TypeError", out["record_nested"]
    # The automatic import of a first use warns and imports nothing (a
    # constructor or a get must not fail for it); an explicit import raises.
    seed_open = out["seed_open"]
    assert seed_open.get("ok", "error") is None and len(seed_open["warnings"]) == 1, seed_open
    for part in ("seed.json", "'gpu|op|seeded'", over, "nothing of it is imported"):
        assert part in seed_open["warnings"][0], (part, seed_open)
    refused(out["seed_import"], "seed.json", "'gpu|op|seeded'", over)
    refused(out["merge"], "src.db", "result_json", over)
    # Readers of the planted values.
    assert out["list"]["ok"] == ["at", "over", "planted"] or out["list"]["ok"] == ["at", "planted"], out["list"]
    for name in ("entries", "items"):
        assert "planted" not in out[name]["ok"] and "at" in out[name]["ok"], out[name]
        assert len(out[name]["warnings"]) == 1, out[name]
        assert "gpu|op|planted" in out[name]["warnings"][0] and "tirastore check" in out[name]["warnings"][0]
    refused(out["get_planted"], "gpu|op|planted", f"{DEEP} levels deep", "tirastore check")
    assert out["get_other"]["ok"] is True, out["get_other"]
    refused(out["lookup_planted"], "schedule", f"{DEEP} levels deep", "tirastore check")
    refused(out["program_records"], f"{DEEP} levels deep")
    status, stdout, stderr = out["cli_list"]["ok"]
    assert status == 0 and [e["call_key"] for e in json.loads(stdout)] == ["at"], (stdout, stderr)
    assert "gpu|op|planted" in stderr, stderr
    for name, key in (("cli_check", "config gpu|op|planted"), ("cli_check_records", "record ")):
        status, stdout, _ = out[name]["ok"]
        rep = json.loads(stdout)
        assert status == 1 and rep["tables"]["too_deep_values"] == 1, rep
        assert rep["tables"]["too_deep_listed"][0].startswith(key), rep["tables"]
        assert any(f"deeper than the {LIMIT} levels" in p and key in p for p in rep["problems"]), rep["problems"]


def test_depth_limit(tmp_path):
    """Python and the C API: a value just over the limit is refused on every
    path that stores one, a value at the limit is stored and read back from
    a deep stack, planted deeper values break no listing and are reported."""
    check_depth_limited(run_depth_scenario(tmp_path))


def test_negative_control_depth_unlimited(tmp_path, failpoints_lib):
    """With the limit off, the deep values are stored and the readers fail
    with RecursionError, as before: the scenario's checks catch it."""
    out = run_depth_scenario(tmp_path, lib=failpoints_lib)
    with pytest.raises(AssertionError):
        check_depth_limited(out)
    assert out["put_over"]["ok"] is True and out["put_deep"]["ok"] is True, out
    for name in ("list", "entries", "get_planted", "lookup_planted"):
        assert out[name].get("error") == "RecursionError", (name, out[name])


def test_check_reports_planted_deep_values(tmp_path, tirastore_mod):
    """tirastore check names a result_json and a config value nested too
    deep, planted with sqlite3, and is content once they are gone."""
    db = tmp_path / "cache.db"
    store = tirastore_mod.TiraStore(db, cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM)
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    key = store.keys()[0]
    store.close()
    cache = tirastore_mod.PersistentCache("t", path=str(db))
    cache.put("gpu", "op", "fine", [[1]])
    cache.close()
    deep = "[" * (LIMIT + 1) + "]" * (LIMIT + 1)
    con = sqlite3.connect(db)
    con.execute("UPDATE records SET result_json = ?", ('{"is_legal":true,"execution_times":' + deep[1:-1] + "}",))
    con.execute("INSERT INTO config_entries (key, device, op_id, call_key, value_json, hostname, username, creation_date,"
                " update_date) VALUES ('gpu|op|deep', 'gpu', 'op', 'deep', ?, 'h', 'u', 'd', 'd')", (deep,))
    con.commit()
    con.close()
    rep = tirastore_mod._native.call(0, "check", db_path=str(db))
    assert not rep["ok"] and rep["tables"]["too_deep_values"] == 2, rep
    assert rep["tables"]["too_deep_listed"] == [f"record {key} ({LIMIT + 1} levels)", f"config gpu|op|deep ({LIMIT + 1} levels)"]
    assert any(key in p and "gpu|op|deep" in p for p in rep["problems"]), rep["problems"]
    con = sqlite3.connect(db)
    con.execute("DELETE FROM records")
    con.execute("DELETE FROM config_entries WHERE key = 'gpu|op|deep'")
    con.commit()
    con.close()
    rep = tirastore_mod._native.call(0, "check", db_path=str(db))
    assert rep["ok"] and rep["tables"]["too_deep_values"] == 0, rep


def test_limits_reported(tirastore_mod):
    """The limits come from the library (Python repeats none of them)."""
    assert tirastore_mod.limits() == {"max_value_depth": LIMIT, "max_text_bytes": 256 << 20, "max_request_bytes": 512 << 20}


# ---------------------------------------------------------------------------
# Size
# ---------------------------------------------------------------------------

SIZE_DRIVER = r'''
import json, resource, sys, warnings
spec = json.loads(sys.argv[1])
warnings.simplefilter("ignore")
import tirastore


def vmsize():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024


store = tirastore.TiraStore(spec["db"], cpu_model="c", slurm_cpus="1")
line = "  for (int c1 = 0; c1 < 1024; c1++) { a[c1] = b[c1] + 1; }  // the loop\n"
over = line * (spec["max_text"] // len(line) + 1)  # just over: by less than a line
# What the record may add to the address space the process has now.
limit = vmsize() + spec["budget"]
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
res = {"over_bytes": len(over)}
try:
    store.record("big", over, "R(L0,comps=['c1'])", True, [1.0])
    res["over"] = "recorded"
except ValueError as e:
    res["over"] = "ValueError: " + str(e)
del over
fit = line * (spec["fit"] // len(line))
res["fit"] = store.record("fit", fit, "R(L0,comps=['c1'])", True, [1.0])
found = store.lookup("fit", fit, "R(L0,comps=['c1'])")
res["found"] = found is not None and found.execution_times == [1.0]
print(json.dumps(res))
'''

MAX_TEXT = 256 << 20
BUDGET = 21 * MAX_TEXT // 8  # what the address space may grow by: see run_size_scenario
FIT = 64 << 20


def run_size_scenario(tmp_path: Path, lib: Path | None = None) -> subprocess.CompletedProcess:
    """The size scenario in a child whose address space may grow by BUDGET
    (2.6 times the limit) once the store is open and the source too long
    to record is built: enough for Python to encode that source as JSON
    (twice its size at the peak: the escaped text and the joined
    arguments), not for the engine to take it as well (the request, the
    decoded text and the copy it normalizes: three times). Go reserves
    address space when it starts and so does glibc per thread
    (MALLOC_ARENA_MAX=1 keeps that fixed), so the limit is set then, on top
    of what the process has. Below twice the limit Python itself would
    fail (MemoryError, no abort); from a little over three times the
    record of the whole source would fit."""
    spec = {"db": str(tmp_path / "big.db"), "max_text": MAX_TEXT, "budget": BUDGET, "fit": FIT}
    env = {k: v for k, v in os.environ.items() if k not in ("TIRASTORE_FAILPOINTS", "TIRASTORE_LIB")}
    env["MALLOC_ARENA_MAX"] = "1"
    if lib is not None:
        env["TIRASTORE_LIB"] = str(lib)
        env["TIRASTORE_FAILPOINTS"] = "text-size-unchecked=on"
    return subprocess.run([sys.executable, "-c", SIZE_DRIVER, json.dumps(spec)], capture_output=True, text=True,
                          env=env, timeout=600)


def test_size_limit_under_address_space_limit(tmp_path):
    """A source just over max_text_bytes is refused with a ValueError naming
    the argument and the limit, and the process survives to record (and
    look up) a source that fits, all under an address-space limit."""
    r = run_size_scenario(tmp_path)
    assert r.returncode == 0, f"child died:\n{r.stdout}\n{r.stderr[-3000:]}"
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["over"].startswith("ValueError: TiraStore.record(): program_source_code is "), res
    assert f"{res['over_bytes']} bytes of UTF-8, more than the {MAX_TEXT} bytes (256 MiB)" in res["over"], res
    assert res["fit"] is True and res["found"] is True, res


def test_negative_control_size_unchecked(tmp_path, failpoints_lib):
    """With the size limit lifted, the same scenario hands the engine the
    source too long to record, and the child dies of Go's out of memory."""
    r = run_size_scenario(tmp_path, lib=failpoints_lib)
    assert r.returncode != 0, f"the child survived:\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "fatal error: out of memory" in r.stderr, r.stderr[-3000:]


def test_long_text_marker(tirastore_mod, tmp_path):
    """A text longer than the limit is refused by the engine, whoever
    measures it: Python, which sends a marker (for an ASCII source, and for
    a non-ASCII one whose characters fit but whose UTF-8 does not), or the
    parser, which does not build it from a C caller's request; a text longer
    than the limit only once escaped is taken."""
    store = tirastore_mod.TiraStore(tmp_path / "t.db", cpu_model=TEST_CPU, slurm_cpus=TEST_SLURM)
    text = "x" * (MAX_TEXT + 1)
    with pytest.raises(ValueError, match=rf"^TiraStore.lookup\(\): program_source_code is {MAX_TEXT + 1} bytes of UTF-8"):
        store.lookup("p", text, SCHED_R)
    store.close()
    text = "é" * (MAX_TEXT // 2 + 1)  # fewer characters than the limit, more bytes
    with pytest.raises(ValueError, match=rf"^make_program_hash\(\): source is {MAX_TEXT + 2} bytes of UTF-8"):
        tirastore_mod.make_program_hash(text)
    del text
    native = tirastore_mod._native

    def raw_call(method: bytes, request: bytes):
        """tirastore_call with the request as a C caller writes it."""
        out = native.ffi.new("char **")
        return native._reply(native.lib.tirastore_call(0, method, request, out), out)

    request = b'{"source": "' + b"y" * (MAX_TEXT + 1) + b'"}'
    with pytest.raises(ValueError, match=rf"^make_program_hash\(\): source is {MAX_TEXT + 1} bytes of UTF-8"):
        raw_call(b"make_program_hash", request)
    request = b'{"source": "' + b"\\n" * (MAX_TEXT // 2) + b'xx"}'
    assert raw_call(b"make_program_hash", request) == conftest.oracle_program_hash("xx")
