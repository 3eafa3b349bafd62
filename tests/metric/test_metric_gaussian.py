"""The Gaussian variant of PrivEMDLinear: exact discrete Gaussian sampler, zCDP accounting
and the (alpha, delta)-bounded d_EM-DP calibration.

References
----------
.. [CKS20] C. L. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
   Privacy", NeurIPS 2020. arXiv:2004.00010.
"""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy.stats import chisquare, norm

from shuffledp.accounting.zcdp import metric_gaussian_delta, metric_gaussian_sigma2, zcdp_delta
from shuffledp.analyzers.metric.linear import priv_emd_linear, query_value
from shuffledp.encoders.metric.spaces import grid_space
from shuffledp.encoders.noise.gaussian import discrete_gaussian_exact, discrete_gaussian_pmf
from shuffledp.randomness import SecureRandom


def test_discrete_gaussian_matches_its_pmf():
    """Chi-square on 100k draws against the exact pmf (false-failure rate 1e-4)."""
    s2 = Fraction(9, 4)
    x = discrete_gaussian_exact(s2, 100_000, 11)
    ks = np.arange(-6, 7)
    obs = np.array([(x == k).sum() for k in ks] + [(np.abs(x) > 6).sum()])
    p = discrete_gaussian_pmf(ks, 2.25)
    exp = np.append(p, 1 - p.sum()) * x.size
    assert chisquare(obs, exp).pvalue > 1e-4


def test_discrete_gaussian_secure_and_large_scale():
    x = discrete_gaussian_exact(Fraction(10**16 + 3, 7), 5000, SecureRandom.for_testing(2))
    # sd ratio within 5 standard errors (sqrt(1/(2n)) = 0.01; false failure < 1e-6)
    assert x.std() / math.sqrt((10**16 + 3) / 7) == pytest.approx(1.0, abs=0.05)
    with pytest.raises(ValueError, match="sigma2"):
        discrete_gaussian_exact(2.5, 3)


def _gauss_delta(eps, D, s):  # exact (eps, delta) curve of the continuous Gaussian
    a, b = D / (2 * s), eps * s / D
    return norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b)


def _mp_zcdp_delta(eps, rho):  # independent: mpmath, dense grid over a, no optimiser
    mpmath.mp.dps = 30
    best = mpmath.inf
    for a in (1 + mpmath.mpf(10) ** (k / 40.0) for k in range(-200, 121)):
        val = mpmath.e ** ((a - 1) * (a * rho - eps)) / (a - 1) * (1 - 1 / a) ** a
        best = min(best, val)
    return float(best)


@pytest.mark.parametrize("eps,rho", [(1.0, 0.5), (0.5, 0.125), (0.3, 0.02), (5.0, 0.3)])
def test_zcdp_delta_bounds_the_gaussian_and_matches_mpmath(eps, rho):
    d = zcdp_delta(eps, rho)
    assert d >= _gauss_delta(eps, math.sqrt(2 * rho), 1.0)  # an upper bound on the truth
    assert d == pytest.approx(_mp_zcdp_delta(eps, rho), rel=1e-3)
    # the optimiser is at least as good as a dense grid of a (every a is a valid bound)
    assert d <= _mp_zcdp_delta(eps, rho) * (1 + 1e-6)


def test_discrete_gaussian_pair_within_zcdp_delta():
    """Exact privacy profile of the 1-d discrete Gaussian at shift D (sum over the integers)
    is below the zCDP conversion with rho = D^2 / (2 sigma^2) (CKS20 Thm 4 + Cor. 13)."""
    s2, D, eps = 4.0, 3, 1.0
    k = np.arange(-200, 201)
    p, q = discrete_gaussian_pmf(k, s2), discrete_gaussian_pmf(k - D, s2)
    exact = np.maximum(p - math.exp(eps) * q, 0).sum()
    assert exact <= zcdp_delta(eps, D * D / (2 * s2))


def test_metric_delta_increases_with_distance_and_calibration_is_tight():
    alpha, delta, ell = 1.0, 1e-6, 100.0
    s2 = metric_gaussian_sigma2(alpha, delta, ell)
    rho1 = ell**2 / (2 * float(s2))
    curve = [zcdp_delta(alpha * d, rho1 * d * d) for d in np.linspace(0.01, 1, 100)]
    assert all(a <= b for a, b in zip(curve, curve[1:]))  # worst case at d = 1
    assert metric_gaussian_delta(alpha, ell, float(s2)) <= delta
    # 0.2% less variance breaks the target: the calibration is tight
    assert metric_gaussian_delta(alpha, ell, float(s2) * 0.998) > delta


def test_gaussian_linear_release():
    space = grid_space(6, 6)
    f = space.distances[:, 0]
    n, m, alpha, delta = 4000, 5, 2.0, 1e-6
    users = np.random.default_rng(1).integers(0, space.k, size=(n, m))
    rel = priv_emd_linear(users, space, f, alpha, "local", noise="gaussian", delta=delta, rng=3)
    g = rel.guarantee
    assert (g.epsilon, g.delta, rel.noise) == (alpha, delta, "gaussian")
    assert g.parameters["norm"] == 2 and rel.sigma2 is not None
    s2 = float(rel.sigma2)
    assert metric_gaussian_delta(alpha, rel.sensitivity, s2) <= delta
    per_user = np.round(f * rel.resolution)[users].sum(axis=1)
    noise = rel.noisy_sums[:, 0] - per_user
    # variance of n Gaussian draws: sd of the ratio sqrt(2/n) = 0.022; 5 sd (false < 1e-6)
    assert np.var(noise) / s2 == pytest.approx(1.0, abs=0.11)
    central = priv_emd_linear(users, space, f, alpha, "central", noise="gaussian",
                              delta=delta, rng=4)
    assert central.noise_scale == pytest.approx(rel.noise_scale / n, rel=2e-3)  # R differs
    truth = query_value(users, space, f)[0]
    assert abs(central.estimate[0] - truth) <= 5 * central.noise_scale + 1 / central.resolution


@pytest.mark.parametrize("kwargs,match", [
    ({"noise": "gaussian"}, "needs delta"),
    ({"noise": "gaussian", "delta": 1.5}, "delta"),
    ({"noise": "laplace", "delta": 1e-6}, "pure"),
    ({"noise": "cauchy"}, "noise"),
])
def test_gaussian_bad_input(kwargs, match):
    space = grid_space(2, 2)
    with pytest.raises(ValueError, match=match):
        priv_emd_linear(np.zeros((2, 2), int), space, space.distances[:, 0], 1.0, **kwargs)
