"""Role commands (setup, encode, shuffle, analyze) over files, in-process with CliRunner."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from click.testing import CliRunner

from shuffledp.cli import main
from shuffledp.cli_roles import PLAINTEXT_WARNING


def run(*args: str, code: int = 0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res


def _setup(tmp_path, *extra, n=3, grid="4x4"):
    run("setup", "--grid", grid, "--n", n, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
        "--out", tmp_path, *extra)
    return tmp_path / "params.json"


def _points(tmp_path, j, rng):
    pts = tmp_path / f"u{j}.csv"
    pts.write_text("x,y\n" + "\n".join(f"{a},{b}" for a, b in rng.random((4, 2))))
    return pts


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "plaintext-simulation"])
def test_three_parties_over_files(tmp_path, encrypted):
    n = 3  # users who send a batch; a fourth admitted user's upload is garbage
    sim = [] if encrypted else ["--plaintext-simulation"]
    params = _setup(tmp_path, "--dropout", 0.25, *sim, *([] if encrypted else ["--no-keys"]),
                    n=n + 1)
    assert (tmp_path / "analyzer.key").exists() == encrypted
    rng = np.random.default_rng(0)
    for j in range(n):
        pub = ["--analyzer-pub", tmp_path / "analyzer.pub"] if encrypted else sim
        res = run("encode", "--params", params, "--points", _points(tmp_path, j, rng), "--out",
                  tmp_path / "batches" / f"u{j}.bin", *pub)
        assert (PLAINTEXT_WARNING in res.output) != encrypted
    # a corrupted extra batch is rejected by the shuffler
    (tmp_path / "batches" / "zz.bin").write_bytes(b"not a batch")
    mixed = tmp_path / "mixed.bin"
    res = run("shuffle", "--params", params, "--in-dir", tmp_path / "batches", "--out", mixed,
              "--expected-users", n + 1, *sim)
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["n_forwarded"] == n and rep["rejected"] == {"malformed": 1}
    assert json.loads((tmp_path / "mixed.bin.report.json").read_text()) == rep
    key = ["--key", tmp_path / "analyzer.key"] if encrypted else sim
    run("analyze", "--params", params, "--in", mixed, "--out-dir", tmp_path / "out", *key)
    est = np.load(tmp_path / "out" / "estimate.npy")
    assert est.shape == (4, 4) and abs(est.sum() - 1) < 1e-9
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    for k in ("B", "q", "r", "m", "messages_per_user", "bits_per_user", "bytes_per_user",
              "n_users", "n_dropped"):
        assert k in report["protocol"]
    assert report["protocol"]["n_users"] == n and report["protocol"]["n_dropped"] == 1
    assert report["guarantee"]["model"] == "shuffle"
    assert report["path"] == ("encrypted" if encrypted else "plaintext simulation")
    # analyze carries the shuffler's report
    assert report["shuffler"] == rep


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    """A plaintext-simulation run: params for 3 users, their batches (fast: no encryption)."""
    d = tmp_path_factory.mktemp("plain")
    params = _setup(d, "--plaintext-simulation", "--no-keys")
    pts = d / "u.csv"
    pts.write_text("0.1,0.2\n")
    for j in range(3):
        run("encode", "--params", params, "--points", pts, "--out", d / "b" / f"{j}.bin",
            "--plaintext-simulation")
    return d


def _copy_batches(src, dst, k):
    dst.mkdir()
    for j in range(k):
        (dst / f"{j}.bin").write_bytes((src / f"{j}.bin").read_bytes())
    return dst


def test_analyzer_refuses_too_many_dropouts(plain_run, tmp_path):
    d = plain_run
    params = d / "params.json"
    bdir = _copy_batches(d / "b", tmp_path / "b", 2)
    run("shuffle", "--params", params, "--in-dir", bdir, "--out", tmp_path / "m.bin",
        "--expected-users", 3, "--plaintext-simulation")
    res = run("analyze", "--params", params, "--in", tmp_path / "m.bin", "--out-dir",
              tmp_path / "o", "--plaintext-simulation", code=1)
    assert "refusing to release" in res.output
    assert not (tmp_path / "o" / "estimate.npy").exists()


def test_shuffle_report_path_option_and_consistency_check(plain_run, tmp_path):
    d = plain_run
    params = d / "params.json"
    rep = tmp_path / "shuffler.json"
    run("shuffle", "--params", params, "--in-dir", d / "b", "--out", tmp_path / "m.bin",
        "--report", rep, "--plaintext-simulation", "--expected-users", 3)
    assert json.loads(rep.read_text())["n_forwarded"] == 3
    assert not (tmp_path / "m.bin.report.json").exists()
    args = ["analyze", "--params", params, "--in", tmp_path / "m.bin", "--plaintext-simulation",
            "--shuffler-report", rep]
    run(*args, "--out-dir", tmp_path / "o1")
    report = json.loads((tmp_path / "o1" / "report.json").read_text())
    assert report["shuffler"]["n_forwarded"] == 3
    # a report that contradicts the mixed batch's header is refused
    bad = json.loads(rep.read_text())
    bad["n_dropped"] = 5
    rep.write_text(json.dumps(bad))
    res = run(*args, "--out-dir", tmp_path / "o2", code=1)
    assert "n_dropped=5" in res.output and str(rep) in res.output
    assert not (tmp_path / "o2" / "estimate.npy").exists()


def test_setup_writes_keys_by_default_with_mode_0600_and_never_overwrites(tmp_path):
    _setup(tmp_path)
    key = tmp_path / "analyzer.key"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert len(key.read_bytes()) == 32 and len((tmp_path / "analyzer.pub").read_bytes()) == 32
    old = key.read_bytes()
    res = CliRunner().invoke(main, ["setup", "--grid", "4", "--n", "3", "--epsilon", "1",
                                    "--out", str(tmp_path)])
    assert res.exit_code == 1 and "--force" in res.output and str(key) in res.output
    assert key.read_bytes() == old
    _setup(tmp_path, "--force")
    assert key.read_bytes() != old and stat.S_IMODE(os.stat(key).st_mode) == 0o600


def test_plaintext_paths_warn_loudly(plain_run, tmp_path):
    d = plain_run
    res = run("shuffle", "--params", d / "params.json", "--in-dir", d / "b", "--out",
              tmp_path / "m.bin", "--plaintext-simulation")
    assert "WARNING" in res.stderr and "shuffler sees every user's shares" in res.stderr
    res = run("analyze", "--params", d / "params.json", "--in", tmp_path / "m.bin",
              "--out-dir", tmp_path / "o", "--plaintext-simulation")
    assert "WARNING" in res.stderr


def test_shuffle_kind_mismatch_names_the_real_cause(plain_run, tmp_path):
    d = plain_run
    res = run("shuffle", "--params", d / "params.json", "--in-dir", d / "b", "--out",
              tmp_path / "m.bin", code=1)  # default: encrypted
    assert "are plaintext (simulation path); pass --plaintext-simulation" in res.output
    assert not (tmp_path / "m.bin").exists()


def test_user_batch_file_is_read_only_up_to_its_expected_size(plain_run, tmp_path):
    """A 64 GiB (sparse) file in the input directory is rejected without reading it all."""
    d = plain_run
    bdir = _copy_batches(d / "b", tmp_path / "b", 3)
    with open(bdir / "huge.bin", "wb") as fh:
        fh.write((d / "b" / "0.bin").read_bytes()[:64])
        fh.truncate(64 << 30)
    res = run("shuffle", "--params", d / "params.json", "--in-dir", bdir, "--out",
              tmp_path / "m.bin", "--plaintext-simulation")
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["n_forwarded"] == 3 and rep["rejected"] == {"malformed": 1}
