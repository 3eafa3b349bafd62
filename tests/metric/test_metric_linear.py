"""PrivEMDLinear: exact sensitivity by enumeration, noise calibration, the city example.

Statistical checks compare with the EXACT discrete Laplace variance of the release; the
false-failure rate of each is stated at the assertion (fixed seeds: deterministic).
"""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.metric.linear import (
    default_resolution,
    lipschitz_constant,
    priv_emd_linear,
    query_value,
)
from shuffledp.encoders.metric.spaces import emd_datasets, grid_space, sphere_space
from shuffledp.encoders.noise.laplace import dl_rational
from shuffledp.randomness import SEEDED_NOTE, SecureRandom

MILES = 3958.8


def _multisets(k, m):
    return [np.array(c) for c in itertools.combinations_with_replacement(range(k), m)]


@pytest.mark.parametrize("m", [1, 2, 3])
def test_sensitivity_bound_exact_by_enumeration(m):
    """||S(K) - S(K')||_1 s/t <= alpha d_EM(K, K') on every pair of size-m datasets of a
    5-point domain, for the integer table and the (s, t) the release uses; tight at the
    Lipschitz pair (Thm 4.1 is attained by moving one item)."""
    space = grid_space(1, 5, "l1")  # points 0..4 on a line, d = |i - j| / 4
    f = np.array([[0.0, 1.0], [0.3, 0.2], [0.1, -0.4], [0.9, 0.0], [0.5, 0.5]])
    R, alpha = 1 << 10, 0.7
    F = np.round(f * R).astype(np.int64)
    L_F, _ = lipschitz_constant(space, F)
    sens = m * L_F
    s, t = dl_rational(alpha, sens)
    worst = 0.0
    for K in _multisets(5, m):
        for K2 in _multisets(5, m):
            dS = int(np.abs(F[K].sum(axis=0) - F[K2].sum(axis=0)).sum())
            d = emd_datasets(space, K, K2)
            if dS == 0:
                continue
            assert d > 0
            assert float(Fraction(s, t) * dS) <= alpha * d * (1 + 1e-12)
            worst = max(worst, dS / (sens * d))
    assert worst == pytest.approx(1.0, rel=1e-9)


def test_lipschitz_constant_of_distance_to_a_point_is_one():
    space = grid_space(4, 4)
    for c in (0, 5, 15):
        ell, _ = lipschitz_constant(space, space.distances[:, c])
        assert ell == pytest.approx(1.0, rel=1e-12) and ell >= 1.0


def test_lipschitz_constant_norm_given_as_a_string_is_that_norm():
    # norm="1" passed the check but used to fall through to the l2 norm
    space = grid_space(2, 2)
    table = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    for norm in (1, 2):
        assert lipschitz_constant(space, table, str(norm)) == lipschitz_constant(space, table, norm)
    assert lipschitz_constant(space, table, "1")[0] > lipschitz_constant(space, table, 2)[0]


def _cities(seed=0, k=40):
    g = np.random.default_rng(seed)
    lat = g.uniform(25, 49, k)
    lon = g.uniform(-124, -67, k)
    return sphere_space(lat, lon, radius=MILES)


def test_average_distance_to_city_local():
    """The paper's concrete example (Sec. 4.1): f(x) = d_X(x, c) is 1-Lipschitz."""
    space = _cities()
    f = space.distances[:, 0]
    n, m, alpha = 5000, 20, 25.0
    users = np.random.default_rng(1).integers(0, space.k, size=(n, m))
    rel = priv_emd_linear(users, space, f, alpha, "local", rng=7)
    assert rel.values.shape == (n, 1)
    assert rel.lipschitz == pytest.approx(1.0, rel=1e-12)
    assert rel.noise_scale == pytest.approx(1 / alpha, rel=2e-3)  # l / alpha = 0.04
    assert rel.quantisation_error <= 1 / (2 * rel.resolution) <= rel.noise_scale / 128
    g = rel.guarantee
    assert (g.notion, g.model, g.epsilon, g.delta) == ("metric_emd", "local", alpha, 0.0)
    assert g.neighbour is Neighbour.BOUNDED_EMD and SEEDED_NOTE in g.notes
    # exact per-user noise: its empirical variance over n users matches the DL variance.
    # Laplace kurtosis 6: sd of the variance ratio ~ sqrt(5/n) = 0.032; +-0.16 is 5 sd
    # (false failure < 1e-6 by the CLT).
    per_user = np.round(f * rel.resolution)[users].sum(axis=1) / (m * rel.resolution)
    noise = rel.values[:, 0] - per_user
    assert np.var(noise) / rel.noise_sd**2 == pytest.approx(1.0, abs=0.16)
    # the mean: within 5 sd of the truth (CLT over n users; false failure < 1e-6)
    truth = query_value(users, space, f)[0]
    assert abs(rel.estimate[0] - truth) <= 5 * rel.noise_sd / math.sqrt(n) + 1 / rel.resolution
    # the paper's figure: scale l / alpha = 0.04 per user; over n = 1e5 users the mean's
    # noise is 0.04 / sqrt(n) = 1.26e-4 of half the Earth's circumference, 1.6 miles
    assert rel.noise_scale / math.sqrt(1e5) * space.scale == pytest.approx(1.6, abs=0.05)


def test_average_distance_to_city_central():
    space = _cities(seed=2)
    f = space.distances[:, 3]
    n, m, alpha = 4000, 10, 2.0
    users = np.random.default_rng(3).integers(0, space.k, size=(n, m))
    rel = priv_emd_linear(users, space, f, alpha, "central", rng=SecureRandom.for_testing(4))
    assert rel.values.shape == (1, 1) and rel.notes == ()
    assert rel.noise_scale == pytest.approx(1 / (n * alpha), rel=2e-3)
    truth = query_value(users, space, f)[0]
    # Laplace tail: P(|Z| > 14 b) = e^-14 < 1e-6 (false-failure rate)
    assert abs(rel.estimate[0] - truth) <= 14 * rel.noise_scale + rel.quantisation_error
    assert rel.guarantee.model == "central"


def test_multidimensional_and_declared_lipschitz():
    space = grid_space(3, 3)
    f = np.stack([space.distances[:, 0], 0.5 * space.distances[:, 8]], axis=1)
    users = np.random.default_rng(5).integers(0, 9, size=(50, 4))
    rel = priv_emd_linear(users, space, f, 1.0, "local", lipschitz=2.0, rng=0)
    assert rel.values.shape == (50, 2) and rel.lipschitz == 2.0
    assert rel.noise_scale == pytest.approx(2.0, rel=2e-3)
    with pytest.raises(ValueError, match="must be lipschitz-Lipschitz"):
        priv_emd_linear(users, space, f, 1.0, "local", lipschitz=0.5, rng=0)


def test_constant_query_is_exact():
    space = grid_space(2, 2)
    users = np.zeros((3, 2), dtype=int)
    rel = priv_emd_linear(users, space, np.full(4, 0.25), 1.0, "central", rng=0)
    assert rel.estimate[0] == 0.25 and rel.noise_scale == 0.0


def test_default_resolution():
    assert default_resolution(1.0) == 64
    assert 1 / (2 * default_resolution(1e-6)) <= 1e-6 / 128


@pytest.mark.parametrize("kwargs,err,match", [
    ({"alpha": 0.0}, ValueError, "alpha must be"),
    ({"model": "shuffle"}, ValueError, "model must be"),
    ({"f": np.ones(3)}, ValueError, r"f must have shape \(4,\)"),
    ({"f": [np.nan, 0, 0, 0]}, ValueError, r"f must be finite; f\[0\]"),
    ({"f": "abc"}, TypeError, "f must be a numeric table"),
    ({"resolution": 3}, ValueError, "power of two"),
    ({"resolution": 1 << 61}, ValueError, "overflow"),
    ({"users": [[0, 4]]}, ValueError, r"users\[0, 1\]=4 is outside"),
    ({"users": [[0, 1], [2]]}, ValueError, "same number of items"),
    ({"space": np.eye(4)}, TypeError, "space must be a MetricSpace"),
])
def test_bad_input(kwargs, err, match):
    args = {"users": [[0, 1], [2, 3]], "space": grid_space(2, 2), "f": [0, 0.5, 0.5, 1.0],
            "alpha": 1.0, "model": "local", "rng": 0}
    args.update(kwargs)
    with pytest.raises(err, match=match):
        priv_emd_linear(args.pop("users"), args.pop("space"), args.pop("f"),
                        args.pop("alpha"), **args)


def test_user_level_baseline_is_calibrated_to_the_range_of_f():
    """Under the discrete metric the Lipschitz constant is the l1 range of f, so the
    baseline's scale is range / eps (local) and range / (n eps) (central), under replace-one."""
    from shuffledp.analyzers.metric.linear import user_level_linear

    space = grid_space(5, 5)
    f = space.distances[:, 12]  # distance to the centre: range max(f) - min(f) = 0.5
    users = np.random.default_rng(8).integers(0, 25, size=(300, 4))
    rel = user_level_linear(users, 25, f, 2.0, "local", rng=1)
    assert rel.noise_scale == pytest.approx((f.max() - f.min()) / 2.0, rel=2e-3)
    assert rel.guarantee.neighbour is Neighbour.REPLACE_ONE and rel.guarantee.notion == "pure"
    central = user_level_linear(users, 25, f, 2.0, "central", rng=1)
    assert central.noise_scale == pytest.approx(rel.noise_scale / 300, rel=2e-3)


def test_lemma_6_7_central_laplace_needs_scale_two_over_n_eps():
    """Erratum: Imola et al. Lemma 6.7 adds Lap(1/(n eps)) to the pooled normalised histogram
    and claims eps-DP against replacing one user's m items; that move shifts two cells by
    1/n each (l1 = 2/n), so the privacy loss of Lap(1/(n eps)) is exactly 2 eps, attained.
    The library's baseline (the pooled histogram as a linear query under the discrete metric)
    uses scale 2/(n eps)."""
    from shuffledp.analyzers.metric.linear import user_level_linear

    n, m, k, eps = 50, 4, 6, 0.5
    before = np.zeros((n, m), dtype=int)
    after = before.copy()
    after[0] = 3  # one user's whole dataset moves from item 0 to item 3
    shift = np.abs(np.bincount(before.ravel(), minlength=k)
                   - np.bincount(after.ravel(), minlength=k)).sum() / (n * m)
    assert shift == pytest.approx(2 / n)
    # exact privacy loss of Laplace noise of scale b on that pair: sup_y = shift / b
    assert shift / (1 / (n * eps)) == pytest.approx(2 * eps)  # the text's scale: 2 eps
    assert shift / (2 / (n * eps)) == pytest.approx(eps)  # the corrected scale: eps
    rel = user_level_linear(before, k, np.eye(k), eps, "central", rng=0)
    assert rel.noise_scale == pytest.approx(2 / (n * eps), rel=2e-3)
    assert rel.noise_scale >= 2 / (n * eps)  # conservative rounding, never below
