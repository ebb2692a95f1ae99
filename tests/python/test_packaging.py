"""`pip install .` in a fresh virtualenv builds the Go library through the
build backend and installs a working, platform-specific package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("go") is None, reason="building the library needs Go on PATH")
def test_pip_install_in_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    # System site-packages only lend cffi (a runtime dependency from PyPI);
    # the build itself runs isolated, as for any user.
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    py = env_dir / "bin" / "python"
    proc = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = (
        "import tirastore, tirastore._native as n, importlib.metadata as m, pathlib, tempfile;"
        "p = pathlib.Path(tirastore.__file__).parent;"
        "assert n.library_path() == p / 'libtirastore.so', n.library_path();"
        "assert 'site-packages' in str(p), p;"
        "assert m.version('tirastore') == tirastore.__version__;"
        "s = tirastore.TiraStore(pathlib.Path(tempfile.mkdtemp()) / 'c.db', cpu_model='X');"
        "assert s.record('p', 's', 'U(L0,4,comps=[\"c\"])', True, [1.0]);"
        "print(s.lookup('p', 's', \"U(L0,4,comps=['c'])\").execution_times)"
    )
    run = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[1.0]"
    wheel = next((env_dir / "lib").glob("python3*/site-packages/tirastore-*.dist-info/WHEEL"))
    tags = wheel.read_text()
    assert "Root-Is-Purelib: false" in tags and "linux" in tags, tags
