"""Role commands: run the parties of the shuffle protocol as separate processes over files.

::

    shuffledp setup   --grid 320x240 --n 50 --epsilon 5 --delta 1e-5 --B 256 --out run/
    shuffledp encode  --params run/params.json --points user7.csv --out run/batches/u7.bin
    shuffledp shuffle --params run/params.json --in-dir run/batches --out run/mixed.bin
    shuffledp analyze --params run/params.json --in run/mixed.bin --out-dir run/result

``setup`` writes ``params.json`` (the validated :class:`~shuffledp.protocol_params.ProtocolParams`)
and, with ``--keys``, the analyzer's X25519 key pair (``analyzer.key`` private, ``analyzer.pub``
public); ``encode --analyzer-pub`` then encrypts every message (deployment path) and
``analyze --key`` decrypts. ``analyze`` writes ``estimate.npy`` (normalised), ``raw.npy``
(s_hat) and ``report.json`` (guarantee, protocol figures, shuffler report).

The commands are ``click.Command`` objects (``setup``, ``encode``, ``shuffle``, ``analyze``) that
:mod:`shuffledp.cli` registers; :data:`ROLE_COMMANDS` lists them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import numpy as np


def _load_params(path: str):
    from shuffledp.protocol_params import ProtocolParams

    try:
        return ProtocolParams.from_json(Path(path).read_text())
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise click.UsageError(f"cannot read protocol parameters from {path}: {e}") from None


@click.command("setup")
@click.option("--grid", "grid_spec", default="320x240", show_default=True,
              help="N or WIDTHxHEIGHT.")
@click.option("--n", "n", type=int, required=True, help="Number of users (>= 2, public).")
@click.option("--epsilon", type=float, required=True)
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--B", "B", type=int, default=256, show_default=True, help="Scaling factor.")
@click.option("--w", type=int, default=20, show_default=True)
@click.option("--rounding", type=click.Choice(["largest_remainder", "floor"]),
              default="largest_remainder", show_default=True)
@click.option("--dropout", type=float, default=0.0, show_default=True,
              help="Declared dropout fraction.")
@click.option("--keys/--no-keys", default=False, help="Also write an analyzer X25519 key pair.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True)
def setup(grid_spec, n, epsilon, delta, B, w, rounding, dropout, keys, out_dir):
    """Derive and write the protocol parameters (and optionally the analyzer's keys)."""
    from shuffledp.grid import Grid
    from shuffledp.protocol_params import derive_params

    try:
        p = derive_params(Grid.parse(grid_spec), n, epsilon=epsilon, delta=delta, B=B, w=w,
                          rounding=rounding, dropout=dropout)
    except (ValueError, TypeError) as e:
        raise click.UsageError(str(e)) from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "params.json").write_text(p.to_json())
    if keys:
        from shuffledp.shuffler import generate_analyzer_key, private_bytes, public_bytes

        k = generate_analyzer_key()
        kp = out / "analyzer.key"
        kp.write_bytes(private_bytes(k))
        os.chmod(kp, 0o600)
        (out / "analyzer.pub").write_bytes(public_bytes(k))
    click.echo(json.dumps(p.figures(), indent=1))


@click.command("encode")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              required=True)
@click.option("--points", type=click.Path(exists=True, dir_okay=False), required=True,
              help="CSV of this user's points: x,y[,weight] in [0,1) (header optional).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True)
@click.option("--analyzer-pub", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Encrypt every message to this X25519 public key (deployment path).")
@click.option("--seed", type=int, default=None,
              help="Seed of the Polya noise (research runs); shares always use the CSPRNG.")
def encode(params_path, points, out_path, analyzer_pub, seed):
    """Encode one user's points into a batch of messages (user side)."""
    from shuffledp.encoders.encoder import encode_user
    from shuffledp.wire import KIND_USER, KIND_USER_ENC, Header, encode_batch

    p = _load_params(params_path)
    try:
        data = np.genfromtxt(points, delimiter=",", dtype=float, ndmin=2)
        if np.isnan(data[0]).all():
            data = data[1:]
        if data.shape[1] not in (2, 3) or data.shape[0] == 0:
            raise ValueError("expected columns x,y or x,y,weight and at least one point")
        pix = p.grid.points_to_pixels(data[:, 0], data[:, 1])
        wts = data[:, 2] if data.shape[1] == 3 else np.ones(pix.size)
        rec = encode_user(p, pix, wts)
    except ValueError as e:
        raise click.UsageError(f"{points}: {e}") from None
    if analyzer_pub:
        from shuffledp.shuffler import encrypt_records, encrypted_record_bytes

        body = encrypt_records(p, rec, Path(analyzer_pub).read_bytes())
        blob = encode_batch(
            Header(KIND_USER_ENC, encrypted_record_bytes(p), p.digest, rec.size), body
        )
    else:
        blob = encode_batch(Header(KIND_USER, p.record_bytes, p.digest, rec.size), rec)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_bytes(blob)


@click.command("shuffle")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              required=True)
@click.option("--in-dir", "in_dir", type=click.Path(exists=True, file_okay=False), required=True,
              help="Directory of user batches (*.bin).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True)
@click.option("--expected-users", type=int, default=None,
              help="Users admitted; absent ones count as dropped.")
@click.option("--encrypted/--plaintext", default=False,
              help="Expect encrypted batches (deployment path).")
def shuffle(params_path, in_dir, out_path, expected_users, encrypted):
    """Validate users' batches, drop incomplete ones, permute, write the mixed batch."""
    from shuffledp.shuffler import Shuffler
    from shuffledp.wire import BatchWriter

    p = _load_params(params_path)
    s = Shuffler(p, encrypted=encrypted)
    files = sorted(Path(in_dir).glob("*.bin"))
    for k, f in enumerate(files):
        s.submit(f.read_bytes(), sender=k)
    if expected_users is not None:
        s.missing(max(0, expected_users - len(files)))
    h, rec = s.mix()
    with open(out_path, "wb") as fh:
        with BatchWriter(fh, h) as w:
            step = 1 << 22
            for i in range(0, rec.size, step):
                w.write(rec[i : i + step])
    click.echo(json.dumps(s.report.to_dict()), err=True)


@click.command("analyze")
@click.option("--params", "params_path", type=click.Path(exists=True, dir_okay=False),
              required=True)
@click.option("--in", "in_path", type=click.Path(exists=True, dir_okay=False), required=True,
              help="Mixed batch written by `shuffledp shuffle`.")
@click.option("--out-dir", type=click.Path(file_okay=False), required=True)
@click.option("--key", "key_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Analyzer private key (encrypted batches).")
def analyze(params_path, in_path, out_dir, key_path):
    """Sum the mixed batch mod q (streaming), decode, Reconstruct; write estimate and report."""
    from shuffledp.analyzers.modular import ModularAccumulator, ReleaseRefused
    from shuffledp.analyzers.modular import analyze as run_analysis
    from shuffledp.wire import (
        KIND_MIXED,
        KIND_MIXED_ENC,
        WireError,
        iter_records,
        read_header,
        unpack_records,
    )

    p = _load_params(params_path)
    acc = ModularAccumulator(p)
    try:
        with open(in_path, "rb") as fh:
            h = read_header(fh)
            if h.digest != p.digest:
                raise WireError("mixed batch was produced under other protocol parameters")
            if h.kind == KIND_MIXED_ENC:
                if key_path is None:
                    raise click.UsageError("the mixed batch is encrypted: pass --key")
                from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

                from shuffledp.shuffler import decrypt_records

                key = X25519PrivateKey.from_private_bytes(Path(key_path).read_bytes())
                for chunk in iter_records(fh, h, 1 << 16):
                    c, s, failed = decrypt_records(p, chunk.tobytes(), key)
                    acc.add_pairs(c, s)
                    acc.rejected += failed
            elif h.kind == KIND_MIXED:
                if h.record_bytes != p.record_bytes:
                    raise WireError(f"records of {h.record_bytes} bytes, expected {p.record_bytes}")
                for chunk in iter_records(fh, h):
                    acc.add_records(unpack_records(chunk, h.record_bytes))
            else:
                raise WireError(f"not a mixed batch (kind {h.kind})")
        release = run_analysis(p, acc, h.n_users, h.n_dropped)
    except (WireError, ReleaseRefused) as e:
        click.echo(f"refusing to release: {e}", err=True)
        sys.exit(2)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "estimate.npy", release.estimate)
    np.save(out / "raw.npy", release.raw)
    report = {
        "model": "shuffle",
        "grid": str(p.grid),
        "guarantee": release.guarantee.to_dict(),
        "parameters": dict(release.parameters),
        "protocol": dict(release.protocol),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))


ROLE_COMMANDS = (setup, encode, shuffle, analyze)
