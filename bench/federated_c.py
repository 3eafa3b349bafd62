"""The calibration c of eq. 7 of [Bagdasaryan22]_ against the error, on two data sets.

For each c, ``adaptive_histogram`` (eq. 7 read as its text means it, ``"shards"``; eps = 1;
S_max = 10,000; zero-out; shard noise sums drawn from their exact law) on users sampled from
two public synthetic population images (``shuffledp.datasets.population_image``: the
default image, and the one ``shuffledp federated`` samples from), truth = the image. Prints
the MSE over the non-private error (the best single level of the users' exact histogram,
spread uniformly over its pixels: the floor of [Bagdasaryan22]_ Table 1), with a 95% interval
over ``--runs`` noise and sampling draws, and the communication (sum of the sub-queries'
vector sizes). c is public and costs no privacy; the default
(:data:`~shuffledp.accounting.budget.DEFAULT_EQ7_C` = 0.05) is the documented rule, and the
rows show its measured range.

    python bench/federated_c.py [--runs 3] [--n 10000,100000] [--depth 8]

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics" -- full
   entry in docs/references.md
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from shuffledp.accounting.budget import DEFAULT_EQ7_C
from shuffledp.datasets import population_image, sample_pixels
from shuffledp.protocol.federated import adaptive_histogram


def best_level_mse(rows: np.ndarray, cols: np.ndarray, depth: int, truth: np.ndarray
                   ) -> float:
    """MSE of the best non-private level: the users' histogram at level l, each cell's mass
    spread uniformly over its pixels, the best l."""
    side = 1 << depth
    best = math.inf
    for lvl in range(depth + 1):
        s = depth - lvl
        h = np.bincount((rows >> s) * (1 << lvl) + (cols >> s), minlength=4**lvl)
        h = h.reshape(1 << lvl, 1 << lvl) / rows.size / 4**s
        up = np.kron(h, np.ones((1 << s, 1 << s)))
        best = min(best, float(np.mean((up - truth) ** 2)))
    assert up.shape == (side, side)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", default="10000,100000")
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--cs", default="0.01,0.02,0.05,0.1,0.2,0.5")
    args = ap.parse_args()
    side = 1 << args.depth
    images = {"default image": population_image(side, rng=0),
              "CLI image": population_image(side, spread=(0.02, 0.15), background=0.5)}
    cs = [float(c) for c in args.cs.split(",")]
    print(f"eq. 7 'shards', eps = 1, {side}x{side}, S_max = 10,000, zero-out, {args.runs} runs; "
          f"ratio = MSE / non-private best-level MSE (95% interval); default c = "
          f"{DEFAULT_EQ7_C}")
    for name, img in images.items():
        for n in (int(x) for x in args.n.split(",")):
            ratios: dict[float, list[float]] = {c: [] for c in cs}
            comm: dict[float, list[int]] = {c: [] for c in cs}
            for run in range(args.runs):
                rows, cols = sample_pixels(img, n, 1000 * run + 7)
                floor = best_level_mse(rows, cols, args.depth, img)
                for c in cs:
                    rel = adaptive_histogram(rows, cols, args.depth, 1.0, c=c, rng=run)
                    ratios[c].append(float(np.mean((rel.estimate - img) ** 2)) / floor)
                    comm[c].append(sum(r["vector_length"] for r in rel.rounds))
            for c in cs:
                r = np.array(ratios[c])
                half = 1.96 * r.std(ddof=1) / math.sqrt(r.size) if r.size > 1 else float("nan")
                mark = "  <- default" if c == DEFAULT_EQ7_C else ""
                print(f"{name:>14s} n={n:>7d} c={c:<5g} error/non-private {r.mean():7.3f} "
                      f"+/- {half:.3f}  comm {np.mean(comm[c]):8.0f}{mark}", flush=True)
            best = min(cs, key=lambda c: np.mean(ratios[c]))
            print(f"{name:>14s} n={n:>7d} best c = {best:g}: default / best = "
                  f"{np.mean(ratios[DEFAULT_EQ7_C]) / np.mean(ratios[best]):.3f}"
                  if DEFAULT_EQ7_C in ratios else "", flush=True)


if __name__ == "__main__":
    main()
