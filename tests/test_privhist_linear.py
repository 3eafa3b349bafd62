"""Bias-corrected linear estimators (Miller-Madow, smoothed Good-Toulmin) against brute force.

Deterministic (exact enumeration, mpmath), no false failures.

References
----------
.. [Miller55] G. A. Miller, "Note on the bias of information estimates", 1955.
.. [OSW16] A. Orlitsky, A. T. Suresh, Y. Wu, "Optimal prediction of the number of unseen
   species", PNAS 2016, Thm 2.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import mpmath
import numpy as np
import pytest

from shuffledp.analyzers.privhist import AnonHistogram, privhist
from shuffledp.analyzers.privhist.linear import (
    compare_linear,
    linear_estimates,
    miller_madow_entropy,
    sgt_unseen,
    sgt_weights,
)
from shuffledp.analyzers.privhist.properties import entropy

H = AnonHistogram.from_counts([1, 1, 2, 3, 3, 3, 7])


def test_miller_madow_per_label_brute_force():
    n = H.n
    labels = [1, 1, 2, 3, 3, 3, 7]
    brute = sum(r / n * math.log(n / r) for r in labels) + (len(labels) - 1) / (2 * n)
    assert miller_madow_entropy(H, n) == pytest.approx(brute, rel=1e-14)


@pytest.mark.parametrize("t", [0.5, 1.0])
def test_good_toulmin_unsmoothed_for_t_at_most_1(t):
    brute = sum(-(-t) ** r for r in [1, 1, 2, 3, 3, 3, 7])
    assert sgt_unseen(H, H.n, t) == pytest.approx(brute, rel=1e-13)


@pytest.mark.parametrize("t", [1.5, 3.0])
def test_smoothed_good_toulmin_against_mpmath(t):
    n = H.n
    r = mpmath.log(n * (t + 1) ** 2 / (t - 1)) / (2 * t)
    def tail(i):
        return 1 - sum(mpmath.exp(-r) * r ** j / mpmath.factorial(j) for j in range(i))
    brute = sum(-(-mpmath.mpf(t)) ** i * tail(i) for i in [1, 1, 2, 3, 3, 3, 7])
    assert sgt_unseen(H, n, t) == pytest.approx(float(brute), rel=1e-12)


def test_good_toulmin_is_unbiased_under_poisson_sampling():
    """E[-sum_i (-t)^i phi_i] with counts ~ Poisson(n p_x) equals the expected number of new
    labels in Poisson(n t p_x) further samples (t = 1, exact series to i = 150)."""
    p, n, t = np.array([0.5, 0.3, 0.2]), 10, 1.0
    i = np.arange(1, 151)
    w = sgt_weights(i, n, t)
    est = sum(float(np.sum(w * np.exp(-n * q + i * math.log(n * q)
                                      - np.array([math.lgamma(k + 1) for k in i]))))
              for q in p)
    truth = float(np.sum(np.exp(-n * p) * (1 - np.exp(-n * t * p))))
    assert est == pytest.approx(truth, abs=1e-12)


def test_miller_madow_reduces_bias_exactly():
    """All 3^6 samples of size 6 from p = (1/2, 1/4, 1/4): the exact bias of Miller-Madow is
    smaller than the plug-in's."""
    p = [0.5, 0.25, 0.25]
    n = 6
    true_h = -sum(q * math.log(q) for q in p)
    e_plug = e_mm = 0.0
    for seq in itertools.product(range(3), repeat=n):
        w = math.prod(p[s] for s in seq)
        h = AnonHistogram.from_counts(list(Counter(seq).values()))
        e_plug += w * entropy(h, n)
        e_mm += w * miller_madow_entropy(h, n)
    assert abs(e_mm - true_h) < 0.5 * abs(e_plug - true_h)
    assert e_plug < true_h


def test_linear_estimates_and_private_comparison():
    e = linear_estimates(H, H.n)
    assert e.m == 2 * H.n
    assert e.support_coverage_sgt == pytest.approx(
        (H.support + sum(-(-1) ** r for r in [1, 1, 2, 3, 3, 3, 7])) / (2 * H.n))
    rel = privhist(H, 2.0, rng=5)
    out = compare_linear(H, rel)
    assert out["non_private"] == e.to_dict()
    assert out["private"]["n"] == rel.total


def test_bad_input():
    with pytest.raises(ValueError, match="m=3"):
        linear_estimates(H, H.n, m=3)
    with pytest.raises(ValueError, match="n=0"):
        linear_estimates(H, 0)
    with pytest.raises(TypeError, match="release"):
        compare_linear(H, "x")
