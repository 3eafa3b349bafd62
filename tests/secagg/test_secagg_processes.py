"""Server and clients as separate processes exchanging files (``shuffledp secagg``)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="atomic rename semantics")

CLI = [sys.executable, "-c", "from shuffledp.cli import main; main()"]


@pytest.mark.slow
def test_server_and_clients_in_separate_processes_with_a_dropout(tmp_path):
    n, L, m = 5, 16, 1 << 20
    g = np.random.default_rng(0)
    xs = [g.integers(0, m, L) for _ in range(n)]
    box = tmp_path / "box"
    server = subprocess.Popen(CLI + ["secagg", "server", "--dir", str(box), "--clients", str(n),
                                     "--length", str(L), "--modulus", str(m), "--threshold",
                                     "3", "--round-timeout", "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    clients = []
    for i in range(n):
        np.save(tmp_path / f"x{i}.npy", xs[i])
        extra = ["--stop-before-round", "2"] if i == 3 else []  # 3 drops before its input
        clients.append(subprocess.Popen(
            CLI + ["secagg", "client", "--dir", str(box), "--id", str(i), "--input",
                   str(tmp_path / f"x{i}.npy"), "--modulus", str(m), "--threshold", "3",
                   "--timeout", "30", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out = server.communicate(timeout=120)[0]
    for c in clients:
        assert c.wait(timeout=60) == 0, c.stdout.read()
    assert server.returncode == 0, out
    report = json.loads((box / "report.json").read_text())
    assert report["survivors"] == [0, 1, 2, 4]
    total = np.load(box / "result.npy")
    assert total.tolist() == (sum(xs[i] for i in (0, 1, 2, 4)) % m).tolist()
    # the directory never holds an input in the clear
    for f in box.rglob("*.msg"):
        data = f.read_bytes()
        assert all(x.astype("<i8").tobytes() not in data for x in xs)


def test_client_refuses_a_bad_input_file(tmp_path):
    np.save(tmp_path / "x.npy", np.array([1.5, 2.0]))
    res = subprocess.run(CLI + ["secagg", "client", "--dir", str(tmp_path), "--id", "0",
                                "--input", str(tmp_path / "x.npy"), "--modulus", "7",
                                "--threshold", "2", "--timeout", "1"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--input" in res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
