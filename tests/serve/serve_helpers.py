"""Shared by the service tests: start a real server process on loopback, enrol devices,
sign uploads, check problem details."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from click.testing import CliRunner

from shuffledp.cli import main

DEADLINE = 60.0  # hang guard only; nothing depends on speed
OCTET = {"content-type": "application/octet-stream"}


def run_cli(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res


def make_round(d: Path, n: int = 6, dropout: float = 0.5, batches: int = 6) -> Path:
    """setup (params, keys) and ``batches`` encrypted user batches u0.bin ... in ``d``."""
    run_cli("setup", "--grid", "4x4", "--n", n, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
            "--dropout", dropout, "--out", d)
    rng = np.random.default_rng(0)
    for j in range(batches):
        pts = d / f"u{j}.csv"
        pts.write_text("x,y\n" + "\n".join(f"{a},{b}" for a, b in rng.random((3, 2))))
        run_cli("encode", "--params", d / "params.json", "--input", pts, "--analyzer-pub",
                d / "analyzer.pub", "--out", d / f"u{j}.bin")
    return d


def params(d: Path):
    from shuffledp.protocol.params import ProtocolParams

    return ProtocolParams.from_json((d / "params.json").read_text())


def enrol(data: Path, k: int, out: Path | None = None) -> list:
    """Enrol ``k`` devices with the service of ``data``; their credentials (file order)."""
    from shuffledp.serve.admission import Credential

    out = out or data.parent / f"creds-{data.name}"
    res = run_cli("serve", "enrol", "--data", data, "--count", k, "--out", out)
    paths = [line.split("\t")[1] for line in res.output.strip().splitlines()]
    return [Credential.load(p) for p in paths]


def shuffler_args(d: Path, *extra) -> list:
    return ["shuffler", "--params", d / "params.json", "--mac-key", d / "mac.key",
            "--analyzer-pub", d / "analyzer.pub", *extra]


def start_server(data: Path, *args, prefix: tuple = (), listen_json: Path | None = None,
                 verify=True, listen: str = "127.0.0.1:0"):
    """Start ``shuffledp serve ARGS --data DATA`` on a free loopback port: (process, url)."""
    listen_json = listen_json or data / "listen.json"
    listen_json.unlink(missing_ok=True)
    # stderr to a file: a pipe nobody reads would block the server once it is full
    log = open(data.parent / f"{data.name}.stderr", "ab")
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", "shuffledp.cli", "serve", *map(str, args), "--data",
         str(data), "--listen", listen], stdout=subprocess.PIPE, stderr=log)
    log.close()
    proc.log_path = data.parent / f"{data.name}.stderr"
    t0 = time.monotonic()
    while not listen_json.exists():
        if proc.poll() is not None:
            raise AssertionError(proc.log_path.read_text())
        assert time.monotonic() - t0 < DEADLINE, "server did not start"
        time.sleep(0.05)
    url = json.loads(listen_json.read_text())["url"]
    while True:  # the file is written before uvicorn accepts: wait for the first answer
        try:
            httpx.get(url + "/hpke_config", timeout=5, verify=verify)
            return proc, url
        except httpx.TransportError:
            if proc.poll() is not None:
                raise AssertionError(proc.log_path.read_text()) from None
            assert time.monotonic() - t0 < DEADLINE, "server does not answer"
            time.sleep(0.05)
        except httpx.HTTPStatusError:
            return proc, url


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def signed_put(url: str, rnd: bytes, rid: str, batch: bytes, cred, *,
               client=None, config_id: str = "", timestamp: int | None = None, **kw):
    """One PUT of ``batch`` under report id ``rid``, signed with ``cred`` (a Credential;
    None: unsigned)."""
    headers = dict(OCTET)
    if cred is not None:
        from shuffledp.serve.admission import sign_upload

        headers.update(sign_upload(cred, rnd, rid, batch, config_id=config_id,
                                   timestamp=timestamp))
    headers.update(kw.pop("headers", {}))
    if client is None:
        kw.setdefault("timeout", 30)
    c = client or httpx
    return c.put(f"{url}/rounds/{rnd.hex()}/batches/{rid}", content=batch, headers=headers,
                 **kw)


def is_problem(r, status: int, reason: str) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    body = r.json()
    assert body["type"] == f"urn:shuffledp:problem:{reason}", body
    assert body["status"] == status and body["title"] and body["detail"]
    return body


def rid() -> str:
    return os.urandom(16).hex()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")
