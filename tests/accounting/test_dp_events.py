"""Interop with dp_accounting: our events to and from its DpEvent (accounting/dp_events.py)."""

import math
import sys

import pytest

dp = pytest.importorskip("dp_accounting")

from shuffledp.accounting import (  # noqa: E402
    Accountant,
    DiscreteGaussian,
    DiscreteLaplace,
    EpsDelta,
    Parallel,
    Sequential,
    ShuffledLDP,
    from_dp_event,
    to_dp_event,
)
from shuffledp.accounting.dp_events import _rr_noise  # noqa: E402

R = "replace"
REPLACE = dp.NeighboringRelation.REPLACE_ONE


def test_rr_definition_is_the_pure_pair():
    # dp_accounting's binary RR: P(out = in) = 1 - p + p/2; the pure pair has e^eps/(1+e^eps)
    for eps in (0.01, 0.5, 1.0, 3.0, 20.0):
        p = _rr_noise(eps)
        assert math.isclose((1 - p / 2) / (p / 2), math.exp(eps), rel_tol=1e-12)


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.5])
def test_rr_pld_equals_our_pure_pair(eps):
    """The PLD dp_accounting builds from the mapped event equals our pure pair's."""
    ours = EpsDelta(epsilon=eps, delta=0.0, neighbour=R)
    ev = to_dp_event(ours)
    assert isinstance(ev, dp.RandomizedResponseDpEvent) and ev.num_buckets == 2
    theirs = dp.pld.PLDAccountant(REPLACE, value_discretization_interval=1e-4)
    theirs.compose(ev)
    acc = Accountant(discretization=1e-4).compose(ours)
    for e in (0.0, eps / 3, eps / 2, 0.9 * eps):
        exact = max(0.0, (math.exp(eps) - math.exp(e)) / (1 + math.exp(eps)))
        d_theirs = theirs.get_delta(e)
        d_ours = acc.delta(e).delta
        assert d_theirs == pytest.approx(exact, abs=2e-4)
        assert d_ours == pytest.approx(exact, abs=2e-4)
        assert d_ours >= exact * (1 - 1e-9)  # ours is a certified upper bound


def test_discrete_laplace_sensitivity_one_is_the_pure_pair():
    dl = DiscreteLaplace(parameter=0.5, neighbour=R)
    ev = to_dp_event(dl)
    assert ev == to_dp_event(EpsDelta(epsilon=0.5, delta=0.0, neighbour=R))
    assert ev.noise_parameter == pytest.approx(2 / (1 + math.exp(0.5)))


def test_100_discrete_laplace_both_ways_agree():
    dl = DiscreteLaplace(parameter=0.5, neighbour=R)
    h = 1e-3
    ours = Accountant(discretization=h).compose(dl, 100)
    ev = to_dp_event(ours)
    assert isinstance(ev, dp.ComposedDpEvent) and len(ev.events) == 100
    theirs = dp.pld.PLDAccountant(REPLACE, value_discretization_interval=h)
    theirs.compose(ev)
    for delta in (1e-3, 1e-6, 1e-9):
        e_ours = ours.epsilon(delta).epsilon
        e_theirs = theirs.get_epsilon(delta)
        # both pessimistic; dp_accounting rounds each of the 100 losses up by < h
        assert e_ours <= e_theirs + 1e-9, delta
        assert e_theirs - e_ours <= 100 * h, delta
    # our accountant, fed back the converted event, agrees with itself
    back = from_dp_event(dp.SelfComposedDpEvent(to_dp_event(dl), 100))
    assert isinstance(back, Sequential) and len(back.steps) == 100
    again = Accountant(discretization=h).compose(back)
    assert again.epsilon(1e-6).epsilon == pytest.approx(ours.epsilon(1e-6).epsilon, abs=1e-6)


def test_repetitions_are_not_self_composed():
    """dp_accounting 0.6.0 composes a randomized response once whatever its count: a
    repeated release must reach it as copies (else its accountant under-counts)."""
    rr = to_dp_event(DiscreteLaplace(parameter=0.5, neighbour=R))
    once = dp.pld.PLDAccountant(REPLACE, 1e-3)
    once.compose(rr)
    ours = dp.pld.PLDAccountant(REPLACE, 1e-3)
    ours.compose(to_dp_event(Accountant().compose(DiscreteLaplace(parameter=0.5,
                                                                   neighbour=R), 10)))
    assert ours.get_epsilon(1e-6) > once.get_epsilon(1e-6) + 1.0
    assert not any(isinstance(e, dp.SelfComposedDpEvent)
                   for e in to_dp_event(Accountant().compose(EpsDelta(epsilon=0.5, delta=0.0,
                                                                      neighbour=R), 3)).events)


def test_round_trips():
    pure = EpsDelta(epsilon=1.2, delta=0.0, neighbour=R)
    back = from_dp_event(to_dp_event(pure))
    assert isinstance(back, EpsDelta)
    assert back.epsilon == pytest.approx(1.2, rel=1e-12) and back.delta == 0.0
    seq = Sequential(steps=(pure, DiscreteLaplace(parameter=0.3, neighbour=R)), neighbour=R)
    ev = to_dp_event(seq)
    assert isinstance(ev, dp.ComposedDpEvent) and len(ev.events) == 2
    back = from_dp_event(ev)
    for got, want in zip(back.steps, seq.steps, strict=True):
        assert got.certified() == pytest.approx(want.certified(), rel=1e-12)
    assert isinstance(to_dp_event(EpsDelta(epsilon=0.0, delta=0.0)), dp.NoOpDpEvent)
    assert from_dp_event(dp.NoOpDpEvent(), neighbour="add_remove").certified() == (0.0, 0.0)
    rr = dp.RandomizedResponseDpEvent(noise_parameter=0.3, num_buckets=2)
    assert to_dp_event(from_dp_event(rr)).noise_parameter == pytest.approx(0.3, rel=1e-12)
    assert from_dp_event(dp.RandomizedResponseDpEvent(0.5, 1)).certified() == (0.0, 0.0)


@pytest.mark.parametrize("event, why", [
    (EpsDelta(epsilon=1.0, delta=1e-6, neighbour=R), "delta=1e-06 > 0"),
    (EpsDelta(epsilon=1.0, delta=0.0), "REPLACE_ONE"),  # add/remove: not RR's relation
    (DiscreteLaplace(parameter=0.5, sensitivity=2, neighbour=R), "sensitivity 2"),
    (DiscreteGaussian(sigma=3.0, neighbour=R), "discrete_gaussian"),
    (ShuffledLDP(n=10_000, eps0=1.0, epsilon=0.5, delta=1e-6), "shuffled_ldp"),
    (Parallel(branches=(EpsDelta(epsilon=1.0, delta=0.0, neighbour=R),), neighbour=R),
     "parallel"),
])
def test_refusals_name_the_event(event, why):
    with pytest.raises(ValueError, match="cannot convert") as info:
        to_dp_event(event)
    assert why in str(info.value)
    assert isinstance(to_dp_event(event, unsupported="event"), dp.UnsupportedDpEvent)


def test_from_refusals():
    for ev, why in [
        (dp.LaplaceDpEvent(noise_multiplier=1.0), "continuous"),
        (dp.GaussianDpEvent(noise_multiplier=1.0), "continuous"),
        (dp.RandomizedResponseDpEvent(noise_parameter=0.5, num_buckets=3), "3 buckets"),
        (dp.RandomizedResponseDpEvent(noise_parameter=0.0, num_buckets=2), "not private"),
        (dp.NonPrivateDpEvent(), "NonPrivateDpEvent"),
        (dp.ZCDpEvent(0.5), "ZCDpEvent"),
    ]:
        with pytest.raises(ValueError, match=why):
            from_dp_event(ev)
    with pytest.raises(ValueError, match="replace-one"):
        from_dp_event(dp.RandomizedResponseDpEvent(0.5, 2), neighbour="add_remove")


def test_argument_checks():
    with pytest.raises(TypeError, match="PrivacyEvent or an Accountant"):
        to_dp_event(1.0)
    with pytest.raises(ValueError, match="unsupported must be"):
        to_dp_event(EpsDelta(epsilon=0.0, delta=0.0), unsupported="ignore")
    with pytest.raises(ValueError, match="empty Accountant"):
        to_dp_event(Accountant())


def test_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # import fails
    with pytest.raises(ImportError, match=r"shuffledp\[interop\]"):
        to_dp_event(EpsDelta(epsilon=0.0, delta=0.0))
    with pytest.raises(ImportError, match="interop"):
        from_dp_event(object())
