"""PrivHist run time on the prevalence form, 1e4 .. 1e8 items (target: 70M items <= 2 s).

Histograms are Zipf(1.5)-like in prevalence form, built directly (phi_r proportional to
r^-2.5, scaled to n items) so that building them costs nothing; the time is privhist() alone,
median of 3 runs, seeded noise (the secure generator is timed too at 70M).

Usage: python bench/privhist_runtime.py
"""

from __future__ import annotations

import time

import numpy as np

from shuffledp.analyzers.privhist import AnonHistogram, privhist


def zipf_prevalences(n: int, a: float = 1.5) -> AnonHistogram:
    r = np.unique(np.round(np.geomspace(1, n / 50, 4000)).astype(np.int64))
    w = r.astype(float) ** -(a + 1)
    phi = np.floor(w / (w * r).sum() * n).astype(np.int64)
    keep = phi > 0
    return AnonHistogram.from_prevalences(r[keep], phi[keep])


def timed(h: AnonHistogram, eps: float, rng) -> float:
    runs = []
    for k in range(3):
        t = time.perf_counter()
        privhist(h, eps, rng=rng if rng is None else rng + k)
        runs.append(time.perf_counter() - t)
    return float(np.median(runs))


def main() -> None:
    privhist(zipf_prevalences(10**4), 1.0, rng=0)  # compile the numba kernels
    print(f"{'n':>12} {'distinct':>9} {'eps':>5} {'seconds':>8}")
    for n in (10**4, 10**5, 10**6, 10**7, 7 * 10**7, 10**8):
        h = zipf_prevalences(n)
        for eps in (0.5, 2.0):
            print(f"{h.n:>12} {len(h):>9} {eps:>5} {timed(h, eps, 1):>8.3f}")
    h = zipf_prevalences(7 * 10**7)
    print(f"{h.n} items, secure generator, eps=1: {timed(h, 1.0, None):.3f} s")


if __name__ == "__main__":
    main()
