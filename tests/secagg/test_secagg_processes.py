"""Server and clients as separate processes exchanging files (``shuffledp secagg``).

Nothing here depends on how fast the machine is: a client that leaves posts a leave marker,
so the server closes each round as soon as every client has answered or left; the timeouts
are only a guard against a hang (a loaded machine may take a while, but never that long).
Hostile parties are played by the test itself, in-process, through the same mailbox.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from shuffledp.secagg import SecAggClient
from shuffledp.secagg import messages as msg
from shuffledp.secagg.mailbox import post, run_dir, wait_for

pytestmark = pytest.mark.skipif(os.name != "posix", reason="atomic rename semantics")

CLI = [sys.executable, "-c", "from shuffledp.cli import main; main()"]
GUARD = 600  # seconds: only reached if something hangs


def _server(box, n, L, m, t):
    return subprocess.Popen(CLI + ["secagg", "server", "--dir", str(box), "--clients", str(n),
                                   "--length", str(L), "--modulus", str(m), "--threshold",
                                   str(t), "--round-timeout", str(GUARD)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _client(tmp_path, box, i, x, m, t, extra=()):
    np.save(tmp_path / f"x{i}.npy", x)
    return subprocess.Popen(
        CLI + ["secagg", "client", "--dir", str(box), "--id", str(i), "--input",
               str(tmp_path / f"x{i}.npy"), "--modulus", str(m), "--threshold", str(t),
               "--timeout", str(GUARD), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _session(box):
    """The server's session id, once it has written its hello (and cleared the old run)."""
    deadline = time.monotonic() + GUARD
    while True:
        try:
            s = (box / "session").read_bytes()
            if len(s) == msg.HEADER.size:
                return msg.context_of(s).session
        except FileNotFoundError:
            pass
        assert time.monotonic() < deadline, "the server never wrote its session"
        time.sleep(0.02)


@pytest.mark.slow
def test_server_and_clients_in_separate_processes_with_a_dropout(tmp_path):
    n, L, m = 5, 16, 1 << 20
    g = np.random.default_rng(0)
    xs = [g.integers(0, m, L) for _ in range(n)]
    box = tmp_path / "box"
    server = _server(box, n, L, m, 3)
    clients = [_client(tmp_path, box, i, xs[i], m, 3,
                       ["--stop-before-round", "2"] if i == 3 else [])  # 3 leaves before input
               for i in range(n)]
    out = server.communicate(timeout=GUARD)[0]
    for c in clients:
        assert c.wait(timeout=GUARD) == 0, c.stdout.read()
    assert server.returncode == 0, out
    report = json.loads((box / "report.json").read_text())
    assert report["status"] == "released"
    assert report["survivors"] == [0, 1, 2, 4]
    assert report["left_per_round"]["2"] == [3]
    total = np.load(box / "result.npy")
    assert total.tolist() == (sum(xs[i] for i in (0, 1, 2, 4)) % m).tolist()
    # the directory never holds an input in the clear
    for f in box.rglob("*.msg"):
        data = f.read_bytes()
        assert all(x.astype("<i8").tobytes() not in data for x in xs)


def test_an_aborted_run_leaves_no_old_result_looking_current(tmp_path):
    """Fails on the old server: result.npy of an earlier run survived an aborted one."""
    box = tmp_path / "box"
    box.mkdir()
    np.save(box / "result.npy", np.arange(4))
    (box / "report.json").write_text('{"survivors": [0, 1, 2]}')
    (box / "round0").mkdir()
    (box / "round0" / "client-0.msg").write_bytes(b"stale")
    server = _server(box, 3, 4, 97, 3)
    run = run_dir(box, _session(box))
    for i in range(3):  # every client leaves: fewer than t answer round 0
        post(run / "round0" / f"client-{i}.leave", b"")
    out = server.communicate(timeout=GUARD)[0]
    assert server.returncode == 1 and "Traceback" not in out
    assert "fewer than the threshold" in out
    assert not (box / "result.npy").exists()
    assert not (box / "round0").exists()
    report = json.loads((box / "report.json").read_text())
    assert report["status"] == "aborted" and "threshold" in report["reason"]
    assert report["session"] == run.name[4:]
    assert (run / "aborted").exists()


@pytest.mark.slow
def test_fifo_forged_sender_and_bit_flip_through_the_mailbox(tmp_path):
    """A FIFO at a client's name is refused without blocking; a message posted under another
    client's name is rejected (sender field vs file name); a flipped bit in one round-3
    share is detected, its sender named and excluded, and the right sum released."""
    n, L, m, t = 6, 8, 1 << 16, 3
    g = np.random.default_rng(1)
    xs = [g.integers(0, m, L) for _ in range(n)]
    box = tmp_path / "box"
    server = _server(box, n, L, m, t)
    session = _session(box)
    run = run_dir(box, session)
    clients = {i: SecAggClient(i, xs[i], m, t, session) for i in range(n)}
    # round 0: client 5's slot holds a FIFO (would block a plain read), client 4 posts
    # client 0's message under its own name
    r0 = run / "round0"
    r0.mkdir(parents=True, exist_ok=True)
    os.mkfifo(r0 / "client-5.msg")
    for i in range(4):
        post(r0 / f"client-{i}.msg", clients[i].advertise())
    post(r0 / "client-4.msg", clients[0].advertise())
    live = range(4)
    b0 = wait_for(r0 / "server.msg", GUARD)
    for i in live:
        post(run / "round1" / f"client-{i}.msg", clients[i].share_keys(b0))
    for i in live:
        post(run / "round2" / f"client-{i}.msg",
             clients[i].masked_input(wait_for(run / "round1" / f"to-{i}.msg", GUARD)))
    b2 = wait_for(run / "round2" / "server.msg", GUARD)
    for i in live:
        out = bytearray(clients[i].unmask(b2))
        if i == 2:
            out[msg.HEADER.size + 4 + 5] ^= 0x10  # one bit of client 2's first share
        post(run / "round3" / f"client-{i}.msg", bytes(out))
    out = server.communicate(timeout=GUARD)[0]
    assert server.returncode == 0, out
    report = json.loads((box / "report.json").read_text())
    assert report["status"] == "released" and report["survivors"] == [0, 1, 2, 3]
    assert report["excluded"] == {"2": "wrong Shamir share of the self-mask seed of client 0"}
    assert report["rejected"] == {
        "round 0: message file not a regular file or too large": 1,
        "round 0: sender field differs from the channel": 1,
        "round 3: wrong Shamir share": 1}
    total = np.load(box / "result.npy")
    assert total.tolist() == (sum(xs[:4]) % m).tolist()


def test_client_refuses_a_bad_input_file(tmp_path):
    np.save(tmp_path / "x.npy", np.array([1.5, 2.0]))
    res = subprocess.run(CLI + ["secagg", "client", "--dir", str(tmp_path), "--id", "0",
                                "--input", str(tmp_path / "x.npy"), "--modulus", "7",
                                "--threshold", "2", "--timeout", "1"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--input" in res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr


def test_client_refuses_a_fifo_as_input_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "x.npy")
    res = subprocess.run(CLI + ["secagg", "client", "--dir", str(tmp_path), "--id", "0",
                                "--input", str(tmp_path / "x.npy"), "--modulus", "7",
                                "--threshold", "2", "--timeout", "1"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "not a regular file" in res.stdout + res.stderr
