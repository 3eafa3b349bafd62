"""The exact dominating pair of a vector of discrete Laplace noise under an l1 shift.

Claim (proof in ``DiscreteLaplace``'s notes): for i.i.d. DL(t) coordinates and an integer
shift s with ||s||_1 = Delta, every hockey-stick divergence of (X, X + s) is at most that of
the scalar pair (DL(0), DL(Delta)), in both directions. Both curves are piecewise linear in
alpha = e^eps with kinks only at alpha = e^{j t}, j = -Delta..Delta, so checking there checks
every alpha; the laws are computed at 40 digits.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from shuffledp.accounting.composition import Accountant
from shuffledp.accounting.events import DiscreteLaplace, EpsDelta


def _loss_law(s: int, t: mp.mpf) -> dict[int, mp.mpf]:
    """Loss / t -> P-mass of the scalar pair (DL(0), DL(s)), s >= 0."""
    a = mp.e ** (-t)
    if s == 0:
        return {0: mp.mpf(1)}
    out = {s: 1 / (1 + a), -s: a ** s / (1 + a)}
    for x in range(1, s):
        out[s - 2 * x] = out.get(s - 2 * x, 0) + (1 - a) / (1 + a) * a ** x
    return out


def _conv(A: dict, B: dict) -> dict:
    C: dict = {}
    for i, p in A.items():
        for j, q in B.items():
            C[i + j] = C.get(i + j, 0) + p * q
    return C


def _H(law: dict, t: mp.mpf, eps: mp.mpf) -> mp.mpf:
    return mp.fsum(p * (1 - mp.e ** (eps - k * t)) for k, p in law.items() if k * t > eps)


def _partitions(n: int, top: int | None = None):
    top = n if top is None else top
    if n == 0:
        yield ()
        return
    for k in range(min(n, top), 0, -1):
        for rest in _partitions(n - k, k):
            yield (k,) + rest


@pytest.mark.parametrize("t", ["0.05", "0.3", "1", "3"])
def test_one_coordinate_shift_dominates_every_shift_exactly(t: str) -> None:
    """Every integer shift of l1 norm Delta <= 7 (up to sign and order, which DL's symmetry
    makes irrelevant: the partitions of Delta), at every kink of the curves."""
    with mp.workdps(40):
        tt = mp.mpf(t)
        for delta in range(2, 8):
            laws = {}
            for part in _partitions(delta):
                law = {0: mp.mpf(1)}
                for s in part:
                    law = _conv(law, _loss_law(s, tt))
                laws[part] = law
            top = laws[(delta,)]
            for j in range(-delta, delta + 1):
                eps = j * tt
                # P||Q at alpha = e^{j t}; Q||P is the mirror (the pairs are symmetric)
                h_top = _H(top, tt, eps)
                for part, law in laws.items():
                    assert _H(law, tt, eps) <= h_top * (1 + mp.mpf(10) ** -30)
                    if part != (delta,) and 0 <= j < delta:
                        assert _H(law, tt, eps) < h_top  # strictly worse when concentrated


def test_vector_query_uses_the_exact_scalar_pair() -> None:
    """A 16-dimensional query with l1 sensitivity 20 at t = 0.05 (eps = 1): its PLD is the
    exact pair (DL(0), DL(20)), well inside the pure pair the vector case used to get
    (delta(0) = 0.4180 against tanh(1/2) = 0.4621)."""
    t, sens = 0.05, 20
    ev = DiscreteLaplace(parameter=t, sensitivity=sens, dimension=16)
    assert ev.pld().curve == "exact"
    law = _loss_law(sens, mp.mpf(t))
    acc = Accountant().compose(ev)
    for eps in (0.0, 0.3, 0.7, 0.99):
        exact = float(_H(law, mp.mpf(t), mp.mpf(eps)))
        got = acc.delta(eps).pld[1]
        assert exact <= got <= float(_H(law, mp.mpf(t), mp.mpf(eps - 1e-4))) + 1e-12
    assert acc.delta(0.0).pld[1] < 0.419 < math.tanh(0.5)


def test_vector_pair_dominates_a_spread_shift_on_the_real_mechanism() -> None:
    """The real 3-coordinate mechanism with shift (3, -2, 1) (Delta = 6): its exact
    hockey-stick divergence (truncated product law, tails charged) is below the accountant's
    delta at every epsilon checked."""
    t = 0.2
    a = math.exp(-t)
    xs = np.arange(-200, 201)
    pmf = (1 - a) / (1 + a) * a ** np.abs(xs)
    tail = 2 * a ** 201 / (1 + a)
    shifts = (3, -2, 1)
    # loss of the product: sum of per-coordinate losses t(|x - s| - |x|); its P-law exactly
    law = {0: 1.0}
    for s in shifts:
        one: dict[int, float] = {}
        for x, p in zip(xs, pmf, strict=True):
            k = abs(int(x) - s) - abs(int(x))
            one[k] = one.get(k, 0.0) + float(p)
        new: dict[int, float] = {}
        for i, p in law.items():
            for j, q in one.items():
                new[i + j] = new.get(i + j, 0.0) + p * q
        law = new
    ev = DiscreteLaplace(parameter=t, sensitivity=6, dimension=3)
    acc = Accountant().compose(ev)
    for eps in (0.0, 0.2, 0.5, 1.0):
        exact = sum(p * -math.expm1(eps - k * t) for k, p in law.items() if k * t > eps)
        assert exact <= acc.delta(eps).pld[1] + 3 * tail


@pytest.mark.slow
def test_365_daily_heatmaps_inside_the_bracket() -> None:
    """365 daily shuffle heatmaps (n = 1000, 256 x 256, B = 256, eps = 1 per day, delta
    1e-6 / 1460 per day) at total delta 1e-6: the truth lies in [45.30, 77.43]; the pure
    pair per level gave 77.99; the exact pair (with the tight hiding charge) gives 73.27."""
    from shuffledp.accounting.summation import summation_parameters

    p = summation_parameters(n=1000, epsilon=1.0, delta=1e-6 / 1460, B=256, grid="256x256")
    r = Accountant().compose(p.guarantee.event, 365).epsilon(1e-6)
    assert r.method == "pld" and 45.30 <= r.epsilon <= 77.43
    assert r.epsilon == pytest.approx(73.272, abs=2e-3)


def test_large_epsilon_notes_name_the_cause() -> None:
    """At eps > 700 the fallback says why: e^eps overflows for an (eps, delta) pair (it
    raised OverflowError), the grid cannot hold a discrete Laplace pair that wide (for a
    heatmap too: it raised 'math domain error'); and when a heatmap's hiding charge
    (1 + e^eps) tv reaches 1, the note blames that charge."""
    r = Accountant().compose(EpsDelta(epsilon=800.0), 2).epsilon(1e-6)
    assert r.epsilon == 1600.0 and r.pld is None
    assert any("700" in n and "overflows" in n for n in r.notes)
    r = Accountant().compose(DiscreteLaplace(parameter=800.0), 2).epsilon(1e-6)
    assert r.epsilon == 1600.0 and any("grid points" in n for n in r.notes)
    from shuffledp.accounting.events import PolyaSum

    ev = PolyaSum(levels=(DiscreteLaplace(parameter=701.0, neighbour="replace"),),
                  tv=1e-300, neighbour="replace")
    assert ev.certified() == (701.0, 1.0)
    with pytest.raises(ValueError, match=r"deltas add up to 1 .*losses span \[-701, 701\]"):
        Accountant().compose(ev, 2).epsilon(1e-6)
    ev = PolyaSum(levels=(DiscreteLaplace(parameter=1.0, neighbour="replace"),), tv=0.4,
                  neighbour="replace")
    with pytest.raises(ValueError, match=r"infinity mass is 1 > delta.*hiding charge"):
        Accountant().compose(ev, 2).epsilon(1e-6)
