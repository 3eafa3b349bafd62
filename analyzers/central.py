"""The central private heatmap: DPSparseEMDAgg (seed 000, Alg. 1) with Reconstruct (Alg. 2).

Levels ``start..L`` are measured with start = floor(log2 sqrt(w)) (Sec. 4, capped at the leaf
level of tiny grids); level i gets eps_i = eps * gamma^|i - start| / Z (proof of Thm 3.1) and
Laplace(1/eps_i) noise on each count P_i s. Under add/remove of one user, whose distribution
has l1 norm 1, each level's counts have l1-sensitivity 1, so level i is eps_i-DP
(Lemma 2.2) and the release is eps-DP by basic composition; Reconstruct is post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from shuffledp.accounting.budget import DEFAULT_GAMMA, level_budgets
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.analyzers.reconstruct import effective_start, reconstruct

from shuffledp._rng import RngLike, as_generator
from shuffledp.grid import Grid
from shuffledp.pyramid import level_counts
from shuffledp.release import HeatmapRelease, normalise
from shuffledp.users import UserDistributions

THEOREM = (
    "Ghazi et al., Differentially Private Heatmaps, AAAI 2023: Alg. 1-2, Thm 3.1 "
    "(per-level Laplace, Lemma 2.2, basic composition)"
)


def _iv(users: Any, epsilon: float, w: int, gamma: float) -> None:
    if not isinstance(users, UserDistributions):
        raise TypeError(f"users must be a UserDistributions, got {type(users).__name__}")
    eps = float(epsilon) if isinstance(epsilon, (int, float, np.floating)) else math.nan
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be a finite number > 0, got epsilon={epsilon!r}")
    if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1:
        raise ValueError(f"w must be an integer >= 1, got w={w!r}")
    g = float(gamma)
    if not (g > 0 and math.isfinite(g)):
        raise ValueError(f"gamma must be a finite number > 0, got gamma={gamma!r}")


def measured_levels(grid: Grid, w: int) -> tuple[int, int]:
    """(start, top) of the measured levels for ``grid`` and ``w``."""
    return effective_start(grid, w), grid.depth


def noisy_counts(
    aggregate: np.ndarray,
    grid: Grid,
    budgets: Sequence[float],
    start: int,
    rng: RngLike = None,
) -> list[np.ndarray]:
    """Level counts P_i s + Lap(1/eps_i) for levels ``start..L`` (Alg. 1, lines 4-7)."""
    gen = as_generator(rng)
    counts = level_counts(grid, np.asarray(aggregate, dtype=float), start)
    if len(budgets) != len(counts):
        raise ValueError(f"need {len(counts)} level budgets, got {len(budgets)}")
    return [c + gen.laplace(0.0, 1.0 / e, size=c.shape) for c, e in zip(counts, budgets)]


def central_heatmap(
    users: UserDistributions,
    epsilon: float,
    *,
    w: int = 20,
    gamma: float = DEFAULT_GAMMA,
    rng: RngLike = None,
) -> HeatmapRelease:
    """eps-DP sparse EMD aggregation in the central model (seed 000, Alg. 1-2, Thm 3.1).

    Parameters
    ----------
    users : UserDistributions
        Each user's distribution over the grid's pixels (l1 norm 1).
    epsilon : float
        Total privacy budget, > 0.
    w : int, default 20
        Children kept per level by Reconstruct; also sets the start level floor(log2 sqrt(w)).
    gamma : float, default 1/sqrt(2)
        Budget decay rate across levels (Sec. 4).
    rng : int, Generator or None
        Source of the Laplace noise (research path).

    Returns
    -------
    HeatmapRelease
        ``estimate`` = s_hat / ||s_hat||_1 on the full grid with an eps-DP (pure, central,
        add/remove one user) guarantee. The number of users is treated as public.
    """
    _iv(users, epsilon, w, gamma)
    grid = users.grid
    start, top = measured_levels(grid, w)
    budgets = level_budgets(epsilon, start, top, gamma)
    counts = noisy_counts(users.aggregate(), grid, budgets, start, rng)
    raw = reconstruct(counts, grid, start, w)
    params = {
        "mechanism": "DPSparseEMDAgg",
        "noise": "laplace",
        "w": int(w),
        "gamma": float(gamma),
        "start_level": start,
        "top_level": top,
        "level_epsilons": [float(e) for e in budgets],
    }
    guarantee = Guarantee(
        notion="pure",
        model="central",
        epsilon=float(epsilon),
        delta=0.0,
        neighbour="add/remove one user",
        theorem=THEOREM,
        parameters=params,
    )
    return HeatmapRelease(grid, normalise(raw), raw, guarantee, params)
