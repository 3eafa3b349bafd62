"""Bit-packed records (wire version 3, kinds 5-6): exact widths, round trips, malformed input.

Reference: the body of n records of b bits is the little-endian bytes of the Python integer
sum_i v_i 2^(i b), computed independently of the numpy packing.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffledp import Grid
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.wire import (
    HEADER_SIZE,
    KIND_MIXED,
    KIND_MIXED_PACKED,
    KIND_USER,
    KIND_USER_PACKED,
    BatchWriter,
    Header,
    WireError,
    decode_batch,
    encode_batch,
    iter_records,
    pack_bits,
    read_header,
    unpack_bits,
)

DIGEST = bytes(range(16))


def _reference(values: list[int], bits: int) -> bytes:
    acc = 0
    for i, x in enumerate(values):
        acc |= x << (i * bits)
    return acc.to_bytes(-(-len(values) * bits // 8), "little")


@st.composite
def _records(draw):
    bits = draw(st.integers(min_value=1, max_value=64))
    vals = draw(st.lists(st.integers(min_value=0, max_value=2**bits - 1), max_size=70))
    return bits, vals


@given(_records())
@settings(max_examples=300, deadline=None)
def test_pack_bits_matches_big_integer_reference_and_round_trips(case):
    bits, vals = case
    body = pack_bits(np.asarray(vals, dtype=np.uint64), bits)
    assert body == _reference(vals, bits)
    assert len(body) == -(-len(vals) * bits // 8)
    assert unpack_bits(body, bits, len(vals)).tolist() == vals


@given(_records(), st.integers(min_value=1, max_value=20), st.booleans())
@settings(max_examples=150, deadline=None)
def test_packed_batch_chunked_round_trip(case, chunk, mixed):
    bits, vals = case
    rec = np.asarray(vals, dtype=np.uint64)
    kind = KIND_MIXED_PACKED if mixed else KIND_USER_PACKED
    h = Header(kind, bits, DIGEST, rec.size, 3 if mixed else 1)
    assert h.version == 3 and h.body_bytes == -(-rec.size * bits // 8)
    f = io.BytesIO()
    with BatchWriter(f, h) as w:
        for i in range(0, rec.size, chunk):
            w.write(rec[i : i + chunk])
    data = f.getvalue()
    assert data == encode_batch(h, rec)
    assert len(data) == HEADER_SIZE + h.body_bytes + (32 if mixed else 0)
    h2, out = decode_batch(data)
    assert h2 == h and out.tolist() == vals
    f.seek(0)
    got = list(iter_records(f, read_header(f), chunk_records=chunk))
    assert np.concatenate(got or [np.zeros(0, np.uint64)]).tolist() == vals


def test_malformed_packed_lengths_and_padding_are_rejected():
    rec = np.arange(5, dtype=np.uint64)  # 5 x 3 bits = 15 bits -> 2 bytes, 1 padding bit
    h = Header(KIND_USER_PACKED, 3, DIGEST, 5)
    data = encode_batch(h, rec)
    assert len(data) == HEADER_SIZE + 2
    for bad in (data[:-1], data + b"\0"):
        with pytest.raises(WireError, match="header promises"):
            decode_batch(bad)
    with pytest.raises(WireError, match="padding"):
        decode_batch(data[:-1] + bytes([data[-1] | 0x80]))
    with pytest.raises(WireError, match="take 2 bytes, got 3"):
        unpack_bits(b"\0\0\0", 3, 5)
    with pytest.raises(WireError, match="truncated"):
        list(iter_records(io.BytesIO(data[HEADER_SIZE:-1]), h))
    with pytest.raises(ValueError, match="does not fit in 3 bits"):
        pack_bits(np.array([8]), 3)
    with pytest.raises(ValueError, match="bits=65"):
        pack_bits(np.array([1]), 65)
    with pytest.raises(ValueError, match="record_bytes=65"):
        Header(KIND_USER_PACKED, 65, DIGEST, 1)
    # a version-2 kind cannot claim version 3 and vice versa
    with pytest.raises(ValueError, match="version=3"):
        Header(KIND_USER, 4, DIGEST, 1, version=3)
    raw = bytearray(h.pack())
    raw[4] = 2
    with pytest.raises(WireError, match="version"):
        Header.unpack(bytes(raw))


def test_reader_still_accepts_version_2_batches():
    h = Header(KIND_MIXED, 5, DIGEST, 3, 1)
    assert h.version == 2
    h2, rec = decode_batch(encode_batch(h, np.array([1, 2, 2**40 - 1], dtype=np.uint64)))
    assert h2.version == 2 and h2 == h


def test_a_version_2_plaintext_user_batch_is_refused():
    # version 5 of kind 1 requires the canonical record order; version 2 did not
    h = Header(KIND_USER, 5, DIGEST, 3)
    assert h.version == 5
    raw = bytearray(h.pack())
    raw[4] = 2
    with pytest.raises(WireError, match="version"):
        Header.unpack(bytes(raw))


def test_packed_bytes_per_user_is_what_the_wire_writes():
    p = derive_params(Grid(40, 30), 20, epsilon=5.0, delta=1e-5, B=16)
    vals = np.zeros(p.messages_per_user, dtype=np.uint64)
    h = Header(KIND_USER_PACKED, p.record_bits, p.digest, p.messages_per_user)
    assert len(encode_batch(h, vals)) == p.packed_bytes_per_user
    h2 = Header(KIND_USER, p.record_bytes, p.digest, p.messages_per_user)
    assert len(encode_batch(h2, vals)) == p.bytes_per_user
    assert p.packed_bytes_per_user - HEADER_SIZE == -(-p.messages_per_user * p.record_bits // 8)
    assert p.figures()["packed_bytes_per_user"] == p.packed_bytes_per_user


def test_coordinate_major_flag_only_on_packed_kinds_and_survives_tagging():
    from shuffledp.protocol.wire import FLAG_COORD_MAJOR, KIND_MIXED

    with pytest.raises(ValueError, match="flags=2 on kind 2"):
        Header(KIND_MIXED, 4, DIGEST, 1, flags=FLAG_COORD_MAJOR)
    h = Header(KIND_MIXED_PACKED, 7, DIGEST, 3, 1, flags=FLAG_COORD_MAJOR)
    data = encode_batch(h, np.array([1, 2, 3], dtype=np.uint64), mac_key=bytes(16))
    h2, rec = decode_batch(data, mac_key=bytes(16))
    assert h2.coordinate_major and h2.keyed and rec.tolist() == [1, 2, 3]
