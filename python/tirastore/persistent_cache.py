"""PersistentCache: ejKernel's kernel-config cache, on a TiraStore database.

A drop-in for ``ejkernel``'s ``PersistentCache`` (same constructor, same
``get``/``put``, same serialization rules), whose entries live in a table of
a TiraStore database instead of one JSON file that every ``put`` rewrites:
concurrent tuners on many nodes keep each other's results, a ``put`` is
visible to every other process at once, and a ``put`` costs the same with
ten entries or ten thousand. All storage, locking, caching, key and file
rules live in the library (``core/config.go``, ``core/configjson.go``);
this module only adapts them to the seed's Python API.

>>> from tirastore import PersistentCache
>>> cache = PersistentCache("matmul", path="tuning/matmul.json")
>>> cache.put("gpu:0", "matmul@v1", "m=4096,n=4096", {"block_m": 128, "num_warps": 4})
True
>>> cache.get("gpu:0", "matmul@v1", "m=4096,n=4096")
Namespace(block_m=128, num_warps=4)
>>> cache.close()
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from argparse import Namespace
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, Optional, TypeVar, Union

from tirastore import _native
from tirastore.errors import TiraStoreWarning
from tirastore.store import PathLike, TiraStore, _fspath, _is_url

Cfg = TypeVar("Cfg")

_MISSING = object()

# The databases open in this process, shared by the caches that use them:
# ejkernel's 39 caches of one directory are one database, so they hold one
# connection and one lock ticket file, not 39. By (db_path, sharing, the
# lock options, create, the library copy): [store, number of caches].
_open_dbs: dict[tuple[Any, ...], list[Any]] = {}
_open_dbs_lock = threading.Lock()

# Every cache of this process, for _after_fork_in_child.
_caches: "weakref.WeakSet[PersistentCache[Any]]" = weakref.WeakSet()


def _reset_inherited_locks() -> None:
    """New locks in a forked child: one that another thread of the parent
    held at the fork would stay held forever (only the forking thread
    exists in the child), and the child's first get would hang."""
    global _open_dbs_lock
    _open_dbs_lock = threading.Lock()
    for cache in list(_caches):
        cache._open_lock = threading.Lock()


def _after_fork_in_child() -> None:
    _reset_inherited_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass
class ConfigEntry:
    """One stored entry, with who wrote it and when (see :meth:`PersistentCache.entries`).

    ``value`` is the stored JSON value as written (the loader is not
    applied); ``hostname`` and ``username`` name the last writer;
    ``creation_date`` and ``update_date`` are UTC ISO 8601 times.
    """

    device: str
    op_id: str
    call_key: str
    value: Any
    hostname: str
    username: str
    creation_date: str
    update_date: str
    namespace: str = ""


class PersistentCache(Generic[Cfg]):
    """A kernel-config cache shared by every process and node that opens it.

    A drop-in for ejkernel's ``PersistentCache`` (``ejkernel.ops.config``;
    :func:`tirastore.patch_ejkernel` puts it in its place): it remembers,
    for kernel autotuners, the best configuration found for a (device,
    operation, call signature), under the key ``"device|op_id|call_key"``,
    in a TiraStore database instead of a JSON file that every ``put``
    rewrites whole, so that concurrent tuners keep each other's results.

    It finds its place as ejkernel's class does:

    * *path* None: ``$EJKERNEL_PERSISTENT_CACHE_DIR/<opname>.json`` when the
      variable is set, else ``~/ejkernel-presistent-cache/<opname>.json``
      (ejkernel's spelling); a *path* ending in ``.json``: that file; ``~``
      expanded, pathlib's rules (an absolute *opname* is a path);
    * when that directory cannot be made: ``./.ejkernel-presistent-cache``,
      then ``ejkernel-presistent-cache`` in the temporary directory, with a
      :class:`~tirastore.TiraStoreWarning`; with none, the entries are kept
      in this process only (a warning says why);
    * the entries of every cache of one directory live in one database
      there, ``persistent-cache.tirastore.db``, each cache in its own
      namespace, its JSON file's stem (``flash-attn``): ejkernel's 39
      operations make one database and one lock, not 39. An
      ``<opname>.json`` written by ejkernel's class is imported into its
      namespace the first time any process uses the cache, once, and never
      rewritten (see :meth:`import_json`, :meth:`export_json`);
    * a *path* not ending in ``.json`` is a TiraStore database (namespace
      ``""``), which may also hold records; a ``postgresql://`` URL is a
      database on a server.

    Constructing a cache creates nothing and opens nothing, and never
    raises for the filesystem: the place is found at the first get or put,
    from ``$HOME``, ``$EJKERNEL_PERSISTENT_CACHE_DIR`` and the working
    directory at that moment (ejkernel's class reads them when it is
    constructed, at ``import ejkernel``). A get before the database exists
    answers None and creates nothing (unless there is a JSON file to
    import); the first put creates the database.

    Files are private (0600, as ejkernel's class writes its JSON files),
    unless the directory is writable by its group and not by everyone (a
    project directory on a cluster: 0660), or *shared* is True (every user:
    0666, a new directory 1777, as TiraStore databases). A private cache
    uses no database and imports no JSON file of another user (root's
    excepted): it says so in a warning and names the command that imports
    a file you trust.

    :param str opname: the operation's name: it picks the default path
        (and the namespace, with it)
    :param path: a JSON file (str or path-like), a database, a
        ``postgresql://`` URL, or None
    :param loader: applied to a stored value by :meth:`get`
    :param dumper: applied to a configuration by :meth:`put`
    :param cfg_type: the class :meth:`get` builds from a dict (``cfg_type(**d)``);
        None gives an :class:`argparse.Namespace`
    :param shared: None: private unless the directory is a group's; True:
        shared with every user; False: private
    :param lock_timeout: seconds an operation waits for the database's lock
        (as for :class:`~tirastore.TiraStore`; None: 600)
    :param stale_lock_timeout: seconds after which a silent lock holder is
        presumed dead (None: 600)
    :param bool create: False uses an existing database only: the first
        call raises :exc:`FileNotFoundError` without one, as tools need
    :param bool other_devices: a configuration is tuned for a device, which
        ejkernel names by its fingerprint (``"NVIDIA A100-SXM4-80GB|cuda
        12.2"``, ``"cpu|"``); every put keeps the run context it was tuned
        in (host, CPU model, ...). False (default): a get serves only what
        was tuned for the device asked, and, for a CPU (whose fingerprint
        names no model), only what was tuned on this CPU model (an entry
        tuned on another is a miss, to tune here; one of unknown context,
        written before contexts or imported from a JSON file, is served).
        True: any entry of the key, and on a miss the most recent entry of
        the operation and call signature tuned for another device, to
        start from
    :raises TypeError: *path* is neither None, a str nor path-like, or
        *shared* is not None or a bool

    Besides the errors each method lists, every method may raise what
    :class:`~tirastore.TiraStore`'s methods raise (:exc:`TimeoutError` for
    the lock, :exc:`KeyboardInterrupt`, :exc:`~tirastore.LockLostError`,
    :exc:`OSError`), :exc:`PermissionError` when a private cache would use
    another user's database, and :exc:`ValueError` once the cache is closed.
    A cache is always true in a condition (``if cache:``), as ejkernel's
    is, whatever its length.
    """

    def __init__(
        self,
        opname: str,
        path: Optional[PathLike] = None,
        loader: Optional[Callable[[Any], Cfg]] = None,
        dumper: Optional[Callable[[Cfg], Any]] = None,
        cfg_type: Optional[type] = None,
        *,
        shared: Optional[bool] = None,
        lock_timeout: Optional[float] = None,
        stale_lock_timeout: Optional[float] = None,
        create: bool = True,
        other_devices: bool = False,
    ) -> None:
        # Nothing here may touch the filesystem or load the library:
        # ejkernel constructs 39 caches while it is imported.
        self._store: Optional[TiraStore] = None
        self._closed = False
        self._opname = f"{opname}"  # as ejkernel's f"{opname}.json"
        self._path_arg = None if path is None else _fspath("PersistentCache", "path", path)
        if shared is not None and not isinstance(shared, bool):
            raise TypeError(f"PersistentCache(): shared must be None or a bool, not {type(shared).__name__}")
        self._shared = shared
        self._lock_timeout = lock_timeout
        self._stale_lock_timeout = stale_lock_timeout
        self._create = create
        if not isinstance(other_devices, bool):
            raise TypeError(f"PersistentCache(): other_devices must be a bool, not {type(other_devices).__name__}")
        self._other_devices = other_devices
        self.loader = loader
        self.dumper = dumper
        self.cfg_type = cfg_type
        #: What the first use did with the JSON file (see :meth:`import_json`),
        #: or None before it, or without a file to import.
        self.imported: Optional[dict[str, Any]] = None
        # The place once the database is open (config_location's answer),
        # and the key of the open database in _open_dbs (None: its own).
        self._place: Optional[dict[str, Any]] = None
        self._key: Optional[tuple[Any, ...]] = None
        # Entries kept in this process only, once no directory can hold
        # the cache (ejkernel's class keeps none then).
        self._memory: Optional[dict[tuple[str, str, str], Any]] = None
        self._told: set[str] = set()
        self._open_lock = threading.Lock()
        _caches.add(self)

    # -- the place, found at first use -------------------------------------

    def _locate(self) -> dict[str, Any]:
        """Where the cache is now: the open database's place, else the library's answer."""
        if self._place is not None:
            return self._place
        return _native.call(0, "config_location", opname=self._opname, path=self._path_arg, shared=self._shared)

    def _tell(self, message: str, stacklevel: int) -> None:
        """Warn once per cache and message; *stacklevel* as the caller's own."""
        if message not in self._told:
            self._told.add(message)
            warnings.warn(message, TiraStoreWarning, stacklevel=stacklevel + 1)

    def _open(self, write: bool, stacklevel: int = 3) -> Optional[TiraStore]:
        """The open database; None when there is none to read yet (*write*
        False: nothing is created) or when the cache keeps its entries in
        memory. A put's open creates the database and its directory.
        *stacklevel* is the user's frame seen from here (3: a public method's caller)."""
        if self._closed:
            raise ValueError("PersistentCache: the cache is closed")
        if self._store is not None:
            return self._store
        if self._memory is not None:
            return None
        with self._open_lock:  # two threads' first calls open once
            if self._store is not None or self._memory is not None:
                return self._store
            return self._open_now(write, stacklevel + 1)

    def _open_now(self, write: bool, stacklevel: int) -> Optional[TiraStore]:
        """:meth:`_open`'s work, under the cache's lock."""
        place = self._locate()
        for notice in place["notices"]:
            self._tell(notice, stacklevel)
        if place["disabled"] is not None:
            self._memory = {}
            self._tell(place["disabled"], stacklevel)
            return None
        if not write and not place["db_exists"] and not place["import_json"] and self._create:
            return None  # nothing to read: a miss, and nothing is created
        key = (place["db_path"], place["sharing"], self._lock_timeout, self._stale_lock_timeout, self._create,
               _native.lib_copy)
        try:
            store = self._shared_store(key, place, stacklevel + 1)
        except PermissionError as e:
            if not self._create or place["json_path"] is None:
                raise  # a database the user named: theirs to fix
            # ejkernel's class keeps its entries in memory when it cannot
            # write its file; this cache says so.
            self._memory = {}
            self._tell(f"PersistentCache({self._opname!r}): {e}: its entries are kept in this process only", stacklevel)
            return None
        self._key = key
        self._store = store
        self._place = place
        if place["import_json"]:
            try:
                self.imported = store._call("config_import", path=place["json_path"], once=True,
                                            namespace=place["namespace"])
            except ValueError as e:  # ejkernel's class would have failed at import ejkernel
                self._tell(f"{e}; nothing of it is imported, and the cache goes on without it", stacklevel)
            else:
                if self.imported["notice"]:
                    self._tell(self.imported["notice"], stacklevel)
        return store

    def _shared_store(self, key: tuple[Any, ...], place: dict[str, Any], stacklevel: int) -> TiraStore:
        """The open database of *key*, shared with this process's other caches of it."""
        with _open_dbs_lock:
            entry = _open_dbs.get(key)
            if entry is not None and not entry[0].closed:
                entry[1] += 1
                return entry[0]
            store = TiraStore.__new__(TiraStore)
            # The CPU check guards records, which this class never writes.
            store._open(
                place["db_path"],
                source_project="",
                cpu_model=None,
                slurm_cpus=None,
                allow_cpu_mismatch=True,
                stale_lock_timeout=self._stale_lock_timeout,
                lock_timeout=self._lock_timeout,
                create=self._create,
                sharing=place["sharing"],
                stacklevel=stacklevel + 1,
            )
            _open_dbs[key] = [store, 1]
            return store

    @property
    def path(self) -> str:
        """The path as ejkernel's class shows it: its JSON file (the
        fallback's when one is used), or the database or URL given."""
        return self._locate()["path"]

    @property
    def json_path(self) -> Optional[Path]:
        """The absolute path of the JSON file this cache imports and exports
        by default (None when *path* names the database itself)."""
        j = self._locate()["json_path"]
        return None if j is None else Path(j)

    @property
    def namespace(self) -> str:
        """The namespace of this cache's entries in its database: the JSON
        file's stem, or ``""`` when *path* names the database itself."""
        return self._locate()["namespace"]

    @property
    def db_path(self) -> Union[Path, str]:
        """The absolute path of the database that holds the entries (a
        server's URL without its password, for a ``postgresql://`` path),
        whether it exists yet or not."""
        if self._store is not None:
            return self._store.db_path
        place = self._locate()
        if _is_url(place["db_path"]):  # the store's form hides a password
            store = self._open(write=False)
            return place["db_path"] if store is None else store.db_path
        return Path(place["db_path"])

    def __bool__(self) -> bool:
        """Always True, as ejkernel's cache: callers test ``if cache:`` for its presence."""
        return True

    # -- the seed's API ----------------------------------------------------

    def get(self, device: str, op_id: str, call_key: str) -> Optional[Cfg]:
        """Return the configuration stored for the coordinates, or None.

        As the seed: the loader, when given, is applied to the stored value;
        a dict result then becomes ``cfg_type(**d)``, or an
        :class:`argparse.Namespace` when *cfg_type* is None. A stored None
        (JSON null) reads as a miss. A repeated get is answered without the
        lock, from the library's cache of the entries, once it has checked
        that nothing committed since (one header read); a ``put`` of any
        other process is seen at once. As with the seed, do not change a
        returned value's containers in place: a cache that keeps its
        entries in this process (see above) shares them between gets.

        A configuration tuned for another device is not served (see
        *other_devices*).

        :param str device: the device fingerprint (``"gpu:0"``, ``"tpu:v4"``)
        :param str op_id: the operation with its version (``"matmul@v1"``)
        :param str call_key: the call signature
        :raises TypeError: an argument is not a str
        :raises ValueError: an argument contains a NUL character or a lone
            surrogate, or the value is stored nested deeper than a stored
            value may be (see :meth:`put`; written before that limit or not
            through TiraStore: the message names the entry)
        """
        store = self._open(write=False)
        if store is None:
            self._check("config_value", device, op_id, call_key)
            raw = None if self._memory is None else self._memory.get((device, op_id, call_key))
        else:
            args = {"device": device, "op_id": op_id, "call_key": call_key, "namespace": self._place["namespace"]}
            if getattr(self, "_other_devices", False):  # (a cache pickled before it existed)
                args["other_devices"] = True
            found = store._call_as("PersistentCache.get", "config_value", args)
            raw = None if found is None else found[0]
        if raw is None:
            return None
        out = self.loader(raw) if self.loader is not None else raw
        if isinstance(out, dict):
            out = Namespace(**out) if self.cfg_type is None else self.cfg_type(**out)
        return out

    def put(self, device: str, op_id: str, call_key: str, cfg: Cfg, overwrite: bool = True) -> bool:
        """Store a configuration for the coordinates, in one small transaction.

        Serialized as the seed does: the dumper when given, else a
        dataclass's :func:`~dataclasses.asdict`, else ``cfg.model_dump()``
        (pydantic v2), else *cfg* itself, which must then be JSON
        serializable (NaN and infinities are stored as Python's json writes
        them). The value may nest at most 100 levels of lists and dicts
        (``tirastore.limits()["max_value_depth"]``; docs/limits.md): Python's
        json reads each level on the interpreter's stack, so a deeper value
        could not be read back by a caller that is itself deep in its
        stack. Its JSON text may be at most 256 MiB
        (``limits()["max_text_bytes"]``).

        :param bool overwrite: True (the seed's behaviour): the last writer
            wins; False: an existing entry stays, so that concurrent tuners
            agree on the first result
        :return: True if written; False if an entry existed and *overwrite*
            is False
        :raises TypeError: an argument is not a str, or the value is not
            JSON serializable (the message names the key)
        :raises ValueError: an argument contains a NUL character or a lone
            surrogate, or the value nests deeper than 100 levels (the
            message names the key and the limit)
        """
        if self.dumper is not None:
            val = self.dumper(cfg)
        elif is_dataclass(cfg) and not isinstance(cfg, type):
            val = asdict(cfg)
        elif hasattr(cfg, "model_dump"):
            val = cfg.model_dump()
        else:
            val = cfg
        store = self._open(write=True)
        if store is None:  # no directory can hold the cache: this process keeps it
            self._check("config_put", device, op_id, call_key)
            coords = (device, op_id, call_key)
            if not overwrite and coords in self._memory:
                return False
            self._memory[coords] = val
            return True
        return store._call("config_put", device=device, op_id=op_id, call_key=call_key, value=val,
                           overwrite=overwrite, namespace=self._place["namespace"])

    # -- beyond the seed ---------------------------------------------------

    def _check(self, method: str, device: Any, op_id: Any, call_key: Any) -> None:
        """Raise what *method* raises for bad coordinates, without a database."""
        _native.call(0, "config_check", call=method, device=device, op_id=op_id, call_key=call_key)

    def _ns(self) -> str:
        """The namespace of the open database's entries."""
        assert self._place is not None
        return self._place["namespace"]

    def delete(self, device: str, op_id: str, call_key: str) -> bool:
        """Remove the entry of the coordinates; return whether there was one."""
        store = self._open(write=False)
        if store is None:
            self._check("config_delete", device, op_id, call_key)
            return self._memory is not None and self._memory.pop((device, op_id, call_key), _MISSING) is not _MISSING
        return store._call("config_delete", device=device, op_id=op_id, call_key=call_key, namespace=self._ns())

    def clear(self) -> int:
        """Remove every entry of this cache's namespace; return how many there were."""
        store = self._open(write=False)
        if store is None:
            n = len(self._memory or ())
            if self._memory:
                self._memory.clear()
            return n
        return store._call("config_clear", namespace=self._ns())

    def __len__(self) -> int:
        """The number of entries of this cache's namespace (0 before the database exists)."""
        store = self._open(write=False)
        if store is None:
            return len(self._memory or ())
        return store._call("config_len", namespace=self._ns())

    def entries(self, device: Optional[str] = None, op_id: Optional[str] = None) -> list[ConfigEntry]:
        """Return the stored entries of a device and/or an operation, by key.

        An entry whose value is stored nested deeper than a stored value
        may be (100 levels, the library's ``max_value_depth``: every
        write refuses such a value, but an old writer or a direct SQL
        write may have stored one) is left out with a
        :class:`~tirastore.TiraStoreWarning` naming it, so that it does not
        make the other entries unreadable; :meth:`get` of it raises
        ValueError, ``tirastore check`` lists every one, and
        :meth:`delete` or :meth:`put` replaces it.

        :param device: only this device's entries (None: every device)
        :param op_id: only this operation's entries (None: every operation)
        :return: a list of :class:`ConfigEntry` (raw values, with who
            wrote them and when), from one consistent read
        """
        return self._entries(device, op_id)

    def _rows(self, device: Optional[str], op_id: Optional[str], stacklevel: int) -> list[dict[str, Any]]:
        """The library's rows of this cache's namespace; a value too deep to
        send carries ``"error"`` in its place. *stacklevel*: the user's frame seen from here."""
        store = self._open(write=False, stacklevel=stacklevel + 1)
        if store is None:
            return [
                {"device": d, "op_id": o, "call_key": k, "value": v, "hostname": "", "username": "",
                 "creation_date": "", "update_date": "", "namespace": ""}
                for (d, o, k), v in sorted((self._memory or {}).items())
                if (device is None or d == device) and (op_id is None or o == op_id)
            ]
        return store._call("config_entries", device=device, op_id=op_id, namespace=self._ns())

    def _entries(self, device: Optional[str], op_id: Optional[str], stacklevel: int = 3) -> list[ConfigEntry]:
        out = []
        for r in self._rows(device, op_id, stacklevel + 1):
            if "error" in r:
                warnings.warn(r["error"], TiraStoreWarning, stacklevel=stacklevel)
            else:
                out.append(ConfigEntry(**r))
        return out

    def items(self, device: Optional[str] = None, op_id: Optional[str] = None) -> Iterator[tuple[tuple[str, str, str], Cfg]]:
        """Iterate over ``((device, op_id, call_key), cfg)`` pairs, cfg as :meth:`get` returns it.

        The entries are read at once (one consistent read), then converted
        one by one; entries whose value is None are left out, as :meth:`get`
        reads them as misses, and so are values stored too deeply nested
        to read, with a warning (see :meth:`entries`).
        """
        for e in self._entries(device, op_id):
            if e.value is None:
                continue
            out = self.loader(e.value) if self.loader is not None else e.value
            if isinstance(out, dict):
                out = Namespace(**out) if self.cfg_type is None else self.cfg_type(**out)
            yield (e.device, e.op_id, e.call_key), out

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        """Iterate over the ``(device, op_id, call_key)`` of every entry, by key (also of
        an entry whose value is too deeply nested to read: see :meth:`entries`)."""
        return iter([(r["device"], r["op_id"], r["call_key"]) for r in self._rows(None, None, 3)])

    def __contains__(self, coords: object) -> bool:
        """``(device, op_id, call_key) in cache``: an entry is stored (its value may be None)."""
        if not (isinstance(coords, tuple) and len(coords) == 3):
            return False
        device, op_id, call_key = coords
        store = self._open(write=False)
        if store is None:
            self._check("config_get", device, op_id, call_key)
            return self._memory is not None and coords in self._memory
        return store._call("config_get", device=device, op_id=op_id, call_key=call_key, namespace=self._ns()) is not None

    def import_json(self, path: Optional[PathLike] = None, overwrite: bool = False) -> dict[str, Any]:
        """Import a seed JSON file (``{"device|op_id|call_key": value}``) in one transaction.

        All or nothing: a malformed file or key imports nothing. The file is
        remembered, so that opening a cache on it does not import it again.

        :param path: the file (None: :attr:`json_path`)
        :param bool overwrite: the file's entries replace the cache's of the
            same key (default: the cache's stay)
        :return: a dict with ``path``, ``entries`` (in the file), ``added``,
            ``replaced``, ``kept`` and ``imported_at``
        :raises ValueError: the file is not a PersistentCache file, or no
            path is given and the cache has no JSON file
        :raises OSError: the file cannot be read (:exc:`FileNotFoundError`, ...)
        """
        store = self._opened("import_json")
        return store._call("config_import", path=self._json_arg("import_json", path), overwrite=overwrite,
                           namespace=self._ns())

    def export_json(self, path: Optional[PathLike] = None) -> Path:
        """Write every entry to a JSON file in the seed's format, replacing it atomically.

        What the seed's ``json.dump`` writes (``{"device|op_id|call_key":
        value, ...}``, here by key), so that old readers and tools see the
        cache's entries; written to a temporary file and renamed over
        *path*, as the seed did.

        :param path: the file (None: :attr:`json_path`)
        :return: the absolute :class:`~pathlib.Path` written
        :raises ValueError: no path is given and the cache has no JSON file,
            or *path* is the cache's database, one of its files (its lock,
            journal, ...) or another database: nothing is written
        :raises OSError: the file cannot be written
        """
        store = self._opened("export_json")
        out = store._call("config_export", output_path=self._json_arg("export_json", path), namespace=self._ns())
        return Path(out["path"])

    def _opened(self, where: str) -> TiraStore:
        """The database, created if need be, for a method that needs one."""
        store = self._open(write=True, stacklevel=4)
        if store is None:
            raise FileNotFoundError(2, f"PersistentCache.{where}(): this cache has no database: no directory can "
                                    f"hold it (see the warning), its entries are kept in this process only")
        return store

    def _json_arg(self, where: str, path: Optional[PathLike]) -> str:
        if path is not None:
            return _fspath(f"PersistentCache.{where}", "path", path)
        if self.json_path is None:
            raise ValueError(f"PersistentCache.{where}(): this cache has no JSON file (its path names the database): give a path")
        return str(self.json_path)

    # -- pickling (multiprocessing spawn, any pickled task) -----------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_open_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._key = None  # the unpickled store is this cache's own
        self._open_lock = threading.Lock()
        _caches.add(self)

    # -- lifetime ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self) -> None:
        """Release the database; later calls raise ValueError. Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        if self._store is None:
            return
        with _open_dbs_lock:
            entry = _open_dbs.get(self._key) if self._key is not None else None
            if entry is not None and entry[0] is self._store:
                entry[1] -= 1
                if entry[1] > 0:
                    return  # other caches of this process still use it
                del _open_dbs[self._key]
        self._store.close()

    def __enter__(self) -> "PersistentCache[Cfg]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = str(self._store.db_path) if self._store is not None else None
        return f"PersistentCache(opname={self._opname!r}, path={self._path_arg!r}, db_path={where!r})"
