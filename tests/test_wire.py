"""Wire format: header layout, chunked round trips, malformed input."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffledp.protocol.wire import (
    HEADER_SIZE,
    KIND_MIXED,
    KIND_USER,
    BatchWriter,
    Header,
    WireError,
    decode_batch,
    encode_batch,
    iter_records,
    read_header,
)

DIGEST = bytes(range(16))


def test_header_layout_is_64_bytes_little_endian():
    h = Header(KIND_MIXED, 4, DIGEST, 7, 3, 1, flags=1)
    b = h.pack()
    assert len(b) == HEADER_SIZE == 64
    assert b[:4] == b"SDPW" and b[4:6] == (2).to_bytes(2, "little")
    assert b[6] == KIND_MIXED and b[7] == 4 and b[8:24] == DIGEST
    assert int.from_bytes(b[24:32], "little") == 7
    assert int.from_bytes(b[32:40], "little") == 3
    assert int.from_bytes(b[40:48], "little") == 1
    assert b[48] == 1 and b[49:] == bytes(15)
    assert Header.unpack(b) == h
    # reserved bytes must stay zero (a flipped reserved bit is not silently ignored)
    with pytest.raises(WireError, match="reserved"):
        Header.unpack(b[:60] + b"\x01" + b[61:])


@given(
    st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=300),
    st.integers(min_value=1, max_value=50),
    st.sampled_from([4, 8]),
)
@settings(max_examples=100, deadline=None)
def test_chunked_round_trip(values, chunk, rb):
    rec = np.asarray(values, dtype=np.uint64)
    h = Header(KIND_USER, rb, DIGEST, rec.size)
    f = io.BytesIO()
    with BatchWriter(f, h) as w:
        for i in range(0, rec.size, chunk):
            w.write(rec[i : i + chunk])
    data = f.getvalue()
    assert data == encode_batch(h, rec)
    f.seek(0)
    h2 = read_header(f)
    assert h2 == h
    got = np.concatenate([np.empty(0, np.uint64)] + [c.astype(np.uint64) for c in
                                                      iter_records(f, h2, chunk)])
    np.testing.assert_array_equal(got, rec)
    h3, rec3 = decode_batch(data)
    np.testing.assert_array_equal(rec3.astype(np.uint64), rec)


def test_malformed_batches():
    rec = np.arange(10, dtype=np.uint32)
    good = encode_batch(Header(KIND_USER, 4, DIGEST, 10), rec)
    with pytest.raises(WireError, match="magic"):
        decode_batch(b"XXXX" + good[4:])
    with pytest.raises(WireError, match="version"):
        decode_batch(good[:4] + (9).to_bytes(2, "little") + good[6:])
    with pytest.raises(WireError, match="promises"):
        decode_batch(good[:-1])
    with pytest.raises(WireError, match="promises"):
        decode_batch(good + b"\0\0\0\0")
    with pytest.raises(WireError, match="header"):
        decode_batch(good[:10])
    with pytest.raises(WireError, match="kind"):
        decode_batch(good[:6] + b"\x09" + good[7:])
    f = io.BytesIO(good[:-4])
    h = read_header(f)
    with pytest.raises(WireError, match="truncated"):
        list(iter_records(f, h, 3))
    f = io.BytesIO(good + b"\0")
    h = read_header(f)
    with pytest.raises(WireError, match="trailing"):
        list(iter_records(f, h, 3))


def test_writer_checks_count():
    f = io.BytesIO()
    w = BatchWriter(f, Header(KIND_USER, 4, DIGEST, 3))
    w.write(np.arange(2, dtype=np.uint32))
    with pytest.raises(ValueError, match="promises"):
        w.close()
    with pytest.raises(ValueError, match="promises"):
        w.write(np.arange(2, dtype=np.uint32))


def test_header_validation():
    with pytest.raises(ValueError, match="digest"):
        Header(KIND_USER, 4, b"short", 1)
    with pytest.raises(ValueError, match="kind"):
        Header(0, 4, DIGEST, 1)
    with pytest.raises(ValueError, match="n_records"):
        Header(KIND_USER, 4, DIGEST, -1)


@given(st.integers(min_value=1, max_value=8), st.data())
@settings(max_examples=100, deadline=None)
def test_pack_unpack_any_record_width(rb, data):
    from shuffledp.protocol.wire import _pack_records, unpack_records

    vals = np.asarray(
        data.draw(st.lists(st.integers(min_value=0, max_value=2 ** (8 * rb) - 1), max_size=50)),
        dtype=np.uint64,
    )
    raw = _pack_records(vals, rb)
    assert raw.nbytes == vals.size * rb
    np.testing.assert_array_equal(unpack_records(raw, rb).astype(np.uint64), vals)
    h = Header(KIND_USER, rb, DIGEST, vals.size)
    h2, raw2 = decode_batch(encode_batch(h, vals))
    np.testing.assert_array_equal(unpack_records(raw2, rb).astype(np.uint64), vals)
    if rb < 8:
        with pytest.raises(ValueError, match="fit"):
            _pack_records(np.array([2 ** (8 * rb)], dtype=np.uint64), rb)


def test_mixed_batch_tag_keyed_and_unkeyed():
    from shuffledp.protocol.wire import KIND_MIXED_ENC

    key = bytes(range(32))
    rec = np.arange(6, dtype=np.uint32)
    h = Header(KIND_MIXED, 4, DIGEST, 6, 2, 0)
    keyed = encode_batch(h, rec, key)
    assert len(keyed) == HEADER_SIZE + 24 + 32 and keyed[48] == 1
    h2, r2 = decode_batch(keyed, key)
    assert h2.keyed and h2.n_users == 2
    np.testing.assert_array_equal(r2, rec)
    with pytest.raises(WireError, match="pass mac_key"):
        decode_batch(keyed)
    with pytest.raises(WireError, match="does not verify"):
        decode_batch(keyed, bytes(32))
    # an edited count (n_dropped) fails the tag, so does a swapped pair of records
    edited = keyed[:40] + (1).to_bytes(8, "little") + keyed[48:]
    with pytest.raises(WireError, match="does not verify"):
        decode_batch(edited, key)
    swapped = keyed[:64] + keyed[68:72] + keyed[64:68] + keyed[72:]
    with pytest.raises(WireError, match="does not verify"):
        decode_batch(swapped, key)
    # unkeyed tag: verifies without a key, refused when a key is expected
    plain = encode_batch(h, rec)
    assert plain[48] == 0 and decode_batch(plain)[0].n_records == 6
    with pytest.raises(WireError, match="unauthenticated"):
        decode_batch(plain, key)
    # streaming reader verifies the tag after the last record
    f = io.BytesIO(edited)
    with pytest.raises(WireError, match="does not verify"):
        list(iter_records(f, read_header(f), 2, key))
    f = io.BytesIO(keyed[:-1])
    with pytest.raises(WireError, match="tag is missing"):
        list(iter_records(f, read_header(f), 2, key))
    # the writer produces the same bytes
    out = io.BytesIO()
    with BatchWriter(out, h, key) as w:
        w.write(rec[:4])
        w.write(rec[4:])
    assert out.getvalue() == keyed
    with pytest.raises(ValueError, match="flags"):
        Header(KIND_USER, 4, DIGEST, 1, flags=1)
    with pytest.raises(ValueError, match="at least 16"):
        encode_batch(Header(KIND_MIXED_ENC, 4, DIGEST, 0, 0), b"", b"short")
