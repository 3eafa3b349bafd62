"""Composition of daily releases: basic vs advanced vs PLD, and the PLD's numerical error.

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
shuffledp.accounting.pld, pessimistic, discretisation 1e-4, its numerical error bound charged.
The last column is basic / PLD.

``--numerics``: 365 compositions of DL(0.5) (sensitivity 1) at delta in {1e-10, 1e-12, 1e-14}:
the accountant's epsilon, the error bound it charged, the exact epsilon (the k-fold loss is
0.5 (2J - 365) with J binomial: its hockey-stick divergence at 60 digits, solved by mpmath)
and the exact delta at the reported epsilon over the target (<= 1: sound), next to
dp_accounting's plain FFT composition (the engine used before, which does not charge its
rounding).

Run: python bench/compose.py [--quick] [--numerics]   (--quick: skips binary RR's exact
single release)
"""

from __future__ import annotations

import sys
import time

from shuffledp.accounting.amplification.binary_rr import binary_rr_shuffle_exact
from shuffledp.accounting.amplification.krr_shuffle import krr_shuffle_numerical
from shuffledp.accounting.composition import Accountant
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


def numerics() -> None:
    import mpmath as mp
    from dp_accounting.pld import privacy_loss_distribution as dp_pld

    from shuffledp.accounting.events import DiscreteLaplace

    t, k = 0.5, 365
    mp.mp.dps = 60
    p = 1 / (1 + mp.e ** (-mp.mpf(t)))

    def exact_delta(eps) -> mp.mpf:
        e = mp.mpf(eps)
        return mp.fsum(mp.binomial(k, j) * p ** j * (1 - p) ** (k - j)
                       * (1 - mp.e ** (e - mp.mpf(t) * (2 * j - k)))
                       for j in range(k + 1) if mp.mpf(t) * (2 * j - k) > e)

    old = dp_pld.from_discrete_laplace_mechanism(
        t, sensitivity=1, pessimistic_estimate=True,
        value_discretization_interval=1e-4).self_compose(k)
    acc = Accountant(discretization=1e-4).compose(DiscreteLaplace(parameter=t), k)
    print(f"365 x DL({t}): epsilon at delta; exact delta at the reported epsilon / delta - 1 "
          "(<= 0: sound)")
    print(f"{'delta':>7s}{'accountant':>16s}{'charged':>10s}{'exact eps':>16s}"
          f"{'rel. excess':>13s}{'dp_accounting':>16s}{'rel. excess':>13s}{'time':>7s}")
    for delta in (1e-10, 1e-12, 1e-14):
        t0 = time.perf_counter()
        r = acc.epsilon(delta)
        secs = time.perf_counter() - t0
        ex = mp.findroot(lambda e, d=delta: exact_delta(e) - d, r.epsilon)
        e_old = float(old.get_epsilon_for_delta(delta))
        print(f"{delta:>7.0e}{r.epsilon:>16.9f}{r.pld_error:>10.1e}{float(ex):>16.9f}"
              f"{float(exact_delta(r.epsilon) / delta - 1):>+13.1e}{e_old:>16.9f}"
              f"{float(exact_delta(e_old) / delta - 1):>+13.1e}{secs:>6.1f}s")


if __name__ == "__main__":
    t = time.perf_counter()
    if "--numerics" in sys.argv:
        numerics()
    else:
        main("--quick" in sys.argv)
    print(f"wall time {time.perf_counter() - t:.1f} s")
