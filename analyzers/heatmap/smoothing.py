"""A density read off the noisy pyramid: the prior of the default post-processing, and an option.

:func:`pyramid_density` is ``HeatmapRelease.smoothed(method="density")`` (``--smoothing
density``, the default before the count posterior) and the prior mean and starting point of
the default, :func:`shuffledp.analyzers.heatmap.posterior.count_posterior`.

Reconstruct ([Ghazi23]_ Alg. 2) keeps the top-w cells per level and zeroes everything else,
so at few users or small epsilon its estimate is a handful of blocks and spikes and is exactly
zero over most of the grid: KL(truth || estimate) charges every unit of true mass that falls
there about 30 nats and SIM counts only overlap. The noisy level counts that the release
already holds (every cell of every measured level, including those Reconstruct left out)
say where that missing mass is, at the resolution the noise allows. :func:`pyramid_density`
reads it off them in two passes:

* bottom up (:func:`combine_levels`): every cell's count is estimated from its own noisy
  count and its subtree's, by inverse-variance weights (the bottom-up pass of the
  hierarchical least-squares estimate of [Hay10]_, here with per-level noise): ``z`` with
  variance ``v``, and ``s = sqrt(v / 2)`` its Laplace-equivalent scale. A coarse cell whose
  own budget is small gets its count from the finer levels and vice versa;
* top down: the whole mass is split over the start level's cells, and then every parent's
  mass over its children, in proportion to ``max(z_c - t pi0 s_c, 0)`` mixed with the
  even split with weight ``lam = S^2 / (S^2 + k^2 mean(s^2))`` on the measured shares
  (``S``: the sum of the thresholded children). ``pi0 = min(1, 2 #{z < 0} / #cells)`` is
  read off the level itself: the share of its cells that hold nothing (their estimates are
  negative half the time, cells with mass rarely are). A level that is mostly empty (a
  spike, sparse users) is thresholded at ``t`` noise scales and its mass stays on the cells
  that stand out; a level that is mostly occupied (dense data) is hardly thresholded, so
  weak cells keep their share. Where the children's counts do not resolve a parent's mass
  (``S`` about the noise or zero) it is spread evenly over the parent cell. The start-level
  split is further mixed with the uniform split with weight ``lam_0 = T^2 / (T^2 + k^2 V)``
  (``T``, ``V``: the estimated total and its variance);
* background: the result is mixed with the start level's own picture,
  ``(max(z, 0) + s)`` spread evenly over each start cell, with weight
  ``f = min(1/2, h sqrt(V) / T)`` (``h`` = :data:`BACKGROUND`): a release whose total is
  mostly noise leans on its coarse picture (KL charges every unit of true mass the estimate
  misses) and a strong one keeps its detail;

with ``t`` = :data:`THRESHOLD` and ``k`` = :data:`CONFIDENCE`. Every split keeps a parent's
mass, so the result is a density, positive on every pixel (``lam < 1``, and the background is
positive). It is a function of the release alone: post-processing, no privacy cost. Nothing
in it depends on the data other than through the released counts; ``t = 2``, ``k = 1`` and
``h = 1/2`` were chosen once on population-weighted synthetic data
(``python bench/smoothing_grid.py``), not per release.

The budget split. What any post-processing can do is bounded by the noise of the levels: the
best linear unbiased estimate of one pixel's count from all levels has variance at least
``1 / sum_i (1 / (2 b_i^2)) = 2 / sum_i eps_i^2`` (the inverse of the pixel's Fisher
information, which bounds the diagonal of the inverse information matrix), against ``2 / eps^2``
for the Laplace baseline; with the printed split on 64x64 (5 levels, leaf 8.9% of eps) that is
4.1x the baseline's variance. So on dense data the printed split cannot match the baseline
pixel by pixel whatever the post-processing. :func:`shuffledp.accounting.budget.auto_level_budgets`
(the central mechanism's default, ``budget="auto"``) moves budget to the leaf level when a
public number of users makes the average pixel's count stand out of its noise; the split is
a public choice and costs nothing.

What it costs and buys: ``python bench/smoothing_grid.py`` (population-weighted and
elongated clusters and a one-pixel spike, 64x64, metrics on Gaussian-filtered heatmaps,
[Ghazi23]_ Sec. 2.3 and 4) prints the table; docs/errata.md quotes it.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
.. [Hay10] Hay et al. (2010), "Boosting the accuracy of DP histograms through consistency"
   (the constrained-inference estimate of hierarchical, "universal" histograms) -- full
   entry in docs/references.md
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shuffledp.grid import Grid

__all__ = ["BACKGROUND", "CONFIDENCE", "THRESHOLD", "combine_levels", "level_sums",
           "pyramid_density"]

#: t: a child's share is its estimate soft-thresholded at t * pi0 noise scales (pi0: the
#: level's share of cells with no signal, read off its negative estimates)
THRESHOLD: float = 2.0
#: k: the measured shares of a split weigh S^2 / (S^2 + k^2 mean(s^2))
CONFIDENCE: float = 1.0
#: h: the start level's picture weighs min(1/2, h sqrt(2 N_0) b_0 / T)
BACKGROUND: float = 0.5


def _iv(counts: Sequence[Any], grid: Grid, start: int,
        noise_scales: Sequence[float]) -> tuple[list[np.ndarray], np.ndarray]:
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a shuffledp.Grid, got grid={grid!r}")
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) \
            or not 0 <= start <= grid.depth:
        raise ValueError(f"start must be an integer in 0..{grid.depth} for grid {grid}, "
                         f"got start={start!r}")
    n_lev = grid.depth - start + 1
    if len(counts) != n_lev:
        raise ValueError(f"counts must hold {n_lev} levels ({start}..{grid.depth}) for grid "
                         f"{grid}, got {len(counts)}")
    scales = np.asarray(noise_scales, dtype=float)
    if scales.shape != (n_lev,) or not (np.isfinite(scales).all() and (scales > 0).all()):
        raise ValueError(f"noise_scales must hold {n_lev} finite numbers > 0, got "
                         f"noise_scales={noise_scales!r}")
    out = []
    for k, c in enumerate(counts):
        a = np.asarray(c, dtype=float)
        shape = grid.level_shape(start + k)
        if a.shape != shape:
            raise ValueError(f"counts[{k}] (level {start + k}) must have shape {shape}, "
                             f"got {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"counts[{k}] (level {start + k}) holds NaN or infinite values")
        out.append(a)
    return out, scales


def _parents(shape: tuple[int, int], parent_cols: int) -> np.ndarray:
    """Flat index of each cell's parent (one level up) for a level of shape ``shape``."""
    rows, cols = shape
    return ((np.arange(rows) // 2)[:, None] * parent_cols
            + (np.arange(cols) // 2)[None, :]).ravel()


def combine_levels(counts: Sequence[Any], grid: Grid, start: int,
                   noise_scales: Sequence[float]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every cell's count estimated from its own noisy count and all the levels below it.

    The bottom-up pass of the hierarchical least-squares estimate ([Hay10]_, here with
    per-level noise): a leaf keeps its count (variance ``2 b^2``); a cell one level up
    combines its own count (variance ``2 b^2``) with the sum of its children's estimates
    (variance ``C``, the sum of theirs) by inverse-variance weights, which is the best linear
    unbiased estimate of the cell's count from its subtree.

    Parameters
    ----------
    counts, grid, start, noise_scales
        As :func:`pyramid_density`.

    Returns
    -------
    (estimates, variances) : tuple of lists of numpy.ndarray
        One array per level ``start..grid.depth``, shapes as ``counts``.

    Raises
    ------
    TypeError, ValueError
        As :func:`pyramid_density`.

    References
    ----------
    [Hay10]_ (the hierarchical estimate; its bottom-up pass).
    """
    levels, scales = _iv(counts, grid, start, noise_scales)
    return _combine(levels, scales)


def _combine(levels: list[np.ndarray],
             scales: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    est = [levels[-1]]
    var = [np.full(est[0].shape, 2.0 * float(scales[-1]) ** 2)]
    for k in range(len(levels) - 2, -1, -1):
        y = levels[k]
        own = 2.0 * float(scales[k]) ** 2
        par = _parents(est[0].shape, y.shape[1])
        child = np.bincount(par, weights=est[0].ravel(), minlength=y.size).reshape(y.shape)
        c_var = np.bincount(par, weights=var[0].ravel(), minlength=y.size).reshape(y.shape)
        w = c_var / (c_var + own)
        est.insert(0, w * y + (1.0 - w) * child)
        var.insert(0, own * c_var / (own + c_var))
    return est, var


def _split(mass: np.ndarray, z: np.ndarray, var: np.ndarray, threshold: float,
           confidence: float, parent: np.ndarray | None = None) -> np.ndarray:
    """Each parent's mass handed to its children (module notes, "every later level");
    ``parent=zeros`` with ``mass`` of one cell: the root split of the whole mass."""
    rows, cols = z.shape
    if parent is None:
        parent = _parents(z.shape, mass.shape[1])
    s = np.sqrt(var.ravel() / 2.0)  # Laplace-equivalent scale of each child's estimate
    null = min(1.0, 2.0 * float(np.mean(z < 0)))
    t_eff = threshold * null * s
    zz = np.maximum(z.ravel() - t_eff, 0.0)
    total = np.bincount(parent, weights=zz, minlength=mass.size)[parent]
    n_children = np.bincount(parent, minlength=mass.size)[parent]
    mean_s2 = np.bincount(parent, weights=s * s, minlength=mass.size)[parent] / n_children
    lam = total * total / (total * total + confidence ** 2 * mean_s2)
    share = np.divide(zz, total, out=np.zeros_like(zz), where=total > 0)
    return (mass.ravel()[parent] * (lam * share + (1.0 - lam) / n_children)).reshape(rows, cols)


def pyramid_density(counts: Sequence[Any], grid: Grid, start: int,
                    noise_scales: Sequence[float], *, threshold: float = THRESHOLD,
                    confidence: float = CONFIDENCE,
                    background: float = BACKGROUND) -> np.ndarray:
    """A positive density over the grid's pixels read off noisy level counts, top down.

    The rule is the module's (every cell's count combined with its subtree's, a root split,
    one thresholded, confidence-weighted split per level, then the background mix); the result
    sums to 1.

    Parameters
    ----------
    counts : sequence of array_like
        ``counts[k]``: the noisy counts of level ``start + k`` in user units, shape
        ``grid.level_shape(start + k)``, for every level ``start..grid.depth`` (what the
        central mechanism and the shuffle analyzer release before Reconstruct).
    grid : Grid
        The pixel grid.
    start : int
        First measured level.
    noise_scales : sequence of float
        ``b`` per level: the Laplace scale of that level's count noise in user units
        (l1-sensitivity of one user's level vector divided by the level's epsilon), > 0.
    threshold, confidence, background : float
        ``t``, ``k`` and ``h`` of the module notes, finite and >= 0 (``confidence`` > 0).

    Returns
    -------
    numpy.ndarray, shape (height, width)
        Positive, sums to 1.

    Raises
    ------
    TypeError
        If ``grid`` is not a Grid.
    ValueError
        On a wrong number or shape of ``counts``, NaN/infinite counts, ``start`` outside the
        grid's levels, ``noise_scales`` not one positive number per level, or ``threshold``,
        ``confidence`` or ``background`` out of range.

    References
    ----------
    [Ghazi23]_ Alg. 1 (the noisy level counts), Alg. 2 (Reconstruct, whose top-w output this
    replaces as the default estimate; it stays the release's ``raw``) and Sec. 4 (the
    metrics it is measured with); [Hay10]_ (the bottom-up combination of levels).
    """
    levels, scales = _iv(counts, grid, start, noise_scales)
    t, k = float(threshold), float(confidence)
    if not (np.isfinite(t) and t >= 0):
        raise ValueError(f"threshold must be finite and >= 0, got threshold={threshold!r}")
    if not (np.isfinite(k) and k > 0):
        raise ValueError(f"confidence must be finite and > 0, got confidence={confidence!r}")
    h = float(background)
    if not (np.isfinite(h) and h >= 0):
        raise ValueError(f"background must be finite and >= 0, got background={background!r}")
    est, var = _combine(levels, scales)
    z0 = est[0]
    total = float(z0.sum())
    noise = float(np.sqrt(var[0].sum()))
    pos = np.maximum(z0, 0.0)
    lam0 = total * total / (total * total + (k * noise) ** 2) if total > 0 else 0.0
    root = _split(np.ones((1, 1)), z0, var[0], t, k, parent=np.zeros(z0.size, dtype=np.intp))
    mass = lam0 * root + (1.0 - lam0) / z0.size
    for z, v in zip(est[1:], var[1:], strict=True):
        mass = _split(mass, z, v, t, k)
    dens = mass / mass.sum()
    f = min(0.5, h * noise / total) if total > 0 else 0.5
    return (1.0 - f) * dens + f * _background(pos + np.sqrt(var[0] / 2.0), grid, start)


def _background(weights: np.ndarray, grid: Grid, start: int) -> np.ndarray:
    """``weights`` (one per start cell) normalised and spread evenly over each cell's pixels."""
    shift = grid.depth - start
    rows = (np.arange(grid.height) >> shift)[:, None]
    cols = (np.arange(grid.width) >> shift)[None, :]
    cell = (rows * weights.shape[1] + cols).ravel()
    n_pix = np.bincount(cell, minlength=weights.size)
    w = weights.ravel() / weights.sum()
    return (w[cell] / n_pix[cell]).reshape(grid.height, grid.width)


def level_sums(raw: Any, grid: Grid, start: int) -> list[np.ndarray]:
    """The level sums of a pixel array for levels ``start..grid.depth`` (the pyramid of an
    estimate, for a release that does not carry its noisy counts).

    Parameters
    ----------
    raw : array_like, shape (height, width)
        Pixel masses.
    grid : Grid
        The pixel grid.
    start : int
        First level, in 0..grid.depth.

    Returns
    -------
    list of numpy.ndarray
        ``out[k]`` has shape ``grid.level_shape(start + k)``; the last is ``raw`` itself.

    Raises
    ------
    ValueError
        If ``raw`` does not have the grid's shape or ``start`` is out of range.

    References
    ----------
    [Ghazi23]_ Sec. 3.1 (the pyramidal transform, unscaled).
    """
    a = np.asarray(raw, dtype=float)
    if a.shape != (grid.height, grid.width):
        raise ValueError(f"raw must have shape {(grid.height, grid.width)}, got {a.shape}")
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) \
            or not 0 <= start <= grid.depth:
        raise ValueError(f"start must be an integer in 0..{grid.depth}, got start={start!r}")
    out = [a]
    for level in range(grid.depth - 1, start - 1, -1):
        rows, cols = grid.level_shape(level)
        child = out[0]
        pr = (np.arange(child.shape[0]) // 2)[:, None]
        pc = (np.arange(child.shape[1]) // 2)[None, :]
        idx = (pr * cols + pc).ravel()
        out.insert(0, np.bincount(idx, weights=child.ravel(),
                                  minlength=rows * cols).reshape(rows, cols))
    return out
