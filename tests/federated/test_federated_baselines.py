"""Baselines for federated heatmaps: geometric budget, tree least squares, central and
local randomised response."""

import numpy as np
import pytest

from shuffledp.analyzers.federated.baselines import (
    central_tree_histogram,
    geometric_budget,
    local_rr_histogram,
    tree_least_squares,
)
from shuffledp.protocol.federated import quadtree_histogram


def test_geometric_budget_sums_to_epsilon_and_grows_by_cube_root_two():
    b = geometric_budget(2.0, 4)
    assert b.sum() == pytest.approx(2.0) and np.allclose(b[1:] / b[:-1], 2 ** (1 / 3))


def _tree(leaves):
    levels = [leaves]
    while levels[0].shape[0] > 1:
        a = levels[0]
        levels.insert(0, a.reshape(a.shape[0] // 2, 2, -1, 2).sum(axis=(1, 3)))
    return levels


def test_tree_least_squares_is_exact_on_consistent_input_and_reduces_variance():
    g = np.random.default_rng(0)
    leaves = g.integers(0, 20, (8, 8)).astype(float)
    exact = _tree(leaves)
    assert np.allclose(tree_least_squares(exact, [1.0, 2.0, 3.0, 4.0]), leaves)
    # equal-variance noise on every level: the combined leaf error has lower variance than
    # the raw leaves (2000 seeded trials; the ratio is about 0.6, asserted below 0.8)
    raw, fit = [], []
    for _ in range(2000):
        noisy = [a + g.normal(0, 1, a.shape) for a in exact]
        raw.append(noisy[-1] - leaves)
        fit.append(tree_least_squares(noisy, [1.0] * 4) - leaves)
    assert np.var(fit) / np.var(raw) < 0.8
    assert abs(np.mean(fit)) < 0.01  # unbiased (sd of the mean ~ 0.002)


def test_baselines_return_densities_and_rr_is_unbiased():
    g = np.random.default_rng(1)
    rows, cols = g.integers(0, 8, 20000), g.integers(0, 4, 20000)
    for est in (quadtree_histogram(rows, cols, 3, 1.0, shard_size=10000, aggregation="plain",
                                   rng=1),
                central_tree_histogram(rows, cols, 3, 1.0, rng=1),
                local_rr_histogram(rows, cols, 3, 4.0, rng=1)):
        assert est.shape == (8, 8) and est.sum() == pytest.approx(1.0) and (est >= 0).all()
    rr = local_rr_histogram(rows, cols, 3, 4.0, rng=2)
    truth = np.bincount(rows * 8 + cols, minlength=64).reshape(8, 8) / 20000
    assert np.abs(rr - truth).max() < 0.01  # per-cell sd ~ 0.0015 at eps 4: 6 sd


def test_central_adaptive_adds_one_discrete_laplace_per_entry():
    """Same tree algorithm, central model: the last sub-query's counts minus the true node
    counts are DL(e^{-eps_q}) draws: nonzero somewhere (all-zero has probability
    ((1-a)/(1+a))^T < 1e-6) and within k = the 1e-6 union-bound quantile (false < 2e-6)."""
    import math

    from shuffledp.protocol.federated import central_adaptive_histogram

    g = np.random.default_rng(3)
    rows = np.clip(np.round(g.normal(20, 3, 20000)), 0, 31).astype(int)
    cols = np.clip(np.round(g.normal(10, 3, 20000)), 0, 31).astype(int)
    rel = central_adaptive_histogram(rows, cols, 5, 1.0, rng=4)  # zero-out: n public
    assert rel.guarantee.model == "central" and rel.guarantee.epsilon == 1.0
    assert sum(r["epsilon"] for r in rel.rounds) == pytest.approx(1.0, rel=1e-12)
    assert all(r["shards"] == 1 for r in rel.rounds)
    vec = rel.tree.vector_nodes()
    truth = np.bincount(rel.tree.report_index(rows, cols), minlength=len(vec))
    noise = np.array([rel.counts[n] for n in vec]) - truth
    a = math.exp(-rel.rounds[-1]["epsilon"])
    T = len(vec)
    assert ((1 - a) / (1 + a)) ** T < 1e-6 and (noise != 0).any()
    k = math.ceil(math.log(1e-6 * (1 + a) / (2 * T)) / math.log(a))
    assert np.abs(noise).max() <= k
    with pytest.raises(TypeError, match="shard_size"):
        central_adaptive_histogram(rows, cols, 5, 1.0, shard_size=10)


@pytest.mark.parametrize("eps", [0.01, 1.0, 7.5])
def test_rr_weights_realise_at_most_epsilon_exactly(eps):
    """The one weight helper behind both exact randomised responses (local k-RR here,
    Hadamard response): ln(w_in / w_out) <= eps in 50-digit arithmetic, and one unit more
    of w_in would exceed it (the floor is tight)."""
    import mpmath

    from shuffledp.encoders.metric.mechanisms import rr_weights

    w_in, w_out = rr_weights(eps)
    with mpmath.workdps(50):
        assert mpmath.log(mpmath.mpf(w_in) / w_out) <= eps
        assert mpmath.log(mpmath.mpf(w_in + 1) / w_out) > eps


def test_level_reports_budgets_communication_and_exact_counts():
    """Hierarchical (even) and spatial (geometric) level reports: the budgets, the paper's
    communication (sum of 4^l), and at eps 40 per level (a = e^{-40}, P(any noisy entry) <
    1e-12) the exact counts of every level; best_level picks the level closest to the truth."""
    from shuffledp.analyzers.federated.baselines import (
        best_level,
        level_density,
        nonprivate_levels,
    )
    from shuffledp.protocol.federated_baselines import hierarchical_levels

    g = np.random.default_rng(8)
    rows, cols = g.integers(0, 16, 4000), g.integers(0, 8, 4000)
    kw = dict(shard_size=5000, aggregation="plain", neighbour="zero_out")
    rel = hierarchical_levels(rows, cols, 4, 160.0, rng=1, **kw)
    assert rel.epsilons == {k: 40.0 for k in (1, 2, 3, 4)}
    assert rel.communication == 4 + 16 + 64 + 256
    exact = nonprivate_levels(rows, cols, 4)
    for lvl in (1, 2, 3, 4):
        assert (rel.counts[lvl] == exact.counts[lvl]).all()
    assert rel.guarantee.epsilon == pytest.approx(160.0) and len(rel.guarantee.event.steps) == 4
    sp = hierarchical_levels(rows, cols, 4, 1.0, budget="geometric", rng=1, **kw)
    e = [sp.epsilons[k] for k in range(5)]
    assert sum(e) == pytest.approx(1.0) and np.allclose(np.diff(np.log2(e)), 1 / 3)
    sr = hierarchical_levels(rows, cols, 4, 1.0, budget="geometric_root", rng=1, **kw)
    assert np.allclose([sr.epsilons[k] for k in range(5)], e[::-1])
    assert sp.communication == 1 + 4 + 16 + 64 + 256
    truth = level_density(exact.counts[3], 3, 4)
    assert best_level(exact, truth) == (3, 0.0)
    assert exact.communication == 2 and exact.guarantee is None
    with pytest.raises(ValueError, match="budget"):
        hierarchical_levels(rows, cols, 4, 1.0, budget="uniform", **kw)
    with pytest.raises(ValueError, match="4\\^level"):
        level_density(np.ones(5), 1, 4)
    with pytest.raises(ValueError, match="shape"):
        best_level(exact, np.ones((4, 4)))
