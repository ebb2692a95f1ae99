"""A re-creation, written here, of the seed's storage pattern (ejKernel's
PersistentCache, ../shared/seeds/ejkernel-persistent-cache.py.txt): the whole
JSON file is loaded once in the constructor, and every put adds its key to the
in-memory dict and writes the whole dict to a temporary file that is renamed
over the cache file.

It is the negative control of the lost-update tests (the last rename wins:
concurrent writers lose each other's entries) and the "seed" rows of
`make bench` (a put costs O(entries)). Same constructor and get/put as the
seed, with its default path and serialization rules.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from argparse import Namespace
from dataclasses import asdict, is_dataclass
from typing import Any, Callable, Optional


class SeedPersistentCache:
    def __init__(
        self,
        opname: str,
        path: Optional[str] = None,
        loader: Optional[Callable[[Any], Any]] = None,
        dumper: Optional[Callable[[Any], Any]] = None,
        cfg_type: Optional[type] = None,
    ) -> None:
        if path is None:
            path = str(pathlib.Path.home() / "ejkernel-presistent-cache" / f"{opname}.json")
        pathlib.Path(os.path.dirname(os.path.abspath(path)) or ".").mkdir(parents=True, exist_ok=True)
        self.path, self.loader, self.dumper, self.cfg_type = path, loader, dumper, cfg_type
        try:
            with open(path) as f:
                self._data = json.load(f)
        except FileNotFoundError:
            self._data = {}

    def get(self, device: str, op_id: str, call_key: str) -> Any:
        raw = self._data.get("|".join((device, op_id, call_key)))
        out = None if raw is None else (self.loader(raw) if self.loader else raw)
        if isinstance(out, dict):
            out = Namespace(**out) if self.cfg_type is None else self.cfg_type(**out)
        return out

    def put(self, device: str, op_id: str, call_key: str, cfg: Any) -> None:
        if self.dumper is not None:
            val = self.dumper(cfg)
        elif is_dataclass(cfg):
            val = asdict(cfg)
        elif hasattr(cfg, "model_dump"):
            val = cfg.model_dump()
        else:
            val = cfg
        self._data["|".join((device, op_id, call_key))] = val
        folder = os.path.dirname(os.path.abspath(self.path)) or "."
        with tempfile.NamedTemporaryFile("w", dir=folder, delete=False) as tmp:
            json.dump(self._data, tmp)
        os.replace(tmp.name, self.path)
