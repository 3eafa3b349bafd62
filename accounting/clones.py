"""Amplification by shuffling: the clones bound and its exact numerical counterpart.

Setting: ``N`` items, each passed through a local randomizer, are shuffled. Two neighbouring
inputs differ in one item (x_1^0 -> x_1^1, the others fixed and public in number), and the
randomizer is eps0-LDP -- or, for the metric version, alpha0 d_X-DP with
d_X(x_1^0, x_1^1) <= d <= 1.

Reduction ([FMT21]_ Lemma 3.3; generalised to metric DP by [Imola]_ App. B.4.2, eqs. 13-22
and Lemma B.2): the shuffled
output is a post-processing of the pair of counts

    P = (A + 1 - D, C - A + D)      versus      Q = (A + D, C - A + 1 - D),

    C ~ Bin(N - 1, p), p = e^{-alpha0},   A ~ Bin(C, 1/2),   D ~ Bernoulli(beta),
    beta = 1 / (1 + e^{alpha0 d}),

so any bound on the hockey-stick divergence D_{e^eps}(P || Q) is a shuffle-DP bound
(P and Q are mirror images, so D(P||Q) = D(Q||P)). For eps0-LDP take d = 1.

Closed form ([Imola]_ Lemma B.1 with d = 1, which is [FMT21]_ Thm 3.1):

    eps = ln(1 + (e^{eps0} - 1)/(e^{eps0} + 1) * (8 sqrt(e^{eps0} ln(4/delta)) / sqrt(n)
                                                  + 8 e^{eps0} / n)),
    valid for eps0 <= ln(n / (16 ln(2/delta))).

Numerical bound (:func:`clones_numerical`): the exact divergence of (P, Q). Conditioned on
C = c, writing rho = 1 - beta and b_c(a) = Binom(c, a) 2^{-c},

    P(a | c) = rho b_c(a - 1) + beta b_c(a),    Q(a | c) = beta b_c(a - 1) + rho b_c(a),

and P/Q is increasing in a (rho > 1/2), so with E = e^eps the optimal event is {a >= k*}:

    D_c = max_k f_c(k),   f_c(k) = A S_c(k - 1) - negB S_c(k),
    A = rho - E beta = beta E (e^{alpha0 d - eps} - 1),   negB = E rho - beta,
    S_c(j) = P[Bin(c, 1/2) >= j] = I_{1/2}(j, c - j + 1)   (regularised incomplete beta),

k* = c + 2 - ceil((c + 1) A / (A + negB)), and D = sum_c P[C = c] D_c, vectorised over c.

Floating point. beta is computed as e^{-ad} / (1 + e^{-ad}), never as 1 - rho (which is
exactly 0 once alpha0 d > 37 and loses all digits from about 30 on), A and negB as products
and sums of positive terms, and k* is located by taking the maximum of f_c over five cut
points around its estimate (exact whenever the estimate is within 2, which holds for
c < 2^50; a maximum on the window's edge makes the evaluation refuse to certify). The
support of C is truncated to its central part; the dropped mass times the largest possible
D_c (that of user 1's bit alone, A) is added to the upper estimate, and a relative
floating-point allowance is added (upper) or subtracted (lower). An evaluation whose
self-checks fail (non-finite values, weights not summing to 1, argmax on the window's edge)
returns an infinite upper estimate, so it never certifies an epsilon; if nothing below
alpha0 d is certified, the bound falls back to (alpha0 d, 0), the local guarantee.

Variation-ratio bound (:func:`variation_ratio_numerical`, [FMT23]_ Lemma 3.2 and [WPLW24]_
Lemma 4.5 with the parameters of a general mechanism): the same pair with
C ~ Bin(N - 1, 2 e^{-alpha0} / (1 + e^{-alpha0 d})), evaluated by the same code.
:func:`shuffle_ldp` with ``method="tightest"`` (the default) returns the smallest of the
certified bounds.

References
----------
.. [FMT23] V. Feldman, A. McMillan, K. Talwar, "Stronger Privacy Amplification by Shuffling
   for Renyi and Approximate Differential Privacy", SODA 2023.
.. [WPLW24] S. Wang et al., "Privacy Amplification via Shuffling: Unified, Simplified, and
   Tightened", VLDB 2024 (arXiv:2304.05007).
.. [FMT21] V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones: A Simple and
   Nearly Optimal Analysis of Privacy Amplification by Shuffling", FOCS 2021.
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level" (preprint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.special import betainc
from scipy.stats import binom

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import REPLACE_ONE, Guarantee

METHODS = ("tightest", "variation-ratio", "numerical", "closed-form", "krr-blanket",
           "binary-rr-exact")
#: what is known of the local randomizer: any eps0-LDP one, or k-ary randomized response
RANDOMIZERS = ("general", "krr")
#: the reductions whose exact divergence is computed ("numerical" is the clones reduction)
REDUCTIONS = ("clones", "variation-ratio")

#: relative floating-point allowance on every term of the numerical divergence (betainc and
#: log-pmf are accurate to ~1e-12 relative; this is 100x that).
_FP_REL = 1e-10
#: absolute allowance for values that underflow to 0 (added to every upper estimate)
_FP_ABS = 1e-290


@dataclass(frozen=True)
class ShuffleBound:
    """An (eps, delta) shuffle-DP bound for N shuffled eps0-LDP (or metric-DP) reports.

    Attributes
    ----------
    epsilon : float
        Certified epsilon: the release is (epsilon, delta)-DP under replacement of one
        report. Never above eps0 (shuffling is post-processing of eps0-LDP reports).
    delta : float
    method : {"closed-form", "numerical", "variation-ratio", "krr-blanket", "binary-rr-exact"}
        "numerical" is the exact divergence of the clones pair.
    n : int
        Number of shuffled reports.
    eps0 : float
        Local parameter (alpha0 of a metric randomizer).
    d : float
        Distance bound of the changed item (1 for plain LDP).
    epsilon_lower : float or None
        Numerical method only: the exact divergence of the reduction pair exceeds delta at
        ``epsilon_lower``, so no analysis through this reduction certifies less.
    tolerance : float or None
        ``epsilon - epsilon_lower`` (numerical method).
    valid : bool
        Whether the shuffle amplification applies. Closed form: its condition
        eps0 <= ln(n / (16 ln(2/delta))). Numerical: some epsilon below eps0 d is certified.
        When False, ``epsilon`` falls back to eps0 d and ``delta`` to 0 (the local
        guarantee, kept by shuffling), and ``notes`` say why.
    epsilon_formula : float
        The raw closed-form value (nan if not computed), reported even when not valid.
    guarantee : Guarantee
    notes : tuple of str
    """

    epsilon: float
    delta: float
    method: str
    n: int
    eps0: float
    d: float = 1.0
    epsilon_lower: float | None = None
    tolerance: float | None = None
    valid: bool = True
    epsilon_formula: float = math.nan
    guarantee: Guarantee | None = field(default=None, compare=False)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        out = {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "method": self.method,
            "n": self.n,
            "eps0": self.eps0,
            "d": self.d,
            "epsilon_lower": self.epsilon_lower,
            "tolerance": self.tolerance,
            "valid": self.valid,
            "epsilon_formula": None if math.isnan(self.epsilon_formula) else
            self.epsilon_formula,
            "notes": list(self.notes),
        }
        if self.guarantee is not None:
            out["guarantee"] = self.guarantee.to_dict()
        return out


# --------------------------------------------------------------------------- closed form
def clones_validity_limit(n: int, delta: float) -> float:
    """ln(n / (16 ln(2/delta))): the largest eps0 for which the closed form holds.

    [Imola]_ Lemma B.1 (assumption alpha0 <= ln(m / (16 ln(2/delta)))); [FMT21]_ Thm 3.1.
    The value is negative (no eps0 > 0 qualifies) when n < 16 ln(2/delta).
    """
    n, delta = _iv_n_delta(n, delta)
    # log space: 2 / delta overflows for delta below ~1e-308
    return math.log(n) - math.log(16.0 * (math.log(2.0) - math.log(delta)))


def clones_formula(n: int, eps0: float, delta: float, d: float = 1.0) -> float:
    """The raw closed form ([Imola]_ Lemma B.1; [FMT21]_ Thm 3.1 for d = 1).

    ln(1 + (e^{eps0 d} - 1)/(e^{eps0 d} + 1) (8 sqrt(e^{eps0} ln(4/delta)) / sqrt(n)
    + 8 e^{eps0} / n)). (e^y - 1)/(e^y + 1) is evaluated as tanh(y/2).
    """
    n, delta = _iv_n_delta(n, delta)
    eps0 = v.positive("eps0", eps0)
    d = _iv_d(d)
    log4d = math.log(4.0) - math.log(delta)  # ln(4/delta) without overflowing 4/delta
    k = 8.0 * math.sqrt(math.exp(eps0) * log4d / n) + 8.0 * math.exp(eps0) / n
    return math.log1p(math.tanh(eps0 * d / 2.0) * k)


def clones_closed_form(n: int, eps0: float, delta: float) -> ShuffleBound:
    """Closed-form shuffle bound for n eps0-LDP reports ([Imola]_ Lemma B.1, d = 1).

    Parameters
    ----------
    n : int
        Number of users (reports), >= 1.
    eps0 : float
        Local DP parameter, > 0.
    delta : float
        In (0, 1).

    Returns
    -------
    ShuffleBound
        ``epsilon = min(eps0, formula)`` when eps0 <= ln(n / (16 ln(2/delta))); otherwise
        ``valid=False`` and ``epsilon = eps0`` (no amplification is claimed).
    """
    n, eps0, delta = _iv_shuffle(n, eps0, delta)
    raw = clones_formula(n, eps0, delta)
    limit = clones_validity_limit(n, delta)
    valid = eps0 <= limit
    notes: list[str] = []
    if valid:
        eps = min(eps0, raw)
    else:
        eps = eps0
        notes.append(
            f"closed form not valid: needs eps0 <= ln(n/(16 ln(2/delta))) = {limit:.6g}, "
            f"got eps0={eps0}; falling back to eps0 (shuffling is post-processing)"
        )
    return ShuffleBound(
        epsilon=eps, delta=delta if valid else 0.0,
        method="closed-form", n=n, eps0=eps0,
        valid=valid, epsilon_formula=raw,
        guarantee=_guarantee(eps, delta if valid else 0.0, n, eps0, "closed-form"),
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------- numerical
#: largest number of support points of C kept in the exact sum (memory and time guard)
_MAX_SUPPORT = 5_000_000
#: offsets of the candidate cut points around the floating-point estimate of k*
_WINDOW = np.arange(-2, 3, dtype=np.int64)


@dataclass(frozen=True)
class _Mixture:
    """Truncated law of C ~ Bin(N - 1, e^{-alpha0}) and the pair's constants.

    ``beta = 1 / (1 + e^{ad})`` is computed directly, never as ``1 - rho``: for
    ``ad > 37`` the subtraction gives exactly 0 in double precision.
    """

    c: np.ndarray
    w: np.ndarray
    dropped: float
    ad: float  # alpha0 * d, rounded up when the product is inexact
    beta: float  # 1 / (1 + e^{ad})
    rho: float  # 1 / (1 + e^{-ad}) = 1 - beta
    mass_ok: bool  # the kept weights and the dropped mass add up to 1


def _product_up(x: float, y: float) -> float:
    """x * y rounded towards +inf (x, y > 0): a larger alpha0 d is the conservative side."""
    z = x * y
    return z if Fraction(z) >= Fraction(x) * Fraction(y) else math.nextafter(z, math.inf)


def _support(trials: int, p: float, tail: float) -> tuple[int, int]:
    """Central part lo..hi of Bin(trials, p) leaving out at most ``tail`` of its mass.

    Integer bisection on the (Boost) cdf and survival function: scipy's ppf/isf fail to
    bracket for tiny p or tails and then return the whole support.
    """
    half = tail / 2.0
    mid = min(trials, math.floor(trials * p))

    def first(pred, a: int, b: int) -> int:  # smallest k in [a, b] with pred(k); pred(b)
        while a < b:
            m = (a + b) // 2
            if pred(m):
                b = m
            else:
                a = m + 1
        return a

    hi = first(lambda k: binom.sf(k, trials, p) <= half, mid, trials)
    lo = first(lambda k: binom.cdf(k, trials, p) > half, 0, mid)
    return lo, hi


def clone_probability(alpha0: float, d: float = 1.0, reduction: str = "clones") -> float:
    """Probability that each other report is a clone in the reduction pair.

    ``"clones"`` ([FMT21]_ Lemma 3.3): e^{-alpha0}. ``"variation-ratio"`` ([WPLW24]_ Lemma 4.5
    with the parameters of a general mechanism, p = e^{alpha0 d}, beta = (p - 1)/(p + 1),
    q = e^{alpha0}, so alpha = beta/(p - 1) = 1/(p + 1) and 2r = 2 alpha p / q):
    2 e^{-alpha0} / (1 + e^{-alpha0 d}), which is 2/(e^{alpha0} + 1) for d = 1, the stronger
    clone of [FMT23]_ Lemma 3.2. It is never below e^{-alpha0}.
    """
    alpha0 = v.positive("alpha0", alpha0)
    if alpha0 > 700:
        raise ValueError(f"alpha0 must be <= 700 (e^alpha0 overflows), got alpha0={alpha0!r}")
    d = _iv_d(d)
    reduction = v.choice("reduction", reduction, REDUCTIONS)
    if reduction == "clones":
        return math.exp(-alpha0)
    return 2.0 * math.exp(-alpha0) / (1.0 + math.exp(-_product_up(alpha0, d)))


def _mixture(N: int, alpha0: float, d: float, tail: float,
             reduction: str = "clones") -> _Mixture:
    ad = _product_up(alpha0, d)
    e = math.exp(-ad)
    beta, rho = e / (1.0 + e), 1.0 / (1.0 + e)
    trials = N - 1
    if trials == 0:
        return _Mixture(np.zeros(1, dtype=np.int64), np.ones(1), 0.0, ad, beta, rho, True)
    p = clone_probability(alpha0, d, reduction)
    lo, hi = _support(trials, p, tail)
    if hi - lo + 1 > _MAX_SUPPORT:
        raise ValueError(
            f"n={N} is too large for the numerical method (the exact sum would need "
            f"{hi - lo + 1} terms > {_MAX_SUPPORT}); use method='closed-form'"
        )
    c = np.arange(lo, hi + 1, dtype=np.int64)
    w = binom.pmf(c, trials, p)
    dropped = 0.0
    if lo > 0:
        dropped += float(binom.cdf(lo - 1, trials, p))
    if hi < trials:
        dropped += float(binom.sf(hi, trials, p))
    mass_ok = bool(np.all(np.isfinite(w))) and abs(float(w.sum()) + dropped - 1.0) <= 1e-9
    return _Mixture(c, w, dropped, ad, beta, rho, mass_ok)


def _binom_sf(j: np.ndarray, c: np.ndarray, theta: float) -> np.ndarray:
    """P[Bin(c, theta) >= j], elementwise, exact at the ends (j <= 0 -> 1, j > c -> 0)."""
    jj = np.clip(j, 1, np.maximum(c, 1))
    out = betainc(jj.astype(float), (c - jj + 1).astype(float), theta)
    out = np.where(j <= 0, 1.0, out)
    return np.where(j > c, 0.0, out)


def _sf_half(j: np.ndarray, c: np.ndarray) -> np.ndarray:
    """P[Bin(c, 1/2) >= j] (:func:`_binom_sf` at theta = 1/2)."""
    return _binom_sf(j, c, 0.5)


def _cut_estimate(c: np.ndarray, A: float, negB: float) -> np.ndarray:
    """Floating-point estimate of k*(c), the first a with P(a | c) > e^eps Q(a | c).

    P(a|c) - E Q(a|c) = b_c(a) (A a - negB (c + 1 - a)) / (c + 1 - a) is positive iff
    a > (c + 1) - y with y = (c + 1) A / (A + negB), so k* = c + 2 - ceil(y). This form has
    no 1 + x* that rounds to x* (which put k* at c + 2 once x* (c + 1) exceeded 2^53); y is
    computed with a relative error of a few ulps, so the estimate is within 1 of k* for
    c < 2^50.
    """
    y = (c + 1).astype(float) * (A / (A + negB))
    return c + 2 - np.ceil(y).astype(np.int64)


def _tail_table(k0: np.ndarray, c: np.ndarray) -> np.ndarray:
    """S_c(j) = P[Bin(c, 1/2) >= j] for j = k0 - 3 .. k0 + 2 (rows), every c (columns).

    One regularised incomplete beta at the top row; the rows below add the binomial pmf
    (a sum of non-negative terms, no cancellation), which comes from the accurate pmf of
    scipy (Boost) rather than from differences of log-gamma values.
    """
    js = k0[None, :] + np.arange(-3, 3, dtype=np.int64)[:, None]
    S = np.empty(js.shape)
    S[-1] = _sf_half(js[-1], c)
    for row in range(js.shape[0] - 2, -1, -1):
        S[row] = S[row + 1] + binom.pmf(js[row], c, 0.5)
    return np.minimum(S, 1.0)


def _divergence(mix: _Mixture, eps: float) -> tuple[float, float]:
    """(lower, upper) estimates of D_{e^eps}(P || Q); upper is ``inf`` if not trustworthy.

    With A = rho - E beta > 0 and negB = E rho - beta > 0, D_c = max_k f_c(k),
    f_c(k) = A S_c(k - 1) - negB S_c(k) = sum_{a >= k} (P(a|c) - E Q(a|c)). f_c is unimodal
    (its increments are the terms, negative below k* and positive from k* on), every f_c(k)
    is <= D_c, and the maximum is at k*. The maximum is taken over five cut points centred
    on the estimate of k* (within 1 of it), so it is exactly D_c; if the largest value sits
    on the edge of the window the estimate is not trusted and ``inf`` is returned.
    """
    if not mix.mass_ok:
        return 0.0, math.inf
    if eps >= mix.ad:  # e^eps >= e^{ad} = rho / beta: the pair is eps-indistinguishable
        return 0.0, 0.0
    E = math.exp(eps)
    # both written as products/sums of positive terms: no cancellation for any ad <= 700
    A = mix.beta * E * math.expm1(mix.ad - eps)
    negB = mix.rho * (math.expm1(eps) - math.expm1(-mix.ad))
    c = mix.c
    k0 = _cut_estimate(c, A, negB)
    S = _tail_table(k0, c)
    f = A * S[:-1] - negB * S[1:]  # rows: k = k0 - 2 .. k0 + 2
    err = _FP_REL * (A * S[:-1] + negB * S[1:])
    if not (np.all(np.isfinite(f)) and np.all(np.isfinite(err))):
        return 0.0, math.inf
    best = np.argmax(f, axis=0)
    cols = np.arange(c.size)
    on_edge = ((best == 0) & (f[0] > f[1] + err[0] + err[1])) | (
        (best == f.shape[0] - 1) & (f[-1] > f[-2] + err[-1] + err[-2]))
    if np.any(on_edge & (mix.w > 0)):
        return 0.0, math.inf
    per_c_up = np.maximum(np.max(f + err, axis=0), 0.0)
    per_c_lo = np.maximum(f[best, cols] - err[best, cols], 0.0)
    upper = (float(np.dot(mix.w, per_c_up)) + mix.dropped * A) * (1.0 + _FP_REL) + _FP_ABS
    lower = max(0.0, float(np.dot(mix.w, per_c_lo)) * (1.0 - _FP_REL) - _FP_ABS)
    if not math.isfinite(upper):
        return 0.0, math.inf
    return lower, upper


def reduction_divergence(
    n: int, eps0: float, eps: float, d: float = 1.0, tail: float = 1e-14, *,
    reduction: str = "clones",
) -> tuple[float, float]:
    """Lower and upper estimates of D_{e^eps}(P || Q) for a reduction pair.

    Parameters
    ----------
    n : int
        Number of shuffled reports N (C ~ Bin(N - 1, :func:`clone_probability`)).
    eps0 : float
        Local parameter (alpha0), in (0, 700].
    eps : float
        Target epsilon, >= 0.
    d : float
        Distance of the changed item, in (0, 1] (1 for LDP).
    tail : float
        Binomial mass of C left out of the exact sum (added to the upper estimate).
    reduction : {"clones", "variation-ratio"}
        Which pair: only the law of C differs (:func:`clone_probability`).

    Returns
    -------
    (lower, upper) : tuple of float
        lower <= D_{e^eps}(P || Q) <= upper (up to the stated floating-point allowance);
        ``upper`` is ``inf`` when a self-check of the numerics fails.
    """
    n, eps0, _ = _iv_shuffle(n, eps0, 0.5)
    eps = v.real("eps", eps)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got eps={eps!r}")
    d = _iv_d(d)
    tail = v.probability("tail", tail)
    return _divergence(_mixture(n, eps0, d, tail, reduction), eps)


def _grid_search(div, top: float, guess: float, h: float, delta: float):
    """Smallest grid epsilon exp(k h) < top whose upper divergence is <= delta.

    Returns ``(k_certified or None, evaluated)`` where ``evaluated`` maps every grid index
    looked at to its (lower, upper) divergence. None means no grid point below ``top`` was
    certified (top itself always is: the divergence is exactly 0 there).
    """
    cache: dict[int, tuple[float, float]] = {}

    def at(k: int) -> tuple[float, float]:
        if k not in cache:
            cache[k] = div(math.exp(k * h))
        return cache[k]

    def good(k: int) -> bool:
        return at(k)[1] <= delta

    k_top = math.ceil(math.log(top) / h)  # first grid index with exp(k h) >= top
    while math.exp(k_top * h) < top:
        k_top += 1
    while math.exp((k_top - 1) * h) >= top:
        k_top -= 1
    k_min = math.floor(math.log(1e-12) / h)
    k_hi = None  # smallest index known to be good
    k_lo = min(k_top - 1, math.floor(math.log(max(guess, 1e-300)) / h))
    step = max(1, round(math.log(2.0) / h))
    while good(k_lo):  # bracket downwards
        k_hi = k_lo
        if k_lo <= k_min:
            return k_hi, cache
        k_lo = max(k_min, k_lo - step)
    if k_hi is None:  # bracket upwards from a failing k_lo towards top
        k = k_lo
        while k < k_top - 1:
            k = min(k_top - 1, k + step)
            if good(k):
                k_hi = k
                break
            k_lo = k
        if k_hi is None:
            return None, cache
    while k_hi - k_lo > 1:
        mid = (k_lo + k_hi) // 2
        if good(mid):
            k_hi = mid
        else:
            k_lo = mid
    return k_hi, cache


#: note added to a bound whose search met a failed floating-point self-check
SELF_CHECK_NOTE = ("the floating-point self-check failed at some epsilon; those points were "
                   "treated as not certified")


@dataclass(frozen=True)
class _Certified:
    """Outcome of :func:`_certify`: the released (epsilon, delta) and what the search saw."""

    epsilon: float  # certified grid point, or ``top`` when nothing below it is
    delta: float  # delta, or 0 with the local fallback
    epsilon_lower: float  # largest grid point seen whose lower divergence exceeds delta
    valid: bool
    self_check_failed: bool


def _certify(div, top: float, guess: float, h: float, delta: float) -> _Certified:
    """The grid search of :func:`_grid_search` turned into a release: the certified grid
    point (or the local guarantee (top, 0) when none is below ``top``) and the refuted one."""
    k_ok, seen = _grid_search(div, top, guess, h, delta)
    lows = [j for j, (lo_, _) in seen.items() if lo_ > delta]
    eps_low = math.exp(max(lows) * h) if lows else 0.0
    failed = any(math.isinf(up) for _, up in seen.values())
    if k_ok is None:
        return _Certified(top, 0.0, min(eps_low, top), False, failed)
    eps_up = math.exp(k_ok * h)
    return _Certified(eps_up, delta, min(eps_low, eps_up), True, failed)


def _iv_rtol(rtol) -> float:
    rtol = v.positive("rtol", rtol)
    if rtol > 0.5:
        raise ValueError(f"rtol must be in (0, 0.5], got rtol={rtol!r}")
    return rtol


def clones_numerical(
    n: int,
    eps0: float,
    delta: float,
    *,
    d: float = 1.0,
    rtol: float = 1e-3,
    tail: float | None = None,
) -> ShuffleBound:
    """Numerical shuffle bound from the exact divergence of the clones reduction.

    Searches the smallest epsilon on the fixed geometric grid eps_k = (1 + rtol)^k with
    upper-estimate D_{e^eps_k}(P || Q) <= delta (bracketing and bisection over k; D is
    non-increasing in eps). Whatever the search does, the epsilon returned is one whose own
    upper estimate was checked, so it is certified even if the estimates are not monotone.
    Because the grid is fixed, the result is monotone in n and eps0 whenever the divergence
    is.

    Parameters
    ----------
    n : int
        Number of shuffled reports (>= 1).
    eps0 : float
        Local parameter, in (0, 700].
    delta : float
        In (0, 1).
    d : float, default 1
        Distance bound of the changed item for a metric randomizer (1 for eps0-LDP).
    rtol : float, default 1e-3
        Relative resolution of the epsilon grid.
    tail : float, optional
        Mass of C ~ Bin(n - 1, e^{-eps0}) left out of the exact sum; default
        ``min(1e-4 * delta, 1e-10)`` (at least 1e-300). It is charged to the upper bound; with
        the absolute floating-point allowance of 1e-290 no delta below that is certified.

    Returns
    -------
    ShuffleBound
        ``epsilon`` is certified (upper); ``epsilon_lower`` is where the divergence of the
        reduction pair provably exceeds delta; ``tolerance = epsilon - epsilon_lower``.
        When no grid point below eps0 d is certified (no amplification at this resolution,
        e.g. eps0 d beyond about 10 for n = 1000), ``valid=False``, ``epsilon = eps0 d`` and
        ``delta = 0``: the local guarantee itself, which shuffling (post-processing) keeps.

    Notes
    -----
    The reduction is [FMT21]_ Lemma 3.3; its metric version is [Imola]_ App. B.4.2,
    Lemma B.2. :func:`variation_ratio_numerical` is never looser.
    """
    return _numerical(n, eps0, delta, d=d, rtol=rtol, tail=tail, reduction="clones")


def variation_ratio_numerical(
    n: int,
    eps0: float,
    delta: float,
    *,
    d: float = 1.0,
    rtol: float = 1e-3,
    tail: float | None = None,
) -> ShuffleBound:
    """Numerical shuffle bound from the variation-ratio (stronger clone) reduction.

    The same certified search as :func:`clones_numerical` on the pair

        P = (A + 1 - D, C - A + D),   Q = (A + D, C - A + 1 - D),
        C ~ Bin(N - 1, 2 e^{-alpha0} / (1 + e^{-alpha0 d})),  A ~ Bin(C, 1/2),
        D ~ Bernoulli(1 / (1 + e^{alpha0 d})),

    which has more clones than the clones pair (2/(e^{eps0} + 1) instead of e^{-eps0} for
    eps0-LDP), hence a smaller divergence. At n = 1e5, eps0 = 1, delta = 1e-6 it certifies
    0.01243 against 0.01528 for the clones pair (``bench/accounting_numerical.py``).

    The parameters are those of a *general* eps0-LDP (or alpha0 d_X-DP) randomizer:
    p = e^{alpha0 d}, total variation beta = (p - 1)/(p + 1), ratio q = e^{alpha0} to any
    other user's report. With that beta, user 1 has no residual component (1 - alpha - p
    alpha = 0) and the pair is exactly the stronger-clone pair of [FMT23]_ Lemma 3.2 (d = 1).
    A randomizer-specific beta below (p - 1)/(p + 1) is **not** offered: [WPLW24]_ Lemma 4.5
    then hides user 1's residual message, which the shuffled output does reveal, and the
    resulting bound fails for shuffled 3-ary randomized response at n = 3 (exact divergence
    0.0735 > 0.0676 at eps0 = 1, eps = 0.6; ``docs/errata.md`` row 12, pinned by a test).

    Parameters and returns as :func:`clones_numerical`; ``method`` is
    ``"variation-ratio"``.

    Notes
    -----
    [FMT23]_ Lemma 3.2 (the stronger-clone reduction); [WPLW24]_ Lemma 4.5 (the
    variation-ratio reduction) and Thm 4.8 (its divergence), with the parameters of its
    tables for general LDP and general metric-DP mechanisms.
    """
    return _numerical(n, eps0, delta, d=d, rtol=rtol, tail=tail, reduction="variation-ratio")


def _numerical(n, eps0, delta, *, d, rtol, tail, reduction) -> ShuffleBound:
    n, eps0, delta = _iv_shuffle(n, eps0, delta)
    d = _iv_d(d)
    rtol = _iv_rtol(rtol)
    tail = max(min(1e-4 * delta, 1e-10), 1e-300) if tail is None else v.probability("tail", tail)
    mix = _mixture(n, eps0, d, tail, reduction)
    h = math.log1p(rtol)
    top = mix.ad
    guess = min(top, clones_formula(n, eps0, delta, d) / 4.0) if n > 1 else top
    r = _certify(lambda e: _divergence(mix, e), top, guess, h, delta)
    notes = [
        f"binomial tail mass {tail:.3g} of C charged to the upper bound; "
        f"grid resolution rtol={rtol:g}",
    ]
    if r.self_check_failed:
        notes.append(SELF_CHECK_NOTE)
    if not r.valid:
        notes.append(
            f"no amplification: no epsilon below eps0 d = {top:.6g} is certified at "
            f"delta={delta:g} for n={n} (the bound is vacuous); falling back to the local "
            f"guarantee ({top:.6g}, 0), which shuffling (post-processing) preserves"
        )
    method = "numerical" if reduction == "clones" else reduction
    return ShuffleBound(
        epsilon=r.epsilon, delta=r.delta, method=method, n=n, eps0=eps0, d=d,
        epsilon_lower=r.epsilon_lower, tolerance=r.epsilon - r.epsilon_lower, valid=r.valid,
        guarantee=_guarantee(r.epsilon, r.delta, n, eps0, method, d=d),
        notes=tuple(notes),
    )


def shuffle_ldp(n: int, eps0: float, delta: float, method: str = "tightest", *,
                randomizer: str = "general", k: int | None = None,
                progress: Any = None, **kwargs) -> ShuffleBound:
    """Amplification by shuffling of n eps0-LDP reports (dispatch on ``method``).

    ``method`` is ``"tightest"`` (every bound valid for ``randomizer`` is computed and the
    smallest certified epsilon is returned; the others are listed in ``notes``),
    ``"variation-ratio"`` (:func:`variation_ratio_numerical`), ``"numerical"``
    (:func:`clones_numerical`), ``"closed-form"`` (:func:`clones_closed_form`) or
    ``"krr-blanket"`` (:func:`shuffledp.accounting.krr_shuffle.krr_shuffle_numerical`, k-RR
    only) or ``"binary-rr-exact"`` (:func:`shuffledp.accounting.binary_rr.
    binary_rr_shuffle_exact`: binary RR's exact worst case over every data set, k = 2 and n <=
    2e5; about 15 s at n = 1e5). ``randomizer="krr"`` with ``k`` says the reports come from
    k-ary randomized response, which adds the k-RR bounds to "tightest". ``progress`` (a
    callable ``(done, total)``) follows binary RR's check of every data set. Keyword arguments
    (``d``, ``rtol``, ``tail``) go to the numerical methods; ``d`` != 1 is not available in
    closed form nor for k-RR.
    """
    from shuffledp.accounting.binary_rr import MAX_N as BINARY_RR_MAX_N
    from shuffledp.accounting.binary_rr import binary_rr_shuffle_exact
    from shuffledp.accounting.krr_shuffle import _iv_k, krr_shuffle_numerical

    method = v.choice("method", method, METHODS)
    randomizer = v.choice("randomizer", randomizer, RANDOMIZERS)
    if randomizer == "krr":
        k = _iv_k(k)
        if kwargs.get("d", 1.0) != 1.0:
            raise ValueError(f"d must be 1 for randomizer='krr', got d={kwargs['d']!r}")
    elif k is not None:
        raise ValueError(f"k is only used with randomizer='krr', got k={k!r}")
    if method == "krr-blanket" and randomizer != "krr":
        raise ValueError("method='krr-blanket' needs randomizer='krr' and k")
    if method == "binary-rr-exact" and (randomizer != "krr" or k != 2):
        raise ValueError("method='binary-rr-exact' needs randomizer='krr' and k=2")
    if method == "closed-form":
        if kwargs:
            raise TypeError(f"closed-form takes no extra arguments, got {sorted(kwargs)}")
        return clones_closed_form(n, eps0, delta)
    if method == "numerical":
        return clones_numerical(n, eps0, delta, **kwargs)
    if method == "variation-ratio":
        return variation_ratio_numerical(n, eps0, delta, **kwargs)
    krr_kw = {key: val for key, val in kwargs.items() if key != "d"}
    exact_kw = {key: val for key, val in krr_kw.items() if key == "rtol"}
    if method == "krr-blanket":
        return krr_shuffle_numerical(n, eps0, delta, k=k, **krr_kw)
    if method == "binary-rr-exact":
        return binary_rr_shuffle_exact(n, eps0, delta, progress=progress, **exact_kw)
    bounds = [variation_ratio_numerical(n, eps0, delta, **kwargs),
              clones_numerical(n, eps0, delta, **kwargs)]
    if kwargs.get("d", 1.0) == 1.0:
        bounds.append(clones_closed_form(n, eps0, delta))
    skipped = ""
    if randomizer == "krr":
        try:
            bounds.insert(0, krr_shuffle_numerical(n, eps0, delta, k=k, **krr_kw))
        except ValueError as exc:  # the exact k-RR grid is too large: the general bounds hold
            if "cells" not in str(exc):
                raise
            skipped = f"; krr-blanket skipped ({exc})"
        if k == 2 and n <= BINARY_RR_MAX_N:
            bounds.insert(0, binary_rr_shuffle_exact(n, eps0, delta, progress=progress,
                                                     **exact_kw))
    valid = [b for b in bounds if b.valid]
    best = min(valid, key=lambda b: b.epsilon) if valid else bounds[0]
    others = "; ".join(f"{b.method}: {b.epsilon:.6g}" + ("" if b.valid else " (not valid)")
                       for b in bounds)
    return replace(best, notes=best.notes + (f"tightest of [{others}]{skipped}",))


@dataclass(frozen=True)
class LocalParameter:
    """The largest eps0 whose numerical shuffle bound does not exceed a target epsilon.

    Attributes
    ----------
    eps0 : float
        Largest eps0 found (verified: ``bound.epsilon <= target_epsilon``).
    eps0_next : float
        The next grid value, verified to exceed the target (or inf if eps0 hit ``eps0_max``).
    bound : ShuffleBound
        The numerical bound at ``eps0``.
    target_epsilon : float
    """

    eps0: float
    eps0_next: float
    bound: ShuffleBound
    target_epsilon: float


def clones_eps0_for_target(
    n: int, target_epsilon: float, delta: float, *, rtol: float = 1e-3,
    eps0_max: float = 20.0, method: str = "numerical",
) -> LocalParameter:
    """Largest eps0 (on the grid (1 + rtol)^k) whose shuffle bound does not exceed a target.

    ``method`` is ``"numerical"`` (:func:`clones_numerical`) or ``"variation-ratio"``
    (:func:`variation_ratio_numerical`, larger eps0 for the same target). The numerical bound
    is non-decreasing in eps0, so bisection over the grid index keeps a verified lower end
    (returned) and a verified failing upper end.

    Raises
    ------
    ValueError
        If even eps0 = target_epsilon fails (cannot happen: the bound never exceeds eps0) or
        arguments are invalid; the message names the argument and value.
    """
    n = v.count("n", n, 1)
    target = v.positive("target_epsilon", target_epsilon)
    delta = v.probability("delta", delta)
    rtol = _iv_rtol(rtol)
    eps0_max = v.positive("eps0_max", eps0_max)
    if eps0_max > 700:
        raise ValueError(f"eps0_max must be <= 700, got eps0_max={eps0_max!r}")
    method = v.choice("method", method, ("numerical", "variation-ratio"))
    reduction = "clones" if method == "numerical" else method
    h = math.log1p(rtol)

    def ok(k: int) -> tuple[bool, ShuffleBound]:
        b = _numerical(n, math.exp(k * h), delta, d=1.0, rtol=rtol, tail=None,
                       reduction=reduction)
        return b.epsilon <= target, b

    # eps0 = target is always fine (the bound never exceeds eps0): start just below it
    k_lo = math.floor(math.log(min(target, eps0_max)) / h)
    good, b_lo = ok(k_lo)
    if not good:  # pragma: no cover - guarded by epsilon <= eps0
        raise ValueError(f"target_epsilon={target} cannot be reached for n={n}")
    k_top = math.floor(math.log(eps0_max) / h)
    good_top, b_top = ok(k_top)
    if good_top:
        return LocalParameter(math.exp(k_top * h), math.inf, b_top, target)
    k_hi = k_top
    while k_hi - k_lo > 1:
        mid = (k_lo + k_hi) // 2
        good, b = ok(mid)
        if good:
            k_lo, b_lo = mid, b
        else:
            k_hi = mid
    return LocalParameter(math.exp(k_lo * h), math.exp(k_hi * h), b_lo, target)


# --------------------------------------------------------------------------- helpers
def _guarantee(eps: float, delta: float, n: int, eps0: float, method: str,
               d: float = 1.0) -> Guarantee:
    theorem = {
        "closed-form": "Feldman-McMillan-Talwar 2021 (clones) Thm 3.1 = Imola-Roy "
        "Chowdhury-Chaudhuri, Metric DP at the user level, Lemma B.1 (d=1)",
        "numerical": "exact hockey-stick divergence of the clones reduction "
        "(Feldman-McMillan-Talwar 2021 Lemma 3.3; Imola-Roy Chowdhury-Chaudhuri, Metric DP "
        "at the user level, App. B.4.2, Lemma B.2)",
        "variation-ratio": "exact hockey-stick divergence of the stronger-clone / "
        "variation-ratio reduction with general-mechanism parameters (Feldman-McMillan-"
        "Talwar 2023 Lemma 3.2; Wang et al. 2024, Privacy amplification via shuffling: "
        "unified, simplified, and tightened, Lemma 4.5 and Thm 4.8)",
    }[method]
    from shuffledp.accounting.events import ShuffledLDP

    # composition uses the variation-ratio pair whatever bound certified this release: it
    # dominates every shuffled eps0-LDP (alpha0 d_X-DP) randomizer
    return Guarantee(
        notion="approximate", model="shuffle", epsilon=eps, delta=delta,
        neighbour=REPLACE_ONE, theorem=theorem,
        parameters={"n": n, "eps0": eps0, "d": d, "method": method},
        event=ShuffledLDP(n=n, eps0=eps0, d=d, epsilon=eps, delta=delta,
                          reduction="variation-ratio", neighbour=REPLACE_ONE),
    )


def _iv_n_delta(n, delta):
    return v.count("n", n, 1), v.probability("delta", delta)


def _iv_d(d) -> float:
    d = v.real("d", d)
    if not (0.0 < d <= 1.0):
        raise ValueError(f"d must be in (0, 1], got d={d!r}")
    return d


#: largest n accepted (counts stay exact in float64 and int64)
MAX_N = 2**53


def _iv_shuffle(n, eps0, delta):
    n = v.count("n", n, 1)
    if n > MAX_N:
        raise ValueError(f"n must be <= 2^53, got n={n!r}")
    eps0 = v.positive("eps0", eps0)
    if eps0 > 700:
        raise ValueError(f"eps0 must be <= 700 (e^eps0 overflows), got eps0={eps0!r}")
    delta = v.probability("delta", delta)
    return n, eps0, delta
