"""Simulated secure-aggregation clients in worker processes (one block of clients each).

:func:`shuffledp.secagg.secure_sum` runs every client of a large run in W worker processes
(default: every core). Each worker builds its block's :class:`~.client.SecAggClient`
objects (their keys, seeds and Shamir coefficients drawn in the worker from its own
:class:`~shuffledp.randomness.SecureRandom`), keeps them for the four rounds, and answers one
batch of server messages per round with the clients' byte messages; the server's sparse
unmasking jobs (:func:`~.server.unmask_jobs`) are split over the same workers. Only bytes
cross the process boundary, as they would cross a network.

Processes, not threads: the clients' work is Python big-integer Shamir arithmetic and many
small calls into ``cryptography`` that hold the GIL (``bench/secagg_cost.py --threads``
measures both).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

from shuffledp.secagg.client import SecAggClient, SecAggRefused
from shuffledp.secagg.graph import CommunicationGraph
from shuffledp.secagg.messages import MessageError
from shuffledp.secagg.server import unmask_jobs

_STEPS = (lambda c, _: c.advertise(), SecAggClient.share_keys, SecAggClient.masked_input,
          SecAggClient.unmask)


def run_round(clients: dict[int, SecAggClient], r: int,
              incoming: dict[int, bytes]) -> dict[int, tuple[str, Any, float]]:
    """Each addressed client's answer to round ``r``.

    Parameters
    ----------
    clients : dict
        Client id -> :class:`~.client.SecAggClient`.
    r : int
        The round, 0..3.
    incoming : dict
        Client id -> the server's message for it (b"" in round 0); other clients do nothing.

    Returns
    -------
    dict
        Client id -> (``"ok"``, its message bytes, seconds) or (``"refused"``, why, seconds):
        seconds the CPU time of its step (``time.process_time``: what the client spends,
        whatever else the machine runs). A refusal (:class:`~.client.SecAggRefused` or a
        malformed server message) is the client leaving the run.

    Raises
    ------
    KeyError
        ``incoming`` names a client not in ``clients``.
    """
    out: dict[int, tuple[str, Any, float]] = {}
    for i, data in incoming.items():
        t0 = time.process_time()
        try:
            res: tuple[str, Any] = ("ok", _STEPS[r](clients[i], data))
        except (SecAggRefused, MessageError) as e:  # the client leaves the run
            res = ("refused", str(e))
        out[i] = (res[0], res[1], time.process_time() - t0)
    return out


def _serve(conn, block: dict[int, np.ndarray], modulus: int, threshold: int, session: bytes,
           graph: CommunicationGraph | None) -> None:
    clients = {i: SecAggClient(i, x, modulus, threshold, session, graph=graph)
               for i, x in block.items()}
    while True:
        cmd = conn.recv()
        if cmd[0] == "round":
            conn.send(run_round(clients, cmd[1], cmd[2]))
        elif cmd[0] == "unmask":
            t0 = time.process_time()
            res = unmask_jobs(*cmd[1])
            conn.send((res, time.process_time() - t0))
        else:
            conn.close()
            return


class ClientPool:
    """W worker processes holding the clients of one run (context manager).

    Parameters
    ----------
    vectors : list of numpy.ndarray
        Client i's input.
    modulus, threshold : int
        m and t.
    session : bytes
        The run's 16-byte id.
    graph : CommunicationGraph or None
        The run's graph.
    workers : int
        Processes (>= 2; the blocks are contiguous ranges of client ids).
    """

    def __init__(self, vectors: list[np.ndarray], modulus: int, threshold: int, session: bytes,
                 graph: CommunicationGraph | None, workers: int) -> None:
        # fork: the workers inherit the loaded modules (no re-import, no __main__ guard
        # needed in the caller's script); spawn where fork does not exist
        ctx: Any = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        n = len(vectors)
        cuts = np.linspace(0, n, workers + 1).astype(int)
        self.owner = np.repeat(np.arange(workers), np.diff(cuts))
        self._conns = []
        self._procs = []
        #: CPU seconds the workers spent on the last :meth:`unmask`
        self.unmask_cpu = 0.0
        for w in range(workers):
            parent, child = ctx.Pipe()
            block = {i: vectors[i] for i in range(cuts[w], cuts[w + 1])}
            p = ctx.Process(target=_serve, args=(child, block, modulus, threshold, session,
                                                 graph), daemon=True)
            p.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(p)

    def round(self, r: int, incoming: dict[int, bytes]) -> dict[int, tuple[str, Any, float]]:
        """Every addressed client's answer to round ``r`` (the workers run in parallel)."""
        parts: list[dict[int, bytes]] = [{} for _ in self._conns]
        for i, data in incoming.items():
            parts[int(self.owner[i])][i] = data
        for conn, part in zip(self._conns, parts):
            conn.send(("round", r, part))
        out: dict[int, tuple[str, Any, float]] = {}
        for conn in self._conns:
            out.update(self._recv(conn))
        return out

    def _recv(self, conn) -> Any:
        try:
            return conn.recv()
        except (EOFError, OSError) as e:
            raise RuntimeError(f"a secure-aggregation worker process died ({e!r}); no sum "
                               "is released") from None

    def unmask(self, bound: bytes, length: int, modulus: int, threshold: int,
               jobs: list) -> tuple[np.ndarray, list]:
        """:func:`~.server.unmask_jobs` split over the workers (same result)."""
        w = len(self._conns)
        chunks = [jobs[j::w] for j in range(w)]
        for conn, chunk in zip(self._conns, chunks):
            conn.send(("unmask", (bound, length, modulus, threshold, chunk)))
        removed = np.zeros(length, dtype=np.int64)
        results: list = []
        self.unmask_cpu = 0.0
        for conn in self._conns:
            (part, res), cpu = self._recv(conn)
            self.unmask_cpu += cpu
            removed = (removed + part) % modulus
            results.extend(res)
        return removed, results

    def close(self) -> None:
        """Stop the workers."""
        for conn in self._conns:
            try:
                conn.send(("stop",))
                conn.close()
            except OSError:
                pass
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()

    def __enter__(self) -> ClientPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_workers() -> int:
    """The cores this process may use.

    Returns
    -------
    int
        ``len(os.sched_getaffinity(0))`` where available, else ``os.cpu_count()`` (at least 1).
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


__all__ = ["ClientPool", "default_workers", "run_round"]
