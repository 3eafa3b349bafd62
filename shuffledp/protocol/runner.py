"""The shuffle-model private heatmap end to end ([Ghazi23]_ App. F with Alg. 1-2).

:func:`shuffle_heatmap` runs the three parties in one process. It is the documented entry
point and dispatches to one function per path, each taking the derived
:class:`~shuffledp.protocol.params.ProtocolParams` and only the arguments its path uses:

- :func:`simulation_heatmap` (default; the research path): every user's shares are drawn
  exactly as on a device (Polya noise from ``rng``, shares from the secure generator) and
  summed per coordinate mod q by the analyzer's accumulator; the physical permutation and the
  encryption are skipped, which changes nothing in the sums (they do not depend on order);
- :func:`dask_heatmap` (``backend="dask"``): the simulation path on a Dask cluster;
- :func:`wire_heatmap` (``wire=True``): users' batches go through a wire layout and the
  :class:`~shuffledp.protocol.shuffler.Shuffler` (validation and secure permutation), the
  analyzer sums the mixed records. The encoder threads also run the shuffler's per-batch
  checks and bucket spread (:meth:`Shuffler.inspect`); a round of at most 1 GiB of records
  is shuffled in memory, and the threads that permute the buckets hand them straight to
  the analyzer's accumulators (:meth:`Shuffler.mix_each`): shuffler and analyzer share this
  process, so the mixed batch is neither serialised nor tagged (the roles in separate
  processes, ``shuffledp shuffle`` / ``analyze``, write and verify the tagged wire format,
  :meth:`Shuffler.mix_to` and :func:`~shuffledp.analyzers.heatmap.modular.accumulate_mixed`).
  Plaintext: a simulation aid only -- the shuffler sees every share and user batches carry no
  integrity;
- :func:`deployment_heatmap` (``encrypt=True``): as ``wire=True`` with every message encrypted
  to a fresh analyzer X25519 key and the mixed batch authenticated with a fresh
  shuffler-analyzer MAC key (slow: one X25519 exchange per message; see
  ``bench/shuffle_deploy.py``).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import BinaryIO, cast

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.budget import DEFAULT_GAMMA
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR, Neighbour
from shuffledp.analyzers.heatmap.modular import (
    MixedBatchResult,
    ModularAccumulator,
    _CarrySums,
    accumulate_mixed,
    analyze,
)
from shuffledp.analyzers.heatmap.release import HeatmapRelease
from shuffledp.encoders.encoder import encode_shares, encode_sums, messages, sealed_batch
from shuffledp.protocol.crypto import (
    analyzer_key_id,
    encrypt_records,
    encrypted_record_bytes,
    generate_analyzer_key,
    generate_mac_key,
    public_bytes,
)
from shuffledp.protocol.dask_backend import dask_sums
from shuffledp.protocol.packed import accumulate, frame_user, mix
from shuffledp.protocol.params import DEFAULT_DROPOUT, ProtocolParams, derive_params
from shuffledp.protocol.shuffler import DEFAULT_MEMORY_LIMIT, Inspection, Shuffler
from shuffledp.protocol.wire import KIND_MIXED, check_header, frame_shares, framed_shares
from shuffledp.randomness import SEEDED_NOTE, RngLike, SecureRandom, UserStreams, as_generator
from shuffledp.users import UserDistributions

#: a wire round whose records take at most this many bytes is shuffled in memory
_IN_MEMORY_BYTES = 1 << 30
#: users encoded per call on the plaintext wire path
_USERS_PER_CALL = 4


def _chunk_users(params: ProtocolParams, budget_bytes: int = 1 << 28) -> int:
    per_user = params.r * params.m * 4 + params.m * 8 * 3
    return max(1, budget_bytes // per_user)


def check_workers(workers: int | None) -> int:
    """The number of threads a path runs on: ``workers``, or every core when None.

    Parameters
    ----------
    workers : int or None
        Threads (>= 1); None: ``os.cpu_count()``.

    Returns
    -------
    int
        The thread count.

    Raises
    ------
    ValueError
        If ``workers`` is not an integer >= 1.
    """
    if workers is None:
        return max(1, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1 or None, got workers={workers!r}")
    return int(workers)


def _ordered_map(fn: Callable, items: Iterable, workers: int) -> Iterator:
    """``map(fn, items)`` on ``workers`` threads, in order, at most 2 workers tasks pending."""
    if workers <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(workers) as ex:
        pending: deque = deque()
        for it in items:
            pending.append(ex.submit(fn, it))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _thread_source() -> Callable[[], SecureRandom]:
    """A getter of one SecureRandom per thread (a SecureRandom is not thread-safe)."""
    local = threading.local()

    def get() -> SecureRandom:
        src = getattr(local, "src", None)
        if src is None:
            src = local.src = SecureRandom()
        return src

    return get


def _streams(rng: RngLike | SecureRandom | UserStreams) -> UserStreams:
    return rng if isinstance(rng, UserStreams) else UserStreams(rng)


def simulate_sums(
    params: ProtocolParams,
    users: UserDistributions,
    participants: np.ndarray,
    rng: RngLike | SecureRandom | UserStreams = None,
    source: SecureRandom | None = None,
    progress: Callable[[int], object] | None = None,
    *,
    workers: int | None = None,
) -> ModularAccumulator:
    """Simulation path: encode the participants' shares on every core and sum them mod q.

    User j's noise comes from its own stream (:class:`~shuffledp.randomness.UserStreams`:
    the j-th child of the seed, or the secure generator when ``rng`` is None), so the sums
    are bit-identical whatever ``workers`` and however the users are split into tasks (sums
    mod q commute). Shares always come from the secure generator (one per thread) and are
    summed as they are drawn (:func:`~shuffledp.encoders.encoder.share_sums`). ``progress``
    (e.g. a tqdm bar's ``update``) is called with the number of users encoded after each
    task.

    Parameters
    ----------
    params : ProtocolParams
        The protocol record.
    users : UserDistributions
        The users' distributions.
    participants : numpy.ndarray
        Indices of the users who take part.
    rng : None, SecureRandom, UserStreams, int, SeedSequence or Generator
        Source of the noise: None or a SecureRandom (secure), a seed (one stream per user).
    source : SecureRandom, optional
        Secure generator of the shares and secure noise with ``workers=1`` (default: one
        fresh SecureRandom per thread).
    progress : callable, optional
        Called with the number of users encoded after each task.
    workers : int, optional
        Threads (default: every core).

    Returns
    -------
    ModularAccumulator
        The participants' shares summed mod q per coordinate.

    Raises
    ------
    ValueError
        If ``rng`` is a negative seed or ``workers`` is not an integer >= 1.
    TypeError
        If ``rng`` is not a seed, SeedSequence, Generator, SecureRandom or None.
    """
    k = check_workers(workers)
    streams = _streams(rng)
    get_src = (lambda: source) if (source is not None and k == 1) else _thread_source()
    acc = ModularAccumulator(params)
    per_task = max(1, min(_chunk_users(params), -(-participants.size // (4 * k))))

    def task(sel: np.ndarray) -> tuple[np.ndarray, int]:
        return encode_sums(params, users, sel, streams, get_src())

    sels = [participants[lo : lo + per_task] for lo in range(0, participants.size, per_task)]
    for sel, (part, n_msg) in zip(sels, _ordered_map(task, sels, k), strict=True):
        acc.sums += part
        acc.sums %= params.q
        acc.counts += sel.size * params.r
        acc.messages += n_msg
        if progress is not None:
            progress(int(sel.size))
    return acc


def user_batches(
    params: ProtocolParams,
    users: UserDistributions,
    participants: np.ndarray,
    rng: RngLike | SecureRandom | UserStreams = None,
    source: SecureRandom | None = None,
    analyzer_public: bytes | None = None,
    *,
    workers: int | None = None,
) -> Iterator[bytes]:
    """Yield each participant's batch as wire bytes (encrypted if ``analyzer_public`` given).

    Encrypted batches name the analyzer's key in their header
    (:func:`~shuffledp.protocol.crypto.analyzer_key_id`). Without ``analyzer_public`` the
    batches are plaintext: a simulation aid only (whoever
    relays them reads every share, and a flipped bit is an undetectable valid share). The
    batches are encoded on ``workers`` threads and yielded in the order of
    ``participants``; user j's noise comes from its own stream (as :func:`simulate_sums`).

    Parameters
    ----------
    params : ProtocolParams
        The protocol record.
    users : UserDistributions
        The users' distributions.
    participants : numpy.ndarray
        Indices of the users who take part (one batch each, in this order).
    rng : None, SecureRandom, UserStreams, int, SeedSequence or Generator
        Source of the noise (None: secure).
    source : SecureRandom, optional
        Secure generator of the shares with ``workers=1`` (default: one per thread).
    analyzer_public : bytes, optional
        The analyzer's 32-byte X25519 public key; None writes plaintext batches.
    workers : int, optional
        Threads (default: every core).

    Yields
    ------
    bytes
        One user batch in the wire format.

    Raises
    ------
    ValueError
        If ``rng`` is a negative seed, ``analyzer_public`` is not a 32-byte key or
        ``workers`` is not an integer >= 1.
    TypeError
        If ``rng`` is not a seed, SeedSequence, Generator, SecureRandom or None.
    """
    k = check_workers(workers)
    streams = _streams(rng)
    ids = (int(j) for j in participants)
    if analyzer_public is not None and k > 1:
        # one HPKE seal per message holds the GIL: seal on k processes, in order
        yield from _sealed_batches(params, users, participants, streams, source,
                                   analyzer_public, k)
        return
    get_src = (lambda: source) if (source is not None and k == 1) else _thread_source()

    def one(j: int) -> bytes:
        sh = encode_shares(params, users, np.array([j]), streams, get_src())[0]
        if analyzer_public is None:
            return frame_shares(params, sh)  # = frame_messages(params, messages(params, sh))
        return sealed_batch(params, encrypt_records(params, messages(params, sh),
                                                     analyzer_public), analyzer_public)

    yield from _ordered_map(one, ids, k)


def _inspected_batches(rnd: _Round, shuffler: Shuffler
                       ) -> Iterator[tuple[np.ndarray, Inspection]]:
    """Plaintext user batches with the shuffler's :meth:`~Shuffler.inspect` of each (checks,
    fingerprint, records spread over the buckets with labels from the thread's secure
    generator), done on the encoder threads and yielded in order: what is left for the
    shuffler per batch is its bookkeeping. Each batch is written into a buffer from a pool,
    returned to it when the caller asks for the next batch (the caller must be done with
    the previous one: :meth:`Shuffler.submit` keeps no reference to the bytes it gets with
    a spread inspection), so the batches' memory is reused rather than mapped anew per
    user."""
    params, users, streams = rnd.params, rnd.users, rnd.streams
    get_src = _thread_source()
    # a few users per encoder call: the call's set-up (the noise tables) is shared by them
    per = max(1, min(_USERS_PER_CALL, -(-rnd.participants.size // (2 * rnd.workers))))
    pool: queue.SimpleQueue = queue.SimpleQueue()

    def some(sel: np.ndarray) -> list[tuple[np.ndarray, Inspection]]:
        src = get_src()
        out = []
        for sh in encode_shares(params, users, sel, streams, src):
            try:
                buf = pool.get_nowait()
            except queue.Empty:
                buf = None
            data = framed_shares(params, sh, buf)  # the bytes of frame_shares
            out.append((data, shuffler.inspect(data.data, source=src)))
        return out

    sels = [rnd.participants[i : i + per] for i in range(0, rnd.participants.size, per)]
    for part in _ordered_map(some, sels, rnd.workers):
        for data, seen in part:
            yield data, seen
            pool.put(data)  # submitted: nothing refers to these bytes any more


#: records per sealing task of the encrypted path (about 0.3-1 s of HPKE seals)
_SEAL_RECORDS = 2048
_SEAL_STATE: dict = {}


def _init_seal_worker(params: ProtocolParams, public: bytes) -> None:
    _SEAL_STATE["state"] = (params, public)


def _seal_part(records: np.ndarray) -> bytes:
    params, public = _SEAL_STATE["state"]
    return encrypt_records(params, records, public)


def _sealed_batches(params: ProtocolParams, users: UserDistributions,
                    participants: np.ndarray, streams: UserStreams,
                    source: SecureRandom | None, public: bytes,
                    workers: int) -> Iterator[bytes]:
    """Encrypted user batches, in order, the HPKE seals on ``workers`` processes.

    This process encodes the users a few per call (the call's set-up, e.g. the noise
    tables, is shared; encoding is a small fraction of the seals) and hands out tasks of
    :data:`_SEAL_RECORDS` messages, so every process stays busy to the last message whatever
    the number of users; each user's sealed parts are joined in order under its header (the
    bytes :func:`~shuffledp.encoders.encoder.frame_messages` writes, each message sealed on
    its own, with the analyzer's key id in the header).
    """
    src = source if source is not None else SecureRandom()
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                      else "spawn")
    per = max(1, min(_USERS_PER_CALL, -(-participants.size // workers)))
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_seal_worker,
                             initargs=(params, public)) as ex:
        pending: deque = deque()

        def joined(futures: list) -> bytes:
            return sealed_batch(params, b"".join(f.result() for f in futures), public)

        for lo in range(0, participants.size, per):
            for sh in encode_shares(params, users, participants[lo : lo + per], streams, src):
                rec = messages(params, sh)
                pending.append([ex.submit(_seal_part, rec[i : i + _SEAL_RECORDS])
                                for i in range(0, rec.size, _SEAL_RECORDS)])
                if len(pending) > 1:  # the next user's tasks are queued: no process idles
                    yield joined(pending.popleft())
        while pending:
            yield joined(pending.popleft())


@dataclasses.dataclass(frozen=True)
class _Round:
    """What every path shares: the record, the users, who takes part and the randomness.

    ``rng`` is the caller's (``None``: a private release); ``streams`` the per-user noise
    streams the encoders draw from; ``source`` the secure generator of keys and
    permutations; ``workers`` the threads the encoders and the analyzer run on.
    """

    params: ProtocolParams
    users: UserDistributions
    participants: np.ndarray
    n_dropped: int
    rng: RngLike
    streams: UserStreams
    source: SecureRandom
    workers: int


def _check_users(users: object) -> UserDistributions:
    if not isinstance(users, UserDistributions):
        raise TypeError(f"users must be a UserDistributions, got {type(users).__name__}")
    return users


def _plan_round(users: UserDistributions, params: ProtocolParams, rng: RngLike,
                simulate_dropouts: int, workers: int | None = None) -> _Round:
    """Check ``params`` against the users and choose who takes part (the dropouts by ``rng``)."""
    _check_users(users)
    if not isinstance(params, ProtocolParams):
        raise TypeError(f"params must be a ProtocolParams, got params={params!r}")
    if params.n != users.n_users or params.grid != users.grid:
        raise ValueError(
            f"params are for n={params.n} on {params.grid}, users are n={users.n_users} on "
            f"{users.grid}"
        )
    nw = check_workers(workers)
    g = as_generator(rng)  # dropout simulation only
    src = SecureRandom()
    streams = UserStreams(rng)
    k = int(simulate_dropouts)
    if not (0 <= k <= users.n_users):
        raise ValueError(f"simulate_dropouts must be in 0..{users.n_users}, got {k!r}")
    order = np.arange(users.n_users)
    participants = np.sort(g.permutation(order)[: users.n_users - k]) if k else order
    return _Round(params, users, participants, k, rng, streams, src, nw)


def _release(rnd: _Round, acc: ModularAccumulator, n_fwd: int, n_dropped: int, path: str,
             timings: dict, layout: str | None = None) -> HeatmapRelease:
    """Decode, Reconstruct and release the round's sums; mark a seeded run as such."""
    t2 = time.perf_counter()
    release = analyze(rnd.params, acc, n_fwd, n_dropped, {"path": path, **timings})
    out = dict(release.protocol)
    out["wire_layout"] = layout
    if layout not in (None, "v2"):
        out["bytes_per_user"] = out.pop("bytes_per_user_written")
    out["reconstruct_seconds"] = time.perf_counter() - t2
    seeded = rnd.rng is not None
    parameters = {**release.parameters, "randomness": "seeded" if seeded else "secure"}
    guarantee = release.guarantee
    if seeded:
        guarantee = dataclasses.replace(guarantee, notes=(*guarantee.notes, SEEDED_NOTE))
    return HeatmapRelease(release.grid, release.estimate, release.raw, guarantee, parameters, out,
                          levels=release.levels)


def simulation_heatmap(
    users: UserDistributions,
    params: ProtocolParams,
    *,
    rng: RngLike = None,
    simulate_dropouts: int = 0,
    progress: Callable[[int], object] | None = None,
    workers: int | None = None,
) -> HeatmapRelease:
    """Simulation (research) path: shares summed mod q in process, no wire, no shuffler.

    Every participant's shares are drawn as on a device (:func:`simulate_sums`); the
    permutation and the encryption are skipped, which changes nothing in the sums.
    ``progress`` is called with the number of users encoded after each chunk.

    Parameters
    ----------
    users : UserDistributions
        The users' distributions over the grid's pixels.
    params : ProtocolParams
        The protocol record (:func:`~shuffledp.protocol.params.derive_params`); must match the
        users' grid and count.
    rng : int, Generator or None
        None: a private release (secure noise); a seed or Generator: reproducible noise and
        simulated dropouts (the guarantee notes it is not a private release).
    simulate_dropouts : int, default 0
        Users (chosen by ``rng``) who never send their batch, 0..n.
    progress : callable, optional
        Called with the number of users encoded after each chunk.
    workers : int, optional
        Threads (default: every core); the release is bit-identical for every value.

    Returns
    -------
    HeatmapRelease
        The estimate, its guarantee and the ``protocol`` figures (as :func:`shuffle_heatmap`).

    Raises
    ------
    TypeError
        If ``users`` is not a UserDistributions or ``params`` not a ProtocolParams.
    ValueError
        If ``params`` does not match the users or ``simulate_dropouts`` is out of range.
    shuffledp.analyzers.heatmap.modular.ReleaseRefused
        If more users dropped out than the declared fraction allows.
    """
    rnd = _plan_round(users, params, rng, simulate_dropouts, workers)
    t0 = time.perf_counter()
    acc = simulate_sums(params, users, rnd.participants, rnd.streams, None, progress,
                        workers=rnd.workers)
    timings = {"encode_and_sum_seconds": time.perf_counter() - t0}
    return _release(rnd, acc, rnd.participants.size, rnd.n_dropped, "simulation", timings)


def dask_heatmap(
    users: UserDistributions,
    params: ProtocolParams,
    client: object,
    *,
    rng: RngLike = None,
    simulate_dropouts: int = 0,
) -> HeatmapRelease:
    """Simulation path on a Dask cluster (:func:`shuffledp.protocol.dask_backend.dask_sums`).

    ``client`` is a ``distributed.Client``; each task encodes a user partition and sums its
    shares mod q, a tree of tasks adds the sums, Reconstruct runs on the driver. Every
    user's noise comes from its own stream, so a seeded release is bit-identical to the
    local backend's for every cluster size and partitioning.

    Parameters
    ----------
    users : UserDistributions
        The users' distributions over the grid's pixels.
    params : ProtocolParams
        The protocol record (:func:`~shuffledp.protocol.params.derive_params`); must match the
        users' grid and count.
    client : distributed.Client
        The Dask client.
    rng : int, Generator or None
        None: a private release (secure noise); a seed or Generator: reproducible noise and
        simulated dropouts (the guarantee notes it is not a private release).
    simulate_dropouts : int, default 0
        Users (chosen by ``rng``) who never send their batch, 0..n.

    Returns
    -------
    HeatmapRelease
        The estimate, its guarantee and the ``protocol`` figures (as :func:`shuffle_heatmap`).

    Raises
    ------
    TypeError
        If ``users`` is not a UserDistributions or ``params`` not a ProtocolParams.
    ValueError
        If ``params`` does not match the users or ``simulate_dropouts`` is out of
        range, or ``client`` is None.
    shuffledp.analyzers.heatmap.modular.ReleaseRefused
        If more users dropped out than the declared fraction allows.
    RuntimeError
        If dask[distributed] is not installed.
    """
    if client is None:
        raise ValueError("dask_heatmap needs a distributed.Client, got client=None")
    rnd = _plan_round(users, params, rng, simulate_dropouts)
    t0 = time.perf_counter()
    acc = dask_sums(params, users, rnd.participants, rnd.streams, client)
    timings = {"encode_shuffle_and_sum_seconds": time.perf_counter() - t0}
    return _release(rnd, acc, rnd.participants.size, rnd.n_dropped, "simulation (dask)",
                    timings)


def wire_heatmap(
    users: UserDistributions,
    params: ProtocolParams,
    *,
    layout: str = "v2",
    rng: RngLike = None,
    simulate_dropouts: int = 0,
    workers: int | None = None,
) -> HeatmapRelease:
    """Plaintext wire path: user batches in a wire layout -> shuffler -> analyzer.

    ``layout="v2"`` streams byte-aligned records through the
    :class:`~shuffledp.protocol.shuffler.Shuffler` and
    :func:`~shuffledp.analyzers.heatmap.modular.accumulate_mixed`; ``"packed"`` and
    ``"coordinate-major"`` run the bit-packed rounds of :mod:`shuffledp.protocol.packed` in
    memory. A simulation aid only: the shuffler sees every share and user batches carry no
    integrity. ``protocol["bytes_per_user"]`` is the length of the batch actually written.

    Parameters
    ----------
    users : UserDistributions
        The users' distributions over the grid's pixels.
    params : ProtocolParams
        The protocol record (:func:`~shuffledp.protocol.params.derive_params`); must match the
        users' grid and count.
    layout : {"v2", "packed", "coordinate-major"}
        The plaintext wire layout.
    rng : int, Generator or None
        None: a private release (secure noise); a seed or Generator: reproducible noise and
        simulated dropouts (the guarantee notes it is not a private release).
    simulate_dropouts : int, default 0
        Users (chosen by ``rng``) who never send their batch, 0..n.

    workers : int, optional
        Threads of the encoders, the shuffler's permutation and the analyzer (default:
        every core); the release is bit-identical for every value.

    Returns
    -------
    HeatmapRelease
        The estimate, its guarantee and the ``protocol`` figures (as :func:`shuffle_heatmap`).

    Raises
    ------
    TypeError
        If ``users`` is not a UserDistributions or ``params`` not a ProtocolParams.
    ValueError
        If ``params`` does not match the users or ``simulate_dropouts`` is out of
        range, or ``layout`` is not a layout.
    shuffledp.analyzers.heatmap.modular.ReleaseRefused
        If more users dropped out than the declared fraction allows.
    """
    layout = v.choice("layout", layout, ("v2", "packed", "coordinate-major"))
    rnd = _plan_round(users, params, rng, simulate_dropouts, workers)
    timings: dict[str, object] = {}
    if layout == "v2":
        res, report = _wire_round(rnd, False, timings)
        timings.update(res.figures())
        timings["shuffler"] = report.to_dict()
        return _release(rnd, res.accumulator, res.header.n_users, res.header.n_dropped, "wire",
                        timings, layout)
    h, acc = _packed_round(rnd, layout, timings)
    return _release(rnd, acc, h.n_users, h.n_dropped, "wire", timings, layout)


def deployment_heatmap(
    users: UserDistributions,
    params: ProtocolParams,
    *,
    rng: RngLike = None,
    simulate_dropouts: int = 0,
    workers: int | None = None,
) -> HeatmapRelease:
    """Deployment path in one process: encrypted batches -> shuffler -> analyzer.

    Every message is encrypted to a fresh analyzer X25519 key (ChaCha20-Poly1305) and the
    mixed batch authenticated with a fresh shuffler-analyzer MAC key; the v2 wire format
    throughout (slow: one X25519 exchange per message; see ``bench/shuffle_deploy.py``).

    Parameters
    ----------
    users : UserDistributions
        The users' distributions over the grid's pixels.
    params : ProtocolParams
        The protocol record (:func:`~shuffledp.protocol.params.derive_params`); must match the
        users' grid and count.
    rng : int, Generator or None
        None: a private release (secure noise); a seed or Generator: reproducible noise and
        simulated dropouts (the guarantee notes it is not a private release).
    simulate_dropouts : int, default 0
        Users (chosen by ``rng``) who never send their batch, 0..n.

    workers : int, optional
        Threads of the encoders, the shuffler's permutation and the analyzer (default:
        every core); the release is bit-identical for every value.

    Returns
    -------
    HeatmapRelease
        The estimate, its guarantee and the ``protocol`` figures (as :func:`shuffle_heatmap`).

    Raises
    ------
    TypeError
        If ``users`` is not a UserDistributions or ``params`` not a ProtocolParams.
    ValueError
        If ``params`` does not match the users or ``simulate_dropouts`` is out of range.
    shuffledp.analyzers.heatmap.modular.ReleaseRefused
        If more users dropped out than the declared fraction allows.
    """
    rnd = _plan_round(users, params, rng, simulate_dropouts, workers)
    timings: dict[str, object] = {}
    res, report = _wire_round(rnd, True, timings)
    timings.update(res.figures())
    timings["shuffler"] = report.to_dict()
    return _release(rnd, res.accumulator, res.header.n_users, res.header.n_dropped,
                    "deployment", timings)


class _ThreadSums:
    """The analyzer's sums of permuted buckets handed over on several threads
    (:meth:`~shuffledp.protocol.shuffler.Shuffler.mix_each`, records as integers): one
    :class:`~shuffledp.analyzers.heatmap.modular._CarrySums` per thread, fed each bucket as
    it comes (no copy: its one-word accumulator carries over from bucket to bucket), merged
    exactly (sums mod q and counts commute, so the result does not depend on the
    threads)."""

    def __init__(self, params: ProtocolParams) -> None:
        self.params = params
        self._local = threading.local()
        self._all: list[_CarrySums] = []
        self._lock = threading.Lock()

    def __call__(self, values: np.ndarray) -> None:
        st = getattr(self._local, "sums", None)
        if st is None:
            st = self._local.sums = _CarrySums(self.params)
            with self._lock:
                self._all.append(st)
        st.add(values)

    def merged(self, threads: int) -> ModularAccumulator:
        """Everything handed over, in one accumulator (sums reduced mod q)."""
        acc = ModularAccumulator(self.params, threads=threads)
        for st in self._all:
            st.into(acc)
        return acc


def _mix_and_sum_here(s: Shuffler, params: ProtocolParams, workers: int) -> MixedBatchResult:
    """The plaintext round's mixing and the analyzer's sums in this process: the shuffler
    permutes its buckets on ``workers`` threads and each thread's analyzer accumulator sums
    the buckets it permuted (:meth:`Shuffler.mix_each`). The analyzer checks the header as
    it would read it; there is no tag: the mixed batch does not leave the process."""
    sums = _ThreadSums(params)
    h = s.mix_each(sums)
    check_header(params, h, KIND_MIXED)
    acc = sums.merged(workers)
    return MixedBatchResult(h, acc, 0, acc.rejected, False)


def _wire_round(rnd: _Round, encrypt: bool, timings: dict):
    """Users -> shuffler -> analyzer; (MixedBatchResult, report).

    The shuffler keeps the round in memory when its records take at most
    :data:`_IN_MEMORY_BYTES` (else it spills to bucket files within its default memory
    limit). Plaintext: the analyzer sums each bucket as it is permuted
    (:func:`_mix_and_sum_here`); encrypted: the tagged mixed batch through a spooled file.
    """
    params, users = rnd.params, rnd.users
    t0 = time.perf_counter()
    key = generate_analyzer_key() if encrypt else None
    mac_key = generate_mac_key()
    size = params.n * params.messages_per_user * (
        encrypted_record_bytes(params) if encrypt else params.record_bytes)
    limit = 8 * size if size <= _IN_MEMORY_BYTES else DEFAULT_MEMORY_LIMIT
    with Shuffler(params, encrypted=encrypt, source=rnd.source, mac_key=mac_key,
                  workers=rnd.workers, memory_limit=max(limit, DEFAULT_MEMORY_LIMIT),
                  analyzer_key_id=analyzer_key_id(key) if key else None) as s:
        if encrypt:
            batches = user_batches(params, users, rnd.participants, rnd.streams, None,
                                   public_bytes(key) if key else None, workers=rnd.workers)
            for k, data in enumerate(batches):
                s.submit(data, sender=k)
        else:
            for k, (framed, seen) in enumerate(_inspected_batches(rnd, s)):
                s.submit(framed.data, sender=k, inspected=seen)
        s.missing(users.n_users - s.n_users_seen)
        timings["encode_and_submit_seconds"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        if encrypt:
            # mix to a spooled file first, then open on forked processes with no other
            # thread running (mixing is a small part of this path)
            with tempfile.SpooledTemporaryFile(max_size=1 << 28) as f:
                s.mix_to(f)
                f.seek(0)
                # a SpooledTemporaryFile is a binary file; typeshed does not say BinaryIO
                res = accumulate_mixed(params, cast(BinaryIO, f), key=key, mac_key=mac_key,
                                       workers=rnd.workers)
        else:
            res = _mix_and_sum_here(s, params, rnd.workers)
            timings["mixed_batch"] = "in process: permuted buckets summed as mixed, no tag"
        timings["mix_and_analyze_seconds"] = time.perf_counter() - t1
        timings["encode_and_shuffle_seconds"] = time.perf_counter() - t0
    return res, s.report


def _packed_round(rnd: _Round, layout: str, timings: dict):
    """Users -> bit-packed batches -> per-layout mixing -> analyzer (in memory); (Header, acc)."""
    params, users, src = rnd.params, rnd.users, rnd.source
    t0 = time.perf_counter()
    mac_key = generate_mac_key()
    get_src = _thread_source()
    batches = list(_ordered_map(
        lambda j: frame_user(params, encode_shares(params, users, np.array([j]), rnd.streams,
                                                   get_src())[0], layout),
        (int(j) for j in rnd.participants), rnd.workers))
    timings["bytes_per_user_written"] = len(batches[0]) if batches else 0
    mixed = mix(params, batches, layout, src, mac_key, n_dropped=rnd.n_dropped)
    timings["encode_and_shuffle_seconds"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    h, acc = accumulate(params, mixed, mac_key)
    timings["analyzer_seconds"] = time.perf_counter() - t1
    return h, acc


def shuffle_heatmap(
    users: UserDistributions,
    *,
    epsilon: float,
    delta: float,
    B: int,
    w: int = 20,
    gamma: float = DEFAULT_GAMMA,
    rounding: str = "largest_remainder",
    dropout: float = DEFAULT_DROPOUT,
    rng: RngLike = None,
    encrypt: bool = False,
    wire: bool = False,
    simulate_dropouts: int = 0,
    params: ProtocolParams | None = None,
    neighbour: Neighbour | str = DEFAULT_NEIGHBOUR,
    backend: str = "local",
    client: object = None,
    layout: str = "v2",
    progress: Callable[[int], object] | None = None,
    workers: int | None = None,
    budget: str = "auto",
) -> HeatmapRelease:
    """(eps, delta)-shuffle-DP heatmap ([Ghazi23]_ App. F; Alg. 1-2 after the aggregation).

    Derives the protocol record (unless ``params`` is given) and dispatches to the path's
    function: :func:`dask_heatmap` (``backend="dask"``), :func:`deployment_heatmap`
    (``encrypt=True``), :func:`wire_heatmap` (``wire=True``), else :func:`simulation_heatmap`.

    Parameters
    ----------
    users : UserDistributions
        n = users.n_users users (n >= 2), each a distribution over the grid's pixels.
    epsilon, delta : float
        Target guarantee, delta in (0, 1).
    B : int
        Scaling factor (App. F); larger B is closer to the central mechanism, costs more bits.
    w, gamma : int, float
        Reconstruct's top-w and the per-level budget decay (same split as the central model).
    rounding : {"largest_remainder", "floor"}
    dropout : float
        Declared dropout fraction (default
        :data:`~shuffledp.protocol.params.DEFAULT_DROPOUT`, 0.05); the Polya noise is
        over-provisioned for it ([Bagdasaryan22]_ Sec. 4), so up to n - ceil((1 - dropout) n)
        users may drop without the release being refused.
    rng : int, Generator or None
        ``None`` (default): the Polya noise, shares and permutations all come from the
        cryptographically secure generator (a private release). A seed or Generator drives the
        noise and the simulated dropouts reproducibly; the release's guarantee then notes
        "reproducible evaluation, not a private release".
    encrypt : bool
        Deployment path: per-message X25519 + ChaCha20-Poly1305, wire format, shuffler.
    wire : bool
        Plaintext wire format and shuffler (no encryption).
    simulate_dropouts : int
        Number of users (chosen by ``rng``) who never send their batch.
    params : ProtocolParams, optional
        Use this record instead of deriving one (must match users' grid and count).
    neighbour : Neighbour or {"zero_out", "replace"}, default DEFAULT_NEIGHBOUR (zero-out)
        Neighbour relation (n public in both): zero-out (Delta_i = B; the toolkit's one
        default, :data:`~shuffledp.accounting.guarantee.DEFAULT_NEIGHBOUR`, that of the
        central release, which it converges to as B grows) or replace-one (Delta_i = 2B).
    backend : {"local", "dask"}
        ``"dask"`` (simulation path only) runs the encoders, block shuffles and mod-q sums on
        ``client`` (a ``distributed.Client``; see :mod:`shuffledp.protocol.dask_backend`).
    client : distributed.Client, optional
        Required with ``backend="dask"``.
    layout : {"v2", "packed", "coordinate-major"}
        Plaintext wire layout (with ``wire=True`` only): byte-aligned v2 records, records at
        their exact bit width, or shares only with the coordinate implied by position
        (:mod:`shuffledp.protocol.packed`, in memory). ``protocol["bytes_per_user"]`` is the
        length of the user batch actually written, ``protocol["wire_layout"]`` the layout.
    progress : callable, optional
        Simulation path: called with the number of users encoded after each chunk (a
        progress bar's ``update``).

    workers : int, optional
        Threads of the local paths (default: every core). Every user's noise comes from its
        own stream, so a seeded release is bit-identical for every ``workers`` (and on the
        Dask backend for every cluster size).
    budget : {"auto", "paper"}, default "auto"
        The split of eps over the levels when the record is derived here (ignored with
        ``params``, which carries its own): the central release's rule and default
        (:func:`~shuffledp.accounting.budget.auto_level_budgets`), or "paper", the printed
        split (:func:`~shuffledp.accounting.budget.level_budgets`).

    Returns
    -------
    HeatmapRelease
        ``protocol`` holds B, q, r, m, messages_per_user, bits_per_user, bytes_per_user,
        n_users (forwarded), n_dropped and timings.

    Raises
    ------
    shuffledp.analyzers.heatmap.modular.ReleaseRefused
        If more users dropped out than the declared fraction allows.
    """
    _check_users(users)
    layout = v.choice("layout", layout, ("v2", "packed", "coordinate-major"))
    if layout != "v2" and (encrypt or not wire):
        raise ValueError(f"layout={layout!r} is a plaintext wire layout: it needs wire=True "
                         f"and encrypt=False, got wire={wire!r}, encrypt={encrypt!r}")
    if backend not in ("local", "dask"):
        raise ValueError(f"backend must be 'local' or 'dask', got backend={backend!r}")
    if backend == "dask" and (encrypt or wire or client is None):
        raise ValueError("backend='dask' needs client= and the simulation path "
                         f"(encrypt={encrypt!r}, wire={wire!r})")
    if params is None:
        params = derive_params(
            users.grid, users.n_users, epsilon=epsilon, delta=delta, B=B, w=w, gamma=gamma,
            rounding=rounding, dropout=dropout, neighbour=neighbour, budget=budget,
        )
    sd, nw = simulate_dropouts, workers
    if backend == "dask":
        return dask_heatmap(users, params, client, rng=rng, simulate_dropouts=sd)
    if encrypt:
        return deployment_heatmap(users, params, rng=rng, simulate_dropouts=sd, workers=nw)
    if wire:
        return wire_heatmap(users, params, layout=layout, rng=rng, simulate_dropouts=sd,
                            workers=nw)
    return simulation_heatmap(users, params, progress=progress, rng=rng, simulate_dropouts=sd,
                              workers=nw)
