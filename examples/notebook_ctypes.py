#!/usr/bin/env python3
"""The notebook pattern: TiraStore from plain ctypes, no package install.

    python3 examples/notebook_ctypes.py [DB_PATH]

Useful where only the shared library is at hand (a Jupyter kernel on a login
node, a foreign Python): it needs libtirastore.so and the standard library,
nothing else. The library is taken from $TIRASTORE_LIB, else
python/tirastore/libtirastore.so, else build/libtirastore.so, in the
repository of this file (pasted into a notebook cell: of the current
directory or one of its parents). Without DB_PATH the database goes into a
temporary directory; in a notebook kernel the script ignores the kernel's
command line (examples/notebook.ipynb is the same walk, cell by cell).

The one trap: a buffer the library hands over (every "char **out") must be
declared and read as a c_void_p, never as a c_char_p. ctypes converts a
c_char_p (a restype, or the .value of an out slot) into a bytes copy and the
address is gone, so nothing is left to pass to tirastore_free: a leak on
every call. Here "out" is a c_void_p filled in by reference, copied with
ctypes.string_at, then freed. Only tirastore_version's static string is read
as c_char_p.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

# Pasted into a notebook cell, the script has no __file__: the checkout is
# then looked for from the current directory up.
_FILE = globals().get("__file__")
SEARCH = [Path(_FILE).resolve().parent.parent] if _FILE else [Path.cwd(), *Path.cwd().parents]

# Status codes of include/tirastore.h (the ones this script names).
TIRASTORE_OK = 0


def find_library() -> Path:
    env = os.environ.get("TIRASTORE_LIB")
    if env:
        return Path(env)
    for repo in SEARCH:
        for candidate in (repo / "python" / "tirastore" / "libtirastore.so", repo / "build" / "libtirastore.so"):
            if candidate.is_file():
                return candidate
    raise SystemExit("notebook_ctypes: libtirastore.so not found; run ./build.sh or set TIRASTORE_LIB")


def load(path: Path) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise SystemExit(f"notebook_ctypes: cannot load {path}: {e}") from None
    # const char *tirastore_version(void);  -- static, never freed: c_char_p is fine
    lib.tirastore_version.argtypes = []
    lib.tirastore_version.restype = ctypes.c_char_p
    # int tirastore_open(const char *db_path, const char *options_json, uint64_t *handle, char **out);
    lib.tirastore_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                   ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_void_p)]
    lib.tirastore_open.restype = ctypes.c_int
    # int tirastore_close(uint64_t handle, char **out);
    lib.tirastore_close.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p)]
    lib.tirastore_close.restype = ctypes.c_int
    # int tirastore_call(uint64_t handle, const char *method, const char *args_json, char **out);
    lib.tirastore_call.argtypes = [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p,
                                   ctypes.POINTER(ctypes.c_void_p)]
    lib.tirastore_call.restype = ctypes.c_int
    # void tirastore_free(const char *buf);  -- takes the raw pointer back
    lib.tirastore_free.argtypes = [ctypes.c_void_p]
    lib.tirastore_free.restype = None
    return lib


class TiraStoreError(Exception):
    """A failed call: the library's status code, error type and message."""

    def __init__(self, status: int, error: dict[str, Any]) -> None:
        super().__init__(f"[{status}] {error.get('type')}: {error.get('message')}")
        self.status = status
        self.error = error


def take_reply(lib: ctypes.CDLL, status: int, out: ctypes.c_void_p) -> Any:
    """Decode the reply in *out*, free it, and return the result (or raise)."""
    if not out.value:
        raise TiraStoreError(status, {"type": "RuntimeError", "message": "no reply document"})
    try:
        doc = json.loads(ctypes.string_at(out.value).decode("utf-8"))
    finally:
        lib.tirastore_free(out.value)
        out.value = None
    if status != TIRASTORE_OK:
        raise TiraStoreError(status, doc["error"])
    return doc["result"]


def call(lib: ctypes.CDLL, handle: int, method: str, **args: Any) -> Any:
    out = ctypes.c_void_p()
    status = lib.tirastore_call(handle, method.encode(), json.dumps(args).encode("utf-8"), ctypes.byref(out))
    return take_reply(lib, status, out)


def main(args: list[str]) -> int:
    """Record one measurement and look it up in *args*[0], else in a temporary database."""
    lib = load(find_library())
    print(f"libtirastore {lib.tirastore_version().decode()} via ctypes")

    with tempfile.TemporaryDirectory(prefix="tirastore-notebook-") as tmp:
        db_path = args[0] if args else os.path.join(tmp, "cache.db")

        handle = ctypes.c_uint64(0)
        out = ctypes.c_void_p()
        status = lib.tirastore_open(db_path.encode(), json.dumps({"source_project": "notebook"}).encode(),
                                    ctypes.byref(handle), ctypes.byref(out))
        info = take_reply(lib, status, out)
        print(f"opened {info['db_path']} (handle {handle.value}, writes allowed: {info['writes_allowed']})")

        try:
            program = {
                "program_name": "matmul",
                "program_source_code": "void matmul() { /* C[i][j] += A[i][k] * B[k][j] */ }",
                "tiralib_schedule_string": "T2(L0,L1,32,32,comps=['c1'])|U(L2,4,comps=['c1'])",
            }
            written = call(lib, handle.value, "record", **program, is_legal=True, execution_times=[1.25, 1.21, 1.23])
            print(f"record -> {written}")
            found = call(lib, handle.value, "lookup", **program)
            if found is None:
                print("notebook_ctypes: lookup missed the record just written", file=sys.stderr)
                return 1
            print("lookup ->")
            for k, v in found.items():
                print(f"  {k:<16} {v}")
            print(f"count -> {call(lib, handle.value, 'count')}")
        finally:
            out = ctypes.c_void_p()
            take_reply(lib, lib.tirastore_close(handle.value, ctypes.byref(out)), out)
            print("closed")
    return 0


def in_notebook_kernel() -> bool:
    """True in a Jupyter kernel, where __name__ is "__main__" too but sys.argv is the kernel's own."""
    return "ipykernel" in sys.modules


if __name__ == "__main__":
    if in_notebook_kernel():
        main([])          # no sys.exit: it would only print a SystemExit in the notebook
    else:
        try:
            sys.exit(main(sys.argv[1:]))
        except TiraStoreError as e:
            print(f"notebook_ctypes: {e}", file=sys.stderr)
            sys.exit(1)
