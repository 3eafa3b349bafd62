"""The central private heatmap: DPSparseEMDAgg ([Ghazi23]_ Alg. 1) with Reconstruct (Alg. 2).

Levels ``start..L`` are measured with start = floor(log2 sqrt(w)) ([Ghazi23]_ Sec. 4, capped at
the leaf level of tiny grids); level i gets eps_i = eps * gamma^|i - start| / Z (proof of
Thm 3.1).

Exact noise on a fine grid. The textbook mechanism adds floating-point Laplace(1/eps_i) to the
real counts P_i s, whose low-order bits can reveal the true value ([Mironov12]_). Here every
user's level vector is scaled by the *resolution* R (a power of two, default 2^20) and rounded
to integers with the largest-remainder rule (each level sums to exactly R, |error| < 1/R per
cell), the integer level sums receive exact discrete Laplace noise DL(exp(-s_i/t_i)) with
s_i/t_i <= eps_i / Delta_i ([CKS20]_ Alg. 2; :func:`shuffledp.encoders.noise.laplace.dl_rational`),
and the result is divided by R (exact in binary floating point). The l1-sensitivity of one
user's rounded level vector is Delta_i = R under add/remove or zero-out and 2R under
replace-one (:meth:`~shuffledp.accounting.guarantee.Neighbour.level_sensitivity`), so level i is
eps_i-DP and the release is eps-DP by basic composition; Reconstruct is post-processing. As R
grows this converges to Laplace(Delta / eps_i) on the real counts, i.e. [Ghazi23]_ Alg. 1; it
is the same construction as the shuffle protocol's with B = R, so the two are like for like.

Randomness: ``rng=None`` draws every noise word from the cryptographically secure generator
(a private release). A seed or Generator makes the run reproducible; such a release is marked
"reproducible evaluation, not a private release".

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
.. [CKS20] Canonne et al. (2020), "The discrete Gaussian for DP" -- full entry in
   docs/references.md
.. [Mironov12] Mironov (2012), "Least significant bits for DP" -- full entry in docs/references.md
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.budget import (
    BUDGET_RULES,
    DEFAULT_GAMMA,
    auto_level_budgets,
    level_budgets,
)
from shuffledp.accounting.events import DiscreteLaplace, PolyaSum
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR, Guarantee, Neighbour
from shuffledp.analyzers.heatmap.reconstruct import DEFAULT_TIE_BREAK, reconstruct
from shuffledp.analyzers.heatmap.release import HeatmapRelease, normalise
from shuffledp.encoders.encoder import level_entries
from shuffledp.encoders.noise.laplace import discrete_laplace_for, dl_rational
from shuffledp.grid import Grid
from shuffledp.pyramid import n_coordinates, unflatten
from shuffledp.randomness import SEEDED_NOTE, RngLike, is_seeded
from shuffledp.users import UserDistributions

THEOREM = (
    "Ghazi et al., Differentially Private Heatmaps, AAAI 2023: Alg. 1-2, Thm 3.1 "
    "(per-level noise, basic composition); exact discrete Laplace of Canonne, Kamath and "
    "Steinke, NeurIPS 2020, Alg. 2, on the integer level sums at resolution R"
)
DEFAULT_RESOLUTION = 1 << 20


def _iv(users: Any, epsilon: float, w: int, gamma: float, neighbour: Any,
        resolution: Any, budget: Any = "auto", public_n: Any = None) -> Neighbour:
    v.choice("budget", budget, BUDGET_RULES)
    if public_n is not None:
        v.count("public_n", public_n, 1)
    if not isinstance(users, UserDistributions):
        raise TypeError(f"users must be a UserDistributions, got {type(users).__name__}")
    v.positive("epsilon", epsilon)
    v.count("w", w, 1)
    v.positive("gamma", gamma)
    r = v.bounded_count("resolution", resolution, 1, 1 << 40)
    if r & (r - 1):
        raise ValueError(
            f"resolution must be a power of two in [1, 2^40], got resolution={resolution!r}"
        )
    return Neighbour.parse(neighbour)


def measured_levels(grid: Grid, w: int) -> tuple[int, int]:
    """(start, top) of the measured levels for ``grid`` and ``w`` (:meth:`Grid.measured_levels`).

    Parameters
    ----------
    grid : Grid
        The pixel grid (depth L).
    w : int
        Children kept per level by Reconstruct, >= 1.

    Returns
    -------
    tuple of int
        (start, top) = (min(floor(log2 sqrt(w)), L), L).

    Raises
    ------
    ValueError
        If ``w`` is not an integer >= 1 (:func:`shuffledp.grid.start_level`).

    References
    ----------
    [Ghazi23]_ Alg. 1 (the levels measured start at floor(log2 sqrt(w))).
    """
    return grid.measured_levels(w)


def noisy_counts(
    users: UserDistributions,
    budgets: Sequence[float] | np.ndarray,
    start: int,
    *,
    neighbour: Neighbour | str = DEFAULT_NEIGHBOUR,
    resolution: int = DEFAULT_RESOLUTION,
    rng: RngLike = None,
) -> list[np.ndarray]:
    """Noisy level counts of levels ``start..L`` in user-mass units ([Ghazi23]_ Alg. 1, l. 4-7).

    Integer level sums of the users' vectors rounded at ``resolution`` R, plus exact
    DL noise calibrated to eps_i and the neighbour relation's sensitivity, divided by R.

    Parameters
    ----------
    users : UserDistributions
        Each user's distribution over the grid's pixels.
    budgets : sequence of float
        eps_i for the levels ``start..L`` (one per level, as from
        :func:`shuffledp.accounting.budget.level_budgets`).
    start : int
        First measured level.
    neighbour : Neighbour or str, default DEFAULT_NEIGHBOUR (zero-out)
        Sets the level sensitivity (R under zero-out and add/remove, 2R under replace-one).
    resolution : int, default 2^20
        R: the users' level vectors are rounded to multiples of 1/R.
    rng : None, SecureRandom, int or Generator
        ``None``: secure noise. A seed or Generator: reproducible evaluation.

    Returns
    -------
    list of numpy.ndarray
        One noisy count array per level ``start..L``, in user-mass units.

    Raises
    ------
    ValueError
        If ``budgets`` does not hold one budget per level, ``n_users * resolution`` reaches
        2^53 (the exact float sum would round), or ``neighbour`` is unknown.

    References
    ----------
    [Ghazi23]_ Alg. 1, l. 4-7; [CKS20]_ (exact discrete Laplace sampling, without the
    floating-point attack of [Mironov12]_).
    """
    nb = Neighbour.parse(neighbour)
    grid = users.grid
    n_lev = grid.depth - start + 1
    if len(budgets) != n_lev:
        raise ValueError(f"need {n_lev} level budgets, got {len(budgets)}")
    m = n_coordinates(grid, start)
    if users.n_users * resolution >= 1 << 53:
        raise ValueError(
            f"n_users * resolution = {users.n_users * resolution} must stay below 2^53"
        )
    _, coord, value = level_entries(users, start, resolution, "largest_remainder")
    sums = np.bincount(coord, weights=value, minlength=m).astype(np.int64)  # exact: < 2^53
    sizes = [grid.level_size(i) for i in range(start, grid.depth + 1)]
    eps_coord = np.repeat(np.asarray(budgets, dtype=float), sizes)
    noise = discrete_laplace_for(eps_coord, nb.level_sensitivity(resolution), m, rng)
    return unflatten(grid, (sums + noise) / resolution, start)


def central_heatmap(
    users: UserDistributions,
    epsilon: float,
    *,
    w: int = 20,
    gamma: float = DEFAULT_GAMMA,
    neighbour: Neighbour | str = DEFAULT_NEIGHBOUR,
    resolution: int = DEFAULT_RESOLUTION,
    rng: RngLike = None,
    budget: str = "auto",
    public_n: int | None = None,
) -> HeatmapRelease:
    """eps-DP sparse EMD aggregation in the central model ([Ghazi23]_ Alg. 1-2, Thm 3.1).

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
    neighbour : Neighbour or str, default DEFAULT_NEIGHBOUR (zero-out)
        ZERO_OUT (the toolkit's one default,
        :data:`~shuffledp.accounting.guarantee.DEFAULT_NEIGHBOUR`: n public, the relation of
        the shuffle protocol's default, so the two are like for like) or ADD_REMOVE (n
        private; the same noise: level sensitivity 1 for both), or REPLACE_ONE
        (sensitivity 2). The guarantee names the relation; the release holds no count of
        users under any of them.
    resolution : int, default 2^20
        R: users' level vectors are rounded to multiples of 1/R before the exact noise.
    rng : None, SecureRandom, int or Generator
        ``None``: cryptographically secure noise (a private release). A seed or Generator:
        reproducible evaluation (the guarantee notes say it is not a private release).
    budget : {"auto", "paper"}, default "auto"
        The split of eps over the levels. "paper": eps_i = eps gamma^(i - start) / Z as
        printed ([Ghazi23]_ Sec. 4). "auto": the leaf level gets the share
        :func:`~shuffledp.accounting.budget.leaf_share` of public numbers (eps, the grid's
        pixels, and n when it is public) when that is more than the printed split gives it,
        the coarse levels split the rest as printed
        (:func:`~shuffledp.accounting.budget.auto_level_budgets`). Either split sums to eps:
        the same eps-DP mechanism.
    public_n : int, optional
        A public number of users for the "auto" rule under add/remove (where the data's n is
        private and is not used). Under zero-out and replace-one n is public and the data's
        own n is used; ``public_n`` is then ignored.

    Returns
    -------
    HeatmapRelease
        ``estimate`` = s_hat / ||s_hat||_1 on the full grid with a pure central guarantee
        under ``neighbour``.

    Raises
    ------
    TypeError
        If ``users`` is not a UserDistributions, or a number argument has the wrong type.
    ValueError
        If ``epsilon`` or ``gamma`` is not positive, ``w`` < 1, ``resolution`` is not a power
        of two in [1, 2^40], ``neighbour`` is unknown, ``budget`` is not "auto" or "paper",
        ``public_n`` < 1, or ``n_users * resolution`` >= 2^53.

    References
    ----------
    [Ghazi23]_ Alg. 1-2, Thm 3.1.
    """
    nb = _iv(users, epsilon, w, gamma, neighbour, resolution, budget, public_n)
    grid = users.grid
    start, top = measured_levels(grid, w)
    n_public = public_n if nb is Neighbour.ADD_REMOVE else users.n_users
    if budget == "auto":
        budgets = auto_level_budgets(epsilon, start, top, grid.n_pixels, n_public, gamma)
    else:
        budgets = level_budgets(epsilon, start, top, gamma)
    counts = noisy_counts(users, budgets, start, neighbour=nb, resolution=resolution, rng=rng)
    raw = reconstruct(counts, grid, start, w)
    sens = nb.level_sensitivity(resolution)
    effective = [sens * s / t for s, t in (dl_rational(float(e), sens) for e in budgets)]
    seeded = is_seeded(rng)
    params = {
        "mechanism": "DPSparseEMDAgg",
        "reconstruct_tie_break": DEFAULT_TIE_BREAK,
        "noise": "discrete_laplace_exact",
        "resolution": int(resolution),
        "w": int(w),
        "gamma": float(gamma),
        "budget_rule": budget,
        "leaf_share": float(budgets[-1] / float(epsilon)),
        "start_level": start,
        "top_level": top,
        "level_epsilons": [float(e) for e in budgets],
        "level_epsilons_effective": effective,
        "randomness": "seeded" if seeded else "secure",
    }
    guarantee = Guarantee(
        notion="pure",
        model="central",
        epsilon=float(epsilon),
        delta=0.0,
        neighbour=nb,
        theorem=THEOREM,
        parameters=params,
        notes=(SEEDED_NOTE,) if seeded else (),
        event=PolyaSum(levels=tuple(
            DiscreteLaplace(parameter=e / sens, sensitivity=sens,
                            dimension=grid.level_size(i), neighbour=nb)
            for i, e in zip(range(start, top + 1), effective, strict=True)),
            model="central", neighbour=nb),
    )
    return HeatmapRelease(grid, normalise(raw), raw, guarantee, params, levels=tuple(counts))
