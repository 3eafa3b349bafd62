"""Exact privacy curves of shuffled k-RR on specific data sets: lower bounds for every analysis.

A shuffle-DP bound must hold for every pair of neighbouring data sets, so the exact
hockey-stick divergence of the shuffled k-RR histograms on *one* pair is a lower bound on any
valid bound for k-RR (and, for k = 2, for every eps0-LDP randomizer). Two families of data sets
are computed exactly here, in O(n) each; user 1 holds x1^0 or x1^1 and the n - 1 others hold

``"x0"``
    x1^0 (the worst case of the adversarial searches for binary randomized response);
``"third"``
    a third value w (k = 3 only), where the blanket bound of
    :mod:`shuffledp.accounting.amplification.krr_shuffle` is attained in the exhaustive small-n
    checks.

With the others i.i.d. with law pi, the multinomial ratio identity gives, for a histogram h,
P(h) = Mult_n(h; pi) sum_y R0(y) h_y / (n pi_y) and the same with R1 for Q, so the ratio
depends on (a, b) = (h_{x1^0}, h_{x1^1}) only (and on c = a + b through the other counts):

    "x0":    P = M(a, b),  Q = M(a, b) (n - c + a/p + p (c - a)) / n,
             c ~ Bin(n, (p + 1) alpha), a | c ~ Bin(c, p/(p + 1));
    "third": P = M(a, b) (p a + (c - a) + (n - c)/p) / n, Q its mirror image,
             c ~ Bin(n, 2 alpha), a | c ~ Bin(c, 1/2);

each a linear function of a for fixed c, so every conditional sum over a is a binomial tail
(regularised incomplete beta). Both directions D(P||Q) and D(Q||P) are computed; the curve
is their maximum.

References
----------
.. [BBGN19] Balle et al. (2019), "The Privacy Blanket of the Shuffle Model" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import betaincc
from scipy.stats import binom

from shuffledp import _validation as v
from shuffledp.accounting.amplification._common import (
    _binom_sf,
    _iv_k,
    _iv_rtol,
    _iv_shuffle,
    _support,
)

FAMILIES = ("x0", "third")
_FP_REL = 1e-10


def _head(j: np.ndarray, c: np.ndarray, theta: float) -> np.ndarray:
    """P[Bin(c, theta) <= j] = 1 - I_theta(j + 1, c - j), without the subtraction."""
    jj = np.clip(j, 0, np.maximum(c - 1, 0))
    out = betaincc((jj + 1).astype(float), np.maximum(c - jj, 1).astype(float), theta)
    out = np.where(j >= c, 1.0, out)
    return np.where(j < 0, 0.0, out)


def _positive_part(c: np.ndarray, theta: float, K0: np.ndarray, K1: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """sum_a Bin(c, theta)(a) (K0 + K1 a)^+ for each c (K0 per c, K1 scalar), with a
    floating-point allowance. sum_{a >= j} a Bin(c, theta)(a) = c theta P[Bin(c-1, theta) >= j-1].
    """
    if K1 > 0:  # positive from a* = floor(-K0/K1) + 1 on
        j = np.clip(np.floor(-K0 / K1).astype(np.int64) + 1, 0, c + 1)
        S0 = _binom_sf(j, c, theta)
        S1 = np.where(c > 0, _binom_sf(j - 1, np.maximum(c - 1, 0), theta), 0.0)
        first, second = K0 * S0, K1 * c * theta * S1
    else:  # K1 < 0: positive up to a** = ceil(-K0/K1) - 1; use the complement tails
        j = np.clip(np.ceil(-K0 / K1).astype(np.int64) - 1, -1, c)
        S0 = _head(j, c, theta)  # P[A <= j]
        S1 = np.where(c > 0, _head(j - 1, np.maximum(c - 1, 0), theta), 0.0)
        first, second = K0 * S0, K1 * c * theta * S1
    val = first + second
    return val, _FP_REL * (np.abs(first) + np.abs(second))


@dataclass(frozen=True)
class _Law:
    n: int
    eps0: float
    c: np.ndarray
    w: np.ndarray
    theta: float


def _law(n: int, k: int, eps0: float, family: str, tail: float) -> _Law:
    p = math.exp(eps0)
    alpha = 1.0 / (p + k - 1.0)
    prob, theta = ((p + 1.0) * alpha, p / (p + 1.0)) if family == "x0" else (2 * alpha, 0.5)
    lo, hi = _support(n, min(prob, 1.0), tail)
    c = np.arange(lo, hi + 1, dtype=np.int64)
    return _Law(n, eps0, c, binom.pmf(c, n, min(prob, 1.0)), theta)


def _one_direction(law: _Law, eps: float, family: str, forward: bool) -> tuple[float, float]:
    n, c = law.n, law.c.astype(float)
    e0 = law.eps0
    p = math.exp(e0)
    if eps + e0 > 700.0:  # e^{eps0 + eps} overflows: nothing is refuted
        return 0.0, math.inf
    E = math.exp(eps)
    # every constant in expm1 / sinh form: no cancellation when eps0 or eps is tiny
    if family == "x0":
        # P = M, Q = M (n - c + a/p + p (c - a))/n = M (q0 + q1 a); forward = D(P||Q)
        q1 = -2.0 * math.sinh(e0) / n  # (1/p - p)/n
        if forward:  # 1 - E q0 = -(e^eps - 1) - E (p - 1) c / n
            K0, K1 = -math.expm1(eps) - E * math.expm1(e0) * c / n, -E * q1
        else:  # q0 - E = (p - 1) c / n - (e^eps - 1)
            K0, K1 = math.expm1(e0) * c / n - math.expm1(eps), q1
    else:
        # P/M = (p a + (c - a) + (n - c)/p)/n, Q/M = (a + p (c - a) + (n - c)/p)/n (mirror):
        # K0 = (c (1 - E p) + (n - c)(1 - E)/p)/n, K1 = (p - 1)(1 + E)/n
        K0 = (-math.expm1(eps + e0) * c - math.expm1(eps) * (n - c) / p) / n
        K1 = math.expm1(e0) * (1.0 + E) / n
    val, err = _positive_part(law.c, law.theta, K0, K1)
    lo = float(np.dot(law.w, np.maximum(val - err, 0.0)))
    hi = float(np.dot(law.w, np.maximum(val + err, 0.0)))
    return lo, hi


def krr_dataset_divergence(n: int, k: int, eps0: float, eps: float, *,
                           family: str = "x0", tail: float = 1e-15) -> tuple[float, float]:
    """Exact D_{e^eps} of shuffled k-RR on one family of neighbouring data sets (both
    directions, the larger), as a bracket (lower, upper).

    The truncated mass of c is left out of both ends (it can only add divergence), so
    ``lower`` is a certified lower bound on the divergence of this pair, hence on the
    divergence any valid k-RR shuffle bound must allow.

    Parameters
    ----------
    n : int
        Users, >= 1.
    k : int
        k-RR domain size, >= 2 (``family="third"`` needs k = 3).
    eps0 : float
        In (0, 700].
    eps : float
        >= 0.
    family : {"x0", "third"}
    tail : float
        Mass of c ~ Binomial left out.

    Returns
    -------
    (lower, upper) : tuple of float
        A bracket of the larger of the two directions' divergences.

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range, ``family="third"`` with k != 3, or e^(eps0 + eps)
        overflows.

    References
    ----------
    [BBGN19]_ (shuffled k-RR); the data-set families are this module's (module notes).
    """
    n, eps0, _ = _iv_shuffle(n, eps0, 0.5)
    k = _iv_k(k)
    eps = v.real("eps", eps)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got eps={eps!r}")
    family = v.choice("family", family, FAMILIES)
    if family == "third" and k != 3:
        raise ValueError(f"family='third' is computed for k = 3 only, got k={k}")
    if eps0 + eps > 700.0:
        raise ValueError(f"eps0 + eps must be below ~700 (e^(eps0+eps) overflows), got "
                         f"eps0={eps0}, eps={eps}")
    law = _law(n, k, eps0, family, v.probability("tail", tail))
    a = _one_direction(law, eps, family, True)
    b = _one_direction(law, eps, family, False)
    return max(a[0], b[0]), max(a[1], b[1])


def krr_lower_epsilon(n: int, eps0: float, delta: float, *, k: int,
                      rtol: float = 1e-3) -> tuple[float, str]:
    """The largest epsilon (on the grid (1 + rtol)^j) at which shuffled k-RR is provably
    *not* (epsilon, delta)-DP, and the data-set family that shows it.

    No valid shuffle bound for k-RR (and, for k = 2, for any eps0-LDP randomizer) certifies an
    epsilon at or below it. Returns (0.0, "") if even tiny epsilons are not refuted.

    Parameters
    ----------
    n : int
        Users, >= 1.
    eps0 : float
        Local epsilon, in (0, 700].
    delta : float
        In (0, 1).
    k : int
        k-RR domain size, >= 2.
    rtol : float
        Relative step of the epsilon grid.

    Returns
    -------
    tuple of (float, str)
        The refuted epsilon and the family ("x0" or "third") that refutes it.

    Raises
    ------
    TypeError, ValueError
        ``n`` is not an integer in [1, 2^53], ``eps0`` not in (0, 700] or ``delta`` not in
        (0, 1), or ``k`` or ``rtol`` is out of range.

    References
    ----------
    [BBGN19]_ (shuffled k-RR; lower bounds complement its upper bounds).
    """
    n, eps0, delta = _iv_shuffle(n, eps0, delta)
    k = _iv_k(k)
    families = ("x0", "third") if k == 3 else ("x0",)
    h = math.log1p(_iv_rtol(rtol))
    laws = {f: _law(n, k, eps0, f, 1e-15) for f in families}

    def refuted(eps: float) -> str:
        for f, law in laws.items():
            lo = max(_one_direction(law, eps, f, True)[0], _one_direction(law, eps, f, False)[0])
            if lo > delta:
                return f
        return ""

    j_hi = math.floor(math.log(eps0) / h)  # grid points below eps0
    j_lo = math.floor(math.log(1e-12) / h)
    if not refuted(math.exp(j_lo * h)):
        return 0.0, ""
    while j_hi - j_lo > 1:  # invariant: j_lo refuted; divergence decreasing in eps
        mid = (j_lo + j_hi) // 2
        if refuted(math.exp(mid * h)):
            j_lo = mid
        else:
            j_hi = mid
    eps = math.exp(j_lo * h)
    return eps, refuted(eps)


__all__ = ["FAMILIES", "krr_dataset_divergence", "krr_lower_epsilon"]
