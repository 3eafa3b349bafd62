"""Dask backend vs local: end to end on a 2-worker LocalCluster, peak memory, 1e7 extrapolation.

Usage: python bench/dask_backend.py [--n 2000] [--grid 64] [--B 256]

Prints the local and Dask end-to-end times of ``shuffle_heatmap`` (same seed, simulation path)
and their ratio, the peak RSS of each Dask worker, the per-coordinate-block cost and the
extrapolation to 1e7 users (linear in the number of messages n * r * m, divided over the
workers). The issue's 1e5 users at B = 256 is ~3.8e9 messages (15 GB of shares); it runs here
with ``--n 100000`` (about 6 min on 2 cores, 24 GB: local 41.8 s, Dask 304.6 s, peak RSS
8.1 GB per worker; the local simulation sums without permuting, so the ratio is not
like-for-like). The default n is smaller.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from shuffledp import Grid
from shuffledp.datasets import synthetic_mixture
from shuffledp.protocol.dask_backend import default_partitioning, shuffle_and_sum
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.runner import shuffle_heatmap


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--grid", type=int, default=64)
    ap.add_argument("--B", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    import distributed

    grid = Grid(a.grid, a.grid)
    users = synthetic_mixture(a.n, rng=1).to_users(grid)
    kw = dict(epsilon=5.0, delta=1e-5, B=a.B, rng=11)
    p = derive_params(grid, users.n_users, epsilon=5.0, delta=1e-5, B=a.B)
    msgs = users.n_users * p.messages_per_user
    print(f"n={users.n_users} grid={grid} B={a.B} r={p.r} m={p.m} messages={msgs:.3e}")

    # workers start before the local run, so their peak RSS is their own
    with distributed.LocalCluster(n_workers=a.workers, threads_per_worker=1,
                                  dashboard_address=None) as c, distributed.Client(c) as cl:
        cl.run(lambda: None)
        rss0 = cl.run(_peak_rss_mb)
        t0 = time.perf_counter()
        loc = shuffle_heatmap(users, **kw)
        t_loc = time.perf_counter() - t0
        print(f"local backend: {t_loc:.2f} s end to end (driver peak RSS "
              f"{_peak_rss_mb():.0f} MB)")
        part = default_partitioning(p, users.n_users, a.workers)
        t0 = time.perf_counter()
        dsk = shuffle_heatmap(users, **kw, backend="dask", client=cl)
        t_dsk = time.perf_counter() - t0
        rss = cl.run(_peak_rss_mb)
    print(f"dask backend ({a.workers} workers, {part}): {t_dsk:.2f} s end to end; "
          f"ratio dask/local = {t_dsk / t_loc:.2f}")
    for w, mb in sorted(rss.items()):
        print(f"  worker {w}: peak RSS {mb:.0f} MB (idle {rss0[w]:.0f} MB)")
    same = np.array_equal(loc.raw, dsk.raw)
    print(f"releases identical: {same} (expected False: seeded noise streams differ by "
          "partitioning; the exact-sum equality is in tests/test_backend.py)")

    # per-coordinate-block cost: one block of width 1 holding every user's r messages
    k = max(users.n_users * p.r, 1 << 20)
    shares = np.random.default_rng(0).integers(0, p.q, (k, 1), dtype=np.uint32)
    t0 = time.perf_counter()
    shuffle_and_sum(p, 0, shares)
    t_blk = time.perf_counter() - t0
    per_msg_block = t_blk / shares.size
    print(f"block shuffle+sum: {per_msg_block * 1e9:.0f} ns per message "
          f"({shares.size} messages in {t_blk:.3f} s)")

    n7 = 10**7
    p7 = derive_params(grid, n7, epsilon=5.0, delta=1e-5, B=a.B)
    m7 = n7 * p7.messages_per_user
    per_msg = t_dsk / msgs
    part7 = default_partitioning(p7, n7, a.workers)
    width = max(1, p7.m // part7.coord_blocks)
    blk_msgs = n7 * p7.r * width
    print(f"1e7 users: r={p7.r}, {m7:.3e} messages; {part7}; one coordinate block of width "
          f"{width} holds {blk_msgs:.2e} messages (~{24 * blk_msgs / 2**30:.1f} GiB, "
          f"~{blk_msgs * per_msg_block:.0f} s per block)")
    print(f"extrapolated end to end on {a.workers} workers: {m7 * per_msg / 3600:.1f} h "
          f"(linear in messages at {per_msg * 1e9:.0f} ns/message measured here); "
          f"on W workers divide by W/{a.workers}")


if __name__ == "__main__":
    main()
