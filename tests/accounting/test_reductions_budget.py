"""[Imola]_ Thm 5.3 reduction, [Bagdasaryan22]_ conversions, Guarantee record.

References
----------
.. [Imola] J. Imola, A. Roy Chowdhury, K. Chaudhuri, "Metric Differential Privacy at the
   User-Level" (preprint).
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4). arXiv:2111.02356.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shuffledp.accounting import Guarantee
from shuffledp.accounting.budget import (
    dl_epsilon_for_std,
    dl_parameter,
    dl_std,
    next_query_epsilon,
    polya_shape,
    share_shape,
    sum_up,
    target_std,
)
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.accounting.metric.reductions import (
    _discrete_group_privacy,
    reduction_alpha,
    reduction_epsilon,
    reduction_samples,
)


def test_thm53_formula():
    b = reduction_alpha(1.0, 0.1, 1000, 1e-6)
    assert b.alpha == pytest.approx(1.0 / ((1 + math.sqrt(2)) * 0.1 + 3 / 1000 * math.log(1e6)))
    assert b.guarantee.notion == "discrete_emd" and b.guarantee.delta == 2e-6
    assert b.guarantee.parameters["r"] == 0.1


@given(eps=st.floats(0.01, 10), r=st.floats(0.001, 1), s=st.integers(1, 10**6),
       delta=st.floats(1e-12, 0.4))
def test_reduction_round_trip(eps, r, s, delta):
    a = reduction_alpha(eps, r, s, delta).alpha
    assert reduction_epsilon(a, r, s, delta).epsilon == pytest.approx(eps, rel=1e-12)


def test_reduction_samples_minimal():
    s = reduction_samples(1.0, 3.0, 0.1, 1e-6)
    assert reduction_alpha(1.0, 0.1, s, 1e-6).alpha >= 3.0
    assert reduction_alpha(1.0, 0.1, s - 1, 1e-6).alpha < 3.0
    with pytest.raises(ValueError, match=r"alpha=5.0 cannot be reached for epsilon=1.0"):
        reduction_samples(1.0, 5.0, 0.1, 1e-6)


def test_group_privacy():
    e, d = _discrete_group_privacy(0.5, 1e-6, 0.1, 0.25)
    assert e == 1.5
    assert d == pytest.approx(1e-6 * max(math.exp(3), math.exp(1.5),
                                         1 + math.exp(0.5) + math.exp(1.0)))
    assert _discrete_group_privacy(0.5, 1e-6, 0.1, 0.1)[0] == 0.5


def test_reduction_validation_messages():
    with pytest.raises(ValueError, match=r"r must be in \(0, 1\], got r=0"):
        reduction_alpha(1.0, 0, 10, 1e-6)
    with pytest.raises(ValueError, match=r"s must be an integer >= 1, got s=0"):
        reduction_alpha(1.0, 0.1, 0, 1e-6)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 0.5\) .*got delta=0.5"):
        reduction_alpha(1.0, 0.1, 10, 0.5)
    with pytest.raises(ValueError, match=r"epsilon must be a finite number > 0, got epsilon=0"):
        reduction_alpha(0, 0.1, 10, 1e-6)
    with pytest.raises(ValueError, match=r"alpha must be a finite number > 0, got alpha=-2"):
        reduction_epsilon(-2, 0.1, 10, 1e-6)
    with pytest.raises(ValueError, match=r"model must be one of .*got model='x'"):
        reduction_alpha(1.0, 0.1, 10, 1e-6, "x")
    with pytest.raises(ValueError, match=r"d must be in \[0, 1\], got d=2"):
        _discrete_group_privacy(1.0, 1e-6, 0.1, 2)


# ---------------------------------------------------------- [Bagdasaryan22] conversions
def test_eq5_value():
    beta = math.exp(-0.5 / 2)
    assert dl_std(0.5, 2) == pytest.approx(math.sqrt(2 * beta / (1 - beta) ** 2), rel=1e-14)


@given(eps=st.floats(1e-6, 30), sens=st.floats(0.1, 1e4))
def test_eq5_eq8_round_trip(eps, sens):
    assert dl_epsilon_for_std(dl_std(eps, sens), sens) == pytest.approx(eps, rel=1e-9)


def test_eq8_equals_printed_form():
    for s in (0.3, 1.0, 7.0, 100.0):
        printed = -2.0 * math.log((s * s + 1 - math.sqrt(2 * s * s + 1)) / (s * s))
        assert dl_epsilon_for_std(s, 2.0) == pytest.approx(printed, rel=1e-9)


def test_eq7_eq9():
    assert target_std(0.5, 1000, 100, 10000) == pytest.approx(0.5 * 10 * math.sqrt(10))
    assert target_std(0.5, 20000, 100, 10000) == pytest.approx(0.5 * 200)
    assert next_query_epsilon(1.0, 0.2, 2.0) == 0.2
    assert next_query_epsilon(1.0, 0.6, 2.0) == 1.0
    assert next_query_epsilon(1.0, 0.5, 2.0) == 0.5  # b eps~ <= eps_rem is inclusive


def test_polya_shape_dropout():
    assert polya_shape(10000, 0.05) == 1 / 9500
    assert polya_shape(100) == 1 / 100
    assert polya_shape(1000, 0.05) == share_shape(950) == math.nextafter(1 / 950, 1.0)


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 49, 950, 9500, 99991, 2**20 + 7])
def test_share_shape_is_the_least_float_whose_n_copies_reach_one(n):
    # n s >= 1 exactly (any n users' shares sum to at least DL), and s is the least such
    # float: one step down, n s < 1 (the boundary of the condition)
    s = share_shape(n)
    assert Fraction(s) * n >= 1
    assert Fraction(math.nextafter(s, 0.0)) * n < 1


@pytest.mark.parametrize("eps,sens", [(1.0, 1), (0.37, 3), (1e-3, 512), (2.9, 512),
                                      (1e-9, 2), (10.0, 20), (0.013, 200)])
def test_dl_parameter_is_eps_dp_as_a_float(eps, sens):
    # -Delta ln(a) <= eps for the float a itself (60-digit decimal logs), a < 1, and a is
    # within 2 ulp of exp(-eps / Delta); where the nearest float is too small, one step up
    # is taken and one step down would fail
    from decimal import Decimal, localcontext

    a = dl_parameter(eps, sens)
    with localcontext() as ctx:
        ctx.prec = 60
        loss = -Decimal(sens) * Decimal(a).ln()
        assert a < 1 and loss <= Decimal(eps)
        if a != math.exp(-eps / sens):
            below = math.nextafter(a, 0.0)
            assert -Decimal(sens) * Decimal(below).ln() > Decimal(eps)
    assert abs(a - math.exp(-eps / sens)) <= 2 * math.ulp(a)


def test_dl_parameter_rounds_up_where_the_nearest_float_loses_more():
    # over many (eps, Delta) the nearest float exp(-eps / Delta) loses more than eps for
    # some (its rounding went down): those are exactly the ones moved up
    from decimal import Decimal, localcontext

    moved = 0
    rng = np.random.default_rng(4)
    with localcontext() as ctx:
        ctx.prec = 60
        for eps, sens in zip(rng.uniform(1e-3, 5.0, 300), rng.integers(1, 600, 300),
                             strict=True):
            near = math.exp(-float(eps) / int(sens))
            over = -Decimal(int(sens)) * Decimal(near).ln() > Decimal(float(eps))
            a = dl_parameter(float(eps), int(sens))
            assert (a != near) == over
            moved += over
    assert 0 < moved < 300


def test_sum_up_never_claims_less_than_the_parts():
    rng = np.random.default_rng(5)
    below = 0
    for _ in range(2000):
        xs = list(rng.uniform(0.0, 1.0, int(rng.integers(2, 9))))
        exact = sum((Fraction(x) for x in xs), Fraction(0))
        s = sum_up(xs)
        assert Fraction(s) >= exact > Fraction(math.nextafter(s, 0.0))
        below += Fraction(float(sum(xs))) < exact
    assert below > 0  # the plain float sum does fall below the exact sum sometimes
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got dropout=0.95"
                                         r"|dropout must be in \[0, 1\), got dropout=1"):
        polya_shape(100, 1)
    with pytest.raises(ValueError, match=r"shard_size must be an integer >= 1, got "
                                         r"shard_size=0"):
        polya_shape(0)


def test_budget_validation_messages():
    with pytest.raises(ValueError, match=r"epsilon must be a finite number > 0, got epsilon=0"):
        dl_std(0)
    with pytest.raises(ValueError, match=r"sensitivity must be a finite number > 0"):
        dl_std(1, -1)
    with pytest.raises(ValueError, match=r"sigma must be a finite number > 0, got sigma=0"):
        dl_epsilon_for_std(0)
    with pytest.raises(ValueError, match=r"cells must be an integer >= 1, got cells=0"):
        target_std(0.5, 10, 0, 10)
    with pytest.raises(ValueError, match=r"b must be a finite number > 0, got b=0"):
        next_query_epsilon(1, 1, 0)


# ------------------------------------------------------------------ Guarantee
def test_guarantee_record():
    g = Guarantee(notion="approximate", model="shuffle", epsilon=1.0, delta=1e-6,
                  neighbour=Neighbour.ZERO_OUT, parameters={"n": 5}, notes=["a"])
    assert g.to_dict()["notes"] == ["a"] and g.to_dict()["parameters"] == {"n": 5}
    stronger = Guarantee(notion="pure", model="shuffle", epsilon=0.5, neighbour=Neighbour.ZERO_OUT)
    assert stronger.implies(g) and not g.implies(stronger)
    other = Guarantee(notion="approximate", model="central", epsilon=0.1, delta=0,
                      neighbour=Neighbour.ZERO_OUT)
    assert not other.implies(g)
    assert g == Guarantee(notion="approximate", model="shuffle", epsilon=1.0, delta=1e-6,
                          neighbour=Neighbour.ZERO_OUT, parameters={"n": 5}, notes=("a",))
    with pytest.raises(ValueError, match="notion must be one of"):
        Guarantee(notion="x", model="shuffle", epsilon=1)
    # one vocabulary: free text is refused, tokens and members are parsed
    with pytest.raises(ValueError, match="neighbour must be one of .*got neighbour='x'"):
        Guarantee(notion="pure", model="central", epsilon=1, neighbour="x")
    assert Guarantee(notion="pure", model="central", epsilon=1,
                     neighbour="replace").neighbour is Neighbour.REPLACE_ONE
    assert g.to_dict()["neighbour"] == "zero out one user's contribution (n public)"
    other_nb = Guarantee(notion="approximate", model="shuffle", epsilon=1.0, delta=1e-6,
                         neighbour=Neighbour.REPLACE_ONE)
    assert not other_nb.implies(g) and not g.implies(other_nb)
    with pytest.raises(ValueError, match=r"delta must be in \[0, 1\]"):
        Guarantee(notion="approximate", model="shuffle", epsilon=1, delta=2)
    with pytest.raises(TypeError, match="epsilon and delta must be numbers"):
        Guarantee(notion="approximate", model="shuffle", epsilon="a")
    with pytest.raises(TypeError):
        g.parameters["n"] = 6  # read-only
