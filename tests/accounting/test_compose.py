"""The accountant: PLD composition against exact and independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from shuffledp.accounting.composition import Accountant, compose
from shuffledp.accounting.events import (
    DiscreteLaplace,
    EpsDelta,
    Parallel,
    PolyaSum,
    ShuffledKRR,
    ShuffledLDP,
    event_from_dict,
)
from shuffledp.accounting.guarantee import Neighbour


def _dl_exact_delta(t: float, sens: int, k: int, eps: float) -> float:
    """delta(eps) of k-fold DL(t) at sensitivity ``sens``, from its exact loss law.

    Under P = DL(0), the loss t(|x - s| - |x|) is s t for x <= 0, t (s - 2x) for 0 < x < s
    and -s t for x >= s; the k-fold law is the k-fold convolution (in units of t).
    """
    a = math.exp(-t)
    pmf = np.zeros(2 * sens + 1)  # index j <-> loss (j - sens) t
    pmf[2 * sens] = 1.0 / (1.0 + a)
    for x in range(1, sens):
        pmf[sens + (sens - 2 * x)] += (1.0 - a) / (1.0 + a) * a ** x
    pmf[0] += a ** sens / (1.0 + a)
    out = np.array([1.0])
    for _ in range(k):
        out = np.convolve(out, pmf)
    losses = (np.arange(out.size) - k * sens) * t
    return float(np.sum(out * np.maximum(0.0, 1.0 - np.exp(eps - losses))))


@pytest.mark.parametrize("sens,k", [(1, 50), (2, 20), (3, 10)])
def test_k_discrete_laplace_matches_exact_pld(sens: int, k: int) -> None:
    t = 0.05
    acc = Accountant(discretization=1e-4).compose(DiscreteLaplace(parameter=t,
                                                                  sensitivity=sens), k)
    for eps in (0.0, 0.5, 1.0, 2.0):
        exact = _dl_exact_delta(t, sens, k, eps)
        got = acc.delta(eps).pld[1]
        assert got >= exact * (1 - 1e-9) - 1e-15  # pessimistic: never below the exact
        # rounding moves each loss up by < h: the k-fold curve lies below the exact one at
        # eps - k h (the two meet as h -> 0)
        assert got <= _dl_exact_delta(t, sens, k, eps - k * 1e-4) * (1 + 1e-9) + 1e-14
        assert got == pytest.approx(exact, rel=0.02, abs=1e-14)
    # epsilon(delta): the exact curve at the PLD's epsilon is within delta
    eps = acc.epsilon(1e-6).pld[0]
    assert _dl_exact_delta(t, sens, k, eps) <= 1e-6 * (1 + 1e-9)
    if eps < sens * t * k - 5e-3:  # below the pure epsilon: the curve is met, not bypassed
        assert _dl_exact_delta(t, sens, k, eps - 5e-3) > 1e-6


def _events() -> list:
    return [
        DiscreteLaplace(parameter=0.2, neighbour="replace"),
        DiscreteLaplace(parameter=0.01, sensitivity=20, dimension=4, neighbour="replace"),
        EpsDelta(epsilon=0.3, delta=1e-9, neighbour="replace"),
        PolyaSum(levels=(DiscreteLaplace(parameter=1e-3, sensitivity=200, dimension=16,
                                         neighbour="replace"),), tv=1e-10,
                 neighbour="replace"),
    ]


@pytest.mark.parametrize("k", [1, 5, 40])
def test_basic_composition_is_an_upper_bound_everywhere(k: int) -> None:
    acc = Accountant(discretization=1e-3)
    for e in _events():
        acc.compose(e, k)
    eb, db = acc.basic()
    for delta in (1e-8, 1e-6, 1e-3, 0.1):
        if delta < db:  # the releases' own deltas exceed it: refused, not reported
            with pytest.raises(ValueError, match="no method certifies"):
                acc.epsilon(delta)
            continue
        r = acc.epsilon(delta)
        if r.pld is not None:
            assert r.pld[0] <= eb + 1e-9
        if r.advanced is not None:
            assert r.advanced[0] <= eb + 1e-12
        assert r.epsilon <= eb + 1e-12 or db > delta
    # and as delta(epsilon): at the basic epsilon the PLD delta is at most the basic delta
    assert acc.delta(eb).pld[1] <= db + 1e-12


def test_methods_named_and_neighbours_refused() -> None:
    acc = Accountant().compose(DiscreteLaplace(parameter=0.1))
    with pytest.raises(ValueError, match="'add_remove'.*'replace'"):
        acc.compose(DiscreteLaplace(parameter=0.1, neighbour="replace"))
    metric = Accountant().compose(EpsDelta(epsilon=1, delta=1e-6, guarantee_notion="metric_emd",
                                           neighbour="bounded_emd"), 3)
    r = metric.epsilon(1e-5)
    assert r.method == "basic" and r.pld is None and r.epsilon == 3
    with pytest.raises(ValueError, match="cannot compose a metric_emd event with a approx"):
        metric.compose(EpsDelta(epsilon=1, neighbour="bounded_emd"))
    with pytest.raises(ValueError, match="parameter"):
        DiscreteLaplace(parameter=-1.0)
    with pytest.raises(ValueError, match="no method certifies"):
        Accountant().compose(EpsDelta(epsilon=1, delta=1e-3), 10).epsilon(1e-6)


def test_event_round_trip() -> None:
    for e in _events() + [ShuffledLDP(n=1000, eps0=1.0, epsilon=0.2, delta=1e-6),
                          ShuffledKRR(n=1000, k=3, eps0=1.0, epsilon=0.2, delta=1e-6),
                          Parallel(branches=tuple(_events()[:2]), neighbour="replace")]:
        assert event_from_dict(e.to_dict()) == e


def test_parallel_is_the_worst_branch() -> None:
    a = DiscreteLaplace(parameter=0.1)
    b = DiscreteLaplace(parameter=0.2)
    par = Accountant(1e-3).compose_parallel([a, b], 10).epsilon(1e-6)
    only_b = Accountant(1e-3).compose(b, 10).epsilon(1e-6)
    assert only_b.epsilon <= par.epsilon <= only_b.epsilon + 0.02


def test_hiding_mass_is_charged_additively() -> None:
    lvl = DiscreteLaplace(parameter=0.1, neighbour="replace")
    ideal = PolyaSum(levels=(lvl,), tv=0.0, neighbour="replace")
    real = PolyaSum(levels=(lvl,), tv=1e-9, neighbour="replace")
    tau = real.hiding_mass()
    assert tau == pytest.approx((1 + math.exp(0.1)) * 1e-9, rel=1e-12)
    assert real.certified() == (pytest.approx(0.1), tau)  # the charge is the release's delta
    d_ideal = Accountant().compose(ideal, 100).delta(1.0).pld[1]
    d_real = Accountant().compose(real, 100).delta(1.0).pld[1]
    assert d_ideal < d_real <= d_ideal + 100 * tau + 1e-15


def test_shuffled_ldp_single_release_matches_its_certified_bound() -> None:
    from shuffledp.accounting.amplification.clones import variation_ratio_numerical

    b = variation_ratio_numerical(2000, 1.0, 1e-6)
    e = ShuffledLDP(n=2000, eps0=1.0, epsilon=b.epsilon, delta=b.delta)
    eps = compose([e], 1e-6, discretization=1e-3).pld[0]
    assert b.epsilon_lower <= eps <= b.epsilon * 1.01 + 1e-3


def _clone_pair_loss_pmf(n: int, eps0: float, sds: float = 10.0):
    """Independent: the stronger-clone pair enumerated (c, a), losses and P-masses."""
    e = math.exp(-eps0)
    beta, rho = e / (1 + e), 1 / (1 + e)
    p = 2 / (math.exp(eps0) + 1)
    mu, sd = (n - 1) * p, math.sqrt((n - 1) * p * (1 - p))
    cs = np.arange(max(0, int(mu - sds * sd)), min(n - 1, int(mu + sds * sd)) + 1)
    wc = binom.pmf(cs, n - 1, p)
    half = int(sds * math.sqrt(cs[-1]) / 2) + 2
    a = (cs // 2)[:, None] + np.arange(-half, half + 1)[None, :]
    c = cs[:, None]
    ok = (a >= 0) & (a <= c + 1)
    a = np.clip(a, 0, c + 1)
    P = np.where(ok, wc[:, None] * (rho * binom.pmf(a - 1, c, 0.5) + beta * binom.pmf(a, c, 0.5)),
                 0.0)
    L = np.log((rho * a + beta * (c - a + 1)) / (beta * a + rho * (c - a + 1)))
    return L[ok], P[ok]


def _composed_curve(L, P, h, k, rounding):
    """delta(eps) of the k-fold composition, losses rounded up (upper) or down (lower)."""
    idx = (np.ceil(L / h) if rounding == "up" else np.floor(L / h)).astype(np.int64)
    lo = idx.min()
    pmf = np.bincount(idx - lo, weights=P)
    size = k * (pmf.size - 1) + 1
    nfft = 1 << (size - 1).bit_length()
    out = np.clip(np.fft.irfft(np.fft.rfft(pmf, nfft) ** k, nfft)[:size], 0, None)
    losses = (np.arange(size) + k * lo) * h

    def delta(eps: float) -> float:
        keep = losses > eps
        return float(np.sum(out[keep] * -np.expm1(eps - losses[keep])))
    return delta


@pytest.mark.slow
def test_365_shuffled_binary_rr_against_independent_computation() -> None:
    """365 daily releases of n = 1e5 binary-RR reports (eps0 = 1) at total delta = 1e-6.

    The independent computation enumerates the stronger-clone pair (every c of
    Bin(n - 1, 2/(e + 1)) and a of Bin(c, 1/2) within 10 sd), rounds each loss down (a lower
    bound of the true composed curve) or up (an upper bound) on a 5e-6 grid and composes by
    numpy FFT. The accountant's epsilon must be sound (the lower curve is within delta there)
    and tight (the upper curve exceeds delta 0.002 below it).
    """
    n, eps0, k, delta = 100_000, 1.0, 365, 1e-6
    # the single release's exact epsilon at 1e-6 is 0.010146; the event's delta there is
    # derived from the stronger-clone pair (the exact worst case would prove 1e-6, at ~30 s)
    e = ShuffledKRR(n=n, k=2, eps0=eps0, epsilon=0.010146)
    r = Accountant(discretization=1e-4).compose(e, k).epsilon(delta)
    assert r.method == "pld"
    L, P = _clone_pair_loss_pmf(n, eps0)
    h = 5e-6
    assert _composed_curve(L, P, h, k, "down")(r.epsilon) <= delta
    assert _composed_curve(L, P, h, k, "up")(r.epsilon - 2e-3) > delta
    # and far below basic composition of even the exact single-release epsilon
    assert r.epsilon < 0.1 * k * 0.010146


def test_every_release_carries_its_event() -> None:
    from shuffledp.accounting.amplification.clones import shuffle_ldp
    from shuffledp.accounting.summation import summation_parameters
    from shuffledp.analyzers.privhist import AnonHistogram, privhist

    p = summation_parameters(n=100, epsilon=1.0, delta=1e-6, B=16, grid="16x16")
    ev = p.guarantee.event
    assert isinstance(ev, PolyaSum) and ev.neighbour is Neighbour.ZERO_OUT  # the one default
    assert ev.certified() == pytest.approx((1.0, 1e-6))
    assert ev.tv == pytest.approx(1e-6 / (1 + math.e))
    b = shuffle_ldp(1000, 1.0, 1e-6)
    assert isinstance(b.guarantee.event, ShuffledLDP) and b.guarantee.event.epsilon == b.epsilon
    rel = privhist(AnonHistogram.from_counts([1, 1, 2, 5]), 2.0, rng=1)
    steps = rel.guarantee.event
    assert steps.neighbour is Neighbour.SORTED_L1
    assert steps.certified()[0] == pytest.approx(rel.parameters["epsilon_effective"])
    assert steps.certified()[0] <= rel.guarantee.epsilon
    # the guarantee's dict carries the event, and it reads back
    assert event_from_dict(p.guarantee.to_dict()["event"]) == ev


def _hockey_stick(p: np.ndarray, q: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    return np.array([np.maximum(p - a * q, 0.0).sum() for a in alphas])


@pytest.mark.parametrize("t", [0.05, 0.5, 2.0, 5.0])
def test_hiding_charge_is_the_release_delta_and_no_less_will_do(t: float) -> None:
    """PolyaSum charges tau' at infinite loss for a view within total variation tau of an
    ideal eps*-DP pair; sound iff (1 + alpha) tau <= tau' (1 - H_ideal(alpha)) on
    [1, e^eps*]. The charge is (1 + e^eps*) tau, the release's delta: it holds on the exact
    hockey-stick curves of the discrete Laplace pair and of randomized response (the worst
    eps*-DP pair, Kairouz, Oh, Viswanath 2015, Thm 2.4), with equality all along on
    randomized response, so a charge just below fails there."""
    tau = 1e-9
    ev = PolyaSum(levels=(DiscreteLaplace(parameter=t, neighbour="replace"),), tv=tau,
                  neighbour="replace")
    charge = ev.hiding_mass()
    assert charge == pytest.approx((1 + math.exp(t)) * tau, rel=1e-12)
    assert charge == ev.certified()[1]
    alphas = np.exp(np.linspace(0.0, t, 2001))
    a = math.exp(-t)
    x = np.arange(-6000, 6001)
    dl = _hockey_stick(a ** np.abs(x) * (1 - a) / (1 + a),
                       a ** np.abs(x - 1) * (1 - a) / (1 + a), alphas)
    p_rr = math.exp(t) / (1 + math.exp(t))
    rr = _hockey_stick(np.array([p_rr, 1 - p_rr]), np.array([1 - p_rr, p_rr]), alphas)
    need = (1 + alphas) * tau
    for h in (dl, rr):
        assert np.all(need <= charge * (1 - h) * (1 + 1e-9))
    assert not np.any(need <= charge * (1 - 1e-6) * (1 - rr))


@pytest.mark.parametrize("t", [0.3, 1.0, 4.0])
def test_hiding_charge_dominates_a_real_view_exactly(t: float) -> None:
    """End to end on exact rationals: an ideal randomized-response pair (P, Q) at eps* = t,
    real views P', Q' within total variation tau of it (tau moved towards the other
    outcome, or onto a third one). The mixed pair ((1 - tau') P + tau' [top], ...) has
    curve (1 - tau') H_ideal + tau'; with tau' = (1 + e^t) tau it dominates the real views
    at every alpha (both directions, alpha < 1 too); with tau' 1e-9 lower it does not."""
    from fractions import Fraction as F

    tau = F(1, 10 ** 6)
    p = F(math.exp(t) / (1 + math.exp(t)))  # an exact rational near e^t / (1 + e^t)
    eps_star = math.log(p / (1 - p))        # the pair is exactly eps*-DP for this eps*
    P, Q = [p, 1 - p, F(0)], [1 - p, p, F(0)]
    views = [([p + tau, 1 - p - tau, F(0)], [1 - p - tau, p + tau, F(0)]),
             ([p, 1 - p - tau, tau], [1 - p, p - tau, tau])]
    charge = tau / (1 - p)  # (1 + e^eps*) tau exactly, e^eps* = p / (1 - p)
    assert float(charge) == pytest.approx(
        PolyaSum(levels=(DiscreteLaplace(parameter=eps_star, neighbour="replace"),),
                 tv=float(tau), neighbour="replace").hiding_mass(), rel=1e-12)

    def H(A, B, al):
        return sum(max(x - al * y, F(0)) for x, y in zip(A, B, strict=True))

    alphas = [F(math.exp(e)) for e in np.linspace(-eps_star - 0.5, eps_star + 0.5, 301)]
    alphas += [F(1), F(p / (1 - p))]
    for Pr, Qr in views:
        for al in alphas:
            for (A, B), (Ar, Br) in (((P, Q), (Pr, Qr)), ((Q, P), (Qr, Pr))):
                assert H(Ar, Br, al) <= (1 - charge) * H(A, B, al) + charge
    low = charge * F(1 - 1e-9)
    Pr, Qr = views[0]
    assert H(Pr, Qr, F(1)) > (1 - low) * H(P, Q, F(1)) + low


def test_hiding_charge_ten_releases_at_eps5() -> None:
    """10 shuffle heatmaps (256 x 256, B = 256) at eps* = 5, delta 1e-5 each, composed at a
    total delta of 1e-3: with the charge tau' = delta (1e-4 in all) the PLD applies and gives
    32.71; the old charge, 74.7x larger, put 7.4e-3 at infinity and left basic (50)."""
    from shuffledp.accounting.summation import summation_parameters

    ev = summation_parameters(n=1000, epsilon=5.0, delta=1e-5, B=256,
                              grid="256x256").guarantee.event
    assert ev.hiding_mass() == pytest.approx(1e-5, rel=1e-12)
    r = Accountant().compose(ev, 10).epsilon(1e-3)
    assert r.method == "pld" and r.epsilon == pytest.approx(32.712, abs=2e-3)
    assert r.basic[0] == pytest.approx(50.0)
