"""Dense EMD aggregation (Ghazi et al., AAAI 2023, App. D.1, Thm D.1): exact privacy at the
sensitivity boundary, the EMD projection, the level l*, the release record, the error, the
auto rule and ``shuffledp heatmap --algorithm``."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.heatmap.dense import (
    DENSE_CROSSOVER,
    _level_sums,
    choose_algorithm,
    dense_error_bound,
    dense_heatmap,
    dense_level,
    emd_projection,
    sparse_error_bound,
)
from shuffledp.analyzers.heatmap.metrics import emd
from shuffledp.cli import main
from shuffledp.encoders.metric.transport import GridL1, transport_cost
from shuffledp.encoders.noise.laplace import discrete_laplace_pmf, dl_rational
from shuffledp.grid import Grid
from shuffledp.users import UserDistributions


def _users(grid: Grid, pixels: list[int]) -> UserDistributions:
    return UserDistributions.from_pixels(grid, np.arange(len(pixels)), np.asarray(pixels))


def _sup_log_ratio(s: np.ndarray, s2: np.ndarray, rate: float, sens: int) -> float:
    """sup over outputs y of log P(y | s) / P(y | s2) for i.i.d. DL(exp(-rate)) noise, from
    the pmf itself: coordinates are independent, so the sup is the sum over the differing
    coordinates of each one's sup over a window that holds the maximiser."""
    a = math.exp(-rate)
    total = 0.0
    for i in np.flatnonzero(s != s2):
        y = np.arange(min(s[i], s2[i]) - 3 * sens, max(s[i], s2[i]) + 3 * sens + 1)
        lr = np.log(discrete_laplace_pmf(y - s[i], a)) - np.log(discrete_laplace_pmf(y - s2[i],
                                                                                     a))
        total += float(lr.max())
    return total


@pytest.mark.parametrize("neighbour", ["add_remove", "zero_out", "replace"])
def test_exact_privacy_holds_at_eps_and_fails_just_below(neighbour):
    """The worst neighbouring pair of each relation attains the level sum's sensitivity; the
    released noise (the event's DL rate) makes the pmf ratio at that boundary exactly the
    effective epsilon: <= eps (exact rationals) and > eps (1 - 1e-6), so the release is
    eps-DP and not (1 - 1e-6) eps-DP."""
    grid, eps, R, level = Grid(16, 16), 0.7, 2**8, 2
    base = [3, 17, 40, 200, 255, 128, 77]
    if neighbour == "replace":  # the first user moves between opposite corners
        d, d2 = _users(grid, [0] + base), _users(grid, [255] + base)
    else:  # add/remove; zero-out has the same level sums (an empty contribution)
        d, d2 = _users(grid, [0] + base), _users(grid, base)
    rel = dense_heatmap(d, eps, level=level, neighbour=neighbour, resolution=R, rng=0)
    (ev,) = rel.guarantee.event.levels
    sens = Neighbour.parse(neighbour).level_sensitivity(R)
    assert ev.sensitivity == sens
    s, s2 = _level_sums(d, level, R), _level_sums(d2, level, R)
    assert int(np.abs(s - s2).sum()) == sens  # the boundary is attained
    st = dl_rational(eps, sens)
    assert Fraction(sens * st[0], st[1]) <= Fraction(eps)  # exact: never above eps
    assert ev.parameter == pytest.approx(st[0] / st[1], rel=1e-15)
    sup = _sup_log_ratio(s, s2, ev.parameter, sens)
    assert sup == pytest.approx(sens * ev.parameter, rel=1e-9)
    assert sup <= eps * (1 + 1e-12)
    assert sup > eps * (1 - 1e-6)  # tight: not eps'-DP for eps' just below eps
    assert rel.guarantee.epsilon == eps and rel.guarantee.neighbour is Neighbour.parse(neighbour)


def test_text_calibration_lap_one_over_eps_is_two_eps_under_replace_one():
    """App. D.1 adds Lap(1/eps), the add/remove calibration: under replace-one the same
    noise has privacy loss 2 eps at the boundary (why the code uses sensitivity 2 there)."""
    grid, eps, R, level = Grid(8, 8), 0.5, 2**6, 1
    d, d2 = _users(grid, [0, 9, 33]), _users(grid, [63, 9, 33])
    s, s2 = _level_sums(d, level, R), _level_sums(d2, level, R)
    st = dl_rational(eps, R)  # the text's scale: sensitivity 1 (in units of R)
    sup = _sup_log_ratio(s, s2, st[0] / st[1], 2 * R)
    assert sup == pytest.approx(2 * eps, rel=1e-6)


def test_released_sum_is_the_exact_integer_sum_plus_dl_noise():
    """Level l* holds every user's rounded vector (largest remainder: sums to R each)."""
    grid = Grid(32, 32)
    rng = np.random.default_rng(3)
    users = _users(grid, list(rng.integers(0, 1024, size=50)))
    s = _level_sums(users, 3, 2**10)
    assert s.sum() == 50 * 2**10 and s.dtype == np.int64
    expect = np.zeros(64, dtype=np.int64)
    for p in users.pixels:
        r, c = divmod(int(p), 32)
        expect[(r >> 2) * 8 + (c >> 2)] += 2**10
    np.testing.assert_array_equal(s, expect)


# ----------------------------------------------------------------------------- projection
def test_projection_of_a_nonnegative_vector_is_itself():
    x = np.arange(12.0).reshape(3, 4)
    p = emd_projection(x)
    np.testing.assert_allclose(p.estimate, x)
    assert p.objective == 0.0 and p.created == 0.0


def test_projection_small_cases_by_hand():
    # 1 x 3, [3, -1, 0]: one unit moves one step: s_hat = [2, 0, 0], cost 1
    p = emd_projection(np.array([[3.0, -1.0, 0.0]]))
    np.testing.assert_allclose(p.estimate, [[2.0, 0.0, 0.0]], atol=1e-12)
    assert p.objective == pytest.approx(1.0)
    # [1, -2, 0]: one unit moves (cost 1), one is created at alpha = (1 + 3) = 4
    p = emd_projection(np.array([[1.0, -2.0, 0.0]]))
    assert p.objective == pytest.approx(5.0) and p.created == pytest.approx(1.0)
    np.testing.assert_allclose(p.estimate, 0.0, atol=1e-12)
    # side scales the objective
    q = emd_projection(np.array([[3.0, -1.0, 0.0]]), side=0.25)
    assert q.objective == pytest.approx(0.25)


@pytest.mark.parametrize("seed", range(4))
def test_network_simplex_matches_highs_and_the_emd_norm(seed):
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(1, 9, size=2)
    x = rng.normal(0.3, 2.0, size=(rows, cols))
    a = emd_projection(x, side=0.5)
    b = emd_projection(x, side=0.5, method="highs")
    assert a.objective == pytest.approx(b.objective, rel=1e-7, abs=1e-9)
    assert (a.estimate >= 0).all() and (b.estimate >= 0).all()
    # never worse than clipping (deleting nothing, creating the negative part)
    assert a.objective <= (rows + cols) * 0.5 * np.maximum(-x, 0).sum() + 1e-9
    if a.created == 0.0:  # then s_hat - x is balanced: the objective is its KR norm
        w = a.estimate - x
        kr = transport_cost(np.maximum(w, 0), np.maximum(-w, 0), GridL1(int(rows), int(cols)))
        assert a.objective == pytest.approx(0.5 * kr, rel=1e-7, abs=1e-9)


def test_projection_validation():
    with pytest.raises(ValueError, match="noisy must be a non-empty 2-D"):
        emd_projection(np.ones(3))
    with pytest.raises(ValueError, match="noisy must be finite"):
        emd_projection(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="side must be"):
        emd_projection(np.ones((2, 2)), side=0)
    with pytest.raises(ValueError, match="method must be"):
        emd_projection(np.ones((2, 2)), method="simplex")


# ----------------------------------------------------------------------------- level, record
@pytest.mark.parametrize("load", [0.3, 1, 3.99, 4, 15.9, 16, 1000, 4**7, 4**7 + 1, 1e9])
def test_dense_level_is_floor_log2_sqrt_eps_n_clipped(load):
    grid = Grid(256, 256)
    expect = min(max(math.floor(0.5 * math.log2(load)), 0), grid.depth)
    assert dense_level(grid, 1, load) == expect
    assert dense_level(grid, 4, load / 4) == expect


def test_release_record_and_refusals():
    grid = Grid(64, 48)
    users = _users(grid, list(np.random.default_rng(0).integers(0, grid.n_pixels, 300)))
    rel = dense_heatmap(users, 1.0, neighbour="replace", rng=1)
    assert rel.parameters["level"] == dense_level(grid, 300, 1.0) == 4
    assert rel.parameters["level_shape"] == list(grid.level_shape(4))
    assert rel.estimate.shape == (48, 64) and rel.estimate.sum() == pytest.approx(1.0)
    assert (rel.raw >= 0).all()
    g = rel.guarantee
    assert (g.notion, g.model, g.delta, g.neighbour) == ("pure", "central", 0.0,
                                                         Neighbour.REPLACE_ONE)
    assert "App. D.1" in g.theorem and g.notes  # seeded: says it is not a private release
    assert rel.to_report()["release"] == rel.REPRODUCIBLE
    with pytest.raises(ValueError, match="n_public=None under add/remove"):
        dense_heatmap(users, 1.0, rng=1)
    assert dense_heatmap(users, 1.0, n_public=300, rng=1).parameters["level"] == 4
    with pytest.raises(ValueError, match="level must be in 0..6"):
        dense_heatmap(users, 1.0, level=7, neighbour="replace")
    with pytest.raises(ValueError, match="epsilon must be"):
        dense_heatmap(users, -1.0, neighbour="replace")
    with pytest.raises(ValueError, match="resolution must be a power of two"):
        dense_heatmap(users, 1.0, neighbour="replace", resolution=3)
    with pytest.raises(ValueError, match="neighbour must be one of"):
        dense_heatmap(users, 1.0, neighbour="swap")
    with pytest.raises(TypeError, match="users must be a UserDistributions"):
        dense_heatmap(np.ones((4, 4)), 1.0)


def test_secure_default_is_a_private_release():
    users = _users(Grid(16, 16), [1, 2, 3, 100])
    rel = dense_heatmap(users, 1.0, neighbour="zero_out")
    assert rel.parameters["randomness"] == "secure" and not rel.guarantee.notes


def test_error_is_within_the_explicit_bound_and_falls_with_eps_n():
    """Uniform (dense) data on 64x64. The bound is on the expectation and ~10x loose on this
    data; one fixed-seed run per setting (a failure would need an error ~10x its mean)."""
    grid = Grid(64, 64)
    rng = np.random.default_rng(5)
    errs = []
    for n in (500, 8000):
        users = _users(grid, list(rng.integers(0, grid.n_pixels, size=n)))
        rel = dense_heatmap(users, 1.0, neighbour="replace", rng=n)
        e = emd(users.aggregate(), rel.estimate, grid)
        assert e <= dense_error_bound(grid, n, 1.0, "replace")
        errs.append(e)
    assert errs[1] < errs[0] / 2  # eps n x16: error O~(1/sqrt(eps n)) falls ~4x


# ----------------------------------------------------------------------------- auto
def test_auto_rule_crosses_over_in_k_from_public_numbers_only():
    """choose_algorithm takes no data: its choice is the inequality of the two public bounds,
    and as k grows it switches once, from sparse to dense."""
    grid, n, eps = Grid(128, 128), 1000, 1.0
    db = dense_error_bound(grid, n, eps, "replace")
    seen = []
    for k in [1, 2, 5, 10, 20, 25, 30, 40, 60, 100, 1000, 16384]:
        c = choose_algorithm(grid, n, eps, k=k, w=20, neighbour="replace")
        sb = DENSE_CROSSOVER * sparse_error_bound(k, n, eps, "replace", w=20)
        assert c.algorithm == ("dense" if sb > db else "sparse")
        assert c.dense_bound == pytest.approx(db) and c.sparse_bound == pytest.approx(sb)
        seen.append(c.algorithm)
    assert seen[0] == "sparse" and seen[-1] == "dense"
    assert seen == sorted(seen, key=("sparse", "dense").index)  # one crossover
    # w proportional to k (Thm 3.1): crossover where kappa sqrt(k) b / n meets the dense bound
    k_star = (db * n / (2 / eps) / DENSE_CROSSOVER) ** 2
    for k, algo in ((math.floor(k_star * 0.99), "sparse"), (math.ceil(k_star * 1.01), "dense")):
        assert choose_algorithm(grid, n, eps, k=max(k, 1), w=None,
                                neighbour="replace").algorithm == algo
    assert sparse_error_bound(4, 10, 1.0) == pytest.approx(0.2)
    assert sparse_error_bound(80, 10, 1.0, w=20) == pytest.approx(
        math.sqrt(20) / 10 + 0.75 / (2 * math.sqrt(20)))
    c = choose_algorithm(grid, n, eps)
    assert c.k == grid.n_pixels and "no sparsity prior" in c.reason and c.w == 20


# ----------------------------------------------------------------------------- CLI
def test_cli_algorithm_dense_auto_and_refusals(tmp_path):
    run = CliRunner().invoke
    out = tmp_path / "d"
    r = run(main, ["heatmap", "--algorithm", "dense", "--neighbour", "replace", "--grid", "32",
                   "--n", "300", "--seed", "1", "--metrics", "none", "--quiet",
                   "--out", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["algorithm"] == {"requested": "dense", "ran": "dense"}
    assert rep["parameters"]["mechanism"] == "DenseEMDAgg"
    assert rep["guarantee"]["neighbour"] == str(Neighbour.REPLACE_ONE)
    out2 = tmp_path / "a"
    r = run(main, ["heatmap", "--algorithm", "auto", "--public-n", "300", "--sparsity", "1",
                   "--grid", "32", "--n", "300", "--seed", "1", "--metrics", "none",
                   "--quiet", "--out", str(out2)])
    assert r.exit_code == 0, r.output
    rep = json.loads((out2 / "report.json").read_text())
    assert rep["algorithm"]["ran"] == "sparse" and rep["algorithm"]["n_public"] == 300
    r = run(main, ["heatmap", "--algorithm", "dense", "--neighbour", "add_remove", "--grid",
                   "32", "--out", str(tmp_path / "refused")])
    assert r.exit_code == 2 and "needs --public-n" in r.output
    r = run(main, ["heatmap", "--algorithm", "dense", "--model", "shuffle", "--grid", "32",
                   "--out", str(tmp_path)])
    assert r.exit_code == 2 and "not supported in the shuffle model" in r.output
    r = run(main, ["heatmap", "--sparsity", "5", "--grid", "32", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--algorithm dense/auto" in r.output
