"""Bias-corrected linear estimators of symmetric properties ([Suresh19]_ Sec. 3.2).

Each estimator has the linear form f(h) = sum_r f(r, n) phi_r(h) + c(n), so applied to a
PrivHist release (H, N) it is private by post-processing ([Suresh19]_ Corollary 1):

* Miller-Madow entropy ([Miller55]_): sum_r phi_r (r/n) ln(n/r) + (S - 1) / (2n), S the
  labels seen (f(r, n) = (r/n) ln(n/r) + 1/(2n), c = -1/(2n)); corrects the plug-in's
  first-order bias -(k - 1)/(2n).
* Smoothed Good-Toulmin support coverage ([OSW16]_ Thm 2, Poisson smoothing): the number of
  labels seen in m = n (1 + t) samples is S + U, U = -sum_{i>=1} (-t)^i P(L >= i) phi_i,
  L ~ Poisson(r), r = ln(n (t + 1)^2 / (t - 1)) / (2t) for t > 1; for t <= 1 it is the
  unsmoothed Good-Toulmin estimator (P(L >= i) = 1). Normalised by m as in [Acharya17]_.

Counts in H above N are clipped to N (as the plug-in estimators do).

References
----------
.. [Suresh19] Suresh (2019), "Differentially private anonymized histograms", Sec. 3.2, Corollary 1
   -- full entry in docs/references.md
.. [Miller55] Miller (1955), "Bias of information estimates" -- full entry in docs/references.md
.. [OSW16] Orlitsky et al. (2016), "Optimal prediction of the number of unseen species", Thm 2
   (Poisson-smoothed Good-Toulmin) -- full entry in docs/references.md
.. [Acharya17] Acharya et al. (2017), "Unified maximum likelihood for symmetric properties" -- full
   entry in docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import gammaincc

from shuffledp import _validation as v
from shuffledp.analyzers.privhist.histogram import AnonHistogram, as_histogram
from shuffledp.analyzers.privhist.mechanism import PrivHistRelease


@dataclass(frozen=True)
class LinearEstimates:
    """Bias-corrected linear estimates (module docstring for the formulas).

    Attributes
    ----------
    n, m : int
        Total used and coverage sample size.
    entropy_miller_madow : float
        Entropy in nats.
    support_coverage_sgt : float
        Estimated distinct labels in m samples, divided by m.
    """

    n: int
    m: int
    entropy_miller_madow: float
    support_coverage_sgt: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def miller_madow_entropy(h: AnonHistogram, n: int) -> float:
    """Miller-Madow entropy (nats) of ``h`` with total ``n`` ([Miller55]_).

    Parameters
    ----------
    h : AnonHistogram
        The histogram (counts above ``n`` are clipped to ``n``).
    n : int
        Its total, >= 1.

    Returns
    -------
    float
        The plug-in entropy plus (support - 1) / (2 n); 0.0 for an empty histogram.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``n`` not an integer.
    ValueError
        If ``n`` < 1.

    References
    ----------
    [Miller55]_ (the bias correction); [Suresh19]_ Sec. 3.2, Corollary 1 (linear estimators
    on a private histogram).
    """
    h = as_histogram("h", h)
    n = v.count("n", n)
    r = np.minimum(h.counts, n).astype(float)
    plug = float(np.sum(h.prevalences * (r / n) * np.log(n / r)))
    return plug + (h.support - 1) / (2 * n) if h.support else 0.0


def sgt_weights(counts: np.ndarray, n: int, t: float) -> np.ndarray:
    """-(-t)^i P(L >= i) for each count i, L ~ Poisson(r(n, t)) (all ones for t <= 1).

    Parameters
    ----------
    counts : numpy.ndarray
        The counts i (>= 1).
    n : int
        The sample size, >= 1.
    t : float
        The extrapolation ratio, >= 0.

    Returns
    -------
    numpy.ndarray of float
        The weight of each count.

    Raises
    ------
    TypeError
        If ``n`` is not an integer or ``t`` not a real number.
    ValueError
        If ``n`` < 1 or ``t`` < 0.

    References
    ----------
    [OSW16]_ Thm 2 (Poisson-smoothed Good-Toulmin; the unsmoothed weights -(-t)^i are Good
    and Toulmin's, 1956).
    """
    n = v.count("n", n)
    t = v.interval("t", t, 0.0, math.inf, open_low=False)
    i = np.asarray(counts, dtype=float)
    sign = np.where(i % 2 == 1, 1.0, -1.0)
    if t <= 1:
        return sign * t ** i
    r = math.log(n * (t + 1) ** 2 / (t - 1)) / (2 * t)
    tail = 1.0 - gammaincc(i, r)  # P(Poisson(r) >= i) = P(Gamma(i) <= r), i >= 1
    return sign * np.exp(i * math.log(t)) * tail


def sgt_unseen(h: AnonHistogram, n: int, t: float) -> float:
    """Smoothed Good-Toulmin estimate of the labels new in n t further samples ([OSW16]_).

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    n : int
        Its total, >= 1.
    t : float
        The extrapolation ratio, >= 0.

    Returns
    -------
    float
        The estimated number of new labels.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram, ``n`` not an integer or ``t`` not a real number.
    ValueError
        If ``n`` < 1 or ``t`` < 0.

    References
    ----------
    [OSW16]_ Thm 2.
    """
    h = as_histogram("h", h)
    counts = np.minimum(h.counts, n)
    return float(np.sum(h.prevalences * sgt_weights(counts, n, t)))


def linear_estimates(h: AnonHistogram, n: int, *, m: int | None = None) -> LinearEstimates:
    """Miller-Madow entropy and smoothed Good-Toulmin coverage of ``h`` with total ``n``.

    Parameters
    ----------
    h : AnonHistogram
        A histogram (true, or a private release's H).
    n : int
        Its total (true n or private N), >= 1 unless ``h`` is empty.
    m : int, optional
        Coverage sample size, >= n (default 2n: t = 1).

    Returns
    -------
    LinearEstimates

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``n``/``m`` not an integer.
    ValueError
        If ``n`` < 0, ``n`` = 0 with a non-empty ``h``, or ``m`` < ``n``.

    References
    ----------
    [Miller55]_; [OSW16]_ Thm 2; [Suresh19]_ Sec. 3.2, Corollary 1.
    """
    h = as_histogram("h", h)
    n = v.count("n", n, 0)
    if n == 0:
        if len(h):
            raise ValueError(f"n must be >= 1 for a non-empty histogram, got n={n!r}")
        return LinearEstimates(0, 1 if m is None else v.count("m", m, 1), 0.0, 0.0)
    m = 2 * n if m is None else v.count("m", m, n)
    t = (m - n) / n
    unseen = sgt_unseen(h, n, t) if t > 0 else 0.0
    return LinearEstimates(n, m, miller_madow_entropy(h, n),
                           (h.support + unseen) / m)


def compare_linear(h: AnonHistogram, release: PrivHistRelease, *,
                   m_factor: float = 2.0) -> dict[str, dict[str, Any]]:
    """{"private": estimates from (H, N), "non_private": from (h, n)}, m = m_factor * total.

    Evaluation only (the non-private values see the data without noise).

    Parameters
    ----------
    h : AnonHistogram
        The true histogram.
    release : PrivHistRelease
        A private release of ``h``.
    m_factor : float, default 2
        Coverage sample size as a multiple of the total, >= 1.

    Returns
    -------
    dict
        ``{"private": ..., "non_private": ...}``, each :meth:`LinearEstimates.to_dict`.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``release`` not a PrivHistRelease.
    ValueError
        If ``m_factor`` < 1.

    References
    ----------
    [Suresh19]_ Sec. 3.2, Corollary 1 (the private estimates are within the sorted-l1 error).
    """
    h = as_histogram("h", h)
    if not isinstance(release, PrivHistRelease):
        raise TypeError(f"release must be a PrivHistRelease, got release={release!r:.80}")
    f = v.interval("m_factor", m_factor, 1, math.inf, open_low=False)
    N = release.total
    return {
        "private": linear_estimates(release.histogram, N,
                                    m=max(N, math.ceil(f * N)) if N else None).to_dict(),
        "non_private": linear_estimates(h, h.n,
                                        m=max(h.n, math.ceil(f * h.n)) if h.n else None
                                        ).to_dict(),
    }


__all__ = ["LinearEstimates", "compare_linear", "linear_estimates", "miller_madow_entropy",
           "sgt_unseen", "sgt_weights"]
