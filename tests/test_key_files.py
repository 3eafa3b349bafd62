"""Typed key files: every command checks the kind of key it is given.

Regression: key files were 32 raw bytes, so `encode --analyzer-pub mac.key` encrypted every
message to a "public key" made of the MAC key's bytes, and the round was lost.
"""

from __future__ import annotations

import base64
import os

import pytest
from click.testing import CliRunner

from shuffledp.cli import main
from shuffledp.protocol.crypto import (
    KEY_ANALYZER_PRIVATE,
    KEY_ANALYZER_PUBLIC,
    KEY_FILE_VERSION,
    KEY_KINDS,
    KEY_MAC,
    KeyFileError,
    decode_key_file,
    encode_key_file,
    generate_analyzer_key,
    key_id,
    private_bytes,
    public_bytes,
)


def run(*args, code=0):
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    return res


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    run("setup", "--grid", "4", "--n", 3, "--epsilon", 1, "--B", 4, "--out", d)
    (d / "p.csv").write_text("0.1,0.2\n")
    return d


@pytest.mark.parametrize("kind", list(KEY_KINDS))
def test_round_trip_and_header(kind):
    k = generate_analyzer_key()
    raw = public_bytes(k) if kind == KEY_ANALYZER_PUBLIC else (
        private_bytes(k) if kind == KEY_ANALYZER_PRIVATE else os.urandom(32))
    text = encode_key_file(kind, raw)
    lines = text.decode().splitlines()
    assert lines[0] == f"-----BEGIN SHUFFLEDP {kind}-----"
    assert lines[1] == f"Version: {KEY_FILE_VERSION}" and lines[3] == f"Key-Id: {key_id(kind, raw)}"
    assert lines[-1] == f"-----END SHUFFLEDP {kind}-----"
    assert decode_key_file(text, kind) == raw


def test_both_halves_of_a_key_pair_show_one_key_id():
    k = generate_analyzer_key()
    assert key_id(KEY_ANALYZER_PRIVATE, private_bytes(k)) == key_id(KEY_ANALYZER_PUBLIC,
                                                                    public_bytes(k))


def test_encode_refuses_the_mac_key_as_the_analyzer_public_key(keys, tmp_path):
    res = run("encode", "--params", keys / "params.json", "--analyzer-pub", keys / "mac.key",
              "--input", keys / "p.csv", "--out", tmp_path / "u.bin", code=1)
    assert res.output.strip() == (
        f"Error: --analyzer-pub {keys / 'mac.key'}: holds the shuffler-analyzer MAC key (MAC "
        "KEY), not the analyzer's public key; pass analyzer.pub, written by `shuffledp setup`")
    assert not (tmp_path / "u.bin").exists()


def test_encode_refuses_the_private_key_and_says_it_stays_on_the_analyzer(keys, tmp_path):
    res = run("encode", "--params", keys / "params.json", "--analyzer-pub",
              keys / "analyzer.key", "--input", keys / "p.csv", "--out", tmp_path / "u.bin",
              code=1)
    assert "holds the analyzer's private key" in res.output and "never on a device" in res.output


@pytest.mark.parametrize("cmd,option,given,want", [
    ("analyze", "--key", "mac.key", "the analyzer's private key"),
    ("analyze", "--mac-key", "analyzer.pub", "the shuffler-analyzer MAC key"),
    ("shuffle", "--mac-key", "analyzer.key", "the shuffler-analyzer MAC key"),
])
def test_every_command_checks_the_kind(keys, tmp_path, cmd, option, given, want):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.bin").write_bytes(b"x")
    base = (["shuffle", "--input", tmp_path / "b", "--out", tmp_path / "m.bin"] if cmd ==
            "shuffle" else ["analyze", "--input", keys / "p.csv", "--out", tmp_path / "o"])
    res = run(*base, "--params", keys / "params.json", option, keys / given, code=1)
    assert f"{option} {keys / given}: holds" in res.output and f"not {want}" in res.output


def test_untyped_raw_key_is_refused_with_the_reason(keys, tmp_path):
    raw = tmp_path / "old.pub"
    raw.write_bytes(decode_key_file((keys / "analyzer.pub").read_bytes(), KEY_ANALYZER_PUBLIC))
    res = run("encode", "--params", keys / "params.json", "--analyzer-pub", raw, "--input",
              keys / "p.csv", "--out", tmp_path / "u.bin", code=1)
    assert "32 raw bytes without a type header" in res.output and "shuffledp setup" in res.output


def _edit(text: bytes, old: bytes, new: bytes) -> bytes:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("edit,match", [
    (lambda t: _edit(t, b"Version: 1", b"Version: 2"), "format version '2'.*upgrade"),
    (lambda t: _edit(t, b"Algorithm: X25519", b"Algorithm: P-256"), "algorithm 'P-256'"),
    (lambda t: t[:-40], "truncated key file"),
    (lambda t: _edit(t, b"Key-Id: ", b"Key-Id: 0"), "Key-Id .* does not match"),
    (lambda t: t.replace(t.splitlines()[5], base64.b64encode(os.urandom(32))),
     "does not match the key"),
    (lambda t: t.replace(t.splitlines()[5], b"!!!!"), "not valid base64"),
    (lambda t: b"hello", "not a shuffledp key file"),
    (lambda t: t.replace(b"PUBLIC KEY", b"SECRET THING"), "unknown key kind"),
])
def test_a_damaged_key_file_is_refused(edit, match):
    text = encode_key_file(KEY_ANALYZER_PUBLIC, public_bytes(generate_analyzer_key()))
    with pytest.raises(KeyFileError, match=match):
        decode_key_file(edit(text), KEY_ANALYZER_PUBLIC, source="--analyzer-pub x")


def test_a_low_order_point_is_refused():
    # a low-order point of Curve25519 (x = 0), written with a correct header and Key-Id
    text = encode_key_file(KEY_ANALYZER_PUBLIC, bytes(32))
    with pytest.raises(KeyFileError, match="low-order point"):
        decode_key_file(text, KEY_ANALYZER_PUBLIC)


def test_a_fifo_or_a_device_as_key_file_is_refused_without_blocking(keys, tmp_path):
    fifo = tmp_path / "k.fifo"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        res = run("encode", "--params", keys / "params.json", "--analyzer-pub", path,
                  "--input", keys / "p.csv", "--out", tmp_path / "u.bin", code=2)
        assert "not a regular file" in res.output


def test_mac_key_file_kind_is_checked_by_the_library_reader(keys):
    from shuffledp.protocol.crypto import read_key_file

    assert len(read_key_file(keys / "mac.key", KEY_MAC)) == 32
    with pytest.raises(KeyFileError, match="holds the analyzer's public key"):
        read_key_file(keys / "analyzer.pub", KEY_MAC, what="--mac-key")
