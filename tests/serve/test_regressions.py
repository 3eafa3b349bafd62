"""Regressions of the open shuffler service, probed with requests the old and the new service
both understand (no credential, no new option): an unsigned upload took a place, held idle
sockets made every request get 503, a slow request head was never closed, a lower-case
``bearer`` was refused, and the HTTP layer answered in plain text. The full checks are in the
other modules of this folder."""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_helpers import (  # noqa: E402
    OCTET,
    is_problem,
    make_round,
    params,
    rid,
    shuffler_args,
    start_server,
    stop,
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_round(tmp_path_factory.mktemp("round"), batches=1)


def read_reply(s: socket.socket, limit: float) -> bytes:
    s.settimeout(limit)
    out = b""
    try:
        while chunk := s.recv(4096):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def test_an_unsigned_upload_takes_no_place(run_dir, tmp_path):
    d = run_dir
    rnd = params(d).round_id.hex()
    proc, url = start_server(tmp_path / "svc", *shuffler_args(d))
    try:
        r = httpx.put(f"{url}/rounds/{rnd}/batches/{rid()}", content=(d / "u0.bin").read_bytes(),
                      headers=OCTET)
        is_problem(r, 401, "unauthorized")
        assert httpx.get(f"{url}/rounds/{rnd}").json()["accepted"] == 0
    finally:
        stop(proc)


def test_held_idle_sockets_do_not_deny_service(run_dir, tmp_path):
    proc, url = start_server(tmp_path / "svc", *shuffler_args(run_dir, "--max-connections", 64))
    port = int(url.rsplit(":", 1)[1])
    held = []
    try:
        for _ in range(200):
            held.append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(0.5)
        for _ in range(5):
            assert httpx.get(f"{url}/hpke_config", timeout=10).status_code == 200
    finally:
        for s in held:
            s.close()
        stop(proc)


def test_a_slow_request_head_is_closed(run_dir, tmp_path):
    proc, url = start_server(tmp_path / "svc", *shuffler_args(run_dir))
    try:
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:
            s.sendall(b"GET /hpke_config HTTP/1.1\r\nHost: x\r\n")  # never completed
            t0 = time.monotonic()
            reply = read_reply(s, 20)
        assert reply.startswith(b"HTTP/1.1 408") and time.monotonic() - t0 < 15
        assert b"application/problem+json" in reply
    finally:
        stop(proc)


def test_lower_case_bearer_and_problems_from_the_http_layer(run_dir, tmp_path):
    data = tmp_path / "svc"
    rnd = params(run_dir).round_id.hex()
    proc, url = start_server(data, *shuffler_args(run_dir))
    try:
        token = (data / "token").read_text().strip()
        r = httpx.post(f"{url}/rounds/{rnd}/close", headers={"authorization": f"bearer {token}"})
        is_problem(r, 409, "too_few_batches")  # authorised; nothing to mix yet
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:
            s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            reply = read_reply(s, 10)
        assert reply.startswith(b"HTTP/1.1 400") and b"application/problem+json" in reply
        is_problem(httpx.delete(f"{url}/rounds/{rnd}"), 405, "method_not_allowed")
    finally:
        stop(proc)
