"""The plaintext wire path's one-pass kernels agree with their plain numpy definitions.

frame_shares (user batch straight from shares), the shuffler's one-pass check and canonical
fingerprint, the bucket scatter / permuted gather with 8-byte record moves, the analyzer's
sums straight from wire bytes, inspection on other threads and the pipe between the
shuffler and the analyzer. Deterministic (fixed seeds and test keys): no false failures.
"""

from __future__ import annotations

import hashlib
import os
import threading

import numba
import numpy as np
import pytest
from shuffle_helpers import params_for, random_users

from shuffledp import Grid
from shuffledp.analyzers.heatmap.modular import ModularAccumulator
from shuffledp.encoders.encoder import encode_shares, frame_messages, messages
from shuffledp.protocol.shuffler import Shuffler, _Buckets, _gather_rows, _scatter_by_label
from shuffledp.protocol.wire import (
    HEADER_SIZE,
    KIND_USER,
    Header,
    _load8,
    decode_batch,
    encode_batch,
    frame_shares,
    unpack_records,
)
from shuffledp.randomness import SecureRandom, UserStreams


@pytest.fixture(scope="module")
def small():
    p = params_for(Grid(6, 5), n=4, B=8)
    users = random_users(Grid(6, 5), 4)
    shares = encode_shares(p, users, np.arange(4), UserStreams(1), SecureRandom.for_testing(2))
    return p, shares


@numba.njit
def _loads(body):
    out = np.empty(body.size - 7, np.uint64)
    for b in range(out.size):
        out[b] = _load8(body, np.uint64(b))
    return out


def test_load8_reads_eight_little_endian_bytes_at_every_offset():
    """The one unaligned load: every offset (aligned or not, up to the last 8 bytes) of an
    array that starts at an odd address and of a read-only one gives int.from_bytes."""
    raw = np.random.default_rng(3).integers(0, 256, 75, dtype=np.uint8)
    for body in (raw[3:], np.frombuffer(raw.tobytes(), np.uint8)):
        want = [int.from_bytes(body[b : b + 8].tobytes(), "little") for b in range(body.size - 7)]
        assert _loads(body).tolist() == want


def _canonical_records(p, shares) -> np.ndarray:
    """The records of one user's batch in canonical order: its messages sorted (numpy)."""
    return np.sort(messages(p, shares).astype(np.uint64))


def test_frame_shares_writes_the_bytes_of_frame_messages(small):
    p, shares = small
    for sh in shares:
        assert frame_shares(p, sh) == frame_messages(p, messages(p, sh))
    with pytest.raises(ValueError, match="shape"):
        frame_shares(p, shares[0][:, :-1])
    bad = shares[0].copy()
    bad[1, 2] = p.q
    with pytest.raises(ValueError, match="q ="):
        frame_shares(p, bad)


def test_frame_shares_writes_the_records_in_ascending_order(small, monkeypatch):
    from shuffledp.protocol import wire

    p, shares = small
    want = _canonical_records(p, shares[0])
    h, raw = decode_batch(frame_shares(p, shares[0]))
    assert h.version == wire.VERSION_CANONICAL == 5
    np.testing.assert_array_equal(unpack_records(raw, h.record_bytes), want)
    # the fallback for a long network (a numpy sort of the messages) writes the same bytes
    fast = frame_shares(p, shares[1])
    monkeypatch.setattr(wire, "_NETWORK_MAX_R", 1)
    assert frame_shares(p, shares[1]) == fast


@pytest.mark.parametrize("n", range(1, 13))
def test_sorting_network_sorts_every_0_1_input(n):
    from shuffledp.protocol.wire import sorting_network

    net = sorting_network(n)
    # the 0-1 principle (Knuth 5.3.4, Thm. Z): a network that sorts every 0-1 input sorts all
    x = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
    for a, b in net:
        lo, hi = np.minimum(x[:, a], x[:, b]), np.maximum(x[:, a], x[:, b])
        x[:, a], x[:, b] = lo, hi
    assert (np.diff(x, axis=1) >= 0).all()
    assert (net[:, 0] < net[:, 1]).all() and (net < n).all()


def test_fingerprint_is_the_canonical_bytes_and_a_reordered_copy_is_refused(small):
    p, shares = small
    s = Shuffler(p)
    data = frame_shares(p, shares[0])
    rows = np.frombuffer(data, np.uint8, offset=HEADER_SIZE).reshape(-1, p.record_bytes)
    a = s.inspect(data)
    assert a.reason is None
    assert a.fingerprint == hashlib.sha256(data[HEADER_SIZE:]).digest()
    assert s.inspect(frame_shares(p, shares[1])).fingerprint != a.fingerprint
    shuffled = data[:HEADER_SIZE] + rows[np.random.default_rng(3).permutation(len(rows))].tobytes()
    swapped = bytearray(data)  # two records of one coordinate (distinct shares) swapped
    w = rows[:2].copy()
    assert (w[0] != w[1]).any()
    swapped[HEADER_SIZE: HEADER_SIZE + 2 * p.record_bytes] = w[::-1].tobytes()
    for bad in (shuffled, bytes(swapped)):
        assert s.inspect(bad).reason == "non_canonical"
    # a replay is refused whatever its order: exact copies by the fingerprint, reordered ones
    # as non-canonical; neither takes a place nor is forwarded
    assert s.submit(data, sender=1)
    assert not s.submit(data, sender=2)
    assert not s.submit(shuffled, sender=3)
    assert not s.submit(bytes(swapped), sender=4)
    assert s.report.rejected["replayed_batch"] == 1
    assert s.report.rejected["non_canonical"] == 2
    assert s.report.n_forwarded == 1 and s.report.n_failed_users == 3
    assert s.submit(frame_messages(p, messages(p, shares[1])), sender=5)  # sorted: accepted


def test_one_pass_spread_equals_the_scatter_of_the_checked_records(small):
    p, shares = small
    s = Shuffler(p, memory_limit=1 << 20)
    s._buckets.k = 8  # spread over several buckets
    data = frame_shares(p, shares[2])
    rows = np.frombuffer(data, np.uint8, offset=HEADER_SIZE).reshape(-1, p.record_bytes)
    labels = np.random.default_rng(5).integers(0, 2**32, rows.shape[0]).astype(np.uint32)
    code, spread = s._check_canonical(rows, labels)
    want = np.empty_like(rows)
    want_bounds = _scatter_by_label(rows, np.zeros(0, np.uint8), labels, 8, want)
    assert code == 0 and spread.gap == 8 - p.record_bytes
    np.testing.assert_array_equal(spread.bounds, want_bounds)
    for i in range(8):  # bucket by bucket, with the gaps between them
        np.testing.assert_array_equal(spread.part(i, p.record_bytes),
                                      want[want_bounds[i] : want_bounds[i + 1]].reshape(-1))


@pytest.mark.parametrize("edit, reason", [
    ("share", "share_out_of_range"), ("coord", "coordinate_out_of_range"),
    ("both", "share_out_of_range"), ("swap", "incomplete"), ("order", "non_canonical"),
])
def test_one_pass_check_names_the_same_reason(small, edit, reason):
    p, shares = small
    rec = messages(p, shares[0]).astype(np.uint64)
    sb = np.uint64(p.share_bits)
    if edit in ("share", "both"):
        rec[5] = (rec[5] >> sb << sb) | np.uint64(p.q)
    if edit in ("coord", "both"):
        rec[9] = (np.uint64(p.m) << sb) | (rec[9] & np.uint64((1 << p.share_bits) - 1))
    if edit == "swap":  # coordinate 0 once more, coordinate 1 once less
        rec[1] = rec[0]
    assert p.m < 1 << (p.record_bits - p.share_bits)  # coordinate m fits in a record
    assert Shuffler(p).inspect(frame_messages(p, rec)).reason == (
        None if edit == "order" else reason)
    # written in the device's (unsorted) order, the batch is refused by the first reason
    # that applies, non_canonical when nothing else does
    raw = encode_batch(Header(KIND_USER, p.record_bytes, p.digest, rec.size), rec)
    assert Shuffler(p).inspect(raw).reason == ("non_canonical" if edit == "order" else reason)


@pytest.mark.parametrize("rb", range(1, 9))
def test_scatter_and_gather_move_whole_records(rb):
    rng = np.random.default_rng(rb)
    for n in (0, 1, 2, 7, 1000):
        rows = rng.integers(0, 256, (n, rb), dtype=np.uint8)
        labels = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        for k in (1, 4, 64):
            out = np.empty_like(rows)
            bounds = _scatter_by_label(rows, np.zeros(0, np.uint8), labels, k, out)
            lab = labels.astype(np.int64) & (k - 1)
            order = np.argsort(lab, kind="stable")
            np.testing.assert_array_equal(out, rows[order])
            np.testing.assert_array_equal(bounds, np.r_[0, np.cumsum(np.bincount(lab,
                                                                                 minlength=k))])
        perm = rng.permutation(n).astype(np.int64)
        got = np.empty_like(rows)
        _gather_rows(rows, perm, rb, got)
        np.testing.assert_array_equal(got, rows[perm])


@pytest.mark.parametrize("rb", range(1, 9))
def test_sums_from_wire_bytes_equal_sums_of_unpacked_records(small, rb):
    p, _ = small
    rng = np.random.default_rng(10 + rb)
    vals = rng.integers(0, 2 ** min(63, 8 * rb), 5000, dtype=np.uint64)
    vals[:50] = (rng.integers(0, p.m, 50).astype(np.uint64) << np.uint64(p.share_bits)) | \
        rng.integers(0, p.q, 50).astype(np.uint64)
    vals &= np.uint64((1 << (8 * rb)) - 1) if rb < 8 else np.uint64(2**64 - 1)
    raw = vals.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :rb].copy()
    a, b = ModularAccumulator(p, threads=1), ModularAccumulator(p, threads=1)
    assert a.add_raw(raw.tobytes(), rb) == b.add_records(vals)
    np.testing.assert_array_equal(a.sums % p.q, b.sums % p.q)
    np.testing.assert_array_equal(a.counts, b.counts)
    assert a.messages == b.messages == vals.size
    with pytest.raises(ValueError, match="record_bytes"):
        a.add_raw(raw.tobytes(), 9)
    if rb > 1:
        with pytest.raises(ValueError, match="whole"):
            a.add_raw(raw.tobytes()[:-1], rb)


@pytest.mark.parametrize("rb", range(1, 9))
def test_sums_from_wire_bytes_match_numpy_and_agree_across_threads(small, rb):
    """add_raw (one compiled loop per record size, the last records read byte by byte)
    against a numpy reference of the same records, invalid ones mixed in; and above 2^22
    records (split over threads) the same sums, counts and rejections on 1 and 2 threads, as
    integers (add_raw leaves them reduced mod q)."""
    p, _ = small
    rng = np.random.default_rng(40 + rb)
    n = 5_003 if rb != 5 else (1 << 22) + 13
    top = 2 ** min(63, 8 * rb)
    vals = rng.integers(0, top, n, dtype=np.uint64)
    k = n // 2  # half of them valid where the record size allows it
    valid = (rng.integers(0, p.m, k).astype(np.uint64) << np.uint64(p.share_bits)) | \
        rng.integers(0, p.q, k).astype(np.uint64)
    vals[:k] = valid & np.uint64(top - 1)
    rng.shuffle(vals)
    raw = vals.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :rb].tobytes()
    a = vals >> np.uint64(p.share_bits)
    w = vals & np.uint64((1 << p.share_bits) - 1)
    ok = (a < p.m) & (w < p.q)
    want_cnt = np.bincount(a[ok].astype(np.int64), minlength=p.m)
    want_sum = np.bincount(a[ok].astype(np.int64), weights=w[ok].astype(np.float64),
                           minlength=p.m).astype(np.int64) % p.q  # exact below 2^53
    got = []
    for threads in (1, 2):
        acc = ModularAccumulator(p, threads=threads)
        assert acc.add_raw(raw, rb) == int((~ok).sum()) == acc.rejected
        np.testing.assert_array_equal(acc.counts, want_cnt)
        np.testing.assert_array_equal(acc.sums, want_sum)
        got.append(acc)
    assert got[0].messages == got[1].messages == n


@pytest.mark.parametrize("chunk", [None, 700, 0])
def test_carry_sums_equal_add_records(small, chunk):
    """Buckets of many sizes handed to the carry accumulator (the wire path's analyzer, one
    per thread): the same sums, counts, rejections and messages as add_records of all the
    records; with a small flush interval (700 records: flushes between and across buckets)
    and with none (every bucket through the fallback)."""
    from shuffledp.analyzers.heatmap.modular import _CarrySums

    p, _ = small
    rng = np.random.default_rng(chunk or 1)
    vals = (rng.integers(0, p.m + 1, 30_000).astype(np.uint64) << np.uint64(p.share_bits)) | \
        rng.integers(0, p.q + 2, 30_000).astype(np.uint64)  # some out of range: rejected
    ref = ModularAccumulator(p, threads=1)
    bad = ref.add_records(vals)
    assert bad > 0
    carry = _CarrySums(p)
    if chunk is not None:
        carry._chunk = chunk
    cuts = np.sort(rng.integers(0, vals.size, 60))
    for part in np.split(vals, cuts):
        carry.add(part)
    for _ in range(2):  # into() leaves it empty: a second one adds nothing
        acc = ModularAccumulator(p, threads=1)
        carry.into(acc)
        if _ == 0:
            np.testing.assert_array_equal(acc.sums, ref.sums)
            np.testing.assert_array_equal(acc.counts, ref.counts)
            assert acc.rejected == bad and acc.messages == vals.size
        else:
            assert not acc.counts.any() and acc.rejected == acc.messages == 0


def test_inspection_on_other_threads_mixes_the_same_records(small):
    p, shares = small
    batches = [frame_shares(p, sh) for sh in shares]

    def mixed(pre: bool, workers: int):
        s = Shuffler(p, source=SecureRandom.for_testing(4), workers=workers, memory_limit=1 << 20)
        for k, b in enumerate(batches):
            seen = s.inspect(b, source=SecureRandom.for_testing(20 + k)) if pre else None
            assert s.submit(b, sender=k, inspected=seen)
        assert not s.submit(batches[0], sender=99, inspected=s.inspect(batches[0]))
        assert s.report.rejected["replayed_batch"] == 1
        return s.mix()

    (h1, r1), (_h2, r2), (h3, r3) = mixed(False, 1), mixed(False, 2), mixed(True, 2)
    np.testing.assert_array_equal(r1, r2)  # same source: the same mixed batch for any threads
    pooled = np.sort(np.concatenate([messages(p, sh).astype(np.uint64) for sh in shares]))
    np.testing.assert_array_equal(np.sort(r1), pooled)
    np.testing.assert_array_equal(np.sort(r3), pooled)
    assert h1.n_users == h3.n_users == 4


@pytest.mark.parametrize("workers, spill", [(1, False), (2, False), (1, True), (2, True)])
def test_mix_each_hands_over_what_mix_to_writes(small, workers, spill, tmp_path):
    """For one source, mix_each hands the consumer the records mix_to writes (in bucket
    order on one thread; the same multiset on several), with the same counts, whether the
    buckets stayed in memory or went to files."""
    import io

    p, shares = small
    batches = [frame_shares(p, sh) for sh in shares]

    def shuffler():
        s = Shuffler(p, source=SecureRandom.for_testing(8), workers=workers, memory_limit=1 << 20)
        # several buckets; with spill, flushed to files after every batch
        s._buckets = _Buckets(4, 1000 if spill else 1 << 20, str(tmp_path), p.record_bytes)
        for k, b in enumerate(batches):
            assert s.submit(b, sender=k)
        return s

    buf = io.BytesIO()
    h_file = shuffler().mix_to(buf)
    _, raw = decode_batch(buf.getvalue(), None)
    got, lock = [], threading.Lock()

    def consume(rows):
        with lock:
            got.append(rows.copy())

    here_shuffler = shuffler()
    assert (here_shuffler._buckets.dir is not None) == spill
    h_here = here_shuffler.mix_each(consume)
    assert (h_here.n_records, h_here.n_users, h_here.n_dropped) == \
        (h_file.n_records, h_file.n_users, h_file.n_dropped) == (4 * p.r * p.m, 4, 0)
    here = np.concatenate(got)
    file = unpack_records(raw, p.record_bytes).astype(np.uint64)
    if workers == 1:
        np.testing.assert_array_equal(here, file)
    np.testing.assert_array_equal(np.sort(here), np.sort(file))


def test_a_failing_analyzer_surfaces_its_error_from_the_wire_path(monkeypatch):
    from shuffledp.protocol import runner

    def broken(self, values):
        raise RuntimeError("analyzer failed mid-batch")

    monkeypatch.setattr(runner._ThreadSums, "__call__", broken)
    users = random_users(Grid(6, 5), 4)
    p = params_for(Grid(6, 5), n=4, B=8)
    with pytest.raises(RuntimeError, match="mid-batch"):
        runner.shuffle_heatmap(users, epsilon=2.0, delta=1e-5, B=8, params=p, rng=1,
                               wire=True, workers=2)


@pytest.mark.parametrize("q", [3, 161_271, (1 << 29) - 3, (1 << 31) - 1])
def test_one_word_accumulator_equals_the_exact_sums(q):
    """The analyzer's one-word accumulator (count << 40 | sum, flushed every chunk records)
    gives the exact sums and counts of a plain integer reference, on records with invalid
    coordinates and shares mixed in, across several flushes (small q: chunks of 2^24 - 1
    records; q near 2^31: too large for chunks, the two-field path); from integers and from
    wire bytes alike."""
    from shuffledp.analyzers.heatmap.modular import (
        _accumulate_packed,
        _accumulate_raw,
        _word_chunk,
    )

    rng = np.random.default_rng(q)
    m, share_bits, n = 37, 31, 60_000
    a = rng.integers(0, m + 2, n).astype(np.uint64)  # a >= m: rejected
    w = rng.integers(0, q + 3, n).astype(np.uint64)  # w >= q: rejected
    rec = (a << np.uint64(share_bits)) | w
    ok = (a < m) & (w < q)
    want_sum = np.zeros(m, dtype=object)
    want_cnt = np.zeros(m, dtype=np.int64)
    for ai, wi in zip(a[ok].tolist(), w[ok].tolist(), strict=True):
        want_sum[ai] += wi
        want_cnt[ai] += 1
    chunk = _word_chunk(q)
    assert (chunk == 0) == (q > (1 << 28)) and chunk < (1 << 24)
    for c in sorted({chunk, min(chunk, 4096) if chunk else 0}):  # several flushes too
        both = np.zeros((m, 2), np.int64)
        assert _accumulate_packed(rec, share_bits, m, q, both, c) == int((~ok).sum())
        assert both[:, 0].astype(object).tolist() == want_sum.tolist()
        assert both[:, 1].tolist() == want_cnt.tolist()
        raw = rec.astype("<u8").view(np.uint8)
        both2 = np.zeros((m, 2), np.int64)
        assert _accumulate_raw(raw, 8, share_bits, m, q, both2, c) == int((~ok).sum())
        assert (both2 == both).all()


def _sums_in_child(p, body, out):
    acc = ModularAccumulator(p, threads=2)
    acc.add_raw(body, 1)
    out.put((acc.sums.tolist(), acc.counts.tolist()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_accumulator_threads_work_in_a_forked_child(small):
    """The accumulator's thread pool is process-wide; a child forked after the parent used
    it (none of the parent's threads exist there) must get its own, not wait forever."""
    import multiprocessing

    p, _ = small
    body = np.random.default_rng(3).integers(0, 256, (1 << 22) + 5, dtype=np.uint8)
    parent = ModularAccumulator(p, threads=2)
    parent.add_raw(body, 1)  # 2^22 records or more: two parts on the pool
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_sums_in_child, args=(p, body, out))
    child.start()
    try:
        sums, counts = out.get(timeout=120)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert sums == parent.sums.tolist() and counts == parent.counts.tolist()
