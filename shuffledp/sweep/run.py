"""Parameter sweeps of the private heatmap: shuffle and central side by side, tidy outputs.

:func:`run_sweep` varies one parameter (``B``, ``epsilon``, ``n``, ``grid``, ``w`` or
``dropout``) over a list of values around a base :class:`SweepConfig`, runs each point
``repeats`` times with independent randomness, in the shuffle model
(:func:`shuffledp.protocol.runner.shuffle_heatmap`, [Ghazi23]_ App. F) and in the central model
(:func:`shuffledp.analyzers.heatmap.central.central_heatmap`, [Ghazi23]_ Alg. 1-2, under the same
neighbour relation, ``SweepConfig.neighbour``: the B = inf limit of Fig. 13) -- optionally
also the central baselines of Sec. 4 (``models``, Fig. 1-2, add/remove: :func:`plan` refuses
them beside the other models under another relation) -- and appends every run as one row of
``runs.csv`` and one line of ``runs.jsonl``: its parameters, guarantee, bits and bytes per
user, timings and every metric of :func:`shuffledp.analyzers.heatmap.metrics.all_metrics`. Each
row is flushed and fsynced as the run finishes.

Resumable: every run has a key made of the swept parameter's name, the parameters its model
depends on (the central model ignores ``B`` and ``delta``) and the repeat index; runs whose
key is already in ``runs.csv`` are skipped (sweeps of different parameters may share a
directory). So a B sweep runs the central mechanism once per repeat, and rerunning an
interrupted sweep finishes it.

:func:`summarise` gives mean and 95% Student-t intervals per (model, value) and :func:`plot`
draws them (matplotlib, the ``plot`` extra); the CSV and JSON never depend on matplotlib.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps", App. F, Sec. 4
   -- full entry in docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics",
   Sec. 4 (dropouts) -- full entry in docs/references.md
"""

from __future__ import annotations

import math
import os
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp import datasets
from shuffledp.analyzers.heatmap.baselines import laplace_baseline
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.metrics import all_metrics
from shuffledp.analyzers.heatmap.release import normalise
from shuffledp.analyzers.heatmap.render import gaussian_heatmap
from shuffledp.datasets import PointTable, synthetic_mixture
from shuffledp.protocol import runner
from shuffledp.sweep.config import (
    _TOP,
    DEFAULT_MODELS,
    METRICS,
    Run,
    RunRecord,
    SweepConfig,
    plan,
)
from shuffledp.sweep.store import (
    append_record,
    done_keys,
    repair,
)

# --------------------------------------------------------------------------- input checks
# --------------------------------------------------------------------------- one run
_USERS: dict[tuple[Any, ...], Any] = {}


_TABLES: dict[tuple[Any, ...], Any] = {}


def load_input(path: str, input_format: str = "csv", bbox: Any = None) -> Any:
    """The :class:`~shuffledp.datasets.PointTable` of an input file (cached per file).

    Parameters
    ----------
    path : str or os.PathLike
        The input file.
    input_format : {"csv", "snap"}
        :func:`shuffledp.datasets.load_csv` or :func:`shuffledp.datasets.load_snap`.
    bbox : tuple of 4 floats, optional
        SNAP only: LAT_MIN, LAT_MAX, LON_MIN, LON_MAX of the area kept.

    Returns
    -------
    PointTable
        The file's points (the cached table when the same file was loaded last).

    Raises
    ------
    ValueError
        If ``input_format`` is not "csv" or "snap", or the file is malformed (named line).
    OSError
        If the file cannot be read.
    """
    if input_format not in ("csv", "snap"):
        raise ValueError(f"input_format must be 'csv' or 'snap', got {input_format!r}")

    key = (os.fspath(path), input_format, bbox)
    if key not in _TABLES:
        _TABLES.clear()
        _TABLES[key] = (datasets.load_csv(path) if input_format == "csv"
                        else datasets.load_snap(path, bbox=bbox))
    return _TABLES[key]


def subsample_users(table: Any, n: int, seed: int) -> Any:
    """``n`` of the table's users drawn without replacement (all of them if n equals their
    number).

    Parameters
    ----------
    table : PointTable
        The input's points.
    n : int
        Users wanted, >= 1.
    seed : int
        Seed of the draw (the sweep's ``data_seed``).

    Returns
    -------
    PointTable
        The points of the ``n`` users drawn (``table`` itself if n is all of them).

    Raises
    ------
    ValueError
        If the table has fewer than ``n`` users or ``n`` < 1.
    TypeError
        If ``n`` is not an integer.
    """
    n = v.count("n", n)

    labels = np.unique(table.user)
    if n > labels.size:
        raise ValueError(f"n must be at most the input's {labels.size} users, got n={n}")
    if n == labels.size:
        return table
    keep = np.random.default_rng(seed).choice(labels.size, size=n, replace=False)
    mask = np.isin(table.user, labels[keep])
    return PointTable(table.user[mask], table.x[mask], table.y[mask], table.weight[mask],
                      info={**table.info, "subsample": f"{n} users, seed {seed}"})


def _users(config: SweepConfig) -> Any:

    key = (config.grid.width, config.grid.height, config.n, config.data_seed, config.input,
           config.input_format, config.bbox)
    if key not in _USERS:
        _USERS.clear()
        if config.input is None:
            table = synthetic_mixture(n_users=config.n, rng=config.data_seed)
        else:
            table = subsample_users(load_input(config.input, config.input_format, config.bbox),
                                    config.n, config.data_seed)
        _USERS[key] = table.to_users(config.grid)
    return _USERS[key]


def run_one(run: Run, rng: Any = None) -> RunRecord:
    """Run one model once on the synthetic data of ``run.config`` and measure it.

    Parameters
    ----------
    run : Run
    rng : None, int or Generator
        None: fresh entropy (a private release); a seed or Generator: reproducible research
        (the release is marked as such).

    Returns
    -------
    RunRecord
        The run's parameters, guarantee, communication, timings and metrics.

    Raises
    ------
    ValueError
        If ``rng`` is a negative seed, the input file is malformed or has fewer users than n.
    TypeError
        If ``rng`` is not None, a seed or a Generator.
    OSError
        If the input file cannot be read.
    """

    c = run.config
    users = _users(c)
    aggregate = users.aggregate()
    # one budget rule on both sides, as `shuffledp heatmap` chooses it: --smoothing none is
    # Alg. 1-2 as printed (the printed split), auto the default split of both models
    budget = "paper" if c.smoothing == "none" else "auto"
    t0 = time.perf_counter()
    if run.model == "shuffle":
        # runner.shuffle_heatmap, not an imported name: tests spy on the runner module
        rel = runner.shuffle_heatmap(users, epsilon=c.epsilon, delta=c.delta, B=c.B, w=c.w,
                                     rng=rng, dropout=c.dropout, rounding=c.rounding,
                                     simulate_dropouts=math.floor(c.dropout * c.n),
                                     neighbour=c.neighbour, budget=budget)
    elif run.model == "central":
        rel = central_heatmap(users, c.epsilon, w=c.w, neighbour=c.neighbour, rng=rng,
                              budget=budget)
    else:  # the Sec. 4 baselines: central, add/remove (plan() keeps them like for like)
        rel = laplace_baseline(aggregate, c.epsilon, rng=rng, top_percent=_TOP.get(run.model))
    if c.smoothing != "none" and run.model in ("shuffle", "central"):
        rel = rel.smoothed(method="density" if c.smoothing == "density" else "posterior")
    t1 = time.perf_counter()
    truth = normalise(aggregate)
    sigma = run.sigma_px
    if sigma > 0:
        truth, est = gaussian_heatmap(truth, sigma), gaussian_heatmap(rel.estimate, sigma)
    else:
        est = rel.estimate
    found = all_metrics(truth, est, c.grid, emd=c.emd)
    metrics = {k: math.nan if x is None else float(x) for k, x in found.items()}  # emd=None
    t2 = time.perf_counter()
    report, proto, shuffle = rel.to_report(), rel.protocol, run.model == "shuffle"
    return RunRecord(
        key=run.key, model=run.model, param=run.param, repeat=run.repeat, grid=str(c.grid),
        n=c.n, epsilon=c.epsilon, delta=c.delta if shuffle else None,
        B=c.B if shuffle else None, dropout=c.dropout if shuffle else None, w=c.w,
        sigma=sigma, data_seed=c.data_seed, input=c.input,
        seed=rng if isinstance(rng, int) else None, release=report["release"],
        guarantee_epsilon=float(rel.guarantee.epsilon),
        guarantee_delta=float(rel.guarantee.delta), neighbour=str(rel.guarantee.neighbour),
        budget_rule=budget if run.model in ("shuffle", "central") else None,
        messages_per_user=proto.get("messages_per_user"),
        bits_per_user=proto.get("bits_per_user"), bytes_per_user=proto.get("bytes_per_user"),
        seconds_mechanism=t1 - t0, seconds_metrics=t2 - t1,
        **{k: metrics[k] for k in METRICS})


# --------------------------------------------------------------------------- outputs
def _run_rng(seed: int | None, run: Run) -> int | None:
    """None (fresh entropy), or a seed derived from ``seed`` and the run key (the same run
    gets the same noise after a resume)."""
    if seed is None:
        return None
    ss = np.random.SeedSequence([seed, zlib.crc32(run.key.encode())])
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))


def run_sweep(
    param: str,
    values: Sequence[Any],
    out_dir: str | os.PathLike[str],
    *,
    repeats: int = 3,
    base: SweepConfig | None = None,
    seed: int | None = None,
    models: Sequence[str] = DEFAULT_MODELS,
    on_plan: Callable[[int, int], Any] | None = None,
    on_run: Callable[[RunRecord], Any] | None = None,
) -> list[RunRecord]:
    """Run a sweep, appending each finished run to ``out_dir``; skip runs already there.

    Parameters
    ----------
    param, values, repeats, base, models
        As in :func:`plan`.
    out_dir : path
        Holds ``runs.csv`` and ``runs.jsonl`` (created if missing).
    seed : int, optional
        None (default): every run draws fresh entropy (private releases). A seed: reproducible
        research, each run seeded from ``seed`` and its key.
    on_plan : callable, optional
        Called once with (runs to do, runs skipped because already in the output).
    on_run : callable, optional
        Called with each finished record, after it is on disk (a progress bar).

    Returns
    -------
    list of RunRecord
        The runs done by this call (not those skipped).

    Raises
    ------
    ValueError
        If an argument of :func:`plan` is out of range, or ``out_dir`` holds a ``runs.csv``
        with other columns.
    TypeError
        If ``values`` or ``models`` is not a list, or a count is not an integer.
    OSError
        If ``out_dir`` or the input file cannot be written or read.
    """
    if seed is not None:
        seed = v.count("seed", seed, 0)
    runs = plan(param, values, repeats, base, models)
    repair(out_dir)
    done = done_keys(out_dir)
    todo = [r for r in runs if r.key not in done]
    if on_plan is not None:
        on_plan(len(todo), len(runs) - len(todo))
    records = []
    for run in todo:
        record = run_one(run, _run_rng(seed, run))
        append_record(out_dir, record)
        records.append(record)
        if on_run is not None:
            on_run(record)
    return records


# --------------------------------------------------------------------------- summaries
# --------------------------------------------------------------------------- plots
