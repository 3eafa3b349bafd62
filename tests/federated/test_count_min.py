"""Count-Min sketch encoding of quadtree levels (Bagdasaryan et al. Table 1's CM-sketch row):
the layout, its estimates, the sensitivity on worst-case neighbours and the exact privacy
loss of the distributed discrete Laplace calibrated to it."""

import math

import mpmath
import numpy as np
import pytest

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.federated.count_min import PRIME, CountMinSketch, sketch_sensitivity
from shuffledp.encoders.federated import noise_parameters
from shuffledp.protocol.federated_baselines import count_min_levels


def test_layout_is_public_validated_and_reports_have_depth_ones():
    s = CountMinSketch.from_seed(50, 7, seed=3)
    assert s == CountMinSketch.from_seed(50, 7, seed=3)  # public: the seed fixes it
    assert s.size == 350 and len(s.a) == 7 and all(1 <= a < PRIME for a in s.a)
    keys = np.arange(256)
    pos = s.positions(keys)
    assert pos.shape == (256, 7)
    assert ((pos // 50) == np.arange(7)).all()  # row j in its own block
    for k in (0, 17, 255):
        x = s.encode(k)
        assert x.sum() == 7 and set(np.flatnonzero(x)) == set(pos[k])
    with pytest.raises(ValueError, match="width"):
        CountMinSketch.from_seed(1, 3)
    with pytest.raises(ValueError, match="depth=2 coefficients"):
        CountMinSketch(10, 2, (1,), (0,))
    with pytest.raises(ValueError, match="1 <= a"):
        CountMinSketch(10, 1, (0,), (0,))
    with pytest.raises(ValueError, match="keys must be in"):
        s.positions(np.array([-1]))
    with pytest.raises(ValueError, match="method"):
        s.estimate(np.zeros(350), keys, "max")
    with pytest.raises(ValueError, match="350 entries"):
        s.estimate(np.zeros(10), keys)


def test_estimates_on_an_exact_sum():
    """Without noise the sketch of the sum is the sum of the sketches, the min never
    underestimates, and the debiased mean is unbiased over the draw of the hash functions:
    the mean over 400 public seeds of key 7's estimate is within 5 standard errors of its
    count (false failure < 1e-6)."""
    g = np.random.default_rng(0)
    s = CountMinSketch.from_seed(64, 5, seed=1)
    keys = g.integers(0, 1000, 3000)
    total = np.bincount(s.positions(keys).ravel(), minlength=s.size)
    assert (total == sum(s.encode(k) for k in keys[:200]) + np.bincount(
        s.positions(keys[200:]).ravel(), minlength=s.size)).all()
    truth = np.bincount(keys, minlength=1000)
    est = s.estimate(total, np.arange(1000), "min")
    assert (est >= truth).all()
    draws = []
    for seed in range(400):
        sk = CountMinSketch.from_seed(64, 5, seed=seed)
        tot = np.bincount(sk.positions(keys).ravel(), minlength=sk.size)
        draws.append(sk.estimate(tot, np.array([7]), "mean", total=keys.size)[0])
    se = np.std(draws) / np.sqrt(len(draws))
    assert abs(np.mean(draws) - truth[7]) < 5 * se
    assert (s.estimate(total, np.arange(1000), "median") >= 0).all()


@pytest.mark.parametrize("depth", [1, 4, 20])
def test_sensitivity_on_worst_case_neighbours_matches_the_noise(depth):
    """Enumerate every key of a level-3 quadtree (64 cells) and every pair: the l1 distance
    of a report to the empty one is depth (add/remove, zero-out) and the largest distance of
    two reports is 2 depth (replace-one) -- exactly the Delta the round's noise uses."""
    s = CountMinSketch.from_seed(2000, depth, seed=0)
    keys = np.arange(64)
    for nb in (Neighbour.ADD_REMOVE, Neighbour.ZERO_OUT, Neighbour.REPLACE_ONE):
        sens = sketch_sensitivity(s, keys, nb)
        brute = (max(int(s.encode(k).sum()) for k in keys) if nb is not Neighbour.REPLACE_ONE
                 else max(int(np.abs(s.encode(i) - s.encode(j)).sum())
                          for i in keys for j in keys if i < j))
        assert sens == brute == noise_parameters(1.0, nb, depth)[0]
    # a sketch too narrow for the domain: every pair collides somewhere, replace < 2 depth
    tiny = CountMinSketch.from_seed(2, 1, seed=0)
    assert sketch_sensitivity(tiny, np.arange(5), "replace") <= 2


def test_exact_privacy_loss_of_the_calibrated_noise():
    """The worst pair under replace-one differs by 2 depth unit entries; with one discrete
    Laplace DL(a), a = e^{-eps / (2 depth)}, per entry, the privacy loss at output y is the
    sum over entries of log(pmf(y - s) / pmf(y - s')). Computed exactly (40 digits) over a
    window of outputs around the reports: its maximum is eps, attained."""
    eps, depth = 1.0, 3
    s = CountMinSketch.from_seed(16, depth, seed=2)
    _, a = noise_parameters(eps, "replace", depth)
    x, y = s.encode(5), s.encode(9)
    assert int(np.abs(x - y).sum()) == 2 * depth
    diff = np.flatnonzero(x != y)
    with mpmath.workdps(40):
        A = mpmath.mpf(a)

        def log_pmf(k):
            return mpmath.log((1 - A) / (1 + A)) + abs(k) * mpmath.log(A)

        # entries are independent: the worst loss is the sum of each entry's worst output
        total = mpmath.fsum(max(log_pmf(out - int(x[i])) - log_pmf(out - int(y[i]))
                                for out in range(-4, 6)) for i in diff)
        assert abs(total - eps) < 1e-12  # a is a double: log(a) to 1e-16 relative


def test_count_min_levels_round_trip_and_guarantee():
    g = np.random.default_rng(4)
    rows = np.clip(np.round(g.normal(9, 2, 3000)), 0, 15).astype(np.int64)
    cols = np.clip(np.round(g.normal(5, 2, 3000)), 0, 15).astype(np.int64)
    # eps 40 on one level, depth 1: a = e^{-40}, P(any of the 2,000 entries noisy) < 2e-14
    rel = count_min_levels(rows, cols, 4, 40.0, sketch_depth=1, levels=[4], shard_size=5000,
                           aggregation="plain", neighbour="zero_out", rng=1)
    assert rel.communication == 2000 and sorted(rel.counts) == [4]
    truth = np.bincount(rows * 16 + cols, minlength=256)
    assert (rel.counts[4] >= truth).all()
    sk = CountMinSketch.from_seed(2000, 1, rel.guarantee.parameters["hash_seed"])
    exact = np.bincount(sk.positions(rows * 16 + cols).ravel(), minlength=2000)
    assert (rel.counts[4] == sk.estimate(exact, np.arange(256))).all()
    rel = count_min_levels(rows, cols, 4, 4.0, shard_size=5000, aggregation="simulate",
                           neighbour="zero_out", rng=1)
    assert rel.communication == 4 * 2000 * 20 and sorted(rel.counts) == [1, 2, 3, 4]
    gu = rel.guarantee
    assert gu.epsilon == pytest.approx(4.0) and gu.neighbour is Neighbour.ZERO_OUT
    assert len(gu.event.steps) == 4
    # each step's noise is calibrated to Delta = 20, the sketch's depth (its sensitivity)
    assert [lv.sensitivity for st in gu.event.steps for lv in st.levels] == [20] * 4
    rel = count_min_levels(rows, cols, 4, 1.0, width=100, sketch_depth=5,
                           shard_size=5000, aggregation="simulate", neighbour="replace",
                           rng=2, method="median")
    assert rel.epsilons == {k: 0.25 for k in (1, 2, 3, 4)}
    assert math.isclose(rel.guarantee.epsilon, 1.0)
    assert rel.guarantee.event.steps[0].certified()[0] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="method"):
        count_min_levels(rows, cols, 4, 1.0, method="max", neighbour="zero_out")
    with pytest.raises(ValueError, match="levels"):
        count_min_levels(rows, cols, 4, 1.0, levels=[7], neighbour="zero_out")


def test_default_layout_seed_is_fresh_not_a_fixed_constant():
    """Without a seed the hash layout comes from the secure source: two default sketches
    differ (equal with probability ~ PRIME^-40), and an explicit seed still reproduces one."""
    assert CountMinSketch.from_seed(2000, 20) != CountMinSketch.from_seed(2000, 20)
    assert CountMinSketch.from_seed(50, 7, 5) == CountMinSketch.from_seed(50, 7, seed=5)
