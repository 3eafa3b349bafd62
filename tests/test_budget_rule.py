"""The "auto" budget split of the central heatmap (accounting/budget.py: leaf_share,
auto_level_budgets): a function of public numbers only, summing to eps exactly, and the
mechanism's guarantee unchanged."""

from fractions import Fraction

import numpy as np
import pytest

from shuffledp import Grid, UserDistributions
from shuffledp.accounting.budget import (
    LEAF_SHARE_MAX,
    auto_level_budgets,
    exact_at_most,
    leaf_share,
    level_budgets,
)
from shuffledp.analyzers.heatmap.central import central_heatmap, measured_levels
from shuffledp.encoders.noise.laplace import dl_rational
from shuffledp.pyramid import level_counts


def s_(x):
    return x * x / (x * x + 0.25)


def test_leaf_share_rule():
    assert leaf_share(1.0, 4096) == 0.0  # n not public: nothing
    # d = eps n / N; s(x) = x^2 / (x^2 + 0.5^2); p = max(s(d), min(0.65, s(d max(1, eps/4))))
    assert leaf_share(1.0, 4096, 2048) == pytest.approx(0.5)  # d = 0.5, eps <= 4: s(d)
    assert leaf_share(4.0, 4096, 512) == pytest.approx(0.5)  # the eps term starts above 4
    assert leaf_share(8.0, 4096, 256) == pytest.approx(0.65)  # d = 0.5: s(1) = 0.8, capped
    assert leaf_share(8.0, 4096, 128) == pytest.approx(0.5)  # d = 0.25: s(0.5) = 0.5 > s(d)
    assert leaf_share(10.0, 4096, 200) == pytest.approx(0.65)  # the cap of the eps term
    assert leaf_share(10.0, 4096, 500) == pytest.approx(s_(10.0 * 500 / 4096))  # s(d) > 0.65
    ps = [leaf_share(1.0, 4096, n) for n in (10, 100, 1000, 5000, 10_000, 10**6)]
    assert ps == sorted(ps) and ps[-1] == LEAF_SHARE_MAX
    with pytest.raises(ValueError, match="epsilon"):
        leaf_share(0.0, 4096, 10)
    with pytest.raises(ValueError, match="n_pixels"):
        leaf_share(1.0, 0, 10)
    with pytest.raises((TypeError, ValueError), match="n_public"):
        leaf_share(1.0, 4096, -1)


@pytest.mark.parametrize("eps", [0.1, 0.7, 1.0, 3.3, 10.0])
@pytest.mark.parametrize("n", [None, 50, 200, 1000, 5000, 10_000, 10**7])
@pytest.mark.parametrize("start,top,n_pix", [(2, 6, 4096), (2, 8, 65536), (0, 3, 64),
                                             (2, 2, 16)])
def test_auto_budgets_sum_to_eps_and_keep_the_printed_split_at_low_load(eps, n, start, top,
                                                                        n_pix):
    b = auto_level_budgets(eps, start, top, n_pix, n)
    paper = level_budgets(eps, start, top)
    assert b.shape == paper.shape and (b > 0).all()
    assert float(np.sum(b)) <= eps and float(np.sum(b)) == pytest.approx(eps, rel=1e-12)
    assert sum(map(Fraction, b.tolist())) <= Fraction(eps)  # basic composition is exact
    p = leaf_share(eps, n_pix, n)
    if top == start or p <= paper[-1] / eps:
        np.testing.assert_array_equal(b, paper)  # the printed split, bit for bit
    else:
        assert b[-1] == pytest.approx(p * eps)
        # the coarse levels keep the printed gamma-decay among themselves
        np.testing.assert_allclose(b[1:-1] / b[:-2], paper[1:-1] / paper[:-2])


def test_exact_at_most_lowers_a_split_whose_float_sum_hides_the_excess():
    # found by a random search: the float sum is <= eps, the exact (rational) sum is not
    eps = 3.946609055255204
    split = np.array([0.6036831641700474, 1.310447843438691, 0.34822776675853356,
                      1.684250280887932])
    assert float(split.sum()) <= eps < sum(map(Fraction, split.tolist()))
    out = exact_at_most(split, eps)
    assert sum(map(Fraction, out.tolist())) <= Fraction(eps)
    # only the largest moved, by a few ulps; the input is not changed
    assert np.array_equal(out[:3], split[:3]) and 0 < split[3] - out[3] < 1e-14
    assert split[3] == 1.684250280887932
    # a split already at most eps is returned as it is
    np.testing.assert_array_equal(exact_at_most(out, eps), out)


@pytest.mark.parametrize("budgets", [[], [[0.5]], [0.5, 0.0], [0.5, float("nan")], "ab"])
def test_exact_at_most_names_bad_budgets(budgets):
    with pytest.raises(ValueError, match="budgets must be a non-empty 1-D array"):
        exact_at_most(budgets, 1.0)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0, got epsilon=0"):
        exact_at_most([0.5], 0)


@pytest.mark.parametrize("neighbour", ["zero_out", "add_remove", "replace_one"])
def test_release_guarantee_is_exactly_eps_under_the_auto_split(neighbour):
    """The effective per-level epsilons of the exact discrete Laplace noise (rationals s/t
    from dl_rational) sum to at most eps in exact rational arithmetic, the event's epsilon is
    eps, and the worst-case privacy loss of any user's level vectors under the recorded
    budgets is sum_i eps_i ||P_i p||_1 = eps (every level of a distribution has l1 norm 1)."""
    g = Grid(64, 64)
    rng = np.random.default_rng(0)
    n = 8000
    users = UserDistributions.from_points(g, rng.integers(0, n, 3 * n), rng.random(3 * n),
                                          rng.random(3 * n))
    eps = 1.0
    rel = central_heatmap(users, eps, neighbour=neighbour, public_n=n, rng=1)
    params = rel.parameters
    assert params["budget_rule"] == "auto" and params["leaf_share"] > 0.5
    budgets = params["level_epsilons"]
    sens = rel.guarantee.neighbour.level_sensitivity(1 << 20)
    exact = sum(Fraction(sens) * Fraction(s) / Fraction(t)
                for s, t in (dl_rational(float(e), sens) for e in budgets))
    assert exact <= Fraction(eps)
    assert rel.guarantee.epsilon == eps and rel.guarantee.event.epsilon <= eps
    # the rational parameters round eps_i down by < 1e-5 relative (dl_rational)
    assert rel.guarantee.event.epsilon == pytest.approx(eps, rel=1e-5)
    start, top = measured_levels(g, 20)
    worst = 0.0
    for j in range(0, users.n_users, 97):
        px, wt = users.user(j)
        p = np.bincount(px, wt, minlength=g.n_pixels).reshape(g.height, g.width)
        loss = sum(e * np.abs(c).sum() for e, c in zip(budgets, level_counts(g, p, start)))
        worst = max(worst, loss)
    assert eps * (1 - 1e-9) < worst <= eps * (1 + 1e-12)


def test_the_split_uses_n_only_where_it_is_public():
    """Under add/remove n is private: two data sets of different sizes get the same split
    (the printed one, or the one of a declared public_n). Under zero-out (n public) the
    data's own n sets it, and budget="paper" is the printed split whatever n."""
    g = Grid(64, 64)
    rng = np.random.default_rng(1)

    def users(n):
        return UserDistributions.from_points(g, np.arange(n), rng.random(n), rng.random(n))

    small, large = users(100), users(9000)
    start, top = measured_levels(g, 20)
    paper = list(level_budgets(1.0, start, top))

    def split(u, **kw):
        return central_heatmap(u, 1.0, rng=0, **kw).parameters["level_epsilons"]

    assert split(small, neighbour="add_remove") == split(large, neighbour="add_remove") == paper
    declared = split(small, neighbour="add_remove", public_n=5000)
    assert declared == split(large, neighbour="add_remove", public_n=5000) != paper
    assert split(small) == paper  # zero-out, d = 0.024: the printed split is kept
    assert split(large)[-1] > 0.9 and split(large, budget="paper") == paper
    with pytest.raises(ValueError, match="budget"):
        central_heatmap(small, 1.0, budget="leafy")
    with pytest.raises((TypeError, ValueError), match="public_n"):
        central_heatmap(small, 1.0, public_n=0)


# ------------------------------------------------------------ the shuffle protocol's split
@pytest.mark.parametrize("budget", ["auto", "paper"])
@pytest.mark.parametrize("eps", [0.3, 1.0, 3.3, 10.0])
@pytest.mark.parametrize("n", [2, 50, 1000, 10_000])
@pytest.mark.parametrize("grid", ["8x8", "12x9", "64x64", "320x240"])
def test_shuffle_level_budgets_sum_to_at_most_eps_exactly(budget, eps, n, grid):
    """The shuffle protocol's eps_i (summation_parameters) follow the central rule of the
    same name with the grid's pixels and the public n, and their exact rational sum is at
    most eps: the float split alone exceeds eps by a few ulps in about a third of such
    settings (both rules), so the largest budget is lowered by ulps until it does not."""
    from shuffledp.accounting.summation import summation_parameters

    g = Grid.parse(grid)
    try:
        p = summation_parameters(n=n, epsilon=eps, delta=1e-5, B=16, grid=g, budget=budget)
    except ValueError as exc:  # a setting no protocol supports (the modulus): not the split
        assert "budget" not in str(exc)
        return
    start, top = measured_levels(g, 20)
    want = (auto_level_budgets(eps, start, top, g.n_pixels, n) if budget == "auto"
            else level_budgets(eps, start, top))
    np.testing.assert_allclose(p.level_epsilons, want, rtol=1e-15, atol=0)
    assert sum(Fraction(e) for e in p.level_epsilons) <= Fraction(eps)
    assert p.guarantee.epsilon <= eps and min(p.level_epsilons) > 0
    assert p.budget_rule == p.guarantee.parameters["budget_rule"] == budget


def test_shuffle_split_is_the_printed_one_at_the_fig12_setting():
    """Fig. 12 (320x240, n = 50, eps = 5): eps n / N = 0.003, so the default split is the
    printed one bit for bit and the communication figures do not move."""
    from shuffledp.protocol.params import derive_params

    kw = dict(epsilon=5.0, delta=1e-5, B=256)
    auto = derive_params(Grid(320, 240), 50, **kw)
    paper = derive_params(Grid(320, 240), 50, **kw, budget="paper")
    assert auto.level_epsilons == paper.level_epsilons
    assert (auto.q, auto.r, auto.bits_per_user) == (paper.q, paper.r, paper.bits_per_user)
    assert auto.budget_rule == "auto" and paper.budget_rule == "paper"
    assert auto.digest != paper.digest  # the rule is part of what the parties agree on


def test_shuffle_budget_rule_is_checked():
    from shuffledp.accounting.summation import summation_parameters
    from shuffledp.protocol.params import derive_params

    for bad in ("leafy", None, 1):
        with pytest.raises(ValueError, match=f"budget must be one of .*got budget={bad!r}"):
            summation_parameters(n=10, epsilon=1.0, delta=1e-5, B=4, grid="8x8", budget=bad)
        with pytest.raises(ValueError, match="budget"):
            derive_params(Grid(8, 8), 10, epsilon=1.0, delta=1e-5, B=4, budget=bad)
