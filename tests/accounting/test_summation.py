"""App. F summation parameters: calibration, headroom, r, bits, dropouts, validation."""

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from scipy.stats import nbinom

from shuffledp.accounting.budget import level_budgets
from shuffledp.accounting.summation import (
    _dl_tail,
    _noise_tail,
    shares_needed,
    summation_parameters,
)
from shuffledp.grid import Grid
from shuffledp.pyramid import n_coordinates


def decode(s, q, low):
    return ((s + low) % q) - low


def test_paper_setting_320x240():
    p = summation_parameters(n=50, epsilon=5, delta=1e-5, B=1000, grid="320x240",
                             neighbour="replace")
    g = Grid(320, 240)
    assert p.levels == tuple(range(2, g.depth + 1))  # w = 20 -> start level 2
    assert p.m == n_coordinates(g, 2) == sum(p.level_sizes)
    # calibrated to Delta_i = 2B (replace one user), NOT e^{-eps_i}
    eps_i = level_budgets(5.0, 0, len(p.level_sizes) - 1)
    assert p.level_sensitivities == (2000,) * len(p.level_sizes)
    assert np.allclose(p.dl_parameters, np.exp(-eps_i / 2000), rtol=1e-15)
    assert sum(p.level_epsilons) <= 5.0 + 1e-12
    assert p.guarantee.epsilon <= 5.0 and p.guarantee.delta == 1e-5
    assert p.guarantee.neighbour == "replace one user (n public)"
    # q with headroom and shifted window
    assert p.q == 50 * 1000 + 2 * p.headroom + 1 and p.decode_low == p.headroom
    assert p.q != 50 * 1000  # App. F's q = Bn is refused
    # communication
    assert p.bits_per_message == math.ceil(math.log2(p.m * p.q))
    assert p.messages_per_user == p.r * p.m
    assert p.bits_per_user == p.r * p.m * p.bits_per_message


def test_headroom_is_minimal_and_wrap_bounded():
    # dropout 0: the noise sum is exactly DL(a) (shape 1); with dropout see below
    p = summation_parameters(n=200, epsilon=1, delta=1e-6, B=100, level_sizes=[4, 16, 64],
                             dropout=0.0)
    per = p.wrap_target / p.m
    tails = [_dl_tail(a, p.headroom) for a in p.dl_parameters]
    assert max(tails) <= per
    assert max(_dl_tail(a, p.headroom - 1) for a in p.dl_parameters) > per
    assert p.wrap_probability <= p.wrap_target
    assert p.wrap_probability == pytest.approx(
        sum(mi * t for mi, t in zip(p.level_sizes, tails, strict=True)), rel=1e-12)


def test_dl_tail_matches_pmf_sum():
    mp.mp.dps = 40
    a, t = 0.97, 25
    pmf = lambda k: (1 - mp.mpf(a)) / (1 + mp.mpf(a)) * mp.mpf(a) ** abs(k)  # noqa: E731
    ref = 1 - mp.fsum(pmf(k) for k in range(-t, t + 1))
    assert _dl_tail(a, t) == pytest.approx(float(ref), rel=1e-12)
    assert _noise_tail(a, t, 1.0) == _dl_tail(a, t)
    # shape > 1: union bound 2 P(X > t) >= exact tail of X - Y
    x = np.arange(0, 2000)
    px = nbinom.pmf(x, 1.3, 1 - a)
    diff = np.convolve(px, px[::-1])
    ks = np.arange(-1999, 2000)
    exact = diff[np.abs(ks) > t].sum()
    assert _noise_tail(a, t, 1.3) >= exact


def test_full_mass_cell_and_extreme_noise_decode():
    p = summation_parameters(n=10, epsilon=2, delta=1e-6, B=50, level_sizes=[1, 4])
    nB, t, q, low = 500, p.headroom, p.q, p.decode_low
    for true in (0, nB):
        for noise in (-t, 0, t):
            assert decode((true + noise) % q, q, low) == true + noise
    assert decode((nB + t + 1) % q, q, low) != nB + t + 1  # one beyond the window wraps
    c = summation_parameters(n=10, epsilon=2, delta=1e-6, B=50, level_sizes=[1, 4],
                             decoding="centred")
    assert c.q == 2 * (nB + c.headroom) + 1 and c.decode_low == (c.q - 1) // 2
    for v in (-c.headroom, nB + c.headroom):
        assert decode(v % c.q, c.q, c.decode_low) == v


def test_r_formula_with_mpmath():
    mp.mp.dps = 40
    p = summation_parameters(n=1000, epsilon=1.5, delta=1e-7, B=200, grid="64x48")
    val = (2 * mp.log(mp.e ** mp.mpf(1.5) + 1) + 2 * mp.log(p.m / mp.mpf("1e-7"))
           + mp.log(p.q)) / mp.log(1000) + 1
    assert p.r == int(mp.ceil(val))
    assert shares_needed(1.5, 1e-7, p.m, p.q, 1000) == p.r


def test_neighbour_and_rounding():
    a = summation_parameters(n=100, epsilon=1, delta=1e-6, B=30, level_sizes=[5],
                             neighbour="zero_out", rounding="floor")
    assert a.level_sensitivities == (30,)
    assert a.dl_parameters[0] == pytest.approx(math.exp(-1 / 30), rel=1e-15)


def test_add_remove_is_refused():
    # the Polya shape 1/n_min is planned from n: n and n + 1 users give every user another
    # noise law, so the per-level DL calibration proves nothing under add/remove
    with pytest.raises(ValueError, match="add_remove.*refused"):
        summation_parameters(n=100, epsilon=1, delta=1e-6, B=30, level_sizes=[5],
                             neighbour="add_remove")


def test_dropout_over_provisioning():
    p = summation_parameters(n=1000, epsilon=1, delta=1e-6, B=10, level_sizes=[4, 16],
                             dropout=0.05)
    # the float 1 / 950 is below 1 / 950: the shape is the next float up (share_shape)
    assert p.n_min == 950 and p.polya_shape == math.nextafter(1 / 950, 1.0)
    assert Fraction(p.polya_shape) * 950 >= 1 > Fraction(1 / 950) * 950
    # r uses n_min users, headroom covers all n present (shape n / n_min)
    assert p.r == shares_needed(1.0, 1e-6, p.m, p.q, 950)
    full = summation_parameters(n=1000, epsilon=1, delta=1e-6, B=10, level_sizes=[4, 16],
                                dropout=0.0)
    assert full.n_min == 1000
    assert p.headroom >= full.headroom
    assert any("n_min=950" in s for s in p.guarantee.notes)
    # n_min = ceil((1 - d) n) is exact at representable fractions
    assert summation_parameters(n=10, epsilon=1, delta=1e-6, B=1, level_sizes=[1],
                                dropout=0.1).n_min == 9


def test_validation_messages():
    kw = dict(n=100, epsilon=1, delta=1e-6, B=10, level_sizes=[4])
    cases = [
        (dict(n=1), ValueError, r"n must be an integer >= 2, got n=1"),
        (dict(n=10.5), TypeError, r"n must be an integer, got n=10.5"),
        (dict(epsilon=0), ValueError, r"epsilon must be a finite number > 0, got epsilon=0"),
        (dict(delta=1.0), ValueError, r"delta must be in \(0, 1\), got delta=1.0"),
        (dict(B=0), ValueError, r"B must be an integer >= 1, got B=0"),
        (dict(rounding="ceil"), ValueError, r"rounding must be one of .*got rounding='ceil'"),
        (dict(neighbour="swap"), ValueError, r"neighbour must be one of .*neighbour='swap'"),
        (dict(decoding="x"), ValueError, r"decoding must be one of .*got decoding='x'"),
        (dict(dropout=1.0), ValueError, r"dropout must be in \[0, 1\), got dropout=1.0"),
        (dict(dropout=0.99), ValueError, r"dropout=0.99 leaves n_min .* = 1 < 2"),
        (dict(wrap_target=0), ValueError, r"wrap_target must be in \(0, 1\), got wrap_target=0"),
        (dict(gamma=-1), ValueError, r"gamma must be a finite number > 0, got gamma=-1"),
        (dict(level_sizes=[]), ValueError, r"level_sizes must not be empty"),
        (dict(level_sizes=[3, 0]), ValueError, r"level_sizes\[1\] must be an integer >= 1"),
        (dict(level_sizes="4"), TypeError, r"level_sizes must be a sequence of integers"),
        (dict(grid="8x8"), ValueError, r"give exactly one of grid and level_sizes"),
    ]
    for change, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            summation_parameters(**{**kw, **change})
    with pytest.raises(ValueError, match=r"grid must be a Grid or 'WIDTHxHEIGHT', got grid='a'"):
        summation_parameters(n=100, epsilon=1, delta=1e-6, B=10, grid="a")
    with pytest.raises(ValueError, match=r"w must be an integer >= 1, got w=0"):
        summation_parameters(n=100, epsilon=1, delta=1e-6, B=10, grid="8x8", w=0)


# ---------------------------------------------------------------------------
# `account summation` printed parameter sets that ProtocolParams refuses (q > 2^32, messages
# over 64 bits, no headroom) and crashed (ZeroDivisionError, OverflowError) on tiny epsilon
# or delta. summation_parameters must accept exactly what derive_params accepts.
def _accepts(fn, **kw) -> tuple[bool, str]:
    try:
        fn(**kw)
    except (ValueError, TypeError) as exc:  # anything else (a crash) fails the test
        return False, str(exc)
    return True, ""


SWEEP = [
    dict(n=n, B=B, grid=g, epsilon=eps, delta=delta)
    for n in (2, 50, 10**7, 10**9)
    for B in (1, 255, 10**6, 2**31)
    for g in ("1x1", "320x240", "65536x65536")
    for eps in (1e-9, 0.1, 1000.0, 1e6)
    for delta in (1e-300, 1e-12)
]


def test_summation_accepts_iff_protocol_params_accept():
    from shuffledp.protocol.params import derive_params

    reasons = []
    for kw in SWEEP:
        grid = Grid.parse(kw["grid"])
        ok_s, why_s = _accepts(summation_parameters, **{**kw, "grid": grid})
        ok_p, why_p = _accepts(derive_params, **{**kw, "grid": grid})
        assert ok_s == ok_p, (kw, why_s, why_p)
        reasons.append(why_s)
    # the sweep reaches every limit (so that the test cannot pass vacuously)
    for needle in ("q must be <= 2^32", "messages need 65 bits > 64",
                   "the noise needs headroom t >=", ""):
        assert any(needle in r if needle else r == "" for r in reasons), needle


def test_headroom_at_least_one():
    # t = 0 (ProtocolParams needs decode_low >= 1) became t = 1: accepted by both
    from shuffledp.protocol.params import derive_params

    p = summation_parameters(n=2, epsilon=60.0, delta=1e-3, B=1, grid="1x1")
    assert p.headroom == 1 and p.decode_low == 1 and p.q == 2 * 1 + 2 * 1 + 1
    assert derive_params(Grid(1, 1), 2, epsilon=60.0, delta=1e-3, B=1).q == p.q
    # absurd epsilon (a_i underflows to 0; was "math domain error"): the noise sampler's
    # total-variation term (1 + e^eps) tau cannot be proven below delta, so it is refused
    for eps in (1000.0, 1e6):
        with pytest.raises(ValueError, match="noise sampler's total variation"):
            summation_parameters(n=10, epsilon=eps, delta=1e-6, B=1, grid="8x8")


@pytest.mark.parametrize("kw,match", [
    (dict(n=10**5, B=10**5), r"q must be <= 2\^32, got q=10000000003; lower B or n"),
    (dict(epsilon=1e-9), r"needs headroom t >= .* so q would exceed 2\^32 \(epsilon=1e-09"),
    (dict(n=10**7, B=255, grid="65536x65536", epsilon=0.1, delta=1e-12),
     r"messages need 65 bits > 64"),
    (dict(epsilon=5e-324), r"level budget underflows to 0"),
    # DL headroom fits (t ~ 1.9e9) but the NegBin(2) tail of dropout 0.5 needs t > 2^31
    (dict(dropout=0.5, epsilon=8e-8), r"needs headroom t >= .* so q would exceed 2\^32"),
])
def test_refusal_reasons(kw, match):
    base = dict(n=10, epsilon=1.0, delta=1e-6, B=1, grid="8x8", neighbour="replace")
    with pytest.raises(ValueError, match=match):
        summation_parameters(**{**base, **kw})
    if "dropout" in kw:
        assert summation_parameters(**{**base, **kw, "dropout": 0.0}).q <= 2**32


@pytest.mark.parametrize("dropout", [0.1, 0.5, 0.8])
def test_headroom_minimal_with_dropout(dropout):
    p = summation_parameters(n=100, epsilon=1.0, delta=1e-6, B=10, level_sizes=[4, 16, 64],
                             dropout=dropout)
    shape, per = p.n / p.n_min, p.wrap_target / p.m
    assert shape > 1
    assert all(_noise_tail(a, p.headroom, shape) <= per for a in p.dl_parameters)
    assert any(_noise_tail(a, p.headroom - 1, shape) > per for a in p.dl_parameters)


def test_shares_needed_tiny_delta():
    # m / delta overflowed to inf -> OverflowError in math.ceil
    r = shares_needed(1.0, 5e-324, 5 * 10**9, 2**20, 10)
    ref = mp.ceil((2 * mp.log(mp.e + 1) + 2 * mp.log(mp.mpf(5 * 10**9) / mp.mpf(5e-324))
                   + mp.log(2**20)) / mp.log(10) + 1)
    assert r == int(ref)


def test_account_summation_budget_option_matches_setup():
    """`shuffledp account summation --budget auto|paper` states the split `shuffledp setup
    --budget` records: at eps n / N = 9.4 the two differ, and each equals derive_params'."""
    import json

    from click.testing import CliRunner

    from shuffledp.cli import main
    from shuffledp.protocol.params import derive_params

    args = ["account", "summation", "--n", "300", "--epsilon", "2", "--delta", "1e-5", "--B",
            "64", "--grid", "8x8", "--json"]
    got = {}
    for rule in ("auto", "paper"):
        res = CliRunner().invoke(main, [*args, "--budget", rule])
        assert res.exit_code == 0, res.output
        rec = json.loads(res.output)
        want = derive_params(Grid(8, 8), 300, epsilon=2.0, delta=1e-5, B=64, budget=rule)
        assert rec["budget_rule"] == rule
        assert rec["level_epsilons"] == list(want.level_epsilons)
        assert rec["encrypted_bytes_per_user"] == want.encrypted_bytes_per_user
        got[rule] = rec["level_epsilons"]
    assert got["auto"] != got["paper"]
    default = json.loads(CliRunner().invoke(main, args).output)
    assert default["level_epsilons"] == got["auto"]
    res = CliRunner().invoke(main, [*args, "--budget", "even"])
    assert res.exit_code == 2 and "--budget" in res.output
