"""BoundedEMDReduction (Imola et al., Alg. 3, Thm 5.3) as a mechanism."""

import math

import numpy as np
import pytest
from scipy.stats import chisquare

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.accounting.metric.reductions import reduction_epsilon
from shuffledp.analyzers.metric.linear import priv_emd_linear
from shuffledp.analyzers.metric.reduction import bounded_emd_reduction, sample_with_replacement
from shuffledp.encoders.metric.spaces import grid_space
from shuffledp.randomness import SecureRandom


def _unbounded(seed=0, n=300, k=16):
    g = np.random.default_rng(seed)
    return [g.integers(0, k, size=int(g.integers(1, 40))) for _ in range(n)]


def test_samples_come_from_each_users_own_dataset_uniformly():
    data = [np.array([3, 3, 7]), np.array([1]), np.arange(5)]
    x = sample_with_replacement(data, 60_000, SecureRandom.for_testing(1))
    assert x.shape == (3, 60_000)
    assert set(x[1]) == {1}
    # user 0: P(3) = 2/3, P(7) = 1/3; user 2: uniform on 0..4. Chi-square, false-failure 1e-4 each
    assert chisquare([np.sum(x[0] == 3), np.sum(x[0] == 7)], [40_000, 20_000]).pvalue > 1e-4
    assert chisquare(np.bincount(x[2], minlength=5)).pvalue > 1e-4
    y = sample_with_replacement(data, 10, 5)
    assert np.array_equal(y, sample_with_replacement(data, 10, 5))  # research: reproducible


def test_reduction_of_priv_emd_linear_carries_thm53():
    space = grid_space(4, 4)
    f = space.distances[:, 0]
    data = _unbounded()
    alpha, s, r, delta = 2.0, 20, 0.1, 1e-6
    rel = bounded_emd_reduction(
        data, s, lambda x: priv_emd_linear(x, space, f, alpha, "central", rng=3),
        r=r, delta=delta, rng=4)
    g = rel.guarantee
    want = alpha * ((1 + math.sqrt(2)) * r + 3 / s * math.log(1 / delta))
    assert g.epsilon == pytest.approx(want, rel=1e-12)
    assert g.epsilon == reduction_epsilon(alpha, r, s, delta, "central").epsilon
    assert (g.delta, g.neighbour, g.model) == (2 * delta, Neighbour.DISCRETE_EMD, "central")
    assert g.parameters["r"] == r and g.parameters["s"] == s
    assert rel.inner.values.shape == (1, 1) and rel.sizes.tolist() == [d.size for d in data]
    # the estimate targets the mean over users of each user's own mean (the samples' law)
    truth = np.mean([f[d].mean() for d in data])
    assert abs(rel.inner.estimate[0] - truth) < 0.05  # sampling sd ~ 0.2/sqrt(300 s) << 0.05


def test_gaussian_inner_delta_must_fit():
    space = grid_space(3, 3)
    f = space.distances[:, 0]

    def mech(x):
        return priv_emd_linear(x, space, f, 1.0, "central", noise="gaussian", delta=1e-5, rng=0)

    with pytest.raises(ValueError, match="exceeds delta"):
        bounded_emd_reduction(_unbounded(k=9), 5, mech, r=0.2, delta=1e-6, rng=1)
    ok = bounded_emd_reduction(_unbounded(k=9), 5, mech, r=0.2, delta=1e-5, rng=1)
    assert ok.guarantee.delta == 2e-5


@pytest.mark.parametrize("kwargs,match", [
    ({"datasets": []}, "at least one user"),
    ({"datasets": [np.array([], dtype=int)]}, r"datasets\[0\]"),
    ({"s": 0}, "s must be"),
    ({"mechanism": lambda x: object()}, "bounded d_EM-DP"),
    ({"mechanism": 3}, "callable"),
    ({"r": 1.5}, "r must be"),
])
def test_bad_input(kwargs, match):
    space = grid_space(2, 2)
    args = {"datasets": [np.array([0, 1])], "s": 2,
            "mechanism": lambda x: priv_emd_linear(x, space, space.distances[:, 0], 1.0, rng=0),
            "r": 0.5, "delta": 1e-6}
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        bounded_emd_reduction(args.pop("datasets"), args.pop("s"), args.pop("mechanism"), **args)
