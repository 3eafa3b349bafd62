"""Secure aggregation cost: client and server time and bytes per client.

Runs :func:`shuffledp.secagg.secure_sum` (four rounds, real messages, one process) for
shard sizes n, vector lengths L and dropout fractions (the dropouts are spread over the
rounds: half before the masked input, half during the unmasking... see ``plan``), and
prints mean/max client seconds, server seconds, bytes up/down per client and a check that
the sum is exact. Target ([Bonawitz17]_ scale): n = 1000, L = 1e4 in <= 60 s of server CPU,
clients <= 1 s each (``--big``; about 15 minutes of simulated client work in total).

Usage: python bench/secagg_cost.py [--big]

References
----------
.. [Bonawitz17] K. Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving
   Machine Learning", CCS 2017.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from shuffledp.secagg import secure_sum

M = 1 << 32


def plan(n: int, frac: float) -> dict[int, set[int]]:
    """Drop round(frac n) clients: half in round 2 (before the masked input, so the server
    must remove their pairwise masks), the rest in round 1."""
    k = round(frac * n)
    ids = list(range(1, k + 1))
    return {1: set(ids[k // 2:]), 2: set(ids[:k // 2])}


def run(n: int, L: int, frac: float) -> str:
    g = np.random.default_rng(n + L)
    X = [g.integers(0, M, L) for _ in range(n)]
    t0 = time.perf_counter()
    r = secure_sum(X, M, threshold=max(2, n // 2 + 1), dropouts=plan(n, frac))
    wall = time.perf_counter() - t0
    exact = np.array_equal(r.total, sum(X[i] for i in r.survivors) % M)
    return (f"{n:>6} {L:>6} {frac:>5.0%} {len(r.survivors):>6} {r.client_seconds_mean:>8.3f} "
            f"{r.client_seconds_max:>8.3f} {r.server_seconds:>8.2f} "
            f"{r.bytes_up_per_client / 1e3:>9.1f} {r.bytes_down_per_client / 1e3:>9.1f} "
            f"{wall:>7.1f} {exact!s:>6}")


def main() -> None:
    print(f"{'n':>6} {'L':>6} {'drop':>5} {'surv':>6} {'cli mean':>8} {'cli max':>8} "
          f"{'server s':>8} {'up kB':>9} {'down kB':>9} {'wall s':>7} {'exact':>6}")
    cases = ([(1000, 10_000, 0.10)] if "--big" in sys.argv else
             [(n, L, f) for n in (100, 300) for L in (1000, 10_000) for f in (0.0, 0.05, 0.10)])
    for n, L, f in cases:
        print(run(n, L, f), flush=True)


if __name__ == "__main__":
    main()
