"""Time the exact EMD solvers against POT's ``ot.emd2``, as ratios measured in one run.

The machine this runs on is usually shared and loaded, so absolute seconds drift by 2-3x
between runs; each comparison therefore times the solvers alternately, ``--repeat`` times,
and prints the median of each and the median of the per-repeat ratios.

1. Grid EMD (:func:`shuffledp.analyzers.heatmap.metrics.emd`, the ``GridL1`` cost of
   :func:`shuffledp.encoders.metric.transport.transport_cost`) at N x N (default 64 128 256)
   on two inputs:

   * ``sparse``: two aggregates of 1000 points each from independent synthetic mixtures
     ([Ghazi23]_ App. E.3; a few hundred non-zero pixels), the raw distributions the
     paper's EMD bound is about;
   * ``filtered``: the same after the Gaussian filter of Sec. 2.3 (sigma = N / 64 pixels),
     every pixel non-zero, like the heatmaps the paper's metrics compare.

   The sparse pair is drawn for ``--seeds`` seeds (the network simplex's time varies by
   instance) and a summary line gives the median ratios over them.

   Solvers: ``auto`` (the package's default), ``network_simplex`` (our numba network simplex
   on the grid graph, multiscale start) and the reference ``POT supports``: ``ot.emd2`` on
   the l1 cost matrix between the supports of p and q, or of (p - q)+ and (p - q)- when that
   problem is smaller (both exact; the cost matrix is built inside the timing, as ``auto``
   builds its own; skipped above ``--pot-max-arcs`` arcs: a filtered 128x128 pair needs
   ~7e7, a 256x256 one ~1e9). ``--highs-max N`` adds the HiGHS LP up to N x N. The section
   ends with the headline figures: ours (``auto``) / POT for every input, one line each.
2. Dense cost matrices (:func:`~shuffledp.encoders.metric.transport.transport_cost` with a
   ``(k, k)`` matrix) at k = 300 1000 2000 points (``--dense``): Euclidean distances between
   uniform points of the unit square, random masses. Solvers: ``auto``, ``network_simplex``
   and ``ot.emd2`` called directly.
3. ``--small``: the same dense problems at k = 5 ... 60, many calls per timing, to place
   ``POT_MIN_ARCS`` (where POT's fixed per-call cost stops winning for ours).
4. ``--crossover``: sparse aggregates of 500 to 32,000 points on 48x48 to 256x256 grids,
   our grid flow against POT on the supports of (p - q)+ and (p - q)-, against
   arcs / (N^2)^1.5, to place ``SUPPORT_ARCS_FACTOR`` (minutes).

The first network-simplex call is a warm-up that pays numba's compilation (cached on disk
afterwards).

Usage::

    python bench/emd_timing.py                      # grids 64 128 256, dense 300 1000 2000
    python bench/emd_timing.py 64 --dense 300 --repeat 5 --small
    python bench/emd_timing.py --crossover

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
.. [POT21] R. Flamary, N. Courty, A. Gramfort, et al., "POT: Python Optimal Transport",
   Journal of Machine Learning Research 22(78):1-8, 2021.
"""

from __future__ import annotations

import argparse
import time
import timeit
from collections.abc import Callable

import numpy as np
import ot

from shuffledp.analyzers.heatmap.metrics import emd
from shuffledp.analyzers.heatmap.render import gaussian_heatmap
from shuffledp.datasets import synthetic_mixture
from shuffledp.encoders.metric.transport import (
    POT_MIN_ARCS,
    SUPPORT_ARCS_FACTOR,
    GridL1,
    transport_cost,
)
from shuffledp.grid import Grid


def grid_inputs(n: int, seed: int, users: int = 200) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    grid = Grid(n, n)
    a = synthetic_mixture(users, 20, 5, rng=seed).to_users(grid).aggregate()
    b = synthetic_mixture(users, 20, 5, rng=seed + 1000).to_users(grid).aggregate()
    sigma = n / 64
    return {
        "sparse": (a, b),
        "filtered": (gaussian_heatmap(a, sigma), gaussian_heatmap(b, sigma)),
    }


def l1_costs(src: np.ndarray, dst: np.ndarray, width: int) -> np.ndarray:
    rs, cs = np.divmod(src, width)
    rd, cd = np.divmod(dst, width)
    return (np.abs(rs[:, None] - rd[None]) + np.abs(cs[:, None] - cd[None])).astype(np.float64)


def pot_on_supports(p: np.ndarray, q: np.ndarray,
                    diff: bool) -> tuple[Callable[[], float], int]:
    """ot.emd2 on an exact transport formulation of the grid EMD of the normalised p and q
    with the l1 cost (in the unit of :func:`emd`: the grid's longer side is 1): between the
    supports of p and q, or (``diff``) of (p - q)+ and (p - q)-; the cost matrix is built
    inside the timing. Returns the solve and its number of arcs."""
    n = max(p.shape)
    a, b = p.ravel() / p.sum(), q.ravel() / q.sum()
    if diff:
        d = a - b
        src, dst = np.flatnonzero(d > 0), np.flatnonzero(d < 0)
        ma, mb = d[src], -d[dst]
        mb = mb * (ma.sum() / mb.sum())
    else:
        src, dst = np.flatnonzero(a), np.flatnonzero(b)
        ma, mb = a[src], b[dst]

    def solve() -> float:
        return float(ot.emd2(ma, mb, l1_costs(src, dst, p.shape[1]), numItermax=10**8)) / n

    return solve, src.size * dst.size


def dense_problem(k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, y = rng.random((k, 2)), rng.random((k, 2))
    c = np.sqrt(((x[:, None] - y[None]) ** 2).sum(-1))
    p, q = rng.random(k), rng.random(k)
    return p / p.sum(), q / q.sum(), c


def race(solvers: dict[str, Callable[[], float]], repeat: int,
         number: int = 1) -> dict[str, tuple[float, float, list[float]]]:
    """Time the solvers alternately: name -> (median seconds per call, value, the times)."""
    times: dict[str, list[float]] = {name: [] for name in solvers}
    values: dict[str, float] = {}
    for _ in range(repeat):
        for name, f in solvers.items():
            t0 = time.perf_counter()
            for _ in range(number):
                values[name] = f()
            times[name].append((time.perf_counter() - t0) / number)
    return {name: (float(np.median(t)), values[name], t) for name, t in times.items()}


def ratio(res: dict, num: str, den: str) -> float:
    """Median over the repeats of the per-repeat time ratio num / den."""
    return float(np.median(np.array(res[num][2]) / np.array(res[den][2])))


def bench_grid(sizes: list[int], repeat: int, seeds: list[int], highs_max: int,
               pot_max_arcs: float) -> None:
    print("\n1. grid EMD (l1 on N x N): seconds (median of the repeats) and ratios "
          "(median of per-repeat ratios); sparse inputs from each seed, filtered from the first")
    print(f"{'grid':>9} {'input':>11} {'k_p x k_q':>11} {'auto':>8} {'ours':>8} "
          f"{'POT supp':>8} {'POT diff':>8} {'auto/POT':>9} {'ours/POT':>9} {'auto/ours':>9} "
          f"{'highs':>7} {'max rel diff':>12}")
    headline: list[tuple[str, list[tuple[str, int, float | None]]]] = []
    for n in sizes:
        summary: dict[str, list[float]] = {"auto/POT": [], "ours/POT": [], "auto/ours": []}
        for s_i, seed in enumerate(seeds):
            for kind, (p, q) in grid_inputs(n, seed).items():
                if kind == "filtered" and s_i > 0:
                    continue
                solvers: dict[str, Callable[[], float]] = {
                    "auto": lambda p=p, q=q: emd(p, q, method="auto"),
                    "ours": lambda p=p, q=q: emd(p, q, method="network_simplex"),
                }
                pot, arcs = pot_on_supports(p, q, diff=False)
                pot_diff, arcs_diff = pot_on_supports(p, q, diff=True)
                if arcs <= pot_max_arcs:
                    solvers["pot"] = pot
                if arcs_diff <= pot_max_arcs:
                    solvers["pot_diff"] = pot_diff
                if n <= highs_max:
                    solvers["highs"] = lambda p=p, q=q: emd(p, q, method="highs")
                pot_arcs = [a for a, name in ((arcs, "pot"), (arcs_diff, "pot_diff"))
                            if name in solvers]
                slow = max(pot_arcs, default=0) > 2e6 or (kind == "filtered" and n >= 256)
                res = race(solvers, 1 if slow else repeat)
                vals = [v for _, v, _ in res.values()]
                rel = (max(vals) - min(vals)) / max(vals)
                shape = f"{np.count_nonzero(p)}x{np.count_nonzero(q)}"
                label = f"{kind} s{seed}" if kind == "sparse" else kind
                headline.append((f"{n}x{n} {label}", [
                    (kind_, arcs_, ratio(res, "auto", name) if name in res else None)
                    for name, kind_, arcs_ in (("pot", "p,q", arcs),
                                               ("pot_diff", "diff", arcs_diff))]))

                def cell(name: str, res: dict = res) -> str:
                    return f"{res[name][0]:>8.3f}" if name in res else f"{'-':>8}"

                def rat(a: str, b: str, res: dict = res, kind: str = kind,
                        summary: dict = summary) -> str:
                    if a not in res or b not in res:
                        return f"{'-':>9}"
                    r = ratio(res, a, b)
                    if kind == "sparse":
                        summary[f"{a}/{b}".replace("pot", "POT")].append(r)
                    return f"{r:>9.2f}"

                highs = f"{res['highs'][0]:>7.2f}" if "highs" in res else f"{'-':>7}"
                print(f"{n:>4}x{n:<4} {label:>11} {shape:>11} {cell('auto')} {cell('ours')} "
                      f"{cell('pot')} {cell('pot_diff')} {rat('auto', 'pot')} "
                      f"{rat('ours', 'pot')} {rat('auto', 'ours')} {highs} {rel:>12.1e}",
                      flush=True)
        if len(seeds) > 1:
            med = {k: f"{np.median(v):.2f}" if v else "-" for k, v in summary.items()}
            print(f"{n:>4}x{n:<4} {'sparse med':>11} {'':>11} {'':>8} {'':>8} {'':>8} {'':>8} "
                  f"{med['auto/POT']:>9} {med['ours/POT']:>9} {med['auto/ours']:>9}", flush=True)
    print("\nheadline: ours ('auto', the package's default) / POT's ot.emd2 on the supports "
          "of p and q ('p,q') and of (p - q)+ and (p - q)- ('diff'), cost matrices included, "
          "time ratios in this run (< 1: ours faster):")
    for name, refs in headline:
        cells = []
        for kind, arcs, r in refs:
            cells.append(f"{kind} {arcs:.2g} arcs: " + (
                f"{r:6.3f}" if r is not None else
                f"not run (> --pot-max-arcs {pot_max_arcs:.2g}; cost matrix "
                f"{8 * arcs / 1e9:.2g} GB)"))
        print(f"  {name:>20}:  " + ";  ".join(cells))


def bench_dense(sizes: list[int], repeat: int, seed: int) -> None:
    print("\n2. dense cost matrices (k points, Euclidean): seconds and ratios")
    print(f"{'k':>6} {'auto':>8} {'ours':>8} {'ot.emd2':>8} {'auto/POT':>9} {'ours/POT':>9} "
          f"{'max rel diff':>12}")
    rng = np.random.default_rng(seed)
    for k in sizes:
        p, q, c = dense_problem(k, rng)
        res = race({
            "auto": lambda p=p, q=q, c=c: transport_cost(p, q, c),
            "ours": lambda p=p, q=q, c=c: transport_cost(p, q, c, method="network_simplex"),
            "pot": lambda p=p, q=q, c=c: float(ot.emd2(p, q, c, numItermax=10**8)),
        }, repeat if k <= 1000 else max(1, repeat // 2 + 1))
        vals = [v for _, v, _ in res.values()]
        print(f"{k:>6} {res['auto'][0]:>8.4f} {res['ours'][0]:>8.4f} {res['pot'][0]:>8.4f} "
              f"{ratio(res, 'auto', 'pot'):>9.2f} {ratio(res, 'ours', 'pot'):>9.2f} "
              f"{(max(vals) - min(vals)) / max(vals):>12.1e}", flush=True)


def bench_small(repeat: int, seed: int) -> None:
    print(f"\n3. small dense problems (POT_MIN_ARCS = {POT_MIN_ARCS}): microseconds per call")
    print(f"{'k':>6} {'arcs':>6} {'ours':>8} {'ot.emd2':>8} {'ours/POT':>9} {'auto':>8}")
    rng = np.random.default_rng(seed)
    for k in (5, 10, 15, 20, 25, 30, 40, 60):
        p, q, c = dense_problem(k, rng)
        fo = lambda p=p, q=q, c=c: transport_cost(p, q, c, method="network_simplex")  # noqa: E731
        fp = lambda p=p, q=q, c=c: float(ot.emd2(p, q, c))  # noqa: E731
        fa = lambda p=p, q=q, c=c: transport_cost(p, q, c)  # noqa: E731
        to = min(timeit.repeat(fo, number=100, repeat=max(3, repeat))) / 100
        tp = min(timeit.repeat(fp, number=100, repeat=max(3, repeat))) / 100
        ta = min(timeit.repeat(fa, number=100, repeat=max(3, repeat))) / 100
        print(f"{k:>6} {k * k:>6} {to * 1e6:>8.1f} {tp * 1e6:>8.1f} {to / tp:>9.2f} "
              f"{ta * 1e6:>8.1f}", flush=True)


def bench_crossover(seed: int) -> None:
    print(f"\n4. grid flow (ours) vs POT on the supports of (p - q)+, (p - q)- "
          f"(SUPPORT_ARCS_FACTOR = {SUPPORT_ARCS_FACTOR})")
    print(f"{'grid':>9} {'points':>7} {'arcs':>9} {'arcs/(N^2)^1.5':>15} {'ours':>8} "
          f"{'POT':>8} {'ours/POT':>9}")
    for n in (48, 64, 96, 128, 192, 256):
        for users in (100, 200, 400, 800, 1600, 3200, 6400):
            p, q = grid_inputs(n, seed, users)["sparse"]
            a, b = p.ravel() / p.sum(), q.ravel() / q.sum()
            d = a - b
            pos, neg = np.flatnonzero(d > 0), np.flatnonzero(d < 0)
            arcs = pos.size * neg.size
            x = arcs / (n * n) ** 1.5
            if x > 3 or arcs > 6e6:
                continue
            cost = l1_costs(pos, neg, n)
            res = race({
                "ours": lambda a=a, b=b, n=n: transport_cost(a, b, GridL1(n, n),
                                                             method="network_simplex"),
                "pot": lambda d=d, pos=pos, neg=neg, cost=cost: float(
                    ot.emd2(d[pos], -d[neg], cost, numItermax=10**8)),
            }, 3)
            print(f"{n:>4}x{n:<4} {5 * users:>7} {arcs:>9} {x:>15.3f} {res['ours'][0]:>8.3f} "
                  f"{res['pot'][0]:>8.3f} {ratio(res, 'ours', 'pot'):>9.2f}", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[64, 128, 256],
                    help="grid sides N (N x N)")
    ap.add_argument("--dense", nargs="*", type=int, default=[300, 1000, 2000],
                    help="numbers of points of the dense cost matrices")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3,
                    help="sparse grid inputs from seeds SEED .. SEED + SEEDS - 1")
    ap.add_argument("--highs-max", type=int, default=0,
                    help="also time HiGHS on grids up to this side (minutes at 256)")
    ap.add_argument("--pot-max-arcs", type=float, default=5e6,
                    help="skip POT on a formulation above this many arcs (the filtered "
                         "64x64 pair on the supports of p and q has 1.7e7: ~15-45 s)")
    ap.add_argument("--small", action="store_true", help="section 3 (POT_MIN_ARCS)")
    ap.add_argument("--crossover", action="store_true",
                    help="section 4 (SUPPORT_ARCS_FACTOR), minutes")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    emd(np.eye(3), np.ones((3, 3)), method="network_simplex")
    transport_cost([0.5, 0.5], [0.5, 0.5], np.ones((2, 2)), method="network_simplex")
    print(f"warm-up (numba compile or cache load): {time.perf_counter() - t0:.2f} s; POT "
          f"{ot.__version__}, numpy {np.__version__}")
    if args.sizes:
        bench_grid(args.sizes, args.repeat, list(range(args.seed, args.seed + args.seeds)),
                   args.highs_max, args.pot_max_arcs)
    if args.dense:
        bench_dense(args.dense, args.repeat, args.seed)
    if args.small:
        bench_small(args.repeat, args.seed)
    if args.crossover:
        bench_crossover(args.seed)


if __name__ == "__main__":
    main()
