"""Reconstruct ([Ghazi23]_ Alg. 2): exact recovery, and the O(wL) LP against the full LP.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffledp.analyzers.heatmap.reconstruct import (
    _effective_start,
    reconstruct,
    reconstruct_details,
)
from shuffledp.grid import Grid
from shuffledp.pyramid import level_counts


def sparse_input(g, k, rng):
    s = np.zeros(g.n_pixels)
    idx = rng.choice(g.n_pixels, size=min(k, g.n_pixels), replace=False)
    s[idx] = rng.random(idx.size) + 0.05
    return s.reshape(g.height, g.width)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 40), st.integers(1, 40), st.integers(1, 8), st.integers(0, 2**32 - 1)
)
def test_exact_recovery_of_k_sparse_with_zero_noise(width, height, k, seed):
    """With zero noise and w >= k, Reconstruct returns s (every support cell survives).

    Exact up to the LP solver's tolerance: the default tie-break solves a second LP on the
    optimal face, which HiGHS holds to about 1e-9 relative, hence atol 1e-7.
    """
    g = Grid(width, height)
    rng = np.random.default_rng(seed)
    s = sparse_input(g, k, rng)
    for w in (k, k + 3, 20):
        start = _effective_start(g, w)
        est = reconstruct(level_counts(g, s, start), g, start, w)
        np.testing.assert_allclose(est, s, atol=1e-7)


def test_recovery_fails_when_w_below_k():
    """The test above can fail: with w < k and spread-out support some mass is misplaced."""
    g = Grid(32, 32)
    s = np.zeros((32, 32))
    s[[1, 9, 17, 25, 3, 11], [2, 30, 5, 20, 27, 12]] = 1.0
    est = reconstruct(level_counts(g, s, 0), g, 0, 1)
    assert np.abs(est - s).sum() > 0.5


def full_lp(g, counts, start, selected):
    """min_{s >= 0} ||y_hat - P s||_1 with one variable per pixel (the paper's line 9)."""
    n = g.n_pixels
    rows, y_hat, side = [], [], []
    rr, cc = np.divmod(np.arange(n), g.width)
    for k, sel in enumerate(selected):
        lvl = start + k
        shift = g.depth - lvl
        shape = g.level_shape(lvl)
        cell = (rr >> shift) * shape[1] + (cc >> shift)
        sel_set = np.zeros(shape[0] * shape[1], dtype=bool)
        sel_set[sel] = True
        for c in range(shape[0] * shape[1]):
            rows.append(cell == c)
            y_hat.append(counts[k].ravel()[c] * g.cell_side(lvl) if sel_set[c] else 0.0)
            side.append(g.cell_side(lvl))
    m = np.array(rows, dtype=float) * np.array(side)[:, None]
    y = np.array(y_hat)
    r = len(y)
    a_ub = np.block([[-m, -np.eye(r)], [m, -np.eye(r)]])
    b_ub = np.concatenate([-y, y])
    c = np.concatenate([np.zeros(n), np.ones(r)])
    res = scipy.optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    assert res.status == 0
    return res.fun, res.x[:n], m, y


@pytest.mark.parametrize("tie_break", ["measured", "solver"])
@pytest.mark.parametrize(
    "spec,w,seed", [("8", 2, 0), ("8", 3, 1), ("11x6", 2, 2), ("16", 4, 3), ("9x13", 1, 4)]
)
def test_reduced_lp_equals_full_lp(spec, w, seed, tie_break):
    """The O(wL)-variable LP attains the optimum of the per-pixel LP, and its s_hat is optimal
    whichever minimiser the tie-break picks."""
    g = Grid.parse(spec)
    rng = np.random.default_rng(seed)
    s = sparse_input(g, 6, rng)
    start = _effective_start(g, w)
    counts = [c + rng.laplace(0, 0.4, c.shape) for c in level_counts(g, s, start)]
    res = reconstruct_details(counts, g, start, w, tie_break=tie_break)
    opt, _, m, y = full_lp(g, counts, start, res.selected)
    assert res.lp_objective == pytest.approx(opt, abs=1e-8)
    # the returned s_hat attains the optimum of the full objective
    assert np.abs(y - m @ res.estimate.ravel()).sum() == pytest.approx(opt, abs=1e-8)
    assert (res.estimate >= 0).all()


def test_variable_count_is_order_w_levels_not_pixels():
    g = Grid(1024, 1024)
    rng = np.random.default_rng(5)
    start = _effective_start(g, 20)
    zero = np.zeros((1024, 1024))
    counts = [c + rng.laplace(0, 1, c.shape) for c in level_counts(g, zero, start)]
    res = reconstruct_details(counts, g, start, 20)
    n_meas = g.depth - start + 1
    assert res.n_variables <= 4 * 20 * n_meas
    assert all(s.size <= max(20, 16) for s in res.selected)


def test_top_w_selection_follows_noisy_values():
    g = Grid(4, 4)
    counts = level_counts(g, np.zeros((4, 4)), 1)
    counts[1][0, 3] = 5.0
    counts[1][2, 1] = 4.0
    res = reconstruct_details(counts, g, 1, 2)
    assert set(res.selected[1].tolist()) == {3, 9}


def test_bad_inputs_are_named():
    g = Grid(8, 8)
    c = level_counts(g, np.zeros((8, 8)), 2)
    with pytest.raises(ValueError, match="w must be an integer >= 1, got w=0"):
        reconstruct(c, g, 2, 0)
    with pytest.raises(ValueError, match="counts must hold 2 levels"):
        reconstruct(c[:1], g, 2, 4)
    bad = [x.copy() for x in c]
    bad[0][0, 0] = np.nan
    with pytest.raises(ValueError, match=r"counts\[0\].*NaN"):
        reconstruct(bad, g, 2, 4)
    with pytest.raises(ValueError, match="start must be in 0..3"):
        reconstruct(c, g, 5, 4)


def test_measured_tie_break_splits_left_out_mass_like_the_measurements():
    """Root mass 10; level-1 children hold 6 (kept, w = 1), 3, 1 and 0 (left out).

    A left-out level-1 unit costs side_1 + side_2 = 3 and recovers side_0 = 4 at the root,
    so every minimiser puts the deficit of 4 below the root's left-out children, in any split.
    The measured tie-break splits it as the children's counts say: 3 and 1.
    """
    g = Grid(4, 4)
    s = np.zeros((4, 4))
    s[0, 0], s[0, 2], s[2, 0] = 6.0, 3.0, 1.0  # children (0,0) kept; (0,1), (1,0) left out
    counts = level_counts(g, s, 0)
    res = reconstruct_details(counts, g, 0, 1, tie_break="measured")
    est = res.estimate
    assert est[:2, :2].sum() == pytest.approx(6.0, abs=1e-7)
    assert est[:2, 2:].sum() == pytest.approx(3.0, abs=1e-7)
    assert est[2:, :2].sum() == pytest.approx(1.0, abs=1e-7)
    assert est[2:, 2:].sum() == pytest.approx(0.0, abs=1e-7)
    # the solver's vertex attains the same objective, with the deficit split some other way
    vertex = reconstruct_details(counts, g, 0, 1, tie_break="solver")
    assert vertex.lp_objective == pytest.approx(res.lp_objective, abs=1e-7)
    assert vertex.estimate.sum() == pytest.approx(10.0, abs=1e-7)


def test_tie_break_must_be_known():
    g = Grid(4, 4)
    with pytest.raises(ValueError, match=r"tie_break=.*'vertex'"):
        reconstruct(level_counts(g, np.ones((4, 4)), 0), g, 0, 1, tie_break="vertex")
