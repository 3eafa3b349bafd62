"""The count posterior of the default release (analyzers/heatmap/posterior.py)."""

from __future__ import annotations

import numpy as np
import pytest

from shuffledp.analyzers.heatmap.posterior import (
    LATTICE_SD,
    count_posterior,
    hierarchical_estimates,
)
from shuffledp.analyzers.heatmap.smoothing import level_sums, pyramid_density
from shuffledp.grid import Grid


def _sparse(grid: Grid, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.zeros((grid.height, grid.width))
    np.add.at(a, (rng.integers(0, grid.height, 40), rng.integers(0, grid.width, 40)), 1.0)
    return a


def test_hierarchical_estimates_are_consistent_and_exact_on_exact_counts():
    grid = Grid(16, 16)
    a = _sparse(grid, 0)
    exact = level_sums(a, grid, 1)
    est, var = hierarchical_estimates(exact, grid, 1, [1.0, 2.0, 0.5, 3.0])
    for e, t in zip(est, exact, strict=True):
        np.testing.assert_allclose(e, t, atol=1e-9)
    # noisy counts: children sum to their parent at every level, variances shrink
    rng = np.random.default_rng(1)
    noisy = [t + rng.laplace(0, 1.0, t.shape) for t in exact]
    est, var = hierarchical_estimates(noisy, grid, 1, [1.0] * 4)
    for parent, child in zip(est[:-1], est[1:], strict=True):
        sums = child.reshape(parent.shape[0], 2, parent.shape[1], 2).sum(axis=(1, 3))
        np.testing.assert_allclose(sums, parent, atol=1e-9)
    assert all((v <= 2.0 + 1e-12).all() for v in var)


def test_count_posterior_recovers_users_at_small_noise_and_defers_at_large():
    """Noise scale 0.05 on every level (a pixel's sd far below one user): the posterior mean
    puts the users' histogram back to within 1e-3 of each count; noise scale 5 (sd above
    LATTICE_SD) returns the pyramid density itself. Deterministic for the fixed seeds."""
    grid = Grid(16, 16)
    a = _sparse(grid, 2)
    rng = np.random.default_rng(3)
    exact = level_sums(a, grid, 1)
    small = [t + rng.laplace(0, 0.05, t.shape) for t in exact]
    dens, rec = count_posterior(small, grid, 1, [0.05] * 4)
    assert rec["pixel_sd"] < LATTICE_SD and rec["prior_dispersion"] is not None
    assert (dens > 0).all() and dens.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(dens * a.sum(), a, atol=1e-3)
    large = [t + rng.laplace(0, 5.0, t.shape) for t in exact]
    dens, rec = count_posterior(large, grid, 1, [5.0] * 4)
    assert rec["pixel_sd"] > LATTICE_SD and rec["prior_dispersion"] is None
    np.testing.assert_array_equal(dens, pyramid_density(large, grid, 1, [5.0] * 4))
    with pytest.raises(ValueError, match="uniform_shares"):
        count_posterior(small, grid, 1, [0.05] * 4, uniform_shares=[1.5])
    with pytest.raises(ValueError, match="noise_scales"):
        count_posterior(small, grid, 1, [0.05] * 3)


def test_the_posterior_is_an_option_of_smoothed_not_the_default():
    """smoothed() keeps the pyramid density; method="posterior" records the count posterior;
    anything else is refused naming the argument."""
    from shuffledp.analyzers.heatmap.central import central_heatmap
    from shuffledp.users import UserDistributions

    grid = Grid(16, 16)
    rng = np.random.default_rng(3)
    users = UserDistributions.from_pixels(grid, np.arange(400), rng.integers(0, 256, 400))
    rel = central_heatmap(users, 5.0, rng=1)
    dens = rel.smoothed()
    assert dens.parameters["smoothing"]["method"] == "pyramid_density"
    want = pyramid_density(rel.levels, grid, int(rel.parameters["start_level"]),
                           rel.noise_scales())
    np.testing.assert_array_equal(dens.estimate, want)
    post = rel.smoothed(method="posterior")
    assert post.parameters["smoothing"]["method"] == "count_posterior"
    assert abs(post.estimate.sum() - 1) < 1e-9
    with pytest.raises(ValueError, match="method='blur'"):
        rel.smoothed(method="blur")
