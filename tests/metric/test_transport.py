"""The one exact transport solver (shuffledp.encoders.metric.transport) against POT's ot.emd2."""

from __future__ import annotations

import numpy as np
import ot
import pytest

from shuffledp.encoders.metric.transport import GridL1, TreeMetric, transport_cost


def _masses(rng, k, zero_frac, integer):
    """A mass vector with some exact zeros; integer masses make ties in the plan."""
    a = rng.integers(0, 4, k).astype(float) if integer else rng.random(k)
    a[rng.random(k) < zero_frac] = 0.0
    if a.sum() == 0:
        a[rng.integers(k)] = 1.0
    return a / a.sum()


@pytest.mark.parametrize("seed", range(6))
def test_dense_cost_matches_pot_with_ties_and_zero_masses(seed):
    rng = np.random.default_rng(seed)
    for trial in range(40):
        k = int(rng.integers(1, 25))
        ties = trial % 2 == 0
        c = rng.random((k, k))
        if ties:  # few distinct costs and integer masses: many optimal plans
            c = np.round(3 * c)
        p = _masses(rng, k, 0.3, ties)
        q = _masses(rng, k, 0.3, ties)
        ref = ot.emd2(p, q, c, numItermax=10**7)
        assert transport_cost(p, q, c) == pytest.approx(ref, abs=1e-9)
        assert transport_cost(p, q, c, method="highs") == pytest.approx(ref, abs=1e-9)


def test_dense_metric_cost_matches_pot_on_a_larger_instance():
    rng = np.random.default_rng(7)
    x = rng.random((150, 2))
    c = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    p, q = _masses(rng, 150, 0.2, False), _masses(rng, 150, 0.5, False)
    assert transport_cost(p, q, c) == pytest.approx(ot.emd2(p, q, c, numItermax=10**7),
                                                    abs=1e-9)


def _grid_cost(h, w):
    r, c = np.divmod(np.arange(h * w), w)
    return (np.abs(r[:, None] - r[None]) + np.abs(c[:, None] - c[None])).astype(float)


@pytest.mark.parametrize("shape", [(2, 2), (3, 5), (1, 7), (6, 1), (9, 8)])
def test_grid_l1_is_the_dense_l1_problem(shape):
    h, w = shape
    rng = np.random.default_rng(h * 10 + w)
    for integer in (False, True):
        p = _masses(rng, h * w, 0.4, integer).reshape(h, w)
        q = _masses(rng, h * w, 0.4, integer).reshape(h, w)
        ref = ot.emd2(p.ravel(), q.ravel(), _grid_cost(h, w), numItermax=10**7)
        for method in ("network_simplex", "highs"):
            got = transport_cost(p, q, GridL1(h, w), method=method)
            assert got == pytest.approx(ref, abs=1e-9)
            assert transport_cost(p.ravel(), q.ravel(), GridL1(h, w)) == pytest.approx(got)
        # dense path on the same cost matrix
        assert transport_cost(p.ravel(), q.ravel(), _grid_cost(h, w)) == pytest.approx(
            ref, abs=1e-9)


def test_tree_metric_is_the_dense_tree_distance():
    # leaves 0..3, inner nodes 4 (0, 1) and 5 (2, 3), root 6
    parent = np.array([4, 4, 5, 5, 6, 6, -1])
    length = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.25, 0.0])
    tree = TreeMetric(parent, length, 4)
    up = [[0, 4, 6], [1, 4, 6], [2, 5, 6], [3, 5, 6]]

    def dist(x, y):
        sx, sy = set(up[x]), set(up[y])
        return sum(length[z] for z in sx ^ sy)

    c = np.array([[dist(x, y) for y in range(4)] for x in range(4)])
    rng = np.random.default_rng(3)
    for _ in range(20):
        p, q = _masses(rng, 4, 0.3, False), _masses(rng, 4, 0.3, False)
        ref = ot.emd2(p, q, c)
        assert transport_cost(p, q, tree) == pytest.approx(ref, abs=1e-12)
        assert transport_cost(p, q, c) == pytest.approx(ref, abs=1e-12)


def test_structured_metrics_take_signed_masses_as_the_kr_norm():
    # a signed p with the same total as q: the cost of moving (p - q)+ onto (p - q)-
    p = np.array([0.7, -0.2, 0.5])
    q = np.array([0.0, 0.5, 0.5])
    d = p - q
    assert transport_cost(p, q, GridL1(1, 3)) == pytest.approx(
        transport_cost(np.maximum(d, 0), np.maximum(-d, 0), _grid_cost(1, 3)))


def test_zero_distance_and_single_point_supports():
    c = _grid_cost(2, 3)
    p = np.array([0.0, 0.25, 0.0, 0.75, 0.0, 0.0])
    assert transport_cost(p, p, c) == 0.0
    assert transport_cost(p, p, GridL1(2, 3)) == 0.0
    one = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    assert transport_cost(one, p, c) == pytest.approx(0.25 * 1 + 0.75 * 3)
    assert transport_cost(p, one, c) == pytest.approx(0.25 * 1 + 0.75 * 3)


def test_errors_name_the_argument():
    c = _grid_cost(2, 2)
    with pytest.raises(ValueError, match="method"):
        transport_cost([1, 0, 0, 0], [0, 1, 0, 0], c, method="sinkhorn")
    with pytest.raises(ValueError, match="same total mass"):
        transport_cost([1, 0, 0, 0], [0, 2, 0, 0], c)
    with pytest.raises(ValueError, match="p must be >= 0"):
        transport_cost([1.5, -0.5, 0, 0], [0, 1, 0, 0], c)
    with pytest.raises(ValueError, match="q must hold one mass per point"):
        transport_cost([1, 0, 0, 0], [1, 0, 0], c)
    with pytest.raises(ValueError, match="cost must be a square"):
        transport_cost([1, 0], [0, 1], np.ones((2, 3)))
    with pytest.raises(ValueError, match="cost must be finite"):
        transport_cost([1, 0], [0, 1], np.array([[0, -1.0], [1, 0]]))
    with pytest.raises(ValueError, match="GridL1 width"):
        GridL1(2, 0)
    with pytest.raises(ValueError, match="parent"):
        TreeMetric(np.array([0, -1]), np.array([1.0, 0.0]), 1)
