r"""Dense EMD aggregation without a sparsity assumption ([Ghazi23]_ App. D.1, Thm D.1).

The algorithm of the proof of Thm D.1, in the toolkit's exact-noise form:

1. Snap. Every user's distribution is aggregated to the cells of pyramid level
   l* = floor(log2 sqrt(eps n)) (at most the leaf level L, at least 0), i.e. user j's input
   becomes P_{l*} p_j (the level-l* partition map of Def. 3.1). The side of a level-l* cell is
   2^-l* >= 1/sqrt(eps n), so the snap moves each unit of mass by at most one cell side.
2. Noise. The level-l* sum s = sum_j P_{l*} p_j receives Laplace noise of scale
   Delta / eps per cell (Delta = 1 under add/remove or zero-out, 2 under replace-one;
   [Ghazi23]_ Lemma 2.2). As in :mod:`shuffledp.analyzers.heatmap.central` the noise is exact:
   each user's level vector is scaled by the resolution R and rounded (largest remainder, so
   it sums to exactly R), the integer sums receive discrete Laplace noise
   DL(exp(-s/t)) with s/t <= eps / (Delta R) ([CKS20]_ Alg. 2), and the result is divided by
   R. One level, one noise draw: the release is eps-DP (post-processing follows).
3. Project. s_hat = argmin_{s' >= 0} ||s' - s_tilde||_EMD on the level-l* lattice, with the
   EMD norm of [Ghazi23]_ Sec. 2.1: ||w||_EMD = min EMD(p, q) + alpha ||r||_1 over
   p - q + r = w, ||p||_1 = ||q||_1, alpha the l1 diameter of the domain (2 on the unit
   square). With an l1 ground metric every transport plan routes along the 4-neighbour
   lattice at the same cost (Ling and Okada 2007), so the LP is the min-cost flow

   .. math::

       \min \sum_{(x, y)\ \text{adjacent}} h f_{xy} + \alpha \sum_x c_x
       \quad \text{s.t.} \quad
       \hat s_x = \tilde s_x + \sum_y (f_{yx} - f_{xy}) + c_x \ge 0,\ f, c \ge 0,

   with h the cell side (creating mass costs alpha; deleting it never helps, as s_hat is
   otherwise free). With one extra node D (arcs x -> D of cost 0 carry s_hat_x, arcs
   D -> x of cost alpha carry c_x) it is an uncapacitated transshipment whose star rooted at
   D is a feasible basis, solved exactly by the package's network simplex
   (``method="network_simplex"``, the default) or as an LP by SciPy's HiGHS
   (``method="highs"``, a reference; both agree to solver precision, ``tests/test_dense.py``;
   ``python bench/dense_vs_sparse.py --timing`` measures the ratio).
4. Output. s_hat spread evenly over the pixels of each level-l* cell, and a_hat = s_hat /
   ||s_hat||_1.

Error. By the triangle inequality ||s_hat - s||_EMD <= 2 ||nu||_EMD, and by Lemma 3.5 and
Cauchy-Schwarz E ||nu||_EMD <= sum_{i <= l*} side_i sum_{c in level i}
sqrt(2 |c| ) Delta / eps (|c| the number of level-l* cells inside c), which is
(l* + 1) 2^l* sqrt(2) Delta / eps on a 2^L x 2^L grid: O~(sqrt(n / eps)), so the normalised
error is O~(1 / sqrt(eps n)) (Thm D.1), matched by Cor. D.2 up to the logarithm.
:func:`dense_error_bound` evaluates this bound exactly for any grid.

Which algorithm. The sparse algorithm (Alg. 1-2, Thm 3.1, with w proportional to k) has
error O(sqrt(k) / (eps n)) on k-sparse data, the dense one O~(1 / sqrt(eps n)) whatever the
data; the dense one wins once k exceeds about eps n (times logarithms). With the fixed
w = 20 the CLI uses, the sparse algorithm also pays for approximating k > w occupied cells
by w, and the dense one wins from k of a few w once eps n is large enough (measured:
``python bench/dense_vs_sparse.py``). :func:`choose_algorithm` decides from public
quantities only (a public n, eps, the grid, w and a public sparsity prior k), so it costs no
privacy; its constant :data:`DENSE_CROSSOVER` is calibrated by that bench.

Departures from the text of App. D.1 (listed in docs/errata.md): the snap is written
"to the closest point in t" and "P_t p_i", and the optimisation "over R^{G_t}": both mean
the level-l* lattice G_{Delta*}; the snap's cost is at most 2 n / Delta* on the sum
(2 sqrt(n / eps) at Delta* = sqrt(eps n), at most 4 sqrt(n / eps) with l* rounded down; not
"sqrt(eps n)"); Lap(1/eps) per cell is the add/remove (and zero-out) calibration,
replace-one needs Lap(2/eps); l* must be an integer (floor here, so Delta* <= sqrt(eps n)).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
.. [CKS20] Canonne et al. (2020), "The discrete Gaussian for DP" -- full entry in
   docs/references.md
.. [LO07] Ling and Okada (2007), "An efficient EMD algorithm" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize
import scipy.sparse

from shuffledp import _validation as v
from shuffledp.accounting.events import DiscreteLaplace, PolyaSum
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.analyzers.heatmap.central import DEFAULT_RESOLUTION
from shuffledp.analyzers.heatmap.release import HeatmapRelease, normalise
from shuffledp.encoders.encoder import level_entries
from shuffledp.encoders.metric.transport import PRICING_TOL, _grid_arcs, _network_simplex
from shuffledp.encoders.noise.laplace import discrete_laplace_for, dl_rational
from shuffledp.grid import Grid
from shuffledp.randomness import SEEDED_NOTE, RngLike, is_seeded
from shuffledp.users import UserDistributions

__all__ = ["ALGORITHMS", "DENSE_CROSSOVER", "PROJECTION_METHODS", "AlgorithmChoice",
           "EMDProjection", "choose_algorithm", "dense_error_bound", "dense_heatmap",
           "dense_level", "emd_projection", "sparse_error_bound"]

THEOREM = (
    "Ghazi et al., Differentially Private Heatmaps, AAAI 2023: App. D.1, Thm D.1 (snap to "
    "level l* = floor(log2 sqrt(eps n)), one Laplace noise on the level sum, non-negative "
    "EMD projection as post-processing); exact discrete Laplace of Canonne, Kamath and "
    "Steinke, NeurIPS 2020, Alg. 2, on the integer level sum at resolution R"
)
#: the projection's solvers: the package's network simplex (exact, default) or HiGHS's LP
PROJECTION_METHODS = ("network_simplex", "highs")
#: what ``--algorithm`` accepts
ALGORITHMS = ("sparse", "dense", "auto")
#: kappa of :func:`choose_algorithm`: dense is chosen when
#: kappa * sparse_error_bound(k, w=w) > dense_error_bound, calibrated by
#: ``python bench/dense_vs_sparse.py`` (128x128 grid, eps n in {100, 1000, 10^4}, k from 4 to
#: every pixel, 5 runs: kappa in [11.9, 56.2] agrees with the measured winner on 20 of 21
#: cells; 26 is the geometric middle)
DENSE_CROSSOVER = 26.0


# ----------------------------------------------------------------------------- the level
def dense_level(grid: Grid, n: int, epsilon: float) -> int:
    """l* = floor(log2 sqrt(eps n)), clipped to the grid's levels 0..L ([Ghazi23]_ Thm D.1).

    Computed without rounding trouble as the largest l <= L with 4^l <= eps n (0 if
    eps n < 4).

    Parameters
    ----------
    grid : Grid
        The pixel grid (its depth L caps the level).
    n : int
        The number of users, a *public* number (under add/remove a public estimate).
    epsilon : float
        The release's epsilon, > 0.

    Returns
    -------
    int
        The level whose cells (side 2^-l* of the longer side) the users are snapped to.

    Raises
    ------
    TypeError
        If ``grid`` is not a Grid, or ``n``/``epsilon`` is not a number.
    ValueError
        If ``n`` < 1 or ``epsilon`` is not finite and > 0.

    References
    ----------
    [Ghazi23]_ App. D.1, proof of Thm D.1 (l* = log sqrt(eps n)).
    """
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a shuffledp.Grid, got grid={grid!r}")
    n = v.count("n", n)
    load = v.positive("epsilon", epsilon) * n
    level = 0
    while level < grid.depth and 4.0 ** (level + 1) <= load:
        level += 1
    return level


# ----------------------------------------------------------------------------- projection
@dataclass(frozen=True, eq=False)
class EMDProjection:
    """Output of :func:`emd_projection`.

    Attributes
    ----------
    estimate : ndarray, shape (rows, cols)
        s_hat >= 0, the minimiser.
    objective : float
        ||s_hat - s_tilde||_EMD, in the unit of ``side`` (cell steps when side = 1).
    created : float
        Mass created at cost alpha (0 unless the noisy total is below the mass needed to
        fill the negative cells).
    method : str
        The solver that ran.
    """

    estimate: np.ndarray
    objective: float
    created: float
    method: str


def emd_projection(noisy: Any, *, side: float = 1.0, alpha: float | None = None,
                   method: str = "network_simplex") -> EMDProjection:
    r"""The non-negative s_hat closest to ``noisy`` in the EMD norm ([Ghazi23]_ App. D.1).

    Solves min_{s_hat >= 0} ||s_hat - noisy||_EMD on the rows x cols lattice whose adjacent
    cells are ``side`` apart (l1 ground metric), with ||w||_EMD = min EMD(p, q) +
    alpha ||r||_1 over p - q + r = w ([Ghazi23]_ Sec. 2.1), as the min-cost flow of the
    module docstring.

    Parameters
    ----------
    noisy : array_like, shape (rows, cols)
        s_tilde, finite, any sign.
    side : float, default 1
        Distance between adjacent cells, > 0.
    alpha : float, optional
        Cost per unit of created or deleted mass, > 0; default the l1 diameter of the
        lattice's domain, (rows + cols) side (2 on the unit square).
    method : {"network_simplex", "highs"}
        The package's network simplex (exact, default) or SciPy's HiGHS on the same LP.

    Returns
    -------
    EMDProjection
        s_hat, the optimal value, the created mass and the solver.

    Raises
    ------
    TypeError
        If ``noisy`` is not numeric or a parameter not a number.
    ValueError
        If ``noisy`` is not a 2-D finite array, ``side`` or ``alpha`` not finite and > 0, or
        ``method`` unknown.
    RuntimeError
        If HiGHS fails (``method="highs"``).

    References
    ----------
    [Ghazi23]_ Sec. 2.1 (the EMD norm), App. D.1 (the LP); [LO07]_ (l1 EMD as a lattice
    flow).
    """
    try:
        s = np.asarray(noisy, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"noisy must be a numeric array, got noisy={noisy!r:.60}") from None
    if s.ndim != 2 or s.size == 0:
        raise ValueError(f"noisy must be a non-empty 2-D array, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("noisy must be finite; it has NaN or infinite entries")
    side = v.positive("side", side)
    rows, cols = s.shape
    alpha = (rows + cols) * side if alpha is None else v.positive("alpha", alpha)
    method = v.choice("method", method, PROJECTION_METHODS)
    m = rows * cols
    g_tail, g_head = _grid_arcs(rows, cols) if m > 1 else (np.empty(0, np.int64),) * 2
    cells = np.arange(m, dtype=np.int64)
    d = np.int64(m)
    # arcs: lattice (cost 1 step), x -> D (cost 0: s_hat_x), D -> x (cost alpha/side: created)
    tail = np.concatenate([g_tail, cells, np.full(m, d)])
    head = np.concatenate([g_head, np.full(m, d), cells])
    a_steps = alpha / side
    cost = np.concatenate([np.ones(g_tail.size), np.zeros(m), np.full(m, a_steps)])
    flat = s.ravel()
    if method == "network_simplex":
        flow = _simplex(flat, tail, head, cost, g_tail.size)
    else:
        flow = _highs(flat, tail, head, cost)
    k0 = g_tail.size
    est = np.maximum(flow[k0:k0 + m], 0.0).reshape(rows, cols)
    created = float(flow[k0 + m:].sum())
    objective = float(flow @ cost) * side
    return EMDProjection(estimate=est, objective=objective, created=created, method=method)


def _simplex(flat: np.ndarray, tail: np.ndarray, head: np.ndarray, cost: np.ndarray,
             k0: int) -> np.ndarray:
    """Network simplex from the star rooted at D: cell x hangs from D by x -> D (flow
    s_tilde_x >= 0) or D -> x (flow -s_tilde_x), a feasible basis."""
    m = flat.size
    pos = flat >= 0
    parent = np.full(m + 1, m, dtype=np.int64)
    parent[m] = -1
    cells = np.arange(m, dtype=np.int64)
    pred = np.where(pos, k0 + cells, k0 + m + cells).astype(np.int64)
    pred = np.append(pred, -1)
    dirn = np.where(pos, 1, -1).astype(np.int64)
    dirn = np.append(dirn, 0)
    flow = np.zeros(tail.size)
    flow[pred[:m]] = np.abs(flat)
    tol = PRICING_TOL * float(cost.max())
    _network_simplex(tail, head, cost, parent, pred, dirn, flow, tol)
    return flow


def _highs(flat: np.ndarray, tail: np.ndarray, head: np.ndarray,
           cost: np.ndarray) -> np.ndarray:
    """The same transshipment as an LP for HiGHS: node balance out - in = supply, D's row
    dropped (it is the negative sum of the others)."""
    m = flat.size
    n_arcs = tail.size
    arcs = np.arange(n_arcs)
    inc = scipy.sparse.csr_matrix(
        (np.concatenate([np.ones(n_arcs), -np.ones(n_arcs)]),
         (np.concatenate([tail, head]), np.concatenate([arcs, arcs]))), shape=(m + 1, n_arcs))
    res = scipy.optimize.linprog(cost, A_eq=inc[:m], b_eq=flat, bounds=(0, None),
                                 method="highs")
    if res.status != 0:
        raise RuntimeError(f"dense projection LP failed: HiGHS status {res.status}: "
                           f"{res.message}")
    return np.asarray(res.x, dtype=np.float64)


def _spread(coarse: np.ndarray, grid: Grid, level: int) -> np.ndarray:
    """Each level cell's mass spread evenly over its pixels, shape (height, width)."""
    dens = coarse / grid.cell_pixel_counts(level)
    side = 1 << (grid.depth - level)
    up = np.repeat(np.repeat(dens, side, axis=0), side, axis=1)
    return np.ascontiguousarray(up[: grid.height, : grid.width])


# ----------------------------------------------------------------------------- the mechanism
def _level_sums(users: UserDistributions, level: int, resolution: int) -> np.ndarray:
    """The exact integer sum over users of round(R P_level p_j) (largest remainder: each
    user's vector sums to R), flat, int64."""
    m = users.grid.level_size(level)
    _, coord, value = level_entries(users, level, resolution, "largest_remainder")
    first = coord < m  # level l* is the first block of levels l*..L
    return np.bincount(coord[first], weights=value[first], minlength=m).astype(np.int64)


def _public_n(users: UserDistributions, nb: Neighbour, n_public: Any) -> int:
    if n_public is not None:
        return v.count("n_public", n_public)
    if nb is Neighbour.ADD_REMOVE:
        raise ValueError(
            "n_public=None under add/remove: the number of users is private there, so the "
            "level l* = floor(log2 sqrt(eps n)) needs a public n (n_public=...) or an "
            "explicit level=...")
    return users.n_users  # replace-one and zero-out: n is public


def dense_heatmap(
    users: UserDistributions,
    epsilon: float,
    *,
    n_public: int | None = None,
    level: int | None = None,
    neighbour: Neighbour | str = Neighbour.ADD_REMOVE,
    resolution: int = DEFAULT_RESOLUTION,
    method: str = "network_simplex",
    rng: RngLike = None,
) -> HeatmapRelease:
    """eps-DP dense EMD aggregation in the central model ([Ghazi23]_ App. D.1, Thm D.1).

    Snap to level l* (:func:`dense_level`), exact discrete Laplace noise on the level sum
    calibrated to the neighbour relation, the non-negative EMD projection
    (:func:`emd_projection`), spread over the pixels and normalised (module docstring).

    Parameters
    ----------
    users : UserDistributions
        Each user's distribution over the grid's pixels (l1 norm 1).
    epsilon : float
        The privacy budget, > 0 (all of it on the one level).
    n_public : int, optional
        A public number of users for l*. Default: the data's n under replace-one and
        zero-out (where n is public); required under add/remove unless ``level`` is given.
    level : int, optional
        Use this level instead of l* (0..L).
    neighbour : Neighbour or str, default ADD_REMOVE
        ADD_REMOVE or ZERO_OUT (sensitivity 1), or REPLACE_ONE (sensitivity 2).
    resolution : int, default 2^20
        R, a power of two in [1, 2^40]: user vectors are rounded to multiples of 1/R.
    method : {"network_simplex", "highs"}
        Solver of the projection.
    rng : None, SecureRandom, int or Generator
        ``None``: cryptographically secure noise (a private release). A seed or Generator:
        reproducible evaluation (noted in the guarantee).

    Returns
    -------
    HeatmapRelease
        ``raw`` is s_hat on the pixels (user-mass units), ``estimate`` its normalisation, the
        guarantee pure central eps-DP under ``neighbour`` with its event.

    Raises
    ------
    TypeError
        If ``users`` is not a UserDistributions or a number has the wrong type.
    ValueError
        If ``epsilon`` is not positive, ``resolution`` not a power of two in [1, 2^40],
        ``level`` outside 0..L, ``neighbour`` or ``method`` unknown, ``n_users * resolution``
        >= 2^53, or no public n is available under add/remove.

    References
    ----------
    [Ghazi23]_ App. D.1, Thm D.1, Lemma 2.2; [CKS20]_ Alg. 2.
    """
    if not isinstance(users, UserDistributions):
        raise TypeError(f"users must be a UserDistributions, got {type(users).__name__}")
    epsilon = v.positive("epsilon", epsilon)
    nb = Neighbour.parse(neighbour)
    sens_unit = nb.level_sensitivity(1)  # raises for the non-l1 relations
    r = v.bounded_count("resolution", resolution, 1, 1 << 40)
    if r & (r - 1):
        raise ValueError(
            f"resolution must be a power of two in [1, 2^40], got resolution={resolution!r}")
    method = v.choice("method", method, PROJECTION_METHODS)
    grid = users.grid
    n_level: int | None
    if level is None:
        n_level = _public_n(users, nb, n_public)
        lev = dense_level(grid, n_level, epsilon)
    else:
        lev = v.count("level", level, 0)
        if lev > grid.depth:
            raise ValueError(f"level must be in 0..{grid.depth} for grid {grid}, "
                             f"got level={level!r}")
        n_level = None if n_public is None else v.count("n_public", n_public)
    if users.n_users * r >= 1 << 53:
        raise ValueError(f"n_users * resolution = {users.n_users * r} must stay below 2^53")
    shape = grid.level_shape(lev)
    m = shape[0] * shape[1]
    sums = _level_sums(users, lev, r)
    sens = nb.level_sensitivity(r)
    noise = discrete_laplace_for(epsilon, sens, m, rng)
    noisy = ((sums + noise) / r).reshape(shape)
    proj = emd_projection(noisy, side=grid.cell_side(lev),
                          alpha=(grid.width + grid.height) / max(grid.width, grid.height),
                          method=method)
    raw = _spread(proj.estimate, grid, lev)
    s_, t_ = dl_rational(epsilon, sens)
    effective = sens * s_ / t_
    seeded = is_seeded(rng)
    params = {
        "mechanism": "DenseEMDAgg",
        "noise": "discrete_laplace_exact",
        "resolution": int(r),
        "level": int(lev),
        "level_shape": [int(shape[0]), int(shape[1])],
        "n_public": n_level,
        "sensitivity_per_user": int(sens_unit),
        "epsilon_effective": float(effective),
        "projection": method,
        "projection_objective": proj.objective,
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
        event=PolyaSum(levels=(DiscreteLaplace(parameter=effective / sens, sensitivity=sens,
                                               dimension=m, neighbour=nb),),
                       model="central", neighbour=nb),
    )
    return HeatmapRelease(grid, normalise(raw), raw, guarantee, params)


# ----------------------------------------------------------------------------- choosing
def _noise_scale(epsilon: float, neighbour: Neighbour | str) -> float:
    return Neighbour.parse(neighbour).level_sensitivity(1) / v.positive("epsilon", epsilon)


def dense_error_bound(grid: Grid, n: int, epsilon: float,
                      neighbour: Neighbour | str = Neighbour.ADD_REMOVE) -> float:
    """The explicit expected-error bound of the proof of Thm D.1, normalised by n.

    snap + 2 E||nu||_EMD / n with snap = side(l*) (each unit of mass moves at most one cell
    side to the spread-out output) and E||nu||_EMD <= sum_{i=0}^{l*} side(i) sum_{c in level
    i} sqrt(2 N_c) b (Lemma 3.5 and Cauchy-Schwarz; N_c the number of level-l* cells in c,
    b = Delta / eps the Laplace scale). On a 2^L x 2^L grid this is
    2^-l* + 2 sqrt(2) (l* + 1) 2^l* b / n = O~(1 / sqrt(eps n)).

    Parameters
    ----------
    grid : Grid
    n : int
        Public number of users, >= 1.
    epsilon : float
        > 0.
    neighbour : Neighbour or str, default ADD_REMOVE
        Sets the sensitivity Delta (1, or 2 under replace-one).

    Returns
    -------
    float
        The bound on E EMD(s / n, s_hat / n) in the grid's distance unit (longer side 1).

    Raises
    ------
    TypeError, ValueError
        As :func:`dense_level`, or for an unknown or non-l1 ``neighbour``.

    References
    ----------
    [Ghazi23]_ App. D.1, proof of Thm D.1; Lemma 3.5.
    """
    lev = dense_level(grid, n, epsilon)
    b = _noise_scale(epsilon, neighbour)
    fine = np.ones(grid.level_shape(lev))
    total = 0.0
    counts = fine
    for i in range(lev, -1, -1):
        total += grid.cell_side(i) * float(np.sqrt(2.0 * counts).sum())
        if i:
            counts = _pool(counts)
    return float(grid.cell_side(lev) + 2.0 * total * b / n)


def _pool(a: np.ndarray) -> np.ndarray:
    rows, cols = a.shape
    p = np.zeros((-(-rows // 2) * 2, -(-cols // 2) * 2))
    p[:rows, :cols] = a
    return p.reshape(p.shape[0] // 2, 2, p.shape[1] // 2, 2).sum(axis=(1, 3))


def sparse_error_bound(k: int, n: int, epsilon: float,
                       neighbour: Neighbour | str = Neighbour.ADD_REMOVE, *,
                       w: int | None = None) -> float:
    """The two terms of Thm 3.1 for k-sparse data, with their constants set to 1.

    With ``w=None`` (Reconstruct keeps w proportional to k, the theorem's choice): the noise
    term sqrt(k) b / n. With a fixed ``w`` (as ``shuffledp heatmap --w`` runs it): the noise
    term sqrt(w) b / n plus, when k > w, the approximation term of the worst k-sparse data
    (k points spread evenly, so the best w-sparse approximation moves the mass of the k - w
    points it drops to the nearest of w cells of side 1/sqrt(w), mean l1 distance
    1 / (2 sqrt(w))): (1 - w/k) / (2 sqrt(w)). b = Delta / eps.

    Parameters
    ----------
    k : int
        Public prior on the number of occupied cells of the aggregate, >= 1.
    n : int
        Public number of users, >= 1.
    epsilon : float
        > 0.
    neighbour : Neighbour or str, default ADD_REMOVE
        Sets b = Delta / eps.
    w : int, optional
        Children kept per level by Reconstruct, >= 1.

    Returns
    -------
    float
        The bound on the normalised EMD error, up to the theorem's constant.

    Raises
    ------
    TypeError, ValueError
        If an argument is not a number in range, or ``neighbour`` unknown or non-l1.

    References
    ----------
    [Ghazi23]_ Thm 3.1 (lambda-approximation with additive O(sqrt(k) / (lambda eps n)) and
    w = O(k / lambda^2)), Thm C.1 (its matching lower bound).
    """
    k = v.count("k", k)
    n = v.count("n", n)
    b = _noise_scale(epsilon, neighbour)
    if w is None:
        return math.sqrt(k) * b / n
    w = v.count("w", w)
    tail = max(0.0, 1.0 - w / k) / (2.0 * math.sqrt(w))
    return math.sqrt(w) * b / n + tail


@dataclass(frozen=True)
class AlgorithmChoice:
    """What :func:`choose_algorithm` decided, from public quantities only.

    Attributes
    ----------
    algorithm : str
        "sparse" or "dense".
    sparse_bound, dense_bound : float
        :func:`sparse_error_bound` (with the w used) times :data:`DENSE_CROSSOVER`, and
        :func:`dense_error_bound`.
    k : int
        The sparsity prior used (the number of pixels when none was given).
    w : int or None
        The sparse algorithm's w the bound assumed.
    n_public : int
    reason : str
        One line for the report.
    """

    algorithm: str
    sparse_bound: float
    dense_bound: float
    k: int
    w: int | None
    n_public: int
    reason: str


def choose_algorithm(grid: Grid, n_public: int, epsilon: float, *, k: int | None = None,
                     w: int | None = 20,
                     neighbour: Neighbour | str = Neighbour.ADD_REMOVE) -> AlgorithmChoice:
    """Sparse (Alg. 1-2) or dense (App. D.1), from the two bounds' crossover; no privacy cost.

    Dense iff ``DENSE_CROSSOVER * sparse_error_bound(k, n, eps, w=w) >
    dense_error_bound(grid, n, eps)``. With w proportional to k the sparse error grows as
    sqrt(k) / (eps n) and the dense one is log(eps n) / sqrt(eps n), so dense wins once k
    exceeds about (log(eps n))^2 eps n; with a fixed w (the CLI's) the sparse algorithm also
    pays the approximation of k > w cells by w, and dense wins from k of a few w once eps n
    is large enough. Every input is public (``n_public``, ``epsilon``, the grid, ``w``, the
    prior ``k``), so the choice reveals nothing about the data.

    Parameters
    ----------
    grid : Grid
    n_public : int
        A public number of users, >= 1.
    epsilon : float
        > 0.
    k : int, optional
        Public prior on the sparsity (occupied cells of the aggregate); default the number of
        pixels (no sparsity assumed).
    w : int or None, default 20
        The sparse algorithm's w (None: w proportional to k, the theorem's choice).
    neighbour : Neighbour or str, default ADD_REMOVE
        Sets the sensitivity of both bounds.

    Returns
    -------
    AlgorithmChoice

    Raises
    ------
    TypeError, ValueError
        If an argument is not a number in range, ``grid`` not a Grid, or ``neighbour``
        unknown or non-l1.

    References
    ----------
    [Ghazi23]_ Thm 3.1 and Thm D.1 (the two bounds), Cor. D.2.
    """
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a shuffledp.Grid, got grid={grid!r}")
    n = v.count("n_public", n_public)
    kk = grid.n_pixels if k is None else v.count("k", k)
    w = None if w is None else v.count("w", w)
    sb = DENSE_CROSSOVER * sparse_error_bound(kk, n, epsilon, neighbour, w=w)
    db = dense_error_bound(grid, n, epsilon, neighbour)
    algo = "dense" if sb > db else "sparse"
    prior = "no sparsity prior: k = pixels" if k is None else f"sparsity prior k = {kk}"
    reason = (f"{algo}: kappa x sparse bound = {sb:.3g} vs dense bound {db:.3g} "
              f"(n = {n}, epsilon = {epsilon:g}, {prior}, w = {w}, "
              f"kappa = {DENSE_CROSSOVER:g})")
    return AlgorithmChoice(algo, float(sb), float(db), int(kk), w, n, reason)
