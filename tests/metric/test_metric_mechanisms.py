"""Item mechanisms: exact privacy ratio of the realised integer pmf on every pair, sampling law.

Statistical tests use fixed seeds; each is a chi-square goodness-of-fit test at p > 1e-6, so
the false-failure rate of a correct sampler is 1e-6 per test (and 0 once the seed is fixed).
"""

import math

import mpmath
import numpy as np
import pytest
from scipy.stats import chisquare

from shuffledp.encoders.metric.mechanisms import (
    GKRR,
    ExponentialMechanism,
    realised_alpha0,
    uniform_below,
)
from shuffledp.encoders.metric.spaces import grid_space, product_space
from shuffledp.randomness import SecureRandom

P_MIN = 1e-6


@pytest.mark.parametrize("s, t, r, alpha0", [(3, 4, 0.3, 2.0), (2, 3, 1.0, 0.7),
                                             (4, 2, 0.05, 5.0)])
def test_gkrr_exactly_alpha0_and_tight(s, t, r, alpha0):
    mech = GKRR(s, t, r, alpha0)
    a = realised_alpha0(mech)
    assert a <= alpha0  # holds at alpha0 (every pair, every output, 60 digits)
    assert a > alpha0 * (1 - 1e-8)  # fails just below: the mechanism is tight


def test_gkrr_probabilities_match_display():
    s, t, r, a0 = 3, 4, 0.25, 1.5
    mech = GKRR(s, t, r, a0)
    Z = math.exp(a0) + (t - 1) * math.exp((1 - r) * a0) + (s - 1) * t
    want = (math.exp(a0) / Z, math.exp((1 - r) * a0) / Z, 1 / Z)
    assert mech.probabilities() == pytest.approx(want, rel=1e-9)
    A = mech.transition_matrix()
    assert A.sum(axis=1) == pytest.approx(np.ones(s * t))
    assert A[5, 5] == pytest.approx(want[0]) and A[5, 4] == pytest.approx(want[1])
    assert A[5, 0] == pytest.approx(want[2])


def test_tight_exponential_on_product_space_is_gkrr():
    sp = product_space(3, 3, 0.4)
    em = ExponentialMechanism(sp, 2.0, tight=True)
    g = GKRR(3, 3, 0.4, 2.0)
    assert np.allclose(em.transition_matrix(), g.transition_matrix(), rtol=1e-12)
    assert em.alpha0 * (1 - 1e-8) < realised_alpha0(em) <= em.alpha0


@pytest.mark.parametrize("norm, alpha0", [("l2", 3.0), ("l1", 0.5), ("l2", 12.0)])
def test_exponential_half_score_on_grid(norm, alpha0):
    mech = ExponentialMechanism(grid_space(3, 3, norm), alpha0)
    a = realised_alpha0(mech)
    assert a <= alpha0
    # the score/2 mechanism spends at least half of alpha0 (sanity: it is not a no-op)
    assert a >= alpha0 / 2


def test_realised_alpha0_detects_violation():
    """Regression guard for the checker itself: ratios above e^{alpha0 d} are caught."""
    mech = GKRR(2, 2, 0.5, 1.0)
    mech.alpha0_design = 1.0
    w = mech.weights().copy()
    w[0, 0] += 10**6  # make y = x slightly more likely: ratio above e^{alpha0 d}
    mech.weights = lambda: w
    assert realised_alpha0(mech) > 1.0


def test_tight_refused_on_grid_and_bad_alpha0():
    with pytest.raises(ValueError, match="row-regular"):
        ExponentialMechanism(grid_space(2, 3), 1.0, tight=True)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="alpha0"):
            GKRR(2, 2, 0.5, bad)
    with pytest.raises(ValueError, match="too large"):
        GKRR(64, 64, 1.0, 39.0)
    mech = GKRR(2, 2, 0.5, 1.0)
    with pytest.raises(ValueError, match=r"items\[1\]=4 is outside"):
        mech.sample([0, 4], rng=1)


def _gof(mech, x, n, rng):
    y = mech.sample(np.full(n, x), rng=rng)
    obs = np.bincount(y, minlength=mech.k_out)
    return chisquare(obs, mech.pmf(x) * n).pvalue


def test_gkrr_fast_sampler_law():
    mech = GKRR(3, 4, 0.3, 2.0)
    for x in (0, 5, 11):
        assert _gof(mech, x, 200_000, rng=x) > P_MIN


def test_generic_sampler_law_and_secure_default():
    mech = ExponentialMechanism(grid_space(3, 4, "l1"), 2.5)
    assert _gof(mech, 5, 200_000, rng=7) > P_MIN
    assert _gof(mech, 0, 100_000, rng=SecureRandom.for_testing(3)) > P_MIN
    y = mech.sample(np.arange(12))  # secure generator by default
    assert y.shape == (12,) and y.min() >= 0 and y.max() < 12


def test_uniform_below_exact_law():
    t = np.full(300_000, 5, dtype=np.uint64)
    from shuffledp.randomness import word_source

    u = uniform_below(t, np.full(t.size, 64 - 3, dtype=np.uint64), word_source(11))
    assert u.max() < 5
    assert chisquare(np.bincount(u.astype(np.int64), minlength=5)).pvalue > P_MIN


def test_debias_closed_form_inverts_transition():
    mech = GKRR(4, 5, 0.2, 1.3)
    A = mech.transition_matrix()
    g = np.random.default_rng(0)
    for _ in range(5):
        f = g.dirichlet(np.ones(20))
        assert mech.debias(f @ A) == pytest.approx(f, abs=1e-12)
    with pytest.raises(ValueError, match="frequencies"):
        mech.debias(np.ones(3))


def test_mpmath_check_uses_exact_integers():
    mech = GKRR(2, 2, 0.5, 1.0)
    with mpmath.workdps(60):
        lhs = mpmath.log(mech.w_same) - mpmath.log(mech.w_other)
    assert lhs <= mpmath.mpf(1.0)


def test_gkrr_total_fills_62_bits():
    """Regression: with a row total near 2^62 the rejection step accepts almost always
    (it accepted only ~57% of words at k = 1024 before the rescaling)."""
    for s, t, r, a0 in [(32, 32, 0.1, 3.0), (2, 3, 1.0, 0.7), (100, 10, 0.05, 8.0)]:
        mech = GKRR(s, t, r, a0)
        assert 2**62 * 0.99 < mech.total < 2**62


def test_uniform_below_refuses_an_empty_range_instead_of_looping():
    """Regression: a total of 0 made the rejection loop run forever."""
    import numpy as np
    import pytest

    from shuffledp.encoders.metric.mechanisms import uniform_below
    from shuffledp.randomness import word_source

    with pytest.raises(ValueError, match="totals must be >= 1"):
        uniform_below(np.array([3, 0], dtype=np.uint64), np.array([62, 64], dtype=np.uint64),
                      word_source(0))
    with pytest.raises(ValueError, match="one shape"):
        uniform_below(np.array([3], dtype=np.uint64), np.array([62, 62], dtype=np.uint64),
                      word_source(0))
    u = uniform_below(np.array([1, 5], dtype=np.uint64), np.array([64, 61], dtype=np.uint64),
                      word_source(0))
    assert u[0] == 0 and u[1] < 5


def test_one_item_per_user_refuses_a_non_2d_array():
    import numpy as np
    import pytest

    from shuffledp.encoders.metric.mechanisms import one_item_per_user
    from shuffledp.randomness import word_source

    with pytest.raises(ValueError, match=r"shape \(n, m\)"):
        one_item_per_user(np.arange(4), word_source(0))
