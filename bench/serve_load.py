"""Load on the shuffler service over loopback, and the per-message cost of HPKE.

1. HPKE (RFC 9180 base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305)
   as the toolkit uses it (:func:`shuffledp.protocol.crypto.encrypt_records` / ``open_records``, per
   message, Python loop included) next to the raw primitives measured in the same run: a
   fresh X25519 key, one exchange and a ChaCha20-Poly1305 seal under the shared secret (no
   key derivation at all: the floor any per-message public-key encryption pays). The
   ML-KEM-768 + X25519 hybrid KEM is measured the same way.
2. For N = 1,000 and 10,000 small batches (a 2x2 grid, about 24 messages of 57 bytes each):
   starts ``shuffledp serve shuffler`` on 127.0.0.1 (a free port), enrols N devices, uploads N
   distinct encrypted batches, each signed with its device's credential, from
   ``--concurrency`` concurrent httpx connections, and prints the
   accepted batches per second, the p50 / p99 latency of one upload (201 = fsynced), the
   server's peak RSS, and the time of ``close`` (mix + signed mixed batch). Batches are built
   from uniformly random shares with exactly r messages per coordinate (what the shuffler
   checks; the analyzer is not run here).

Run: ``python bench/serve_load.py [--sizes 1000,10000] [--concurrency 64] [--time-limit 300]``
(bounded: at most the given counts, each phase stops at --time-limit seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import shuffledp as sdp
from shuffledp.protocol.crypto import (
    KEM_HYBRID,
    associated_data_prefix,
    encrypt_records,
    encrypted_record_bytes,
    generate_hybrid_key,
    open_records,
)
from shuffledp.protocol.wire import KIND_USER_ENC, Header, encode_batch
from shuffledp.serve.admission import DeviceRegistry, sign_upload


def crypto_costs(k: int = 3000) -> None:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    p = sdp.derive_params(sdp.Grid(2, 2), 1000, epsilon=2.0, delta=1e-5, B=4)
    key = sdp.generate_analyzer_key()
    pub = key.public_key()
    rng = np.random.default_rng(0)
    rec = (rng.integers(0, p.m, k).astype(np.uint64) << np.uint64(p.share_bits)) | \
        rng.integers(0, p.q, k).astype(np.uint64)
    share = bytes(p.share_bytes)
    rb = encrypted_record_bytes(p)

    def best(fn, reps=3):
        return min(fn() for _ in range(reps))

    def hpke_enc():
        t = time.perf_counter()
        encrypt_records(p, rec, pub)
        return (time.perf_counter() - t) / k

    ct = encrypt_records(p, rec, pub)
    ad = associated_data_prefix(p)

    def hpke_dec():
        t = time.perf_counter()
        _, _, failed = open_records(ct, rb, p.share_bytes, ad, key)
        assert failed == 0
        return (time.perf_counter() - t) / k

    nonce = bytes(12)
    raw_cts = []

    def raw_enc():
        raw_cts.clear()
        t = time.perf_counter()
        for _ in range(k):
            e = X25519PrivateKey.generate()
            s = e.exchange(pub)
            raw_cts.append((e.public_key(), ChaCha20Poly1305(s).encrypt(nonce, share, b"")))
        return (time.perf_counter() - t) / k

    def raw_dec():
        t = time.perf_counter()
        for e, c in raw_cts:
            ChaCha20Poly1305(key.exchange(e)).decrypt(nonce, c, b"")
        return (time.perf_counter() - t) / k

    hk = generate_hybrid_key()
    hpub = hk.public_key()
    kh = max(200, k // 10)
    hct = encrypt_records(p, rec[:kh], hpub, kem=KEM_HYBRID)
    hrb = encrypted_record_bytes(p, KEM_HYBRID)

    def hyb_enc():
        t = time.perf_counter()
        encrypt_records(p, rec[:kh], hpub, kem=KEM_HYBRID)
        return (time.perf_counter() - t) / kh

    def hyb_dec():
        t = time.perf_counter()
        open_records(hct, hrb, p.share_bytes, ad, hk, KEM_HYBRID)
        return (time.perf_counter() - t) / kh

    re_, rd = best(raw_enc), best(raw_dec)
    he, hd = best(hpke_enc), best(hpke_dec)
    ye, yd = best(hyb_enc), best(hyb_dec)
    print(f"per-message cost, {k} messages, best of 3 (share {p.share_bytes} bytes)")
    print(f"  raw X25519 + ChaCha20-Poly1305 : encrypt {re_ * 1e6:6.1f} us   "
          f"decrypt {rd * 1e6:6.1f} us   ({32 + p.share_bytes + 16} bytes + 4 coordinate)")
    print(f"  HPKE X25519 (ours)             : encrypt {he * 1e6:6.1f} us   "
          f"decrypt {hd * 1e6:6.1f} us   ({rb} bytes/record)   "
          f"ratio {he / re_:.2f}x / {hd / rd:.2f}x raw")
    print(f"  HPKE ML-KEM-768+X25519 hybrid  : encrypt {ye * 1e6:6.1f} us   "
          f"decrypt {yd * 1e6:6.1f} us   ({hrb} bytes/record)   "
          f"ratio {ye / he:.2f}x / {yd / hd:.2f}x X25519 HPKE")


def _make_batches(args) -> list[bytes]:
    params_json, pub, count = args
    p = sdp.ProtocolParams.from_json(params_json)
    rng = np.random.default_rng()
    coords = np.repeat(np.arange(p.m, dtype=np.uint64), p.r)
    out = []
    for _ in range(count):
        rec = (coords << np.uint64(p.share_bits)) | rng.integers(0, p.q, coords.size).astype(
            np.uint64)
        body = encrypt_records(p, rec, pub)
        out.append(encode_batch(Header(KIND_USER_ENC, encrypted_record_bytes(p), p.digest,
                                       rec.size), body))
    return out


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _upload_all(url: str, rnd: str, batches: list[bytes], creds: list, concurrency: int,
                      time_limit: float) -> tuple[list[float], int, float]:
    import httpx

    lat: list[float] = []
    failures = 0
    sem = asyncio.Semaphore(concurrency)
    t_end = time.monotonic() + time_limit
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as c:
        async def one(b: bytes, cred) -> None:
            nonlocal failures
            if time.monotonic() > t_end:
                return
            async with sem:
                rid = os.urandom(16).hex()
                t = time.perf_counter()
                headers = {"content-type": "application/octet-stream",
                           **sign_upload(cred, bytes.fromhex(rnd), rid, b)}
                try:
                    r = await c.put(f"{url}/rounds/{rnd}/batches/{rid}", content=b,
                                    headers=headers)
                except httpx.TransportError:  # e.g. a keep-alive connection the server closed
                    failures += 1
                    return
                if r.status_code == 201:
                    lat.append(time.perf_counter() - t)
                else:
                    failures += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one(b, cr) for b, cr in zip(batches, creds)))
        return lat, failures, time.perf_counter() - t0


def load(n: int, concurrency: int, time_limit: float) -> None:
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        p = sdp.derive_params(sdp.Grid(2, 2), n, epsilon=2.0, delta=1e-5, B=4)
        key = sdp.generate_analyzer_key()
        pub = sdp.public_bytes(key)
        (d / "params.json").write_text(p.to_json())
        (d / "mac.key").write_bytes(sdp.generate_mac_key())
        t = time.perf_counter()
        workers = max(1, min(4, os.cpu_count() or 1))
        chunk = -(-n // workers)
        with ProcessPoolExecutor(workers) as ex:
            batches = [b for part in ex.map(_make_batches, [(p.to_json(), pub, min(
                chunk, n - i * chunk)) for i in range(workers)]) for b in part]
        gen = time.perf_counter() - t
        data = d / "svc"
        creds = DeviceRegistry(data).enrol([f"dev-{j}" for j in range(n)])
        # one client address for every device: lift the per-address limits (the defaults
        # are for devices on the internet, bench/attack_shuffler.py measures them)
        proc = subprocess.Popen(
            [sys.executable, "-m", "shuffledp.cli", "serve", "shuffler", "--params",
             str(d / "params.json"), "--mac-key", str(d / "mac.key"), "--data", str(data),
             "--listen", "127.0.0.1:0", "--min-batches", "1",
             "--max-connections-per-client", str(max(64, 2 * concurrency)),
             "--rate-limit", "1000000", "--rate-burst", "1000000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            t0 = time.monotonic()
            while not (data / "listen.json").exists():
                if proc.poll() is not None or time.monotonic() - t0 > 60:
                    raise SystemExit(proc.stderr.read().decode() if proc.stderr else "no start")
                time.sleep(0.05)
            url = json.loads((data / "listen.json").read_text())["url"]
            while True:
                try:
                    httpx.get(url + "/hpke_config")
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            rss0 = _peak_rss_mib(proc.pid)
            lat, failures, wall = asyncio.run(_upload_all(url, p.round_id.hex(), batches,
                                                          creds, concurrency, time_limit))
            token = (data / "token").read_text().strip()
            t = time.perf_counter()
            r = httpx.post(f"{url}/rounds/{p.round_id.hex()}/close",
                           headers={"authorization": f"Bearer {token}"}, timeout=600)
            t_close = time.perf_counter() - t
            peak = _peak_rss_mib(proc.pid)
            forwarded = r.json().get("n_forwarded") if r.status_code == 200 else None
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        lat_ms = np.array(lat) * 1e3
        print(f"N = {n:6d} batches of {len(batches[0])} bytes ({p.messages_per_user} messages), "
              f"concurrency {concurrency} (batches built in {gen:.1f} s)")
        print(f"  accepted {len(lat)} ({failures} refused or transport errors), "
              f"{len(lat) / wall:8.1f} batches/s, "
              f"latency p50 {np.percentile(lat_ms, 50):6.2f} ms  p99 "
              f"{np.percentile(lat_ms, 99):6.2f} ms")
        print(f"  server peak RSS {peak:.0f} MiB (after start {rss0:.0f} MiB); close (mix + "
              f"sign) {t_close:.2f} s, forwarded {forwarded}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--messages", type=int, default=3000)
    a = ap.parse_args()
    crypto_costs(a.messages)
    for n in (int(s) for s in a.sizes.split(",")):
        load(n, a.concurrency, a.time_limit)


if __name__ == "__main__":
    main()
