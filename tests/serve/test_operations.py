"""Operating the shuffler service: structured access logs without secrets, a lower-case
``bearer``, a retry after close answered as documented, a 500 in problem form, ``n_dropped``
counting only real users, durable token and key files, a device's retry outlasting a
restart, and what a third-party device needs published at ``/hpke_config``."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_helpers import (  # noqa: E402
    DEADLINE,
    OCTET,
    enrol,
    is_problem,
    make_round,
    params,
    rid,
    shuffler_args,
    signed_put,
    start_server,
    stop,
)

from shuffledp.serve.client import upload_batch  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_round(tmp_path_factory.mktemp("round"))


def test_access_log_retry_after_close_and_real_dropouts(run_dir, tmp_path):
    d, data = run_dir, tmp_path / "svc"
    creds = enrol(data, 5)
    rnd = params(d).round_id
    log = tmp_path / "access.jsonl"
    proc, url = start_server(data, *shuffler_args(d, "--access-log", log))
    try:
        b = [(d / f"u{j}.bin").read_bytes() for j in range(6)]
        # 10 anonymous uploads of garbage under fresh ids: refused, and nobody's dropout
        for _ in range(10):
            is_problem(httpx.put(f"{url}/rounds/{rnd.hex()}/batches/{rid()}",
                                 content=b"junk" * 10, headers=OCTET), 401, "unauthorized")
        # one enrolled device sends a bad batch and never a good one: one real dropout
        is_problem(signed_put(url, rnd, rid(), b"SDPW" + b"\0" * 100, creds[4]), 400,
                   "malformed")
        rids = [upload_batch(url, rnd, b[j], credential=creds[j]) for j in range(4)]
        token = (data / "token").read_text().strip()
        r = httpx.post(f"{url}/rounds/{rnd.hex()}/close",
                       headers={"authorization": f"bearer {token}"})  # lower-case scheme
        assert r.status_code == 200, r.text
        report = r.json()
        assert report["n_forwarded"] == 4 and report["n_dropped"] == 1
        assert report["refused_requests"]["unauthorized"] == 10
        # after close: a device retrying an accepted batch (reply lost) gets 201 again...
        assert upload_batch(url, rnd, b[0], credential=creds[0], report_id=rids[0],
                            retry_for=0) == rids[0]
        # ... anything else 409 round_closed
        is_problem(signed_put(url, rnd, rid(), b[5], creds[4]), 409, "round_closed")
        is_problem(signed_put(url, rnd, rids[1], b[5], creds[1]), 409, "round_closed")
    finally:
        stop(proc)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert {"time", "client", "method", "path", "status", "problem", "device", "ms"} <= \
        set(lines[0])
    puts = [x for x in lines if x["method"] == "PUT"]
    assert sum(x["problem"] == "unauthorized" for x in puts) == 10
    assert {x["device"] for x in puts if x["status"] == 201} == \
        {c.device_id for c in creds[:4]}
    text = log.read_text()
    secrets = [token, *(c.key.hex() for c in creds),
               (data / "devices" / "enrolment.key").read_text()]
    assert not any(s in text for s in secrets)
    assert "authorization" not in text.lower() and "mac=" not in text


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Starlette's test client and httpx
@pytest.mark.filterwarnings("ignore:Using `httpx` with")
def test_unexpected_errors_are_problems(run_dir, tmp_path, monkeypatch):
    from starlette.testclient import TestClient

    from shuffledp.serve.admission import DeviceRegistry
    from shuffledp.serve.common import guard
    from shuffledp.serve.shuffler_service import ShufflerState, make_app

    state = ShufflerState(params(run_dir), tmp_path)
    app = make_app(state, token="t" * 32, registry=DeviceRegistry(tmp_path))

    def boom():
        raise KeyError("the secret is 1234")

    monkeypatch.setattr(state, "status", boom)
    with TestClient(guard(app), raise_server_exceptions=False) as c:
        body = is_problem(c.get(f"/rounds/{state.round}"), 500, "internal_error")
    assert "1234" not in body["detail"]


def test_token_and_keys_are_written_durably(tmp_path, monkeypatch):
    from shuffledp.cli.serve import _token
    from shuffledp.serve.admission import DeviceRegistry

    synced = []
    real_fsync = os.fsync

    def record(fd):
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", record)
    tok = _token(tmp_path, None)
    assert len(tok) >= 16 and synced == [False, True]  # the file, then its directory
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o600
    assert _token(tmp_path, None) == tok  # never replaced
    synced.clear()
    DeviceRegistry(tmp_path)
    assert synced[:2] == [False, True]
    assert [f.name for f in tmp_path.rglob(".*tmp")] == []


def test_a_device_retry_outlasts_a_restart(run_dir, tmp_path):
    d, data = run_dir, tmp_path / "svc"
    enrol(data, 1, out=tmp_path / "creds")
    cred_file = next((tmp_path / "creds").glob("*.credential"))
    proc, url = start_server(data, *shuffler_args(d))
    port = url.rsplit(":", 1)[1]
    stop(proc, signal.SIGKILL)
    dev = subprocess.Popen(
        [sys.executable, "-m", "shuffledp.cli", "upload", "--server", url, "--params",
         str(d / "params.json"), "--input", str(d / "u0.bin"), "--credential", str(cred_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(4.0)  # the service is down for a while
    assert dev.poll() is None
    proc, url = start_server(data, *shuffler_args(d), listen=f"127.0.0.1:{port}")
    try:
        out, err = dev.communicate(timeout=DEADLINE)
        assert dev.returncode == 0, err.decode()
        assert httpx.get(f"{url}/rounds/{params(d).round_id.hex()}").json()["accepted"] == 1
    finally:
        stop(proc)


def test_a_third_party_device_finds_what_it_needs(run_dir, tmp_path):
    from shuffledp.protocol.crypto import encrypted_record_bytes
    from shuffledp.protocol.params import ProtocolParams
    from shuffledp.protocol.wire import HEADER_SIZE

    d, data = run_dir, tmp_path / "svc"
    enrol(data, 1)
    p = params(d)
    proc, url = start_server(data, *shuffler_args(d))
    try:
        cfg = httpx.get(f"{url}/hpke_config").json()
        fetched = ProtocolParams.from_json(httpx.get(f"{url}/rounds/{p.round_id.hex()}/params")
                                           .text)
    finally:
        stop(proc)
    assert fetched.digest == p.digest and cfg["digest"] == p.digest.hex()
    assert cfg["params"] == {"m": p.m, "q": p.q, "r": p.r, "n": p.n, "n_min": p.n_min,
                             "messages_per_user": p.messages_per_user,
                             "share_bytes": p.share_bytes,
                             "record_bytes": encrypted_record_bytes(p),
                             "header_bytes": HEADER_SIZE}
    assert cfg["max_body"] == HEADER_SIZE + p.messages_per_user * encrypted_record_bytes(p)
    assert cfg["upload"]["auth_scheme"] == "Shuffledp-Device" and cfg["config_id"]
