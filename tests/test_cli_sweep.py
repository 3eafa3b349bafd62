"""A sweep of bad command-line inputs: each one exits 1 or 2 with a one-line error naming the
option or the file, and never a traceback, a hang or a numpy MemoryError.

Exit 2 = usage error (a bad option value, a missing or contradictory option, a path that is
not a regular file); exit 1 = refusal (invalid file content, absurd sizes, refused release).
Everything runs in-process with click's CliRunner, against one small run directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct

import pytest
from click.testing import CliRunner

from shuffledp.cli import main
from shuffledp.protocol.crypto import KEY_ANALYZER_PRIVATE, KEY_ANALYZER_PUBLIC, encode_key_file

pytestmark = pytest.mark.skipif(os.name != "posix", reason="FIFOs and /dev/zero are POSIX")


def _ok(*args) -> None:
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output


def _write(path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)


def _sparse(path, size: int, head: bytes = b"") -> None:
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    """A run directory with valid and broken inputs for every role."""
    d = tmp_path_factory.mktemp("sweep")
    common = ["--grid", "4x4", "--n", "3", "--epsilon", "2", "--delta", "1e-3", "--B", "4"]
    _ok("setup", *common, "--out", d)
    _ok("setup", *common[:5], "3", "--delta", "1e-3", "--B", "4", "--out", d / "other",
        "--no-keys", "--plaintext-simulation")
    _ok("setup", *common, "--out", d / "round2")  # same parameters, another round id
    params = d / "params.json"
    _write(d / "u.csv", "x,y\n0.1,0.2\n0.7,0.9\n")
    for j in range(3):
        _ok("encode", "--params", params, "--input", d / "u.csv", "--out", d / "enc" / f"{j}.bin",
            "--analyzer-pub", d / "analyzer.pub")
        _ok("encode", "--params", params, "--input", d / "u.csv",
            "--out", d / "plain" / f"{j}.bin", "--plaintext-simulation")
    _ok("encode", "--params", d / "other" / "params.json", "--input", d / "u.csv",
        "--out", d / "otherb" / "0.bin", "--plaintext-simulation")
    _ok("encode", "--params", d / "round2" / "params.json", "--input", d / "u.csv",
        "--out", d / "round2b" / "0.bin", "--plaintext-simulation")
    _ok("shuffle", "--params", params, "--input", d / "enc", "--out", d / "m_enc.bin",
        "--mac-key", d / "mac.key")
    _ok("shuffle", "--params", params, "--input", d / "plain", "--out", d / "m_plain.bin",
        "--plaintext-simulation")
    _ok("shuffle", "--params", params, "--input", d / "plain", "--out", d / "m_keyed.bin",
        "--plaintext-simulation", "--mac-key", d / "mac.key")
    for j in range(2):
        _write(d / "plain2" / f"{j}.bin", (d / "plain" / f"{j}.bin").read_bytes())
    _ok("shuffle", "--params", params, "--input", d / "plain2", "--out", d / "m_drop.bin",
        "--plaintext-simulation", "--expected-users", "3")
    # special files
    os.mkfifo(d / "fifo")
    (d / "zero").symlink_to("/dev/zero")
    (d / "adir").mkdir()
    _write(d / "empty", b"")
    # parameter files
    _write(d / "list.json", "[]")
    _write(d / "obj.json", "{}")
    _write(d / "notjson.json", "{not json")
    _write(d / "latin1.json", b"{\xff}")
    _write(d / "deep.json", "[" * 100_000 + "]" * 100_000)
    p = json.loads(params.read_text())
    _write(d / "badr.json", json.dumps({**p, "r": 1}))
    _write(d / "badgrid.json", json.dumps({**p, "grid": "abc"}))
    _sparse(d / "big.json", 2 << 20)
    # keys
    _write(d / "short.key", b"k" * 10)
    _write(d / "long.key", b"k" * 33)
    _write(d / "zero.pub", encode_key_file(KEY_ANALYZER_PUBLIC, bytes(32)))  # low order
    _write(d / "wrong.key", encode_key_file(KEY_ANALYZER_PRIVATE, b"\x07" * 32))
    # points files
    points = {
        "header_only.csv": "x,y\n",
        "one_col.csv": "0.1\n0.2\n",
        "four_col.csv": "0.1,0.2,1,3\n",
        "x_range.csv": "1.2,0.5\n",
        "x_nan.csv": "nan,0.5\n",
        "neg_weight.csv": "0.1,0.5,-1\n",
        "zero_weight.csv": "0.1,0.5,0\n",
        "inf_weight.csv": "0.1,0.5,inf\n",
        "mixed_cols.csv": "0.1,0.5\n0.2,0.3,1\n",
        "word.csv": "0.1,0.5\n0.2,abc\n",
        "long_field.csv": "0.1,0.2\n0.1," + "a" * 200_000 + "\n",
        "latin1.csv": b"0.1,0.5\xff\n",
    }
    for name, content in points.items():
        _write(d / "pts" / name, content)
    _sparse(d / "pts" / "huge.csv", 100 << 20)
    # batch directories
    (d / "emptydir").mkdir()
    _write(d / "garbage" / "0.bin", b"not a batch")
    # mixed batches
    mixed = (d / "m_plain.bin").read_bytes()
    _write(d / "m_trunc.bin", mixed[:-3])
    _write(d / "m_trail.bin", mixed + b"\0")
    _write(d / "m_badrep.bin", mixed)
    rep = json.loads((d / "m_plain.bin.report.json").read_text())
    _write(d / "m_badrep.bin.report.json", json.dumps({**rep, "n_forwarded": 99}))
    _write(d / "m_notjsonrep.bin", mixed)
    _write(d / "m_notjsonrep.bin.report.json", "nope")
    _write(d / "m_notag.bin", mixed[:-32])
    # the encrypted mixed batch altered after the shuffler (no report next to these)
    enc = (d / "m_enc.bin").read_bytes()
    flipped = bytearray(enc)
    flipped[64 + 54 * 3 + 40] ^= 0x80
    _write(d / "m_flip.bin", bytes(flipped))
    dropped = bytearray(enc)
    struct.pack_into("<Q", dropped, 40, struct.unpack_from("<Q", dropped, 40)[0] + 1)
    _write(d / "m_ndrop.bin", bytes(dropped))
    stripped = bytearray(enc)
    stripped[48] = 0  # keyed flag cleared, tag replaced by the plain SHA-256 anyone can compute
    stripped[-32:] = hashlib.sha256(bytes(stripped[:-32])).digest()
    _write(d / "m_stripped.bin", bytes(stripped))
    # heatmap inputs
    csvs = {
        "empty.csv": "",
        "colour.csv": "user_id,x,y,colour\na,0.1,0.5,red\n",
        "missing_col.csv": "user_id,x\na,0.1\n",
        "range.csv": "user_id,x,y\na,1.5,0.5\n",
        "long.csv": "user_id,x,y\n" + "a" * 200_000 + ",0.1,0.2\n",
        "latin1.csv": b"user_id,x,y\n\xe9,0.1,0.2\n",
        "one_user.csv": "user_id,x,y\na,0.1,0.2\n",
        "snap.txt": "1\t2010-01-01T00:00:00Z\t30.1\t-97.7\t11\n2\tnot enough fields\n",
    }
    for name, content in csvs.items():
        _write(d / "in" / name, content)
    return d


def C(case_id: str, code: int, msg: str, *argv: str):
    return pytest.param(argv, code, msg, id=case_id)


SETUP = ("setup", "--grid", "4", "--n", "3", "--epsilon", "1")
ENC = ("encode", "--params", "{d}/params.json", "--input", "{d}/u.csv", "--out", "{d}/t/o.bin")
PUB = ("--analyzer-pub", "{d}/analyzer.pub")
SIM = "--plaintext-simulation"
SHUF = ("shuffle", "--params", "{d}/params.json", "--out", "{d}/t/m.bin")
AN = ("analyze", "--params", "{d}/params.json", "--out", "{d}/t/out")
KEY = ("--key", "{d}/analyzer.key")
MAC = ("--mac-key", "{d}/mac.key")
HM = ("heatmap", "--out", "{d}/t/hm", "--no-metrics", "--grid", "8")

CASES = [
    # ------------------------------------------------------------------ heatmap: options
    C("hm-epsilon-zero", 2, "--epsilon", *HM, "--epsilon", "0"),
    C("hm-epsilon-negative", 2, "--epsilon", *HM, "--epsilon", "-1"),
    C("hm-epsilon-nan", 2, "--epsilon", *HM, "--epsilon", "nan"),
    C("hm-epsilon-inf", 2, "--epsilon", *HM, "--epsilon", "inf"),
    C("hm-epsilon-text", 2, "--epsilon", *HM, "--epsilon", "one"),
    C("hm-w-zero", 2, "--w", *HM, "--w", "0"),
    C("hm-grid-zero", 2, "--grid", *HM, "--grid", "0x3"),
    C("hm-grid-text", 2, "--grid", *HM, "--grid", "banana"),
    C("hm-grid-65536", 1, "--grid 65536x65536", *HM, "--grid", "65536"),
    C("hm-grid-1e5-squared", 1, "--grid 100000x100000", *HM, "--grid", "100000x100000"),
    C("hm-grid-1e20", 1, "--allow-large", *HM, "--grid", "100000000000000000000"),
    C("hm-n-1e9", 1, "--n 1000000000", *HM, "--n", "1000000000"),
    C("hm-n-zero", 2, "--n", *HM, "--n", "0"),
    C("hm-sigma-negative", 2, "--sigma", *HM, "--sigma", "-1"),
    C("hm-sigma-nan", 2, "--sigma", *HM, "--sigma", "nan"),
    C("hm-top-percent-zero", 2, "--top-percent", *HM, "--top-percent", "0"),
    C("hm-top-percent-101", 2, "--top-percent", *HM, "--top-percent", "101"),
    C("hm-seed-negative", 2, "--seed", *HM, "--seed", "-1"),
    C("hm-data-seed-negative", 2, "--data-seed", *HM, "--data-seed", "-1"),
    C("hm-delta-above-one", 2, "--delta", *HM, "--model", "shuffle", "--delta", "1.5"),
    C("hm-delta-zero", 2, "--delta", *HM, "--model", "shuffle", "--delta", "0"),
    C("hm-B-zero", 2, "--B", *HM, "--model", "shuffle", "--B", "0"),
    C("hm-B-huge", 1, "--B 1000000000", *HM, "--model", "shuffle", "--B", "1000000000"),
    C("hm-shuffle-messages", 1, "messages per user", *HM, "--model", "shuffle", "--grid",
      "4096", "--n", "20"),
    C("hm-model-unknown", 2, "--model", *HM, "--model", "local"),
    C("hm-bbox-without-snap", 2, "--bbox", *HM, "--bbox", "0,1,0,1"),
    C("hm-snap-without-bbox", 2, "--bbox", *HM, "--input", "{d}/in/snap.txt", "--format",
      "snap"),
    C("hm-bbox-malformed", 2, "--bbox", *HM, "--input", "{d}/in/snap.txt", "--format", "snap",
      "--bbox", "1,2,3"),
    # ------------------------------------------------------------------ heatmap: --input
    C("hm-input-missing", 2, "--input", *HM, "--input", "{d}/nope.csv"),
    C("hm-input-directory", 2, "--input", *HM, "--input", "{d}/adir"),
    C("hm-input-fifo", 2, "--input", *HM, "--input", "{d}/fifo"),
    C("hm-input-dev-zero", 2, "--input", *HM, "--input", "{d}/zero"),
    C("hm-input-empty", 1, "empty.csv", *HM, "--input", "{d}/in/empty.csv"),
    C("hm-input-unknown-column", 1, "colour", *HM, "--input", "{d}/in/colour.csv"),
    C("hm-input-missing-column", 1, "missing_col.csv", *HM, "--input",
      "{d}/in/missing_col.csv"),
    C("hm-input-x-range", 1, "range.csv", *HM, "--input", "{d}/in/range.csv"),
    C("hm-input-long-field", 1, "long.csv", *HM, "--input", "{d}/in/long.csv"),
    C("hm-input-not-utf8", 1, "latin1.csv", *HM, "--input", "{d}/in/latin1.csv"),
    C("hm-input-one-user-shuffle", 1, "one_user.csv", *HM, "--model", "shuffle", "--input",
      "{d}/in/one_user.csv"),
    C("hm-snap-malformed-line", 1, "line 2", *HM, "--input", "{d}/in/snap.txt", "--format",
      "snap", "--bbox", "30,31,-98,-97"),
    C("hm-out-is-a-file", 2, "--out", "heatmap", "--out", "{d}/u.csv", "--grid", "8"),
    # ------------------------------------------------------------------ setup
    C("setup-n-one", 2, "--n", *SETUP[:4], "1", "--epsilon", "1", "--out", "{d}/t/s"),
    C("setup-n-text", 2, "--n", *SETUP[:4], "many", "--epsilon", "1", "--out", "{d}/t/s"),
    C("setup-n-huge", 1, "--n 1000000000000", *SETUP[:4], "1000000000000", "--epsilon", "1",
      "--out", "{d}/t/s"),
    C("setup-epsilon-zero", 2, "--epsilon", *SETUP[:6], "0", "--out", "{d}/t/s"),
    C("setup-epsilon-nan", 2, "--epsilon", *SETUP[:6], "nan", "--out", "{d}/t/s"),
    C("setup-epsilon-tiny", 1, "--epsilon 1e-300", *SETUP[:6], "1e-300", "--out", "{d}/t/s"),
    C("setup-delta-zero", 2, "--delta", *SETUP, "--delta", "0", "--out", "{d}/t/s"),
    C("setup-delta-one", 2, "--delta", *SETUP, "--delta", "1", "--out", "{d}/t/s"),
    C("setup-B-zero", 2, "--B", *SETUP, "--B", "0", "--out", "{d}/t/s"),
    C("setup-w-zero", 2, "--w", *SETUP, "--w", "0", "--out", "{d}/t/s"),
    C("setup-dropout-one", 2, "--dropout", *SETUP, "--dropout", "1", "--out", "{d}/t/s"),
    C("setup-dropout-negative", 2, "--dropout", *SETUP, "--dropout", "-0.1", "--out",
      "{d}/t/s"),
    C("setup-grid-zero", 2, "--grid", "setup", "--grid", "0", "--n", "3", "--epsilon", "1",
      "--out", "{d}/t/s"),
    C("setup-grid-1e5-squared", 1, "--grid 100000x100000", "setup", "--grid", "100000x100000",
      "--n", "50", "--epsilon", "1", "--out", "{d}/t/s"),
    C("setup-no-keys-deployment", 2, "--no-keys", *SETUP, "--no-keys", "--out", "{d}/t/s"),
    C("setup-existing-key", 1, "--force", *SETUP, "--out", "{d}"),
    C("setup-out-is-a-file", 2, "--out", *SETUP, "--out", "{d}/u.csv"),
    # ------------------------------------------------------------------ encode: options
    C("enc-no-analyzer-pub", 2, "--analyzer-pub", *ENC),
    C("enc-seed-refused", 2, "--seed", *ENC, *PUB, "--seed", "3"),
    C("enc-pub-and-simulation", 2, "--analyzer-pub", *ENC, *PUB, SIM),
    # ------------------------------------------------------------------ encode: --params
    C("enc-params-missing", 2, "--params", "encode", "--params", "{d}/nope.json", "--input",
      "{d}/u.csv", "--out", "{d}/t/o.bin", SIM),
    C("enc-params-directory", 2, "--params", "encode", "--params", "{d}/adir", "--input",
      "{d}/u.csv", "--out", "{d}/t/o.bin", SIM),
    *[C(f"enc-params-{name}", code, msg, "encode", "--params", f"{{d}}/{file}", "--input",
        "{d}/u.csv", "--out", "{d}/t/o.bin", SIM)
      for name, file, code, msg in [
          ("fifo", "fifo", 2, "--params"),
          ("dev-zero", "zero", 2, "--params"),
          ("empty", "empty", 1, "--params"),
          ("json-list", "list.json", 1, "list.json"),
          ("json-object-empty", "obj.json", 1, "obj.json"),
          ("not-json", "notjson.json", 1, "notjson.json"),
          ("not-utf8", "latin1.json", 1, "latin1.json"),
          ("deeply-nested", "deep.json", 1, "deep.json"),
          ("r-one", "badr.json", 1, "badr.json"),
          ("grid-text", "badgrid.json", 1, "badgrid.json"),
          ("too-large", "big.json", 1, "big.json"),
      ]],
    # ------------------------------------------------------------------ encode: --points
    *[C(f"enc-points-{name}", code, msg, "encode", "--params", "{d}/params.json", "--input",
        f"{{d}}/{file}", "--out", "{d}/t/o.bin", SIM)
      for name, file, code, msg in [
          ("fifo", "fifo", 2, "--input"),
          ("dev-zero", "zero", 2, "--input"),
          ("empty", "empty", 1, "--input"),
          ("header-only", "pts/header_only.csv", 1, "header_only.csv"),
          ("one-column", "pts/one_col.csv", 1, "one_col.csv, line 1"),
          ("four-columns", "pts/four_col.csv", 1, "four_col.csv, line 1"),
          ("x-out-of-range", "pts/x_range.csv", 1, "x_range.csv, line 1"),
          ("x-nan", "pts/x_nan.csv", 1, "x_nan.csv, line 1"),
          ("negative-weight", "pts/neg_weight.csv", 1, "neg_weight.csv, line 1"),
          ("zero-weight", "pts/zero_weight.csv", 1, "zero_weight.csv"),
          ("infinite-weight", "pts/inf_weight.csv", 1, "inf_weight.csv, line 1"),
          ("mixed-columns", "pts/mixed_cols.csv", 1, "mixed_cols.csv, line 2"),
          ("word", "pts/word.csv", 1, "word.csv, line 2"),
          ("long-field", "pts/long_field.csv", 1, "long_field.csv, line 2"),
          ("not-utf8", "pts/latin1.csv", 1, "latin1.csv"),
          ("too-large", "pts/huge.csv", 1, "huge.csv"),
      ]],
    # ------------------------------------------------------------------ encode: --analyzer-pub
    *[C(f"enc-pub-{name}", code, "--analyzer-pub", *ENC, "--analyzer-pub", f"{{d}}/{file}")
      for name, file, code in [("fifo", "fifo", 2), ("dev-zero", "zero", 2),
                               ("short", "short.key", 1), ("long", "long.key", 1),
                               ("empty", "empty", 1), ("low-order-point", "zero.pub", 1)]],
    # ------------------------------------------------------------------ shuffle
    C("shuf-empty-dir", 1, "no user batches", *SHUF, *MAC, "--input", "{d}/emptydir"),
    # a directory, FIFO or link to /dev/zero named like a batch is skipped and counted, not
    # an error: test_cli_roles.py::test_shuffle_ignores_and_counts_entries_...
    C("shuf-plaintext-batches-default", 1, "pass --plaintext-simulation", *SHUF, *MAC,
      "--input", "{d}/plain"),
    C("shuf-encrypted-batches-simulation", 1, "are encrypted; pass --encrypted", *SHUF,
      "--input", "{d}/enc", SIM),
    C("shuf-all-garbage", 1, "malformed", *SHUF, "--input", "{d}/garbage", SIM),
    C("shuf-other-params", 1, "wrong_digest", *SHUF, "--input", "{d}/otherb", SIM),
    C("shuf-other-round", 1, "another setup", *SHUF, "--input", "{d}/round2b", SIM),
    C("shuf-encrypted-without-mac-key", 2, "--mac-key", *SHUF, "--input", "{d}/enc"),
    *[C(f"shuf-mac-key-{name}", code, "--mac-key", *SHUF, "--input", "{d}/enc", "--mac-key",
        f"{{d}}/{file}")
      for name, file, code in [("fifo", "fifo", 2), ("dev-zero", "zero", 2),
                               ("directory", "adir", 2), ("missing", "nope.key", 2),
                               ("short", "short.key", 1), ("long", "long.key", 1),
                               ("empty", "empty", 1)]],
    C("shuf-memory-limit-zero", 2, "--memory-limit", *SHUF, *MAC, "--input", "{d}/enc",
      "--memory-limit", "0"),
    C("shuf-expected-users-zero", 2, "--expected-users", *SHUF, "--input", "{d}/plain", SIM,
      "--expected-users", "0"),
    C("shuf-expected-users-fewer", 2, "--expected-users", *SHUF, "--input", "{d}/plain", SIM,
      "--expected-users", "2"),
    C("shuf-expected-users-above-n", 2, "--expected-users", *SHUF, "--input", "{d}/plain",
      SIM, "--expected-users", "4"),
    C("shuf-out-in-in-dir", 2, "--out", "shuffle", "--params", "{d}/params.json", "--input",
      "{d}/plain", SIM, "--out", "{d}/plain/mixed.bin"),
    C("shuf-in-dir-missing", 2, "--input", *SHUF, "--input", "{d}/nope"),
    C("shuf-params-json-list", 1, "list.json", "shuffle", "--params", "{d}/list.json",
      "--input", "{d}/plain", "--out", "{d}/t/m.bin"),
    # ------------------------------------------------------------------ analyze
    C("an-in-fifo", 2, "--input", *AN, *KEY, "--input", "{d}/fifo"),
    C("an-in-dev-zero", 2, "--input", *AN, *KEY, "--input", "{d}/zero"),
    C("an-in-empty", 1, "empty", *AN, *KEY, "--input", "{d}/empty"),
    C("an-in-garbage", 1, "garbage/0.bin", *AN, *KEY, "--input", "{d}/garbage/0.bin"),
    C("an-in-user-batch", 1, "wrong_kind: expected an encrypted mixed batch", *AN, *KEY,
      "--input", "{d}/enc/0.bin"),
    C("an-in-truncated", 1, "m_trunc.bin", *AN, SIM, "--input", "{d}/m_trunc.bin"),
    C("an-in-trailing-bytes", 1, "m_trail.bin", *AN, SIM, "--input", "{d}/m_trail.bin"),
    C("an-in-tag-missing", 1, "32 (tag)", *AN, SIM, "--input", "{d}/m_notag.bin"),
    C("an-in-other-params", 1, "other protocol parameters", "analyze", "--params",
      "{d}/other/params.json", "--out", "{d}/t/out", SIM, "--input", "{d}/m_plain.bin"),
    C("an-in-other-round", 1, "each setup draws a fresh round id", "analyze", "--params",
      "{d}/round2/params.json", "--out", "{d}/t/out", SIM, "--input", "{d}/m_plain.bin"),
    C("an-in-record-altered", 1, "tag does not verify", *AN, *KEY, *MAC, "--input",
      "{d}/m_flip.bin"),
    C("an-in-n-dropped-altered", 1, "tag does not verify", *AN, *KEY, *MAC, "--input",
      "{d}/m_ndrop.bin"),
    C("an-in-keyed-tag-stripped", 1, "no keyed tag", *AN, *KEY, *MAC, "--input",
      "{d}/m_stripped.bin"),
    C("an-encrypted-without-mac-key", 2, "--mac-key", *AN, *KEY, "--input", "{d}/m_enc.bin"),
    C("an-keyed-plaintext-without-mac-key", 2, "--mac-key", *AN, SIM, "--input",
      "{d}/m_keyed.bin"),
    C("an-mac-key-with-unkeyed-batch", 1, "--mac-key", *AN, SIM, *MAC, "--input",
      "{d}/m_plain.bin"),
    C("an-mac-key-of-another-run", 1, "--mac-key", *AN, *KEY, "--mac-key",
      "{d}/round2/mac.key", "--input", "{d}/m_enc.bin"),
    *[C(f"an-mac-key-{name}", code, "--mac-key", *AN, *KEY, "--mac-key", f"{{d}}/{file}",
        "--input", "{d}/m_enc.bin")
      for name, file, code in [("fifo", "fifo", 2), ("dev-zero", "zero", 2),
                               ("short", "short.key", 1), ("long", "long.key", 1)]],
    C("an-workers-zero", 2, "--workers", *AN, *KEY, *MAC, "--input", "{d}/m_enc.bin",
      "--workers", "0"),
    C("an-encrypted-without-key", 2, "--key", *AN, "--input", "{d}/m_enc.bin"),
    C("an-encrypted-with-simulation", 2, "--plaintext-simulation", *AN, SIM, "--input",
      "{d}/m_enc.bin"),
    C("an-plaintext-without-flag", 2, "--plaintext-simulation", *AN, "--input", "{d}/m_plain.bin"),
    C("an-key-and-simulation", 2, "--key", *AN, *KEY, SIM, "--input", "{d}/m_enc.bin"),
    C("an-key-short", 1, "--key", *AN, "--key", "{d}/short.key", *MAC, "--input", "{d}/m_enc.bin"),
    C("an-key-long", 1, "--key", *AN, "--key", "{d}/long.key", *MAC, "--input", "{d}/m_enc.bin"),
    C("an-key-fifo", 2, "--key", *AN, "--key", "{d}/fifo", *MAC, "--input", "{d}/m_enc.bin"),
    C("an-key-dev-zero", 2, "--key", *AN, "--key", "{d}/zero", *MAC, "--input", "{d}/m_enc.bin"),
    C("an-key-wrong", 1, "m_enc.bin decrypts", *AN, "--key", "{d}/wrong.key", *MAC, "--input",
      "{d}/m_enc.bin"),
    C("an-report-inconsistent", 1, "m_badrep.bin.report.json", *AN, SIM, "--input",
      "{d}/m_badrep.bin"),
    C("an-report-not-json", 1, "m_notjsonrep.bin.report.json", *AN, SIM, "--input",
      "{d}/m_notjsonrep.bin"),
    C("an-report-fifo", 2, "--shuffler-report", *AN, SIM, "--input", "{d}/m_plain.bin",
      "--shuffler-report", "{d}/fifo"),
    C("an-report-missing", 2, "--shuffler-report", *AN, SIM, "--input", "{d}/m_plain.bin",
      "--shuffler-report", "{d}/nope.json"),
    C("an-too-many-dropouts", 1, "refusing to release", *AN, SIM, "--input", "{d}/m_drop.bin"),
    C("an-out-is-a-file", 2, "--out", "analyze", "--params", "{d}/params.json",
      "--out", "{d}/u.csv", SIM, "--input", "{d}/m_plain.bin"),
]


@pytest.fixture(autouse=True)
def no_hang():
    def boom(signum, frame):
        raise TimeoutError("command blocked for 20 s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("argv,code,msg", CASES)
def test_bad_input_is_a_one_line_error(d, argv, code, msg):
    args = [a.format(d=d) for a in argv]
    res = CliRunner().invoke(main, args)
    # an unexpected exception inside the command would show up here, not as SystemExit
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, res.output
    assert msg.format(d=d) in errors[0], res.output


def test_the_sweep_is_large():
    assert len(CASES) >= 100
    assert len({c.id for c in CASES}) == len(CASES)


def test_b_sweep_reports_encrypted_bytes_and_plots_utility_against_bits(tmp_path):
    """The B sweep's table and plots carry the encrypted batch (what a device uploads) next
    to the paper's bits and the plaintext batch, and utility_vs_bits.png puts Fig. 12 and
    13 together."""
    pytest.importorskip("matplotlib")
    from shuffledp.grid import Grid
    from shuffledp.protocol.params import derive_params
    from shuffledp.sweep import read_runs
    from shuffledp.sweep.plot import wire_bytes, with_wire_bytes

    out = tmp_path / "sw"
    res = CliRunner().invoke(main, ["sweep", "--param", "B", "--values", "1,16", "--repeats",
                                    "2", "--grid", "8", "--n", "10", "--no-emd", "--quiet",
                                    "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "utility_vs_bits.png").stat().st_size > 0
    assert (out / "bits_per_user.png").stat().st_size > 0
    rows = read_runs(out)
    for b in (1, 16):
        # the sweep's default --smoothing none runs the printed budget split (as heatmap does)
        p = derive_params(Grid(8, 8), 10, epsilon=5.0, delta=1e-5, B=b, dropout=0.0,
                          budget="paper")
        row = next(r for r in rows if r["model"] == "shuffle" and r["B"] == b)
        assert wire_bytes(row) == {"bytes_per_user": p.bytes_per_user,
                                   "encrypted_bytes_per_user": p.encrypted_bytes_per_user}
        line = next(ln for ln in res.output.splitlines() if ln.split()[:2] == [str(b), "8x8"])
        assert line.split()[-1] == f"{p.encrypted_bytes_per_user / 1e6:.3f}"
    assert all(r["encrypted_bytes_per_user"] is None for r in with_wire_bytes(rows)
               if r["model"] != "shuffle")
    # a record whose plaintext size the parameters do not give is not guessed at
    assert wire_bytes({**row, "bytes_per_user": row["bytes_per_user"] + 1}) is None
