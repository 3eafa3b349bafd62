"""PrivEMDItemWise (Imola, Roy Chowdhury, Chaudhuri, Metric DP at the user level, Thm 4.3/4.4):
paper example, sup closed form, inverse, eqs 6-7, delta' cap, tiny delta."""

import math

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffledp.accounting.metric.shuffle import _alpha_sup_numeric as alpha_sup_numeric
from shuffledp.accounting.metric.shuffle import _h as h
from shuffledp.accounting.metric.shuffle import (
    asymptotic_alpha0,
    composition_alpha,
    emd_itemwise,
    emd_itemwise_alpha0,
    thm43_validity_limit,
)

mp.mp.dps = 50


def mp_h(N, x0, x1, a0, delta):
    a0 = mp.mpf(a0)
    y = a0 * x1 / x0
    k = 8 * mp.sqrt(mp.e**a0 * mp.log(4 * mp.mpf(x0) / delta)) / mp.sqrt(N) + 8 * mp.e**a0 / N
    return x0 * mp.log(1 + (mp.e**y - 1) / (mp.e**y + 1) * k)


@pytest.mark.parametrize("N,x0,x1,a0,delta", [(10**8, 1000, 1000, 2.7, 1e-12),
                                               (1000, 1000, 10, 0.03, 1e-12),
                                               (50000, 7, 3.5, 1.0, 1e-6)])
def test_h_matches_mpmath(N, x0, x1, a0, delta):
    assert h(N, x0, x1, a0, delta) == pytest.approx(float(mp_h(N, x0, x1, a0, delta)),
                                                    rel=1e-12)


def test_paper_example_central():
    """Sec. 4.2: n=1e5, m=1e3, alpha=25, delta=1e-12, central. Text: alpha0 ~ 3.0 vs 0.025."""
    inv = emd_itemwise_alpha0(25, 1000, 1e-12, "central", 10**5)
    assert inv.composition_alpha0 == 0.025
    # Thm 4.4 exactly: alpha0 = 2.7013 (the text's "about 3.0" overstates it: alpha0 = 3
    # gives alpha = 32.2 > 25)
    assert inv.alpha0 == pytest.approx(2.70130, abs=1e-4)
    assert inv.bound.alpha <= 25.0 and inv.limited_by == "target"
    assert emd_itemwise(3.0, 1000, 1e-12, "central", 10**5).alpha == pytest.approx(32.237,
                                                                                   abs=1e-3)
    # independent mpmath check of alpha (limit w -> 0) and delta' = delta e^{h(mn; m, m)}
    a0 = mp.mpf(inv.alpha0)
    k = 8 * mp.sqrt(mp.e**a0 * mp.log(4 * mp.mpf(1000) / mp.mpf("1e-12"))) / mp.sqrt(10**8) \
        + 8 * mp.e**a0 / 10**8
    assert inv.bound.alpha == pytest.approx(float(1000 * a0 * k / 2), rel=1e-10)
    dref = mp.mpf("1e-12") * mp.e ** mp_h(10**8, 1000, 1000, a0, mp.mpf("1e-12"))
    assert inv.bound.delta_out == pytest.approx(float(dref), rel=1e-9)
    assert inv.bound.delta_out == pytest.approx(9.3576e-6, rel=1e-4)  # reported delta'
    assert inv.bound.valid and inv.bound.condition_ok
    assert inv.bound.guarantee.notion == "metric_emd"
    assert inv.bound.guarantee.delta == inv.bound.delta_out


@pytest.mark.parametrize("model,n", [("local", None), ("central", 1000)])
@pytest.mark.parametrize("a0", [0.01, 0.5, 3.0])
def test_sup_is_the_w_to_zero_limit(model, n, a0):
    b = emd_itemwise(a0, 200, 1e-9, model, n)
    num = alpha_sup_numeric(a0, 200, 1e-9, model, n, grid=400)
    assert num <= b.alpha * (1 + 1e-9)
    assert num == pytest.approx(b.alpha, rel=1e-6)
    # at w = 1 the ratio is strictly below the supremum (concavity)
    N = 200 if model == "local" else 200 * n
    assert h(N, 200, 200, a0, 1e-9) < b.alpha


def test_validity_condition_boundary():
    N, delta = 10**6, 1e-9
    lim = thm43_validity_limit(N, delta)
    assert lim == pytest.approx(math.log(N / (16 * math.log(4 * N / delta))), rel=1e-14)
    assert not emd_itemwise(lim, 10, delta, "central", 10**5).condition_ok  # strict
    assert emd_itemwise(math.nextafter(lim, 0), 10, delta, "central", 10**5).condition_ok
    bad = emd_itemwise(lim, 10, delta, "central", 10**5)
    assert not bad.valid and bad.guarantee is None
    with pytest.raises(ValueError, match="Thm 4.3 condition fails"):
        emd_itemwise(lim, 10, delta, "central", 10**5, strict=True)


def test_vacuous_delta_is_flagged():
    b = emd_itemwise(1.0, 100, 1e-6, "local")
    assert b.vacuous and not b.valid and b.guarantee is None
    assert any("vacuous" in s for s in b.notes)
    with pytest.raises(ValueError, match="vacuous"):
        emd_itemwise(1.0, 100, 1e-6, "local", strict=True)


@settings(max_examples=30, deadline=None)
@given(target=st.floats(0.5, 200), m=st.integers(50, 2000), n=st.integers(100, 10**6),
       model=st.sampled_from(["local", "central"]))
def test_inverse_round_trip(target, m, n, model):
    delta = 1e-10
    N = m if model == "local" else m * n
    if thm43_validity_limit(N, delta) <= 0:
        with pytest.raises(ValueError, match="cannot be reached"):
            emd_itemwise_alpha0(target, m, delta, model, n)
        return
    inv = emd_itemwise_alpha0(target, m, delta, model, n)
    fwd = emd_itemwise(inv.alpha0, m, delta, model, n)
    assert fwd.alpha <= target and fwd.condition_ok and fwd.delta_out <= 1e-3 and fwd.valid
    if inv.limited_by == "target":
        assert emd_itemwise(inv.alpha0 * (1 + 1e-8), m, delta, model, n).alpha > target
    elif inv.limited_by == "validity":
        assert inv.alpha0 == pytest.approx(thm43_validity_limit(N, delta), rel=1e-9)
    else:
        assert emd_itemwise(inv.alpha0 * (1 + 1e-8), m, delta, model, n).delta_out > 1e-3
    # monotone: alpha increases with alpha0
    assert emd_itemwise(inv.alpha0 / 2, m, delta, model, n).alpha < fwd.alpha


def test_inverse_with_delta_out_cap():
    inv = emd_itemwise_alpha0(25, 1000, 1e-12, "central", 10**5, max_delta_out=1e-8)
    assert inv.bound.delta_out < 1e-8 and inv.limited_by == "delta_out"
    with pytest.raises(ValueError, match=r"max_delta_out=1e-13 cannot be reached.*best reach"):
        emd_itemwise_alpha0(25, 1000, 1e-12, "central", 10**5, max_delta_out=1e-13)


def test_asymptotic_forms_eq6_eq7():
    m, delta, alpha, n = 1000, 1e-12, 25.0, 10**5
    L = math.sqrt(m * math.log(4 * m * math.exp(alpha) / delta))
    # central, second branch: 32 L < alpha sqrt(n) < m sqrt(n)
    assert alpha * math.sqrt(n) > 32 * L
    assert asymptotic_alpha0(alpha, m, delta, "central", n) == pytest.approx(
        2 * math.log(alpha * math.sqrt(n) / (16 * L)), rel=1e-12)
    # local, first branch
    assert asymptotic_alpha0(alpha, m, delta, "local") == pytest.approx(alpha / (32 * L))
    # outside the stated range
    assert math.isnan(asymptotic_alpha0(20.0, 10, delta, "central", 10**10))  # alpha >= m


def test_composition_baselines():
    c = composition_alpha(0.025, 1000, 1e-12)
    assert c.alpha == pytest.approx(25.0)
    assert c.advanced_alpha == pytest.approx(25.0)  # no 1/sqrt(m) gain in the worst case
    full = 0.025 * math.sqrt(2 * 1000 * math.log(1e12)) + 1000 * 0.025 * math.expm1(0.025)
    assert c.advanced_epsilon_full == pytest.approx(min(25.0, full))
    assert emd_itemwise(0.5, 1000, 1e-12, "central", 10**5).composition_alpha == 500.0


def test_validation_messages():
    with pytest.raises(ValueError, match=r"n is required for the central model, got n=None"):
        emd_itemwise(1.0, 10, 1e-6, "central")
    with pytest.raises(ValueError, match=r"model must be one of \('local', 'central'\), "
                                         r"got model='shuffle'"):
        emd_itemwise(1.0, 10, 1e-6, "shuffle")
    with pytest.raises(ValueError, match=r"alpha0 must be a finite number > 0, got alpha0=0"):
        emd_itemwise(0, 10, 1e-6)
    with pytest.raises(ValueError, match=r"alpha0 must be <= 700"):
        emd_itemwise(701, 10, 1e-6)
    with pytest.raises(ValueError, match=r"m must be an integer >= 1, got m=0"):
        emd_itemwise(1.0, 0, 1e-6)
    with pytest.raises(TypeError, match=r"m must be an integer, got m=2.5"):
        emd_itemwise(1.0, 2.5, 1e-6)
    with pytest.raises(ValueError, match=r"n must be an integer >= 1, got n=0"):
        emd_itemwise(1.0, 10, 1e-6, "central", 0)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got delta=1"):
        emd_itemwise(1.0, 10, 1)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got delta=-0.1"):
        emd_itemwise_alpha0(1.0, 10, -0.1)
    with pytest.raises(ValueError, match=r"target_alpha must be a finite number > 0, "
                                         r"got target_alpha=-1"):
        emd_itemwise_alpha0(-1, 10, 1e-6)
    with pytest.raises(ValueError, match=r"target_alpha=1.0 cannot be reached: .*N=10"):
        emd_itemwise_alpha0(1.0, 10, 1e-6)
    with pytest.raises(ValueError, match=r"x1 must be in \[0, x0=2.0\]"):
        h(100, 2, 3, 1.0, 1e-6)
    with pytest.raises(ValueError, match=r"x0 must be <= N=100, got x0=200"):
        h(100, 200, 3, 1.0, 1e-6)
    with pytest.raises(ValueError, match=r"alpha must be a finite number > 0, got alpha=0"):
        asymptotic_alpha0(0, 10, 1e-6)


# ---------------------------------------------------------------------------
def test_inverse_caps_delta_out_by_default():
    # old code: alpha0 = 0.00696 with delta' = 0.99999999938 issued as valid
    inv = emd_itemwise_alpha0(200, 10000, 1e-6, "local")
    b = inv.bound
    assert b.valid and b.delta_out <= 1e-3 and b.max_delta_out == 1e-3
    assert inv.limited_by == "delta_out" and b.guarantee.delta == b.delta_out
    # one step further would pass the cap: the cap is what binds
    assert emd_itemwise(inv.alpha0 * (1 + 1e-8), 10000, 1e-6, "local").vacuous
    # configurable: a looser cap gives a larger alpha0, still never delta' >= 1
    loose = emd_itemwise_alpha0(200, 10000, 1e-6, "local", max_delta_out=1.0)
    assert loose.alpha0 > inv.alpha0 and loose.bound.delta_out < 1 and loose.bound.valid


def test_forward_refuses_delta_out_above_cap():
    b = emd_itemwise(0.0069, 10000, 1e-6, "local")
    assert 1e-3 < b.delta_out < 1
    assert b.vacuous and not b.valid and b.guarantee is None
    assert any("exceeds max_delta_out=0.001" in s and "vacuous" in s for s in b.notes)
    with pytest.raises(ValueError, match="vacuous"):
        emd_itemwise(0.0069, 10000, 1e-6, "local", strict=True)
    ok = emd_itemwise(0.0069, 10000, 1e-6, "local", max_delta_out=0.9)
    assert ok.valid and ok.guarantee.delta == ok.delta_out <= 0.9
    with pytest.raises(ValueError, match=r"max_delta_out must be in \(0, 1\], got "
                                         r"max_delta_out=0"):
        emd_itemwise(0.0069, 10000, 1e-6, "local", max_delta_out=0)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(a0=st.floats(1e-4, 5.0), m=st.integers(1, 5000), n=st.integers(1, 10**6),
       model=st.sampled_from(["local", "central"]),
       delta=st.sampled_from([1e-3, 1e-6, 1e-12, 1e-300, 5e-324]),
       cap=st.sampled_from([1e-6, 1e-3, 0.5, 1.0]))
def test_no_guarantee_with_vacuous_delta(a0, m, n, model, delta, cap):
    b = emd_itemwise(a0, m, delta, model, n, max_delta_out=cap)
    assert b.valid == (b.condition_ok and b.delta_out <= cap and b.delta_out < 1)
    assert (b.guarantee is not None) == b.valid
    if b.valid:
        assert b.guarantee.delta == b.delta_out and b.delta_out < 1
        # delta' = delta e^{h(N; m, m)} never understated (mpmath, 50 digits)
        ref = mp.mpf(delta) * mp.e ** mp_h(b.N, m, m, a0, mp.mpf(delta))
        assert b.delta_out >= ref


@pytest.mark.parametrize("a0,m,n,delta", [
    # found by hypothesis 6.80.0's derandomized search: delta' was 3e-14 relative too small
    # (one ulp of exp could not cover the rounding of log(delta) = -691 and the growth term)
    (0.5, 1, 10**6, 1e-300), (1e-4, 5000, 10**6, 1e-300), (0.05, 300, 10**5, 1e-300),
    (0.01, 1, 10**6, 5e-324), (0.2, 40, 2 * 10**5, 1e-12)])
def test_delta_out_never_understated_at_tiny_delta(a0, m, n, delta):
    b = emd_itemwise(a0, m, delta, "local", n, max_delta_out=1.0)
    if b.delta_out < 1:
        ref = mp.mpf(delta) * mp.e ** mp_h(b.N, m, m, a0, mp.mpf(delta))
        assert b.delta_out >= ref, (b.delta_out, ref)
        # and the slack stays tiny (subnormal results: a few ulps of 5e-324)
        assert b.delta_out <= ref * (1 + mp.mpf(10) ** -11) + 4 * 5e-324


@pytest.mark.parametrize("delta", [1e-300, 5e-324])
@pytest.mark.parametrize("N", [1, 100, 10**4, 10**9])
def test_validity_limit_tiny_delta(N, delta):
    # old code: 4N/delta overflowed to inf and math.log(0) raised "math domain error"
    ref = mp.log(N / (16 * mp.log(4 * N / mp.mpf(delta))))
    lim = thm43_validity_limit(N, delta)
    assert math.isfinite(lim) and lim == pytest.approx(float(ref), rel=1e-13)
    if lim <= 0:
        with pytest.raises(ValueError, match=r"cannot be reached: Thm 4.3 needs alpha0 <"):
            emd_itemwise_alpha0(1.0, N, delta)
    assert math.isfinite(asymptotic_alpha0(1.0, 10, delta))
