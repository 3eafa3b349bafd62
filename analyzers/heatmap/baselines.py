"""The baselines of [Ghazi23]_ Sec. 4: Laplace noise per cell, and its top-t% variant.

The baseline of [LXD+19]_ adds independent Laplace noise to every cell of the aggregate
``s = sum_j p_j``, zeroes the negative cells and normalises. Each user's distribution ``p_j``
sums to 1, so adding or removing one user changes ``s`` by at most 1 in l1 norm; Laplace noise
of scale 1/epsilon per cell is therefore epsilon-DP ([Ghazi23]_ Lemma 2.2), and everything
after the noise is post-processing. The "thresholding" variant keeps only the top t% of the
cells after noising and zeroes the rest (Sec. 4, "Baselines"; Fig. 1-3 use t = 0.01%, ...).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
.. [LXD+19] Liu et al. (2019), "DP for eye-tracking data" -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.analyzers.heatmap.release import HeatmapRelease, normalise
from shuffledp.grid import Grid

__all__ = ["laplace_baseline"]


def _iv_laplace(
    aggregate: Any, epsilon: Any, top_percent: Any
) -> tuple[np.ndarray, float, float | None]:
    agg = v.nonnegative_array("aggregate", aggregate, ndim=2)
    eps = v.positive("epsilon", epsilon)
    top = None if top_percent is None else v.interval("top_percent", top_percent, 0.0, 100.0,
                                                      open_high=False)
    return agg, eps, top


def laplace_baseline(
    aggregate: Any,
    epsilon: float,
    *,
    rng: Any = None,
    top_percent: float | None = None,
) -> HeatmapRelease:
    """Laplace noise per cell, negatives zeroed, optionally top-t% only ([Ghazi23]_ Sec. 4).

    ``s_hat = max(s + nu, 0)`` with ``nu`` i.i.d. Laplace(0, 1/epsilon) per cell. With
    ``top_percent = t`` only the ``k = ceil(t/100 * H W)`` cells with the largest noisy values
    ``s + nu`` survive (ties broken arbitrarily), the rest are set to zero; then negatives are
    zeroed. The estimate is ``s_hat / ||s_hat||_1`` (uniform if ``s_hat`` is all zero).

    Privacy: epsilon-DP in the central model under adding/removing one user, provided every
    user's distribution has total mass at most 1 (l1-sensitivity 1; Lemma 2.2). The aggregate
    cannot prove that, so pass the sum of normalised user distributions
    (:meth:`shuffledp.users.UserDistributions.aggregate`).

    Parameters
    ----------
    aggregate : array_like, shape (height, width)
        The true aggregate ``s`` (non-negative, finite).
    epsilon : float
        Privacy parameter, > 0.
    rng : None, int, or numpy.random.Generator
        Source of the noise (``np.random.default_rng(rng)``). For research runs only: the
        floating-point Laplace sampler is not hardened against timing or precision attacks.
    top_percent : float, optional
        t in (0, 100]; ``None`` (default) keeps all cells (same as t = 100).

    Returns
    -------
    HeatmapRelease
        ``raw`` is ``s_hat`` in user-mass units, ``estimate`` its normalisation, with a pure
        central guarantee and the mechanism's parameters.

    Raises
    ------
    TypeError
        If ``aggregate`` is not a numeric array or ``epsilon``/``top_percent`` not a real
        number.
    ValueError
        If ``aggregate`` is not 2-D, non-negative and finite, ``epsilon`` is not positive, or
        ``top_percent`` is not in (0, 100].

    References
    ----------
    [Ghazi23]_ Sec. 4 (the Laplace and top-t% baselines); [LXD+19]_ (Laplace noise on
    eye-tracking heatmaps).
    """
    agg, eps, top = _iv_laplace(aggregate, epsilon, top_percent)
    gen = np.random.default_rng(rng)
    height, width = agg.shape
    noisy = agg + gen.laplace(0.0, 1.0 / eps, size=agg.shape)
    kept = agg.size
    if top is not None and top < 100.0:
        kept = max(1, math.ceil(top / 100.0 * agg.size - 1e-9))
        flat = noisy.ravel()
        keep_idx = np.argpartition(flat, agg.size - kept)[agg.size - kept :]
        mask = np.zeros(agg.size, dtype=bool)
        mask[keep_idx] = True
        noisy = np.where(mask.reshape(agg.shape), noisy, 0.0)
    raw = np.maximum(noisy, 0.0)
    params = {
        "mechanism": "laplace_per_cell" if top is None else "laplace_top_percent",
        "noise": "laplace",
        "noise_scale": 1.0 / eps,
        "sensitivity_l1": 1.0,
        "top_percent": top,
        "kept_cells": int(kept),
    }
    guarantee = Guarantee(
        notion="pure",
        model="central",
        epsilon=eps,
        delta=0.0,
        neighbour=Neighbour.ADD_REMOVE,
        theorem=(
            "Ghazi et al., Differentially Private Heatmaps, AAAI 2023, Sec. 4 baseline "
            "(Liu et al., ETRA 2019): Laplace mechanism, Lemma 2.2, l1-sensitivity 1"
        ),
        parameters={"epsilon": eps, "noise_scale": 1.0 / eps, "sensitivity_l1": 1.0},
        notes=("evaluation baseline: floating-point Laplace noise from numpy, not hardened "
               "against floating-point attacks; do not ship it as a release (use "
               "central_heatmap, whose noise is exact)",),
    )
    return HeatmapRelease(
        grid=Grid(width, height),
        estimate=normalise(raw),
        raw=raw,
        guarantee=guarantee,
        parameters=params,
    )
