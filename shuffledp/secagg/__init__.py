"""Secure aggregation with dropouts ([Bonawitz17]_): the server learns only the sum mod m.

:func:`secure_sum` runs the four rounds of :class:`SecAggClient` and :class:`SecAggServer`
in one process, passing the real byte messages (a research runner; a deployment runs the
same two classes in separate processes and moves the bytes over any channel). ``dropouts``
says which clients stop answering at which round, and ``intercept`` stands for the network
between each client and the server (it may alter, replace or drop any client message), so
every dropout and fault case can be exercised. A client that refuses a server message
(:class:`SecAggRefused`) leaves the run, as its process would in a deployment.

References
----------
.. [Bonawitz17] Bonawitz et al. (2017), "Practical Secure Aggregation", Fig. 4 -- full entry in
   docs/references.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from shuffledp import _validation as v
from shuffledp.secagg.client import SecAggClient, SecAggRefused
from shuffledp.secagg.messages import MessageError
from shuffledp.secagg.prg import MAX_MODULUS
from shuffledp.secagg.server import ROUND_NAMES, SecAggAborted, SecAggServer


@dataclass(frozen=True)
class SecAggResult:
    """Output of :func:`secure_sum`.

    Attributes
    ----------
    total : ndarray of int64
        sum of the survivors' vectors mod ``modulus``.
    survivors : tuple of int
        The clients whose masked input is in the sum (sorted).
    dropped : dict
        Round name -> clients that stopped answering in that round.
    threshold, n_clients, vector_length, modulus : int
    rejected : dict
        Reason -> number of messages the server rejected.
    excluded : dict
        Client -> why its round-3 message was rejected after the fact (a Shamir share off
        the polynomial that every other share and the secret's commitment agree on).
    suspects : dict
        Client -> a share off the accepted polynomial where the naming is not certain
        (:class:`shamir.Reconstruction`); the sum is right, the client is not excluded.
    refused : dict
        Client -> why it refused a server message and left the run.
    client_seconds_mean, client_seconds_max, server_seconds : float
        CPU-bound time of the four rounds (wall clock, one process).
    bytes_up_per_client, bytes_down_per_client : float
        Mean bytes a client sent / received over the four rounds.
    """

    total: np.ndarray
    survivors: tuple[int, ...]
    dropped: dict[str, tuple[int, ...]]
    threshold: int
    n_clients: int
    vector_length: int
    modulus: int
    rejected: dict[str, int] = field(default_factory=dict)
    excluded: dict[int, str] = field(default_factory=dict)
    suspects: dict[int, str] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)
    client_seconds_mean: float = 0.0
    client_seconds_max: float = 0.0
    server_seconds: float = 0.0
    bytes_up_per_client: float = 0.0
    bytes_down_per_client: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "total"}
        d["survivors"] = list(self.survivors)
        for k in ("excluded", "suspects", "refused"):
            d[k] = {str(c): why for c, why in sorted(d[k].items())}
        return d


def default_threshold(n: int) -> int:
    """floor(2n/3) + 1 (at least 2): more than two thirds of the clients.

    Parameters
    ----------
    n : int
        The number of clients, n >= 1.

    Returns
    -------
    int
        The threshold t: max(2, floor(2n/3) + 1) for n >= 2, and 1 for n = 1.

    Raises
    ------
    TypeError
        ``n`` is not an integer.
    ValueError
        ``n`` < 1.
    """
    n = v.count("n", n, 1)
    return max(2, 2 * n // 3 + 1) if n >= 2 else 1


def _iv(vectors: Sequence[Any], modulus: int, threshold: int | None,
        dropouts: Mapping[int, Collection[int]] | None) -> tuple:
    m = v.bounded_count("modulus", modulus, 2, MAX_MODULUS)
    arrs = []
    for i, x in enumerate(vectors):
        a = np.asarray(x)
        if a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
            raise ValueError(f"vectors[{i}] must be a 1-d integer array, got shape "
                             f"{a.shape}, dtype {a.dtype}")
        bad = (a < 0) | (a >= m)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise ValueError(f"vectors[{i}][{j}]={int(a[j])} is outside [0, modulus={m})")
        arrs.append(a.astype(np.int64))
    n = len(arrs)
    if n < 2:
        raise ValueError(f"secure aggregation needs at least 2 clients, got {n}")
    if len({a.size for a in arrs}) != 1:
        raise ValueError(f"vectors must have one length, got lengths "
                         f"{sorted({a.size for a in arrs})[:5]}")
    t = default_threshold(n) if threshold is None else v.bounded_count("threshold", threshold,
                                                                       2, n)
    drops: dict[int, set[int]] = {k: set() for k in range(4)}
    for k, ids in (dropouts or {}).items():
        if k not in drops:
            raise ValueError(f"dropouts keys must be rounds 0..3, got {k!r}")
        ids = set(int(i) for i in ids)
        if not ids <= set(range(n)):
            raise ValueError(f"dropouts[{k}] names clients outside 0..{n - 1}: "
                             f"{sorted(ids - set(range(n)))[:5]}")
        drops[k] = ids
    return arrs, m, t, drops


Intercept = Callable[[int, int, bytes], "bytes | None"]


def secure_sum(vectors: Sequence[Any], modulus: int, *, threshold: int | None = None,
               dropouts: Mapping[int, Collection[int]] | None = None,
               intercept: Intercept | None = None) -> SecAggResult:
    """Sum integer vectors mod ``modulus`` by secure aggregation, with dropouts.

    Parameters
    ----------
    vectors : sequence of 1-d integer arrays
        Client i's input (entries in [0, modulus), one common length).
    modulus : int
        m in [2, 2^62].
    threshold : int, optional
        t in [2, n]: the shares needed to reconstruct, and the fewest clients a round may
        end with; default :func:`default_threshold`.
    dropouts : mapping round -> client ids, optional
        Clients that send nothing from that round on (0 advertise keys, 1 share keys,
        2 masked input, 3 unmasking).
    intercept : callable (round, client, message) -> bytes or None, optional
        The channel from client to server: returns the bytes the server receives on that
        client's channel (the message, an altered one, another client's...) or None for
        nothing. For fault-injection tests and benchmarks; default: the message unchanged.

    Raises
    ------
    SecAggAborted
        Fewer than t clients in some round, or a secret that fewer than t correct shares
        hold (the message names it and the suspects). Never a wrong sum.
    ValueError
        Bad input (naming the argument and the value).

    Returns
    -------
    SecAggResult
        The sum mod ``modulus`` of the survivors' vectors, who survived and who dropped in
        which round, refusals, and the time and bytes each party spent.
    """
    arrs, m, t, drops = _iv(vectors, modulus, threshold, dropouts)
    n = len(arrs)
    session = os.urandom(16)
    server = SecAggServer(n, arrs[0].size, m, t, session)
    clients = {i: SecAggClient(i, arrs[i], m, t, session) for i in range(n)}
    spent = dict.fromkeys(clients, 0.0)
    up = dict.fromkeys(clients, 0)
    down = dict.fromkeys(clients, 0)
    server_s = 0.0
    gone: set[int] = set()
    dropped: dict[str, tuple[int, ...]] = {}
    incoming: dict[int, bytes] = {}
    refused: dict[int, str] = {}
    steps = [lambda c, _: c.advertise(), SecAggClient.share_keys, SecAggClient.masked_input,
             SecAggClient.unmask]
    result: np.ndarray | None = None
    for r in range(4):
        now = drops[r] - gone
        dropped[ROUND_NAMES[r]] = tuple(sorted(now))
        gone |= now
        for i, c in clients.items():
            if i in gone or (r > 0 and i not in incoming):
                continue
            t0 = time.perf_counter()
            try:
                out = steps[r](c, incoming[i] if r > 0 else b"")
            except (SecAggRefused, MessageError) as e:  # the client leaves the run
                refused[i] = str(e)
                gone.add(i)
                continue
            finally:
                spent[i] += time.perf_counter() - t0
            if intercept is not None:
                out = intercept(r, i, out)
                if out is None:
                    continue
            up[i] += len(out)
            t0 = time.perf_counter()
            server.receive(out, channel=i)
            server_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        reply = server.close_round()
        server_s += time.perf_counter() - t0
        # close_round's type depends on the round (SecAggServer.close_round)
        if r == 1:
            incoming = dict(cast("dict[int, bytes]", reply))
        elif r in (0, 2):
            members = server.members[-1]
            incoming = {i: cast(bytes, reply) for i in members}
        else:
            result = cast(np.ndarray, reply)
        for i, b in incoming.items():
            down[i] += len(b)
    if result is None:  # round 3 returns the sum or raises SecAggAborted
        raise RuntimeError("secure aggregation ended without a sum")
    times = np.array(list(spent.values()))
    return SecAggResult(
        total=result, survivors=tuple(sorted(server.members[3])), dropped=dropped,
        threshold=t, n_clients=n, vector_length=arrs[0].size, modulus=m,
        rejected=dict(server.rejected), excluded=dict(server.excluded),
        suspects=dict(server.suspects), refused=refused, client_seconds_mean=float(times.mean()),
        client_seconds_max=float(times.max()), server_seconds=server_s,
        bytes_up_per_client=float(np.mean(list(up.values()))),
        bytes_down_per_client=float(np.mean(list(down.values()))),
    )


__all__ = ["MessageError", "SecAggAborted", "SecAggClient", "SecAggRefused", "SecAggResult",
           "SecAggServer", "default_threshold", "secure_sum"]
