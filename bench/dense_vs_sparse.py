"""Dense (App. D.1) against sparse (Alg. 1-2) EMD aggregation of [Ghazi23]_: who wins where.

Data with a controlled sparsity k: k distinct pixels drawn uniformly from a side x side grid
(data seed fixed per k), n users each holding one point on one of the k pixels (uniformly),
so the aggregate has about min(k, n) occupied cells. For every (eps n, k) the central
mechanisms run with independent noise (replace-one neighbours, n public): the sparse one with
w = 20 (as ``shuffledp heatmap`` runs it) and, for k <= 1024, with w = max(20, k) (Thm 3.1's
w = O(k)), and the dense one; the exact EMD between the normalised true aggregate and each
raw estimate (no Gaussian filter: the quantity Thm 3.1 and Thm D.1 bound) is averaged over
the runs, with a 95% interval (mean +- 1.96 sd / sqrt(runs)).

Theory: with w = O(k) the sparse error grows as sqrt(k) / (eps n), the dense one is
O~(1 / sqrt(eps n)) whatever k, so dense should win once k exceeds about eps n (up to
logarithms); with a fixed w = 20 the sparse algorithm also pays for approximating k > w
cells by w. The table shows where each wins; the last part calibrates the constant
``DENSE_CROSSOVER`` (kappa) of :func:`shuffledp.analyzers.heatmap.dense.choose_algorithm`
(dense iff kappa x sparse_error_bound(k, w = 20) > dense_error_bound) as the kappa, on a log
grid, whose choices agree with the measured winner (sparse w = 20 vs dense) on the most cells
(ties: the geometric middle of the best range), and prints the agreement of the shipped
constant.

``--timing`` measures the projection's two exact solvers (the package's network simplex and
SciPy's HiGHS) on noisy level sums of 32x32 to 128x128 cells and prints HiGHS / simplex.

Run: python bench/dense_vs_sparse.py [--runs R] [--side N] [--quick] [--timing]
Every core is used (one process per core over the (eps n, k, run) cells).

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.dense import (
    DENSE_CROSSOVER,
    dense_error_bound,
    dense_heatmap,
    dense_level,
    emd_projection,
    sparse_error_bound,
)
from shuffledp.analyzers.heatmap.metrics import emd
from shuffledp.grid import Grid
from shuffledp.users import UserDistributions

NEIGHBOUR = "replace"


def users_k_sparse(grid: Grid, n: int, k: int, seed: int) -> UserDistributions:
    """n one-point users on k distinct uniformly drawn pixels of ``grid``."""
    rng = np.random.default_rng(seed)
    support = rng.choice(grid.n_pixels, size=min(k, grid.n_pixels), replace=False)
    pix = support[rng.integers(0, support.size, size=n)]
    return UserDistributions.from_pixels(grid, np.arange(n), pix)


#: the sparse algorithm also runs with w = k (Thm 3.1's w = O(k)) up to this k (its LP has
#: O(w L) variables)
W_EQUALS_K_MAX = 1024


def one(task: tuple[int, int, float, int, int]) -> tuple[int, float, int, float, float, float]:
    """(n, eps, k, EMD sparse w = 20, EMD dense, EMD sparse w = max(20, k) or NaN)."""
    side, n, eps, k, run = task
    grid = Grid(side, side)
    users = users_k_sparse(grid, n, k, seed=1000 + k)
    truth = users.aggregate()
    seeds = np.random.SeedSequence([n, int(eps * 1000), k, run]).spawn(3)
    sp = central_heatmap(users, eps, neighbour=NEIGHBOUR, rng=np.random.default_rng(seeds[0]))
    de = dense_heatmap(users, eps, neighbour=NEIGHBOUR, rng=np.random.default_rng(seeds[1]))
    e_wk = float("nan")
    if k <= W_EQUALS_K_MAX:
        wk = central_heatmap(users, eps, w=max(20, k), neighbour=NEIGHBOUR,
                             rng=np.random.default_rng(seeds[2]))
        e_wk = emd(truth, wk.estimate, grid)
    return n, eps, k, emd(truth, sp.estimate, grid), emd(truth, de.estimate, grid), e_wk


def interval(x: list[float]) -> tuple[float, float]:
    a = np.asarray(x)
    half = 1.96 * a.std(ddof=1) / math.sqrt(a.size) if a.size > 1 else float("nan")
    return float(a.mean()), float(half)


def crossover_table(side: int, settings: list[tuple[int, float]], ks: list[int],
                    runs: int) -> dict:
    tasks = [(side, n, eps, k, r) for n, eps in settings for k in ks for r in range(runs)]
    results: dict = {}
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for n, eps, k, es, ed, ewk in pool.map(one, tasks, chunksize=1):
            results.setdefault((n, eps, k), ([], [], []))
            for store, val in zip(results[(n, eps, k)], (es, ed, ewk), strict=True):
                store.append(val)
    grid = Grid(side, side)
    print(f"\n== EMD to the true aggregate (raw, normalised), mean +- 95% half-width over "
          f"{runs} runs; {side}x{side} grid, replace-one ==")
    print(f"{'n':>6s} {'eps':>5s} {'eps n':>7s} {'k':>6s} {'k/(eps n)':>9s} "
          f"{'sparse w=20':>17s} {'dense':>17s} {'winner':>7s} {'sparse w=max(20,k)':>19s} "
          f"{'winner':>7s} {'l*':>3s}")
    for n, eps in settings:
        for k in ks:
            s_m, s_h = interval(results[(n, eps, k)][0])
            d_m, d_h = interval(results[(n, eps, k)][1])
            w_m, w_h = interval(results[(n, eps, k)][2])
            wk = "-" if math.isnan(w_m) else f"{w_m:9.5f}+-{w_h:.5f}"
            print(f"{n:6d} {eps:5g} {eps * n:7g} {k:6d} {k / (eps * n):9.3g} "
                  f"{s_m:9.5f}+-{s_h:.5f} {d_m:9.5f}+-{d_h:.5f} "
                  f"{winner(s_m, s_h, d_m, d_h):>7s} {wk:>19s} "
                  f"{'-' if math.isnan(w_m) else winner(w_m, w_h, d_m, d_h):>7s} "
                  f"{dense_level(grid, n, eps):3d}")
        print()
    print("winner with '?': the two intervals overlap")
    return results


def winner(s_m: float, s_h: float, d_m: float, d_h: float) -> str:
    clear = abs(s_m - d_m) > s_h + d_h
    return ("dense" if d_m < s_m else "sparse") + ("" if clear else "?")


def calibrate(side: int, results: dict) -> None:
    """The kappa whose rule (with the CLI's w = 20) agrees with the measured winners
    (sparse w = 20 against dense) on most cells."""
    grid = Grid(side, side)
    cells = []
    for (n, eps, k), (es, ed, _) in results.items():
        s_m, d_m = float(np.mean(es)), float(np.mean(ed))
        ratio = dense_error_bound(grid, n, eps, NEIGHBOUR) / sparse_error_bound(
            k, n, eps, NEIGHBOUR, w=20)
        cells.append((ratio, d_m < s_m))  # dense iff kappa > ratio

    def agree(kappa: float) -> int:
        return sum((kappa > r) == dense for r, dense in cells)

    grid_k = np.exp(np.linspace(math.log(1e-2), math.log(1e3), 401))
    scores = np.array([agree(float(x)) for x in grid_k])
    best = scores.max()
    chosen = grid_k[scores == best]
    kappa = float(math.exp((math.log(chosen[0]) + math.log(chosen[-1])) / 2))
    print("\n== calibration of DENSE_CROSSOVER (dense iff kappa x sparse bound(k, w = 20) > "
          "dense bound) ==")
    print(f"best agreement {best}/{len(cells)} for kappa in [{chosen[0]:.3g}, {chosen[-1]:.3g}]"
          f"; geometric middle {kappa:.3g}")
    print(f"shipped DENSE_CROSSOVER = {DENSE_CROSSOVER:g}: agreement "
          f"{agree(DENSE_CROSSOVER)}/{len(cells)}")


def timing(reps: int) -> None:
    """Projection time: HiGHS / network simplex, measured in one run."""
    print("\n== projection solvers on a noisy level sum (n = 10^4 one-point users spread "
          f"uniformly, replace-one eps = 1): median of {reps} ==")
    print(f"{'cells':>9s} {'simplex ms':>11s} {'highs ms':>9s} {'highs/simplex':>14s} "
          f"{'|obj diff|':>11s}")
    rng = np.random.default_rng(0)
    for side in (32, 64, 128):
        ts, th, diff = [], [], 0.0
        for _ in range(reps):
            s = rng.multinomial(10_000, np.full(side * side, 1 / side**2)).reshape(side, side)
            noisy = s + rng.laplace(0, 2.0, size=s.shape)
            t0 = time.perf_counter()
            a = emd_projection(noisy, side=1 / side, alpha=2.0)
            t1 = time.perf_counter()
            b = emd_projection(noisy, side=1 / side, alpha=2.0, method="highs")
            t2 = time.perf_counter()
            ts.append(t1 - t0)
            th.append(t2 - t1)
            diff = max(diff, abs(a.objective - b.objective))
        ms, mh = float(np.median(ts)), float(np.median(th))
        print(f"{side:4d}x{side:<4d} {1e3 * ms:11.1f} {1e3 * mh:9.1f} {mh / ms:14.1f} "
              f"{diff:11.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--side", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="fewer cells (a smoke run)")
    ap.add_argument("--timing", action="store_true", help="only the solver timing")
    args = ap.parse_args()
    emd(np.ones((4, 4)), np.eye(4))  # compile the EMD solver once before timing anything
    if args.timing:
        timing(5)
        return
    if args.quick:
        settings = [(1000, 1.0)]
        ks = [16, 1024, args.side * args.side]
    else:
        settings = [(200, 0.5), (1000, 1.0), (10_000, 1.0)]
        ks = [4, 16, 64, 256, 1024, 4096, args.side * args.side]
    t0 = time.perf_counter()
    results = crossover_table(args.side, settings, ks, args.runs)
    calibrate(args.side, results)
    timing(3)
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
