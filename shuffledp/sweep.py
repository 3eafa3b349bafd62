"""Parameter sweeps of the private heatmap: shuffle and central side by side, tidy outputs.

:func:`run_sweep` varies one parameter (``B``, ``epsilon``, ``n``, ``grid``, ``w`` or
``dropout``) over a list of values around a base :class:`SweepConfig`, runs each point
``repeats`` times with independent randomness, in the shuffle model
(:func:`shuffledp.protocol.shuffle_heatmap`, [Ghazi23]_ App. F) and in the central model
(:func:`shuffledp.analyzers.central.central_heatmap`, [Ghazi23]_ Alg. 1-2, under the same
replace-one relation: the B = inf limit of Fig. 13) -- optionally also the central baselines of
Sec. 4 (``models``, Fig. 1-2) -- and appends every run as one row of ``runs.csv`` and one line
of ``runs.jsonl``: its parameters, guarantee, bits and bytes per user, timings and every metric
of :func:`shuffledp.analyzers.metrics.all_metrics`. Each row is flushed and fsynced as the run
finishes.

Resumable: every run has a key made of the swept parameter's name, the parameters its model
depends on (the central model ignores ``B`` and ``delta``) and the repeat index; runs whose
key is already in ``runs.csv`` are skipped (sweeps of different parameters may share a
directory). So a B sweep runs the central mechanism once per repeat, and rerunning an
interrupted sweep finishes it.

:func:`summarise` gives mean and 95% Student-t intervals per (model, value) and :func:`plot`
draws them (matplotlib, the ``plot`` extra); the CSV and JSON never depend on matplotlib.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023, arXiv:2211.13454
   (App. F, Fig. 12-13; Sec. 4, Fig. 1-2).
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4), Sec. 4 (dropouts).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.grid import Grid

PARAMETERS = ("B", "epsilon", "n", "grid", "w", "dropout")
#: every model a sweep can run: the shuffle protocol, the central Alg. 1-2, and the central
#: baselines of [Ghazi23]_ Sec. 4 (Laplace per cell, and top-t% of the noisy cells)
MODELS = ("shuffle", "central", "laplace", "top_1%", "top_0.1%")
#: the models run when none are named: the shuffle protocol and its central B = inf limit
DEFAULT_MODELS = ("shuffle", "central")
_TOP = {"top_1%": 1.0, "top_0.1%": 0.1}
METRICS = ("emd", "kl", "cc", "sim", "mse", "l1")
CSV_NAME = "runs.csv"
JSONL_NAME = "runs.jsonl"


@dataclass(frozen=True)
class SweepConfig:
    """The fixed parameters of a sweep (the swept one is replaced point by point).

    Attributes
    ----------
    grid : Grid
    n : int
        Users of the built-in synthetic data set (>= 2: the shuffle protocol needs two).
    epsilon, delta : float
        Target guarantee (delta only for the shuffle model).
    B, w : int
        Scaling factor of the shuffle protocol; Reconstruct's top-w.
    sigma : float
        Gaussian filter (pixels) applied to truth and estimate before the metrics
        ([Ghazi23]_ Sec. 2.3); 0 compares the raw distributions.
    data_seed : int
        Seed of :func:`shuffledp.datasets.synthetic_mixture` (the data, not the noise).
    input : str or None
        A ``user_id,x,y[,weight]`` CSV or SNAP check-ins file (``input_format``) instead of
        the built-in synthetic users. ``n`` users are then drawn from the file without
        replacement (seeded by ``data_seed``); ``n`` equal to the file's number of users takes
        all of them.
    input_format : {"csv", "snap"}
    bbox : tuple of 4 floats or None
        SNAP only: LAT_MIN, LAT_MAX, LON_MIN, LON_MAX of the region kept.
    dropout : float
        Shuffle model: the fraction of users, in [0, 1), who drop out. The protocol plans its
        noise for the ceil((1 - dropout) n) survivors ([Bagdasaryan22]_ Sec. 4) and
        floor(dropout n) users, drawn at random, never send their batch; the metrics compare
        with the aggregate of all n users (dropping users is part of the error).
    rounding : {"largest_remainder", "floor"}
        Shuffle model: the scale-and-round rule (:mod:`shuffledp.encoders.rounding`).
        ``"floor"`` is [Ghazi23]_ App. F's, whose rounding error shrinks as B grows (the trend
        of Fig. 13); ``"largest_remainder"`` keeps each level summing to exactly B.
    emd : bool
        Solve the exact EMD (seconds per run on a 320x240 grid); ``False`` records NaN for it
        (``--figure 12``, which is about bits per user).
    smoothing : {"none", "auto"}
        Post-process the shuffle and central releases with
        :meth:`shuffledp.release.HeatmapRelease.smoothed` (what ``shuffledp heatmap`` releases
        by default; ``--figure 1/2``); "none" keeps Reconstruct's output.
    """

    grid: Grid = field(default_factory=lambda: Grid(80, 60))
    n: int = 50
    epsilon: float = 5.0
    delta: float = 1e-5
    B: int = 256
    w: int = 20
    sigma: float = 2.0
    data_seed: int = 2023
    dropout: float = 0.0
    input: str | None = None
    input_format: str = "csv"
    bbox: tuple[float, float, float, float] | None = None
    rounding: str = "largest_remainder"
    emd: bool = True
    smoothing: str = "none"

    def __post_init__(self) -> None:
        v.choice("rounding", self.rounding, ("largest_remainder", "floor"))
        v.choice("smoothing", self.smoothing, ("none", "auto"))
        if not isinstance(self.grid, Grid):
            raise TypeError(f"grid must be a Grid, got grid={self.grid!r}")
        object.__setattr__(self, "n", v.count("n", self.n, 2))
        object.__setattr__(self, "epsilon", v.positive("epsilon", self.epsilon))
        object.__setattr__(self, "delta", v.probability("delta", self.delta))
        object.__setattr__(self, "B", v.count("B", self.B))
        object.__setattr__(self, "w", v.count("w", self.w))
        sigma = v.real("sigma", self.sigma)
        if not 0 <= sigma < math.inf:
            raise ValueError(f"sigma must be a finite number >= 0, got sigma={self.sigma!r}")
        object.__setattr__(self, "sigma", sigma)
        object.__setattr__(self, "data_seed", v.count("data_seed", self.data_seed, 0))
        dropout = v.real("dropout", self.dropout)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got dropout={self.dropout!r}")
        object.__setattr__(self, "dropout", dropout)
        if self.input is not None:
            object.__setattr__(self, "input", os.fspath(self.input))
        v.choice("input_format", self.input_format, ("csv", "snap"))
        if (self.input_format == "snap") != (self.bbox is not None):
            raise ValueError("bbox is required with input_format='snap' and only valid with "
                             f"it, got input_format={self.input_format!r}, bbox={self.bbox!r}")


@dataclass(frozen=True)
class RunRecord:
    """One run of one model at one sweep point: a row of ``runs.csv``.

    Attributes
    ----------
    key : str
        Parameters the model depends on and the repeat index (the resume key).
    model : {"shuffle", "central", "laplace", "top_1%", "top_0.1%"}
    param : str
        The swept parameter.
    repeat : int
    grid : str
        ``WIDTHxHEIGHT``.
    n, w : int
    epsilon : float
        Target epsilon.
    delta : float or None
        Target delta (shuffle); None for central.
    B : int or None
        Scaling factor (shuffle); None for the central models.
    dropout : float or None
        Dropout fraction (shuffle); None for the central models.
    sigma : float
    data_seed : int
    input : str or None
        The input file (None: the built-in synthetic users).
    seed : int or None
        This run's noise seed (derived from the sweep's seed and the key, so the run can be
        repeated alone); None = fresh entropy (a private release).
    release : str
        :attr:`HeatmapRelease.PRIVATE` or :attr:`HeatmapRelease.REPRODUCIBLE`.
    guarantee_epsilon, guarantee_delta : float
        The release's proven guarantee.
    neighbour : str
    messages_per_user, bits_per_user, bytes_per_user : int or None
        Shuffle model only: the paper's ``r m ceil(log2(m q))`` bits, and the wire bytes.
    seconds_mechanism, seconds_metrics : float
    emd, kl, cc, sim, mse, l1 : float
        :func:`shuffledp.analyzers.metrics.all_metrics` against the normalised aggregate.
    """

    key: str
    model: str
    param: str
    repeat: int
    grid: str
    n: int
    epsilon: float
    delta: float | None
    B: int | None
    dropout: float | None
    w: int
    sigma: float
    data_seed: int
    input: str | None
    seed: int | None
    release: str
    guarantee_epsilon: float
    guarantee_delta: float
    neighbour: str
    messages_per_user: int | None
    bits_per_user: int | None
    bytes_per_user: int | None
    seconds_mechanism: float
    seconds_metrics: float
    emd: float
    kl: float
    cc: float
    sim: float
    mse: float
    l1: float

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict (the CSV and JSON field order)."""
        return dataclasses.asdict(self)


COLUMNS = tuple(f.name for f in dataclasses.fields(RunRecord))


@dataclass(frozen=True)
class Run:
    """A planned run: the configuration, the model and the repeat index."""

    config: SweepConfig
    model: str
    param: str
    repeat: int

    @property
    def key(self) -> str:
        """The swept parameter, the parameters the model depends on, the repeat index."""
        c = self.config
        parts = [f"sweep={self.param}", f"model={self.model}", f"grid={c.grid}", f"n={c.n}",
                 f"epsilon={c.epsilon!r}", f"w={c.w}", f"sigma={c.sigma!r}",
                 f"data_seed={c.data_seed}"]
        if c.input is not None:  # keys of built-in data sweeps stay as they were
            parts.append(f"input={c.input}:{c.input_format}:{c.bbox}")
        if c.smoothing != "none" and self.model in ("shuffle", "central"):
            parts.append(f"smoothing={c.smoothing}")
        if self.model == "shuffle":
            parts[5:5] = [f"delta={c.delta!r}", f"B={c.B}"]
            if c.dropout:  # keys of sweeps without dropout stay as they were
                parts.insert(7, f"dropout={c.dropout!r}")
            if c.rounding != "largest_remainder":  # likewise for the default rounding
                parts.insert(7, f"rounding={c.rounding}")
        return "|".join([*parts, f"repeat={self.repeat}"])


# --------------------------------------------------------------------------- input checks
def parse_value(param: str, value: Any) -> Any:
    """One value of the swept parameter, checked.

    Parameters
    ----------
    param : {"B", "epsilon", "n", "grid", "w", "dropout"}
    value : str, number or Grid
        "16", "0.5", "1e5", "320x240" are parsed.

    Returns
    -------
    int, float or Grid
        An int >= 1 (B, w; >= 2 for n), a finite float > 0 (epsilon), a float in [0, 1)
        (dropout), a Grid (grid).
    """
    if param == "grid":
        try:
            return value if isinstance(value, Grid) else Grid.parse(str(value))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"values: bad grid {value!r}: {exc}") from None
    if param == "epsilon":
        return v.positive("values", _number(value))
    if param == "dropout":
        x = v.real("values", _number(value))
        if not 0.0 <= x < 1.0:
            raise ValueError(f"values: dropout must be in [0, 1), got {value!r}")
        return x
    low = 2 if param == "n" else 1
    return v.count("values", _number(value), low)


def _number(value: Any) -> Any:
    """Strings as numbers ("1e5", "16"); anything non-numeric is named and quoted."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise ValueError(f"values must be numbers, got {value!r}") from None
    return value


def _iv_models(models: Any) -> tuple[str, ...]:
    if isinstance(models, str) or not isinstance(models, Iterable):
        raise TypeError(f"models must be a list, got {models!r}")
    models = tuple(models)
    if not models:
        raise ValueError(f"models must be a non-empty list, got {models!r}")
    for m in models:
        v.choice("models", m, MODELS)
    return tuple(dict.fromkeys(models))


def _iv(param: Any, values: Any, repeats: Any) -> tuple[str, list[Any], int]:
    param = v.choice("param", param, PARAMETERS)
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError(f"values must be a list, got {values!r}")
    values = list(values)
    if not values:
        raise ValueError(f"values must be a non-empty list, got {values!r}")
    parsed = [parse_value(param, x) for x in values]
    return param, parsed, v.count("repeats", repeats)


def plan(param: str, values: Sequence[Any], repeats: int,
         base: SweepConfig | None = None,
         models: Sequence[str] = DEFAULT_MODELS) -> list[Run]:
    """Every run of the sweep, each key once (central runs independent of the swept
    parameter, e.g. of B, are shared by all points).

    Parameters
    ----------
    param : {"B", "epsilon", "n", "grid", "w", "dropout"}
    values : sequence
        Values of ``param`` (strings are parsed: "16", "0.5", "320x240").
    repeats : int
        Independent runs per point and model, >= 1.
    base : SweepConfig, optional
        The fixed parameters.
    models : sequence of str
        Any of :data:`MODELS`; default ``("shuffle", "central")``.

    Returns
    -------
    list of Run
    """
    param, parsed, repeats = _iv(param, values, repeats)
    models = _iv_models(models)
    base = base or SweepConfig()
    runs: dict[str, Run] = {}
    for value in parsed:
        config = dataclasses.replace(base, **{param: value})
        for repeat in range(repeats):
            for model in models:
                r = Run(config, model, param, repeat)
                runs.setdefault(r.key, r)
    return list(runs.values())


# --------------------------------------------------------------------------- one run
_USERS: dict[tuple[Any, ...], Any] = {}


_TABLES: dict[tuple[Any, ...], Any] = {}


def load_input(path: str, input_format: str = "csv", bbox: Any = None) -> Any:
    """The :class:`~shuffledp.datasets.PointTable` of an input file (cached per file)."""
    from shuffledp import datasets

    key = (os.fspath(path), input_format, bbox)
    if key not in _TABLES:
        _TABLES.clear()
        _TABLES[key] = (datasets.load_csv(path) if input_format == "csv"
                        else datasets.load_snap(path, bbox=bbox))
    return _TABLES[key]


def subsample_users(table: Any, n: int, seed: int) -> Any:
    """``n`` of the table's users drawn without replacement (all of them if n equals their
    number); a ValueError names ``n`` if the file has fewer users."""
    from shuffledp.datasets import PointTable

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
    from shuffledp.datasets import synthetic_mixture

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
    """
    from shuffledp.analyzers.baselines import laplace_baseline
    from shuffledp.analyzers.central import central_heatmap
    from shuffledp.analyzers.heatmap import gaussian_heatmap
    from shuffledp.analyzers.metrics import all_metrics
    from shuffledp.protocol import shuffle_heatmap
    from shuffledp.release import normalise

    c = run.config
    users = _users(c)
    aggregate = users.aggregate()
    t0 = time.perf_counter()
    if run.model == "shuffle":
        rel = shuffle_heatmap(users, epsilon=c.epsilon, delta=c.delta, B=c.B, w=c.w, rng=rng,
                              dropout=c.dropout, rounding=c.rounding,
                              simulate_dropouts=math.floor(c.dropout * c.n))
    elif run.model == "central":
        rel = central_heatmap(users, c.epsilon, w=c.w, neighbour="replace", rng=rng)
    else:  # the Sec. 4 baselines: central, add/remove (the record names the relation)
        rel = laplace_baseline(aggregate, c.epsilon, rng=rng, top_percent=_TOP.get(run.model))
    if c.smoothing == "auto" and run.model in ("shuffle", "central"):
        rel = rel.smoothed()
    t1 = time.perf_counter()
    truth = normalise(aggregate)
    if c.sigma > 0:
        truth, est = gaussian_heatmap(truth, c.sigma), gaussian_heatmap(rel.estimate, c.sigma)
    else:
        est = rel.estimate
    metrics = all_metrics(truth, est, c.grid, emd=c.emd)
    if metrics["emd"] is None:
        metrics["emd"] = math.nan
    t2 = time.perf_counter()
    report, proto, shuffle = rel.to_report(), rel.protocol, run.model == "shuffle"
    return RunRecord(
        key=run.key, model=run.model, param=run.param, repeat=run.repeat, grid=str(c.grid),
        n=c.n, epsilon=c.epsilon, delta=c.delta if shuffle else None,
        B=c.B if shuffle else None, dropout=c.dropout if shuffle else None, w=c.w,
        sigma=c.sigma, data_seed=c.data_seed, input=c.input,
        seed=rng if isinstance(rng, int) else None, release=report["release"],
        guarantee_epsilon=float(rel.guarantee.epsilon),
        guarantee_delta=float(rel.guarantee.delta), neighbour=str(rel.guarantee.neighbour),
        messages_per_user=proto.get("messages_per_user"),
        bits_per_user=proto.get("bits_per_user"), bytes_per_user=proto.get("bytes_per_user"),
        seconds_mechanism=t1 - t0, seconds_metrics=t2 - t1,
        **{k: float(metrics[k]) for k in METRICS})


# --------------------------------------------------------------------------- outputs
def done_keys(out_dir: str | os.PathLike[str]) -> set[str]:
    """Keys of the runs already in ``out_dir/runs.csv`` (empty if there is none)."""
    path = Path(out_dir) / CSV_NAME
    if not path.exists():
        return set()
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None:
            return set()
        if tuple(reader.fieldnames) != COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames!r} are not those of a "
                             "sweep; use a fresh --out")
        return {row["key"] for row in reader}


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def repair(out_dir: str | os.PathLike[str]) -> None:
    """Cut a partial last line (a run killed mid-write) from ``runs.jsonl`` and
    ``runs.csv``; no field holds a newline, so every complete row ends with one."""
    for name in (JSONL_NAME, CSV_NAME):
        path = Path(out_dir) / name
        if not path.exists():
            continue
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)
                fh.flush()
                os.fsync(fh.fileno())


def append_record(out_dir: str | os.PathLike[str], record: RunRecord) -> None:
    """Append one record to ``runs.jsonl``, then to ``runs.csv`` (header first if new), each
    flushed and fsynced: a run is done (skipped on resume) once its CSV row is on disk, and
    its JSON line is there by then."""
    import io

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / CSV_NAME
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    if not path.exists() or path.stat().st_size == 0:
        writer.writeheader()
    row = record.to_dict()
    writer.writerow({k: "" if x is None else repr(x) if isinstance(x, float) else x
                     for k, x in row.items()})
    _append(out / JSONL_NAME, json.dumps(row, allow_nan=True) + "\n")
    _append(path, buf.getvalue())


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
def read_runs(out_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of ``out_dir/runs.jsonl`` as dicts, one per key (the last written: a run
    interrupted between its JSON line and its CSV row is run again on resume)."""
    rows: dict[str, dict[str, Any]] = {}
    with open(Path(out_dir) / JSONL_NAME, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                rows[row["key"]] = row
    return list(rows.values())


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
    """
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


# --------------------------------------------------------------------------- plots
PLOT_HINT = 'plots need matplotlib: pip install "shuffledp[plot]"'


def plot(out_dir: str | os.PathLike[str], param: str) -> list[Path]:
    """PNG plots of ``out_dir/runs.jsonl`` with 95% t-interval bands.

    ``bits_per_user.png`` (MB per user vs B, [Ghazi23]_ Fig. 12) when ``param`` is B, and
    ``metrics.png``: every metric vs ``param``, shuffle and central ([Ghazi23]_ Fig. 13,
    Fig. 1-2).

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    ImportError
        Without matplotlib (message: :data:`PLOT_HINT`).
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

    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.png")
    try:
        fig.savefig(tmp, dpi=100, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
