"""Put :class:`tirastore.PersistentCache` in ejkernel's place, before ejkernel builds its caches.

ejkernel builds one ``PersistentCache`` per operation while it is being
imported (``from ejkernel.ops.config.persistent import PersistentCache``
in each operation module, then ``PersistentCache("flash-attn", ...)`` at
module level). Replacing the attribute after ``import ejkernel`` is too
late: those objects exist. So :func:`patch_ejkernel` installs an import
hook that lets ejkernel's own ``ejkernel.ops.config.persistent`` module
load as it is, then sets its ``PersistentCache`` to this package's class
before any other ejkernel module imports the name.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any, Optional, Sequence

# importlib.abc is not imported: it pulls in importlib.resources and
# tempfile, which `import tirastore` must not pay for. A meta path finder
# and a loader are any objects with these methods.

#: The ejkernel module that defines the class its operations import.
TARGET = "ejkernel.ops.config.persistent"

_installed_lock = threading.Lock()


class _Loader:
    """ejkernel's own loader, then the substitution."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: Any) -> Optional[ModuleType]:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        from tirastore.persistent_cache import PersistentCache  # noqa: PLC0415

        #: ejkernel's class, for whoever wants it (tests compare the two).
        module.EjkernelPersistentCache = module.PersistentCache  # type: ignore[attr-defined]
        module.PersistentCache = PersistentCache  # type: ignore[attr-defined]


class _Finder:
    """Finds :data:`TARGET` with the other finders and wraps its loader."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def patch_ejkernel() -> None:
    """Make ejkernel keep its kernel configs in TiraStore: call it before ``import ejkernel``.

    Every cache ejkernel builds is then a :class:`tirastore.PersistentCache`
    (same locations, same ``EJKERNEL_PERSISTENT_CACHE_DIR``, its JSON files
    imported once), so that concurrent autotuning jobs keep each other's
    results. Calling it again is harmless; ejkernel's class stays available
    as ``ejkernel.ops.config.persistent.EjkernelPersistentCache``.

    :raises RuntimeError: ejkernel's config module was imported already
        (its caches exist and are ejkernel's own): call this first, e.g. at
        the top of the program
    """
    from tirastore.persistent_cache import PersistentCache  # noqa: PLC0415

    with _installed_lock:
        mod = sys.modules.get(TARGET)
        if mod is not None:
            if getattr(mod, "PersistentCache", None) is PersistentCache:
                return
            raise RuntimeError(
                f"tirastore.patch_ejkernel(): {TARGET} is imported already, so ejkernel built its caches "
                "with its own class; call patch_ejkernel() before the first import of ejkernel"
            )
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
