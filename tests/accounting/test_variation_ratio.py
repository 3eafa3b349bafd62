"""Variation-ratio (stronger clone) shuffle bound: certified against mpmath, dominates exact
shuffled mechanisms, attained by one, and never looser than the clones bound.

Exact shuffled mechanisms are enumerated here outcome by outcome (the law of the histogram of
n reports), independently of the reduction. False-failure rate: every check is deterministic.
"""

import itertools
import math
from collections import defaultdict

import numpy as np
import pytest
from click.testing import CliRunner
from exact_shuffle import exact_shuffle_divergence, hockey, krr_row, metric_rows
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mp_clones import mp_divergence
from scipy.stats import binom

from shuffledp.accounting.amplification.clones import (
    clone_probability,
    clones_closed_form,
    clones_eps0_for_target,
    clones_numerical,
    reduction_divergence,
    shuffle_ldp,
    variation_ratio_numerical,
)
from shuffledp.cli import main


# --------------------------------------------------------------------------- the issue target
def test_issue_target_n1e5_certified_and_tight():
    b = variation_ratio_numerical(10**5, 1.0, 1e-6)
    assert b.method == "variation-ratio" and b.valid
    assert b.epsilon <= 0.0126  # target; the clones pair gives 0.01528
    assert clones_numerical(10**5, 1.0, 1e-6).epsilon > 0.015
    hi = reduction_divergence(10**5, 1.0, b.epsilon, tail=1e-10, reduction="variation-ratio")[1]
    lo = reduction_divergence(10**5, 1.0, b.epsilon_lower, tail=1e-10,
                              reduction="variation-ratio")[0]
    assert hi <= 1e-6 < lo
    assert b.tolerance <= 2e-3 * b.epsilon
    assert "Feldman-McMillan-Talwar 2023" in b.guarantee.theorem


def test_clone_probability_values():
    assert clone_probability(1.0) == pytest.approx(math.exp(-1))
    assert clone_probability(1.0, reduction="variation-ratio") == pytest.approx(
        2 / (math.e + 1), rel=1e-15)
    # metric: 2 r = 2 alpha p / q with p = e^{alpha0 d}, q = e^{alpha0}, alpha = 1/(p+1)
    p, q = math.exp(0.3 * 2.0), math.exp(2.0)
    assert clone_probability(2.0, 0.3, "variation-ratio") == pytest.approx(
        2 * p / ((p + 1) * q), rel=1e-14)
    for a0 in (0.01, 1.0, 10.0, 700.0):
        assert clone_probability(a0, reduction="variation-ratio") >= clone_probability(a0)
    with pytest.raises(ValueError, match=r"reduction must be one of .*got reduction='x'"):
        clone_probability(1.0, reduction="x")


# --------------------------------------------------- certified against an mpmath reference
@settings(max_examples=20, deadline=None, derandomize=True)
@given(n=st.integers(1, 300), eps0=st.floats(-4.0, math.log(40.0)).map(math.exp),
       d=st.one_of(st.just(1.0), st.floats(0.05, 1.0)),
       delta=st.sampled_from([1e-3, 1e-6, 1e-9]))
@example(n=300, eps0=1.0, d=1.0, delta=1e-6).via("amplifying")
@example(n=200, eps0=3.0, d=0.4, delta=1e-6).via("metric, d < 1")
def test_every_released_epsilon_is_certified_and_tight(n, eps0, d, delta):
    b = variation_ratio_numerical(n, eps0, delta, d=d)
    hi = mp_divergence(n, eps0, b.epsilon, d, reduction="variation-ratio")[1]
    assert hi <= b.delta + 1e-40
    if b.epsilon_lower > 0:
        lo_below = mp_divergence(n, eps0, b.epsilon_lower, d, reduction="variation-ratio")[0]
        assert lo_below > delta
        assert b.epsilon <= b.epsilon_lower * (1 + 1e-3) * (1 + 1e-12)


@pytest.mark.parametrize("n,eps0,eps,d", [(200, 1.0, 0.1, 1.0), (1000, 2.0, 0.5, 0.5),
                                          (1000, 40.0, 39.0, 1.0), (50, 0.01, 0.001, 1.0)])
def test_divergence_brackets_mpmath(n, eps0, eps, d):
    lo, hi = reduction_divergence(n, eps0, eps, d=d, tail=1e-300, reduction="variation-ratio")
    ref_lo, ref_hi = mp_divergence(n, eps0, eps, d, reduction="variation-ratio")
    assert lo <= ref_lo and ref_hi <= hi
    # the bracket is the floating-point allowance on the cancelling terms of D
    assert hi - lo <= 1e-6 * float(ref_hi) + 1e-280


# ------------------------------------------ dominates exact mechanisms; attained by one
def pair_divergence(n, eps0, eps, d=1.0):
    return reduction_divergence(n, eps0, eps, d=d, tail=1e-300, reduction="variation-ratio")


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("eps0", [0.5, 1.0, 2.0])
def test_dominates_shuffled_randomized_response_for_every_dataset(n, eps0):
    # k-RR for k = 2, 3, 4: every multiset of the other users' values
    for k in (2, 3, 4):
        R0, R1 = krr_row(k, eps0, 0), krr_row(k, eps0, 1)
        for vals in itertools.combinations_with_replacement(range(k), n - 1):
            others = [krr_row(k, eps0, x) for x in vals]
            for eps in (0.05, 0.3, 0.6 * eps0):
                exact = exact_shuffle_divergence(R0, R1, others, eps)
                assert exact <= pair_divergence(n, eps0, eps)[1] + 1e-12, (k, vals, eps)


def test_attained_by_binary_randomized_response():
    # others all holding x1^0 make the bound exact at eps = 0.6 (n = 3, eps0 = 1): no
    # analysis of general eps0-LDP randomizers can certify less there
    R0, R1 = krr_row(2, 1.0, 0), krr_row(2, 1.0, 1)
    exact = exact_shuffle_divergence(R0, R1, [R0, R0], 0.6)
    lo, hi = pair_divergence(3, 1.0, 0.6)
    assert lo - 1e-12 <= exact <= hi
    # while the clones pair is strictly looser there
    assert reduction_divergence(3, 1.0, 0.6, tail=1e-300)[0] > hi + 1e-3


@pytest.mark.parametrize("alpha0,d_index", [(1.0, 1), (3.0, 1), (3.0, 2)])
def test_dominates_a_shuffled_metric_randomizer(alpha0, d_index):
    # exponential mechanism on 4 points of a line: alpha0 d_X-DP; the changed item moves by
    # d = D[0, d_index] of the diameter, others at every point
    R, D = metric_rows(np.array([0.0, 0.2, 0.5, 1.0]), alpha0)
    d = float(D[0, d_index])
    for n in (2, 3, 4):
        for vals in itertools.combinations_with_replacement(range(4), n - 1):
            others = [R[x] for x in vals]
            for eps in (0.05, 0.5 * alpha0 * d):
                exact = exact_shuffle_divergence(R[0], R[d_index], others, eps)
                assert exact <= pair_divergence(n, alpha0, eps, d)[1] + 1e-12


def wang_specific_beta_pair(n, p, alpha, eps):
    """D of [WPLW24] Lemma 4.5's pair with user 1's residual hidden (r = alpha, q = p)."""
    P, Q = defaultdict(float), defaultdict(float)
    for c in range(n):
        wc = binom.pmf(c, n - 1, 2 * alpha)
        for a in range(c + 1):
            w, b = wc * binom.pmf(a, c, 0.5), c - a
            for key, wp, wq in (((a + 1, b), p * alpha, alpha), ((a, b + 1), alpha, p * alpha),
                                ((a, b), 1 - (p + 1) * alpha, 1 - (p + 1) * alpha)):
                P[key] += w * wp
                Q[key] += w * wq
    return hockey(P, Q, eps)


def test_randomizer_specific_beta_is_refused_because_it_fails():
    # errata row 12: with beta = (e^eps0 - 1)/(e^eps0 + k - 1) for k-RR (k = 3) the pair of
    # Lemma 4.5 hides user 1's residual report; shuffled 3-RR with others at (0, 2) beats it
    eps0, k, n, eps = 1.0, 3, 3, 0.6
    p = math.exp(eps0)
    alpha = 1.0 / (p + k - 1)
    claimed = wang_specific_beta_pair(n, p, alpha, eps)
    exact = exact_shuffle_divergence(krr_row(k, eps0, 0), krr_row(k, eps0, 1),
                                     [krr_row(k, eps0, 0), krr_row(k, eps0, 2)], eps)
    assert exact > claimed + 5e-3  # 0.0735 vs 0.0676
    # the general-mechanism parameters (what the library uses) do cover it
    assert exact <= pair_divergence(n, eps0, eps)[1]


# --------------------------------------------------------------------- tightest and CLI
@settings(max_examples=10, deadline=None, derandomize=True)
@given(n=st.integers(100, 50000), eps0=st.floats(0.1, 6.0))
def test_never_looser_than_clones_and_tightest_is_the_minimum(n, eps0):
    delta = 1e-6
    vr = variation_ratio_numerical(n, eps0, delta)
    cl = clones_numerical(n, eps0, delta)
    assert vr.epsilon <= cl.epsilon
    t = shuffle_ldp(n, eps0, delta)
    cf = clones_closed_form(n, eps0, delta)
    cands = [b.epsilon for b in (vr, cl, cf) if b.valid] or [vr.epsilon]
    assert t.epsilon == min(cands)
    assert any(note.startswith("tightest of [") for note in t.notes)


def test_shuffle_ldp_methods_and_errors():
    assert shuffle_ldp(1000, 1.0, 1e-6, "variation-ratio").method == "variation-ratio"
    assert shuffle_ldp(1000, 1.0, 1e-6, "numerical").method == "numerical"
    assert shuffle_ldp(1000, 1.0, 1e-6, d=0.5).d == 0.5
    with pytest.raises(ValueError, match=r"method must be one of .*got method='exact'"):
        shuffle_ldp(1000, 1.0, 1e-6, "exact")


def test_eps0_for_target_with_variation_ratio_gives_a_larger_eps0():
    a = clones_eps0_for_target(10**4, 0.5, 1e-6)
    b = clones_eps0_for_target(10**4, 0.5, 1e-6, method="variation-ratio")
    assert b.eps0 > a.eps0 and b.bound.epsilon <= 0.5
    assert variation_ratio_numerical(10**4, b.eps0_next, 1e-6).epsilon > 0.5


def test_cli_shuffle_ldp_default_is_tightest():
    r = CliRunner().invoke(main, ["account", "shuffle-ldp", "--n", "100000", "--eps0", "1",
                                  "--delta", "1e-6", "--json"])
    assert r.exit_code == 0, r.output
    import json
    rec = json.loads(r.output)
    assert rec["method"] == "variation-ratio" and rec["epsilon"] <= 0.0126
    r = CliRunner().invoke(main, ["account", "shuffle-ldp", "--n", "1000", "--eps0", "1",
                                  "--delta", "1e-6", "--d", "0.5", "--method", "closed-form"])
    assert r.exit_code == 2 and "--d 0.5 needs a numerical method" in r.output
