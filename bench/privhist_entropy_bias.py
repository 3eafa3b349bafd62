"""Bias of the entropy estimated from PrivHist's release at small eps, with 95% intervals.

Data: n samples from Zipf(1.0) over k = 1000 symbols; ``--trials`` seeded trials per (n, eps)
(an evaluation, not a release). For each, the plug-in entropy of PrivHist's release (the
default ``privhist``) minus the plug-in entropy of the sample's own histogram, with the
plug-in probabilities p_r = r / N normalised two ways: by the release's separately noisy
total N (``rel.total``), and by the released histogram's own total sum_r r phi_r
(``rel.histogram.n``; post-processing, what ``shuffledp privhist`` and
``privhist_properties`` use). With N the probabilities need not sum to 1, which is where
most of the bias at small eps came from; what remains with the histogram's own total is
HighPrivacy's smoothing (prevalences averaged over intervals flatten the histogram, which
raises a plug-in entropy: Jensen), printed here with its interval.

    python bench/privhist_entropy_bias.py [--trials 20]

References
----------
.. [Suresh19] Suresh (2019), "Differentially private anonymized histograms", Sec. 3.2 --
   full entry in docs/references.md
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from shuffledp.analyzers.privhist import AnonHistogram, privhist
from shuffledp.analyzers.privhist.properties import entropy

K = 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    args = ap.parse_args()
    p = 1.0 / np.arange(1, K + 1)
    p /= p.sum()
    print(f"Zipf(1.0), k={K}, {args.trials} trials: entropy(release) - entropy(sample), nats, "
          "mean +/- 95% half-width [trials with a positive sign]")
    for n in (1000, 3000, 10000):
        for eps in (0.1, 0.5, 2.0):
            by_n, by_h = [], []
            for t in range(args.trials):
                g = np.random.default_rng(1000 * n + t)
                c = g.multinomial(n, p)
                h = AnonHistogram.from_counts(c[c > 0])
                rel = privhist(h, eps, rng=g)
                base = entropy(h, n)
                by_n.append(entropy(rel.histogram, max(rel.total, 1)) - base)
                by_h.append(entropy(rel.histogram, max(rel.histogram.n, 1)) - base)
            cols = []
            for d in (np.array(by_n), np.array(by_h)):
                half = 1.96 * d.std(ddof=1) / math.sqrt(d.size)
                cols.append(f"{d.mean():+8.4f} +/- {half:.4f} [{int((d > 0).sum()):>2d}]")
            print(f"n={n:>6d} eps={eps:<4g} by noisy N: {cols[0]}   by the histogram's own "
                  f"total: {cols[1]}", flush=True)


if __name__ == "__main__":
    main()
