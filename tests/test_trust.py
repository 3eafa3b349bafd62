"""Regression tests for the review's privacy findings (issue "trustworthy releases").

Each test fails on the code before the fix: r below the split-and-mix requirement was
accepted, seeds reached the device encoder, the Polya and central noise came from
floating-point samplers, and neighbour relations were free strings.
"""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats
from shuffle_helpers import params_for, random_users

from shuffledp import Grid
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.accounting.summation import delta_split, shares_needed
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.modular import ModularAccumulator, analyze
from shuffledp.encoders.encoder import encode_shares, encode_user
from shuffledp.encoders.noise.laplace import (
    discrete_laplace_exact,
    discrete_laplace_pmf,
    dl_rational,
)
from shuffledp.encoders.noise.polya import SAMPLER_TV_MAX, polya_difference, polya_table
from shuffledp.protocol.params import ProtocolParams, derive_params
from shuffledp.randomness import SecureRandom


# ----------------------------------------------------------------- r vs split-and-mix
def _edited(p: ProtocolParams, **changes) -> str:
    d = json.loads(p.to_json())
    d.update(changes)
    return json.dumps(d)


def test_params_file_edited_to_fewer_shares_is_refused_at_the_boundary():
    p = params_for(Grid(8, 8), n=12, B=16)
    delta_mix, _ = delta_split(p.epsilon, p.delta, p.n, p.m)
    need = shares_needed(p.epsilon, delta_mix, p.m, p.q, p.n_min)
    assert p.r == need
    # a params file edited to fewer shares is refused (it differs from the accounting)
    with pytest.raises(ValueError, match=r"field r=2 differs from the accounting's r="):
        ProtocolParams.from_json(_edited(p, r=2))
    assert ProtocolParams.from_json(_edited(p, r=need)).r == need

    def record(r):  # a record built by hand around an edited accounting record
        return ProtocolParams(p.grid, p.w, dataclasses.replace(p.summation, r=r), p.round_id)

    with pytest.raises(ValueError, match=r"r=2 shares per coordinate are below .*r >= "):
        record(2)
    with pytest.raises(ValueError, match=f"r={need - 1} shares"):
        record(need - 1)
    assert record(need).r == need  # holds exactly at the requirement
    assert record(need + 3).r == need + 3


def test_a_record_edited_to_another_epsilon_cannot_keep_its_old_guarantee():
    # Regression: a record rebuilt with 4x the level budgets (the encoder's noise then
    # eps = 4) was accepted, and the analyzer shipped the record's stored guarantee, eps = 1
    from fractions import Fraction

    p = derive_params(Grid(16, 16), 1000, epsilon=1.0, delta=1e-9, B=64)
    g = p.summation.guarantee
    exact = sum((Fraction(e) for e in p.level_epsilons), Fraction(0))
    assert exact <= Fraction(g.epsilon) <= Fraction(p.epsilon)  # never claims less
    assert list(g.parameters["dl_parameters"]) == list(p.level_a)
    edited = dataclasses.replace(p.summation, epsilon=4.0,
                                 level_epsilons=tuple(4 * e for e in p.level_epsilons))
    with pytest.raises(ValueError, match="guarantee does not match its numbers"):
        ProtocolParams(p.grid, p.w, edited, p.round_id)
    with pytest.raises(ValueError, match="guarantee does not match its numbers"):
        ProtocolParams(p.grid, p.w, dataclasses.replace(p.summation, delta=1e-6), p.round_id)


def test_encoder_and_analyzer_recheck_a_tampered_record():
    grid = Grid(8, 8)
    p = params_for(grid, n=4, B=8)
    users = random_users(grid, 4)
    acc = ModularAccumulator(p)
    acc.add_shares(encode_shares(p, users, rng=1))
    # bypass the frozen dataclass, as a hostile edit would, on r's one home (ProtocolParams.r
    # is a read-only property of the accounting record)
    object.__setattr__(p.summation, "r", 2)
    assert p.r == 2
    with pytest.raises(ValueError, match="split-and-mix requirement"):
        encode_user(p, np.array([0]), np.array([1.0]))
    with pytest.raises(ValueError, match="split-and-mix requirement"):
        analyze(p, acc, 4)


def test_device_encoder_refuses_a_seed():
    p = params_for(Grid(8, 8), n=4, B=8)
    with pytest.raises(ValueError, match="refuses a seed, got rng=0"):
        encode_user(p, np.array([0]), np.array([1.0]), rng=0)
    with pytest.raises(TypeError, match="source must be a SecureRandom"):
        encode_user(p, np.array([0]), np.array([1.0]), source=np.random.default_rng(0))
    # two encodings of the same input differ (fresh secure randomness)
    a = encode_user(p, np.array([0]), np.array([1.0]))
    b = encode_user(p, np.array([0]), np.array([1.0]))
    assert not np.array_equal(a, b)


# ----------------------------------------------------------------- exact Polya tables
def _mp_polya_pmf(k: int, s: Fraction, a: Fraction) -> mpmath.mpf:
    s_, a_ = mpmath.mpf(s.numerator) / s.denominator, mpmath.mpf(a.numerator) / a.denominator
    return mpmath.exp(mpmath.loggamma(s_ + k) - mpmath.loggamma(s_) - mpmath.loggamma(k + 1)
                      + k * mpmath.log(a_) + s_ * mpmath.log1p(-a_))


@pytest.mark.parametrize("s,a", [(1 / 3, 0.9), (0.05, 0.99), (1.5, 0.4), (0.5, 0.2)],
                         ids=["s1/3-a0.9", "s0.05-a0.99", "s1.5-a0.4", "s0.5-a0.2"])
def test_polya_table_law_is_within_its_tv_bound_of_the_exact_pmf(s, a):
    """The sampler's exact law (thresholds / 2^128) against an independent mpmath pmf at 60
    digits: total variation <= the table's bound (~1e-31), far below the required 1e-9."""
    table = polya_table(s, a)
    q = table.implied_pmf()
    with mpmath.workdps(60):
        sf, af = Fraction(s), Fraction(a)
        p = [_mp_polya_pmf(k, sf, af) for k in range(len(q))]
        tail = 1 - mpmath.fsum(p)
        tv = mpmath.fsum(abs(mpmath.mpf(x.numerator) / x.denominator - y)
                         for x, y in zip(q, p, strict=True)) + abs(tail)
    assert tv <= table.tv_bound <= SAMPLER_TV_MAX
    assert tv < 1e-9


def test_polya_words_determine_the_output():
    a = np.array([0.9, 0.99, 0.5])
    x = polya_difference(0.25, np.repeat(a, 1000), 3000, rng=7)
    y = polya_difference(0.25, np.repeat(a, 1000), 3000, rng=np.random.default_rng(7))
    assert np.array_equal(x, y)
    z = polya_difference(0.25, np.repeat(a, 1000), 3000, rng=SecureRandom.for_testing(1))
    assert not np.array_equal(x, z)


# ----------------------------------------------------------------- exact discrete Laplace
@pytest.mark.parametrize("s,t", [(1, 3), (2, 7), (5, 4)], ids=["1/3", "2/7", "5/4"])
def test_exact_discrete_laplace_fits_its_pmf(s, t):
    """Chi-square goodness of fit, 200k draws, fixed seed; false-failure rate 1e-6."""
    x = discrete_laplace_exact(s, t, 200_000, rng=11)
    a = math.exp(-s / t)
    kmax = int(math.log(1e-4) / math.log(a))
    ks = np.arange(-kmax, kmax + 1)
    obs = np.r_[(x < -kmax).sum(), [(x == k).sum() for k in ks], (x > kmax).sum()]
    p = discrete_laplace_pmf(ks, a)
    tail = (1 - p.sum()) / 2
    assert stats.chisquare(obs, np.r_[tail, p, tail] * x.size).pvalue > 1e-6


def test_dl_rational_is_conservative_at_the_boundary():
    for eps, sens in [(0.3, 512), (1.0, 1), (0.031, 1 << 20), (5.0, 3)]:
        s, t = dl_rational(eps, sens)
        assert Fraction(s, t) <= Fraction(eps) / sens  # effective epsilon <= eps
        assert Fraction(s + 1, t) > Fraction(eps) / sens  # the largest such numerator
    with pytest.raises(ValueError, match="below 2\\^-40"):
        dl_rational(1e-9, 1 << 20)


# ----------------------------------------------------------------- neighbour relations
def test_zero_out_shuffle_matches_central_add_remove_like_for_like():
    """Under zero-out the shuffle protocol's noise is DL(exp(-eps_i / B)) per level, exactly
    the law the central mechanism uses at resolution R = B under add/remove (up to the
    conservative 2^-40 rational rounding): the two converge as B grows at the same eps."""
    grid = Grid(16, 16)
    B = 256
    pz = derive_params(grid, 50, epsilon=1.0, delta=1e-6, B=B, neighbour="zero_out")
    pr = derive_params(grid, 50, epsilon=1.0, delta=1e-6, B=B, neighbour="replace")
    assert pz.neighbour is Neighbour.ZERO_OUT and pr.neighbour is Neighbour.REPLACE_ONE
    assert pz.level_sensitivities == (B,) * len(pz.level_epsilons)
    assert pr.level_sensitivities == (2 * B,) * len(pr.level_epsilons)
    users = random_users(grid, 50)
    rel = central_heatmap(users, 1.0, resolution=B, rng=0)
    for e, a in zip(rel.parameters["level_epsilons"], pz.level_a, strict=True):
        s, t = dl_rational(e, B)
        assert math.exp(-s / t) == pytest.approx(a, rel=1e-12)
    assert pz.digest != pr.digest  # the relation is part of what the parties agree on


def test_every_shuffle_release_names_its_relation():
    grid = Grid(8, 8)
    users = random_users(grid, 6)
    from shuffledp.protocol.runner import shuffle_heatmap

    for nb in (Neighbour.REPLACE_ONE, Neighbour.ZERO_OUT):
        p = derive_params(grid, 6, epsilon=2.0, delta=1e-5, B=8, neighbour=nb)
        rel = shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8, params=p, rng=1)
        assert rel.guarantee.neighbour is nb
        assert rel.protocol["neighbour"] == str(nb)
    # add/remove is refused: the Polya shape is planned from n (the summation record says why)
    with pytest.raises(ValueError, match="add_remove"):
        derive_params(grid, 6, epsilon=2.0, delta=1e-5, B=8, neighbour="add_remove")


def test_shares_split_the_noisy_vector_not_the_rounded_one():
    """Erratum of [Ghazi23]_ App. F ("Split & Mix" splits z): the shares must sum to the
    noisy z' = z + noise. With the same secure words for the noise, the shares reconstruct
    z' (and differ from z on some coordinate).

    References
    ----------
    .. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
       N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
    """
    from shuffledp.encoders.encoder import noisy_vectors, reconstruct_shares

    grid = Grid(8, 8)
    p = params_for(grid, n=3, B=64)
    users = random_users(grid, 3)
    sh = encode_shares(p, users, rng=5)
    z_noisy = noisy_vectors(p, users, rng=5)
    z = noisy_vectors(p, users, noise=False)
    for j in range(3):
        np.testing.assert_array_equal(reconstruct_shares(sh[j], p.q), np.mod(z_noisy[j], p.q))
    assert np.any(np.mod(z_noisy, p.q) != np.mod(z, p.q))


def test_shuffle_release_without_seed_is_private_and_with_seed_is_marked():
    from shuffledp.protocol.runner import shuffle_heatmap

    grid = Grid(8, 8)
    users = random_users(grid, 6)
    a = shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8)
    b = shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8)
    assert a.parameters["randomness"] == "secure" and not a.guarantee.notes[-1].startswith(
        "reproducible")
    assert not np.array_equal(a.raw, b.raw)  # fresh secure noise, no default seed
    c = shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8, rng=3)
    d = shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8, rng=3)
    assert np.array_equal(c.raw, d.raw)
    assert c.guarantee.notes[-1].startswith("reproducible evaluation, not a private release")


def test_sampler_delta_part_is_pinned_exactly():
    """delta = delta_mix + (1 + e^eps) * 2 n m * SAMPLER_TV_MAX, with SAMPLER_TV_MAX the
    table bound 2 (2^-120 + (K + 2) 2^-127 + (K + 2)^2 2^-190) at K = 2^24; refused exactly
    when the sampler's part reaches delta / 2."""
    K = 1 << 24
    exact = 2 * (Fraction(1, 1 << 120) + Fraction(K + 2, 1 << 127)
                 + Fraction((K + 2) ** 2, 1 << 190))
    assert SAMPLER_TV_MAX == pytest.approx(float(exact), rel=1e-15)
    eps, delta, n, m = 1.0, 1e-6, 1000, 87_381
    mix, part = delta_split(eps, delta, n, m)
    assert part == pytest.approx((1 + math.e) * 2 * n * m * SAMPLER_TV_MAX, rel=1e-12)
    assert mix + part == pytest.approx(delta, rel=1e-15)
    p = params_for(Grid(8, 8), n=12, B=16)
    assert dict(p.guarantee_delta_parts) == pytest.approx(
        {"split_and_mix": p.delta - delta_split(p.epsilon, p.delta, p.n, p.m)[1],
         "noise_sampler": delta_split(p.epsilon, p.delta, p.n, p.m)[1]})
    # boundary: the sampler part must stay strictly below delta / 2
    tau = 2 * n * m * SAMPLER_TV_MAX * (1 + math.e)
    delta_split(eps, 2 * tau * (1 + 1e-9), n, m)
    with pytest.raises(ValueError, match="noise sampler's total variation"):
        delta_split(eps, 2 * tau, n, m)
