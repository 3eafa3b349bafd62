"""Adaptive vs flat federated heatmaps: MSE and communication vs users ([Bagdasaryan22]_
Tables 1 and 3 in shape), and the effect of shard size and modulus (Fig. 8 in shape).

Synthetic city-like data: 30 Gaussian clusters with Zipf(1) weights on a 2^depth grid, one
location per user. eps = 1, no dropout (and a 100k row with 10% of each shard dropping, the
noise planned for 12%); aggregation="simulate" (each shard's noise sum sampled directly,
exactly the law of the clients' sum; secure aggregation's cost is measured by
bench/secagg_cost.py and bench/federated_endtoend.py). The truth is the users' own
histogram (the paper's is the population image the users are sampled from). Mean of
``--reps`` seeded runs (an evaluation, not a release). Communication = total vector entries
sent by all clients over all sub-queries; "comm" is the paper's: the sum of the vector
sizes over sub-queries (levels for the quadtree).

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

from shuffledp.analyzers.federated.baselines import central_tree_histogram, local_rr_histogram
from shuffledp.analyzers.federated.tree import mse
from shuffledp.protocol.federated import (
    adaptive_histogram,
    central_adaptive_histogram,
    flat_histogram,
    quadtree_histogram,
)


def city(n: int, side: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    k = 30
    w = 1.0 / np.arange(1, k + 1)
    centres = g.uniform(0.1, 0.9, (k, 2)) * side
    spread = g.uniform(0.005, 0.03, k) * side
    comp = g.choice(k, size=n, p=w / w.sum())
    pts = centres[comp] + g.normal(size=(n, 2)) * spread[comp, None]
    pts = np.clip(np.round(pts), 0, side - 1).astype(np.int64)
    return pts[:, 0], pts[:, 1]


def _row(rows, cols, depth, n, rep, dropout=0.0, rate=0.0):
    side = 1 << depth
    truth = np.bincount(rows * side + cols, minlength=side * side).reshape(side, side) / n
    kw = dict(shard_size=10_000, dropout=dropout, aggregation="simulate")
    ad = adaptive_histogram(rows, cols, depth, 1.0, dropout_rate=rate, rng=rep, **kw)
    ad7 = adaptive_histogram(rows, cols, depth, 1.0, dropout_rate=rate, rng=rep, eq7="shards",
                             **kw)
    fl = flat_histogram(rows, cols, depth, 1.0, rng=rep + 100, **kw)
    qt = quadtree_histogram(rows, cols, depth, 1.0, rng=rep + 200, **kw)
    return (mse(ad.estimate, truth), mse(fl, truth), mse(qt, truth),
            sum(r["vector_length"] for r in ad.rounds), side * side,
            sum(4 ** lvl for lvl in range(depth + 1)),
            sum(r["vector_length"] * r["users"] for r in ad.rounds),
            len(ad.rounds), ad.rounds[-1]["vector_length"], mse(ad7.estimate, truth),
            sum(r["vector_length"] for r in ad7.rounds))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--depth", type=int, default=7)
    a = ap.parse_args()
    side = 1 << a.depth
    t0 = time.perf_counter()
    print(f"Table 1 shape: grid {side}x{side}, eps=1, S_max=10000; mean of {a.reps}. "
          "comm = sum of vector sizes over sub-queries/levels (the paper's measure); "
          "entries sent = sum of T x users")
    print(f"{'users':>13} {'mse adapt':>10} {'mse flat':>10} {'mse qtree':>10} "
          f"{'comm adapt':>10} {'comm flat':>10} {'comm qtree':>10} {'entries sent':>13} "
          f"{'queries':>8} {'final T':>8} {'mse eq7 sh':>10} {'comm eq7 sh':>11}")
    cases = [(10_000, 0.0, 0.0, "10k"), (100_000, 0.0, 0.0, "100k"),
             (100_000, 0.12, 0.10, "100k 10% drop")]
    for n, plan, rate, label in cases:
        res = []
        for rep in range(a.reps):
            g = np.random.default_rng(1000 * rep + n)
            rows, cols = city(n, side, g)
            res.append(_row(rows, cols, a.depth, n, rep, plan, rate))
        m = np.mean(res, axis=0)
        print(f"{label:>13} {m[0]:>10.3e} {m[1]:>10.3e} {m[2]:>10.3e} {m[3]:>10.0f} "
              f"{m[4]:>10.0f} {m[5]:>10.0f} {m[6]:>13.3e} {m[7]:>8.1f} {m[8]:>8.0f} "
              f"{m[9]:>10.3e} {m[10]:>11.0f}",
              flush=True)
    print("  (10% drop: noise planned for 12% dropout, 10% of each shard actually dropping; "
          "'eq7 sh': the adaptive run with eq. 7's shard factor as its text means it, "
          "docs/errata.md row 11)")
    print("\nTable 3 shape: ablations, n = 10000, eps = 1 (MSE, comm = sum of vector sizes)")
    g = np.random.default_rng(11)
    rows, cols = city(10_000, side, g)
    truth = np.bincount(rows * side + cols, minlength=side * side).reshape(side, side) / 1e4
    kw = dict(shard_size=10_000, aggregation="simulate")
    variants = {
        "fixed eps, non-adaptive (T=10)": dict(schedule="even", threshold=10.0),
        "scheduled eps, non-adaptive (T=10)": dict(threshold=10.0),
        "scheduled eps, adaptive T": {},
    }
    for name, extra in variants.items():
        runs = [adaptive_histogram(rows, cols, a.depth, 1.0, rng=r, **kw, **extra)
                for r in range(a.reps)]
        e = np.mean([mse(x.estimate, truth) for x in runs])
        c = np.mean([sum(r["vector_length"] for r in x.rounds) for x in runs])
        print(f"  {name:>36}: mse {e:.3e}  comm {c:.0f}", flush=True)
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
        "adaptive tree, central DP": lambda r: central_adaptive_histogram(
            rows, cols, a.depth, 1.0, rng=r).estimate,
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
