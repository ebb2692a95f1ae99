"""The `slurm_cluster` fixture: a real one-node Slurm cluster for a session.

Import it into a test module (`from conftest_slurm import slurm_cluster`);
it is not in conftest.py so that only the modules that need Slurm pay for
it. The cluster (tests/slurm/cluster.py) runs munged, slurmctld and slurmd
from a private temporary directory; where it cannot start (not root, the
Debian packages slurmctld slurmd munge slurm-client missing, a daemon that
fails) the tests that use it skip with the reason and the daemons' log
tails. .ci/run installs the packages when they are missing, so in CI a
skip means the install or a daemon failed, and the reason says which.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_cluster():
    """tests/slurm/cluster.py, under a module name no other test uses."""
    name = "tirastore_slurm_cluster"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "slurm" / "cluster.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


slurm = _load_cluster()

START_TIMEOUT = 60.0


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A started cluster (cluster.Cluster: .env, .run(), .partition), stopped
    at the end of the session even when tests fail; or a skip saying why."""
    workdir = tmp_path_factory.mktemp("slurm")
    try:
        c = slurm.start(workdir, timeout=START_TIMEOUT)
    except slurm.SlurmUnavailable as e:
        # Shown by -rs; also on the real stderr, so that a CI log has it
        # even where the skip summary is not printed.
        print(f"\nSlurm cannot start here: {e}", file=sys.__stderr__)
        pytest.skip(f"Slurm cannot start here: {e}")
    try:
        yield c
    finally:
        c.stop()
    left = slurm.leftover_processes(c.state)
    assert not left, f"the Slurm test cluster left processes behind: {left}"
