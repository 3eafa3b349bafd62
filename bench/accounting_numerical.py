"""Clones bound: numerical (exact divergence of the reduction) vs closed form, with timings.

Run: python bench/accounting_numerical.py [--quick]
"""

from __future__ import annotations

import sys
import time

from shuffledp.accounting.clones import clones_closed_form, clones_numerical


def main(quick: bool = False) -> None:
    ns = [10**4, 10**5, 10**6] if quick else [10**4, 10**5, 10**6, 10**7, 10**8]
    print(f"{'n':>10} {'eps0':>5} {'delta':>7} {'eps_upper':>11} {'eps_lower':>11} "
          f"{'closed_form':>11} {'cf_valid':>8} {'seconds':>8}")
    for delta in (1e-6, 1e-8):
        for eps0 in (0.5, 1.0, 2.0, 4.0):
            for n in ns:
                t = time.perf_counter()
                b = clones_numerical(n, eps0, delta)
                dt = time.perf_counter() - t
                cf = clones_closed_form(n, eps0, delta)
                print(f"{n:>10} {eps0:>5} {delta:>7.0e} {b.epsilon:>11.6g} "
                      f"{b.epsilon_lower:>11.6g} {cf.epsilon:>11.6g} {cf.valid!s:>8} "
                      f"{dt:>8.3f}")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
