"""Metrics: exact grid EMD against POT and hand-computed cases, [BJO+19]_ identities.

References
----------
.. [BJO+19] Z. Bylinskii, T. Judd, A. Oliva, A. Torralba, F. Durand, "What Do Different
   Evaluation Metrics Tell Us About Saliency Models?", IEEE TPAMI 41(3):740-757, 2019.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffledp.analyzers.heatmap.metrics import (
    EMD_METHODS,
    KL_EPS,
    all_metrics,
    cc,
    emd,
    kl,
    l1,
    mse,
    sim,
)
from shuffledp.grid import Grid


def pot_emd(p: np.ndarray, q: np.ndarray) -> float:
    """Independent oracle: POT's network simplex on the dense l1 cost matrix."""
    h, w = p.shape
    r, c = np.divmod(np.arange(h * w), w)
    cost = (np.abs(r[:, None] - r[None, :]) + np.abs(c[:, None] - c[None, :])) / max(h, w)
    return float(ot.emd2(p.ravel() / p.sum(), q.ravel() / q.sum(), cost, numItermax=10**7))


def random_pair(rng: np.random.Generator, h: int, w: int, power: float = 4.0):
    p = rng.random((h, w)) ** power
    q = rng.random((h, w)) ** power
    # sparse-ish: zero out some cells, but keep positive totals
    p[rng.random((h, w)) < 0.5] = 0.0
    q[rng.random((h, w)) < 0.5] = 0.0
    p.flat[0] += 0.1
    q.flat[-1] += 0.1
    return p, q


# --------------------------------------------------------------------------- EMD vs POT


@pytest.mark.parametrize(
    "shape", [(1, 1), (1, 6), (7, 1), (2, 2), (4, 4), (3, 7), (8, 5), (10, 10), (16, 9)]
)
@pytest.mark.parametrize("method", EMD_METHODS)
def test_emd_matches_pot(shape, method):
    rng = np.random.default_rng(sum(shape))
    for _ in range(3):
        p, q = random_pair(rng, *shape)
        assert emd(p, q, method=method) == pytest.approx(pot_emd(p, q), rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 6),
    w=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_emd_matches_pot_property(h, w, seed):
    rng = np.random.default_rng(seed)
    p, q = random_pair(rng, h, w, power=2.0)
    grid = Grid(w, h)
    assert emd(p, q, grid) == pytest.approx(pot_emd(p, q), rel=1e-12, abs=1e-14)


def test_network_simplex_with_ties_and_degenerate_supplies():
    # integer-valued supplies create many ties in the ratio test (degenerate pivots)
    rng = np.random.default_rng(11)
    for _ in range(20):
        h, w = rng.integers(2, 9, size=2)
        p = rng.integers(0, 3, size=(h, w)).astype(float)
        q = rng.integers(0, 3, size=(h, w)).astype(float)
        p.flat[0] += 1
        q.flat[-1] += 1
        q *= p.sum() / q.sum()
        assert emd(p, q) == pytest.approx(pot_emd(p, q), rel=1e-12, abs=1e-14)


def test_network_simplex_agrees_with_highs_on_a_larger_grid():
    from shuffledp.analyzers.heatmap.render import gaussian_heatmap

    rng = np.random.default_rng(4)
    p, q = random_pair(rng, 40, 48, power=8.0)
    assert emd(p, q) == pytest.approx(emd(p, q, method="highs"), rel=1e-9)
    hp, hq = gaussian_heatmap(p, 2.0), gaussian_heatmap(q, 2.0)
    assert emd(hp, hq) == pytest.approx(emd(hp, hq, method="highs"), rel=1e-9)


@pytest.mark.slow
def test_emd_matches_pot_32x24_gaussian_filtered():
    from shuffledp.analyzers.heatmap.render import gaussian_heatmap

    rng = np.random.default_rng(3)
    p, q = random_pair(rng, 24, 32, power=8.0)
    hp, hq = gaussian_heatmap(p, 1.5), gaussian_heatmap(q, 1.5)
    assert emd(hp, hq, Grid(32, 24)) == pytest.approx(pot_emd(hp, hq), rel=1e-10)
    assert emd(hp, hq, method="highs") == pytest.approx(pot_emd(hp, hq), rel=1e-8)


# --------------------------------------------------------------------------- hand-computed


@pytest.mark.parametrize("k", [1, 2, 5])
def test_unit_mass_moved_k_pixels(k):
    # 6 rows x 10 columns: unit = 1/10
    p = np.zeros((6, 10))
    q = np.zeros((6, 10))
    p[2, 1] = 1.0
    q[2, 1 + k] = 1.0  # k steps right
    assert emd(p, q) == pytest.approx(k / 10)
    q2 = np.zeros((6, 10))
    q2[min(2 + k, 5), 1] = 1.0  # down, clipped to the grid
    assert emd(p, q2) == pytest.approx(min(k, 3) / 10)


def test_diagonal_move_is_l1_and_opposite_corners_are_the_diameter():
    h, w = 5, 8
    p = np.zeros((h, w))
    q = np.zeros((h, w))
    p[0, 0] = 1.0
    q[h - 1, w - 1] = 1.0
    assert emd(p, q, Grid(w, h)) == pytest.approx((h - 1 + w - 1) / max(h, w))


def test_split_mass_hand_case():
    # half the mass moves 1 step, the other half 3 steps: EMD = 0.5 * 1/4 + 0.5 * 3/4
    p = np.zeros((4, 4))
    q = np.zeros((4, 4))
    p[0, 0] = 2.0
    q[0, 1] = 1.0
    q[3, 0] = 1.0
    assert emd(p, q) == pytest.approx(0.5 * 0.25 + 0.5 * 0.75)


def test_emd_1d_closed_form():
    p = np.array([[1.0, 0.0, 0.0, 0.0]])
    q = np.array([[0.0, 0.0, 0.0, 1.0]])
    assert emd(p, q) == pytest.approx(3 / 4)
    assert emd(p.ravel(), q.ravel()) == pytest.approx(3 / 4)
    assert emd(p.T, q.T) == pytest.approx(3 / 4)


def test_emd_normalises_symmetric_and_zero_on_equal():
    rng = np.random.default_rng(0)
    p, q = random_pair(rng, 6, 7)
    assert emd(3 * p, q) == pytest.approx(emd(p, q), rel=1e-10)
    assert emd(q, p) == pytest.approx(emd(p, q), rel=1e-10)
    assert emd(p, 5 * p) == pytest.approx(0.0, abs=1e-15)
    assert emd(p, p) == 0.0


def test_emd_triangle_inequality():
    rng = np.random.default_rng(1)
    a, b = random_pair(rng, 5, 6)
    c, _ = random_pair(rng, 5, 6)
    assert emd(a, c) <= emd(a, b) + emd(b, c) + 1e-12


# --------------------------------------------------------------------------- EMD errors


def test_emd_errors_name_the_argument():
    p = np.ones((3, 3))
    with pytest.raises(ValueError, match=r"p and q must have the same shape.*\(3, 3\).*\(3, 4\)"):
        emd(p, np.ones((3, 4)))
    bad = p.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"q must be finite; q\[1, 2\]=nan"):
        emd(p, bad)
    neg = p.copy()
    neg[0, 1] = -0.5
    with pytest.raises(ValueError, match=r"p must be non-negative; p\[0, 1\]=-0.5"):
        emd(neg, p)
    with pytest.raises(ValueError, match=r"q must have a positive total"):
        emd(p, np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"for grid 4x3"):
        emd(p, p, Grid(4, 3))
    with pytest.raises(ValueError, match=r"2-D"):
        emd(np.ones((2, 2, 2)), np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match=r"p must be a non-empty array"):
        emd([], [])
    with pytest.raises(TypeError, match=r"grid must be a Grid"):
        emd(p, p, (3, 3))
    with pytest.raises(ValueError, match=r"method must be one of .*method='sinkhorn'"):
        emd(p, p, method="sinkhorn")


# --------------------------------------------------------------------------- [BJO+19]


def test_identities():
    rng = np.random.default_rng(2)
    p, _ = random_pair(rng, 7, 9)
    assert sim(p, 2 * p) == pytest.approx(1.0)
    assert cc(p, 2 * p) == pytest.approx(1.0)
    assert kl(p, 2 * p) == pytest.approx(0.0, abs=1e-12)
    assert mse(p, p) == 0.0
    assert l1(p, p) == 0.0
    m = all_metrics(p, p, Grid(9, 7))
    assert set(m) == {"emd", "kl", "cc", "sim", "mse", "l1"}
    assert m["emd"] == 0.0 and m["sim"] == pytest.approx(1.0) and m["cc"] == pytest.approx(1.0)


def test_disjoint_supports():
    p = np.array([[1.0, 0.0], [0.0, 0.0]])
    q = np.array([[0.0, 0.0], [0.0, 1.0]])
    assert sim(p, q) == 0.0
    assert l1(p, q) == pytest.approx(2.0)
    assert mse(p, q) == pytest.approx(2.0 / 4)
    # CC of two one-hot maps on 4 pixels: cov = -1/16 ... = -1/3
    assert cc(p, q) == pytest.approx(-1.0 / 3.0)
    # KL(truth || estimate) with estimate zero on the truth's support: log(eps + 1/eps)
    assert kl(p, q) == pytest.approx(math.log(KL_EPS + 1.0 / KL_EPS))


def test_kl_hand_case_and_direction():
    truth = np.array([0.5, 0.5])
    est = np.array([0.25, 0.75])
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert kl(truth, est) == pytest.approx(expected, rel=1e-12)
    reverse = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert kl(est, truth) == pytest.approx(reverse, rel=1e-12)
    # direction matters when the estimate misses mass
    t2 = np.array([0.5, 0.5, 0.0])
    e2 = np.array([1.0, 0.0, 0.0])
    assert kl(t2, e2) > 10 and kl(e2, t2) == pytest.approx(math.log(2.0))
    assert kl(t2, e2, eps=1e-3) < kl(t2, e2)
    with pytest.raises(ValueError, match="eps must be finite"):
        kl(t2, e2, eps=-1.0)
    with pytest.raises(ValueError, match="estimate must be non-negative"):
        kl(t2, -e2)


def test_sim_and_cc_hand_cases():
    p = np.array([0.2, 0.3, 0.5])
    q = np.array([0.5, 0.3, 0.2])
    assert sim(p, q) == pytest.approx(0.2 + 0.3 + 0.2)
    assert cc(p, q) == pytest.approx(np.corrcoef(p, q)[0, 1])
    flat = np.ones(3)
    assert cc(p, flat) == 0.0
    assert cc(flat, 2 * flat) == 1.0


def test_all_metrics_matches_individual_functions():
    rng = np.random.default_rng(5)
    t, e = random_pair(rng, 6, 6)
    m = all_metrics(t, e)
    assert m == pytest.approx(
        {"emd": emd(t, e), "kl": kl(t, e), "cc": cc(t, e), "sim": sim(t, e),
         "mse": mse(t, e), "l1": l1(t, e)}
    )
    assert all(isinstance(v, float) for v in m.values())
    with pytest.raises(ValueError, match="truth and estimate must have the same shape"):
        all_metrics(t, e[:, :3])
