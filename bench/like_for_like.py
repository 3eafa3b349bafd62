"""Like for like: the shuffle protocol at large B against the central release, same eps and
neighbour relation.

Both releases run under the toolkit's one default relation
(:data:`~shuffledp.accounting.guarantee.DEFAULT_NEIGHBOUR`, zero-out: one user's
contribution replaced by the empty one, n public, sensitivity 1 per level), at the same
epsilon, w and gamma and the same default per-level budget split (``budget="auto"`` on both
sides: the same eps_i), on the same users. The shuffle protocol's summed Polya noise is
DL(exp(-eps_i / B)) / B per level and the central release's DL(exp(-eps_i / R)) / R at
R = 2^20, so as B grows the two converge ([Ghazi23]_ App. F, Fig. 13) and the ratio of their
errors tends to 1. For contrast the replace-one lines (sensitivity 2 per level, twice the
noise) are printed with the relation they used; comparing a replace-one shuffle with a
zero-out (or add/remove) central release is not like for like.

Metric: EMD between Gaussian-filtered heatmaps (sigma 2 px, [Ghazi23]_ Sec. 2.3 and 4),
truth = the normalised non-private aggregate; mean over ``--runs`` noise draws with a 95%
normal interval, and the ratio of means with a 95% interval (delta method). The shuffle
protocol is planned with ``dropout=0`` here so that its noise is exactly DL at n users
(the default plans for 5% dropout, about +2.6% noise std: printed too).

    python bench/like_for_like.py [--runs 30] [--n 300] [--grid 32] [--eps 1]

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from shuffledp import Grid
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.metrics import emd
from shuffledp.analyzers.heatmap.render import gaussian_heatmap
from shuffledp.datasets import synthetic_mixture
from shuffledp.protocol.runner import shuffle_heatmap


def mean_ci(x: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95% normal interval."""
    return float(x.mean()), float(1.96 * x.std(ddof=1) / math.sqrt(x.size))


def ratio_ci(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """mean(a) / mean(b) and the half-width of its 95% interval (independent samples,
    delta method)."""
    ma, mb = a.mean(), b.mean()
    r = ma / mb
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    return float(r), float(1.96 * r * math.sqrt(va / ma**2 + vb / mb**2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--grid", default="32")
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--Bs", default="256,4096")
    ap.add_argument("--sigma", type=float, default=2.0)
    args = ap.parse_args()
    grid = Grid.parse(args.grid)
    users = synthetic_mixture(args.n, rng=0).to_users(grid)
    truth = gaussian_heatmap(users.aggregate() / users.n_users, args.sigma)
    eps, delta = args.eps, args.delta
    seeds = np.random.SeedSequence(2026).spawn(args.runs)
    default = DEFAULT_NEIGHBOUR.token
    print(f"like for like: {grid} grid, n={users.n_users}, eps={eps}, delta={delta} (shuffle), "
          f"{args.runs} runs, EMD on heatmaps filtered with sigma={args.sigma} px; default "
          f"relation {default}")

    def run(make) -> np.ndarray:
        return np.array([emd(truth, gaussian_heatmap(make(np.random.default_rng(s)).estimate,
                                                      args.sigma), grid) for s in seeds])

    lines: dict[str, np.ndarray] = {}

    def line(label: str, make) -> None:
        lines[label] = e = run(make)
        m, h = mean_ci(e)
        print(f"{label:>44s}  EMD {m:.4f} +/- {h:.4f}", flush=True)

    # both sides at their one default budget split ("auto"): like for like
    line(f"central, {default}", lambda g: central_heatmap(users, eps, rng=g))
    line("central, replace", lambda g: central_heatmap(users, eps, neighbour="replace", rng=g))
    Bs = [int(b) for b in args.Bs.split(",")]
    for B in Bs:
        line(f"shuffle B={B}, {default}, dropout 0",
             lambda g, B=B: shuffle_heatmap(users, epsilon=eps, delta=delta, B=B, rng=g,
                                            dropout=0.0))
    b_max = max(Bs)
    line(f"shuffle B={b_max}, {default}, dropout 0.05",
         lambda g: shuffle_heatmap(users, epsilon=eps, delta=delta, B=b_max, rng=g))
    line(f"shuffle B={b_max}, replace, dropout 0",
         lambda g: shuffle_heatmap(users, epsilon=eps, delta=delta, B=b_max, rng=g,
                                   neighbour="replace", dropout=0.0))
    ref = lines[f"central, {default}"]
    print("ratios of mean EMD (95% interval):")
    for label, e in lines.items():
        if label.startswith("shuffle"):
            rel = default if f", {default}," in label else "replace"
            r, h = ratio_ci(e, ref if rel == default else lines["central, replace"])
            print(f"{label:>44s} / central, {rel}: {r:.3f} +/- {h:.3f}")
    r, h = ratio_ci(lines[f"shuffle B={b_max}, replace, dropout 0"], ref)
    print(f"{'not like for like: shuffle replace':>44s} / central, {default}: {r:.3f} +/- {h:.3f}")


if __name__ == "__main__":
    main()
