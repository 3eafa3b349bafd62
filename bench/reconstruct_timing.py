"""Reconstruct time against grid size (w = 20): target <= 0.2 s at 1024 x 1024.

Run: python bench/reconstruct_timing.py
Input: 200 synthetic-like users' worth of mass in 10 clusters plus Laplace noise at eps = 1;
prints the median of 5 runs of the reconstruction alone (pyramid sums and noise excluded) and
the LP size.
"""

from __future__ import annotations

import time

import numpy as np

from shuffledp.accounting.budget import level_budgets
from shuffledp.analyzers.heatmap.central import measured_levels, noisy_counts
from shuffledp.analyzers.heatmap.reconstruct import reconstruct_details
from shuffledp.grid import Grid
from shuffledp.users import UserDistributions


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'grid':>10s} {'levels':>6s} {'LP vars':>8s} {'median s':>9s} {'max s':>7s}")
    for side in (64, 128, 256, 512, 1024, 2048):
        g = Grid(side, side)
        centres = rng.integers(0, side, size=(10, 2))
        rows, cols = [], []
        for cy, cx in centres:
            rows.append(np.clip(rng.normal(cy, side / 50, 20).astype(int), 0, side - 1))
            cols.append(np.clip(rng.normal(cx, side / 50, 20).astype(int), 0, side - 1))
        pix = np.concatenate(rows) * side + np.concatenate(cols)
        users = UserDistributions.from_pixels(g, np.arange(pix.size), pix, np.ones(pix.size))
        start, top = measured_levels(g, 20)
        counts = noisy_counts(users, level_budgets(1.0, start, top), start, rng=rng)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            res = reconstruct_details(counts, g, start, 20)
            times.append(time.perf_counter() - t)
        print(f"{str(g):>10s} {top - start + 1:6d} {res.n_variables:8d} "
              f"{np.median(times):9.4f} {max(times):7.4f}")


if __name__ == "__main__":
    main()
