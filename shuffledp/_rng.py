"""Random-generator plumbing for research paths (never used for shares or permutations)."""

from __future__ import annotations

import numpy as np

RngLike = int | np.random.Generator | np.random.SeedSequence | None


def as_generator(rng: RngLike, name: str = "rng") -> np.random.Generator:
    """A numpy Generator from a seed, SeedSequence, Generator or None (fresh OS entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise ValueError(f"{name} seed must be >= 0, got {name}={rng!r}")
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"{name} must be None, a non-negative int seed, a SeedSequence or a numpy Generator, "
        f"got {name}={rng!r}"
    )
