"""Execution backends for the shuffle heatmap: ``local`` (one process) and ``dask``.

The Dask backend runs the simulation path on a cluster. By default (``mix=False``) each
task encodes one partition of the users and sums their shares mod q as they are drawn
(:func:`shuffledp.encoders.encoder.encode_sums`): a task holds O(users of the task x m)
integers and never a share array, only O(m) sums leave it, and the sums of all tasks are
added mod q by a tree of small tasks on the workers (fan-in 8) before one O(m) vector reaches
the driver; Reconstruct runs on the driver. The permutation is skipped, exactly as on the
local simulation path (the sums do not depend on the order). With ``mix=True`` the
shuffler's permutation is simulated too: encoders emit their shares per coordinate block and
one task per block permutes and sums it (below); that moves every share across the cluster
once and is the slow variant.

Randomness: every user's noise comes from its own stream
(:class:`shuffledp.randomness.UserStreams`: the j-th child of the seed), so a seeded release
is bit-identical to the local backend's, whatever the number of workers and partitions.
Deployment runs (``rng=None``) draw noise and shares from a fresh
:class:`shuffledp.randomness.SecureRandom` in each task.

Why block-wise shuffling preserves exactly what the analyzer sees
-----------------------------------------------------------------
Every message is a pair (a, w) with coordinate a in [0, m). The analyzer of [Ghazi23]_ App. F
only sums the shares of each coordinate mod q, and the privacy argument (split-and-mix,
[Balle20]_) is about the *multiset* of shares received per coordinate: the view of the
analyzer is the multiset {(a, w)}, equivalently the m multisets M_a = {w : (a, w) received}.
Route every message to the block that owns its coordinate a and permute each block by an
independent uniformly random permutation. The concatenation of the blocks, with coordinates
kept, is a sequence whose multiset is exactly {(a, w)} and whose per-coordinate multisets are
exactly M_a, in an order independent of which user sent which message within the block.
A single global uniform permutation reveals the same multisets and nothing more (its order is
independent of the senders), so the analyzer's view is identically distributed under both:
the coordinate a is public anyway (every user sends r messages per coordinate), so grouping
by a leaks nothing the global shuffle hides. Sums commute, so each block reduces
independently and the stitched sums equal the single-process sums exactly (integers mod q).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps", App. F
   -- full entry in docs/references.md
.. [Balle20] Balle et al. (2020), "Private summation in the multi-message shuffle model"
   -- full entry in docs/references.md
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.analyzers.heatmap.modular import ModularAccumulator
from shuffledp.encoders.encoder import encode_shares, encode_sums
from shuffledp.protocol.params import ProtocolParams
from shuffledp.randomness import RngLike, SecureRandom, UserStreams, secure_shuffle
from shuffledp.users import UserDistributions


def _dask_missing() -> RuntimeError:
    return RuntimeError(
        'the dask backend needs dask[distributed]: pip install "shuffledp[dask]"'
    )


def require_dask() -> Any:
    """Import and return ``distributed``; a clear RuntimeError if it is not installed.

    Returns
    -------
    module
        The ``distributed`` package.

    Raises
    ------
    RuntimeError
        If dask[distributed] is not installed.
    """
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise _dask_missing() from exc
    return distributed


def _coordinate_blocks(m: int, n_blocks: int) -> np.ndarray:
    """Block edges 0 = e_0 < ... < e_k = m: block i owns coordinates [e_i, e_{i+1})."""
    k = max(1, min(int(n_blocks), int(m)))
    return np.linspace(0, m, k + 1).round().astype(np.int64)


def _encode_partition(
    params: ProtocolParams, users: UserDistributions, select: np.ndarray,
    streams: UserStreams, edges: np.ndarray,
) -> list[np.ndarray]:
    """Encode one user partition; return its messages' shares split by coordinate block.

    Element i has shape (len(select) * r, e_{i+1} - e_i), uint32: one row per message row,
    the columns are coordinates e_i.. (the coordinate is implied by the column).
    """
    sh = encode_shares(params, users, select, streams, SecureRandom()).reshape(-1, params.m)
    return [np.ascontiguousarray(sh[:, lo:hi]) for lo, hi in zip(edges[:-1], edges[1:])]


def _encode_and_sum(params: ProtocolParams, users: UserDistributions, select: np.ndarray,
                    streams: UserStreams) -> tuple[np.ndarray, int]:
    """One user partition's shares summed mod q (O(m) out, no share array held)."""
    return encode_sums(params, users, select, streams, SecureRandom())


def _add_mod(q: int, *parts: tuple[np.ndarray, int]) -> tuple[np.ndarray, int]:
    """Sum partial (sums, messages) mod q: one node of the reduction tree."""
    tot = np.zeros_like(parts[0][0])
    n = 0
    for s_, k in parts:
        tot += s_
        tot %= q
        n += int(k)
    return tot, n


def shuffle_and_sum(
    params: ProtocolParams, lo: int, *parts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Mix one coordinate block and sum it mod q: (sums, counts, n_messages) for [lo, hi).

    The block's messages (a, w) are packed, permuted by one uniformly random permutation from
    the secure source (the block's shuffler), then summed per coordinate exactly.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters (the modulus q).
    lo : int
        First coordinate of the block.
    *parts : numpy.ndarray
        The block's shares from every user partition, each (messages, block width).

    Returns
    -------
    tuple of (numpy.ndarray, numpy.ndarray, int)
        Sums mod q and message counts per coordinate of the block, and the messages mixed.

    Raises
    ------
    ValueError
        If the parts have different block widths.
    """
    if len({p.shape[1] for p in parts}) > 1:
        raise ValueError(f"the parts of a block must have one width, got "
                         f"{sorted({p.shape[1] for p in parts})}")
    width = parts[0].shape[1] if parts else 0
    w = np.concatenate([p.reshape(-1, width) for p in parts]).astype(np.int64)
    coord = np.broadcast_to(np.arange(lo, lo + width, dtype=np.int64), w.shape)
    msg = (coord.ravel() << np.int64(32)) | w.ravel()
    secure_shuffle(msg, SecureRandom())
    a, s = (msg >> np.int64(32)) - lo, msg & np.int64(0xFFFFFFFF)
    sums = np.zeros(width, dtype=np.int64)
    np.add.at(sums, a, s % params.q)
    counts = np.bincount(a, minlength=width).astype(np.int64)
    return sums % params.q, counts, int(msg.size)


@dataclass(frozen=True)
class Partitioning:
    """How a run is split: ``user_parts`` user partitions, ``coord_blocks`` coordinate blocks.

    Parameters
    ----------
    user_parts : int
        Number of user partitions (one encoder task each).
    coord_blocks : int
        Number of coordinate blocks (one shuffle-and-sum task each).
    """

    user_parts: int
    coord_blocks: int


def default_partitioning(params: ProtocolParams, n_users: int, n_workers: int,
                         budget_bytes: int = 1 << 27) -> Partitioning:
    """At least 4 tasks per worker, and each task's messages within ``budget_bytes``.

    An encoder task holds 4 bytes per message of its users; a block task about 24 bytes per
    message of its block (uint32 shares, int64 packed messages, the shuffle's copy).

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters (r and m).
    n_users : int
        Participating users, >= 0.
    n_workers : int
        Dask workers, >= 0 (0 counts as 1).
    budget_bytes : int, default 2**27
        Memory budget of one task, >= 1.

    Returns
    -------
    Partitioning
        The user partitions and coordinate blocks.

    Raises
    ------
    TypeError
        If a count is not an integer.
    ValueError
        If a count is below its minimum.
    """
    n_users = v.count("n_users", n_users, 0)
    n_workers = v.count("n_workers", n_workers, 0)
    budget_bytes = v.count("budget_bytes", budget_bytes)
    total = int(n_users) * params.r * params.m
    least = 4 * max(1, int(n_workers))
    users = max(least, -(-4 * total // budget_bytes))
    blocks = max(least, -(-24 * total // budget_bytes))
    return Partitioning(min(users, max(1, int(n_users))), min(blocks, params.m))


def _plan(params, participants, part: Partitioning):
    user_sel = [s for s in np.array_split(participants, part.user_parts) if s.size]
    return user_sel, _coordinate_blocks(params.m, part.coord_blocks)


def _collect(params, edges, results) -> ModularAccumulator:
    acc = ModularAccumulator(params)
    for (lo, hi), (s, c, n) in zip(zip(edges[:-1], edges[1:]), results):
        acc.sums[lo:hi], acc.counts[lo:hi] = s, c
        acc.messages += n
    return acc


def _local_partitioned_sums(
    params: ProtocolParams, users: UserDistributions, participants: np.ndarray,
    rng: RngLike | UserStreams, part: Partitioning, mix: bool = False,
) -> ModularAccumulator:
    """The Dask plan executed serially in this process (reference for the Dask backend)."""
    user_sel, edges = _plan(params, participants, part)
    streams = rng if isinstance(rng, UserStreams) else UserStreams(rng)
    if not mix:
        tot, n = _add_mod(params.q, *[_encode_and_sum(params, users, s, streams)
                                      for s in user_sel])
        return _collect_sums(params, tot, participants.size, n)
    enc = [_encode_partition(params, users, s, streams, edges) for s in user_sel]
    res = [shuffle_and_sum(params, int(edges[i]), *[e[i] for e in enc])
           for i in range(edges.size - 1)]
    return _collect(params, edges, res)


def _collect_sums(params: ProtocolParams, sums: np.ndarray, n_users: int,
                  n_messages: int) -> ModularAccumulator:
    acc = ModularAccumulator(params)
    acc.sums[:] = sums
    acc.counts[:] = params.r * int(n_users)
    acc.messages = int(n_messages)
    return acc


def dask_sums(
    params: ProtocolParams, users: UserDistributions, participants: np.ndarray,
    rng: RngLike | UserStreams, client, part: Partitioning | None = None, *,
    mix: bool = False,
) -> ModularAccumulator:
    """Encoders per user partition and mod-q sums on ``client`` (see the module docstring).

    ``mix=False`` (default): one task per user partition encodes and sums its users' shares
    (no share array is held), a tree of tasks adds the O(m) partial sums mod q, one O(m)
    vector reaches the driver. ``mix=True``: shares routed per coordinate block, each block
    permuted and summed (the shuffler simulated). Both give the same sums, bit for bit, as
    the local backend for the same seed.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters.
    users : UserDistributions
        The users' distributions.
    participants : numpy.ndarray
        Indices of the users taking part.
    rng : None, int, SeedSequence, Generator or UserStreams
        Noise randomness: None draws it securely on the workers; else user j's noise comes
        from the j-th child stream of the seed (:class:`shuffledp.randomness.UserStreams`).
    client : distributed.Client
        The Dask client.
    part : Partitioning, optional
        The split; default :func:`default_partitioning` for the client's workers.
    mix : bool, default False
        Simulate the shuffler's permutation per coordinate block.

    Returns
    -------
    ModularAccumulator
        The sums mod q and message counts per coordinate.

    Raises
    ------
    RuntimeError
        If dask[distributed] is not installed.
    """
    require_dask()
    if part is None:
        part = default_partitioning(params, participants.size,
                                    len(client.scheduler_info().get("workers", {})))
    user_sel, edges = _plan(params, participants, part)
    streams = rng if isinstance(rng, UserStreams) else UserStreams(rng)
    # random keys: with content-hashed keys a second run on equal inputs reuses the keys of
    # the first run's data while the scheduler is still releasing them, and its tasks fail
    # with "lost dependencies" (dask/distributed issue #8576; the workaround given there)
    p_fut, u_fut = client.scatter([params, users], broadcast=True, hash=False)
    if not mix:
        level = [client.submit(_encode_and_sum, p_fut, u_fut, s, streams, pure=False)
                 for s in user_sel]
        while len(level) > 1:
            level = [client.submit(_add_mod, params.q, *level[i : i + 8], pure=False)
                     for i in range(0, len(level), 8)]
        tot, n = level[0].result()
        return _collect_sums(params, tot, participants.size, n)
    enc = [client.submit(_encode_partition, p_fut, u_fut, s, streams, edges, pure=False)
           for s in user_sel]
    nb = edges.size - 1
    pieces = [[client.submit(lambda e, i=i: e[i], f, pure=False) for i in range(nb)]
              for f in enc]
    sums = [client.submit(shuffle_and_sum, p_fut, int(edges[i]), *[pc[i] for pc in pieces],
                          pure=False) for i in range(nb)]
    return _collect(params, edges, client.gather(sums))


def connect(scheduler: str | None = None, n_workers: int | None = None) -> Any:
    """A ``distributed.Client``: to ``scheduler`` if given, else a fresh LocalCluster.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler (e.g. ``"tcp://host:8786"``).
    n_workers : int, optional
        Workers of the LocalCluster (None: dask's default); ignored with ``scheduler``.

    Returns
    -------
    distributed.Client
        The connected client (close it when done).

    Raises
    ------
    RuntimeError
        If dask[distributed] is not installed.
    OSError
        If ``scheduler`` cannot be reached within 10 seconds (dask's timeout error).
    """
    distributed = require_dask()
    if scheduler:
        return distributed.Client(scheduler, timeout=10)
    cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                       dashboard_address=None)
    return distributed.Client(cluster)
