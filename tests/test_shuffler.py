"""Shuffler: validation, rejection counts, incomplete users, secure permutation, encryption."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag
from scipy import stats
from shuffle_helpers import params_for, random_users

from shuffledp import Grid
from shuffledp.analyzers.heatmap.modular import ModularAccumulator
from shuffledp.encoders.encoder import encode_shares, messages
from shuffledp.protocol.crypto import (
    decrypt_records,
    encrypt_records,
    encrypted_record_bytes,
    generate_analyzer_key,
    public_bytes,
)
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.runner import user_batches
from shuffledp.protocol.shuffler import Shuffler, _shuffle_batches
from shuffledp.protocol.wire import (
    KIND_USER,
    KIND_USER_ENC,
    Header,
    decode_batch,
    encode_batch,
    unpack_records,
)
from shuffledp.randomness import SecureRandom, secure_permutation, secure_shuffle

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
    """A plaintext user batch of ``rec`` in canonical (ascending) order."""
    return encode_batch(Header(KIND_USER, p.record_bytes, p.digest, rec.size), np.sort(rec))


def test_good_batches_are_forwarded_and_mixed(setup):
    p, users, batches = setup
    h, rec, report = _shuffle_batches(p, batches, expected_users=4)
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
    dup_coord[0] = dup_coord[p.r]  # one coordinate r + 1 times, another r - 1 times
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
    assert r.rejected["truncated"] == 1  # good[:-4]
    assert r.rejected["malformed"] == 1  # b"garbage"
    assert r.rejected["coordinate_out_of_range"] == 1
    assert r.rejected["wrong_digest"] == 1
    assert r.rejected["wrong_kind"] == 1
    assert r.rejected["incomplete"] == r.n_incomplete == 2
    assert r.n_forwarded == 1
    h, out = s.mix()
    # every anonymous submission that was not forwarded is one dropped user with one reason
    assert h.n_users == 1 and h.n_dropped == r.n_dropped == r.n_rejected
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
    from shuffledp.analyzers.heatmap.modular import ReleaseRefused

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
    h, rec, report = _shuffle_batches(p, [batches[0], truncated_user], encrypted=True)
    assert report.n_forwarded == 1 and report.rejected == {"truncated": 1}
    h, rec, report = _shuffle_batches(p, batches, encrypted=True)
    assert report.n_forwarded == 2
    c, s, failed = decrypt_records(p, rec.tobytes(), key)
    assert failed == 0 and c.size == 2 * p.r * p.m
    assert math.isclose(len(rec.tobytes()), 2 * p.r * p.m * rb)


# ----- integrity and streaming -----
@pytest.fixture(scope="module")
def enc_setup():
    p = params_for(Grid(3, 2), n=4, B=2, dropout=0.5)
    users = random_users(Grid(3, 2), 4)
    key = generate_analyzer_key()
    batches = list(user_batches(p, users, np.arange(4), rng=0, analyzer_public=public_bytes(key)))
    return p, key, batches


def _mix_bytes(s):
    import io

    f = io.BytesIO()
    s.mix_to(f)
    return f.getvalue()


@pytest.mark.parametrize("encrypted", [False, True])
def test_replayed_batch_is_rejected_even_under_a_new_sender(setup, enc_setup, encrypted):
    # regression: the old shuffler forwarded a replayed batch and counted the user twice
    p, batches = (enc_setup[0], enc_setup[2]) if encrypted else (setup[0], setup[2])
    s = Shuffler(p, encrypted=encrypted)
    assert s.submit(batches[0], sender="alice")
    assert not s.submit(batches[0], sender="mallory")
    assert not s.submit(batches[0], sender="alice")
    assert s.submit(batches[1], sender="bob")
    assert s.report.rejected["replayed_batch"] == 1
    assert s.report.rejected["duplicate_sender"] == 1
    h, _ = s.mix()
    assert h.n_users == 2


def test_sender_may_resubmit_after_a_malformed_upload(setup):
    # regression: the old shuffler burnt the sender id before validation
    p, _, batches = setup
    s = Shuffler(p)
    assert not s.submit(batches[0][:-3], sender="alice")
    assert not s.submit(batches[0][:100] + b"\xff" + batches[0][101:][:0], sender="alice")
    assert s.submit(batches[0], sender="alice")
    assert s.submit(batches[1], sender="bob")
    h, _ = s.mix()
    assert (h.n_users, h.n_dropped) == (2, 0)
    assert s.report.rejected == {"truncated": 2}
    # a sender who never gets through counts as one dropped user, however many tries
    s = Shuffler(p)
    for _ in range(3):
        s.submit(b"junk", sender="carol")
    s.submit(batches[0], sender="alice")
    assert s.report.n_dropped == 1 and s.report.rejected["malformed"] == 3


def _enc_records(p, batch):
    rb = encrypted_record_bytes(p)
    body = batch[64:]
    return [body[i : i + rb] for i in range(0, len(body), rb)]


def _spliced(p, batches):
    """Batch 0 with its first record swapped for batch 1's record of the same coordinate."""
    a, b = _enc_records(p, batches[0]), _enc_records(p, batches[1])
    j = next(j for j, r in enumerate(b) if r[:4] == a[0][:4])
    return batches[0][:64] + b[j] + b"".join(a[1:])


def _sums(p, key, order):
    from shuffledp.analyzers.heatmap.modular import accumulate_mixed

    s = Shuffler(p, encrypted=True)
    for k, b in enumerate(order):
        s.submit(b, sender=k)
    res = accumulate_mixed(p, _mix_bytes(s), key=key, workers=1)
    return s.report, res


def test_encrypted_record_copied_from_another_batch_first_kept_wins(enc_setup):
    # regression: a record swapped in from another batch (same coordinate) passed the old
    # shuffler and the analyzer's AEAD check, corrupting the sum silently; later
    # the shuffler removed both batches, so a copier knocked out the honest original
    p, key, batches = enc_setup
    forged = _spliced(p, batches)
    # the honest batch first: the splice goes, the sum is exactly the honest users'
    rep, res = _sums(p, key, [batches[1], forged, batches[2], batches[3]])
    assert rep.n_removed == 1 and rep.rejected == {"copied_record": 1}
    assert (res.header.n_users, res.header.n_dropped) == (3, 1)
    _, want = _sums(p, key, [batches[1], batches[2], batches[3]])
    np.testing.assert_array_equal(res.accumulator.modular_sums(3),
                                  want.accumulator.modular_sums(3))
    # the splice first: it is kept (input poisoning by its sender, out of scope), the batch
    # it copied from goes, and no record is counted twice
    rep, res = _sums(p, key, [forged, batches[1], batches[2], batches[3]])
    assert rep.n_removed == 1 and rep.rejected == {"copied_record": 1}
    assert (res.header.n_users, res.header.n_dropped) == (3, 1)
    _, want = _sums(p, key, [forged, batches[2], batches[3]])
    np.testing.assert_array_equal(res.accumulator.modular_sums(3),
                                  want.accumulator.modular_sums(3))


def test_copied_batches_is_exactly_first_kept_wins(enc_setup):
    # a chain 0-1, 1-2 (batch 1 shares a record with 0 and another with 2): sequential
    # first-kept-wins keeps 0 and 2 (2 only conflicts with the removed 1); removing every
    # batch in a conflict would drop all three
    p, key, batches = enc_setup
    a = [_enc_records(p, b) for b in batches[:3]]
    c0 = a[0][0][:4]
    j1 = next(j for j, r in enumerate(a[1]) if r[:4] == c0)
    k1 = next(j for j, r in enumerate(a[1]) if r[:4] == c0 and j != j1)
    j2 = next(j for j, r in enumerate(a[2]) if r[:4] == c0)
    mid = list(a[1])
    mid[j1], mid[k1] = a[0][0], a[2][j2]
    chain = [batches[0], batches[1][:64] + b"".join(mid), batches[2]]
    s = Shuffler(p, encrypted=True)
    for k, b in enumerate(chain):
        assert s.submit(b, sender=k)
    assert s._copied_batches() == {1}
    s.close()


def test_duplicate_ephemeral_key_within_a_batch_is_rejected(enc_setup):
    p, _, batches = enc_setup
    a = _enc_records(p, batches[0])
    j = next(j for j in range(1, len(a)) if a[j][:4] == a[0][:4])
    dup = batches[0][:64] + b"".join(a[:j] + [a[0]] + a[j + 1 :])
    s = Shuffler(p, encrypted=True)
    assert not s.submit(dup, sender=0)
    assert s.report.rejected["duplicate_record"] == 1
    assert s.submit(batches[0], sender=0)  # not burnt


def test_record_from_another_run_fails_authentication(enc_setup):
    # regression: two runs with the same numbers had the same digest, so a ciphertext of one
    # run decrypted fine in the other
    from shuffledp.analyzers.heatmap.modular import ReleaseRefused, release_mixed

    p, key, batches = enc_setup
    other = params_for(Grid(3, 2), n=4, B=2, dropout=0.5)
    assert other.digest != p.digest
    users = random_users(Grid(3, 2), 1, seed=3)
    ob = next(user_batches(other, users, np.arange(1), rng=0,
                           analyzer_public=public_bytes(key)))
    a = _enc_records(p, batches[0])
    o = next(r for r in _enc_records(other, ob) if r[:4] == a[0][:4])
    s = Shuffler(p, encrypted=True)
    assert not s.submit(ob)  # a whole batch of the other run: wrong digest
    assert s.report.rejected["wrong_digest"] == 1
    assert s.submit(batches[0][:64] + o + b"".join(a[1:]))
    for k in (1, 2):
        s.submit(batches[k])
    with pytest.raises(ReleaseRefused, match="not whole users. batches"):
        release_mixed(p, _mix_bytes(s), key=key, workers=1)
    c, _, failed = decrypt_records(p, o, key)
    assert failed == 1 and c.size == 0


def test_mixed_batch_counts_are_authenticated(enc_setup):
    from shuffledp.analyzers.heatmap.modular import accumulate_mixed
    from shuffledp.protocol.crypto import generate_mac_key
    from shuffledp.protocol.wire import WireError

    p, key, batches = enc_setup
    mk = generate_mac_key()
    s = Shuffler(p, encrypted=True, mac_key=mk)
    for b in batches:
        s.submit(b)
    s.missing(1)
    mixed = _mix_bytes(s)
    res = accumulate_mixed(p, mixed, key=key, mac_key=mk, workers=1)
    assert res.authenticated and (res.header.n_users, res.header.n_dropped) == (4, 1)
    edited = mixed[:40] + (0).to_bytes(8, "little") + mixed[48:]  # hide the dropout
    with pytest.raises(WireError, match="does not verify"):
        accumulate_mixed(p, edited, key=key, mac_key=mk, workers=1)
    with pytest.raises(WireError, match="pass mac_key"):
        accumulate_mixed(p, mixed, key=key, workers=1)
    with pytest.raises(WireError, match="encrypted: pass"):
        accumulate_mixed(p, mixed, mac_key=mk)
    with pytest.raises(ValueError, match="32 raw bytes"):
        accumulate_mixed(p, mixed, key=b"short", mac_key=mk)
    # a header whose n_users disagrees with its n_records is refused before any decryption
    from shuffledp.protocol.wire import Header, encode_batch

    h = Header(4, encrypted_record_bytes(p), p.digest, p.messages_per_user, 2, 0)
    with pytest.raises(WireError, match="header counts disagree"):
        accumulate_mixed(p, encode_batch(h, bytes(h.body_bytes)), key=key)


def test_over_capacity_is_refused(setup):
    p, users, batches = setup
    s = Shuffler(p)
    for k, b in enumerate(batches):
        assert s.submit(b, sender=k)
    extra = list(user_batches(p, users, np.arange(1), rng=5))[0]
    assert not s.submit(extra, sender="late")
    assert s.report.rejected["over_capacity"] == 1


def test_streaming_shuffle_spills_to_files_and_returns_a_permutation(setup, tmp_path,
                                                                    monkeypatch):
    import os

    import shuffledp.protocol.shuffler as sh

    p, _, batches = setup
    monkeypatch.setattr(sh, "_MIN_MEMORY_LIMIT", 64)
    s = Shuffler(p, workdir=str(tmp_path), memory_limit=2000)
    assert s.n_buckets > 1
    for b in batches:
        assert s.submit(b)
    assert len(os.listdir(tmp_path)) == 1  # spilled to bucket files in a private directory
    h, rec = s.mix()
    assert os.listdir(tmp_path) == []  # removed after mixing
    pooled = np.concatenate([_ints(p, b) for b in batches])
    np.testing.assert_array_equal(np.sort(rec), np.sort(pooled))
    assert h.n_users == 4


def test_bucket_shuffle_is_uniform(setup, monkeypatch):
    # position of one marked record over 2000 mixes with 8+ buckets: chi-square over 16 bins
    # at p > 1e-6 (false-failure rate 1e-6), fixed test key; buckets kept in memory here
    # (the spill to files is tested above)
    import shuffledp.protocol.shuffler as sh

    p, _, batches = setup
    monkeypatch.setattr(sh, "_MIN_MEMORY_LIMIT", 64)
    recs = [_ints(p, b) for b in batches[:2]]
    vals, cnt = np.unique(np.concatenate(recs), return_counts=True)
    marked = vals[cnt == 1][0]  # shares are random: mark a value that occurs once
    n_tot = sum(r.size for r in recs)
    src = SecureRandom.for_testing(5)
    bins = np.zeros(16)
    for _ in range(2000):
        s = Shuffler(p, source=src, memory_limit=4000)
        s._buckets.flush_bytes = 1 << 30
        s.submit(batches[0])
        s.submit(batches[1])
        _, rec = s.mix()
        pos = int(np.flatnonzero(rec == marked)[0])
        bins[pos * 16 // n_tot] += 1
    assert s.n_buckets >= 8
    expected = np.diff([-(-k * n_tot // 16) for k in range(17)]) / n_tot * 2000
    assert stats.chisquare(bins, expected).pvalue > 1e-6


def test_siphash_matches_published_vectors():
    from shuffledp.protocol.crypto import siphash24

    key = bytes(range(16))
    msg = np.frombuffer(bytes(range(15)), np.uint8).reshape(1, -1)
    assert int(siphash24(key, msg)[0]) == 0xA129CA6149BE45E5
    assert int(siphash24(key, np.zeros((1, 0), np.uint8))[0]) == 0x726FDB47DD0E0E31


def test_records_are_standard_rfc9180_hpke_both_ways(setup):
    """A from-the-RFC HPKE (tests/hpke_reference.py) opens our records, and a record it seals
    with info = message_info(...) and an empty aad opens on our analyzer: a device may use
    any RFC 9180 library."""
    import hpke_reference as ref

    from shuffledp.protocol.crypto import associated_data_prefix, message_info

    p = setup[0]
    key = generate_analyzer_key()
    rec = np.array([(2 << p.share_bits) | 17, (0 << p.share_bits) | 5], dtype=np.uint64)
    ct = encrypt_records(p, rec, public_bytes(key))
    rb = encrypted_record_bytes(p)
    assert rb == 4 + 32 + p.share_bytes + 16 and len(ct) == 2 * rb
    for i, want in ((0, 17), (1, 5)):
        r = ct[i * rb : (i + 1) * rb]
        info = message_info(associated_data_prefix(p), r[:4])
        w = ref.open_(key, info, b"", r[4:])
        assert int.from_bytes(w, "little") == want
        with pytest.raises(InvalidTag):  # another coordinate in info: another key
            other = b"\x02\0\0\0" if i else bytes(4)
            ref.open_(key, message_info(associated_data_prefix(p), other), b"", r[4:])
    a = (3).to_bytes(4, "little")
    theirs = a + ref.seal(public_bytes(key), message_info(associated_data_prefix(p), a), b"",
                          (99).to_bytes(p.share_bytes, "little"))
    c, s, failed = decrypt_records(p, theirs, key)
    assert failed == 0 and c.tolist() == [3] and s.tolist() == [99]


def test_hybrid_post_quantum_kem_round_trip(setup):
    from shuffledp.protocol.crypto import KEM_HYBRID, generate_hybrid_key

    p = setup[0]
    key = generate_hybrid_key()
    rec = np.array([(1 << p.share_bits) | 7, (4 << p.share_bits) | 3], dtype=np.uint64)
    ct = encrypt_records(p, rec, key.public_key(), kem=KEM_HYBRID)
    assert len(ct) == 2 * encrypted_record_bytes(p, KEM_HYBRID) == 2 * (1140 + p.share_bytes)
    c, s, failed = decrypt_records(p, ct, key, kem=KEM_HYBRID)
    assert failed == 0 and c.tolist() == [1, 4] and s.tolist() == [7, 3]
    moved = bytearray(ct)
    moved[0] ^= 1  # coordinate 1 -> 0: the info differs, the record does not open
    assert decrypt_records(p, bytes(moved), key, kem=KEM_HYBRID)[2] == 1


def test_parallel_decryption_gives_the_same_exact_sums(enc_setup):
    from shuffledp.analyzers.heatmap.modular import accumulate_mixed

    p, key, batches = enc_setup
    s = Shuffler(p, encrypted=True)
    for b in batches:
        s.submit(b)
    mixed = _mix_bytes(s)
    one = accumulate_mixed(p, mixed, key=key, workers=1)
    two = accumulate_mixed(p, mixed, key=key, workers=2, chunk_records=97)
    np.testing.assert_array_equal(one.accumulator.sums % p.q, two.accumulator.sums % p.q)
    np.testing.assert_array_equal(one.accumulator.counts, two.accumulator.counts)
    assert one.n_failed == two.n_failed == 0


def test_fuzz_quick_slice():
    # a slice of bench/fuzz_wire.py: no crash anywhere, no silent acceptance on the encrypted
    # path; on plaintext only the mutations a plaintext batch cannot detect by design
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "fuzz_wire.py"
    spec = importlib.util.spec_from_file_location("fuzz_wire", path)
    fz = importlib.util.module_from_spec(spec)
    import sys

    sys.modules["fuzz_wire"] = fz
    spec.loader.exec_module(fz)
    out = fz.run(240, seed=7)
    assert "crashes" not in out
    for (path_, side, kind), cnt in ((k, v) for k, v in out.items() if k != "crashes"):
        if path_ == "enc" or side == "mixed" or kind not in fz.PLAINTEXT_UNDETECTABLE:
            assert cnt["silent"] == 0, (path_, side, kind, cnt)
        if kind != "copy_from_other" and (path_ == "enc" or side == "mixed"
                                           or kind not in fz.PLAINTEXT_UNDETECTABLE):
            # only a splice kept because it reached the shuffler before the batch it copied
            # from is taken as its sender's input (first kept wins)
            assert cnt["kept_edit"] == 0, (path_, side, kind, cnt)
    tot = fz.summarise(out)
    assert tot["enc"]["rejected"] > 0 and tot["enc"]["dropped"] > 0


# ----- copies cannot veto a release; every drop names its reason
@pytest.fixture(scope="module")
def enc_no_headroom():
    """Encrypted batches of 4 users under dropout 0: one lost honest user refuses the round."""
    p = params_for(Grid(3, 2), n=4, B=2, dropout=0.0)
    key = generate_analyzer_key()
    batches = list(user_batches(p, random_users(Grid(3, 2), 4, seed=2), np.arange(4), rng=3,
                                analyzer_public=public_bytes(key)))
    return p, key, batches


def _reordered(p, batch, seed=0):
    recs = _enc_records(p, batch)
    order = np.random.default_rng(seed).permutation(len(recs))
    return batch[:64] + b"".join(recs[i] for i in order)


@pytest.mark.parametrize("when", ["after", "before", "before-last"])
def test_reordered_copy_under_another_sender_cannot_veto_the_release(enc_no_headroom, when):
    # a copy of an honest batch with its records reordered, submitted under
    # another id, made the shuffler drop both as duplicate_record, and the analyzer (noise
    # planned for all n users) then refused the whole round. Now the copy is a replay
    # whichever comes first, never takes one of the n places, and the release is exact.
    from shuffledp.analyzers.heatmap.modular import accumulate_mixed, release_mixed

    p, key, batches = enc_no_headroom
    copy = _reordered(p, batches[0])
    assert copy != batches[0]
    subs = [(b, f"user{k}") for k, b in enumerate(batches)]
    pos = {"after": 1, "before": 0, "before-last": 3}[when]
    subs.insert(pos, (copy, "mallory"))
    s = Shuffler(p, encrypted=True)
    for data, sender in subs:
        s.submit(data, sender=sender)
    assert s.report.rejected == {"replayed_batch": 1}
    assert s.report.n_forwarded == 4 and s.report.n_removed == 0
    mixed = _mix_bytes(s)
    release_mixed(p, mixed, key=key, workers=1)  # not refused
    ref = Shuffler(p, encrypted=True)
    for b in batches:
        ref.submit(b)
    want = accumulate_mixed(p, _mix_bytes(ref), key=key, workers=1)
    got = accumulate_mixed(p, mixed, key=key, workers=1)
    assert got.header.n_users == 4
    np.testing.assert_array_equal(got.accumulator.modular_sums(4),
                                  want.accumulator.modular_sums(4))


def test_partial_copy_after_the_original_cannot_knock_it_out(enc_no_headroom):
    # one record of an honest batch copied into an attacker's otherwise
    # valid batch, submitted later: the attacker's batch goes, the honest one stays, and the
    # honest users' release is exact (the old rule removed both and the round was refused)
    from shuffledp.analyzers.heatmap.modular import accumulate_mixed, release_mixed

    p, key, batches = enc_no_headroom
    forged = _spliced(p, [batches[3], batches[0]])  # batch 3 with one record of batch 0
    s = Shuffler(p, encrypted=True)
    for k in range(3):
        assert s.submit(batches[k], sender=k)
    assert s.submit(forged, sender="mallory")  # envelope fine: caught at mixing
    mixed = _mix_bytes(s)
    assert s.report.rejected == {"copied_record": 1} and s.report.n_removed == 1
    ref = Shuffler(p, encrypted=True)
    for k in range(3):
        ref.submit(batches[k])
    want = accumulate_mixed(p, _mix_bytes(ref), key=key, workers=1)
    got = accumulate_mixed(p, mixed, key=key, workers=1)
    np.testing.assert_array_equal(got.accumulator.modular_sums(3),
                                  want.accumulator.modular_sums(3))
    p_headroom = params_for(Grid(3, 2), n=4, B=2, dropout=0.25)
    assert p_headroom.n_min == 3  # with a declared dropout the honest three are released
    from shuffledp.analyzers.heatmap.modular import ReleaseRefused

    with pytest.raises(ReleaseRefused, match="n_min = 4"):  # dropout 0: no headroom at all
        release_mixed(p, mixed, key=key, workers=1)


def _too_short(p, batch, rb, k=1):
    """A well-formed batch whose header counts k fewer records (the last k cut off)."""
    h = Header.unpack(batch[:64])
    return Header(h.kind, rb, h.digest, h.n_records - k, 1, 0).pack() + batch[64 : -k * rb]


@pytest.mark.parametrize("encrypted", [False, True], ids=["plaintext", "encrypted"])
def test_every_dropped_submission_names_its_reason(setup, enc_setup, encrypted):
    # a too-short batch (well-formed header counting fewer records) was
    # dropped with nothing in `rejected`; every submission not forwarded now has exactly one
    # named reason there
    from shuffledp.protocol.shuffler import REJECT_REASONS

    p, batches = (enc_setup[0], enc_setup[2]) if encrypted else (setup[0], setup[2])
    rb = encrypted_record_bytes(p) if encrypted else p.record_bytes
    good = batches[0]
    bad = {
        "too_short": (_too_short(p, good, rb), "incomplete"),
        "header_only": (good[:64], "truncated"),
        "cut_mid_record": (good[: 64 + rb + rb // 2], "truncated"),
        "cut_last_byte": (good[:-1], "truncated"),
        "shorter_than_header": (good[:10], "malformed"),
        "empty": (b"", "malformed"),
        "trailing_byte": (good + b"\0", "malformed"),
    }
    s = Shuffler(p, encrypted=encrypted)
    for name, (data, reason) in bad.items():
        before = s.report.rejected.copy()
        assert not s.submit(data, sender=name)
        delta = s.report.rejected - before
        assert dict(delta) == {reason: 1}, name
    assert s.submit(good, sender="honest")
    h, _ = s.mix()
    rep = s.report.to_dict()
    assert all(k in REJECT_REASONS and k for k in rep["rejected"])
    assert sum(rep["rejected"].values()) == len(bad) == rep["n_dropped"]
    assert (h.n_users, h.n_dropped) == (1, len(bad))


def test_default_dropout_leaves_headroom_so_one_lost_user_does_not_sink_the_round():
    # the default declared dropout was 0, so a single user lost or removed
    # by the shuffler made the analyzer refuse the round (noise planned for all n users)
    from shuffledp.analyzers.heatmap.modular import release_mixed
    from shuffledp.protocol.params import DEFAULT_DROPOUT

    grid = Grid(3, 2)
    p = derive_params(grid, 20, epsilon=2.0, delta=1e-5, B=2)
    assert DEFAULT_DROPOUT > 0 and p.dropout == DEFAULT_DROPOUT
    assert p.n_min == 19 < p.n
    assert derive_params(grid, 20, epsilon=2.0, delta=1e-5, B=2, dropout=0.0).n_min == 20
    batches = list(user_batches(p, random_users(grid, 20), np.arange(20), rng=4))
    s = Shuffler(p)
    for k, b in enumerate(batches[:19]):
        assert s.submit(b, sender=k)
    s.missing(1)
    import io

    buf = io.BytesIO()
    s.mix_to(buf)
    rel = release_mixed(p, buf.getvalue())
    assert (rel.protocol["n_users"], rel.protocol["n_dropped"]) == (19, 1)
    assert rel.protocol["dropout"] == DEFAULT_DROPOUT


def _le_records(vals, rb):
    return vals.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :rb].reshape(-1).copy()


def test_inside_out_gather_permute_is_uniform():
    # the plaintext buckets' permutation (read from several parts and placed as read): all
    # 24 orders of 4 records, chi-square at p > 1e-6 (false-failure rate 1e-6), fixed key
    from shuffledp.protocol.shuffler import _gather_permute

    src = SecureRandom.for_testing(12)
    rb = 5
    vals = np.array([7, 12345, 1 << 33, (1 << 40) - 1], dtype=np.uint64)  # ascending
    # two parts with a gap between them, as two spreads' parts of one bucket
    buf = np.zeros(4 * rb + 3 + 8, np.uint8)
    body = _le_records(vals, rb)
    buf[: 2 * rb] = body[: 2 * rb]
    buf[2 * rb + 3 : 4 * rb + 3] = body[2 * rb :]
    at = np.array([[0], [2 * rb + 3]], dtype=np.int64)
    cnt = np.array([[2], [2]], dtype=np.int64)
    index = {q: i for i, q in enumerate(itertools.permutations(range(4)))}
    counts = np.zeros(24)
    out = np.empty(4, np.uint64)
    for _ in range(24_000):
        assert _gather_permute(buf, at, cnt, 0, rb, src.uint32(3 + 64), out) == 4
        counts[index[tuple(np.searchsorted(vals, out).tolist())]] += 1
    assert stats.chisquare(counts).pvalue > 1e-6


@pytest.mark.parametrize("n", [1, 2, 37, 5000])
def test_inside_out_permutation_continues_where_the_words_ran_out(n):
    # words cut short (also at 0 and 1 word) then resupplied: the permutation the full words
    # give, and the bucket's records, each once
    from shuffledp.protocol.shuffler import (
        _ONE_PART,
        _fisher_yates_up,
        _gather_permute,
        _permute_bucket,
    )

    rb = 5
    vals = np.random.default_rng(n).integers(0, 1 << 40, n, dtype=np.uint64)
    flat = _le_records(vals, rb)  # no spare bytes: the last records are read byte by byte
    cnt = np.full((1, 1), n, dtype=np.int64)
    words = SecureRandom.for_testing(n).uint32(n + 64)
    full = np.empty(n, np.uint64)
    assert _gather_permute(flat, _ONE_PART, cnt, 0, rb, words, full) == n
    np.testing.assert_array_equal(np.sort(full), np.sort(vals))
    for cut in sorted({0, 1, n // 2, max(0, n - 2)}):
        part = np.empty(n, np.uint64)
        i = int(_gather_permute(flat, _ONE_PART, cnt, 0, rb, words[:cut], part))
        assert i == min(n, cut + 1)
        used = max(0, i - 1)  # words of places 1 .. i-1 (none rejected with these keys)
        if i < n:
            assert _fisher_yates_up(part, i, words[used:]) == n
        np.testing.assert_array_equal(part, full)
    # _permute_bucket (mix_to) gives the same order as the values read as they are permuted
    res = _permute_bucket(flat.reshape(n, rb), words, rb)
    assert res[0] is not None
    np.testing.assert_array_equal(res[0].reshape(-1), _le_records(full, rb))


def test_inside_out_gather_permute_refuses_a_short_output():
    from shuffledp.protocol.shuffler import _ONE_PART, _gather_permute

    flat = np.zeros(50, np.uint8)
    with pytest.raises(ValueError, match="shorter than the bucket"):
        _gather_permute(flat, _ONE_PART, np.full((1, 1), 10, np.int64), 0, 5,
                        np.zeros(64, np.uint32), np.empty(9, np.uint64))
