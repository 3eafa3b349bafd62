"""Fig. 13 of [Ghazi23]_ (App. F): utility against the scaling factor B (B = inf is central).

Synthetic Gaussian-mixture data (shuffledp.datasets.synthetic_mixture; the paper uses
SALICON, not bundled) on the paper's 320x240 grid with n = 50 users, eps = 5, delta = 1e-5,
w = 20 and App. F's floor rounding (the preset ``shuffledp sweep --figure 13``). Every line
states its neighbour relation, and each comparison is like for like: the shuffle protocol and
its B = inf limit, the central release, under the same relation (zero-out, the preset's: level
sensitivity B for the protocol, 1 for the central release), then the same under replace-one
(sensitivity 2B and 2: what the protocol defaulted to). Metrics are EMD, KL, CC and SIM on
heatmaps filtered on both sides with sigma = 2.5 px (2 px per 256 px of side;
``shuffledp.sweep.SIGMA_NOTE``: the paper does not state its sigma), mean and 95% Student-t
interval over ``--runs`` noise draws on the same data (the paper: 20 runs). Both sides use
one budget split, the rule of ``shuffledp heatmap``: ``--smoothing none`` (the default, Alg.
1-2 as printed) the printed split, ``--smoothing auto`` the default ``"auto"`` split (at the
paper's setting, eps n / N = 0.003, the two are the same numbers).

Run: ``python bench/shuffle_fig13.py [--runs 20] [--n 50] [--grid 320x240]``

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import argparse

import numpy as np

from shuffledp import Grid
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.metrics import all_metrics
from shuffledp.analyzers.heatmap.release import normalise
from shuffledp.analyzers.heatmap.render import gaussian_heatmap
from shuffledp.datasets import synthetic_mixture
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.runner import shuffle_heatmap
from shuffledp.sweep import PRESETS, SIGMA_NOTE, t_interval

KEYS = ("emd", "kl", "cc", "sim")


def main() -> None:
    fig = PRESETS["13"]
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--grid", default=fig["full_grid"])
    ap.add_argument("--Bs", default=",".join(str(b) for b in fig["values"]))
    ap.add_argument("--smoothing", choices=["none", "auto"], default="none",
                    help="post-process both releases (default: Alg. 2's output, as the paper)")
    args = ap.parse_args()
    grid = Grid.parse(args.grid)
    sigma = 2.0 * max(grid.width, grid.height) / 256
    users = synthetic_mixture(args.n, rng=0).to_users(grid)
    truth = gaussian_heatmap(normalise(users.aggregate()), sigma)
    eps, delta = 5.0, 1e-5
    seeds = np.random.SeedSequence(2023)
    budget = "paper" if args.smoothing == "none" else "auto"  # one rule on both sides

    def run(label: str, nb: str, make) -> dict:
        ms = []
        for s in seeds.spawn(args.runs):
            rel = make(np.random.default_rng(s))
            if args.smoothing == "auto":
                rel = rel.smoothed()
            assert rel.guarantee.neighbour.token == nb  # the line's stated relation
            ms.append(all_metrics(truth, gaussian_heatmap(rel.estimate, sigma), grid))
        cells, mean = [], {}
        for k in KEYS:
            m, low, _ = t_interval([x[k] for x in ms])
            mean[k] = m
            cells.append(f"{k}={m:.4g} +/- {m - low:.2g}")
        print(f"{label:>14} {nb:>10}  " + "  ".join(cells), flush=True)
        return mean

    print(f"Fig. 13: {grid}, n={users.n_users}, eps={eps}, delta={delta}, runs={args.runs}, "
          f"rounding=floor, smoothing={args.smoothing}, budget={budget}; {SIGMA_NOTE}")
    bs = [int(b) for b in args.Bs.split(",")]
    for nb in (fig["neighbour"], "replace"):
        rows = {}
        for B in bs:
            params = derive_params(grid, users.n_users, epsilon=eps, delta=delta, B=B,
                                   dropout=0.0, rounding="floor", neighbour=nb, budget=budget)
            rows[B] = run(f"B={B}", nb, lambda g, B=B, p=params: shuffle_heatmap(
                users, epsilon=eps, delta=delta, B=B, rng=g, params=p))
        ref = run("B=inf central", nb, lambda g, nb=nb: central_heatmap(
            users, eps, neighbour=nb, rng=g, budget=budget))
        for B, mean in rows.items():
            print(f"{'B=' + str(B):>14} {nb:>10}  EMD / central EMD (same relation) = "
                  f"{mean['emd'] / ref['emd']:.3f}")


if __name__ == "__main__":
    main()
