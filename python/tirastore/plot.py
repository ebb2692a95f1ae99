"""Plots of a program's measurements: how a schedule search progressed.

:func:`plot_program` draws, for one program of a store, the execution time
of every recorded schedule in the order the schedules were recorded, with
the best time found so far as a step line; illegal schedules are marked
along the x axis. :func:`program_series` computes the same data without
drawing. This is the picture behind ``tirastore plot DB --program NAME -o
FILE.png``.

matplotlib is an optional dependency (``pip install "tirastore[plot]"``),
imported only when a plot is drawn. The figure is built with matplotlib's
object-oriented API, never pyplot: no display is needed and the backend of
the calling program (a notebook, say) is left alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tirastore.store import PathLike, TiraStore, _fspath, _output_file

#: The output formats, chosen by the suffix of the output file.
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}

MISSING_MATPLOTLIB = 'plot needs matplotlib: pip install "tirastore[plot]"'


@dataclass
class ProgramSeries:
    """The measurements of one source version of a program, ready to plot.

    Positions are indices in creation order among all the records of this
    source, legal or not, starting at 0.

    * ``program_hash`` (str): the hash of the source version;
    * ``x`` (list of int): the position of each legal, timed record;
    * ``y`` (list of float): its time, the median of its execution times;
    * ``best`` (list of float): the running minimum of ``y``;
    * ``illegal_x`` (list of int): the positions of the illegal records;
    * ``untimed_x`` (list of int): the positions of legal records without a
      usable time (no finite number among their execution times: only
      databases written by other tools have such records).
    """

    program_hash: str
    x: list = field(default_factory=list)
    y: list = field(default_factory=list)
    best: list = field(default_factory=list)
    illegal_x: list = field(default_factory=list)
    untimed_x: list = field(default_factory=list)

    @property
    def short_hash(self) -> str:
        """The first 8 hex digits of ``program_hash``, as the legend shows it."""
        return self.program_hash[:8]


def _log_scale(ys: list) -> bool:
    """Whether times *ys* want a log axis: all positive, spanning over 100x."""
    return bool(ys) and min(ys) > 0 and max(ys) / min(ys) > 100


def program_series(store: TiraStore, program_name: str, program_hash: Optional[str] = None) -> list[ProgramSeries]:
    """Return the plot data of a program: one :class:`ProgramSeries` per source version.

    A record's time is the **median** of its execution times: robust to a
    single slow (cold-cache, noisy-neighbour) or lucky run, and equal to the
    time itself when one run was measured.

    :param TiraStore store: the store to read
    :param str program_name: the program's name
    :param program_hash: only the source version with this hash (the full
        hash or a unique prefix of it, such as the legend's 8 digits); None:
        every version stored under the name
    :return: a list of :class:`ProgramSeries`, ordered by hash
    :raises ValueError: no program has this name, or none of its versions
        has this hash (the message lists the known hashes)
    :raises TypeError: *program_name* or *program_hash* is not a str

    >>> for i, t in enumerate([[0.5], None, [0.2, 0.3, 0.9], [0.4]]):
    ...     _ = store.record("blur", "void blur() {}", f"U(L0,{i + 2},comps=['c1'])", t is not None, t)
    >>> s, = program_series(store, "blur")
    >>> s.x, s.y, s.best, s.illegal_x
    ([0, 2, 3], [0.5, 0.3, 0.4], [0.5, 0.3, 0.3], [1])
    """
    if program_hash is not None and not isinstance(program_hash, str):
        raise TypeError(f"program_series(): program_hash must be str or None, not {type(program_hash).__name__}")
    sources = store.get_program_source(program_name)
    if not sources:
        raise ValueError(f"no program named {program_name!r} in {store.db_path}")
    if program_hash is not None:
        wanted = program_hash.strip().lower()
        chosen = [s for s in sources if wanted and s["program_hash"].startswith(wanted)]
        if len(chosen) != 1:
            known = ", ".join(s["program_hash"] for s in sources)
            why = "matches several" if chosen else "matches none"
            raise ValueError(
                f"program hash {program_hash!r} {why} of the sources of {program_name!r}; known hashes: {known}"
            )
        sources = chosen
    result = []
    for source in sources:
        # The engine takes each record's time as the dashboard does
        # (core/dashboard, SearchOf): one definition of it.
        d = store._call("program_series", program_name=program_name, program_source_code=source["source_code"])
        result.append(ProgramSeries(source["program_hash"], d["x"], d["y"], d["best"], d["illegal_x"], d["untimed_x"]))
    return result


def plot_program(
    store: TiraStore,
    program_name: str,
    output_path: PathLike,
    *,
    program_hash: Optional[str] = None,
    title: Optional[str] = None,
) -> Path:
    """Plot the execution time of every schedule of a program, with the best so far.

    One point per legal record: x is its index in creation order (the
    number of schedules recorded before it), y its time, the median of its
    execution times (see :func:`program_series`). The index, rather than
    the creation time, because a search spread over Slurm jobs has hours of
    queueing between bursts of measurements, which would squash each burst
    into a vertical line; the index shows progress per schedule tried. The
    best-so-far line is the running minimum of the points. Illegal
    schedules have no time: they are small marks along the bottom of the
    axes, counted in the legend. The y axis is "execution time" in the
    unit the times were recorded in, logarithmic when the times span more
    than two orders of magnitude.

    When the name has several source versions, each is a series of its
    own, labelled by its short hash, with its own positions; *program_hash*
    plots only one.

    :param TiraStore store: the store to read
    :param str program_name: the program's name
    :param output_path: the file to write (str or path-like); its suffix
        picks the format: ``.png``, ``.svg`` or ``.pdf``. Its directory must
        exist; an existing file is replaced (through a temporary file
        renamed over it), unless it is the store's database or one of its
        files (its lock, journal, ...) or another database
    :param program_hash: only the source version with this hash (full or a
        unique prefix); None: every version
    :param title: the figure's title; None: the program's name (and the
        short hash when *program_hash* is given)
    :return: the absolute :class:`~pathlib.Path` written
    :raises ValueError: the suffix is not one of the formats, no program
        has this name, no version has this hash, or the output path is a
        database or one of its files (nothing is written)
    :raises ModuleNotFoundError: matplotlib is not installed
    :raises TypeError: an argument has the wrong type
    :raises OSError: the file cannot be written

    >>> plot_program(store, "blur", "blur.png").name  # doctest: +SKIP
    'blur.png'
    """
    out = _fspath("plot_program", "output_path", output_path)
    name = os.path.basename(out)
    fmt = FORMATS.get(os.path.splitext(name)[1].lower())
    if fmt is None:
        raise ValueError(
            f"cannot plot to {name!r}: the file name must end with one of {', '.join(FORMATS)}"
        )
    try:
        import matplotlib  # first: a stub in sys.modules must stop the submodules too

        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ModuleNotFoundError(MISSING_MATPLOTLIB, name="matplotlib") from e
    del matplotlib

    all_series = program_series(store, program_name, program_hash)
    several = len(all_series) > 1

    fig = Figure(figsize=(10 if several else 8, 4.5), layout="constrained")
    FigureCanvasAgg(fig)  # png; savefig switches canvas for svg and pdf
    ax = fig.add_subplot()
    colors = [f"C{i % 10}" for i in range(len(all_series))]
    for k, (series, color) in enumerate(zip(all_series, colors)):
        prefix = f"{series.short_hash}: " if several else ""
        n_legal = len(series.x) + len(series.untimed_x)
        label = f"{prefix}{n_legal} legal schedule{'s' if n_legal != 1 else ''}"
        if series.untimed_x:
            label += f" ({len(series.untimed_x)} without times)"
        ax.plot(series.x, series.y, "o", color=color, alpha=0.45, markersize=4, label=label)
        if series.best:
            ax.step(series.x, series.best, where="post", color=color, linewidth=1.8,
                    label=f"{prefix}best so far: {series.best[-1]:.4g}")
        if series.illegal_x:
            # A rug of ticks along the bottom edge (a row per series, in axes
            # coordinates): not points, so never read as a time near zero.
            row = 0.025 + 0.04 * (k % 4)
            ax.plot(series.illegal_x, [row] * len(series.illegal_x), "|", markersize=9, markeredgewidth=1.5,
                    color=color if several else "tab:red",
                    transform=ax.get_xaxis_transform(), clip_on=False,
                    label=f"{prefix}{len(series.illegal_x)} illegal (no time)")

    if _log_scale([y for s in all_series for y in s.y]):
        ax.set_yscale("log")
    if not any(s.x or s.illegal_x or s.untimed_x for s in all_series):
        ax.text(0.5, 0.5, "no records", transform=ax.transAxes, ha="center", va="center", color="gray")
    ax.set_xlabel("schedule (creation order)")
    ax.set_ylabel("execution time")
    ax.grid(True, which="major", alpha=0.3)
    if title is None:
        title = program_name
        if program_hash is not None:
            title += f" ({all_series[0].short_hash})"
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        if several:  # beside the axes: a long legend would hide marks
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
        else:
            ax.legend(loc="best", fontsize="small")
    # The library checks the path (never the store's database or one of its
    # files, nor another database) and writes it through a temporary file.
    with _output_file("plot", out, databases=[str(store.db_path)]) as (path, f):
        fig.savefig(f, format=fmt, dpi=120)
    return path
