"""The shuffler service over real loopback HTTP: device processes upload, the server is
killed mid-round and restarted (nothing acknowledged is lost), resubmission is idempotent,
and every refusal is an RFC 9457 problem (oversize, wrong round, malformed, slow client)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from shuffledp.cli import main  # noqa: E402
from shuffledp.serve.shuffler_service import ShufflerState  # noqa: E402

DEADLINE = 60.0  # hang guard only; nothing below depends on speed


def run_cli(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res


def start_server(data, *extra):
    (data / "listen.json").unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "shuffledp.cli", "serve", *map(str, extra), "--data", str(data),
         "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    while not (data / "listen.json").exists():
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
        assert time.monotonic() - t0 < DEADLINE, "server did not start"
        time.sleep(0.05)
    url = json.loads((data / "listen.json").read_text())["url"]
    # the file is written before uvicorn starts accepting: wait for the first answer
    while True:
        try:
            httpx.get(url + "/hpke_config", timeout=5)
            return proc, url
        except httpx.TransportError:
            assert time.monotonic() - t0 < DEADLINE, "server does not answer"
            time.sleep(0.05)


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(timeout=DEADLINE)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("round")
    run_cli("setup", "--grid", "4x4", "--n", 5, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
            "--dropout", 0.4, "--out", d)
    rng = np.random.default_rng(0)
    for j in range(5):
        pts = d / f"u{j}.csv"
        pts.write_text("x,y\n" + "\n".join(f"{a},{b}" for a, b in rng.random((3, 2))))
        run_cli("encode", "--params", d / "params.json", "--points", pts, "--analyzer-pub",
                d / "analyzer.pub", "--out", d / f"u{j}.bin")
    return d


def _shuffler_args(d):
    return ["shuffler", "--params", d / "params.json", "--mac-key", d / "mac.key",
            "--analyzer-pub", d / "analyzer.pub", "--body-timeout", 1.5]


def _round(d):
    from shuffledp.protocol.params import ProtocolParams

    return ProtocolParams.from_json((d / "params.json").read_text())


def _device(url, d, j, rid):
    """A device as its own process: `shuffledp upload`."""
    return subprocess.Popen(
        [sys.executable, "-m", "shuffledp.cli", "upload", "--server", url, "--params",
         str(d / "params.json"), "--in", str(d / f"u{j}.bin"), "--report-id", rid],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _is_problem(r, status, reason):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["type"] == f"urn:shuffledp:problem:{reason}", body
    assert body["status"] == status and body["title"] and body["detail"]
    return body


def test_round_survives_a_kill_and_releases(run_dir, tmp_path):
    from shuffledp.analyzers.heatmap.modular import release_mixed
    from shuffledp.protocol.crypto import (
        KEY_ANALYZER_PRIVATE,
        KEY_ANALYZER_PUBLIC,
        KEY_MAC,
        as_private_key,
        read_key_file,
    )

    d, data = run_dir, tmp_path / "svc"
    p = _round(d)
    rnd = p.round_id.hex()
    rids = [os.urandom(16).hex() for _ in range(5)]
    proc, url = start_server(data, *_shuffler_args(d))
    try:
        cfg = httpx.get(url + "/hpke_config").json()
        pub = read_key_file(d / "analyzer.pub", KEY_ANALYZER_PUBLIC)
        assert cfg["round"] == rnd and cfg["public_key"] == pub.hex()
        assert cfg["suite"] == {"kem_id": 0x20, "kdf_id": 1, "aead_id": 3}
        devices = [_device(url, d, j, rids[j]) for j in range(2)]  # two device processes
        for j, dev in enumerate(devices):
            out, err = dev.communicate(timeout=DEADLINE)
            assert dev.returncode == 0, err.decode()
            assert out.decode().strip() == rids[j]  # the device prints its report id
        r = httpx.put(f"{url}/rounds/{rnd}/batches/{rids[2]}", content=(d / "u2.bin").read_bytes(),
                      headers={"content-type": "application/octet-stream"})
        assert r.status_code == 201 and r.content == b""
        assert httpx.get(f"{url}/rounds/{rnd}").json()["accepted"] == 3
    finally:
        stop(proc, signal.SIGKILL)  # crash: no shutdown handler runs
    proc, url = start_server(data, *_shuffler_args(d))
    try:
        st = httpx.get(f"{url}/rounds/{rnd}").json()
        assert st["accepted"] == 3 and st["recovered"] == 3  # nothing acknowledged was lost
        batch0 = (d / "u0.bin").read_bytes()
        put = f"{url}/rounds/{rnd}/batches/"
        hdr = {"content-type": "application/octet-stream"}
        # idempotent: the same bytes under the same id again -> the same 201, counted once
        assert httpx.put(put + rids[0], content=batch0, headers=hdr).status_code == 201
        # another batch under an accepted id -> 409
        _is_problem(httpx.put(put + rids[0], content=(d / "u3.bin").read_bytes(), headers=hdr),
                    409, "report_id_conflict")
        # the same batch under another id is a replay
        _is_problem(httpx.put(put + rids[4], content=batch0, headers=hdr), 409,
                    "replayed_batch")
        from shuffledp.serve.client import upload_batch

        assert upload_batch(url, rnd, (d / "u3.bin").read_bytes(), report_id=rids[3]) == rids[3]
        assert httpx.get(f"{url}/rounds/{rnd}").json()["accepted"] == 4
        # close needs the operator's token
        _is_problem(httpx.post(f"{url}/rounds/{rnd}/close"), 401, "unauthorized")
        out = tmp_path / "mixed.bin"
        res = run_cli("serve", "close", "--server", url, "--params", d / "params.json",
                      "--token", data / "token", "--out", out)
        report = json.loads(res.output)
        assert report["n_forwarded"] == 4 and report["authenticated"]
        assert not list((data / f"round-{rnd}" / "batches").glob("*.bin"))  # forgotten
        _is_problem(httpx.put(put + rids[4], content=(d / "u4.bin").read_bytes(),
                              headers=hdr), 409, "round_closed")
    finally:
        stop(proc)
    key = as_private_key(read_key_file(d / "analyzer.key", KEY_ANALYZER_PRIVATE))
    mixed = out.read_bytes()
    release = release_mixed(p, mixed, key=key, mac_key=read_key_file(d / "mac.key", KEY_MAC),
                            ledger=tmp_path / "releases.jsonl")
    assert release.guarantee.epsilon > 0
    from shuffledp.protocol.wire import Header

    assert Header.unpack(mixed[:64]).n_users == 4
    # a restart after close keeps the round closed with the same report
    state = ShufflerState(p, data, mac_key=read_key_file(d / "mac.key", KEY_MAC))
    assert state.closed and state.status()["report"]["n_forwarded"] == 4


def test_refusals_are_problem_details(run_dir, tmp_path):
    d = run_dir
    p = _round(d)
    rnd = p.round_id.hex()
    proc, url = start_server(tmp_path / "svc", *_shuffler_args(d))
    try:
        put = f"{url}/rounds/{rnd}/batches/"
        hdr = {"content-type": "application/octet-stream"}
        batch = (d / "u1.bin").read_bytes()
        rid = os.urandom(16).hex()
        _is_problem(httpx.put(f"{url}/rounds/{'00' * 16}/batches/{rid}", content=batch,
                              headers=hdr), 404, "unknown_round")
        _is_problem(httpx.put(put + rid, content=batch + b"\0" * 4096, headers=hdr), 413,
                    "body_too_large")
        _is_problem(httpx.put(put + rid, content=b"SDPW" + b"\0" * 200, headers=hdr), 400,
                    "malformed")
        _is_problem(httpx.put(put + rid, content=batch[:-10], headers=hdr), 400, "truncated")
        _is_problem(httpx.put(put + "short", content=batch, headers=hdr), 400, "bad_report_id")
        _is_problem(httpx.put(put + rid, content=batch, headers={"content-type": "text/plain"}),
                    415, "unsupported_media_type")
        _is_problem(httpx.get(f"{url}/nowhere"), 404, "not_found")
        # a batch of another round (fresh setup, other round id) -> wrong_digest
        other = tmp_path / "other"
        run_cli("setup", "--grid", "4x4", "--n", 5, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
                "--dropout", 0.4, "--out", other)
        (other / "p.csv").write_text("x,y\n0.5,0.5\n")
        run_cli("encode", "--params", other / "params.json", "--points", other / "p.csv",
                "--analyzer-pub", other / "analyzer.pub", "--out", other / "b.bin")
        _is_problem(httpx.put(put + rid, content=(other / "b.bin").read_bytes(), headers=hdr),
                    400, "wrong_digest")
        # a slow client: headers and half the body, then silence -> 408 after --body-timeout
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])),
                                      timeout=DEADLINE) as s:
            s.sendall(f"PUT /rounds/{rnd}/batches/{rid} HTTP/1.1\r\nHost: x\r\n"
                      f"Content-Type: application/octet-stream\r\n"
                      f"Content-Length: {len(batch)}\r\n\r\n".encode() + batch[:100])
            reply = b""
            while b"\r\n\r\n" not in reply:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert b"request_timeout" in reply or b"application/problem+json" in reply
        # after all these refusals the id is still free: the real batch is accepted
        assert httpx.put(put + rid, content=batch, headers=hdr).status_code == 201
        st = httpx.get(f"{url}/rounds/{rnd}").json()
        assert st["accepted"] == 1 and st["rejected"]["malformed"] == 1
    finally:
        stop(proc)
