"""PrivHist run time on the prevalence form, 1e4 .. 1e8 items (target: 70M items <= 2 s).

Two families, built directly in prevalence form so that building them costs nothing:

* Zipf(1.5)-like: phi_r proportional to r^-2.5 on about 4000 distinct counts, scaled to n;
* worst case: every count 1..K once (n = K(K+1)/2 items), the largest number of distinct
  counts n items can have (sqrt(2n)): the time PrivHist's sqrt(n) bound is about.

The time is privhist() alone, median of 3 runs, seeded noise (the secure generator is timed
too at 70M); the exponent of time against n is fitted by least squares on log-log for each
family and eps.

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


def all_distinct(n: int) -> AnonHistogram:
    K = int((np.sqrt(8 * n + 1) - 1) / 2)
    return AnonHistogram.from_prevalences(np.arange(1, K + 1), np.ones(K, dtype=np.int64))


def timed(h: AnonHistogram, eps: float, rng) -> float:
    runs = []
    for k in range(3):
        t = time.perf_counter()
        privhist(h, eps, rng=rng if rng is None else rng + k)
        runs.append(time.perf_counter() - t)
    return float(np.median(runs))


def main() -> None:
    privhist(zipf_prevalences(10**4), 1.0, rng=0)  # compile the numba kernels
    print(f"{'family':>12} {'n':>12} {'distinct':>9} {'eps':>5} {'seconds':>8}")
    fits: dict[tuple[str, float], list[tuple[int, float]]] = {}
    for name, make in (("zipf1.5", zipf_prevalences), ("all_distinct", all_distinct)):
        for n in (10**4, 10**5, 10**6, 10**7, 7 * 10**7, 10**8):
            h = make(n)
            for eps in (0.5, 2.0):
                sec = timed(h, eps, 1)
                fits.setdefault((name, eps), []).append((h.n, sec))
                print(f"{name:>12} {h.n:>12} {len(h):>9} {eps:>5} {sec:>8.3f}", flush=True)
    for (name, eps), pts in fits.items():
        n, t = np.array(pts, dtype=float).T
        big = n >= 1e6  # below, fixed overheads dominate
        print(f"exponent of time vs n ({name}, eps={eps}, n >= 1e6): "
              f"{np.polyfit(np.log(n[big]), np.log(t[big]), 1)[0]:.2f}")
    h = zipf_prevalences(7 * 10**7)
    print(f"{h.n} items, secure generator, eps=1: {timed(h, 1.0, None):.3f} s")


if __name__ == "__main__":
    main()
