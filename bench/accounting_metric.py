"""PrivEMDItemWise ([Imola]_ Thm 4.4): alpha against alpha0, local and central, and inverses.

Run: python bench/accounting_metric.py

References
----------
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level" (preprint).
"""

from __future__ import annotations

from shuffledp.accounting.metric.shuffle import (
    emd_itemwise,
    emd_itemwise_alpha0,
    thm43_validity_limit,
)

DELTA = 1e-12
N_USERS = 10**5


def row(a0, m, model, n=None):
    b = emd_itemwise(a0, m, DELTA, model, n)
    dout = f"{b.delta_out:.3g}" if b.delta_out < 1e300 else "inf"
    return (f"{model:>7} {m:>5} {a0:>8.4g} {b.alpha:>12.5g} {b.composition_alpha:>10.4g} "
            f"{dout:>10} {b.valid!s:>6}")


def main() -> None:
    print(f"delta = {DELTA:g}, central model with n = {N_USERS}")
    print(f"{'model':>7} {'m':>5} {'alpha0':>8} {'alpha':>12} {'m*alpha0':>10} "
          f"{'delta_out':>10} {'valid':>6}")
    for m in (10, 100, 1000):
        lim_l = thm43_validity_limit(m, DELTA)
        lim_c = thm43_validity_limit(m * N_USERS, DELTA)
        for a0 in (0.01, 0.03, 0.1, 0.3, 1.0, 2.0, 2.7, 3.0, 5.0):
            print(row(a0, m, "local"))
            print(row(a0, m, "central", N_USERS))
        print(f"  validity limits: local {lim_l:.4g}, central {lim_c:.4g}")
    print()
    print("inverse at alpha = 25 (paper example of Sec. 4.2 is central, m = 1000):")
    print(f"{'model':>7} {'m':>5} {'alpha0':>10} {'alpha':>9} {'delta_out':>10} "
          f"{'limited_by':>10} {'compos.':>8} {'eq6/7':>9} {'alpha@eq6/7':>11}")
    for m in (10, 100, 1000):
        for model in ("local", "central"):
            n = N_USERS if model == "central" else None
            try:
                inv = emd_itemwise_alpha0(25.0, m, DELTA, model, n)
            except ValueError as exc:
                print(f"{model:>7} {m:>5}  unreachable: {exc}")
                continue
            print(f"{model:>7} {m:>5} {inv.alpha0:>10.5g} {inv.bound.alpha:>9.5g} "
                  f"{inv.bound.delta_out:>10.3g} {inv.limited_by:>10} "
                  f"{inv.composition_alpha0:>8.4g} {inv.asymptotic_alpha0:>9.4g} "
                  f"{inv.asymptotic_alpha:>11.4g}")


if __name__ == "__main__":
    main()
