"""Secure aggregation over real loopback HTTP: client processes, a client that leaves, one
that falls silent (a dropout at the round deadline, not a hang), and refusals as problems."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

DEADLINE = 90.0  # hang guard only
M = 1 << 32


def start(data, *args):
    log = open(f"{data}.stderr", "ab")  # a pipe nobody reads would block the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "shuffledp.cli", "serve", "secagg", *map(str, args), "--data",
         str(data), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=log)
    log.close()
    proc.log_path = f"{data}.stderr"
    t0 = time.monotonic()
    while not (data / "listen.json").exists():
        if proc.poll() is not None:
            raise AssertionError(open(proc.log_path).read())
        assert time.monotonic() - t0 < DEADLINE
        time.sleep(0.05)
    return proc, json.loads((data / "listen.json").read_text())["url"]


def client_proc(url, i, path, t, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "shuffledp.cli", "secagg", "client", "--server", url, "--id",
         str(i), "--input", str(path), "--modulus", str(M), "--threshold", str(t),
         "--timeout", "60", *map(str, extra)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def silent_after_round1(url, i, x, t):
    """A client that advertises keys and shares them, then never answers again."""
    from shuffledp.secagg import SecAggClient

    with httpx.Client(timeout=40) as c:
        while True:
            try:
                sess = c.get(f"{url}/secagg/session").json()["session"]
                break
            except httpx.TransportError:
                time.sleep(0.05)
        client = SecAggClient(i, x, M, t, bytes.fromhex(sess))
        base = f"{url}/secagg/{sess}/rounds"
        assert c.put(f"{base}/0/clients/{i}", content=client.advertise()).status_code == 201
        while (r := c.get(f"{base}/0/server", params={"wait": 20})).status_code == 204:
            pass
        assert c.put(f"{base}/1/clients/{i}", content=client.share_keys(r.content)
                     ).status_code == 201


def test_four_rounds_with_processes_a_leaver_and_a_silent_dropout(tmp_path):
    n, t, length = 5, 3, 6
    rng = np.random.default_rng(1)
    xs = [rng.integers(0, M, length, dtype=np.int64) for _ in range(n)]
    for i, x in enumerate(xs):
        np.save(tmp_path / f"x{i}.npy", x)
    data = tmp_path / "svc"
    # round 0 waits for everyone (join window); later rounds close 15 s after opening at most.
    # Only the silent client's round waits that long (every other round closes once all its
    # clients answered or left); 15 s leaves a loaded 2-core machine ample time for the
    # honest clients, whose work per round is milliseconds.
    server, url = start(data, "--clients", n, "--threshold", t, "--length", length,
                        "--modulus", M, "--join-timeout", 60, "--round-timeout", 15)
    try:
        from shuffledp.serve.secagg_service import run_client

        procs = [client_proc(url, i, tmp_path / f"x{i}.npy", t) for i in range(2)]
        outcome = {}
        threads = [  # client 2 and a leaver in-process (still over HTTP), one silent client
            threading.Thread(target=lambda: outcome.setdefault(
                2, run_client(url, 2, xs[2], M, t, timeout=60))),
            threading.Thread(target=lambda: outcome.setdefault(
                3, run_client(url, 3, xs[3], M, t, timeout=60, stop_before=2))),
            threading.Thread(target=silent_after_round1, args=(url, 4, xs[4], t))]
        for th in threads:
            th.start()
        for p in procs:
            out, err = p.communicate(timeout=DEADLINE)
            assert p.returncode == 0, err.decode()
            assert out.decode().strip().endswith("done")
        for th in threads:
            th.join(DEADLINE)
        assert outcome == {2: "done", 3: "left"}
        server.wait(timeout=DEADLINE)
        assert server.returncode == 0, open(server.log_path).read()
    finally:
        if server.poll() is None:
            server.kill()
    report = json.loads((data / "report.json").read_text())
    assert report["status"] == "released" and report["transport"] == "http"
    assert report["survivors"] == [0, 1, 2]
    assert report["left_per_round"]["2"] == [3]
    assert report["dropped_per_round"]["2"] == [3, 4]  # 4 was silent: dropped at the deadline
    want = np.sum([xs[i].astype(object) for i in range(3)], axis=0) % M  # exact integers
    np.testing.assert_array_equal(np.load(data / "result.npy").astype(object), want)


def test_refusals_and_an_aborted_run(tmp_path):
    from shuffledp.secagg import SecAggClient

    data = tmp_path / "svc"
    (data).mkdir()
    (data / "result.npy").write_bytes(b"stale")  # an earlier run's result is removed
    server, url = start(data, "--clients", 3, "--threshold", 2, "--length", 4, "--modulus", M,
                        "--join-timeout", 2, "--body-timeout", 1)
    try:
        with httpx.Client(timeout=30) as c:
            while True:
                try:
                    info = c.get(f"{url}/secagg/session").json()
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            sess = info["session"]
            base = f"{url}/secagg/{sess}/rounds"
            ok = SecAggClient(0, np.zeros(4, dtype=np.int64), M, 2, bytes.fromhex(sess))

            def problem(r, status, reason):
                assert r.status_code == status, (r.status_code, r.text)
                assert r.headers["content-type"].startswith("application/problem+json")
                body = r.json()
                assert body["type"] == f"urn:shuffledp:problem:{reason}" and body["detail"]
                return body

            problem(c.put(f"{url}/secagg/{'00' * 16}/rounds/0/clients/0", content=b"x"), 404,
                    "not_found")
            problem(c.put(f"{base}/0/clients/0", content=b"\0" * 4096), 413, "body_too_large")
            problem(c.put(f"{base}/0/clients/0", content=b"garbage"), 400, "rejected_message")
            # client 0's message on client 1's channel: the sender field differs
            body = problem(c.put(f"{base}/0/clients/1", content=ok.advertise()), 400,
                           "rejected_message")
            assert "channel" in body["detail"]
            problem(c.put(f"{base}/2/clients/0", content=b"x"), 409, "wrong_phase")
            assert c.put(f"{base}/0/clients/0", content=ok.advertise()).status_code == 201
            r = c.get(f"{base}/0/server", params={"wait": 0})
            assert r.status_code == 204  # not yet: the round is open
            # only one client of three joins: round 0 closes at its deadline and aborts
            r = c.get(f"{base}/0/server", params={"wait": 20})
            problem(r, 410, "aborted")
        server.wait(timeout=DEADLINE)
        assert server.returncode == 1
    finally:
        if server.poll() is None:
            server.kill()
    report = json.loads((data / "report.json").read_text())
    assert report["status"] == "aborted" and "threshold" in report["reason"]
    assert not (data / "result.npy").exists()
    assert report["rejected"]


def test_a_busy_server_is_reported_as_such_and_waited_for(tmp_path):
    """Regression: a 503 (plain text) made the client fail with a JSON decoding error; now it
    retries 503 until its timeout and then names it, and completes once the server has room."""
    import socket

    from shuffledp.serve.secagg_service import ClientAborted, run_client

    n, t, length = 2, 2, 3
    data = tmp_path / "svc"
    server, url = start(data, "--clients", n, "--threshold", t, "--length", length,
                        "--modulus", M, "--join-timeout", 60, "--round-timeout", 20,
                        "--max-connections-per-client", 2, "--body-timeout", 30)
    port = int(url.rsplit(":", 1)[1])
    try:
        while True:
            try:
                sess = httpx.get(f"{url}/secagg/session").json()["session"]
                break
            except httpx.TransportError:
                time.sleep(0.05)
        # two connections of this address busy with a message body that does not come
        busy = []
        for i in range(2):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(f"PUT /secagg/{sess}/rounds/0/clients/{i} HTTP/1.1\r\nHost: x\r\n"
                      "Content-Length: 100\r\n\r\nab".encode())
            busy.append(s)
        time.sleep(0.3)
        xs = [np.arange(length, dtype=np.int64) + i for i in range(n)]
        with pytest.raises(ClientAborted, match="HTTP 503 unavailable"):
            run_client(url, 0, xs[0], M, t, timeout=2)
        out = {}
        threads = [threading.Thread(target=lambda i=i: out.setdefault(
            i, run_client(url, i, xs[i], M, t, timeout=60))) for i in range(n)]
        for th in threads:
            th.start()
        time.sleep(1.5)
        assert not out  # still waiting for room, not failed
        for s in busy:
            s.close()
        for th in threads:
            th.join(DEADLINE)
        assert out == {0: "done", 1: "done"}
        server.wait(timeout=DEADLINE)
        assert server.returncode == 0, open(server.log_path).read()
    finally:
        if server.poll() is None:
            server.kill()
    np.testing.assert_array_equal(np.load(data / "result.npy"), (xs[0] + xs[1]) % M)
