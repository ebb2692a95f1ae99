"""The virtualenv with the released ejkernel that the ejkernel tests and bench row run.

The ejkernel tests prove tirastore.PersistentCache with the ejkernel users
install from PyPI, not with a copy of it. That needs ejkernel, CPU jax and
tirastore's runtime dependencies in a virtualenv of their own (ejkernel
pins numpy, jax and pydantic versions that the project's .venv must not be
tied to). The pins live in ONE place, pyproject.toml's optional-dependency
extra ``ejkernel-test``; the venv is ``build/ejkernel-venv-<key>``, where
the key is a hash of those pins, so a changed pin makes a new venv and an
unchanged one is reused between runs. A stamp file, written last, marks a
complete venv: an interrupted or failed build is redone, never used.

tirastore itself is NOT installed there: the tests put this tree's
``python/`` on PYTHONPATH with the library ``./build.sh`` built.

    python3 tests/python/ejkernel_env.py make   # `make ejkernel-venv`: build it unless it is complete
    python3 tests/python/ejkernel_env.py path   # print its directory
    python3 tests/python/ejkernel_env.py python # print its interpreter, or why it cannot run (exit 1)

Only the standard library here (tomli on Python < 3.11, which pytest
brings into the tests' venv): ``make`` runs it with the system's python3,
or EJKERNEL_PYTHON3 where that is older than jax needs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
EXTRA = "ejkernel-test"
MAKE_TARGET = "make ejkernel-venv"
# jax 0.10 and ejkernel 0.0.80 need CPython >= 3.11 (their Requires-Python).
MIN_PYTHON = (3, 11)


def requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """The pinned requirements of the ``ejkernel-test`` extra, as written."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the tests' venv has tomli (pytest needs it there)
        try:
            import tomli as tomllib
        except ImportError:
            raise RuntimeError(
                f"reading {pyproject} needs Python >= 3.11 or the tomli package; "
                f"this is {sys.version.split()[0]} ({sys.executable})"
            ) from None
    with open(pyproject, "rb") as f:
        data = tomllib.load(f)
    try:
        reqs = data["project"]["optional-dependencies"][EXTRA]
    except KeyError:
        raise RuntimeError(f"{pyproject} has no [project.optional-dependencies] {EXTRA}") from None
    unpinned = [r for r in reqs if "==" not in r]
    if unpinned:
        raise RuntimeError(f"{pyproject}: the {EXTRA} extra must pin every requirement with ==: {unpinned}")
    return list(reqs)


def key(reqs: list[str]) -> str:
    """The venv's key: what it was built from (the pins, in order)."""
    return hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:12]


def venv_dir(reqs: Optional[list[str]] = None) -> Path:
    """The directory of the venv for these pins (default: pyproject's)."""
    return REPO / "build" / f"ejkernel-venv-{key(requirements() if reqs is None else reqs)}"


def stamp(vdir: Path) -> Path:
    """The file whose presence says the venv at vdir is complete."""
    return vdir / "tirastore-complete"


def python(vdir: Path) -> Path:
    return vdir / "bin" / "python"


def missing_reason(vdir: Optional[Path] = None) -> str:
    """'' when the venv is complete and usable, else why not (naming the make target)."""
    try:
        vdir = venv_dir() if vdir is None else vdir
    except RuntimeError as e:
        return str(e)
    if not stamp(vdir).is_file():
        return f"the ejkernel venv {vdir} is missing or incomplete: run `{MAKE_TARGET}` (or `make test`, which makes it)"
    if not os.access(python(vdir), os.X_OK):  # the interpreter it was made from is gone
        return f"the ejkernel venv {vdir} has no working interpreter ({python(vdir)}): remove it and run `{MAKE_TARGET}`"
    return ""


def make(base_python: str) -> int:
    """Build the venv unless it is complete; pip's output goes to a log file."""
    if sys.version_info < MIN_PYTHON:
        print(f"ejkernel-venv: {base_python} is Python {sys.version.split()[0]}; jax and ejkernel need "
              f">= {'.'.join(map(str, MIN_PYTHON))} (choose another with PYTHON3=...)", file=sys.stderr)
        return 1
    reqs = requirements()
    vdir = venv_dir(reqs)
    if not missing_reason(vdir):
        return 0
    log = vdir.with_name(vdir.name + ".log")
    vdir.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(vdir, ignore_errors=True)
    t0 = time.monotonic()
    print(f"ejkernel-venv: making {vdir.relative_to(REPO)} ({', '.join(reqs)}); pip's output in {log.relative_to(REPO)}",
          file=sys.stderr)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_USER="0")
    env.pop("PYTHONPATH", None)
    with open(log, "w") as out:
        steps = [
            [base_python, "-m", "venv", str(vdir)],
            [str(python(vdir)), "-m", "pip", "install", "--no-input", *reqs],
        ]
        for cmd in steps:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                shutil.rmtree(vdir, ignore_errors=True)
                tail = log.read_text(errors="replace").splitlines()[-15:]
                print(f"ejkernel-venv: {' '.join(cmd[:4])} ... failed (exit {r.returncode}); the end of {log}:",
                      *tail, sep="\n  ", file=sys.stderr)
                return 1
    stamp(vdir).write_text("\n".join(reqs) + "\n")
    print(f"ejkernel-venv: done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["path"]:
        print(venv_dir())
        return 0
    if argv == ["python"]:
        why = missing_reason()
        if why:
            print(why, file=sys.stderr)
            return 1
        print(python(venv_dir()))
        return 0
    if argv == ["make"]:
        return make(sys.executable)
    print(f"usage: {sys.argv[0]} make|path|python", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except RuntimeError as e:
        print(f"ejkernel-venv: {e}", file=sys.stderr)
        sys.exit(1)
