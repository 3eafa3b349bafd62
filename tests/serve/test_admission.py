"""Admission control of the shuffler service: only enrolled devices upload, each takes at
most one place per round, uploads are signed (timestamp window, HPKE config id, body digest)
and rate limited. Regression: anyone could upload, and one client filled a round."""

from __future__ import annotations

import os
import stat
import time

import pytest

from shuffledp.protocol.crypto import (  # noqa: I001
    KEY_ANALYZER_PUBLIC,
    read_key_file,
)

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_helpers import (  # noqa: E402
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

from shuffledp.serve.admission import (  # noqa: E402
    AuthError,
    Credential,
    DeviceRegistry,
    parse_authorization,
    sign_upload,
)
from shuffledp.serve.shuffler_service import hpke_config_id  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_round(tmp_path_factory.mktemp("round"))


@pytest.fixture
def service(run_dir, tmp_path):
    """A running shuffler with 4 enrolled devices: (url, round id, credentials, data dir)."""
    data = tmp_path / "svc"
    creds = enrol(data, 4)
    proc, url = start_server(data, *shuffler_args(run_dir, "--rate-limit", 1000,
                                                   "--rate-burst", 1000))
    try:
        yield url, params(run_dir).round_id, creds, data
    finally:
        stop(proc)


def accepted(url, rnd):
    return httpx.get(f"{url}/rounds/{rnd.hex()}").json()["accepted"]


def test_no_place_without_a_valid_credential(run_dir, service):
    url, rnd, creds, data = service
    batches = [(run_dir / f"u{j}.bin").read_bytes() for j in range(6)]
    # no credential at all: refused before the body is read, with a challenge
    r = signed_put(url, rnd, rid(), batches[0], None)
    is_problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].lower().startswith("shuffledp-device")
    # a Sybil with made-up identities: 19 valid batches (copies of real ones are replays; these
    # are distinct encodings) under fresh ids and forged keys -> none accepted
    for j in range(19):
        fake = Credential(f"sybil-{j}", os.urandom(32))
        is_problem(signed_put(url, rnd, rid(), batches[j % 6], fake), 401, "unauthorized")
    # an enrolled id with a wrong key; the operator's bearer token is no device credential
    is_problem(signed_put(url, rnd, rid(), batches[0], Credential(creds[0].device_id,
                                                                 os.urandom(32))),
               401, "unauthorized")
    token = (data / "token").read_text().strip()
    is_problem(signed_put(url, rnd, rid(), batches[0], None,
                          headers={"authorization": f"Bearer {token}"}), 401, "unauthorized")
    # a signature over another report id (a captured header reused) does not verify
    other = sign_upload(creds[0], rnd, rid(), batches[0])
    is_problem(signed_put(url, rnd, rid(), batches[0], None, headers=other), 401,
               "unauthorized")
    assert accepted(url, rnd) == 0
    # the enrolled devices still get their places
    for j in range(4):
        assert signed_put(url, rnd, rid(), batches[j], creds[j]).status_code == 201
    assert accepted(url, rnd) == 4


def test_one_place_per_device_and_round(run_dir, service):
    url, rnd, creds, _ = service
    b = [(run_dir / f"u{j}.bin").read_bytes() for j in range(6)]
    first = rid()
    assert signed_put(url, rnd, first, b[0], creds[0]).status_code == 201
    # the same device again under other ids, with other valid batches: refused
    for j in (1, 2, 3):
        body = is_problem(signed_put(url, rnd, rid(), b[j], creds[0]), 409,
                          "device_already_uploaded")
        assert creds[0].device_id in body["detail"]
    # its own retry is idempotent
    assert signed_put(url, rnd, first, b[0], creds[0]).status_code == 201
    # another device cannot take over that report id
    is_problem(signed_put(url, rnd, first, b[1], creds[1]), 409, "report_id_conflict")
    assert signed_put(url, rnd, rid(), b[1], creds[1]).status_code == 201
    assert accepted(url, rnd) == 2


def test_signed_time_config_id_and_digest(run_dir, service):
    url, rnd, creds, _ = service
    b = (run_dir / "u0.bin").read_bytes()
    now = int(time.time())
    is_problem(signed_put(url, rnd, rid(), b, creds[0], timestamp=now - 3600), 400,
               "report_too_old")
    is_problem(signed_put(url, rnd, rid(), b, creds[0], timestamp=now + 3600), 400,
               "report_too_early")
    body = is_problem(signed_put(url, rnd, rid(), b, creds[0], config_id="0" * 16), 400,
                      "outdated_config")
    cfg = httpx.get(f"{url}/hpke_config").json()
    assert cfg["config_id"] in body["detail"]
    pub = read_key_file(run_dir / "analyzer.pub", KEY_ANALYZER_PUBLIC)
    assert cfg["config_id"] == hpke_config_id(pub)
    # the body must be the one signed
    r1 = rid()
    headers = {**OCTET, **sign_upload(creds[0], rnd, r1, b)}
    tampered = bytearray(b)
    tampered[-1] ^= 1
    is_problem(httpx.put(f"{url}/rounds/{rnd.hex()}/batches/{r1}", content=bytes(tampered),
                         headers=headers), 400, "digest_mismatch")
    # none of these refusals took the device's place
    assert signed_put(url, rnd, r1, b, creds[0], config_id=cfg["config_id"]).status_code == 201


def test_rate_limits(run_dir, tmp_path):
    data = tmp_path / "svc"
    (cred,) = enrol(data, 1)
    rnd = params(run_dir).round_id
    proc, url = start_server(data, *shuffler_args(run_dir, "--rate-limit", 0.5,
                                                   "--rate-burst", 4))
    try:
        with httpx.Client() as c:
            codes = [c.get(f"{url}/rounds/{rnd.hex()}").status_code for _ in range(6)]
            assert codes.count(429) >= 1, codes
            r = c.get(f"{url}/rounds/{rnd.hex()}")
            is_problem(r, 429, "rate_limited")
            assert int(r.headers["retry-after"]) >= 1
    finally:
        stop(proc)
    # per device: repeated bad uploads of one device are slowed down too
    proc, url = start_server(data, *shuffler_args(run_dir, "--rate-limit", 1000,
                                                   "--rate-burst", 1000))
    try:
        codes = [signed_put(url, rnd, rid(), b"SDPW" + b"\0" * 100, cred).status_code
                 for _ in range(14)]
        assert codes[0] == 400 and 429 in codes, codes
    finally:
        stop(proc)


def test_enrol_and_revoke_on_a_running_service(run_dir, service, tmp_path):
    url, rnd, creds, data = service
    b = [(run_dir / f"u{j}.bin").read_bytes() for j in range(6)]
    (late,) = enrol(data, 1, out=tmp_path / "late")
    run_cli("serve", "revoke", "--data", data, "--device", creds[0].device_id)
    time.sleep(1.2)  # the registry is reread at most once a second
    assert signed_put(url, rnd, rid(), b[4], late).status_code == 201
    is_problem(signed_put(url, rnd, rid(), b[0], creds[0]), 401, "unauthorized")
    # credential files: typed, 0600; the enrolment key never leaves DATA
    f = next((tmp_path / "late").glob("*.credential"))
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE((data / "devices" / "enrolment.key").stat().st_mode) == 0o600
    assert "key" not in (data / "devices" / "registry.jsonl").read_text()


def test_credential_files_are_typed(run_dir, tmp_path):
    from click.testing import CliRunner

    from shuffledp.cli import main

    res = CliRunner().invoke(main, ["upload", "--server", "http://127.0.0.1:9", "--params",
                                    str(run_dir / "params.json"), "--input",
                                    str(run_dir / "u0.bin"), "--credential",
                                    str(run_dir / "mac.key")])
    assert res.exit_code == 2 and "--credential" in res.output
    assert "not a device credential" in res.output
    with pytest.raises(ValueError, match="device_id"):
        Credential("bad id", os.urandom(32))
    assert "key" not in repr(Credential("ok", os.urandom(32))).replace("key=", "")


@pytest.mark.parametrize("value", [
    'Shuffledp-Device id="a", ts="1", mac="' + "00" * 32 + '"',
    'shuffledp-device id="a", ts="1", mac="' + "00" * 32 + '"',
    'SHUFFLEDP-DEVICE   id="a" , ts="1",mac="' + "00" * 32 + '"',
])
def test_the_scheme_name_is_case_insensitive(value):
    assert parse_authorization(value) == ("a", 1, bytes(32))


@pytest.mark.parametrize("value", [None, "", "Bearer x", 'Shuffledp-Device id="a b", ts="1"',
                                   'Shuffledp-Device id="a", ts="x", mac="00"'])
def test_malformed_authorization_is_401(value):
    with pytest.raises(AuthError) as e:
        parse_authorization(value)
    assert e.value.status == 401


def test_registry_survives_a_torn_line(tmp_path):
    reg = DeviceRegistry(tmp_path)
    (cred,) = reg.enrol(["a"])
    with open(reg.path, "a") as fh:
        fh.write('{"device": "b", "ev')  # a crash in the middle of an append
    again = DeviceRegistry(tmp_path)
    assert again.enrolled() == {"a"}
    assert again.enrol(["a"])[0].key == cred.key  # derived: the same key
