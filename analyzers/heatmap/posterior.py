"""The default release's last step: every pixel's count estimated by its posterior mean.

:func:`shuffledp.analyzers.heatmap.smoothing.pyramid_density` reads a smooth density off the
noisy pyramid: where the data are locally dense it is the picture, but the ground truth of
[Ghazi23]_ Sec. 4 is the users' own histogram, which on sparse or strongly concentrated data
is a set of isolated counts that a smooth density spreads out. :func:`count_posterior`
combines the two by empirical Bayes, from the release alone:

* every leaf pixel's count is estimated from every level by the hierarchical least-squares
  estimate of [Hay10]_ (the bottom-up pass of
  :func:`~shuffledp.analyzers.heatmap.smoothing.combine_levels`, then the top-down pass that
  hands each parent's final estimate's residual to its children in proportion to their
  variances): ``z`` with variance ``v`` (a pixel's Fisher information from all levels);
* the prior of a pixel's count is negative binomial (a Poisson count of users whose rate is
  gamma-distributed) with mean ``T ((1 - a) m + a / N)`` (``m``: the pyramid density, ``N``
  pixels, ``T``: the estimated total) and size ``r``, the dispersion; ``a`` among
  :data:`UNIFORM_SHARES` and ``r`` among :data:`DISPERSIONS` are chosen by the marginal
  likelihood of all the ``z`` under Laplace noise of variance ``v`` (type-II maximum
  likelihood: the data say how far the counts scatter around the smooth density);
* the estimate is the posterior mean of every pixel's count, normalised.

The posterior is taken only where a pixel's estimate has standard deviation at most
:data:`LATTICE_SD` users; noisier pyramids are released as the pyramid density (there the
dispersion the marginal likelihood picks follows the density's own errors and the posterior
mean lost CC to it on the bench). Where the leaf level is noise the posterior mean is the
prior mean, i.e. the pyramid density; where it resolves single users (large eps, or a large
leaf share) it recovers the users' histogram. The posterior mean is the estimate that
minimises the expected KL(truth || estimate) and squared error under the model; it is
positive on every pixel, so KL stays finite. Users are counted in whole units (one location
per user); a release of fractional user distributions is still post-processed, with a prior
that fits it less well. Nothing but the released counts and their public noise scales
enters: post-processing, no privacy cost.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
.. [Hay10] Hay et al. (2010), "Boosting the accuracy of DP histograms through consistency"
   -- full entry in docs/references.md
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import gammaln

from shuffledp.analyzers.heatmap.smoothing import _combine, _iv, _parents, pyramid_density
from shuffledp.grid import Grid

__all__ = ["DISPERSIONS", "LATTICE_SD", "UNIFORM_SHARES", "count_posterior",
           "hierarchical_estimates"]

#: The sizes r of the negative binomial prior tried (r large: Poisson about the pyramid
#: density; r small: counts scattered far about it); the marginal likelihood picks one.
DISPERSIONS: tuple[float, ...] = (0.25, 1.0, 4.0, 16.0, 64.0, 1e6)
#: Pixels per block of the posterior computation (bounds the memory of the count grid).
_BLOCK = 2048
#: The shares a of the uniform map in the prior mean ``T ((1 - a) m + a / N)`` tried (the
#: pyramid density may be too sure where it thresholded weak cells away).
UNIFORM_SHARES: tuple[float, ...] = (0.0, 0.1, 0.3)
#: The posterior is taken only when the standard deviation of a pixel's least-squares
#: estimate is at most this many users (the count lattice then shows through the noise);
#: otherwise the pyramid density is the estimate. Chosen once on
#: ``python bench/smoothing_grid.py``'s data.
LATTICE_SD: float = 1.5


def hierarchical_estimates(counts: Sequence[Any], grid: Grid, start: int,
                           noise_scales: Sequence[float]
                           ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The hierarchical least-squares estimate of every cell's count from all levels.

    Bottom up as :func:`~shuffledp.analyzers.heatmap.smoothing.combine_levels`; then top
    down, each child gets its subtree estimate plus a share of its parent's residual (final
    estimate minus the sum of the children's subtree estimates) proportional to its
    variance, which makes the levels consistent ([Hay10]_ Sec. 4, with per-level noise).

    Parameters
    ----------
    counts, grid, start, noise_scales
        As :func:`~shuffledp.analyzers.heatmap.smoothing.pyramid_density`.

    Returns
    -------
    (estimates, variances) : tuple of lists of numpy.ndarray
        One array per level ``start..grid.depth``; children sum to their parent.

    Raises
    ------
    TypeError, ValueError
        As :func:`~shuffledp.analyzers.heatmap.smoothing.pyramid_density`.

    References
    ----------
    [Hay10]_ (the two-pass constrained inference).
    """
    levels, scales = _iv(counts, grid, start, noise_scales)
    return _two_pass(levels, scales)


def _two_pass(levels: list[np.ndarray],
              scales: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    est, var = _combine(levels, scales)
    fin, fvar = [est[0]], [var[0]]
    for z, v in zip(est[1:], var[1:], strict=True):
        par = _parents(z.shape, fin[-1].shape[1])
        m = fin[-1].size
        s = np.bincount(par, weights=z.ravel(), minlength=m)[par]
        vs = np.bincount(par, weights=v.ravel(), minlength=m)[par]
        w = v.ravel() / vs
        x = z.ravel() + w * (fin[-1].ravel()[par] - s)
        xv = v.ravel() - w * w * (vs - fvar[-1].ravel()[par])
        fin.append(x.reshape(z.shape))
        fvar.append(xv.reshape(z.shape))
    return fin, fvar


def count_posterior(counts: Sequence[Any], grid: Grid, start: int,
                    noise_scales: Sequence[float], *,
                    uniform_shares: Sequence[float] = ()
                    ) -> tuple[np.ndarray, dict[str, float | None]]:
    """The posterior mean of every pixel's count under the empirical-Bayes prior, normalised.

    Parameters
    ----------
    counts, grid, start, noise_scales
        As :func:`~shuffledp.analyzers.heatmap.smoothing.pyramid_density`.
    uniform_shares : sequence of float, optional
        The shares a in [0, 1) tried (default :data:`UNIFORM_SHARES`).

    Returns
    -------
    (density, record) : tuple
        The estimate (numpy.ndarray of shape (height, width), positive, sums to 1) and a
        record: ``pixel_sd`` (the standard deviation of a pixel's least-squares estimate),
        ``prior_uniform_share`` and ``prior_dispersion`` (a and r that the marginal
        likelihood chose; ``None`` when ``pixel_sd`` > :data:`LATTICE_SD` and the pyramid
        density is returned as is).

    Raises
    ------
    TypeError, ValueError
        As :func:`~shuffledp.analyzers.heatmap.smoothing.pyramid_density`.

    References
    ----------
    [Hay10]_ (the leaf estimates); [Ghazi23]_ Sec. 4 (the users' histogram as ground truth).
    """
    levels, scales = _iv(counts, grid, start, noise_scales)
    fin, fvar = _two_pass(levels, scales)
    z = fin[-1].ravel()
    b = np.sqrt(np.maximum(fvar[-1].ravel(), 1e-300) / 2.0)  # Laplace scale of variance v
    prior_map = pyramid_density(levels, grid, start, [float(x) for x in scales])
    pixel_sd = float(np.sqrt(fvar[-1].mean()))
    if pixel_sd > LATTICE_SD:
        return prior_map, {"pixel_sd": pixel_sd, "prior_uniform_share": None,
                           "prior_dispersion": None}
    prior = prior_map.ravel()
    total = max(float(fin[0].sum()), 1.0)
    mixes = list(uniform_shares) or list(UNIFORM_SHARES)
    if not all(0.0 <= a < 1.0 for a in mixes):
        raise ValueError(f"uniform_shares must lie in [0, 1), got {uniform_shares!r}")
    means = [np.maximum(((1.0 - a) * prior + a / prior.size) * total, 1e-12) for a in mixes]
    mean = np.max(means, axis=0)
    top = int(np.ceil(max(float(z.max()), float(mean.max())) + 8.0 * float(b.max()))) + 2
    x = np.arange(top + 1, dtype=float)
    lgx = gammaln(x + 1.0)
    cand = [(a, r) for a in mixes for r in DISPERSIONS]
    marg = np.zeros(len(cand))
    post = np.empty((len(cand), z.size))
    for lo in range(0, z.size, _BLOCK):
        sl = slice(lo, lo + _BLOCK)
        loglik = -np.abs(z[sl, None] - x[None, :]) / b[sl, None] - np.log(2.0 * b[sl, None])
        for j, (a, r) in enumerate(cand):
            mu = means[mixes.index(a)][sl, None]
            logp = (gammaln(x + r) - gammaln(r) - lgx + r * np.log(r / (r + mu))
                    + x * np.log(mu / (r + mu)))
            a = loglik + logp
            amax = a.max(axis=1, keepdims=True)
            w = np.exp(a - amax)
            tot = w.sum(axis=1)
            marg[j] += float((np.log(tot) + amax[:, 0]).sum())
            post[j, sl] = (w @ x) / tot
    j = int(np.argmax(marg))
    pm = np.maximum(post[j], 1e-300)
    a, r = cand[j]
    return (pm / pm.sum()).reshape(grid.height, grid.width), {
        "pixel_sd": pixel_sd, "prior_uniform_share": float(a), "prior_dispersion": float(r)}
