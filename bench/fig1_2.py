"""Trends of Fig. 1-2 of [Ghazi23]_ on synthetic mixtures (App. E.3): ours vs Laplace vs top-t%.

Run: python bench/fig1_2.py [--runs R] [--part eps|n|grid|all]
Metrics on Gaussian-filtered heatmaps (sigma = 2 px at 256, scaled with the grid) against the
normalised non-private aggregate; mean over R runs (different data and noise seeds).
Targets (eps = 1, n = 200, grid 256): our EMD <= 0.5 x Laplace's; ours max/min over grids
{64, 128, 256} <= 1.5 while the baseline grows.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import argparse

import numpy as np

from shuffledp.analyzers.heatmap.baselines import laplace_baseline
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.metrics import all_metrics
from shuffledp.analyzers.heatmap.release import normalise
from shuffledp.analyzers.heatmap.render import gaussian_heatmap
from shuffledp.datasets import synthetic_mixture
from shuffledp.grid import Grid

METHODS = ("ours", "laplace", "top_1%", "top_0.1%")


def one(eps: float, n: int, side: int, seed: int) -> dict[str, dict[str, float]]:
    grid = Grid(side, side)
    users = synthetic_mixture(n_users=n, rng=seed).to_users(grid)
    agg = users.aggregate()
    sigma = 2.0 * side / 256
    truth = gaussian_heatmap(normalise(agg), sigma)
    ss = np.random.SeedSequence([seed, 99]).spawn(4)
    est = {
        "ours": central_heatmap(users, eps, rng=np.random.default_rng(ss[0])).estimate,
        "laplace": laplace_baseline(agg, eps, rng=np.random.default_rng(ss[1])).estimate,
        "top_1%": laplace_baseline(agg, eps, rng=np.random.default_rng(ss[2]),
                                   top_percent=1.0).estimate,
        "top_0.1%": laplace_baseline(agg, eps, rng=np.random.default_rng(ss[3]),
                                     top_percent=0.1).estimate,
    }
    return {k: all_metrics(truth, gaussian_heatmap(v, sigma), grid) for k, v in est.items()}


def sweep(name: str, values, make, runs: int) -> None:
    print(f"\n== {name} (mean of {runs} runs) ==")
    print(f"{name:>6s} {'method':>9s} {'EMD':>8s} {'KL':>8s} {'CC':>7s} {'SIM':>7s}")
    for v in values:
        eps, n, side = make(v)
        res = [one(eps, n, side, s) for s in range(runs)]
        for m in METHODS:
            mean = {k: float(np.mean([r[m][k] for r in res])) for k in ("emd", "kl", "cc", "sim")}
            print(f"{v!s:>6s} {m:>9s} {mean['emd']:8.4f} {mean['kl']:8.3f} "
                  f"{mean['cc']:7.3f} {mean['sim']:7.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--part", default="all", choices=["eps", "n", "grid", "all"])
    a = ap.parse_args()
    if a.part in ("eps", "all"):
        sweep("eps", [0.1, 0.5, 1, 2, 5, 10], lambda e: (e, 200, 256), a.runs)
    if a.part in ("n", "all"):
        sweep("n", [50, 100, 200, 350, 500], lambda n: (1.0, n, 256), a.runs)
    if a.part in ("grid", "all"):
        sweep("grid", [64, 128, 256], lambda g: (1.0, 200, g), a.runs)


if __name__ == "__main__":
    main()
