"""The Dask backend gives exactly the local sums for the same seeded messages."""
from __future__ import annotations

import numpy as np
import pytest

from shuffledp import Grid, UserDistributions
from shuffledp.encoders.encoder import noisy_vectors
from shuffledp.protocol.dask_backend import (
    Partitioning,
    _coordinate_blocks,
    _local_partitioned_sums,
    _partition_streams,
)
from shuffledp.protocol.params import derive_params


def _setup(n=40):
    grid = Grid(8, 8)
    g = np.random.default_rng(5)
    users = UserDistributions.from_pixels(grid, np.arange(n), g.integers(0, 64, n))
    return derive_params(grid, n, epsilon=5.0, delta=1e-5, B=16), users


def _reference(params, users, rng, part):
    # independent: sum of z'^j mod q per partition stream, no shares, no shuffling
    sel = [s for s in np.array_split(np.arange(users.n_users), part.user_parts) if s.size]
    seeds = _partition_streams(rng, len(sel))
    tot = sum(noisy_vectors(params, users, s, np.random.default_rng(sd)).sum(axis=0)
              for s, sd in zip(sel, seeds))
    return tot % params.q


def test_coordinate_blocks_cover_every_coordinate_once():
    e = _coordinate_blocks(85, 4)
    assert e[0] == 0 and e[-1] == 85 and np.all(np.diff(e) > 0)


def test_local_plan_sums_equal_the_noisy_vectors_exactly():
    params, users = _setup()
    part = Partitioning(3, 5)
    acc = _local_partitioned_sums(params, users, np.arange(users.n_users), 7, part)
    ref = _reference(params, users, 7, part)
    np.testing.assert_array_equal(acc.modular_sums(users.n_users), ref)


def test_dask_backend_equals_local_plan_on_a_local_cluster():
    distributed = pytest.importorskip("distributed")
    from shuffledp.protocol.dask_backend import dask_sums

    params, users = _setup()
    part = Partitioning(3, 5)
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        acc = dask_sums(params, users, np.arange(users.n_users), 7, client, part)
    ref = _reference(params, users, 7, part)
    np.testing.assert_array_equal(acc.modular_sums(users.n_users), ref)
    loc = _local_partitioned_sums(params, users, np.arange(users.n_users), 7, part)
    np.testing.assert_array_equal(acc.counts, loc.counts)


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
