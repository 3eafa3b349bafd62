"""The shuffler service over real loopback HTTP: device processes upload, the server is
killed mid-round and restarted (nothing acknowledged is lost), resubmission is idempotent,
and every refusal is an RFC 9457 problem (oversize, wrong round, malformed, slow client)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

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
    run_cli,
    shuffler_args,
    signed_put,
    start_server,
    stop,
)

from shuffledp.serve.shuffler_service import ShufflerState  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_round(tmp_path_factory.mktemp("round"))


def _device(url, d, j, cred_path, report_id, *extra):
    """A device as its own process: `shuffledp upload`."""
    return subprocess.Popen(
        [sys.executable, "-m", "shuffledp.cli", "upload", "--server", url, "--params",
         str(d / "params.json"), "--input", str(d / f"u{j}.bin"), "--credential", str(cred_path),
         "--report-id", report_id, *map(str, extra)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)


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
    p = params(d)
    rnd = p.round_id
    creds = enrol(data, 6)
    cred_files = sorted((tmp_path / "creds-svc").glob("*.credential"))
    by_id = {c.device_id: c for c in creds}
    creds = [by_id[f.stem] for f in cred_files]
    rids = [rid() for _ in range(6)]
    proc, url = start_server(data, *shuffler_args(d, "--body-timeout", 1.5))
    try:
        cfg = httpx.get(url + "/hpke_config").json()
        pub = read_key_file(d / "analyzer.pub", KEY_ANALYZER_PUBLIC)
        assert cfg["round"] == rnd.hex() and cfg["public_key"] == pub.hex()
        assert cfg["suite"] == {"kem_id": 0x20, "kdf_id": 1, "aead_id": 3}
        assert cfg["params"]["m"] == p.m and cfg["params"]["q"] == p.q
        devices = [_device(url, d, j, cred_files[j], rids[j], "--analyzer-pub",
                           d / "analyzer.pub") for j in range(2)]
        for j, dev in enumerate(devices):
            out, err = dev.communicate(timeout=DEADLINE)
            assert dev.returncode == 0, err.decode()
            assert out.decode().strip() == rids[j]  # the device prints its report id
        r = signed_put(url, rnd, rids[2], (d / "u2.bin").read_bytes(), creds[2])
        assert r.status_code == 201 and r.content == b""
        assert httpx.get(f"{url}/rounds/{rnd.hex()}").json()["accepted"] == 3
    finally:
        stop(proc, signal.SIGKILL)  # crash: no shutdown handler runs
    proc, url = start_server(data, *shuffler_args(d))
    try:
        st = httpx.get(f"{url}/rounds/{rnd.hex()}").json()
        assert st["accepted"] == 3 and st["recovered"] == 3  # nothing acknowledged was lost
        batch0 = (d / "u0.bin").read_bytes()
        # idempotent: the same bytes under the same id again -> the same 201, counted once
        assert signed_put(url, rnd, rids[0], batch0, creds[0]).status_code == 201
        # another batch under an accepted id -> 409
        is_problem(signed_put(url, rnd, rids[0], (d / "u3.bin").read_bytes(), creds[0]),
                   409, "report_id_conflict")
        # the same batch under another id, by another device, is a replay
        is_problem(signed_put(url, rnd, rids[4], batch0, creds[4]), 409, "replayed_batch")
        from shuffledp.serve.client import upload_batch

        assert upload_batch(url, rnd, (d / "u3.bin").read_bytes(), credential=creds[3],
                            report_id=rids[3]) == rids[3]
        assert httpx.get(f"{url}/rounds/{rnd.hex()}").json()["accepted"] == 4
        # close needs the operator's token
        is_problem(httpx.post(f"{url}/rounds/{rnd.hex()}/close"), 401, "unauthorized")
        out = tmp_path / "mixed.bin"
        res = run_cli("serve", "close", "--server", url, "--params", d / "params.json",
                      "--token-file", data / "token", "--out", out)
        report = json.loads(res.output)
        assert report["n_forwarded"] == 4 and report["authenticated"]
        assert report["n_dropped"] == 1  # creds[4]: refused (replay), never accepted
        assert not list((data / f"round-{rnd.hex()}" / "batches").iterdir())  # forgotten
        is_problem(signed_put(url, rnd, rids[5], (d / "u5.bin").read_bytes(), creds[5]),
                   409, "round_closed")
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
    p = params(d)
    rnd = p.round_id
    data = tmp_path / "svc"
    (cred,) = enrol(data, 1)
    proc, url = start_server(data, *shuffler_args(d, "--body-timeout", 1.5))
    try:
        batch = (d / "u1.bin").read_bytes()
        r1 = rid()
        is_problem(httpx.put(f"{url}/rounds/{'00' * 16}/batches/{r1}", content=batch,
                             headers=OCTET), 404, "unknown_round")
        is_problem(signed_put(url, rnd, r1, batch + b"\0" * 4096, cred), 413, "body_too_large")
        is_problem(signed_put(url, rnd, r1, b"SDPW" + b"\0" * 200, cred), 400, "malformed")
        is_problem(signed_put(url, rnd, r1, batch[:-10], cred), 400, "truncated")
        is_problem(signed_put(url, rnd, "short", batch, cred), 400, "bad_report_id")
        is_problem(signed_put(url, rnd, r1, batch, cred, headers={"content-type": "text/plain"}),
                   415, "unsupported_media_type")
        is_problem(httpx.get(f"{url}/nowhere"), 404, "not_found")
        is_problem(httpx.delete(f"{url}/hpke_config"), 405, "method_not_allowed")
        # a batch of another round (fresh setup, other round id) -> wrong_digest
        other = tmp_path / "other"
        run_cli("setup", "--grid", "4x4", "--n", 5, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
                "--dropout", 0.4, "--out", other)
        (other / "p.csv").write_text("x,y\n0.5,0.5\n")
        run_cli("encode", "--params", other / "params.json", "--input", other / "p.csv",
                "--analyzer-pub", other / "analyzer.pub", "--out", other / "b.bin")
        is_problem(signed_put(url, rnd, r1, (other / "b.bin").read_bytes(), cred), 400,
                   "wrong_digest")
        # this round's parameters, sealed to another analyzer key -> wrong_key, not stored
        import numpy as np

        from shuffledp.encoders.encoder import user_batch
        from shuffledp.protocol.crypto import generate_analyzer_key, public_bytes

        stray = user_batch(p, np.array([0]), np.array([1.0]),
                           analyzer_public=public_bytes(generate_analyzer_key()))
        is_problem(signed_put(url, rnd, r1, stray, cred), 400, "wrong_key")
        st = httpx.get(f"{url}/rounds/{rnd.hex()}").json()
        assert st["accepted"] == 0 and st["rejected"].get("wrong_key") == 1
        # a slow client: headers and half the body, then silence -> 408 after --body-timeout
        from shuffledp.serve.admission import sign_upload

        hdrs = "".join(f"{k}: {v}\r\n" for k, v in sign_upload(cred, rnd, r1, batch).items())
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])),
                                      timeout=DEADLINE) as s:
            s.sendall(f"PUT /rounds/{rnd.hex()}/batches/{r1} HTTP/1.1\r\nHost: x\r\n{hdrs}"
                      f"Content-Type: application/octet-stream\r\n"
                      f"Content-Length: {len(batch)}\r\n\r\n".encode() + batch[:100])
            reply = b""
            while b"\r\n\r\n" not in reply:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert b"application/problem+json" in reply
        # after all these refusals the id and the device's place are still free
        assert signed_put(url, rnd, r1, batch, cred).status_code == 201
        st = httpx.get(f"{url}/rounds/{rnd.hex()}").json()
        assert st["accepted"] == 1 and st["rejected"]["malformed"] == 1
    finally:
        stop(proc)


def test_state_and_app_agree_on_the_analyzer_key(run_dir, tmp_path):
    from shuffledp.protocol.crypto import generate_analyzer_key, public_bytes
    from shuffledp.serve.admission import DeviceRegistry
    from shuffledp.serve.shuffler_service import make_app

    p = params(run_dir)
    mine, other = (public_bytes(generate_analyzer_key()) for _ in range(2))
    state = ShufflerState(p, tmp_path / "svc", analyzer_pub=mine)
    registry = DeviceRegistry(tmp_path / "svc")
    make_app(state, token="t" * 32, registry=registry)  # the state's key by default
    make_app(state, token="t" * 32, registry=registry, analyzer_pub=mine)
    with pytest.raises(ValueError, match="analyzer_pub differs"):
        make_app(state, token="t" * 32, registry=registry, analyzer_pub=other)
    with pytest.raises(ValueError, match="32"):
        ShufflerState(p, tmp_path / "svc2", analyzer_pub=mine[:31])
