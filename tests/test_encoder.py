"""User-side encoder: sparse pyramid measurement vs the dense pyramid, messages, paths agree."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from shuffle_helpers import params_for, random_users

from shuffledp import Grid, UserDistributions
from shuffledp.analyzers.heatmap.modular import ModularAccumulator
from shuffledp.encoders.encoder import (
    encode_shares,
    encode_sums,
    encode_user,
    messages,
    noisy_vectors,
    scale_round,
)
from shuffledp.pyramid import flatten, level_counts
from shuffledp.randomness import SecureRandom, UserStreams


@given(
    st.integers(min_value=1, max_value=23), st.integers(min_value=1, max_value=17),
    st.integers(min_value=1, max_value=300), st.sampled_from(["floor", "largest_remainder"]),
    st.integers(min_value=0, max_value=10**6),
)
@settings(max_examples=40, deadline=None)
def test_sparse_measurement_equals_dense_pyramid_rounded(width, height, B, rule, seed):
    grid = Grid(width, height)
    p = params_for(grid, n=4, B=B, rounding=rule)
    users = random_users(grid, 4, k=3, seed=seed)
    z = noisy_vectors(p, users, noise=False)
    for j in range(4):
        px, wt = users.user(j)
        dense = np.zeros(grid.n_pixels)
        np.add.at(dense, px, wt)
        levels = level_counts(grid, dense, p.start)
        expect = np.concatenate([scale_round(np.ravel(lv), B, rule) for lv in levels])
        np.testing.assert_array_equal(z[j], expect)
    np.testing.assert_allclose(
        z.sum(axis=0) / B, flatten(level_counts(grid, users.aggregate(), p.start)),
        atol=4 * (1 if rule == "largest_remainder" else 3) / B + 1e-12,
    )


@given(st.integers(min_value=1, max_value=5000), st.integers(min_value=0, max_value=2**31))
@settings(max_examples=20, deadline=None)
def test_streaming_sums_do_not_depend_on_order_or_chunking(chunk, seed):
    grid = Grid(5, 4)
    p = params_for(grid, n=3, B=7)
    users = random_users(grid, 3, seed=seed % 1000)
    sh = encode_shares(p, users, rng=seed)
    ref = ModularAccumulator(p)
    ref.add_shares(sh)
    rec = np.concatenate([messages(p, s) for s in sh])
    rec = rec[np.random.default_rng(seed).permutation(rec.size)]
    acc = ModularAccumulator(p)
    for i in range(0, rec.size, chunk):
        acc.add_records(rec[i : i + chunk])
    np.testing.assert_array_equal(acc.modular_sums(3), ref.modular_sums(3))


def test_encode_user_messages_cover_every_coordinate_r_times():
    grid = Grid(9, 7)
    p = params_for(grid, n=5, B=3)
    rec = encode_user(p, np.array([0, 5, 62]), np.array([1.0, 2.0, 1.0]))
    assert rec.size == p.messages_per_user
    coords = (rec.astype(np.uint64) >> np.uint64(p.share_bits)).astype(np.int64)
    assert np.all(np.bincount(coords, minlength=p.m) == p.r)
    shares = rec.astype(np.uint64) & np.uint64((1 << p.share_bits) - 1)
    assert shares.max() < p.q


def test_messages_shape_check():
    p = params_for(Grid(4, 4), n=3, B=2)
    import pytest

    with pytest.raises(ValueError, match="shape"):
        messages(p, np.zeros((p.r + 1, p.m), dtype=np.uint32))
    users = UserDistributions.from_pixels(Grid(5, 5), [0], [0])
    with pytest.raises(ValueError, match="grid"):
        noisy_vectors(p, users)


def test_per_user_streams_make_the_encoding_independent_of_the_split():
    grid = Grid(5, 3)
    users = random_users(grid, 9, seed=4)
    p = params_for(grid, 9)
    s = UserStreams(21)
    whole = noisy_vectors(p, users, np.arange(9), s)
    # any grouping, any order: user j's row depends only on the seed and j
    for groups in ([[0, 1, 2, 3, 4, 5, 6, 7, 8]], [[8, 2], [5], [0, 1, 3, 4, 6, 7]]):
        for grp in groups:
            np.testing.assert_array_equal(noisy_vectors(p, users, np.array(grp), s),
                                          whole[grp])
    tot = np.zeros(p.m, dtype=np.int64)
    for grp in ([3, 0, 7], [1, 2, 4, 5, 6, 8]):
        part, n_msg = encode_sums(p, users, np.array(grp), s, SecureRandom())
        assert n_msg == len(grp) * p.r * p.m
        tot = (tot + part) % p.q
    np.testing.assert_array_equal(tot, whole.sum(axis=0) % p.q)
    shares = encode_shares(p, users, np.arange(9), s, SecureRandom())
    np.testing.assert_array_equal(shares.sum(axis=(0, 1), dtype=np.uint64) % p.q, tot)


def test_noise_tables_are_built_once_when_threads_start_together(monkeypatch):
    """Encoder threads that start together wait for one build of the noise tables (before,
    each built its own copy, serialised by the GIL: the simulation's first call was slower
    on 2 threads than on 1)."""
    import threading
    import time

    import shuffledp.encoders.encoder as enc

    params = params_for(Grid(8, 8), 20)
    real, calls = enc._noise_draws, []

    def slow(p):
        calls.append(p)
        time.sleep(0.05)  # a build long enough for the other threads to arrive
        return real(p)

    monkeypatch.setattr(enc, "_noise_draws", slow)
    monkeypatch.setattr(enc, "_DRAWS", {})
    start = threading.Barrier(4)
    got = []

    def worker():
        start.wait()
        got.append(enc._cached_draws(params))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 4 and all(d is got[0] for d in got)
