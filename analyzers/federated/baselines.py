"""Baselines of [Bagdasaryan22]_ Sec. 6 for federated heatmaps.

* :func:`quadtree_histogram`: the non-adaptive quadtree: every level 0..L is a flat
  histogram (Alg. 1, distributed noise, secure aggregation or the same sums) with the
  geometric budget of [Cormode12]_ (eps_l proportional to 2^{l/3}, leaves get the most,
  basic composition over levels), combined by the two-pass weighted least squares of
  [Hay10]_ generalised to per-level noise variances (bottom-up inverse-variance averaging,
  top-down mean consistency);
* :func:`central_tree_histogram`: the flat histogram with central noise (one discrete
  Laplace draw per cell added to the true counts by a trusted server);
* :func:`central_adaptive_histogram`: the same adaptive tree (Alg. 2, same schedule and
  thresholds) with central noise: one discrete Laplace draw per entry of each sub-query;
* :func:`local_rr_histogram`: local DP: every user sends her cell through eps-k-randomised
  response over the 4^L cells ([KOV16]_), debiased in closed form.

All return a normalised density on the 2^L x 2^L grid (negative counts clipped).

The evaluation of [Bagdasaryan22]_ Table 1's non-interactive rows ("non-private",
"hierarchical", "CM-sketch based", "spatial decomposition") picks, for each run, the quadtree
level whose estimate is closest to the truth ("we build a map for every level of the quadtree
and pick the level that produces the best metric", Sec. 6.2): :class:`LevelEstimates` holds one
noisy count vector per level and :func:`best_level` makes that (oracle) choice.

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards sparse federated analytics" -- full entry in
   docs/references.md
.. [Cormode12] Cormode et al. (2012), "Differentially private spatial decompositions" (geometric
   budget) -- full entry in docs/references.md
.. [Hay10] Hay et al. (2010), "Boosting accuracy through consistency" -- full entry in
   docs/references.md
.. [KOV16] Kairouz et al. (2016), "Discrete distribution estimation under local privacy" -- full
   entry in docs/references.md
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.encoders.metric.mechanisms import _shift, rr_weights, uniform_below
from shuffledp.encoders.noise.laplace import discrete_laplace_for
from shuffledp.randomness import RngLike, SecureRandom, noise_source, word_source


def normalise_density(d: np.ndarray) -> np.ndarray:
    """Negative entries clipped to 0, then normalised to sum 1 (uniform if all are 0).

    Parameters
    ----------
    d : numpy.ndarray
        A noisy density or count array of any shape.

    Returns
    -------
    numpy.ndarray
        Float array of the same shape, non-negative, summing to 1.

    Raises
    ------
    TypeError
        If ``d`` is not numeric (from numpy).

    References
    ----------
    [Bagdasaryan22]_ App. A (estimates compared as normalised densities).
    """
    d = np.maximum(d, 0).astype(float)
    return d / d.sum() if d.sum() > 0 else np.full(d.shape, 1.0 / d.size)


def geometric_budget(epsilon: float, depth: int) -> np.ndarray:
    """eps_l = eps 2^{l/3} / sum_j 2^{j/3} for levels l = 0..L ([Cormode12]_).

    Parameters
    ----------
    epsilon : float
        Total budget, > 0.
    depth : int
        L: the levels are 0..L.

    Returns
    -------
    numpy.ndarray
        The L + 1 per-level budgets, summing to ``epsilon``.

    Raises
    ------
    TypeError
        If ``epsilon`` is not a real number.
    ValueError
        If ``epsilon`` is not positive and finite.

    References
    ----------
    [Cormode12]_ (geometric budget across the levels of a spatial decomposition).
    """
    w = 2.0 ** (np.arange(depth + 1) / 3.0)
    return v.positive("epsilon", epsilon) * w / w.sum()


def _pool(a: np.ndarray) -> np.ndarray:
    h, w = a.shape
    return a.reshape(h // 2, 2, w // 2, 2).sum(axis=(1, 3))


def tree_least_squares(levels: list[np.ndarray], variances: list[float]) -> np.ndarray:
    """Consistent leaf estimates from noisy counts of every level of a full quadtree.

    ``levels[l]`` is the (2^l, 2^l) noisy count array of level l, ``variances[l]`` its
    per-cell noise variance. Bottom-up: z_v = (y_v / var_v + S_v / V_v) / (1/var_v + 1/V_v)
    with S_v, V_v the sums of the children's z and variances; top-down: each child gets
    its z plus its variance share of the parent's correction ([Hay10]_ with weights).

    Parameters
    ----------
    levels : list of numpy.ndarray
        ``levels[l]`` of shape (2^l, 2^l), l = 0..L: the noisy counts of level l.
    variances : list of float
        ``variances[l]`` > 0: the per-cell noise variance of level l.

    Returns
    -------
    numpy.ndarray, shape (2^L, 2^L)
        The consistent (weighted least-squares) leaf estimates.

    Raises
    ------
    ValueError
        If the shapes of consecutive levels are not (2^l, 2^l) and (2^{l+1}, 2^{l+1}) (from
        numpy's reshape and broadcasting); the variances are not checked.

    References
    ----------
    [Hay10]_ (consistency by least squares on the hierarchy), with per-level weights.
    """
    L = len(levels) - 1
    z: list[np.ndarray] = [np.empty(0)] * (L + 1)
    var: list[np.ndarray] = [np.empty(0)] * (L + 1)
    z[L] = levels[L].astype(float)
    var[L] = np.full(levels[L].shape, float(variances[L]))
    for lvl in range(L - 1, -1, -1):
        s, vs = _pool(z[lvl + 1]), _pool(var[lvl + 1])
        prec = 1.0 / variances[lvl] + 1.0 / vs
        z[lvl] = (levels[lvl] / variances[lvl] + s / vs) / prec
        var[lvl] = 1.0 / prec
    u = z[0]
    for lvl in range(1, L + 1):
        up = np.kron(u - _pool(z[lvl]), np.ones((2, 2)))
        share = var[lvl] / np.kron(_pool(var[lvl]), np.ones((2, 2)))
        u = z[lvl] + up * share
    return u


def central_tree_histogram(rows: Any, cols: Any, depth: int, epsilon: float,
                           rng: RngLike | SecureRandom = None) -> np.ndarray:
    """The flat histogram with central noise: exact discrete Laplace (sensitivity 1) added
    once per cell to the true counts ([Bagdasaryan22]_ Sec. 6, central DP).

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's cell (row, column) on the 2^depth x 2^depth grid.
    depth : int
        L in [1, 12].
    epsilon : float
        > 0: each user changes one count by 1.
    rng : None, SecureRandom, int or Generator
        ``None``: secure noise. A seed or Generator: reproducible evaluation.

    Returns
    -------
    numpy.ndarray, shape (2^depth, 2^depth)
        The noisy counts, clipped at 0 and normalised (:func:`normalise_density`).

    Raises
    ------
    TypeError
        If ``depth`` is not an integer or ``epsilon`` not a real number.
    ValueError
        If ``depth`` is outside [1, 12], ``epsilon`` is not positive, or a cell index is
        negative (from :func:`numpy.bincount`).

    References
    ----------
    [Bagdasaryan22]_ Sec. 6 (the central-DP baseline).
    """
    side = 1 << v.bounded_count("depth", depth, 1, 12)
    cells = np.asarray(rows) * side + np.asarray(cols)
    counts = np.bincount(cells, minlength=side * side)
    noisy = counts + discrete_laplace_for(v.positive("epsilon", epsilon), 1, counts.size, rng)
    return normalise_density(noisy.reshape(side, side))


def local_rr_histogram(rows: Any, cols: Any, depth: int, epsilon: float,
                       rng: RngLike | SecureRandom = None) -> np.ndarray:
    """eps-LDP k-randomised response of every user's cell over k = 4^L cells, exact integer
    weights (w_in = floor(2^24 e^eps), w_out = 2^24), debiased (v - q) / (p - q).

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's cell (row, column) on the 2^depth x 2^depth grid.
    depth : int
        L in [1, 12].
    epsilon : float
        The local budget, > 0.
    rng : None, SecureRandom, int or Generator
        ``None``: secure randomness. A seed or Generator: reproducible evaluation.

    Returns
    -------
    numpy.ndarray, shape (2^depth, 2^depth)
        The debiased frequency estimate, clipped at 0 and normalised.

    Raises
    ------
    TypeError
        If ``depth`` is not an integer or ``epsilon`` not a real number.
    ValueError
        If ``depth`` is outside [1, 12], ``epsilon`` is not positive, or so large that the
        integer weights overflow the exact sampler (total >= 2^62).

    References
    ----------
    [KOV16]_ (k-randomised response and its debiasing); [Bagdasaryan22]_ Sec. 6 (the local
    baseline).
    """
    side = 1 << v.bounded_count("depth", depth, 1, 12)
    k = side * side
    x = np.asarray(rows) * side + np.asarray(cols)
    eps = v.positive("epsilon", epsilon)
    w_in, w_out = rr_weights(eps)
    total = w_in + (k - 1) * w_out
    if total >= 1 << 62:
        raise ValueError(f"epsilon={epsilon!r} too large for the exact k-RR sampler")
    u = uniform_below(np.full(x.size, total, dtype=np.uint64),
                      np.full(x.size, _shift(total), dtype=np.uint64),
                      word_source(noise_source(rng))).astype(np.int64)
    other = (u - w_in) // w_out
    other = other + (other >= x)  # skip the user's own cell
    y = np.where(u < w_in, x, other)
    p, q = w_in / total, w_out / total
    est = (np.bincount(y, minlength=k) / x.size - q) / (p - q)
    return normalise_density(est.reshape(side, side))


def level_density(counts: Any, level: int, depth: int) -> np.ndarray:
    """The pixel density of quadtree level ``level``'s counts: each clipped count spread
    evenly over its 4^(depth - level) pixels, normalised.

    Parameters
    ----------
    counts : array_like, shape (4^level,) or (2^level, 2^level)
        The (noisy) counts of the level's cells, row-major.
    level : int
        0 <= level <= depth.
    depth : int
        L in [1, 12]: the image is 2^L x 2^L.

    Returns
    -------
    numpy.ndarray, shape (2^depth, 2^depth)
        The normalised density (uniform when no count is positive).

    Raises
    ------
    ValueError
        If ``level`` is outside 0..depth or ``counts`` does not have 4^level entries.
    TypeError
        If ``level`` or ``depth`` is not an integer.

    References
    ----------
    [Bagdasaryan22]_ Sec. 6.1 (a coarse cell's value spread uniformly over its pixels).
    """
    L = v.bounded_count("depth", depth, 1, 12)
    lvl = v.bounded_count("level", level, 0, L)
    c = np.asarray(counts, dtype=float)
    if c.size != 4 ** lvl:
        raise ValueError(f"counts must have 4^level = {4 ** lvl} entries, got {c.size}")
    f = 1 << (L - lvl)
    d = np.kron(np.maximum(c.reshape(1 << lvl, 1 << lvl), 0.0), np.ones((f, f)))
    return d / d.sum() if d.sum() > 0 else np.full(d.shape, 1.0 / d.size)


@dataclass(frozen=True)
class LevelEstimates:
    """Noisy counts of several quadtree levels of one release, and what they cost.

    Attributes
    ----------
    depth : int
        L: the image is 2^L x 2^L.
    counts : dict of int to numpy.ndarray
        Level -> its (noisy, possibly estimated) counts, 4^level entries row-major.
    epsilons : dict of int to float
        Level -> the budget its query spent.
    communication : int
        Entries one user sends over all levels: the sum of the vector sizes, the measure of
        [Bagdasaryan22]_ Table 1.
    guarantee : Guarantee or None
        The composed guarantee of all levels; None only for :func:`nonprivate_levels` (no
        privacy: an evaluation's reference, never a release).
    variances : dict of int to float
        Level -> the per-entry noise variance of its counts (for least squares).
    """

    depth: int
    counts: dict
    epsilons: dict
    communication: int
    guarantee: Guarantee | None
    variances: dict = field(default_factory=dict)

    def density(self, level: int) -> np.ndarray:
        """The normalised pixel density of one level (:func:`level_density`).

        Parameters
        ----------
        level : int
            A level held in :attr:`counts`.

        Returns
        -------
        numpy.ndarray, shape (2^depth, 2^depth)
            The density.

        Raises
        ------
        KeyError
            If the level was not measured.
        """
        return level_density(self.counts[level], level, self.depth)


def best_level(estimates: LevelEstimates, truth: Any) -> tuple[int, float]:
    """The level whose density has the lowest MSE against ``truth`` (an oracle choice: the
    evaluation of [Bagdasaryan22]_ Table 1's non-interactive rows, not a private release).

    Parameters
    ----------
    estimates : LevelEstimates
        The measured levels.
    truth : array_like, shape (2^depth, 2^depth)
        The normalised true density.

    Returns
    -------
    (int, float)
        The best level and its MSE (ties: the coarser level).

    Raises
    ------
    ValueError
        If ``truth`` does not have the image's shape or no level was measured.

    References
    ----------
    [Bagdasaryan22]_ Sec. 6.2 ("we use the split that achieves the lowest MSE compared to the
    ground truth").
    """
    t = np.asarray(truth, dtype=float)
    side = 1 << estimates.depth
    if t.shape != (side, side):
        raise ValueError(f"truth must have shape ({side}, {side}), got {t.shape}")
    if not estimates.counts:
        raise ValueError("estimates hold no level")
    scores = {lvl: float(np.mean((estimates.density(lvl) - t) ** 2))
              for lvl in sorted(estimates.counts)}
    lvl = min(scores, key=lambda k: (scores[k], k))
    return lvl, scores[lvl]


def nonprivate_levels(rows: Any, cols: Any, depth: int) -> LevelEstimates:
    """Every quadtree level of the users' exact counts: [Bagdasaryan22]_ Table 1's
    "non-private" row (users send their location in the clear: 2 integers each).

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's pixel on the 2^depth x 2^depth grid.
    depth : int
        L in [1, 12].

    Returns
    -------
    LevelEstimates
        Levels 0..L, communication 2, no guarantee (``None``: not private).

    Raises
    ------
    ValueError
        If ``depth`` is outside [1, 12] or a pixel is outside the grid.
    TypeError
        If ``depth`` is not an integer.

    References
    ----------
    [Bagdasaryan22]_ Sec. 6.2 (the non-private baseline).
    """
    L = v.bounded_count("depth", depth, 1, 12)
    side = 1 << L
    r, c = np.asarray(rows), np.asarray(cols)
    if r.shape != c.shape or r.ndim != 1 or r.size == 0 or (r < 0).any() or (c < 0).any() \
            or (r >= side).any() or (c >= side).any():
        raise ValueError(f"rows and cols must be 1-d arrays of one length with pixels in "
                         f"0..{side - 1}")
    counts = {lvl: np.bincount((r >> (L - lvl)) * (1 << lvl) + (c >> (L - lvl)),
                               minlength=4 ** lvl) for lvl in range(L + 1)}
    return LevelEstimates(depth=L, counts=counts, epsilons={k: float("inf") for k in counts},
                          communication=2, guarantee=None)


__all__ = ["LevelEstimates", "best_level", "central_tree_histogram", "geometric_budget",
           "level_density", "local_rr_histogram", "nonprivate_levels", "normalise_density",
           "tree_least_squares"]
