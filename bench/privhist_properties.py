"""Entropy, support size and support coverage from PrivHist vs the non-private estimators.

Data: n samples from Zipf(1.0) over k = 1000 symbols (the true entropy, support 1000 and
expected coverage are known exactly). For each n and eps, 10 seeded trials (an evaluation,
not a release) of: the non-private estimators on the sample's histogram, and the same linear
estimators on PrivHist's release (histogram H and total N, [Suresh19]_ Sec. 3.2). Printed:
mean absolute error against the truth.

* entropy (nats): plug-in and Miller-Madow;
* normalised support size: labels seen / k (the truth is 1);
* support coverage at m = n / 2: the exactly unbiased subsample estimator (truth:
  sum_x (1 - (1 - p_x)^m) / m).

Usage: python bench/privhist_properties.py

References
----------
.. [Suresh19] A. T. Suresh, "Differentially private anonymized histograms", NeurIPS 2019,
   Sec. 3.2. arXiv:1910.03553.
"""

from __future__ import annotations

import time

import numpy as np

from shuffledp.analyzers.privhist import AnonHistogram, privhist
from shuffledp.analyzers.privhist.properties import (
    coverage_unbiased,
    entropy,
    entropy_miller_madow,
)

K = 1000


def main() -> None:
    t0 = time.perf_counter()
    p = 1.0 / np.arange(1, K + 1)
    p /= p.sum()
    h_true = float(-(p * np.log(p)).sum())
    print(f"Zipf(1.0), k={K}: entropy {h_true:.4f} nats; mean |error| over 10 trials")
    print(f"{'n':>7} {'eps':>4} | {'H plug':>7} {'H MM':>7} {'S/k':>6} {'cov':>7} | "
          f"{'H plug':>7} {'H MM':>7} {'S/k':>6} {'cov':>7}   (non-private | PrivHist)")
    for n in (1000, 3000, 10000, 30000, 100000):
        m = n // 2
        cov_true = float(np.sum(1 - (1 - p) ** m) / m)
        for eps in (0.5, 2.0):
            rows = []
            for t in range(10):
                g = np.random.default_rng(100 * n + t)
                c = g.multinomial(n, p)
                h = AnonHistogram.from_counts(c[c > 0])
                rel = privhist(h, eps, rng=g)
                out = []
                for hh, nn in ((h, n), (rel.histogram, max(rel.total, 1))):
                    out += [abs(entropy(hh, nn) - h_true),
                            abs(entropy_miller_madow(hh, nn) - h_true),
                            abs(hh.support / K - 1.0),
                            abs(coverage_unbiased(hh, nn, min(m, nn)) - cov_true)]
                rows.append(out)
            e = np.mean(rows, axis=0)
            print(f"{n:>7} {eps:>4} | {e[0]:>7.4f} {e[1]:>7.4f} {e[2]:>6.3f} {e[3]:>7.4f} | "
                  f"{e[4]:>7.4f} {e[5]:>7.4f} {e[6]:>6.3f} {e[7]:>7.4f}", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
