"""Importing tirastore loads nothing; the first call loads the library, once.

Programs import tirastore at their own import time (ejKernel makes its
caches then) and may never call it, so the import must not load the shared
library, start its Go runtime or parse the cffi declarations (see
"Loading on first use" in tirastore._native). Each test runs a fresh
interpreter, since this one has long loaded the library.

Negative controls: test_negative_control_no_lock removes the lock of the
first load and sees it happen more than once; the first test fails against
a package that loads at import (checked by running this file with
PYTHONPATH pointing at such a tree).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tirastore import _native

LIBRARY = str(_native.library_path())

MISSING_MESSAGE = (
    "tirastore: the native library {} is missing; build it with "
    "'make build' (or 'pip install .'), or point TIRASTORE_LIB at it"
)


def run_python(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run code in a fresh interpreter; its last line of output, as JSON."""
    env = {**os.environ, "TIRASTORE_LIB": LIBRARY, **(env or {})}
    env.pop("TIRASTORE_FAILPOINTS", None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# What a test's interpreter has loaded (as indented as the tests' code).
STATE = """
        def state():
            with open("/proc/self/maps") as f:
                mapped = "libtirastore" in f.read()
            modules = [m for m in ("cffi", "_cffi_backend", "pycparser", "ctypes", "tempfile") if m in sys.modules]
            return {"mapped": mapped, "threads": len(os.listdir("/proc/self/task")), "modules": modules}
"""


def test_import_loads_nothing_until_the_first_call():
    out = run_python("""
        import json, os, sys
        import tirastore, tirastore.cli, tirastore.plot  # every module of the package
        from tirastore import _native
    """ + STATE + """
        before = state()
        schedule = tirastore.normalize_schedule("R( L0 , comps=[c])")
        print(json.dumps({"before": before, "after": state(), "schedule": schedule,
                          "version": tirastore.__version__, "loaded_from": _native.loaded_from}))
    """)
    # No library mapped, no Go runtime thread, no cffi, no parser.
    assert out["before"] == {"mapped": False, "threads": 1, "modules": []}, out
    after = out["after"]
    assert after["mapped"] and after["threads"] > 1 and "cffi" in after["modules"], out
    assert out["schedule"] == "R(L0,comps=['c'])"
    assert out["version"] == _native.version()
    assert out["loaded_from"] == LIBRARY


def test_version_is_read_on_first_use():
    out = run_python("""
        import json, os, sys
        import tirastore
    """ + STATE + """
        listed = "__version__" in dir(tirastore)
        before = state()
        version = tirastore.__version__
        print(json.dumps({"listed": listed, "before": before, "version": version,
                          "mapped": state()["mapped"], "again": tirastore.__version__ is version}))
    """)
    assert out["listed"] and not out["before"]["mapped"] and out["mapped"], out
    assert out["version"] == _native.version() and out["again"], out


THREADS = """
    import contextlib, json, sys, threading, time
    import cffi

    counts = {"cdef": 0, "dlopen": 0}
    real_cdef, real_dlopen = cffi.FFI.cdef, cffi.FFI.dlopen

    def cdef(self, *args, **kw):
        counts["cdef"] += 1
        return real_cdef(self, *args, **kw)

    def dlopen(self, *args, **kw):
        counts["dlopen"] += 1
        time.sleep(0.2)  # a slow load: the other threads arrive meanwhile
        return real_dlopen(self, *args, **kw)

    cffi.FFI.cdef, cffi.FFI.dlopen = cdef, dlopen
    import tirastore
    from tirastore import _native

    if sys.argv[1] == "no-lock":  # the negative control's fault
        _native.reopen_lock = contextlib.nullcontext()
    barrier = threading.Barrier(8)
    results, errors = [], []

    def first_call(i):
        barrier.wait()
        try:
            results.append(tirastore.normalize_schedule(f"R( L{i} , comps=[c])"))
        except BaseException as e:  # noqa: BLE001 - reported
            errors.append(repr(e))

    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"counts": counts, "results": sorted(results), "errors": errors}))
"""


def test_first_call_from_8_threads_loads_once():
    out = run_python(THREADS, "lock")
    assert out["errors"] == [], out
    assert out["results"] == [f"R(L{i},comps=['c'])" for i in range(8)], out
    assert out["counts"] == {"cdef": 1, "dlopen": 1}, out


def test_negative_control_no_lock():
    """Without the lock, the threads that make the first call at once all load."""
    out = run_python(THREADS, "no-lock")
    assert out["counts"]["dlopen"] > 1, out


def test_load_errors_surface_at_each_call(tmp_path):
    """A library that cannot be loaded: the import works; every call (and
    __version__) raises what the import raised before, naming the file;
    once TIRASTORE_LIB names a library, the next call loads it."""
    not_elf = tmp_path / "not-elf.so"
    not_elf.write_bytes(b"not a shared library\n")
    code = """
        import json, os
        import tirastore

        out = []
        for what in ("call", "call again", "version"):
            try:
                tirastore.__version__ if what == "version" else tirastore.normalize_schedule("")
                out.append([what, "ok", ""])
            except Exception as e:  # noqa: BLE001 - reported
                out.append([what, type(e).__name__, str(e)])
        os.environ["TIRASTORE_LIB"] = os.environ["GOOD_LIB"]
        out.append(["fixed", tirastore.normalize_schedule("R( L0 , comps=[c])"), tirastore._native.loaded_from])
        print(json.dumps(out))
    """
    missing = tmp_path / "missing.so"
    out = run_python(code, env={"TIRASTORE_LIB": str(missing), "GOOD_LIB": LIBRARY})
    expected = MISSING_MESSAGE.format(missing)
    assert out[:3] == [["call", "ImportError", expected], ["call again", "ImportError", expected],
                       ["version", "ImportError", expected]], out
    assert out[3] == ["fixed", "R(L0,comps=['c'])", LIBRARY], out

    out = run_python(code, env={"TIRASTORE_LIB": str(not_elf), "GOOD_LIB": LIBRARY})
    assert out[0][1] == "OSError" and str(not_elf) in out[0][2], out
    # The same error each time: a failed dlopen left no copy that a later
    # load would have to avoid.
    assert out[1] == ["call again", *out[0][1:]] and out[2] == ["version", *out[0][1:]], out
    assert out[3] == ["fixed", "R(L0,comps=['c'])", LIBRARY], out


def test_fork_before_the_first_load():
    """A child of a process that never loaded the library loads the file
    itself (no fresh copy is needed: none is mapped) and does not look for
    a dead runtime's SIGINT handler; the parent then loads its own."""
    out = run_python("""
        import json, os, sys
        import tirastore
        from tirastore import _native

        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            child = {"copy": _native.lib_copy, "ctypes": "ctypes" in sys.modules}
            child["schedule"] = tirastore.normalize_schedule("R( L0 , comps=[c])")
            child["loaded_from"] = _native.loaded_from
            os.write(w, json.dumps(child).encode())
            os._exit(0)
        os.close(w)
        report = b""
        while chunk := os.read(r, 4096):
            report += chunk
        _, status = os.waitpid(pid, 0)
        schedule = tirastore.normalize_schedule("R( L1 , comps=[c])")
        print(json.dumps({"child": json.loads(report), "status": status, "schedule": schedule,
                          "copy": _native.lib_copy, "loaded_from": _native.loaded_from}))
    """)
    assert out["status"] == 0, out
    assert out["child"] == {"copy": 1, "ctypes": False, "schedule": "R(L0,comps=['c'])", "loaded_from": LIBRARY}, out
    assert out["schedule"] == "R(L1,comps=['c'])" and out["copy"] == 0 and out["loaded_from"] == LIBRARY, out
