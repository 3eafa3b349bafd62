"""The Dask backend gives exactly the local sums for the same seeded messages, whatever the
partition of the users, the coordinate blocks or the number of workers."""
from __future__ import annotations

import numpy as np
import pytest

from shuffledp import Grid, UserDistributions
from shuffledp.encoders.encoder import noisy_vectors
from shuffledp.protocol.dask_backend import (
    Partitioning,
    _coordinate_blocks,
    _local_partitioned_sums,
)
from shuffledp.protocol.params import derive_params
from shuffledp.randomness import UserStreams


def _setup(n=40):
    grid = Grid(8, 8)
    g = np.random.default_rng(5)
    users = UserDistributions.from_pixels(grid, np.arange(n), g.integers(0, 64, n))
    return derive_params(grid, n, epsilon=5.0, delta=1e-5, B=16), users


def _reference(params, users, rng):
    # independent of any partition: sum of z'^j mod q, user j's noise from the j-th child of
    # the seed (numpy's own SeedSequence.spawn), no shares, no shuffling
    kids = np.random.SeedSequence(rng).spawn(users.n_users)
    tot = sum(noisy_vectors(params, users, np.array([j]),
                            np.random.Generator(np.random.PCG64(kids[j])))[0]
              for j in range(users.n_users))
    return tot % params.q


def test_coordinate_blocks_cover_every_coordinate_once():
    e = _coordinate_blocks(85, 4)
    assert e[0] == 0 and e[-1] == 85 and np.all(np.diff(e) > 0)


@pytest.mark.parametrize("part", [Partitioning(1, 1), Partitioning(3, 5), Partitioning(40, 2)])
@pytest.mark.parametrize("mix", [False, True])
def test_local_plan_sums_equal_the_noisy_vectors_for_every_partition(part, mix):
    params, users = _setup()
    acc = _local_partitioned_sums(params, users, np.arange(users.n_users), 7, part, mix)
    np.testing.assert_array_equal(acc.modular_sums(users.n_users), _reference(params, users, 7))
    assert acc.messages == users.n_users * params.messages_per_user


def test_user_streams_are_numpys_spawned_children():
    kids = np.random.SeedSequence(7).spawn(5)
    s = UserStreams(7)
    for j in (0, 4):
        want = np.random.Generator(np.random.PCG64(kids[j])).integers(0, 2**62, 4)
        np.testing.assert_array_equal(s.stream(j, None).integers(0, 2**62, 4), want)


@pytest.mark.parametrize("n_workers", [1, 2])
def test_dask_backend_equals_the_reference_on_one_and_two_workers(n_workers):
    distributed = pytest.importorskip("distributed")
    from shuffledp.protocol.dask_backend import dask_sums

    params, users = _setup()
    ref = _reference(params, users, 7)
    with distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as c, distributed.Client(c) as client:
        for part in (None, Partitioning(3, 5)):
            for mix in (False, True):
                acc = dask_sums(params, users, np.arange(users.n_users), 7, client, part, mix=mix)
                np.testing.assert_array_equal(acc.modular_sums(users.n_users), ref)
                assert acc.messages == users.n_users * params.messages_per_user


def test_cli_backend_usage_and_missing_dask(monkeypatch):
    import sys

    from click.testing import CliRunner

    from shuffledp.cli import main

    r = CliRunner().invoke(main, ["heatmap", "--backend", "dask", "--n", "20", "--quiet"])
    assert r.exit_code == 2 and "--model shuffle --backend dask" in r.output
    r = CliRunner().invoke(main, ["heatmap", "--model", "shuffle", "--scheduler", "tcp://x:1",
                                  "--n", "20", "--quiet"])
    assert r.exit_code == 2
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    r = CliRunner().invoke(main, ["heatmap", "--model", "shuffle", "--backend", "dask",
                                  "--n", "20", "--grid", "8", "--B", "4", "--epsilon", "5",
                                  "--no-metrics", "--quiet"])
    assert r.exit_code == 1 and 'pip install "shuffledp[dask]"' in r.output
    assert "Traceback" not in r.output
