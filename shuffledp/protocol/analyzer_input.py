"""The analyzer's input: read a mixed batch, verify it, decrypt, and sum shares mod q.

:func:`accumulate_mixed` is the one decrypt-then-count loop of the protocol (library path
:func:`shuffledp.protocol.runner.shuffle_heatmap` and the ``analyze`` role command both use it):

1. the header must be a mixed batch of these parameters (digest, which covers the round id),
   with the record size of the expected path and ``n_records = r * m * n_users``;
2. records are streamed in chunks; encrypted ones are opened (HPKE base mode, RFC 9180:
   DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, ``info`` = label || digest ||
   round id || coordinate, :func:`shuffledp.protocol.crypto.message_info`) in a process pool
   when the batch is large, since each open holds the GIL and threads do not help;
3. after the last record the batch tag is verified (HMAC-SHA256 under the key the shuffler
   shares with the analyzer, or SHA-256 when the run has no such key): any edit to the
   header counts or the records after the shuffler is caught there;
4. decrypted (coordinate, share) pairs go into an exact
   :class:`~shuffledp.analyzers.heatmap.modular.ModularAccumulator`; a message that does not open
   or is out of range is counted, never summed.

The caller must not use the accumulator if a :class:`~shuffledp.protocol.wire.WireError` was raised.
:func:`release_mixed` chains it with :func:`shuffledp.analyzers.heatmap.modular.analyze`, whose
count
check (every coordinate holds exactly r * n_users messages) refuses a release as soon as one
message failed or was missing. Trust model: :mod:`shuffledp.protocol.shuffler`.
"""

from __future__ import annotations

import io
import multiprocessing
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from shuffledp.analyzers.heatmap.modular import ModularAccumulator, analyze
from shuffledp.analyzers.heatmap.release import HeatmapRelease
from shuffledp.protocol.crypto import (
    as_private_key,
    associated_data_prefix,
    encrypted_record_bytes,
    open_records,
    private_bytes,
)
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.wire import (
    KIND_MIXED,
    KIND_MIXED_ENC,
    Header,
    check_header,
    iter_records,
    read_header,
    unpack_records,
)

DEFAULT_CHUNK = 1 << 14  # records per decryption task (~1.9 MB encrypted, ~0.5 s of X25519)


@dataclass
class MixedBatchResult:
    """What the analyzer read: header, exact sums, and what it could not count."""

    header: Header
    accumulator: ModularAccumulator
    n_failed: int
    n_out_of_range: int
    authenticated: bool

    def figures(self) -> dict[str, Any]:
        """Figures for a release's ``protocol`` mapping."""
        return {
            "messages_failed_authentication": self.n_failed,
            "messages_out_of_range": self.n_out_of_range,
            "mixed_batch_authenticated": self.authenticated,
        }


# ----- worker side (module-level so a process pool can pickle it) -----
_WORKER: dict[str, Any] = {}


def _init_worker(key_raw: bytes, record_bytes: int, share_bytes: int, ad_prefix: bytes) -> None:
    _WORKER.update(key=X25519PrivateKey.from_private_bytes(key_raw), rb=record_bytes,
                   sb=share_bytes, ad=ad_prefix)


def _open_chunk(raw: bytes) -> tuple[np.ndarray, np.ndarray, int]:
    w = _WORKER
    return open_records(raw, w["rb"], w["sb"], w["ad"], w["key"])


def _open_source(source: bytes | str | os.PathLike | BinaryIO):
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(source)), True
    if isinstance(source, (str, os.PathLike)):
        return open(Path(source), "rb"), True
    if hasattr(source, "read"):
        return source, False
    raise TypeError(f"source must be bytes, a path or a binary file, got {type(source).__name__}")


def _decrypted_chunks(params, chunks, key: X25519PrivateKey, workers: int):
    """Yield (coords, shares, failed) per chunk, in order, in-process or over a pool."""
    rb, sb, ad = encrypted_record_bytes(params), params.share_bytes, associated_data_prefix(params)
    if workers <= 1:
        for c in chunks:
            yield open_records(c.tobytes(), rb, sb, ad, key)
        return
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                      else "spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(private_bytes(key), rb, sb, ad)) as ex:
        pending: deque = deque()
        for c in chunks:
            pending.append(ex.submit(_open_chunk, c.tobytes()))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def accumulate_mixed(
    params: ProtocolParams,
    source: bytes | str | os.PathLike | BinaryIO,
    *,
    key: X25519PrivateKey | bytes | None = None,
    mac_key: bytes | None = None,
    workers: int | None = None,
    chunk_records: int = DEFAULT_CHUNK,
) -> MixedBatchResult:
    """Read, verify and sum a mixed batch (bytes, a path, or an open binary file).

    Parameters
    ----------
    params : ProtocolParams
    source : bytes, path or binary file
        The mixed batch written by :meth:`shuffledp.protocol.shuffler.Shuffler.mix_to`.
    key : X25519PrivateKey or 32 bytes, optional
        The analyzer's private key. Required for, and only accepted with, an encrypted batch.
    mac_key : bytes, optional
        The key shared with the shuffler; required when the batch's tag is keyed, and a
        batch with an unkeyed tag is refused when it is given.
    workers : int, optional
        Processes for decryption (default: ``os.cpu_count()``); used only when the batch
        holds more than one chunk.
    chunk_records : int
        Records per chunk (and per decryption task).

    Returns
    -------
    MixedBatchResult
        ``accumulator`` (exact sums mod q and counts per coordinate), ``n_failed``
        (messages that did not authenticate), ``n_out_of_range``, ``authenticated``.

    Raises
    ------
    shuffledp.protocol.wire.WireError
        Malformed or truncated batch, other parameters or run, inconsistent counts, or a
        tag that does not verify. Nothing read may be used then.
    ValueError, TypeError
        Bad arguments (key, mac_key, workers, chunk_records).
    """
    if not isinstance(params, ProtocolParams):
        raise TypeError(f"params must be a ProtocolParams, got {type(params).__name__}")
    k = None if key is None else as_private_key(key)
    nw = (os.cpu_count() or 1) if workers is None else workers
    if isinstance(nw, bool) or not isinstance(nw, int) or nw < 1:
        raise ValueError(f"workers must be an integer >= 1, got workers={workers!r}")
    fh, owned = _open_source(source)
    try:
        h = read_header(fh)
        check_header(params, h, KIND_MIXED if k is None else KIND_MIXED_ENC)
        acc = ModularAccumulator(params)
        chunks = iter_records(fh, h, chunk_records, mac_key)
        failed = 0
        if k is None:
            for c in chunks:
                acc.add_records(unpack_records(c, h.record_bytes))
        else:
            use = nw if h.n_records > chunk_records else 1
            for c, s, f in _decrypted_chunks(params, chunks, k, use):
                acc.add_pairs(c, s)
                failed += f
        out_of_range = acc.rejected
        acc.rejected += failed
        acc.messages += failed
        return MixedBatchResult(h, acc, failed, out_of_range, h.keyed)
    finally:
        if owned:
            fh.close()


def release_mixed(
    params: ProtocolParams,
    source: bytes | str | os.PathLike | BinaryIO,
    *,
    key: X25519PrivateKey | bytes | None = None,
    mac_key: bytes | None = None,
    workers: int | None = None,
    extra_protocol: dict[str, Any] | None = None,
) -> HeatmapRelease:
    """:func:`accumulate_mixed` then :func:`shuffledp.analyzers.heatmap.modular.analyze`.

    Raises :class:`~shuffledp.protocol.wire.WireError` or
    :class:`~shuffledp.analyzers.heatmap.modular.ReleaseRefused` instead of releasing anything
    corrupt (a failed message leaves its coordinate short of r * n_users and is refused).
    """
    res = accumulate_mixed(params, source, key=key, mac_key=mac_key, workers=workers)
    extra = {**res.figures(), **(extra_protocol or {})}
    return analyze(params, res.accumulator, res.header.n_users, res.header.n_dropped, extra)
