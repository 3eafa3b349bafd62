"""Central DPSparseEMDAgg: budgets, noise scales, privacy loss at the boundary, samplers."""

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.stats

from shuffledp import Grid, UserDistributions
from shuffledp.accounting.budget import level_budgets, start_level
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.heatmap.central import central_heatmap, measured_levels, noisy_counts
from shuffledp.encoders.noise.laplace import (
    discrete_laplace,
    discrete_laplace_parameter,
    discrete_laplace_pmf,
    dl_rational,
)
from shuffledp.pyramid import level_counts


@pytest.mark.parametrize(
    "w,q", [(1, 0), (3, 0), (4, 1), (15, 1), (16, 2), (20, 2), (63, 2), (64, 3)]
)
def test_start_level(w, q):
    assert start_level(w) == q


@pytest.mark.parametrize("eps", [0.1, 1.0, 7.3])
@pytest.mark.parametrize("start,top", [(0, 0), (2, 8), (2, 10), (1, 3)])
def test_level_budgets_sum_and_decay(eps, start, top):
    b = level_budgets(eps, start, top)
    assert b.sum() <= eps and b.sum() == pytest.approx(eps, rel=1e-12)
    assert sum(map(Fraction, b.tolist())) <= Fraction(eps)  # basic composition is exact
    ratios = b[1:] / b[:-1]
    np.testing.assert_allclose(ratios, 1 / math.sqrt(2), rtol=1e-9)


def test_level_budgets_validation():
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0, got epsilon=0"):
        level_budgets(0, 0, 1)
    with pytest.raises(ValueError, match="start <= top"):
        level_budgets(1.0, 3, 2)
    with pytest.raises(ValueError, match="w must be an integer >= 1, got w=0"):
        start_level(0)


def test_noise_scale_per_level_matches_one_over_eps_i():
    """The released level counts minus the exact rounded sums are DL(exp(-s_i/t_i)) / R with
    E|Z| = 2a/(1 - a^2), i.e. ~1/eps_i in user-mass units. N >= 4000 draws per level,
    6-sigma tolerance: false-failure probability < 1e-8 per level (fixed seed)."""
    g = Grid(64, 64)
    start, top = measured_levels(g, 20)
    budgets = level_budgets(1.0, start, top)
    users = UserDistributions.from_points(g, np.array([0]), np.array([0.3]), np.array([0.6]))
    R = 1 << 10
    exact = [c / R for c in level_counts(g, users.aggregate() * R, start)]
    rng = np.random.default_rng(123)
    total = {k: [] for k in range(len(budgets))}
    while min(sum(len(x) for x in v) for v in total.values()) < 4000:
        noisy = noisy_counts(users, budgets, start, resolution=R, rng=rng)
        for k, (c, e) in enumerate(zip(noisy, exact, strict=True)):
            total[k].append(np.abs(c - e).ravel())
    for k, e in enumerate(budgets):
        a_abs = np.concatenate(total[k])
        s, t = dl_rational(e, R)
        a = math.exp(-s / t)
        mean = 2 * a / (1 - a * a) / R
        sd = math.sqrt(2 * a / (1 - a) ** 2 / R**2 - mean**2)
        assert abs(a_abs.mean() - mean) < 6 * sd / math.sqrt(a_abs.size), (k, a_abs.mean(), mean)
        assert mean == pytest.approx(1 / e, rel=1e-2)


def test_released_values_are_multiples_of_one_over_resolution():
    """No floating-point artefact: every released count is an exact integer / R."""
    g = Grid(16, 16)
    rng = np.random.default_rng(4)
    users = UserDistributions.from_points(g, rng.integers(0, 9, 50), rng.random(50), rng.random(50))
    start, top = measured_levels(g, 20)
    R = 1 << 20
    for c in noisy_counts(users, level_budgets(1.0, start, top), start, resolution=R, rng=1):
        scaled = c * R
        assert np.array_equal(scaled, np.round(scaled))


def test_central_neighbour_relations_and_secure_default():
    g = Grid(16, 16)
    rng = np.random.default_rng(4)
    users = UserDistributions.from_points(g, rng.integers(0, 9, 50), rng.random(50), rng.random(50))
    r = central_heatmap(users, 1.0)  # no seed: secure noise, a private release
    assert r.guarantee.notes == () and r.parameters["randomness"] == "secure"
    r = central_heatmap(users, 1.0, neighbour="replace", rng=3)
    assert r.guarantee.neighbour is Neighbour.REPLACE_ONE
    assert "not a private release" in r.guarantee.notes[0]
    assert central_heatmap(users, 1.0, neighbour="zero_out", rng=3).guarantee.neighbour \
        is Neighbour.ZERO_OUT
    # effective per-level epsilon never exceeds the budget, and is within 1e-5 of it
    for e, eff in zip(r.parameters["level_epsilons"], r.parameters["level_epsilons_effective"],
                      strict=True):
        assert e * (1 - 1e-5) <= eff <= e
    with pytest.raises(ValueError, match="neighbour must be one of"):
        central_heatmap(users, 1.0, neighbour="swap")
    with pytest.raises(ValueError, match="resolution must be a power of two"):
        central_heatmap(users, 1.0, resolution=1000)


def test_privacy_loss_equals_eps_at_the_boundary():
    """Worst-case privacy loss of the level counts for add/remove of any user is exactly
    sum_i eps_i * ||P_i p_j||_1 = eps (each level of a distribution has l1 norm 1):
    the bound holds at eps and fails for any smaller claimed epsilon."""
    g = Grid(13, 9)
    rng = np.random.default_rng(0)
    users = UserDistributions.from_points(
        g, rng.integers(0, 30, 400), rng.random(400), rng.random(400)
    )
    eps = 0.8
    start, top = measured_levels(g, 20)
    budgets = level_budgets(eps, start, top)
    worst = 0.0
    for j in range(users.n_users):
        px, wt = users.user(j)
        p = np.bincount(px, wt, minlength=g.n_pixels).reshape(g.height, g.width)
        # Laplace log-density ratio sup over outputs = sum_i eps_i * ||delta_i||_1
        loss = sum(e * np.abs(c).sum() for e, c in zip(budgets, level_counts(g, p, start)))
        worst = max(worst, loss)
    assert worst <= eps * (1 + 1e-12)
    assert worst > eps * (1 - 1e-9)


def test_central_release_record():
    g = Grid(32, 24)
    rng = np.random.default_rng(3)
    users = UserDistributions.from_points(g, rng.integers(0, 50, 300),
                                          rng.random(300) * 0.3, rng.random(300) * 0.3)
    r = central_heatmap(users, 2.0, rng=7)
    assert r.estimate.shape == (24, 32)
    assert (r.estimate >= 0).all() and r.estimate.sum() == pytest.approx(1.0)
    assert r.guarantee.notion == "pure" and r.guarantee.epsilon == 2.0
    assert r.guarantee.model == "central"
    assert sum(r.parameters["level_epsilons"]) == pytest.approx(2.0)
    r2 = central_heatmap(users, 2.0, rng=7)
    np.testing.assert_array_equal(r.estimate, r2.estimate)  # reproducible from the seed


@pytest.mark.parametrize("kwargs,msg", [
    ({"epsilon": 0}, "epsilon must be a finite number > 0, got epsilon=0"),
    ({"epsilon": -1.0}, "epsilon=-1.0"),
    ({"epsilon": float("nan")}, "epsilon=nan"),
    ({"epsilon": 1.0, "w": 0}, "w must be an integer >= 1, got w=0"),
])
def test_central_validation(kwargs, msg):
    g = Grid(4, 4)
    users = UserDistributions.from_points(g, np.array([0]), np.array([0.1]), np.array([0.1]))
    with pytest.raises(ValueError, match=msg):
        central_heatmap(users, **kwargs)


def test_central_error_decreases_with_eps():
    """Sanity of utility: EMD proxy (pyramid l1) at eps=10 beats eps=0.1 on average."""
    g = Grid(64, 64)
    rng = np.random.default_rng(11)
    x = np.clip(rng.normal(0.3, 0.03, 3000), 0, 0.999)
    y = np.clip(rng.normal(0.7, 0.03, 3000), 0, 0.999)
    users = UserDistributions.from_points(g, rng.integers(0, 200, 3000), x, y)
    truth = users.aggregate() / users.n_users
    from shuffledp.pyramid import transform_l1

    def err(eps):
        return np.mean([transform_l1(g, central_heatmap(users, eps, rng=s).estimate - truth)
                        for s in range(5)])

    assert err(10.0) < err(0.1)


# --- discrete Laplace ---------------------------------------------------------------------

def test_discrete_laplace_pmf_and_ratio_boundary():
    a = discrete_laplace_parameter(0.7, 3)
    k = np.arange(-2000, 2001)
    pmf = discrete_laplace_pmf(k, a)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    # shifting by the sensitivity 3 changes the log-probability by at most eps, with equality
    ratio = np.log(pmf[:-3] / pmf[3:])
    assert ratio.max() == pytest.approx(0.7, abs=1e-12)
    assert ratio.max() > 0.7 * (1 - 1e-9)


def test_discrete_laplace_sampler_matches_pmf():
    """Chi-square goodness of fit, fixed seed, significance 1e-6 (false-failure rate)."""
    a = 0.6
    x = discrete_laplace(a, 200000, rng=42)
    assert x.dtype == np.int64
    edges = np.arange(-8, 9)
    obs = np.array([np.sum(x == e) for e in edges] + [np.sum(np.abs(x) > 8)])
    pmf = discrete_laplace_pmf(edges, a)
    exp = np.append(pmf, 1 - pmf.sum()) * x.size
    p = scipy.stats.chisquare(obs, exp).pvalue
    assert p > 1e-6


def test_discrete_laplace_validation():
    with pytest.raises(ValueError, match="a must be in"):
        discrete_laplace(1.0, 3)
    with pytest.raises(ValueError, match="sensitivity"):
        discrete_laplace_parameter(1.0, 0)
