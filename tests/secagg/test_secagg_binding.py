"""Every parameter a sum depends on is bound into the protocol: a client whose modulus,
vector length or threshold differs from the server's is refused before its input is used,
and the refusal names the party and the parameter.

Regression: a client started with --modulus 4294967295 against a server of 4294967296 got
"done" and the server "released", with 0 of 1,000 coordinates right (mailbox and HTTP).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from shuffledp.secagg import SecAggClient, SecAggRefused, SecAggServer
from shuffledp.secagg import messages as msg

M = 1 << 32
CLI = [sys.executable, "-c", "from shuffledp.cli import main; main()"]
GUARD = 120  # seconds: a hang guard only


@pytest.mark.parametrize("field,client_args,named", [
    ("modulus", dict(modulus=M - 1), "modulus 4294967295"),
    ("threshold", dict(threshold=3), "threshold 3"),
    ("vector length", dict(length=7), "vector length 7"),
])
def test_the_server_refuses_a_client_of_other_parameters_and_names_it(field, client_args,
                                                                       named):
    sess = os.urandom(16)
    server = SecAggServer(4, 6, M, 2, sess)
    args = dict(modulus=M, threshold=2, length=6) | client_args
    x = np.zeros(args["length"], dtype=np.int64)
    bad = SecAggClient(3, x, args["modulus"], args["threshold"], sess)
    assert not server.receive(bad.advertise(), channel=3)
    assert list(server.mismatched) == [3] and named in server.mismatched[3]
    assert f"client 3 runs {named}" in next(iter(server.rejected))
    assert server.summary()["mismatched"]["3"] == server.mismatched[3]


def test_a_client_refuses_a_server_of_other_parameters_before_using_its_input():
    sess = os.urandom(16)
    server = SecAggServer(3, 4, M, 2, sess)
    x = np.arange(4)
    client = SecAggClient(0, x, M - 1, 2, sess)
    with pytest.raises(SecAggRefused, match=r"client 0: the server runs modulus 4294967296, "
                                            r"this client modulus 4294967295 \(--modulus\)"):
        client.check_hello(server.hello())
    honest = [SecAggClient(i, x, M, 2, sess) for i in (1, 2)]
    for c in honest:
        assert server.receive(c.advertise())
    with pytest.raises(SecAggRefused, match="refusing before its input is used"):
        client.share_keys(server.close_round())  # its round-0 reply names the server's m


def test_the_context_enters_the_keys():
    """Two parameter sets of one session derive different keys: the header check is not the
    only guard (a forged header would still leave shares that do not authenticate)."""
    sess = os.urandom(16)
    a, b = msg.Context(sess, M, 6, 2), msg.Context(sess, M - 1, 6, 2)
    from shuffledp.secagg.client import commit_b, derive

    assert derive(b"k" * 32, b"share", a.pack(), 0, 1) != derive(b"k" * 32, b"share",
                                                                 b.pack(), 0, 1)
    assert commit_b(5, a.pack(), 0) != commit_b(5, b.pack(), 0)


def test_a_version_1_message_is_refused():
    sess = os.urandom(16)
    old = b"SAGG" + bytes([1, 0, 0, 0]) + (0).to_bytes(4, "little") + (0).to_bytes(4, "little")
    server = SecAggServer(3, 4, M, 2, sess)
    assert not server.receive(old + sess)
    assert server.rejected == {"round 0: MessageError": 1}


def _box_server(box, n, L, m, t):
    return subprocess.Popen(CLI + ["secagg", "server", "--dir", str(box), "--clients", str(n),
                                   "--length", str(L), "--modulus", str(m), "--threshold",
                                   str(t), "--round-timeout", str(GUARD)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _box_client(tmp_path, box, i, x, m, t):
    np.save(tmp_path / f"x{i}.npy", x)
    return subprocess.Popen(
        CLI + ["secagg", "client", "--dir", str(box), "--id", str(i), "--input",
               str(tmp_path / f"x{i}.npy"), "--modulus", str(m), "--threshold", str(t),
               "--timeout", str(GUARD)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_mailbox_client_with_a_one_digit_modulus_typo_is_refused_and_the_rest_is_right(
        tmp_path):
    """4 clients, threshold 3; client 3 types --modulus 4294967295: it refuses at the
    server's hello (exit 1, one line naming itself, the parameter and both values), leaves
    at once, and the server releases the right sum of the other three without waiting."""
    n, L, t = 4, 50, 3
    g = np.random.default_rng(3)
    xs = [g.integers(0, M - 1, L) for _ in range(n)]
    box = tmp_path / "box"
    server = _box_server(box, n, L, M, t)
    clients = [_box_client(tmp_path, box, i, xs[i], M if i < 3 else M - 1, t)
               for i in range(n)]
    outs = [c.communicate(timeout=GUARD)[0] for c in clients]
    out = server.communicate(timeout=GUARD)[0]
    assert [c.returncode for c in clients] == [0, 0, 0, 1], outs
    assert outs[3].strip().splitlines() == [
        "Error: client 3: the server runs modulus 4294967296, this client modulus 4294967295 "
        "(--modulus); refusing before its input is used"]
    assert server.returncode == 0, out
    report = json.loads((box / "report.json").read_text())
    assert report["status"] == "released" and report["survivors"] == [0, 1, 2]
    assert report["left_per_round"]["0"] == [3] and report["modulus"] == M
    assert np.load(box / "result.npy").tolist() == (sum(xs[:3]) % M).tolist()
    assert report["seconds"] < GUARD / 2  # the leave marker closed round 0


@pytest.mark.slow
def test_http_client_with_a_one_digit_modulus_typo_is_refused_by_the_server(tmp_path):
    """Over HTTP the server rejects the client's round-0 message (400, naming the client,
    the parameter and both values) and lists it in the report's ``mismatched``."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    pytest.importorskip("httpx")
    n, L, t = 3, 20, 2
    g = np.random.default_rng(4)
    xs = [g.integers(0, M - 1, L) for _ in range(n)]
    data = tmp_path / "svc"
    server = subprocess.Popen(
        [sys.executable, "-m", "shuffledp.cli", "serve", "secagg", "--clients", str(n),
         "--threshold", str(t), "--length", str(L), "--modulus", str(M), "--data", str(data),
         "--listen", "127.0.0.1:0", "--join-timeout", "8", "--round-timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not (data / "listen.json").exists():
        assert server.poll() is None, server.stderr.read()
        assert time.monotonic() - t0 < GUARD
        time.sleep(0.05)
    url = json.loads((data / "listen.json").read_text())["url"]
    procs = []
    for i in range(n):
        np.save(tmp_path / f"x{i}.npy", xs[i])
        procs.append(subprocess.Popen(
            CLI + ["secagg", "client", "--server", url, "--id", str(i), "--input",
                   str(tmp_path / f"x{i}.npy"), "--modulus", str(M if i else M - 1),
                   "--threshold", str(t), "--timeout", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=GUARD)[0] for p in procs]
    server.communicate(timeout=GUARD)
    assert [p.returncode for p in procs] == [1, 0, 0], outs
    assert "client 0" in outs[0] and "rejected_message" in outs[0]
    assert "client 0 runs modulus 4294967295, the server's modulus is 4294967296" in outs[0]
    report = json.loads((data / "report.json").read_text())
    assert report["status"] == "released" and report["survivors"] == [1, 2]
    assert report["mismatched"] == {
        "0": "client 0 runs modulus 4294967295, the server's modulus is 4294967296"}
    assert np.load(data / "result.npy").tolist() == (sum(xs[1:]) % M).tolist()
