"""The only module that knows cffi: loads libtirastore.so and calls it.

Every call sends its arguments as one JSON object and gets back
``{"result": ...}`` (with ``"warnings"``, shown as TiraStoreWarning) or
``{"error": {"type", "message", "code"}}``; errors are
raised as the exception class the engine names (the classes the original
pure-Python TiraStore raised). The library releases the GIL while it works
(cffi does so for every call), so threads overlap.

Loading on first use
--------------------
Importing the package loads nothing: no shared library, no Go runtime, no
cffi (whose parser of the declarations alone costs tens of milliseconds).
Programs import tirastore at their own import time and may never call it
(ejKernel makes its caches when it is imported), so all of that waits for
the first call that needs it. :data:`ffi` and :data:`lib` start as
placeholders; the first attribute asked of either runs :func:`_load`, under
:data:`reopen_lock` (two threads making the first call at once load once),
which parses :data:`CDEF`, loads the library named by ``$TIRASTORE_LIB`` (or
the copy next to this file) as it is at that moment, and puts the real
objects in their place: later calls go straight to them. A library that
cannot be loaded is reported by that first call (and by each later one
until it can be): ImportError naming the missing file, MemoryError where
the address-space limit leaves its Go runtime too little room (below), or
OSError from dlopen. ``tirastore.__version__`` is asked of the library
when it is first read (the engine owns the version).

Address space
-------------
Under an address-space limit (``ulimit -v``, RLIMIT_AS) too small for it,
the Go runtime aborts the process as it starts, which no caller can catch.
So each load (the first, and a forked child's fresh copy, which needs as
much again beside its parent's) is preceded by
:func:`tirastore._address_space.check`, which compares the limit with
the figures the library file states and raises MemoryError, naming the
limit, the need and how to raise the limit, instead of loading
(docs/limits.md, "Address space").

Fork safety
-----------
The library is a Go c-shared library. Go's runtime does not survive
``fork()``: only the forking thread exists in the child, the runtime's other
threads (scheduler, GC workers, sysmon) are gone while its data still says
they exist, so the child's first call into the inherited copy blocks forever
(golang/go#15538, #14767). Autoschedulers create a store in the parent and
hand work to a ``multiprocessing.Pool`` (start method ``fork`` on Linux), so
this module makes forked children load their own copy of the library:

* ``os.register_at_fork(after_in_child=...)`` runs in every child made by
  ``os.fork()`` (and so by multiprocessing's ``fork`` and ``forkserver``
  start methods): it bumps :data:`lib_copy` and puts the placeholder back in
  :data:`lib`. Nothing is loaded yet; a child that never calls the library
  pays nothing.
* The child's first call through the placeholder loads a FRESH copy of the
  library (the same :func:`_load` as the first load; a child of a process
  that never loaded the library has no copy mapped and loads the file as
  its parent would have). ``dlopen`` of the same path would return the
  copy already mapped (the dead runtime), so the bytes are copied into an
  anonymous memfd (``os.memfd_create``) and loaded as ``/proc/<pid>/fd/<n>``
  (a name no other process of the lineage used, so glibc's by-name lookup
  cannot match an inherited copy; the fd is closed once loaded). Where
  memfd cannot be used, a private temporary file is used and unlinked after
  loading. The fresh copy starts its own Go runtime; :data:`lib` then
  points at it.
* Handles are numbers in one runtime's table: a handle from the parent means
  nothing to the child's copy. :class:`tirastore.TiraStore` remembers its
  open arguments and the library copy its handle belongs to, and re-opens its
  handle in the current copy on first use in a new copy (one integer
  compare per call). Closing or collecting a store of an older copy
  never calls the dead copy (the parent still owns that handle).
  ``TiraStore`` is picklable (path + options; the copy re-opens on first
  use), so stores passed to ``spawn``/``forkserver`` workers work too.
* Locks: only the forking thread exists in the child, so a lock another
  thread of the parent held at that moment would stay held. The hook gives
  the child new ones: cffi's FFI lock (which the fresh copy's dlopen and
  the first use of each function take), :data:`reopen_lock`, and
  PersistentCache's (see :func:`_reset_inherited_locks`).
* The parent is untouched: it keeps its library and its handles.
  Grandchildren work the same way (each level loads one more copy).
* ``TIRASTORE_FORK_RELOAD=0`` (read at import) disables all this, for the
  negative-control test only: a forked child's first call then fails with
  RuntimeError (the C entry points refuse with TIRASTORE_ERR_FORKED rather
  than enter the dead runtime, which would hang).

Known risks and limits:

* Two (or more) Go runtimes in one process are not supported by Go
  (golang/go#18976, #65050). The dead copy is never called again, but it
  stays mapped (its pages are shared copy-on-write with the parent) and its
  data still claims threads that do not exist; only the fresh copy runs.
* Signal handlers chain: the fresh runtime installs its handlers for
  SIGSEGV/SIGBUS/SIGFPE/SIGPIPE/SIGURG and forwards signals that are not its
  own to the handler it found, which is the dead runtime's, which forwards
  to whatever was installed before it (Python's, faulthandler's, SIG_DFL).
  A crash outside Go is therefore reported through two forwarding hops; a
  signal the dead runtime believes is its own (e.g. a fault on a thread it
  had bound an M to) may be mishandled by it. Installing other signal
  handlers after the reload (faulthandler.enable() etc.) is fine.
  Tested: a SIGSEGV in Python code of a reloaded child reaches faulthandler
  and kills the child with SIGSEGV (tests/python/test_fork.py).
* SIGINT: while a call waits more than 20 ms for a contended lock the
  library installs its own SIGINT handler (capi/interrupt.go). A fork at
  that moment (from another thread) would leave the child with the dead
  runtime's handler, which swallows Ctrl-C (seen in a test). The at-fork
  hook therefore looks up the installed SIGINT handler (sigaction + dladdr
  through ctypes) and, if it lies in a copy of the library, reinstalls
  Python's handler. Best effort: if ctypes or dladdr are unavailable the
  check is skipped; so is it in a lineage that never loaded the library.
* A forked child that uses the library maps one more copy of it and
  starts a new Go heap: some MiB of RSS, and milliseconds to load the copy
  and re-open its stores (docs/performance.md, "Figures the code
  cites").
* Only forks that run Python's at-fork hooks are detected: ``os.fork()``,
  multiprocessing, ``os.forkpty``. A C extension that calls ``fork()``
  directly and then calls into tirastore from the child is not covered.
* A memfd must be executable-mappable (kernels with vm.memfd_noexec=2 refuse
  it); then a temporary file is used, which needs a TMPDIR that is not
  mounted noexec.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import threading
import warnings
from pathlib import Path
from typing import Any

from tirastore import _address_space
from tirastore import errors as _errors

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


def library_path() -> Path:
    """Where the library is loaded from: $TIRASTORE_LIB, else next to this file."""
    env = os.environ.get("TIRASTORE_LIB")
    if env:
        return Path(env)
    return Path(__file__).with_name(LIB_NAME)


class _LoadOnFirstUse:
    """Stands in for ``ffi`` or ``lib`` until the first use loads them (see
    "Loading on first use"; a forked child gets a new one for ``lib``)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # introspection (doctest, help, copy): no load for it
            raise AttributeError(attr)
        _load()
        return getattr(globals()[self._name], attr)

    def __repr__(self) -> str:
        return f"<tirastore._native.{self._name}, loaded on first use>"


# The cffi declarations (an FFI once loaded) and this process's copy of the
# library (cffi's lib object once loaded).
ffi: Any = _LoadOnFirstUse("ffi")
lib: Any = _LoadOnFirstUse("lib")

# The type of a call's reply pointer: its name until ffi is loaded, then
# the type itself (a name is looked up in cffi's cache at every call: half
# of ffi.new's cost).
_REPLY_OUT: Any = "char **"

# Which copy of the library this process uses: 0 in the process that
# imported the package, +1 in each forked child (see "Fork safety" above). A
# handle is valid only in the copy that opened it.
lib_copy = 0

# The path the running copy was loaded from (the original file, or the memfd
# / temporary file of a fresh copy in a forked child); None until loaded.
loaded_from: str | None = None

# Whether a copy of the library may be mapped in this process: set before
# the first dlopen, inherited by forked children, which then need a fresh
# copy (a child of a process that never loaded one loads the file itself).
_mapped = False

_FORK_RELOAD = os.environ.get("TIRASTORE_FORK_RELOAD", "1").strip().lower() not in ("0", "false", "no", "off")

# Serializes the loads and the stores' re-opens (recreated in each child).
reopen_lock = threading.RLock()

# Run before each load of the library, the first and a forked child's:
# MemoryError where its Go runtime would not fit under the address-space
# limit (see "Address space" above). A name of its own so that the
# negative control of tests/python/test_address_space.py can load without it.
_preflight = _address_space.check


def _load() -> None:
    """Put the real ``ffi`` and ``lib`` in place of their placeholders.

    Runs under :data:`reopen_lock`; a thread that waited for another's load
    finds nothing left to do. The first copy of a lineage is the library
    file itself; a forked child's is a fresh copy (:func:`_load_fresh_copy`).
    """
    global ffi, lib, loaded_from, _mapped, _REPLY_OUT
    with reopen_lock:
        if type(ffi) is _LoadOnFirstUse:
            from cffi import FFI

            new = FFI()
            new.cdef(CDEF)
            _REPLY_OUT = new.typeof("char **")
            ffi = new
        if type(lib) is not _LoadOnFirstUse:
            return
        if _mapped:
            _preflight(library_path(), forked=True)
            handle, where = _load_fresh_copy()
        else:
            path = library_path()
            if not path.exists():
                raise ImportError(
                    f"tirastore: the native library {path} is missing; build it with "
                    f"'make build' (or 'pip install .'), or point TIRASTORE_LIB at it"
                )
            _preflight(path)
            _mapped = True  # before dlopen: a fork from another thread meanwhile may inherit the copy
            try:
                handle = ffi.dlopen(str(path))
            except OSError:
                _mapped = False  # a failed dlopen leaves nothing mapped
                raise
            where = str(path)
        lib, loaded_from = handle, where
        _copy_bases.add(_copy_base(handle))
        _copy_bases.discard(0)


def _copy_library(dst_fd: int) -> None:
    """Copy the library file into dst_fd (in the kernel when it can)."""
    with open(library_path(), "rb") as src:
        size = os.fstat(src.fileno()).st_size
        offset = 0
        try:
            while offset < size:
                sent = os.sendfile(dst_fd, src.fileno(), offset, size - offset)
                if sent == 0:
                    break
                offset += sent
        except OSError:
            pass
        if offset < size:  # sendfile unsupported here: copy through Python
            src.seek(offset)
            os.lseek(dst_fd, offset, os.SEEK_SET)
            while chunk := src.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst_fd, view):]


def _load_fresh_copy():
    """dlopen a private copy of the library, distinct from every copy already mapped."""
    pid = os.getpid()
    errors = []
    if hasattr(os, "memfd_create"):
        fd = -1
        try:
            fd = os.memfd_create(f"libtirastore-{pid}", os.MFD_CLOEXEC)
            _copy_library(fd)
            # /proc/<pid>/fd/<n> is unique to this process, so glibc's lookup of
            # loaded objects by name cannot return a copy inherited from an
            # ancestor (which may have used the same fd number).
            name = f"/proc/{pid}/fd/{fd}"
            if not os.path.exists(name):  # /proc of another pid namespace
                name = f"/proc/self/fd/{fd}"
            handle = ffi.dlopen(name)
            os.close(fd)
            return handle, name
        except OSError as e:
            errors.append(f"memfd: {e}")
            if fd >= 0:
                os.close(fd)
    import tempfile

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"libtirastore-{pid}-", suffix=".so")
        try:
            _copy_library(fd)
        finally:
            os.close(fd)
        return ffi.dlopen(tmp), tmp
    except OSError as e:
        errors.append(f"temporary file: {e}")
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    raise ImportError(
        "tirastore: cannot load a fresh copy of the native library in a forked "
        "child (" + "; ".join(errors) + ")"
    )


# ctypes' Dl_info, made when first needed (ctypes is imported then, not with
# the package).
_DlInfo: Any = None


def _dladdr_base(addr: int) -> int:
    """Load address of the object holding *addr*, by dladdr (0 if none)."""
    global _DlInfo
    import ctypes

    if _DlInfo is None:

        class DlInfo(ctypes.Structure):
            _fields_ = [
                ("dli_fname", ctypes.c_char_p),
                ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p),
            ]

        _DlInfo = DlInfo
    info = _DlInfo()
    if ctypes.CDLL(None).dladdr(ctypes.c_void_p(addr), ctypes.byref(info)):
        return info.dli_fbase or 0
    return 0


def _copy_base(handle) -> int:
    """Load address of the copy that handle belongs to (0 if unknown)."""
    try:
        return _dladdr_base(int(ffi.cast("uintptr_t", handle.tirastore_version)))
    except Exception:  # noqa: BLE001 - best effort
        return 0


def _sigint_handler_base() -> int:
    """Load address of the object holding the installed C-level SIGINT handler (0 if unknown)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None)
        act = ctypes.create_string_buffer(512)  # struct sigaction; sa_handler comes first
        if libc.sigaction(signal.SIGINT, None, act) != 0:
            return 0
        handler = ctypes.c_void_p.from_buffer(act).value or 0
        if handler <= 1:  # SIG_DFL / SIG_IGN
            return 0
        return _dladdr_base(handler)
    except Exception:  # noqa: BLE001 - best effort
        return 0


# Load addresses of every copy loaded in this process's lineage (inherited
# through fork): a SIGINT handler inside one of them is a dead runtime's.
_copy_bases: set[int] = set()


def _restore_sigint_if_dead_runtime() -> None:
    """Give SIGINT back to Python if a dead copy's Go runtime holds it.

    The library installs its own SIGINT handler while a call waits for a
    contended lock (capi/interrupt.go). A fork at that moment (from another
    thread) leaves the child with the dead runtime's handler, which would
    swallow Ctrl-C; Python's handler (as Python recorded it) is reinstalled.
    """
    if not _copy_bases:  # no copy in this lineage (or none located): nothing to look for
        return
    base = _sigint_handler_base()
    if base and base in _copy_bases:
        import signal

        handler = signal.getsignal(signal.SIGINT)
        if handler is not None:
            try:
                signal.signal(signal.SIGINT, handler)
            except (ValueError, OSError):
                pass


def _reset_inherited_locks() -> None:
    """New locks for the child in place of the ones it inherited.

    Only the forking thread exists in a child: a lock that another thread of
    the parent held at the fork stays held forever. cffi's FFI object, kept
    for the fresh copy (its cdata types are the ones the stores' buffers
    have), serializes dlopen and the first use of each library function
    with its ``_lock``: a parent thread making its first call of some
    function while another thread forks left children that hung in the
    fresh copy's dlopen (tests/python/test_fork.py).
    """
    global reopen_lock
    reopen_lock = threading.RLock()
    if type(ffi) is not _LoadOnFirstUse and hasattr(ffi, "_lock"):
        import _thread

        ffi._lock = _thread.allocate_lock()


def _after_fork_in_child() -> None:
    global lib, lib_copy
    _reset_inherited_locks()
    lib_copy += 1
    lib = _LoadOnFirstUse("lib")
    _restore_sigint_if_dead_runtime()


if _FORK_RELOAD and hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def ensure_loaded() -> None:
    """Load this process's copy now (it is loaded by the first call otherwise)."""
    lib.tirastore_version  # noqa: B018 - the attribute access triggers the load


def exception_class(name: str) -> type[BaseException]:
    """The exception class an error reply's ``type`` names.

    The names come from the library's one error table (core/apierr; the
    ``error_table`` utility lists it): a builtin (``"ValueError"``),
    ``"sqlite3.<name>"``, or a class of :mod:`tirastore.errors`
    (``"LockLostError"``). Python keeps no table of its own; a name that
    resolves to no exception class gives RuntimeError.
    """
    module, _, attr = name.rpartition(".")
    if module == "sqlite3":
        places: tuple[Any, ...] = (sqlite3,)
    elif module:
        places = ()
    else:
        places = (builtins, _errors)
    for place in places:
        cls = getattr(place, attr, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            return cls
    return RuntimeError


def _default(obj: Any) -> Any:
    """JSON fallback: number-like objects (numpy scalars and arrays) as numbers,
    anything else JSON cannot carry (bytes, a set, a complex, ...) as the
    library's marker ``{"\\u0000type": <type name>}``.

    The library knows what each argument must be and names it in its
    TypeError ("TiraStore.lookup(): program_source_code must be str, not
    bytes"); the marker tells it what was given (capi/args.go, foreignKey).
    """
    import numbers  # here, not at import: only for what JSON cannot carry itself

    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return float(obj)
    dtype = getattr(obj, "dtype", None)
    if dtype is not None and getattr(dtype, "kind", "") == "b" and getattr(obj, "shape", None) == ():
        return bool(obj)
    if dtype is not None and hasattr(obj, "tolist"):
        return obj.tolist()
    return {"\x00type": type(obj).__name__}


# Made once: json.dumps/json.loads with non-default options build a new
# encoder per call, which costs more than the library call itself.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=True, default=_default, separators=(",", ":"))
_DECODER = json.JSONDecoder()

try:  # CPython's C accelerators, which JSONEncoder.encode and json.loads wrap
    from json.encoder import c_encode_basestring as _c_encode_basestring
    from json.encoder import c_make_encoder as _c_make_encoder
except ImportError:  # pragma: no cover - an interpreter without _json
    _c_make_encoder = _c_encode_basestring = None


def _dumps(obj: Any) -> str:
    """_ENCODER.encode(obj), without its per-call overhead: JSONEncoder
    builds its C encoder at every call anyway, so build it here directly
    (with a fresh dict of markers, so that a circular reference is still
    a ValueError and concurrent calls do not share state)."""
    if _c_make_encoder is None or _c_encode_basestring is None:
        return _ENCODER.encode(obj)
    enc = _c_make_encoder({}, _default, _c_encode_basestring, None, ":", ",", False, False, True)
    return "".join(enc(obj, 0))


def _loads(text: str) -> Any:
    """json.loads of a reply of the library: one JSON value and nothing
    else, so the C scanner alone (json.loads adds two whitespace regex
    matches, as costly as the scan of a short reply)."""
    try:
        return _DECODER.scan_once(text, 0)[0]
    except StopIteration:  # not what the library writes: let json say why
        return _DECODER.decode(text)


def _culprit(args: dict[str, Any]) -> str:
    """The name of the first argument that cannot be sent ("an argument" if none)."""
    for name, value in args.items():
        try:
            _dumps(value).encode("utf-8")
        except (TypeError, ValueError):
            return name
    return "an argument"


def _long_text(text: str) -> Any:
    """*text*, or the library's marker of a text longer than any it takes.

    The library refuses a text (a program source) longer than its
    ``max_text_bytes`` (:func:`limits`); rather than encode hundreds of
    megabytes as JSON to be told so, a longer one is sent as
    ``{"\\u0000type": "str", "\\u0000bytes": <its UTF-8 length>}``, which
    the library reports as the ValueError naming the argument and the limit
    (capi/args.go, longKey). Only called for a str too long to fit for
    sure (for every one until the limits are known); its UTF-8 length is
    measured a slice at a time.
    """
    if text.isascii():
        n = len(text)
    else:
        n = sum(len(text[i:i + _SLICE].encode("utf-8", "surrogatepass")) for i in range(0, len(text), _SLICE))
    return {"\x00type": "str", "\x00bytes": n} if n > _limits()["max_text_bytes"] else text


_SLICE = 1 << 20


def _encode(where: str, args: dict[str, Any]) -> bytes:
    # A source that may be longer than the library takes is measured first
    # (two dict lookups and a length compare per call otherwise).
    for name in ("program_source_code", "source"):
        text = args.get(name)
        if type(text) is str and len(text) > _SURELY_FITS:
            args = {**args, name: _long_text(text)}
    # Only what the library never sees is reported here, naming the argument;
    # wrong types it judges itself (see _default).
    try:
        text = _dumps(args)
    except TypeError as e:  # a dict key json cannot write (a tuple, say)
        raise TypeError(f"{where}(): {_culprit(args)}: {e}") from None
    except ValueError as e:  # circular reference
        raise ValueError(f"{where}(): {_culprit(args)}: {e}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{where}(): {_culprit(args)} contains a lone surrogate "
            f"({e.object[e.start:e.end]!r}), which cannot be stored"
        ) from None


def _reply(status: int, out) -> Any:
    try:
        text = ffi.string(out[0])
    finally:
        lib.tirastore_free(out[0])
    doc = _loads(text.decode("utf-8"))
    if status == 0:
        for message in doc.get("warnings", ()):
            # The user's call: _reply < call < TiraStore._call < the method.
            warnings.warn(message, _errors.TiraStoreWarning, stacklevel=5)
        return doc["result"]
    err = doc["error"]
    cls = exception_class(err["type"])
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
    out = ffi.new(_REPLY_OUT)
    status = lib.tirastore_open(path, _encode("TiraStore", options), handle, out)
    info = _reply(status, out)
    return int(handle[0]), info


def close_store(handle: int) -> None:
    """Close a handle (an unknown handle raises ValueError)."""
    out = ffi.new(_REPLY_OUT)
    _reply(lib.tirastore_close(handle, out), out)


def call(handle: int, method: str, **args: Any) -> Any:
    """Run one library method; handle 0 for the standalone utilities."""
    out = ffi.new(_REPLY_OUT)
    # Named as the library's own messages name it (capi/args.go, displayName).
    where = f"TiraStore.{method}" if handle else method
    status = lib.tirastore_call(handle, method.encode("ascii"), _encode(where, args), out)
    return _reply(status, out)


def call_as(where: str, handle: int, method: str, args: dict[str, Any]) -> Any:
    """:func:`call` of a method that serves another class's (the library's
    messages name ``config_value`` ``PersistentCache.get``): *where* names
    it in the errors found here, before the call, as the library's do."""
    out = ffi.new(_REPLY_OUT)
    status = lib.tirastore_call(handle, method.encode("ascii"), _encode(where, args), out)
    return _reply(status, out)


def limits() -> dict[str, int]:
    """The library's limits (core/limits): ``max_value_depth``,
    ``max_text_bytes``, ``max_request_bytes`` (a copy; see docs/limits.md)."""
    return dict(_limits())


# The limits, asked of the library once, when first needed (not at import,
# which loads no library). A text of at most _SURELY_FITS characters has at
# most max_text_bytes bytes of UTF-8 (4 bytes a character at most); until
# the limits are known _SURELY_FITS is -1, so that every text is measured.
_LIMITS: dict[str, int] | None = None
_SURELY_FITS = -1


def _limits() -> dict[str, int]:
    global _LIMITS, _SURELY_FITS
    got = _LIMITS
    if got is None:  # two threads may both ask: the same answer twice
        got = call(0, "limits")  # sends no text, so does not come back here
        _SURELY_FITS = got["max_text_bytes"] // 4
        _LIMITS = got
    return got
