"""Clones bound: numerical (exact divergence of the reduction) vs closed form, with timings.

Two tables:

1. Certification across eps0: n = 1000, delta = 1e-6, eps0 in
   {1, 10, 30, 33, 36, 37, 100, 700}. For each released (epsilon, delta) the divergence of
   the reduction pair at epsilon is recomputed independently, term by term in mpmath at 50
   digits (``tests/accounting/mp_clones.py``), and printed next to it with the divergence
   one grid step below (``epsilon_lower``), which must exceed the requested delta.
2. Numerical vs closed form and time per call over n, eps0, delta (``--quick``: fewer n).
4. ``--krr``: shuffled k-ary randomized response, the exact privacy-blanket bound for
   k in {2, 3, 10, 100} against the general (variation-ratio) bound, eps0 = 1, delta = 1e-6,
   n in {1e3, 1e4, 1e5, 1e6}, with times; then binary RR's exact worst case (n <= 1e5).
3. ``--compare``: the variation-ratio (stronger clone) bound against the clones
   bound and the closed form over n in {1e3 .. 1e8}, eps0 in {0.5, 1, 2, 4}, delta = 1e-6,
   with the time of each call and the saving of variation-ratio over clones.

Run: python bench/accounting_numerical.py [--quick] [--no-timing] [--compare] [--krr]
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path

from shuffledp.accounting.amplification.binary_rr import binary_rr_shuffle_exact
from shuffledp.accounting.amplification.clones import (
    clones_closed_form,
    clones_numerical,
    variation_ratio_numerical,
)
from shuffledp.accounting.amplification.krr_lower import krr_lower_epsilon
from shuffledp.accounting.amplification.krr_shuffle import krr_shuffle_numerical

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "accounting"))
from mp_clones import mp_divergence  # noqa: E402

CERT_EPS0 = (1.0, 10.0, 30.0, 33.0, 36.0, 37.0, 100.0, 700.0)


def certification_table(n: int = 1000, delta: float = 1e-6) -> None:
    print(f"numerical bound, n={n}, delta={delta:g}: released (epsilon, delta) and the "
          "mpmath divergence of the reduction pair")
    print(f"{'eps0':>6} {'epsilon':>12} {'delta_rel':>9} {'valid':>6} {'D_mp(eps)':>11} "
          f"{'ok':>3} {'eps_lower':>12} {'D_mp(lower)':>11} {'tight':>5} {'seconds':>8}")
    for eps0 in CERT_EPS0:
        t = time.perf_counter()
        b = clones_numerical(n, eps0, delta)
        dt = time.perf_counter() - t
        _, hi = mp_divergence(n, eps0, b.epsilon)
        ok = hi <= b.delta + 1e-40
        lo_below, _ = mp_divergence(n, eps0, b.epsilon_lower)
        tight = lo_below > delta
        print(f"{eps0:>6g} {b.epsilon:>12.6g} {b.delta:>9.0e} {b.valid!s:>6} "
              f"{float(hi):>11.3e} {'yes' if ok else 'NO':>3} {b.epsilon_lower:>12.6g} "
              f"{float(lo_below):>11.3e} {'yes' if tight else 'no':>5} {dt:>8.4f}")
    print("D_mp(eps) = 1e-42 is the reference's rounding slack: at epsilon = eps0 d the "
          "divergence is exactly 0 (valid=False: no amplification, the local (eps0, 0)).")
    print()


def timing_table(quick: bool) -> None:
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


def _timed(fn, *args):
    t = time.perf_counter()
    b = fn(*args)
    return b, time.perf_counter() - t


def compare_table(delta: float = 1e-6) -> None:
    print(f"variation-ratio vs clones vs closed form, delta={delta:g} "
          "(epsilon certified; '-' = closed form not valid)")
    print(f"{'n':>10} {'eps0':>5} {'var_ratio':>11} {'sec':>6} {'clones':>11} {'sec':>6} "
          f"{'closed':>9} {'saving':>7}")
    for eps0 in (0.5, 1.0, 2.0, 4.0):
        for n in (10**3, 10**4, 10**5, 10**6, 10**7, 10**8):
            vr, tv = _timed(variation_ratio_numerical, n, eps0, delta)
            cl, tc = _timed(clones_numerical, n, eps0, delta)
            cf = clones_closed_form(n, eps0, delta)
            cfs = f"{cf.epsilon:>9.4g}" if cf.valid else f"{'-':>9}"
            print(f"{n:>10} {eps0:>5} {vr.epsilon:>11.6g} {tv:>6.2f} {cl.epsilon:>11.6g} "
                  f"{tc:>6.2f} {cfs} {1 - vr.epsilon / cl.epsilon:>7.1%}")
    print()


def krr_table(eps0: float = 1.0, delta: float = 1e-6) -> None:
    print(f"shuffled k-RR: exact blanket bound vs general eps0-LDP bound, eps0={eps0:g}, "
          f"delta={delta:g}")
    print("refuted = exact divergence of shuffled k-RR on one pair of data sets exceeds delta "
          "there (no valid bound goes below it)")
    print(f"{'n':>9} {'k':>4} {'krr_blanket':>12} {'sec':>6} {'refuted':>10} {'by':>5} "
          f"{'general':>10} {'saving':>7}")
    for n in (10**3, 10**4, 10**5, 10**6):
        g = variation_ratio_numerical(n, eps0, delta).epsilon
        for k in (2, 3, 10, 100):
            b, t = _timed(functools.partial(krr_shuffle_numerical, n, eps0, delta, k=k))
            lo, fam = krr_lower_epsilon(n, eps0, delta, k=k)
            print(f"{n:>9} {k:>4} {b.epsilon:>12.6g} {t:>6.2f} {lo:>10.6g} {fam:>5} "
                  f"{g:>10.6g} {1 - b.epsilon / g:>7.1%}", flush=True)
    print()
    print("binary RR, exact worst case over every data set (binary_rr_shuffle_exact)")
    print(f"{'n':>9} {'exact':>12} {'refuted':>12} {'sec':>6} {'general':>10} {'saving':>7}")
    for n in (10**3, 10**4, 10**5):
        b, t = _timed(functools.partial(binary_rr_shuffle_exact, n, eps0, delta))
        g = variation_ratio_numerical(n, eps0, delta).epsilon
        print(f"{n:>9} {b.epsilon:>12.6g} {b.epsilon_lower:>12.6g} {t:>6.2f} {g:>10.6g} "
              f"{1 - b.epsilon / g:>7.1%}", flush=True)
    print()


def main(quick: bool = False, timing: bool = True, compare: bool = False,
         krr: bool = False) -> None:
    if krr:
        krr_table()
        return
    if compare:
        compare_table()
        return
    certification_table()
    if timing:
        timing_table(quick)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv, timing="--no-timing" not in sys.argv,
         compare="--compare" in sys.argv, krr="--krr" in sys.argv)
