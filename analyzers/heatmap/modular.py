"""The analyzer of the shuffle-model heatmap protocol ([Ghazi23]_ App. F, last bullet).

For each coordinate a it sums the second components of all messages (a, w) over Z_q, in
exact integer arithmetic and one streaming pass (:class:`ModularAccumulator`: two int64
arrays of length m, whatever the number of messages), checks that every coordinate received
exactly r messages per forwarded user, decodes the centred representative (the modulus has
headroom, so sums in [0, B n] plus moderate noise decode exactly; the App. F choice q = B n
would wrap), divides by B and hands the noisy level counts to Reconstruct ([Ghazi23]_ Alg. 2).

The analyzer's input
--------------------
:func:`accumulate_mixed` is the one decrypt-then-count loop of the protocol (library path
:func:`shuffledp.protocol.runner.shuffle_heatmap` and the ``analyze`` role command both use
it), the counterpart of the device encoder's framing (:mod:`shuffledp.encoders.encoder`):
both speak the contract (:mod:`shuffledp.protocol.wire`, :mod:`shuffledp.protocol.crypto`)
that sits below encoders and analyzers.

1. the header must be a mixed batch of these parameters (digest, which covers the round id),
   with the record size of the expected path and ``n_records = r * m * n_users``;
2. records are streamed in chunks; encrypted ones are opened (HPKE base mode, RFC 9180:
   DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, ``info`` = label || digest ||
   round id || coordinate, :func:`shuffledp.protocol.crypto.message_info`) in a process pool
   when the batch is large, since each open holds the GIL and threads do not help;
3. after the last record the batch tag is verified (HMAC-SHA256 under the key the shuffler
   shares with the analyzer, or SHA-256 when the run has no such key): any edit to the
   header counts or the records after the shuffler is caught there;
4. decrypted (coordinate, share) pairs go into an exact :class:`ModularAccumulator`; a
   message that does not open or is out of range is counted at its (clear) coordinate,
   never summed.

The caller must not use the accumulator if a :class:`~shuffledp.protocol.wire.WireError` was
raised. :func:`release_mixed` chains it with :func:`analyze`, whose count check (every
coordinate holds exactly r * n_users messages, readable or not) refuses a release as soon as
one message is missing or extra. Trust model: :mod:`shuffledp.protocol.shuffler`.

Unreadable batches
------------------
A device that encrypts to a wrong analyzer key (an old ``analyzer.pub``, a typo'd path)
sends a well-formed batch whose every message fails to open. After the shuffle its messages
are mixed with everyone's and the analyzer cannot tell whose they were: the mixing that
protects every user forbids any per-user label the analyzer could read (a label shared by a
user's messages would let it add up her shares). What it can see is *where* the unreadable
messages are: the coordinate of a message is in the clear, and every user sends exactly r
per coordinate. So (:meth:`ModularAccumulator.usable_users`):

- if the messages that cannot be used (failed authentication or out of range) number
  exactly k r at *every* coordinate, for one k, they are what k whole batches leave: the
  readable messages are then exactly the other n_users - k users' messages, whose shares
  sum to their noisy values. The analyzer releases with those users, counts the k in
  ``n_unreadable_batches`` (and in ``n_dropped``), and applies the n_min check to
  n_users - k, so the noise the guarantee rests on is still there;
- any other pattern (one unreadable message at one coordinate, say) means part of some
  user's messages would be summed without the rest: that coordinate's sum would be
  meaningless, and the analyzer refuses the release, naming the coordinates.

Privacy: dropping whole batches removes users, which the dropout headroom (n_min) already
covers; the decision depends only on which messages fail, i.e. on devices' keys and not on
any honest user's data, so it leaks nothing. An adversary could shape failures so that two
partial batches look like one whole one; it gains nothing it could not get by sending a
valid zero-noise batch, which is counted among the users as every batch is (the guarantee
counts the noise of honest users' batches; :mod:`shuffledp.protocol.shuffler`).

One release per round
---------------------
:func:`release_mixed` records every release in a
:class:`~shuffledp.analyzers.heatmap.release_ledger.ReleaseLedger` (a file, or this process's
memory) and refuses a second release of a round: two batches of one round that differ by
one user would reveal that user's noisy vector as the difference of the two sums. The same
sums again (the same batch, or the same users re-shuffled) are answered as a repeat.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards sparse federated analytics" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import io
import multiprocessing
import os
import threading
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numba
import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from shuffledp.accounting.guarantee import Guarantee
from shuffledp.analyzers.federated.histogram import decode_centred
from shuffledp.analyzers.heatmap.reconstruct import DEFAULT_TIE_BREAK, reconstruct
from shuffledp.analyzers.heatmap.release import HeatmapRelease, normalise
from shuffledp.analyzers.heatmap.release_ledger import ReleaseLedger, as_ledger, sums_digest
from shuffledp.errors import Refused
from shuffledp.protocol.crypto import (
    as_private_key,
    associated_data_prefix,
    encrypted_record_bytes,
    open_records_detailed,
    private_bytes,
)
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.wire import (
    KIND_MIXED,
    KIND_MIXED_ENC,
    Header,
    _fast_records,
    _keep_mask,
    _load8,
    _record_at,
    check_header,
    iter_records,
    read_header,
)
from shuffledp.pyramid import unflatten

THEOREM = (
    "Ghazi et al., Differentially Private Heatmaps, AAAI 2023, App. F (split & mix of Balle et "
    "al., CCS 2020, Cor. 6 and Lemma 5.2); Polya differences summing to discrete Laplace "
    "(Bagdasaryan et al., PoPETs 2022, Thm 4.2); per-level basic composition (Thm 3.1)"
)


class ReleaseRefused(Refused, RuntimeError):
    """The analyzer refuses to release (too many dropouts, missing or rejected messages).

    A :class:`shuffledp.Refused` (so a ``ValueError``); still a ``RuntimeError``, its base
    before 0.2, for callers that catch that.
    """


#: Bits of the sum field in the one-word accumulator of :func:`_accumulate_packed` and
#: :func:`_accumulate_raw`: a coordinate's word holds ``count << SUM_BITS | sum``.
SUM_BITS = 40


def _word_chunk(q: int) -> int:
    """Records per chunk of the one-word accumulator: a chunk's sum at one coordinate stays
    below 2^SUM_BITS (at most chunk (q - 1)) and its count below 2^(64 - SUM_BITS); 0 when q
    is too large for chunks worth having (the two-field accumulator is used instead)."""
    chunk = min((1 << (64 - SUM_BITS)) - 1, ((1 << SUM_BITS) - 1) // max(1, q - 1))
    return chunk if chunk >= (1 << 12) else 0


@numba.njit(cache=True, nogil=True, inline="always")
def _flush_words(acc, both):  # pragma: no cover - compiled
    """Move the one-word accumulator ``acc`` (count << SUM_BITS | sum) into ``both`` and
    clear it."""
    low = (np.uint64(1) << np.uint64(SUM_BITS)) - np.uint64(1)
    for k in range(acc.size):
        x = acc[k]
        if x:
            both[k, 0] += np.int64(x & low)
            both[k, 1] += np.int64(x >> np.uint64(SUM_BITS))
            acc[k] = 0


@numba.njit(cache=True, nogil=True, inline="always")
def _word_span(body, rb, s, e, sb, mask, mm, qq, acc):  # pragma: no cover - compiled
    """Records s..e-1 (each with 8 bytes from its start) into the one-word accumulator
    ``acc``; returns the number rejected. Inlined with ``rb`` a compile-time constant: a
    record is one merged load and a constant mask, the byte offset one induction variable."""
    keep = _keep_mask(rb)
    one = np.uint64(1) << np.uint64(SUM_BITS)
    step = np.uint64(rb)
    b = np.uint64(s) * step
    bad = 0
    for _ in range(s, e):
        v = _load8(body, b) & keep
        b += step
        a = v >> sb
        w = v & mask
        if (a < mm) & (w < qq):
            acc[a] += one + w
        else:
            bad += 1
    return bad


@numba.njit(cache=True, nogil=True, inline="always")
def _raw_loop(body, rb, sb, mask, mm, qq, both, chunk, acc):  # pragma: no cover - compiled
    """The loop of :func:`_accumulate_raw`; inlined with ``rb`` a compile-time constant
    (1.2-1.4 x the throughput of one loop for every ``rb``). ``acc`` (m zero words) is the
    one-word accumulator, zero again on return."""
    nf = _fast_records(body.size, rb)
    keep = _keep_mask(rb)
    n = body.size // rb
    bad = 0
    if chunk == 0:
        for i in range(n):
            v = np.uint64(_record_at(body, i, rb, keep, nf))
            a = v >> sb
            w = v & mask
            if (a >= mm) | (w >= qq):
                bad += 1
                continue
            both[a, 0] += np.int64(w)
            both[a, 1] += 1
        return bad
    one = np.uint64(1) << np.uint64(SUM_BITS)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        ef = max(s, min(e, nf))
        bad += _word_span(body, rb, s, ef, sb, mask, mm, qq, acc)
        for i in range(ef, e):  # the last few records, byte by byte
            v = np.uint64(_record_at(body, i, rb, keep, nf))
            a = v >> sb
            w = v & mask
            if (a >= mm) | (w >= qq):
                bad += 1
                continue
            acc[a] += one + w
        _flush_words(acc, both)
    return bad


@numba.njit(cache=True, nogil=True)
def _accumulate_raw(body, rb, share_bits, m, q, both, chunk):  # pragma: no cover - compiled
    """Sum ``rb``-byte little-endian records ``(a << share_bits) | w`` read straight from
    their bytes into ``both[a] = (sum of shares, count)``; returns the number rejected
    (a >= m or w >= q).

    With ``chunk > 0`` (:func:`_word_chunk`) a coordinate's sum and count share one 64-bit
    word (count << SUM_BITS | sum: one read-modify-write per message into m words, half the
    footprint of the two fields), flushed into ``both`` every ``chunk`` records, before
    either field can overflow. With ``chunk == 0`` both fields are added in place (they share
    a cache line). ``both`` has m rows. One specialised loop per record size."""
    return _accumulate_raw_into(body, rb, share_bits, m, q, both, chunk,
                                np.zeros(both.shape[0], np.uint64))


@numba.njit(cache=True, nogil=True)
def _accumulate_raw_into(body, rb, share_bits, m, q, both, chunk,
                         words):  # pragma: no cover - compiled
    """:func:`_accumulate_raw` with the one-word accumulator ``words`` (m zeros, left zero)
    supplied by the caller, who reuses it."""
    mask = (np.uint64(1) << np.uint64(share_bits)) - np.uint64(1)
    sb = np.uint64(share_bits)
    mm = np.uint64(m)
    qq = np.uint64(q)
    if rb == 1:
        return _raw_loop(body, 1, sb, mask, mm, qq, both, chunk, words)
    if rb == 2:
        return _raw_loop(body, 2, sb, mask, mm, qq, both, chunk, words)
    if rb == 3:
        return _raw_loop(body, 3, sb, mask, mm, qq, both, chunk, words)
    if rb == 4:
        return _raw_loop(body, 4, sb, mask, mm, qq, both, chunk, words)
    if rb == 5:
        return _raw_loop(body, 5, sb, mask, mm, qq, both, chunk, words)
    if rb == 6:
        return _raw_loop(body, 6, sb, mask, mm, qq, both, chunk, words)
    if rb == 7:
        return _raw_loop(body, 7, sb, mask, mm, qq, both, chunk, words)
    return _raw_loop(body, 8, sb, mask, mm, qq, both, chunk, words)


@numba.njit(cache=True, nogil=True)
def _add_words(vals, share_bits, m, q, words):  # pragma: no cover - compiled
    """uint64 records ``(a << share_bits) | w`` into the one-word accumulator ``words``
    (count << SUM_BITS | sum) without flushing it: the caller flushes (:func:`_flush_into`)
    before more than :func:`_word_chunk` records have been added since the last flush.
    Returns the number rejected (a >= m or w >= q)."""
    mask = (np.uint64(1) << np.uint64(share_bits)) - np.uint64(1)
    sb = np.uint64(share_bits)
    mm = np.uint64(m)
    qq = np.uint64(q)
    one = np.uint64(1) << np.uint64(SUM_BITS)
    bad = 0
    for i in range(vals.size):
        v = vals[i]
        a = v >> sb
        w = v & mask
        if (a < mm) & (w < qq):
            words[a] += one + w
        else:
            bad += 1
    return bad


@numba.njit(cache=True, nogil=True)
def _flush_into(words, both):  # pragma: no cover - compiled
    """:func:`_flush_words` as a call of its own."""
    _flush_words(words, both)


class _CarrySums:
    """Exact sums and counts of uint64 records handed over in many small arrays (e.g. one
    permuted bucket at a time), for one thread.

    :meth:`ModularAccumulator.add_records` costs O(m) per call (its private arrays are
    cleared and merged), so small arrays had to be copied into a buffer first. Here the
    one-word accumulator (count << SUM_BITS | sum per coordinate) carries over from call to
    call and is flushed into exact int64 (sums, counts) only before a field could overflow
    (every :func:`_word_chunk` records) and at the end; the int64 sums are reduced mod q
    every 2^29 records. :meth:`into` adds everything to a :class:`ModularAccumulator`: the
    same sums (mod q), counts, rejections and messages as :meth:`~ModularAccumulator.add_records`
    of the same records.

    Parameters
    ----------
    params : ProtocolParams
        The round's parameters (m, q, share_bits).
    """

    def __init__(self, params: ProtocolParams) -> None:
        self.params = params
        self._chunk = _word_chunk(params.q)
        self._reset()

    def _reset(self) -> None:
        params = self.params
        self._words = np.zeros(params.m, np.uint64)
        self._both = np.zeros((params.m, 2), np.int64)
        self._pending = 0  # records in the one-word accumulator
        self._since = 0  # records in the int64 sums since they were last reduced
        self._fallback = ModularAccumulator(params, threads=1)
        self.rejected = 0
        self.messages = 0

    def add(self, values: np.ndarray) -> None:
        """Add uint64 records ``(a << share_bits) | w``; malformed ones are counted in
        :attr:`rejected`."""
        vals = np.ascontiguousarray(values, dtype=np.uint64)
        p = self.params
        if vals.size > self._chunk:  # too many at once (or q too large for one word)
            self.rejected += self._fallback.add_records(vals)
            self.messages += vals.size
            return
        if self._pending + vals.size > self._chunk:
            self._flush()
        self.rejected += int(_add_words(vals, p.share_bits, p.m, p.q, self._words))
        self._pending += vals.size
        self.messages += vals.size

    def _flush(self) -> None:
        if self._since + self._pending > (1 << 29):
            self._both[:, 0] %= self.params.q
            self._since = 0
        _flush_into(self._words, self._both)
        self._since += self._pending
        self._pending = 0

    def into(self, acc: ModularAccumulator) -> None:
        """Add everything handed over to ``acc`` (its sums reduced mod q); this is left
        empty."""
        self._flush()
        q = self.params.q
        fb = self._fallback
        acc.sums += self._both[:, 0] % q + fb.sums
        acc.sums %= q
        acc.counts += self._both[:, 1] + fb.counts
        acc.rejected += self.rejected
        acc.messages += self.messages
        self._reset()


@numba.njit(cache=True, nogil=True)
def _clear(both):  # pragma: no cover - compiled
    """Zero an int64 array (off the GIL, on the thread that will fill it)."""
    flat = both.reshape(-1)
    for i in range(flat.size):
        flat[i] = 0


def _accumulate_packed(rec: np.ndarray, share_bits: int, m: int, q: int, both: np.ndarray,
                       chunk: int, words: np.ndarray | None = None) -> int:
    """:func:`_accumulate_raw` of unsigned integer records (their little-endian bytes)."""
    le = np.ascontiguousarray(rec, dtype=rec.dtype.newbyteorder("<"))
    w = np.zeros(both.shape[0], np.uint64) if words is None else words
    return int(_accumulate_raw_into(le.reshape(-1).view(np.uint8), le.dtype.itemsize,
                                    share_bits, m, q, both, chunk, w))


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
    os.register_at_fork(after_in_child=_POOLS.clear)


def _pool(k: int) -> ThreadPoolExecutor:
    """A process-wide pool of ``k`` threads for the accumulator's kernels (created once:
    a pool per call cost a few percent of a 2^22-record chunk)."""
    with _POOLS_LOCK:
        ex = _POOLS.get(k)
        if ex is None:
            ex = _POOLS[k] = ThreadPoolExecutor(k, thread_name_prefix="shuffledp-sums")
        return ex


@numba.njit(cache=True, nogil=True)
def _accumulate_pairs(coord, share, m, q, acc, cnt):  # pragma: no cover - compiled
    bad = 0
    for i in range(coord.size):
        a = np.int64(coord[i])
        w = np.int64(share[i])
        if a < 0 or a >= m or w < 0 or w >= q:
            bad += 1
            continue
        acc[a] += w
        cnt[a] += 1
    return bad


class ModularAccumulator:
    """Streaming exact sums mod q per coordinate (O(m) memory, no float accumulation).

    Feed packed records (:meth:`add_records`), decrypted (coordinate, share) pairs
    (:meth:`add_pairs`) or, on the simulation path, dense share arrays (:meth:`add_shares`);
    all three give identical sums for the same shares. Malformed messages (coordinate >= m or
    share >= q) are counted in :attr:`rejected` and never summed. Large record chunks are
    split over ``threads`` threads (numba kernels release the GIL), each with private O(m)
    accumulators, merged exactly.

    Parameters
    ----------
    params : ProtocolParams
        The round's parameters (m coordinates, modulus q, share width).
    threads : int, optional
        Threads for large record chunks (default: ``os.cpu_count()``).

    Attributes
    ----------
    sums : numpy.ndarray of int64, shape (m,)
        The running sums mod q.
    counts : numpy.ndarray of int64, shape (m,)
        Messages summed per coordinate.
    unusable : numpy.ndarray of int64, shape (m,)
        Messages that could not be used, per coordinate.
    rejected, unplaceable, messages : int
        Malformed messages, those without a valid coordinate, and all messages seen.

    Raises
    ------
    TypeError
        If ``params`` is not a ProtocolParams.

    References
    ----------
    [Ghazi23]_ App. F (the analyzer sums the shares mod q).
    """

    def __init__(self, params: ProtocolParams, threads: int | None = None) -> None:
        if not isinstance(params, ProtocolParams):
            raise TypeError(f"params must be a ProtocolParams, got {type(params).__name__}")
        self.params = params
        self.sums = np.zeros(params.m, dtype=np.int64)
        self.counts = np.zeros(params.m, dtype=np.int64)
        #: messages that could not be used (failed authentication, out of range), per
        #: coordinate; ``unplaceable`` counts those whose coordinate is not < m
        self.unusable = np.zeros(params.m, dtype=np.int64)
        self.unplaceable = 0
        self.rejected = 0
        self.messages = 0
        self.threads = max(1, int(threads if threads is not None else (os.cpu_count() or 1)))
        #: per-part (both, words) scratch of :meth:`_run`, reused across calls
        self._scratch: list[tuple[np.ndarray, np.ndarray]] = []

    def _fold(self) -> None:
        # keep the int64 sums far from overflow: reduce once they could exceed 2^62
        if self.counts.max(initial=0) > (1 << 29):
            self.sums %= self.params.q

    def add_records(self, records: np.ndarray) -> int:
        """Add packed messages ``(a << share_bits) | w``; returns the number rejected."""
        rec = np.ascontiguousarray(records)
        if rec.dtype not in (np.uint32, np.uint64) and rec.dtype.kind != "u":
            raise TypeError(f"records must be unsigned integers, got dtype {rec.dtype}")
        p = self.params
        chunk = _word_chunk(p.q)
        bad = self._run(lambda part, both, words: _accumulate_packed(
            part, p.share_bits, p.m, p.q, both, chunk, words), rec, 1)
        self.messages += rec.size
        return bad

    def add_raw(self, body: np.ndarray | bytes | memoryview, record_bytes: int) -> int:
        """Add plaintext wire records (``record_bytes`` bytes each, little-endian
        ``(a << share_bits) | w``) straight from their bytes; returns the number rejected.

        The same sums, counts and rejections as :meth:`add_records` of the unpacked records.

        Raises
        ------
        ValueError
            If ``record_bytes`` is not in 1..8 or ``body`` is not whole records.
        """
        rb = int(record_bytes)
        if not 1 <= rb <= 8:
            raise ValueError(f"plaintext records have 1..8 bytes, got record_bytes={rb}")
        raw = (body.reshape(-1).view(np.uint8) if isinstance(body, np.ndarray)
               else np.frombuffer(body, dtype=np.uint8))
        if raw.size % rb:
            raise ValueError(f"body holds {raw.size} bytes, not whole {rb}-byte records")
        p = self.params
        chunk = _word_chunk(p.q)
        bad = self._run(lambda part, both, words: int(_accumulate_raw_into(
            part, rb, p.share_bits, p.m, p.q, both, chunk, words)), raw, rb)
        self.messages += raw.size // rb
        return bad

    def _run(self, kernel, data: np.ndarray, unit: int) -> int:
        """Run ``kernel(part, both, words)`` over ``data`` (``unit`` items per record) on the
        accumulator's threads, each into a private (m, 2) array of (sums, counts) (exact:
        a part of fewer than 2^30 records sums below 2^62) with its own one-word scratch
        (both kept for the next call), merged mod q: the sums are then reduced, so they are
        the same integers whatever the number of threads."""
        p = self.params
        n = data.size // unit
        k = self.threads if n >= (1 << 22) else 1
        n_parts = max(k, -(-n // (1 << 29)))
        edges = np.linspace(0, n, n_parts + 1).astype(np.int64) * unit
        while len(self._scratch) < n_parts:
            self._scratch.append((np.empty((p.m, 2), np.int64), np.zeros(p.m, np.uint64)))

        def one(i: int) -> tuple[int, np.ndarray]:
            both, words = self._scratch[i]
            _clear(both)
            return int(kernel(data[edges[i] : edges[i + 1]], both, words)), both

        # nogil kernels on k threads (the caller's when k = 1), then merged in order
        parts = map(one, range(n_parts)) if k == 1 else _pool(k).map(one, range(n_parts))
        bad = 0
        for b, both in parts:
            bad += b
            self.sums += both[:, 0] % p.q
            self.counts += both[:, 1]
        self.sums %= p.q
        self.rejected += bad
        return bad

    def add_pairs(self, coordinates: np.ndarray, shares: np.ndarray) -> int:
        """Add decrypted messages (coordinate, share); returns the number rejected.

        A rejected message (coordinate >= m or share >= q) is counted in :attr:`rejected`
        and, at its coordinate, in :attr:`unusable`.
        """
        c = np.ascontiguousarray(coordinates, dtype=np.int64)
        s = np.ascontiguousarray(shares, dtype=np.int64)
        if c.shape != s.shape:
            raise ValueError(f"coordinates and shares differ in shape: {c.shape} vs {s.shape}")
        p = self.params
        ok = (c >= 0) & (c < p.m) & (s >= 0) & (s < p.q)
        if not ok.all():
            self._mark_unusable(c[~ok])
            c, s = np.ascontiguousarray(c[ok]), np.ascontiguousarray(s[ok])
        bad = int(ok.size - ok.sum()) + int(_accumulate_pairs(c, s, p.m, p.q, self.sums,
                                                              self.counts))
        self.rejected += bad
        self.messages += ok.size
        self._fold()
        return bad

    def _mark_unusable(self, coordinates: np.ndarray) -> None:
        c = np.asarray(coordinates, dtype=np.int64).ravel()
        inside = (c >= 0) & (c < self.params.m)
        self.unusable += np.bincount(c[inside], minlength=self.params.m)
        self.unplaceable += int(c.size - inside.sum())

    def add_unusable(self, coordinates: np.ndarray) -> int:
        """Count messages that could not be read (their clear coordinates); returns how many.

        They are counted in :attr:`rejected` and :attr:`messages` and, per coordinate, in
        :attr:`unusable` (:meth:`usable_users` decides whether they are whole batches).
        """
        c = np.asarray(coordinates, dtype=np.int64).ravel()
        self._mark_unusable(c)
        self.rejected += c.size
        self.messages += c.size
        return int(c.size)

    def usable_users(self, n_users: int) -> tuple[int, int]:
        """(users whose messages are all usable, whole batches left out) of ``n_users``.

        Every coordinate must hold r * n_users messages, readable or not. If the unusable
        ones number exactly k r at every coordinate (one k), they are k whole batches and
        the sums are those of the other n_users - k users (see "Unreadable batches" in the
        module docstring).

        Raises
        ------
        ReleaseRefused
            Messages missing or extra at a coordinate, an unusable message whose coordinate
            is not < m, or unusable messages that are not whole batches.
        """
        p = self.params
        n = int(n_users)
        expect = p.r * n
        total = self.counts + self.unusable
        wrong = np.flatnonzero(total != expect)
        if wrong.size or self.unplaceable:
            a = int(wrong[0]) if wrong.size else 0
            unread = f" + {int(self.unusable[a])} unreadable" if self.unusable[a] else ""
            nowhere = (f", {self.unplaceable} of them at no coordinate < m"
                       if self.unplaceable else "")
            raise ReleaseRefused(
                f"{wrong.size} coordinates did not receive r * n_users = {expect} messages "
                f"(coordinate {a} got {int(self.counts[a])}{unread}; "
                f"{self.rejected} messages rejected{nowhere})")
        if not self.unusable.any():
            return n, 0
        k, rest = np.divmod(self.unusable, p.r)
        if rest.any() or (k != k[0]).any():
            odd = np.flatnonzero((rest != 0) | (k != np.bincount(k).argmax()))
            shown = ", ".join(f"coordinate {int(a)}: {int(self.unusable[a])}" for a in odd[:3])
            raise ReleaseRefused(
                f"{int(self.unusable.sum())} messages could not be used (failed authentication "
                f"or out of range) and they are not whole users' batches, which leave exactly "
                f"k r = k x {p.r} at every coordinate ({shown}"
                f"{', ...' if odd.size > 3 else ''}): the sums would include part of a batch. "
                "Not releasing")
        return n - int(k[0]), int(k[0])

    def add_shares(self, shares: np.ndarray) -> None:
        """Simulation path: add dense shares of shape (r, m) or (k, r, m) (k users, r each).

        The shares are the encoder's own output, so they are in range by construction; the
        sums are the same as if the messages had been packed, shuffled and streamed.
        """
        s = np.asarray(shares)
        p = self.params
        if s.shape[-2:] != (p.r, p.m):
            raise ValueError(f"shares must end in (r, m) = {(p.r, p.m)}, got {s.shape}")
        if s.max(initial=0) >= p.q:
            raise ValueError("shares must be < q")
        k = 1 if s.ndim == 2 else int(np.prod(s.shape[:-2]))
        flat = s.reshape(-1, p.m)
        self.sums += flat.sum(axis=0, dtype=np.uint64).astype(np.int64) % p.q
        self.counts += k * p.r
        self.messages += flat.size
        self._fold()

    def modular_sums(self, n_users: int) -> np.ndarray:
        """sum of shares mod q per coordinate, after checking r messages per user per coordinate.

        Raises :class:`ReleaseRefused` if any coordinate did not receive exactly r * n_users
        messages (a missing, duplicated or rejected message would corrupt that sum).
        """
        p = self.params
        expect = p.r * int(n_users)
        wrong = np.flatnonzero(self.counts != expect)
        if wrong.size:
            a = int(wrong[0])
            raise ReleaseRefused(
                f"{wrong.size} coordinates did not receive r * n_users = {expect} messages "
                f"(coordinate {a} got {int(self.counts[a])}; {self.rejected} messages rejected)"
            )
        return self.sums % p.q


def level_counts_from_sums(sums: np.ndarray, params: ProtocolParams) -> list[np.ndarray]:
    """Decoded noisy level counts in user-mass units: centred sums / B, one array per level.

    Parameters
    ----------
    sums : numpy.ndarray
        The m sums mod q, in the coordinate order of the levels ``params.start..L``.
    params : ProtocolParams
        Supplies q, ``decode_low``, B, the grid and the start level.

    Returns
    -------
    list of numpy.ndarray
        One noisy count array per measured level.

    Raises
    ------
    ValueError
        If ``sums`` does not hold one sum per coordinate of the measured levels.

    References
    ----------
    [Ghazi23]_ App. F, Alg. 2 (the counts handed to Reconstruct).
    """
    z = decode_centred(sums, params.q, params.decode_low).astype(float) / params.B
    return unflatten(params.grid, z, params.start)


def check_participation(params: ProtocolParams, n_users: int) -> None:
    """Refuse to release when fewer than n_min users contributed or more than n.

    With fewer than n_min users the Polya noise sums to less than the discrete Laplace the
    guarantee rests on ([Bagdasaryan22]_ Sec. 4, dropouts); with more than n the headroom of
    q is not guaranteed.

    Parameters
    ----------
    params : ProtocolParams
        Supplies n and n_min.
    n_users : int
        Users who contributed.

    Raises
    ------
    ReleaseRefused
        If ``n_users`` < n_min or > n.

    References
    ----------
    [Bagdasaryan22]_ Sec. 4 (dropouts); [Ghazi23]_ App. F.
    """
    n_users = int(n_users)
    if n_users < params.n_min:
        raise ReleaseRefused(
            f"only {n_users} users contributed; the noise is provisioned for at least "
            f"n_min = {params.n_min} (n = {params.n}, declared dropout {params.dropout:g}). "
            "Not releasing: re-run with a larger declared dropout fraction"
        )
    if n_users > params.n:
        raise ReleaseRefused(
            f"{n_users} users contributed, more than the n = {params.n} provisioned"
        )


def guarantee(params: ProtocolParams) -> Guarantee:
    """The (eps, delta) shuffle-model guarantee the release carries.

    The accounting record's guarantee (:mod:`shuffledp.accounting.summation`) when the
    parameters came from it; otherwise (explicitly built parameters) an equivalent record.

    Parameters
    ----------
    params : ProtocolParams
        The round's parameters.

    Returns
    -------
    Guarantee
        The (eps, delta) shuffle-model record.

    Raises
    ------
    AttributeError
        If ``params`` is not a ProtocolParams.

    References
    ----------
    [Ghazi23]_ App. F (the shuffle-model guarantee of the protocol).
    """
    summ = params.summation
    if summ is not None and summ.guarantee is not None:
        return summ.guarantee
    return Guarantee(
        notion="approximate",
        model="shuffle",
        epsilon=params.epsilon,
        delta=params.delta,
        neighbour=params.neighbour,
        theorem=THEOREM,
        parameters={
            "budget_rule": params.budget_rule,
            "level_epsilons": list(params.level_epsilons),
            "level_sensitivities": list(params.level_sensitivities),
            "q": params.q,
            "r": params.r,
            "n": params.n,
            "n_min": params.n_min,
            "wrap_probability": params.wrap_probability,
            "delta_parts": dict(params.guarantee_delta_parts),
        },
    )


def analyze(
    params: ProtocolParams,
    acc: ModularAccumulator,
    n_users: int,
    n_dropped: int = 0,
    extra_protocol: dict[str, Any] | None = None,
) -> HeatmapRelease:
    """Turn the accumulated sums into a release (decode, divide by B, Reconstruct).

    ``n_users`` is the number of users forwarded (the mixed batch's header); whole batches
    that could not be read are left out (:meth:`ModularAccumulator.usable_users`), counted
    in the figures' ``n_unreadable_batches`` and ``n_dropped``, and the n_min check applies
    to the users that remain.

    Raises :class:`ReleaseRefused` on too few users or a failed count check.

    Parameters
    ----------
    params : ProtocolParams
        The round's parameters.
    acc : ModularAccumulator
        The sums of the mixed batch.
    n_users : int
        Users forwarded (the mixed batch's header).
    n_dropped : int, default 0
        Users dropped before the shuffler, for the figures.
    extra_protocol : dict, optional
        Extra entries for the release's ``protocol`` figures.

    Returns
    -------
    HeatmapRelease
        The normalised estimate, the raw counts, the guarantee and the figures.

    Raises
    ------
    ValueError
        If the parameters no longer support the guarantee they claim
        (:meth:`ProtocolParams.check_supported`).
    ReleaseRefused
        On too few or too many users, or a failed count check.

    References
    ----------
    [Ghazi23]_ App. F and Alg. 2 (Reconstruct).
    """
    sums, n_sum, k = _checked_sums(params, acc, n_users)
    return _release(params, acc, sums, n_sum, k, n_dropped, extra_protocol)


def _checked_sums(params: ProtocolParams, acc: ModularAccumulator,
                 n_users: int) -> tuple[np.ndarray, int, int]:
    """(sums mod q, users summed, whole batches left out) once every check passed.

    Checks: the parameters are supported; ``n_users`` forwarded lie in [n_min, n]; every
    coordinate holds r * n_users messages; unusable messages are whole batches; and the
    users that remain are at least n_min.

    Raises
    ------
    ReleaseRefused
        Any check fails (the message says which).
    """
    params.check_supported()
    check_participation(params, n_users)
    n_sum, k = acc.usable_users(n_users)
    if k:
        try:
            check_participation(params, n_sum)
        except ReleaseRefused as e:
            raise ReleaseRefused(f"{k} of the {n_users} users' batches could not be read "
                                 f"(every message failed: encrypted to another key?); {e}"
                                 ) from None
    return acc.modular_sums(n_sum), n_sum, k


def _release(params: ProtocolParams, acc: ModularAccumulator, sums: np.ndarray, n_users: int,
             n_unreadable: int, n_dropped: int,
             extra_protocol: dict[str, Any] | None) -> HeatmapRelease:
    counts = level_counts_from_sums(sums, params)
    raw = reconstruct(counts, params.grid, params.start, params.w)
    figures = params.figures()
    figures.update(
        n_users=int(n_users),
        n_dropped=int(n_dropped) + int(n_unreadable),
        n_unreadable_batches=int(n_unreadable),
        messages_received=int(acc.messages),
        messages_rejected=int(acc.rejected),
    )
    if extra_protocol:
        figures.update(extra_protocol)
    parameters = {
        "mechanism": "DPSparseEMDAgg (shuffle, App. F)",
        "reconstruct_tie_break": DEFAULT_TIE_BREAK,
        "noise": "polya_difference",
        "w": params.w,
        "start_level": params.start,
        "top_level": params.top,
        "budget_rule": params.budget_rule,
        "leaf_share": float(params.level_epsilons[-1] / params.epsilon),
        "level_epsilons": list(params.level_epsilons),
        "B": params.B,
        "rounding": params.rounding,
    }
    return HeatmapRelease(params.grid, normalise(raw), raw, guarantee(params), parameters, figures,
                          levels=tuple(counts))


# --------------------------------------------------------------------------- the input
DEFAULT_CHUNK = 1 << 14  # records per decryption task (~1.9 MB encrypted, ~0.5 s of X25519)


@dataclass
class MixedBatchResult:
    """What the analyzer read: header, exact sums, and what it could not count.

    Attributes
    ----------
    header : Header
        The mixed batch's wire header.
    accumulator : ModularAccumulator
        The exact sums mod q and the counts per coordinate.
    n_failed : int
        Messages that did not authenticate.
    n_out_of_range : int
        Messages with a coordinate >= m or a share >= q.
    authenticated : bool
        Whether the batch's tag was verified.
    """

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


def _open_chunk(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w = _WORKER
    return open_records_detailed(raw, w["rb"], w["sb"], w["ad"], w["key"])


def _open_source(source: bytes | str | os.PathLike | BinaryIO):
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BytesIO(bytes(source)), True
    if isinstance(source, (str, os.PathLike)):
        return open(Path(source), "rb"), True
    if hasattr(source, "read"):
        return source, False
    raise TypeError(f"source must be bytes, a path or a binary file, got {type(source).__name__}")


def _decrypted_chunks(params, chunks, key: X25519PrivateKey, workers: int):
    """Yield (coords, shares, coordinates of the failed messages) per chunk, in order,
    in-process or over a pool."""
    rb, sb, ad = encrypted_record_bytes(params), params.share_bytes, associated_data_prefix(params)
    if workers <= 1:
        for c in chunks:
            yield open_records_detailed(c.tobytes(), rb, sb, ad, key)
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
        Processes for decryption, threads for plaintext sums (default: ``os.cpu_count()``);
        decryption uses a pool only when the batch holds more than one chunk.
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

    References
    ----------
    [Ghazi23]_ App. F (the analyzer's input: the shuffled messages).
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
        acc = ModularAccumulator(params, threads=nw)
        failed = 0
        if k is None:
            # plaintext records are summed in chunks of at least 2^22 (threads split a chunk)
            for c in iter_records(fh, h, max(chunk_records, 1 << 22), mac_key):
                acc.add_raw(c, h.record_bytes)
        else:
            use = nw if h.n_records > chunk_records else 1
            # decryption tasks of equal size, a multiple of the processes in number: no
            # process waits at the end for a long last task
            tasks = use * -(-h.n_records // (use * chunk_records))
            per = max(1, -(-h.n_records // max(1, tasks)))
            chunks = iter_records(fh, h, per, mac_key)
            for c, s, f in _decrypted_chunks(params, chunks, k, use):
                acc.add_pairs(c, s)
                failed += acc.add_unusable(f)
        out_of_range = acc.rejected - failed
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
    ledger: ReleaseLedger | str | os.PathLike | None = None,
    label: str = "",
) -> HeatmapRelease:
    """:func:`accumulate_mixed`, the checks of :func:`analyze`, the release ledger, then
    the release.

    Parameters
    ----------
    params, source, key, mac_key, workers
        As :func:`accumulate_mixed`.
    extra_protocol : dict, optional
        Extra figures for the release's ``protocol`` mapping.
    ledger : ReleaseLedger or path, optional
        Where releases are recorded (:mod:`shuffledp.analyzers.heatmap.release_ledger`): a
        second release of the round is refused, persistently when this is a file. Default:
        this process's ledger (refuses a second release within the process only); a
        deployment passes a file.
    label : str
        What the ledger entry names (e.g. the mixed batch's path).

    Returns
    -------
    HeatmapRelease
        Its ``protocol`` mapping has ``release_ledger`` (the ledger, the entry, whether the
        release repeats one already recorded with the same sums).

    Raises
    ------
    shuffledp.protocol.wire.WireError
        A malformed, foreign or altered batch.
    ReleaseRefused
        A failed count check, too few users (after leaving out unreadable batches), or
        unreadable messages that are not whole batches.
    shuffledp.analyzers.heatmap.release_ledger.RoundAlreadyReleased
        The round was released already with other sums.
    shuffledp.analyzers.heatmap.release_ledger.LedgerError
        The ledger does not verify or cannot be written.

    References
    ----------
    [Ghazi23]_ App. F.
    """
    book = as_ledger(ledger)
    res = accumulate_mixed(params, source, key=key, mac_key=mac_key, workers=workers)
    sums, n_sum, k = _checked_sums(params, res.accumulator, res.header.n_users)
    digest = sums_digest(params.digest, n_sum, sums)
    book.check(params.round_id, digest)  # fail fast; decided again under the lock
    index, _, repeat = book.record(round_id=params.round_id, digest=params.digest,
                                   sums_sha256=digest, n_users=n_sum, n_unreadable=k,
                                   n_dropped=res.header.n_dropped + k, label=label)
    extra = {**res.figures(), **(extra_protocol or {}),
             "release_ledger": {"ledger": book.label, "entry": index, "repeat": repeat}}
    return _release(params, res.accumulator, sums, n_sum, k, res.header.n_dropped, extra)
