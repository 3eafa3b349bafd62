"""Shuffler: validation, rejection counts, incomplete users, secure permutation, encryption."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from shuffle_helpers import params_for, random_users
from shuffledp.analyzers.modular import ModularAccumulator
from shuffledp.encoders.encoder import encode_shares, messages
from shuffledp.encoders.sharing import SecureRandom

from shuffledp import Grid
from shuffledp.protocol import user_batches
from shuffledp.shuffler import (
    Shuffler,
    decrypt_records,
    encrypt_records,
    encrypted_record_bytes,
    generate_analyzer_key,
    public_bytes,
    secure_permutation,
    secure_shuffle,
    shuffle_batches,
)
from shuffledp.wire import (
    KIND_USER,
    KIND_USER_ENC,
    Header,
    decode_batch,
    encode_batch,
    unpack_records,
)

GRID = Grid(6, 5)


@pytest.fixture(scope="module")
def setup():
    p = params_for(GRID, n=4, B=8)
    users = random_users(GRID, 4)
    batches = list(user_batches(p, users, np.arange(4), rng=1))
    return p, users, batches


def _ints(p, batch):
    h, raw = decode_batch(batch)
    assert h.record_bytes == p.record_bytes
    return unpack_records(raw, h.record_bytes).astype(np.uint64)


def _batch(p, rec):
    return encode_batch(Header(KIND_USER, p.record_bytes, p.digest, rec.size), rec)


def test_good_batches_are_forwarded_and_mixed(setup):
    p, users, batches = setup
    h, rec, report = shuffle_batches(p, batches, expected_users=4)
    assert report.n_forwarded == 4 and report.n_dropped == 0
    assert h.n_users == 4 and h.n_records == 4 * p.r * p.m
    # mixing changes the order but not the multiset
    pooled = np.concatenate([_ints(p, b) for b in batches])
    assert not np.array_equal(rec, pooled)
    np.testing.assert_array_equal(np.sort(rec), np.sort(pooled))


def test_malformed_and_incomplete_batches_are_rejected_and_counted(setup):
    p, users, batches = setup
    good = batches[0]
    rec = _ints(p, good).copy()
    sb = p.share_bits
    bad_coord = rec.copy()
    bad_coord[5] = (p.m << sb) | 1
    bad_share = rec.copy()
    bad_share[5] = (bad_share[5] >> sb << sb) | ((1 << sb) - 1) if (1 << sb) - 1 >= p.q else 0
    other = params_for(GRID, n=4, B=9)
    wrong_digest = encode_batch(Header(KIND_USER, p.record_bytes, other.digest, rec.size), rec)
    dup_coord = rec.copy()
    dup_coord[0] = dup_coord[1]  # one coordinate r + 1 times, another r - 1 times
    s = Shuffler(p)
    assert s.submit(good)
    assert not s.submit(good[:-4])  # wrong length for the header's count
    assert not s.submit(_batch(p, bad_coord))
    if (1 << sb) - 1 >= p.q:
        assert not s.submit(_batch(p, bad_share))
        assert s.report.rejected["share_out_of_range"] == 1
    assert not s.submit(wrong_digest)
    assert not s.submit(_batch(p, rec[:-1]))  # incomplete: one message missing
    assert not s.submit(_batch(p, dup_coord))  # incomplete: coordinate counts wrong
    assert not s.submit(b"garbage")
    enc_kind = encode_batch(Header(KIND_USER_ENC, p.record_bytes, p.digest, rec.size), rec)
    assert not s.submit(enc_kind)
    r = s.report
    assert r.rejected["malformed"] == 2
    assert r.rejected["coordinate_out_of_range"] == 1
    assert r.rejected["wrong_digest"] == 1
    assert r.rejected["wrong_kind"] == 1
    assert r.n_incomplete == 2
    assert r.n_forwarded == 1
    h, out = s.mix()
    assert h.n_users == 1 and h.n_dropped == r.n_dropped == r.n_rejected + 2
    assert out.size == p.r * p.m


def test_wire_and_simulation_sums_are_identical(setup):
    p, users, _ = setup
    sh = encode_shares(p, users, None, rng=2)
    sim = ModularAccumulator(p)
    sim.add_shares(sh)
    s = Shuffler(p)
    for j in range(users.n_users):
        s.submit(_batch(p, messages(p, sh[j])))
    h, rec = s.mix()
    wire = ModularAccumulator(p)
    for i in range(0, rec.size, 777):  # streaming, in chunks
        wire.add_records(rec[i : i + 777])
    np.testing.assert_array_equal(sim.modular_sums(4), wire.modular_sums(h.n_users))


def test_analyzer_rejects_out_of_range_messages(setup):
    p, _, batches = setup
    acc = ModularAccumulator(p)
    rec = _ints(p, batches[0]).copy()
    rec[0] = (p.m + 3) << p.share_bits
    assert acc.add_records(rec) == 1
    assert acc.rejected == 1
    from shuffledp.analyzers.modular import ReleaseRefused

    with pytest.raises(ReleaseRefused, match="did not receive"):
        acc.modular_sums(1)


def test_secure_permutation_is_uniform():
    # all 24 permutations of 4 items, chi-square at 1e-6 with a fixed test key
    src = SecureRandom.for_testing(11)
    index = {p: i for i, p in enumerate(itertools.permutations(range(4)))}
    counts = np.zeros(24)
    for _ in range(24_000):
        counts[index[tuple(secure_permutation(4, src).tolist())]] += 1
    assert stats.chisquare(counts).pvalue > 1e-6
    # position of element 0 in a large shuffle is uniform
    pos = np.zeros(10)
    for _ in range(5000):
        pos[int(np.flatnonzero(secure_permutation(10, src) == 0)[0])] += 1
    assert stats.chisquare(pos).pvalue > 1e-6


def test_secure_shuffle_large_is_a_permutation():
    x = np.arange(1_000_003, dtype=np.uint32)
    secure_shuffle(x)
    assert np.array_equal(np.sort(x), np.arange(1_000_003, dtype=np.uint32))
    assert (x != np.arange(x.size)).mean() > 0.99


def test_encryption_round_trip_unlinkable_and_tamper_evident(setup):
    p = params_for(Grid(3, 2), n=2, B=2)
    key = generate_analyzer_key()
    rec = np.arange(6, dtype=np.uint32) << np.uint32(p.share_bits) | np.uint32(5)
    ct = encrypt_records(p, rec, public_bytes(key))
    rb = encrypted_record_bytes(p)
    assert len(ct) == rec.size * rb
    c, s, failed = decrypt_records(p, ct, key)
    assert failed == 0
    np.testing.assert_array_equal(c, np.arange(6))
    np.testing.assert_array_equal(s, np.full(6, 5))
    # fresh ephemeral key per message: no shared bytes beyond the coordinate field
    ephs = {ct[i * rb + 4 : i * rb + 36] for i in range(6)}
    assert len(ephs) == 6
    # same plaintext twice gives different ciphertexts
    assert encrypt_records(p, rec[:1], public_bytes(key)) != encrypt_records(p, rec[:1],
                                                                           public_bytes(key))
    # moving a share to another coordinate, flipping a bit, or a wrong key: rejected
    moved = bytearray(ct)
    moved[0] ^= 1
    flipped = bytearray(ct)
    flipped[rb - 1] ^= 1
    assert decrypt_records(p, bytes(moved), key)[2] == 1
    assert decrypt_records(p, bytes(flipped), key)[2] == 1
    assert decrypt_records(p, ct, generate_analyzer_key())[2] == 6


def test_encrypted_shuffle_checks_envelope_and_drops_incomplete():
    p = params_for(Grid(3, 2), n=2, B=2)
    users = random_users(Grid(3, 2), 2)
    key = generate_analyzer_key()
    batches = list(user_batches(p, users, np.arange(2), rng=0,
                                analyzer_public=public_bytes(key)))
    rb = encrypted_record_bytes(p)
    truncated_user = batches[1][:64]  # header says r*m records but none follow
    h, rec, report = shuffle_batches(p, [batches[0], truncated_user], encrypted=True)
    assert report.n_forwarded == 1 and report.rejected["malformed"] == 1
    h, rec, report = shuffle_batches(p, batches, encrypted=True)
    assert report.n_forwarded == 2
    c, s, failed = decrypt_records(p, rec.tobytes(), key)
    assert failed == 0 and c.size == 2 * p.r * p.m
    assert math.isclose(len(rec.tobytes()), 2 * p.r * p.m * rb)
