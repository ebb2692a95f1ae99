"""tirastore.plot: the data of a program's plot, and the plot files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import TEST_CPU, import_dev_dependency, oracle_program_hash

from tirastore.plot import MISSING_MATPLOTLIB, _log_scale, plot_program, program_series

NAME = "blur"
SRC = "void blur() {\n  int x = 1;\n}\n"
SRC2 = "void blur() {\n  int x = 2;\n}\n"
ILLEGAL = {2, 5, 6, 11, 17}  # indices (creation order) of the illegal schedules


def _sched(i: int) -> str:
    return f"S(L0,L1,{i},8,comps=['c1'])"


def _times(i: int) -> list:
    """Three runs; the middle one (the median) is 1/(i+1) but for a few bumps."""
    m = 1.0 / (i + 1) if i % 4 else 2.0 / (i + 1)
    return [m * 1.5, m, m * 0.5] if i % 2 else [m, m * 3, m * 0.9]


def _median(xs: list) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


@pytest.fixture
def plot_store(make_store):
    """A store with one program NAME of 20 schedules, 5 of them illegal."""
    store = make_store()
    for i in range(20):
        if i in ILLEGAL:
            assert store.record(NAME, SRC, _sched(i), False, None)
        else:
            assert store.record(NAME, SRC, _sched(i), True, _times(i))
    return store


def _expected(indices) -> tuple[list, list, list]:
    x = [i for i in indices if i not in ILLEGAL]
    y = [_median(_times(i)) for i in x]
    best, low = [], float("inf")
    for v in y:
        low = min(low, v)
        best.append(low)
    return x, y, best


# ---------------------------------------------------------------------------
# program_series: the data (no matplotlib needed)
# ---------------------------------------------------------------------------


def test_series_points_running_minimum_and_illegal(plot_store):
    (s,) = program_series(plot_store, NAME)
    assert s.program_hash == oracle_program_hash(SRC)
    assert s.short_hash == s.program_hash[:8]
    x, y, best = _expected(range(20))
    assert s.x == x
    assert s.y == pytest.approx(y)
    assert s.best == pytest.approx(best)
    assert s.illegal_x == sorted(ILLEGAL) and len(s.illegal_x) == 5
    assert s.untimed_x == []
    # the best-so-far line never rises, and ends at the global minimum
    assert all(b2 <= b1 for b1, b2 in zip(s.best, s.best[1:]))
    assert s.best[-1] == min(s.y)


def test_series_median_of_even_count_and_illegal_with_times(make_store):
    store = make_store()
    store.record(NAME, SRC, _sched(0), True, [4, 1, 3, 2])  # median 2.5
    store.record(NAME, SRC, _sched(1), False, [0.001])  # illegal: its times are not plotted
    store.record(NAME, SRC, _sched(2), True, [7])
    (s,) = program_series(store, NAME)
    assert (s.x, s.y, s.best, s.illegal_x) == ([0, 2], [2.5, 7.0], [2.5, 2.5], [1])


def test_series_legal_records_without_times(make_store):
    """Records written by other tools (put) may be legal without times."""
    store = make_store()
    store.record(NAME, SRC, _sched(0), True, [1.0])
    h = oracle_program_hash(SRC)
    assert store.put("k1", h, _sched(1), '{"is_legal":true,"execution_times":null}')
    assert store.put("k2", h, _sched(2), '{"is_legal":true,"execution_times":[]}')
    (s,) = program_series(store, NAME)
    assert s.x == [0] and sorted(s.untimed_x) == [1, 2] and s.illegal_x == []


def test_series_two_sources_and_program_hash(plot_store):
    for i in range(7):
        plot_store.record(NAME, SRC2, _sched(100 + i), i != 3, None if i == 3 else [10.0 - i])
    h1, h2 = oracle_program_hash(SRC), oracle_program_hash(SRC2)
    both = program_series(plot_store, NAME)
    assert [s.program_hash for s in both] == sorted([h1, h2])
    by_hash = {s.program_hash: s for s in both}
    assert by_hash[h1].x == _expected(range(20))[0]
    s2 = by_hash[h2]  # its own positions, from 0
    assert s2.x == [0, 1, 2, 4, 5, 6] and s2.illegal_x == [3]
    assert s2.best == [10.0, 9.0, 8.0, 6.0, 5.0, 4.0]
    # one of them, by full hash or by a prefix (the legend's short hash)
    assert [s.program_hash for s in program_series(plot_store, NAME, h2)] == [h2]
    assert [s.program_hash for s in program_series(plot_store, NAME, h2[:8].upper())] == [h2]
    with pytest.raises(ValueError) as e:
        program_series(plot_store, NAME, "ab" * 32)
    assert h1 in str(e.value) and h2 in str(e.value) and NAME in str(e.value)
    with pytest.raises(ValueError, match="known hashes"):
        program_series(plot_store, NAME, "")


def test_series_unknown_name(plot_store):
    with pytest.raises(ValueError, match="no program named 'nosuch'"):
        program_series(plot_store, "nosuch")
    with pytest.raises(TypeError):
        program_series(plot_store, NAME, 42)


def test_log_scale_decision():
    assert not _log_scale([])
    assert not _log_scale([1.0, 50.0])
    assert _log_scale([0.001, 0.5])
    assert not _log_scale([0.0, 5.0])  # a zero cannot be drawn on a log axis


# ---------------------------------------------------------------------------
# plot_program: the files
# ---------------------------------------------------------------------------


def test_plot_png_svg_pdf(plot_store, tmp_path):
    import_dev_dependency("matplotlib")
    out = tmp_path / "out"
    out.mkdir()
    png = plot_program(plot_store, NAME, out / "search.png")
    assert png == out / "search.png" and png.is_absolute()
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    svg = plot_program(plot_store, NAME, str(out / "search.svg"), title="my search")
    assert "<svg" in svg.read_text(encoding="utf-8")
    pdf = plot_program(plot_store, NAME, out / "search.PDF")
    assert pdf.read_bytes().startswith(b"%PDF")
    # nothing else is written beside them
    assert sorted(p.name for p in out.iterdir()) == ["search.PDF", "search.png", "search.svg"]
    # an existing file is replaced
    assert plot_program(plot_store, NAME, png).read_bytes().startswith(b"\x89PNG")


def test_plot_relative_path_is_returned_absolute(plot_store, tmp_path, monkeypatch):
    import_dev_dependency("matplotlib")
    monkeypatch.chdir(tmp_path)
    p = plot_program(plot_store, NAME, "rel.png")
    assert p.is_absolute() and p == tmp_path / "rel.png" and p.stat().st_size > 0


def test_plot_two_sources_and_one_of_them(plot_store, tmp_path):
    import_dev_dependency("matplotlib")
    for i in range(7):
        plot_store.record(NAME, SRC2, _sched(100 + i), i != 3, None if i == 3 else [1e-4 * (i + 1)])
    assert len(program_series(plot_store, NAME)) == 2
    both = plot_program(plot_store, NAME, tmp_path / "both.svg")
    assert "<svg" in both.read_text(encoding="utf-8")
    h2 = oracle_program_hash(SRC2)
    one = plot_program(plot_store, NAME, tmp_path / "one.png", program_hash=h2[:8])
    assert one.read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="known hashes"):
        plot_program(plot_store, NAME, tmp_path / "none.png", program_hash="not-a-hash")
    assert not (tmp_path / "none.png").exists()


def test_plot_program_without_records(make_store, tmp_path):
    import_dev_dependency("matplotlib")
    store = make_store()
    store.record(NAME, SRC, _sched(0), True, [1.0])
    for k in store.keys():
        store.delete(k)  # the program stays, with no records
    assert program_series(store, NAME)[0].x == []
    assert plot_program(store, NAME, tmp_path / "empty.png").stat().st_size > 0


def test_plot_unknown_name(plot_store, tmp_path):
    import_dev_dependency("matplotlib")
    with pytest.raises(ValueError, match="no program named 'nosuch'"):
        plot_program(plot_store, "nosuch", tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("name", ["plot.jpg", "plot", "plot.png.txt"])
def test_plot_bad_suffix(plot_store, tmp_path, name):
    # checked before matplotlib is imported: no importorskip
    with pytest.raises(ValueError, match=r"\.png, \.svg, \.pdf"):
        plot_program(plot_store, NAME, tmp_path / name)
    assert not (tmp_path / name).exists()


def test_plot_bad_path_type(plot_store):
    with pytest.raises(TypeError):
        plot_program(plot_store, NAME, 42)


def test_plot_matplotlib_missing(plot_store, tmp_path, monkeypatch):
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, mod, None)  # "import matplotlib" now fails
    with pytest.raises(ModuleNotFoundError) as e:
        plot_program(plot_store, NAME, tmp_path / "x.png")
    assert isinstance(e.value, ImportError)
    assert str(e.value) == 'plot needs matplotlib: pip install "tirastore[plot]"' == MISSING_MATPLOTLIB
    assert not (tmp_path / "x.png").exists()


def test_plot_matplotlib_missing_fresh_interpreter(plot_store, tmp_path):
    """In a process where matplotlib cannot be found at all, the module still
    imports, the data works, and the plot says what to install."""
    script = textwrap.dedent(
        f"""
        import sys, warnings
        warnings.simplefilter("ignore")

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "matplotlib" or name.startswith("matplotlib."):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, Block())
        from tirastore import TiraStore
        from tirastore.plot import plot_program, program_series
        store = TiraStore({str(plot_store.db_path)!r}, cpu_model={TEST_CPU!r})
        assert len(program_series(store, {NAME!r})[0].x) == 15
        try:
            plot_program(store, {NAME!r}, {str(tmp_path / "x.png")!r})
        except ModuleNotFoundError as e:
            print("ERR", e)
        assert "matplotlib" not in sys.modules
        """
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == 'ERR plot needs matplotlib: pip install "tirastore[plot]"'
    assert not (tmp_path / "x.png").exists()
