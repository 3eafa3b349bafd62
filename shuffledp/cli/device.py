"""The device side of ``shuffledp encode``: one user under a progress bar, or many users in
parallel (a deployment test: one batch file per user, every core).

One user. :func:`encode_one` is :func:`shuffledp.encoders.encoder.user_batch` done in steps
so that a progress bar with an ETA can follow it:
:func:`~shuffledp.encoders.encoder.encode_user` (noise and shares, from the
cryptographically secure generator), then the messages encrypted to the analyzer in chunks
of :data:`CHUNK` (each message is its own HPKE Seal, so encrypting the records chunk by
chunk and joining the ciphertexts gives the batch
:func:`~shuffledp.encoders.encoder.frame_messages` writes), then the wire header. The
encryption is what takes the time (about 2 million messages per user at the README's
deployment example).

Many users. :func:`encode_users` reads a ``user_id,x,y[,weight]`` CSV (the format of
``shuffledp heatmap --input``), groups the points by user and encodes every user in a
process pool (``--workers``, default one per core), writing ``OUT/<name>.bin`` per user,
where the name is the user id when it is 1 to 64 characters of ``A-Z a-z 0-9 _ -`` and a
hash of it otherwise. Each worker draws from its own secure generator; no seed exists.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, as_completed, wait
from pathlib import Path
from typing import Any

import numpy as np

#: messages encrypted per progress step of one user
CHUNK = 1 << 15
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def encode_one(params: Any, pixels: np.ndarray, weights: np.ndarray,
               analyzer_public: bytes | None,
               progress: Callable[[int], Any] | None = None, workers: int = 1) -> bytes:
    """One user's wire batch, as :func:`shuffledp.encoders.encoder.user_batch` writes it.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters.
    pixels, weights : numpy.ndarray
        The user's leaf pixels and their weights.
    analyzer_public : bytes or None
        The analyzer's raw X25519 public key (None: the plaintext simulation path).
    progress : callable, optional
        Called with the number of messages just encrypted (r m in total).
    workers : int, default 1
        Processes sealing the chunks (HPKE holds the GIL, so threads would not help); the
        chunks are joined in order, so the batch's layout does not depend on it.

    Returns
    -------
    bytes
        The batch: the 64-byte header, then the records (encrypted when a key is given).
    """
    from shuffledp.encoders.encoder import encode_user, frame_messages, sealed_batch
    from shuffledp.protocol.crypto import encrypt_records

    records = encode_user(params, pixels, weights)
    if analyzer_public is None:
        if progress is not None:
            progress(records.size)
        return frame_messages(params, records, None)
    # on several processes: at least 4 chunks per process, so that they finish together
    size = CHUNK if workers <= 1 else max(1, min(CHUNK, -(-records.size // (4 * workers))))
    chunks = [records[start:start + size] for start in range(0, records.size, size)]
    parts = []
    if workers > 1 and len(chunks) > 1:
        with ProcessPoolExecutor(min(workers, len(chunks)), initializer=_init_worker,
                                 initargs=(params.to_json(), bytes(analyzer_public))) as pool:
            for chunk, part in zip(chunks, pool.map(_seal_chunk, chunks)):
                parts.append(part)
                if progress is not None:
                    progress(chunk.size)
    else:
        for chunk in chunks:
            parts.append(encrypt_records(params, chunk, analyzer_public))
            if progress is not None:
                progress(chunk.size)
    return sealed_batch(params, b"".join(parts), analyzer_public)


def batch_name(user_id: str) -> str:
    """The file name (without ``.bin``) of a user's batch: the id itself when it is a safe
    file name, else ``u-`` and the first 16 hex digits of its SHA-256."""
    if _SAFE_NAME.fullmatch(user_id):
        return user_id
    return "u-" + hashlib.sha256(user_id.encode()).hexdigest()[:16]


def group_users(table: Any, grid: Any) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(user id, pixels, weights) per user of a PointTable, in order of first appearance."""
    users = np.asarray(table.user).astype(str)
    ids, first, inverse = np.unique(users, return_index=True, return_inverse=True)
    pixels = grid.points_to_pixels(table.x, table.y)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(ids.size + 1))
    out = []
    for k in np.argsort(first, kind="stable"):
        rows = order[bounds[k]:bounds[k + 1]]
        out.append((str(ids[k]), pixels[rows], np.asarray(table.weight)[rows]))
    return out


_WORKER: dict[str, Any] = {}


def _init_worker(params_json: str, analyzer_public: bytes | None) -> None:
    from shuffledp.protocol.params import ProtocolParams

    _WORKER["params"] = ProtocolParams.from_json(params_json)
    _WORKER["public"] = analyzer_public


def _seal_chunk(chunk: np.ndarray) -> bytes:
    from shuffledp.protocol.crypto import encrypt_records

    return encrypt_records(_WORKER["params"], chunk, _WORKER["public"])


def _encode_to_file(path: str, pixels: np.ndarray, weights: np.ndarray) -> int:
    from shuffledp.encoders.encoder import user_batch
    from shuffledp.safe_io import write_atomic

    blob = user_batch(_WORKER["params"], pixels, weights, analyzer_public=_WORKER["public"])
    write_atomic(path, blob)
    return len(blob)


def encode_users(params: Any, users: list[tuple[str, np.ndarray, np.ndarray]],
                 analyzer_public: bytes | None, out_dir: Path, workers: int,
                 progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Encode every user into ``out_dir/<batch_name>.bin`` on ``workers`` processes.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters (sent to every worker as its JSON).
    users : list of (str, ndarray, ndarray)
        (user id, pixels, weights), from :func:`group_users`.
    analyzer_public : bytes or None
        The analyzer's raw public key (None: plaintext simulation path).
    out_dir : Path
        The folder of the batches (created).
    workers : int
        Processes (1: in this process).
    progress : callable, optional
        Called with 1 after each user's batch is written.

    Returns
    -------
    dict
        ``{"users": n, "bytes": total bytes written, "files": [names]}``.

    Raises
    ------
    ValueError
        Two user ids map to one file name.
    """
    names = [batch_name(u) for u, _, _ in users]
    if len(set(names)) != len(names):
        raise ValueError("two user ids map to the same batch file name")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [os.fspath(out_dir / f"{n}.bin") for n in names]
    total = 0
    if workers <= 1 or len(users) == 1:
        _init_worker(params.to_json(), analyzer_public)
        for path, (_, px, wt) in zip(paths, users):
            total += _encode_to_file(path, px, wt)
            if progress is not None:
                progress(1)
    else:
        with ProcessPoolExecutor(workers, initializer=_init_worker,
                                 initargs=(params.to_json(), analyzer_public)) as pool:
            pending = set()
            queue = iter(zip(paths, users))
            for path, (_, px, wt) in queue:  # at most 2 tasks per worker in flight
                pending.add(pool.submit(_encode_to_file, path, px, wt))
                if len(pending) >= 2 * workers:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        total += f.result()
                        if progress is not None:
                            progress(1)
            for f in as_completed(pending):
                total += f.result()
                if progress is not None:
                    progress(1)
    return {"users": len(users), "bytes": total, "files": [f"{n}.bin" for n in names]}


__all__ = ["CHUNK", "batch_name", "encode_one", "encode_users", "group_users"]
