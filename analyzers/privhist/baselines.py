"""Baselines for anonymized histograms: noisy sorted counts and noisy prevalences.

Both release the same :class:`~shuffledp.analyzers.privhist.mechanism.PrivHistRelease` as
PrivHist, under the same relation (:attr:`Neighbour.SORTED_L1`, [Suresh19]_ Def. 1: one
label's count changes by one, a label may appear or vanish).

Sorted counts ([Hay09]_). The sorted-count vector zero-padded to a public length K,
(n_(1), ..., n_(K)), has l1-sensitivity exactly 1 under this relation: the sorted-l1
distance of [Suresh19]_ Lemma 1 *is* the l1 distance of the zero-padded sorted vectors, and
neighbours are at distance 1. Truncating to the first K entries cannot increase it, so the
release is private even if a dataset has more than K labels (those are dropped). Every one
of the K entries receives G(e^-eps2) noise (the exact discrete Laplace of [CKS20]_), then
isotonic regression (non-increasing, PAVA) and rounding to non-negative integers, as in
[Hay09]_ (who used continuous Laplace and the l2 fit; [Suresh19]_ Sec. 4.1 calls this the
high-error algorithm when every zero count gets noise).

Prevalences. The vector (phi_1, ..., phi_C) with counts above the cap C clipped to C has
l1-sensitivity 2: a label moving from r to r + 1 changes phi_r and phi_{r+1} by one each
(r = 0 or r >= C: one or no coordinate). Every entry receives DL noise for sensitivity 2
(parameter exp(-s/t), 2 s/t <= eps2), negatives are set to zero. The error grows like the
sum of r |Z_r| over r <= C ([Suresh19]_ Sec. 4.1: O(n^2 / eps) when C is about n).

Public length. K and C are public parameters. When they are not given, eps1 = eps / 10 (the
share [Suresh19]_ App. C.1.3 gives to the item count) buys a noisy count and eps2 = eps -
eps1 pays for the vector. Sorted counts: the number of labels D (the support) has
sensitivity 1 under Def. 1 (a label appears or vanishes only when its count moves between 0
and 1), so D_hat = max(D + G(e^-eps1), 0) is eps1-DP and K = D_hat + ceil(ln(D_hat + 2) /
eps1) >= D except with probability about 1 / (D_hat + 2) (the labels beyond K are then
dropped, still private). The work and memory are O(D + ln D / eps1), the support, not the
number of items. Prevalences: C = N + ceil(ln(N + 2) / eps1) from N = max(n + G(e^-eps1), 0),
so C >= the largest count except with probability about 1 / (N + 2). With K or C given,
eps1 = 0. Either way the release is (eps1 + eps2)-DP by basic composition: the length is a
function of the eps1-DP count, and for every length the padded vector has l1-sensitivity 1
(sorted) or 2 (prevalences); ``tests/test_privhist_baselines.py`` checks the composed
mechanism's privacy loss exactly on every neighbour pair with at most 6 items. The released
total is the released histogram's number of items (post-processing).

References
----------
.. [Hay09] Hay et al. (2009), "Degree distribution of private networks" (noisy sorted degrees +
   isotonic regression) -- full entry in docs/references.md
.. [Suresh19] Suresh (2019), "Differentially private anonymized histograms", Def. 1, Lemma 1, Sec.
   4.1, App. C.1.3 -- full entry in docs/references.md
.. [CKS20] Canonne et al. (2020), "The discrete Gaussian for DP", Alg. 2 -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import isotonic_regression

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.analyzers.privhist.histogram import AnonHistogram, as_histogram
from shuffledp.analyzers.privhist.mechanism import (
    PrivHistRelease,
    _effective,
    geometric,
)
from shuffledp.encoders.noise.laplace import discrete_laplace_for
from shuffledp.randomness import SEEDED_NOTE, is_seeded, noise_source

TOTAL_SHARE = 0.1  # eps1 / eps when the public length is derived from the noisy total
MAX_LENGTH = 1 << 26  # K or C above this would need > 0.5 GB: use privhist() instead
SORTED_THEOREM = (
    "Hay, Li, Miklau, Jensen, ICDM 2009 (noisy sorted counts + isotonic regression): the "
    "zero-padded sorted counts have l1-sensitivity 1 under Suresh 2019 Def. 1; geometric "
    "noise by the exact discrete Laplace of Canonne, Kamath, Steinke 2020"
)
PREVALENCE_THEOREM = (
    "Noisy prevalences (Suresh 2019 Sec. 4.1): phi_1..phi_C, counts clipped to C, have "
    "l1-sensitivity 2 under Suresh 2019 Def. 1; exact discrete Laplace noise"
)


def _length(name: str, value: Any, h: AnonHistogram, epsilon: float,
            src: Any) -> tuple[int, int | None, float, float]:
    """(length, N or None, eps1, eps2): the public length, bought with eps1 if not given."""
    eps = v.positive("epsilon", epsilon)
    if value is not None:
        return v.bounded_count(name, value, 1, MAX_LENGTH), None, 0.0, eps
    e1 = eps * TOTAL_SHARE
    N = max(h.n + int(geometric(e1, 1, src)[0]), 0)
    length = N + math.ceil(math.log(N + 2) / e1)
    if length > MAX_LENGTH:
        raise ValueError(
            f"the derived {name} = {length} exceeds {MAX_LENGTH} (n is too large for this "
            f"baseline); pass {name} explicitly or use privhist()"
        )
    return length, N, e1, eps - e1


def _label_length(value: Any, h: AnonHistogram, epsilon: float,
                  src: Any) -> tuple[int, int | None, float, float]:
    """(K, D_hat or None, eps1, eps2): the sorted-count length, bought with eps1 from the
    noisy number of labels D_hat = max(D + G(e^-eps1), 0) if not given (module docstring)."""
    eps = v.positive("epsilon", epsilon)
    if value is not None:
        return v.bounded_count("length", value, 1, MAX_LENGTH), None, 0.0, eps
    e1 = eps * TOTAL_SHARE
    D = max(h.support + int(geometric(e1, 1, src)[0]), 0)
    length = D + math.ceil(math.log(D + 2) / e1)
    if length > MAX_LENGTH:
        raise ValueError(
            f"the derived length = {length} exceeds {MAX_LENGTH} (too many labels for this "
            f"baseline); pass length explicitly or use privhist()"
        )
    return length, D, e1, eps - e1


def _release(hist: AnonHistogram, N: int | None, e1: float, e2: float, sensitivity: int,
             theorem: str, params: dict[str, Any], seeded: bool) -> PrivHistRelease:
    spent = (_effective(e1, 1) if e1 > 0 else 0.0) + _effective(e2, sensitivity)
    params.update(eps1=e1, eps2=e2, epsilon_effective=float(spent),
                  noise="discrete_laplace_exact",
                  randomness="seeded" if seeded else "secure")
    guarantee = Guarantee(
        notion="pure", model="central", epsilon=e1 + e2, neighbour=Neighbour.SORTED_L1,
        theorem=theorem, parameters=params, notes=(SEEDED_NOTE,) if seeded else (),
    )
    total = hist.n if N is None else N
    return PrivHistRelease(hist, int(total), guarantee, params)


def padded_sorted_counts(h: AnonHistogram, length: int) -> np.ndarray:
    """(n_(1), ..., n_(K)): the sorted counts cut or zero-padded to ``length`` = K.

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    length : int
        K, >= 0.

    Returns
    -------
    numpy.ndarray of int64, shape (K,)
        The counts in decreasing order, cut or zero-padded.

    Raises
    ------
    ValueError
        If ``length`` is negative (from numpy).

    References
    ----------
    [Hay09]_ (noisy sorted degrees); [Suresh19]_ Def. 1, Lemma 1 (l1-sensitivity 1).
    """
    s = h.sorted_counts()[:length]
    return np.concatenate([s, np.zeros(length - s.size, dtype=np.int64)])


def clipped_prevalences(h: AnonHistogram, cap: int) -> np.ndarray:
    """(phi_1, ..., phi_C) with every count above ``cap`` = C counted at C.

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    cap : int
        C, >= 1.

    Returns
    -------
    numpy.ndarray of int64, shape (C,)
        phi_1..phi_C, counts above C counted at C.

    Raises
    ------
    ValueError
        If ``cap`` is negative (from numpy).

    References
    ----------
    [Suresh19]_ Sec. 4.1 (noisy prevalences, l1-sensitivity 2).
    """
    out = np.zeros(cap, dtype=np.int64)
    np.add.at(out, np.minimum(h.counts, cap) - 1, h.prevalences)
    return out


def sorted_count_baseline(
    h: AnonHistogram,
    epsilon: float,
    *,
    length: int | None = None,
    rng: Any = None,
) -> PrivHistRelease:
    """Geometric noise on every zero-padded sorted count, isotonic regression, rounding.

    Parameters
    ----------
    h : AnonHistogram
        The histogram (may be empty).
    epsilon : float
        Total budget, > 0.
    length : int, optional
        Public K >= the number of labels (e.g. the number of nodes of a graph), in
        [1, 2^26]. Default: derived from the noisy number of labels with eps / 10 (module
        docstring), so the cost is O(support), not O(items).
    rng : None, SecureRandom, int or Generator
        ``None``: the cryptographically secure generator (a private release); a seed or a
        Generator: reproducible evaluation, marked in the guarantee notes.

    Returns
    -------
    PrivHistRelease
        (eps1 + eps2)-DP under :attr:`Neighbour.SORTED_L1` ([Hay09]_, [Suresh19]_ Def. 1).

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or a number argument has the wrong type.
    ValueError
        If ``epsilon`` is not positive, ``length`` is outside [1, 2^26], or the length derived
        from the noisy number of labels exceeds 2^26.

    References
    ----------
    [Hay09]_ (noisy sorted counts + isotonic regression); [Suresh19]_ Def. 1, Lemma 1;
    [CKS20]_ Alg. 2 (exact discrete Laplace).
    """
    h = as_histogram("h", h)
    seeded = is_seeded(rng)
    src = noise_source(rng)
    K, D, e1, e2 = _label_length(length, h, epsilon, src)
    noisy = padded_sorted_counts(h, K) + geometric(e2, K, src)
    fit = isotonic_regression(noisy.astype(float), increasing=False).x
    counts = np.round(fit).astype(np.int64)
    counts = counts[counts > 0]
    hist = AnonHistogram.from_counts(counts) if counts.size else AnonHistogram.empty()
    params = {"mechanism": "sorted-count baseline", "length": K, "labels_noisy": D}
    return _release(hist, None, e1, e2, 1, SORTED_THEOREM, params, seeded)


def prevalence_baseline(
    h: AnonHistogram,
    epsilon: float,
    *,
    cap: int | None = None,
    rng: Any = None,
) -> PrivHistRelease:
    """Discrete Laplace noise (sensitivity 2) on every prevalence phi_1..phi_C.

    Parameters
    ----------
    h : AnonHistogram
        The histogram (may be empty).
    epsilon : float
        Total budget, > 0.
    cap : int, optional
        Public C in [1, 2^26]; counts above C are released as C. Default: derived from a
        noisy total with eps / 10 (module docstring).
    rng : None, SecureRandom, int or Generator
        As in :func:`sorted_count_baseline`.

    Returns
    -------
    PrivHistRelease
        (eps1 + eps2)-DP under :attr:`Neighbour.SORTED_L1` ([Suresh19]_ Sec. 4.1).

    Raises
    ------
    TypeError
        If ``h`` is not an AnonHistogram or a number argument has the wrong type.
    ValueError
        If ``epsilon`` is not positive, ``cap`` is outside [1, 2^26], or the cap derived from
        the noisy total exceeds 2^26.

    References
    ----------
    [Suresh19]_ Sec. 4.1, App. C.1.3; [CKS20]_ Alg. 2 (exact discrete Laplace).
    """
    h = as_histogram("h", h)
    seeded = is_seeded(rng)
    src = noise_source(rng)
    C, N, e1, e2 = _length("cap", cap, h, epsilon, src)
    noisy = clipped_prevalences(h, C) + discrete_laplace_for(e2, 2, C, src)
    phi = np.maximum(noisy, 0)
    hist = AnonHistogram._trusted(np.arange(1, C + 1, dtype=np.int64), phi)
    params = {"mechanism": "prevalence baseline", "cap": C}
    return _release(hist, N, e1, e2, 2, PREVALENCE_THEOREM, params, seeded)


__all__ = [
    "clipped_prevalences",
    "padded_sorted_counts",
    "prevalence_baseline",
    "sorted_count_baseline",
]
