"""The exact worst case of shuffled binary randomized response: the computational core.

Split from :mod:`shuffledp.accounting.amplification.binary_rr` (which documents the method) so
that :mod:`shuffledp.accounting.events` can verify a stated binary-RR guarantee without
importing the module that builds its events.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

#: largest n (one FFT per data set m, each on a window of O(sqrt n))
MAX_N = 200_000
_FFT_ULPS = 64.0
#: relative error charged for each windowed pmf entry of :func:`_rows`: twice the analytic
#: bound of its cumulative sum at the widest window MAX_N allows (18 sd ~ 3,600 points,
#: 3600 * 60 * 2^-52 ~ 5e-11), 80x the error measured against SciPy there
_PMF_RTOL = 1e-10


def _rows(trials: np.ndarray, prob: float) -> tuple[np.ndarray, np.ndarray]:
    """Pmfs of Bin(trials_i, prob) on windows of a common width (about +-9 sd around the
    mean), one row per i, and the exact mass each window leaves out (cdf and sf).

    Each row is the ratio recurrence pmf(k + 1) / pmf(k) = (trials - k) / (k + 1) * prob /
    (1 - prob) summed in logs (a cumulative sum), anchored at the row's mode by SciPy's pmf:
    several times faster than SciPy's pmf at every point. Relative error at most
    :data:`_PMF_RTOL` (the log-pmf spans less than 60 nats over a window of w < 10^4 points,
    so the cumulative sum's absolute error is below about w * 60 * 2^-52 ~ 1.3e-10 at
    w = 10^4; measured below 2e-11 against SciPy at n = 2e5; the bound is charged in
    :func:`_divergences`).
    """
    from scipy.stats import binom  # ~1 s to import: loaded when a bound is computed

    mean = trials * prob
    sd = np.sqrt(trials * prob * (1.0 - prob))
    lo = np.clip(np.floor(mean - 9.0 * sd - 2.0), 0, None).astype(np.int64)
    width = int(np.ceil(18.0 * sd.max() + 6.0))
    k = lo[:, None] + np.arange(width)[None, :]
    t = trials[:, None].astype(float)
    j = k[:, :-1].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.log((t - j) / (j + 1.0)) + (math.log(prob) - math.log1p(-prob))
    steps = np.where(j < t, steps, -np.inf)  # beyond trials the pmf is 0
    logp = np.zeros(k.shape)
    np.cumsum(steps, axis=1, out=logp[:, 1:])
    # anchor every row at its mode with SciPy's pmf (its logpmf is ~1e-9 off at n ~ 1e5)
    mode = np.clip(np.floor((trials + 1) * prob).astype(np.int64), 0, trials)
    col = np.clip(mode - lo, 0, width - 1)
    rows = np.arange(k.shape[0])
    logp += (np.log(binom.pmf(lo + col, trials, prob)) - logp[rows, col])[:, None]
    pmf = np.exp(logp)
    hi = lo + width - 1
    out = np.where(lo > 0, binom.cdf(lo - 1, trials, prob), 0.0)
    out = out + np.where(hi < trials, binom.sf(hi, trials, prob), 0.0)
    return pmf, out


def _divergences(n: int, ms: np.ndarray, theta: float, E: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) of D_{e^eps}(P_m || Q_m) for every m in ``ms`` (one batch)."""
    from scipy.signal import fftconvolve

    fx, ox = _rows(ms, theta)
    fy, oy = _rows(n - 1 - ms, 1.0 - theta)
    s = np.clip(fftconvolve(fx, fy, axes=1), 0.0, None)
    # the FFT's absolute error: a few ulps of the largest product, summed over the window
    err = (_FFT_ULPS * np.finfo(float).eps * fx.max(axis=1) * fy.max(axis=1)
           * min(fx.shape[1], fy.shape[1]) * (s.shape[1] + 1))
    zero = np.zeros((s.shape[0], 1))
    sp, sk = np.hstack([zero, s]), np.hstack([s, zero])  # s(k - 1), s(k)
    P = theta * sp + (1.0 - theta) * sk
    Q = (1.0 - theta) * sp + theta * sk
    core = np.maximum(P - E * Q, 0.0).sum(axis=1)
    # each pmf entry within a relative _PMF_RTOL: s, P and Q within about 2 _PMF_RTOL, so the
    # hinge sum moves by at most 2 _PMF_RTOL (sum P + E sum Q) <= 2 _PMF_RTOL (1 + E)
    pmf_err = 2.0 * _PMF_RTOL * (1.0 + _PMF_RTOL) * (1.0 + E)
    up = core * (1.0 + 1e-12) + ox + oy + err + pmf_err
    lo = np.maximum(core * (1.0 - 1e-12) - err - pmf_err, 0.0)
    return lo, up


#: results of full scans (every m), so that re-checking a released pair costs nothing
_MEMO: dict[tuple[int, float, float], tuple[float, float, int]] = {}


def worst_case(n: int, eps0: float, eps: float) -> tuple[float, float, int]:
    """:func:`_worst` over every data set, remembered."""
    key = (int(n), float(eps0), float(eps))
    if key not in _MEMO:
        _worst(n, eps0, eps)
    return _MEMO[key]


def _worst(n: int, eps0: float, eps: float, ms: np.ndarray | None = None,
           batch: int = 512, progress: Callable[[int, int], object] | None = None
           ) -> tuple[float, float, int]:
    """(lower, upper) of max over m of D_{e^eps}(P_m || Q_m) and the worst m;
    ``progress(done, total)`` after each batch."""
    theta = 1.0 / (1.0 + math.exp(-eps0))
    E = math.exp(eps)
    ms_given = ms
    ms = np.arange(n) if ms is None else np.asarray(ms)
    best_lo, best_up, arg = 0.0, 0.0, 0
    for i in range(0, ms.size, batch):
        part = ms[i:i + batch]
        lo, up = _divergences(n, part, theta, E)
        j = int(np.argmax(lo))
        if lo[j] > best_lo:
            best_lo, arg = float(lo[j]), int(part[j])
        best_up = max(best_up, float(up.max()))
        if progress is not None:
            progress(min(i + batch, ms.size), ms.size)
    if ms_given is None:
        _MEMO[(int(n), float(eps0), float(eps))] = (best_lo, best_up, arg)
        if len(_MEMO) > 4096:
            _MEMO.pop(next(iter(_MEMO)))
    return best_lo, best_up, arg


__all__ = ["MAX_N", "_PMF_RTOL", "_divergences", "_rows", "_worst", "worst_case"]
