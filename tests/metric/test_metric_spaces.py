"""Metric spaces and exact d_EM (checked against POT's exact network-simplex solver)."""

import numpy as np
import ot
import pytest

from shuffledp.encoders.metric.spaces import (
    check_metric,
    emd_datasets,
    emd_histograms,
    from_matrix,
    grid_space,
    histogram,
    product_space,
    sphere_space,
)


def test_grid_normalised_and_metric():
    for norm in ("l2", "l1"):
        sp = grid_space(4, 5, norm)
        assert sp.k == 20 and sp.distances.max() == 1.0
        check_metric(np.asarray(sp.distances))
    l1 = grid_space(3, 3, "l1")
    assert l1.distances[0, 8] == 1.0 and l1.distances[0, 1] == pytest.approx(0.25)
    l2 = grid_space(3, 3, "l2")
    assert l2.distances[0, 1] == pytest.approx(1 / np.hypot(2, 2))
    assert not l2.row_regular


def test_sphere_distances():
    # London-New York: 3459 miles on the Earth (R = 3958.8 mi) within 0.5%
    sp = sphere_space([51.5074, 40.7128, -33.87], [-0.1278, -74.006, 151.21], radius=3958.8)
    assert sp.distances[0, 1] * sp.scale == pytest.approx(3459, rel=5e-3)
    assert sp.distances.max() <= 1.0
    antipode = sphere_space([0.0, 0.0], [0.0, 180.0])
    assert antipode.distances[0, 1] == pytest.approx(1.0)


def test_product_space_matches_paper_metric():
    sp = product_space(3, 4, 0.1)
    d = sp.distances
    assert d[0, 0] == 0 and d[0, 1] == pytest.approx(0.1) and d[0, 4] == 1.0
    assert sp.row_regular and sp.k == 12


@pytest.mark.parametrize("bad, match", [
    ([[0, 2], [2, 0]], "normalised"),
    ([[0, 0.5], [0.4, 0]], "symmetric"),
    ([[0, 0.1, 1.0], [0.1, 0, 0.1], [1.0, 0.1, 0]], "triangle inequality"),
    ([[0, 0], [0, 0]], "> 0 between distinct"),
    ([[0.1, 0.5], [0.5, 0]], "zero diagonal"),
])
def test_bad_metric_named(bad, match):
    with pytest.raises(ValueError, match=match):
        from_matrix(bad)


def test_bad_arguments():
    with pytest.raises(ValueError, match="norm"):
        grid_space(2, 2, "linf")
    with pytest.raises(ValueError, match="r must be in"):
        product_space(2, 2, 0.0)
    with pytest.raises(ValueError, match="lat must be in"):
        sphere_space([95.0, 0.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="duplicate"):
        sphere_space([1.0, 1.0], [2.0, 2.0])
    sp = grid_space(2, 2)
    with pytest.raises(ValueError, match=r"K\[1\]=4 is outside"):
        emd_datasets(sp, [0, 4], [1, 2])
    with pytest.raises(ValueError, match="same size"):
        emd_datasets(sp, [0, 1], [1, 2, 3])
    with pytest.raises(ValueError, match="sum to 1"):
        emd_histograms(sp, [0.5, 0.5, 0.5, 0], [1, 0, 0, 0])


def test_normalise_option():
    sp = from_matrix([[0, 2], [2, 0]], normalise=True)
    assert sp.distances[0, 1] == 1.0 and sp.scale == 2.0


def test_emd_against_pot():
    g = np.random.default_rng(1)
    sp = grid_space(5, 6, "l2")
    D = np.asarray(sp.distances)
    for _ in range(20):
        m = int(g.integers(1, 40))
        K, K2 = g.integers(0, sp.k, size=(2, m))
        p, q = histogram(sp, K), histogram(sp, K2)
        ref = ot.emd2(p, q, D)
        assert emd_datasets(sp, K, K2) == pytest.approx(ref, abs=1e-9)
        assert emd_histograms(sp, p, q) == pytest.approx(ref, abs=1e-9)
    # unequal sizes through the histogram LP
    p = histogram(sp, g.integers(0, sp.k, 7))
    q = histogram(sp, g.integers(0, sp.k, 13))
    assert emd_histograms(sp, p, q) == pytest.approx(ot.emd2(p, q, D), abs=1e-9)


def test_emd_single_item_move_is_distance_over_m():
    sp = product_space(2, 3, 0.2)
    assert emd_datasets(sp, [0, 1, 2, 3], [0, 1, 2, 4]) == pytest.approx(0.2 / 4)
    assert emd_datasets(sp, [0, 1, 2, 3], [3, 2, 1, 0]) == 0.0
