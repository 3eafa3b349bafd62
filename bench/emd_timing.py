"""Time the exact grid EMD (shuffledp.analyzers.heatmap.metrics.emd) at several grid sizes.

Two kinds of inputs per size N x N:

* ``sparse``: two aggregates of 1000 points each from independent synthetic mixtures
  ([Ghazi23]_ App. E.3; ~a few hundred non-zero pixels), the raw distributions the paper's EMD
  bound is about;
* ``filtered``: the same aggregates after the Gaussian filter of Sec. 2.3 (sigma = N / 64
  pixels), dense maps like the heatmaps the paper's metrics compare.

Both exact solvers are timed: the numba network simplex (default) and the HiGHS LP
(``--highs-max N``: only up to N x N, default 128, since it takes minutes at 256). The first
network-simplex call is a warm-up that pays numba's compilation (cached on disk afterwards).

Usage::

    python bench/emd_timing.py              # 64 128 256
    python bench/emd_timing.py 32 64 --repeat 3 --highs-max 64

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from shuffledp.analyzers.heatmap.metrics import EMD_METHODS, emd
from shuffledp.analyzers.heatmap.render import gaussian_heatmap
from shuffledp.datasets import synthetic_mixture
from shuffledp.grid import Grid


def inputs(n: int, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    grid = Grid(n, n)
    a = synthetic_mixture(200, 20, 5, rng=seed).to_users(grid).aggregate()
    b = synthetic_mixture(200, 20, 5, rng=seed + 1000).to_users(grid).aggregate()
    sigma = n / 64
    return {
        "sparse": (a, b),
        "filtered": (gaussian_heatmap(a, sigma), gaussian_heatmap(b, sigma)),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[64, 128, 256])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--highs-max", type=int, default=128)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    emd(np.eye(3), np.ones((3, 3)))
    print(f"warm-up (numba compile or cache load): {time.perf_counter() - t0:.2f} s")
    print(f"{'grid':>9} {'input':>9} {'nonzero':>8} {'method':>16} {'EMD':>12} {'seconds':>8}")
    for n in args.sizes:
        for kind, (p, q) in inputs(n, args.seed).items():
            nz = int(np.count_nonzero(p) + np.count_nonzero(q))
            for method in EMD_METHODS:
                if method == "highs" and n > args.highs_max:
                    continue
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    value = emd(p, q, Grid(n, n), method=method)
                    times.append(time.perf_counter() - t0)
                print(
                    f"{n:>4}x{n:<4} {kind:>9} {nz:>8} {method:>16} {value:>12.9f} "
                    f"{min(times):>8.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
