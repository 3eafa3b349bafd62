"""Shared fixtures for the shuffle-protocol tests (not a test module)."""

from __future__ import annotations

import numpy as np

from shuffledp import Grid, UserDistributions
from shuffledp.protocol.params import ProtocolParams, derive_params


def params_for(
    grid: Grid,
    n: int = 10,
    B: int = 16,
    *,
    epsilon: float = 2.0,
    delta: float = 1e-5,
    dropout: float = 0.0,
    rounding: str = "largest_remainder",
    w: int = 20,
    neighbour: str = "replace",
) -> ProtocolParams:
    """The protocol record of the mechanics tests: replace-one (sensitivity 2B), which they
    were written for, unless ``neighbour`` says otherwise (the toolkit's default is zero-out)."""
    return derive_params(
        grid, n, epsilon=epsilon, delta=delta, B=B, w=w, rounding=rounding, dropout=dropout,
        neighbour=neighbour,
    )


def random_users(grid: Grid, n: int, k: int = 3, seed: int = 0) -> UserDistributions:
    rng = np.random.default_rng(seed)
    return UserDistributions.from_pixels(
        grid, np.repeat(np.arange(n), k), rng.integers(0, grid.n_pixels, n * k), rng.random(n * k)
    )
