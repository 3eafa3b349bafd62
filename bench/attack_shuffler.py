"""Attacks on the shuffler service over loopback: what honest devices and the release see.

Each attack runs against a real ``shuffledp serve shuffler`` process on 127.0.0.1 with a fresh
round (``setup``: 8x8 grid, n = 60 provisioned users, dropout 0.2, so n_min = 48) and
``--honest`` enrolled honest devices (default 50), each uploading one real encrypted batch
with its credential (``shuffledp.serve.client.upload_batch``, 8 at a time). The operator then
closes the round, fetches the mixed batch and the analyzer releases it
(:func:`shuffledp.analyzers.heatmap.modular.release_mixed`). Per attack it prints the honest
batches accepted / refused (a device is *denied* if its upload finally failed, after its
normal retry policy; with ``retry_for`` 0 for the idle and slow-header attacks, so any
refusal counts), what the attacker achieved, and whether the release stayed within its
guarantee: the release succeeded and at least n_min of the users it counts are honest (the
noise is planned so that any n_min honest users' noise gives the claimed epsilon; a batch of
an attacker adds none).

1. ``sybil``: 19 valid batches under forged credentials (made-up device ids, random keys),
   19 without any credential, one captured signed request replayed with another body, and
   one enrolled attacker device trying to fill the round with 10 batches under fresh report
   ids. Target: 0 fake batches accepted without a credential; the enrolled attacker gets one
   place.
2. ``idle``: the attacker holds ``--idle`` (2,000) idle TCP sockets -- half from the honest
   devices' own address, half from another -- and reopens every socket the server closes,
   for as long as the honest devices upload. Target: 0 honest devices denied.
3. ``slow``: ``--slow`` (500) connections trickle a request head at one byte a second
   (the service runs with ``--header-timeout 5``); the attacker reopens them as they are
   closed. Reported: how many the server closed and their longest life.
4. ``oversize``: 20 uploads declaring 1 GiB without a credential, one with a credential
   declaring 1 GiB, one chunked body without a length streaming 64 MiB, and ``--held`` (200)
   signed uploads from 200 client addresses (127.0.2.x), each sending one byte short of the
   largest batch and then holding; the server's RSS before and while they are held. The same
   held-body probe runs once more against a 32x32-grid round, whose batches are 1.1 MB (the
   memory a buffering server would need is printed next to what it used).
5. ``disk``: the service's data directory is a small tmpfs (mounted in a user namespace:
   ``unshare -rm``; skipped where that is not allowed), and this round plans for dropout 0.5
   (n_min = 30) so that close can be tried early. 70% of the devices upload, the disk is
   filled, the others upload (getting 507 and retrying), close is attempted on the full disk
   (507, nothing left behind, then retried), the disk is freed after 3 s. Target: 0
   acknowledged batches lost (every 201 is in the release).

Bounded: at most the given counts, and each attack stops at ``--time-limit`` seconds.

Run: ``python bench/attack_shuffler.py [--honest 50] [--idle 2000] [--slow 500] [--held 200]
[--time-limit 120] [--only sybil,idle,slow,oversize,disk]``
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

import shuffledp as sdp
from shuffledp.analyzers.heatmap.modular import release_mixed
from shuffledp.encoders.encoder import user_batch
from shuffledp.protocol.wire import Header
from shuffledp.serve.admission import Credential, DeviceRegistry, sign_upload
from shuffledp.serve.client import Refused, upload_batch

PY = sys.executable
GRID = 8
N = 60
DROPOUT = 0.2


# --------------------------------------------------------------------------- the round
def _encode(args) -> list[bytes]:
    params_json, pub, count, grid = args
    p = sdp.ProtocolParams.from_json(params_json)
    rng = np.random.default_rng()
    out = []
    for _ in range(count):
        pix = rng.integers(0, grid * grid, 3)
        out.append(user_batch(p, pix, np.full(3, 1 / 3), analyzer_public=pub))
    return out


class Round:
    """params.json, keys and ``count`` encoded batches in ``folder``."""

    def __init__(self, folder: Path, count: int, grid: int = GRID, n: int = N,
                 dropout: float = DROPOUT) -> None:
        folder.mkdir(parents=True)
        self.dir = folder
        self.p = sdp.derive_params(sdp.Grid(grid, grid), n, epsilon=2.0, delta=1e-6, B=16,
                                   dropout=dropout)
        self.key = sdp.generate_analyzer_key()
        self.pub = sdp.public_bytes(self.key)
        self.mac = sdp.generate_mac_key()
        (folder / "params.json").write_text(self.p.to_json())
        (folder / "mac.key").write_bytes(self.mac)
        (folder / "analyzer.pub").write_bytes(self.pub)
        workers = max(1, min(2, os.cpu_count() or 1))
        parts = [count // workers + (i < count % workers) for i in range(workers)]
        with ProcessPoolExecutor(workers) as ex:
            self.batches = [b for part in ex.map(
                _encode, [(self.p.to_json(), self.pub, k, grid) for k in parts if k])
                for b in part]

    def release(self, mixed: bytes):
        rel = release_mixed(self.p, mixed, key=self.key, mac_key=self.mac)
        return rel, Header.unpack(mixed[:64])


# --------------------------------------------------------------------------- the service
class Service:
    """``shuffledp serve shuffler`` as a process (optionally inside ``prefix``)."""

    def __init__(self, rnd: Round, data: Path, *extra, inside: Path | None = None,
                 script: str | None = None) -> None:
        self.data = data
        self.log = data.parent / f"{data.name}.stderr"
        args = ["serve", "shuffler", "--params", str(rnd.dir / "params.json"), "--mac-key",
                str(rnd.dir / "mac.key"), "--analyzer-pub", str(rnd.dir / "analyzer.pub"),
                "--data", str(data), "--listen", "127.0.0.1:0", *map(str, extra)]
        with open(self.log, "wb") as log:
            if script is None:
                self.proc = subprocess.Popen([PY, "-m", "shuffledp.cli", *args],
                                             stdout=subprocess.DEVNULL, stderr=log)
            else:
                cmd = script + " && exec " + " ".join([PY, "-m", "shuffledp.cli", *args])
                self.proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", cmd],
                                             stdout=subprocess.DEVNULL, stderr=log)
        self.root = Path(f"/proc/{self.proc.pid}/root") / str(data).lstrip("/") \
            if script is not None else data
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"service did not start: {self.log.read_text()[-2000:]}")
            if time.monotonic() - t0 > 60:
                raise SystemExit("service did not start within 60 s")
            try:
                self.url = json.loads((self.root / "listen.json").read_text())["url"]
                httpx.get(self.url + "/hpke_config", timeout=5)
                break
            except (OSError, ValueError, httpx.TransportError):
                time.sleep(0.1)
        self.port = int(self.url.rsplit(":", 1)[1])

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def status(self, rnd: Round) -> dict:
        return httpx.get(f"{self.url}/rounds/{rnd.p.round_id.hex()}", timeout=30).json()

    def close_and_fetch(self, rnd: Round, retry_for: float = 0.0) -> tuple[int, bytes | None]:
        token = (self.root / "token").read_text().strip()
        auth = {"authorization": f"Bearer {token}"}
        base = f"{self.url}/rounds/{rnd.p.round_id.hex()}"
        deadline = time.monotonic() + retry_for
        while True:
            r = httpx.post(f"{base}/close", headers=auth, timeout=600)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        if r.status_code != 200:
            return r.status_code, None
        return 200, httpx.get(f"{base}/mixed", headers=auth, timeout=600).content

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def enrol(data: Path, k: int, prefix: str) -> list[Credential]:
    return DeviceRegistry(data).enrol([f"{prefix}-{j}" for j in range(k)])


def upload_honest(svc: Service, rnd: Round, batches: list[bytes], creds: list[Credential],
                  retry_for: float, deadline: float) -> tuple[list[str], list[str]]:
    """Every honest device uploads once (8 at a time); (accepted report ids, refusals)."""
    accepted: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def one(j: int) -> None:
        if time.monotonic() > deadline:
            with lock:
                refused.append("not attempted (time limit)")
            return
        try:
            rid = upload_batch(svc.url, rnd.p.round_id, batches[j], credential=creds[j],
                               retry_for=retry_for, timeout=30)
            with lock:
                accepted.append(rid)
        except Refused as e:
            with lock:
                refused.append(e.reason)
        except httpx.HTTPError as e:
            with lock:
                refused.append(type(e).__name__)

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(one, range(len(creds))))
    print(f"  ({len(creds)} honest uploads took {time.monotonic() - t0:.1f} s)")
    return accepted, refused


def verdict(name: str, rnd: Round, accepted: list, refused: list, attacker: str,
            mixed: bytes | None, attacker_batches: int = 0, close_status: int = 200) -> dict:
    """Release the mixed batch and print the attack's line."""
    if mixed is None:
        within, rel_text = False, f"no release (close answered {close_status})"
        n_users = 0
    else:
        n_users = Header.unpack(mixed[:64]).n_users
        try:
            rel, _ = rnd.release(mixed)
            honest = n_users - attacker_batches
            within = honest >= rnd.p.n_min and rel.guarantee.epsilon > 0
            rel_text = (f"{n_users} users ({honest} honest, n_min {rnd.p.n_min}), "
                        f"eps {rel.guarantee.epsilon:g}")
        except Exception as e:  # a refused release is a result too
            within, rel_text = False, f"{n_users} users in the mixed batch; release refused: {e}"
    reasons = {}
    for r in refused:
        reasons[r] = reasons.get(r, 0) + 1
    print(f"\n[{name}] honest batches accepted {len(accepted)}, refused {len(refused)}"
          f"{' ' + json.dumps(reasons) if reasons else ''}")
    print(f"  attacker: {attacker}")
    print(f"  release: {rel_text}; within its guarantee: {'yes' if within else 'NO'}")
    return {"accepted": len(accepted), "refused": len(refused), "within": within,
            "n_users": n_users}


# --------------------------------------------------------------------------- attacks
def attack_sybil(tmp: Path, a) -> dict:
    rnd = Round(tmp / "r-sybil", a.honest + 19 + 10)
    data = tmp / "svc-sybil"
    honest = enrol(data, a.honest, "dev")
    (insider,) = enrol(data, 1, "insider")
    svc = Service(rnd, data)
    deadline = time.monotonic() + a.time_limit
    try:
        fakes = rnd.batches[a.honest:a.honest + 19]
        rid_of = lambda: os.urandom(16).hex()  # noqa: E731
        put = f"{svc.url}/rounds/{rnd.p.round_id.hex()}/batches/"
        octet = {"content-type": "application/octet-stream"}
        fake_ok = 0
        with httpx.Client(timeout=30) as c:
            for j, b in enumerate(fakes):  # forged identities
                cred = Credential(f"sybil-{j}", os.urandom(32))
                rid = rid_of()
                r = c.put(put + rid, content=b, headers={
                    **octet, **sign_upload(cred, rnd.p.round_id, rid, b)})
                fake_ok += r.status_code == 201
            for b in fakes:  # no credential at all
                r = c.put(put + rid_of(), content=b, headers=octet)
                fake_ok += r.status_code == 201
            # a captured signed request of the insider, replayed with another body
            rid = rid_of()
            hdr = sign_upload(insider, rnd.p.round_id, rid, fakes[0])
            r = c.put(put + rid, content=fakes[1], headers={**octet, **hdr})
            fake_ok += r.status_code == 201
        # honest devices upload while the enrolled insider tries to fill the round
        fill = rnd.batches[a.honest + 19:]
        insider_ok = [0]

        def fill_round():
            for b in fill:
                try:
                    upload_batch(svc.url, rnd.p.round_id, b, credential=insider, retry_for=0)
                    insider_ok[0] += 1
                except (Refused, httpx.HTTPError):
                    pass

        t = threading.Thread(target=fill_round)
        t.start()
        accepted, refused = upload_honest(svc, rnd, rnd.batches[:a.honest], honest, 30.0,
                                          deadline)
        t.join()
        status, mixed = svc.close_and_fetch(rnd)
    finally:
        svc.stop()
    res = verdict("sybil", rnd, accepted, refused,
                  f"{fake_ok} of {2 * len(fakes) + 1} fake batches accepted without a valid "
                  f"credential; the enrolled insider got {insider_ok[0]} place(s) for "
                  f"{len(fill)} batches", mixed, attacker_batches=insider_ok[0],
                  close_status=status)
    res["fake_accepted"] = fake_ok
    return res


def _attacker(target, *args):
    """Run ``target(*args, stop, stats)`` in its own process (the attacker must not share
    this process's interpreter lock with the honest devices) and wait until it has made its
    first round of connections; returns (process, stop, queue)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Event()
    out = ctx.Queue()
    proc = ctx.Process(target=_run_attacker, args=(target, args, stop, ready, out), daemon=True)
    proc.start()
    if not ready.wait(120):
        raise SystemExit("the attacker process did not start")
    return proc, stop, out


def _run_attacker(target, args, stop, ready, out) -> None:
    stats: dict = {"opened": 0, "connect_errors": 0, "closed_by_server": 0, "longest": 0.0,
                   "held_samples": [], "ready": ready}
    try:
        target(*args, stop, stats)
    finally:
        ready.set()
        del stats["ready"]
        out.put(stats)


def _finish(attacker) -> dict:
    proc, stop, out = attacker
    stop.set()
    stats = out.get(timeout=60)
    proc.join(30)
    return stats


def _hold_idle(port: int, sources: list[str], count: int, stop, stats: dict) -> None:
    """Hold ``count`` idle sockets, reopening each one the server closes."""
    socks: list[socket.socket | None] = [None] * count

    def opened(i):
        s = socket.socket()
        s.setblocking(True)
        s.bind((sources[i % len(sources)], 0))
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        stats["opened"] += 1
        return s

    try:
        while not stop.is_set():
            held = 0
            for i in range(count):
                s = socks[i]
                if s is not None:
                    try:
                        if s.recv(1) == b"":
                            s.close()
                            s = socks[i] = None
                    except BlockingIOError:
                        held += 1
                        continue
                    except OSError:
                        s.close()
                        s = socks[i] = None
                if s is None and not stop.is_set():
                    try:
                        socks[i] = opened(i)
                        held += 1
                    except OSError:
                        stats["connect_errors"] += 1
            stats["held_samples"].append(held)
            stats["ready"].set()
            stop.wait(0.2)
    finally:
        for s in socks:
            if s is not None:
                s.close()


def attack_idle(tmp: Path, a) -> dict:
    rnd = Round(tmp / "r-idle", a.honest)
    data = tmp / "svc-idle"
    honest = enrol(data, a.honest, "dev")
    svc = Service(rnd, data)
    attacker = _attacker(_hold_idle, svc.port, ["127.0.0.1", "127.0.0.2"], a.idle)
    try:
        time.sleep(1.0)  # the attacker's sockets are in place before the devices come
        accepted, refused = upload_honest(svc, rnd, rnd.batches, honest, 0.0,
                                          time.monotonic() + a.time_limit)
        stats = _finish(attacker)
        conn = svc.status(rnd).get("connections", {})
        status, mixed = svc.close_and_fetch(rnd)
    finally:
        attacker[1].set()
        svc.stop()
    return verdict("idle", rnd, accepted, refused,
                   f"held {a.idle} idle sockets (half from the devices' own address) for the "
                   f"whole upload phase, reopening each one the server closed: "
                   f"{stats['opened']} opened in all; the server evicted "
                   f"{conn.get('evicted_idle', 0)} idle connections and refused "
                   f"{conn.get('refused_per_client', 0) + conn.get('refused_total', 0)}",
                   mixed, close_status=status)


def _hold_slow(port: int, count: int, stop, stats: dict) -> None:
    """``count`` connections trickling a request head, 25 per address (127.0.3.x), so the
    per-address limit does not close them: the head deadline must."""
    head = b"PUT /rounds/x/batches/y HTTP/1.1\r\nHost: shuffler\r\nX-Pad: " + b"a" * 4000
    conns: list[list] = []
    n_opened = 0
    try:
        while not stop.is_set():
            while len(conns) < count and not stop.is_set():
                try:
                    s = socket.socket()
                    s.bind((f"127.0.3.{1 + (n_opened // 25) % 250}", 0))
                    s.settimeout(5)
                    s.connect(("127.0.0.1", port))
                    n_opened += 1
                    s.setblocking(False)
                    conns.append([s, time.monotonic(), 0])
                    stats["opened"] += 1
                except OSError:
                    stats["connect_errors"] += 1
                    break
            for c in list(conns):
                s, t0, k = c
                try:
                    s.send(head[k % len(head):k % len(head) + 1])
                    c[2] += 1
                except OSError:  # closed by the server
                    stats["closed_by_server"] += 1
                    stats["longest"] = max(stats["longest"], time.monotonic() - t0)
                    s.close()
                    conns.remove(c)
            stats["ready"].set()
            stop.wait(1.0)
    finally:
        for s, t0, _ in conns:
            stats["longest_open_at_end"] = max(stats.get("longest_open_at_end", 0.0),
                                               time.monotonic() - t0)
            s.close()


def attack_slow(tmp: Path, a) -> dict:
    rnd = Round(tmp / "r-slow", a.honest)
    data = tmp / "svc-slow"
    honest = enrol(data, a.honest, "dev")
    svc = Service(rnd, data, "--header-timeout", 5)
    attacker = _attacker(_hold_slow, svc.port, a.slow)
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        accepted, refused = upload_honest(svc, rnd, rnd.batches, honest, 0.0,
                                          time.monotonic() + a.time_limit)
        time.sleep(max(0.0, 8.0 - (time.monotonic() - t0)))  # the head deadline passes
        stats = _finish(attacker)
        conn = svc.status(rnd).get("connections", {})
        status, mixed = svc.close_and_fetch(rnd)
    finally:
        attacker[1].set()
        svc.stop()
    return verdict("slow", rnd, accepted, refused,
                   f"{stats['opened']} slow-head connections opened ({a.slow} at a time from "
                   f"{-(-a.slow // 25)} addresses, one byte a second); the server closed "
                   f"{stats['closed_by_server']} "
                   f"(header_timeout {conn.get('header_timeout', 0)}, idle "
                   f"{conn.get('idle_timeout', 0)}, evicted {conn.get('evicted_idle', 0)}), "
                   f"the longest lived {stats['longest']:.1f} s (limit 5 s; the attacker notices "
                   "at its next byte)", mixed, close_status=status)


def _held_bodies(svc: Service, rnd: Round, creds: list[Credential], k: int,
                 max_body: int) -> list[socket.socket]:
    """``k`` signed uploads from distinct addresses 127.0.2.x, one byte short, held."""
    held = []
    body = bytes(max_body)
    for i in range(k):
        cred = creds[i]
        rid = os.urandom(16).hex()
        hdrs = "".join(f"{h}: {v}\r\n" for h, v in sign_upload(
            cred, rnd.p.round_id, rid, body).items())
        s = socket.socket()
        s.bind((f"127.0.{2 + i // 250}.{1 + i % 250}", 0))
        s.connect(("127.0.0.1", svc.port))
        s.sendall(f"PUT /rounds/{rnd.p.round_id.hex()}/batches/{rid} HTTP/1.1\r\nHost: x\r\n"
                  f"{hdrs}Content-Type: application/octet-stream\r\n"
                  f"Content-Length: {max_body}\r\n\r\n".encode())
        view = memoryview(body)[:max_body - 1]
        s.sendall(view)
        held.append(s)
    return held


def _held_note(k: int, max_body: int, rss0: float, rss1: float) -> str:
    return (f"{k} held bodies of {max_body - 1} bytes ({k * max_body / 2**20:.0f} MiB in all, "
            f"streamed to disk): server RSS {rss0:.0f} -> {rss1:.0f} MiB, "
            f"{(rss1 - rss0) * 1024 / k:.0f} KiB per held connection")


def attack_oversize(tmp: Path, a) -> dict:
    rnd = Round(tmp / "r-oversize", a.honest)
    data = tmp / "svc-oversize"
    honest = enrol(data, a.honest, "dev")
    holders = enrol(data, a.held, "holder")
    svc = Service(rnd, data, "--body-timeout", 60)
    notes = []
    try:
        url = f"{svc.url}/rounds/{rnd.p.round_id.hex()}/batches/"
        octet = {"content-type": "application/octet-stream"}
        rss0 = svc.rss_mib()
        codes = []
        big = 1 << 30

        def gigabyte():
            chunk = bytes(1 << 20)
            for _ in range(1024):
                yield chunk

        t = time.monotonic()
        with httpx.Client(timeout=30) as c:
            for _ in range(20):
                try:
                    r = c.put(url + os.urandom(16).hex(), content=gigabyte(),
                              headers={**octet, "content-length": str(big)})
                    codes.append(r.status_code)
                except httpx.HTTPError as e:
                    codes.append(type(e).__name__)
            rid = os.urandom(16).hex()
            hdr = sign_upload(holders[0], rnd.p.round_id, rid, b"x")
            try:
                r = c.put(url + rid, content=gigabyte(),
                          headers={**octet, **hdr, "content-length": str(big)})
                codes.append(r.status_code)
            except httpx.HTTPError as e:
                codes.append(type(e).__name__)

            def chunks64():
                chunk = bytes(1 << 20)
                for _ in range(64):
                    yield chunk

            rid = os.urandom(16).hex()
            hdr = sign_upload(holders[1], rnd.p.round_id, rid, b"x")
            try:
                r = c.put(url + rid, content=chunks64(), headers={**octet, **hdr})
                codes.append(r.status_code)
            except httpx.HTTPError as e:
                codes.append(type(e).__name__)
        refused_in = time.monotonic() - t
        notes.append(f"{len(codes)} oversize uploads answered {sorted(set(map(str, codes)))} "
                     f"in {refused_in:.1f} s in all")
        max_body = httpx.get(f"{svc.url}/hpke_config").json()["max_body"]
        held = _held_bodies(svc, rnd, holders, a.held, max_body)
        time.sleep(1.0)
        rss_held = svc.rss_mib()
        accepted, refused = upload_honest(svc, rnd, rnd.batches, honest, 30.0,
                                          time.monotonic() + a.time_limit)
        for s in held:
            s.close()
        notes.append(_held_note(a.held, max_body, rss0, rss_held))
        status, mixed = svc.close_and_fetch(rnd)
    finally:
        svc.stop()
    # the same probe where a batch is 1.1 MB (no honest devices: memory only)
    big_rnd = Round(tmp / "r-oversize-32", 0, grid=32)
    data2 = tmp / "svc-oversize-32"
    holders2 = enrol(data2, a.held, "holder")
    svc2 = Service(big_rnd, data2, "--body-timeout", 60)
    try:
        max_body = httpx.get(f"{svc2.url}/hpke_config").json()["max_body"]
        rss0 = svc2.rss_mib()
        held = _held_bodies(svc2, big_rnd, holders2, a.held, max_body)
        time.sleep(1.0)
        rss_held = svc2.rss_mib()
        for s in held:
            s.close()
        notes.append("32x32 round: " + _held_note(a.held, max_body, rss0, rss_held))
    finally:
        svc2.stop()
    return verdict("oversize", rnd, accepted, refused, "; ".join(notes), mixed,
                   close_status=status)


def _unshare_works() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d"],
                           capture_output=True)
    return probe.returncode == 0


def attack_disk(tmp: Path, a) -> dict | None:
    if not _unshare_works():
        print("\n[disk] skipped: needs `unshare -rm` and tmpfs in a user namespace")
        return None
    rnd = Round(tmp / "r-disk", a.honest, dropout=0.5)  # n_min 30: close can be tried early
    data = tmp / "svc-disk"
    data.mkdir()
    creds_dir = tmp / "creds-disk"
    size_kib = max(4096, 3 * a.honest * len(rnd.batches[0]) // 1024 + 1024)
    script = (f"mount -t tmpfs -o size={size_kib}k tmpfs {data} && {PY} -m shuffledp.cli serve "
              f"enrol --data {data} --count {a.honest} --out {creds_dir} >/dev/null")
    svc = Service(rnd, data, script=script)
    creds = sorted((Credential.load(f) for f in creds_dir.glob("*.credential")),
                   key=lambda c: c.device_id)
    # enough batches for close to start mixing, the rest while the disk is full
    half = min(a.honest, max(rnd.p.n_min, (7 * a.honest) // 10))
    deadline = time.monotonic() + a.time_limit
    filler = svc.root / "filler"
    try:
        acc1, ref1 = upload_honest(svc, rnd, rnd.batches[:half], creds[:half], 60.0, deadline)
        with open(filler, "wb", buffering=0) as fh:  # fill the disk
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
        result = {}

        def second_half():
            result["v"] = upload_honest(svc, rnd, rnd.batches[half:], creds[half:], 60.0,
                                        deadline)

        t = threading.Thread(target=second_half)
        t.start()
        time.sleep(1.0)
        token = (svc.root / "token").read_text().strip()
        r = httpx.post(f"{svc.url}/rounds/{rnd.p.round_id.hex()}/close",
                       headers={"authorization": f"Bearer {token}"}, timeout=60)
        close_on_full = r.status_code
        leftovers = [f.name for f in (svc.root / f"round-{rnd.p.round_id.hex()}").iterdir()
                     if f.name.startswith((".", "shuffledp-"))]
        time.sleep(2.0)
        filler.unlink()  # space returns
        t.join()
        acc2, ref2 = result["v"]
        st = svc.status(rnd)
        n507 = st.get("refused_requests", {}).get("insufficient_storage", 0)
        status, mixed = svc.close_and_fetch(rnd, retry_for=30)
    finally:
        svc.stop()
    accepted, refused = acc1 + acc2, ref1 + ref2
    res = verdict("disk", rnd, accepted, refused,
                  f"disk filled after {len(acc1)} uploads: {n507} answers 507 (retried by the "
                  f"devices); close on the full disk answered {close_on_full} leaving "
                  f"{len(leftovers)} temporary files, then succeeded", mixed,
                  close_status=status)
    res["lost"] = len(accepted) - res["n_users"]
    print(f"  acknowledged batches lost: {res['lost']} (201 answers {len(accepted)}, users in "
          "the release " + str(res["n_users"]) + ")")
    return res


ATTACKS = {"sybil": attack_sybil, "idle": attack_idle, "slow": attack_slow,
           "oversize": attack_oversize, "disk": attack_disk}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--honest", type=int, default=50, help="honest devices per attack (<= 58)")
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--slow", type=int, default=500)
    ap.add_argument("--held", type=int, default=200)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--only", default=",".join(ATTACKS))
    a = ap.parse_args()
    if not 1 <= a.honest <= N - 2:
        raise SystemExit(f"--honest must be in [1, {N - 2}], got {a.honest}")
    if a.honest < sdp.derive_params(sdp.Grid(GRID, GRID), N, epsilon=2.0, delta=1e-6, B=16,
                                    dropout=DROPOUT).n_min:
        print("note: fewer honest devices than n_min: every release is refused")
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.idle + a.slow + 1024)),
                                                hard))
    print(f"shuffler service attacks: {a.honest} honest devices per attack, grid {GRID}x{GRID},"
          f" n = {N}, dropout {DROPOUT}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.only.split(","):
            t = time.monotonic()
            results[name] = ATTACKS[name](Path(tmp), a)
            print(f"  ({time.monotonic() - t:.0f} s)")
    print("\ntargets")
    if "idle" in results:
        print(f"  honest devices denied while {a.idle} idle sockets are held: "
              f"{results['idle']['refused']} (target 0)")
    if "sybil" in results:
        print(f"  fake batches accepted without a credential: {results['sybil']['fake_accepted']}"
              " (target 0)")
    if results.get("disk"):
        print(f"  acknowledged batches lost on a full disk: {results['disk']['lost']} "
              "(target 0)")
    print(f"  releases within their guarantee: "
          f"{sum(bool(r and r['within']) for r in results.values())} of "
          f"{sum(r is not None for r in results.values())}")


if __name__ == "__main__":
    main()
