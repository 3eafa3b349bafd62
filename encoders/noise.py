"""Noise samplers and their exact distributions.

- Laplace(b): density exp(-|x|/b) / (2b); Lap(S1/eps) is eps-DP (seed 000, Lemma 2.2).
- Discrete Laplace DL(a), a in (0, 1): P(k) = (1 - a)/(1 + a) * a^|k| for integer k, the
  two-sided geometric distribution. For an integer query with l1-sensitivity Delta,
  DL(exp(-eps/Delta)) is eps-DP (seed 001, Sec. 4; the parameter must carry the sensitivity,
  see the App. F slip in the seeds' INDEX). Sampled as the difference of two i.i.d.
  geometric variables on {0, 1, ...} with success probability 1 - a.
"""

from __future__ import annotations

import math

import numpy as np

from shuffledp._rng import RngLike, as_generator


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number > 0, got {name}={value!r}")
    return v


def laplace(scale: float, size: int | tuple[int, ...], rng: RngLike = None) -> np.ndarray:
    """i.i.d. Laplace(scale) noise of the given size."""
    b = _positive("scale", scale)
    return as_generator(rng).laplace(0.0, b, size=size)


def discrete_laplace_parameter(epsilon: float, sensitivity: float) -> float:
    """a = exp(-epsilon / sensitivity): the DL parameter that makes an integer query with
    l1-sensitivity ``sensitivity`` epsilon-DP."""
    return math.exp(-_positive("epsilon", epsilon) / _positive("sensitivity", sensitivity))


def discrete_laplace(a: float, size: int | tuple[int, ...], rng: RngLike = None) -> np.ndarray:
    """i.i.d. discrete Laplace DL(a) noise (int64): difference of two Geometric(1 - a) on N."""
    a = float(a)
    if not (0.0 < a < 1.0):
        raise ValueError(f"a must be in (0, 1), got a={a!r}")
    g = as_generator(rng)
    p = -math.expm1(math.log(a))  # 1 - a, accurate for a near 1
    # numpy's geometric counts trials (support 1, 2, ...); the shifts cancel in the difference.
    return g.geometric(p, size=size).astype(np.int64) - g.geometric(p, size=size).astype(np.int64)


def discrete_laplace_pmf(k: np.ndarray, a: float) -> np.ndarray:
    """P(Z = k) = (1 - a)/(1 + a) a^|k| for Z ~ DL(a)."""
    a = float(a)
    if not (0.0 < a < 1.0):
        raise ValueError(f"a must be in (0, 1), got a={a!r}")
    k = np.abs(np.asarray(k, dtype=float))
    return (1.0 - a) / (1.0 + a) * np.exp(k * math.log(a))
