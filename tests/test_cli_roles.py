"""Role commands (setup, encode, shuffle, analyze) over files, in-process with CliRunner."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from shuffledp.cli import main
from shuffledp.cli.roles import PLAINTEXT_WARNING
from shuffledp.protocol.crypto import (
    KEY_ANALYZER_PRIVATE,
    KEY_ANALYZER_PUBLIC,
    KEY_MAC,
    decode_key_file,
    encode_key_file,
    key_id,
)


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
    assert (tmp_path / "mac.key").exists() == encrypted
    rng = np.random.default_rng(0)
    for j in range(n):
        pub = ["--analyzer-pub", tmp_path / "analyzer.pub"] if encrypted else sim
        res = run("encode", "--params", params, "--input", _points(tmp_path, j, rng), "--out",
                  tmp_path / "batches" / f"u{j}.bin", *pub)
        assert (PLAINTEXT_WARNING in res.output) != encrypted
    # a corrupted extra batch is rejected by the shuffler
    (tmp_path / "batches" / "zz.bin").write_bytes(b"not a batch")
    mixed = tmp_path / "mixed.bin"
    mac = ["--mac-key", tmp_path / "mac.key"] if encrypted else []
    before = set(os.listdir(tmp_path))
    res = run("shuffle", "--params", params, "--input", tmp_path / "batches", "--out", mixed,
              "--expected-users", n + 1, *sim, *mac)
    # the mixed batch and its report, no temporary file or bucket directory left behind
    assert set(os.listdir(tmp_path)) - before == {"mixed.bin", "mixed.bin.report.json"}
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["n_forwarded"] == n and rep["rejected"] == {"malformed": 1}
    assert rep["authenticated"] == encrypted
    assert json.loads((tmp_path / "mixed.bin.report.json").read_text()) == rep
    key = ["--key", tmp_path / "analyzer.key", *mac] if encrypted else sim
    run("analyze", "--params", params, "--input", mixed, "--out", tmp_path / "out", *key)
    est = np.load(tmp_path / "out" / "estimate.npy")
    assert est.shape == (4, 4) and abs(est.sum() - 1) < 1e-9
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    for k in ("B", "q", "r", "m", "messages_per_user", "bits_per_user", "bytes_per_user",
              "n_users", "n_dropped"):
        assert k in report["protocol"]
    assert report["protocol"]["n_users"] == n and report["protocol"]["n_dropped"] == 1
    assert report["guarantee"]["model"] == "shuffle"
    assert report["path"] == ("encrypted" if encrypted else "plaintext simulation")
    assert report["authenticated"] == encrypted and report["release"] == "private"
    assert report["protocol"]["mixed_batch_authenticated"] == encrypted
    # analyze carries the shuffler's report
    assert report["shuffler"] == rep


def test_analyze_releases_the_smoothed_estimate_as_heatmap_does(plain_run, tmp_path):
    """Deployment and simulation release the same post-processing by default; --smoothing
    none gives Reconstruct's output as is (its normalised s_hat)."""
    params = plain_run / "params.json"
    mixed = tmp_path / "m.bin"
    run("shuffle", "--params", params, "--input", plain_run / "b", "--out", mixed,
        "--plaintext-simulation")
    outs = {}
    for mode in ("auto", "none"):
        run("analyze", "--params", params, "--input", mixed, "--out", tmp_path / mode,
            "--plaintext-simulation", "--smoothing", mode)
        outs[mode] = (np.load(tmp_path / mode / "estimate.npy"),
                      np.load(tmp_path / mode / "raw.npy"),
                      json.loads((tmp_path / mode / "report.json").read_text()))
    est, raw, rep = outs["none"]
    assert "smoothing" not in rep["parameters"]
    np.testing.assert_allclose(est, raw / raw.sum())
    est_s, raw_s, rep_s = outs["auto"]
    assert rep_s["parameters"]["smoothing"]["method"] == "count_posterior"
    assert rep_s["parameters"]["smoothing"]["source"] == "noisy level counts"
    assert abs(est_s.sum() - 1) < 1e-9 and (est_s > 0).all()  # spread: no zero pixel
    assert (raw_s == raw_s).all() and rep_s["guarantee"] == rep["guarantee"]


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    """A plaintext-simulation run: params for 3 users, their batches (fast: no encryption)."""
    d = tmp_path_factory.mktemp("plain")
    params = _setup(d, "--plaintext-simulation", "--no-keys")
    pts = d / "u.csv"
    pts.write_text("0.1,0.2\n")
    for j in range(3):
        run("encode", "--params", params, "--input", pts, "--out", d / "b" / f"{j}.bin",
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
    run("shuffle", "--params", params, "--input", bdir, "--out", tmp_path / "m.bin",
        "--expected-users", 3, "--plaintext-simulation")
    res = run("analyze", "--params", params, "--input", tmp_path / "m.bin", "--out",
              tmp_path / "o", "--plaintext-simulation", code=1)
    assert "refusing to release" in res.output
    assert not (tmp_path / "o" / "estimate.npy").exists()


def test_shuffle_report_path_option_and_consistency_check(plain_run, tmp_path):
    d = plain_run
    params = d / "params.json"
    rep = tmp_path / "shuffler.json"
    run("shuffle", "--params", params, "--input", d / "b", "--out", tmp_path / "m.bin",
        "--shuffler-report", rep, "--plaintext-simulation", "--expected-users", 3)
    assert json.loads(rep.read_text())["n_forwarded"] == 3
    assert not (tmp_path / "m.bin.report.json").exists()
    args = ["analyze", "--params", params, "--input", tmp_path / "m.bin", "--plaintext-simulation",
            "--shuffler-report", rep]
    run(*args, "--out", tmp_path / "o1")
    report = json.loads((tmp_path / "o1" / "report.json").read_text())
    assert report["shuffler"]["n_forwarded"] == 3
    # a report that contradicts the mixed batch's header is refused
    bad = json.loads(rep.read_text())
    bad["n_dropped"] = 5
    rep.write_text(json.dumps(bad))
    res = run(*args, "--out", tmp_path / "o2", code=1)
    assert "n_dropped=5" in res.output and str(rep) in res.output
    assert not (tmp_path / "o2" / "estimate.npy").exists()


@pytest.mark.parametrize("existing", ["analyzer.key", "mac.key"], ids=["analyzer-key", "mac-key"])
def test_setup_writes_keys_by_default_with_mode_0600_and_never_overwrites(tmp_path, existing):
    _setup(tmp_path)
    key, mac = tmp_path / "analyzer.key", tmp_path / "mac.key"
    kinds = {key: KEY_ANALYZER_PRIVATE, mac: KEY_MAC,
             tmp_path / "analyzer.pub": KEY_ANALYZER_PUBLIC}
    raw = {f: decode_key_file(f.read_bytes(), kind) for f, kind in kinds.items()}
    for f in (key, mac):
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600 and len(raw[f]) == 32
    assert len(raw[tmp_path / "analyzer.pub"]) == 32
    assert raw[key] != raw[mac]
    assert key_id(KEY_ANALYZER_PRIVATE, raw[key]) == key_id(KEY_ANALYZER_PUBLIC,
                                                            raw[tmp_path / "analyzer.pub"])
    old = {f: f.read_bytes() for f in (key, mac, tmp_path / "analyzer.pub")}
    (tmp_path / ({"analyzer.key", "mac.key"} - {existing}).pop()).unlink()
    res = CliRunner().invoke(main, ["setup", "--grid", "4", "--n", "3", "--epsilon", "1",
                                    "--out", str(tmp_path)])
    assert res.exit_code == 1 and "--force" in res.output
    assert str(tmp_path / existing) in res.output
    # refused before anything was written: the other secret file was not recreated
    assert sorted(p.name for p in tmp_path.glob("*.key")) == [existing]
    assert (tmp_path / existing).read_bytes() == old[tmp_path / existing]
    _setup(tmp_path, "--force")
    for f in (key, mac):
        assert f.read_bytes() != old[f] and stat.S_IMODE(os.stat(f).st_mode) == 0o600


def test_setup_help_documents_the_mac_key():
    text = " ".join(run("setup", "--help").output.split())
    assert "mac.key (32 random bytes shared by the shuffler and the analyzer only" in text


def test_plaintext_paths_warn_loudly(plain_run, tmp_path):
    d = plain_run
    res = run("shuffle", "--params", d / "params.json", "--input", d / "b", "--out",
              tmp_path / "m.bin", "--plaintext-simulation")
    assert "WARNING" in res.stderr and "shuffler sees every user's shares" in res.stderr
    res = run("analyze", "--params", d / "params.json", "--input", tmp_path / "m.bin",
              "--out", tmp_path / "o", "--plaintext-simulation")
    assert "WARNING" in res.stderr


def test_shuffle_kind_mismatch_names_the_real_cause(plain_run, tmp_path):
    d = plain_run
    mac = tmp_path / "mac.key"
    mac.write_bytes(encode_key_file(KEY_MAC, bytes(range(32))))
    res = run("shuffle", "--params", d / "params.json", "--input", d / "b", "--out",
              tmp_path / "m.bin", "--mac-key", mac, code=1)  # default: encrypted
    assert "are plaintext (simulation path); pass --plaintext-simulation" in res.output
    assert not (tmp_path / "m.bin").exists()


def test_user_batch_file_is_read_only_up_to_its_expected_size(plain_run, tmp_path):
    """A 64 GiB (sparse) file in the input directory is rejected without reading it all."""
    d = plain_run
    bdir = _copy_batches(d / "b", tmp_path / "b", 3)
    with open(bdir / "huge.bin", "wb") as fh:
        fh.write((d / "b" / "0.bin").read_bytes()[:64])
        fh.truncate(64 << 30)
    res = run("shuffle", "--params", d / "params.json", "--input", bdir, "--out",
              tmp_path / "m.bin", "--plaintext-simulation")
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["n_forwarded"] == 3 and rep["rejected"] == {"malformed": 1}


# --------------------------------------------------------------------------- wire v2: MAC key,
# round id
@pytest.fixture(scope="module")
def enc_run(tmp_path_factory):
    """An encrypted run of 3 users (setup, encode, shuffle with the MAC key)."""
    d = tmp_path_factory.mktemp("enc")
    params = _setup(d)
    rng = np.random.default_rng(1)
    for j in range(3):
        run("encode", "--params", params, "--input", _points(d, j, rng), "--out",
            d / "b" / f"{j}.bin", "--analyzer-pub", d / "analyzer.pub")
    run("shuffle", "--params", params, "--input", d / "b", "--out", d / "mixed.bin",
        "--mac-key", d / "mac.key")
    return d


def _analyze_enc(d, mixed, out, *extra, code=0):
    return run("analyze", "--params", d / "params.json", "--input", mixed, "--out", out,
               "--key", d / "analyzer.key", *extra, code=code)


def _flip_record_byte(data: bytearray) -> None:
    data[64 + 54 * 5 + 40] ^= 1  # inside the ciphertext of the sixth record


def _add_one_dropped_user(data: bytearray) -> None:
    (n_dropped,) = struct.unpack_from("<Q", data, 40)
    struct.pack_into("<Q", data, 40, n_dropped + 1)


@pytest.mark.parametrize("tamper", [_flip_record_byte, _add_one_dropped_user],
                         ids=["record-byte", "n_dropped"])
def test_analyze_refuses_a_mixed_batch_altered_after_shuffling(enc_run, tmp_path, tamper):
    """Regression: the analyzer verifies the mixed batch's HMAC under --mac-key.

    The shuffler's report is edited consistently (an attacker who changes n_dropped changes
    both), so only the tag can catch the change.
    """
    d = enc_run
    mac = ("--mac-key", d / "mac.key")
    data = bytearray((d / "mixed.bin").read_bytes())
    rep = json.loads((d / "mixed.bin.report.json").read_text())
    tamper(data)
    (n_dropped,) = struct.unpack_from("<Q", data, 40)
    (tmp_path / "m.bin").write_bytes(bytes(data))
    (tmp_path / "m.bin.report.json").write_text(json.dumps({**rep, "n_dropped": n_dropped}))
    res = _analyze_enc(d, tmp_path / "m.bin", tmp_path / "o", *mac, code=1)
    assert "refusing to release" in res.output and "tag does not verify" in res.output
    assert not (tmp_path / "o").exists()
    # control: the untouched batch is released, authenticated
    _analyze_enc(d, d / "mixed.bin", tmp_path / "ok", *mac)
    assert json.loads((tmp_path / "ok" / "report.json").read_text())["authenticated"] is True


def test_analyze_refuses_a_batch_whose_keyed_tag_was_replaced_by_a_plain_hash(enc_run, tmp_path):
    """Clearing the keyed flag and recomputing SHA-256 (anyone can) does not get through."""
    d = enc_run
    data = bytearray((d / "mixed.bin").read_bytes())
    assert data[48] == 1  # keyed
    data[48] = 0
    _add_one_dropped_user(data)
    data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    (tmp_path / "m.bin").write_bytes(bytes(data))
    res = _analyze_enc(d, tmp_path / "m.bin", tmp_path / "o", "--mac-key", d / "mac.key",
                       code=1)
    assert "no keyed tag" in res.output
    res = _analyze_enc(d, tmp_path / "m.bin", tmp_path / "o", code=2)
    assert "--mac-key is required" in res.output
    assert not (tmp_path / "o").exists()


def test_analyze_refuses_another_runs_mac_key(enc_run, tmp_path):
    other = tmp_path / "other"
    _setup(other)
    res = _analyze_enc(enc_run, enc_run / "mixed.bin", tmp_path / "o", "--mac-key",
                       other / "mac.key", code=1)
    assert "tag does not verify" in res.output and "--mac-key" in res.output


def test_shuffle_rejects_batches_of_another_setup(enc_run, tmp_path):
    """Same parameters, another setup: only the round id differs, and the batch is rejected."""
    d = enc_run
    other = tmp_path / "other"
    _setup(other)
    a, b = (json.loads((x / "params.json").read_text()) for x in (d, other))
    assert a["round_id"] != b["round_id"]
    assert {k: v for k, v in a.items() if k != "round_id"} == \
        {k: v for k, v in b.items() if k != "round_id"}
    bdir = tmp_path / "b"
    bdir.mkdir()
    for j in range(2):
        (bdir / f"{j}.bin").write_bytes((d / "b" / f"{j}.bin").read_bytes())
    run("encode", "--params", other / "params.json", "--input", d / "u0.csv", "--out",
        bdir / "z.bin", "--analyzer-pub", other / "analyzer.pub")
    shuf = ("shuffle", "--params", d / "params.json", "--mac-key", d / "mac.key", "--input",
            bdir, "--expected-users", 3)
    res = run(*shuf, "--out", tmp_path / "m.bin")
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["n_forwarded"] == 2 and rep["rejected"] == {"wrong_digest": 1}
    assert rep["n_dropped"] == 1 and "another setup" in res.stderr
    # only batches of the other setup: nothing accepted, the cause is named
    for j in range(2):
        (bdir / f"{j}.bin").unlink()
    res = run(*shuf, "--out", tmp_path / "m2.bin", code=1)
    assert "wrong_digest: 1" in res.output and "another setup" in res.output
    assert not (tmp_path / "m2.bin").exists()


def test_shuffle_spills_to_a_temporary_directory_next_to_out(tmp_path, monkeypatch):
    """With a small --memory-limit the records go through bucket files in a temporary
    directory next to --out, removed afterwards; the release still counts every message."""
    import tempfile

    made = []
    real = tempfile.mkdtemp

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    n = 20
    run("setup", "--grid", "16x16", "--n", n, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
        "--out", tmp_path, "--plaintext-simulation")
    params = tmp_path / "params.json"
    pts = tmp_path / "u.csv"
    pts.write_text("0.1,0.2\n0.8,0.5\n")
    for j in range(n):
        run("encode", "--params", params, "--input", pts, "--out", tmp_path / "b" / f"{j}.bin",
            "--plaintext-simulation")
    out = tmp_path / "run" / "mixed.bin"
    run("shuffle", "--params", params, "--input", tmp_path / "b", "--out", out,
        "--plaintext-simulation", "--mac-key", tmp_path / "mac.key", "--memory-limit", 1)
    assert len(made) == 1 and os.path.dirname(made[0]) == str(out.parent)
    assert not os.path.exists(made[0])
    assert sorted(os.listdir(out.parent)) == ["mixed.bin", "mixed.bin.report.json"]
    run("analyze", "--params", params, "--input", out, "--out", tmp_path / "o",
        "--plaintext-simulation", "--mac-key", tmp_path / "mac.key")
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["protocol"]["n_users"] == n and report["authenticated"] is True
    assert report["protocol"]["messages_received"] == n * report["protocol"]["messages_per_user"]


def test_readme_role_commands_run_as_written(tmp_path, monkeypatch):
    """The README's three-party example, with its sizes shrunk (grid, n, B), runs end to end."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"```\n(shuffledp setup .*?)```", readme, flags=re.S).group(1)
    commands = [line.split()[1:] for line in block.strip().splitlines()]
    assert [c[0] for c in commands] == ["setup", "encode", "shuffle", "analyze"]
    small = {"--grid": "4x4", "--n": "2", "--delta": "1e-3", "--B": "4", "--expected-users": "2"}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "me.csv").write_text("0.1,0.2\n")
    for args in commands:
        args = [small.get(args[i - 1], a) if i else a for i, a in enumerate(args)]
        run(*args)
        if args[0] == "encode":  # a second user
            run(*[a.replace("u7", "u8") for a in args])
    report = json.loads((tmp_path / "run" / "result" / "report.json").read_text())
    assert report["authenticated"] is True and report["protocol"]["n_users"] == 2


@pytest.mark.parametrize("nb,text", [("replace", "replace one user (n public)"),
                                     ("zero_out", "zero out one user's contribution (n public)")],
                         ids=["replace", "zero_out"])
def test_setup_neighbour_relation_reaches_the_params(tmp_path, nb, text):
    from shuffledp.protocol.params import ProtocolParams

    params = _setup(tmp_path, "--neighbour", nb)
    p = ProtocolParams.from_json(params.read_text())
    assert str(p.neighbour) == text
    assert p.level_sensitivities[0] == (8 if nb == "replace" else 4)  # 2B or B, B = 4


@pytest.mark.parametrize("budget", [None, "auto", "paper"])
def test_setup_budget_rule_reaches_the_params_file(tmp_path, budget):
    """setup records the budget rule in params.json (default "auto", the central release's);
    encode and analyze re-derive the record from the file, so they use the file's rule."""
    from shuffledp.protocol.params import ProtocolParams, derive_params

    extra = [] if budget is None else ["--budget", budget]
    params = _setup(tmp_path, *extra, n=200, grid="8x8")  # eps n / N = 6.25: rules differ
    p = ProtocolParams.from_json(params.read_text())
    rule = budget or "auto"
    assert json.loads(params.read_text())["budget_rule"] == p.budget_rule == rule
    want = derive_params(p.grid, 200, epsilon=2.0, delta=1e-3, B=4, budget=rule)
    assert p.level_epsilons == want.level_epsilons
    run("setup", "--grid", "8x8", "--n", 200, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
        "--out", tmp_path / "bad", "--budget", "leafy", code=2)
    assert "[default: auto]" in " ".join(run("setup", "--help").output.split())


def test_encode_refuses_a_params_file_without_budget_rule(tmp_path):
    """A params.json written before the rule was recorded is refused (exit 1) with the
    reason on one line, as one without round_id: no traceback, no assumed rule."""
    params = _setup(tmp_path, "--plaintext-simulation", "--no-keys")
    d = json.loads(params.read_text())
    del d["budget_rule"]
    params.write_text(json.dumps(d))
    pts = tmp_path / "u.csv"
    pts.write_text("0.1,0.2\n")
    res = run("encode", "--params", params, "--input", pts, "--out", tmp_path / "b.bin",
              "--plaintext-simulation", code=1)
    assert "no budget_rule" in res.output and "re-run setup" in res.output


# --------------------------------------------------------------------------- the input
# directory and the named reasons
_NOT_BATCHES = {
    "directory": (lambda p: p.mkdir(), "not_a_regular_file"),
    "fifo": (os.mkfifo, "not_a_regular_file"),
    "empty-file": (lambda p: p.write_bytes(b""), "empty"),
    "link-to-dev-zero": (lambda p: p.symlink_to("/dev/zero"), "not_a_regular_file"),
    "dangling-link": (lambda p: p.symlink_to(p.parent / "nowhere"), "not_a_regular_file"),
}


@pytest.mark.parametrize("kind", sorted(_NOT_BATCHES))
def test_shuffle_ignores_and_counts_entries_that_are_not_batch_files(plain_run, tmp_path, kind):
    # a directory, FIFO or empty file named like a batch counted as a batch
    # and blocked the round (an error exit, or a wrong --expected-users count); it is now
    # skipped, counted under a named reason, and not a dropped user
    d = plain_run
    bdir = _copy_batches(d / "b", tmp_path / "b", 3)
    make, reason = _NOT_BATCHES[kind]
    make(bdir / "x.bin")
    res = run("shuffle", "--params", d / "params.json", "--input", bdir, "--out",
              tmp_path / "m.bin", "--plaintext-simulation", "--expected-users", 3)
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["ignored"] == {reason: 1} and "x.bin" in res.stderr
    assert (rep["n_forwarded"], rep["n_dropped"], rep["rejected"]) == (3, 0, {})
    assert rep["n_batch_files"] == 3
    run("analyze", "--params", d / "params.json", "--input", tmp_path / "m.bin", "--out",
        tmp_path / "o", "--plaintext-simulation")


def test_shuffle_with_only_non_batch_entries_names_them(plain_run, tmp_path):
    d = plain_run
    bdir = tmp_path / "b"
    bdir.mkdir()
    (bdir / "a.bin").mkdir()
    (bdir / "b.bin").write_bytes(b"")
    res = run("shuffle", "--params", d / "params.json", "--input", bdir, "--out",
              tmp_path / "m.bin", "--plaintext-simulation", code=1)
    assert "no user batches" in res.output and "a.bin" in res.output and "b.bin" in res.output
    assert "empty: 1" in res.output and "not_a_regular_file: 1" in res.output


def test_shuffle_report_names_the_reason_of_a_too_short_batch(plain_run, tmp_path):
    # a batch whose header counts fewer records than r m was dropped with
    # an empty `rejected` in the report; it is `incomplete` now, a cut one `truncated`
    from shuffledp.protocol.wire import HEADER_SIZE, Header

    d = plain_run
    bdir = _copy_batches(d / "b", tmp_path / "b", 3)
    good = (d / "b" / "0.bin").read_bytes()
    h = Header.unpack(good[:HEADER_SIZE])
    rb = h.record_bytes
    short = Header(h.kind, rb, h.digest, h.n_records - 1, 1, 0).pack() + good[HEADER_SIZE:-rb]
    (bdir / "short.bin").write_bytes(short)
    (bdir / "cut.bin").write_bytes(good[: len(good) // 2])
    res = run("shuffle", "--params", d / "params.json", "--input", bdir, "--out",
              tmp_path / "m.bin", "--plaintext-simulation")
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["rejected"] == {"incomplete": 1, "truncated": 1}
    assert rep["n_dropped"] == sum(rep["rejected"].values()) == 2


def test_setup_declares_a_nonzero_dropout_by_default(tmp_path):
    # `setup` planned the noise for all n users unless told otherwise, so
    # one lost user sank the round; the default (documented in --help) leaves headroom
    from shuffledp.protocol.params import DEFAULT_DROPOUT

    res = run("setup", "--grid", "4x4", "--n", 40, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
              "--out", tmp_path, "--plaintext-simulation", "--no-keys")
    figures = json.loads(res.stdout)
    assert figures["dropout"] == DEFAULT_DROPOUT > 0 and figures["n_min"] == 38
    assert float(json.loads((tmp_path / "params.json").read_text())["dropout"]) == 0.05
    assert "[default: 0.05]" in " ".join(run("setup", "--help").output.split())


def test_shuffle_with_analyzer_pub_refuses_a_batch_sealed_to_another_key(enc_run, tmp_path):
    """`shuffle --analyzer-pub`: a device batch names the key it is sealed to; one sealed to
    another key (same parameters and setup) is refused before mixing as wrong_key, its user
    dropped whole, and the rest is released. Without the option the key id is not checked."""
    from shuffledp.protocol.crypto import (
        KEY_ANALYZER_PUBLIC,
        encode_key_file,
        generate_analyzer_key,
        public_bytes,
    )

    d = enc_run
    stranger = tmp_path / "stranger.pub"
    stranger.write_bytes(encode_key_file(KEY_ANALYZER_PUBLIC,
                                         public_bytes(generate_analyzer_key())))
    bdir = tmp_path / "b"
    bdir.mkdir()
    for j in range(2):
        (bdir / f"{j}.bin").write_bytes((d / "b" / f"{j}.bin").read_bytes())
    run("encode", "--params", d / "params.json", "--input", d / "u0.csv", "--out",
        bdir / "z.bin", "--analyzer-pub", stranger)
    shuf = ("shuffle", "--params", d / "params.json", "--mac-key", d / "mac.key", "--input",
            bdir, "--expected-users", 3)
    res = run(*shuf, "--out", tmp_path / "m.bin", "--analyzer-pub", d / "analyzer.pub")
    rep = json.loads(res.stderr.strip().splitlines()[-1])
    assert rep["n_forwarded"] == 2 and rep["rejected"] == {"wrong_key": 1}
    assert rep["n_dropped"] == 1
    # the stranger's user is really gone: 2 users left, below the n_min = 3 of the noise
    res = _analyze_enc(d, tmp_path / "m.bin", tmp_path / "o", "--mac-key", d / "mac.key",
                       code=1)
    assert "only 2 users contributed" in res.output
    res = run(*shuf, "--out", tmp_path / "m2.bin")  # not checked: the stranger is mixed in
    assert json.loads(res.stderr.strip().splitlines()[-1])["n_forwarded"] == 3
    res = run("shuffle", "--params", d / "params.json", "--input", bdir, "--out",
              tmp_path / "m3.bin", "--plaintext-simulation", "--analyzer-pub",
              d / "analyzer.pub", code=2)
    assert "--analyzer-pub" in res.output
