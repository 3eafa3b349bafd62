"""Table 2(b) of [Imola]_ measured: FreqEstLocal with GKRR vs a user-level DP baseline.

For each setting the script draws users' datasets on the product space B x C (s clusters of
t items, distance r inside a cluster, 1 across), runs

* metric: :func:`shuffledp.analyzers.metric.freq.freq_est_local` with GKRR, alpha0 the largest value
  whose Thm 4.4 alpha does not exceed the target (local: Thm 6.6; central: Cor. 6.8),
* baselines, local model: :func:`shuffledp.analyzers.metric.user_level.user_level_krr` (one
  sampled item per user through epsilon-k-RR; ``err_base``) and
  :func:`shuffledp.analyzers.metric.hadamard_response.user_level_hadamard` (one sampled item
  through epsilon-Hadamard response, the mechanism family of Lemma 6.4; ``err_hr``),
* baseline, central model: the Laplace mechanism of Lemma 6.7 on the pooled normalised
  histogram, calibrated HERE as Lap(2 / (n epsilon)) per cell (replacing one user's m items
  moves the pooled histogram by at most 2/n in l1; the paper writes 1/(n epsilon)), noise
  recentred to keep total mass 1. Float Laplace: a measurement, not a release.

and reports the exact d_EM (:func:`product_emd`) of each estimate to the true pooled
histogram K~, averaged over seeded repetitions. The baseline's epsilon is alpha r with
alpha the ACHIEVED Thm 4.4 alpha (the library default; [Imola]_ Sec. 6.2 calibrates
alpha = epsilon / r), so both sides protect two items of one cluster equally.

``default``: what ``shuffledp metric freq`` releases by default for the setting
(:func:`choose_freq_mechanism`: GKRR or Hadamard response, local model), starred when it is
the measured winner, "~" when within 10% of it.

Theory columns: ``thm66`` is the right-hand side of Thm 6.6 (also the error of Cor. 6.8)
evaluated at the alpha0 actually used; ``rate_b`` is the baseline's O-rate with constant 1
(Lemma 6.4 local: sqrt(k^2 ln(m/delta) / (n eps^2)) -- that lemma is for Hadamard response
with composition, our k-RR substitute differs; Lemma 6.7 central: k / (n eps)). Their ratio
``pred`` is only indicative (unknown constants); ``pred1`` is the same ratio without Lemma
6.4's ln(m/delta) factor, which comes from composing m per-item reports and which a
one-report baseline does not pay.

Usage::

    python bench/metric_table2.py --quick      # < 30 s
    python bench/metric_table2.py              # full sweep (~3 min)
    python bench/metric_table2.py --paper      # add the paper's location example
                                               # (n=1e5, m=1e3, alpha=25, central; ~1 min)

References
----------
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level" (preprint). Table 2(b), Lemma 6.4, Thm 6.6, Lemma 6.7, Cor. 6.8.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace

import numpy as np

from shuffledp.analyzers.metric.freq import choose_freq_mechanism, freq_est_local, product_emd
from shuffledp.analyzers.metric.hadamard_response import user_level_hadamard


@dataclass(frozen=True)
class Setting:
    model: str
    n: int
    m: int
    s: int
    t: int
    alpha: float
    r: float = 0.01
    delta: float = 1e-12


def draw_users(st: Setting, rng: np.random.Generator) -> np.ndarray:
    """Each user has a home cluster (Zipf over clusters); 90% of her items fall in it."""
    k = st.s * st.t
    pc = 1.0 / np.arange(1, st.s + 1)
    home = rng.choice(st.s, size=st.n, p=pc / pc.sum())
    pin = 1.0 / np.arange(1, st.t + 1) ** 0.7
    inner = rng.choice(st.t, size=(st.n, st.m), p=pin / pin.sum())
    items = home[:, None] * st.t + inner
    away = rng.random((st.n, st.m)) < 0.1
    items[away] = rng.integers(0, k, size=int(away.sum()))
    return items


def thm66(st: Setting, a0: float) -> float:
    """Right-hand side of Thm 6.6 of [Imola]_ at alpha0 = a0 (N = m n items)."""
    s, t, r, N = st.s, st.t, st.r, st.m * st.n
    e0, e1 = math.exp(a0), math.exp((1 - r) * a0)
    return (r * math.sqrt(s * t**3 / N) * (e0 + s) / (e0 - e1)
            + math.sqrt(s * s * t * t / N) * math.sqrt(s + 2 * (e0 - 1)) / (e0 + (t - 1) * e1 - t))


def baseline_rate(st: Setting, eps: float, *, one_report: bool = False) -> float:
    """Lemma 6.4 (local) / Lemma 6.7 (central) rate with constant 1; ``one_report`` drops the
    ln(m / delta) of Lemma 6.4's per-item composition (a user who sends ONE report of one
    sampled item, as both local baselines here do, pays no composition)."""
    k = st.s * st.t
    if st.model == "local":
        log = 1.0 if one_report else math.log(st.m / st.delta)
        return math.sqrt(k * k * log / (st.n * eps * eps))
    return k / (st.n * eps)


def run(st: Setting, reps: int) -> dict:
    em, eb, eh, a0, ach = [], [], [], 0.0, 0.0
    for rep in range(reps):
        rng = np.random.default_rng(1000 * rep + 7)
        users = draw_users(st, rng)
        k = st.s * st.t
        truth = np.bincount(users.ravel(), minlength=k) / users.size
        rel = freq_est_local(users, st.s, st.t, st.r, st.delta, st.model,
                             target_alpha=st.alpha,
                             baseline="krr" if st.model == "local" else None, rng=rng)
        a0, ach = rel.alpha0, rel.guarantee.epsilon
        eps_b = ach * st.r
        em.append(product_emd(st.s, st.t, st.r, rel.estimate, truth))
        if st.model == "local":
            base = rel.baseline.estimate
            hr = user_level_hadamard(users, k, eps_b, rng=rng).estimate
            eh.append(product_emd(st.s, st.t, st.r, hr, truth))
        else:
            y = rng.laplace(0.0, 2.0 / (st.n * eps_b), size=k)
            base = truth + y - y.mean()
        eb.append(product_emd(st.s, st.t, st.r, base, truth))
        del users
    eps_b = ach * st.r
    auto = (choose_freq_mechanism(st.n, st.m, st.s, st.t, st.r, st.delta, st.model,
                                  target_alpha=st.alpha)["choice"]
            if st.model == "local" else "gkrr")
    return {"auto": auto, "alpha0": a0, "alpha_ach": ach, "eps_b": eps_b,
            "err_m": float(np.mean(em)),
            "err_b": float(np.mean(eb)), "err_h": float(np.mean(eh)) if eh else math.nan,
            "thm66": thm66(st, a0), "rate_b": baseline_rate(st, eps_b),
            "rate_1": baseline_rate(st, eps_b, one_report=True)}


HEADER = (f"{'vary':>5} {'model':>7} {'n':>7} {'m':>5} {'k':>4} {'alpha':>6} {'ach':>6} "
          f"{'alpha0':>8} {'eps_b':>6} {'err_metric':>10} {'err_base':>10} {'b/m':>7} "
          f"{'err_hr':>10} {'hr/m':>6} {'thm66':>9} {'rate_b':>9} {'pred':>7} {'pred1':>6} "
          f"{'default':>9}")


def row(vary: str, st: Setting, res: dict) -> str:
    ratio = res["err_b"] / res["err_m"]
    pred = res["rate_b"] / res["thm66"]
    return (f"{vary:>5} {st.model:>7} {st.n:>7} {st.m:>5} {st.s * st.t:>4} {st.alpha:>6g} "
            f"{res['alpha_ach']:>6.3g} {res['alpha0']:>8.4g} {res['eps_b']:>6.3g} "
            f"{res['err_m']:>10.3e} {res['err_b']:>10.3e} {ratio:>7.3g} "
            f"{res['err_h']:>10.3e} {res['err_h'] / res['err_m']:>6.3g} "
            f"{res['thm66']:>9.3e} {res['rate_b']:>9.3e} {pred:>7.3g} "
            f"{res['rate_1'] / res['thm66']:>6.3g} {_default(res):>9}")


def _default(res: dict) -> str:
    """The mechanism ``metric freq`` releases by default: "*" when it has the smaller
    measured error here (local: GKRR vs Hadamard response), "~" when it is within 10% of it
    (a tie at 5 repetitions)."""
    if math.isnan(res["err_h"]):
        return res["auto"]
    err = {"gkrr": res["err_m"], "hadamard": res["err_h"]}
    mine, best = err[res["auto"]], min(err.values())
    return res["auto"] + ("*" if mine == best else "~" if mine <= 1.1 * best else "")


def sweeps(quick: bool) -> list[tuple[str, Setting]]:
    out: list[tuple[str, Setting]] = []
    # local model: Thm 4.3 needs m > 16 ln(4m/delta) (about 600 at delta=1e-12)
    loc = Setting("local", n=1000 if quick else 3000, m=1000, s=4, t=4, alpha=25)
    cen = Setting("central", n=1000 if quick else 10000, m=200, s=4, t=4, alpha=25)
    for base in (loc, cen):
        ns = (300, 1000, 3000) if quick else (1000, 3000, 10000)
        ms = ((800, 1000, 2000) if base.model == "local" else (50, 200, 800))
        for n in ns:
            out.append(("n", replace(base, n=n)))
        for m in ms:
            out.append(("m", replace(base, m=m)))
        for s, t in ((2, 2), (4, 4), (8, 8)):
            out.append(("k", replace(base, s=s, t=t)))
        for a in (2, 5, 25):
            out.append(("alpha", replace(base, alpha=a)))
        for r in (0.002, 0.01, 0.05):
            out.append(("r", replace(base, r=r)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sweep, under 30 s")
    ap.add_argument("--paper", action="store_true",
                    help="also run the paper's location example (n=1e5, m=1e3, central)")
    ap.add_argument("--reps", type=int, default=None, help="seeded repetitions per setting")
    args = ap.parse_args()
    reps = args.reps or (5 if args.quick else 4)
    t0 = time.perf_counter()
    print(f"d_EM error to the true pooled histogram, mean of {reps} seeded reps; "
          "r=0.01 unless varied, "
          "delta=1e-12 (the paper's); b/m = err_base / err_metric (> 1: metric wins)")
    print(HEADER)
    picked: list[str] = []
    for vary, st in sweeps(args.quick):
        res = run(st, reps)
        print(row(vary, st, res), flush=True)
        if st.model == "local":
            picked.append(_default(res)[-1])
    if args.paper:
        st = Setting("central", n=100_000, m=1000, s=4, t=4, alpha=25, r=0.01, delta=1e-12)
        print(row("paper", st, run(st, 1)), flush=True)
    print(f"local model: the default released the measured winner in {picked.count('*')} of "
          f"{len(picked)} settings, one within 10% of it in {picked.count('~')}, a worse one "
          f"in {len(picked) - picked.count('*') - picked.count('~')}")
    print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
