"""Plaintext rounds over the bit-packed layouts: exact sizes, exact sums, per-block mixing."""

from __future__ import annotations

import numpy as np
import pytest

from shuffledp import Grid
from shuffledp.encoders.encoder import encode_shares
from shuffledp.protocol.packed import LAYOUTS, _user_batch_bytes, accumulate, frame_user, mix
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.wire import WireError, decode_batch
from shuffledp.randomness import SecureRandom
from shuffledp.users import UserDistributions


@pytest.fixture(scope="module")
def setup():
    p = derive_params(Grid(16, 12), 6, epsilon=5.0, delta=1e-5, B=8)
    rng = np.random.default_rng(3)
    users = UserDistributions.from_pixels(Grid(16, 12), np.arange(6),
                                          rng.integers(0, 16 * 12, size=6))
    sh = encode_shares(p, users, np.arange(6), rng=np.random.default_rng(4))
    return p, sh


@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_sums_exactly_and_sizes_match_params(setup, layout):
    p, sh = setup
    batches = [frame_user(p, sh[j], layout) for j in range(sh.shape[0])]
    want = {"packed": p.packed_bytes_per_user,
            "coordinate-major": p.coordinate_major_bytes_per_user}[layout]
    assert {len(b) for b in batches} == {want} == {_user_batch_bytes(p, layout)}
    mixed = mix(p, batches, layout, SecureRandom(), mac_key=bytes(32))
    expected = sh.astype(np.uint64).sum(axis=(0, 1)) % np.uint64(p.q)
    h, acc = accumulate(p, mixed, mac_key=bytes(32))
    assert h.n_users == 6 and acc.rejected == 0
    assert np.array_equal(acc.modular_sums(6), expected.astype(np.int64))


def test_coordinate_major_mixing_keeps_each_coordinate_block(setup):
    p, sh = setup
    batches = [frame_user(p, sh[j], "coordinate-major") for j in range(sh.shape[0])]
    _, rec = decode_batch(mix(p, batches, "coordinate-major", SecureRandom()))
    blocks = rec.reshape(p.m, -1)
    for a in (0, p.m // 2, p.m - 1):  # each block is a permutation of that coordinate's shares
        assert sorted(blocks[a].tolist()) == sorted(sh[:, :, a].ravel().tolist())


def test_coordinate_major_is_smaller_than_packed_and_v2(setup):
    p, _ = setup
    assert p.coordinate_major_bytes_per_user < p.packed_bytes_per_user <= p.bytes_per_user


def test_foreign_or_malformed_batches_are_refused(setup):
    p, sh = setup
    b = frame_user(p, sh[0], "packed")
    with pytest.raises(WireError, match="wrong_kind: expected the coordinate-major layout"):
        mix(p, [b], "coordinate-major")
    with pytest.raises(WireError, match="header promises"):
        mix(p, [b[:-1]], "packed")
    with pytest.raises(ValueError, match="layout='v9'"):
        frame_user(p, sh[0], "v9")
    with pytest.raises(ValueError, match=r"shares.shape=\(2, 3\)"):
        frame_user(p, np.zeros((2, 3)), "packed")


def test_fig12_point_b256_headline_sizes():
    # 320x240, n=50, eps=5, delta=1e-5, B=256: r=19, m=102406, q=303287 (19 share bits,
    # 17 coordinate bits); sizes recomputed by hand from r m and the bit widths
    # the paper's setting plans the noise for all n users (dropout 0)
    # and its replace-one relation (App. F; the toolkit's default is zero-out)
    p = derive_params(Grid(320, 240), 50, epsilon=5.0, delta=1e-5, B=256, dropout=0.0,
                      neighbour="replace")
    assert (p.r, p.m, p.q, p.share_bits, p.record_bits) == (19, 102406, 303287, 19, 36)
    msgs = 19 * 102406
    assert p.bytes_per_user == 64 + msgs * 5 == 9728634
    assert p.packed_bytes_per_user == 64 + -(-msgs * 36 // 8) == 8755777
    assert p.coordinate_major_bytes_per_user == 64 + -(-msgs * 19 // 8) == 4621135 <= 7_000_000


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shuffle_heatmap_over_packed_layouts_matches_v2_and_reports_written_bytes(layout):
    from shuffledp.protocol.runner import shuffle_heatmap

    rng = np.random.default_rng(7)
    users = UserDistributions.from_pixels(Grid(16, 12), np.arange(8),
                                          rng.integers(0, 16 * 12, size=8))
    p = derive_params(Grid(16, 12), 8, epsilon=5.0, delta=1e-5, B=8)
    kw = dict(epsilon=5.0, delta=1e-5, B=8, wire=True, params=p, simulate_dropouts=0)
    a = shuffle_heatmap(users, rng=11, **kw)
    b = shuffle_heatmap(users, rng=11, layout=layout, **kw)
    # same seeded noise -> identical exact sums -> identical release
    assert np.array_equal(a.raw, b.raw)
    want = {"packed": p.packed_bytes_per_user,
            "coordinate-major": p.coordinate_major_bytes_per_user}[layout]
    assert b.protocol["bytes_per_user"] == want and b.protocol["wire_layout"] == layout
    assert a.protocol["bytes_per_user"] == p.bytes_per_user and a.protocol["wire_layout"] == "v2"
    with pytest.raises(ValueError, match="layout='packed' is a plaintext wire layout"):
        shuffle_heatmap(users, epsilon=5.0, delta=1e-5, B=8, layout="packed")
