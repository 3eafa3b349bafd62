"""Exact discrete Gaussian noise ([CKS20]_ Alg. 3) from uniform 64-bit words.

The discrete Gaussian N_Z(0, sigma^2) on the integers has P(y) proportional to
exp(-y^2 / (2 sigma^2)). For a rational sigma^2 it is sampled exactly by rejection from the
discrete Laplace with P(y) proportional to exp(-|y|/t), t = floor(sigma) + 1: accept Y with
probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)) ([CKS20]_ Alg. 3). The acceptance coins
are Bernoulli(exp(-gamma)) for rational gamma ([CKS20]_ Alg. 1) in exact integer
arithmetic (Python integers: gamma's numerator and denominator may exceed 64 bits), so the
output has no floating-point artefact.

The candidates come from the exact discrete Laplace sampler
(:func:`shuffledp.encoders.noise.laplace.discrete_laplace_exact`) and the coins from the same
randomness source (:func:`shuffledp.randomness.noise_source`): the cryptographically
secure generator by default, a seeded numpy Generator for research runs.

References
----------
.. [CKS20] Canonne et al. (2020), "The Discrete Gaussian for DP", Alg. 1, 3
   -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from shuffledp import _validation as v
from shuffledp.encoders.noise.laplace import discrete_laplace_exact
from shuffledp.randomness import RngLike, SecureRandom, noise_source, word_source


class _Uniform:
    """Uniform integers in [0, n) for any positive Python int n, by rejection on whole words."""

    def __init__(self, source: SecureRandom | np.random.Generator) -> None:
        self._words = word_source(source)
        self._buf: list[int] = []

    def _word(self) -> int:
        if not self._buf:
            self._buf = [int(w) for w in self._words(256)]
        return self._buf.pop()

    def below(self, n: int) -> int:
        bits = (n - 1).bit_length()
        if bits == 0:
            return 0
        n_words = (bits + 63) // 64
        mask = (1 << bits) - 1
        while True:
            x = 0
            for _ in range(n_words):
                x = (x << 64) | self._word()
            x &= mask
            if x < n:
                return x


def _bernoulli_exp(u: _Uniform, gamma: Fraction) -> bool:
    """Bernoulli(exp(-gamma)) for rational gamma >= 0, exactly ([CKS20]_ Alg. 1)."""
    while gamma > 1:
        if not _bernoulli_exp(u, Fraction(1)):
            return False
        gamma -= 1
    num, den = gamma.numerator, gamma.denominator
    k = 1
    while u.below(den * k) < num:  # Bernoulli(gamma / k)
        k += 1
    return k % 2 == 1


def discrete_gaussian_exact(
    sigma2: Fraction | int, size: int, rng: RngLike | SecureRandom = None
) -> np.ndarray:
    """i.i.d. samples of the discrete Gaussian N_Z(0, sigma2) (int64), exactly.

    Parameters
    ----------
    sigma2 : Fraction or int
        The variance parameter sigma^2 > 0, rational (a float is refused: pass
        ``Fraction(x)`` to use its exact binary value).
    size : int
    rng : None, SecureRandom, int or Generator
        ``None`` or a SecureRandom: the secure generator; a seed or Generator: research.

    Returns
    -------
    ndarray of int64, shape (size,)

    Raises
    ------
    ValueError
        If ``sigma2`` is not a positive Fraction or int (a float or bool is refused) or is
        too large (sigma >= 2^56), or ``size`` is negative.
    TypeError
        If ``size`` is not an integer.

    References
    ----------
    [CKS20]_ Alg. 3 (discrete Gaussian by rejection from discrete Laplace), with Alg. 1
    for the Bernoulli(exp(-gamma)) coins.
    """
    if isinstance(sigma2, bool) or not isinstance(sigma2, (Fraction, int)) or sigma2 <= 0:
        raise ValueError(f"sigma2 must be a positive Fraction or int, got sigma2={sigma2!r}")
    size = v.count("size", size, 0)
    s2 = Fraction(sigma2)
    t = math.isqrt(s2.numerator // s2.denominator) + 1  # floor(sigma) + 1
    if t >= 1 << 56:
        raise ValueError(f"sigma2={float(s2):.3g} is too large for the exact sampler "
                         "(sigma < 2^56)")
    source = noise_source(rng)
    coins = _Uniform(source)
    out = np.empty(size, dtype=np.int64)
    filled = 0
    shift = s2 / t
    while filled < size:
        cand = discrete_laplace_exact(1, t, max(16, 2 * (size - filled)), source)
        for y in cand.tolist():
            if _bernoulli_exp(coins, (abs(y) - shift) ** 2 / (2 * s2)):
                out[filled] = y
                filled += 1
                if filled == size:
                    break
    return out


def discrete_gaussian_pmf(k: np.ndarray, sigma2: float, *, width: float = 40.0) -> np.ndarray:
    """P(k) of N_Z(0, sigma2), normalised over |k| <= width sigma + 1 (float64).

    Parameters
    ----------
    k : array_like of int
        The points.
    sigma2 : float
        The variance parameter sigma^2 > 0.
    width : float
        Half-width of the normalising sum, in standard deviations (the mass beyond 40
        sigma is below float64 resolution).

    Returns
    -------
    ndarray of float64, shape of ``k``

    Raises
    ------
    ValueError
        If ``sigma2`` is not a finite positive number.

    References
    ----------
    [CKS20]_ Def. of the discrete Gaussian N_Z(0, sigma^2).
    """
    s2 = v.positive("sigma2", sigma2)
    half = int(width * math.sqrt(s2)) + 1
    z = np.exp(-np.arange(-half, half + 1, dtype=float) ** 2 / (2 * s2)).sum()
    k = np.asarray(k, dtype=float)
    return np.exp(-k**2 / (2 * s2)) / z


__all__ = ["discrete_gaussian_exact", "discrete_gaussian_pmf"]
