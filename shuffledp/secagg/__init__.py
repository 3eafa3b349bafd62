"""Secure aggregation with dropouts ([Bonawitz17]_): the server learns only the sum mod m.

:func:`secure_sum` runs the four rounds of :class:`SecAggClient` and :class:`SecAggServer`
in one process, passing the real byte messages (a research runner; a deployment runs the
same two classes in separate processes and moves the bytes over any channel). ``dropouts``
says which clients stop answering at which round, and ``intercept`` stands for the network
between each client and the server (it may alter, replace or drop any client message), so
every dropout and fault case can be exercised. A client that refuses a server message
(:class:`SecAggRefused`) leaves the run, as its process would in a deployment.

``graph="sparse"`` runs SecAgg+ ([Bell20]_, :mod:`.graph`): each client works with k =
O(log n) neighbours of a random Harary graph instead of all n - 1 others, with k and the
Shamir threshold t chosen by :func:`~.graph.sparse_parameters` for the dropout fraction and
the corrupted fraction it must tolerate. Large runs spread the clients over worker processes
(:mod:`.workers`), one per core by default.

References
----------
.. [Bonawitz17] Bonawitz et al. (2017), "Practical Secure Aggregation", Fig. 4 -- full entry in
   docs/references.md.
.. [Bell20] Bell, Bonawitz, Gascon, Lepoint, Raykova (2020), "Secure Single-Server Aggregation
   with (Poly)Logarithmic Overhead", Sec. 3 -- full entry in docs/references.md.
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
from shuffledp.secagg.graph import (
    CORRUPT,
    CommunicationGraph,
    GraphParameters,
    complete_graph,
    harary_graph,
    sparse_parameters,
)
from shuffledp.secagg.graph import graph_seed as _graph_seed
from shuffledp.secagg.messages import Context, MessageError
from shuffledp.secagg.prg import MAX_MODULUS
from shuffledp.secagg.server import ROUND_NAMES, SecAggAborted, SecAggServer
from shuffledp.secagg.workers import ClientPool, default_workers, run_round


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
        CPU seconds of the four rounds (``time.process_time``, so a busy machine does not
        inflate them): per client (mean, max) and of the server (its unmasking jobs counted
        in whichever worker process ran them).
    bytes_up_per_client, bytes_down_per_client : float
        Mean bytes a client sent / received over the four rounds.
    graph : str
        ``"complete"`` or ``"sparse"`` (the graph the run used; a sparse request falls back
        to complete when no sparse graph meets the bounds).
    degree : int
        k, each client's neighbours (n - 1 for the complete graph).
    min_clients : int
        The fewest clients a round could end with.
    workers : int
        Processes the clients ran in (1: this process).
    parameters : dict
        The sparse graph's :class:`~.graph.GraphParameters` (empty for a complete run).
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
    graph: str = "complete"
    degree: int = 0
    min_clients: int = 0
    workers: int = 1
    parameters: dict[str, Any] = field(default_factory=dict)

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
#: runs below this many clients stay in this process unless ``workers`` says otherwise
POOL_MIN_CLIENTS = 64


def _plan_graph(n: int, graph: str, threshold: int | None, dropout: float | None,
                corrupt: float, min_clients: int | None,
                seed: bytes | None) -> tuple[int, GraphParameters | None]:
    """(t, sparse parameters or None) after checking the graph options."""
    kind = v.choice("graph", graph, ("complete", "sparse"))
    if seed is not None and (not isinstance(seed, (bytes, bytearray)) or len(seed) != 32):
        raise ValueError(f"graph_seed must be 32 bytes, got {seed!r:.40}")
    if kind == "complete":
        for name, val in (("dropout", dropout), ("min_clients", min_clients),
                          ("graph_seed", seed)):
            if val is not None:
                raise ValueError(f"{name} plans a sparse graph; the complete graph takes "
                                 f"threshold only, got {name}={val!r}")
        t = default_threshold(n) if threshold is None else v.bounded_count("threshold",
                                                                           threshold, 2, n)
        return t, None
    if threshold is not None:
        raise ValueError(f"graph='sparse' chooses its threshold from dropout and corrupt "
                         f"(sparse_parameters), got threshold={threshold!r}")
    if dropout is not None and min_clients is not None:
        raise ValueError(f"give dropout or min_clients, not both, got dropout={dropout!r}, "
                         f"min_clients={min_clients!r}")
    params = sparse_parameters(n, 0.1 if dropout is None else dropout, corrupt,
                               min_clients=min_clients)
    return params.threshold, params


def secure_sum(vectors: Sequence[Any], modulus: int, *, threshold: int | None = None,
               dropouts: Mapping[int, Collection[int]] | None = None,
               intercept: Intercept | None = None, graph: str = "complete",
               dropout: float | None = None, corrupt: float = CORRUPT,
               min_clients: int | None = None, graph_seed: bytes | None = None,
               workers: int | None = None) -> SecAggResult:
    """Sum integer vectors mod ``modulus`` by secure aggregation, with dropouts.

    Parameters
    ----------
    vectors : sequence of 1-d integer arrays
        Client i's input (entries in [0, modulus), one common length).
    modulus : int
        m in [2, 2^62].
    threshold : int, optional
        Complete graph only: t in [2, n], the shares needed to reconstruct, and the fewest
        clients a round may end with; default :func:`default_threshold`.
    dropouts : mapping round -> client ids, optional
        Clients that send nothing from that round on (0 advertise keys, 1 share keys,
        2 masked input, 3 unmasking).
    intercept : callable (round, client, message) -> bytes or None, optional
        The channel from client to server: returns the bytes the server receives on that
        client's channel (the message, an altered one, another client's...) or None for
        nothing. For fault-injection tests and benchmarks; default: the message unchanged.
    graph : {"complete", "sparse"}
        The full protocol ([Bonawitz17]_, default) or SecAgg+ ([Bell20]_): k neighbours and
        threshold t from :func:`~.graph.sparse_parameters` (the complete graph when no sparse
        one meets its bounds).
    dropout : float in [0, 1), optional
        Sparse only: delta, the dropout fraction the graph tolerates (default 0.1); a round
        with fewer than n - floor(delta n) clients is refused.
    corrupt : float in [0, 1)
        Sparse only: gamma, the fraction of clients colluding with the server (default
        :data:`~.graph.CORRUPT`).
    min_clients : int, optional
        Sparse only, instead of ``dropout``: the fewest clients a round may end with.
    graph_seed : bytes, optional
        Sparse only: 32 public unpredictable bytes (a randomness beacon's output published
        after the clients enrolled) the graph is drawn from; default :func:`~.graph.graph_seed`
        of the run's fresh session. Public by design: it never seeds a key or a mask.
    workers : int, optional
        Processes for the simulated clients and the sparse unmasking (default: every core
        for runs of at least 64 clients, else this process).

    Raises
    ------
    SecAggAborted
        Fewer clients than t (complete) or min_clients (sparse) in some round, or a secret
        that fewer than t correct shares hold (the message names it; with a sparse graph:
        too few of its owner's neighbours answered). Never a wrong sum.
    ValueError
        Bad input (naming the argument and the value).

    Returns
    -------
    SecAggResult
        The sum mod ``modulus`` of the survivors' vectors, who survived and who dropped in
        which round, refusals, the time and bytes each party spent and the graph used.
    """
    arrs, m, _, drops = _iv(vectors, modulus, 2, dropouts)
    n = len(arrs)
    t, params = _plan_graph(n, graph, threshold, dropout, corrupt, min_clients, graph_seed)
    W = default_workers() if workers is None and n >= POOL_MIN_CLIENTS else (
        1 if workers is None else v.count("workers", workers))
    session = os.urandom(16)
    if params is None or params.complete:
        g: CommunicationGraph | None = None
    else:
        ctx = Context(session, m, arrs[0].size, t).pack()
        seed = bytes(graph_seed) if graph_seed is not None else _graph_seed(
            ctx, n, params.k, params.min_clients)
        g = harary_graph(n, params.k, seed, params.min_clients)
    if params is not None and params.complete:
        g = complete_graph(n)
    server = SecAggServer(n, arrs[0].size, m, t, session, graph=g)
    pool = ClientPool(arrs, m, t, session, g, W) if W > 1 else None
    clients = ({} if pool is not None else
               {i: SecAggClient(i, arrs[i], m, t, session, graph=g) for i in range(n)})
    try:
        if pool is not None:
            server.unmask_runner = pool.unmask
        return _drive(server, clients, pool, arrs, m, t, drops, intercept, params, g, W)
    finally:
        if pool is not None:
            pool.close()


def _drive(server, clients, pool, arrs, m, t, drops, intercept, params, g, W) -> SecAggResult:
    n = len(arrs)
    spent = dict.fromkeys(range(n), 0.0)
    up = dict.fromkeys(range(n), 0)
    down = dict.fromkeys(range(n), 0)
    server_s = 0.0
    gone: set[int] = set()
    dropped: dict[str, tuple[int, ...]] = {}
    incoming: dict[int, bytes] = {i: b"" for i in range(n)}
    refused: dict[int, str] = {}
    result: np.ndarray | None = None
    for r in range(4):
        now = drops[r] - gone
        dropped[ROUND_NAMES[r]] = tuple(sorted(now))
        gone |= now
        asked = {i: b for i, b in incoming.items() if i not in gone}
        answers = pool.round(r, asked) if pool is not None else run_round(clients, r, asked)
        for i in sorted(answers):
            status, out, secs = answers[i]
            spent[i] += secs
            if status != "ok":  # the client leaves the run
                refused[i] = out
                gone.add(i)
                continue
            if intercept is not None:
                out = intercept(r, i, out)
                if out is None:
                    continue
            up[i] += len(out)
            t0 = time.process_time()
            server.receive(out, channel=i)
            server_s += time.process_time() - t0
        t0 = time.process_time()
        reply = server.close_round()
        server_s += time.process_time() - t0 + (pool.unmask_cpu if pool and r == 3 else 0.0)
        # close_round's type depends on the round and the graph (SecAggServer.close_round)
        if isinstance(reply, dict):
            incoming = dict(cast("dict[int, bytes]", reply))
        elif isinstance(reply, bytes):
            incoming = {i: reply for i in server.members[-1]}
        else:
            result = cast(np.ndarray, reply)
        for i, b in incoming.items():
            down[i] += len(b)
    if result is None:  # round 3 returns the sum or raises SecAggAborted
        raise RuntimeError("secure aggregation ended without a sum")
    times = np.array(list(spent.values()))
    sparse = g is not None and not g.complete
    return SecAggResult(
        total=result, survivors=tuple(sorted(server.members[3])), dropped=dropped,
        threshold=t, n_clients=n, vector_length=arrs[0].size, modulus=m,
        rejected=dict(server.rejected), excluded=dict(server.excluded),
        suspects=dict(server.suspects), refused=refused, client_seconds_mean=float(times.mean()),
        client_seconds_max=float(times.max()), server_seconds=server_s,
        bytes_up_per_client=float(np.mean(list(up.values()))),
        bytes_down_per_client=float(np.mean(list(down.values()))),
        graph="sparse" if sparse else "complete", degree=g.k if sparse and g else n - 1,
        min_clients=server.min_round, workers=W,
        parameters=params.to_dict() if params is not None else {},
    )


__all__ = ["CommunicationGraph", "GraphParameters", "MessageError", "SecAggAborted",
           "SecAggClient", "SecAggRefused", "SecAggResult", "SecAggServer", "default_threshold",
           "secure_sum", "sparse_parameters"]
