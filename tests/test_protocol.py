"""End-to-end shuffle protocol: decoding with headroom, refusals, dropouts, paths, convergence."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from shuffle_helpers import params_for, random_users

from shuffledp import Grid, UserDistributions
from shuffledp.analyzers.federated.histogram import decode_centred
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.modular import (
    ModularAccumulator,
    ReleaseRefused,
    level_counts_from_sums,
)
from shuffledp.encoders.encoder import encode_shares, noisy_vectors
from shuffledp.protocol.params import ProtocolParams, derive_params
from shuffledp.protocol.runner import shuffle_heatmap
from shuffledp.pyramid import flatten, level_counts


def test_cell_with_all_the_mass_decodes_without_wrap_around():
    grid = Grid(8, 8)
    n, B = 12, 64
    p = params_for(grid, n=n, B=B)
    users = UserDistributions.from_pixels(grid, np.arange(n), np.full(n, 27))
    z = noisy_vectors(p, users, noise=False)
    assert z.sum(axis=0).max() == B * n  # every level has one cell holding all the mass
    # the App. F modulus q = B n would wrap that cell to 0
    assert (B * n) % (B * n) == 0
    assert decode_centred(np.mod(z.sum(axis=0), p.q), p.q, p.decode_low).max() == B * n
    for seed in range(5):
        noisy = noisy_vectors(p, users, rng=seed).sum(axis=0)
        acc = ModularAccumulator(p)
        acc.add_shares(encode_shares(p, users, rng=seed))
        np.testing.assert_array_equal(decode_centred(acc.modular_sums(n), p.q, p.decode_low), noisy)
    # negative noise on empty cells decodes as negative, not as q - k
    assert decode_centred(np.array([p.q - 3]), p.q, p.decode_low)[0] == -3


def test_app_f_modulus_without_headroom_is_refused():
    grid = Grid(8, 8)
    p = params_for(grid, n=12, B=64)
    def edited(**changes):  # the accounting record with some numbers changed by hand
        return ProtocolParams(p.grid, p.w, dataclasses.replace(p.summation, **changes),
                              p.round_id)

    with pytest.raises(ValueError, match="headroom"):
        edited(q=64 * 12, decode_low=1)
    with pytest.raises(ValueError, match="headroom"):
        edited(decode_low=0)
    with pytest.raises(ValueError, match="r must"):
        edited(r=1)
    with pytest.raises(ValueError, match="under replace the scaled level vector has sensitivity"):
        edited(level_sensitivities=(64,) * len(p.level_epsilons))
    # a params file with any agreed number edited is refused by the re-derivation
    d = json.loads(p.to_json())
    d["q"] = 64 * 12
    with pytest.raises(ValueError, match="field q=768 differs from the accounting's q="):
        ProtocolParams.from_json(json.dumps(d))


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"n": 1}, "n must be an integer >= 2"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"B": 0}, "B must be"),
        ({"dropout": 1.0}, "dropout"),
        ({"rounding": "ceil"}, "rounding"),
        ({"B": 2**30}, "q must be"),
    ],
)
def test_parameter_refusals(kw, match):
    args = {"n": 10, "epsilon": 1.0, "delta": 1e-5, "B": 16, "dropout": 0.0,
            "rounding": "floor"}
    args.update(kw)
    n = args.pop("n")
    with pytest.raises((ValueError, TypeError), match=match):
        derive_params(Grid(8, 8), n, **args)


def test_params_digest_and_json_round_trip():
    p = params_for(Grid(10, 7), n=5, B=3, dropout=0.2)
    p2 = ProtocolParams.from_json(p.to_json())
    assert p2.digest == p.digest and p2 == p
    assert params_for(Grid(10, 7), n=5, B=4).digest != p.digest
    f = p.figures()
    assert f["bits_per_user"] == p.r * p.m * math.ceil(math.log2(p.m * p.q))
    assert f["messages_per_user"] == p.r * p.m
    assert p.n_min == 4 and p.polya_shape == 0.25


def test_dropouts_within_declared_fraction_release_and_beyond_refuse():
    grid = Grid(8, 8)
    users = random_users(grid, 10)
    rel = shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8, dropout=0.2, rng=0,
                          simulate_dropouts=2)
    assert rel.protocol["n_users"] == 8 and rel.protocol["n_dropped"] == 2
    assert rel.guarantee.model == "shuffle" and rel.guarantee.delta == 1e-5
    with pytest.raises(ReleaseRefused, match="n_min"):
        shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8, dropout=0.2, rng=0,
                        simulate_dropouts=3)
    with pytest.raises(ReleaseRefused, match="n_min"):
        shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8, rng=0, simulate_dropouts=1)


def test_all_paths_give_the_same_release():
    grid = Grid(4, 4)
    users = random_users(grid, 3, seed=4)
    rels = [
        shuffle_heatmap(users, epsilon=3.0, delta=1e-3, B=4, rng=9, **kw)
        for kw in ({}, {"wire": True}, {"encrypt": True})
    ]
    for r in rels[1:]:
        np.testing.assert_array_equal(r.raw, rels[0].raw)
    assert [r.protocol["path"] for r in rels] == ["simulation", "wire", "deployment"]
    for key in ("B", "q", "r", "m", "messages_per_user", "bits_per_user", "bytes_per_user",
                "n_users", "n_dropped"):
        assert key in rels[0].protocol


def test_rounding_error_vanishes_as_B_grows():
    grid = Grid(16, 12)
    n = 30
    users = random_users(grid, n, k=4, seed=2)
    for rule in ("floor", "largest_remainder"):
        prev = math.inf
        for B in (1, 8, 64, 512, 4096):
            p = params_for(grid, n=n, B=B, rounding=rule)
            z = noisy_vectors(p, users, noise=False).sum(axis=0)
            truth = flatten(level_counts(grid, users.aggregate(), p.start))
            err = np.abs(z / B - truth).max()
            assert err <= n / B + 1e-9
            assert err <= prev + 1e-12
            prev = err


def test_noise_converges_to_the_central_laplace_and_estimates_agree():
    # Decoded noise / B is DL(exp(-eps_i / 2B)) / B, whose variance tends to 2 (2 / eps_i)^2:
    # the central Laplace mechanism under replace-one (sensitivity 2), i.e. central at eps/2.
    grid = Grid(16, 16)
    n, B = 40, 1024
    users = random_users(grid, n, k=3, seed=5)
    p = params_for(grid, n=n, B=B)
    z0 = noisy_vectors(p, users, noise=False).sum(axis=0)
    # Pooled over levels after dividing by the exact DL(a_i) standard deviation, 30 runs x
    # m = 336 coordinates: the sample variance of N = 10080 unit-variance Laplace-like values
    # has relative sd sqrt((kurtosis - 1) / N) ~ 0.022; 6 sd tolerance (false failure ~1e-9).
    reps = 30
    noise = []
    for seed in range(reps):
        acc = ModularAccumulator(p)
        acc.add_shares(encode_shares(p, users, rng=seed))
        noise.append(decode_centred(acc.modular_sums(n), p.q, p.decode_low) - z0)
    noise = np.concatenate(noise).astype(float)
    a = np.tile(p.coordinate_a(), reps)
    unit = noise / np.sqrt(2 * a / (1 - a) ** 2)
    assert unit.mean() == pytest.approx(0.0, abs=6 * np.sqrt(1 / unit.size))
    assert unit.var() == pytest.approx(1.0, abs=0.135)
    # ... and the exact DL variance tends to the central Laplace's 2 (2 / eps_i)^2 B^2
    for eps_i, a_i in zip(p.level_epsilons, p.level_a, strict=True):
        assert 2 * a_i / (1 - a_i) ** 2 / B**2 == pytest.approx(2 * (2 / eps_i) ** 2, rel=1e-3)
    # level counts decode to the truth plus that noise
    counts = level_counts_from_sums(np.mod(z0, p.q), p)
    truth = level_counts(grid, users.aggregate(), p.start)
    for c, t in zip(counts, truth, strict=True):
        assert np.abs(c - t).max() <= n / B

    from shuffledp.analyzers.heatmap.metrics import emd

    truth_map = users.aggregate() / n
    e_shuffle, e_central = [], []
    # like for like: the same relation (replace-one) and the same default budget rule; at
    # eps n / N = 0.31 the "auto" split gives the leaf 0.28 of eps (printed: 0.23)
    rc0 = central_heatmap(users, 2.0, neighbour="replace", rng=0)
    assert rc0.parameters["budget_rule"] == p.budget_rule == "auto"
    np.testing.assert_allclose(p.level_epsilons, rc0.parameters["level_epsilons"], rtol=1e-15)
    assert p.level_epsilons[-1] / 2.0 == pytest.approx(0.28, abs=0.01)
    for seed in range(6):
        rs = shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=B, rng=100 + seed,
                             neighbour="replace")
        rc = central_heatmap(users, 2.0, neighbour="replace", rng=200 + seed)
        e_shuffle.append(emd(truth_map, rs.estimate, grid))
        e_central.append(emd(truth_map, rc.estimate, grid))
    assert np.mean(e_shuffle) == pytest.approx(np.mean(e_central), rel=0.3)


def test_params_come_from_the_accounting_record():
    from shuffledp.accounting.summation import summation_parameters

    grid = Grid(320, 240)
    p = derive_params(grid, 50, epsilon=5.0, delta=1e-5, B=256)
    s = summation_parameters(n=50, epsilon=5.0, delta=1e-5, B=256, grid=grid)
    assert (p.q, p.r, p.m, p.n_min, p.decode_low) == (s.q, s.r, s.m, s.n_min, s.decode_low)
    assert p.bits_per_user == s.bits_per_user and p.messages_per_user == s.messages_per_user
    assert p.level_a == pytest.approx(s.dl_parameters, rel=1e-15)
    # App. F count at the Fig. 12 setting: r m ceil(log2(m q)) bits
    assert p.bits_per_user == p.r * p.m * math.ceil(math.log2(p.m * p.q))
    assert p.summation.guarantee.model == "shuffle"


#: the accounting record's numbers a ProtocolParams reads as its own (properties,
#: no __getattr__ redirect)
RECORD_NUMBERS = ("n", "epsilon", "delta", "B", "rounding", "neighbour", "dropout", "n_min",
                  "q", "r", "decode_low", "wrap_probability", "wrap_target", "gamma",
                  "budget_rule")


def test_params_list_every_number_they_read_from_the_record():
    import inspect

    p = params_for(Grid(4, 4), n=5, B=4)
    assert "__getattr__" not in vars(ProtocolParams)
    members = dict(inspect.getmembers(ProtocolParams))
    listed = set(dir(p))
    for name in RECORD_NUMBERS:
        assert name in listed, name
        prop = members[name]
        assert isinstance(prop, property) and prop.__doc__, name
        assert getattr(p, name) == getattr(p.summation, name), name
    with pytest.raises(AttributeError, match="no_such_field"):
        p.no_such_field  # noqa: B018
    with pytest.raises(AttributeError, match="level_noise_std"):
        p.level_noise_std  # noqa: B018 - on the record, deliberately not forwarded


def test_round_id_is_fresh_bound_into_the_digest_and_kept_by_json():
    import json

    a = params_for(Grid(6, 5), n=4, B=8)
    b = params_for(Grid(6, 5), n=4, B=8)
    assert len(a.round_id) == 16 and a.round_id != b.round_id
    assert a.digest != b.digest  # same numbers, another run: batches cannot be mixed
    again = ProtocolParams.from_json(a.to_json())
    assert again.round_id == a.round_id and again.digest == a.digest
    assert again.summation is not None  # re-derivation with the same round id matches
    d = json.loads(a.to_json())
    del d["round_id"]
    with pytest.raises(ValueError, match="no round_id"):
        ProtocolParams.from_json(json.dumps(d))
    d["round_id"] = "zz"
    with pytest.raises(ValueError, match="round_id"):
        ProtocolParams.from_json(json.dumps(d))
    with pytest.raises(ValueError, match="round_id must be 16 bytes"):
        ProtocolParams(a.grid, a.w, a.summation, b"short")


def test_wire_paths_report_authentication_figures():
    users = random_users(Grid(4, 4), 3, seed=4)
    rel = shuffle_heatmap(users, epsilon=3.0, delta=1e-3, B=4, rng=9, encrypt=True)
    assert rel.protocol["mixed_batch_authenticated"] is True
    assert rel.protocol["messages_failed_authentication"] == 0


def test_neighbour_is_a_neighbour_whatever_the_record_holds():
    """The record may hold the neighbour as its text (as read back from JSON): the
    property still gives the Neighbour member the checks and the report use."""
    from shuffledp.accounting.guarantee import Neighbour

    p = params_for(Grid(8, 8), 50, B=4)
    text = str(p.summation.neighbour)
    q = ProtocolParams(p.grid, p.w, dataclasses.replace(p.summation, neighbour=text),
                       p.round_id)
    assert isinstance(q.neighbour, Neighbour) and q.neighbour == p.neighbour
    assert q.figures()["neighbour"] == p.figures()["neighbour"] and q.digest == p.digest


def test_protocol_package_has_no_old_runner_names():
    """One name per thing: the runner's functions live in shuffledp.protocol.runner only."""
    import shuffledp.protocol

    for name in ("shuffle_heatmap", "simulate_sums", "user_batches"):
        assert not hasattr(shuffledp.protocol, name)


@pytest.mark.parametrize("m", [1, 2, 7, 10, 309743])
def test_one_decode_centred_serves_both_windows(m):
    s = np.arange(m, dtype=np.int64)
    # federated default: the symmetric window (-m/2, m/2]
    np.testing.assert_array_equal(decode_centred(s, m), np.where(s > m // 2, s - m, s))
    for low in {0, m // 3, m - 1}:
        d = decode_centred(s, m, low)
        assert d.min() >= -low and d.max() < m - low
        np.testing.assert_array_equal(np.mod(d, m), s)
    with pytest.raises(ValueError, match="low"):
        decode_centred(s, m, m)


@pytest.mark.parametrize("budget", ["auto", "paper"])
def test_budget_rule_is_agreed_and_kept_by_json(budget):
    """params.json carries the budget rule like every other agreed field: it is part of the
    digest, survives the round trip, and a file whose rule does not match its budgets is
    refused. A file without the field (written before the rule was recorded) is refused as
    one without round_id is, naming the field: its numbers are not re-derived under an
    assumed rule."""
    grid = Grid(8, 8)  # 200 users, eps = 2: eps n / N = 6.25, the two rules differ
    p = derive_params(grid, 200, epsilon=2.0, delta=1e-5, B=8, budget=budget)
    again = ProtocolParams.from_json(p.to_json())
    assert again.budget_rule == p.budget_rule == budget
    assert again.level_epsilons == p.level_epsilons and again.digest == p.digest
    d = json.loads(p.to_json())
    assert d["budget_rule"] == budget and p.canonical()["budget_rule"] == budget
    other = "paper" if budget == "auto" else "auto"
    with pytest.raises(ValueError, match="differs from .*re-run setup"):
        ProtocolParams.from_json(json.dumps({**d, "budget_rule": other}))
    with pytest.raises(ValueError, match="budget must be one of"):
        ProtocolParams.from_json(json.dumps({**d, "budget_rule": "leafy"}))
    del d["budget_rule"]
    with pytest.raises(ValueError, match="no budget_rule .*re-run setup"):
        ProtocolParams.from_json(json.dumps(d))
    # the record checks its own rule
    with pytest.raises(ValueError, match="budget_rule"):
        ProtocolParams(p.grid, p.w, dataclasses.replace(p.summation, budget_rule="leafy"),
                       p.round_id)
