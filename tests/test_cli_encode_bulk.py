"""``shuffledp encode --bulk`` (many users, one batch each, a process pool), the progress of
one user's encode, and the encrypted size reported against the bytes actually written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from shuffledp.cli import main
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.wire import ENC_OVERHEAD, HEADER_SIZE


def run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == code, res.output
    return res


@pytest.fixture()
def setup_run(tmp_path):
    run("setup", "--grid", 4, "--n", 5, "--epsilon", 1, "--B", 4, "--dropout", 0,
        "--out", tmp_path / "run")
    g = np.random.default_rng(1)
    lines = ["user_id,x,y,weight"]
    for u in ["alice", "bob", "carol", "d/../x", "eve"]:
        for _ in range(3):
            lines.append(f"{u},{g.random():.4f},{g.random():.4f},1")
    (tmp_path / "users.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "run"


def test_bulk_encode_writes_one_batch_per_user_that_the_roles_release(tmp_path, setup_run):
    r = setup_run
    res = run("encode", "--params", r / "params.json", "--analyzer-pub", r / "analyzer.pub",
              "--input", tmp_path / "users.csv", "--bulk", "--workers", 2, "--quiet",
              "--out", r / "batches")
    files = sorted(p.name for p in (r / "batches").iterdir())
    from shuffledp.cli.device import batch_name

    assert files == sorted(f"{batch_name(u)}.bin" for u in
                           ["alice", "bob", "carol", "d/../x", "eve"])
    assert "alice.bin" in files and all("/" not in f and ".." not in f for f in files)
    p = ProtocolParams.from_json((r / "params.json").read_text())
    sizes = {(r / "batches" / f).stat().st_size for f in files}
    assert sizes == {p.encrypted_bytes_per_user}
    assert "5 batches written" in res.output
    run("shuffle", "--params", r / "params.json", "--mac-key", r / "mac.key", "--input",
        r / "batches", "--out", r / "mixed.bin", "--quiet")
    run("analyze", "--params", r / "params.json", "--key", r / "analyzer.key", "--mac-key",
        r / "mac.key", "--input", r / "mixed.bin", "--out", r / "result", "--quiet")
    report = json.loads((r / "result" / "report.json").read_text())
    assert report["protocol"]["n_users"] == 5
    assert report["protocol"]["encrypted_bytes_per_user"] == p.encrypted_bytes_per_user
    # a second bulk run into the same folder is refused without --force
    res = run("encode", "--params", r / "params.json", "--analyzer-pub", r / "analyzer.pub",
              "--input", tmp_path / "users.csv", "--bulk", "--quiet", "--out", r / "batches",
              code=1)
    assert "--out" in res.output and "--force" in res.output


def test_bulk_options_are_checked(tmp_path, setup_run):
    r = setup_run
    (tmp_path / "me.csv").write_text("0.1,0.2\n")
    base = ["encode", "--params", r / "params.json", "--analyzer-pub", r / "analyzer.pub"]
    (tmp_path / "d").mkdir()
    res = run(*base, "--input", tmp_path / "me.csv", "--out", tmp_path / "d", code=2)
    assert "--out" in res.output and "--bulk" in res.output


def test_encrypted_size_is_the_wire_formats_constants_and_the_real_bytes(tmp_path, setup_run):
    """header + r m (coordinate 4 + HPKE enc 32 + share + AEAD tag 16), the figure in
    params.json, against the length of a batch `encode` writes."""
    r = setup_run
    p = ProtocolParams.from_json((r / "params.json").read_text())
    assert ENC_OVERHEAD == 4 + 32 + 16
    want = HEADER_SIZE + p.r * p.m * (4 + 32 + p.share_bytes + 16)
    assert p.encrypted_bytes_per_user == want
    comm = json.loads((r / "params.json").read_text())["communication"]
    assert comm["encrypted_bytes_per_user"] == want and comm["bytes_per_user"] == p.bytes_per_user
    assert p.bytes_per_user == HEADER_SIZE + p.r * p.m * p.record_bytes
    (tmp_path / "me.csv").write_text("0.1,0.2\n0.7,0.9\n")
    run("encode", "--params", r / "params.json", "--analyzer-pub", r / "analyzer.pub",
        "--input", tmp_path / "me.csv", "--out", tmp_path / "u.bin")
    assert (tmp_path / "u.bin").stat().st_size == want
    run("encode", "--params", r / "params.json", "--plaintext-simulation",
        "--input", tmp_path / "me.csv", "--out", tmp_path / "plain.bin")
    assert (tmp_path / "plain.bin").stat().st_size == p.bytes_per_user


def test_encode_one_reports_every_message_and_matches_the_library_layout(setup_run,
                                                                       monkeypatch):
    from shuffledp.cli.device import CHUNK, encode_one
    from shuffledp.protocol.crypto import decrypt_records, generate_analyzer_key, public_bytes
    from shuffledp.protocol.wire import Header

    p = ProtocolParams.from_json((setup_run / "params.json").read_text())
    key = generate_analyzer_key()
    for workers, chunk in ((1, CHUNK), (2, 64)):  # a small chunk: several on 2 processes
        monkeypatch.setattr("shuffledp.cli.device.CHUNK", chunk)
        seen = []
        blob = encode_one(p, np.array([0, 5]), np.ones(2), public_bytes(key), seen.append,
                          workers=workers)
        assert sum(seen) == p.messages_per_user and max(seen) <= chunk
        assert len(seen) >= -(-p.messages_per_user // chunk)
        h = Header.unpack(blob)
        assert h.n_records == p.messages_per_user and len(blob) == p.encrypted_bytes_per_user
        # every message opens under the analyzer's key, in the chunks' order
        assert decrypt_records(p, blob[HEADER_SIZE:], key)[2] == 0


def test_progress_is_on_stderr_and_silent_with_quiet(tmp_path, setup_run, monkeypatch):
    """The bar appears once a step has run a second (here forced with delay 0); --quiet
    draws nothing."""
    from shuffledp.cli import common

    real = common.progress_bar
    monkeypatch.setattr(common, "progress_bar",
                        lambda total, desc, unit, quiet, delay=1.0: real(total, desc, unit,
                                                                         quiet, 0.0))
    r = setup_run
    (tmp_path / "me.csv").write_text("0.1,0.2\n")
    argv = ["encode", "--params", r / "params.json", "--analyzer-pub", r / "analyzer.pub",
            "--input", tmp_path / "me.csv"]
    res = CliRunner().invoke(main, [str(a) for a in argv + ["--out", tmp_path / "a.bin"]])
    assert res.exit_code == 0 and "encode: encrypting messages" in res.stderr
    assert res.stdout == ""
    res = CliRunner().invoke(main, [str(a) for a in argv + ["--out", tmp_path / "b.bin",
                                                           "--quiet"]])
    assert res.exit_code == 0 and res.stderr == "" and res.stdout == ""


def test_estimated_progress_shows_an_eta_and_finishes(capsys):
    import time

    from shuffledp.cli.common import EstimatedProgress

    with EstimatedProgress("step", 2.0, quiet=False, delay=0.0):
        time.sleep(1.2)
    err = capsys.readouterr().err
    assert "step (estimated)" in err and "<" in err  # tqdm's "elapsed<remaining"
    with EstimatedProgress("step", 2.0, quiet=True, delay=0.0):
        time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_analyze_refuses_too_few_users_from_the_header_before_decrypting(tmp_path, setup_run,
                                                                          monkeypatch):
    """Fewer users than n_min in the mixed batch's header: refused (exit 1) without a single
    decryption."""
    from shuffledp.protocol import crypto

    r = setup_run
    (tmp_path / "me.csv").write_text("0.1,0.2\n")
    run("encode", "--params", r / "params.json", "--analyzer-pub", r / "analyzer.pub",
        "--input", tmp_path / "me.csv", "--out", r / "b" / "u.bin", "--quiet")
    run("shuffle", "--params", r / "params.json", "--mac-key", r / "mac.key", "--input",
        r / "b", "--out", r / "mixed.bin", "--quiet")

    def no_decrypt(*args, **kwargs):
        raise AssertionError("decrypted a batch that the header already refuses")

    monkeypatch.setattr(crypto, "decrypt_records", no_decrypt)
    res = run("analyze", "--params", r / "params.json", "--key", r / "analyzer.key",
              "--mac-key", r / "mac.key", "--input", r / "mixed.bin", "--out", r / "res",
              "--quiet", code=1)
    assert "only 1 users contributed" in res.output and "n_min = 5" in res.output
