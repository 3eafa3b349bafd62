"""Throughput of GKRR item sampling ([Imola]_ Sec. 6.2) with the secure generator.

Target: 1e8 items (1e5 users x 1e3 items) over a 1024-cell domain (32 clusters x
32 items) in <= 10 s on one core. Prints items/s and the time for the requested count; the
items are uniform over the domain, the word source is the ChaCha20 SecureRandom (deployment
path) unless ``--seed`` is given.

Usage::

    python bench/metric_gkrr_throughput.py                 # 1e8 items, secure
    python bench/metric_gkrr_throughput.py --items 1e7 --seed 0

References
----------
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level" (preprint).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from shuffledp.encoders.metric.mechanisms import GKRR


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=float, default=1e8)
    ap.add_argument("--s", type=int, default=32)
    ap.add_argument("--t", type=int, default=32)
    ap.add_argument("--r", type=float, default=0.1)
    ap.add_argument("--alpha0", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    n = int(a.items)
    mech = GKRR(a.s, a.t, a.r, a.alpha0)
    x = np.random.default_rng(0).integers(0, mech.space.k, size=n)
    t0 = time.perf_counter()
    y = mech.sample(x, rng=a.seed)
    dt = time.perf_counter() - t0
    src = "secure" if a.seed is None else f"seed {a.seed}"
    print(f"GKRR k={mech.space.k} alpha0={a.alpha0} r={a.r} ({src}): {n:.3g} items in "
          f"{dt:.2f} s = {n / dt:.3g} items/s; kept fraction {np.mean(y == x):.4f} "
          f"(theory {mech.probabilities()[0]:.4f})")


if __name__ == "__main__":
    main()
