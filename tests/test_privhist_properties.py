"""Plug-in symmetric property estimates ([Suresh19]_ Sec. 3.2) on histograms with known values.

Deterministic (exact closed forms), no false failures.

References
----------
.. [Suresh19] A. T. Suresh, "Differentially private anonymized histograms", NeurIPS 2019,
   Sec. 3.2. arXiv:1910.03553.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from shuffledp.analyzers.privhist import (
    AnonHistogram,
    compare_properties,
    estimate_properties,
    privhist,
)

UNIFORM = AnonHistogram.from_prevalences([5], [4])  # 4 labels x 5 items: p = 1/4 each
MIXED = AnonHistogram.from_prevalences([1, 2], [2, 1])  # p = (1/4, 1/4, 1/2)


def test_uniform_histogram():
    e = estimate_properties(UNIFORM, 20, k=8, m=2)
    assert e.entropy == pytest.approx(math.log(4), abs=1e-15)
    assert e.support_size == 0.5
    assert e.support_coverage == pytest.approx(4 * (1 - 0.75**2) / 2, abs=1e-15)
    assert e.distance_to_uniformity == pytest.approx(1.0, abs=1e-15)  # 4 x 1/8 + 4 unseen / 8
    assert estimate_properties(UNIFORM, 20, k=4).distance_to_uniformity == pytest.approx(
        0.0, abs=1e-15)


def test_mixed_histogram():
    e = estimate_properties(MIXED, 4, k=3, m=1)
    assert e.entropy == pytest.approx(1.5 * math.log(2), abs=1e-15)
    assert e.support_coverage == pytest.approx(1.0, abs=1e-15)  # m = 1: sum of the p_r
    assert e.distance_to_uniformity == pytest.approx(1 / 3, abs=1e-15)
    assert e.support_size == 1.0


def test_defaults_and_missing_k():
    e = estimate_properties(MIXED, 4)
    assert e.m == 4 and e.k is None
    assert e.support_size is None and e.distance_to_uniformity is None
    expected = (2 * (1 - 0.75**4) + (1 - 0.5**4)) / 4
    assert e.support_coverage == pytest.approx(expected, abs=1e-15)


def test_counts_above_n_are_clipped_to_probability_one():
    e = estimate_properties(AnonHistogram.from_prevalences([10], [1]), 5, m=3)
    assert e.entropy == 0.0 and e.support_coverage == pytest.approx(1 / 3)


def test_empty_histogram_and_zero_total():
    e = estimate_properties(AnonHistogram.empty(), 0, k=5)
    assert (e.entropy, e.support_size, e.support_coverage, e.distance_to_uniformity) == (
        0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("args, kwargs, match", [
    ((MIXED, 0), {}, "n must be >= 1"),
    ((MIXED, -1), {}, "n"),
    ((MIXED, 4), {"k": 0}, "k"),
    ((MIXED, 4), {"m": 0}, "m"),
    ((MIXED, 4.5), {}, "n"),
    (([1, 2], 3), {}, "h must be an AnonHistogram"),
])
def test_bad_input(args, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        estimate_properties(*args, **kwargs)


def test_compare_properties_private_beside_true():
    release = privhist(MIXED, 1.0, rng=2)
    out = compare_properties(MIXED, release, k=3)
    assert out["non_private"] == estimate_properties(MIXED, 4, k=3).to_dict()
    assert out["private"] == estimate_properties(release.histogram, release.total,
                                                 k=3).to_dict()
    with pytest.raises(TypeError, match="release"):
        compare_properties(MIXED, MIXED)


def test_coverage_estimator_is_exactly_unbiased_for_m_up_to_n():
    """E over all multinomial samples of size n (exact enumeration) of the estimator equals
    the true expected distinct count of m samples, divided by m."""
    import itertools
    from math import factorial

    from shuffledp.analyzers.privhist.properties import coverage_unbiased

    p = np.array([0.5, 0.3, 0.2])
    n = 5
    for m in (1, 3, 5):
        truth = np.sum(1 - (1 - p) ** m) / m
        mean = 0.0
        for counts in itertools.product(range(n + 1), repeat=3):
            if sum(counts) != n:
                continue
            prob = factorial(n) * np.prod([p[i] ** c / factorial(c)
                                           for i, c in enumerate(counts)])
            seen = [c for c in counts if c > 0]
            mean += prob * coverage_unbiased(AnonHistogram.from_counts(seen), n, m)
        assert mean == pytest.approx(truth, rel=1e-12)


def test_good_toulmin_and_miller_madow_formulas():
    from shuffledp.analyzers.privhist.properties import coverage_unbiased, entropy_miller_madow

    h = AnonHistogram.from_counts([3, 1, 1, 2])  # phi_1 = 2, phi_2 = 1, phi_3 = 1, n = 7
    t = 0.5
    gt = (4 + 2 * t - 1 * t**2 + 1 * t**3) / (7 * 1.5)
    assert coverage_unbiased(h, 7, 7 + 7 // 2 + 0) == pytest.approx(
        (4 + 2 * (3 / 7) - (3 / 7) ** 2 + (3 / 7) ** 3) / 10, rel=1e-12)
    assert gt > 0
    from shuffledp.analyzers.privhist.linear import sgt_unseen

    assert coverage_unbiased(h, 7, 30) == pytest.approx((4 + sgt_unseen(h, 7, 30 / 7 - 1)) / 30)
    p = np.array([3, 1, 1, 2]) / 7
    assert entropy_miller_madow(h, 7) == pytest.approx(-(p * np.log(p)).sum() + 3 / 14)


def test_property_helpers_check_their_input():
    from shuffledp.analyzers.privhist.linear import miller_madow_entropy, sgt_unseen, sgt_weights
    from shuffledp.analyzers.privhist.properties import (
        distance_to_uniformity,
        entropy,
        support_coverage,
    )

    with pytest.raises(ValueError, match="n must be"):
        entropy(MIXED, 0)
    with pytest.raises(ValueError, match="m must be"):
        support_coverage(MIXED, 4, 0)
    with pytest.raises(ValueError, match="k must be"):
        distance_to_uniformity(MIXED, 4, 0)
    with pytest.raises(TypeError, match="h must be an AnonHistogram"):
        entropy([1, 2], 3)
    with pytest.raises(ValueError, match="n must be"):
        miller_madow_entropy(MIXED, 0)
    with pytest.raises(ValueError, match="t must be"):
        sgt_weights(np.array([1, 2]), 4, -0.5)
    with pytest.raises(TypeError, match="h must be an AnonHistogram"):
        sgt_unseen([1], 4, 1.0)
    assert entropy(MIXED, 4) == pytest.approx(1.5 * math.log(2))
