"""The Adaptive Grid of Qardaji, Yang and Li (Bagdasaryan et al. Table 1's row): sub-grid rule,
layout, sensitivity of both queries on worst-case neighbours, constrained inference, and the
two-round release."""

import math

import numpy as np
import pytest

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.federated.adaptive_grid import (
    AdaptiveGridLayout,
    constrained_inference,
    first_grid_size,
    subgrid_sizes,
)
from shuffledp.analyzers.federated.histogram import FederatedRefused
from shuffledp.protocol.federated_baselines import adaptive_grid_histogram


def test_subgrid_rule():
    # n = ceil(sqrt(N' (1 - alpha) eps / c2)): N' = 100, alpha 0.5, eps 1, c2 10 -> sqrt(5)
    n = subgrid_sizes([100.0, 0.0, -7.0, 2000.0, 180.0], 1.0)
    assert n.tolist() == [3, 1, 1, 10, 3]
    assert subgrid_sizes([2000.0], 1.0, c2=5.0, max_size=12).tolist() == [12]
    assert first_grid_size(10_000, 1.0) == 10 and first_grid_size(10**6, 1.0) == 80
    for bad, match in (({"alpha": 1.0}, "alpha"), ({"c2": 0.0}, "c2")):
        with pytest.raises(ValueError, match=match):
            subgrid_sizes([1.0], 1.0, **bad)
    with pytest.raises(ValueError, match="finite"):
        subgrid_sizes([math.nan], 1.0)


@pytest.mark.parametrize("side,first", [(37, 5), (64, 10), (16, 16)])
def test_layout_partitions_the_image_and_each_query_has_sensitivity_one(side, first):
    """Every pixel (a worst-case user may sit on any) lands in exactly one first cell and one
    sub-cell: a user's report in either query is one-hot, l1 norm 1 (zero-out, add/remove)
    and any two users' reports differ by at most 2 (replace-one), computed over all pixels.
    Sub-cells tile their first cell as rectangles of the planned n_i x n_i grid."""
    g = np.random.default_rng(side)
    lay = AdaptiveGridLayout(side, first)
    sizes = g.integers(1, 6, first * first)
    lay = lay.with_sizes(sizes)
    assert all(1 <= n <= e for n, e in zip(lay.sizes, lay.extents(), strict=True))
    rr, cc = np.indices((side, side))
    r, c = rr.ravel(), cc.ravel()
    f, s = lay.first_index(r, c), lay.second_index(r, c)
    assert set(np.unique(f)) == set(range(lay.first_length))
    assert set(np.unique(s)) == set(range(lay.second_length))
    # one-hot: each user's report has l1 norm 1 in each query; replace-one distance <= 2
    for idx, d in ((f, lay.first_length), (s, lay.second_length)):
        onehot = np.zeros(d, dtype=np.int64)
        onehot[idx[0]] = 1
        assert onehot.sum() == 1
        other = np.zeros(d, dtype=np.int64)
        other[idx[-1]] = 1
        assert np.abs(onehot - other).sum() <= 2
    off = np.concatenate([[0], np.cumsum(np.asarray(lay.sizes) ** 2)])
    for k in range(lay.first_length):  # sub-cells inside their first cell, rectangles
        inside = (s >= off[k]) & (s < off[k + 1])
        assert (f[inside] == k).all() and inside.sum() == (f == k).sum()
        for j in np.unique(s[inside]):
            m = s == j
            h, w = np.ptp(r[m]) + 1, np.ptp(c[m]) + 1
            assert h * w == m.sum()
    d = lay.density(np.arange(lay.second_length, dtype=float))
    assert d.shape == (side, side) and d.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sizes"):
        AdaptiveGridLayout(side, first, (1,))
    with pytest.raises(ValueError, match="not planned"):
        AdaptiveGridLayout(side, first).second_index(r, c)


def test_constrained_inference():
    lay = AdaptiveGridLayout(20, 2).with_sizes([1, 2, 3, 2])
    u = np.arange(lay.second_length, dtype=float)
    n2 = np.array([1, 4, 9, 4])
    sums = np.bincount(np.repeat(np.arange(4), n2), weights=u)
    # consistent input: unchanged
    assert np.allclose(constrained_inference(sums, u, lay, 1.0, 1.0), u)
    # Qardaji et al.'s closed form when the variances go as 1/eps^2 (Laplace, same Delta)
    v1 = sums + np.array([5.0, -3.0, 2.0, 8.0])
    alpha = 0.3
    out = constrained_inference(v1, u, lay, 1 / alpha**2, 1 / (1 - alpha) ** 2)
    fused = (alpha**2 * n2 * v1 + (1 - alpha) ** 2 * sums) / (alpha**2 * n2 + (1 - alpha) ** 2)
    got = np.bincount(np.repeat(np.arange(4), n2), weights=out)
    assert np.allclose(got, fused)
    # the correction is spread evenly over the sub-cells
    assert np.allclose(out - u, np.repeat((fused - sums) / n2, n2))
    with pytest.raises(ValueError, match="var_first"):
        constrained_inference(v1, u, lay, 0.0, 1.0)


def test_adaptive_grid_release():
    g = np.random.default_rng(5)
    rows = np.clip(np.round(g.normal(40, 6, 20_000)), 0, 63).astype(np.int64)
    cols = np.clip(np.round(g.normal(20, 6, 20_000)), 0, 63).astype(np.int64)
    rel = adaptive_grid_histogram(rows, cols, 6, 1.0, shard_size=10_000, aggregation="simulate",
                                  neighbour="zero_out", rng=3)
    lay = rel.layout
    # the second grid is planned from the first round's noisy counts only (post-processing)
    assert list(lay.sizes) == np.minimum(subgrid_sizes(rel.first_counts, 1.0),
                                         lay.extents()).tolist()
    assert rel.communication == 100 + sum(n * n for n in lay.sizes)
    gu = rel.guarantee
    assert gu.epsilon == pytest.approx(1.0) and gu.neighbour is Neighbour.ZERO_OUT
    steps = gu.event.steps
    assert [s.certified()[0] for s in steps] == pytest.approx([0.5, 0.5])
    assert [lv.sensitivity for s in steps for lv in s.levels] == [1, 1]
    assert rel.estimate.shape == (64, 64) and rel.estimate.sum() == pytest.approx(1.0)
    # the dense cells are refined: the cell holding the mode gets more than 1 x 1
    mode = lay.first_index(np.array([40]), np.array([20]))[0]
    assert lay.sizes[mode] > 1
    # 40% of the clients dropping against noise planned for 10%: refused, not released
    with pytest.raises(FederatedRefused):
        adaptive_grid_histogram(rows, cols, 6, 1.0, dropout=0.1, dropout_rate=0.4,
                                shard_size=10_000, aggregation="simulate",
                                neighbour="zero_out", rng=3)
    with pytest.raises(ValueError, match="alpha"):
        adaptive_grid_histogram(rows, cols, 6, 1.0, alpha=0.0, neighbour="zero_out")
