"""Distances between heatmaps: exact EMD, KL, CC, SIM, MSE and L1 ([Ghazi23]_ Sec. 4).

[Ghazi23]_ evaluates an estimate against the true heatmap with the saliency metrics of
Bylinskii, Judd, Oliva, Torralba and Durand ([BJO+19]_): similarity (SIM), Pearson's
correlation coefficient (CC), KL divergence and the Earth Mover's Distance (EMD). MSE and L1
are added for convenience.

Conventions
-----------
* Every metric first normalises both arguments to sum 1 (the arrays must be non-negative with
  a positive total), so it compares *distributions*: scale does not matter.
* The caller decides what to compare: raw distributions (the aggregate ``s`` against the
  estimate ``s_hat``) or heatmaps after the Gaussian filter of Sec. 2.3
  (:func:`shuffledp.analyzers.heatmap.render.gaussian_heatmap`). The paper reports metrics between
  heatmaps; the EMD bound of Thm 3.1 is about the raw distributions.
* The asymmetric metric (KL) takes the ground truth first: ``kl(truth, estimate)`` is
  KL(truth || estimate).
* EMD uses the geometry of :mod:`shuffledp.grid`: pixels are square and the grid's longer side
  has length 1, so pixels (r, c) and (r', c') are (|r - r'| + |c - c'|) / max(width, height)
  apart. On a 2^l x 2^l grid this is the unit-square l1 metric of [Ghazi23]_ Sec. 2.1.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
.. [BJO+19] Bylinskii et al. (2019), "Evaluation metrics for saliency models" -- full entry in
   docs/references.md
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.encoders.metric.transport import METHODS, GridL1, transport_cost
from shuffledp.grid import Grid

#: The regulariser of the KL divergence: double-precision machine epsilon (2.22e-16), the
#: ``eps`` of MATLAB used by the MIT saliency benchmark code that [BJO+19]_ describes.
KL_EPS: float = float(np.finfo(np.float64).eps)

__all__ = ["EMD_METHODS", "KL_EPS", "all_metrics", "cc", "emd", "kl", "l1", "mse", "sim"]


# --------------------------------------------------------------------------- validation


def _iv_dist(name: str, a: Any) -> np.ndarray:
    """Validate one non-negative finite array with positive total; return it normalised."""
    arr = v.nonnegative_array(name, a)
    total = arr.sum()
    if not total > 0:
        raise ValueError(f"{name} must have a positive total, got sum({name})={total!r}")
    return arr / total


def _iv_pair(
    p: Any, q: Any, names: tuple[str, str] = ("p", "q")
) -> tuple[np.ndarray, np.ndarray]:
    a = _iv_dist(names[0], p)
    b = _iv_dist(names[1], q)
    if a.shape != b.shape:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same shape, got "
            f"{names[0]}.shape={a.shape} and {names[1]}.shape={b.shape}"
        )
    return a, b


# --------------------------------------------------------------------------- EMD


#: the solvers of :func:`emd`: those of
#: :func:`shuffledp.encoders.metric.transport.transport_cost`
EMD_METHODS = METHODS


def emd(p: Any, q: Any, grid: Grid | None = None, *, method: str = "auto") -> float:
    r"""Exact Earth Mover's Distance with l1 ground distance on the grid.

    .. math::

        \mathrm{EMD}(p, q) = \min_{\gamma \ge 0,\ \gamma 1 = p,\ \gamma^T 1 = q}
            \sum_{x, y} \gamma(x, y)\, \|x - y\|_1

    ([Ghazi23]_ Sec. 2.1), after normalising ``p`` and ``q`` to sum 1. Distances are in units
    of the grid's longer side: neighbouring pixels are ``1 / max(width, height)`` apart, so the
    result lies in [0, (width + height - 2) / max(width, height)].

    With an l1 ground distance on a grid, every transport plan can be routed as unit steps
    between 4-neighbours at the same cost, so the EMD equals the min-cost flow on the
    4-neighbour grid graph with unit arc costs and supplies ``p - q`` (Ling and Okada, "An
    efficient Earth Mover's Distance algorithm for robust histogram comparison", TPAMI 2007:
    EMD-L1). That flow problem has H W nodes and about 4 H W arcs (instead of (H W)^2
    transport variables). It is the grid case of the package's one exact transport solver,
    :func:`shuffledp.encoders.metric.transport.transport_cost` with the structured cost
    :class:`~shuffledp.encoders.metric.transport.GridL1`:

    * ``method="auto"`` (default): the fastest exact solver for the input. On sparse maps
      (raw aggregates of a few thousand points), the transport problem between the supports
      of ``p`` and ``q`` (or, when much smaller, from the cells where ``p > q`` to those
      where ``p < q``) with their l1 distances, solved by POT's ``ot.emd2``; both are exact
      and equal to the grid flow's optimum. Otherwise (Gaussian-filtered heatmaps, every
      pixel non-zero) the grid flow by our network simplex. The switch is at
      ``SUPPORT_ARCS_FACTOR (H W)^1.5`` transport arcs
      (:mod:`shuffledp.encoders.metric.transport`).
    * ``method="network_simplex"``: the grid flow by the primal network simplex compiled with
      numba (unit costs, so the potentials are integers and optimality is decided exactly;
      flows in float64), started from the optimal tree of the same problem on the grid of
      2x2 blocks, itself solved so (a multiscale start; any spanning tree is a feasible
      basis, so the start changes the pivots, not the optimum). Agrees with POT's
      ``ot.emd2`` on the dense l1 cost matrix to ~1e-14 relative.
    * ``method="pot"``: always that transport problem by POT (refused above
      ``SUPPORT_MAX_ARCS`` arcs).
    * ``method="highs"``: the grid flow as a sparse LP through
      :func:`scipy.optimize.linprog` (HiGHS interior point with crossover), supplies scaled
      to O(1) per pixel so HiGHS's absolute tolerances are negligible (~1e-12 relative).

    Grids with a single row or column use the closed form ``sum |cumsum(p - q)|``.

    Cost, ``python bench/emd_timing.py`` on the shared 2-core development machine (load
    average ~12 during the run, so seconds are upper bounds; ratios are medians of per-repeat
    ratios in the same run, +-15% between runs). "Sparse": two 1,000-point synthetic
    aggregates (median of 3 seeds), "filtered": the same after the Gaussian filter, every
    pixel non-zero; "POT" is ``ot.emd2`` on the supports of ``p`` and ``q``, cost matrix
    included. The first call in a fresh environment also pays ~3 s of numba compilation,
    cached on disk afterwards.

    ========  ============  =============  ==============  ===========================
    grid      auto / POT,   grid flow /    filtered: auto  filtered: POT on supports of
              sparse        POT, sparse    (grid flow)     (p - q)+ and (p - q)-
    ========  ============  =============  ==============  ===========================
    64x64     0.39          0.55           0.05 s          6 s (4.2M arcs; ratio 0.008)
    128x128   1.01          1.5            0.25 s          not run (67M arcs)
    256x256   1.05          7.8            2.0 s           not run (1.1e9 arcs)
    ========  ============  =============  ==============  ===========================

    On the sparse 128x128 and 256x256 maps "auto" is POT on the supports, so its ratio is 1
    up to the cost of building the cost matrix (~2%) and the run's noise (on 64x64 it is the
    grid flow); from the centre comb instead of the
    multiscale start the filtered 256x256 grid flow took 8-10x longer.

    Parameters
    ----------
    p, q : array_like, shape (height, width)
        Non-negative, finite, positive total. Both are normalised to sum 1 first, so the
        totals need not match.
    grid : Grid, optional
        If given, ``p`` and ``q`` must have shape ``(grid.height, grid.width)``. If None the
        grid is taken from ``p.shape`` (a 1-D array is one row).
    method : {"auto", "network_simplex", "pot", "highs"}
        Solver; all are exact (above).

    Returns
    -------
    float
        The EMD between the normalised ``p`` and ``q``.

    Raises
    ------
    ValueError
        On a shape mismatch, NaN/infinite or negative entries, or a zero total, naming the
        argument; on an unknown ``method``; with ``method="pot"`` above ``SUPPORT_MAX_ARCS``.
    RuntimeError
        With ``method="pot"``, if POT's solver stops before the optimum (``"auto"`` then
        solves the problem with our network simplex instead).

    References
    ----------
    [Ghazi23]_ Sec. 2.1 (the l1 EMD on the unit square); [BJO+19]_ (EMD as a saliency metric).
    """
    if method not in EMD_METHODS:
        raise ValueError(f"method must be one of {EMD_METHODS}, got method={method!r}")
    a, b = _iv_pair(p, q)
    if a.ndim == 1:
        a, b = a[None, :], b[None, :]
    if a.ndim != 2:
        raise ValueError(f"p and q must be 2-D (height, width) arrays, got p.shape={a.shape}")
    if grid is not None:
        if not isinstance(grid, Grid):
            raise TypeError(f"grid must be a Grid or None, got grid={grid!r}")
        if a.shape != (grid.height, grid.width):
            raise ValueError(
                f"p and q must have shape (height, width)=({grid.height}, {grid.width}) "
                f"for grid {grid}, got p.shape={a.shape}"
            )
    height, width = a.shape
    unit = 1.0 / max(height, width)
    # HiGHS: supplies scaled to O(1) per pixel (the optimum scales linearly) keep its absolute
    # tolerances (1e-7) negligible. The other solvers take the distributions as they are.
    scale = float(a.size) if method == "highs" else 1.0
    return transport_cost(a * scale, b * scale, GridL1(height, width), method=method) \
        / scale * unit


# --------------------------------------------------------------------------- [BJO+19] metrics


def sim(p: Any, q: Any) -> float:
    r"""Similarity (histogram intersection) of [BJO+19]_: :math:`\sum_i \min(P_i, Q_i)`.

    ``P`` and ``Q`` are ``p`` and ``q`` normalised to sum 1; SIM is 1 - total variation
    distance, in [0, 1], 1 iff the distributions are equal ([Ghazi23]_ App. B). Symmetric.

    Parameters
    ----------
    p, q : array_like, same shape
        Non-negative, finite, positive total; each is normalised to sum 1.

    Returns
    -------
    float
        SIM in [0, 1].

    Raises
    ------
    TypeError
        If ``p`` or ``q`` is not a numeric array.
    ValueError
        On a shape mismatch, NaN/infinite or negative entries, or a zero total.

    References
    ----------
    [BJO+19]_ (SIM); [Ghazi23]_ App. B.
    """
    a, b = _iv_pair(p, q)
    return float(np.minimum(a, b).sum())


def cc(p: Any, q: Any) -> float:
    r"""Pearson's linear correlation coefficient of [BJO+19]_.

    :math:`\mathrm{CC} = \mathrm{cov}(P, Q) / (\sigma(P)\, \sigma(Q))` over all pixels, in
    [-1, 1]. Symmetric and scale-invariant. If exactly one map is constant the correlation
    is undefined and 0.0 is returned; two constant maps (identical once normalised) give 1.0.

    Parameters
    ----------
    p, q : array_like, same shape
        Non-negative, finite, positive total; each is normalised to sum 1.

    Returns
    -------
    float
        CC in [-1, 1].

    Raises
    ------
    TypeError
        If ``p`` or ``q`` is not a numeric array.
    ValueError
        On a shape mismatch, NaN/infinite or negative entries, or a zero total.

    References
    ----------
    [BJO+19]_ (CC); [Ghazi23]_ Sec. 4.
    """
    a, b = _iv_pair(p, q)
    a = a.ravel() - a.mean()
    b = b.ravel() - b.mean()
    na = float(np.sqrt(np.dot(a, a)))
    nb = float(np.sqrt(np.dot(b, b)))
    # a map is "constant" when its spread is at rounding level of its mean (1 / size)
    tol = 1e-12 / a.size
    if na <= tol and nb <= tol:
        return 1.0
    if na <= tol or nb <= tol:
        return 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def kl(truth: Any, estimate: Any, *, eps: float = KL_EPS) -> float:
    r"""KL divergence KL(truth || estimate) with the regulariser of [BJO+19]_.

    .. math::

        \mathrm{KL}(Q \,\|\, P) = \sum_i Q_i \log\left(\epsilon + \frac{Q_i}{\epsilon + P_i}
        \right)

    with ``Q`` the normalised ground truth, ``P`` the normalised estimate and
    :data:`KL_EPS` = 2.22e-16 by default (double machine epsilon, as in the MIT saliency
    benchmark). The regulariser keeps the value finite where the estimate is zero; such a
    pixel costs ``Q_i log(Q_i / eps)`` (at most ``36 Q_i``), so KL punishes missing mass
    hard. Natural logarithm. Not symmetric: the ground truth goes first.

    Parameters
    ----------
    truth : array_like
        The ground truth Q: non-negative, finite, positive total (normalised to sum 1).
    estimate : array_like, same shape as ``truth``
        The estimate P, same conditions.
    eps : float, default KL_EPS
        The regulariser epsilon, finite and >= 0.

    Returns
    -------
    float
        KL(truth || estimate) in nats.

    Raises
    ------
    TypeError
        If ``truth`` or ``estimate`` is not a numeric array.
    ValueError
        On a shape mismatch, NaN/infinite or negative entries, a zero total, or an ``eps``
        that is negative or not finite.

    References
    ----------
    [BJO+19]_ (KL with the MIT benchmark's regulariser); [Ghazi23]_ Sec. 4.
    """
    q_, p_ = _iv_pair(truth, estimate, names=("truth", "estimate"))
    e = float(eps)
    if not (np.isfinite(e) and e >= 0):
        raise ValueError(f"eps must be finite and >= 0, got eps={eps!r}")
    mask = q_ > 0
    qm = q_[mask]
    with np.errstate(divide="ignore"):
        val = np.sum(qm * np.log(e + qm / (e + p_[mask])))
    return float(val)


def mse(p: Any, q: Any) -> float:
    r"""Mean squared error :math:`\frac{1}{N} \sum_i (P_i - Q_i)^2` of the normalised maps.

    Parameters
    ----------
    p, q : array_like, same shape
        Non-negative, finite, positive total; each is normalised to sum 1.

    Returns
    -------
    float
        The mean over the N pixels of the squared difference.

    Raises
    ------
    TypeError
        If ``p`` or ``q`` is not a numeric array.
    ValueError
        On a shape mismatch, NaN/infinite or negative entries, or a zero total.

    References
    ----------
    [Ghazi23]_ Sec. 4 (the evaluation; MSE is added for convenience, not a metric of the paper).
    """
    a, b = _iv_pair(p, q)
    return float(np.mean((a - b) ** 2))


def l1(p: Any, q: Any) -> float:
    r"""l1 distance :math:`\sum_i |P_i - Q_i|` of the normalised maps (twice the TV distance).

    Parameters
    ----------
    p, q : array_like, same shape
        Non-negative, finite, positive total; each is normalised to sum 1.

    Returns
    -------
    float
        The l1 distance, in [0, 2].

    Raises
    ------
    TypeError
        If ``p`` or ``q`` is not a numeric array.
    ValueError
        On a shape mismatch, NaN/infinite or negative entries, or a zero total.

    References
    ----------
    [Ghazi23]_ Sec. 4 (the evaluation; l1 is added for convenience, not a metric of the paper).
    """
    a, b = _iv_pair(p, q)
    return float(np.abs(a - b).sum())


def _emd(p: Any, q: Any, grid: Grid | None) -> float:
    # all_metrics' keyword ``emd`` shadows the function inside it
    return emd(p, q, grid)


def all_metrics(truth: Any, estimate: Any, grid: Grid | None = None, *,
                emd: bool = True) -> dict[str, float | None]:
    """All metrics of the estimate against the ground truth.

    Parameters
    ----------
    truth, estimate : array_like, shape (height, width)
        Non-negative with positive totals; both are normalised to sum 1. Pass raw
        distributions or Gaussian-filtered heatmaps, as the experiment requires.
    grid : Grid, optional
        Checked against the shapes and used for the EMD geometry.
    emd : bool, default True
        Solve the exact EMD (the only slow metric: seconds on a dense 256x256 heatmap);
        ``False`` reports ``"emd": None``.

    Returns
    -------
    dict
        ``{"emd", "kl", "cc", "sim", "mse", "l1"}`` as floats; ``kl`` is
        KL(truth || estimate). Lower is better for emd, kl, mse and l1; higher for cc and sim.

    Raises
    ------
    TypeError
        If ``truth`` or ``estimate`` is not a numeric array, or (with ``emd=True``) ``grid``
        is not a Grid.
    ValueError
        On a shape mismatch (with each other or with ``grid``), NaN/infinite or negative
        entries, or a zero total.

    References
    ----------
    [Ghazi23]_ Sec. 4 (EMD, KL, CC, SIM); [BJO+19]_ (the saliency metrics).
    """
    q_, p_ = _iv_pair(truth, estimate, names=("truth", "estimate"))
    return {
        "emd": _emd(q_, p_, grid) if emd else None,
        "kl": kl(q_, p_),
        "cc": cc(q_, p_),
        "sim": sim(q_, p_),
        "mse": mse(q_, p_),
        "l1": l1(q_, p_),
    }
