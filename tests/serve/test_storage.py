"""A full disk: an upload that cannot be stored gets a 507 problem, is not marked seen, and
its retry succeeds once space returns; close on a full disk fails cleanly (507, no spill
folder or partial output left) and can be retried; a crash in close leaves nothing behind.
Regression: a plain-text 500 during the spill, then 409 replayed_batch for the retry of a
batch never stored (every device gave up), close failing with "cannot reshape array",
orphaned spill folders and a wedged service.

Two ways to fill the disk: ENOSPC injected in-process (always runs), and a real 2 MiB tmpfs
mounted in a user namespace around a real service process (skipped where unshare is not
allowed)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shuffledp.protocol.crypto import (  # noqa: I001
    KEY_ANALYZER_PRIVATE,
    KEY_ANALYZER_PUBLIC,
    KEY_MAC,
    read_key_file,
)

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_helpers import (  # noqa: E402
    DEADLINE,
    is_problem,
    make_round,
    params,
    rid,
    signed_put,
    stop,
)

from shuffledp.serve.admission import DeviceRegistry  # noqa: E402

# Starlette's test client warns that it wants another httpx; the in-process tests use it as is
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:Using `httpx` with")]
from shuffledp.serve.shuffler_service import (  # noqa: E402
    MIXED_FILE,
    ShufflerState,
    make_app,
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_round(tmp_path_factory.mktemp("round"))


def enospc():
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def app_client(run_dir, tmp_path):
    """The service in-process (Starlette's test client): (client, state, credentials)."""
    from starlette.testclient import TestClient

    p = params(run_dir)
    data = tmp_path / "svc"
    data.mkdir()
    registry = DeviceRegistry(data)
    creds = registry.enrol([f"dev-{j}" for j in range(6)])
    mac = read_key_file(run_dir / "mac.key", KEY_MAC)
    state = ShufflerState(p, data, mac_key=mac, min_batches=3)
    app = make_app(state, token="t" * 32, registry=registry,
                   analyzer_pub=read_key_file(run_dir / "analyzer.pub", KEY_ANALYZER_PUBLIC))
    with TestClient(app, base_url="http://shuffler") as c:
        yield c, state, creds


def leftovers(state) -> list[str]:
    names = [f.name for f in state.dir.iterdir() if f.name.startswith((".", "shuffledp-"))]
    names += [f.name for f in state.batch_dir.iterdir() if f.name.startswith(".")]
    return names


@pytest.mark.parametrize("where", ["body", "fsync", "rename"])
def test_an_upload_on_a_full_disk_is_507_and_its_retry_succeeds(run_dir, app_client,
                                                                 monkeypatch, where):
    c, state, creds = app_client
    rnd = state.params.round_id
    batch = (run_dir / "u0.bin").read_bytes()
    full = {"on": True}
    real = {"body": os.write, "fsync": os.fsync, "rename": os.rename}[where]

    def failing(*args):
        if full["on"]:
            raise enospc()
        return real(*args)

    monkeypatch.setattr(os, {"body": "write", "fsync": "fsync", "rename": "rename"}[where],
                        failing)
    r1 = rid()
    r = signed_put("http://shuffler", rnd, r1, batch, creds[0], client=c)
    body = is_problem(r, 507, "insufficient_storage")
    assert int(r.headers["retry-after"]) >= 1 and "retry" in body["detail"]
    assert state.status()["accepted"] == 0 and not leftovers(state)
    assert not list(state.batch_dir.iterdir())
    full["on"] = False  # space returns
    assert signed_put("http://shuffler", rnd, r1, batch, creds[0], client=c).status_code == 201
    assert state.status()["accepted"] == 1
    # the same batch under another id is still a replay (it *is* stored now)
    is_problem(signed_put("http://shuffler", rnd, rid(), batch, creds[1], client=c), 409,
               "replayed_batch")


def test_close_on_a_full_disk_fails_cleanly_and_can_be_retried(run_dir, app_client,
                                                              monkeypatch):
    from shuffledp.protocol.shuffler import Shuffler

    c, state, creds = app_client
    rnd = state.params.round_id
    for j in range(4):
        r = signed_put("http://shuffler", rnd, rid(), (run_dir / f"u{j}.bin").read_bytes(),
                       creds[j], client=c)
        assert r.status_code == 201
    auth = {"authorization": "Bearer " + "t" * 32}
    real_mix = Shuffler.mix_to

    def mix_then_full(self, fh):  # half the mixed batch written, then the disk is full
        fh.write(b"\0" * 1000)
        raise enospc()

    monkeypatch.setattr(Shuffler, "mix_to", mix_then_full)
    is_problem(c.post(f"/rounds/{rnd.hex()}/close", headers=auth), 507, "insufficient_storage")
    assert not (state.dir / MIXED_FILE).exists() and not leftovers(state)
    assert not state.closed and state.status()["accepted"] == 4
    # uploads go on while the round stays open
    assert signed_put("http://shuffler", rnd, rid(), (run_dir / "u4.bin").read_bytes(),
                      creds[4], client=c).status_code == 201
    # the report (the commit point) cannot be written: the mixed batch is removed again
    monkeypatch.setattr(Shuffler, "mix_to", real_mix)
    import shuffledp.serve.shuffler_service as svc

    real_write = svc.durable_write

    def report_fails(path, data, **kw):
        if Path(path).name.endswith(".report.json"):
            raise enospc()
        return real_write(path, data, **kw)

    monkeypatch.setattr(svc, "durable_write", report_fails)
    is_problem(c.post(f"/rounds/{rnd.hex()}/close", headers=auth), 507, "insufficient_storage")
    assert not (state.dir / MIXED_FILE).exists() and not leftovers(state) and not state.closed
    monkeypatch.setattr(svc, "durable_write", real_write)
    r = c.post(f"/rounds/{rnd.hex()}/close", headers=auth)
    assert r.status_code == 200 and r.json()["n_forwarded"] == 5
    assert c.post(f"/rounds/{rnd.hex()}/close", headers=auth).json() == r.json()  # idempotent


def test_a_crash_in_close_leaves_no_temporary_files(run_dir, app_client):
    c, state, creds = app_client
    rnd = state.params.round_id
    for j in range(3):
        assert signed_put("http://shuffler", rnd, rid(), (run_dir / f"u{j}.bin").read_bytes(),
                          creds[j], client=c).status_code == 201
    # what a kill -9 during close (or during an upload, or in an older version) leaves
    (state.dir / ".close-abc").mkdir()
    (state.dir / ".close-abc" / "bucket00000").write_bytes(b"x" * 100)
    (state.dir / "shuffledp-old").mkdir()
    (state.dir / f".{MIXED_FILE}.0123.tmp").write_bytes(b"partial")
    (state.batch_dir / ".incoming-0123.tmp").write_bytes(b"partial")
    # a batch acknowledged by a version without device ids is kept, not silently dropped
    (state.batch_dir / f"{99:010d}-{rid()}.bin").write_bytes((run_dir / "u3.bin").read_bytes())
    again = ShufflerState(state.params, state.dir.parent, mac_key=state.mac_key)
    assert not leftovers(again) and again.status()["accepted"] == 4


# --------------------------------------------------------------------- a real full disk
def _unshare_works() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare -rm and tmpfs in a user "
                                                 "namespace")
def test_a_real_full_disk(run_dir, tmp_path):
    """A 2 MiB tmpfs as the service's data directory, filled and freed from outside."""
    from shuffledp.analyzers.heatmap.modular import release_mixed
    from shuffledp.protocol.crypto import as_private_key
    from shuffledp.serve.admission import Credential

    d = run_dir
    p = params(d)
    rnd = p.round_id
    data, creds_dir = tmp_path / "svc", tmp_path / "creds"
    data.mkdir()
    py = sys.executable
    script = (f"mount -t tmpfs -o size=2m tmpfs {data} && "
              f"{py} -m shuffledp.cli serve enrol --data {data} --count 6 --out {creds_dir} "
              f">/dev/null && exec {py} -m shuffledp.cli serve shuffler --params "
              f"{d / 'params.json'} --mac-key {d / 'mac.key'} --analyzer-pub "
              f"{d / 'analyzer.pub'} --data {data} --listen 127.0.0.1:0")
    log = open(tmp_path / "server.stderr", "wb")
    proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", script], stderr=log,
                            stdout=subprocess.DEVNULL)
    log.close()
    inside = Path(f"/proc/{proc.pid}/root") / str(data).lstrip("/")
    try:
        t0 = time.monotonic()
        while True:
            assert proc.poll() is None, (tmp_path / "server.stderr").read_text()
            assert time.monotonic() - t0 < DEADLINE
            try:
                url = json.loads((inside / "listen.json").read_text())["url"]
                httpx.get(url + "/hpke_config", timeout=5)
                break
            except (OSError, ValueError, httpx.TransportError):
                time.sleep(0.1)
        creds = sorted((Credential.load(f) for f in creds_dir.glob("*.credential")),
                       key=lambda c: c.device_id)
        batches = [(d / f"u{j}.bin").read_bytes() for j in range(6)]
        acked = []
        for j in range(3):
            assert signed_put(url, rnd, r := rid(), batches[j], creds[j]).status_code == 201
            acked.append(r)

        filler = inside / "filler"

        def fill():
            with open(filler, "wb") as fh:
                try:
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
                except OSError as e:
                    assert e.errno == errno.ENOSPC

        fill()
        r3 = rid()
        r = signed_put(url, rnd, r3, batches[3], creds[3])
        is_problem(r, 507, "insufficient_storage")
        # a device process started now keeps retrying, and succeeds once space returns
        dev = subprocess.Popen(
            [py, "-m", "shuffledp.cli", "upload", "--server", url, "--params",
             str(d / "params.json"), "--input", str(d / "u4.bin"), "--credential",
             str(creds_dir / f"{creds[4].device_id}.credential"), "--retry-for", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(2.0)
        assert dev.poll() is None  # still retrying
        # close on the full disk: refused cleanly, nothing left behind, the round still open
        token = (inside / "token").read_text().strip()
        auth = {"authorization": f"bearer {token}"}  # lower-case scheme accepted
        is_problem(httpx.post(f"{url}/rounds/{rnd.hex()}/close", headers=auth, timeout=60),
                   507, "insufficient_storage")
        rdir = inside / f"round-{rnd.hex()}"
        assert not [f for f in rdir.iterdir() if f.name.startswith((".", "shuffledp-"))]
        assert not (rdir / MIXED_FILE).exists()
        filler.unlink()  # space returns
        out, err = dev.communicate(timeout=DEADLINE)
        assert dev.returncode == 0, err.decode()
        acked.append(out.decode().strip())
        assert signed_put(url, rnd, r3, batches[3], creds[3]).status_code == 201  # the retry
        acked.append(r3)
        r = httpx.post(f"{url}/rounds/{rnd.hex()}/close", headers=auth, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["n_forwarded"] == len(acked) == 5  # no acknowledged batch lost
        mixed = httpx.get(f"{url}/rounds/{rnd.hex()}/mixed", headers=auth).content
    finally:
        stop(proc)
    key = as_private_key(read_key_file(d / "analyzer.key", KEY_ANALYZER_PRIVATE))
    release = release_mixed(p, mixed, key=key,
                            mac_key=read_key_file(d / "mac.key", KEY_MAC),
                            ledger=tmp_path / "releases.jsonl")
    from shuffledp.protocol.wire import Header

    assert Header.unpack(mixed[:64]).n_users == 5 and release.guarantee.epsilon > 0
