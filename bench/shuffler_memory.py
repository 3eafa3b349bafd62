"""Shuffler peak memory at 2000 users (64x64, B=256, encrypted) and analyzer decryption speed.

1. Shuffler: a fresh subprocess builds a :class:`shuffledp.protocol.shuffler.Shuffler` (encrypted,
   ``memory_limit`` 512 MiB, bucket files under ``--workdir``), submits ``--users`` synthetic
   encrypted user batches and streams the mixed batch to /dev/null, then prints its peak
   resident set size (``ru_maxrss``). The batches are SYNTHETIC: valid headers and exactly r
   messages per coordinate (what the shuffler checks), but random bytes in place of the
   ephemeral keys and ciphertexts -- real encryption of 109 million messages would take
   about two core-hours, and the shuffler never opens a ciphertext, so its work and memory
   are the same. The mixed batch is ~12.5 GB and the bucket files take as much in
   ``--workdir`` while it runs.
2. Analyzer: real encrypted messages, decrypted by
   :func:`shuffledp.analyzers.heatmap.modular.accumulate_mixed` with 1 and 2 worker processes,
   against the pre-change single-thread loop (``decrypt_records`` of commit c15f5af, HKDF
   objects per message) when git can show it. Wall-clock figures depend on the machine being idle.

Run: ``python bench/shuffler_memory.py [--users 2000] [--messages 120000] [--skip-shuffler]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

SHUFFLER = r"""
import json, os, resource, sys, time
import numpy as np
from shuffledp import Grid
from shuffledp.protocol.params import derive_params
from shuffledp.protocol.crypto import encrypted_record_bytes, generate_mac_key
from shuffledp.protocol.shuffler import Shuffler
from shuffledp.protocol.wire import KIND_USER_ENC, Header
users, workdir, limit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
p = derive_params(Grid(64, 64), 2000, epsilon=5.0, delta=1e-5, B=256)
rb = encrypted_record_bytes(p)
mpu = p.messages_per_user
rng = np.random.default_rng(0)
head = Header(KIND_USER_ENC, rb, p.digest, mpu).pack()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
s = Shuffler(p, encrypted=True, mac_key=generate_mac_key(), workdir=workdir, memory_limit=limit)
for u in range(users):
    rows = np.frombuffer(rng.bytes(mpu * rb), np.uint8).reshape(mpu, rb).copy()
    rows[:, :4] = rng.permutation(np.repeat(np.arange(p.m, dtype="<u4"), p.r)).view(
        np.uint8).reshape(-1, 4)
    assert s.submit(head + rows.tobytes(), sender=u)
t1 = time.perf_counter()
with open(os.devnull, "wb") as f:
    h = s.mix_to(f)
t2 = time.perf_counter()
print(json.dumps({"users": users, "messages": h.n_records, "record_bytes": rb,
                  "buckets": s.n_buckets, "memory_limit_mb": limit / 2**20,
                  "mixed_gb": h.n_records * rb / 1e9, "submit_s": t1 - t, "mix_s": t2 - t1,
                  "baseline_rss_mb": base / 1024,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _old_module():
    """The pre-change shuffler module (commit c15f5af), or None if git cannot show it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        src = subprocess.run(["git", "-C", root, "show", "c15f5af:shuffledp/shuffler.py"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = os.path.join(tempfile.mkdtemp(), "old_shuffler.py")
    with open(path, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location("old_shuffler", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_shuffler"] = mod
    spec.loader.exec_module(mod)
    return mod


def analyzer(messages: int) -> None:
    from shuffledp import Grid
    from shuffledp.analyzers.heatmap.modular import accumulate_mixed
    from shuffledp.protocol.crypto import (
        encrypt_records,
        encrypted_record_bytes,
        generate_analyzer_key,
        public_bytes,
    )
    from shuffledp.protocol.params import derive_params
    from shuffledp.protocol.wire import KIND_MIXED_ENC, Header, encode_batch

    p = derive_params(Grid(4, 4), 1000, epsilon=5.0, delta=1e-5, B=256)
    key = generate_analyzer_key()
    nu = max(1, messages // p.messages_per_user)
    rec = np.tile(np.repeat(np.arange(p.m, dtype=np.uint64), p.r) << np.uint64(p.share_bits),
                  nu)
    ct = encrypt_records(p, rec, public_bytes(key))
    data = encode_batch(Header(KIND_MIXED_ENC, encrypted_record_bytes(p), p.digest, rec.size,
                               nu, 0), ct)
    print(f"analyzer decryption of {rec.size} encrypted messages (os.cpu_count() = "
          f"{os.cpu_count()}, load average {os.getloadavg()[0]:.2f} before):")
    old = _old_module()
    if old is not None:
        oct_ = old.encrypt_records(p, rec[:20000], public_bytes(key))
        t = time.perf_counter()
        c, _, failed = old.decrypt_records(p, oct_, key)
        dt = time.perf_counter() - t
        base = 20000 / dt
        print(f"  pre-change decrypt_records, 1 thread : {base:9.0f} messages/s")
    for w in (1, 2):
        import resource

        ch0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        c0 = time.process_time()
        res = accumulate_mixed(p, data, key=key, workers=w, chunk_records=4096)
        dt = time.perf_counter() - t
        cpu_main = time.process_time() - c0
        ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_workers = (ch1.ru_utime - ch0.ru_utime) + (ch1.ru_stime - ch0.ru_stime)
        assert res.n_failed == 0
        extra = f" ({rec.size / dt / base:.2f}x pre-change)" if old is not None else ""
        print(f"  accumulate_mixed, workers={w}          : {rec.size / dt:9.0f} messages/s"
              f"{extra}; CPU main {cpu_main:.1f} s + workers {cpu_workers:.1f} s "
              f"in {dt:.1f} s wall ({rec.size / (cpu_main + cpu_workers):.0f} messages per "
              f"CPU-second)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=2000)
    ap.add_argument("--memory-limit", type=int, default=512 << 20)
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--messages", type=int, default=120_000)
    ap.add_argument("--skip-shuffler", action="store_true")
    ap.add_argument("--skip-analyzer", action="store_true")
    args = ap.parse_args()
    if not args.skip_shuffler:
        out = subprocess.run([sys.executable, "-c", SHUFFLER, str(args.users), args.workdir,
                              str(args.memory_limit)], capture_output=True, text=True)
        if out.returncode:
            sys.exit(out.stderr)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"shuffler, 64x64, B=256, encrypted, {r['users']} users (synthetic ciphertexts): "
              f"{r['messages'] / 1e6:.1f} M messages x {r['record_bytes']} B = "
              f"{r['mixed_gb']:.1f} GB mixed, {r['buckets']} buckets, memory_limit "
              f"{r['memory_limit_mb']:.0f} MiB")
        print(f"  peak RSS {r['peak_rss_mb']:.0f} MB (interpreter + libraries alone "
              f"{r['baseline_rss_mb']:.0f} MB); submit {r['submit_s']:.0f} s, "
              f"mix {r['mix_s']:.0f} s")
    if not args.skip_analyzer:
        analyzer(args.messages)


if __name__ == "__main__":
    main()
