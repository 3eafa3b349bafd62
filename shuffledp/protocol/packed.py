"""Plaintext rounds over the bit-packed wire layouts (version 3, kinds 5 and 6).

Two layouts of one user's r m messages (:mod:`shuffledp.protocol.wire`):

``"packed"``
    The v2 messages ``(a << share_bits) | w`` at exactly ``record_bits`` =
    ceil(log2 m) + share_bits bits each (no byte alignment).
``"coordinate-major"``
    The shares alone, ``share_bits`` bits each, r per coordinate in coordinate order; the
    coordinate is implied by the position. Every user sends exactly r shares for every
    coordinate ([Ghazi23]_ App. F, "coordinate-by-coordinate"), so the coordinate carries
    no information about the user; the mixed batch is, per coordinate, a uniformly permuted
    block of the n_users r shares of that coordinate. That is the same labelled multiset
    {(a, w)} the analyzer sees with explicit coordinates, up to an input-independent order,
    so the split-and-mix analysis behind r applies unchanged.

Like the v2 plaintext path, these are simulation aids: whoever relays a plaintext batch
reads every share. :func:`frame_user`, :func:`mix` and :func:`accumulate` are the user,
shuffler and analyzer steps (``shuffle_heatmap(..., wire=True, layout=...)`` runs them);
:func:`_user_batch_bytes` is the exact size :func:`frame_user` writes.
Not wired into the streaming :class:`shuffledp.protocol.shuffler.Shuffler` (duplicate checks,
spooling): :func:`mix` holds all batches in memory and takes well-formed batches only.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shuffledp import _validation as v
from shuffledp.analyzers.heatmap.modular import ModularAccumulator
from shuffledp.encoders.encoder import messages
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.wire import (
    FLAG_COORD_MAJOR,
    HEADER_SIZE,
    KIND_MIXED_PACKED,
    KIND_USER_PACKED,
    Header,
    check_header,
    decode_batch,
    encode_batch,
)
from shuffledp.randomness import SecureRandom, secure_shuffle

LAYOUTS = ("packed", "coordinate-major")


def _bits(params: ProtocolParams, layout: str) -> int:
    return params.share_bits if layout == "coordinate-major" else params.record_bits


def _flags(layout: str) -> int:
    return FLAG_COORD_MAJOR if layout == "coordinate-major" else 0


def _user_batch_bytes(params: ProtocolParams, layout: str) -> int:
    """Exact length of one user's batch in ``layout`` (header + ceil(r m bits / 8))."""
    layout = v.choice("layout", layout, LAYOUTS)
    return HEADER_SIZE + -(-params.messages_per_user * _bits(params, layout) // 8)


def frame_user(params: ProtocolParams, shares: np.ndarray, layout: str) -> bytes:
    """One user's shares as a bit-packed user batch (kind 5) in ``layout``.

    Parameters
    ----------
    params : ProtocolParams
        The protocol record.
    shares : numpy.ndarray
        Shape (r, m), as from :func:`shuffledp.encoders.encoder.encode_shares`.
    layout : {"packed", "coordinate-major"}
        Records at their exact bit width, or shares only (the coordinate implied).

    Returns
    -------
    bytes
        The user batch, :func:`_user_batch_bytes` long.

    Raises
    ------
    ValueError
        If ``layout`` is not a layout, ``shares`` has another shape or a share does not fit.
    """
    layout = v.choice("layout", layout, LAYOUTS)
    s = np.asarray(shares)
    if s.shape != (params.r, params.m):
        raise ValueError(f"shares must have shape (r, m) = {(params.r, params.m)}, got "
                         f"shares.shape={s.shape}")
    if layout == "coordinate-major":
        rec = np.ascontiguousarray(s.T).ravel()  # r shares of coordinate 0, then 1, ...
    else:

        rec = messages(params, s)
    h = Header(KIND_USER_PACKED, _bits(params, layout), params.digest, rec.size,
               flags=_flags(layout))
    return encode_batch(h, rec)


def _read_user(params: ProtocolParams, data: bytes, layout: str) -> np.ndarray:
    h, rec = decode_batch(data)
    check_header(params, h, KIND_USER_PACKED, layout_flags=_flags(layout))
    return rec


def mix(params: ProtocolParams, batches: Sequence[bytes], layout: str,
        source: SecureRandom | None = None, mac_key: bytes | None = None,
        n_dropped: int = 0) -> bytes:
    """Shuffler: the users' batches -> one mixed batch (kind 6) in the same layout.

    ``packed``: one uniform permutation of all messages. ``coordinate-major``: one
    independent uniform permutation of every coordinate's block of n_users r shares. Both
    from :func:`shuffledp.randomness.secure_shuffle` (the secure source; no seed).

    Parameters
    ----------
    params : ProtocolParams
        The protocol record.
    batches : sequence of bytes
        The user batches (:func:`frame_user`), at least one.
    layout : {"packed", "coordinate-major"}
        The layout of the batches and of the mixed batch.
    source : SecureRandom, optional
        The secure generator of the permutations (default: a fresh one).
    mac_key : bytes, optional
        Shuffler-analyzer MAC key for the mixed batch's tag.
    n_dropped : int, default 0
        Users who dropped out, written in the header.

    Returns
    -------
    bytes
        The mixed batch (kind 6).

    Raises
    ------
    ValueError
        If ``layout`` is not a layout, ``batches`` is empty or ``mac_key`` is too short.
    WireError
        If a batch does not parse.
    HeaderMismatch
        If a batch's header does not fit the run and layout.
    """
    layout = v.choice("layout", layout, LAYOUTS)
    if len(batches) < 1:
        raise ValueError(f"batches must hold at least one user batch, got {len(batches)}")
    src = source if source is not None else SecureRandom()
    recs = np.stack([_read_user(params, b, layout) for b in batches])  # (U, r m)
    if layout == "coordinate-major":
        blocks = np.ascontiguousarray(
            recs.reshape(len(batches), params.m, params.r).transpose(1, 0, 2)
        ).reshape(params.m, -1)
        for row in blocks:
            secure_shuffle(row, src)
        out = blocks.ravel()
    else:
        out = recs.ravel()
        secure_shuffle(out, src)
    h = Header(KIND_MIXED_PACKED, _bits(params, layout), params.digest, out.size,
               n_users=len(batches), n_dropped=n_dropped, flags=_flags(layout))
    return encode_batch(h, out, mac_key)


def accumulate(params: ProtocolParams, data: bytes, mac_key: bytes | None = None):
    """Analyzer: a mixed bit-packed batch -> (Header, ModularAccumulator), tag verified.

    The records go through the same exact accumulator as v2 records
    (:class:`shuffledp.analyzers.heatmap.modular.ModularAccumulator`: out-of-range messages are
    counted and never summed;
    :meth:`~shuffledp.analyzers.heatmap.modular.ModularAccumulator.modular_sums`
    refuses a coordinate without exactly r n_users messages).

    Parameters
    ----------
    params : ProtocolParams
        The protocol record.
    data : bytes
        The mixed batch (:func:`mix`).
    mac_key : bytes, optional
        The shuffler-analyzer MAC key of a keyed batch.

    Returns
    -------
    tuple of (Header, ModularAccumulator)
        The batch's header and its records summed mod q.

    Raises
    ------
    WireError
        If the batch does not parse, or its tag does not verify.
    HeaderMismatch
        If its header does not fit the run.
    """

    h, rec = decode_batch(data, mac_key)
    check_header(params, h, KIND_MIXED_PACKED)  # either layout, as the header says
    layout = "coordinate-major" if h.coordinate_major else "packed"
    acc = ModularAccumulator(params)
    if layout == "coordinate-major":
        coords = np.repeat(np.arange(params.m, dtype=np.int64), h.n_users * params.r)
        acc.add_pairs(coords, rec.astype(np.int64))
    else:
        acc.add_records(rec)
    return h, acc
