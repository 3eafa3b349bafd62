"""The default post-processing of a heatmap release: a density read off the noisy pyramid.

Reconstruct ([Ghazi23]_ Alg. 2) keeps the top-w cells per level and zeroes everything else,
so at few users or small epsilon its estimate is a handful of blocks and spikes and is exactly
zero over most of the grid: KL(truth || estimate) charges every unit of true mass that falls
there about 30 nats and SIM counts only overlap. The noisy level counts that the release
already holds (every cell of every measured level, including those Reconstruct left out)
say where that missing mass is, at the resolution the noise allows. :func:`pyramid_density`
reads it off them, top down, one split per level:

* root: the start level's cells get the shares ``max(y, 0) / sum max(y, 0)`` mixed with the
  uniform split, with weight ``lam_0 = T^2 / (T^2 + 2 N_0 (k b_0)^2)`` on the measured shares,
  where ``T`` is the noisy total of the start level and ``2 N_0 b_0^2`` its noise variance:
  a release whose total does not stand out of its own noise is spread evenly;
* every later level: a parent of mass ``M`` hands it to its children ``c`` in proportion to
  ``z_c = max(y_c - t b, 0)`` (the child's noisy count soft-thresholded at ``t`` noise
  scales) mixed with the even split, with weight ``lam = S^2 / (S^2 + (k b)^2)`` on the
  measured shares, ``S = sum_c z_c``. Where the fine level is concentrated (a spike, a dense
  cluster: ``S >> b``) the mass follows the counts and stays sharp; where the coarse level
  shows mass that the children's counts do not resolve (``S`` about the noise or zero) it is
  spread evenly over the parent cell;

* background: the result is mixed with the start level's own picture, ``(max(y, 0) + b_0)``
  spread evenly over each start cell, with weight ``f = min(1/2, h sqrt(2 N_0) b_0 / T)``
  (``h`` = :data:`BACKGROUND`): ``sqrt(2 N_0) b_0 / T`` is the relative noise of the released
  total, so a release that is mostly noise leans on its coarse picture (KL charges every unit
  of true mass the estimate misses) and a strong one keeps its detail;

with ``b`` the Laplace scale of that level's count noise in user units (sensitivity /
eps_i), ``t`` = :data:`THRESHOLD` and ``k`` = :data:`CONFIDENCE`. Every split keeps a
parent's mass, so the result is a density, positive on every pixel (``lam < 1``, and the
background is positive). It is a function of the release alone: post-processing, no privacy
cost. Nothing in it depends on the data being released other than through the released
counts; ``t = 2``, ``k = 1`` and ``h = 1/2`` were chosen once on population-weighted
synthetic data (``python bench/smoothing_grid.py``), not per release.

What it costs and buys (``python bench/smoothing_grid.py``: population-weighted and elongated
clusters and a one-pixel spike, 64x64, 12 trials per point, metrics on Gaussian-filtered
heatmaps, [Ghazi23]_ Sec. 2.3 and 4; docs/errata.md has the figures): on the clustered data
its EMD is 0.15-1.09x that of Reconstruct's output (above 1.05x at 6 of 112 points) and its
KL 2-10x lower; 200 users who share one pixel keep 81% of the estimate within one pixel (mean
of 240 releases at eps = 1 on 256x256). Where it still loses: a spike's EMD (1.05-1.6x
Reconstruct's at eps <= 5: the background share, and at eps <= 0.5 a child only a few noise
scales above its siblings is spread), and dense data at pixel resolution (thousands of users
on 64x64, where the Laplace baseline's per-pixel noise is about ten times smaller than the
leaf level's share of the budget allows: CC, SIM and KL go to the baseline).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shuffledp.grid import Grid

__all__ = ["BACKGROUND", "CONFIDENCE", "THRESHOLD", "level_sums", "pyramid_density"]

#: t: a child's noisy count counts towards its share only above t noise scales
THRESHOLD: float = 2.0
#: k: the measured shares of a split weigh S^2 / (S^2 + (k b)^2)
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


def _split(mass: np.ndarray, y: np.ndarray, b: float, threshold: float,
           confidence: float) -> np.ndarray:
    """Each parent's mass handed to its children (module notes, "every later level")."""
    rows, cols = y.shape
    parent = ((np.arange(rows) // 2)[:, None] * mass.shape[1]
              + (np.arange(cols) // 2)[None, :]).ravel()
    z = np.maximum(y.ravel() - threshold * b, 0.0)
    s = np.bincount(parent, weights=z, minlength=mass.size)[parent]
    n_children = np.bincount(parent, minlength=mass.size)[parent]
    lam = s * s / (s * s + (confidence * b) ** 2)
    share = np.divide(z, s, out=np.zeros_like(z), where=s > 0)
    return (mass.ravel()[parent] * (lam * share + (1.0 - lam) / n_children)).reshape(rows, cols)


def pyramid_density(counts: Sequence[Any], grid: Grid, start: int,
                    noise_scales: Sequence[float], *, threshold: float = THRESHOLD,
                    confidence: float = CONFIDENCE,
                    background: float = BACKGROUND) -> np.ndarray:
    """A positive density over the grid's pixels read off noisy level counts, top down.

    The rule is the module's (root split, one soft-thresholded, confidence-weighted split per
    level, then the background mix); the result sums to 1.

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
    metrics it is measured with).
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
    y0 = levels[0]
    total = float(y0.sum())
    pos = np.maximum(y0, 0.0)
    lam0 = total * total / (total * total + 2.0 * y0.size * (k * scales[0]) ** 2) \
        if total > 0 else 0.0
    shares = pos / pos.sum() if pos.sum() > 0 else np.zeros_like(pos)
    mass = lam0 * shares + (1.0 - lam0) / y0.size
    for y, b in zip(levels[1:], scales[1:], strict=True):
        mass = _split(mass, y, float(b), t, k)
    dens = mass / mass.sum()
    noise = float(np.sqrt(2.0 * y0.size) * scales[0])
    f = min(0.5, h * noise / total) if total > 0 else 0.5
    return (1.0 - f) * dens + f * _background(pos + scales[0], grid, start)


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
