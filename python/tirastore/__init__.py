"""TiraStore: a measurement cache for compiler autoschedulers on HPC clusters.

One SQLite file on a shared (Lustre/NFS) filesystem, read and written by many
Slurm jobs at once, serialized by a lock built on atomic ``link()``. A drop-in
replacement for the original pure-Python TiraStore: same API, same database
and lock-file formats. The engine is a Go library (``libtirastore.so``)
loaded with cffi.
"""

from __future__ import annotations

from tirastore import _native
from tirastore.errors import LockLostError
from tirastore.store import LookupResult, TiraStore

__version__ = _native.version()

__all__ = [
    "TiraStore",
    "LookupResult",
    "LockLostError",
    "normalize_schedule",
    "validate_schedule",
    "normalize_program",
    "make_program_hash",
    "__version__",
]


def normalize_schedule(schedule: str) -> str:
    """Normalize a schedule string: remove whitespace, single-quote comp names."""
    return _native.call(0, "normalize_schedule", schedule=schedule)


def validate_schedule(schedule: str) -> tuple[bool, str]:
    """Check a schedule against the transformation grammar: ``(True, "")`` or ``(False, reason)``."""
    ok, reason = _native.call(0, "validate_schedule", schedule=schedule)
    return ok, reason


def normalize_program(source: str) -> str:
    """Normalize program source for hashing (no comments, includes or whitespace)."""
    return _native.call(0, "normalize_program", source=source)


def make_program_hash(source: str) -> str:
    """SHA-256 hex digest of the normalized program source."""
    return _native.call(0, "make_program_hash", source=source)
