"""Amplification by shuffling: the clones bound and its exact numerical counterpart.

Setting: ``N`` items, each passed through a local randomizer, are shuffled. Two neighbouring
inputs differ in one item (x_1^0 -> x_1^1, the others fixed and public in number), and the
randomizer is eps0-LDP -- or, for the metric version, alpha0 d_X-DP with
d_X(x_1^0, x_1^1) <= d <= 1.

Reduction (Feldman, McMillan, Talwar, "Hiding among the clones", FOCS 2021, Lemma 3.3;
generalised to metric DP in seed 004, App. B.4.2, eqs. 13-22 and Lemma B.2): the shuffled
output is a post-processing of the pair of counts

    P = (A + 1 - D, C - A + D)      versus      Q = (A + D, C - A + 1 - D),

    C ~ Bin(N - 1, p), p = e^{-alpha0},   A ~ Bin(C, 1/2),   D ~ Bernoulli(beta),
    beta = 1 / (1 + e^{alpha0 d}),

so any bound on the hockey-stick divergence D_{e^eps}(P || Q) is a shuffle-DP bound
(P and Q are mirror images, so D(P||Q) = D(Q||P)). For eps0-LDP take d = 1.

Closed form (seed 004, Lemma B.1 with d = 1, which is FMT21 Thm 3.1):

    eps = ln(1 + (e^{eps0} - 1)/(e^{eps0} + 1) * (8 sqrt(e^{eps0} ln(4/delta)) / sqrt(n)
                                                  + 8 e^{eps0} / n)),
    valid for eps0 <= ln(n / (16 ln(2/delta))).

Numerical bound (:func:`clones_numerical`): the exact divergence of (P, Q). Conditioned on
C = c, writing rho = 1 - beta and b_c(a) = Binom(c, a) 2^{-c},

    P(a | c) = rho b_c(a - 1) + (1 - rho) b_c(a),    Q(a | c) = (1 - rho) b_c(a - 1) + rho b_c(a),

and P/Q is increasing in a (rho > 1/2), so the optimal event is {a >= k*} with
k* = floor(x* (c + 1) / (1 + x*)) + 1, x* = (E rho - (1 - rho)) / (rho - E (1 - rho)),
E = e^eps, and

    D_c = (rho - E (1 - rho)) S_c(k* - 1) + ((1 - rho) - E rho) S_c(k*),
    S_c(j) = P[Bin(c, 1/2) >= j] = I_{1/2}(j, c - j + 1)   (regularised incomplete beta),

D = sum_c P[C = c] D_c. Everything is vectorised over c. The support of C is truncated to
its central part; the dropped mass times the largest possible D_c (that of user 1's bit
alone, max(0, rho - E(1 - rho))) is added to the upper estimate, and a relative
floating-point allowance is added (upper) or subtracted (lower).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import betainc, gammaln
from scipy.stats import binom
from shuffledp.accounting import _validate as v
from shuffledp.accounting.guarantee import REPLACE_ONE, Guarantee

METHODS = ("closed-form", "numerical")

#: relative floating-point allowance on every term of the numerical divergence (betainc and
#: log-pmf are accurate to ~1e-12 relative; this is 100x that).
_FP_REL = 1e-10


@dataclass(frozen=True)
class ShuffleBound:
    """An (eps, delta) shuffle-DP bound for N shuffled eps0-LDP (or metric-DP) reports.

    Attributes
    ----------
    epsilon : float
        Certified epsilon: the release is (epsilon, delta)-DP under replacement of one
        report. Never above eps0 (shuffling is post-processing of eps0-LDP reports).
    delta : float
    method : {"closed-form", "numerical"}
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
        Closed form: whether its condition eps0 <= ln(n / (16 ln(2/delta))) holds (when it
        fails, ``epsilon`` falls back to eps0). Numerical: always True.
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

    Seed 004, Lemma B.1 (assumption alpha0 <= ln(m / (16 ln(2/delta)))); FMT21 Thm 3.1.
    The value is negative (no eps0 > 0 qualifies) when n < 16 ln(2/delta).
    """
    n, delta = _iv_n_delta(n, delta)
    return math.log(n / (16.0 * math.log(2.0 / delta)))


def clones_formula(n: int, eps0: float, delta: float, d: float = 1.0) -> float:
    """The raw closed form (seed 004, Lemma B.1; FMT21 Thm 3.1 for d = 1).

    ln(1 + (e^{eps0 d} - 1)/(e^{eps0 d} + 1) (8 sqrt(e^{eps0} ln(4/delta)) / sqrt(n)
    + 8 e^{eps0} / n)). (e^y - 1)/(e^y + 1) is evaluated as tanh(y/2).
    """
    n, delta = _iv_n_delta(n, delta)
    eps0 = v.positive("eps0", eps0)
    d = _iv_d(d)
    k = 8.0 * math.sqrt(math.exp(eps0) * math.log(4.0 / delta) / n) + 8.0 * math.exp(eps0) / n
    return math.log1p(math.tanh(eps0 * d / 2.0) * k)


def clones_closed_form(n: int, eps0: float, delta: float) -> ShuffleBound:
    """Closed-form shuffle bound for n eps0-LDP reports (seed 004 Lemma B.1, d = 1).

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
@dataclass(frozen=True)
class _Mixture:
    """Truncated support of C ~ Bin(N - 1, p) with its weights and the dropped mass."""

    c: np.ndarray
    w: np.ndarray
    dropped: float
    rho: float
    ad: float  # alpha0 * d


def _mixture(N: int, alpha0: float, d: float, tail: float) -> _Mixture:
    p = math.exp(-alpha0)
    trials = N - 1
    rho = 1.0 / (1.0 + math.exp(-alpha0 * d))  # = e^{a d} / (1 + e^{a d})
    if trials == 0:
        return _Mixture(np.zeros(1, dtype=np.int64), np.ones(1), 0.0, rho, alpha0 * d)
    lo = int(binom.ppf(tail / 2.0, trials, p))
    hi = int(binom.isf(tail / 2.0, trials, p))
    lo = max(0, lo - 1)
    hi = min(trials, hi + 1)
    c = np.arange(lo, hi + 1, dtype=np.int64)
    w = np.exp(binom.logpmf(c, trials, p))
    dropped = 0.0
    if lo > 0:
        dropped += float(binom.cdf(lo - 1, trials, p))
    if hi < trials:
        dropped += float(binom.sf(hi, trials, p))
    return _Mixture(c, w, dropped, rho, alpha0 * d)


def _sf_half(j: np.ndarray, c: np.ndarray) -> np.ndarray:
    """P[Bin(c, 1/2) >= j], elementwise, exact at the ends (j <= 0 -> 1, j > c -> 0)."""
    jj = np.clip(j, 1, np.maximum(c, 1))
    out = betainc(jj.astype(float), (c - jj + 1).astype(float), 0.5)
    out = np.where(j <= 0, 1.0, out)
    return np.where(j > c, 0.0, out)


def _pmf_half(j: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Binom(c, j) 2^{-c} elementwise (0 outside 0..c)."""
    ok = (j >= 0) & (j <= c)
    jj = np.where(ok, j, 0)
    lp = gammaln(c + 1.0) - gammaln(jj + 1.0) - gammaln(c - jj + 1.0) - c * math.log(2.0)
    return np.where(ok, np.exp(lp), 0.0)


def _divergence(mix: _Mixture, eps: float) -> tuple[float, float]:
    """(lower, upper) estimates of D_{e^eps}(P || Q) for the truncated mixture."""
    rho = mix.rho
    E = math.exp(eps)
    # coefficient of S(k - 1): rho - E (1 - rho) = (1 - rho) E (e^{alpha0 d - eps} - 1),
    # written with expm1 so that it is exactly 0 at eps = alpha0 d
    A = (1.0 - rho) * E * math.expm1(mix.ad - eps)
    if A <= 0.0:  # e^eps >= rho / (1 - rho) = e^{alpha0 d}: the pair is eps-indistinguishable
        return 0.0, 0.0
    Bc = (1.0 - rho) - E * rho  # coefficient of S(k) (negative)
    x_star = (E * rho - (1.0 - rho)) / A
    c = mix.c
    k = np.floor(x_star * (c + 1) / (1.0 + x_star)).astype(np.int64) + 1
    s_k = _sf_half(k, c)
    s_km1 = s_k + _pmf_half(k - 1, c)
    s_km1 = np.minimum(s_km1, 1.0)
    per_c = A * s_km1 + Bc * s_k
    per_c = np.maximum(per_c, 0.0)
    core = float(np.dot(mix.w, per_c))
    scale = float(np.dot(mix.w, A * s_km1 + abs(Bc) * s_k))
    err = _FP_REL * scale
    upper = core + err + mix.dropped * A
    lower = max(0.0, core - err)
    return lower, upper


def reduction_divergence(
    n: int, eps0: float, eps: float, d: float = 1.0, tail: float = 1e-14
) -> tuple[float, float]:
    """Lower and upper estimates of D_{e^eps}(P || Q) for the clones reduction pair.

    Parameters
    ----------
    n : int
        Number of shuffled reports N (C ~ Bin(N - 1, e^{-eps0})).
    eps0 : float
        Local parameter (alpha0).
    eps : float
        Target epsilon, >= 0.
    d : float
        Distance of the changed item, in (0, 1] (1 for LDP).
    tail : float
        Binomial mass of C left out of the exact sum (added to the upper estimate).

    Returns
    -------
    (lower, upper) : tuple of float
        lower <= D_{e^eps}(P || Q) <= upper (up to the stated floating-point allowance).
    """
    n = v.count("n", n, 1)
    eps0 = v.positive("eps0", eps0)
    eps = v.real("eps", eps)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got eps={eps!r}")
    d = _iv_d(d)
    tail = v.probability("tail", tail)
    return _divergence(_mixture(n, eps0, d, tail), eps)


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
    upper-estimate D_{e^eps_k}(P || Q) <= delta (bisection over k; D is non-increasing in
    eps). Because the grid is fixed, the result is monotone in n and eps0 whenever the
    divergence is.

    Parameters
    ----------
    n : int
        Number of shuffled reports (>= 1).
    eps0 : float
        Local parameter (> 0).
    delta : float
        In (0, 1).
    d : float, default 1
        Distance bound of the changed item for a metric randomizer (seed 004 Lemma B.1);
        1 for eps0-LDP.
    rtol : float, default 1e-3
        Relative resolution of the epsilon grid.
    tail : float, optional
        Mass of C ~ Bin(n - 1, e^{-eps0}) left out of the exact sum; default
        ``min(1e-4 * delta, 1e-10)``. It is charged to the upper bound.

    Returns
    -------
    ShuffleBound
        ``epsilon`` is certified (upper); ``epsilon_lower`` is where the divergence of the
        reduction pair provably exceeds delta; ``tolerance = epsilon - epsilon_lower``.
    """
    n, eps0, delta = _iv_shuffle(n, eps0, delta)
    d = _iv_d(d)
    rtol = v.positive("rtol", rtol)
    if rtol > 0.5:
        raise ValueError(f"rtol must be in (0, 0.5], got rtol={rtol!r}")
    tail = min(1e-4 * delta, 1e-10) if tail is None else v.probability("tail", tail)
    mix = _mixture(n, eps0, d, tail)
    h = math.log1p(rtol)
    top = eps0 * d
    cache: dict[int, tuple[float, float]] = {}

    def at(k: int) -> tuple[float, float]:
        if k not in cache:
            cache[k] = _divergence(mix, math.exp(k * h))
        return cache[k]

    # grid index whose epsilon is >= eps0 d: there the divergence is exactly 0
    k_hi = math.ceil(math.log(top) / h)
    while math.exp(k_hi * h) < top:
        k_hi += 1
    # first guess from the closed-form scaling, then bracket downwards
    guess = min(top, clones_formula(n, eps0, delta, d) / 4.0) if n > 1 else top
    k_lo = min(k_hi - 1, math.floor(math.log(max(guess, 1e-300)) / h))
    k_min = math.floor(math.log(1e-12) / h)
    step = max(1, round(math.log(2.0) / h))
    while at(k_lo)[1] <= delta and k_lo > k_min:
        k_hi = k_lo
        k_lo = max(k_min, k_lo - step)
    if at(k_lo)[1] <= delta:  # even 1e-12 is certified
        k_hi = k_lo
    else:
        # tighten the upper bracket quickly
        while k_hi - k_lo > 1:
            mid = (k_lo + k_hi) // 2
            if at(mid)[1] <= delta:
                k_hi = mid
            else:
                k_lo = mid
    eps_up = math.exp(k_hi * h) if k_hi * h < math.log(top) else top
    eps_up = min(eps_up, top)
    lows = [k for k, (lo_, _) in cache.items() if lo_ > delta]
    eps_low = math.exp(max(lows) * h) if lows else 0.0
    eps_low = min(eps_low, eps_up)
    notes = (
        f"binomial tail mass {tail:.3g} of C charged to the upper bound; "
        f"grid resolution rtol={rtol:g}",
    )
    return ShuffleBound(
        epsilon=eps_up, delta=delta, method="numerical", n=n, eps0=eps0, d=d,
        epsilon_lower=eps_low, tolerance=eps_up - eps_low, valid=True,
        guarantee=_guarantee(eps_up, delta, n, eps0, "numerical", d=d),
        notes=notes,
    )


def shuffle_ldp(n: int, eps0: float, delta: float, method: str = "numerical",
                **kwargs) -> ShuffleBound:
    """Amplification by shuffling of n eps0-LDP reports (dispatch on ``method``).

    ``method`` is ``"closed-form"`` (:func:`clones_closed_form`) or ``"numerical"``
    (:func:`clones_numerical`, keyword arguments forwarded).
    """
    method = v.choice("method", method, METHODS)
    if method == "closed-form":
        if kwargs:
            raise TypeError(f"closed-form takes no extra arguments, got {sorted(kwargs)}")
        return clones_closed_form(n, eps0, delta)
    return clones_numerical(n, eps0, delta, **kwargs)


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
        :func:`clones_numerical` at ``eps0``.
    target_epsilon : float
    """

    eps0: float
    eps0_next: float
    bound: ShuffleBound
    target_epsilon: float


def clones_eps0_for_target(
    n: int, target_epsilon: float, delta: float, *, rtol: float = 1e-3,
    eps0_max: float = 20.0,
) -> LocalParameter:
    """Largest eps0 (on the grid (1 + rtol)^k) with clones_numerical(n, eps0).epsilon <= target.

    The numerical bound is non-decreasing in eps0, so bisection over the grid index keeps a
    verified lower end (returned) and a verified failing upper end.

    Raises
    ------
    ValueError
        If even eps0 = target_epsilon fails (cannot happen: the bound never exceeds eps0) or
        arguments are invalid; the message names the argument and value.
    """
    n = v.count("n", n, 1)
    target = v.positive("target_epsilon", target_epsilon)
    delta = v.probability("delta", delta)
    rtol = v.positive("rtol", rtol)
    if rtol > 0.5:
        raise ValueError(f"rtol must be in (0, 0.5], got rtol={rtol!r}")
    eps0_max = v.positive("eps0_max", eps0_max)
    if eps0_max > 700:
        raise ValueError(f"eps0_max must be <= 700, got eps0_max={eps0_max!r}")
    h = math.log1p(rtol)

    def ok(k: int) -> tuple[bool, ShuffleBound]:
        b = clones_numerical(n, math.exp(k * h), delta, rtol=rtol)
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
    theorem = (
        "Feldman-McMillan-Talwar 2021 (clones) Thm 3.1 = seed 004 Lemma B.1 (d=1)"
        if method == "closed-form"
        else "exact hockey-stick divergence of the clones reduction "
        "(FMT21 Lemma 3.3; seed 004 App. B.4.2, Lemma B.2)"
    )
    return Guarantee(
        notion="approximate", model="shuffle", epsilon=eps, delta=delta,
        neighbour=REPLACE_ONE, theorem=theorem,
        parameters={"n": n, "eps0": eps0, "d": d, "method": method},
    )


def _iv_n_delta(n, delta):
    return v.count("n", n, 1), v.probability("delta", delta)


def _iv_d(d) -> float:
    d = v.real("d", d)
    if not (0.0 < d <= 1.0):
        raise ValueError(f"d must be in (0, 1], got d={d!r}")
    return d


def _iv_shuffle(n, eps0, delta):
    n = v.count("n", n, 1)
    eps0 = v.positive("eps0", eps0)
    if eps0 > 700:
        raise ValueError(f"eps0 must be <= 700 (e^eps0 overflows), got eps0={eps0!r}")
    delta = v.probability("delta", delta)
    return n, eps0, delta
