"""Summaries and plots of a sweep's runs: mean and 95% Student-t interval per (model, value),
and one PNG per metric with t-bands (matplotlib, the ``plot`` extra).

Communication is reported as what the wire carries (:func:`wire_bytes`): the paper's bit
count r m ceil(log2(m q)), the plaintext batch of the simulation path and the encrypted
batch of the deployment path, whose every message carries its own HPKE encapsulation and
AEAD tag (:attr:`shuffledp.protocol.params.ProtocolParams.encrypted_bytes_per_user`). For a
B sweep, ``utility_vs_bits.png`` puts [Ghazi23]_ Fig. 12 and Fig. 13 together: every
metric against the bits per user, one point per B.

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
from shuffledp.protocol.params import derive_params
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

_WIRE_CACHE: dict[tuple, dict[str, int] | None] = {}


def wire_bytes(row: dict[str, Any]) -> dict[str, int] | None:
    """Plaintext and encrypted bytes per user of a shuffle run's record.

    The protocol record is derived again from the run's grid, n, epsilon, delta, B, w and
    dropout (:func:`shuffledp.protocol.params.derive_params`) under the record's
    ``budget_rule`` (a record without one: each rule, "auto", then "paper"; a sweep runs
    "paper" with ``smoothing="none"``); the first whose
    plaintext size, messages and bits equal the record's ``bytes_per_user``,
    ``messages_per_user`` and ``bits_per_user`` gives the sizes (None: the run used other
    parameters).

    Parameters
    ----------
    row : dict
        A run record (:func:`shuffledp.sweep.store.read_runs`).

    Returns
    -------
    dict or None
        ``{"bytes_per_user": ..., "encrypted_bytes_per_user": ...}``, None for a run that is
        not of the shuffle model or whose parameters cannot be derived again.

    Raises
    ------
    TypeError
        If ``row`` is not a mapping.
    """
    if not isinstance(row, dict):
        raise TypeError(f"row must be a run record (dict), got {type(row).__name__}")
    if row.get("model") != "shuffle" or row.get("bytes_per_user") is None:
        return None
    key = tuple(row.get(k) for k in ("grid", "n", "epsilon", "delta", "B", "w", "dropout",
                                     "bytes_per_user", "messages_per_user", "bits_per_user"))
    if key not in _WIRE_CACHE:
        _WIRE_CACHE[key] = None
        # the run's budget rule (in records since the column was added; before, the rule
        # whose derived record has the run's sizes)
        rule = row.get("budget_rule")
        for budget in (rule,) if rule in ("auto", "paper") else ("auto", "paper"):
            try:
                p = derive_params(Grid.parse(str(row["grid"])), int(row["n"]),
                                  epsilon=float(row["epsilon"]), delta=float(row["delta"]),
                                  B=int(row["B"]), w=int(row["w"]),
                                  dropout=float(row.get("dropout") or 0.0), budget=budget)
            except (ValueError, TypeError, KeyError):
                continue
            if p.bytes_per_user == int(row["bytes_per_user"]) and all(
                    row.get(k) is None or getattr(p, k) == int(row[k])
                    for k in ("messages_per_user", "bits_per_user")):
                _WIRE_CACHE[key] = {"bytes_per_user": p.bytes_per_user,
                                    "encrypted_bytes_per_user": p.encrypted_bytes_per_user}
                break
    return _WIRE_CACHE[key]


def with_wire_bytes(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows, each shuffle run with ``encrypted_bytes_per_user`` added (:func:`wire_bytes`;
    None when it cannot be derived).

    Parameters
    ----------
    rows : iterable of dict
        Run records.

    Returns
    -------
    list of dict
        New dicts; the input is not modified.

    Raises
    ------
    TypeError
        If a row is not a mapping (:func:`wire_bytes`).
    """
    out = []
    for row in rows:
        w = wire_bytes(row)
        out.append({**row, "encrypted_bytes_per_user": None if w is None
                    else w["encrypted_bytes_per_user"]})
    return out


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
    rows = with_wire_bytes(read_runs(out_dir))
    out = Path(out_dir)
    written = []
    if param == "B":
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for column, scale, style, label in (
                ("bits_per_user", 8e6, "o-", "paper bits (r m log2(m q)) / 8"),
                ("bytes_per_user", 1e6, "s--", "plaintext batch (simulation path)"),
                ("encrypted_bytes_per_user", 1e6, "^-",
                 "encrypted batch (deployment: HPKE per message)")):
            s = summarise(rows, "B", column).get("shuffle", [])
            ax.plot([x for x, *_ in s], [m / scale for _, m, *_ in s], style, label=label)
        ax.set(xscale="log", yscale="log", xlabel="B", ylabel="MB per user",
               title="communication per user (Ghazi et al. 2023, Fig. 12)")
        ax.legend(fontsize=7)
        written.append(_save(fig, out / "bits_per_user.png"))
        written.append(_utility_vs_bits(plt, rows, out / "utility_vs_bits.png"))
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, metric in zip(axes.flat, METRICS):
        _band_panel(ax, summarise(rows, param, metric), param, metric)
    fig.suptitle(f"metrics vs {param}: mean and 95% t-interval")
    written.append(_save(fig, out / "metrics.png"))
    return written


def _utility_vs_bits(plt: Any, rows: list[dict[str, Any]], path: Path) -> Path:
    """Every metric against the bits per user of the shuffle protocol, one point per B (mean
    and 95% t-interval over the repeats), the central model as B = inf: [Ghazi23]_ Fig. 12
    and Fig. 13 in one figure. Each point is labelled with its B and the encrypted MB per
    user."""
    bits = {x: m for x, m, *_ in summarise(rows, "B", "bits_per_user").get("shuffle", [])}
    enc = {x: m for x, m, *_ in summarise(rows, "B", "encrypted_bytes_per_user").get(
        "shuffle", [])}
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    for ax, metric in zip(axes.flat, METRICS):
        summary = summarise(rows, "B", metric)
        pts = [p for p in summary.get("shuffle", []) if p[0] in bits]
        if pts:
            x = [bits[p[0]] for p in pts]
            ax.plot(x, [p[1] for p in pts], "o-", label="shuffle")
            ax.fill_between(x, [p[2] for p in pts], [p[3] for p in pts], alpha=0.25)
            for b, xi, yi in zip((p[0] for p in pts), x, (p[1] for p in pts)):
                label = f"B={b:g}" + (f"\n{enc[b] / 1e6:.3g} MB enc." if b in enc else "")
                ax.annotate(label, (xi, yi), fontsize=6, textcoords="offset points",
                            xytext=(2, 3))
        for model, s in summary.items():
            for _, mean, low, high in (p for p in s if p[0] is None):
                line = ax.axhline(mean, ls="--", color="k", label=f"{model} (B = inf)")
                if math.isfinite(low):
                    ax.axhspan(low, high, alpha=0.15, color=line.get_color())
        ax.set(xscale="log", xlabel="bits per user (paper count)", ylabel=metric)
        if pts:
            from matplotlib.ticker import NullFormatter

            ax.set_xticks(x, [f"{v:.3g}" for v in x], fontsize=7)
            ax.xaxis.set_minor_formatter(NullFormatter())
        else:
            ax.text(0.5, 0.5, f"{metric}: not computed in this sweep", ha="center",
                    transform=ax.transAxes, fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("utility against communication as B varies (Ghazi et al. 2023, Fig. 12 and "
                 "13 together): mean and 95% t-interval")
    return _save(fig, path)


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
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
