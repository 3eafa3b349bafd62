"""Collect once: one release per round (the release ledger), n_min after unreadable batches.

Two authentic mixed batches of one round (users 0-5, then users 0-4) used to be released
both; the difference of their sums is user 5's noisy vector. And one device encrypting to a
wrong analyzer key used to sink the whole round even with dropout headroom.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from shuffle_helpers import params_for

from shuffledp import Grid
from shuffledp.analyzers.heatmap.modular import ReleaseRefused, accumulate_mixed, release_mixed
from shuffledp.analyzers.heatmap.release_ledger import (
    LedgerError,
    ReleaseLedger,
    RoundAlreadyReleased,
)
from shuffledp.cli import main
from shuffledp.encoders.encoder import user_batch
from shuffledp.protocol.crypto import generate_analyzer_key, generate_mac_key, public_bytes
from shuffledp.protocol.shuffler import Shuffler

CLI = [sys.executable, "-c", "from shuffledp.cli import main; main()"]
RNG = np.random.default_rng(7)


def run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    return res


# --------------------------------------------------------------------------- library
@pytest.fixture(scope="module")
def six():
    """Parameters for 6 users with n_min = 5, the analyzer's keys, 6 honest batches and one
    batch encrypted to another analyzer key."""
    p = params_for(Grid(4, 4), n=6, B=4, dropout=0.2)
    assert p.n_min == 5
    key, mac = generate_analyzer_key(), generate_mac_key()
    pub = public_bytes(key)
    batches = [user_batch(p, np.array([j, 15 - j]), np.ones(2), analyzer_public=pub)
               for j in range(6)]
    wrong = [user_batch(p, np.array([3]), np.ones(1),
                        analyzer_public=public_bytes(generate_analyzer_key())) for _ in range(2)]
    return p, key, mac, batches, wrong


def _mix(p, mac, batches) -> bytes:
    out = io.BytesIO()
    with Shuffler(p, encrypted=True, mac_key=mac) as s:
        for b in batches:
            assert s.submit(b)
        s.mix_to(out)
    return out.getvalue()


def test_second_release_of_a_round_is_refused_even_for_a_subset(six, tmp_path):
    """Users 0-5 released, then users 0-4 of the same round: refused, by a ledger object
    reopened on the file as another process would (persistently)."""
    p, key, mac, batches, _ = six
    ledger = tmp_path / "releases.jsonl"
    first = release_mixed(p, _mix(p, mac, batches), key=key, mac_key=mac, ledger=ledger)
    assert first.protocol["n_users"] == 6
    assert first.protocol["release_ledger"]["repeat"] is False
    subset = _mix(p, mac, batches[:5])
    with pytest.raises(RoundAlreadyReleased, match="already released"):
        release_mixed(p, subset, key=key, mac_key=mac, ledger=ReleaseLedger(ledger))
    # the same users again, in another shuffle: the same sums, the same release (a repeat)
    again = release_mixed(p, _mix(p, mac, batches), key=key, mac_key=mac, ledger=ledger)
    assert again.protocol["release_ledger"]["repeat"] is True
    np.testing.assert_array_equal(again.raw, first.raw)
    entries = ReleaseLedger(ledger).entries()
    assert len(entries) == 1 and entries[0]["round_id"] == p.round_id.hex()


def test_the_default_ledger_refuses_a_second_release_within_the_process(six):
    p, key, mac, batches, _ = six
    q = params_for(Grid(4, 4), n=6, B=4, dropout=0.2)  # a fresh round id
    pub = public_bytes(key)
    mine = [user_batch(q, np.array([j]), np.ones(1), analyzer_public=pub) for j in range(6)]
    release_mixed(q, _mix(q, mac, mine), key=key, mac_key=mac)
    with pytest.raises(RoundAlreadyReleased):
        release_mixed(q, _mix(q, mac, mine[1:]), key=key, mac_key=mac)


def test_a_batch_encrypted_to_a_wrong_key_is_dropped_alone(six, tmp_path):
    """6 users, one encrypting to a wrong analyzer key, n_min 5: released with 5 users, 1
    counted as dropped (the round used to be refused)."""
    p, key, mac, batches, wrong = six
    mixed = _mix(p, mac, batches[:5] + wrong[:1])
    rel = release_mixed(p, mixed, key=key, mac_key=mac, ledger=tmp_path / "l.jsonl")
    assert rel.protocol["n_users"] == 5 and rel.protocol["n_unreadable_batches"] == 1
    assert rel.protocol["n_dropped"] == 1
    assert rel.protocol["messages_failed_authentication"] == p.messages_per_user
    # exactly the sums of the five readable users
    ref = accumulate_mixed(p, _mix(p, mac, batches[:5]), key=key, mac_key=mac).accumulator
    np.testing.assert_array_equal(
        accumulate_mixed(p, mixed, key=key, mac_key=mac).accumulator.modular_sums(5),
        ref.modular_sums(5))


def test_unreadable_batches_below_n_min_are_refused(six, tmp_path):
    p, key, mac, batches, wrong = six
    mixed = _mix(p, mac, batches[:4] + wrong)
    with pytest.raises(ReleaseRefused, match=r"2 of the 6 users' batches could not be read.*"
                                             r"only 4 users contributed.*n_min = 5"):
        release_mixed(p, mixed, key=key, mac_key=mac, ledger=tmp_path / "l.jsonl")
    assert not (tmp_path / "l.jsonl").exists()


def test_part_of_a_batch_unreadable_is_refused_naming_the_coordinate(six, tmp_path):
    """One record of a batch sealed to another key: its other records would be summed
    without it, so the release is refused (never a meaningless sum)."""
    p, key, mac, batches, wrong = six
    rb = 4 + 32 + p.share_bytes + 16
    good, bad = bytearray(batches[5]), wrong[0]
    i = next(i for i in range(p.messages_per_user)
             if good[64 + i * rb:68 + i * rb] == bad[64 + i * rb:68 + i * rb])
    good[64 + i * rb:64 + (i + 1) * rb] = bad[64 + i * rb:64 + (i + 1) * rb]
    coord = int.from_bytes(good[64 + i * rb:68 + i * rb], "little")
    mixed = _mix(p, mac, batches[:5] + [bytes(good)])
    with pytest.raises(ReleaseRefused, match=rf"not whole users' batches.*coordinate {coord}: 1"):
        release_mixed(p, mixed, key=key, mac_key=mac, ledger=tmp_path / "l.jsonl")


@pytest.mark.parametrize("keep", [slice(1, None), slice(None, 1)], ids=["first", "last"])
def test_a_ledger_that_does_not_verify_refuses_every_release(six, tmp_path, keep):
    """An entry removed (the first: the chain breaks; the last: the head records more
    entries) refuses every release: a deleted entry could let a round be released twice."""
    p, key, mac, batches, _ = six
    q = params_for(Grid(4, 4), n=6, B=4, dropout=0.2)
    ledger = tmp_path / "l.jsonl"
    book = ReleaseLedger(ledger)
    book.record(round_id=q.round_id, digest=q.digest, sums_sha256="a" * 64, n_users=6)
    book.record(round_id=p.round_id, digest=p.digest, sums_sha256="b" * 64, n_users=6)
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(lines[keep]))
    with pytest.raises(LedgerError, match="fails verification.*no release is recorded"):
        release_mixed(p, _mix(p, mac, batches), key=key, mac_key=mac, ledger=ledger)


def _race(path: str, k: int, go, out) -> None:
    go.wait()
    try:
        ReleaseLedger(path).record(round_id=b"r" * 16, digest=bytes(16),
                                   sums_sha256=f"{k:064x}", n_users=6)
        out.put(("recorded", k))
    except RoundAlreadyReleased:
        out.put(("refused", k))


def test_racing_analyzers_record_a_round_once(tmp_path):
    """Six processes record six different releases of one round at once: the lock lets
    exactly one in."""
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path / "l.jsonl"), k, go, out))
             for k in range(6)]
    for pr in procs:
        pr.start()
    go.set()
    for pr in procs:
        pr.join(30)
    results = sorted(out.get(timeout=5)[0] for _ in procs)
    assert results == ["recorded"] + ["refused"] * 5
    assert len(ReleaseLedger(tmp_path / "l.jsonl").entries()) == 1


# --------------------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def cli_round(tmp_path_factory):
    """`setup` for 6 users (n_min 5), 6 encoded users, and a seventh device's batch
    encrypted to another setup's analyzer.pub."""
    d = tmp_path_factory.mktemp("collect")
    run("setup", "--grid", "4x4", "--n", 6, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
        "--dropout", 0.2, "--out", d / "run")
    run("setup", "--grid", "4x4", "--n", 6, "--epsilon", 2, "--delta", 1e-3, "--B", 4,
        "--out", d / "other")
    for j in range(6):
        pts = d / f"u{j}.csv"
        pts.write_text("\n".join(f"{a},{b}" for a, b in RNG.random((3, 2))))
        run("encode", "--params", d / "run" / "params.json", "--analyzer-pub",
            d / "run" / "analyzer.pub", "--input", pts, "--out", d / "all" / f"u{j}.bin")
    run("encode", "--params", d / "run" / "params.json", "--analyzer-pub",
        d / "other" / "analyzer.pub", "--input", d / "u0.csv", "--out", d / "wrong.bin")
    return d


def _shuffle(d, out, names):
    src = out.parent / (out.stem + "-in")
    src.mkdir()
    for name in names:
        (src / name).write_bytes(((d / "all" / name) if name != "wrong.bin"
                                  else d / "wrong.bin").read_bytes())
    run("shuffle", "--params", d / "run" / "params.json", "--mac-key", d / "run" / "mac.key",
        "--input", src, "--out", out)
    return out


def _analyze_cmd(d, mixed, out, ledger):
    return CLI + ["analyze", "--params", str(d / "run" / "params.json"), "--key",
                  str(d / "run" / "analyzer.key"), "--mac-key", str(d / "run" / "mac.key"),
                  "--input", str(mixed), "--out", str(out), "--release-ledger", str(ledger)]


def test_analyze_refuses_the_second_release_of_a_round_across_processes(cli_round, tmp_path):
    d = cli_round
    full = _shuffle(d, tmp_path / "m6.bin", [f"u{j}.bin" for j in range(6)])
    part = _shuffle(d, tmp_path / "m5.bin", [f"u{j}.bin" for j in range(5)])
    ledger = tmp_path / "releases.jsonl"
    one = subprocess.run(_analyze_cmd(d, full, tmp_path / "o1", ledger), capture_output=True,
                         text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    # --quiet: under load a progress bar would join the one line of the refusal on stderr
    two = subprocess.run(_analyze_cmd(d, part, tmp_path / "o2", ledger) + ["--quiet"],
                         capture_output=True, text=True, timeout=120)
    assert two.returncode == 1 and "Traceback" not in two.stderr
    assert "already released" in two.stderr and str(ledger) in two.stderr
    assert len(two.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o2").exists()
    # the first batch again reproduces the same release
    three = subprocess.run(_analyze_cmd(d, full, tmp_path / "o3", ledger), capture_output=True,
                           text=True, timeout=120)
    assert three.returncode == 0, three.stderr
    rep = json.loads((tmp_path / "o3" / "report.json").read_text())
    assert rep["protocol"]["release_ledger"]["repeat"] is True
    np.testing.assert_array_equal(np.load(tmp_path / "o1" / "raw.npy"),
                                  np.load(tmp_path / "o3" / "raw.npy"))


def test_analyze_uses_a_ledger_next_to_params_by_default(cli_round, tmp_path):
    d = cli_round
    # a copy of the run's params (a fresh folder, so the default ledger is this test's own)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "params.json").write_bytes((d / "run" / "params.json").read_bytes())
    full = _shuffle(d, tmp_path / "m6.bin", [f"u{j}.bin" for j in range(6)])
    part = _shuffle(d, tmp_path / "m5.bin", [f"u{j}.bin" for j in range(5)])
    args = ["--params", tmp_path / "run" / "params.json", "--key", d / "run" / "analyzer.key",
            "--mac-key", d / "run" / "mac.key"]
    run("analyze", *args, "--input", part, "--out", tmp_path / "o1")
    res = run("analyze", *args, "--input", full, "--out", tmp_path / "o2", code=1)
    assert "already released" in res.output
    assert (tmp_path / "run" / "releases.jsonl").exists()


def test_analyze_drops_a_batch_encrypted_to_a_wrong_key(cli_round, tmp_path):
    d = cli_round
    mixed = _shuffle(d, tmp_path / "m.bin", [f"u{j}.bin" for j in range(5)] + ["wrong.bin"])
    run("analyze", "--params", d / "run" / "params.json", "--key", d / "run" / "analyzer.key",
        "--mac-key", d / "run" / "mac.key", "--input", mixed, "--out", tmp_path / "o",
        "--release-ledger", tmp_path / "l.jsonl")
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["protocol"]["n_users"] == 5 and rep["protocol"]["n_unreadable_batches"] == 1
    assert rep["protocol"]["n_dropped"] == 1


def test_analyze_refuses_a_mixed_batch_below_n_min(cli_round, tmp_path):
    """A round closed with 4 of 6 users (n_min 5) is not released."""
    d = cli_round
    mixed = _shuffle(d, tmp_path / "m.bin", [f"u{j}.bin" for j in range(4)])
    res = run("analyze", "--params", d / "run" / "params.json", "--key",
              d / "run" / "analyzer.key", "--mac-key", d / "run" / "mac.key", "--input", mixed,
              "--out", tmp_path / "o", "--release-ledger", tmp_path / "l.jsonl", code=1)
    assert "only 4 users contributed" in res.output and "n_min = 5" in res.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "l.jsonl").exists()


def test_analyze_names_a_wrong_key(cli_round, tmp_path):
    d = cli_round
    mixed = _shuffle(d, tmp_path / "m.bin", [f"u{j}.bin" for j in range(5)])
    res = run("analyze", "--params", d / "run" / "params.json", "--key",
              d / "other" / "analyzer.key", "--mac-key", d / "run" / "mac.key", "--input", mixed,
              "--out", tmp_path / "o", "--release-ledger", tmp_path / "l.jsonl", code=1)
    assert "--key" in res.output and "none of the first 64 messages" in res.output
