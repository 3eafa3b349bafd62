"""The baselines of [Bagdasaryan22]_ Table 1 run as federated rounds (distributed DP, SecAgg).

Every query below is one round of Alg. 1 (:func:`shuffledp.protocol.federated.federated_sum`:
each client adds Polya(1/n_min, a) - Polya(1/n_min, a) noise to her vector, the shard is summed
by secure aggregation, or by the same sums or their exact law with ``aggregation="plain"`` /
``"simulate"``), exactly as the adaptive algorithm's sub-queries are, so the rows of Table 1
differ only in what the users encode:

* :func:`hierarchical_levels`: one-hot vectors of several quadtree levels. ``budget="even"``
  is the paper's hierarchical one-hot encoding (levels 1..L, eps / L each, Sec. 5.1);
  ``budget="geometric"`` its spatial decomposition (levels 0..L, the geometric budget of
  [Cormode12]_, Sec. 6.2);
* :func:`count_min_levels`: a Count-Min sketch of the user's cell at each of levels 1..L
  (:mod:`shuffledp.analyzers.federated.count_min`, sensitivity = the sketch's depth);
* :func:`adaptive_grid_histogram`: the two queries of [Qardaji13]_'s Adaptive Grid
  (:mod:`shuffledp.analyzers.federated.adaptive_grid`).

The levels of one report compose sequentially (basic composition over the rounds, each
round's guarantee from :func:`~shuffledp.analyzers.federated.histogram.federated_release`).
``dropout_rate`` simulates clients that drop before sending their masked input: the
non-interactive encodings send all their levels at once (one draw per user), the Adaptive
Grid's two queries draw separately; the noise is over-provisioned by ``dropout`` as for every
round (Sec. 4).

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards sparse federated analytics", Sec. 5.1,
   Sec. 6.2, Table 1 -- full entry in docs/references.md
.. [Cormode12] Cormode et al. (2012), "Differentially private spatial decompositions" -- full
   entry in docs/references.md
.. [Qardaji13] Qardaji, Yang and Li (2013), "Differentially private grids for geospatial
   data", AG -- full entry in docs/references.md
"""

from __future__ import annotations

import math
import secrets
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.composition import Accountant
from shuffledp.accounting.events import Sequential
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.analyzers.federated.adaptive_grid import (
    AdaptiveGridLayout,
    AdaptiveGridRelease,
    constrained_inference,
    subgrid_sizes,
)
from shuffledp.analyzers.federated.baselines import LevelEstimates
from shuffledp.analyzers.federated.count_min import CountMinSketch
from shuffledp.analyzers.federated.histogram import FederatedHistogram
from shuffledp.encoders.federated import noise_parameters
from shuffledp.protocol.federated import (
    _check_pixels,
    _OneHot,
    federated_histogram,
    federated_sum,
)
from shuffledp.randomness import RngLike, SecureRandom, noise_source

THEOREM_LEVELS = ("Bagdasaryan et al., PoPETs 2022, Alg. 1 / Thm 4.2 per level, basic "
                  "composition over the levels of one report")
THEOREM_GRID = ("Qardaji, Yang and Li, ICDE 2013, Adaptive Grids, two queries each run as "
                "Bagdasaryan et al., PoPETs 2022, Alg. 1 / Thm 4.2, basic composition")


class _MultiHot(_OneHot):
    """Users' 0/1 vectors with k ones each at distinct ``positions[i]`` (n x k), built one at a
    time; the sum over a set of users is a bincount (n x D never held in memory)."""

    def __len__(self) -> int:
        return int(self.cells.shape[0])

    def __getitem__(self, i: int) -> np.ndarray:
        x = np.zeros(self.d, dtype=np.int64)
        x[self.cells[i]] = 1
        return x

    def total(self, idx: np.ndarray) -> np.ndarray:
        return np.bincount(self.cells[idx].ravel(), minlength=self.d).astype(np.int64)


def _public(rng: RngLike | SecureRandom) -> np.random.Generator:
    """The generator of public choices (simulated dropouts): seeded apart from the noise when
    ``rng`` is a seed, fresh entropy otherwise."""
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng([int(rng), 0x5EED])
    return np.random.default_rng(rng if isinstance(rng, np.random.Generator) else None)


def _compose(hists: list[FederatedHistogram], epsilon: float, theorem: str,
             parameters: dict) -> Guarantee:
    """Basic composition of the rounds of one release (the accountant's sum)."""
    acc = Accountant()
    for h in hists:
        acc.compose(h.guarantee.event)
    eps, delta = acc.basic()
    if not math.isclose(eps, epsilon, rel_tol=1e-9):  # pragma: no cover - budget bug
        raise AssertionError(f"rounds spent {eps!r}, not epsilon={epsilon!r}")
    g0 = hists[0].guarantee
    notes = tuple(dict.fromkeys(n for h in hists for n in h.guarantee.notes))
    return Guarantee(notion="approximate", model=g0.model, epsilon=epsilon, delta=delta,
                     neighbour=g0.neighbour, theorem=theorem, parameters=parameters,
                     notes=notes,
                     event=Sequential(steps=tuple(h.guarantee.event for h in hists),
                                      neighbour=g0.neighbour))


def _variance(hist: FederatedHistogram, epsilon: float) -> float:
    """Per-entry noise variance of a round: one discrete Laplace per shard (2a / (1 - a)^2,
    a = e^{-eps / Delta}), the survivors' extra Polya noise ignored (a weight, not a claim)."""
    _, a = noise_parameters(epsilon, hist.guarantee.neighbour,
                            int(hist.guarantee.parameters.get("l1_bound", 1)))
    return len(hist.shards) * 2.0 * a / (1.0 - a) ** 2


def _levels_arg(levels: Any, low: int, L: int) -> list[int]:
    out = sorted({v.bounded_count("levels", x, 0, L) for x in
                  (range(low, L + 1) if levels is None else levels)})
    if not out:
        raise ValueError("levels must hold at least one level, got none")
    return out


def hierarchical_levels(rows: Any, cols: Any, depth: int, epsilon: float, *,
                        budget: str = "even", levels: Any = None, dropout_rate: float = 0.0,
                        rng: RngLike | SecureRandom = None, **kwargs: Any) -> LevelEstimates:
    """One-hot reports of several quadtree levels, each an Alg. 1 round.

    ``budget="even"``: [Bagdasaryan22]_'s hierarchical one-hot encoding, levels 1..L (default)
    with eps / (number of levels) each (0.1 at L = 10). ``budget="geometric"``: its spatial
    decomposition, levels 0..L (default) with eps_l proportional to 2^{l/3}
    (:func:`~shuffledp.analyzers.federated.baselines.geometric_budget` over the levels
    measured, [Cormode12]_).
    Communication: the sum of 4^l over the levels (1,398,100 for levels 1..10).

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's pixel on the 2^depth x 2^depth grid.
    depth : int
        L, 1 <= L <= 12.
    epsilon : float
        The whole budget (> 0).
    budget : {"even", "geometric", "geometric_root"}
        The split over the levels: even; eps_l proportional to 2^{l/3} ([Cormode12]_'s
        geometric budget, the finest level the most); or to 2^{-l/3} (the root the most: the
        allocation [Bagdasaryan22]_ Sec. 6.2 describes for its spatial decomposition, "more
        privacy budget to higher levels of the tree ... deeper layers are less accurate").
    levels : iterable of int, optional
        The levels measured (default 1..L for "even", 0..L for "geometric").
    dropout_rate : float in [0, 1)
        Simulated fraction of users that drop before sending their report (one draw per
        user for all levels: the report is sent at once).
    rng : None, SecureRandom, int or Generator
        Noise (secure when None); a seed also seeds the simulated dropouts.
    **kwargs
        Arguments of :func:`~shuffledp.protocol.federated.federated_histogram`
        (``shard_size``, ``dropout``, ``modulus``, ``neighbour``, ``aggregation``, ...).

    Returns
    -------
    LevelEstimates
        The noisy counts of every level, their budgets and variances, the communication and
        the composed guarantee.

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent (as
        :func:`~shuffledp.protocol.federated.federated_histogram`).
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min.

    References
    ----------
    [Bagdasaryan22]_ Sec. 5.1 (hierarchical one-hot encoding), Sec. 6.2 (spatial
    decomposition); [Cormode12]_ (geometric budget).
    """
    L, r, c = _check_pixels(rows, cols, depth)
    eps = v.positive("epsilon", epsilon)
    kind = v.choice("budget", budget, ("even", "geometric", "geometric_root"))
    lv = _levels_arg(levels, 1 if kind == "even" else 0, L)
    if kind == "even":
        eps_l = {lvl: eps / len(lv) for lvl in lv}
    else:
        sign = 1.0 if kind == "geometric" else -1.0
        w = np.array([2.0 ** (sign * lvl / 3.0) for lvl in lv])
        eps_l = {lvl: float(e) for lvl, e in zip(lv, eps * w / w.sum(), strict=True)}
    rate = v.interval("dropout_rate", dropout_rate, 0.0, 1.0, open_low=False)
    dropped = _public(rng).random(r.size) < rate
    noise = noise_source(rng)
    counts, variances, hists = {}, {}, []
    for lvl in lv:
        s = L - lvl
        cells = (r >> s) * (1 << lvl) + (c >> s)
        h = federated_histogram(cells, 4 ** lvl, eps_l[lvl], dropped=dropped, rng=noise,
                                **kwargs)
        counts[lvl], variances[lvl] = h.counts, _variance(h, eps_l[lvl])
        hists.append(h)
    g = _compose(hists, eps, THEOREM_LEVELS,
                 {"depth": L, "budget": kind, "levels": lv, "epsilons": eps_l,
                  "dropout_rate": rate, **{k: x for k, x in kwargs.items()
                                           if k in ("shard_size", "dropout", "aggregation")}})
    return LevelEstimates(depth=L, counts=counts, epsilons=eps_l,
                          communication=int(sum(4 ** lvl for lvl in lv)), guarantee=g,
                          variances=variances)


def count_min_levels(rows: Any, cols: Any, depth: int, epsilon: float, *,
                     width: int = 2000, sketch_depth: int = 20, levels: Any = None,
                     hash_seed: int | None = None, method: str = "min", dropout_rate: float = 0.0,
                     rng: RngLike | SecureRandom = None, **kwargs: Any) -> LevelEstimates:
    """Count-Min sketch reports of levels 1..L, each an Alg. 1 round with sensitivity
    ``sketch_depth``.

    At every level l the user sends the sketch of her cell's key (row-major index at level l):
    ``sketch_depth`` ones over width x sketch_depth entries
    (:class:`~shuffledp.analyzers.federated.count_min.CountMinSketch`); the round's noise is
    calibrated to the l1 bound ``sketch_depth`` (add/remove, zero-out; twice that for
    replace-one) at budget eps / (number of levels). The server estimates every cell of the
    level from the noisy summed sketch (``method``). Communication: levels x width x depth
    (400,000 for the paper's 10 levels of 2,000 x 20).

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's pixel on the 2^depth x 2^depth grid.
    depth : int
        L, 1 <= L <= 12.
    epsilon : float
        The whole budget (> 0), split evenly over the levels.
    width, sketch_depth : int
        The sketch (the paper's 2,000 and 20).
    levels : iterable of int, optional
        The levels reported (default 1..L: the paper's "10 prefixes").
    hash_seed : int, optional
        Public seed of the hash coefficients (default: a fresh one from the secure source;
        the seed used is recorded in the guarantee's parameters).
    method : {"min", "median", "mean"}
        The estimate of a cell from its ``sketch_depth`` counters.
    dropout_rate : float in [0, 1)
        Simulated fraction of users that drop before sending (one draw per user).
    rng : None, SecureRandom, int or Generator
        Noise (secure when None); a seed also seeds the simulated dropouts.
    **kwargs
        Arguments of :func:`~shuffledp.protocol.federated.federated_sum` (``shard_size``,
        ``dropout``, ``modulus``, ``neighbour``, ``aggregation``, ...).

    Returns
    -------
    LevelEstimates
        The estimated counts of every cell of every level, the communication and the
        composed guarantee.

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent.
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min.

    References
    ----------
    [Bagdasaryan22]_ Sec. 5.1 ("Count-min sketch hierarchical encoding") and Sec. 6.2.
    """
    L, r, c = _check_pixels(rows, cols, depth)
    eps = v.positive("epsilon", epsilon)
    if hash_seed is None:
        hash_seed = secrets.randbits(63)
    sketch = CountMinSketch.from_seed(width, sketch_depth, hash_seed)
    v.choice("method", method, ("min", "median", "mean"))
    lv = _levels_arg(levels, 1, L)
    rate = v.interval("dropout_rate", dropout_rate, 0.0, 1.0, open_low=False)
    dropped = _public(rng).random(r.size) < rate
    noise = noise_source(rng)
    eps_l = {lvl: eps / len(lv) for lvl in lv}
    counts, hists = {}, []
    for lvl in lv:
        s = L - lvl
        keys = (r >> s) * (1 << lvl) + (c >> s)
        reports = _MultiHot(sketch.positions(keys), sketch.size)
        h = federated_sum(reports, sketch.depth, eps_l[lvl], dropped=dropped, rng=noise,
                          **kwargs)
        survivors = sum(sh["survivors"] for sh in h.shards)
        counts[lvl] = sketch.estimate(h.counts, np.arange(4 ** lvl), method,
                                      total=survivors if method == "mean" else None)
        hists.append(h)
    g = _compose(hists, eps, THEOREM_LEVELS,
                 {"depth": L, "sketch_width": sketch.width, "sketch_depth": sketch.depth,
                  "hash_seed": hash_seed, "method": method, "levels": lv, "epsilons": eps_l,
                  "dropout_rate": rate})
    return LevelEstimates(depth=L, counts=counts, epsilons=eps_l,
                          communication=len(lv) * sketch.size, guarantee=g)


def adaptive_grid_histogram(rows: Any, cols: Any, depth: int, epsilon: float, *,
                            first: int = 10, alpha: float = 0.5, c2: float = 10.0,
                            dropout_rate: float = 0.0, rng: RngLike | SecureRandom = None,
                            **kwargs: Any) -> AdaptiveGridRelease:
    """[Qardaji13]_'s Adaptive Grid as two Alg. 1 rounds ([Bagdasaryan22]_ Sec. 6.2).

    Round 1: one-hot counts on a uniform ``first`` x ``first`` grid at budget alpha eps.
    Round 2: each first-level cell split into n_i x n_i sub-cells,
    n_i = ceil(sqrt(N'_i (1 - alpha) eps / c2)) from round 1's noisy count N'_i
    (:func:`~shuffledp.analyzers.federated.adaptive_grid.subgrid_sizes`), one-hot counts on
    all sub-cells at budget (1 - alpha) eps. Then constrained inference and the density.
    Communication: first^2 + sum n_i^2.

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's pixel on the 2^depth x 2^depth grid.
    depth : int
        L, 1 <= L <= 12.
    epsilon : float
        The whole budget (> 0).
    first : int, default 10
        m1, the first grid's cells per axis (the paper's 10).
    alpha : float in (0, 1), default 0.5
        The first round's share of the budget.
    c2 : float, default 10
        The constant of the sub-grid rule (the paper's 10).
    dropout_rate : float in [0, 1)
        Simulated fraction of users that drop before sending, drawn per round.
    rng : None, SecureRandom, int or Generator
        Noise (secure when None); a seed also seeds the simulated dropouts.
    **kwargs
        Arguments of :func:`~shuffledp.protocol.federated.federated_histogram`.

    Returns
    -------
    AdaptiveGridRelease
        The density, the layout, both rounds' counts, the communication and the composed
        guarantee.

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent.
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min.

    References
    ----------
    [Qardaji13]_ (AG); [Bagdasaryan22]_ Sec. 6.2, Table 1.
    """
    L, r, c = _check_pixels(rows, cols, depth)
    eps = v.positive("epsilon", epsilon)
    a = v.interval("alpha", alpha, 0.0, 1.0)
    rate = v.interval("dropout_rate", dropout_rate, 0.0, 1.0, open_low=False)
    layout = AdaptiveGridLayout(1 << L, v.count("first", first))
    public = _public(rng)
    noise = noise_source(rng)
    e1, e2 = a * eps, eps - a * eps
    h1 = federated_histogram(layout.first_index(r, c), layout.first_length, e1,
                             dropped=public.random(r.size) < rate, rng=noise, **kwargs)
    layout = layout.with_sizes(subgrid_sizes(h1.counts, eps, alpha=a, c2=c2))
    h2 = federated_histogram(layout.second_index(r, c), layout.second_length, e2,
                             dropped=public.random(r.size) < rate, rng=noise, **kwargs)
    fused = constrained_inference(h1.counts, h2.counts, layout, _variance(h1, e1),
                                  _variance(h2, e2))
    g = _compose([h1, h2], eps, THEOREM_GRID,
                 {"depth": L, "first": layout.first, "alpha": a, "c2": c2,
                  "sizes": list(layout.sizes), "dropout_rate": rate})
    return AdaptiveGridRelease(estimate=layout.density(fused), layout=layout,
                               first_counts=h1.counts, second_counts=fused,
                               communication=layout.first_length + layout.second_length,
                               guarantee=g)


__all__ = ["adaptive_grid_histogram", "count_min_levels", "hierarchical_levels"]
