"""Polya noise: exact pmf identities ([Bagdasaryan22]_ Thm 4.2) and sampler goodness of fit.

References
----------
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4). arXiv:2111.02356.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import pytest
from scipy import stats

from shuffledp.encoders.noise.laplace import discrete_laplace_pmf
from shuffledp.encoders.noise.polya import (
    _DifferenceDraws,
    _lead_scan,
    _table_kernel,
    _TableSet,
    _tail_fill,
    _tie_fill,
    polya,
    polya_difference,
    polya_difference_sum_pmf,
    polya_pmf,
    polya_table,
)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("a", [0.2, 0.6, 0.9])
def test_sum_of_n_polya_differences_is_discrete_laplace_exactly(n, a):
    # Truncate each one-sided pmf where a^K < 1e-18; the convolution is then exact to 1e-12.
    support = int(math.ceil(math.log(1e-18) / math.log(a))) + 10
    k, pmf = polya_difference_sum_pmf(n, 1.0 / n, a, support)
    window = np.abs(k) <= support // 2
    expected = discrete_laplace_pmf(k[window], a)
    assert np.max(np.abs(pmf[window] - expected)) < 1e-9
    assert abs(pmf.sum() - 1.0) < 1e-9


def test_scaled_sensitivity_calibration_gives_eps_dp_ratio():
    # a = exp(-eps / Delta): neighbouring sums differ by at most Delta, so the pmf ratio is
    # bounded by e^eps, with equality at distance Delta (App. F slip fixed).
    eps, delta_s, n = 0.7, 6, 4
    a = math.exp(-eps / delta_s)
    support = int(math.ceil(math.log(1e-18) / math.log(a)))
    k, pmf = polya_difference_sum_pmf(n, 1.0 / n, a, support)
    mid = np.abs(k) <= support // 3
    p = dict(zip(k[mid].tolist(), pmf[mid].tolist(), strict=True))
    worst = max(abs(math.log(p[x] / p[x + delta_s])) for x in range(-50, 50))
    assert worst == pytest.approx(eps, rel=1e-9)


def test_overprovisioned_shape_sums_to_laplace_plus_independent_noise():
    # n users with shape 1/n_min, n >= n_min: total shape n/n_min >= 1 = DL(a) + extra noise.
    a, n, n_min = 0.5, 5, 4
    k, pmf = polya_difference_sum_pmf(n, 1.0 / n_min, a, 80)
    k1, base = polya_difference_sum_pmf(1, 1.0, a, 80)
    _, extra = polya_difference_sum_pmf(1, (n - n_min) / n_min, a, 80)
    conv = np.convolve(base, extra)
    # both are centred on zero with lengths 2*half+1
    half = (conv.size - 1) // 2
    kk = np.arange(-half, half + 1)
    sel = np.abs(kk) <= 20
    ref = dict(zip(kk[sel].tolist(), conv[sel].tolist(), strict=True))
    got = dict(zip(k.tolist(), pmf.tolist(), strict=True))
    assert max(abs(got[x] - ref[x]) for x in ref) < 1e-12


def test_pmf_matches_scipy_negative_binomial():
    k = np.arange(0, 60)
    for s, a in [(0.02, 0.99), (0.5, 0.3), (3.7, 0.8)]:
        np.testing.assert_allclose(polya_pmf(k, s, a), stats.nbinom.pmf(k, s, 1 - a), rtol=1e-10)


def test_sampler_goodness_of_fit():
    # chi-square at level 1e-6 with a fixed seed: deterministic; false-failure rate 1e-6 if
    # the seed were random.
    rng = np.random.default_rng(12345)
    s, a, size = 0.25, 0.7, 200_000
    x = polya(s, a, size, rng)
    kmax = 25
    obs = np.bincount(np.minimum(x, kmax), minlength=kmax + 1)
    p = polya_pmf(np.arange(kmax), s, a)
    p = np.r_[p, 1 - p.sum()]
    res = stats.chisquare(obs, p * size)
    assert res.pvalue > 1e-6


def test_sum_of_sampled_differences_is_discrete_laplace():
    rng = np.random.default_rng(7)
    n, a, size = 10, 0.8, 100_000
    total = sum(polya_difference(1.0 / n, a, size, rng) for _ in range(n))
    kmax = 15
    ks = np.arange(-kmax, kmax + 1)
    clipped = np.clip(total, -kmax - 1, kmax + 1)
    obs = np.array([(clipped == k).sum() for k in range(-kmax - 1, kmax + 2)])
    p = discrete_laplace_pmf(ks, a)
    tail = (1 - p.sum()) / 2
    exp = np.r_[tail, p, tail] * size
    assert stats.chisquare(obs, exp).pvalue > 1e-6


def test_per_coordinate_a_broadcasts():
    rng = np.random.default_rng(0)
    a = np.array([0.1, 0.99])
    x = polya(1.0, np.repeat(a, 50_000), 100_000, rng)
    assert x[:50_000].mean() < 0.2 < 50 < x[50_000:].mean()


@pytest.mark.parametrize(
    "shape,a", [(0.0, 0.5), (-1, 0.5), (float("nan"), 0.5), (1.0, 0.0), (1.0, 1.0), (1.0, 2.0)]
)
def test_bad_parameters(shape, a):
    with pytest.raises(ValueError):
        polya(shape, a, 3, 0)


@pytest.mark.parametrize("s,a", [(0.02, 0.995), (0.3, 0.6), (1.5, 0.4)])
def test_single_difference_matches_exact_pmf(s, a):
    # the beta-binomial split of T = X + Y must give exactly the law of X - Y
    rng = np.random.default_rng(99)
    size = 200_000
    x = polya_difference(s, a, size, rng)
    k, pmf = polya_difference_sum_pmf(1, s, a, 4000)
    kmax = 12
    inner = np.abs(k) <= kmax
    p_in = pmf[inner]
    lo, hi = pmf[k < -kmax].sum(), pmf[k > kmax].sum()
    obs = np.r_[(x < -kmax).sum(), [(x == v).sum() for v in range(-kmax, kmax + 1)],
                (x > kmax).sum()]
    exp = np.r_[lo, p_in, hi]
    exp = exp / exp.sum() * size
    keep = exp > 5
    obs2 = np.r_[obs[keep], obs[~keep].sum()]
    exp2 = np.r_[exp[keep], exp[~keep].sum()]
    if exp2[-1] == 0:
        obs2, exp2 = obs2[:-1], exp2[:-1]
    assert stats.chisquare(obs2, exp2).pvalue > 1e-6


# --------------------------------------------------------------------------------------
# The kernels against the plain inversion X = #{k : T_k <= U} of the same U (exact checks:
# a kernel that agrees with the inversion on every U it is fed has the table's law).
# --------------------------------------------------------------------------------------
def _inverse(th: list[int], u: int) -> int:
    return bisect.bisect_right(th, u)


_M56 = (1 << 56) - 1
_M64 = (1 << 64) - 1


def _table_words(th, g, n_random):
    """(hi, lo) pairs: random ones, and ones equal to / next to every kind of threshold."""
    us = [int(x) for x in g.integers(0, 1 << 63, n_random)] + [int(x) << 64 for x in
                                                                 g.integers(0, 1 << 63, 8)]
    for k in sorted({0, 1, len(th) // 2, len(th) - 1}):
        for d in (-1, 0, 1):
            us.append((th[k] + d) % (1 << 128))
        us.append(th[k] | _M64)  # same high word, largest low word
        us.append((th[k] >> 64) << 64)  # same high word, low word 0
    us += [0, (1 << 128) - 1, th[0] - (1 << 64) if th[0] >= 1 << 64 else 0]
    return us


@pytest.mark.parametrize("s,a", [(0.3, 0.6), (1 / 48, 0.995), (2.5, 0.7)])
def test_guided_table_kernel_is_the_plain_inversion(s, a):
    t = polya_table(s, a)
    th = t.thresholds()
    g = np.random.default_rng(3)
    us = [u << 64 | int(x) for u, x in zip(g.integers(0, 1 << 63, 4000).tolist(),
                                            g.integers(0, 1 << 63, 4000).tolist(),
                                            strict=True)]
    us = [(u * 2) % (1 << 128) for u in us] + _table_words(th, g, 200)
    # the kernel reads the low word only when the high word reaches T_0's
    words = []
    for u in us:
        words.append(u >> 64)
        if (u >> 64) >= int(t.hi[0]):
            words.append(u & _M64)
    ts = _TableSet([t])
    out = np.empty(len(us), dtype=np.int64)
    i, pos = _table_kernel(np.array(words, dtype=np.uint64), 0, out,
                           np.zeros(len(us), np.int64), *ts.args())
    assert (i, pos) == (len(us), len(words))
    assert out.tolist() == [_inverse(th, u) for u in us]


@pytest.mark.parametrize("s,a_levels", [(0.3, (0.6, 0.2)), (1 / 48, (0.995, 0.9994)),
                                        (2.5, (0.7,))])
def test_split_difference_sampler_is_the_plain_inversion(s, a_levels):
    """_DifferenceDraws: the leading byte A_i of every sample; for the samples with
    A_i >= c_0 one word W each; for those whose high word ties with a threshold's one more
    word W' each. Feed crafted bytes and words (ties with thresholds, A_i = c_0, random)
    and compare every sample with the inversion of U = A 2^120 + W ... built as the class
    docstring says. Where the kernels did not read the rest of U, the inversion must give
    the same X for the smallest and the largest completion (exactness of the early
    decision)."""
    per = 40
    a_vec = np.repeat(np.array(a_levels), per)
    m = a_vec.size
    d = _DifferenceDraws(s, a_vec, m)
    by_a = {float(x): polya_table(s, float(x)) for x in set(a_levels)}
    g = np.random.default_rng(11)
    n = 2 * m
    lead = g.integers(0, 256, n)
    plan: dict[int, tuple[int, int | None]] = {}  # sample -> (U's bits 64..119, low word)
    for i in range(n):
        th = by_a[float(a_vec[i % m])].thresholds()
        kind = i % 5
        if kind == 0:
            lead[i] = th[0] >> 120  # the edge byte: goes on, mostly to 0
        elif kind in (1, 2):
            k = [0, len(th) - 1, len(th) // 3][i % 3]
            lead[i] = th[k] >> 120
            plan[i] = ((th[k] >> 64) & _M56, th[k] & _M64 if kind == 1 else None)
    want = np.zeros(m, dtype=np.int64)
    w1: list[int] = []  # step 2 words, one per sample that goes on
    w2: list[int] = []  # step 3 words, one per tie
    n_slow = 0
    for i in range(n):
        t = by_a[float(a_vec[i % m])]
        th = t.thresholds()
        A = int(lead[i])
        if A < th[0] >> 120:
            assert _inverse(th, A << 120) == _inverse(th, (A << 120) | ((1 << 120) - 1)) == 0
            continue
        n_slow += 1
        hi56, lo = plan.get(i, (int(g.integers(0, 1 << 56)), None))
        lo_full = lo if lo is not None else int(g.integers(0, 1 << 63)) * 2 + 1
        w1.append((hi56 << 8) | (lo_full >> 56))
        u_hi = (A << 56) | hi56
        if u_hi >= int(t.hi[0]) and u_hi in {x >> 64 for x in th}:  # a tie: reads W'
            w2.append(((lo_full & _M56) << 8) | int(g.integers(0, 256)))
            x = _inverse(th, (u_hi << 64) | lo_full)
        else:
            x = _inverse(th, u_hi << 64)
            assert _inverse(th, (u_hi << 64) | _M64) == x
        want[i % m] += x if i < m else -x
    assert len(w2) >= 8  # ties were exercised
    lead8 = lead.astype(np.uint8)
    slow, ties = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    ns = _lead_scan(lead8, d.lead_at, slow)
    assert ns == n_slow
    row = np.zeros(m, dtype=np.int64)
    words = np.array(w1, dtype=np.uint64)
    nt = _tail_fill(words, slow[:ns], lead8, row, d.seg, d.seg_table, *d.tables.args(),
                    ties)
    assert nt == len(w2)
    ta = d.tables
    _tie_fill(np.array(w2, dtype=np.uint64), ties[:nt], words, slow[:ns], lead8, row, d.which,
              ta.offs, ta.sizes, ta.t_hi, ta.t_lo)
    np.testing.assert_array_equal(row, want)


def test_split_difference_sampler_reads_the_stream_as_documented():
    a_vec = np.repeat([0.99, 0.999], [300, 700])
    d = _DifferenceDraws(0.05, a_vec, a_vec.size)
    got = d.draw(np.random.default_rng(21))
    raw = np.random.default_rng(21).bit_generator
    n = 2 * a_vec.size
    lead = raw.random_raw((n + 7) // 8).astype("<u8").view(np.uint8)[:n]
    slow, ties = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    ns = _lead_scan(lead, d.lead_at, slow)
    row = np.zeros(a_vec.size, dtype=np.int64)
    assert _tail_fill(raw.random_raw(ns), slow[:ns], lead, row, d.seg, d.seg_table,
                      *d.tables.args(), ties) == 0
    np.testing.assert_array_equal(got, row)
    with pytest.raises(ValueError, match="row"):
        d.add_to(np.zeros(3, dtype=np.int64), 0)


@pytest.mark.parametrize("s,a", [(1 / 48, 0.9994), (0.3, 0.6)])
def test_split_difference_sampler_goodness_of_fit(s, a):
    # chi-square against the exact pmf of X - Y at level 1e-6 with a fixed seed:
    # deterministic; false-failure rate 1e-6 if the seed were random.
    size = 100_000
    d = _DifferenceDraws(s, a, size)
    x = np.concatenate([d.draw(np.random.default_rng(5 + j)) for j in range(3)])
    k, pmf = polya_difference_sum_pmf(1, s, a, 60_000 if a > 0.99 else 200)
    edges = [-np.inf, -2000, -300, -50, -10, -2, -1, 0, 1, 2, 10, 50, 300, 2000, np.inf]
    edges = edges if a > 0.99 else [-np.inf, -3, -2, -1, 0, 1, 2, 3, np.inf]
    obs = np.array([((x >= lo) & (x < hi)).sum() for lo, hi in zip(edges[:-1], edges[1:],
                                                                      strict=True)])
    exp = np.array([pmf[(k >= lo) & (k < hi)].sum() for lo, hi in zip(edges[:-1], edges[1:],
                                                                         strict=True)])
    assert abs(exp.sum() - 1) < 1e-6
    assert stats.chisquare(obs, exp / exp.sum() * x.size).pvalue > 1e-6
