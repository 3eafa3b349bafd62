"""Concentrated DP of the (multivariate) discrete Gaussian and its conversion to (eps, delta).

Adding independent discrete Gaussian noise N_Z(0, sigma^2) to each coordinate of an integer
query whose values on two inputs differ by a vector of l2 norm D is rho-zCDP for that pair
with rho = D^2 / (2 sigma^2) ([CKS20]_ Thm 14, the multivariate discrete Gaussian; the
one-dimensional case is their Thm 4). A rho-zCDP pair is (eps, delta)-indistinguishable for

    delta(eps, rho) = inf_{a > 1} exp((a - 1)(a rho - eps)) / (a - 1) * (1 - 1/a)^a

([CKS20]_ Cor. 13). Every a > 1 gives a valid upper bound, so a numerical minimiser that
misses the infimum only makes the result conservative; :func:`zcdp_delta` also rounds up.

Metric version. If a user-level change at d_EM distance d moves the query by at most
L d in l2 (L the query's Lipschitz constant in integer units) and the metric is normalised
(d <= 1), the pair is (alpha d, delta(alpha d, rho_1 d^2))-indistinguishable with
rho_1 = L^2 / (2 sigma^2). :func:`metric_gaussian_delta` takes the maximum of that delta over
d in (0, 1] (on a fine grid and at d = 1, where it is largest: the test suite checks that the
curve increases with d), which is the delta of an (alpha, delta)-bounded d_EM-DP guarantee.

References
----------
.. [CKS20] Canonne et al. (2020), "The Discrete Gaussian for Differential Privacy", Thm 14,
   Cor. 13 -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import scipy.optimize

from shuffledp import _validation as v

#: relative upward rounding applied to every computed delta
_ROUND_UP = 1.0 + 1e-9


def _log_delta(log_am1: float, eps: float, rho: float) -> float:
    a = 1.0 + math.exp(log_am1)
    return (a - 1.0) * (a * rho - eps) - log_am1 + a * math.log1p(-1.0 / a)


def zcdp_delta(epsilon: float, rho: float) -> float:
    """delta such that rho-zCDP implies (epsilon, delta)-DP ([CKS20]_ Cor. 13), rounded up.

    Parameters
    ----------
    epsilon : float
        Target epsilon (>= 0).
    rho : float
        zCDP parameter (>= 0; 0 gives delta = 0).

    Returns
    -------
    float
        An upper bound on the smallest delta, at most 1.

    Raises
    ------
    ValueError
        ``epsilon`` or ``rho`` is not a number or is negative.

    References
    ----------
    [CKS20]_ Cor. 13.
    """
    eps = v.real("epsilon", epsilon)
    rho = v.real("rho", rho)
    if rho < 0 or eps < 0:
        raise ValueError(f"epsilon and rho must be >= 0, got epsilon={epsilon!r}, rho={rho!r}")
    if rho == 0:
        return 0.0
    res = scipy.optimize.minimize_scalar(
        _log_delta, bounds=(-30.0, 30.0), args=(eps, rho), method="bounded",
        options={"xatol": 1e-10},
    )
    best = min(float(res.fun), _log_delta(math.log(max(eps / rho, 1e-12)), eps, rho)
               if eps > 0 else math.inf)
    return min(1.0, math.exp(best) * _ROUND_UP)


def metric_gaussian_delta(alpha: float, lipschitz: float, sigma2: float,
                          grid: int = 256) -> float:
    """sup_{0 < d <= 1} delta(alpha d, rho_1 d^2), rho_1 = lipschitz^2 / (2 sigma2).

    Parameters
    ----------
    alpha : float
        Metric privacy parameter alpha (>= 0).
    lipschitz : float
        Lipschitz constant L of the query in integer units per unit of d_EM.
    sigma2 : float
        Variance parameter sigma^2 of the discrete Gaussian (> 0).
    grid : int
        Points of the grid over d in (0, 1] (the maximum is taken on it and at d = 1).

    Returns
    -------
    float
        The delta of the (alpha, delta)-bounded d_EM-DP guarantee.

    Raises
    ------
    ValueError
        ``lipschitz`` is not a number, ``sigma2`` is not > 0, or ``alpha`` is negative.

    References
    ----------
    [CKS20]_ Thm 14 and Cor. 13 (module notes: the metric version).
    """
    rho1 = v.real("lipschitz", lipschitz) ** 2 / (2.0 * v.positive("sigma2", sigma2))
    ds = np.linspace(1.0 / grid, 1.0, grid)
    return max(zcdp_delta(alpha * d, rho1 * d * d) for d in ds)


def metric_gaussian_sigma2(alpha: float, delta: float, lipschitz: float) -> Fraction:
    """The smallest dyadic sigma^2 (2^-20 relative steps) meeting (alpha, delta) on d in (0, 1].

    The result is a Fraction, ready for the exact sampler.

    Parameters
    ----------
    alpha : float
        Metric privacy parameter (> 0).
    delta : float
        Target delta, in (0, 1).
    lipschitz : float
        Lipschitz constant L of the query (> 0).

    Returns
    -------
    fractions.Fraction
        sigma^2, with :func:`metric_gaussian_delta` <= ``delta`` on the fine grid.

    Raises
    ------
    ValueError
        An argument is out of range, or no sigma^2 below 2^100 lipschitz^2 works.

    References
    ----------
    [CKS20]_ Thm 14 and Cor. 13.
    """
    alpha = v.positive("alpha", alpha)
    delta = v.probability("delta", delta)
    ell = v.positive("lipschitz", lipschitz)

    def ok(s2: float) -> bool:
        return metric_gaussian_delta(alpha, ell, s2, grid=32) <= delta

    lo, hi = ell**2 * 1e-12, ell**2
    while not ok(hi):
        hi *= 4.0
        if hi > ell**2 * 2.0**100:
            raise ValueError(f"no Gaussian scale meets alpha={alpha!r}, delta={delta!r}")
    while hi / lo > 1.0 + 2.0**-20:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    s2 = Fraction(hi).limit_denominator(1 << 20)
    while metric_gaussian_delta(alpha, ell, float(s2)) > delta:  # fine grid confirms
        s2 *= Fraction(1025, 1024)
    return s2


__all__ = ["metric_gaussian_delta", "metric_gaussian_sigma2", "zcdp_delta"]
