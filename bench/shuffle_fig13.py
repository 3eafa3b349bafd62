"""Fig. 13 of [Ghazi23]_ (App. F): utility against the scaling factor B (B = inf is central).

Synthetic Gaussian-mixture data (shuffledp.datasets.synthetic_mixture; the paper uses
SALICON, not bundled) on a 320x240 grid with n = 50 users, eps = 5, delta = 1e-5, w = 20.
Metrics are those of analyzers.metrics.all_metrics against the true normalised aggregate,
averaged over ``--runs`` noise draws on the same data (95% normal intervals for EMD).

B = inf rows: ``central (replace)`` is the central Laplace mechanism under the protocol's
neighbour notion (replace one user: sensitivity 2 per level, i.e. central at eps/2), the
limit the shuffle estimate converges to; ``central (add/remove)`` is central_heatmap at eps.

Run: ``python bench/shuffle_fig13.py [--runs 5] [--n 50]``

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import argparse

import numpy as np

from shuffledp import Grid
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.metrics import all_metrics
from shuffledp.datasets import synthetic_mixture
from shuffledp.protocol.runner import shuffle_heatmap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--grid", default="320x240")
    ap.add_argument("--Bs", default="1,4,16,64,256,1024")
    args = ap.parse_args()
    grid = Grid.parse(args.grid)
    users = synthetic_mixture(args.n, rng=0).to_users(grid)
    truth = users.aggregate() / users.n_users
    eps, delta = 5.0, 1e-5
    seeds = np.random.SeedSequence(2023)
    rows = []

    def run(label, make):
        ms = []
        for s in seeds.spawn(args.runs):
            rel = make(np.random.default_rng(s))
            ms.append(all_metrics(truth, rel.estimate, grid))
        keys = list(ms[0])
        mean = {k: float(np.mean([m[k] for m in ms])) for k in keys}
        e = np.array([m["emd"] for m in ms])
        half = 1.96 * e.std(ddof=1) / np.sqrt(e.size) if e.size > 1 else float("nan")
        rows.append((label, mean, half))
        print(f"{label:>22} " + " ".join(f"{k}={mean[k]:.4g}" for k in keys)
              + f"  (emd +/- {half:.2g})", flush=True)

    print(f"Fig. 13: {grid}, n={users.n_users}, eps={eps}, delta={delta}, runs={args.runs}")
    for B in (int(b) for b in args.Bs.split(",")):
        run(f"B={B}", lambda g, B=B: shuffle_heatmap(users, epsilon=eps, delta=delta, B=B, rng=g,
                                                     dropout=0.0))  # as the paper
    n_replace = len(rows)
    b_max = max(int(b) for b in args.Bs.split(","))
    run(f"B={b_max} zero-out",
        lambda g: shuffle_heatmap(users, epsilon=eps, delta=delta, B=b_max, rng=g,
                                  neighbour="zero_out", dropout=0.0))
    run("B=inf central (replace)",
        lambda g: central_heatmap(users, eps, neighbour="replace", rng=g))
    run("central (add/remove)", lambda g: central_heatmap(users, eps, rng=g))
    ref = rows[-2][1]["emd"]
    for label, mean, _ in rows[:n_replace]:
        print(f"{label:>22}: EMD / central(replace) EMD = {mean['emd'] / ref:.3f}")
    # like for like: zero-out shuffle vs central add/remove (both sensitivity 1 per level)
    print(f"{rows[n_replace][0]:>22}: EMD / central(add/remove) EMD = "
          f"{rows[n_replace][1]['emd'] / rows[-1][1]['emd']:.3f}")


if __name__ == "__main__":
    main()
