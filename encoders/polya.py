"""Polya (negative binomial) noise with real shape and its two-sided difference.

Definitions (seed 001, Bagdasaryan et al., Sec. 4, Def. 4.1 and Thm 4.2):

- Polya(s, a), shape s > 0 (real), a in (0, 1):
  P(X = k) = Gamma(s + k) / (Gamma(s) k!) * a^k * (1 - a)^s, k = 0, 1, ...
  Sampled as the Gamma-Poisson mixture lambda ~ Gamma(shape=s, scale=a/(1-a)),
  X | lambda ~ Poisson(lambda).
- Infinite divisibility: a sum of independent Polya(s_j, a) is Polya(sum_j s_j, a), and
  Polya(1, a) is the geometric distribution (1 - a) a^k on {0, 1, ...}.
- Hence if each of n users adds X_j - Y_j with X_j, Y_j i.i.d. Polya(1/n, a), the total
  noise is Geom(a) - Geom(a), i.e. exactly the discrete Laplace DL(a) with pmf
  (1 - a)/(1 + a) a^|k| (seed 001, Thm 4.2, eqs. 3-4). With the App. F slip fixed,
  a = exp(-eps_i / Delta_i) where Delta_i is the l1-sensitivity of the *scaled, rounded*
  level vector (see :mod:`shuffledp.encoders.rounding`).
- Dropout over-provisioning (seed 001, Sec. 4 "Handling dropouts"): with shape
  s = 1 / n_min the total is at least DL(a) (DL(a) plus independent extra noise) as long as
  at least n_min users contribute.

The research noise is drawn from the caller's numpy ``rng`` (reproducible); it is *not* the
cryptographic source used for shares and permutations.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

from shuffledp._rng import RngLike, as_generator


def _check_shape_a(shape: float, a: float) -> tuple[float, float]:
    s = float(shape)
    if not (s > 0 and math.isfinite(s)):
        raise ValueError(f"shape must be a finite number > 0, got shape={shape!r}")
    a = float(a)
    if not (0.0 < a < 1.0):
        raise ValueError(f"a must be in (0, 1), got a={a!r}")
    return s, a


def polya(
    shape: float, a: float | np.ndarray, size: int | tuple[int, ...], rng: RngLike = None
) -> np.ndarray:
    """i.i.d. Polya(shape, a) variables (int64), by the Gamma-Poisson mixture (seed 001, Def. 4.1).

    Parameters
    ----------
    shape : float
        Real shape s > 0 (1/n for n users' shares of one geometric variable).
    a : float or ndarray
        Success ratio in (0, 1); an array broadcasts against ``size`` (per-coordinate a).
    size : int or tuple
    rng : Generator, seed or None
        Research randomness (numpy); not a cryptographic source.
    """
    a_arr = np.asarray(a, dtype=float)
    if a_arr.ndim == 0:
        s, a0 = _check_shape_a(shape, float(a_arr))
        scale: float | np.ndarray = a0 / -math.expm1(math.log(a0))
    else:
        s, _ = _check_shape_a(shape, 0.5)
        if not np.all((a_arr > 0) & (a_arr < 1)):
            bad = a_arr[~((a_arr > 0) & (a_arr < 1))].flat[0]
            raise ValueError(f"a must be in (0, 1), got a={bad!r}")
        scale = a_arr / -np.expm1(np.log(a_arr))
    g = as_generator(rng)
    lam = g.gamma(s, scale, size=size)
    return g.poisson(lam).astype(np.int64)


def polya_difference(
    shape: float, a: float | np.ndarray, size: int, rng: RngLike = None
) -> np.ndarray:
    """X - Y with X, Y i.i.d. Polya(shape, a): one user's share of two-sided discrete Laplace noise.

    With shape = 1/n, the sum over n users is exactly DL(a) (seed 001, Thm 4.2).

    Sampled exactly with one Gamma-Poisson draw per coordinate: with G1, G2 i.i.d.
    Gamma(s, theta), G1 + G2 ~ Gamma(2s, theta) is independent of G1 / (G1 + G2) ~ Beta(s, s),
    so T = X + Y ~ Polya(2s, a) and X | T ~ Binomial(T, Beta(s, s)); then X - Y = 2X - T.
    For the small shapes of the protocol T = 0 on most coordinates, which roughly halves the
    cost of drawing X and Y separately (:func:`polya`).
    """
    a_arr = np.asarray(a, dtype=float)
    s, _ = _check_shape_a(shape, 0.5)
    if not np.all((a_arr > 0) & (a_arr < 1)):
        raise ValueError(f"a must be in (0, 1), got a={a!r}")
    size = int(size)
    g = as_generator(rng)
    t = polya(2.0 * s, a_arr if a_arr.ndim else float(a_arr), size, g)
    nz = np.flatnonzero(t)
    out = np.zeros(size, dtype=np.int64)
    if nz.size:
        tn = t[nz]
        x = g.binomial(tn, g.beta(s, s, size=nz.size))
        out[nz] = 2 * x - tn
    return out


def polya_pmf(k: np.ndarray, shape: float, a: float) -> np.ndarray:
    """Exact P(X = k) for X ~ Polya(shape, a) (seed 001, eq. 1), via log-gamma; 0 for k < 0."""
    s, a = _check_shape_a(shape, a)
    k = np.asarray(k)
    kk = np.maximum(k, 0).astype(float)
    logp = gammaln(s + kk) - gammaln(s) - gammaln(kk + 1) + kk * math.log(a) + s * math.log1p(-a)
    return np.where(k >= 0, np.exp(logp), 0.0)


def polya_difference_sum_pmf(
    n: int, shape: float, a: float, support: int
) -> tuple[np.ndarray, np.ndarray]:
    """pmf of sum_{j=1}^n (X_j - Y_j), X_j, Y_j i.i.d. Polya(shape, a), by explicit convolution.

    The one-sided pmf is truncated at ``support`` (choose it so a^support is negligible) and
    convolved n times; used to verify Thm 4.2 of seed 001 exactly rather than by reading it.

    Returns
    -------
    k, pmf : ndarray
        Integer support -n*support..n*support and the probabilities.
    """
    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got n={n!r}")
    one = polya_pmf(np.arange(int(support) + 1), shape, a)
    total = np.array([1.0])
    for _ in range(int(n)):
        total = np.convolve(total, one)
    diff = np.convolve(total, total[::-1])
    half = total.size - 1
    return np.arange(-half, half + 1), diff
