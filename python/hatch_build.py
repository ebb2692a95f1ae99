"""Hatchling build hook: compile the Go engine into libtirastore.so.

Runs ``build.sh`` (``go build -buildmode=c-shared``), which leaves the library
next to the package sources (python/tirastore/libtirastore.so). A regular
wheel gets the library as a platform-specific file; an editable install
loads it from the source tree. Needs Go >= 1.22 and a C compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if shutil.which("go") is None:
            raise RuntimeError("tirastore: building the native library needs Go >= 1.22 on PATH (https://go.dev/dl/)")
        subprocess.run(["bash", os.path.join(self.root, "build.sh")], cwd=self.root, check=True)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            lib = os.path.join(self.root, "python", "tirastore", "libtirastore.so")
            build_data["force_include"][lib] = "tirastore/libtirastore.so"
