"""One batch-header check: :func:`shuffledp.protocol.wire.header_mismatch` judges a
header against the run's parameters and the expected kind with one vocabulary of reasons,
the shuffler's; the shuffler counts the reason, the readers raise it with the same message."""

from __future__ import annotations

import numpy as np
import pytest
from shuffle_helpers import params_for

from shuffledp.analyzers.heatmap.modular import accumulate_mixed
from shuffledp.grid import Grid
from shuffledp.protocol.crypto import encrypted_record_bytes
from shuffledp.protocol.packed import accumulate, frame_user, mix
from shuffledp.protocol.shuffler import REJECT_REASONS, Shuffler
from shuffledp.protocol.wire import (
    FLAG_COORD_MAJOR,
    HEADER_REASONS,
    KIND_MIXED,
    KIND_MIXED_ENC,
    KIND_MIXED_PACKED,
    KIND_USER,
    KIND_USER_ENC,
    KIND_USER_PACKED,
    Header,
    HeaderMismatch,
    WireError,
    _expected_record_size,
    check_header,
    encode_batch,
    header_mismatch,
)


@pytest.fixture(scope="module")
def params():
    return params_for(Grid(4, 4), n=3, B=4), params_for(Grid(4, 4), n=3, B=4)


def _user(p, **kw):
    f = dict(kind=KIND_USER, record_bytes=p.record_bytes, digest=p.digest,
             n_records=p.messages_per_user)
    return Header(**{**f, **kw})


def _mixed(p, users=2, **kw):
    f = dict(kind=KIND_MIXED, record_bytes=p.record_bytes, digest=p.digest,
             n_records=p.messages_per_user * users, n_users=users)
    return Header(**{**f, **kw})


def test_the_reasons_are_the_shufflers():
    assert set(HEADER_REASONS) <= set(REJECT_REASONS)


def test_record_sizes_follow_the_kind(params):
    p, _ = params
    assert _expected_record_size(p, KIND_USER) == p.record_bytes
    assert _expected_record_size(p, KIND_USER_ENC) == encrypted_record_bytes(p)
    assert _expected_record_size(p, KIND_MIXED_ENC) == encrypted_record_bytes(p)
    assert _expected_record_size(p, KIND_USER_PACKED) == p.record_bits
    assert _expected_record_size(p, KIND_MIXED_PACKED, FLAG_COORD_MAJOR) == p.share_bits


def test_each_check_names_its_reason(params):
    p, other = params
    rm = p.messages_per_user
    assert header_mismatch(p, _user(p), KIND_USER) is None
    assert header_mismatch(p, _mixed(p, 3), KIND_MIXED) is None
    cases = [
        (_user(p, digest=other.digest), KIND_USER, "wrong_digest", "another run"),
        (_user(p), KIND_USER_ENC, "wrong_kind", "expected an encrypted user batch"),
        (_mixed(p), KIND_USER, "wrong_kind", "got a plaintext mixed batch"),
        (_user(p, n_users=2), KIND_USER, "wrong_kind", "n_users = 1"),
        (_user(p, n_dropped=1), KIND_USER, "wrong_kind", "n_dropped = 0"),
        (_user(p, record_bytes=p.record_bytes + 1), KIND_USER, "wrong_record_size",
         f"expected {p.record_bytes}"),
        (_user(p, n_records=rm - 1), KIND_USER, "incomplete", f"n_records = {rm - 1}"),
        (_mixed(p, n_records=rm), KIND_MIXED, "incomplete", "header counts disagree"),
        (_mixed(p, 4), KIND_MIXED, "over_capacity", "more than the n = 3"),
        (Header(KIND_USER_PACKED, p.record_bits, p.digest, rm), KIND_USER_PACKED,
         None, None),
        (Header(KIND_USER_PACKED, p.record_bits, p.digest, rm), KIND_USER_PACKED,
         "wrong_kind", "expected the coordinate-major layout"),
    ]
    for i, (h, kind, reason, text) in enumerate(cases):
        layout = FLAG_COORD_MAJOR if i == len(cases) - 1 else None
        bad = header_mismatch(p, h, kind, layout_flags=layout)
        if reason is None:
            assert bad is None
            continue
        assert isinstance(bad, HeaderMismatch) and isinstance(bad, WireError)
        assert bad.reason == reason, (i, bad)
        assert str(bad).startswith(f"{reason}: ") and text in str(bad), (i, bad)
        with pytest.raises(HeaderMismatch, match=f"^{reason}: "):
            check_header(p, h, kind, layout_flags=layout)


def test_encrypted_and_plaintext_mixups_say_what_to_do(params):
    p, _ = params
    enc = _mixed(p, kind=KIND_MIXED_ENC, record_bytes=encrypted_record_bytes(p))
    assert "pass the analyzer's key" in str(header_mismatch(p, enc, KIND_MIXED))
    assert "deployment path expects encrypted" in str(header_mismatch(p, _mixed(p),
                                                                      KIND_MIXED_ENC))


def test_bad_arguments_are_refused(params):
    p, _ = params
    with pytest.raises(ValueError, match="kind=9"):
        header_mismatch(p, _user(p), 9)
    with pytest.raises(ValueError, match="reason='nope'"):
        HeaderMismatch("nope", "x")


def test_every_reader_gives_the_same_reason(params):
    """One batch of another run: the shuffler counts wrong_digest, the analyzer's input loop
    and the bit-packed rounds raise a message that starts with it."""
    p, other = params
    rng = np.random.default_rng(0)
    rec = (np.repeat(np.arange(p.m, dtype=np.uint64), p.r) << np.uint64(p.share_bits)) \
        | rng.integers(0, p.q, p.messages_per_user).astype(np.uint64)
    foreign_user = encode_batch(Header(KIND_USER, other.record_bytes, other.digest, rec.size),
                                rec)
    s = Shuffler(p)
    assert not s.submit(foreign_user)
    assert dict(s.report.rejected) == {"wrong_digest": 1}
    foreign_mixed = encode_batch(Header(KIND_MIXED, other.record_bytes, other.digest,
                                        rec.size, 1), rec)
    with pytest.raises(HeaderMismatch, match="^wrong_digest: "):
        accumulate_mixed(p, foreign_mixed, workers=1)
    shares = rng.integers(0, other.q, (other.r, other.m))
    with pytest.raises(HeaderMismatch, match="^wrong_digest: "):
        mix(p, [frame_user(other, shares, "packed")], "packed")
    with pytest.raises(HeaderMismatch, match="^wrong_digest: "):
        accumulate(p, mix(other, [frame_user(other, shares, "packed")], "packed"))
