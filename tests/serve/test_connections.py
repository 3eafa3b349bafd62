"""Connections of the services under attack, with real sockets on loopback: idle sockets do
not deny honest uploads (the oldest idle connection makes room), slow request heads and
bodies are closed at their deadlines with a 408 problem, busy connections are limited per
client address, held upload bodies do not grow the server's memory, and a secure-aggregation
run completes while idle sockets are held. Regression: 2,048 idle sockets made every upload
get 503 for as long as they were held, slow-header connections were never closed, the same
attack aborted a SecAgg run, and 200 held upload bodies grew the server by 700 MiB."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_helpers import (  # noqa: E402
    enrol,
    make_round,
    params,
    rid,
    rss_mib,
    run_cli,
    shuffler_args,
    signed_put,
    start_server,
    stop,
)

from shuffledp.serve.admission import sign_upload  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_round(tmp_path_factory.mktemp("round"))


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def open_idle(port: int, k: int, source: str = "127.0.0.1") -> list[socket.socket]:
    socks = []
    for _ in range(k):
        s = socket.socket()
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


def alive(socks) -> int:
    """Sockets the server has not closed."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            n += s.recv(1) != b""
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def close_all(socks):
    for s in socks:
        s.close()


def other_loopback_address() -> str:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
        return "127.0.0.2"
    except OSError:
        pytest.skip("no second loopback address (127.0.0.2) on this system")


def read_reply(s: socket.socket, limit: float) -> bytes:
    s.settimeout(limit)
    out = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def test_idle_sockets_do_not_deny_honest_uploads(run_dir, tmp_path):
    attacker = other_loopback_address()
    data = tmp_path / "svc"
    creds = enrol(data, 4)
    rnd = params(run_dir).round_id
    proc, url = start_server(data, *shuffler_args(run_dir, "--max-connections", 256,
                                                   "--max-connections-per-client", 32))
    port = port_of(url)
    try:
        # far more idle sockets than the server allows, from another address and from the
        # honest devices' own address
        held = open_idle(port, 600, attacker) + open_idle(port, 300)
        time.sleep(0.3)
        for j, cred in enumerate(creds):
            r = signed_put(url, rnd, rid(), (run_dir / f"u{j}.bin").read_bytes(), cred)
            assert r.status_code == 201, r.text
        st = httpx.get(f"{url}/rounds/{rnd.hex()}").json()
        assert st["accepted"] == 4
        assert st["connections"]["evicted_idle"] >= 900 - 256
        assert alive(held) <= 256
        close_all(held)
    finally:
        stop(proc)


def test_slow_heads_and_silent_connections_are_closed(run_dir, tmp_path):
    data = tmp_path / "svc"
    enrol(data, 1)
    proc, url = start_server(data, *shuffler_args(run_dir, "--header-timeout", 1))
    port = port_of(url)
    try:
        silent = socket.create_connection(("127.0.0.1", port))
        slow = socket.create_connection(("127.0.0.1", port))
        t0 = time.monotonic()
        head = b"GET /hpke_config HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 40
        for byte in head[:12]:  # 1 byte every 0.25 s: never completes within 1 s
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.25)
        reply = read_reply(slow, 5)
        assert time.monotonic() - t0 < 6
        assert reply.startswith(b"HTTP/1.1 408") and b"application/problem+json" in reply
        assert read_reply(silent, 5).startswith(b"HTTP/1.1 408")
        # a malformed head is a problem too (uvicorn answers plain text by itself)
        with socket.create_connection(("127.0.0.1", port)) as bad:
            bad.sendall(b"\x00\x01garbage\r\n\r\n")
            reply = read_reply(bad, 5)
        assert reply.startswith(b"HTTP/1.1 400") and b"application/problem+json" in reply
        # an oversized head: 400 problem as well, never buffered without bound
        with socket.create_connection(("127.0.0.1", port)) as big:
            try:
                big.sendall(b"GET / HTTP/1.1\r\nX: " + b"a" * 100_000)
            except OSError:
                pass
            reply = read_reply(big, 5)
        assert reply.startswith(b"HTTP/1.1 400") and b"application/problem+json" in reply
        silent.close()
        slow.close()
        assert httpx.get(f"{url}/hpke_config").status_code == 200
    finally:
        stop(proc)


def _stalled_upload(port, url, rnd, cred, size, sent):
    """A signed upload that sends ``sent`` of ``size`` body bytes, then holds."""
    body = bytes(size)
    r1 = rid()
    hdrs = "".join(f"{k}: {v}\r\n" for k, v in sign_upload(cred, rnd, r1, body).items())
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"PUT /rounds/{rnd.hex()}/batches/{r1} HTTP/1.1\r\nHost: x\r\n{hdrs}"
              f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n"
              .encode() + body[:sent])
    return s


def test_busy_connections_are_limited_per_client(run_dir, tmp_path):
    data = tmp_path / "svc"
    creds = enrol(data, 3)
    p = params(run_dir)
    size = len((run_dir / "u0.bin").read_bytes())
    proc, url = start_server(data, *shuffler_args(run_dir, "--max-connections-per-client", 4,
                                                   "--body-timeout", 3))
    port = port_of(url)
    try:
        busy = [_stalled_upload(port, url, p.round_id, creds[i % 3], size, 100)
                for i in range(4)]
        time.sleep(0.5)
        # none of the 4 is idle: a 5th connection of the same address is refused, with a problem
        with socket.create_connection(("127.0.0.1", port)) as fifth:
            reply = read_reply(fifth, 5)
        assert reply.startswith(b"HTTP/1.1 503") and b"application/problem+json" in reply
        # the stalled bodies end at the body deadline (408), and the address is served again
        for s in busy:
            assert read_reply(s, 10).startswith(b"HTTP/1.1 408")
            s.close()
        assert httpx.get(f"{url}/hpke_config").status_code == 200
    finally:
        stop(proc)


def test_held_upload_bodies_do_not_grow_memory(tmp_path):
    d = tmp_path / "big"
    run_cli("setup", "--grid", "32x32", "--n", 100, "--epsilon", 2, "--delta", 1e-6, "--B", 16,
            "--out", d)
    data = tmp_path / "svc"
    held_n = 80
    creds = enrol(data, held_n // 2)
    p = params(d)
    cfg_max = None
    proc, url = start_server(data, "shuffler", "--params", d / "params.json", "--mac-key",
                             d / "mac.key", "--analyzer-pub", d / "analyzer.pub",
                             "--max-connections-per-client", 256, "--body-timeout", 60,
                             "--rate-limit", 1000, "--rate-burst", 1000)
    port = port_of(url)
    held = []
    try:
        cfg_max = httpx.get(f"{url}/hpke_config").json()["max_body"]
        assert cfg_max > 1_000_000
        before = rss_mib(proc.pid)
        for i in range(held_n):  # every device holds two uploads, each one byte short
            held.append(_stalled_upload(port, url, p.round_id, creds[i // 2], cfg_max,
                                        cfg_max - 1))
        time.sleep(2.0)
        grown = rss_mib(proc.pid) - before
        # 80 bodies of 1 MB held: buffered, they would add > 80 MiB
        assert grown < 40, f"server grew by {grown:.0f} MiB with {held_n} held bodies"
    finally:
        close_all(held)
        stop(proc)


def test_secagg_run_completes_while_idle_sockets_are_held(tmp_path):
    from shuffledp.serve.secagg_service import run_client

    m, n, t, length = 1 << 32, 3, 2, 4
    data = tmp_path / "secagg"
    data.mkdir()
    proc, url = start_server(data, "secagg", "--clients", n, "--threshold", t, "--length",
                             length, "--modulus", m, "--join-timeout", 60,
                             "--round-timeout", 20, "--max-connections", 128,
                             "--max-connections-per-client", 64)
    held = open_idle(port_of(url), 500)
    try:
        rng = np.random.default_rng(3)
        xs = [rng.integers(0, m, length, dtype=np.int64) for _ in range(n)]
        out = {}
        threads = [threading.Thread(target=lambda i=i: out.setdefault(
            i, run_client(url, i, xs[i], m, t, timeout=60))) for i in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(90)
        assert out == {0: "done", 1: "done", 2: "done"}
        proc.wait(timeout=60)
        assert proc.returncode == 0, proc.log_path.read_text()
        want = np.sum([x.astype(object) for x in xs], axis=0) % m
        np.testing.assert_array_equal(np.load(data / "result.npy").astype(object), want)
    finally:
        close_all(held)
        stop(proc)
