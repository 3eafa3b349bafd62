"""Exact privacy checks of PrivHist's noise-adding steps on tiny histograms (n <= 8).

Steps 2-4 of PrivHist ([Suresh19]_) map h to (H^cs, H^cl) through Z_b and i.i.d. geometric
noise; given N (released by the eps1-DP step 1) the threshold T and the fake-label count M are
public, so the check runs for fixed (T, M). The output pmf is computed exactly: for an output
(low, high) it is sum_{z_b} P(Z_b = z_b) prod P(noise = low - low(z_b)) prod P(noise = high -
high(z_b)) over the z_b whose high part has len(high) labels, using the mechanism's own
:func:`split_histogram`. The z_b sum is truncated at |z_b| <= 60 and the tail mass
2 a^61 / (1 + a) is added to the numerator, so the ratio bound is rigorous. A float64 sweep
over a box of outputs finds the worst points; those are re-evaluated with mpmath at 60
digits. These tests are deterministic (no sampling, no false failures).

References
----------
.. [Suresh19] A. T. Suresh, "Differentially private anonymized histograms", NeurIPS 2019,
   PrivHist step 2, App. C (Lemma 8, Lemma 9). arXiv:1910.03553.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest

from shuffledp.analyzers.privhist import AnonHistogram, sorted_l1, split_histogram
from shuffledp.analyzers.privhist.mechanism import _boundaries, _smoothed_queries

EPS2 = 0.7
ZMAX = 60


def partitions(n: int, largest: int | None = None):
    largest = n if largest is None else largest
    if n == 0:
        yield ()
        return
    for k in range(min(n, largest), 0, -1):
        for rest in partitions(n - k, k):
            yield (k, *rest)


def hist(counts) -> AnonHistogram:
    return AnonHistogram.from_counts(list(counts)) if counts else AnonHistogram.empty()


ALL = [hist(p) for n in range(0, 9) for p in partitions(n)]
PAIRS = [(a, b) for a, b in itertools.combinations(ALL, 2) if sorted_l1(a, b) == 1]


def _parts(h, T, M, split=split_histogram):
    """{len(high part): {z_b: split}} for |z_b| <= ZMAX (grouped: an output's length of the
    high part selects the z_b that can produce it)."""
    out: dict[int, dict[int, object]] = {}
    for z in range(-ZMAX, ZMAX + 1):
        p = split(h, T, M, z)
        out.setdefault(p.high_counts.size, {})[z] = p
    return out


def _log_pmf(k, eps):
    """log P(G = k) for G ~ G(e^-eps), vectorised."""
    return math.log((1 - math.exp(-eps)) / (1 + math.exp(-eps))) - eps * np.abs(k)


def _prob(parts, low, high, eps, exact=False):
    """P((H^cs, H^cl) = (low, high)) (float64, or mpmath when ``exact``)."""
    if exact:
        a = mpmath.exp(-mpmath.mpf(eps))
        c = (1 - a) / (1 + a)
        tot = mpmath.mpf(0)
        for z, p in parts.get(len(high), {}).items():
            e = abs(z) + sum(abs(int(x)) for x in np.subtract(low, p.low_cumulative)) + \
                sum(abs(int(x)) for x in np.subtract(high, p.high_counts))
            tot += c ** (1 + len(low) + len(high)) * a ** e
        return tot
    terms = [_log_pmf(z, eps) + _log_pmf(np.subtract(low, p.low_cumulative), eps).sum()
             + _log_pmf(np.subtract(high, p.high_counts), eps).sum()
             for z, p in parts.get(len(high), {}).items()]
    return float(np.exp(np.logaddexp.reduce(terms))) if terms else 0.0


def _sparse_shifts(size, span):
    """Every integer vector of length ``size`` with entries in [-span, span] and at most two
    of them nonzero (the filtered product over (2 span + 1)^size, generated directly: the
    product has 3^15 elements at T = 3, M = 9)."""
    steps = [d for d in range(-span, span + 1) if d]
    yield np.zeros(size, dtype=np.int64)
    for k in (1, 2):
        for pos in itertools.combinations(range(size), k):
            for vals in itertools.product(steps, repeat=k):
                shift = np.zeros(size, dtype=np.int64)
                shift[list(pos)] = vals
                yield shift


def _outputs(parts_list, span=1):
    """Outputs near every noiseless value with |z_b| <= 2, at most two coordinates shifted,
    each by <= span."""
    seen = set()
    for parts in parts_list:
        near = [p for group in parts.values() for z, p in group.items() if abs(z) <= 2]
        for p in near:
            base = np.concatenate([p.low_cumulative, p.high_counts])
            for shift in _sparse_shifts(base.size, span):
                out = tuple(int(x) for x in base + shift)
                key = (p.low_cumulative.size, out)
                if key not in seen:
                    seen.add(key)
                    yield p.low_cumulative.size, out


def worst_log_ratio(h1, h2, T, M, eps=EPS2, split=split_histogram, recheck=3):
    """max over a box of outputs of |log P(out | h1) - log P(out | h2)| (rigorous upper bound
    at the worst points: mpmath with the z_b tail added to the numerator)."""
    p1, p2 = _parts(h1, T, M, split), _parts(h2, T, M, split)
    scored = []
    for t, out in _outputs([p1, p2]):
        low, high = out[:t], out[t:]
        a, b = _prob(p1, low, high, eps), _prob(p2, low, high, eps)
        if a > 0 and b > 0:
            scored.append((abs(math.log(a / b)), low, high))
        elif a > 0 or b > 0:
            scored.append((math.inf, low, high))
    scored.sort(reverse=True)
    tail = 2 * mpmath.exp(-eps * (ZMAX + 1)) / (1 + mpmath.exp(-eps))
    worst = 0.0
    with mpmath.workdps(60):
        for _, low, high in scored[:recheck]:
            a, b = _prob(p1, low, high, eps, True), _prob(p2, low, high, eps, True)
            if a == 0 or b == 0:
                return math.inf
            worst = max(worst, float(mpmath.log((a + tail) / b)), float(mpmath.log((b + tail) / a)))
    return max(worst, scored[0][0]) if scored else 0.0


def test_neighbour_pairs_enumerated():
    # partitions of 0..8: 1+1+2+3+5+7+11+15+22 = 67 histograms
    assert len(ALL) == 67
    assert all(abs(a.n - b.n) == 1 for a, b in PAIRS)
    # a partition of n <= 7 has (number of distinct parts + 1) upper neighbours: 120 pairs
    assert len(PAIRS) == sum(len(set(p)) + 1 for n in range(8) for p in partitions(n)) == 120


@pytest.mark.parametrize("T,M", [(1, 1), (2, 1), pytest.param(3, 2, marks=pytest.mark.slow)])
def test_steps_2_to_4_are_eps2_dp_on_all_tiny_neighbours(T, M):
    """Lemma 8 of [Suresh19]_, exactly, for every neighbouring pair with n <= 8 (cases 1-3)."""
    worst = max(worst_log_ratio(a, b, T, M) for a, b in PAIRS)
    assert worst <= EPS2 * (1 + 1e-9)
    assert worst >= EPS2 * (1 - 1e-6)  # the bound is attained: the check can fail


def test_app_c_split_case():
    """App. C.1.1's example h1 = {phi_T = 1, phi_{n-T} = 1}, h2 = {phi_{T+1} = 1,
    phi_{n-T-1} = 1}: the paper calls them neighbours, but their sorted-l1 distance is 2
    (docs/errata.md). Each of the two neighbour steps through {phi_{T+1} = 1, phi_{n-T} = 1}
    is eps2-DP exactly; the pair itself is 2 eps2-DP (group privacy) and not eps2-DP."""
    T, n = 2, 7
    h1, mid, h2 = hist([T, n - T]), hist([T + 1, n - T]), hist([T + 1, n - T - 1])
    assert sorted_l1(h1, h2) == 2
    assert sorted_l1(h1, mid) == 1 and sorted_l1(mid, h2) == 1
    for M in (1, 2):
        assert worst_log_ratio(h1, mid, T, M) <= EPS2 * (1 + 1e-9)  # case 1: differ at T, T+1
        assert worst_log_ratio(mid, h2, T, M) <= EPS2 * (1 + 1e-9)  # case 3: above T
        pair = worst_log_ratio(h1, h2, T, M)
        assert EPS2 * (1 + 1e-6) < pair <= 2 * EPS2 * (1 + 1e-9)


def _slip_split(h, T, M, z_b):
    """Step 2(b) as printed (phi^b_T left at phi^a_T: Z_b labels created at T + 1, none
    removed at T). Used only to show the exact check catches it."""
    right = split_histogram(h, T, M, z_b)
    low = split_histogram(h, T, M, 0).low_cumulative
    return type(right)(low, right.high_counts)


def test_step_2b_erratum_mass_is_moved_not_created():
    """phi^b_T = phi^a_T - Z_b: the labels of H^b are those of h plus 2M whatever Z_b."""
    h = hist([1, 2, 2, 3, 5])
    T, M = 2, 3
    for z in range(-M, M + 1):
        p = split_histogram(h, T, M, z)
        assert int(p.low_cumulative[0]) + p.high_counts.size == h.support + 2 * M
        assert int(p.low_cumulative[T - 1]) == 2 + M - z  # phi^b_T = phi^a_T - Z_b


def test_step_2b_as_printed_is_not_private():
    """With the text's step 2(b) the exact check fails on a case-1 pair (differ at T, T+1)."""
    T, M = 2, 1
    h1, h2 = hist([T, 5]), hist([T + 1, 5])
    assert worst_log_ratio(h1, h2, T, M) <= EPS2 * (1 + 1e-9)
    assert worst_log_ratio(h1, h2, T, M, split=_slip_split) > 1.5 * EPS2


@pytest.mark.parametrize("N", [4, 9, 30])
def test_high_privacy_query_moves_one_coordinate_by_one(N):
    """Lemma 9: between neighbours the integer smoothed query d_i phi^v_{s_i+} changes in
    exactly one coordinate, by exactly 1, for boundary sets built from arbitrary noisy high
    counts; so DL noise of sensitivity R on R Q gives eps3-DP (pmf ratio a^-R = e^eps3)."""
    rng = np.random.default_rng(3)
    for _trial in range(6):
        T = int(rng.integers(1, 4))
        noisy_high = rng.integers(1, 3 * N, size=int(rng.integers(0, 5)))
        S = _boundaries(N, T, 0.2, noisy_high)
        for a, b in PAIRS:
            d = np.subtract(_smoothed_queries(a, S, N), _smoothed_queries(b, S, N))
            capped = max(a.counts.max(initial=0), b.counts.max(initial=0)) > 2 * N
            assert np.abs(d).sum() == (0 if capped and not d.any() else 1)


# ----------------------------------------------------------------------------- steps 1-4 jointly
def _log_pmf_total(Np: int, n: int, eps1: float) -> float:
    """log P(N' = Np) for N' = max(n + G, 0), G ~ G(e^-eps1) (step 1, clamped at 0)."""
    a = math.exp(-eps1)
    c = (1 - a) / (1 + a)
    if Np > 0:
        return math.log(c) + (-eps1) * abs(Np - n)
    return math.log(c) + (-eps1) * n - math.log1p(-a)  # sum_{j <= -n} c a^|j|


@pytest.mark.slow
def test_steps_1_to_4_jointly_on_tiny_neighbours():
    """The release (N', H^cs, H^cl) of PrivHist's low-privacy branch, with T and M computed
    from N' as the mechanism does (:func:`_split_parameters`): for every neighbouring pair with
    n <= 4 and every N' in 0..8, log P(N', out | h1) - log P(N', out | h2) is at most
    eps1 + eps2, exactly (the conditional part by :func:`worst_log_ratio`), and the bound is
    attained. Truncation: N' <= 8 (every (T, M) those N' produce)."""
    from shuffledp.analyzers.privhist.mechanism import _split_parameters, budget_split

    eps = 2.0  # low-privacy branch; the paper split gives eps1 = eps2 = eps / 3
    e1, e2, _ = budget_split(eps, "paper")
    pairs = [(a, b) for a, b in PAIRS if max(a.n, b.n) <= 4]
    cache: dict = {}
    worst = 0.0
    for a, b in pairs:
        for Np in range(0, 9):
            lr_n = abs(_log_pmf_total(Np, a.n, e1) - _log_pmf_total(Np, b.n, e1))
            if Np == 0:
                total = lr_n  # N' = 0 releases the empty histogram: nothing else
            else:
                T, M = _split_parameters(Np, eps, e2)
                key = (id(a), id(b), T, M)
                if key not in cache:
                    cache[key] = worst_log_ratio(a, b, T, M, eps=e2, recheck=1)
                total = lr_n + cache[key]
            worst = max(worst, total)
    assert worst <= (e1 + e2) * (1 + 1e-9)
    assert worst >= (e1 + e2) * (1 - 1e-6)
