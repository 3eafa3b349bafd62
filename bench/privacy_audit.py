"""Independent audit of the privacy claims of release reports.

Every release's ``report.json`` states a guarantee (epsilon, delta) under a neighbour
relation and records the parameters of the mechanism that produced it. This script
recomputes, for each report, what those parameters actually guarantee, with its own
formulas (it imports nothing from ``shuffledp``: only mpmath at 60 digits and the standard
library), and compares with the claim:

* an **upper bound** on the hockey-stick divergence delta(eps) at the claimed eps, from the
  exact law where one exists (the pure epsilon of a vector discrete Laplace under its l1
  sensitivity; the total variation of split-and-mix and of the noise sampler, converted
  by (1 + e^eps) tau), or from the cited theorem re-evaluated;
* an exact **lower bound** on delta(eps) from one concrete neighbouring pair and a
  projection of the output (a post-processing, so it can only shrink delta): the
  discrete Laplace pair at its worst shift, the one-cell law of a federated round for n
  and n +- 1 users, the count of one item in a shuffled metric release.

A claim is ``sound`` when the upper bound is <= the claimed delta, ``UNSOUND`` when the
lower bound exceeds it, ``unproven`` otherwise. The final line counts the unsound claims.

Release types: ``heatmap`` (central: Ghazi et al. Alg. 1-2; shuffle: App. F), ``analyze``
(same schema as a shuffle heatmap), ``federated`` (Bagdasaryan et al. Alg. 2),
``privhist`` (Suresh 2019) and ``metric itemwise`` (Imola et al. Thm 4.4). Three
brute-force checks of the laws the audit relies on come first: the closed-form discrete
Laplace hockey-stick against term-by-term sums, the split-and-mix statistical distance
against the bound sqrt(q / n^(r-1)) for every input pair of small instances, and the
coupling behind PrivHist's dataset-dependent composition (Lemma 8) and the sensitivity of
its smoothed queries (Lemma 9) for every neighbour pair of histograms with <= 6 items.

Run: ``python bench/privacy_audit.py`` (runs each release type once with the installed
command line into a temporary directory, seeded where the command allows, and audits the
reports; about a minute on 2 cores), or ``python bench/privacy_audit.py REPORT.json ...``
to audit existing reports. ``--keep DIR`` keeps the generated releases.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023: Alg. 1-2, Thm 3.1, App. F.
.. [BBGN20] B. Balle, J. Bell, A. Gascon, K. Nissim, "Private Summation in the Multi-Message
   Shuffle Model", CCS 2020: Lemma 5.2, Cor. 6 (split-and-mix).
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022: Alg. 1-2, Thm 4.2.
.. [Suresh19] A. T. Suresh, "Differentially private anonymized histograms", NeurIPS 2019:
   PrivHist, Lemmas 8-9, Thm 1.
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level": Alg. 2, Thm 4.3, Thm 4.4.
.. [CKS20] C. L. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
   Privacy", NeurIPS 2020 (the discrete Laplace law and its exact sampler).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import mpmath as mp

mp.mp.dps = 60
#: relative slack for comparing a recomputed number with a claim printed from a float
REL_TOL = 1e-9


# ============================================================================ exact laws
def dl_cdf(a: mp.mpf, x: int) -> mp.mpf:
    """P(K <= x) for K ~ DL(a), P(K = k) = (1 - a)/(1 + a) a^|k|."""
    if x < 0:
        return a ** (-x) / (1 + a)
    return 1 - a ** (x + 1) / (1 + a)


def dl_pmf(a: mp.mpf, k: int) -> mp.mpf:
    return (1 - a) / (1 + a) * a ** abs(k)


def dl_shift_hockey_stick(a: mp.mpf, shift: int, eps: mp.mpf) -> mp.mpf:
    """sum_k max(0, P(k) - e^eps Q(k)) for P = DL(a), Q = shift + DL(a) (shift >= 0).

    The privacy loss ln P(k)/Q(k) = t (|k - shift| - |k|), t = -ln a, equals t shift for
    k <= 0, t (shift - 2k) for 0 < k < shift and -t shift above: the set where it exceeds
    eps is {k <= kmax}, so the divergence is F(kmax) - e^eps F(kmax - shift).
    """
    t = -mp.log(a)
    if shift == 0 or eps >= t * shift:
        return mp.mpf(0)
    # largest k with t (shift - 2k) > eps (k <= 0 always qualifies)
    kmax = int(mp.ceil((shift - eps / t) / 2)) - 1
    kmax = min(max(kmax, 0), shift - 1)
    return dl_cdf(a, kmax) - mp.exp(eps) * dl_cdf(a, kmax - shift)


def hockey_stick(p: dict[int, mp.mpf], q: dict[int, mp.mpf], eps: mp.mpf) -> mp.mpf:
    """sum_x max(0, p(x) - e^eps q(x)) over the listed points (a lower bound on the
    divergence when p is exact there and q is exact or an upper bound)."""
    e = mp.exp(eps)
    return mp.fsum(max(mp.mpf(0), px - e * q.get(x, 0)) for x, px in p.items())


def negbin_difference_pmf(shape: mp.mpf, a: mp.mpf, z: int) -> mp.mpf:
    """P(X - Y = z), X, Y i.i.d. negative binomial NB(shape, a): P(X = k) =
    (shape)_k / k! (1 - a)^shape a^k (a sum of Polya variables of one parameter a adds
    their shapes, [Bagdasaryan22]_ Sec. 4). Closed form
    (1 - a)^(2 shape) a^|z| (shape)_|z| / |z|! 2F1(shape, |z| + shape; |z| + 1; a^2)."""
    z = abs(z)
    return ((1 - a) ** (2 * shape) * a ** z * mp.rf(shape, z) / mp.factorial(z)
            * mp.hyp2f1(shape, z + shape, z + 1, a * a))


def binomial_pmf(n: int, p: mp.mpf) -> list[mp.mpf]:
    return [mp.binomial(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]


def convolve(x: list[mp.mpf], y: list[mp.mpf]) -> list[mp.mpf]:
    out = [mp.mpf(0)] * (len(x) + len(y) - 1)
    for i, xi in enumerate(x):
        if xi:
            for j, yj in enumerate(y):
                out[i + j] += xi * yj
    return out


# ====================================================================== brute-force checks
def check_dl_closed_form() -> str:
    """The closed-form discrete Laplace divergence against term-by-term sums."""
    worst = mp.mpf(0)
    cases = 0
    for a in (mp.mpf("0.3"), mp.mpf("0.8"), mp.exp(-mp.mpf("0.05"))):
        for shift in (1, 2, 5, 17):
            for eps in (mp.mpf(0), mp.mpf("0.1"), mp.mpf("0.7"), mp.mpf(2)):
                lo, hi = -800 - shift, 800 + shift
                p = {k: dl_pmf(a, k) for k in range(lo, hi)}
                q = {k: dl_pmf(a, k - shift) for k in range(lo, hi)}
                direct = hockey_stick(p, q, eps)
                tail = 2 * a ** 800  # mass left out of the window, bounds the difference
                worst = max(worst, abs(direct - dl_shift_hockey_stick(a, shift, eps)) - tail)
                cases += 1
    return (f"discrete Laplace pair, closed form vs term-by-term sum: {cases} cases, largest "
            f"difference beyond the window's tail {float(max(worst, 0)):.1e}")


def _share_law(x: int, q: int, r: int) -> dict[tuple[int, ...], int]:
    """Law (counts out of q^(r-1)) of the histogram over Z_q of one user's r additive shares
    of x: r - 1 uniform shares and x minus their sum."""
    law: dict[tuple[int, ...], int] = defaultdict(int)
    for t in itertools.product(range(q), repeat=r - 1):
        h = [0] * q
        for s in t:
            h[s] += 1
        h[(x - sum(t)) % q] += 1
        law[tuple(h)] += 1
    return law


def _convolve_laws(a: dict, b: dict) -> dict:
    out: dict = defaultdict(int)
    for ka, pa in a.items():
        for kb, pb in b.items():
            out[tuple(i + j for i, j in zip(ka, kb))] += pa * pb
    return out


def split_and_mix_sd(n: int, q: int, r: int) -> Fraction:
    """Exact largest statistical distance between the shuffled multisets of shares of two
    input vectors with the same sum mod q (every pair of input multisets)."""
    users = [_share_law(x, q, r) for x in range(q)]
    laws = {}
    for inputs in itertools.combinations_with_replacement(range(q), n):
        law = users[inputs[0]]
        for x in inputs[1:]:
            law = _convolve_laws(law, users[x])
        laws[inputs] = law
    total = q ** ((r - 1) * n)
    by_sum: dict[int, list] = defaultdict(list)
    for inputs in laws:
        by_sum[sum(inputs) % q].append(inputs)
    worst = Fraction(0)
    for group in by_sum.values():
        for i, j in itertools.combinations(group, 2):
            a, b = laws[i], laws[j]
            d = sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b))
            worst = max(worst, Fraction(d, 2 * total))
    return worst


def check_split_and_mix() -> str:
    """Exact split-and-mix distances of small instances against sqrt(q / n^(r-1))."""
    cases = violations = 0
    worst_ratio = 0.0
    for n in range(2, 7):
        for q in range(2, 8):
            for r in (3, 4):
                if math.comb(n * r + q - 1, q - 1) > 20000 or q ** (r - 1) > 400 \
                        or math.comb(n + q - 1, n) > 60:
                    continue
                bound = math.sqrt(q / n ** (r - 1))
                if bound >= 1:
                    continue
                sd = split_and_mix_sd(n, q, r)
                cases += 1
                violations += sd > bound
                worst_ratio = max(worst_ratio, float(sd) / bound)
    return (f"split-and-mix, exact distance of every same-sum input pair vs sqrt(q/n^(r-1)) "
            f"([BBGN20]), n <= 6, q <= 7, r in {{3, 4}}: {cases} instances, {violations} "
            f"violations, largest distance/bound {worst_ratio:.3f} (r = 2 is excluded: its "
            "distance does not vanish as n grows, e.g. n = 6, q = 2: 0.6875)")


# PrivHist (Suresh 2019) re-implemented from the algorithm boxes -------------------------
def _split(counts: tuple[int, ...], T: int, M: int, z: int
           ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Steps 2(a)-(c): M fake labels at T and T + 1, Z_b = z labels moved from T to T + 1,
    cut at T. Returns (low cumulative prevalences for r = 1..T, high counts sorted
    descending)."""
    phi = defaultdict(int)
    for c in counts:
        phi[c] += 1
    phi[T] += M - z
    phi[T + 1] += M + z
    low = tuple(max(0, sum(phi[s] for s in range(r, T + 1))) for r in range(1, T + 1))
    high_sorted = sorted(c for c in counts if c > T + 1)
    k = phi[T + 1]
    high = [T + 1] * max(k, 0) + high_sorted  # ascending
    if k < 0:
        high = high[-k:]  # the deficit comes off the smallest counts
    return low, tuple(sorted(high, reverse=True))


def _histograms(max_items: int) -> list[tuple[int, ...]]:
    """Every anonymized histogram (multiset of positive counts) with <= max_items items."""
    out = []

    def parts(n: int, largest: int) -> list[tuple[int, ...]]:
        if n == 0:
            return [()]
        return [(k, *rest) for k in range(min(n, largest), 0, -1)
                for rest in parts(n - k, k)]

    for n in range(max_items + 1):
        out.extend(parts(n, n))
    return out


def _neighbours(h: tuple[int, ...]) -> list[tuple[int, ...]]:
    """One label's count changed by one (a new label of count 1 included) ([Suresh19]_
    Def. 1)."""
    out = {tuple(sorted((*h, 1), reverse=True))}
    for i, c in enumerate(h):
        for d in (-1, 1):
            nh = list(h)
            nh[i] = c + d
            out.add(tuple(sorted((x for x in nh if x > 0), reverse=True)))
    return sorted(out)


def privhist_coupling_factor(max_items: int = 6) -> tuple[int, int]:
    """(pairs checked, worst factor c) such that steps 2-4 are c eps2-DP given N: for every
    neighbour pair and (T, M), the smallest over constant shifts s of Z_b of max_z
    |s| + ||split(h, z) - split(h', z + s)||_1 (infinite if the high parts differ in
    length); the DL noise then bounds the likelihood ratio by e^(c eps2)."""
    pairs = 0
    worst = 0
    hists = _histograms(max_items)
    for h in hists:
        for h2 in _neighbours(h):
            if sum(h2) > max_items + 1:
                continue
            pairs += 1
            for T in (1, 2, 3):
                for M in (0, 1, 2, 4):
                    span = M + max_items + T + 4
                    best = None
                    for s in (-1, 0, 1):
                        c = 0
                        for z in range(-span, span + 1):
                            (l1, h1), (l2, hh2) = _split(h, T, M, z), _split(h2, T, M, z + s)
                            if len(h1) != len(hh2):
                                c = math.inf
                                break
                            c = max(c, abs(s) + sum(abs(x - y) for x, y in zip(l1, l2))
                                    + sum(abs(x - y) for x, y in zip(h1, hh2)))
                        best = c if best is None else min(best, c)
                    worst = max(worst, best)
    return pairs, worst


def _smoothed_queries(counts: tuple[int, ...], S: list[int], N: int) -> list[int]:
    """PrivHist-HighPrivacy H1 + H3 from the box: counts above 2N moved to 2N; the
    prevalence of count j split linearly between the boundaries around it, so that
    d_i phi^v_{s_i+} = sum over labels of min(max(j - s_{i-1}, 0), d_i)."""
    out = []
    prev = 0
    for s in S:
        d = s - prev
        out.append(sum(min(max(min(c, 2 * N) - prev, 0), d) for c in counts))
        prev = s
    return out


def privhist_query_sensitivity(max_items: int = 6) -> int:
    """Largest l1 change of the smoothed queries between neighbours, over boundary sets."""
    worst = 0
    for h in _histograms(max_items):
        for h2 in _neighbours(h):
            for S in ([1, 2, 3, 4, 8], [1, 3, 6, 12], [2, 5, 7, 14], [1, 2, 4]):
                N = S[-1] // 2
                a, b = _smoothed_queries(h, S, N), _smoothed_queries(h2, S, N)
                worst = max(worst, sum(abs(x - y) for x, y in zip(a, b)))
    return worst


# ================================================================================ audits
@dataclass
class Row:
    """One audited claim."""

    release: str
    neighbour: str
    claim: tuple[float, float]
    upper: float | None  # delta(eps_claim) upper bound (None: not derived)
    lower: float | None  # delta(eps_claim) exact lower bound
    basis: str
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        eps, delta = self.claim
        slack = REL_TOL * max(delta, 1e-300)
        if self.lower is not None and self.lower > delta + slack:
            return "UNSOUND"
        if self.upper is not None and self.upper <= delta + slack:
            return "sound"
        return "unproven"


def _neighbour(g: dict) -> str:
    text = str(g.get("neighbour", ""))
    if "add" in text and "remove" in text or text == "add_remove":
        return "add_remove"
    if "zero" in text:
        return "zero_out"
    if "replace" in text:
        return "replace"
    return text


def _close(x: float, y: float) -> bool:
    return abs(x - y) <= REL_TOL * max(abs(x), abs(y), 1e-300)


def audit_heatmap_central(rep: dict, name: str) -> Row:
    """Central heatmap ([Ghazi23]_ Alg. 1): per measured level, discrete Laplace of
    parameter t_i on the level sums at resolution R, whose l1 sensitivity is R (add/remove,
    zero-out: a user's level vector sums to R) or 2R (replace). Exactly
    (sum_i t_i Delta_i)-DP: a user with all her mass in one pixel attains it at every level."""
    g = rep["guarantee"]
    p = g["parameters"]
    nb = _neighbour(g)
    R = int(p["resolution"])
    delta_l1 = 2 * R if nb == "replace" else R
    params = [mp.mpf(lv["parameter"]) for lv in g["event"]["levels"]] if g.get("event") \
        else [mp.mpf(e) / delta_l1 for e in p["level_epsilons_effective"]]
    eps_exact = mp.fsum(t * delta_l1 for t in params)
    eps_c, delta_c = float(g["epsilon"]), float(g["delta"])
    upper, lower = _pure_levels(params, [delta_l1] * len(params), mp.mpf(eps_c))
    return Row(name, nb, (eps_c, delta_c), upper, lower,
               f"vector DL, exact pure eps = sum t_i Delta_i = {float(eps_exact):.9g}",
               _n_note(rep, nb))


def _pure_levels(params: list, shifts: list, eps: mp.mpf) -> tuple[float | None, float]:
    """(upper, lower) on delta(eps) of independent DL levels, each at its worst shift."""
    eps_max = mp.fsum(t * d for t, d in zip(params, shifts))
    if eps_max <= eps * (1 + REL_TOL):
        return 0.0, 0.0
    # every level at its largest loss at once: P = prod_i P(K_i <= 0) = prod 1/(1 + a_i)
    p_top = mp.fprod(1 / (1 + mp.exp(-t)) for t in params)
    return None, float(p_top * (1 - mp.exp(eps - eps_max)))


#: the Polya sampler's total variation per draw as the implementation documents it (tables
#: cut where the tail is <= 2^-120, at most 2^24 entries); not re-derived here
SAMPLER_TV = 2.0 * (2.0 ** -120 + (2 ** 24 + 2) * 2.0 ** -127 + (2 ** 24 + 2) ** 2 * 2.0 ** -190)


def audit_heatmap_shuffle(rep: dict, name: str) -> Row:
    """Shuffle heatmap ([Ghazi23]_ App. F): survivors' Polya differences sum to at least
    DL(a_i) per coordinate (sensitivity B, or 2B under replace), r additive shares over
    Z_q mixed among >= n_min users (statistical distance <= sqrt(q / n_min^(r-1)) per
    coordinate, [BBGN20]_), plus the sampler's tables. An ideal pure mechanism within total
    variation tau is (eps, (1 + e^eps) tau)-DP."""
    g = rep["guarantee"]
    p = g["parameters"]
    nb = _neighbour(g)
    B, m, q, r = int(p["B"]), int(p["m"]), int(p["q"]), int(p["r"])
    n, n_min = int(p["n"]), int(p["n_min"])
    sens = 2 * B if nb == "replace" else B
    params = [-mp.log(mp.mpf(a)) for a in p["dl_parameters"]]
    eps_c, delta_c = float(g["epsilon"]), float(g["delta"])
    eps = mp.mpf(eps_c)
    up_dl, lower = _pure_levels(params, [sens] * len(params), eps)
    tau_mix = m * mp.sqrt(mp.mpf(q) / mp.mpf(n_min) ** (r - 1))
    tau_sampler = 2 * n * m * mp.mpf(SAMPLER_TV)
    notes = _n_note(rep, nb)
    if nb == "add_remove":
        notes.append("add/remove: split-and-mix is analysed for a fixed, public n")
    upper = None if up_dl is None else float(up_dl + (1 + mp.exp(eps)) * (tau_mix + tau_sampler))
    eps_dl = mp.fsum(t * sens for t in params)
    return Row(name, nb, (eps_c, delta_c), upper, lower,
               f"DL pure eps {float(eps_dl):.6g} + hiding tau_mix={float(tau_mix):.2e} "
               f"(q={q}, r={r}, n_min={n_min}, m={m}) + sampler {float(tau_sampler):.1e}",
               notes)


def _federated_shape(users: int, shard: int, dropout: float) -> mp.mpf:
    """Total Polya shape of a round's noise per cell when every client survives: shards
    are consecutive blocks of ``shard`` clients, each client's shape 1/n_min with
    n_min = ceil((1 - dropout) * shard's size) (the layout rule of the current code)."""
    total = mp.mpf(0)
    for lo in range(0, users, shard):
        s = min(shard, users - lo)
        n_min = max(1, math.ceil((1 - dropout) * s - 1e-9))
        total += mp.mpf(s) / n_min
    return total


_LAWS: dict = {}


def _cell_law(shape: mp.mpf, a: mp.mpf, shift: int, width: int) -> dict[int, mp.mpf]:
    """The exact law of shift + (X - Y) on [shift - width, shift + width] (30 digits: the
    bounds compared are far above the rounding)."""
    key = (shape, a, width)
    if key not in _LAWS:
        with mp.workdps(30):
            half = [negbin_difference_pmf(shape, a, z) for z in range(width + 1)]
        _LAWS[key] = half
    half = _LAWS[key]
    return {z + shift: half[abs(z)] for z in range(-width, width + 1)}


def federated_round_lower(U: int, S: int, dropout: float, a: mp.mpf, eps: mp.mpf,
                          width: int) -> tuple[float, str]:
    """Largest exact delta(eps) over the one-cell laws of a round for U users and U +- 1
    (the user's cell: shift 1; another cell: shift 0), both directions."""
    k0 = _federated_shape(U, S, dropout)
    best, how = mp.mpf(0), ""
    base = _cell_law(k0, a, 0, width)
    for U2 in (U + 1, U - 1):
        if U2 < 2:
            continue
        k1 = _federated_shape(U2, S, dropout)
        for shift in (0, 1):
            other = _cell_law(k1, a, shift if U2 > U else -shift, width)
            for p, qq in ((base, other), (other, base)):
                d = hockey_stick(p, qq, eps)
                if d > best:
                    best, how = d, (f"n={U} vs {U2}: noise shape {float(k0):.4g} vs "
                                    f"{float(k1):.4g}, cell shift {shift}")
    return float(best), how


def audit_federated(rep: dict, name: str) -> tuple[Row, list[str]]:
    """Federated adaptive histogram ([Bagdasaryan22]_ Alg. 2): each round, every cell gets
    the survivors' Polya(1/n_min, a) differences; sequential rounds, basic composition.
    Lower bound: the first round (the root: one cell holding every user, fixed before any
    output) for the recorded users and a neighbour with one user more or fewer, exact
    negative-binomial-difference laws; its projection bounds the whole release's delta at the
    total eps. Each later round's own claim is checked the same way for a fixed query."""
    g = rep["guarantee"]
    p = g["parameters"]
    nb = _neighbour(g)
    eps_c, delta_c = float(g["epsilon"]), float(g["delta"])
    U, S, drop = int(p["users_per_query"]), int(p["shard_size"]), float(p["dropout"])
    steps = g["event"]["steps"]
    details = []
    notes = _n_note(rep, nb)
    lower = upper = None
    basis = "per round: NB-difference noise; "
    if nb == "add_remove":
        if U != int(rep.get("users", U)):
            notes.append("users_per_query < users: the sampled U stays fixed for a neighbour")
            basis += "U fixed by sampling: noise law independent of n; "
        else:
            t0 = mp.mpf(steps[0]["levels"][0]["parameter"])
            a0 = mp.exp(-t0)
            width = int(mp.ceil(25 / t0)) + 10  # mass outside < 1e-9: a lower bound
            lb, how = federated_round_lower(U, S, drop, a0, mp.mpf(eps_c), width)
            lower = lb
            basis += f"round 1 one-cell pair ({how})"
            for k, (st, rd) in enumerate(zip(steps, rep.get("rounds", [])), 1):
                t = mp.mpf(st["levels"][0]["parameter"])
                w = int(mp.ceil(25 / t)) + 10
                d_k, how_k = federated_round_lower(U, S, drop, mp.exp(-t), t, w)
                flag = "  <-- exceeds the round's claimed delta" \
                    if d_k > float(rd["delta"]) * (1 + REL_TOL) else ""
                details.append(f"  round {k}: claimed ({float(t):.4g}, {rd['delta']:.3g}); "
                               f"exact lower bound delta >= {d_k:.4g} ({how_k}){flag}")
    if lower is None:  # the noise law does not depend on the neighbour: DL at least
        sens = 2 if nb == "replace" else 1
        params = [mp.mpf(st["levels"][0]["parameter"]) for st in steps]
        up, lower = _pure_levels(params, [sens] * len(params), mp.mpf(eps_c))
        tvs = [mp.mpf(st.get("tv", 0)) for st in steps]
        if up is not None:
            upper = float(up + mp.fsum((1 + mp.exp(t * sens)) * tv
                                       for t, tv in zip(params, tvs)))
        basis += "DL pure part + the recorded per-round tv (not re-derived)"
    return Row(name, nb, (eps_c, delta_c), upper, lower, basis, notes), details


def audit_privhist(rep: dict, name: str, coupling: int, q_sens: int) -> Row:
    """PrivHist ([Suresh19]_): N by DL (sensitivity 1), steps 2-4 c eps2-DP given N with c
    from the exhaustive coupling check, H4 eps3 q_sens-DP given (N, H^cl); nominal budgets
    (the exact samplers use rational parameters below them)."""
    g = rep["guarantee"]
    p = g["parameters"]
    eps_c, delta_c = float(g["epsilon"]), float(g["delta"])
    t1 = mp.mpf(g["event"]["steps"][0]["parameter"]) if g.get("event") else mp.mpf(p["eps1"])
    e2, e3 = mp.mpf(p["eps2"]), mp.mpf(p.get("eps3", 0.0))
    if p.get("regime", "") != "high_privacy":
        e3 = mp.mpf(0)
    eps_up = t1 + coupling * e2 + q_sens * e3
    ok = eps_up <= mp.mpf(eps_c) * (1 + REL_TOL)
    # lower bound: step 1 alone is the DL pair at shift 1
    lower = float(dl_shift_hockey_stick(mp.exp(-t1), 1, mp.mpf(eps_c)))
    return Row(name, "sorted_l1", (eps_c, delta_c), 0.0 if ok else None, lower,
               f"eps1 {float(t1):.6g} + {coupling} x eps2 {float(e2):.6g} + {q_sens} x eps3 "
               f"{float(e3):.6g} = {float(eps_up):.9g} (coupling checked on <= 6 items)", [])


def thm44(alpha0: float, m: int, N: int, delta: float) -> tuple[float, float, float]:
    """[Imola]_ Thm 4.4 with Thm 4.3's h: (alpha, delta', validity limit), own evaluation:
    K = 8 sqrt(e^alpha0 ln(4m/delta) / N) + 8 e^alpha0 / N, alpha = sup_w h(N; m, m w)/w =
    m alpha0 K / 2 (h/w decreases in w), delta' = delta (1 + tanh(alpha0/2) K)^m, valid
    while alpha0 < ln(N / (16 ln(4N/delta)))."""
    a0, d = mp.mpf(alpha0), mp.mpf(delta)
    K = 8 * mp.sqrt(mp.exp(a0) * mp.log(4 * m / d) / N) + 8 * mp.exp(a0) / N
    alpha = m * a0 * K / 2
    dout = d * (1 + mp.tanh(a0 / 2) * K) ** m
    limit = mp.log(N / (16 * mp.log(4 * N / d)))
    return float(alpha), float(dout), float(limit)


def audit_metric_itemwise(rep: dict, name: str, space: tuple[int, int, float] | None) -> Row:
    """PrivEMDItemWise with GKRR ([Imola]_ Alg. 2, Thm 4.4): upper bound by the theorem,
    re-evaluated; exact lower bound (with the metric space known) from the count of one item
    among the N shuffled outputs, for the pair where one user's m items leave that item's
    cluster (d_EM = 1) and every other item sits in a third cluster."""
    g = rep["guarantee"]
    p = g["parameters"]
    alpha_c, delta_c = float(g["epsilon"]), float(g["delta"])
    a0, m, N, d = float(p["alpha0"]), int(p["m"]), int(p["N"]), float(p["delta"])
    alpha, dout, limit = thm44(a0, m, N, d)
    notes = []
    upper = None
    if a0 < limit and alpha <= alpha_c * (1 + REL_TOL):
        upper = dout
    elif a0 >= limit:
        notes.append(f"Thm 4.3 condition fails: alpha0={a0} >= {limit:.4g}")
    else:
        notes.append(f"Thm 4.4 gives alpha={alpha:.6g} > claimed {alpha_c:.6g}")
    lower = None
    if space is not None:
        s, t, r = space
        lower = float(_metric_lower(s, t, r, mp.mpf(a0), m, N, mp.mpf(alpha_c)))
    else:
        notes.append("metric space (s, t, r) not in the report: no lower bound")
    return Row(name, "replace (d_EM)", (alpha_c, delta_c), upper, lower,
               f"Thm 4.4 re-evaluated: alpha={alpha:.6g}, delta'={dout:.3g}", notes)


def _metric_lower(s: int, t: int, r: float, a0: mp.mpf, m: int, N: int, eps: mp.mpf) -> mp.mpf:
    """Exact delta(eps) of the count of item x among the N outputs: the user's m items at x
    (D) or in another cluster (D'); the other N - m items in a third cluster (or, with two
    clusters, at another item of x's cluster)."""
    k = s * t
    Z = mp.exp(a0) + (t - 1) * mp.exp((1 - r) * a0) + (k - t)
    p_same, p_other = mp.exp(a0) / Z, 1 / Z
    p_rest = mp.exp((1 - r) * a0) / Z if s < 3 else p_other
    others = binomial_pmf(N - m, p_rest)
    P = convolve(binomial_pmf(m, p_same), others)
    Q = convolve(binomial_pmf(m, p_other), others)
    pd, qd = dict(enumerate(P)), dict(enumerate(Q))
    return max(hockey_stick(pd, qd, eps), hockey_stick(qd, pd, eps))


def _n_note(rep: dict, nb: str) -> list[str]:
    if nb != "add_remove":
        return []
    keys = [k for k in ("n_users", "n_points", "users", "n") if k in rep]
    if keys and "not a private release" not in str(rep.get("release", "")) \
            and rep.get("release") != "reproducible evaluation":
        return [f"prints n ({', '.join(keys)}) under add/remove"]
    if keys:
        return [f"evaluation report prints {', '.join(keys)}"]
    return []


def classify(rep: dict) -> str:
    g = rep.get("guarantee", {})
    p = g.get("parameters", {})
    if rep.get("mechanism") == "PrivHist":
        return "privhist"
    if g.get("notion") == "metric_emd" and p.get("mechanism") == "GKRR":
        return "metric_itemwise"
    if g.get("model") == "distributed" and "shard_size" in p:
        return "federated"
    if g.get("model") == "shuffle" and {"q", "r", "B"} <= set(p):
        return "heatmap_shuffle"
    if p.get("mechanism") == "DPSparseEMDAgg":
        return "heatmap_central"
    return "unknown"


# ================================================================================ runs
def _cli(*args: Any) -> None:
    cmd = [sys.executable, "-m", "shuffledp.cli", *map(str, args)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {res.stderr.strip()[-500:]}")


METRIC_SPACE = (2, 4, 0.2)


def generate(out: Path) -> list[tuple[str, Path, dict]]:
    """One release of each type (seeded where possible), small enough to run in seconds."""
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    _cli("heatmap", "--grid", 32, "--n", 200, "--release", "--quiet", "--out", out / "hc")
    runs.append(("heatmap central", out / "hc", {}))
    _cli("heatmap", "--grid", 32, "--n", 200, "--release", "--neighbour", "replace", "--quiet",
         "--out", out / "hcr")
    runs.append(("heatmap central replace", out / "hcr", {}))
    _cli("heatmap", "--model", "shuffle", "--grid", 16, "--n", 60, "--B", 16, "--delta",
         "1e-6", "--release", "--quiet", "--out", out / "hs")
    runs.append(("heatmap shuffle", out / "hs", {}))
    _cli("federated", "--seed", 1, "--out", out / "fed")  # the command's defaults
    runs.append(("federated (defaults)", out / "fed", {}))
    _cli("federated", "--seed", 1, "--n", 19, "--depth", 4, "--shard-size", 100, "--out",
         out / "fed19")
    runs.append(("federated n=19", out / "fed19", {}))
    counts = out / "counts.txt"
    counts.write_text("\n".join(str(1 + (i * 7919) % 37 // (1 + i % 5)) for i in range(400)))
    _cli("privhist", "--input", counts, "--epsilon", 1, "--seed", 1, "--out", out / "ph")
    runs.append(("privhist eps=1", out / "ph", {}))
    _cli("privhist", "--input", counts, "--epsilon", "0.05", "--regime", "high", "--seed", 1,
         "--out", out / "phh")
    runs.append(("privhist eps=0.05 high", out / "phh", {}))
    items = out / "items.csv"
    items.write_text("user_id,item\n" + "".join(f"u{i},{(i * 5 + j) % 8}\n"
                                               for i in range(300) for j in range(3)))
    s, t, r = METRIC_SPACE
    _cli("metric", "itemwise", "--input", items, "--s", s, "--t", t, "--r", r, "--alpha0",
         "0.5", "--model", "central", "--seed", 1, "--out", out / "mi")
    runs.append(("metric itemwise", out / "mi", {"space": METRIC_SPACE}))
    return [(n, d / "report.json", extra) for n, d, extra in runs]


def audit(reports: list[tuple[str, Path, dict]]) -> int:
    print("Brute-force checks of the laws used below")
    print(" ", check_dl_closed_form())
    print(" ", check_split_and_mix())
    pairs, coupling = privhist_coupling_factor()
    q_sens = privhist_query_sensitivity()
    print(f"  PrivHist steps 2-4, every neighbour pair with <= 6 items (x7 incl. the "
          f"neighbour), T in 1..3, M in {{0,1,2,4}}: {pairs} pairs, worst coupling factor "
          f"{coupling} (Lemma 8 needs 1); smoothed queries' l1 sensitivity {q_sens} "
          "(Lemma 9 needs 1)")
    rows: list[Row] = []
    details: list[str] = []
    for name, path, extra in reports:
        rep = json.loads(Path(path).read_text())
        kind = classify(rep)
        if kind == "heatmap_central":
            rows.append(audit_heatmap_central(rep, name))
        elif kind == "heatmap_shuffle":
            rows.append(audit_heatmap_shuffle(rep, name))
        elif kind == "federated":
            row, det = audit_federated(rep, name)
            rows.append(row)
            if det:
                details.append(f"{name}:")
                details.extend(det)
        elif kind == "privhist":
            rows.append(audit_privhist(rep, name, coupling, q_sens))
        elif kind == "metric_itemwise":
            rows.append(audit_metric_itemwise(rep, name, extra.get("space")))
        else:
            print(f"  {name}: {path}: release type not recognised, not audited")
    print()
    head = (f"{'release':<26} {'neighbour':<15} {'claimed eps':>11} {'claimed delta':>13} "
            f"{'upper delta':>11} {'lower delta':>11}  verdict")
    print(head)
    print("-" * len(head))
    for r in rows:
        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:.3g}"
        print(f"{r.release:<26} {r.neighbour:<15} {r.claim[0]:>11.6g} {r.claim[1]:>13.3g} "
              f"{f(r.upper):>11} {f(r.lower):>11}  {r.verdict}")
    print()
    for r in rows:
        print(f"{r.release}: {r.basis}" + "".join(f"; {n}" for n in r.notes))
    if details:
        print()
        print("Per-round claims (each round must be (eps_q, delta_q)-DP for any fixed query):")
        for d in details:
            print(d)
    unsound = sum(r.verdict == "UNSOUND" for r in rows)
    unproven = sum(r.verdict == "unproven" for r in rows)
    print()
    print(f"{unsound} unsound claims, {unproven} unproven, "
          f"{len(rows) - unsound - unproven} sound, of {len(rows)} audited")
    return unsound


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="*", help="report.json files (default: generate one of "
                                               "each release type)")
    ap.add_argument("--metric-space", default=None, metavar="S,T,R",
                    help="the product metric space of audited metric itemwise reports (their "
                         "reports do not record it): clusters, items per cluster, distance")
    ap.add_argument("--keep", type=Path, default=None,
                    help="write the generated releases here (default: a temporary directory)")
    args = ap.parse_args(argv)
    if args.reports:
        extra = {}
        if args.metric_space:
            s, t, r = args.metric_space.split(",")
            extra = {"space": (int(s), int(t), float(r))}
        reports = [(os.path.basename(os.path.dirname(os.path.abspath(p))) or p, Path(p), extra)
                   for p in args.reports]
        unsound = audit(reports)
    elif args.keep is not None:
        unsound = audit(generate(args.keep))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            unsound = audit(generate(Path(tmp)))
    return 1 if unsound else 0


if __name__ == "__main__":
    sys.exit(main())
