"""Exact integer noise: the discrete Laplace distribution and its sampler.

Discrete Laplace with parameter a in (0, 1), DL(a): P(k) = (1 - a)/(1 + a) a^|k| on the
integers. For an integer-valued query with l1-sensitivity Delta, DL(a) with a <= exp(-eps/Delta)
is eps-DP (ratio of neighbouring pmfs at most a^{-Delta}).

The sampler is Algorithm 2 of [CKS20]_: it draws DL with a = exp(-s/t) for positive integers
s, t *exactly*, using only uniform integers (from 64-bit words, rejection-sampled, no modulo
bias) and Bernoulli(exp(-gamma)) for rational gamma (their Algorithm 1). No floating point is
involved, so the output carries no floating-point artefact that could leak the true value
(the attack of [Mironov12]_ on textbook Laplace). A target a = exp(-eps/Delta) with a float
eps is met conservatively: s/t = floor(2^40 eps / Delta) / 2^40 <= eps/Delta, so the effective
epsilon Delta s/t is at most eps and within a relative 2^-40 / (eps/Delta) of it
(:func:`dl_rational`).

References
----------
.. [CKS20] Canonne et al. (2020), "The Discrete Gaussian for DP", Alg. 1-2
   -- full entry in docs/references.md
.. [Mironov12] Mironov (2012), "Least Significant Bits for DP" -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from fractions import Fraction

import numba
import numpy as np

from shuffledp import _validation as v
from shuffledp.encoders.noise.polya import polya_difference
from shuffledp.randomness import RngLike, SecureRandom, run_stream_kernel, word_source

DL_DENOMINATOR_BITS = 40


def discrete_laplace_parameter(epsilon: float, sensitivity: float) -> float:
    """a = exp(-epsilon / sensitivity): the DL parameter that makes an integer query with
    l1-sensitivity ``sensitivity`` epsilon-DP.

    Parameters
    ----------
    epsilon : float
        The privacy parameter, > 0.
    sensitivity : float
        The query's l1-sensitivity, > 0.

    Returns
    -------
    float
        a in (0, 1).

    Raises
    ------
    ValueError
        If ``epsilon`` or ``sensitivity`` is not a finite positive number.

    References
    ----------
    Module docstring (pmf ratio a^{-Delta}); the sampler is [CKS20]_ Alg. 2.
    """
    return math.exp(-v.positive("epsilon", epsilon) / v.positive("sensitivity", sensitivity))


def dl_rational(epsilon: float, sensitivity: int) -> tuple[int, int]:
    """(s, t) with s / t = floor(2^40 eps / Delta) / 2^40 <= eps / Delta (exact arithmetic).

    DL(exp(-s/t)) on a query of l1-sensitivity Delta is (Delta s / t)-DP with
    Delta s / t <= eps.

    Parameters
    ----------
    epsilon : float
        The privacy parameter, > 0.
    sensitivity : int
        The query's l1-sensitivity Delta, > 0.

    Returns
    -------
    (int, int)
        s and t in lowest terms (t a power of two, at most 2^40).

    Raises
    ------
    ValueError
        If ``epsilon`` or ``sensitivity`` is not a finite positive number, or
        eps / Delta < 2^-40 (the noise would be huge).

    References
    ----------
    [CKS20]_ Alg. 2 needs the rational parameter s/t; [Mironov12]_ for why no float is used.
    """
    eps = Fraction(v.positive("epsilon", epsilon))
    sens = Fraction(v.positive("sensitivity", sensitivity))
    t = 1 << DL_DENOMINATOR_BITS
    s = math.floor(eps / sens * t)
    if s < 1:
        raise ValueError(
            f"epsilon / sensitivity = {float(eps / sens)!r} is below 2^-{DL_DENOMINATOR_BITS}; "
            f"got epsilon={epsilon!r}, sensitivity={sensitivity!r}"
        )
    g = math.gcd(s, t)
    return s // g, t // g


@numba.njit(cache=True, nogil=True)
def _uniform(buf, pos, n):  # pragma: no cover - compiled
    """Uniform integer in [0, n) (1 <= n < 2^62) by masked rejection; (value, pos) or (-1, pos)."""
    if n == 1:
        return 0, pos
    bits = 0
    x = n - 1
    while x > 0:
        bits += 1
        x >>= 1
    mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
    nb = buf.size
    while True:
        if pos >= nb:
            return -1, pos
        v = np.int64(buf[pos] & mask)
        pos += 1
        if v < n:
            return v, pos


@numba.njit(cache=True, nogil=True)
def _bernoulli_exp(buf, pos, num, den):  # pragma: no cover - compiled
    """Bernoulli(exp(-num/den)) for 0 <= num <= den ([CKS20]_ Alg. 1); (bit, pos) or (-1, pos)."""
    k = 1
    while True:
        u, pos = _uniform(buf, pos, den * k)
        if u < 0:
            return -1, pos
        if u >= num:  # Bernoulli(num / (den k)) = 0
            break
        k += 1
    return k & 1, pos


@numba.njit(cache=True, nogil=True)
def _dl_kernel(buf, i0, out, s_arr, t_arr, which):  # pragma: no cover - compiled
    """[CKS20]_ Alg. 2: DL with P(y) proportional to exp(-|y| s/t), s, t integers."""
    pos = 0
    for i in range(i0, out.size):
        start = pos
        s = s_arr[which[i]]
        t = t_arr[which[i]]
        while True:
            u, pos = _uniform(buf, pos, t)
            if u < 0:
                return i, start
            d, pos = _bernoulli_exp(buf, pos, u, t)
            if d < 0:
                return i, start
            if d == 0:
                continue
            v = 0
            while True:
                a, pos = _bernoulli_exp(buf, pos, 1, 1)
                if a < 0:
                    return i, start
                if a == 0:
                    break
                v += 1
            x = u + t * v
            y = x // s
            if pos >= buf.size:
                return i, start
            b = np.int64(buf[pos] >> np.uint64(63))
            pos += 1
            if b == 1 and y == 0:
                continue
            out[i] = (1 - 2 * b) * y
            break
    return out.size, pos


def discrete_laplace_exact(
    s: int | np.ndarray,
    t: int | np.ndarray,
    size: int,
    rng: RngLike | SecureRandom = None,
) -> np.ndarray:
    """i.i.d. DL(exp(-s/t)) samples (int64), exactly ([CKS20]_ Alg. 2).

    Parameters
    ----------
    s, t : int or ndarray of int
        Positive integers (t < 2^56); arrays of length ``size`` give per-coordinate parameters.
    size : int
    rng : SecureRandom, seed, Generator or None
        ``None`` or a SecureRandom: the cryptographically secure generator; a seed or a
        Generator: reproducible research randomness.

    Returns
    -------
    ndarray of int64, shape (size,)

    Raises
    ------
    ValueError
        If ``size`` is not an integer >= 0, ``s`` or ``t`` is outside [1, 2^56), or arrays
        ``s``, ``t`` do not have length ``size``.

    References
    ----------
    [CKS20]_ Alg. 2 (discrete Laplace) with Alg. 1 (Bernoulli(exp(-gamma))).
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise ValueError(f"size must be an integer >= 0, got size={size!r}")
    s_arr = np.atleast_1d(np.asarray(s, dtype=np.int64))
    t_arr = np.atleast_1d(np.asarray(t, dtype=np.int64))
    if s_arr.shape != t_arr.shape:
        s_arr, t_arr = np.broadcast_arrays(s_arr, t_arr)
    if np.any(s_arr < 1) or np.any(t_arr < 1) or np.any(t_arr >= 1 << 56):
        raise ValueError(f"s and t must be integers in [1, 2^56), got s={s!r}, t={t!r}")
    pairs = np.stack([s_arr.ravel(), t_arr.ravel()], axis=1)
    uniq, which = np.unique(pairs, axis=0, return_inverse=True)
    which = which.ravel().astype(np.int64)
    if which.size == 1:
        which = np.zeros(int(size), dtype=np.int64)
    elif which.size != size:
        raise ValueError(f"s and t must be scalars or have length size={size}, got {which.size}")
    out = np.empty(int(size), dtype=np.int64)
    run_stream_kernel(_dl_kernel, out.size, word_source(rng), out,
                      np.ascontiguousarray(uniq[:, 0]), np.ascontiguousarray(uniq[:, 1]),
                      which, words_per_sample=12.0)
    return out


def discrete_laplace_for(
    epsilon: float | np.ndarray,
    sensitivity: int,
    size: int,
    rng: RngLike | SecureRandom = None,
) -> np.ndarray:
    """DL noise that makes a sensitivity-``sensitivity`` integer query epsilon-DP (exactly).

    ``epsilon`` may be an array of length ``size`` (per-coordinate budgets). Uses
    :func:`dl_rational` (conservative rational parameter) and :func:`discrete_laplace_exact`.

    Parameters
    ----------
    epsilon : float or ndarray of float
        The privacy parameter (> 0), one or one per coordinate.
    sensitivity : int
        The query's l1-sensitivity, > 0.
    size : int
        Number of samples.
    rng : SecureRandom, seed, Generator or None
        As :func:`discrete_laplace_exact`.

    Returns
    -------
    ndarray of int64, shape (size,)

    Raises
    ------
    ValueError
        As :func:`dl_rational` and :func:`discrete_laplace_exact`.

    References
    ----------
    [CKS20]_ Alg. 2.
    """
    eps = np.atleast_1d(np.asarray(epsilon, dtype=float))
    uniq, inv = np.unique(eps, return_inverse=True)
    st = np.array([dl_rational(float(e), sensitivity) for e in uniq], dtype=np.int64)
    if eps.size == 1:
        return discrete_laplace_exact(int(st[0, 0]), int(st[0, 1]), size, rng)
    return discrete_laplace_exact(st[inv.ravel(), 0], st[inv.ravel(), 1], size, rng)


def discrete_laplace(a: float, size: int, rng: RngLike | SecureRandom = None) -> np.ndarray:
    """i.i.d. DL(a) noise (int64) for a float a in (0, 1), as the difference of two
    Polya(1, a) = geometric variables from the exact table sampler (total variation to DL(a)
    below 1e-30; :func:`shuffledp.encoders.noise.polya.polya_difference`).

    Parameters
    ----------
    a : float
        The parameter, in (0, 1).
    size : int
        Number of samples.
    rng : SecureRandom, seed, Generator or None
        As :func:`discrete_laplace_exact`.

    Returns
    -------
    ndarray of int64, shape (size,)

    Raises
    ------
    ValueError
        If ``a`` is outside (0, 1) or ``size`` is not an integer >= 0.

    References
    ----------
    Module docstring (DL(a) as a difference of geometric variables); the exact-rational
    sampler of [CKS20]_ Alg. 2 is :func:`discrete_laplace_exact`.
    """
    a = float(a)
    if not (0.0 < a < 1.0):
        raise ValueError(f"a must be in (0, 1), got a={a!r}")
    return polya_difference(1.0, a, size, rng)


def discrete_laplace_pmf(k: np.ndarray, a: float) -> np.ndarray:
    """P(Z = k) = (1 - a)/(1 + a) a^|k| for Z ~ DL(a).

    Parameters
    ----------
    k : array_like of int
        The points.
    a : float
        The parameter, in (0, 1).

    Returns
    -------
    ndarray of float64, shape of ``k``

    Raises
    ------
    ValueError
        If ``a`` is outside (0, 1).

    References
    ----------
    [CKS20]_ (the discrete Laplace distribution their Alg. 2 samples).
    """
    a = float(a)
    if not (0.0 < a < 1.0):
        raise ValueError(f"a must be in (0, 1), got a={a!r}")
    k = np.abs(np.asarray(k, dtype=float))
    return (1.0 - a) / (1.0 + a) * np.exp(k * math.log(a))
