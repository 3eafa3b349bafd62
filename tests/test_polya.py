"""Polya noise: exact pmf identities ([Bagdasaryan22]_ Thm 4.2) and sampler goodness of fit.

References
----------
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4). arXiv:2111.02356.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from shuffledp.encoders.noise.laplace import discrete_laplace_pmf
from shuffledp.encoders.noise.polya import (
    polya,
    polya_difference,
    polya_difference_sum_pmf,
    polya_pmf,
)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("a", [0.2, 0.6, 0.9])
def test_sum_of_n_polya_differences_is_discrete_laplace_exactly(n, a):
    # Truncate each one-sided pmf where a^K < 1e-18; the convolution is then exact to 1e-12.
    support = int(math.ceil(math.log(1e-18) / math.log(a))) + 10
    k, pmf = polya_difference_sum_pmf(n, 1.0 / n, a, support)
    window = np.abs(k) <= support // 2
    expected = discrete_laplace_pmf(k[window], a)
    assert np.max(np.abs(pmf[window] - expected)) < 1e-9
    assert abs(pmf.sum() - 1.0) < 1e-9


def test_scaled_sensitivity_calibration_gives_eps_dp_ratio():
    # a = exp(-eps / Delta): neighbouring sums differ by at most Delta, so the pmf ratio is
    # bounded by e^eps, with equality at distance Delta (App. F slip fixed).
    eps, delta_s, n = 0.7, 6, 4
    a = math.exp(-eps / delta_s)
    support = int(math.ceil(math.log(1e-18) / math.log(a)))
    k, pmf = polya_difference_sum_pmf(n, 1.0 / n, a, support)
    mid = np.abs(k) <= support // 3
    p = dict(zip(k[mid].tolist(), pmf[mid].tolist(), strict=True))
    worst = max(abs(math.log(p[x] / p[x + delta_s])) for x in range(-50, 50))
    assert worst == pytest.approx(eps, rel=1e-9)


def test_overprovisioned_shape_sums_to_laplace_plus_independent_noise():
    # n users with shape 1/n_min, n >= n_min: total shape n/n_min >= 1 = DL(a) + extra noise.
    a, n, n_min = 0.5, 5, 4
    k, pmf = polya_difference_sum_pmf(n, 1.0 / n_min, a, 80)
    k1, base = polya_difference_sum_pmf(1, 1.0, a, 80)
    _, extra = polya_difference_sum_pmf(1, (n - n_min) / n_min, a, 80)
    conv = np.convolve(base, extra)
    # both are centred on zero with lengths 2*half+1
    half = (conv.size - 1) // 2
    kk = np.arange(-half, half + 1)
    sel = np.abs(kk) <= 20
    ref = dict(zip(kk[sel].tolist(), conv[sel].tolist(), strict=True))
    got = dict(zip(k.tolist(), pmf.tolist(), strict=True))
    assert max(abs(got[x] - ref[x]) for x in ref) < 1e-12


def test_pmf_matches_scipy_negative_binomial():
    k = np.arange(0, 60)
    for s, a in [(0.02, 0.99), (0.5, 0.3), (3.7, 0.8)]:
        np.testing.assert_allclose(polya_pmf(k, s, a), stats.nbinom.pmf(k, s, 1 - a), rtol=1e-10)


def test_sampler_goodness_of_fit():
    # chi-square at level 1e-6 with a fixed seed: deterministic; false-failure rate 1e-6 if
    # the seed were random.
    rng = np.random.default_rng(12345)
    s, a, size = 0.25, 0.7, 200_000
    x = polya(s, a, size, rng)
    kmax = 25
    obs = np.bincount(np.minimum(x, kmax), minlength=kmax + 1)
    p = polya_pmf(np.arange(kmax), s, a)
    p = np.r_[p, 1 - p.sum()]
    res = stats.chisquare(obs, p * size)
    assert res.pvalue > 1e-6


def test_sum_of_sampled_differences_is_discrete_laplace():
    rng = np.random.default_rng(7)
    n, a, size = 10, 0.8, 100_000
    total = sum(polya_difference(1.0 / n, a, size, rng) for _ in range(n))
    kmax = 15
    ks = np.arange(-kmax, kmax + 1)
    clipped = np.clip(total, -kmax - 1, kmax + 1)
    obs = np.array([(clipped == k).sum() for k in range(-kmax - 1, kmax + 2)])
    p = discrete_laplace_pmf(ks, a)
    tail = (1 - p.sum()) / 2
    exp = np.r_[tail, p, tail] * size
    assert stats.chisquare(obs, exp).pvalue > 1e-6


def test_per_coordinate_a_broadcasts():
    rng = np.random.default_rng(0)
    a = np.array([0.1, 0.99])
    x = polya(1.0, np.repeat(a, 50_000), 100_000, rng)
    assert x[:50_000].mean() < 0.2 < 50 < x[50_000:].mean()


@pytest.mark.parametrize(
    "shape,a", [(0.0, 0.5), (-1, 0.5), (float("nan"), 0.5), (1.0, 0.0), (1.0, 1.0), (1.0, 2.0)]
)
def test_bad_parameters(shape, a):
    with pytest.raises(ValueError):
        polya(shape, a, 3, 0)


@pytest.mark.parametrize("s,a", [(0.02, 0.995), (0.3, 0.6), (1.5, 0.4)])
def test_single_difference_matches_exact_pmf(s, a):
    # the beta-binomial split of T = X + Y must give exactly the law of X - Y
    rng = np.random.default_rng(99)
    size = 200_000
    x = polya_difference(s, a, size, rng)
    k, pmf = polya_difference_sum_pmf(1, s, a, 4000)
    kmax = 12
    inner = np.abs(k) <= kmax
    p_in = pmf[inner]
    lo, hi = pmf[k < -kmax].sum(), pmf[k > kmax].sum()
    obs = np.r_[(x < -kmax).sum(), [(x == v).sum() for v in range(-kmax, kmax + 1)],
                (x > kmax).sum()]
    exp = np.r_[lo, p_in, hi]
    exp = exp / exp.sum() * size
    keep = exp > 5
    obs2 = np.r_[obs[keep], obs[~keep].sum()]
    exp2 = np.r_[exp[keep], exp[~keep].sum()]
    if exp2[-1] == 0:
        obs2, exp2 = obs2[:-1], exp2[:-1]
    assert stats.chisquare(obs2, exp2).pvalue > 1e-6
