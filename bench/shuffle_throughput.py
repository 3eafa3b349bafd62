"""Throughput of the shuffle protocol's parts at the Fig. 12 setting of [Ghazi23]_ (App. F).

320x240 grid, n = 50, eps = 5, delta = 1e-5, B = 256 (override with flags). Every figure is
printed as a ratio against a reference measured in the same run (the machine is shared):

- keystream: ChaCha20 words per second on one thread (``SecureRandom.fill_uint32``), the
  reference of the encoder;
- encoder: messages per second on one thread, simulation encoder (shares summed as drawn,
  ``encode_sums``) and device encoder (shares stored, ``encode_shares``), as a fraction of
  the keystream rate (target >= 0.5; the reference is the faster of one big fill and
  L2-sized pieces), by wall clock and by the thread's CPU time (robust to other processes
  on a shared machine), and on every core against one;
- analyzer: messages per second through the modular accumulator (``add_raw`` of the mixed
  batch's wire bytes, as the analyzer reads them) on 1 and on every thread, by wall clock
  and by CPU time (target >= 0.8 G messages/s on 2 cores), against a memcpy of the same
  bytes and against the streaming-read floor (a sum of the same bytes as 64-bit words on as
  many threads, numba ``prange``: no loop that reads every byte can be faster), as a
  multiple of its time, and whether every thread count gives the same sums;
- shuffler: secure Fisher-Yates, messages per second;
- wire path stages per user on one thread (device encoder, canonical batch, the shuffler's
  labels, one-pass checks and bucket spread, fingerprint, the buckets read and permuted in
  one pass, the analyzer's sums; the HMAC of the wire format's mixed batch for reference)
  as multiples of the simulation path's whole work per user: the CPU floor of the ratio;
- the floor of any wire design, warm in this process on every core against the simulation
  (``shuffle_heatmap``) by wall clock and CPU time: keystream for the shares and for the
  permutation (one ChaCha20 word per message each) plus one write and one read of every
  message's bytes; then the simulation plus what any wire path adds at least (the
  permutation's keystream, the write and the read), and the warm wire path: if the second
  were above 2 the target would be impossible as stated. The same with the analyzer's sums
  of as many permuted messages (its kernel on every core: each message adds into one of m
  sums at random, about 5x a plain read) as the read, and the simulation's in-order adds
  taken out of its time: above 2, the target is out of reach of any such design here;
- end to end on the simulation and the plaintext wire path (fresh subprocesses), on one
  thread and on every core: wall time, the speed-up, the wire / simulation ratio (target
  <= 2) and whether the releases are bit-identical across thread counts.

Run: ``python bench/shuffle_throughput.py [--B 256] [--n 50] [--skip-e2e] [--skip-floor]
[--only-floor] [--repeat 2]``

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np


def _best(f, repeat=3):
    f()
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def _met(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


@numba.njit(parallel=True, nogil=True)
def _sum_words(words):  # pragma: no cover - compiled
    s = np.uint64(0)
    for i in numba.prange(words.size):
        s += words[i]
    return s


def _stream_read(words: np.ndarray, threads: int) -> int:
    """Sum of the uint64 ``words`` on ``threads`` threads (numba ``prange``): the
    streaming-read floor of any loop over the same bytes."""
    numba.set_num_threads(threads)
    return int(_sum_words(words))


@numba.njit(parallel=True, nogil=True)
def _write_words(words, v):  # pragma: no cover - compiled
    for i in numba.prange(words.size):
        words[i] = v + np.uint64(i)


@numba.njit(nogil=True)
def _in_order_sums(shares, sums, times):  # pragma: no cover - compiled
    """``times`` users' worth of the simulation's in-order adds: each row of ``shares``
    (r, m) added into the m ``sums``, coordinate by coordinate."""
    for _ in range(times):
        for i in range(shares.shape[0]):
            for a in range(shares.shape[1]):
                sums[a] += shares[i, a]


def _wire_floor(args, users, p, cores: int) -> None:
    """The floor of any wire design at this setting, against the simulation path, warm and
    in this process, on every core (interleaved best of ``--repeat`` + 1).

    Any design that materialises every message and permutes them securely draws at least
    the shares' keystream (one 32-bit ChaCha20 word per message: the simulation draws the
    same), the permutation's keystream (one word per message: Fisher-Yates or bucket labels
    plus in-bucket swaps take at least that) and writes and reads every message once
    (``record_bytes`` each; a numba ``prange`` write then sum of that many bytes). Their
    sum, by wall clock and by CPU time, is the floor; the same against the simulation's
    own time, plus what the wire adds at least (the permutation's keystream, one write and
    one read), is the floor of a wire path that also does all the simulation does.

    The read an analyzer makes is not a plain read: the messages come permuted, so each
    adds into one of m sums at random (the simulation adds its shares coordinate by
    coordinate). The analyzer's own kernel over as many random valid records
    (:meth:`ModularAccumulator.add_raw` on every core) stands for it in the second pair of
    lines, with the simulation's in-order adds (r rows per user into m sums) taken out of
    the simulation's time. Next to them the warm wire path (``shuffle_heatmap(wire=True)``
    called again in this process)."""
    from shuffledp.analyzers.heatmap.modular import ModularAccumulator
    from shuffledp.protocol.runner import shuffle_heatmap
    from shuffledp.randomness import SecureRandom

    n_msg = p.messages_per_user * args.n
    srcs = [SecureRandom() for _ in range(cores)]
    chunks = [np.empty(1 << 16, np.uint32) for _ in range(cores)]
    rb = p.record_bytes
    nbytes = n_msg * rb
    mem = np.empty(-(-nbytes // 8), np.uint64)
    # n_msg valid records in random order, as the analyzer reads them (rb bytes each)
    rng = np.random.default_rng(5)
    recs = np.empty(nbytes, np.uint8)
    step = 1 << 22
    for lo in range(0, n_msg, step):
        k = min(step, n_msg - lo)
        v = ((rng.integers(0, p.m, k, dtype=np.uint64) << np.uint64(p.share_bits))
             | rng.integers(0, p.q, k, dtype=np.uint64))
        le = v.astype("<u8").view(np.uint8).reshape(-1, 8)
        recs[lo * rb : (lo + k) * rb] = le[:, :rb].ravel()
    shares = rng.integers(0, p.q, (p.r, p.m)).astype(np.uint32)
    sums = np.zeros(p.m, np.uint64)

    def keystream():  # one word per message, in 64K-word pieces on every core
        def part(i):
            for _ in range(-(-n_msg // (cores << 16))):
                srcs[i].fill_uint32(chunks[i])
        with ThreadPoolExecutor(cores) as ex:
            list(ex.map(part, range(cores)))

    def write():
        numba.set_num_threads(cores)
        _write_words(mem, np.uint64(1))

    def read():
        numba.set_num_threads(cores)
        _sum_words(mem)

    def analyzer():
        ModularAccumulator(p, threads=cores).add_raw(recs, rb)

    def in_order():
        per = -(-args.n // cores)
        with ThreadPoolExecutor(cores) as ex:
            list(ex.map(lambda i: _in_order_sums(shares, np.zeros(p.m, np.uint64), per),
                        range(cores)))

    def run(wire):
        return lambda: shuffle_heatmap(users, epsilon=5.0, delta=1e-5, B=args.B, rng=1,
                                       wire=wire, workers=cores)

    work = {"simulation": run(False), "wire": run(True), "keystream": keystream,
            "write": write, "read": read, "analyzer": analyzer, "in-order sums": in_order}
    _in_order_sums(shares, sums, 1)
    for f in work.values():
        f()
    best = {name: [np.inf, np.inf] for name in work}
    for _ in range(args.repeat + 1):
        for name, f in work.items():
            w0, c0 = time.perf_counter(), time.process_time()
            f()
            w, c = time.perf_counter() - w0, time.process_time() - c0
            best[name] = [min(best[name][0], w), min(best[name][1], c)]
    sim, ks = best["simulation"], best["keystream"]
    wr = [best["write"][i] + best["read"][i] for i in (0, 1)]
    an, io = best["analyzer"], best["in-order sums"]
    print(f"floor of the wire path, warm in this process on {cores} threads, {n_msg / 1e6:.1f} "
          f"M messages (load average {os.getloadavg()[0]:.1f}):")
    print(f"  simulation (shuffle_heatmap)      : {sim[0]:6.3f} s wall, {sim[1]:6.3f} s CPU"
          "   [reference]")
    print(f"  keystream, one word per message   : {ks[0]:6.3f} s wall, {ks[1]:6.3f} s CPU")
    print(f"  one write + one read of the {nbytes / 1e6:.0f} MB : {wr[0]:6.3f} s wall, "
          f"{wr[1]:6.3f} s CPU (write {best['write'][1]:.3f}, read {best['read'][1]:.3f} s CPU)")
    print(f"  analyzer's sums of as many permuted messages: {an[0]:6.3f} s wall, {an[1]:6.3f} s "
          f"CPU ({an[1] / best['read'][1]:.1f} x the plain read by CPU); the simulation's "
          f"in-order adds: {io[0]:6.3f} s wall, {io[1]:6.3f} s CPU")
    fl = [2 * ks[i] + wr[i] for i in (0, 1)]
    print(f"  floor of any design (keystream for shares and permutation, one write and one "
          f"read): {fl[0]:.3f} s wall = {fl[0] / sim[0]:.2f} x simulation, {fl[1]:.3f} s CPU = "
          f"{fl[1] / sim[1]:.2f} x")
    fs = [sim[i] + ks[i] + wr[i] for i in (0, 1)]
    print(f"  simulation + what a wire path adds at least (permutation keystream, one write "
          f"and one read): {fs[0] / sim[0]:.2f} x simulation wall, {fs[1] / sim[1]:.2f} x CPU")
    fa = [2 * ks[i] + best["write"][i] + an[i] for i in (0, 1)]
    print(f"  the same with the analyzer's sums as the read: floor {fa[0] / sim[0]:.2f} x "
          f"simulation wall, {fa[1] / sim[1]:.2f} x CPU;", end=" ")
    fz = [sim[i] - io[i] + ks[i] + best["write"][i] + an[i] for i in (0, 1)]
    print(f"simulation without its in-order adds + permutation keystream + one write + the "
          f"analyzer's sums: {fz[0] / sim[0]:.2f} x wall, {fz[1] / sim[1]:.2f} x CPU")
    wi = best["wire"]
    verdict = "rules it out" if fz[1] / sim[1] > 2 else "does not rule it out"

    print(f"  wire path, warm                   : {wi[0]:6.3f} s wall = {wi[0] / sim[0]:.2f} x "
          f"simulation, {wi[1]:6.3f} s CPU = {wi[1] / sim[1]:.2f} x (target <= 2: wall "
          f"{_met(wi[0] <= 2 * sim[0])}, CPU {_met(wi[1] <= 2 * sim[1])}; by CPU time the "
          f"floor with the analyzer's sums {verdict})")


E2E = r"""
import hashlib, json, resource, sys, time
import numpy as np
from shuffledp import Grid
from shuffledp.datasets import synthetic_mixture
from shuffledp.protocol.runner import shuffle_heatmap
B, n, wire, workers = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "wire", int(sys.argv[4])
users = synthetic_mixture(n, rng=0).to_users(Grid(320, 240))
r0 = resource.getrusage(resource.RUSAGE_SELF)  # the call's CPU, not the imports' (~1.5 s)
t = time.perf_counter()
rel = shuffle_heatmap(users, epsilon=5.0, delta=1e-5, B=B, rng=1, wire=wire, workers=workers)
dt = time.perf_counter() - t
p = rel.protocol
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
try:  # this process's own peak: ru_maxrss keeps the parent's RSS across fork and exec
    with open("/proc/self/status") as fh:
        rss = next(int(x.split()[1]) for x in fh if x.startswith("VmHWM:")) / 1024
except (OSError, StopIteration):
    pass
cpu = resource.getrusage(resource.RUSAGE_SELF)
cpu_s = cpu.ru_utime + cpu.ru_stime - r0.ru_utime - r0.ru_stime
print(json.dumps({"seconds": dt, "peak_rss_mb": rss, "cpu_seconds": cpu_s,
                  "messages": p["messages_per_user"] * p["n_users"],
                  "digest": hashlib.sha256(rel.raw.tobytes()).hexdigest()[:16]}))
"""


def _wire_stages(p, users, streams) -> None:
    """CPU per user of every stage of the plaintext wire path on one thread, as a multiple of
    the simulation path's whole work per user (``encode_sums``), interleaved best of 5: the
    floor of the wire / simulation CPU ratio for this design, whatever the cores.

    The stages as ``wire_heatmap`` runs them: the device encoder and its canonical batch
    (``framed_shares``), the shuffler's one pass of checks and bucket spread with its labels,
    the SHA-256 fingerprint, then per bucket (a round's worth of one user's records in buckets
    of the round's size: n of the user's buckets stand for the n users' parts of one) the
    read of its parts where they lie, permuted as they are read (inside-out Fisher-Yates,
    one pass, with its keystream), and the analyzer's sums; for reference, the HMAC written
    and verified over a user's worth of mixed bytes, which the wire format's mixed batch
    carries (``mix_to``, the CLI roles) and the one-process path does not compute (nothing
    to authenticate between threads)."""
    import hashlib
    import hmac

    from shuffledp.analyzers.heatmap.modular import _CarrySums
    from shuffledp.encoders.encoder import encode_shares, encode_sums
    from shuffledp.protocol.shuffler import Shuffler, _Buckets, _gather_permute_at
    from shuffledp.protocol.wire import HEADER_SIZE, framed_shares
    from shuffledp.randomness import SecureRandom

    src = SecureRandom()
    sel = np.array([3])
    sh = encode_shares(p, users, sel, streams, src)[0]
    data = framed_shares(p, sh)
    shuf = Shuffler(p, memory_limit=8 * p.n * p.messages_per_user * p.record_bytes)
    rows = np.frombuffer(data, np.uint8, offset=HEADER_SIZE).reshape(-1, p.record_bytes)
    k = shuf.n_buckets
    labels = shuf._draw_labels(rows, src)
    _, spread = shuf._check_canonical(rows, labels)
    buckets = _Buckets(k, 1 << 40, None, p.record_bytes)
    buckets.add(spread)
    addr, end, cnt = buckets.group_parts(0, k)
    n_b = rows.shape[0] // k  # records of the user in one bucket
    bucket_records = p.n * n_b  # records in a bucket of the round
    # a round's bucket is n users' parts of it: here n of this user's buckets stand for them
    rounds = [(addr[:, j0 : j0 + p.n].reshape(-1, 1), cnt[:, j0 : j0 + p.n].reshape(-1, 1))
              for j0 in range(0, k - p.n + 1, p.n)]
    out = np.empty(max(int(c.sum()) for _, c in rounds), np.uint64)
    ends = np.full(p.n, end[0], np.uint64)

    def permute():  # one user's worth of records, read and permuted in round-sized buckets
        for a, c in rounds:
            n = int(c.sum())
            w = src.uint32(n + 64 + (n ** 2 >> 31))
            _gather_permute_at(a, ends, c, 0, p.record_bytes, w, out[:n])
        return out[:n]

    vals = permute().copy()  # a permuted round-sized bucket, as the analyzer gets it
    scale = rows.shape[0] / sum(int(c.sum()) for _, c in rounds)
    key = src.bytes(32)
    mixed = rows.reshape(-1)
    carry = _CarrySums(p)  # the wire path's analyzer: one per thread, fed bucket by bucket
    stages = {
        "simulation: encode_sums": lambda: encode_sums(p, users, sel, streams, src),
        "encode_shares (device encoder)": lambda: encode_shares(p, users, sel, streams, src),
        "framed_shares (canonical batch)": lambda: framed_shares(p, sh),
        "shuffler: labels": lambda: shuf._draw_labels(rows, src),
        "shuffler: checks + bucket spread": lambda: shuf._check_canonical(rows, labels),
        "shuffler: SHA-256 fingerprint": lambda: hashlib.sha256(rows).digest(),
        "shuffler: read + permute buckets": permute,
        "analyzer: sums of the integers": lambda: [carry.add(vals) for _ in rounds],
        "(HMAC-SHA256 of the bytes x2)": lambda: hmac.new(key, mixed, "sha256").digest(),
    }
    best = dict.fromkeys(stages, np.inf)
    for _ in range(5):
        for name, f in stages.items():
            best[name] = min(best[name], _best(f, repeat=1))
    ref = best["simulation: encode_sums"]
    per_bucket = ("shuffler: read + permute buckets", "analyzer: sums of the integers")
    total = 0.0
    print(f"plaintext wire path per user ({p.messages_per_user / 1e6:.2f} M messages; "
          f"{k} buckets of {bucket_records} records in the round), one thread:")
    for name, t in best.items():
        # the HMAC twice (written, verified); the buckets' stages cover len(rounds) round-sized
        # buckets, scaled to one user's records
        times = 2 if "x2" in name else scale if name in per_bucket else 1
        if not name.startswith(("simulation", "(")):
            total += times * t
        print(f"  {name:34s}: {times * t * 1e3:7.1f} ms = {times * t / ref:5.2f} x simulation")
    print(f"  wire stages together              : {total * 1e3:7.1f} ms = {total / ref:5.2f} x "
          "simulation per user (the CPU floor of the wire / simulation ratio; the HMAC in "
          "brackets is not on this path)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=256)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--skip-floor", action="store_true")
    ap.add_argument("--only-floor", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from shuffledp import Grid
    from shuffledp.analyzers.heatmap.modular import ModularAccumulator
    from shuffledp.datasets import synthetic_mixture
    from shuffledp.encoders.encoder import encode_shares, encode_sums, messages
    from shuffledp.protocol.params import derive_params
    from shuffledp.randomness import SecureRandom, UserStreams, secure_shuffle

    cores = os.cpu_count() or 1
    grid = Grid(320, 240)
    users = synthetic_mixture(args.n, rng=0).to_users(grid)
    p = derive_params(grid, args.n, epsilon=5.0, delta=1e-5, B=args.B)
    mpu = p.messages_per_user
    print(f"320x240, n={args.n}, eps=5, delta=1e-5, B={args.B}: q={p.q}, r={p.r}, m={p.m}, "
          f"{mpu} messages/user, {p.record_bytes}-byte records; {cores} cores")
    if args.only_floor:
        _wire_floor(args, users, p, cores)
        return

    src = SecureRandom()
    k = 4
    buf = np.empty(k * mpu, dtype=np.uint32)
    chunk = np.empty(1 << 16, dtype=np.uint32)
    streams = UserStreams(7)
    sel = np.arange(k)

    def ks_chunked():  # the same number of words, in L2-sized pieces (as the encoder draws)
        for _ in range(buf.size >> 16):
            src.fill_uint32(chunk)

    # Interleaved, best of 15 each: a load spike on the shared machine hits all alike. Each
    # is timed by the wall clock and by this thread's CPU time: the second is what one
    # core gives when others' processes compete for it (the machine is shared).
    work = {"keystream": lambda: src.fill_uint32(buf), "keystream (64K pieces)": ks_chunked,
            "sums": lambda: encode_sums(p, users, sel, streams, src),
            "shares": lambda: encode_shares(p, users, sel, streams, src)}
    best = {name: [np.inf, np.inf] for name in work}
    for f in work.values():
        f()
    for _ in range(15):
        for name, f in work.items():
            w0, c0 = time.perf_counter(), time.thread_time()
            f()
            w, c = time.perf_counter() - w0, time.thread_time() - c0
            best[name] = [min(best[name][0], w), min(best[name][1], c)]
    n_words = k * mpu
    # reference: the faster of one big fill and L2-sized pieces, per clock
    ks = [n_words / min(best["keystream"][i], best["keystream (64K pieces)"][i]) for i in (0, 1)]
    big = n_words / best["keystream"][1]
    print(f"keystream (ChaCha20), 1 thread : {ks[0] / 1e6:8.1f} M uint32/s wall, "
          f"{ks[1] / 1e6:.1f} M/s per CPU second   [reference] (one {buf.nbytes / 1e6:.0f} MB "
          f"fill: {big / 1e6:.1f} M/s per CPU second)")
    for name, label in (("sums", "encoder (sums), 1 thread       "),
                        ("shares", "encoder (shares), 1 thread     ")):
        e = [k * mpu / best[name][i] for i in (0, 1)]
        r = [e[i] / ks[i] for i in (0, 1)]
        tail = (f" (target >= 0.5: wall {_met(r[0] >= 0.5)}, CPU {_met(r[1] >= 0.5)})"
                if name == "sums" else "")
        print(f"{label}: {e[0] / 1e6:8.1f} M messages/s = {r[0]:.2f} x keystream by wall "
              f"clock, {r[1]:.2f} x by CPU time{tail}")
    e_sum = k * mpu / best["sums"][0]
    if cores > 1:
        srcs = [SecureRandom() for _ in range(cores)]

        def par():
            with ThreadPoolExecutor(cores) as ex:
                list(ex.map(lambda i: encode_sums(p, users, np.array([i, i + cores]), streams,
                                                  srcs[i]), range(cores)))
        def one():
            encode_sums(p, users, np.array([0, 1]), streams, srcs[0])
        t_par = t_one = np.inf
        for _ in range(3):
            t_par = min(t_par, _best(par, repeat=1))
            t_one = min(t_one, _best(one, repeat=1))
        e_par = 2 * cores * mpu / t_par
        e_sum = 2 * mpu / t_one
        bufs = [np.empty(2 * mpu, dtype=np.uint32) for _ in range(cores)]

        def ks_par():
            with ThreadPoolExecutor(cores) as ex:
                list(ex.map(lambda i: srcs[i].fill_uint32(bufs[i]), range(cores)))
        t_kp = t_k1 = np.inf
        for _ in range(3):
            t_kp = min(t_kp, _best(ks_par, repeat=1))
            t_k1 = min(t_k1, _best(lambda: srcs[0].fill_uint32(bufs[0]), repeat=1))
        avail = cores * t_k1 / t_kp
        print(f"keystream, {cores} threads          : {avail:.2f} x one thread: the speed-up "
              f"this machine gives {cores} threads now   [reference]")
        print(f"encoder (sums), {cores} threads      : {e_par / 1e6:8.1f} M messages/s = "
              f"{e_par / e_sum:.2f} x one thread (ideal {cores}; {e_par / e_sum / avail:.2f} "
              f"of what the machine gives)")

    sh = encode_shares(p, users, np.arange(min(args.n, 10)), streams, src)
    rec = np.concatenate([messages(p, s) for s in sh])
    t_sh = _best(lambda: secure_shuffle(rec, src), repeat=1)
    print(f"shuffler (secure Fisher-Yates) : {rec.size / t_sh / 1e6:8.1f} M messages/s")
    # the analyzer's input: the mixed batch's wire bytes (record_bytes-byte little-endian
    # records, ModularAccumulator.add_raw as in accumulate_mixed)
    rb = p.record_bytes
    body = np.ascontiguousarray(rec.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :rb])
    body = body.reshape(-1)
    dst = np.empty_like(body)
    t_cp = _best(lambda: np.copyto(dst, body))
    print(f"memcpy of the {body.nbytes / 1e6:.0f} MB of {rb}-byte records : "
          f"{rec.size / t_cp / 1e6:8.1f} M records/s   [reference]")
    # interleaved, best of 7: the analyzer on 1 and every thread, and the streaming-read floor
    # (a sum over the same bytes as uint64 words on as many threads: no loop that reads every
    # byte can be faster); wall clock and the process's CPU time (all its threads): th
    # cores' worth is th * messages / CPU seconds, what th cores give when they are ours
    words = body[: body.size // 8 * 8].view(np.uint64)
    ths = sorted({1, cores})
    an = {th: [np.inf, np.inf] for th in ths}
    rd = {th: [np.inf, np.inf] for th in ths}
    out = {}
    for th in ths:
        _stream_read(words, th)
    for _ in range(7):
        for th in ths:
            w0, c0 = time.perf_counter(), time.process_time()
            acc = ModularAccumulator(p, threads=th)
            acc.add_raw(body, rb)
            w, c = time.perf_counter() - w0, time.process_time() - c0
            an[th] = [min(an[th][0], w), min(an[th][1], c)]
            out[th] = (acc.sums.copy(), acc.counts.copy(), acc.rejected)
            w0, c0 = time.perf_counter(), time.process_time()
            _stream_read(words, th)
            w, c = time.perf_counter() - w0, time.process_time() - c0
            rd[th] = [min(rd[th][0], w), min(rd[th][1], c)]
    same = all(np.array_equal(out[th][0], out[1][0]) and np.array_equal(out[th][1], out[1][1])
               and out[th][2] == out[1][2] for th in out)
    for th in ths:
        print(f"streaming read, {th} thread(s)      : {rec.size / rd[th][0] / 1e6:8.1f} M records"
              f"/s wall, {th * rec.size / rd[th][1] / 1e6:.1f} M/s by CPU time (a sum over the "
              f"same {body.nbytes / 1e6:.0f} MB: the memory floor)   [reference]")
    for th, (w, c) in an.items():
        print(f"analyzer, {th} thread(s)          : {rec.size / w / 1e6:8.1f} M messages/s "
              f"wall = {t_cp / w:.2f} x memcpy, {th * rec.size / c / 1e6:.1f} M/s by CPU time "
              f"(mixed batch of {rec.size / 1e6:.1f} M, add_raw); {w / rd[th][0]:.1f} x the "
              f"streaming-read time by wall clock, {c / rd[th][1]:.1f} x by CPU time")
    top_w, top_c = rec.size / an[cores][0], cores * rec.size / an[cores][1]
    print(f"analyzer on {cores} cores: {top_w / 1e9:.2f} G messages/s wall, {top_c / 1e9:.2f} "
          f"by CPU time (target >= 0.8 on 2 cores: wall {_met(top_w >= 0.8e9)}, CPU "
          f"{_met(top_c >= 0.8e9)}); sums, counts, rejections identical across thread counts: "
          f"{same}; load average {os.getloadavg()[0]:.1f}")

    _wire_stages(p, users, streams)
    if not args.skip_floor:
        _wire_floor(args, users, p, cores)

    if not args.skip_e2e:
        res: dict = {}
        digests: dict = {}
        for _ in range(args.repeat):  # interleaved, best of --repeat (a load spike hits all)
            for path in ("simulation", "wire"):
                for w in sorted({1, cores}):
                    out = subprocess.run([sys.executable, "-c", E2E, str(args.B), str(args.n),
                                          path, str(w)], capture_output=True, text=True,
                                         check=True)
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    digests.setdefault((path, w), set()).add(r["digest"])
                    if (path, w) not in res or r["seconds"] < res[path, w]["seconds"]:
                        res[path, w] = r
        for (path, w), r in res.items():
            print(f"end to end ({path:>10}, {w} thread(s)), best of {args.repeat}: "
                  f"{r['seconds']:6.1f} s wall, {r['cpu_seconds']:6.1f} s CPU, "
                  f"{r['messages'] / 1e6:.1f} M messages, peak RSS {r['peak_rss_mb']:.0f} MB, "
                  f"release {r['digest']}{'' if len(digests[path, w]) == 1 else ' (differs!)'}")
        for path in ("simulation", "wire"):
            a, b = res[path, 1], res[path, cores]
            print(f"{path}: {cores} threads vs 1: speed-up {a['seconds'] / b['seconds']:.2f} "
                  f"(ideal {cores}); releases identical: {a['digest'] == b['digest']}")
        ratio = res["wire", cores]["seconds"] / res["simulation", cores]["seconds"]
        cpu = res["wire", cores]["cpu_seconds"] / res["simulation", cores]["cpu_seconds"]
        print(f"wire / simulation at the Fig. 12 setting: {ratio:.1f} x wall, {cpu:.1f} x CPU "
              f"(target <= 2: {_met(ratio <= 2)})")


if __name__ == "__main__":
    main()
