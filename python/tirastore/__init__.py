"""TiraStore: a measurement cache for compiler autoschedulers on HPC clusters.

One SQLite file on a shared (Lustre/NFS) filesystem, read and written by many
Slurm jobs at once, serialized by a lock built on atomic ``link()``. A drop-in
replacement for the original pure-Python TiraStore: same API, same database
and lock-file formats. The engine is a Go library (``libtirastore.so``)
loaded with cffi. :class:`PersistentCache` is ejKernel's kernel-config cache
on the same engine.
"""

from __future__ import annotations

from tirastore import _native
from tirastore.claim import Claim, ClaimInfo
from tirastore.ejkernel_patch import patch_ejkernel
from tirastore.errors import LockLostError, TiraStoreWarning
from tirastore.persistent_cache import ConfigEntry, PersistentCache
from tirastore.store import LookupResult, TimingStats, TiraStore


def __getattr__(name: str) -> str:
    """``__version__``, asked of the library when first read (PEP 562).

    The engine owns the version (core/version.go); reading it loads the
    library, which importing the package does not (see
    ``tirastore._native``, "Loading on first use").
    """
    if name == "__version__":
        version = _native.version()
        globals()["__version__"] = version  # later reads find it here
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "__version__"})

__all__ = [
    "TiraStore",
    "LookupResult",
    "TimingStats",
    "Claim",
    "ClaimInfo",
    "PersistentCache",
    "ConfigEntry",
    "patch_ejkernel",
    "LockLostError",
    "TiraStoreWarning",
    "normalize_schedule",
    "validate_schedule",
    "normalize_program",
    "make_program_hash",
    "get_include",
    "limits",
    "__version__",
]

# The helpers below take any falsy argument (None, "", 0) as "", as the
# original did (``if not s: return ""``); everything else goes to the engine.


def normalize_schedule(schedule: str) -> str:
    """Return the normalized form of a schedule string.

    All whitespace is removed and every comp name inside ``comps=[...]`` is
    single-quoted, so that cosmetically different spellings of a schedule
    name one record. The result is not validated (see
    :func:`validate_schedule`).

    :param str schedule: a schedule such as ``"R(L0, comps=[c1])"``; any
        falsy value (``None``, ``""``) gives ``""``, as in the original
    :return: the normalized schedule
    :raises TypeError: *schedule* is neither falsy nor a str
    :raises ValueError: *schedule* contains a lone surrogate

    >>> normalize_schedule('R( L0 , comps=["c1", c2] )')
    "R(L0,comps=['c1','c2'])"
    >>> normalize_schedule(None)
    ''
    """
    return _native.call(0, "normalize_schedule", schedule=schedule or "")


def validate_schedule(schedule: str) -> tuple[bool, str]:
    """Check a schedule against the grammar of the Tiramisu transformations.

    The schedule is one or more ``|``-separated transformations among
    ``S I R P T2 T3 U F``, each with its loop levels, integers and
    ``comps=[...]`` list, or among ``D E M TG``, the other actions TiraLib
    prints, which the original library rejected. Whitespace is ignored; an
    empty schedule is valid. :meth:`TiraStore.record` checks the normalized
    schedule this way.

    :param str schedule: the schedule to check; any falsy value (``None``,
        ``""``) is valid, as in the original
    :return: ``(True, "")``, or ``(False, reason)`` with the original's
        reason text
    :raises TypeError: *schedule* is neither falsy nor a str
    :raises ValueError: *schedule* contains a lone surrogate

    >>> validate_schedule("S(L0,L1,4,8,comps=['c1'])|U(L2,4,comps=[c1])")
    (True, '')
    >>> validate_schedule("TG(L1,L2,10,5,comps=['c1'])|M([0, 1, 1, 0],comps=['c1'])")
    (True, '')
    >>> validate_schedule("U(L2,4)")
    (False, "Malformed U transformation: 'U(L2,4)'")
    """
    ok, reason = _native.call(0, "validate_schedule", schedule=schedule or "")
    return ok, reason


def normalize_program(source: str) -> str:
    """Return the form of a program source that its hash is computed from.

    Block and line comments, ``#include`` lines and all whitespace are
    removed, so that cosmetically different versions of a program share one
    hash. The result is not meant to be read; the store keeps the original
    source.

    :param str source: program source code; any falsy value (``None``,
        ``""``) gives ``""``, as in the original
    :return: the normalized source
    :raises TypeError: *source* is neither falsy nor a str
    :raises ValueError: *source* contains a lone surrogate

    >>> normalize_program("#include <a.h>\\nvoid f() { return; } // done")
    'voidf(){return;}'
    >>> normalize_program(None)
    ''
    """
    return _native.call(0, "normalize_program", source=source or "")


def make_program_hash(source: str) -> str:
    """Return the SHA-256 hex digest of the normalized program source.

    The ``program_hash`` under which the store keeps a program: equal for
    sources that :func:`normalize_program` makes equal.

    :param str source: program source code; any falsy value (``None``,
        ``""``) hashes as ``""``, as in the original
    :return: 64 lowercase hex digits
    :raises TypeError: *source* is neither falsy nor a str
    :raises ValueError: *source* contains a lone surrogate, or is longer
        than ``limits()["max_text_bytes"]``

    >>> make_program_hash("void f() {}") == make_program_hash("void f(){} // same")
    True
    >>> make_program_hash(None)
    'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
    """
    return _native.call(0, "make_program_hash", source=source or "")


def limits() -> dict[str, int]:
    """Return the limits of what a store accepts, as the library defines them.

    * ``max_value_depth``: how deeply the lists and dicts of a stored value
      may nest (a :class:`PersistentCache` value, a record's
      ``result_json``): Python's json reads each level on the interpreter's
      stack, so a deeper value could not be read back by a caller that is
      deep in its own stack; writing one raises ValueError;
    * ``max_text_bytes``: the longest text, in bytes of UTF-8, that a call
      may carry (a program source: a longer one raises ValueError before
      it is sent);
    * ``max_request_bytes``: the longest JSON of one call's arguments.

    docs/limits.md gives the reasons for each figure.

    :return: a new dict of the three limits

    >>> limits()["max_value_depth"]
    100
    >>> limits()["max_text_bytes"] // 2**20
    256
    """
    return _native.limits()


def get_include() -> str:
    """Return the directory that holds ``tirastore.h``, for C and C++ callers.

    An installed package ships the header in its ``include/`` directory,
    next to ``libtirastore.so`` (the directory of ``tirastore.__file__``);
    an editable install or a source tree uses the repository's
    ``include/``. Compile with ``-I`` this directory and link with ``-L``
    the package's directory, ``-ltirastore``.

    :return: an absolute path
    :raises FileNotFoundError: neither location has the header (a broken
        install)

    >>> import os
    >>> os.path.isfile(os.path.join(get_include(), "tirastore.h"))
    True
    """
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        os.path.join(here, "include"),
        # python/tirastore/ -> the repository's include/ (the one source).
        os.path.join(os.path.dirname(os.path.dirname(here)), "include"),
    ]
    for d in candidates:
        if os.path.isfile(os.path.join(d, "tirastore.h")):
            return d
    raise FileNotFoundError("tirastore.h not found in " + " or ".join(candidates))
