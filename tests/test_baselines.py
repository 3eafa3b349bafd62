"""Laplace baselines of Sec. 4: noise scale, clamping, top-t%, guarantee, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from shuffledp.analyzers.heatmap.baselines import laplace_baseline
from shuffledp.analyzers.heatmap.metrics import emd


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_noise_scale_is_one_over_epsilon(eps):
    # A large aggregate means no cell is clamped, so raw - aggregate is the raw noise.
    agg = np.full((128, 128), 1000.0)
    rel = laplace_baseline(agg, eps, rng=12345)
    noise = (rel.raw - agg).ravel()
    n = noise.size
    b = 1.0 / eps
    # E|Lap(b)| = b and sd|Lap(b)| = b: a 6-standard-error band on the mean absolute value.
    # Under a fresh seed the false-failure rate is ~2e-9 (normal approximation, n = 16384).
    assert abs(np.abs(noise).mean() / b - 1.0) < 6.0 / math.sqrt(n)
    assert abs(noise.mean()) < 6.0 * math.sqrt(2.0) * b / math.sqrt(n)
    # Whole-distribution check; p > 1e-6 fails with probability 1e-6 under a fresh seed.
    assert stats.kstest(noise, stats.laplace(scale=b).cdf).pvalue > 1e-6


def test_negatives_are_zeroed_and_estimate_normalised():
    agg = np.zeros((40, 60))
    agg[10, 10] = 50.0
    rel = laplace_baseline(agg, 1.0, rng=0)
    assert rel.raw.shape == (40, 60) and rel.estimate.shape == (40, 60)
    assert (rel.raw >= 0).all()
    # about half of the empty cells get negative noise and are clamped to zero
    frac_zero = (rel.raw == 0).mean()
    assert 0.45 < frac_zero < 0.55
    assert rel.estimate.sum() == pytest.approx(1.0)
    assert rel.grid.width == 60 and rel.grid.height == 40


def test_top_percent_keeps_the_largest_noisy_cells():
    rng = np.random.default_rng(7)
    agg = rng.integers(10, 1000, size=(50, 40)).astype(float)  # all noisy values positive
    plain = laplace_baseline(agg, 1.0, rng=3)
    top = laplace_baseline(agg, 1.0, rng=3, top_percent=1.0)
    k = math.ceil(0.01 * agg.size)  # 20 cells
    assert top.parameters["kept_cells"] == k
    assert np.count_nonzero(top.raw) == k
    expected = np.sort(plain.raw.ravel())[-k:]
    np.testing.assert_allclose(np.sort(top.raw[top.raw > 0]), expected)
    assert top.estimate.sum() == pytest.approx(1.0)
    # tiny t keeps at least one cell
    tiny = laplace_baseline(agg, 1.0, rng=3, top_percent=1e-6)
    assert np.count_nonzero(tiny.raw) == 1
    # t = 100 is the plain baseline
    full = laplace_baseline(agg, 1.0, rng=3, top_percent=100)
    np.testing.assert_array_equal(full.raw, plain.raw)


def test_reproducible_and_generator_accepted():
    agg = np.ones((16, 16))
    a = laplace_baseline(agg, 1.0, rng=42)
    b = laplace_baseline(agg, 1.0, rng=np.random.default_rng(42))
    np.testing.assert_array_equal(a.raw, b.raw)
    c = laplace_baseline(agg, 1.0, rng=43)
    assert not np.array_equal(a.raw, c.raw)


def test_large_epsilon_recovers_the_aggregate():
    agg = np.zeros((16, 16))
    agg[3, 4] = 120.0
    agg[12, 9] = 80.0
    rel = laplace_baseline(agg, 1e6, rng=0)
    assert emd(agg, rel.estimate) < 1e-3


def test_guarantee_and_parameters():
    rel = laplace_baseline(np.ones((4, 4)), 0.7, rng=0, top_percent=25)
    g = rel.guarantee
    assert (g.notion, g.model, g.epsilon, g.delta) == ("pure", "central", 0.7, 0.0)
    assert g.neighbour == "add/remove one user"
    assert "Lemma 2.2" in g.theorem
    assert rel.parameters["noise_scale"] == pytest.approx(1 / 0.7)
    assert rel.parameters["top_percent"] == 25.0
    assert rel.parameters["mechanism"] == "laplace_top_percent"
    assert dict(rel.protocol) == {}


@pytest.mark.parametrize("eps", [0, -1.0, float("nan"), float("inf")])
def test_bad_epsilon(eps):
    with pytest.raises(ValueError, match=r"epsilon must be a finite number > 0, got epsilon="):
        laplace_baseline(np.ones((2, 2)), eps, rng=0)


def test_bad_arguments():
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        laplace_baseline(np.ones((2, 2)), "one", rng=0)
    with pytest.raises(TypeError, match="epsilon must be a real number"):
        laplace_baseline(np.ones((2, 2)), True, rng=0)
    for t in (0, -5, 100.5, float("nan")):
        with pytest.raises(ValueError, match=r"top_percent must be in \(0(\.0)?, 100(\.0)?\]"):
            laplace_baseline(np.ones((2, 2)), 1.0, rng=0, top_percent=t)
    with pytest.raises(ValueError, match="aggregate must be a non-empty 2-D"):
        laplace_baseline(np.ones(4), 1.0, rng=0)
    with pytest.raises(ValueError, match=r"aggregate must be (finite|non-negative)"):
        laplace_baseline(np.array([[1.0, -1.0]]), 1.0, rng=0)
    with pytest.raises(ValueError, match=r"aggregate\[0, 0\]=nan"):
        laplace_baseline(np.array([[np.nan, 1.0]]), 1.0, rng=0)
