"""What a sweep runs: the swept parameters and models, :class:`SweepConfig` (one point's
parameters), :class:`Run` (one run of one model) and :func:`plan` (every run of a sweep).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps", App. F, Sec. 4
   -- full entry in docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics",
   Sec. 4 (dropouts) -- full entry in docs/references.md
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR, Neighbour
from shuffledp.grid import Grid

PARAMETERS = ("B", "epsilon", "n", "grid", "w", "dropout")

#: every model a sweep can run: the shuffle protocol, the central Alg. 1-2, and the central
#: baselines of [Ghazi23]_ Sec. 4 (Laplace per cell, and top-t% of the noisy cells)
MODELS = ("shuffle", "central", "laplace", "top_1%", "top_0.1%", "top_0.01%")

#: the models run when none are named: the shuffle protocol and its central B = inf limit
DEFAULT_MODELS = ("shuffle", "central")

_TOP = {"top_1%": 1.0, "top_0.1%": 0.1, "top_0.01%": 0.01}

#: the central baselines of [Ghazi23]_ Sec. 4 (Laplace per cell and its top-t% variants):
#: l1-sensitivity 1, so epsilon-DP under add/remove only
BASELINES = ("laplace", *_TOP)

#: the neighbour relation of the baselines (and so of every sweep that runs one)
BASELINE_NEIGHBOUR = "add_remove"

METRICS = ("emd", "kl", "cc", "sim", "mse", "l1")

#: Why the presets filter with sigma = 2 px per 256 px of side (printed by ``shuffledp sweep``
#: and the figure benches).
SIGMA_NOTE = (
    "heatmap filter sigma = 2 px at 256x256 (1/128 of the side, scaled with the grid: 0.5 px "
    "at 64, 1 px at 128, 2.5 px at 320x240); Ghazi et al. do not state their sigma, this is "
    "ours: about the width of the smallest clusters of the synthetic data (1-13 px at 256), "
    "so the filter joins a user's nearby points without hiding the detail the metrics compare")

#: The presets of ``shuffledp sweep --figure`` (Ghazi et al. 2023, Sec. 4 and App. F): the
#: swept parameter and values, quick and paper sizes (``--full``), and the fixed parameters.
#: Every preset names its neighbour relation and runs every model under it: Fig. 1 and 2
#: compare the central release with the baselines, which are add/remove only, so the central
#: release is add/remove too; Fig. 13 runs the shuffle protocol and its B = inf limit, the
#: central release, both zero-out (the protocol's relation with level sensitivity B, the
#: central one's 1: the limit the protocol converges to).
PRESETS: dict[str, dict[str, Any]] = {
    "1": {"param": "epsilon", "values": [0.1, 0.5, 1, 2, 5, 10], "repeats": 3,
          "full_repeats": 60, "grid": "64x64", "full_grid": "256x256", "n": 200,
          "models": ["central", "laplace", "top_1%", "top_0.1%", "top_0.01%"],
          "smoothing": "auto", "neighbour": "add_remove", "sigma_scales": True},
    "2": {"param": "n", "values": [50, 100, 200, 300, 400, 500], "repeats": 3,
          "full_repeats": 10, "grid": "64x64", "full_grid": "256x256", "epsilon": 10.0,
          "n": 200, "models": ["central", "laplace", "top_1%", "top_0.1%", "top_0.01%"],
          "smoothing": "auto", "neighbour": "add_remove", "sigma_scales": True},
    "2-grid": {"param": "grid", "values": ["64x64", "128x128", "256x256"], "repeats": 3,
               "full_repeats": 10, "grid": "64x64", "full_grid": "64x64", "epsilon": 10.0,
               "n": 200, "models": ["central", "laplace", "top_1%", "top_0.1%", "top_0.01%"],
               "smoothing": "auto", "neighbour": "add_remove", "sigma_scales": True},
    "12": {"param": "B", "values": [2**k for k in range(11)], "repeats": 3,
           "full_repeats": 20, "grid": "320x240", "full_grid": "320x240", "emd": False,
           "neighbour": "zero_out"},
    "13": {"param": "B", "values": [1, 4, 16, 64, 256, 1024], "repeats": 10,
           "full_repeats": 20, "grid": "80x60", "full_grid": "320x240", "rounding": "floor",
           "neighbour": "zero_out", "sigma_scales": True},
}


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
        Shuffle model: the scale-and-round rule (:func:`shuffledp.encoders.encoder.scale_round`).
        ``"floor"`` is [Ghazi23]_ App. F's, whose rounding error shrinks as B grows (the trend
        of Fig. 13); ``"largest_remainder"`` keeps each level summing to exactly B.
    emd : bool
        Solve the exact EMD (seconds per run on a 320x240 grid); ``False`` records NaN for it
        (``--figure 12``, which is about bits per user).
    smoothing : {"none", "auto", "density"}
        Post-process the shuffle and central releases with
        :meth:`shuffledp.analyzers.heatmap.release.HeatmapRelease.smoothed`: "auto" its
        default, the count posterior (what ``shuffledp heatmap`` releases by default;
        ``--figure 1/2``), "density" the pyramid density; "none" keeps Reconstruct's output.
    neighbour : {"zero_out", "replace", "add_remove"}
        The neighbour relation of the shuffle and central releases (default: the toolkit's
        one default, zero-out; one relation for both,
        so they are like for like). The baselines are add/remove only, so a sweep that runs
        one needs ``"add_remove"`` (:func:`plan` refuses anything else); the shuffle protocol
        supports ``"replace"`` and ``"zero_out"``.
    sigma_scales : bool
        ``sigma`` is in pixels of a 256-pixel side and scales with the grid's longer side
        (``sigma * max(width, height) / 256`` px), so a grid sweep filters every grid alike
        (``--figure 2``'s resolution part).
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
    neighbour: str = DEFAULT_NEIGHBOUR.token
    sigma_scales: bool = False

    def __post_init__(self) -> None:
        v.choice("rounding", self.rounding, ("largest_remainder", "floor"))
        v.choice("smoothing", self.smoothing, ("none", "auto", "density"))
        nb = Neighbour.parse(self.neighbour)
        v.choice("neighbour", nb.token, ("replace", "zero_out", "add_remove"))
        object.__setattr__(self, "neighbour", nb.token)
        if not isinstance(self.sigma_scales, bool):
            raise TypeError(f"sigma_scales must be a bool, got sigma_scales={self.sigma_scales!r}")
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
        The heatmap filter of this run in pixels (``SweepConfig.sigma`` scaled with the grid
        when ``sigma_scales``).
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
    budget_rule : {"auto", "paper"} or None
        The budget split of the algorithm's run (:func:`shuffledp.accounting.budget.level_budgets`
        as printed, or :func:`~shuffledp.accounting.budget.auto_level_budgets`; the rule of
        the sweep's ``smoothing``); None for a baseline.
    messages_per_user, bits_per_user, bytes_per_user : int or None
        Shuffle model only: the paper's ``r m ceil(log2(m q))`` bits, and the wire bytes.
    seconds_mechanism, seconds_metrics : float
    emd, kl, cc, sim, mse, l1 : float
        :func:`shuffledp.analyzers.heatmap.metrics.all_metrics` against the normalised aggregate.
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
    budget_rule: str | None
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
    """A planned run: the configuration, the model and the repeat index.

    Attributes
    ----------
    config : SweepConfig
        The point's full configuration.
    model : str
        One of :data:`MODELS`.
    param : str
        The swept parameter (part of :attr:`key`).
    repeat : int
        Repeat index, 0-based.
    """

    config: SweepConfig
    model: str
    param: str
    repeat: int

    @property
    def sigma_px(self) -> float:
        """The heatmap filter of this run in pixels (``sigma``, scaled with the grid when
        ``sigma_scales``)."""
        c = self.config
        if c.sigma_scales:
            return c.sigma * max(c.grid.width, c.grid.height) / 256.0
        return c.sigma

    @property
    def key(self) -> str:
        """The swept parameter, the parameters the model depends on, the repeat index."""
        c = self.config
        parts = [f"sweep={self.param}", f"model={self.model}", f"grid={c.grid}", f"n={c.n}",
                 f"epsilon={c.epsilon!r}", f"w={c.w}", f"sigma={c.sigma!r}",
                 f"data_seed={c.data_seed}"]
        if c.input is not None:  # keys of built-in data sweeps stay as they were
            parts.append(f"input={c.input}:{c.input_format}:{c.bbox}")
        if c.sigma_scales:
            parts.append("sigma_scales")
        if c.smoothing != "none" and self.model in ("shuffle", "central"):
            parts.append(f"smoothing={c.smoothing}")
        if c.neighbour != "replace" and self.model in ("shuffle", "central"):
            parts.append(f"neighbour={c.neighbour}")  # keys of replace-one sweeps unchanged
        if self.model == "shuffle":
            parts[5:5] = [f"delta={c.delta!r}", f"B={c.B}"]
            if c.dropout:  # keys of sweeps without dropout stay as they were
                parts.insert(7, f"dropout={c.dropout!r}")
            if c.rounding != "largest_remainder":  # likewise for the default rounding
                parts.insert(7, f"rounding={c.rounding}")
        return "|".join([*parts, f"repeat={self.repeat}"])


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

    Raises
    ------
    ValueError
        If ``param`` is not a sweepable parameter or ``value`` is out of range or unparsable.
    TypeError
        If an integer parameter gets a non-integral value.
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


def check_models(models: Any) -> tuple[str, ...]:
    """The models of a sweep, checked, duplicates dropped (first occurrence kept).

    Parameters
    ----------
    models : sequence of str
        Any of :data:`MODELS`, at least one.

    Returns
    -------
    tuple of str
        The models in their first order.

    Raises
    ------
    TypeError
        If ``models`` is a string or not iterable.
    ValueError
        If it is empty or names an unknown model.
    """
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
        One per key, in plan order.

    Raises
    ------
    ValueError
        If ``param``, a value, ``repeats`` or a model is out of range, ``values`` is empty, or
        the models mix a baseline (add/remove only) with the shuffle or central model under
        another relation (not like for like).
    TypeError
        If ``values`` or ``models`` is not a list, or a count is not an integer.
    """
    param, parsed, repeats = _iv(param, values, repeats)
    models = check_models(models)
    base = base or SweepConfig()
    mech = [m for m in models if m in ("shuffle", "central")]
    if mech and any(m in BASELINES for m in models) and base.neighbour != BASELINE_NEIGHBOUR:
        raise ValueError(
            f"the baselines {[m for m in models if m in BASELINES]} are add/remove only; "
            f"{mech} under neighbour={base.neighbour!r} would not be like for like: set "
            f"neighbour='{BASELINE_NEIGHBOUR}' or drop the baselines")
    runs: dict[str, Run] = {}
    for value in parsed:
        config = dataclasses.replace(base, **{param: value})
        for repeat in range(repeats):
            for model in models:
                r = Run(config, model, param, repeat)
                runs.setdefault(r.key, r)
    return list(runs.values())
