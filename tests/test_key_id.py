"""An encrypted user batch names its analyzer key; a shuffler given the key id refuses a
batch sealed to another key (or naming none) on arrival, its user dropped whole, so the
analyzer never meets messages it cannot open. Deterministic: no false failures."""

from __future__ import annotations

import numpy as np
import pytest
from shuffle_helpers import params_for, random_users

from shuffledp import Grid
from shuffledp.analyzers.heatmap.modular import accumulate_mixed
from shuffledp.encoders.encoder import encode_shares, frame_messages, messages
from shuffledp.protocol.crypto import (
    analyzer_key_id,
    encrypt_records,
    encrypted_record_bytes,
    generate_analyzer_key,
    generate_mac_key,
    key_id,
    public_bytes,
)
from shuffledp.protocol.runner import user_batches
from shuffledp.protocol.shuffler import REJECT_REASONS, Shuffler
from shuffledp.protocol.wire import (
    FLAG_KEY_ID,
    HEADER_SIZE,
    KIND_USER,
    KIND_USER_ENC,
    Header,
    WireError,
    encode_batch,
)
from shuffledp.randomness import SecureRandom, UserStreams

GRID = Grid(3, 2)


@pytest.fixture(scope="module")
def keys():
    return generate_analyzer_key(), generate_analyzer_key()


def test_header_carries_the_key_id_in_its_reserved_bytes(keys):
    kid = analyzer_key_id(keys[0])
    assert kid == analyzer_key_id(public_bytes(keys[0])) == bytes.fromhex(
        key_id("ANALYZER PUBLIC KEY", public_bytes(keys[0])))
    assert kid != analyzer_key_id(keys[1]) and len(kid) == 8
    h = Header(KIND_USER_ENC, 55, bytes(16), 12, key_id=kid)
    assert h.flags & FLAG_KEY_ID
    raw = h.pack()
    assert raw[49:57] == kid and not any(raw[57:])
    assert Header.unpack(raw) == h
    with pytest.raises(ValueError, match="only an encrypted user batch"):
        Header(KIND_USER, 5, bytes(16), 12, key_id=kid)
    with pytest.raises(ValueError, match="key_id is empty"):
        Header(KIND_USER_ENC, 55, bytes(16), 12, flags=FLAG_KEY_ID)
    with pytest.raises(ValueError, match="8 bytes"):
        Header(KIND_USER_ENC, 55, bytes(16), 12, key_id=b"short")
    no_flag = bytearray(Header(KIND_USER_ENC, 55, bytes(16), 12).pack())
    no_flag[50] = 1  # a key id without the flag is a malformed header
    with pytest.raises(WireError, match="reserved"):
        Header.unpack(bytes(no_flag))
    late = bytearray(raw)
    late[60] = 1  # bytes after the key id stay reserved
    with pytest.raises(WireError, match="reserved header bytes 57"):
        Header.unpack(bytes(late))


def test_shuffler_refuses_batches_sealed_to_another_key_before_mixing(keys):
    p = params_for(GRID, n=4, B=2, dropout=0.5)
    users = random_users(GRID, 4, seed=1)
    good, other = (public_bytes(k) for k in keys)
    ours = list(user_batches(p, users, np.arange(3), rng=0, analyzer_public=good))
    theirs = next(user_batches(p, users, np.arange(3, 4), rng=0, analyzer_public=other))
    sh = encode_shares(p, users, np.array([3]), UserStreams(0), SecureRandom())[0]
    named = frame_messages(p, messages(p, sh), good)  # the device framing names the key
    assert Header.unpack(named[:HEADER_SIZE]).key_id == analyzer_key_id(good)
    recs = messages(p, sh)  # sealed to the key but naming none (a device from before)
    unnamed = encode_batch(Header(KIND_USER_ENC, encrypted_record_bytes(p), p.digest, recs.size),
                           encrypt_records(p, recs, good))
    assert Header.unpack(unnamed[:HEADER_SIZE]).key_id == b""
    mac = generate_mac_key()
    s = Shuffler(p, encrypted=True, mac_key=mac, analyzer_key_id=analyzer_key_id(good))
    assert all(s.submit(b, sender=i) for i, b in enumerate(ours))
    assert not s.submit(theirs, sender=3)
    assert not s.submit(unnamed, sender=4)
    assert s.report.rejected["wrong_key"] == 2 and "wrong_key" in REJECT_REASONS
    assert s.report.n_failed_users == 2 and s.report.n_forwarded == 3
    import io

    buf = io.BytesIO()
    s.mix_to(buf)
    res = accumulate_mixed(p, buf.getvalue(), key=keys[0], mac_key=mac, workers=1)
    assert res.n_failed == 0 and res.header.n_users == 3  # nothing the analyzer cannot open
    # without the key id the shuffler does not look at it: the analyzer finds the foreign batch
    t = Shuffler(p, encrypted=True)
    assert t.submit(theirs) and t.submit(unnamed)


def test_key_id_argument_is_checked(keys):
    p = params_for(GRID, n=4, B=2)
    with pytest.raises(ValueError, match="analyzer_key_id"):
        Shuffler(p, encrypted=True, analyzer_key_id=b"1234")
    with pytest.raises(ValueError, match="encrypted=True"):
        Shuffler(p, analyzer_key_id=analyzer_key_id(keys[0]))
