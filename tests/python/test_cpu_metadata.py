"""CPU metadata recorded at creation and checked on connect (COMPAT.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from conftest import (
    SCHED_I,
    SCHED_R,
    SCHED_S,
    SRC_BLUR,
    create_original_db,
    expected_key,
    oracle_program_hash,
    raw_meta,
    sqlite_only,
)

from tirastore import TiraStore, TiraStoreWarning

BANNER_HEAD = "[TiraStore] CPU metadata mismatch — write operations disabled.\n"


def _open_quiet(db: Path, **kw) -> TiraStore:
    """TiraStore(db, **kw), asserting that it says nothing about a mismatch."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = TiraStore(db, **kw)
    assert not [str(w.message) for w in caught if "mismatch" in str(w.message)]
    return s


def _create(db: Path, cpu="X", slurm="4"):
    s = TiraStore(db, source_project="creator", cpu_model=cpu, slurm_cpus=slurm)
    s.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    s.close()


def _assert_writes_blocked(s: TiraStore, tmp_path: Path):
    assert s.writes_allowed is False
    with pytest.raises(PermissionError, match="CPU metadata mismatch"):
        s.record("blur", SRC_BLUR, SCHED_S, True, [1.0])
    with pytest.raises(PermissionError, match="CPU metadata mismatch"):
        s.record("blur", SRC_BLUR, SCHED_R, True, [2.0], overwrite=True)
    with pytest.raises(PermissionError, match="CPU metadata mismatch"):
        s.record_many(
            "blur",
            SRC_BLUR,
            [{"tiralib_schedule_string": SCHED_I, "is_legal": False, "execution_times": None}],
        )
    with pytest.raises(PermissionError):
        s.put(
            expected_key(SRC_BLUR, SCHED_I),
            oracle_program_hash(SRC_BLUR),
            SCHED_I,
            '{"is_legal":false,"execution_times":null}',
        )
    with pytest.raises(PermissionError):
        s.delete(expected_key(SRC_BLUR, SCHED_R))
    # nothing changed, reads still work
    assert s.count() == 1
    r = s.lookup("blur", SRC_BLUR, SCHED_R)
    assert r is not None and r.execution_times == [1.0]
    assert s.contains("blur", SRC_BLUR, SCHED_R)
    assert s.keys() == [expected_key(SRC_BLUR, SCHED_R)]
    assert s.get(expected_key(SRC_BLUR, SCHED_R)) is not None
    assert s.stats()["total_records"] == 1
    assert len(s.get_program_records("blur", SRC_BLUR)) == 1
    assert len(s.get_program_source("blur")) == 1
    assert s.export(tmp_path / "mismatch_export.json").exists()
    assert s.backup(tmp_path / "mismatch_backup.db").exists()
    assert "False" in repr(s)


def test_cpu_model_mismatch(tmp_path, db_path, capfd):
    db = db_path
    _create(db, cpu="X", slurm="4")
    capfd.readouterr()
    with pytest.warns(TiraStoreWarning, match="CPU metadata mismatch") as caught:
        s = TiraStore(db, cpu_model="Y", slurm_cpus="4")
    try:
        assert capfd.readouterr().out == ""  # the original printed it there
        banner = [w for w in caught if "mismatch" in str(w.message)]
        assert len(banner) == 1 and banner[0].category is TiraStoreWarning
        assert str(banner[0].message) == (
            BANNER_HEAD + "  CPU model: DB='X'  local='Y'\n  Set allow_cpu_mismatch=True to override."
        )
        assert banner[0].filename == __file__  # points at the TiraStore(...) line
        assert s.cpu_model == "X"  # the DB's value, not the local one
        assert s.slurm_cpus == "4"
        _assert_writes_blocked(s, tmp_path)
    finally:
        s.close()


def test_slurm_cpus_mismatch(tmp_path, db_path, capfd):
    db = db_path
    _create(db, cpu="X", slurm="4")
    capfd.readouterr()
    with pytest.warns(TiraStoreWarning, match="SLURM_CPUS_PER_TASK: DB='4'  local='8'"):
        s = TiraStore(db, cpu_model="X", slurm_cpus="8")
    try:
        assert capfd.readouterr().out == ""
        assert s.slurm_cpus == "4"
        _assert_writes_blocked(s, tmp_path)
    finally:
        s.close()


def test_matching_metadata_no_warning(tmp_path, db_path, capfd):
    db = db_path
    _create(db, cpu="X", slurm="4")
    capfd.readouterr()
    s = _open_quiet(db, cpu_model="X", slurm_cpus="4")
    try:
        assert "mismatch" not in capfd.readouterr().out
        assert s.writes_allowed is True
        assert s.record("blur", SRC_BLUR, SCHED_S, True, [1.0]) is True
    finally:
        s.close()


def test_db_slurm_na_never_mismatches(tmp_path, db_path, capfd):
    db = db_path
    _create(db, cpu="X", slurm="N/A")
    assert raw_meta(db)["slurm_cpus"] == "N/A"
    capfd.readouterr()
    s = _open_quiet(db, cpu_model="X", slurm_cpus="8")
    try:
        assert "mismatch" not in capfd.readouterr().out
        assert s.writes_allowed is True
        assert s.record("blur", SRC_BLUR, SCHED_S, True, [1.0]) is True
    finally:
        s.close()


@sqlite_only
def test_empty_db_values_never_mismatch(tmp_path, capfd):
    # An original-format DB whose cpu_model / slurm_cpus are empty strings.
    db = tmp_path / "cache.db"
    create_original_db(db, cpu_model="", slurm_cpus="")
    capfd.readouterr()
    s = _open_quiet(db, cpu_model="Whatever CPU", slurm_cpus="16")
    try:
        assert "mismatch" not in capfd.readouterr().out
        assert s.writes_allowed is True
        assert s.record("blur", SRC_BLUR, SCHED_S, True, [1.0]) is True
        assert s.cpu_model == ""
        assert s.slurm_cpus == ""
    finally:
        s.close()


@sqlite_only
def test_empty_cpu_model_but_slurm_mismatch(tmp_path):
    db = tmp_path / "cache.db"
    create_original_db(db, cpu_model="", slurm_cpus="4")
    with pytest.warns(TiraStoreWarning, match="CPU metadata mismatch"):
        s = TiraStore(db, cpu_model="Whatever CPU", slurm_cpus="8")
    try:
        assert s.writes_allowed is False
    finally:
        s.close()


def test_allow_cpu_mismatch_lets_writes_through(tmp_path, db_path):
    db = db_path
    _create(db, cpu="X", slurm="4")
    s = _open_quiet(db, cpu_model="Y", slurm_cpus="8", allow_cpu_mismatch=True)
    try:
        assert s.allow_cpu_mismatch is True
        assert s.writes_allowed is True
        assert s.record("blur", SRC_BLUR, SCHED_S, True, [1.0]) is True
        assert s.record_many(
            "blur",
            SRC_BLUR,
            [{"tiralib_schedule_string": SCHED_I, "is_legal": False, "execution_times": None}],
        ) == 1
        assert s.delete(expected_key(SRC_BLUR, SCHED_I)) is True
        assert s.count() == 2
        # metadata of the DB is untouched
        assert s.cpu_model == "X"
        assert raw_meta(db)["cpu_model"] == "X"
        assert raw_meta(db)["slurm_cpus"] == "4"
    finally:
        s.close()


def test_mismatch_store_reflects_in_repr(tmp_path, db_path):
    db = db_path
    _create(db)
    with pytest.warns(TiraStoreWarning):
        s = TiraStore(db, cpu_model="Y", slurm_cpus="4")
    try:
        r = repr(s)
        assert "writes_allowed" in r and "False" in r
    finally:
        s.close()


def test_explicit_values_stored_at_creation(tmp_path, db_path):
    db = db_path
    _create(db, cpu="Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", slurm="32")
    meta = raw_meta(db)
    assert meta["cpu_model"] == "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"
    assert meta["slurm_cpus"] == "32"


def _local_cpu_brand() -> str | None:
    try:
        import cpuinfo  # type: ignore

        info = cpuinfo.get_cpu_info()
        v = info.get("brand_raw", info.get("brand"))
        if v:
            return v
    except Exception:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def test_autodetected_cpu_model(tmp_path, monkeypatch, capfd):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    db = tmp_path / "auto.db"
    s = TiraStore(db)
    try:
        detected = s.cpu_model
        assert isinstance(detected, str) and detected
        expected = _local_cpu_brand()
        if expected is not None:
            assert detected == expected
        else:
            assert detected == "unknown"
    finally:
        s.close()
    capfd.readouterr()
    # reopening on the same machine with auto-detection: no mismatch
    s2 = _open_quiet(db)
    try:
        assert "mismatch" not in capfd.readouterr().out
        assert s2.writes_allowed is True
    finally:
        s2.close()


def test_empty_cpu_model_argument_means_autodetect(tmp_path):
    db = tmp_path / "auto.db"
    s = TiraStore(db, cpu_model="", slurm_cpus="4")
    try:
        assert s.cpu_model != ""
        assert s.cpu_model == (_local_cpu_brand() or "unknown")
    finally:
        s.close()


def test_slurm_cpus_default_na(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    db = tmp_path / "na.db"
    s = TiraStore(db, cpu_model="X")
    try:
        assert s.slurm_cpus == "N/A"
        assert raw_meta(db)["slurm_cpus"] == "N/A"
    finally:
        s.close()


def test_slurm_cpus_from_environment_in_process(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "12")
    db = tmp_path / "env.db"
    s = TiraStore(db, cpu_model="X")
    try:
        assert s.slurm_cpus == "12"
    finally:
        s.close()
    # the local value is also read from the environment when checking
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    with pytest.warns(TiraStoreWarning, match="SLURM_CPUS_PER_TASK: DB='12'  local='6'"):
        s2 = TiraStore(db, cpu_model="X")
    try:
        assert s2.writes_allowed is False
    finally:
        s2.close()


def test_slurm_cpus_from_environment_subprocess(tmp_path):
    db = tmp_path / "env2.db"
    code = (
        "import sys\n"
        "from tirastore import TiraStore\n"
        "s = TiraStore(sys.argv[1], cpu_model='X')\n"
        "print('SLURM=' + s.slurm_cpus)\n"
        "print('WRITES=' + str(s.writes_allowed))\n"
        "s.close()\n"
    )
    env = dict(os.environ, SLURM_CPUS_PER_TASK="24")
    out = subprocess.run(
        [sys.executable, "-c", code, str(db)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "SLURM=24" in out.stdout
    env["SLURM_CPUS_PER_TASK"] = "48"
    out = subprocess.run(
        [sys.executable, "-c", code, str(db)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "CPU metadata mismatch" in out.stderr and "mismatch" not in out.stdout
    assert "WRITES=False" in out.stdout


# ---------------------------------------------------------------------------
# The banner is a TiraStoreWarning: stderr by default, filterable
# ---------------------------------------------------------------------------

_MISMATCH_SCRIPT = textwrap.dedent(
    """
    import sys, warnings
    from tirastore import TiraStore, TiraStoreWarning
    if sys.argv[2] == "ignore":
        warnings.simplefilter("ignore", TiraStoreWarning)
    s = TiraStore(sys.argv[1], cpu_model="Y", slurm_cpus="4")  # the caller's line
    print(s.writes_allowed, end="")
    """
)


def _run_mismatch(db: Path, mode: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")}
    return subprocess.run(
        [sys.executable, "-c", _MISMATCH_SCRIPT, str(db), mode],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )


def test_mismatch_banner_goes_to_stderr_not_stdout(tmp_path, db_path):
    db = db_path
    _create(db, cpu="X", slurm="4")
    os.chmod(tmp_path, 0o1777)  # no notice about a private directory
    proc = _run_mismatch(db, "default")
    assert proc.stdout == "False"  # nothing but what the worker printed itself
    lines = proc.stderr.splitlines()
    # Python's default format: <file>:<line>: <Category>: <message>, then the source line.
    assert lines[0] == f"<string>:6: TiraStoreWarning: {BANNER_HEAD.rstrip()}", proc.stderr
    assert "  CPU model: DB='X'  local='Y'" in lines
    assert "  Set allow_cpu_mismatch=True to override." in lines


def test_mismatch_banner_can_be_silenced(tmp_path, db_path):
    db = db_path
    _create(db, cpu="X", slurm="4")
    os.chmod(tmp_path, 0o1777)
    proc = _run_mismatch(db, "ignore")
    assert proc.stdout == "False" and proc.stderr == ""


def test_mismatch_banner_in_recwarn(tmp_path, db_path, recwarn):
    db = db_path
    _create(db, cpu="X", slurm="4")
    recwarn.clear()
    line = sys._getframe().f_lineno + 1
    s = TiraStore(db, cpu_model="Y", slurm_cpus="4")
    s.close()
    w = recwarn.pop(TiraStoreWarning)
    assert issubclass(w.category, RuntimeWarning)
    assert str(w.message).startswith(BANNER_HEAD)
    assert (w.filename, w.lineno) == (__file__, line)  # the caller's TiraStore(...) line


def test_simplefilter_ignore_silences_the_banner(tmp_path, db_path, recwarn, capfd):
    db = db_path
    _create(db, cpu="X", slurm="4")
    recwarn.clear()
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TiraStoreWarning)
        s = TiraStore(db, cpu_model="Y", slurm_cpus="4")
    try:
        assert s.writes_allowed is False
        assert not [w for w in recwarn if issubclass(w.category, TiraStoreWarning)]
        out, err = capfd.readouterr()
        assert BANNER_HEAD.strip() not in out + err  # not printed either (the original printed it)
    finally:
        s.close()
