"""Grid geometry, the pyramidal transform ([Ghazi23]_ Def. 3.1) and Lemma 3.5.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffledp.grid import Grid
from shuffledp.pyramid import (
    flatten,
    level_counts,
    n_coordinates,
    transform,
    transform_l1,
    unflatten,
)


def brute_level_counts(grid, s, level):
    """Sum pixels per level-i cell by explicit cell membership (independent of pool2)."""
    side = 1 << (grid.depth - level)
    rows, cols = grid.level_shape(level)
    out = np.zeros((rows, cols))
    for r in range(grid.height):
        for c in range(grid.width):
            out[r // side, c // side] += s[r, c]
    return out


def pixel_emd(grid, p, q):
    """EMD with ground distance (|dr|+|dc|)/max(W,H) via POT (exact network simplex)."""
    rr, cc = np.divmod(np.arange(grid.n_pixels), grid.width)
    cost = (np.abs(rr[:, None] - rr[None, :]) + np.abs(cc[:, None] - cc[None, :])) / max(
        grid.width, grid.height
    )
    return float(ot.emd2(p.ravel().astype(float), q.ravel().astype(float), cost.astype(float)))


def test_parse_and_shapes_320x240():
    g = Grid.parse("320x240")
    assert (g.width, g.height, g.depth) == (320, 240, 9)
    assert g.level_shape(9) == (240, 320)
    assert g.level_shape(0) == (1, 1)
    assert g.level_shape(1) == (1, 2)
    assert g.cell_side(9) == pytest.approx(1 / 320)
    assert Grid.parse("256") == Grid(256, 256)
    assert Grid.parse(7) == Grid(7, 7)
    # every level partitions the grid: pixel counts add up
    for i in range(g.n_levels):
        assert g.cell_pixel_counts(i).sum() == 320 * 240


def test_power_of_two_scales_match_paper():
    g = Grid(64, 64)
    assert [g.cell_side(i) for i in range(7)] == [2.0**-i for i in range(7)]


@pytest.mark.parametrize("bad", ["0", "0x5", "5x0", "abc", "3x", "-4", "1.5"])
def test_parse_rejects(bad):
    with pytest.raises(ValueError, match="grid"):
        Grid.parse(bad)


def test_grid_rejects_bad_dims():
    with pytest.raises(ValueError, match="width"):
        Grid(0, 3)
    with pytest.raises(TypeError, match="height"):
        Grid(3, 2.5)


def test_points_to_pixels_orientation_and_errors():
    g = Grid(4, 2)
    # x -> column, y -> row
    assert g.points_to_pixels(np.array([0.99]), np.array([0.0]))[0] == 3
    assert g.points_to_pixels(np.array([0.0]), np.array([0.6]))[0] == 4
    with pytest.raises(ValueError, match=r"x must be in \[0, 1\).*point 1.*x=1\.0"):
        g.points_to_pixels(np.array([0.1, 1.0]), np.array([0.1, 0.1]))
    with pytest.raises(ValueError, match="y.*nan"):
        g.points_to_pixels(np.array([0.1]), np.array([np.nan]))


@pytest.mark.parametrize("spec", ["1", "2x1", "5x3", "8", "13x7", "320x240"])
def test_level_counts_match_brute_force(spec):
    g = Grid.parse(spec)
    rng = np.random.default_rng(7)
    s = rng.random((g.height, g.width))
    counts = level_counts(g, s)
    levels = range(g.n_levels) if g.n_pixels < 400 else [0, 1, 3, g.depth]
    for i in levels:
        np.testing.assert_allclose(counts[i], brute_level_counts(g, s, i), rtol=1e-12)
    assert sum(c.size for c in counts) == n_coordinates(g)
    np.testing.assert_array_equal(flatten(unflatten(g, flatten(counts))), flatten(counts))


def test_integer_counts_stay_exact():
    g = Grid(7, 5)
    s = np.arange(35, dtype=np.int64).reshape(5, 7) * 10**12
    counts = level_counts(g, s)
    assert counts[0].dtype == np.int64
    assert int(counts[0][0, 0]) == int(s.sum())


grids = st.tuples(st.integers(1, 9), st.integers(1, 9)).map(lambda t: Grid(*t))


@settings(max_examples=60, deadline=None)
@given(grids, st.integers(0, 2**32 - 1), st.floats(-3, 3), st.floats(-3, 3))
def test_pyramid_is_linear(g, seed, a, b):
    rng = np.random.default_rng(seed)
    u, v = rng.normal(size=(2, g.height, g.width))
    lhs = flatten(transform(g, a * u + b * v))
    rhs = a * flatten(transform(g, u)) + b * flatten(transform(g, v))
    np.testing.assert_allclose(lhs, rhs, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(grids, st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_lemma_3_5_emd_bounded_by_pyramid_l1(g, seed, k):
    """||p - q||_EMD <= ||P (p - q)||_1 ([Ghazi23]_ Lemma 3.5) on any W x H grid."""
    rng = np.random.default_rng(seed)
    p = np.zeros(g.n_pixels)
    q = np.zeros(g.n_pixels)
    p[rng.integers(0, g.n_pixels, k)] += rng.random(k) + 0.1
    q[rng.integers(0, g.n_pixels, k)] += rng.random(k) + 0.1
    p /= p.sum()
    q /= q.sum()
    emd = pixel_emd(g, p, q)
    bound = transform_l1(g, (p - q).reshape(g.height, g.width))
    assert emd <= bound + 1e-9


def test_lemma_3_5_is_tight_on_diagonal_move():
    """Moving a unit of mass across the 2x2 grid: EMD = ||P z||_1 = 1 (bound attained)."""
    g = Grid(2, 2)
    z = np.array([[1.0, 0.0], [0.0, -1.0]])
    assert transform_l1(g, z) == pytest.approx(1.0)
    assert pixel_emd(g, np.maximum(z, 0), np.maximum(-z, 0)) == pytest.approx(1.0)


def test_secure_permutation_refuses_a_negative_or_non_integer_length():
    """Regression: secure_permutation(-1) returned an empty array instead of refusing."""
    from shuffledp.randomness import secure_permutation

    assert secure_permutation(0).size == 0
    with pytest.raises(ValueError, match="n must be an integer >= 0"):
        secure_permutation(-1)
    with pytest.raises(TypeError, match="n must be an integer"):
        secure_permutation(2.5)


def test_pool2_refuses_a_non_2d_array():
    from shuffledp.pyramid import pool2

    with pytest.raises(ValueError, match="2D array"):
        pool2(np.zeros(4))
