"""The only module that knows cffi: loads libtirastore.so and calls it.

Every call sends its arguments as one JSON object and gets back
``{"result": ...}`` or ``{"error": {"type", "message", "code"}}``; errors are
raised as the exception class the engine names (the classes the original
pure-Python TiraStore raised). The library releases the GIL while it works
(cffi does so for every call), so threads overlap.
"""

from __future__ import annotations

import json
import numbers
import os
import sqlite3
from pathlib import Path
from typing import Any

from cffi import FFI

# Declarations of include/tirastore.h (tests/python/test_native.py checks that
# they match the header).
CDEF = """
const char *tirastore_version(void);
int tirastore_open(const char *db_path, const char *options_json, uint64_t *handle, char **out);
int tirastore_close(uint64_t handle, char **out);
int tirastore_call(uint64_t handle, const char *method, const char *args_json, char **out);
void tirastore_free(const char *buf);
"""

LIB_NAME = "libtirastore.so"

ffi = FFI()
ffi.cdef(CDEF)


def library_path() -> Path:
    """Where the library is loaded from: $TIRASTORE_LIB, else next to this file."""
    env = os.environ.get("TIRASTORE_LIB")
    if env:
        return Path(env)
    return Path(__file__).with_name(LIB_NAME)


def _load():
    path = library_path()
    if not path.exists():
        raise ImportError(
            f"tirastore: the native library {path} is missing; build it with "
            f"'make build' (or 'pip install .'), or point TIRASTORE_LIB at it"
        )
    return ffi.dlopen(str(path))


lib = _load()

_EXCEPTIONS: dict[str, type[BaseException]] = {
    "ValueError": ValueError,
    "TypeError": TypeError,
    "PermissionError": PermissionError,
    "TimeoutError": TimeoutError,
    "OSError": OSError,
    "FileNotFoundError": FileNotFoundError,
    "sqlite3.DatabaseError": sqlite3.DatabaseError,
    "sqlite3.OperationalError": sqlite3.OperationalError,
    "KeyboardInterrupt": KeyboardInterrupt,
    "RuntimeError": RuntimeError,
}


def _default(obj: Any) -> Any:
    """JSON fallback for number-like objects (numpy scalars and arrays)."""
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return float(obj)
    dtype = getattr(obj, "dtype", None)
    if dtype is not None and getattr(dtype, "kind", "") == "b" and getattr(obj, "shape", None) == ():
        return bool(obj)
    if dtype is not None and hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"an argument of type {type(obj).__name__} is not supported")


def _encode(where: str, args: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(args, ensure_ascii=False, allow_nan=True, default=_default)
    except TypeError as e:
        raise TypeError(f"{where}(): {e}") from None
    except ValueError as e:  # circular reference
        raise ValueError(f"{where}(): {e}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{where}(): a string argument contains a lone surrogate "
            f"({e.object[e.start:e.end]!r}), which cannot be stored"
        ) from None


def _reply(status: int, out) -> Any:
    try:
        text = ffi.string(out[0])
    finally:
        lib.tirastore_free(out[0])
    doc = json.loads(text)
    if status == 0:
        return doc["result"]
    err = doc["error"]
    cls = _EXCEPTIONS.get(err["type"], RuntimeError)
    if "errno" in err and issubclass(cls, OSError):
        # OSError(errno, msg) becomes the matching subclass (FileNotFoundError,
        # IsADirectoryError, ...), as the original's open() and shutil raised.
        raise OSError(err["errno"], err["message"])
    raise cls(err["message"])


def version() -> str:
    """The library's version string."""
    return ffi.string(lib.tirastore_version()).decode("ascii")


def open_store(db_path: str, options: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Open a database; returns (handle, info)."""
    if "\x00" in db_path:  # a C string would end there and name another file
        raise ValueError("TiraStore(): db_path contains an embedded null character")
    try:
        path = db_path.encode("utf-8")
    except UnicodeEncodeError:
        path = os.fsencode(db_path)  # undecodable bytes of a POSIX file name
    handle = ffi.new("uint64_t *")
    out = ffi.new("char **")
    status = lib.tirastore_open(path, _encode("TiraStore", options), handle, out)
    info = _reply(status, out)
    return int(handle[0]), info


def close_store(handle: int) -> None:
    """Close a handle (an unknown handle raises ValueError)."""
    out = ffi.new("char **")
    _reply(lib.tirastore_close(handle, out), out)


def call(handle: int, method: str, **args: Any) -> Any:
    """Run one library method; handle 0 for the standalone utilities."""
    out = ffi.new("char **")
    status = lib.tirastore_call(handle, method.encode("ascii"), _encode(method, args), out)
    return _reply(status, out)
