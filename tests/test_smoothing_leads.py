"""bench/smoothing_leads.py: the unbiased risk estimate of a blurred least-squares leaf
(its tree covariance and blur trace, exact on a small grid; its mean, by Monte Carlo)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from shuffledp.analyzers.heatmap import posterior as post
from shuffledp.analyzers.heatmap.smoothing import level_sums
from shuffledp.grid import Grid

PATH = Path(__file__).resolve().parents[1] / "bench" / "smoothing_leads.py"
SCALES = [3.0, 1.5, 0.7, 2.0]  # levels 1..4 of a 16x16 grid


@pytest.fixture(scope="module")
def sl():
    spec = importlib.util.spec_from_file_location("smoothing_leads", PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["smoothing_leads"] = mod
    spec.loader.exec_module(mod)
    return mod


def _dense_leaf_covariance(grid: Grid, start: int, scales: list[float]) -> np.ndarray:
    """Cov of the hierarchical least-squares leaf: the leaf is linear in the level counts,
    so push every unit count through the two passes (A) and form A D A^T."""
    shapes = [grid.level_shape(lev) for lev in range(start, grid.depth + 1)]
    cols, var = [], []
    for k, shape in enumerate(shapes):
        for i in range(shape[0] * shape[1]):
            levels = [np.zeros(s) for s in shapes]
            levels[k].flat[i] = 1.0
            cols.append(post._two_pass(levels, np.asarray(scales))[0][-1].ravel())
            var.append(2.0 * scales[k] ** 2)
    a = np.array(cols).T
    return (a * np.array(var)) @ a.T


def test_the_tree_covariance_and_the_blur_trace_are_exact(sl):
    grid = Grid(16, 16)
    cov = _dense_leaf_covariance(grid, 1, SCALES)
    fvar = post._two_pass([np.zeros(grid.level_shape(lev)) for lev in range(1, 5)],
                          np.asarray(SCALES))[1]
    c = sl.tree_covariances([float(v.mean()) for v in fvar])
    # every entry of the dense covariance is c at the level of the pixels' deepest common cell
    idx = np.arange(256)
    r, col = idx // 16, idx % 16
    for lev in range(len(c)):
        shift = 3 - lev  # level 1 + lev has cells of side 2^(3 - lev)
        same = ((r[:, None] >> shift) == (r[None, :] >> shift)) \
            & ((col[:, None] >> shift) == (col[None, :] >> shift))
        deeper = np.zeros_like(same) if lev == len(c) - 1 else \
            ((r[:, None] >> (shift - 1)) == (r[None, :] >> (shift - 1))) \
            & ((col[:, None] >> (shift - 1)) == (col[None, :] >> (shift - 1)))
        np.testing.assert_allclose(cov[same & ~deeper], c[lev], rtol=1e-9, atol=1e-12)
    top = (r[:, None] >> 3) == (r[None, :] >> 3)
    top &= (col[:, None] >> 3) == (col[None, :] >> 3)
    np.testing.assert_allclose(cov[~top], 0.0, atol=1e-12)
    for h in (0.5, 1.5, 4.0):
        k2 = np.kron(sl._kernel(16, h), sl._kernel(16, h))
        assert sl.blur_trace((16, 16), h, c) == pytest.approx(np.trace(k2 @ cov), rel=1e-9)


def test_the_risk_estimate_is_unbiased(sl):
    """Its exact mean, E||Kz - z||^2 - tr C + 2 tr(KC) with the dense covariance, is the true
    risk ||(K - I) x||^2 + tr(K C K^T); and over 400 Laplace draws its average is within
    4 standard errors of the true risk at every bandwidth (false-failure rate about 6e-5 per
    bandwidth under a normal approximation; fixed seed, so deterministic)."""
    grid = Grid(16, 16)
    rng = np.random.default_rng(11)
    x = np.zeros((16, 16))
    np.add.at(x, (rng.integers(4, 12, 300), rng.integers(2, 14, 300)), 1.0)
    cov = _dense_leaf_covariance(grid, 1, SCALES)
    exact = level_sums(x, grid, 1)
    fvar = post._two_pass(exact, np.asarray(SCALES))[1]
    variances = [float(v.mean()) for v in fvar]
    hs = (0.5, 1.0, 2.0)
    eye = np.eye(256)
    truth = []
    for h in hs:
        k2 = np.kron(sl._kernel(16, h), sl._kernel(16, h))
        bias = float((((k2 - eye) @ x.ravel()) ** 2).sum())
        mean_sure = bias + np.trace((k2 - eye) @ cov @ (k2 - eye).T) - np.trace(cov) \
            + 2.0 * sl.blur_trace((16, 16), h, sl.tree_covariances(variances))
        true_risk = bias + np.trace(k2 @ cov @ k2.T)
        assert mean_sure == pytest.approx(true_risk, rel=1e-9)
        truth.append(true_risk)
    draws = []
    for _ in range(400):
        noisy = [t + rng.laplace(0.0, b, t.shape) for t, b in zip(exact, SCALES, strict=True)]
        z = post._two_pass(noisy, np.asarray(SCALES))[0][-1]
        draws.append(sl.sure_risks(z, variances, hs))
    d = np.array(draws)
    se = d.std(axis=0, ddof=1) / np.sqrt(len(d))
    assert (np.abs(d.mean(axis=0) - np.array(truth)) < 4.0 * se).all(), (d.mean(0), truth)
