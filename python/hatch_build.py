"""Hatchling build hook: compile the Go engine into libtirastore.so.

Runs ``build.sh`` (``go build -buildmode=c-shared``), which leaves the library
next to the package sources (python/tirastore/libtirastore.so). A regular
wheel gets the library as a platform-specific file and the C header
(include/tirastore.h, the one checked-in copy) as
``tirastore/include/tirastore.h`` for C users of the installed package
(``tirastore.get_include()``); an editable install loads the library from the
source tree and finds the header in include/. Needs Go >= 1.22 and a C
compiler.

The wheel is tagged ``py3-none-<platform>``: the package loads the library
with cffi's ABI mode (dlopen) and contains no extension module, so one wheel
serves every CPython 3 of a platform; only the platform (the Go library's
OS and architecture) matters.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def _platform_tag() -> str:
    """The platform part of the most specific tag this interpreter accepts.

    manylinux/musllinux are skipped, as hatchling's own tag inference does:
    the library is built on this machine against its C library, and no
    auditwheel-style check vouches for an older glibc.
    """
    from packaging.tags import sys_tags  # hatchling depends on packaging

    for tag in sys_tags():
        if "manylinux" not in tag.platform and "musllinux" not in tag.platform:
            return tag.platform
    raise RuntimeError("tirastore: no platform tag found for this interpreter")


class CustomBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if shutil.which("go") is None:
            raise RuntimeError("tirastore: building the native library needs Go >= 1.22 on PATH (https://go.dev/dl/)")
        subprocess.run(["bash", os.path.join(self.root, "build.sh")], cwd=self.root, check=True)
        build_data["pure_python"] = False
        build_data["tag"] = f"py3-none-{_platform_tag()}"
        if version != "editable":
            lib = os.path.join(self.root, "python", "tirastore", "libtirastore.so")
            build_data["force_include"][lib] = "tirastore/libtirastore.so"
            header = os.path.join(self.root, "include", "tirastore.h")
            build_data["force_include"][header] = "tirastore/include/tirastore.h"
