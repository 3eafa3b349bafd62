"""Shuffled k-RR's privacy-blanket bound: the pair's divergence against an independent
enumeration, domination of exact shuffled k-RR on every small data set, attainment, the k = 2
identity with the general bound, and the CLI. Every check is deterministic."""

import itertools
import json
import math
from collections import defaultdict

import pytest
from click.testing import CliRunner
from exact_shuffle import exact_shuffle_divergence, krr_row

from shuffledp.accounting.amplification.clones import shuffle_ldp, variation_ratio_numerical
from shuffledp.accounting.amplification.krr_lower import krr_dataset_divergence, krr_lower_epsilon
from shuffledp.accounting.amplification.krr_shuffle import (
    krr_blanket_divergence,
    krr_shuffle_numerical,
)
from shuffledp.cli import main


def blanket_pair_by_enumeration(n, k, eps0, eps, dps=None):
    """D of the blanket pair built from its definition, category by category: every other
    user is revealed-truthful (1 - lambda) or a uniform blanket report landing on x1^0, x1^1
    or another value (alpha each, (k - 2) alpha); user 1 is (p alpha, alpha, (k - 2) alpha)
    on the same three, mirrored under the other input. In floats, or at ``dps`` digits in
    mpmath (both directions, the larger)."""
    import mpmath as mp

    with mp.workdps(dps or 15):
        num = mp.mpf if dps else float
        p = mp.exp(num(eps0)) if dps else math.exp(eps0)
        E = mp.exp(num(eps)) if dps else math.exp(eps)
        alpha = 1 / (p + k - 1)
        other = {(1, 0, 0): alpha, (0, 1, 0): alpha, (0, 0, 1): (k - 2) * alpha,
                 (0, 0, 0): 1 - k * alpha}

        def law(first):
            out = dict(first)
            for _ in range(n - 1):
                new = defaultdict(lambda: num(0))
                for h, w in out.items():
                    for s, q in other.items():
                        if q > 0:
                            new[tuple(x + y for x, y in zip(h, s))] += w * q
                out = new
            return out

        def hs(A, B):
            return sum(max(num(0), w - E * B.get(h, num(0))) for h, w in A.items())

        # the number of revealed users is n - 1 - (a + b + z - 1): a function of (a, b, z)
        P = law({(1, 0, 0): p * alpha, (0, 1, 0): alpha, (0, 0, 1): (k - 2) * alpha})
        Q = law({(1, 0, 0): alpha, (0, 1, 0): p * alpha, (0, 0, 1): (k - 2) * alpha})
        return max(hs(P, Q), hs(Q, P))


@pytest.mark.parametrize("n,k,eps0,eps", [(1, 3, 1.0, 0.2), (4, 3, 1.0, 0.3), (6, 5, 2.0, 0.5),
                                          (7, 2, 1.0, 0.1), (5, 10, 0.5, 0.05),
                                          (6, 4, 3.0, 2.9)])
def test_divergence_matches_an_independent_enumeration(n, k, eps0, eps):
    ref = blanket_pair_by_enumeration(n, k, eps0, eps)
    lo, hi = krr_blanket_divergence(n, k, eps0, eps)
    assert lo <= ref * (1 + 1e-9) + 1e-15 and ref <= hi * (1 + 1e-9) + 1e-15
    assert hi - lo <= 1e-6 * ref + 1e-12


@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("k,eps0", [(3, 1.0), (4, 1.0), (5, 2.0), (3, 0.5)])
def test_dominates_shuffled_krr_on_every_small_data_set(n, k, eps0):
    R0, R1 = krr_row(k, eps0, 0), krr_row(k, eps0, 1)
    worst = {}
    for vals in itertools.combinations_with_replacement(range(k), n - 1):
        others = [krr_row(k, eps0, x) for x in vals]
        for eps in (0.05, 0.3, 0.6 * eps0):
            exact = exact_shuffle_divergence(R0, R1, others, eps)
            worst[eps] = max(worst.get(eps, 0.0), exact)
    for eps, exact in worst.items():
        assert exact <= krr_blanket_divergence(n, k, eps0, eps)[1] + 1e-12, (eps, exact)


def test_attained_when_the_others_hold_a_third_value():
    # 3-RR, eps0 = 2, n = 5, others all at value 2: the exact divergence is the bound's
    k, eps0, n, eps = 3, 2.0, 5, 0.6
    exact = exact_shuffle_divergence(krr_row(k, eps0, 0), krr_row(k, eps0, 1),
                                     [krr_row(k, eps0, 2)] * (n - 1), eps)
    lo, hi = krr_blanket_divergence(n, k, eps0, eps)
    assert lo - 1e-12 <= exact <= hi + 1e-12


def test_k2_is_the_general_bound():
    for n, eps0 in ((1000, 1.0), (10**5, 2.0)):
        a = krr_shuffle_numerical(n, eps0, 1e-6, k=2)
        b = variation_ratio_numerical(n, eps0, 1e-6)
        assert abs(a.epsilon - b.epsilon) <= 1.001e-3 * b.epsilon


def test_n1e5_certified_and_tighter_than_general():
    general = variation_ratio_numerical(10**5, 1.0, 1e-6).epsilon
    prev = general
    for k, target in ((3, 0.0110), (10, 0.0067), (100, 0.0021)):
        b = krr_shuffle_numerical(10**5, 1.0, 1e-6, k=k)
        assert b.valid and b.method == "krr-blanket" and b.epsilon <= target < general
        assert b.epsilon < prev  # more values, more blanket on the other k - 2
        prev = b.epsilon
        assert krr_blanket_divergence(10**5, k, 1.0, b.epsilon, tail=1e-14)[1] <= 1e-6
        assert krr_blanket_divergence(10**5, k, 1.0, b.epsilon_lower)[0] > 1e-6
        assert b.guarantee.parameters["k"] == k and "blanket" in b.guarantee.theorem


def test_tightest_with_krr_and_argument_errors():
    b = shuffle_ldp(10**4, 1.0, 1e-6, randomizer="krr", k=10)
    assert b.method == "krr-blanket" and "tightest of [krr-blanket" in b.notes[-1]
    assert b.epsilon < shuffle_ldp(10**4, 1.0, 1e-6).epsilon
    with pytest.raises(ValueError, match="k must be an integer >= 2, got k=1"):
        shuffle_ldp(100, 1.0, 1e-6, randomizer="krr", k=1)
    with pytest.raises(ValueError, match="k is only used with randomizer='krr', got k=3"):
        shuffle_ldp(100, 1.0, 1e-6, k=3)
    with pytest.raises(ValueError, match="method='krr-blanket' needs randomizer='krr'"):
        shuffle_ldp(100, 1.0, 1e-6, "krr-blanket")
    with pytest.raises(ValueError, match="d must be 1 for randomizer='krr', got d=0.5"):
        shuffle_ldp(100, 1.0, 1e-6, randomizer="krr", k=3, d=0.5)
    with pytest.raises(ValueError, match="randomizer='general'"):
        krr_shuffle_numerical(10**9, 1.0, 1e-6, k=3)  # the grid would be too large
    with pytest.raises(TypeError, match="k must be an integer, got k=1.5"):
        krr_blanket_divergence(10, 1.5, 1.0, 0.1)
    assert krr_blanket_divergence(10, 3, 1.0, 1.0) == (0.0, 0.0)  # eps >= eps0
    # e^{eps0 + eps} overflows: never certified, falls back to the local guarantee
    assert krr_blanket_divergence(1000, 5, 700.0, 300.0)[1] == math.inf
    b = krr_shuffle_numerical(1000, 700.0, 1e-6, k=5)
    assert not b.valid and b.epsilon == 700.0 and b.delta == 0.0


def test_cli_randomizer_krr():
    r = CliRunner().invoke(main, ["account", "shuffle-ldp", "--n", "100000", "--eps0", "1",
                                  "--delta", "1e-6", "--randomizer", "krr", "--k", "10",
                                  "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["method"] == "krr-blanket" and d["epsilon"] <= 0.0067
    assert d["guarantee"]["parameters"]["k"] == 10
    for argv, hint in ((["--k", "10"], "--k goes with --randomizer krr"),
                       (["--method", "krr-blanket"], "krr-blanket needs --randomizer krr"),
                       (["--randomizer", "krr", "--k", "3", "--d", "0.5"], "--d 0.5 is not")):
        r = CliRunner().invoke(main, ["account", "shuffle-ldp", "--n", "1000", "--eps0", "1",
                                      "--delta", "1e-6", *argv])
        assert r.exit_code == 2 and hint in r.output, r.output



# ------------------------------------------------- exact curves on specific data sets
@pytest.mark.parametrize("n,k,eps0,eps,family", [
    (3, 2, 1.0, 0.3, "x0"), (5, 4, 1.0, 0.2, "x0"), (6, 5, 0.5, 0.05, "x0"),
    (5, 3, 2.0, 0.6, "third"), (4, 3, 1.0, 0.1, "third"), (1, 3, 1.0, 0.2, "third")])
def test_dataset_divergence_is_the_exact_enumeration(n, k, eps0, eps, family):
    others = [krr_row(k, eps0, 0 if family == "x0" else 2)] * (n - 1)
    exact = exact_shuffle_divergence(krr_row(k, eps0, 0), krr_row(k, eps0, 1), others, eps)
    lo, hi = krr_dataset_divergence(n, k, eps0, eps, family=family)
    assert lo <= exact * (1 + 1e-9) and exact <= hi * (1 + 1e-9) + 1e-15


def test_lower_and_upper_bracket_the_truth_and_meet_for_3rr():
    for k in (2, 3, 10):
        lo, fam = krr_lower_epsilon(10**4, 1.0, 1e-6, k=k)
        up = krr_shuffle_numerical(10**4, 1.0, 1e-6, k=k)
        assert 0 < lo < up.epsilon and fam in ("x0", "third")
        # the refuting pair really exceeds delta there
        assert krr_dataset_divergence(10**4, k, 1.0, lo, family=fam)[0] > 1e-6
    # 3-RR: others all at a third value attain the blanket bound (within one grid step)
    lo, fam = krr_lower_epsilon(10**4, 1.0, 1e-6, k=3)
    assert fam == "third" and krr_shuffle_numerical(10**4, 1.0, 1e-6, k=3).epsilon <= \
        lo * 1.001 ** 2 * (1 + 1e-12)
    # binary RR refutes below the general bound, never above it
    assert krr_lower_epsilon(10**5, 1.0, 1e-6, k=2)[0] < \
        variation_ratio_numerical(10**5, 1.0, 1e-6).epsilon


def test_dataset_divergence_argument_errors():
    with pytest.raises(ValueError, match="family='third' is computed for k = 3 only, got k=4"):
        krr_dataset_divergence(10, 4, 1.0, 0.1, family="third")
    with pytest.raises(ValueError, match="family must be one of .*got family='all'"):
        krr_dataset_divergence(10, 3, 1.0, 0.1, family="all")
    with pytest.raises(ValueError, match="rtol must be in \\(0, 0.5\\], got rtol=2"):
        krr_lower_epsilon(10, 1.0, 1e-6, k=3, rtol=2)
    with pytest.raises(ValueError, match="e\\^\\(eps0\\+eps\\) overflows"):
        krr_dataset_divergence(10, 3, 700.0, 100.0)


def test_cli_reports_the_refuted_epsilon():
    r = CliRunner().invoke(main, ["account", "shuffle-ldp", "--n", "10000", "--eps0", "1",
                                  "--delta", "1e-6", "--randomizer", "krr", "--k", "3",
                                  "--json"])
    d = json.loads(r.output)
    assert d["epsilon_refuted"] < d["epsilon"] <= d["epsilon_refuted"] * 1.001 ** 2 * 1.000001
    assert "third value" in d["refuted_by"]


# ------------------------------------------------------- review fixes (small delta, tiny eps0)
def test_tiny_eps0_is_bracketed():
    # review finding: exp(eps0) - 1 by subtraction put the lower estimate above the truth
    ref = blanket_pair_by_enumeration(20, 3, 1e-9, 3e-11, dps=60)
    lo, hi = krr_blanket_divergence(20, 3, 1e-9, 3e-11)
    assert lo <= ref <= hi and hi - lo <= 1e-6 * ref


def test_small_delta_is_certified():
    # review finding: a fixed 1e-14 per row of dropped mass blocked every delta below ~1e-14
    b = krr_shuffle_numerical(10**4, 1.0, 1e-14, k=3)
    assert b.valid and b.epsilon < variation_ratio_numerical(10**4, 1.0, 1e-14).epsilon
    assert krr_blanket_divergence(10**4, 3, 1.0, b.epsilon, tail=1e-20)[1] <= 1e-14


def test_input_limits_and_fallbacks():
    from shuffledp.accounting.amplification.clones import clone_probability

    with pytest.raises(ValueError, match="alpha0 must be a finite number > 0, got alpha0=-1"):
        clone_probability(-1)
    with pytest.raises(ValueError, match="d must be in \\(0, 1\\], got d=5"):
        clone_probability(1.0, 5)
    with pytest.raises(ValueError, match="k must be <= 2\\^53"):
        krr_blanket_divergence(10, 10**400, 1.0, 0.1)
    with pytest.raises(ValueError, match="n must be <= 2\\^53, got n=9223372036854775808"):
        shuffle_ldp(2**63, 1.0, 1e-6)
    # "tightest" for k-RR beyond the exact grid returns the general bounds, and says so
    b = shuffle_ldp(10**7, 1.0, 1e-6, randomizer="krr", k=3)
    assert b.method == "variation-ratio" and "krr-blanket skipped" in b.notes[-1]
    assert krr_lower_epsilon(10, 700.0, 1e-6, k=3) == (0.0, "")  # e^{eps0+eps} overflows


def test_left_out_mass_is_charged_enough():
    # a coarse window (tail 0.05) leaves real divergence out: the (p + 1)/2 charge per unit of
    # dropped mass must still cover it, and the bound stays above the exact pair
    for eps0, eps in ((1.0, 0.2), (3.0, 0.5)):
        ref = blanket_pair_by_enumeration(30, 3, eps0, eps)
        lo, hi = krr_blanket_divergence(30, 3, eps0, eps, tail=0.05)
        assert hi >= ref and lo <= ref * (1 + 1e-9)
