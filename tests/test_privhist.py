"""PrivHist: representations, sorted-l1 distance, loader, mechanism behaviour and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.privhist import (
    AnonHistogram,
    budget_split,
    load_frequency_list,
    parse_frequency_list,
    privhist,
    sorted_l1,
    write_frequency_list,
)
from shuffledp.analyzers.privhist.mechanism import _low_privacy, _split_parameters
from shuffledp.randomness import SecureRandom


def test_forms_round_trip():
    h = AnonHistogram.from_counts([5, 1, 2, 1, 2, 1])
    assert list(h.counts) == [1, 2, 5] and list(h.prevalences) == [3, 2, 1]
    assert h.n == 12 and h.support == 6
    assert list(h.sorted_counts()) == [5, 2, 2, 1, 1, 1]
    assert AnonHistogram.from_counts(h.sorted_counts()) == h
    assert AnonHistogram.from_prevalences([2, 1, 5, 1], [2, 1, 1, 2]) == h
    assert list(h.cumulative([1, 2, 3, 5, 6])) == [6, 3, 1, 1, 0]


def test_sorted_l1_matches_padded_definition():
    rng = np.random.default_rng(7)
    for _ in range(200):
        a = rng.integers(1, 9, size=rng.integers(0, 7))
        b = rng.integers(1, 9, size=rng.integers(0, 7))
        ha = AnonHistogram.from_counts(a) if a.size else AnonHistogram.empty()
        hb = AnonHistogram.from_counts(b) if b.size else AnonHistogram.empty()
        m = max(a.size, b.size)
        pa = np.sort(np.concatenate([a, np.zeros(m - a.size, int)]))[::-1]
        pb = np.sort(np.concatenate([b, np.zeros(m - b.size, int)]))[::-1]
        assert sorted_l1(ha, hb) == int(np.abs(pa - pb).sum())
        # Lemma 1 / eq. (3): equals the l1 distance of the cumulative prevalences
        r = np.arange(1, 10)
        assert sorted_l1(ha, hb) == int(np.abs(ha.cumulative(r) - hb.cumulative(r)).sum())


def test_loader_both_forms(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("# password frequencies\n3\n1\n\n1,4\n 3 \n")
    h = load_frequency_list(f)
    assert h == AnonHistogram.from_prevalences([1, 3], [5, 2])
    g = tmp_path / "out.txt"
    write_frequency_list(h, g)
    assert load_frequency_list(g) == h


@pytest.mark.parametrize("text,needle", [
    ("3\n-2\n", "line 2: count must be an integer in [1, 2^52], got '-2'"),
    ("3\n2.5\n", "line 2: count must be a positive integer, got '2.5'"),
    ("3\n0\n", "line 2: count must be an integer in [1, 2^52], got '0'"),
    ("1\n2\n3,x\n", "line 3: prevalence must be a positive integer, got 'x'"),
    ("1,2,3\n", "line 1: expected 'count' or 'count,prevalence'"),
    ("4,\n", "line 1: expected"),
    ("# only a comment\n\n", "the frequency list is empty"),
])
def test_loader_errors_name_the_line(text, needle):
    with pytest.raises(ValueError) as e:
        parse_frequency_list(text.splitlines(), source="f.txt")
    assert needle in str(e.value) and "f.txt" in str(e.value)


@pytest.mark.parametrize("bad,exc", [([1, -1], ValueError), ([1.5], ValueError),
                                     ([0, 2], ValueError), ([[1, 2]], ValueError),
                                     (["a"], TypeError)])
def test_bad_counts(bad, exc):
    with pytest.raises(exc, match="counts"):
        AnonHistogram.from_counts(bad)


@pytest.mark.parametrize("eps", [0, -1, float("nan"), float("inf")])
def test_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        privhist(AnonHistogram.from_counts([1]), eps, rng=0)


def test_bad_arguments():
    h = AnonHistogram.from_counts([1, 2])
    with pytest.raises(TypeError, match="h must be an AnonHistogram"):
        privhist([1, 2], 1.0)
    with pytest.raises(ValueError, match="split"):
        privhist(h, 1.0, split="even")
    with pytest.raises(ValueError, match="eps1 \\+ eps2 \\+ eps3 must be <= epsilon"):
        privhist(h, 1.0, split=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="eps3"):
        privhist(h, 1.0, split=(0.5, 0.5, 0.0))  # the high-privacy regime needs eps3 > 0
    with pytest.raises(ValueError, match="resolution must be a power of two"):
        privhist(h, 0.5, resolution=3)


def test_budget_splits():
    assert budget_split(0.9) == pytest.approx((0.3, 0.3, 0.3))
    # as the PrivHist box prints it, at every eps (LowPrivacy then leaves eps3 unspent)
    assert budget_split(3.0) == pytest.approx((1.0, 1.0, 1.0))
    assert budget_split(3.0, "practical") == pytest.approx((0.3, 2.7, 0.0))
    assert budget_split(0.5, "practical") == pytest.approx((0.05, 0.225, 0.225))
    assert budget_split(2.0, (0.1, 1.9, 0.0)) == (0.1, 1.9, 0.0)


def test_split_parameters():
    assert _split_parameters(100, 2.0, 1.0) == (10, math.ceil(2 * (math.log(100) + 1)))
    assert _split_parameters(101, 2.0, 1.0)[0] == 11
    assert _split_parameters(100, 0.25, 0.1)[0] == 5


def _zipf(n_labels, a, seed):
    c = np.random.default_rng(seed).zipf(a, n_labels)
    return AnonHistogram.from_counts(c[c < 1 << 40])


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 8.0])
def test_release_record_and_error_scale(eps):
    """Error well below the trivial n: a loose bound with margin (seeded; Thm 1 gives
    O(sqrt(n) / eps) up to logs)."""
    h = _zipf(20000, 2.0, 1)
    r = privhist(h, eps, rng=5)
    g = r.guarantee
    assert g.notion == "pure" and g.neighbour is Neighbour.SORTED_L1 and g.delta == 0
    assert g.epsilon == pytest.approx(eps)
    assert r.parameters["epsilon_effective"] <= g.epsilon
    assert "reproducible evaluation" in g.notes[0]
    # N = n + DL(exp(-eps1)): |N - n| >= 10 / eps1 has probability about 2 e^-10 < 1e-4
    assert abs(r.total - h.n) < 10 / r.parameters["eps1"]
    assert sorted_l1(h, r.histogram) < 40 * math.sqrt(h.n) / min(eps, 1) ** 0.5
    assert "Z_b" not in str(dict(r.parameters))


def test_secure_default_and_empty_histogram():
    r = privhist(AnonHistogram.empty(), 2.0, rng=SecureRandom.for_testing(1))
    assert r.guarantee.notes == () and r.parameters["randomness"] == "secure"
    assert r.total >= 0


def test_seeded_runs_reproduce():
    h = _zipf(2000, 1.5, 2)
    a, b = privhist(h, 2.0, rng=11), privhist(h, 2.0, rng=11)
    assert a.histogram == b.histogram and a.total == b.total


def test_low_privacy_removes_the_fake_labels():
    """With zero noise, L1-L4 return the input exactly (fake labels removed at T, T + 1)."""
    from shuffledp.analyzers.privhist import split_histogram

    h = AnonHistogram.from_counts([1, 1, 2, 3, 3, 4, 9, 20])
    for T, M in [(2, 3), (3, 1), (4, 5)]:
        assert _low_privacy(split_histogram(h, T, M, 0), T, M) == h


def test_default_is_lean_split_with_the_public_regime_rule():
    """Defaults: eps1 = eps/20 and HighPrivacy only while eps sqrt(N) < 20; the paper's
    algorithm stays selectable (split="paper", regime="paper")."""
    from shuffledp.analyzers.privhist.mechanism import HIGH_PRIVACY_LOAD

    small = AnonHistogram.from_counts([1] * 150 + [3] * 50)  # n = 300
    big = AnonHistogram.from_counts([5] * 20000)  # n = 1e5
    # N = n + DL(exp(-0.015)) stays within +-1000 of n (probability > 1 - 1e-6)
    r = privhist(small, 0.3, rng=2)  # 0.3 sqrt(N) <= 0.3 sqrt(1300) ~ 11 < 20: high privacy
    assert r.parameters["regime"] == "high_privacy" and r.parameters["split"] == "lean"
    assert r.parameters["eps1"] == pytest.approx(0.015)
    assert r.guarantee.epsilon == pytest.approx(0.3)
    r = privhist(big, 0.3, rng=2)  # 0.3 sqrt(~1e5) ~ 90 >= 20: low privacy, eps3 unused
    assert r.parameters["regime"] == "low_privacy" and r.parameters["eps3"] == 0.0
    assert r.parameters["eps1"] + r.parameters["eps2"] == pytest.approx(0.3)
    assert 0.3 * math.sqrt(r.total) >= HIGH_PRIVACY_LOAD
    p = privhist(big, 0.3, split="paper", regime="paper", rng=2)
    assert p.parameters["regime"] == "high_privacy"
    assert (p.parameters["eps1"], p.parameters["eps3"]) == pytest.approx((0.1, 0.1))


def test_regime_can_be_forced_and_spends_the_whole_budget():
    h = AnonHistogram.from_counts([5, 3, 3, 1, 1, 1])
    low = privhist(h, 0.5, split="practical", regime="low", rng=1)
    assert low.parameters["regime"] == "low_privacy" and low.guarantee.epsilon == pytest.approx(0.5)
    assert (low.parameters["eps1"], low.parameters["eps3"]) == (0.05, 0.0)
    # the paper's split as printed: LowPrivacy leaves eps3 = eps/3 unspent, and the guarantee
    # states what was spent, 2 eps/3
    paper = privhist(h, 3.0, split="paper", regime="paper", rng=1)
    assert paper.parameters["regime"] == "low_privacy"
    assert paper.guarantee.epsilon == pytest.approx(2.0)
    assert paper.parameters["eps3_unspent"] == pytest.approx(1.0)
    high = privhist(h, 4.0, regime="high", rng=1)
    assert high.parameters["regime"] == "high_privacy" and high.guarantee.epsilon == 4.0
    assert budget_split(4.0, "practical", high=True) == pytest.approx((0.4, 1.8, 1.8))
    with pytest.raises(ValueError, match="regime"):
        privhist(h, 1.0, regime="medium")
