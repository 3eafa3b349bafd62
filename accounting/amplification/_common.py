"""What the shuffle_ldp modules and :mod:`shuffledp.accounting.events` share.

- argument checks (n, eps0, delta, d, k, rtol) and their limits;
- :class:`ShuffleBound`, the record every bound returns, and the certification of an
  epsilon by a grid search on a certified divergence;
- the two dominating pairs whose hockey-stick divergence is computed exactly: the clones /
  variation-ratio mixture of [FMT21]_ / [Imola]_ (:func:`_mixture`, :func:`_divergence`)
  and the privacy blanket of k-ary randomized response of [BBGN19]_ (:func:`_blanket`,
  :func:`_blanket_divergence`). The bound modules (:mod:`.clones`, :mod:`.krr_shuffle`)
  certify epsilons with them; :mod:`shuffledp.accounting.events` builds the privacy loss
  distributions of the same pairs.

References
----------
.. [FMT21] Feldman et al. (2021), "Hiding Among the Clones" -- full entry in docs/references.md
.. [FMT23] Feldman et al. (2023), "Stronger Privacy Amplification by Shuffling for Renyi and
   Approximate ..." -- full entry in docs/references.md
.. [WPLW24] Wang et al. (2024), "Privacy Amplification via Shuffling" -- full entry in
   docs/references.md
.. [Imola] Imola et al. (preprint), "Metric Differential Privacy at the User-Level" -- full entry in
   docs/references.md
.. [BBGN19] Balle et al. (2019), "The Privacy Blanket of the Shuffle Model", Sec. 3 -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.special import betainc

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee

#: the reductions whose exact divergence is computed ("numerical" is the clones reduction)
REDUCTIONS = ("clones", "variation-ratio")


def _binom() -> Any:
    """SciPy's binomial distribution, imported on first use (scipy.stats takes about 1 s
    to import, and most releases never compute a shuffle bound)."""
    from scipy.stats import binom

    return binom


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

    hi = first(lambda k: _binom().sf(k, trials, p) <= half, mid, trials)
    lo = first(lambda k: _binom().cdf(k, trials, p) > half, 0, mid)
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
    w = _binom().pmf(c, trials, p)
    dropped = 0.0
    if lo > 0:
        dropped += float(_binom().cdf(lo - 1, trials, p))
    if hi < trials:
        dropped += float(_binom().sf(hi, trials, p))
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
        S[row] = S[row + 1] + _binom().pmf(js[row], c, 0.5)
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


# --------------------------------------------------------------------------- k-RR blanket
#: largest number of (c, z) cells kept (about 60 bytes per cell at peak: ~3 GB at the cap)
MAX_CELLS = 50_000_000
@dataclass(frozen=True)
class _Blanket:
    """The grid W(c, z) of the blanket pair and its constants (computed once per n, k, eps0)."""

    n: int
    eps0: float
    c: np.ndarray  # (C,) values of c
    z0: np.ndarray  # (C,) first z of each row
    W: np.ndarray  # (C, Z) weights, W[i, j] = W(c[i], z0[i] + j)
    Wz: np.ndarray  # (C, Z) W * z
    dropped: float  # mass of W outside the grid
    mass_ok: bool


def _blanket(n: int, k: int, eps0: float, tail: float) -> _Blanket:
    p = math.exp(eps0)
    alpha = 1.0 / (p + k - 1.0)
    pc = 2.0 * alpha
    rho = (k - 2.0) * alpha / (1.0 - pc) if k > 2 else 0.0
    lo, hi = _support(n, pc, tail / 2.0)
    c = np.arange(lo, hi + 1, dtype=np.int64)
    wc = _binom().pmf(c, n, pc)
    dropped = float(_binom().cdf(lo - 1, n, pc) if lo > 0 else 0.0)
    dropped += float(_binom().sf(hi, n, pc) if hi < n else 0.0)
    if rho == 0.0:
        zl = np.zeros(c.size, dtype=np.int64)
        zh = zl
    else:
        # z | c ~ Bin(n - c, rho): its window slides with the mean (n - c) rho; the end rows'
        # exact windows give the half widths (the variance is monotone in n - c). Any window
        # is sound: the mass it leaves out is measured below and charged.
        mean = (n - c) * rho
        (la, ha), (lb, hb) = (_support(int(n - c[i]), rho, tail / 2.0) for i in (0, -1))
        below = max(mean[0] - la, mean[-1] - lb)
        above = max(ha - mean[0], hb - mean[-1])
        zl = np.maximum(np.floor(mean - below).astype(np.int64) - 1, 0)
        zh = np.minimum(np.ceil(mean + above).astype(np.int64) + 1, n - c)
    width = int((zh - zl).max()) + 1
    if c.size * width > MAX_CELLS:
        raise ValueError(
            f"n={n}, k={k}, eps0={eps0} needs {c.size * width} cells > {MAX_CELLS} for the "
            "exact k-RR blanket; use randomizer='general'")
    z = zl[:, None] + np.arange(width, dtype=np.int64)[None, :]
    inside = z <= zh[:, None]
    W = np.where(inside, wc[:, None] * _binom().pmf(z, (n - c)[:, None], rho), 0.0)
    if rho > 0.0:
        # mass of z left out of each row, measured directly (never as 1 - sum of the kept)
        out_lo = np.where(zl > 0, _binom().cdf(zl - 1, n - c, rho), 0.0)
        out_hi = np.where(zh < n - c, _binom().sf(zh, n - c, rho), 0.0)
        dropped += float(np.dot(wc, out_lo + out_hi))
    mass_ok = bool(np.all(np.isfinite(W))) and abs(float(W.sum()) + dropped - 1.0) <= 1e-9
    return _Blanket(n, eps0, c, zl, W, W * z, dropped, mass_ok)


def _blanket_divergence(bl: _Blanket, eps: float) -> tuple[float, float]:
    """(lower, upper) estimates of D_{e^eps}(P || Q); upper is inf if not trustworthy."""
    if not bl.mass_ok:
        return 0.0, math.inf
    n = bl.n
    if eps >= bl.eps0:
        return 0.0, 0.0
    if eps + bl.eps0 > 700.0:  # e^{eps0 + eps} overflows: never certify
        return 0.0, math.inf
    E = math.exp(eps)
    # expm1 forms: no cancellation of numbers close to 1 when eps0 or eps is tiny
    K1 = math.expm1(bl.eps0) * (1.0 + E)
    cz, cc = -math.expm1(eps), -math.expm1(eps + bl.eps0)  # K0 = cc c + cz z (both < 0)
    if not (math.isfinite(K1) and math.isfinite(cc)):
        return 0.0, math.inf
    c = bl.c
    width = bl.W.shape[1]
    z = bl.z0[:, None] + np.arange(width)[None, :]
    x = -(cc * c[:, None] + cz * z) / K1
    if not np.all(np.isfinite(x)):
        return 0.0, math.inf
    astar = np.floor(x).astype(np.int64) + 1
    astar = np.clip(astar, 0, (c + 1)[:, None])
    base = astar[:, 0]
    off = astar - base[:, None]
    J = int(off.max()) + 1
    idx = (np.arange(c.size)[:, None] * J + off).ravel()
    sw = np.bincount(idx, weights=bl.W.ravel(), minlength=c.size * J).reshape(c.size, J)
    swz = np.bincount(idx, weights=bl.Wz.ravel(), minlength=c.size * J).reshape(c.size, J)
    a = base[:, None] + np.arange(J)[None, :]
    cb = np.broadcast_to(c[:, None], a.shape)
    S0 = _sf_half(a, cb)
    S1 = np.where(cb > 0, _sf_half(a - 1, np.maximum(cb - 1, 0)), 0.0)
    neg = -(cc * cb * sw + cz * swz) * S0  # the K0 part (K0 < 0)
    pos = K1 * (cb / 2.0) * S1 * sw
    term = pos - neg
    err = _FP_REL * (pos + neg)
    if not (np.all(np.isfinite(term)) and np.all(np.isfinite(err))):
        return 0.0, math.inf
    core_up = float(np.maximum(term + err, 0.0).sum()) / n
    core_lo = float(np.maximum(term - err, 0.0).sum()) / n
    # a dropped cell's divergence is at most its P-mass, W (((p + 1)/2) c + z)/n <= W (p + 1)/2
    upper = core_up * (1.0 + _FP_REL) + bl.dropped * (math.exp(bl.eps0) + 1.0) / 2.0 + _FP_ABS
    lower = max(0.0, core_lo * (1.0 - _FP_REL) - _FP_ABS)
    return lower, upper


def _iv_k(k) -> int:
    k = v.count("k", k, 2)
    if k > 2**53:
        raise ValueError(f"k must be <= 2^53, got k={k!r}")
    return k


# --------------------------------------------------------------------------- shared caches
@lru_cache(maxsize=16)
def _mixture_cached(N: int, alpha0: float, d: float, tail: float,
                    reduction: str = "clones") -> _Mixture:
    """:func:`_mixture`, remembered: the bound that certifies a release and the event that
    re-checks it (:mod:`shuffledp.accounting.events`) compute the same pair once."""
    return _mixture(N, alpha0, d, tail, reduction)


@lru_cache(maxsize=2)
def _blanket_cached(n: int, k: int, eps0: float, tail: float) -> _Blanket:
    """:func:`_blanket`, remembered (two at most: a grid can take a few hundred MB)."""
    return _blanket(n, k, eps0, tail)


def krr_default_tail(delta: float, eps0: float) -> float:
    """The W tail mass left out by default when certifying k-RR at ``delta``."""
    return max(min(1e-4 * delta, 1e-10) * 2.0 / (math.exp(eps0) + 1.0), 1e-300)


def default_tail(delta: float) -> float:
    """The binomial tail mass left out by default when certifying at ``delta``."""
    return max(min(1e-4 * delta, 1e-10), 1e-300)
