"""Adaptive vs flat federated heatmaps: MSE and communication vs users ([Bagdasaryan22]_
Tables 1 and 3 in shape), and the effect of shard size and modulus (Fig. 8 in shape).

Synthetic city-like data: 30 Gaussian clusters with Zipf(1) weights on a 2^depth grid, one
location per user. eps = 1, planned dropout 10%, actual dropout 0; aggregation="simulate" (the
same modular sums as secure aggregation, whose cost bench/secagg_cost.py measures). Mean of
``--reps`` seeded runs (an evaluation, not a release). Communication = total vector entries
sent by all clients over all sub-queries.

Usage: python bench/federated_tables.py [--reps 3] [--depth 7]

References
----------
.. [Bagdasaryan22] E. Bagdasaryan et al., "Towards Sparse Federated Analytics: Location
   Heatmaps under Distributed Differential Privacy with Secure Aggregation", PoPETs 2022.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from shuffledp.analyzers.federated_baselines import (
    central_tree_histogram,
    local_rr_histogram,
    quadtree_histogram,
)
from shuffledp.analyzers.federated_tree import adaptive_histogram, flat_histogram, mse


def city(n: int, side: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    k = 30
    w = 1.0 / np.arange(1, k + 1)
    centres = g.uniform(0.1, 0.9, (k, 2)) * side
    spread = g.uniform(0.005, 0.03, k) * side
    comp = g.choice(k, size=n, p=w / w.sum())
    pts = centres[comp] + g.normal(size=(n, 2)) * spread[comp, None]
    pts = np.clip(np.round(pts), 0, side - 1).astype(np.int64)
    return pts[:, 0], pts[:, 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--depth", type=int, default=7)
    a = ap.parse_args()
    side = 1 << a.depth
    t0 = time.perf_counter()
    print(f"grid {side}x{side}, eps=1, S_max=10000, planned dropout 10%; mean of {a.reps}")
    print(f"{'users':>7} {'mse adaptive':>13} {'mse flat':>10} {'comm adaptive':>14} "
          f"{'comm flat':>10} {'queries':>8} {'final T':>8}")
    for n in (10_000, 100_000):
        res = []
        for rep in range(a.reps):
            g = np.random.default_rng(1000 * rep + n)
            rows, cols = city(n, side, g)
            truth = np.bincount(rows * side + cols, minlength=side * side).reshape(side, side)
            truth = truth / n
            ad = adaptive_histogram(rows, cols, a.depth, 1.0, shard_size=10_000, dropout=0.1,
                                    aggregation="simulate", rng=rep)
            fl = flat_histogram(rows, cols, a.depth, 1.0, shard_size=10_000, dropout=0.1,
                                aggregation="simulate", rng=rep + 100)
            res.append((mse(ad.estimate, truth), mse(fl, truth),
                        sum(r["vector_length"] * r["users"] for r in ad.rounds),
                        side * side * n, len(ad.rounds), ad.rounds[-1]["vector_length"]))
        m = np.mean(res, axis=0)
        print(f"{n:>7} {m[0]:>13.3e} {m[1]:>10.3e} {m[2]:>14.3e} {m[3]:>10.3e} {m[4]:>8.1f} "
              f"{m[5]:>8.0f}", flush=True)
    print("\nFig. 1 shape: every method at n = 10000 (MSE of the normalised density)")
    g = np.random.default_rng(7)
    rows, cols = city(10_000, side, g)
    truth = np.bincount(rows * side + cols, minlength=side * side).reshape(side, side) / 10_000
    kw = dict(shard_size=10_000, aggregation="simulate")
    methods = {
        "adaptive (distributed)": lambda r: adaptive_histogram(rows, cols, a.depth, 1.0,
                                                               rng=r, **kw).estimate,
        "flat one-hot (distributed)": lambda r: flat_histogram(rows, cols, a.depth, 1.0,
                                                               rng=r, **kw),
        "quadtree, geometric budget": lambda r: quadtree_histogram(rows, cols, a.depth, 1.0,
                                                                   rng=r, **kw),
        "flat, central DP": lambda r: central_tree_histogram(rows, cols, a.depth, 1.0, rng=r),
        "local DP, k-RR": lambda r: local_rr_histogram(rows, cols, a.depth, 1.0, rng=r),
    }
    for name, fn in methods.items():
        print(f"  {name:>28}: {np.mean([mse(fn(r), truth) for r in range(a.reps)]):.3e}",
              flush=True)
    print("\nFig. 8 shape: flat histogram, n = 10000, MSE vs shard size and modulus")
    g = np.random.default_rng(5)
    rows, cols = city(10_000, side, g)
    truth = np.bincount(rows * side + cols, minlength=side * side).reshape(side, side) / 10_000
    for S in (500, 2000, 10_000):
        cells = []
        for m in (1 << 6, 1 << 8, 1 << 12, 1 << 32):
            e = np.mean([mse(flat_histogram(rows, cols, a.depth, 1.0, shard_size=S,
                                            modulus=m, aggregation="simulate", rng=r), truth)
                         for r in range(a.reps)])
            cells.append(f"m=2^{m.bit_length() - 1}: {e:.3e}")
        print(f"  S_max={S:>6}: " + "  ".join(cells), flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
