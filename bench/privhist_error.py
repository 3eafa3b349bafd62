"""Expected sorted-l1 error of PrivHist and two baselines vs n and epsilon.

Mechanisms ([Suresh19]_): PrivHist's default (``split="lean"``, eps1 = eps/20, and
``regime="auto"``, HighPrivacy only while eps sqrt(N) < 20), the paper's configuration
(budget split "paper", the box's eps <= 1 switch) and App. C.1.3's "practical" split,
noisy zero-padded sorted counts + isotonic regression ([Hay09]_) and noisy prevalences, the
last two with their length derived from a noisy total bought with eps / 10 (no free public
support bound; see shuffledp.analyzers.privhist.baselines). Data: n samples from Zipf(1.0)
and Zipf(1.5) over k = max(n / 10, 10) symbols, uniform over k symbols, geometric with
p_i proportional to (1 - 1/k)^i; one dataset per (distribution, n), the error is averaged
over the mechanisms' noise (seeded Generators: an evaluation, not a release). Prints mean
sorted-l1 error (± its standard error) and whether each PrivHist variant is below both
baselines for every n >= 1e4 at every epsilon (the cells where it is not).

Target: the default must not lose to the sorted-count baseline on Zipf data at eps
in {0.3, 1, 3}; the last lines say whether it does, cell by cell.

Usage: python bench/privhist_error.py [--quick | --full]
(--quick: n <= 1e5, 2 trials; default n <= 1e6, 10 trials (4 at 1e6); --full adds 1e7)

References
----------
.. [Suresh19] A. T. Suresh, "Differentially private anonymized histograms", NeurIPS 2019,
   Sec. 4.1, App. C.1.3. arXiv:1910.03553.
.. [Hay09] M. Hay, C. Li, G. Miklau, D. Jensen, "Accurate Estimation of the Degree
   Distribution of Private Networks", ICDM 2009.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy import stats

from shuffledp.analyzers.privhist import (
    AnonHistogram,
    prevalence_baseline,
    privhist,
    sorted_count_baseline,
    sorted_l1,
)

EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)
MECHANISMS = {
    "privhist": lambda h, e, s: privhist(h, e, rng=s),  # the default: lean split, auto regime
    "privhist_paper": lambda h, e, s: privhist(h, e, split="paper", regime="paper", rng=s),
    "privhist_prac": lambda h, e, s: privhist(h, e, split="practical", regime="paper", rng=s),
    "sorted_counts": lambda h, e, s: sorted_count_baseline(h, e, rng=s),
    "prevalences": lambda h, e, s: prevalence_baseline(h, e, rng=s),
}


def distribution(name: str, k: int) -> np.ndarray:
    i = np.arange(1, k + 1, dtype=float)
    w = {"zipf1.0": i ** -1.0, "zipf1.5": i ** -1.5, "uniform": np.ones(k),
         "geometric": (1 - 1 / k) ** i}[name]
    return w / w.sum()


def sample(name: str, n: int, seed: int) -> AnonHistogram:
    k = max(n // 10, 10)
    counts = np.random.default_rng(seed).multinomial(n, distribution(name, k))
    return AnonHistogram.from_counts(counts[counts > 0])


def slope(ns: list[int], errs: list[float]) -> float:
    """Least-squares slope of log(error) against log(n)."""
    return float(np.polyfit(np.log(ns), np.log(errs), 1)[0])


def main() -> None:
    quick = "--quick" in sys.argv
    full = "--full" in sys.argv
    ns = (10**3, 10**4, 10**5) if quick else (10**3, 10**4, 10**5, 10**6) + ((10**7,) if full
                                                                              else ())
    t0 = time.perf_counter()
    print("mean sorted-l1 error +- 95% CI half-width (t, trials-1 dof)")
    print(f"{'dist':>9} {'n':>8} {'eps':>5} " + " ".join(f"{m:>22}" for m in MECHANISMS))
    losses: dict[str, list[str]] = {m: [] for m in MECHANISMS if m.startswith("privhist")}
    curves: dict[tuple, list[float]] = {}
    for dist in ("zipf1.0", "zipf1.5", "uniform", "geometric"):
        for n in ns:
            h = sample(dist, n, seed=n)
            trials = 2 if quick else (4 if n >= 10**6 else 10)
            for eps in EPSILONS:
                means = {}
                cells = []
                for m, fn in MECHANISMS.items():
                    err = np.array([sorted_l1(h, fn(h, eps, 1000 * t + 7).histogram)
                                    for t in range(trials)], dtype=float)
                    means[m] = err.mean()
                    half = stats.t.ppf(0.975, trials - 1) * err.std(ddof=1) / np.sqrt(trials)
                    cells.append(f"{err.mean():>12.4g} ±{half:<9.2g}")
                    curves.setdefault((dist, eps, m), []).append(err.mean())
                print(f"{dist:>9} {n:>8} {eps:>5} " + " ".join(cells), flush=True)
                best = min(means["sorted_counts"], means["prevalences"])
                for m, lost in losses.items():
                    if n >= 10**4 and not means[m] < best:
                        tie = " (tie)" if means[m] == best else ""
                        lost.append(f"{dist} n={n} eps={eps:g}{tie}")
    print("log-log slope of error vs n (Theorem 1: sqrt(n) behaviour, slope 0.5, eps <= 1):")
    for (dist, eps, m), errs in curves.items():
        if eps <= 1 and m.startswith("privhist"):
            print(f"  {dist:>9} eps={eps:<4g} {m:>18}: {slope(list(ns), errs):.3f}")
    for m, lost in losses.items():
        print(f"{m} below both baselines for every n >= 1e4 and eps: "
              f"{'yes' if not lost else 'NO, not in ' + '; '.join(lost)}")
    bad = [f"{d} n={n} eps={e:g}: {curves[(d, e, 'privhist')][i]:.4g} vs "
           f"{curves[(d, e, 'sorted_counts')][i]:.4g}"
           for d in ("zipf1.0", "zipf1.5") for e in (0.3, 1.0, 3.0)
           for i, n in enumerate(ns) if n >= 10**4
           and not curves[(d, e, "privhist")][i] <= curves[(d, e, "sorted_counts")][i]]
    print("default privhist <= sorted counts + isotonic on Zipf, eps in {0.3, 1, 3}, "
          f"n >= 1e4: {'yes' if not bad else 'NO: ' + '; '.join(bad)}")
    for d in ("zipf1.0", "zipf1.5"):
        for e in (0.3, 1.0, 3.0):
            i = list(ns).index(10**5)
            print(f"  {d} eps={e:g} n=1e5: default / sorted = "
                  f"{curves[(d, e, 'privhist')][i] / curves[(d, e, 'sorted_counts')][i]:.2f}, "
                  f"paper / sorted = "
                  f"{curves[(d, e, 'privhist_paper')][i] / curves[(d, e, 'sorted_counts')][i]:.2f}")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
