"""Composition of daily releases: basic vs advanced vs PLD.

For 10, 100 and 365 daily releases at a total delta of 1e-6:

1. The shuffle heatmap (Ghazi et al., AAAI 2023, App. F): n = 1000 users, 256 x 256 grid,
   B = 256, eps = 1 per day under replace-one. Each day's release is planned at
   delta_day = delta / (4 k) (what basic composition needs: k delta_day <= delta); its event
   is the per-level discrete Laplace sums plus the split-and-mix distance
   (:class:`~shuffledp.accounting.events.PolyaSum`).
2. Shuffled 10-ary randomized response: n = 1e5 reports, eps0 = 1, each day certified at
   delta_day = delta / (2 k) by the exact privacy-blanket bound; PLD of the blanket pair.
3. Shuffled binary RR (n = 1e5, eps0 = 1): basic composition of the exact single-release
   worst case at delta / (2 k) (computed at k = 365 only: ~30 s per call otherwise) against
   PLD of the stronger-clone pair.

Basic: (sum eps_j, sum delta_j). Advanced: Kairouz-Oh-Viswanath 2015, Thm 3.5. PLD:
dp_accounting, pessimistic, discretisation 1e-4. The last column is basic / PLD.

Run: python bench/compose.py [--quick]   (--quick: skips binary RR's exact single release)
"""

from __future__ import annotations

import sys
import time

from shuffledp.accounting.compose import Accountant
from shuffledp.accounting.shuffle_ldp.binary_rr import binary_rr_shuffle_exact
from shuffledp.accounting.shuffle_ldp.krr_shuffle import krr_shuffle_numerical
from shuffledp.accounting.summation import summation_parameters

DELTA = 1e-6
DAYS = (10, 100, 365)


def row(name: str, k: int, event, t0: float) -> float:
    r = Accountant(discretization=1e-4).compose(event, k).epsilon(DELTA)
    adv = "-" if r.advanced is None else f"{r.advanced[0]:.4g}"
    ratio = r.basic[0] / r.pld[0]
    print(f"{name:26s}{k:>5d}{r.basic[0]:>12.4g}{adv:>12s}{r.pld[0]:>12.4g}{ratio:>9.2f}x"
          f"{time.perf_counter() - t0:>8.1f}s")
    return ratio


def main(quick: bool = False) -> None:
    print(f"total delta = {DELTA:g}; epsilon of k composed daily releases")
    print(f"{'release':26s}{'k':>5s}{'basic':>12s}{'advanced':>12s}{'PLD':>12s}"
          f"{'basic/PLD':>10s}{'time':>9s}")
    ratios = {}
    for k in DAYS:
        t0 = time.perf_counter()
        p = summation_parameters(n=1000, epsilon=1.0, delta=DELTA / (4 * k), B=256,
                                 grid="256x256")
        ratios[("heatmap", k)] = row("shuffle heatmap, eps=1/day", k, p.guarantee.event, t0)
    for k in DAYS:
        t0 = time.perf_counter()
        b = krr_shuffle_numerical(100_000, 1.0, DELTA / (2 * k), k=10)
        ratios[("krr", k)] = row("shuffled 10-RR, n=1e5", k, b.guarantee.event, t0)
    if not quick:
        t0 = time.perf_counter()
        b = binary_rr_shuffle_exact(100_000, 1.0, DELTA / (2 * 365))
        ratios[("brr", 365)] = row("shuffled binary RR, n=1e5", 365, b.guarantee.event, t0)
    for what in ("heatmap", "krr"):
        assert ratios[(what, 365)] >= 2.0, f"PLD not 2x tighter than basic for {what}"
    print("PLD is at least 2x tighter than basic at 365 releases: ok")


if __name__ == "__main__":
    t = time.perf_counter()
    main("--quick" in sys.argv)
    print(f"wall time {time.perf_counter() - t:.1f} s")
