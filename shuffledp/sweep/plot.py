"""Summaries and plots of a sweep's runs: mean and 95% Student-t interval per (model, value),
and one PNG per metric with t-bands (matplotlib, the ``plot`` extra).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps", App. F, Sec. 4
   -- full entry in docs/references.md
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.grid import Grid
from shuffledp.safe_io import atomic_path
from shuffledp.sweep.config import (
    METRICS,
    PARAMETERS,
)
from shuffledp.sweep.store import (
    read_runs,
)


def t_interval(samples: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t confidence interval of the mean.

    Parameters
    ----------
    samples : sequence of float
        At least one finite value.
    level : float
        Confidence level in (0, 1).

    Returns
    -------
    (mean, low, high) : floats
        ``mean -/+ t_{(1+level)/2, k-1} s / sqrt(k)`` with the sample standard deviation s;
        ``low = high = mean`` is never claimed: for k = 1 the ends are NaN.

    Raises
    ------
    ValueError
        If ``samples`` is empty, not 1-d or holds a non-finite value, or ``level`` is not in
        (0, 1).
    """
    from scipy.special import stdtrit

    x = np.asarray(samples, dtype=float)
    level = v.probability("level", level)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"samples must be a non-empty list of finite numbers, got {samples!r}")
    mean = float(x.mean())
    if x.size == 1:
        return mean, math.nan, math.nan
    half = float(stdtrit(x.size - 1, (1 + level) / 2)) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def _x_of(row: dict[str, Any], param: str) -> Any:
    return row.get(param)


def summarise(rows: Iterable[dict[str, Any]], param: str, column: str,
              level: float = 0.95) -> dict[str, list[tuple[Any, float, float, float]]]:
    """Per model, ``(value, mean, low, high)`` of ``column`` at each value of ``param``.

    A model whose rows do not depend on ``param`` (central in a B sweep) is one entry with
    value None: a constant band (B = inf in [Ghazi23]_ Fig. 13).

    Parameters
    ----------
    rows : iterable of dict
        Run records (:func:`shuffledp.sweep.store.read_runs`); each has ``model`` and
        ``param``. Rows of another sweep, or without ``column`` (None or NaN), are skipped.
    param : {"B", "epsilon", "n", "grid", "w", "dropout"}
        The swept parameter.
    column : str
        The record column summarised (a metric, ``bits_per_user``...).
    level : float, default 0.95
        Confidence level of the t-interval, in (0, 1).

    Returns
    -------
    dict of str to list of (value, mean, low, high)
        Per model, sorted by value (None last).

    Raises
    ------
    ValueError
        If ``param`` is not a sweepable parameter or ``level`` is not in (0, 1).
    TypeError
        If ``column`` is not a string.
    KeyError
        If a row lacks ``model`` or ``param``.
    """
    param = v.choice("param", param, PARAMETERS)
    if not isinstance(column, str):
        raise TypeError(f"column must be a str, got column={column!r}")
    groups: dict[str, dict[Any, list[float]]] = {}
    for row in rows:
        if row.get(column) is None or row["param"] != param:
            continue
        if isinstance(row[column], float) and math.isnan(row[column]):
            continue  # a metric the sweep skipped (emd=False)
        groups.setdefault(row["model"], {}).setdefault(_x_of(row, param), []).append(
            float(row[column]))
    return {model: [(x, *t_interval(ys, level)) for x, ys in sorted(
        by_x.items(), key=lambda kv: (kv[0] is None, _sort_key(kv[0])))]
        for model, by_x in groups.items()}


def _sort_key(x: Any) -> Any:
    if isinstance(x, str):
        g = Grid.parse(x)
        return g.width * g.height
    return 0 if x is None else x

PLOT_HINT = 'plots need matplotlib: pip install "shuffledp[plot]"'


def plot(out_dir: str | os.PathLike[str], param: str) -> list[Path]:
    """PNG plots of ``out_dir/runs.jsonl`` with 95% t-interval bands.

    ``bits_per_user.png`` (MB per user vs B, [Ghazi23]_ Fig. 12) when ``param`` is B, and
    ``metrics.png``: every metric vs ``param``, shuffle and central ([Ghazi23]_ Fig. 13,
    Fig. 1-2).

    Parameters
    ----------
    out_dir : str or os.PathLike
        The sweep's output directory (holds ``runs.jsonl``; the PNGs are written there).
    param : {"B", "epsilon", "n", "grid", "w", "dropout"}
        The swept parameter.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    ImportError
        Without matplotlib (message: :data:`PLOT_HINT`).
    ValueError
        If ``param`` is not a sweepable parameter.
    """
    param = v.choice("param", param, PARAMETERS)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(PLOT_HINT) from None
    rows = read_runs(out_dir)
    out = Path(out_dir)
    written = []
    if param == "B":
        fig, ax = plt.subplots(figsize=(5, 3.5))
        s = summarise(rows, "B", "bits_per_user").get("shuffle", [])
        ax.plot([x for x, *_ in s], [m / 8e6 for _, m, *_ in s], "o-", label="paper bits")
        s = summarise(rows, "B", "bytes_per_user").get("shuffle", [])
        ax.plot([x for x, *_ in s], [m / 1e6 for _, m, *_ in s], "s--", label="wire bytes")
        ax.set(xscale="log", xlabel="B", ylabel="MB per user",
               title="communication per user (Ghazi et al. 2023, Fig. 12)")
        ax.legend()
        written.append(_save(fig, out / "bits_per_user.png"))
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, metric in zip(axes.flat, METRICS):
        _band_panel(ax, summarise(rows, param, metric), param, metric)
    fig.suptitle(f"metrics vs {param}: mean and 95% t-interval")
    written.append(_save(fig, out / "metrics.png"))
    return written


def _band_panel(ax: Any, summary: dict[str, list], param: str, metric: str) -> None:
    xs_all = sorted({x for s in summary.values() for x, *_ in s if x is not None},
                    key=_sort_key)
    pos = {x: i for i, x in enumerate(xs_all)} if param == "grid" else None
    for model, s in summary.items():
        pts = [p for p in s if p[0] is not None]
        if pts:
            x = [pos[p[0]] if pos else p[0] for p in pts]
            ax.plot(x, [p[1] for p in pts], "o-", label=model)
            ax.fill_between(x, [p[2] for p in pts], [p[3] for p in pts], alpha=0.25)
        for _, mean, low, high in (p for p in s if p[0] is None):
            line = ax.axhline(mean, ls="--", color="k", label=f"{model} (B = inf)")
            if math.isfinite(low):
                ax.axhspan(low, high, alpha=0.15, color=line.get_color())
    if pos:
        ax.set_xticks(range(len(xs_all)), xs_all)
    elif param in ("B", "n", "epsilon"):
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.set_xticks(xs_all, [f"{x:g}" for x in xs_all])  # the swept values, not decades
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set(xlabel=param, ylabel=metric)
    ax.legend(fontsize=7)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
