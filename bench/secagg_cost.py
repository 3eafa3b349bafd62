"""Secure aggregation cost against n: SecAgg+ (sparse graph) and the full protocol.

For each n, runs :func:`shuffledp.secagg.secure_sum` (four rounds, real messages, the
clients in worker processes, every core) with 5% of the clients dropping (half before the
masked input, half during the key sharing), and prints per client and for the server the CPU
seconds (``time.process_time``, so the numbers do not depend on what else the shared
machine runs), the bytes each client sends, the degree k and threshold t, and whether the
sum is exact. Every cost is also printed as a RATIO to a reference measured in the same run:
``unit`` = the CPU time of one X25519 key agreement plus its HKDF-SHA256 derivation (the
step a client repeats 2k times), so ``client/unit`` reads as "key agreements' worth of work
per client".

The full protocol is measured only up to ``--max-complete`` (its client cost grows as n, the
run as n^2); beyond, and for sparse n beyond ``--max-n``, the rows marked ``fit`` are
EXTRAPOLATED by least squares on this run's measurements: client cost a + b k for SecAgg+
(k from :func:`~shuffledp.secagg.sparse_parameters`), a + b n for the full protocol; server
cost per client likewise.

It also measures processes against threads for the simulated clients (``--parallel``): the
same rounds of n clients in 1 process, in W worker processes and in W threads, as wall-clock
speed-ups over the single process (the clients' work holds the GIL: threads do not scale).

Usage: python bench/secagg_cost.py [--max-n 10000] [--max-complete 300] [--length 100]
       [--parallel 1000]
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from shuffledp.secagg import SecAggClient, secure_sum, sparse_parameters
from shuffledp.secagg.client import derive, raw_public
from shuffledp.secagg.workers import ClientPool, default_workers, run_round

M = 1 << 32
DROP = 0.05


def unit_cost(reps: int = 2000) -> float:
    """CPU seconds of one X25519 agreement + HKDF derivation (the reference)."""
    a, b = X25519PrivateKey.generate(), X25519PrivateKey.generate()
    pk = raw_public(b)
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    t0 = time.process_time()
    for i in range(reps):
        derive(a.exchange(X25519PublicKey.from_public_bytes(pk)), b"mask", bytes(32), i, i + 1)
    return (time.process_time() - t0) / reps


def plan(n: int) -> dict[int, set[int]]:
    k = round(DROP * n)
    ids = list(range(1, k + 1))
    return {1: set(ids[k // 2:]), 2: set(ids[:k // 2])}


def measure(n: int, L: int, graph: str) -> dict:
    g = np.random.default_rng(n + L)
    X = [g.integers(0, M, L) for _ in range(n)]
    kw = {"dropout": 0.1} if graph == "sparse" else {"threshold": max(2, n - 2 * round(DROP * n))}
    t0 = time.perf_counter()
    r = secure_sum(X, M, graph=graph, dropouts=plan(n), **kw)
    wall = time.perf_counter() - t0
    exact = bool(np.array_equal(r.total, sum(X[i] for i in r.survivors) % M))
    return {"n": n, "graph": r.graph, "k": r.degree, "t": r.threshold,
            "client": r.client_seconds_mean, "server": r.server_seconds,
            "up": r.bytes_up_per_client, "wall": wall, "exact": exact, "fit": False,
            "workers": r.workers}


def fit(rows: list[dict], x_of, n_new: int, graph: str) -> dict:
    """Least-squares a + b x on the measured rows (client cost; server cost per client)."""
    xs = np.array([x_of(r["n"]) for r in rows], dtype=float)
    A = np.vstack([np.ones_like(xs), xs]).T
    c = np.linalg.lstsq(A, np.array([r["client"] for r in rows]), rcond=None)[0]
    s = np.linalg.lstsq(A, np.array([r["server"] / r["n"] for r in rows]), rcond=None)[0]
    x = x_of(n_new)
    p = sparse_parameters(n_new, 0.1) if graph == "sparse" else None
    return {"n": n_new, "graph": graph, "k": p.k if p else n_new - 1,
            "t": p.threshold if p else max(2, n_new - 2 * round(DROP * n_new)),
            "client": float(c[0] + c[1] * x),
            "server": float((s[0] + s[1] * x) * n_new), "up": float("nan"),
            "wall": float("nan"), "exact": None, "fit": True, "workers": 0}


def parallel(n: int, L: int, W: int) -> None:
    """Wall-clock speed-up of W processes and W threads over one process (rounds 0-2)."""
    g = np.random.default_rng(1)
    X = [g.integers(0, M, L) for _ in range(n)]
    from shuffledp.secagg import SecAggServer
    from shuffledp.secagg.graph import graph_seed, harary_graph
    from shuffledp.secagg.messages import Context

    p = sparse_parameters(n, 0.1)
    session = os.urandom(16)
    ctx = Context(session, M, L, p.threshold).pack()
    graph = harary_graph(n, p.k, graph_seed(ctx, n, p.k, p.min_clients), p.min_clients)

    def rounds(step) -> float:
        server = SecAggServer(n, L, M, p.threshold, session, graph=graph)
        incoming = {i: b"" for i in range(n)}
        t0 = time.perf_counter()
        for r in range(3):
            for i, (_, out, _) in sorted(step(r, incoming).items()):
                server.receive(out, channel=i)
            reply = server.close_round()
            incoming = reply if isinstance(reply, dict) else {i: reply for i in
                                                               server.members[-1]}
        return time.perf_counter() - t0

    clients = {i: SecAggClient(i, X[i], M, p.threshold, session, graph=graph) for i in range(n)}
    one = rounds(lambda r, inc: run_round(clients, r, inc))
    with ClientPool(X, M, p.threshold, session, graph, W) as pool:
        procs = rounds(pool.round)
    clients = {i: SecAggClient(i, X[i], M, p.threshold, session, graph=graph) for i in range(n)}
    blocks = np.array_split(np.arange(n), W)

    def threaded(r, inc):
        with ThreadPoolExecutor(W) as ex:
            parts = ex.map(lambda b: run_round(clients, r, {int(i): inc[int(i)] for i in b
                                                            if int(i) in inc}), blocks)
            out: dict = {}
            for part in parts:
                out.update(part)
            return out
    threads = rounds(threaded)
    print(f"\nsimulated clients, rounds 0-2 of n={n} (k={p.k}), wall clock: 1 process "
          f"{one:.1f} s; {W} processes {procs:.1f} s (speed-up {one / procs:.2f}); {W} threads "
          f"{threads:.1f} s (speed-up {one / threads:.2f})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-n", type=int, default=10_000, help="largest sparse n measured")
    ap.add_argument("--max-complete", type=int, default=300,
                    help="largest n the full protocol is measured at")
    ap.add_argument("--length", type=int, default=100, help="vector length L")
    ap.add_argument("--parallel", type=int, default=1000,
                    help="n of the processes-vs-threads comparison (0: skip)")
    a = ap.parse_args(argv)
    unit = unit_cost()
    W = default_workers()
    print(f"reference unit (same run): one X25519 agreement + HKDF = {unit * 1e6:.1f} us CPU; "
          f"{W} cores; L = {a.length}; {DROP:.0%} dropouts")
    grid = [n for n in (100, 300, 1000, 3000, 10_000, 30_000, 100_000)]
    rows = []
    for n in grid:
        for graph in ("complete", "sparse"):
            if (graph == "complete" and n <= a.max_complete) or (graph == "sparse"
                                                                 and n <= a.max_n):
                rows.append(measure(n, a.length, graph))
                r = rows[-1]
                print(f"  measured n={n} {graph}: k={r['k']} t={r['t']} client "
                      f"{r['client']:.4f} s CPU, server {r['server']:.2f} s CPU, wall "
                      f"{r['wall']:.1f} s, exact {r['exact']}", flush=True)
    meas = {gname: [r for r in rows if r["graph"] == gname] for gname in ("complete", "sparse")}
    for n in grid:
        if n > a.max_complete and len(meas["complete"]) >= 2:
            rows.append(fit(meas["complete"], lambda m: m, n, "complete"))
        if n > a.max_n and len(meas["sparse"]) >= 2:
            rows.append(fit(meas["sparse"], lambda m: sparse_parameters(m, 0.1).k, n, "sparse"))
    print(f"{'n':>7} {'graph':>8} {'k':>6} {'t':>5} {'client s':>9} {'client/unit':>11} "
          f"{'server s':>9} {'server/unit':>11} {'up kB':>8} {'wall s':>7} {'exact':>6} source")
    for r in sorted(rows, key=lambda r: (r["n"], r["graph"])):
        print(f"{r['n']:>7} {r['graph']:>8} {r['k']:>6} {r['t']:>5} {r['client']:>9.4f} "
              f"{r['client'] / unit:>11.0f} {r['server']:>9.2f} {r['server'] / unit:>11.0f} "
              f"{r['up'] / 1e3:>8.1f} {r['wall']:>7.1f} {r['exact']!s:>6} "
              f"{'fit (extrapolated)' if r['fit'] else 'measured'}")
    by = {(r["n"], r["graph"]): r for r in rows}
    print("\nfull protocol / SecAgg+ per-client cost (same n):")
    for n in grid:
        if (n, "complete") in by and (n, "sparse") in by:
            c, s = by[(n, "complete")], by[(n, "sparse")]
            tag = "fit" if c["fit"] or s["fit"] else "measured"
            print(f"  n={n:>7}: client {c['client'] / s['client']:8.1f}x, server "
                  f"{c['server'] / max(s['server'], 1e-9):8.1f}x ({tag})")
    if a.parallel:
        parallel(a.parallel, a.length, max(2, W))


if __name__ == "__main__":
    main()
