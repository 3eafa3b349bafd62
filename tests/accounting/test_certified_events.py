"""Every certified (epsilon, delta) comes from the event's mechanism parameters.

An event whose stated pair its parameters do not prove is refused on construction --
including when it is read back from a report or a composition spec -- so basic and advanced
composition, and the minimum over methods, never use a number nothing proves.
"""

from __future__ import annotations

import json
import math

import mpmath as mp
import pytest
from click.testing import CliRunner

from shuffledp.accounting.composition import Accountant
from shuffledp.accounting.events import (
    DiscreteGaussian,
    DiscreteLaplace,
    PolyaSum,
    ShuffledKRR,
    ShuffledLDP,
    event_from_dict,
)
from shuffledp.accounting.guarantee import Guarantee
from shuffledp.accounting.ledger import event_of_report
from shuffledp.accounting.zcdp import zcdp_delta


def test_shuffled_krr_stating_zero_is_refused_and_its_own_pair_composes() -> None:
    """100 shuffled 3-RR events stating (0, 0) composed to eps = 0.0 through basic and
    advanced composition; their own pair gives 1.545 at 1e-6."""
    with pytest.raises(ValueError, match=r"epsilon=0\.0, delta=0\.0 is not implied"):
        ShuffledKRR(n=1000, k=3, eps0=1.0, epsilon=0.0, delta=0.0)
    ev = ShuffledKRR(n=1000, k=3, eps0=1.0, epsilon=0.0)  # delta derived at eps = 0
    assert ev.certified()[0] == 0.0 and 0.0141 < ev.certified()[1] < 0.0142
    r = Accountant().compose(ev, 100).epsilon(1e-6)
    assert r.method == "pld" and r.epsilon == pytest.approx(1.545, abs=1e-3)


def test_polya_sum_delta_is_its_tv_and_nothing_else() -> None:
    """A PolyaSum with tv = 0.01 stating delta = 0 composed 10 times to (10, 1e-6); each is
    (1, (1 + e) 0.01)-DP, and ten of them are no (eps, 1e-6)-DP claim at all."""
    lvl = DiscreteLaplace(parameter=1.0, neighbour="replace")
    with pytest.raises(ValueError, match=r"delta=0\.0 does not match.*tv=0\.01"):
        PolyaSum(levels=(lvl,), tv=0.01, delta=0.0, neighbour="replace")
    ev = PolyaSum(levels=(lvl,), tv=0.01, neighbour="replace")
    assert ev.certified() == (1.0, pytest.approx((1 + math.e) * 0.01, rel=1e-12))
    with pytest.raises(ValueError, match="no method certifies"):
        Accountant().compose(ev, 10).epsilon(1e-6)
    # a stated delta equal to (1 + e^eps) tv up to rounding is kept as stated
    d = (1 + math.e) * 0.01
    assert PolyaSum(levels=(lvl,), tv=d / (1 + math.e), delta=d,
                    neighbour="replace").certified()[1] == d


def test_shuffled_ldp_read_back_is_verified() -> None:
    """A shuffled eps0-LDP release's event survives its round trip; the same record with a
    smaller epsilon or delta is refused, by the constructor, by event_from_dict and by the
    report reader."""
    from shuffledp.accounting.amplification.clones import shuffle_ldp

    b = shuffle_ldp(2000, 1.0, 1e-6)
    rec = b.guarantee.event.to_dict()
    assert event_from_dict(rec) == b.guarantee.event
    for field, val in (("epsilon", rec["epsilon"] * 0.8), ("delta", 1e-9)):
        bad = dict(rec, **{field: val})
        with pytest.raises(ValueError, match=f"{field}=.*not implied by its parameters"):
            event_from_dict(bad)
        report = {"guarantee": dict(b.guarantee.to_dict(), event=bad)}
        with pytest.raises(ValueError, match="not implied"):
            event_of_report(report)
    # the local guarantee (eps0 d, 0) always holds: shuffling is post-processing
    assert ShuffledLDP(n=10, eps0=2.0, epsilon=2.0, delta=0.0).certified() == (2.0, 0.0)


def test_account_compose_refuses_a_tampered_report(tmp_path) -> None:
    from shuffledp.cli import main as _main  # noqa: F401  (registers the commands)
    from shuffledp.cli.account import account

    ev = ShuffledKRR(n=1000, k=3, eps0=1.0, epsilon=0.3, delta=1e-8).to_dict()
    ev["delta"] = 1e-30
    g = Guarantee(notion="approximate", model="shuffle", epsilon=0.3, delta=1e-30,
                  neighbour="replace").to_dict()
    (tmp_path / "r.json").write_text(json.dumps({"guarantee": dict(g, event=ev)}))
    r = CliRunner().invoke(account, ["compose", str(tmp_path / "r.json"), "--delta", "1e-6"])
    assert r.exit_code == 2 and "not implied by its parameters" in r.output


def test_binary_rr_pair_is_verified_by_the_exact_worst_case() -> None:
    """Binary RR's released pair is below what the general bounds prove (0.0862 against
    0.1026 at n = 2000): the event checks it against the exact worst case over data sets,
    and refuses the grid point below it, which that computation refutes."""
    from shuffledp.accounting.amplification.binary_rr import binary_rr_shuffle_exact

    b = binary_rr_shuffle_exact(2000, 1.0, 1e-6)
    ev = b.guarantee.event
    assert ev.certified() == (b.epsilon, 1e-6)
    with pytest.raises(ValueError, match="not implied"):
        ShuffledKRR(n=2000, k=2, eps0=1.0, epsilon=b.epsilon_lower, delta=1e-6)


def _dg_exact_delta(sigma: float, sens: int, eps: float) -> mp.mpf:
    with mp.workdps(40):
        s2 = mp.mpf(sigma) ** 2
        T = int(40 * sigma) + sens + 5
        xs = range(-T, T + sens + 1)
        w = {x: mp.e ** (-mp.mpf(x) ** 2 / (2 * s2)) for x in xs}
        Z = mp.fsum(w.values())
        E = mp.e ** mp.mpf(eps)
        return mp.fsum(max(w[x] - E * w.get(x - sens, mp.e ** (-mp.mpf(x - sens) ** 2 /
                                                                  (2 * s2))), 0)
                       for x in xs) / Z


@pytest.mark.parametrize("sigma,sens,eps", [(3.0, 1, 0.5), (2.0, 2, 1.0), (10.0, 5, 0.2)])
def test_discrete_gaussian_delta_from_the_exact_pair(sigma: float, sens: int,
                                                     eps: float) -> None:
    exact = float(_dg_exact_delta(sigma, sens, eps))
    ev = DiscreteGaussian(sigma=sigma, sensitivity=sens, epsilon=eps)
    assert exact <= ev.delta <= exact * (1 + 1e-9) + 1e-300
    with pytest.raises(ValueError, match="not implied"):
        DiscreteGaussian(sigma=sigma, sensitivity=sens, epsilon=eps, delta=exact * 0.99)
    # a vector query: the zCDP conversion of rho = Delta^2 / (2 sigma^2)
    vec = DiscreteGaussian(sigma=sigma, sensitivity=sens, dimension=4, epsilon=eps)
    assert vec.delta == zcdp_delta(eps, sens ** 2 / (2 * sigma ** 2))
    with pytest.raises(ValueError, match="not implied"):
        DiscreteGaussian(sigma=sigma, sensitivity=sens, dimension=4, epsilon=eps,
                         delta=exact)


def test_basic_composition_uses_the_proven_pairs() -> None:
    """The accountant's basic and advanced answers come from certified(), which is proven:
    a k-RR event stated at its blanket-certified pair keeps it; none can state less."""
    from shuffledp.accounting.amplification.krr_shuffle import krr_shuffle_numerical

    b = krr_shuffle_numerical(5000, 1.0, 1e-7, k=4)
    ev = b.guarantee.event
    acc = Accountant().compose(ev, 3)
    assert acc.basic() == (pytest.approx(3 * b.epsilon), pytest.approx(3e-7))
    with pytest.raises(ValueError, match="not implied"):
        ShuffledKRR(n=5000, k=4, eps0=1.0, epsilon=b.epsilon_lower * 0.9, delta=1e-7)
