"""A directory as the network: server and clients of secure aggregation as separate processes.

Each message is one file, written to a temporary name and renamed into place (atomic on
POSIX), so a reader never sees half a message::

    DIR/session                   the run's 16-byte id (written by the server)
    DIR/round{k}/client-{i}.msg   client i's message of round k
    DIR/round{k}/server.msg       the server's broadcast after round k (k = 0, 2)
    DIR/round1/to-{i}.msg         the shares addressed to client i (after round 1)
    DIR/result.npy, report.json   the sum and the server's report

The server waits for every client of the previous round until ``round_timeout`` seconds pass
and then closes the round with whoever answered (a late or missing client is a dropout);
clients wait for the server's message of each round up to their own timeout.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

POLL = 0.02


def post(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def wait_for(path: Path, timeout: float) -> bytes:
    """The contents of ``path`` once it exists; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no message at {path} after {timeout:g} s")
        time.sleep(POLL)
    return path.read_bytes()


def collect(folder: Path, expected: set[int], timeout: float) -> dict[int, bytes]:
    """client-{i}.msg of every expected client present within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = {i for i in expected if (folder / f"client-{i}.msg").exists()}
        if got == expected or time.monotonic() > deadline:
            return {i: (folder / f"client-{i}.msg").read_bytes() for i in sorted(got)}
        time.sleep(POLL)


__all__ = ["collect", "post", "wait_for"]
