"""Symmetric property estimation from an anonymized histogram ([Suresh19]_ Sec. 3.2).

A linear estimator f(h) = sum_r f(r, n) phi_r(h) applied to a private histogram H and the
private total N, f_dp = sum_r f(r, N) phi_r(H), is differentially private by post-processing
([Suresh19]_ Sec. 3.2, Corollary 1). The plug-in estimators here use p_r = min(r / n, 1)
(the clip only acts on a noisy H with a count above N):

* entropy (nats): sum_r phi_r p_r ln(1 / p_r);
* normalised support size, for a public support bound k: sum_r phi_r / k
  (the number of labels seen, over k);
* normalised support coverage at m samples: (1 / m) sum_r phi_r (1 - (1 - p_r)^m), the
  expected fraction of m fresh samples' distinct labels, m defaulting to n;
* distance to uniformity over k symbols (l1): sum_r phi_r |p_r - 1/k| + max(k - S, 0) / k,
  S = sum_r phi_r the labels seen (the unseen k - S symbols have p = 0); in [0, 2).

The same functions on the true histogram and the true n are the non-private estimators;
:func:`compare_properties` puts both side by side.

Bias-corrected linear estimators (same form sum_r f(r, n) phi_r, other coefficients, so
equally private by post-processing):

* :func:`entropy_miller_madow`: the plug-in entropy + (S - 1) / (2n), S the labels seen
  ([Miller55]_; removes the O(S/n) bias of the plug-in);
* :func:`coverage_unbiased`: for m <= n the exactly unbiased
  (1/m) sum_r phi_r (1 - C(n - r, m) / C(n, m)) (the expected distinct labels of a uniform
  m-subsample of the n samples, itself m i.i.d. samples); for m > n the Good-Toulmin
  extrapolation ([GT56]_), Poisson-smoothed for t = m/n - 1 > 1 (Orlitsky, Suresh and Wu,
  PNAS 2016; :mod:`shuffledp.analyzers.privhist.linear`).

These are not the sample-optimal estimators of [Acharya17]_ (profile maximum likelihood).

References
----------
.. [Suresh19] Suresh (2019), "Differentially private anonymized histograms", Sec. 3.2, Corollary 1
   -- full entry in docs/references.md
.. [Miller55] Miller (1955), "Bias of information estimates" -- full entry in docs/references.md
.. [GT56] Good and Toulmin (1956), "The number of new species" -- full entry in docs/references.md
.. [Acharya17] Acharya et al. (2017), "Unified maximum likelihood for symmetric properties" -- full
   entry in docs/references.md
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import gammaln

from shuffledp import _validation as v
from shuffledp.analyzers.privhist.histogram import AnonHistogram, as_histogram
from shuffledp.analyzers.privhist.linear import miller_madow_entropy, sgt_unseen
from shuffledp.analyzers.privhist.mechanism import PrivHistRelease


@dataclass(frozen=True)
class PropertyEstimates:
    """Plug-in estimates of symmetric properties (module docstring for the formulas).

    ``support_size`` and ``distance_to_uniformity`` are None when no support bound k is given;
    ``entropy_miller_madow`` and ``support_coverage_unbiased`` are the bias-corrected linear
    estimators.

    Attributes
    ----------
    n : int
        The total used.
    k : int or None
        The public support bound, if given.
    m : int
        The support coverage's sample size.
    entropy : float
        Plug-in entropy, nats.
    support_size : float or None
        Labels seen / k.
    support_coverage : float
        Plug-in support coverage at m samples, divided by m.
    distance_to_uniformity : float or None
        l1 distance to the uniform distribution on k labels.
    entropy_miller_madow : float
        Miller-Madow entropy, nats.
    support_coverage_unbiased : float or None
        Unbiased (m <= n) or smoothed Good-Toulmin (m > n) support coverage.
    """

    n: int
    k: int | None
    m: int
    entropy: float
    support_size: float | None
    support_coverage: float
    distance_to_uniformity: float | None
    entropy_miller_madow: float = 0.0
    support_coverage_unbiased: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _probabilities(h: AnonHistogram, n: int) -> np.ndarray:
    return np.minimum(h.counts / n, 1.0)


def entropy(h: AnonHistogram, n: int) -> float:
    """Plug-in entropy sum_r phi_r p_r ln(1/p_r) in nats, p_r = min(r/n, 1).

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    n : int
        Its total, >= 1.

    Returns
    -------
    float
        The plug-in entropy in nats.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``n`` not an integer.
    ValueError
        If ``n`` < 1.

    References
    ----------
    [Suresh19]_ Sec. 3.2 (plug-in estimates from a private histogram); [Acharya17]_.
    """
    h, n = as_histogram("h", h), v.count("n", n)
    p = _probabilities(h, n)
    return float(np.sum(h.prevalences * -(p * np.log(p))))


def support_coverage(h: AnonHistogram, n: int, m: int) -> float:
    """(1/m) sum_r phi_r (1 - (1 - p_r)^m), p_r = min(r/n, 1).

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    n : int
        Its total, >= 1.
    m : int
        The number of samples, >= 1.

    Returns
    -------
    float
        The plug-in expected fraction of distinct labels in m samples.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``n``/``m`` not an integer.
    ValueError
        If ``n`` or ``m`` < 1.

    References
    ----------
    [Suresh19]_ Sec. 3.2; [Acharya17]_ (support coverage as a symmetric property).
    """
    h, n, m = as_histogram("h", h), v.count("n", n), v.count("m", m)
    p = _probabilities(h, n)
    below = p < 1
    unseen = np.where(below, np.exp(m * np.log1p(-np.where(below, p, 0.0))), 0.0)
    return float(np.sum(h.prevalences * (1.0 - unseen)) / m)


def distance_to_uniformity(h: AnonHistogram, n: int, k: int) -> float:
    """sum_r phi_r |p_r - 1/k| + max(k - S, 0)/k, p_r = min(r/n, 1), S labels seen.

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    n : int
        Its total, >= 1.
    k : int
        The support bound, >= 1.

    Returns
    -------
    float
        The plug-in l1 distance to the uniform distribution on k labels.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``n``/``k`` not an integer.
    ValueError
        If ``n`` or ``k`` < 1.

    References
    ----------
    [Suresh19]_ Sec. 3.2; [Acharya17]_ (distance to uniformity).
    """
    h, n, k = as_histogram("h", h), v.count("n", n), v.count("k", k)
    p = _probabilities(h, n)
    return float(np.sum(h.prevalences * np.abs(p - 1.0 / k)) + max(k - h.support, 0) / k)


def entropy_miller_madow(h: AnonHistogram, n: int) -> float:
    """Plug-in entropy + (S - 1) / (2n) in nats ([Miller55]_), S = labels seen (0 if empty);
    :func:`shuffledp.analyzers.privhist.linear.miller_madow_entropy`.

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    n : int
        Its total, >= 1.

    Returns
    -------
    float
        The Miller-Madow entropy in nats.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``n`` not an integer.
    ValueError
        If ``n`` < 1.

    References
    ----------
    [Miller55]_; [Suresh19]_ Sec. 3.2, Corollary 1.
    """

    return miller_madow_entropy(as_histogram("h", h), v.count("n", n))


def coverage_unbiased(h: AnonHistogram, n: int, m: int) -> float:
    """Support coverage at m samples: exactly unbiased for m <= n; for m > n the (smoothed,
    t > 1) Good-Toulmin extrapolation of :func:`shuffledp.analyzers.privhist.linear.sgt_unseen`.

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    n : int
        Its total, >= 1.
    m : int
        The number of samples, >= 1.

    Returns
    -------
    float
        The estimated expected fraction of distinct labels in m samples.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``n``/``m`` not an integer.
    ValueError
        If ``n`` or ``m`` < 1.

    References
    ----------
    [GT56]_ (Good-Toulmin extrapolation); [Suresh19]_ Sec. 3.2, Corollary 1.
    """

    h = as_histogram("h", h)
    n = v.count("n", n)
    m = v.count("m", m)
    if m > n:
        return float((h.support + sgt_unseen(h, n, m / n - 1.0)) / m)
    r = h.counts.astype(float)
    phi = h.prevalences.astype(float)
    # C(n - r, m) / C(n, m) = prod_{j<m} (n - r - j)/(n - j), zero when r > n - m
    ok = r <= n - m
    rr = np.where(ok, r, 0.0)  # masked entries: C(n - r, m) = 0
    log_miss = (gammaln(n - rr + 1) - gammaln(n - rr - m + 1) - gammaln(n + 1)
                + gammaln(n - m + 1))
    miss = np.where(ok, np.exp(log_miss), 0.0)
    return float(np.sum(phi * (1.0 - miss)) / m)


def estimate_properties(h: AnonHistogram, n: int, *, k: int | None = None,
                        m: int | None = None) -> PropertyEstimates:
    """Plug-in estimates from a histogram and its total ([Suresh19]_ Sec. 3.2).

    Parameters
    ----------
    h : AnonHistogram
        A histogram (the true one, or a private release's).
    n : int
        Its total (the true n, or the private N); >= 1 unless ``h`` is empty.
    k : int, optional
        Public support bound for the normalised support size and the distance to
        uniformity (omitted when None).
    m : int, optional
        Number of samples of the support coverage; default ``n`` (1 when n = 0).

    Returns
    -------
    PropertyEstimates

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or ``n``/``k``/``m`` not an integer.
    ValueError
        If ``n`` < 0, ``n`` = 0 with a non-empty ``h``, or ``k``/``m`` < 1.

    References
    ----------
    [Suresh19]_ Sec. 3.2, Corollary 1; [Acharya17]_; [Miller55]_; [GT56]_.
    """
    h = as_histogram("h", h)
    n = v.count("n", n, 0)
    if n == 0 and len(h):
        raise ValueError(f"n must be >= 1 for a non-empty histogram, got n={n!r}")
    k = None if k is None else v.count("k", k, 1)
    m = v.count("m", m, 1) if m is not None else max(n, 1)
    if n == 0:
        return PropertyEstimates(0, k, m, 0.0, None if k is None else 0.0, 0.0,
                                 None if k is None else 1.0)
    return PropertyEstimates(
        n=n, k=k, m=m, entropy=entropy(h, n),
        support_size=None if k is None else h.support / k,
        support_coverage=support_coverage(h, n, m),
        distance_to_uniformity=None if k is None else distance_to_uniformity(h, n, k),
        entropy_miller_madow=entropy_miller_madow(h, n),
        support_coverage_unbiased=coverage_unbiased(h, n, m),
    )


def compare_properties(h: AnonHistogram, release: PrivHistRelease, *, k: int | None = None,
                       m: int | None = None) -> dict[str, dict[str, Any]]:
    """{"private": f_dp(H, N), "non_private": f(h, n)} (m defaults to each one's total).

    The non-private values depend on the data without noise: evaluation only.

    Parameters
    ----------
    h : AnonHistogram
        The true histogram.
    release : PrivHistRelease
        A private release of ``h``.
    k : int, optional
        Public support bound (see :func:`estimate_properties`).
    m : int, optional
        Support coverage's sample size (default: each one's total).

    Returns
    -------
    dict
        ``{"private": ..., "non_private": ...}``, each :meth:`PropertyEstimates.to_dict`.

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram, ``release`` not a PrivHistRelease, or ``k``/``m`` not
        an integer.
    ValueError
        If ``k`` or ``m`` < 1.

    References
    ----------
    [Suresh19]_ Sec. 3.2, Corollary 1.
    """
    h = as_histogram("h", h)
    if not isinstance(release, PrivHistRelease):
        raise TypeError(f"release must be a PrivHistRelease, got release={release!r:.80}")
    return {
        # the released histogram's own total (post-processing): with the separately noisy N
        # the plug-in p_r = r / N do not sum to 1 (entropy error +/- 0.44 nats against
        # +/- 0.09 at n = 1000, eps = 0.1; python bench/privhist_entropy_bias.py)
        "private": estimate_properties(release.histogram, release.histogram.n or release.total,
                                       k=k, m=m).to_dict(),
        "non_private": estimate_properties(h, h.n, k=k, m=m).to_dict(),
    }


__all__ = [
    "PropertyEstimates",
    "compare_properties",
    "coverage_unbiased",
    "entropy_miller_madow",
    "distance_to_uniformity",
    "entropy",
    "estimate_properties",
    "support_coverage",
]
