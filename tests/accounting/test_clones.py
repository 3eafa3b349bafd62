"""Clones bound: closed form vs mpmath, exact divergence vs brute force, bounds and monotonicity."""

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mp_clones import mp_divergence
from scipy.stats import binom

from shuffledp.accounting.amplification._common import _cut_estimate
from shuffledp.accounting.amplification.clones import (
    clones_closed_form,
    clones_eps0_for_target,
    clones_formula,
    clones_numerical,
    clones_validity_limit,
    reduction_divergence,
    shuffle_ldp,
)


def mp_closed(n, eps0, delta):
    mp.mp.dps = 50
    e0, dl = mp.mpf(eps0), mp.mpf(delta)
    k = 8 * mp.sqrt(mp.e**e0 * mp.log(4 / dl)) / mp.sqrt(n) + 8 * mp.e**e0 / n
    return float(mp.log(1 + (mp.e**e0 - 1) / (mp.e**e0 + 1) * k))


@pytest.mark.parametrize("n,eps0,delta", [(10**5, 1.0, 1e-6), (10**4, 0.5, 1e-8),
                                          (10**8, 4.0, 1e-8), (12345, 2.0, 1e-6)])
def test_closed_form_matches_mpmath(n, eps0, delta):
    ref = mp_closed(n, eps0, delta)
    assert clones_formula(n, eps0, delta) == pytest.approx(ref, rel=1e-12)
    b = clones_closed_form(n, eps0, delta)
    assert b.valid and b.epsilon == pytest.approx(min(eps0, ref), rel=1e-12)


def test_closed_form_value_at_issue_point():
    # issue: "closed form: about 0.075" (0.0753 before the log, 0.0726 after)
    assert clones_closed_form(10**5, 1.0, 1e-6).epsilon == pytest.approx(0.07255, abs=1e-4)


def test_closed_form_validity_boundary_exact():
    n, delta = 10**5, 1e-6
    limit = math.log(n / (16 * math.log(2 / delta)))
    assert clones_validity_limit(n, delta) == limit
    assert clones_closed_form(n, limit, delta).valid
    above = clones_closed_form(n, math.nextafter(limit, 10.0), delta)
    assert not above.valid
    assert above.epsilon == math.nextafter(limit, 10.0) and above.delta == 0.0
    assert "ln(n/(16 ln(2/delta)))" in above.notes[0]


def brute_divergence(n, eps0, eps, d=1.0):
    """Independent exact D_{e^eps}(P||Q): enumerate (C, A, Delta) with mpmath."""
    mp.mp.dps = 40
    p = mp.e ** (-mp.mpf(eps0))
    beta = 1 / (1 + mp.e ** (mp.mpf(eps0) * d))
    P, Q = {}, {}
    for c in range(n):
        wc = mp.binomial(n - 1, c) * p**c * (1 - p) ** (n - 1 - c)
        for a in range(c + 1):
            wa = wc * mp.binomial(c, a) / mp.mpf(2) ** c
            for dl, wd in ((0, 1 - beta), (1, beta)):
                kp = (a + 1 - dl, c - a + dl)
                kq = (a + dl, c - a + 1 - dl)
                P[kp] = P.get(kp, 0) + wa * wd
                Q[kq] = Q.get(kq, 0) + wa * wd
    E = mp.e ** mp.mpf(eps)
    keys = set(P) | set(Q)
    return float(sum(max(mp.mpf(0), P.get(k, 0) - E * Q.get(k, 0)) for k in keys))


@pytest.mark.parametrize("n,eps0,eps,d", [(25, 1.0, 0.3, 1.0), (40, 2.0, 0.5, 1.0),
                                          (30, 1.5, 0.2, 0.4), (1, 1.0, 0.5, 1.0),
                                          (12, 0.5, 0.0, 1.0)])
def test_divergence_matches_brute_force(n, eps0, eps, d):
    lo, hi = reduction_divergence(n, eps0, eps, d=d)
    ref = brute_divergence(n, eps0, eps, d)
    assert lo <= ref * (1 + 1e-9) + 1e-15
    assert hi >= ref * (1 - 1e-9) - 1e-15
    assert hi - lo <= 1e-8 * max(ref, 1e-12)  # the stated floating-point allowance


def test_divergence_zero_above_eps0():
    assert reduction_divergence(1000, 1.0, 1.0) == (0.0, 0.0)


def test_single_user_gives_eps0():
    b = clones_numerical(1, 1.0, 1e-6)
    assert b.epsilon == 1.0  # no one to hide among: randomized response itself


def exact_shuffled_binary_rr(n, eps0, delta):
    """Exact eps of shuffled binary randomized response (others fixed to 0): a lower bound on
    what any valid shuffle bound must certify."""
    q = 1.0 / (1.0 + math.exp(eps0))
    k = np.arange(n + 1)
    base = binom.pmf(np.arange(n), n - 1, q)
    P = np.zeros(n + 1)
    Q = np.zeros(n + 1)
    P[:-1] += base * (1 - q)  # x1 = 0 reports 0 w.p. 1-q
    P[1:] += base * q
    Q[:-1] += base * q        # x1 = 1 reports 1 w.p. 1-q
    Q[1:] += base * (1 - q)
    del k

    def div(e):
        return max(np.maximum(P - math.exp(e) * Q, 0).sum(),
                   np.maximum(Q - math.exp(e) * P, 0).sum())

    lo, hi = 0.0, eps0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if div(mid) <= delta else (mid, hi)
    return lo


@pytest.mark.parametrize("n,eps0", [(1000, 1.0), (10000, 2.0), (500, 0.5)])
def test_numerical_bound_dominates_an_exact_mechanism(n, eps0):
    delta = 1e-6
    b = clones_numerical(n, eps0, delta)
    assert b.epsilon >= exact_shuffled_binary_rr(n, eps0, delta)


def test_issue_target_n1e5():
    # the time per call is measured by bench/accounting_numerical.py, not asserted here
    b = clones_numerical(10**5, 1.0, 1e-6)
    assert b.epsilon <= 0.016
    assert b.epsilon_lower <= b.epsilon
    assert b.tolerance == pytest.approx(b.epsilon - b.epsilon_lower)
    assert b.tolerance <= 2e-3 * b.epsilon
    # the upper end is certified and the lower end is not
    assert reduction_divergence(10**5, 1.0, b.epsilon, tail=1e-10)[1] <= 1e-6
    assert reduction_divergence(10**5, 1.0, b.epsilon_lower, tail=1e-10)[0] > 1e-6
    assert b.guarantee.model == "shuffle" and b.guarantee.delta == 1e-6


@pytest.mark.slow
def test_n1e8_is_certified_and_below_the_closed_form():
    b = clones_numerical(10**8, 1.0, 1e-6)
    assert 0 < b.epsilon_lower <= b.epsilon < clones_closed_form(10**8, 1.0, 1e-6).epsilon


@settings(max_examples=15, deadline=None)
@given(n=st.integers(200, 20000), eps0=st.floats(0.2, 3.0), dn=st.integers(1, 5000),
       de=st.floats(0.01, 1.0))
def test_monotone_in_n_and_eps0(n, eps0, dn, de):
    delta = 1e-6
    b = clones_numerical(n, eps0, delta)
    assert b.epsilon_lower <= b.epsilon <= eps0
    if clones_closed_form(n, eps0, delta).valid:
        assert b.epsilon <= clones_closed_form(n, eps0, delta).epsilon
    assert clones_numerical(n + dn, eps0, delta).epsilon <= b.epsilon
    assert clones_numerical(n, eps0 + de, delta).epsilon >= b.epsilon
    # lower bounds move the same way (up to one grid step)
    assert clones_numerical(n + dn, eps0, delta).epsilon_lower <= b.epsilon


def test_shuffle_ldp_dispatch_and_validation_messages():
    assert shuffle_ldp(1000, 1.0, 1e-6, "closed-form").method == "closed-form"
    with pytest.raises(ValueError, match=r"method must be one of .*got method='exact'"):
        shuffle_ldp(1000, 1.0, 1e-6, "exact")
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got delta=1.0"):
        clones_numerical(1000, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got delta=0"):
        clones_closed_form(1000, 1.0, 0)
    with pytest.raises(ValueError, match=r"eps0 must be a finite number > 0, got eps0=0"):
        clones_numerical(1000, 0, 1e-6)
    with pytest.raises(ValueError, match=r"eps0 must be a finite number > 0, got eps0=-1"):
        clones_closed_form(1000, -1, 1e-6)
    with pytest.raises(ValueError, match=r"n must be an integer >= 1, got n=0"):
        clones_numerical(0, 1.0, 1e-6)
    with pytest.raises(TypeError, match=r"n must be an integer, got n=2.5"):
        clones_closed_form(2.5, 1.0, 1e-6)
    with pytest.raises(TypeError, match=r"n must be an integer, got n=True"):
        clones_closed_form(True, 1.0, 1e-6)
    with pytest.raises(ValueError, match=r"rtol must be in \(0, 0.5\], got rtol=0.9"):
        clones_numerical(1000, 1.0, 1e-6, rtol=0.9)
    with pytest.raises(ValueError, match=r"d must be in \(0, 1\], got d=1.5"):
        clones_numerical(1000, 1.0, 1e-6, d=1.5)
    with pytest.raises(ValueError, match=r"eps must be >= 0, got eps=-0.1"):
        reduction_divergence(100, 1.0, -0.1)
    with pytest.raises(ValueError, match=r"eps0 must be <= 700"):
        clones_numerical(100, 800.0, 1e-6)
    with pytest.raises(TypeError, match="closed-form takes no extra arguments"):
        shuffle_ldp(100, 1.0, 1e-6, "closed-form", rtol=0.1)
    # 1e5 given as a float is an integer count
    assert clones_closed_form(1e5, 1.0, 1e-6).n == 100000


def test_eps0_for_target_round_trip():
    from shuffledp.accounting.amplification.clones import clones_eps0_for_target

    lp = clones_eps0_for_target(10**5, 0.1, 1e-6)
    assert lp.bound.epsilon <= 0.1
    assert clones_numerical(10**5, lp.eps0_next, 1e-6).epsilon > 0.1
    assert lp.eps0_next == pytest.approx(lp.eps0 * 1.001)
    assert 2.0 < lp.eps0 < 4.0  # the table: eps0=2 -> 0.045, eps0=4 -> 0.17
    with pytest.raises(ValueError, match=r"target_epsilon must be a finite number > 0, "
                                         r"got target_epsilon=0"):
        clones_eps0_for_target(100, 0, 1e-6)
    with pytest.raises(ValueError, match=r"eps0_max must be <= 700, got eps0_max=800"):
        clones_eps0_for_target(100, 0.5, 1e-6, eps0_max=800)
    capped = clones_eps0_for_target(10**4, 0.9, 1e-6, eps0_max=1.0)
    assert capped.eps0_next == math.inf and capped.eps0 <= 1.0


# ---------------------------------------------------------------------------
# Every check below is against mp_clones.mp_divergence: the divergence of the reduction pair
# summed outcome by outcome in mpmath at 50 digits (no closed form, no incomplete beta), with
# the left-out mass of C charged to the upper end. "Certified" means: the released epsilon
# has exact divergence <= the released delta; "tight" means: one grid step below it the
# exact divergence exceeds the requested delta (OpenDP-style boundary check).
MP_SLACK = mp.mpf(10) ** -40  # rounding of the 50-digit reference


def assert_certified_and_tight(b, delta, rtol=1e-3):
    lo, hi = mp_divergence(b.n, b.eps0, b.epsilon, b.d)
    assert hi <= b.delta + MP_SLACK, (b, float(hi))
    assert b.epsilon <= b.eps0 * b.d * (1 + 1e-15)
    if b.epsilon_lower > 0:  # the search saw the boundary: it must be real
        lo_below, _ = mp_divergence(b.n, b.eps0, b.epsilon_lower, b.d)
        assert lo_below > delta, (b, float(lo_below))
        assert b.epsilon <= b.epsilon_lower * (1 + rtol) * (1 + 1e-12)


@pytest.mark.parametrize("eps0,d", [(30.0, 1.0), (33.0, 1.0), (34.0, 1.0), (36.0, 1.0),
                                    (37.0, 1.0), (100.0, 1.0), (700.0, 1.0), (68.0, 0.5),
                                    (700.0, 0.05)])
def test_numerical_certified_for_large_alpha0_d(eps0, d):
    # old code: eps0=33 left divergence 8e-3, 36 gave 0.33, >= 37 reported eps ~ 1e-12
    delta = 1e-6
    b = clones_numerical(1000, eps0, delta, d=d)
    assert_certified_and_tight(b, delta)
    # n = 1000 cannot amplify at these eps0 (C = 0 w.p. >= 1 - 1e-10): the local guarantee
    assert not b.valid and b.delta == 0.0
    assert b.epsilon == pytest.approx(eps0 * d, rel=1e-15) and b.epsilon >= eps0 * d
    assert "no amplification" in b.notes[-1]


@pytest.mark.parametrize("n,eps0,eps,d", [(1000, 34.0, 33.9, 1.0), (1000, 40.0, 39.0, 1.0),
                                          (1000, 700.0, 699.0, 1.0), (1000, 700.0, 1.0, 1.0),
                                          (1000, 68.0, 33.0, 0.5), (100, 1e-3, 1e-5, 1.0),
                                          (3000, 9.0, 8.5, 1.0)])
def test_divergence_brackets_mpmath_reference(n, eps0, eps, d):
    # 1 - rho by subtraction was exactly 0 from alpha0 d ~ 37 on (divergence reported 0)
    lo, hi = reduction_divergence(n, eps0, eps, d=d)
    ref_lo, ref_hi = mp_divergence(n, eps0, eps, d)
    assert lo <= ref_lo and ref_hi <= hi
    assert hi - lo <= 1e-8 * float(ref_hi) + 1e-280


def _exact_cut(c, ad, eps):
    """Smallest a with P(a|c) > e^eps Q(a|c), by scanning in mpmath."""
    with mp.workdps(80):
        ad, E = mp.mpf(ad), mp.exp(mp.mpf(eps))
        beta, rho = 1 / (1 + mp.exp(ad)), 1 / (1 + mp.exp(-ad))
        A, negB = rho - E * beta, E * rho - beta
        return next((a for a in range(c + 2) if A * a > negB * (c + 1 - a)), c + 2)


@pytest.mark.parametrize("ad", [1e-6, 0.5, 5.0, 20.0, 37.0, 100.0, 700.0])
def test_cut_estimate_within_one_of_exact(ad):
    # the old floor(x* (c+1)/(1+x*)) + 1 was c + 2 once x* (c+1) > 2^53 (e.g. ad=40, eps=39)
    for c in (0, 1, 2, 7, 150, 4000):
        for frac in (0.0, 1e-12, 1e-6, 0.3, 0.9, 1 - 1e-6, 1 - 1e-12):
            eps = ad * frac
            E = math.exp(eps)
            beta, rho = math.exp(-ad) / (1 + math.exp(-ad)), 1 / (1 + math.exp(-ad))
            A = beta * E * math.expm1(ad - eps)
            negB = rho * (math.expm1(eps) - math.expm1(-ad))
            k0 = int(_cut_estimate(np.array([c]), A, negB)[0])
            assert abs(k0 - _exact_cut(c, ad, eps)) <= 1, (c, ad, eps)


# eps0 in (0, 50]: uniform, plus log-uniform on [e^-5, 50] so that the amplifying range
# (eps0 of a few units and below) is drawn as often as the non-amplifying one
EPS0 = st.one_of(st.floats(0.0, 50.0, exclude_min=True, allow_subnormal=False),
                 st.floats(-5.0, math.log(50.0)).map(math.exp))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(n=st.integers(1, 300), eps0=EPS0, d=st.one_of(st.just(1.0), st.floats(0.05, 1.0)),
       delta=st.sampled_from([1e-3, 1e-6, 1e-9]))
@example(n=300, eps0=0.3, d=1.0, delta=1e-6).via("amplifying, small eps0")
@example(n=300, eps0=1.0, d=1.0, delta=1e-9).via("amplifying")
@example(n=50, eps0=4.0, d=0.5, delta=1e-3).via("metric, d < 1")
def test_every_released_epsilon_is_certified(n, eps0, d, delta):
    # property: exact divergence at the released epsilon <= released delta, boundary tight
    assert_certified_and_tight(clones_numerical(n, eps0, delta, d=d), delta)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, derandomize=True)
@given(eps0=EPS0)
@example(eps0=1.0).via("amplifying")
@example(eps0=3.0).via("amplifying, close to the end of amplification")
def test_every_released_epsilon_is_certified_n1000(eps0):
    assert_certified_and_tight(clones_numerical(1000, eps0, 1e-6), 1e-6)


def test_eps0_for_target_uses_a_correct_oracle():
    # old code: 99.95 (the oracle certified ~1e-12 for every eps0 >= 37)
    lp = clones_eps0_for_target(1000, 1.0, 1e-6, eps0_max=100)
    assert 2.5 < lp.eps0 < 3.0 and lp.bound.epsilon <= 1.0
    assert mp_divergence(1000, lp.eps0, 1.0)[1] <= 1e-6
    assert clones_numerical(1000, lp.eps0_next, 1e-6).epsilon > 1.0
    assert mp_divergence(1000, lp.eps0 * 1.01, 1.0)[0] > 1e-6  # within 1% of the truth


def test_numerical_refuses_support_too_large():
    with pytest.raises(ValueError, match=r"n=1000000000000000 is too large .*closed-form"):
        clones_numerical(10**15, 1.0, 1e-6)
