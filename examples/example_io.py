"""What the example scripts share for their outputs: CSV files written row by row, progress bars
on stderr, printing that does not break them, figure finishing (legend outside the data, a
caption that explains the error bars), and the options every example takes besides
``--dataset`` (:func:`add_threads_argument`, :func:`add_out_argument`, :func:`output_stem`).

**The examples' convention.** Every script in ``examples/`` (the helper modules aside) takes
``--dataset`` (:func:`example_data.add_dataset_argument`), ``--quick`` (under 2 minutes on one
thread), ``--threads`` (default 1, ``torch.set_num_threads``) and ``--out`` (a folder); a quick
run writes its own files (a ``_quick`` suffix), never a full run's; rows go to a :class:`CsvWriter`
as they finish, and anything longer than a few seconds has a :func:`progress` bar on stderr; an
absent dataset is a one-line error with exit status 2 (:func:`example_data.load_or_exit`).
``tests/examples/test_example_conventions.py`` checks every script for it."""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from typing import Iterable, Optional

from tqdm.auto import tqdm

__all__ = ["CsvWriter", "write_csv", "progress", "say", "finish_figure", "epsilon_axis", "add_threads_argument",
           "add_out_argument", "output_stem"]


def _threads(value: str) -> int:
    try:
        threads = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"`--threads` must be an integer >= 1; got {value!r}") from None
    if threads < 1:
        raise argparse.ArgumentTypeError(f"`--threads` must be an integer >= 1; got {threads}")
    return threads


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """``--threads N``: torch's CPU threads, **default 1** (the script calls
    ``torch.set_num_threads(args.threads)``; the quick times are measured on one thread)."""
    parser.add_argument("--threads", type=_threads, default=1, help="torch CPU threads (default: 1)")


def add_out_argument(parser: argparse.ArgumentParser, what: str = "the CSV", default: Optional[str] = "outputs",
                     default_text: Optional[str] = None) -> None:
    """``--out FOLDER``: where ``what`` go (a quick run writes files of its own there)."""
    parser.add_argument("--out", default=default, metavar="FOLDER",
                        help=f"folder for {what}; --quick writes files of its own, with a _quick suffix "
                             f"(default: {default_text or default})")


def output_stem(out: str, stem: str, mode: str = "full") -> str:
    """``out/stem`` for a full run, ``out/stem_quick`` (``_smoke``, ...) for the other modes: a quick
    run never overwrites a full run's outputs."""
    return os.path.join(out, stem + ("" if mode == "full" else f"_{mode}"))


class CsvWriter:
    """A CSV file written **row by row**: every :meth:`write` reaches the disk (flushed and
    synced) before it returns, so an interrupted run keeps every row it finished.

    The columns are the union of the rows' keys in first-seen order. A row that brings a new
    key rewrites the file once with the extended header (through a temporary file and an
    atomic rename, so a reader never sees a half-written file); missing values are empty.

    Args:
        path (str): The file; its folder is created. An existing file is replaced.
    """

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self.rows: list[dict] = []
        self.fields: list[str] = []
        self._file = None
        self._rewrite()

    def _rewrite(self) -> None:
        if self._file is not None:
            self._file.close()
        tmp = self.path + ".tmp"
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.fields)
            if self.fields:
                writer.writeheader()
            writer.writerows(self.rows)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._file = open(self.path, "a", newline="")

    def write(self, row: dict) -> None:
        """Appends ``row`` (a mapping column -> value) and flushes it to disk."""
        self.rows.append(dict(row))
        new = [k for k in row if k not in self.fields]
        if new:
            self.fields += new
            self._rewrite()
            return
        csv.DictWriter(self._file, fieldnames=self.fields).writerow(row)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "CsvWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_csv(rows: list[dict], path: str) -> None:
    """``rows`` as a CSV at ``path`` (its folder created), with the union of their keys as
    columns in first-seen order; missing values are left empty."""
    with CsvWriter(path) as writer:
        for row in rows:
            writer.write(row)
    say(f"wrote {path}")


def progress(iterable: Optional[Iterable] = None, *, desc: str, total: Optional[int] = None,
             leave: bool = False, **kwargs) -> tqdm:
    """A ``tqdm`` progress bar on **stderr** (stdout stays clean for tables and redirection).

    On a terminal it refreshes at most twice a second and nested bars stack below their
    parent. When stderr is a file or a pipe (a log), only the outermost bar is shown, kept
    when done, and refreshed at most every 30 s, so the log stays readable and long work is
    never silent. ``TQDM_DISABLE=1`` in the environment turns every bar off (tqdm's own
    environment override).
    """
    interactive = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    if os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no"):
        kwargs["disable"] = True  # tqdm's override only changes its defaults, and `disable` is set below
    elif not interactive:
        nested = any(not getattr(bar, "disable", True) for bar in list(getattr(tqdm, "_instances", ())))
        kwargs.setdefault("disable", nested)
        leave = True
    kwargs.setdefault("mininterval", 0.5 if interactive else 30.0)
    return tqdm(iterable, desc=desc, total=total, leave=leave, file=sys.stderr, dynamic_ncols=True, **kwargs)


def say(message: str = "") -> None:
    """Prints ``message`` to stdout without breaking the progress bars on stderr (they are
    cleared, the line written, and redrawn)."""
    if hasattr(sys.stderr, "isatty") and sys.stderr.isatty():
        tqdm.write(message, file=sys.stdout)
    else:  # bars in a log are not redrawn: a plain line
        print(message)
    sys.stdout.flush()


def epsilon_axis(ax, epsilons: Iterable[float], *, base: float = 10, pad: float = 1.6) -> None:
    """A log-scale epsilon axis with one tick at each (finite) epsilon run, labelled as a plain number,
    and no other tick; the range is padded by ``pad`` on each side. A quick run's single epsilon (with
    the small per-method offsets) would otherwise span a sliver of a decade, whose log-scale minor labels
    (``9.6e-1``, ``9.8e-1``, ...) run into each other."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ticks = sorted({float(e) for e in epsilons if math.isfinite(e)})
    if not ticks:
        return
    ax.set_xscale("log", base=base)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([f"{e:g}" for e in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(ticks[0] / pad, ticks[-1] * pad)


def finish_figure(fig, path: str, caption: str, *, ncol: int = 1) -> None:
    """Puts one legend (the labelled artists of every axes, each label once) to the **right of
    the plots**, where it cannot cover data, writes ``caption`` (what the points and error bars
    are) under the figure, and saves it to ``path``.

    Args:
        fig (matplotlib.figure.Figure): The figure.
        path (str): The PNG to write; its folder is created.
        caption (str): One or two sentences under the figure.
        ncol (int, optional): The legend's columns. (default: :obj:`1`)
    """
    handles: dict = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.tight_layout()
    artists = []
    if handles:
        artists.append(fig.legend(list(handles.values()), list(handles), loc="upper left",
                                  bbox_to_anchor=(1.0, 0.95), fontsize=7, ncol=ncol, frameon=False))
    artists.append(fig.text(0.01, -0.02, caption, ha="left", va="top", fontsize=7, wrap=True))
    if getattr(fig, "_suptitle", None) is not None:
        artists.append(fig._suptitle)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight", bbox_extra_artists=artists)
    say(f"wrote {path}")
