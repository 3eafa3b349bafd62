"""Role commands run as separate processes over files (setup, encode, shuffle, analyze)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest


def _run(cmd: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    code = f"import sys; from shuffledp.cli_roles import {cmd}; {cmd}(sys.argv[1:])"
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if ok:
        assert res.returncode == 0, res.stderr
    return res


@pytest.mark.parametrize("encrypted", [False, True])
def test_three_parties_over_files(tmp_path, encrypted):
    n = 3
    grid = "6x5" if not encrypted else "4x4"
    setup_args = ["--grid", grid, "--n", str(n), "--epsilon", "2", "--delta", "1e-3", "--B",
                  "4", "--out", str(tmp_path)]
    _run("setup", *setup_args, *(["--keys"] if encrypted else []))
    params = str(tmp_path / "params.json")
    rng = np.random.default_rng(0)
    for j in range(n):
        pts = tmp_path / f"u{j}.csv"
        xy = rng.random((4, 2))
        pts.write_text("x,y\n" + "\n".join(f"{a},{b}" for a, b in xy))
        extra = ["--analyzer-pub", str(tmp_path / "analyzer.pub")] if encrypted else []
        _run("encode", "--params", params, "--points", str(pts), "--out",
             str(tmp_path / "batches" / f"u{j}.bin"), "--seed", str(j), *extra)
    # a corrupted extra batch is rejected by the shuffler
    (tmp_path / "batches" / "zz.bin").write_bytes(b"not a batch")
    res = _run("shuffle", "--params", params, "--in-dir", str(tmp_path / "batches"), "--out",
               str(tmp_path / "mixed.bin"), "--expected-users", str(n + 1),
               "--encrypted" if encrypted else "--plaintext")
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["n_forwarded"] == n and rep["rejected"] == {"malformed": 1}
    args = ["--params", params, "--in", str(tmp_path / "mixed.bin"), "--out-dir",
            str(tmp_path / "out")]
    if encrypted:
        args += ["--key", str(tmp_path / "analyzer.key")]
    _run("analyze", *args)
    est = np.load(tmp_path / "out" / "estimate.npy")
    assert est.shape == ((5, 6) if not encrypted else (4, 4))
    assert abs(est.sum() - 1) < 1e-9
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    for key in ("B", "q", "r", "m", "messages_per_user", "bits_per_user", "bytes_per_user",
                "n_users", "n_dropped"):
        assert key in report["protocol"]
    assert report["protocol"]["n_users"] == n and report["protocol"]["n_dropped"] == 1
    assert report["guarantee"]["model"] == "shuffle"


def test_analyzer_refuses_too_many_dropouts(tmp_path):
    _run("setup", "--grid", "4x4", "--n", "3", "--epsilon", "1", "--B", "2", "--out",
         str(tmp_path))
    params = str(tmp_path / "params.json")
    pts = tmp_path / "u.csv"
    pts.write_text("0.1,0.2\n")
    for j in range(2):
        _run("encode", "--params", params, "--points", str(pts), "--out",
             str(tmp_path / "b" / f"{j}.bin"))
    _run("shuffle", "--params", params, "--in-dir", str(tmp_path / "b"), "--out",
         str(tmp_path / "m.bin"), "--expected-users", "3")
    res = _run("analyze", "--params", params, "--in", str(tmp_path / "m.bin"), "--out-dir",
               str(tmp_path / "o"), ok=False)
    assert res.returncode == 2 and "refusing to release" in res.stderr
    assert not (tmp_path / "o" / "estimate.npy").exists()
