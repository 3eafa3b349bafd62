"""Hadamard response ([ASZ19]_): the user-level baseline of [Imola]_ Lemma 6.4, one report.

Lemma 6.4 of [Imola]_ cites the user-level frequency estimator of Chen et al. 2020 built on
Hadamard response. Here each user samples ONE of her m items uniformly and reports it with
epsilon-Hadamard response (the symmetric variant of [ASZ19]_): with K the smallest power of
two above k, item x owns the set C_x = {y in [0, K): <x + 1, y> even} (row x + 1 of the
Sylvester-Hadamard matrix, +1 entries, |C_x| = K/2), and the report is uniform on C_x with
probability e^eps / (e^eps + 1), else uniform on its complement. Any two items' output laws
are within e^eps pointwise, so the report (a mixture over the sampled item) is epsilon-DP
against replacing the user's whole dataset.

Estimation in closed form (no matrix inverse): for x' != x, |C_x cap C_x'| = K/4, so
P(y in C_x | x') = 1/2 and P(y in C_x | x) = e^eps / (e^eps + 1) =: p. Hence with f_x the
fraction of reports in C_x, (f_x - 1/2) / (p - 1/2) is unbiased for the users' mean
normalised histogram K~; adding (1 - its sum) / k to every coordinate keeps it unbiased (the
sum's expectation is 1) and makes the total mass exactly 1. Every coordinate's variance is at most
1 / (4 n (p - 1/2)^2) ~ 1 / (n eps^2) for small eps, independent of k, where k-RR's grows
with k.

Sampling is exact: integer weights w_in = floor(2^24 e^eps) and w_out = 2^24 (the realised
epsilon ln(w_in / w_out) <= eps is what the guarantee states), a uniform integer below
(K/2)(w_in + w_out) from the secure generator, and a bijection from [0, K/2) onto C_x
(insert a bit at a position where x + 1 has a one, fixed to make the parity even) or onto
its complement.

References
----------
.. [ASZ19] Acharya et al. (2019), "Hadamard response" -- full entry in docs/references.md
.. [Imola] Imola et al. (preprint), "Metric DP at the user-level" -- full entry in
   docs/references.md
"""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np

from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.analyzers.metric.user_level import BaselineRelease, iv_user_level
from shuffledp.encoders.metric.mechanisms import (
    _shift,
    one_item_per_user,
    rr_weights,
    uniform_below,
)
from shuffledp.randomness import (
    SEEDED_NOTE,
    RngLike,
    SecureRandom,
    is_seeded,
    noise_source,
    word_source,
)

THEOREM = ("user-level Hadamard response baseline (for Imola et al. Lemma 6.4): one uniformly "
           "sampled item per user through epsilon-Hadamard response (Acharya-Sun-Zhang 2019)")
_W_OUT = 1 << 24


def _parity(a: np.ndarray) -> np.ndarray:
    """popcount(a) mod 2 for non-negative int64 arrays."""
    a = a.copy()
    p = np.zeros_like(a)
    while np.any(a):
        p ^= a & 1
        a >>= 1
    return p


def hadamard_weights(epsilon: float) -> tuple[int, int]:
    """(w_in, w_out) = (floor(2^24 e^eps), 2^24): realised epsilon ln(w_in/w_out) <= eps.

    Parameters
    ----------
    epsilon : float
        The budget, > 0.

    Returns
    -------
    tuple of int
        (w_in, w_out).

    Raises
    ------
    TypeError
        If ``epsilon`` is not a real number.
    ValueError
        If ``epsilon`` is not positive and finite.

    References
    ----------
    [ASZ19]_ (Hadamard response); the integer weights make the sampler exact.
    """
    return rr_weights(epsilon, _W_OUT)


def hadamard_sample(x: np.ndarray, K: int, epsilon: float,
                    rng: RngLike | SecureRandom = None) -> np.ndarray:
    """One epsilon-Hadamard-response report in [0, K) per item x (0 <= x < K - 1).

    Parameters
    ----------
    x : numpy.ndarray of int
        Items, 0 <= x < K - 1 (not checked).
    K : int
        A power of two larger than the domain size.
    epsilon : float
        The budget, > 0.
    rng : None, SecureRandom, int or Generator
        ``None``: secure randomness. A seed or Generator: reproducible evaluation.

    Returns
    -------
    numpy.ndarray of int64
        One report in [0, K) per item.

    Raises
    ------
    TypeError
        If ``epsilon`` is not a real number.
    ValueError
        If ``epsilon`` is not positive, or K (w_in + w_out) / 2 reaches 2^62.

    References
    ----------
    [ASZ19]_ (Hadamard response: report in C_x with probability e^eps / (1 + e^eps)).
    """
    w_in, w_out = hadamard_weights(epsilon)
    half = K // 2
    total = half * (w_in + w_out)
    if total >= 1 << 62:
        raise ValueError(f"epsilon={epsilon!r} with K={K} overflows the exact sampler")
    x = np.asarray(x, dtype=np.int64)
    u = uniform_below(np.full(x.size, total, dtype=np.uint64),
                      np.full(x.size, _shift(total), dtype=np.uint64),
                      word_source(rng)).astype(np.int64)
    inside = u < half * w_in
    idx = np.where(inside, u // w_in, (u - half * w_in) // w_out)  # uniform on [0, K/2)
    a = x + 1
    low = a & -a  # lowest set bit of a: the free position
    b = ((idx & ~(low - 1)) << 1) | (idx & (low - 1))  # insert a 0 bit at that position
    want = np.where(inside, 0, 1)  # parity of <a, y>: even inside C_x
    return np.where(_parity(a & b) == want, b, b | low)


def user_level_hadamard(users: Any, k: int, epsilon: float,
                        rng: RngLike | SecureRandom = None) -> BaselineRelease:
    """The user-level DP baseline: one sampled item per user through epsilon-Hadamard response.

    Parameters
    ----------
    users : array_like, shape (n, m)
        Item indices 0..k-1 (every user holds m items).
    k : int
        Domain size (>= 2).
    epsilon : float
        Per-user budget.
    rng : None, SecureRandom, int or Generator
        None: the secure generator (a private release); a seed: research run.

    Returns
    -------
    BaselineRelease
        ``estimate`` the closed-form unbiased estimate of K~, ``reports`` the histogram of
        the n reports over [0, K), ``epsilon`` the realised ln(w_in / w_out).

    Raises
    ------
    TypeError
        If ``users`` does not hold integers, ``k`` is not an integer or ``epsilon`` not a real
        number.
    ValueError
        If ``users`` is ragged, empty or holds items outside 0..k-1, ``k`` < 2, ``epsilon`` is
        not positive, or the exact sampler would overflow.

    References
    ----------
    [ASZ19]_ (Hadamard response); [Imola]_ Lemma 6.4 (user-level DP of one sampled item).
    """
    items, k, eps = iv_user_level(users, k, epsilon)
    n, m = items.shape
    K = 1 << k.bit_length()  # smallest power of two > k: rows 1..k of H_K
    rng = noise_source(rng)
    reports = hadamard_sample(one_item_per_user(items, word_source(rng)), K, eps, rng)
    counts = np.bincount(reports, minlength=K)
    w_in, w_out = hadamard_weights(eps)
    p = w_in / (w_in + w_out)
    rows = np.arange(1, k + 1)
    members = _parity(rows[:, None] & np.arange(K)[None, :]) == 0  # C_x, x = row - 1
    f = members.astype(float) @ counts / n
    estimate = (f - 0.5) / (p - 0.5)
    estimate += (1.0 - estimate.sum()) / k
    realised = float(mpmath.log(mpmath.mpf(w_in) / w_out))
    notes = (SEEDED_NOTE,) if is_seeded(rng) else ()
    g = Guarantee(notion="pure", model="local", epsilon=realised, delta=0.0,
                  neighbour=Neighbour.REPLACE_ONE, theorem=THEOREM,
                  parameters={"k": k, "K": K, "m": m, "n": n,
                              "mechanism": "Hadamard response of one sampled item"},
                  notes=("each user's report depends on her dataset only through one "
                         "uniformly sampled item",) + notes)
    return BaselineRelease(estimate=estimate, reports=counts, epsilon=realised, guarantee=g)


__all__ = ["hadamard_sample", "hadamard_weights", "user_level_hadamard"]
