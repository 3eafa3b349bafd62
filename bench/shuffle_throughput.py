"""Throughput of the shuffle protocol's parts at the Fig. 12 setting of [Ghazi23]_ (App. F).

320x240 grid, n = 50, eps = 5, delta = 1e-5, B = 256 (override with flags). Prints:

- encoder: messages per second on one core (Polya noise from numpy + shares from the
  ChaCha20 CSPRNG), and the CSPRNG alone;
- analyzer: packed messages per second through the streaming modular accumulator;
- shuffler: secure Fisher-Yates permutation, messages per second;
- end to end on the simulation path (encode all users, sum, decode, Reconstruct) and on the
  plaintext wire path (wire format, shuffler validation and secure permutation): wall time
  and peak resident memory (measured in a fresh subprocess).

Run: ``python bench/shuffle_throughput.py [--B 256] [--n 50] [--skip-e2e]``

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def _best(f, repeat=3):
    f()
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


E2E = r"""
import json, resource, sys, time
import numpy as np
from shuffledp import Grid
from shuffledp.datasets import synthetic_mixture
from shuffledp.protocol.runner import shuffle_heatmap
B, n, wire = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "wire"
users = synthetic_mixture(n, rng=0).to_users(Grid(320, 240))
t = time.perf_counter()
rel = shuffle_heatmap(users, epsilon=5.0, delta=1e-5, B=B, rng=1, wire=wire)
dt = time.perf_counter() - t
p = rel.protocol
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": dt, "peak_rss_mb": rss,
                  "messages": p["messages_per_user"] * p["n_users"],
                  "encode_seconds": p.get("encode_and_sum_seconds",
                                          p.get("encode_and_shuffle_seconds")),
                  "reconstruct_seconds": p["reconstruct_seconds"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=256)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--skip-e2e", action="store_true")
    args = ap.parse_args()

    from shuffledp import Grid
    from shuffledp.analyzers.heatmap.modular import ModularAccumulator
    from shuffledp.datasets import synthetic_mixture
    from shuffledp.encoders.encoder import encode_shares, messages
    from shuffledp.protocol.params import derive_params
    from shuffledp.randomness import SecureRandom, secure_shuffle

    grid = Grid(320, 240)
    users = synthetic_mixture(args.n, rng=0).to_users(grid)
    p = derive_params(grid, args.n, epsilon=5.0, delta=1e-5, B=args.B)
    mpu = p.messages_per_user
    print(f"320x240, n={args.n}, eps=5, delta=1e-5, B={args.B}: q={p.q}, r={p.r}, m={p.m}, "
          f"{mpu} messages/user, {p.record_bytes}-byte records")

    src = SecureRandom()
    rng = np.random.default_rng(0)
    t_csprng = _best(lambda: src.uint32(mpu))
    print(f"CSPRNG (ChaCha20) alone      : {mpu / t_csprng / 1e6:8.1f} M uint32/s")
    t_below = _best(lambda: src.below(p.q, mpu))
    print(f"uniform Z_q (Lemire, numpy)  : {mpu / t_below / 1e6:8.1f} M values/s")
    k = 5
    sel = np.arange(k)
    t_enc = _best(lambda: encode_shares(p, users, sel, rng, src), repeat=2)
    print(f"encoder, 1 core              : {k * mpu / t_enc / 1e6:8.1f} M messages/s "
          f"({t_enc / k * 1e3:.1f} ms/user)")

    # a mixed batch of packed records for the analyzer and shuffler
    sh = encode_shares(p, users, np.arange(min(args.n, 10)), rng, src)
    rec = np.concatenate([messages(p, s) for s in sh])
    t_sh = _best(lambda: secure_shuffle(rec, src), repeat=1)
    print(f"shuffler (secure Fisher-Yates): {rec.size / t_sh / 1e6:8.1f} M messages/s")
    # the analyzer sees the mixed (permuted) batch: random access into the accumulators
    for th in (1, 2):
        def run(th=th):
            acc = ModularAccumulator(p, threads=th)
            acc.add_records(rec)
        t_an = _best(run)
        print(f"analyzer, {th} thread(s)        : {rec.size / t_an / 1e6:8.1f} M messages/s "
              f"(mixed batch of {rec.size / 1e6:.1f} M)")

    if not args.skip_e2e:
        for path in ("simulation", "wire"):
            out = subprocess.run([sys.executable, "-c", E2E, str(args.B), str(args.n), path],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            what = "encode+sum" if path == "simulation" else "encode+wire+shuffle"
            print(f"end to end ({path:>10} path): {r['seconds']:.1f} s for "
                  f"{r['messages'] / 1e6:.1f} M messages ({what} {r['encode_seconds']:.1f} s, "
                  f"Reconstruct {r['reconstruct_seconds']:.2f} s), "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
