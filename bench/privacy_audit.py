"""Independent audit of the privacy claims of release reports.

Every release's ``report.json`` states a guarantee (epsilon, delta) under a neighbour
relation and records the parameters of the mechanism that produced it. This script
recomputes, for each report, what those parameters actually guarantee, with its own
formulas (it imports nothing from ``shuffledp``: only mpmath at 60 digits and the standard
library), and compares with the claim:

* an **upper bound** on the hockey-stick divergence delta(eps) at the claimed eps, from the
  exact law where one exists (the pure epsilon of a vector discrete Laplace under its l1
  sensitivity; the total variation of split-and-mix and of the noise sampler, converted
  by (1 + e^eps) tau; a federated round of one cell: the exact law of its worst pair), or
  from a proof re-done with the audit's own formulas (a federated add/remove round: the
  joining user's noise share, by the Renyi divergence of the per-cell Polya laws summed term
  by term, see :func:`federated_round_upper`) or the cited theorem re-evaluated;
* an exact **lower bound** on delta(eps) from one concrete neighbouring pair and a
  projection of the output (a post-processing, so it can only shrink delta): the
  discrete Laplace pair at its worst shift, the one-cell law of a federated round's worst
  pair (add/remove on the public shard plan: n_min against n_min + 1 survivors' shares; the
  OLD layout of reports without ``max_users``: n against n +- 1 users), the count of one item
  in a shuffled metric release.

A claim is ``sound`` when the upper bound is <= the claimed delta, ``UNSOUND`` when the
lower bound exceeds it, ``unproven`` otherwise. The final line counts the unsound claims.

Release types: ``heatmap`` (central: Ghazi et al. Alg. 1-2; shuffle: App. F), ``analyze``
(same schema as a shuffle heatmap), ``federated`` (Bagdasaryan et al. Alg. 2: add/remove on
the public shard plan of ``max_users``, zero-out, replace-one, sampled users per sub-query),
``privhist`` (Suresh 2019) and ``metric itemwise`` (Imola et al. Thm 4.4). Four
brute-force checks of the laws the audit relies on come first: the closed-form discrete
Laplace hockey-stick against term-by-term sums, the split-and-mix statistical distance
against the bound sqrt(q / n^(r-1)) for every input pair of small instances, the federated
add/remove charge against the exact laws of small rounds (one and two cells), and the
coupling behind PrivHist's dataset-dependent composition (Lemma 8) and the sensitivity of
its smoothed queries (Lemma 9) for every neighbour pair of histograms with <= 6 items.

Run: ``python bench/privacy_audit.py`` (runs each release type once with the installed
command line into a temporary directory, seeded where the command allows, and audits the
reports; one to two minutes on 2 cores), or ``python bench/privacy_audit.py REPORT.json ...``
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
   Privacy", NeurIPS 2020 (the discrete Laplace law and its exact sampler; Prop. 12, Renyi
   to approximate DP).
.. [Wendel48] J. G. Wendel, "Note on the gamma function", Amer. Math. Monthly 55(9), 1948:
   Gamma(x + h) <= x^h Gamma(x) for x > 0, 0 <= h <= 1 (the series' tail).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
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
    """sum_x max(0, p(x) - e^eps q(x)) over the points listed in both (a lower bound on the
    divergence when p is exact there and q is exact or an upper bound; a point missing from
    q is skipped, not read as q(x) = 0, which would overstate the sum at a window's edge)."""
    e = mp.exp(eps)
    return mp.fsum(max(mp.mpf(0), px - e * q[x]) for x, px in p.items() if x in q)


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
    """Total Polya shape of a round's noise per cell under the OLD layout (before the public
    shard plan), every client surviving: shards were consecutive blocks of ``shard`` clients,
    each client's shape 1/n_min with n_min = ceil((1 - dropout) * the block's size). Used for
    reports without ``max_users`` and to show what the old layout did at a concrete pair."""
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
    """OLD layout: largest exact delta(eps) over the one-cell laws of a round for U users and
    U +- 1 (the user's cell: shift 1; another cell: shift 0), both directions."""
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


# ------------------------------------------- add/remove on the public shard plan
def federated_plan(max_users: int, shard_size: int, dropout: float) -> tuple[int, int]:
    """(K, n_min) of the public shard plan the report states (docs/federated.md): K =
    ceil(N / S_max) shards, user id mod K, every client's Polya shape 1/n_min with n_min =
    ceil((1 - dropout) floor(N / K)); in exact rationals (the dropout as its decimal)."""
    N, S = int(max_users), int(shard_size)
    K = -(-N // S)
    return K, max(1, math.ceil((1 - Fraction(repr(float(dropout)))) * (N // K)))


_LOG_R: dict = {}


def _log_r(h: float, K: int) -> list[float]:
    """ln r_k for k = 0..K (floating point, running sum), r_k = Gamma(k + 1 + h) /
    (Gamma(1 + h) k!) = prod_{j <= k} (1 + h / j): Polya(1 + h, a)(k) / Polya(1, a)(k) =
    (1 - a)^h r_k. Each term log1p(h / j) is within 3 units of the last place (u = 2^-53)
    and the running sum of k positive terms within (k + 3) u of its value."""
    lst = _LOG_R.setdefault(h, [0.0])
    while len(lst) <= K:
        lst.append(lst[-1] + math.log1p(h / len(lst)))
    return lst


def polya_renyi_gamma(alpha: mp.mpf, h: mp.mpf, more: bool) -> mp.mpf:
    """Order-alpha Renyi divergence D(Gamma(s1) || Gamma(s2)) of one scale, (s1, s2) =
    (1 + h, 1) if ``more`` (the law with the extra share first) else (1, 1 + h):
    int f1^alpha f2^(1 - alpha) = Gamma(s_alpha) / (Gamma(s1)^alpha Gamma(s2)^(1 - alpha)),
    s_alpha = alpha s1 + (1 - alpha) s2 (inf when s_alpha <= 0). Polya(r, a) is the Poisson
    mixture over lambda ~ Gamma(r, a / (1 - a)) ([Bagdasaryan22]_ Def. 4.1), one kernel for
    both shapes, so this bounds the Polya pair's divergence for every a (data processing)."""
    one = mp.mpf(1)
    s1, s2 = (one + h, one) if more else (one, one + h)
    sa = alpha * s1 + (1 - alpha) * s2
    if sa <= 0:
        return mp.inf
    return (mp.loggamma(sa) - alpha * mp.loggamma(s1) - (1 - alpha) * mp.loggamma(s2)) \
        / (alpha - 1)


def _series_terms(alpha: float, h: float, t: float) -> int:
    """Terms after which the tail of sum_k a^k r_k^alpha is below e^-60 of the sum: past the
    peak (near alpha h / t) and (K + 1) t >= 60 + alpha h ln(K + 2) - ln(1 - a)."""
    ah = alpha * h
    K = int(3 * ah / t) + 8
    for _ in range(4):
        K = max(K, int((60 + ah * math.log(K + 2) - math.log(-math.expm1(-t))) / t) + 1)
    return K


#: the series is summed term by term up to this many terms (else only the closed form)
SERIES_MAX_TERMS = 1_000_000


def polya_renyi_series(alpha: float, n_min: int, t: float, more: bool, stride: int = 1
                       ) -> float | None:
    """Upper bound on the exact order-alpha Renyi divergence of Polya(1 + h, a) from
    Polya(1, a) (``more``) or the reverse, h = 1/n_min, a = e^-t, by its series: with
    P = Polya(1, a), Q = Polya(1 + h, a), sum_k Q^alpha P^(1 - alpha) = (1 - a)^(1 + alpha h)
    sum_k a^k r_k^alpha and sum_k P^alpha Q^(1 - alpha) = (1 - a)^(1 + (1 - alpha) h)
    sum_k a^k r_k^(1 - alpha). Tails past K: r_k <= (k + 1)^h / Gamma(1 + h) ([Wendel48]_:
    Gamma(x + h) <= x^h Gamma(x)) gives a geometric bound for the first, r_k >= 1 for the
    second. The terms are floating point, summed exactly (math.fsum); the rounding of the
    exponents (the running sum of ln r_k, the products) is bounded and added to the log of the
    sum. None when more than SERIES_MAX_TERMS terms are needed. ``stride`` > 1: an estimate
    (every stride-th term past the first 500, weighted), only to locate a good order."""
    h = 1.0 / n_min
    K = _series_terms(alpha, h, t)
    if K > SERIES_MAX_TERMS:
        return None
    lr = _log_r(h, K)
    e = alpha if more else 1.0 - alpha
    if stride > 1:
        ks = list(range(min(K, 500) + 1)) + list(range(501, K + 1, stride))
        ws = [1.0] * min(K + 1, 501) + [float(stride)] * (len(ks) - min(K + 1, 501))
    else:
        ks, ws = range(K + 1), None
    xs = [e * lr[k] - t * k for k in ks]
    top = max(xs)
    if ws is None:
        s = math.fsum(math.exp(x - top) for x in xs)
    else:
        s = math.fsum(w * math.exp(x - top) for w, x in zip(ws, xs))
    log1ma = math.log(-math.expm1(-t))
    if more:
        log_rho = -t + alpha * h * math.log1p(1.0 / (K + 2))
        if log_rho >= 0:
            return None
        log_tail = (-t * (K + 1) + alpha * h * math.log(K + 2) - alpha * math.lgamma(1 + h)
                    - math.log(-math.expm1(log_rho)))
    else:
        log_tail = -t * (K + 1) - log1ma
    ln_s = top + math.log(s + math.exp(log_tail - top))
    # rounding: |e| (K + 4) u ln r_K from the running sum (4x margin), and a few units of the
    # last place of every quantity formed (exponents, exp, log, the tail, the prefactor)
    pad = (abs(e) * lr[K] * (K + 4) * 2.0 ** -51
           + 2.0 ** -46 * (abs(e) * lr[K] + t * K + abs(top) + abs(log_tail)
                           + abs((1 + e * h) * log1ma) + 1.0))
    return ((1 + e * h) * log1ma + ln_s + pad) / (alpha - 1)


def _ln_delta_at(alpha: float, n_min: int, t: float, d: int, eps: float, more: bool
                 ) -> float:
    """ln of the converted delta at one order in floating point (long series estimated on
    about 6,000 terms): only to locate a good order (:func:`share_pair_delta`)."""
    h = 1.0 / n_min
    s1, s2 = (1 + h, 1.0) if more else (1.0, 1 + h)
    sa = alpha * s1 + (1 - alpha) * s2
    D = math.inf
    if sa > 0:
        D = (math.lgamma(sa) - alpha * math.lgamma(s1) - (1 - alpha) * math.lgamma(s2)) \
            / (alpha - 1)
    K = _series_terms(alpha, h, t)
    if K <= SERIES_MAX_TERMS:
        s = polya_renyi_series(alpha, n_min, t, more, stride=max(1, (K - 500) // 6000))
        if s is not None:
            D = min(D, s)
    if not math.isfinite(D):
        return math.inf
    return (alpha - 1) * (2 * d * max(D, 0.0) - eps) + alpha * math.log1p(-1 / alpha) \
        - math.log(alpha - 1)


def share_pair_delta(n_min: int, t: mp.mpf, d: int, eps: mp.mpf, more: bool
                     ) -> tuple[mp.mpf, float]:
    """(delta, alpha): the noise-only pair of a round's d cells, n_min against n_min + 1
    survivors' shares (shapes 1 and 1 + h per Polya variable, h = 1/n_min, two per cell:
    X - Y), is (eps, delta)-indistinguishable in the direction ``more`` (the extra share's law
    first) or the reverse. Renyi divergence at most 2 d D_alpha (data processing, additivity
    over independent coordinates), D_alpha the smaller of :func:`polya_renyi_gamma` and
    :func:`polya_renyi_series`; converted by [CKS20]_ Prop. 12: delta = exp((alpha - 1)
    (2 d D - eps)) (1 - 1/alpha)^alpha / (alpha - 1). The order is located on estimates (a
    grid in ln alpha, then golden section) and the bound evaluated there in full (every order
    gives a valid bound)."""
    t_f, e_f = float(t), float(eps)

    def f(la: float) -> float:
        return _ln_delta_at(math.exp(la), n_min, t_f, d, e_f, more)

    lo_l, hi_l = math.log(1.0005), math.log(1e7)
    grid = [lo_l + (hi_l - lo_l) * i / 39 for i in range(40)]
    vals = [f(x) for x in grid]
    i = min(range(len(vals)), key=vals.__getitem__)
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(24):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = f(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = f(x2)
    la = min((grid[i], vals[i]), (x1, f1), (x2, f2), key=lambda p: p[1])[0]
    al_f = math.exp(la)
    with mp.workdps(30):
        al = mp.mpf(al_f)
        D = polya_renyi_gamma(al, mp.mpf(1) / n_min, more)
        s = polya_renyi_series(al_f, n_min, t_f, more)
        if s is not None:
            D = min(D, mp.mpf(s))
        if D == mp.inf:
            return mp.mpf(1), al_f
        ln_delta = (al - 1) * (2 * d * max(D, 0) - eps) + al * mp.log(1 - 1 / al) \
            - mp.log(al - 1)
        return min(mp.exp(ln_delta), mp.mpf(1)), al_f


def federated_round_upper(n_min: int, t: mp.mpf, d: int, eps: mp.mpf
                          ) -> tuple[mp.mpf | None, str]:
    """Upper bound on delta(eps) of one add/remove round on the public plan (ideal sampler),
    own proof. D has k >= n_min survivors in the user's shard, D' = D + the user (k + 1). The
    noise of k + 1 shares is that of k shares plus an independent share (one Markov kernel on
    both laws), so (k, k + 1) is a post-processing of (n_min, n_min + 1): the worst case.
    Other shards hold the same users and laws for both (the plan does not move them).
    Two chains through an intermediate law (shares and data changed one at a time):
    add, D -> D': D's data with k + 1 shares, then the data (pure t: every noise law with
    >= n_min shares is DL(e^-t) plus independent noise, and the user's one-hot vector has l1
    norm 1): delta = delta_share(fewer || more); remove, D' -> D: D''s data with k shares
    first: delta_share(more || fewer). (The library charges e^t times the larger: sound, up to
    e^t looser.) None when eps <= t (no room for the share)."""
    e_s = eps - t
    if e_s <= 0:
        return None, f"eps {float(eps):.4g} <= noise eps {float(t):.4g}: no room for the share"
    d_add, al_add = share_pair_delta(n_min, t, d, e_s, more=False)
    d_rem, al_rem = share_pair_delta(n_min, t, d, e_s, more=True)
    return max(d_add, d_rem), (f"share pair n_min={n_min} vs +1 over {d} cell(s) at "
                               f"eps_share={float(e_s):.4g}: add {float(d_add):.3g} (alpha "
                               f"{al_add:.4g}), remove {float(d_rem):.3g} (alpha {al_rem:.4g})")


def _nbd_law(shape: mp.mpf, a: mp.mpf, width: int) -> dict[int, mp.mpf]:
    """{z: P(X - Y = z)} on [-width, width], X, Y ~ Polya(shape, a) i.i.d.; the shape-1 law
    is the discrete Laplace (closed form)."""
    with mp.workdps(30):
        if shape == 1:
            half = [dl_pmf(a, z) for z in range(width + 1)]
        else:
            law = _cell_law(shape, a, 0, width)
            half = [law[z] for z in range(width + 1)]
        return {z: half[abs(z)] for z in range(-width, width + 1)}


def exact_pair(cells: list[tuple[mp.mpf, mp.mpf, int]], a: mp.mpf, eps: mp.mpf,
               width: int) -> tuple[mp.mpf, mp.mpf]:
    """(lower, upper) on max over both directions of delta(eps) between P = prod_j
    (X_j - Y_j with shape s0_j) and Q = prod_j (shift_j + X_j - Y_j with shape s1_j), cells =
    [(s0_j, s1_j, shift_j)], one or two cells, |shift_j| <= 1: both laws exact on the window
    [-width, width] of every cell (computed on one point more, so that the shifted law is
    known there too); the lower bound sums the window only, the upper adds the first law's
    mass outside it (each term max(0, P - e^eps Q) <= P). 30 digits."""
    laws = []
    for s0, s1, sh in cells:
        if abs(sh) > 1:
            raise ValueError("shift must be -1, 0 or 1")
        p = _nbd_law(s0, a, width + 1)
        q = _nbd_law(s1, a, width + 1)
        win = range(-width, width + 1)
        laws.append(([p[z] for z in win], [q[z - sh] for z in win]))
    e = mp.exp(eps)
    with mp.workdps(30):
        outs = [(max(mp.mpf(0), 1 - mp.fsum(p)), max(mp.mpf(0), 1 - mp.fsum(q)))
                for p, q in laws]
        pad = mp.mpf(10) ** -26  # the rounding of 30-digit sums
        if len(laws) == 1:
            p, q = laws[0]
            one = mp.fsum(max(0, x - e * y) for x, y in zip(p, q))
            two = mp.fsum(max(0, y - e * x) for x, y in zip(p, q))
            return max(one, two), max(one + outs[0][0], two + outs[0][1]) + pad
        (p1, q1), (p2, q2) = laws
        one = two = mp.mpf(0)
        for px, qx in zip(p1, q1):
            for py, qy in zip(p2, q2):
                pp, qq = px * py, qx * qy
                if pp > e * qq:
                    one += pp - e * qq
                elif qq > e * pp:
                    two += qq - e * pp
        return max(one, two), max(one + outs[0][0] + outs[1][0],
                                  two + outs[0][1] + outs[1][1]) + pad


def _exact_width(t: mp.mpf) -> int:
    """Window of the exact one-cell laws: the discrete Laplace's mass beyond it is < e^-75."""
    return int(mp.ceil(75 / t)) + 4


def check_federated_share() -> str:
    """The add/remove charge of a federated round against exact laws on small cases: noise
    t = 1 (a = e^-1), n_min in {6, 18, 60}, d in {1, 2} cells (the user's data in cell 0), the
    worst pair n_min vs n_min + 1 survivors (shapes 1 vs 1 + 1/n_min in every cell); its exact
    delta(eps) (both directions, 30 digits) must not exceed :func:`federated_round_upper` at
    eps = t + eps_share; the pair one share further (n_min + 1 vs n_min + 2) must be no harder
    (the post-processing that makes n_min the worst case); the series and the Gamma closed
    form must agree in order (the closed form is the a -> 1 limit, so >= the series)."""
    t = mp.mpf(1)
    a = mp.exp(-t)
    w = _exact_width(t)
    cases = viol = 0
    worst = mp.mpf(0)
    mono_ok = mono = 0
    for n_min in (6, 18, 60):
        h = mp.mpf(1) / n_min
        for d in (1, 2):
            for e_s in (mp.mpf("0.15"), mp.mpf("0.4")):
                bound, _ = federated_round_upper(n_min, t, d, t + e_s)
                cells = [(mp.mpf(1), 1 + h, 1)] + [(mp.mpf(1), 1 + h, 0)] * (d - 1)
                lo, _ = exact_pair(cells, a, t + e_s, w)
                cases += 1
                viol += lo > bound
                if bound < 1:
                    worst = max(worst, lo / bound)
        for e_s in (mp.mpf("0.05"), mp.mpf("0.15")):
            x = exact_pair([(mp.mpf(1), 1 + h, 1)], a, t + e_s, w)[0]
            y = exact_pair([(1 + h, 1 + 2 * h, 1)], a, t + e_s, w)[0]
            mono += 1
            mono_ok += y <= x
    ser = 0
    for n_min, tt in ((6, 1.0), (18, 0.3), (9000, 0.05)):
        for al in (2.0, 40.0, 3.0 * n_min):
            for more in (True, False):
                s = polya_renyi_series(al, n_min, tt, more)
                gm = polya_renyi_gamma(mp.mpf(al), mp.mpf(1) / n_min, more)
                ser += s is not None and (gm == mp.inf or gm >= s * (1 - 1e-9))
    return (f"federated add/remove, the joining share's charge (own Renyi chain) vs exact laws, "
            f"n_min in {{6, 18, 60}}, d in {{1, 2}} cells, t = 1: {cases} cases, {viol} "
            f"violations, largest exact/bound {float(worst):.3g}; worst pair at n_min: "
            f"{mono_ok}/{mono} no easier than one share on; Gamma form >= series in {ser}/18")


def _stated_n_min(g: dict) -> int | None:
    m = re.search(r"n_min=(\d+)", " ".join(map(str, g.get("notes", []))))
    return int(m.group(1)) if m else None


def audit_federated_plan(rep: dict, name: str, extra: dict) -> tuple[Row, list[str]]:
    """Add/remove on the public shard plan (``max_users`` in the report): every round's claim
    (eps_q, delta_q) against :func:`federated_round_upper` (own proof, worst pair n_min vs
    n_min + 1 survivors in the user's shard) plus the Polya tables' total variation; rounds
    of one cell also exactly (the round is then that cell's law: exact hockey-stick of the
    worst pair). Whole release: basic composition of the rounds (adaptive, each round's query
    fixed by the earlier outputs). Lower bound: round 1 (the root, one cell, fixed before any
    output) for the worst pair, exact. With ``extra["n"]`` (a generated run, every client
    surviving) the concrete neighbours of round 1 are also evaluated, and the OLD layout's
    pair at the same n, to show what the plan changed."""
    g = rep["guarantee"]
    p = g["parameters"]
    eps_c, delta_c = float(g["epsilon"]), float(g["delta"])
    N, S, f = int(p["max_users"]), int(p["shard_size"]), float(p["dropout"])
    K, n_min = federated_plan(N, S, f)
    notes = _n_note(rep, "add_remove")
    stated = _stated_n_min(g)
    if stated is not None and stated != n_min:
        notes.append(f"report states n_min={stated}, the plan gives {n_min}: the smaller used")
        n_min = min(n_min, stated)
    steps, rounds = g["event"]["steps"], rep.get("rounds", [])
    if len(steps) != len(rounds):
        notes.append(f"{len(steps)} events but {len(rounds)} rounds recorded")
    agg = str(p.get("aggregation", rep.get("aggregation", "")))
    per = K if agg == "simulate" else N  # Polya draws per cell and sign: shards or clients
    h = mp.mpf(1) / n_min
    details = [f"  plan: max_users={N}, shard_size={S}, dropout={f}: K={K} shard(s), "
               f"n_min={n_min} (each client's Polya shape 1/{n_min})"]
    ups: list[mp.mpf] = []
    eps_sum = mp.mpf(0)
    for k, (st, rd) in enumerate(zip(steps, rounds), 1):
        eps_q, delta_q = mp.mpf(st["epsilon"]), float(st["delta"])
        if not _close(float(rd.get("delta", delta_q)), delta_q):
            notes.append(f"round {k}: rounds[] delta {rd['delta']} != event delta {delta_q}")
        eps_sum += eps_q
        t = mp.mpf(rd["noise_epsilon"])
        d = int(rd["vector_length"])
        tv = 2 * d * per * mp.mpf(SAMPLER_TV)
        tv_term = (1 + mp.exp(eps_q)) * tv
        up, how = federated_round_upper(n_min, t, d, eps_q)
        exact = ""
        if d == 1 and _exact_width(t) <= 400:
            lo_x, up_x = exact_pair([(mp.mpf(1), 1 + h, 1)], mp.exp(-t), eps_q, _exact_width(t))
            up = up_x if up is None else min(up, up_x)
            exact = f"; one cell: exact delta in [{float(lo_x):.3g}, {float(up_x):.3g}]"
        total_up = None if up is None else up + tv_term
        ups.append(total_up)
        flag = "" if total_up is not None and total_up <= delta_q * (1 + REL_TOL) \
            else "  <-- not proven"
        details.append(f"  round {k}: claimed ({float(eps_q):.4g}, {delta_q:.3g}), noise eps "
                       f"{float(t):.4g}, {d} cell(s): upper "
                       f"{'-' if total_up is None else format(float(total_up), '.3g')} "
                       f"({how}; sampler {float(tv_term):.1e}){exact}{flag}")
    # release: basic composition; lower bound from round 1 alone (a projection)
    upper = None
    if ups and all(u is not None for u in ups) and eps_sum <= mp.mpf(eps_c) * (1 + REL_TOL):
        upper = float(mp.fsum(ups))
    if not _close(float(eps_sum), eps_c):
        notes.append(f"rounds spend eps {float(eps_sum):.9g}, claimed {eps_c:.9g}")
    t1 = mp.mpf(rounds[0]["noise_epsilon"])
    a1 = mp.exp(-t1)
    w1 = min(_exact_width(t1), 150)
    lower = float(exact_pair([(mp.mpf(1), 1 + h, 1)], a1, mp.mpf(eps_c), w1)[0])
    basis = (f"public plan K={K}, n_min={n_min}; per round: pure DL(e^-noise eps) + the joining "
             f"share's Renyi bound (own), both chains; round 1 exact worst pair (n_min vs "
             f"n_min + 1) for the lower bound")
    n = extra.get("n")
    if n is not None:
        details.extend(_federated_concrete(int(n), N, S, f, K, n_min,
                                           mp.mpf(steps[0]["epsilon"]), t1))
    return Row(name, "add_remove", (eps_c, delta_c), upper, lower, basis, notes), details


def _federated_concrete(n: int, N: int, S: int, f: float, K: int, n_min: int,
                        eps1: mp.mpf, t1: mp.mpf) -> list[str]:
    """Round 1 (one cell) of a generated run with n users, all surviving: the released total
    for n against n + 1 (and n - 1) users on the public plan, exact; and the OLD layout's
    pair at the same n (consecutive blocks of S, n_min from each block, noise at the round's
    eps, claimed delta only the tables' charge)."""
    out = []
    w = min(_exact_width(t1), 150)
    full = w == _exact_width(t1)
    window = "" if full else (f" (laws on +-{w} of the +-{_exact_width(t1)} the mass needs: "
                              "lower bounds only; the upper bound is the round's)")
    a1 = mp.exp(-t1)
    sizes = [len(range(j, n, K)) for j in range(K)]
    for n2 in (n + 1, n - 1):
        if n2 > N:
            out.append(f"  n={n} vs {n2}: more users than max_users={N}: refused (outside the "
                       "domain of the claim)")
            continue
        j = (n2 - 1 if n2 > n else n - 1) % K  # the id of the joining / leaving user
        s2 = [s + (1 if n2 > n else -1) * (i == j) for i, s in enumerate(sizes)]
        if min(s2) < n_min:
            out.append(f"  n={n} vs {n2}: shard {j} would keep {s2[j]} < n_min: refused")
            continue
        s0, s1 = mp.mpf(n) / n_min, mp.mpf(n2) / n_min
        rel = exact_pair([(s0, s1, n2 - n)], a1, eps1, w)
        srv = exact_pair([(mp.mpf(sizes[j]) / n_min, mp.mpf(s2[j]) / n_min, n2 - n)], a1,
                         eps1, w)

        def show(x: tuple) -> str:
            if full:
                return f"in [{float(x[0]):.3g}, {float(x[1]):.3g}]"
            return f">= {float(x[0]):.3g}"
        out.append(f"  n={n} vs {n2} (user id {max(n, n2) - 1} in shard {j}: {sizes[j]} vs "
                   f"{s2[j]} clients): released count, exact delta(eps_1={float(eps1):.4g}) "
                   f"{show(rel)}; the server's view of shard {j} {show(srv)}{window}")
    k0, k1 = _federated_shape(n, S, f), _federated_shape(n + 1, S, f)
    w_old = min(_exact_width(eps1), 150)
    lo, _ = exact_pair([(k0, k1, 1)], mp.exp(-eps1), eps1, w_old)
    boundary = " (crosses a block boundary: a new shard of one client)" if n % S == 0 else ""
    out.append(f"  OLD layout at the same n: {n} vs {n + 1} users{boundary}, noise shape "
               f"{float(k0):.4g} vs {float(k1):.4g} at a=e^-{float(eps1):.4g}: delta(eps_1) "
               f">= {float(lo):.3g} where it claimed only the tables' charge (< 1e-20)")
    return out


def audit_federated(rep: dict, name: str, extra: dict | None = None
                    ) -> tuple[Row, list[str]]:
    """Federated adaptive histogram ([Bagdasaryan22]_ Alg. 2): sequential rounds, each round
    every cell gets the survivors' Polya(1/n_min, a) differences; basic composition.

    * add/remove with ``max_users`` (the public shard plan): :func:`audit_federated_plan`;
    * add/remove without ``max_users`` (reports of the OLD layout, noise planned from n):
      exact one-cell lower bound of round 1 for n against n +- 1 users
      (:func:`federated_round_lower`), each later round's own claim checked likewise;
    * zero-out, replace-one, and add/remove through a fixed number of sampled users (rounds
      calibrated for replace-one): the noise law is the same for both neighbours, DL(e^-t)
      plus independent noise, so each round is pure (t Delta)-DP with Delta = 1 (zero-out) or
      2 (replace, sampled), plus the tables' total variation (recomputed from the draws and
      compared with the recorded one, the larger used)."""
    g = rep["guarantee"]
    p = g["parameters"]
    nb = _neighbour(g)
    if nb == "add_remove" and p.get("max_users") is not None \
            and p.get("users_per_query") is None:
        return audit_federated_plan(rep, name, extra or {})
    eps_c, delta_c = float(g["epsilon"]), float(g["delta"])
    steps = g["event"]["steps"]
    details: list[str] = []
    notes = _n_note(rep, nb)
    lower = upper = None
    basis = "per round: NB-difference noise; "
    old_layout = nb == "add_remove" and "max_users" not in p
    if old_layout:
        U = int(p.get("users_per_query") or rep.get("users"))
        S, drop = int(p["shard_size"]), float(p["dropout"])
        if U != int(rep.get("users", U)):
            notes.append("users_per_query < users: the sampled U stays fixed for a neighbour")
            basis += "U fixed by sampling (old layout): noise law independent of n; "
        else:
            notes.append("no max_users: the OLD layout (shards and n_min follow n)")
            t0 = mp.mpf(steps[0]["levels"][0]["parameter"])
            width = int(mp.ceil(25 / t0)) + 10  # mass outside < 1e-9: a lower bound
            lower, how = federated_round_lower(U, S, drop, mp.exp(-t0), mp.mpf(eps_c), width)
            basis += f"round 1 one-cell pair, OLD layout ({how})"
            for k, (st, rd) in enumerate(zip(steps, rep.get("rounds", [])), 1):
                t = mp.mpf(st["levels"][0]["parameter"])
                w = int(mp.ceil(25 / t)) + 10
                d_k, how_k = federated_round_lower(U, S, drop, mp.exp(-t), t, w)
                flag = "  <-- exceeds the round's claimed delta" \
                    if d_k > float(rd["delta"]) * (1 + REL_TOL) else ""
                details.append(f"  round {k}: claimed ({float(t):.4g}, {rd['delta']:.3g}); "
                               f"exact lower bound delta >= {d_k:.4g} ({how_k}){flag}")
    if lower is None:  # the noise law does not depend on the neighbour: DL at least
        sampled = nb == "add_remove" and not old_layout
        sens = 2 if nb == "replace" or sampled else 1
        if sampled:
            notes.append("sampled U slots: neighbours' samples couple to one replaced user "
                         "(replace-one noise, sensitivity 2)")
        params = [mp.mpf(st["levels"][0]["parameter"]) for st in steps]
        for st in steps:
            rec = int(st["levels"][0].get("sensitivity", sens))
            if rec != sens:
                notes.append(f"event sensitivity {rec}, relation needs {sens}")
        up, lower = _pure_levels(params, [sens] * len(params), mp.mpf(eps_c))
        tvs = []
        agg = str(p.get("aggregation", rep.get("aggregation", "")))
        for st, rd in zip(steps, rep.get("rounds", [{}] * len(steps))):
            tv = mp.mpf(st.get("tv", 0))
            users = rd.get("users", p.get("users_per_query"))
            per = rd.get("shards") if agg == "simulate" else users
            if per is not None:
                own = 2 * int(rd.get("vector_length", st["levels"][0].get("dimension", 1))) \
                    * int(per) * mp.mpf(SAMPLER_TV)
                if own > tv * (1 + REL_TOL):
                    notes.append(f"recorded tv {float(tv):.3g} < recomputed {float(own):.3g}")
                tv = max(tv, own)
            tvs.append(tv)
        if up is not None:
            upper = float(up + mp.fsum((1 + mp.exp(t * sens)) * tv
                                       for t, tv in zip(params, tvs)))
        basis += (f"DL pure part (sensitivity {sens}) + the Polya tables' tv (draws "
                  "recomputed)")
        for k, (t, st, tv) in enumerate(zip(params, steps, tvs), 1):
            details.append(f"  round {k}: pure eps t*Delta = {float(t * sens):.6g}, event "
                           f"delta {float(st.get('delta', 0)):.3g}, tables' tv {float(tv):.3g}")
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
    # federated: the command's defaults (add/remove, max_users = n = 10,000, one shard); the
    # issue's boundary at scale (10,000 users, max_users 10,001: two shards by id parity);
    # two small cases checked on exact laws, all clients surviving: a pair inside one shard
    # (19 users, max_users 20) and the old layout's block boundary (40 users = 2 blocks of
    # 20, the 41st opened a third; max_users 41: 3 shards by id mod 3); zero-out; sampled
    # users per sub-query (add/remove through replace-one)
    _cli("federated", "--seed", 1, "--out", out / "fed")
    runs.append(("federated (defaults)", out / "fed", {}))
    _cli("federated", "--seed", 1, "--n", 10000, "--max-users", 10001, "--dropout-rate", 0,
         "--out", out / "fed10k")
    runs.append(("federated N=10001", out / "fed10k", {"n": 10000}))
    _cli("federated", "--seed", 1, "--n", 19, "--max-users", 20, "--shard-size", 20,
         "--depth", 4, "--dropout-rate", 0, "--out", out / "fed19")
    runs.append(("federated n=19 N=20", out / "fed19", {"n": 19}))
    _cli("federated", "--seed", 1, "--n", 40, "--max-users", 41, "--shard-size", 20,
         "--depth", 4, "--epsilon", 2, "--dropout-rate", 0, "--out", out / "fed40")
    runs.append(("federated n=40 N=41", out / "fed40", {"n": 40}))
    _cli("federated", "--seed", 1, "--n", 2000, "--shard-size", 1000, "--depth", 5,
         "--neighbour", "zero_out", "--out", out / "fedz")
    runs.append(("federated zero_out", out / "fedz", {}))
    _cli("federated", "--seed", 1, "--n", 3000, "--users-per-query", 1000, "--shard-size",
         1000, "--depth", 5, "--out", out / "fedu")
    runs.append(("federated U=1000 sampled", out / "fedu", {}))
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
    print(" ", check_federated_share())
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
            row, det = audit_federated(rep, name, extra)
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
