"""Federated histograms (Bagdasaryan et al. 2022, Alg. 1): distributed discrete Laplace from
Polya differences, real secure aggregation per shard, dropout over-provisioning."""

import math

import numpy as np
import pytest

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.analyzers.federated.histogram import FederatedRefused
from shuffledp.encoders.federated import client_update, noise_parameters
from shuffledp.encoders.noise.laplace import discrete_laplace_pmf
from shuffledp.encoders.noise.polya import polya_difference_sum_pmf
from shuffledp.protocol.federated import federated_histogram


@pytest.mark.parametrize("n_min,eps,nb", [(5, 1.0, "add_remove"), (20, 0.5, "replace")])
def test_n_min_shares_sum_to_discrete_laplace_exactly(n_min, eps, nb):
    """Thm 4.2: the sum of n_min clients' X - Y, X, Y ~ Polya(1/n_min, e^{-eps/Delta}), is
    DL(e^{-eps/Delta}); compared pointwise by explicit convolution."""
    delta, a = noise_parameters(eps, nb)
    assert delta == (2 if nb == "replace" else 1)
    k, pmf = polya_difference_sum_pmf(n_min, 1.0 / n_min, a, 300)  # a^300 < 1e-30
    mid = np.abs(k) <= 60
    np.testing.assert_allclose(pmf[mid], discrete_laplace_pmf(k[mid], a), rtol=1e-9)


def test_client_update_is_one_hot_plus_noise_mod_m():
    v = client_update(3, 8, 1.0, 4, 1 << 16, rng=1)
    assert v.shape == (8,) and (v >= 0).all() and (v < 1 << 16).all()
    w = client_update(3, 8, 1.0, 4, 1 << 16, rng=1)
    assert np.array_equal(v, w)  # research seed: reproducible


def test_secagg_and_plain_give_the_same_release_with_dropouts():
    g = np.random.default_rng(0)
    cells = g.integers(0, 16, 60)
    dropped = np.zeros(60, bool)
    dropped[[3, 31, 45]] = True
    kw = dict(shard_size=20, dropout=0.1, dropped=dropped, neighbour="zero_out", rng=5)
    a = federated_histogram(cells, 16, 1.0, **kw)
    b = federated_histogram(cells, 16, 1.0, aggregation="plain", **kw)
    assert np.array_equal(a.counts, b.counts)
    assert [s["survivors"] for s in a.shards] == [19, 19, 19]
    g0 = a.guarantee
    assert (g0.notion, g0.model, g0.epsilon, g0.neighbour) == (
        "approximate", "distributed", 1.0, Neighbour.ZERO_OUT)


def test_the_polya_tables_total_variation_is_charged_to_delta():
    """Not pure eps: 60 clients x 16 entries x 2 table draws, each within SAMPLER_TV_MAX of
    the ideal Polya law, give (1 + e) 1920 SAMPLER_TV_MAX (the simulated path: 2 draws per
    entry per shard)."""
    from shuffledp.encoders.noise.polya import SAMPLER_TV_MAX

    cells = np.arange(60) % 16
    for agg, draws in (("plain", 2 * 60 * 16), ("simulate", 2 * 3 * 16)):
        g = federated_histogram(cells, 16, 1.0, shard_size=20, aggregation=agg,
                                neighbour="zero_out", rng=1).guarantee
        assert g.notion == "approximate"
        assert g.delta == (1 + math.e) * draws * SAMPLER_TV_MAX
        assert 0 < g.delta < 1e-26


def test_too_many_dropouts_are_refused():
    cells = np.zeros(20, dtype=int)
    dropped = np.zeros(20, bool)
    dropped[:3] = True  # 17 survivors < n_min = ceil(0.9 * 20) = 18
    with pytest.raises(FederatedRefused, match="17 of 20 .* n_min=18"):
        federated_histogram(cells, 4, 1.0, shard_size=20, dropout=0.1, dropped=dropped,
                            neighbour="zero_out", aggregation="plain", rng=0)


def test_noise_has_the_discrete_laplace_variance():
    """All n_min = 40 clients survive: per-cell noise ~ DL(e^-1); its variance 2a/(1-a)^2
    over 4000 cells (10 histograms x 400 cells) within 5 standard errors (false < 1e-6)."""
    g = np.random.default_rng(1)
    D = 400
    noise = []
    for rep in range(10):
        cells = g.integers(0, D, 40)
        r = federated_histogram(cells, D, 1.0, shard_size=40, aggregation="plain",
                                neighbour="zero_out", rng=rep)
        noise.append(r.counts - np.bincount(cells, minlength=D))
    z = np.concatenate(noise)
    a = math.exp(-1.0)
    var = 2 * a / (1 - a) ** 2
    kurt_se = math.sqrt((12 * a / (1 - a) ** 2 + 2) * var**2 / z.size) * 3  # generous
    assert abs(z.var() - var) < 5 * kurt_se


@pytest.mark.parametrize("kwargs,match", [
    ({"cells": np.array([0, 9])}, r"cells\[1\]=9"),
    ({"epsilon": 0.0}, "epsilon"),
    ({"aggregation": "sum"}, "aggregation"),
    ({"dropped": np.zeros(3, bool)}, "dropped"),
    ({"neighbour": "bounded_emd"}, "neighbour must be add_remove, replace or zero_out"),
    ({"delta": 1e-9}, "delta is the add/remove charge"),
    ({"aggregation": "central", "neighbour": "add_remove", "max_users": 4}, "no shards"),
])
def test_bad_input(kwargs, match):
    args = {"cells": np.array([0, 1]), "n_cells": 4, "epsilon": 1.0, "shard_size": 2,
            "aggregation": "plain", "neighbour": "zero_out", "rng": 0}
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        federated_histogram(args.pop("cells"), args.pop("n_cells"), args.pop("epsilon"), **args)


@pytest.mark.parametrize("rounding", ["systematic", "independent"])
def test_multi_location_rounding_is_unbiased_with_its_l1_bound(rounding):
    """Mean over 20000 seeded draws within 6 standard errors of gamma * normalised weights
    (entries are floor/ceil: per-draw sd <= 1/2; false failure < 1e-6 per entry), every draw
    within the returned l1 bound, and systematic rounding's total exactly gamma."""
    from shuffledp.encoders.federated import encode_locations

    cells, weights = np.array([0, 2, 2, 5]), np.array([0.3, 0.2, 0.1, 0.7])
    g = np.random.default_rng(4)
    draws, bounds = [], set()
    for _ in range(20000):
        x, b = encode_locations(cells, weights, 8, 7, rounding=rounding, rng=g)
        assert x.sum() <= b and (x >= 0).all()
        draws.append(x)
        bounds.add(b)
    draws = np.array(draws)
    want = np.bincount(cells, weights=weights, minlength=8) / weights.sum() * 7
    assert np.all(np.abs(draws.mean(axis=0) - want) <= 6 * 0.5 / np.sqrt(len(draws)))
    assert np.all((draws == np.floor(want)) | (draws == np.ceil(want)))
    if rounding == "systematic":
        assert bounds == {7} and (draws.sum(axis=1) == 7).all()
    else:
        assert bounds == {7 + 8}


def test_federated_locations_end_to_end():
    from shuffledp.protocol.federated import federated_locations

    g = np.random.default_rng(2)
    users = [(g.integers(0, 16, 5), g.random(5) + 0.1) for _ in range(400)]
    est, rel = federated_locations(users, 16, 2.0, gamma=100, shard_size=200,
                                   aggregation="plain", neighbour="zero_out", rng=3)
    truth = sum(np.bincount(c, weights=w, minlength=16) / w.sum() for c, w in users)
    assert rel.guarantee.parameters["l1_bound"] == 100
    # noise per cell: 2 shards of DL(e^{-2/100}), sd ~ 70 / gamma = 0.7; rounding adds
    # < sqrt(400) / 2 / gamma = 0.1; 6 sd bound per cell (false failure < 1e-6)
    assert np.abs(est - truth).max() < 6 * 0.8


def test_simulated_shard_noise_has_the_law_of_the_clients_sum():
    """Polya variables with one a add their shapes: the sum of k clients' X - Y with
    X, Y ~ Polya(1/n_min, a) equals Polya(k/n_min, a) - Polya(k/n_min, a) in law, exactly
    (explicit convolutions, k = 7 survivors of n_min = 5)."""
    from shuffledp.encoders.noise.polya import polya_pmf

    k, n_min, a = 7, 5, float(np.exp(-0.5))
    _, clients = polya_difference_sum_pmf(k, 1.0 / n_min, a, 300)
    one = polya_pmf(np.arange(2101), k / n_min, a)
    direct = np.convolve(one, one[::-1])
    mid = slice(direct.size // 2 - 50, direct.size // 2 + 51)
    cmid = slice(clients.size // 2 - 50, clients.size // 2 + 51)
    np.testing.assert_allclose(clients[cmid], direct[mid], rtol=1e-9)


def test_simulate_path_matches_counts_and_guarantee():
    g = np.random.default_rng(3)
    cells = g.integers(0, 10, 5000)
    r = federated_histogram(cells, 10, 1.0, shard_size=1000, aggregation="simulate",
                            neighbour="zero_out", rng=1)
    truth = np.bincount(cells, minlength=10)
    # noise: 5 shards of DL(e^-1), sd ~ 1.4 each: |error| < 6 sqrt(5) 1.4 = 19 per cell
    assert np.abs(r.counts - truth).max() < 19 and r.guarantee.parameters[
        "aggregation"] == "simulate"


def test_device_update_is_the_secure_path_and_refuses_a_seed():
    from shuffledp.encoders.federated import device_update
    from shuffledp.randomness import SecureRandom

    v = device_update(2, 5, 1.0, 10, 1 << 16)
    assert v.shape == (5,) and v.dtype == np.int64 and ((v >= 0) & (v < 1 << 16)).all()
    assert device_update(0, 3, 1.0, 10, 64, source=SecureRandom()).shape == (3,)
    for seed in (1, np.random.default_rng(1)):
        with pytest.raises(ValueError, match="refuses a seed, got rng="):
            device_update(2, 5, 1.0, 10, 1 << 16, rng=seed)
    with pytest.raises(TypeError, match="source must be a SecureRandom"):
        device_update(2, 5, 1.0, 10, 1 << 16, source=np.random.default_rng(1))
    with pytest.raises(ValueError, match="cell"):
        device_update(5, 5, 1.0, 10, 1 << 16)


def test_dropouts_in_every_secagg_round_through_real_secure_aggregation():
    """One client drops in each round 0-3: the three dropping before their masked input are
    out of the sum, the one dropping during unmasking is in it; SecAgg and the plain sum
    agree; n_min = ceil(0.2 * 20) = 16 <= 17 survivors."""
    cells = np.arange(20) % 4
    rounds = np.full(20, -1)
    rounds[[1, 5, 9, 13]] = [0, 1, 2, 3]
    kw = dict(shard_size=20, dropout=0.2, dropped=rounds, neighbour="zero_out", rng=7)
    a = federated_histogram(cells, 4, 1.0, **kw)
    b = federated_histogram(cells, 4, 1.0, aggregation="plain", **kw)
    assert np.array_equal(a.counts, b.counts)
    assert a.shards[0]["survivors"] == 17 and a.shards[0]["dropped_by_round"] == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="rounds in -1..3, got dropped=4"):
        federated_histogram(cells, 4, 1.0, shard_size=20, dropped=np.full(20, 4),
                            neighbour="zero_out", rng=1)
