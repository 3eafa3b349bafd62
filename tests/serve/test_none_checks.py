"""Bugs mypy found in the services: a rate limit without a burst, a credential file without a
device id, and a secure-aggregation message arriving before the run's driver started."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Starlette's test client and httpx
@pytest.mark.filterwarnings("ignore:Using `httpx` with")
def test_rate_without_burst_allows_one_seconds_worth():
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from shuffledp.serve.common import guard

    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    wrapped = guard(app, rate=1e-3)  # was TypeError: burst=None compared with 1
    with TestClient(wrapped) as c:
        assert c.get("/").status_code == 200
        r = c.get("/")
    assert r.status_code == 429 and "Retry-After" in r.headers


def test_credential_without_device_names_it():
    from shuffledp.serve.admission import CREDENTIAL_FORMAT, Credential

    text = json.dumps({"format": CREDENTIAL_FORMAT, "key": "00" * 32})
    with pytest.raises(ValueError, match="cred.json: device must be"):
        Credential.from_json(text, "cred.json")


def test_secagg_run_takes_a_leave_before_its_driver_starts(tmp_path):
    from shuffledp.serve.secagg_service import SecAggRun

    run = SecAggRun(3, 4, 2**16, 2, tmp_path, round_timeout=1.0)
    assert run.progress is None
    assert run.leave(0, 1) == (204, None, "left")  # was AttributeError on None.set()
    assert run.receive(0, 0, b"not a message")[0] == 400
