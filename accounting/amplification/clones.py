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
.. [FMT23] Feldman et al. (2023), "Stronger Privacy Amplification by Shuffling for Renyi and
   Approximate ..." -- full entry in docs/references.md
.. [WPLW24] Wang et al. (2024), "Privacy Amplification via Shuffling" -- full entry in
   docs/references.md
.. [FMT21] Feldman et al. (2021), "Hiding Among the Clones" -- full entry in docs/references.md
.. [BBGN19] Balle et al. (2019), "The Privacy Blanket of the Shuffle Model" -- full entry in
   docs/references.md
.. [Imola] Imola et al. (preprint), "Metric Differential Privacy at the User-Level" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from shuffledp import _validation as v

# the closed form, the clone probability and the bound record are defined with the pairs in
# _common (krr_shuffle and events use them too) and are part of this module's API
from shuffledp.accounting.amplification._common import (  # noqa: F401
    SELF_CHECK_NOTE,
    ShuffleBound,
    _certify,
    _divergence,
    _iv_d,
    _iv_k,
    _iv_rtol,
    _iv_shuffle,
    _mixture,
    _mixture_cached,
    clone_probability,
    clones_formula,
    clones_validity_limit,
    default_tail,
)
from shuffledp.accounting.amplification.binary_rr import MAX_N as BINARY_RR_MAX_N
from shuffledp.accounting.amplification.binary_rr import binary_rr_shuffle_exact
from shuffledp.accounting.amplification.krr_shuffle import krr_shuffle_numerical
from shuffledp.accounting.events import ShuffledLDP
from shuffledp.accounting.guarantee import Guarantee, Neighbour

METHODS = ("tightest", "variation-ratio", "numerical", "closed-form", "krr-blanket",
           "binary-rr-exact")
#: what is known of the local randomizer: any eps0-LDP one, or k-ary randomized response
RANDOMIZERS = ("general", "krr")
# --------------------------------------------------------------------------- closed form
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

    Raises
    ------
    TypeError, ValueError
        ``n`` is not an integer in [1, 2^53], ``eps0`` not in (0, 700] or ``delta`` not in
        (0, 1).

    References
    ----------
    [Imola]_ Lemma B.1; [FMT21]_ Thm 3.1.
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

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range (``eps`` >= 0, ``d`` in (0, 1], ``tail`` in (0, 1),
        ``reduction`` one of the two pairs).

    References
    ----------
    [FMT21]_ Lemma 3.3 (clones); [FMT23]_ Lemma 3.2 and [WPLW24]_ Lemma 4.5
    (variation-ratio); [Imola]_ App. B.4.2 (d < 1).
    """
    n, eps0, _ = _iv_shuffle(n, eps0, 0.5)
    eps = v.real("eps", eps)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got eps={eps!r}")
    d = _iv_d(d)
    tail = v.probability("tail", tail)
    return _divergence(_mixture(n, eps0, d, tail, reduction), eps)


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

    Raises
    ------
    TypeError, ValueError
        ``n`` is not an integer in [1, 2^53], ``eps0`` not in (0, 700] or ``delta`` not in
        (0, 1). or ``d``, ``rtol`` or ``tail`` is out of its range.

    References
    ----------
    [FMT21]_ Lemma 3.3; [Imola]_ App. B.4.2, Lemma B.2.
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

    Parameters
    ----------
    n, eps0, delta, d, rtol, tail
        As :func:`clones_numerical`.

    Returns
    -------
    ShuffleBound
        As :func:`clones_numerical`, with ``method="variation-ratio"``.

    Raises
    ------
    TypeError, ValueError
        ``n`` is not an integer in [1, 2^53], ``eps0`` not in (0, 700] or ``delta`` not in
        (0, 1). or ``d``, ``rtol`` or ``tail`` is out of its range.

    References
    ----------
    [FMT23]_ Lemma 3.2; [WPLW24]_ Lemma 4.5 and Thm 4.8.
    """
    return _numerical(n, eps0, delta, d=d, rtol=rtol, tail=tail, reduction="variation-ratio")


def _numerical(n, eps0, delta, *, d, rtol, tail, reduction) -> ShuffleBound:
    n, eps0, delta = _iv_shuffle(n, eps0, delta)
    d = _iv_d(d)
    rtol = _iv_rtol(rtol)
    tail = default_tail(delta) if tail is None else v.probability("tail", tail)
    mix = _mixture_cached(n, eps0, d, tail, reduction)
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


def _need_k(k: int | None) -> int:
    """``k`` of a k-RR bound: refused when missing (``randomizer='krr'`` needs it)."""
    if k is None:
        raise ValueError("randomizer='krr' needs the domain size k, got k=None")
    return k


def shuffle_ldp(n: int, eps0: float, delta: float, method: str = "tightest", *,
                randomizer: str = "general", k: int | None = None,
                progress: Any = None, **kwargs) -> ShuffleBound:
    """Amplification by shuffling of n eps0-LDP reports (dispatch on ``method``).

    ``method`` is ``"tightest"`` (every bound valid for ``randomizer`` is computed and the
    smallest certified epsilon is returned; the others are listed in ``notes``),
    ``"variation-ratio"`` (:func:`variation_ratio_numerical`), ``"numerical"``
    (:func:`clones_numerical`), ``"closed-form"`` (:func:`clones_closed_form`) or
    ``"krr-blanket"`` (:func:`shuffledp.accounting.amplification.krr_shuffle.krr_shuffle_numerical`,
    k-RR
    only) or ``"binary-rr-exact"`` (:func:`shuffledp.accounting.amplification.binary_rr.
    binary_rr_shuffle_exact`: binary RR's exact worst case over every data set, k = 2 and n <=
    2e5; about 15 s at n = 1e5). ``randomizer="krr"`` with ``k`` says the reports come from
    k-ary randomized response, which adds the k-RR bounds to "tightest". ``progress`` (a
    callable ``(done, total)``) follows binary RR's check of every data set. Keyword arguments
    (``d``, ``rtol``, ``tail``) go to the numerical methods; ``d`` != 1 is not available in
    closed form nor for k-RR.

    Parameters
    ----------
    n : int
        Number of users (reports).
    eps0 : float
        Local epsilon (or alpha0) of each report, in (0, 700].
    delta : float
        In (0, 1).
    method : str
        Which bound (above): "tightest", "variation-ratio", "numerical", "closed-form",
        "krr-blanket" or "binary-rr-exact".
    randomizer : {"general", "krr"}
        What is known about the local randomizer.
    k : int, optional
        Domain size of k-RR (with ``randomizer="krr"`` only).
    progress : callable, optional
        ``(done, total)`` callback of binary RR's exact check.
    **kwargs
        ``d``, ``rtol``, ``tail`` for the numerical methods.

    Returns
    -------
    ShuffleBound
        The certified (epsilon, delta) with the method used, its notes and the guarantee.

    Raises
    ------
    TypeError
        ``method="closed-form"`` with extra keyword arguments, or an argument of the wrong
        type.
    ValueError
        An argument is out of its range, or ``method`` and ``randomizer``/``k`` do not go
        together (``krr-blanket`` needs k-RR, ``binary-rr-exact`` needs k = 2, ``d`` != 1
        with k-RR, ``k`` without k-RR).

    References
    ----------
    [FMT21]_ Thm 3.1 and Lemma 3.3; [FMT23]_ Lemma 3.2; [WPLW24]_ Lemma 4.5; [BBGN19]_
    (k-RR blanket).
    """

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
        return krr_shuffle_numerical(n, eps0, delta, k=_need_k(k), **krr_kw)
    if method == "binary-rr-exact":
        return binary_rr_shuffle_exact(n, eps0, delta, progress=progress, **exact_kw)
    bounds = [variation_ratio_numerical(n, eps0, delta, **kwargs),
              clones_numerical(n, eps0, delta, **kwargs)]
    if kwargs.get("d", 1.0) == 1.0:
        bounds.append(clones_closed_form(n, eps0, delta))
    skipped = ""
    if randomizer == "krr":
        try:
            bounds.insert(0, krr_shuffle_numerical(n, eps0, delta, k=_need_k(k), **krr_kw))
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

    Parameters
    ----------
    n : int
        Number of users (>= 1).
    target_epsilon : float
        The shuffled epsilon to reach (> 0).
    delta : float
        In (0, 1).
    rtol : float
        Relative step of the eps0 grid.
    eps0_max : float
        Largest eps0 searched (<= 700).
    method : {"numerical", "variation-ratio"}
        Which bound.

    Returns
    -------
    LocalParameter
        eps0 and the bound at it.

    References
    ----------
    [FMT21]_ Lemma 3.3; [FMT23]_ Lemma 3.2; [WPLW24]_ Lemma 4.5.
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

    # composition uses the variation-ratio pair whatever bound certified this release: it
    # dominates every shuffled eps0-LDP (alpha0 d_X-DP) randomizer
    return Guarantee(
        notion="approximate", model="shuffle", epsilon=eps, delta=delta,
        neighbour=Neighbour.REPLACE_ONE, theorem=theorem,
        parameters={"n": n, "eps0": eps0, "d": d, "method": method},
        event=ShuffledLDP(n=n, eps0=eps0, d=d, epsilon=eps, delta=delta,
                          reduction="variation-ratio", neighbour=Neighbour.REPLACE_ONE),
    )


