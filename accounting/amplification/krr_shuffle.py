"""Shuffled k-ary randomized response: a certified bound from its exact privacy blanket.

k-RR on k values with parameter eps0 reports the true value with probability
p alpha and each other value with probability alpha, p = e^{eps0}, alpha = 1/(p + k - 1).
Equivalently ([BBGN19]_ Sec. 3, the privacy blanket): with probability lambda = k alpha a user
reports a uniform value (the blanket), otherwise the truth.

Reduction (post-processing, proved here). Reveal to the adversary the set of *other* users
who reported the truth, and their reports; this only adds information. What is left is the
pool of n - 1 - (truthful others) blanket reports, uniform on the k values, and user 1's
report, which has law (p alpha, alpha, (k - 2) alpha) on (x1^0, x1^1, any other value) under
one input and the mirror image under the other -- user 1 is kept in the pool whatever it
reports. By the symmetry of the blanket only three counts of the pool matter: a on x1^0,
b on x1^1, z on the k - 2 other values. With (a, b, z, r) ~ Multinomial(n; alpha, alpha,
(k - 2) alpha, 1 - lambda) written W, the two laws are

    P(a, b, z) = W(a, b, z) (p a + b + z) / n,     Q(a, b, z) = W(a, b, z) (a + p b + z) / n,

(the multinomial ratio identity, user 1 in the pool), so with E = e^eps, c = a + b,
K1 = (p - 1)(1 + E) and K0 = (1 - E p) c + (1 - E) z,

    D_{e^eps}(P || Q) = (1/n) sum_{c, z} W(c, z) g(c, z),
    g(c, z) = sum_{a >= a*} Binom(c, a) 2^{-c} (K0 + K1 a)
            = K0 S_c(a*) + K1 (c/2) S_{c-1}(a* - 1),     a* = floor(-K0 / K1) + 1,

where W(c, z) = Bin(n, 2 alpha)(c) Bin(n - c, (k - 2) alpha / (1 - 2 alpha))(z) and
S_c(j) = P[Bin(c, 1/2) >= j]. P and Q are mirror images, so D(P||Q) = D(Q||P).

For k = 2 the pair is the stronger-clone pair of general eps0-LDP randomizers
(:func:`shuffledp.accounting.amplification.clones.variation_ratio_numerical`); for k >= 3 it is
smaller, and
it dominates the exact divergence of shuffled k-RR on every data set of up to five users
(``tests/accounting/test_krr_shuffle.py`` enumerates them). It is not the pair of [WPLW24]_
Lemma 4.5 with k-RR's total variation, which hides user 1's other-value reports among the
*truthful* reports of others too, and fails (``docs/errata.md`` row 12): here user 1's
other-value reports hide only among blanket reports, whose law on the k - 2 other values is
the same uniform one.

Numerics. a* takes few distinct values along z for fixed c, so the grid W (computed once) is
summed per run of constant a* (``np.bincount``) and S is evaluated once per run. Truncated
mass of W is charged at the largest possible per-cell value (p + 1)/2 (the P-mass bound), a
relative floating-point allowance is added to the upper estimate, and an evaluation that fails
a self-check returns an infinite upper estimate (never certifies).

References
----------
.. [BBGN19] Balle et al. (2019), "The Privacy Blanket of the Shuffle Model", Sec. 3 -- full entry in
   docs/references.md
.. [WPLW24] Wang et al. (2024), "Privacy Amplification via Shuffling" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math

from shuffledp import _validation as v
from shuffledp.accounting.amplification._common import (  # noqa: F401  (MAX_CELLS: public here)
    MAX_CELLS,
    SELF_CHECK_NOTE,
    ShuffleBound,
    _blanket,
    _blanket_cached,
    _blanket_divergence,
    _certify,
    _iv_k,
    _iv_rtol,
    _iv_shuffle,
    clones_formula,
    krr_default_tail,
)
from shuffledp.accounting.events import ShuffledKRR
from shuffledp.accounting.guarantee import Guarantee, Neighbour


def krr_blanket_divergence(n: int, k: int, eps0: float, eps: float,
                           tail: float = 1e-14) -> tuple[float, float]:
    """Lower and upper estimates of D_{e^eps}(P || Q) for shuffled k-RR's blanket pair.

    Parameters
    ----------
    n : int
        Users (reports), >= 1.
    k : int
        Size of the k-RR domain, >= 2.
    eps0 : float
        k-RR's parameter, in (0, 700].
    eps : float
        >= 0.
    tail : float
        Mass of W left out of the exact sum (charged to the upper estimate at (p + 1)/2).

    Returns
    -------
    (lower, upper) : tuple of float

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range (``eps`` >= 0, ``k`` >= 2, ``tail`` in (0, 1)).

    References
    ----------
    [BBGN19]_ Sec. 3 (the privacy blanket).
    """
    n, eps0, _ = _iv_shuffle(n, eps0, 0.5)
    k = _iv_k(k)
    eps = v.real("eps", eps)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got eps={eps!r}")
    tail = v.probability("tail", tail)
    return _blanket_divergence(_blanket(n, k, eps0, tail), eps)


def krr_shuffle_numerical(n: int, eps0: float, delta: float, *, k: int,
                          rtol: float = 1e-3, tail: float | None = None) -> ShuffleBound:
    """Certified (eps, delta) for n shuffled eps0-k-RR reports, from the exact blanket pair.

    The same certified grid search as
    :func:`shuffledp.accounting.amplification.clones.clones_numerical`
    (the released epsilon's own upper estimate is <= delta; ``epsilon_lower`` is where the
    pair's divergence provably exceeds delta). At n = 1e5, eps0 = 1, delta = 1e-6 it gives
    0.01092 for k = 3, 0.00664 for k = 10 and 0.00201 for k = 100, against 0.01244 for any
    eps0-LDP randomizer (``bench/accounting_numerical.py --krr``).

    Parameters
    ----------
    n : int
        Users, >= 1.
    eps0 : float
        k-RR parameter, in (0, 700].
    delta : float
        In (0, 1).
    k : int
        Domain size, >= 2 (k = 2 gives the general-mechanism bound).
    rtol : float, default 1e-3
        Relative resolution of the epsilon grid, in (0, 0.5].
    tail : float, optional
        Mass of W left out; default ``min(1e-4 delta, 1e-10) 2/(e^{eps0} + 1)``.

    Returns
    -------
    ShuffleBound
        ``method="krr-blanket"``; ``valid=False`` with (eps0, 0) when nothing below eps0 is
        certified (k-RR is eps0-LDP and shuffling is post-processing).

    Raises
    ------
    ValueError
        Bad arguments (named), or a grid larger than :data:`MAX_CELLS` (n beyond about 1e6
        for k = 3, more for larger k): use the general bound.

    References
    ----------
    [BBGN19]_ Sec. 3 (the privacy blanket pair).
    """
    n, eps0, delta = _iv_shuffle(n, eps0, delta)
    k = _iv_k(k)
    rtol = _iv_rtol(rtol)
    if tail is None:
        tail = krr_default_tail(delta, eps0)
    else:
        tail = v.probability("tail", tail)
    bl = _blanket_cached(n, k, eps0, tail)
    h = math.log1p(rtol)
    guess = min(eps0, clones_formula(n, eps0, delta) / 8.0) if n > 1 else eps0
    r = _certify(lambda e: _blanket_divergence(bl, e), eps0, guess, h, delta)
    notes = [f"exact blanket pair of {k}-RR; W tail mass {tail:.3g} charged to the upper "
             f"bound; grid resolution rtol={rtol:g}"]
    if r.self_check_failed:
        notes.append(SELF_CHECK_NOTE)
    if not r.valid:
        notes.append(f"no amplification certified below eps0 = {eps0:.6g} at delta={delta:g} "
                     f"for n={n}; falling back to the local guarantee ({eps0:.6g}, 0)")
    guarantee = Guarantee(
        notion="approximate", model="shuffle", epsilon=r.epsilon, delta=r.delta,
        neighbour=Neighbour.REPLACE_ONE,
        theorem=("exact hockey-stick divergence of the privacy-blanket pair of k-ary "
                 "randomized response (Balle-Bell-Gascon-Nissim 2019, The privacy blanket of "
                 "the shuffle model, Sec. 3; reduction in "
                 "shuffledp.accounting.amplification.krr_shuffle)"),
        parameters={"n": n, "eps0": eps0, "k": k, "method": "krr-blanket"},
        event=ShuffledKRR(n=n, k=k, eps0=eps0, epsilon=r.epsilon, delta=r.delta,
                          neighbour=Neighbour.REPLACE_ONE))
    return ShuffleBound(
        epsilon=r.epsilon, delta=r.delta, method="krr-blanket", n=n, eps0=eps0,
        epsilon_lower=r.epsilon_lower, tolerance=r.epsilon - r.epsilon_lower,
        valid=r.valid, guarantee=guarantee, notes=tuple(notes))


__all__ = ["MAX_CELLS", "krr_blanket_divergence", "krr_shuffle_numerical"]
