"""Baselines of [Suresh19]_ Sec. 4.1: noisy sorted counts ([Hay09]_) and noisy prevalences.

The privacy argument of each is "i.i.d. exact DL noise on an integer vector of known
l1-sensitivity"; the sensitivities are checked exactly on every neighbour pair of histograms
with n <= 8 (deterministic), and the noise calls are checked to use that sensitivity. No
statistical tests here (no false failures).

References
----------
.. [Suresh19] A. T. Suresh, "Differentially private anonymized histograms", NeurIPS 2019,
   Def. 1, Sec. 4.1. arXiv:1910.03553.
.. [Hay09] M. Hay, C. Li, G. Miklau, D. Jensen, "Accurate Estimation of the Degree
   Distribution of Private Networks", ICDM 2009.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.privhist import (
    AnonHistogram,
    PrivHistRelease,
    prevalence_baseline,
    sorted_count_baseline,
    sorted_l1,
)
from shuffledp.analyzers.privhist import baselines as bl
from shuffledp.randomness import SecureRandom


def partitions(n, largest=None):
    largest = n if largest is None else largest
    if n == 0:
        yield ()
        return
    for k in range(min(n, largest), 0, -1):
        for rest in partitions(n - k, k):
            yield (k, *rest)


def hist(c):
    return AnonHistogram.from_counts(list(c)) if c else AnonHistogram.empty()


ALL = [hist(p) for n in range(0, 9) for p in partitions(n)]
PAIRS = [(a, b) for a, b in itertools.combinations(ALL, 2) if sorted_l1(a, b) == 1]
H = AnonHistogram.from_prevalences([1, 2, 5, 40], [30, 10, 4, 1])


def test_enumeration_is_not_empty():
    assert len(PAIRS) > 100


@pytest.mark.parametrize("K", [1, 3, 8, 12])
def test_padded_sorted_counts_have_sensitivity_one(K):
    worst = max(int(np.abs(bl.padded_sorted_counts(a, K) - bl.padded_sorted_counts(b, K)).sum())
                for a, b in PAIRS)
    assert worst == 1


@pytest.mark.parametrize("C", [1, 3, 8])
def test_clipped_prevalences_have_sensitivity_two_and_it_is_tight(C):
    dist = [int(np.abs(bl.clipped_prevalences(a, C) - bl.clipped_prevalences(b, C)).sum())
            for a, b in PAIRS]
    assert max(dist) == (2 if C > 1 else 1)  # C = 1: every count is clipped to 1


def _spy(monkeypatch):
    calls = []
    real = bl.discrete_laplace_for

    def spy(eps, sens, size, rng):
        calls.append((float(eps), int(sens), int(size)))
        return real(eps, sens, size, rng)

    monkeypatch.setattr(bl, "discrete_laplace_for", spy)
    monkeypatch.setattr("shuffledp.analyzers.privhist.mechanism.discrete_laplace_for", spy)
    return calls


def test_noise_calls_use_the_stated_sensitivities(monkeypatch):
    calls = _spy(monkeypatch)
    r = sorted_count_baseline(H, 2.0, rng=1)
    assert calls[0] == (pytest.approx(0.2), 1, 1)  # N with eps / 10
    assert calls[1][:2] == (pytest.approx(1.8), 1) and calls[1][2] == r.parameters["length"]
    calls.clear()
    r = prevalence_baseline(H, 2.0, cap=50, rng=1)
    assert calls == [(2.0, 2, 50)] and r.parameters["eps1"] == 0.0


@pytest.mark.parametrize("fn", [sorted_count_baseline, prevalence_baseline])
@pytest.mark.parametrize("eps", [0.1, 1.0, 7.0])
def test_guarantee(fn, eps):
    r = fn(H, eps, rng=3)
    g = r.guarantee
    assert isinstance(r, PrivHistRelease)
    assert g.notion == "pure" and g.neighbour == Neighbour.SORTED_L1
    assert g.epsilon == pytest.approx(eps)
    assert r.parameters["eps1"] == pytest.approx(eps / 10)
    assert eps * (1 - 1e-9) <= r.parameters["epsilon_effective"] + 1e-9
    assert r.parameters["epsilon_effective"] <= eps
    assert g.notes  # seeded: marked as an evaluation run


def test_secure_default_has_no_seeded_note():
    r = sorted_count_baseline(H, 1.0, length=60)
    assert r.parameters["randomness"] == "secure" and not r.guarantee.notes
    r = prevalence_baseline(H, 1.0, cap=60, rng=SecureRandom())
    assert r.parameters["randomness"] == "secure"


def test_shape_and_public_length():
    r = sorted_count_baseline(H, 0.5, length=20, rng=0)
    assert r.histogram.support <= 20 and r.total == r.histogram.n
    assert r.parameters["eps1"] == 0.0 and r.guarantee.epsilon == 0.5
    r = prevalence_baseline(H, 0.5, cap=10, rng=0)
    assert len(r.histogram) == 0 or r.histogram.counts.max() <= 10
    auto = sorted_count_baseline(H, 1.0, rng=0)
    D = auto.parameters["labels_noisy"]  # the noisy number of labels, not of items
    assert auto.parameters["length"] == D + int(np.ceil(np.log(D + 2) / 0.1))
    assert abs(D - H.support) < 200 and auto.total == auto.histogram.n


def test_tiny_noise_recovers_the_histogram():
    # eps = 200: P(any of ~300 DL draws != 0) < 1e-30
    assert sorted_count_baseline(H, 200.0, rng=5).histogram == H
    assert prevalence_baseline(H, 200.0, rng=5).histogram == H
    # counts above the cap are released at the cap
    capped = prevalence_baseline(H, 200.0, cap=5, rng=5).histogram
    assert capped == AnonHistogram.from_prevalences([1, 2, 5], [30, 10, 5])


def test_empty_histogram():
    for fn in (sorted_count_baseline, prevalence_baseline):
        r = fn(AnonHistogram.empty(), 1.0, rng=0)
        assert r.total >= 0 and r.histogram.support >= 0


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": 1.0, "length": 0}, "length"),
    ({"epsilon": 1.0, "length": 2.5}, "length"),
    ({"epsilon": 1.0, "length": (1 << 26) + 1}, "length"),
])
def test_bad_input_sorted(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        sorted_count_baseline(H, **kwargs, rng=0)


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": float("nan")}, "epsilon"),
    ({"epsilon": 1.0, "cap": -3}, "cap"),
    ({"epsilon": 1.0, "cap": "10"}, "cap"),
])
def test_bad_input_prevalence(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        prevalence_baseline(H, **kwargs, rng=0)


def test_not_a_histogram():
    with pytest.raises(TypeError, match="h must be an AnonHistogram"):
        sorted_count_baseline([3, 2, 1], 1.0, rng=0)
    with pytest.raises(TypeError, match="h must be an AnonHistogram"):
        prevalence_baseline({1: 2}, 1.0, rng=0)


def test_the_length_follows_the_labels_not_the_items():
    """2^27 items on one label (the paper's 70-million-item scale): the padded vector has
    O(support) entries, not O(items); 2^27 labels are refused before any allocation."""
    big = AnonHistogram.from_prevalences([1 << 27], [1])
    r = sorted_count_baseline(big, 1.0, rng=0)
    assert r.parameters["length"] < 200 and r.histogram.support >= 1
    many = AnonHistogram.from_prevalences([1], [1 << 27])
    with pytest.raises(ValueError, match="length.*exceeds"):
        sorted_count_baseline(many, 1.0, rng=0)


def _dl_law(D: int, a: float, K_of, top: int) -> dict[int, float]:
    """Exact law of K = K_of(max(D + Z, 0)), Z ~ DL(a), over D_hat <= top (the rest of the
    mass lies above every compared output)."""
    c = (1 - a) / (1 + a)
    law = {K_of(0): a ** D / (1 + a)}  # P(D + Z <= 0) = a^D / (1 + a)
    for d in range(1, top + 1):
        law[K_of(d)] = c * a ** abs(d - D)
    return law


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
def test_sorted_count_baseline_privacy_loss_is_exact_on_all_small_pairs(eps):
    """The composed mechanism: K from the eps1-DP noisy number of labels, then the padded
    vector at length K with DL(e^-eps2_eff) noise. For every neighbour pair with <= 8 items
    and every K, the exact log-ratio of P(K) plus eps2_eff times the l1 distance of the two
    padded vectors at that K is at most eps (to 1e-12): the privacy loss of the whole release
    (isotonic regression and rounding are post-processing)."""
    e1 = eps * bl.TOTAL_SHARE
    e1_eff = bl._effective(e1, 1)
    e2_eff = bl._effective(eps - e1, 1)
    a1 = np.exp(-e1_eff)

    def K_of(d):
        return d + int(np.ceil(np.log(d + 2) / e1))

    worst = 0.0
    for x, y in PAIRS:
        lx = _dl_law(x.support, a1, K_of, 12)
        ly = _dl_law(y.support, a1, K_of, 12)
        for K in lx:
            vec = int(np.abs(bl.padded_sorted_counts(x, K) - bl.padded_sorted_counts(y, K)).sum())
            assert vec <= 1
            loss = abs(np.log(lx[K] / ly[K])) + e2_eff * vec
            worst = max(worst, loss)
    assert worst <= eps + 1e-12
    assert worst >= e1_eff + e2_eff - 1e-9  # attained: a label appearing moves both parts
