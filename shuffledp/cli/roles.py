"""Role commands: run the parties of the shuffle protocol as separate processes over files.

::

    shuffledp setup   --grid 320x240 --n 50 --epsilon 5 --delta 1e-5 --B 256 --out run/
    shuffledp encode  --params run/params.json --analyzer-pub run/analyzer.pub \\
                      --input user7.csv --out run/batches/u7.bin
    shuffledp shuffle --params run/params.json --mac-key run/mac.key \\
                      --input run/batches --out run/mixed.bin
    shuffledp analyze --params run/params.json --key run/analyzer.key --mac-key run/mac.key \\
                      --input run/mixed.bin --out run/result

The encrypted path is the default everywhere. ``setup`` writes ``params.json`` (the validated
:class:`~shuffledp.protocol.params.ProtocolParams`, with a fresh round id: batches of another
setup are rejected), the analyzer's X25519 key pair (``analyzer.key``; ``analyzer.pub`` for the
users) and the MAC key ``mac.key`` shared by the shuffler and the analyzer only (32 random
bytes). Key files are typed (:func:`shuffledp.protocol.crypto.encode_key_file`: a header
naming the kind, the format version, the algorithm and the key's id) and every command
checks the kind it reads, so ``encode --analyzer-pub mac.key`` is refused naming both. Both
secret files are created with mode 0600 from the start and never overwritten without
``--force``. ``encode --analyzer-pub`` encrypts every message to the analyzer;
``shuffle --mac-key`` expects encrypted batches and writes the mixed batch (wire format 4,
:mod:`shuffledp.protocol.wire`: header, permuted records, HMAC-SHA256 tag over both) with its
report
(``<out>.report.json``); ``analyze --key --mac-key`` verifies the tag, decrypts, checks the
counts (:mod:`shuffledp.analyzers.heatmap.modular`, the toolkit's one decrypt-then-count loop) and
writes
``estimate.npy`` (normalised), ``raw.npy`` (s_hat) and ``report.json`` (guarantee, protocol
figures, the shuffler's report, whether the mixed batch was authenticated). A batch whose
every message fails to decrypt is left out and counted, and n_min applies to the users that
remain (:mod:`shuffledp.analyzers.heatmap.modular`, "Unreadable batches"). Each release is
recorded in the release ledger (``--release-ledger``, default ``releases.jsonl`` next to
``--params``; :mod:`shuffledp.analyzers.heatmap.release_ledger`) before anything is written,
and a second release of a round is refused.

``--plaintext-simulation`` (on every role) selects the plaintext wire path instead: the
shuffler then sees every user's shares, so it is a simulation aid only and each role says so
on stderr; ``--mac-key`` is optional there (without it the mixed batch's tag is a plain
SHA-256, which detects accidents only). The device encoder draws every random value from
the cryptographically secure generator and refuses a seed.

Robustness: every input file is read through :mod:`shuffledp.safe_io` (regular files only,
size limits from the parameters or the batch header, no hang on a FIFO); parameter sets whose
per-user message count or memory is absurd are refused unless ``--allow-large``
(:mod:`shuffledp.cli.common`, which also fixes the exit codes and the option names: ``--out``
is the directory of ``setup`` and ``analyze``, the one file ``encode`` and ``shuffle`` write).

The commands are :class:`shuffledp.cli.common.Command` objects (``setup``, ``encode``,
``shuffle``, ``analyze``) that :mod:`shuffledp.cli` registers; :data:`ROLE_COMMANDS` lists
them.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import click
import numpy as np

from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR
from shuffledp.cli.common import (
    COUNT,
    PARAMS_FILE_LIMIT,
    POINTS_FILE_LIMIT,
    REPORT_FILE_LIMIT,
    B_option,
    Command,
    EstimatedProgress,
    OutputOption,
    allow_large_option,
    as_refusal,
    delta_option,
    dropout_option,
    epsilon_option,
    force_option,
    grid_option,
    input_option,
    n_option,
    option,
    out_dir_option,
    out_file_option,
    protocol_memory,
    refuse_if_large,
    smoothing_method,
    smoothing_option,
    w_option,
    warn,
    write_npy,
    write_report,
)
from shuffledp.safe_io import (
    SHUFFLER_REPORT_SCHEMA,
    NotRegularFileError,
    UnsafeFileError,
    atomic_output,
    check_regular,
    check_schema,
    create_private,
    open_regular,
    read_regular,
    read_regular_text,
    read_up_to,
    sync_to_disk,
    with_schema,
    write_atomic,
)

PLAINTEXT_WARNING = (
    "plaintext simulation path: messages are NOT encrypted, the shuffler sees every user's "
    "shares; never use this for real users' data"
)
KEY_FILE = "analyzer.key"
PUB_FILE = "analyzer.pub"
MAC_FILE = "mac.key"
LEDGER_FILE = "releases.jsonl"
_SIM_HELP = (
    "Plaintext wire path (simulation aid only: the shuffler sees every user's shares)."
)


# --------------------------------------------------------------------------- file helpers
def _read_file(path: str, limit: int, option: str, *, text: bool = False) -> Any:
    """Read an input file named by ``option``: exit 2 if not a regular file, 1 if invalid."""
    try:
        if text:
            return read_regular_text(path, limit)
        return read_regular(path, limit)
    except NotRegularFileError as e:
        raise click.BadParameter(str(e), param_hint=option) from None
    except UnsafeFileError as e:
        raise click.ClickException(f"{option} {e}") from None


def _json_object(text: str, what: str) -> dict:
    """Parse ``text`` as a JSON object; a one-line error naming ``what`` otherwise."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise click.ClickException(f"{what}: not JSON ({e})") from None
    if not isinstance(record, dict):
        raise click.ClickException(
            f"{what}: expected a JSON object, got a JSON {type(record).__name__}")
    return record


def _load_params(path: str, allow_large: bool = False):
    """Read, validate and size-check ``--params``."""
    from shuffledp.protocol.params import ProtocolParams

    text = _read_file(path, PARAMS_FILE_LIMIT, "--params", text=True)
    _json_object(text, f"--params {path}")
    try:
        p = ProtocolParams.from_json(text)
    except KeyError as e:
        raise click.ClickException(f"--params {path}: missing field {e}") from None
    except (ValueError, TypeError, IndexError, AttributeError, OverflowError,
            RecursionError) as e:
        raise click.ClickException(f"--params {path}: invalid parameter record: {e}") from None
    refuse_if_large(f"--params {path} (grid {p.grid}, n={p.n}, B={p.B})",
                    memory_bytes=protocol_memory(p), messages_per_user=p.messages_per_user,
                    allow_large=allow_large)
    return p


def _read_key(path: str, kind: str, option: str) -> bytes:
    """A typed key file named by ``option`` (:func:`shuffledp.protocol.crypto.read_key_file`):
    exit 2 if it is not a regular file, 1 if it holds another kind of key or is invalid."""
    from shuffledp.protocol.crypto import KeyFileError, read_key_file

    try:
        return read_key_file(path, kind, what=option)
    except NotRegularFileError as e:
        raise click.BadParameter(str(e), param_hint=option) from None
    except (KeyFileError, UnsafeFileError) as e:
        raise click.ClickException(str(e)) from None


def _load_public_key(path: str) -> bytes:
    """``--analyzer-pub``: the analyzer's public key file (kind checked; a usable X25519
    point); returns the 32 raw bytes."""
    from shuffledp.protocol.crypto import KEY_ANALYZER_PUBLIC

    return _read_key(path, KEY_ANALYZER_PUBLIC, "--analyzer-pub")


def _read_secret(path: str, option: str, kind: str) -> bytes:
    """A secret key file named by ``option``, of ``kind``; warns if others may read it."""
    raw = _read_key(path, kind, option)
    mode = os.stat(path).st_mode
    if mode & 0o077:
        warn(f"{option} {path} is readable by others (mode {mode & 0o777:o}); chmod 600 it")
    return raw


def _load_private_key(path: str):
    """``--key``: the analyzer's X25519 private key file."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from shuffledp.protocol.crypto import KEY_ANALYZER_PRIVATE

    return X25519PrivateKey.from_private_bytes(
        _read_secret(path, "--key", KEY_ANALYZER_PRIVATE))


def _load_mac_key(path: str | None) -> bytes | None:
    """``--mac-key``: the key shuffler and analyzer share for the mixed batch's tag."""
    from shuffledp.protocol.crypto import KEY_MAC

    if path is None:
        return None
    return _read_secret(path, "--mac-key", KEY_MAC)


def _show(text: str, width: int = 40) -> str:
    """repr of a user-supplied value, shortened for an error message."""
    return repr(text if len(text) <= width else text[:width] + "...")


def _parse_points(text: str, label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``x,y[,weight]`` (an optional non-numeric header first) -> x, y, weight arrays.

    Raises ValueError naming ``label``, the line and the value for anything malformed.
    """
    values: list[float] = []
    ncol = 0
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(",")
        try:
            row = [float(f) for f in fields]
        except ValueError:
            if ncol == 0 and not values and len(fields) in (2, 3):
                ncol = -len(fields)  # a header; the data must have as many columns
                continue
            bad = next(f for f in fields if not _is_float(f))
            raise ValueError(f"{label}, line {line_no}: not a number: {_show(bad.strip())}") \
                from None
        if len(row) not in (2, 3) or (ncol and abs(ncol) != len(row)):
            want = "2 or 3" if not ncol else str(abs(ncol))
            raise ValueError(
                f"{label}, line {line_no}: expected {want} fields (x,y[,weight]), "
                f"got {len(row)}: {_show(line.strip())}"
            )
        ncol = len(row)
        for name, v in zip(("x", "y"), row[:2]):
            if not (0.0 <= v < 1.0):
                raise ValueError(f"{label}, line {line_no}: {name} must be in [0, 1), "
                                 f"got {name}={v!r}")
        if len(row) == 3 and not (math.isfinite(row[2]) and row[2] >= 0):
            raise ValueError(f"{label}, line {line_no}: weight must be finite and >= 0, "
                             f"got weight={row[2]!r}")
        values.extend(row if len(row) == 3 else (*row, 1.0))
    if not values:
        raise ValueError(f"{label}: no points (expected rows x,y[,weight] with x, y in [0, 1))")
    arr = np.asarray(values, dtype=np.float64).reshape(-1, 3)
    if not arr[:, 2].sum() > 0:
        raise ValueError(f"{label}: the weights sum to zero; at least one must be positive")
    return arr[:, 0], arr[:, 1], arr[:, 2]


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


_params_option = click.option(
    "--params", "params_path", type=click.Path(exists=True, dir_okay=False), required=True,
    help="params.json written by `shuffledp setup`.")


# --------------------------------------------------------------------------- setup
@click.command("setup", cls=Command)
@grid_option(default="320x240")
@n_option(low=2, required=True, help="Number of users admitted (>= 2, public).")
@epsilon_option(required=True)
@delta_option(default=1e-5)
@B_option(default=256)
@w_option()
@click.option("--rounding", type=click.Choice(["largest_remainder", "floor"]),
              default="largest_remainder", show_default=True,
              help="How a user's level vector is scaled by B and rounded: largest_remainder keeps "
                   "every level summing to exactly B; floor is Ghazi et al. App. F's.")
@dropout_option()
@click.option("--neighbour", type=click.Choice(["zero_out", "replace"]),
              default=DEFAULT_NEIGHBOUR.token, show_default=True,
              help="Neighbour relation of the guarantee (n public): zero out one user's input "
                   "(sensitivity B; the toolkit's one default, that of the central release) or "
                   "replace it (sensitivity 2B).")
@click.option("--budget", type=click.Choice(["auto", "paper"]), default="auto",
              show_default=True,
              help="Split of epsilon over the levels, recorded in params.json: auto (the "
                   "central release's default: more on the leaf level when eps n / N is "
                   "large, public numbers only) or paper (Ghazi et al. Sec. 4 as printed; "
                   "with `analyze --smoothing none` Alg. 1-2 as printed).")
@click.option("--keys/--no-keys", default=True, show_default=True,
              help=f"Write the analyzer's X25519 key pair ({KEY_FILE} mode 0600, {PUB_FILE}) "
                   f"and the shuffler-analyzer MAC key ({MAC_FILE}, mode 0600); --no-keys "
                   "only with --plaintext-simulation.")
@click.option("--plaintext-simulation", is_flag=True, help=_SIM_HELP)
@click.option("--force", is_flag=True,
              help=f"Replace an earlier setup in --out: params.json and the key files "
                   f"({KEY_FILE}, {PUB_FILE}, {MAC_FILE}).")
@allow_large_option
@out_dir_option(writes=("params.json", KEY_FILE, MAC_FILE, PUB_FILE), required=True)
def setup(grid, n, epsilon, delta, B, w, rounding, dropout, neighbour, budget, keys,
          plaintext_simulation, force, allow_large, out_dir):
    """Derive and write the protocol parameters and the keys of one protocol run.

    Writes to OUT: params.json (the parameters and a fresh random round id: batches
    encoded under another setup are rejected), analyzer.key (the analyzer's X25519 private
    key; keep it on the analyzer), analyzer.pub (give it to the users), and mac.key (32
    random bytes shared by the shuffler and the analyzer only: the shuffler authenticates
    the mixed batch's header and records with it, HMAC-SHA256, and the analyzer refuses a
    batch whose tag does not verify). Key files are typed text naming their kind, which
    every command checks. The two secret files are created with mode 0600 and never
    overwritten without --force.
    """
    from shuffledp.protocol.params import derive_params

    if not keys and not plaintext_simulation:
        raise click.BadParameter(
            "the deployment path encrypts every message to the analyzer's key; --no-keys is "
            "only allowed with --plaintext-simulation", param_hint="--no-keys")
    p = as_refusal(f"no protocol for --grid {grid} --n {n} --epsilon {epsilon} --delta {delta} "
                   f"--B {B} --dropout {dropout} --budget {budget}",
                   derive_params, grid, n, epsilon=epsilon, delta=delta, B=B, w=w,
                   rounding=rounding, dropout=dropout, neighbour=neighbour, budget=budget)
    refuse_if_large(f"--grid {grid} with --n {n} --B {B}", memory_bytes=protocol_memory(p),
                    messages_per_user=p.messages_per_user, allow_large=allow_large)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if keys:
        _write_keys(out, force)
    write_atomic(out / "params.json", p.to_json().encode())
    sync_to_disk(out / "params.json")
    if plaintext_simulation:
        warn(PLAINTEXT_WARNING)
    click.echo(json.dumps(p.figures(), indent=1))


def _write_keys(out: Path, force: bool) -> None:
    """The analyzer's key pair and the MAC key; refuses (before writing any) to overwrite."""
    from shuffledp.protocol.crypto import (
        KEY_ANALYZER_PRIVATE,
        KEY_ANALYZER_PUBLIC,
        KEY_MAC,
        encode_key_file,
        generate_analyzer_key,
        generate_mac_key,
        private_bytes,
        public_bytes,
    )

    secrets = {KEY_FILE: "the analyzer's private key (batches encrypted to it could no "
                         "longer be read)",
               MAC_FILE: "the shuffler-analyzer MAC key (mixed batches tagged with it could "
                         "no longer be verified)"}
    for name, what in secrets.items():
        if not force and os.path.lexists(out / name):
            raise click.ClickException(
                f"{out / name} exists; refusing to overwrite {what}; pass --force to replace "
                "the keys")
    k = generate_analyzer_key()
    try:
        create_private(out / KEY_FILE, encode_key_file(KEY_ANALYZER_PRIVATE, private_bytes(k)),
                       force=force)
        create_private(out / MAC_FILE, encode_key_file(KEY_MAC, generate_mac_key()),
                       force=force)
    except FileExistsError as e:  # created by someone else since the check above
        raise click.ClickException(f"{e.filename} appeared while setup was writing it; "
                                   "refusing to overwrite it") from None
    write_atomic(out / PUB_FILE, encode_key_file(KEY_ANALYZER_PUBLIC, public_bytes(k)))
    sync_to_disk(out / KEY_FILE, out / MAC_FILE, out / PUB_FILE)


# --------------------------------------------------------------------------- encode
@click.command("encode", cls=Command)
@_params_option
@input_option(aliases=("--points",),
              type=click.Path(exists=True, dir_okay=False), required=True,
              help="CSV of this user's points: x,y[,weight] in [0,1) (header optional); with "
                   "--bulk, a CSV of many users: user_id,x,y[,weight] (header required, as "
                   "`shuffledp heatmap --input` reads).")
@click.option("--out", "out_path", cls=OutputOption, writes=("",), type=click.Path(),
              required=True,
              help="The user's batch to write (one file); with --bulk, the folder of the "
                   "batches (one USER_ID.bin per user; created, or empty).")
@force_option(help="Replace an existing --out file (with --bulk: write into a non-empty "
                   "folder, replacing batches of the same names).")
@click.option("--analyzer-pub", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Encrypt every message to this X25519 public key (required unless "
                   "--plaintext-simulation).")
@click.option("--bulk", is_flag=True,
              help="Deployment test: encode every user of a user_id,x,y[,weight] --input into "
                   "the --out folder, one batch file per user, in parallel (--workers).")
@click.option("--workers", type=COUNT, default=None,
              help="Processes: with --bulk, users encoded at once; otherwise processes "
                   "sealing one user's messages [default: one per CPU].")
@click.option("--plaintext-simulation", is_flag=True, help=_SIM_HELP)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--seed", type=str, default=None, hidden=True,
              help="Refused: the device encoder takes no seed.")
@allow_large_option
def encode(params_path, input_path, out_path, force, analyzer_pub, bulk, workers,
           plaintext_simulation, quiet, seed, allow_large):
    """Encode one user's points into a batch of messages (user side); --bulk: every user
    of a CSV, one batch file each, on every core.

    Every random value (the Polya noise and the shares) comes from the cryptographically
    secure generator; there is no seed. A progress bar with an ETA (on stderr; --quiet
    silences it) follows the encryption of the messages, or, with --bulk, the users.
    """
    from shuffledp.cli.common import progress_bar
    from shuffledp.cli.device import encode_one

    if seed is not None:
        raise click.BadParameter(
            f"refused (got {seed!r}): the device encoder draws every random value, the noise "
            "included, from the cryptographically secure generator; seeds are for research "
            "runs (shuffledp heatmap --seed)", param_hint="--seed")
    if analyzer_pub is not None and plaintext_simulation:
        raise click.BadParameter("cannot be combined with --plaintext-simulation",
                                 param_hint="--analyzer-pub")
    if analyzer_pub is None and not plaintext_simulation:
        raise click.UsageError(
            "--analyzer-pub is required: every message is encrypted to the analyzer "
            "(--plaintext-simulation sends shares in the clear, for simulations only)")
    if not bulk and os.path.isdir(out_path):
        raise click.BadParameter(f"{out_path} is a folder: give the batch file to write (or "
                                 "--bulk to write one batch per user into it)",
                                 param_hint="--out")
    p = _load_params(params_path, allow_large)
    pub = _load_public_key(analyzer_pub) if analyzer_pub is not None else None
    if bulk:
        _encode_bulk(p, pub, input_path, Path(out_path), workers, quiet, allow_large)
        return
    limit = POINTS_FILE_LIMIT if not allow_large else 1 << 62
    x, y, wts = _parse_points(_read_file(input_path, limit, "--input", text=True),
                              f"--input {input_path}")
    if pub is None:
        warn(PLAINTEXT_WARNING)
    with progress_bar(p.messages_per_user, "encode: encrypting messages" if pub else "encode",
                      "msg", quiet) as bar:
        blob = encode_one(p, p.grid.points_to_pixels(x, y), wts, pub, bar.update,
                          workers=workers or os.cpu_count() or 1)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out_path, blob)


def _encode_bulk(p: Any, pub: bytes | None, input_path: str, out: Path, workers: int | None,
                 quiet: bool, allow_large: bool) -> None:
    """``encode --bulk``: every user of the CSV into ``out/<id>.bin`` on a process pool."""
    from shuffledp import datasets
    from shuffledp.cli.common import progress_bar
    from shuffledp.cli.device import batch_name, encode_users, group_users

    if os.path.isdir(out) and any(out.iterdir()) and not click.get_current_context().params.get(
            "force"):
        raise click.ClickException(f"--out {out} is not empty; refusing to write batches into "
                                   "it (pass --force, or choose another --out)")
    try:
        table = datasets.load_csv(input_path) if not allow_large else datasets.load_csv(
            input_path, limit=1 << 62)
    except UnicodeDecodeError as e:
        raise click.ClickException(f"--input {input_path}: not UTF-8 text ({e.reason})") \
            from None
    except (ValueError, KeyError) as e:
        raise click.ClickException(f"--input {input_path}: {e}") from None
    users = group_users(table, p.grid)
    if len(users) > p.n:
        warn(f"--input {input_path} holds {len(users)} users, more than the n = {p.n} the "
             "parameters are provisioned for: the shuffler will keep at most n")
    names = [batch_name(u) for u, _, _ in users]
    if len(set(names)) != len(names):
        raise click.ClickException(f"--input {input_path}: two user ids map to the same batch "
                                   "file name")
    if pub is None:
        warn(PLAINTEXT_WARNING)
    n_workers = max(1, min(workers or os.cpu_count() or 1, len(users)))
    with progress_bar(len(users), f"encode --bulk ({n_workers} processes)", "user", quiet,
                      delay=0.0) as bar:
        done = encode_users(p, users, pub, out, n_workers, bar.update)
    per_user = p.encrypted_bytes_per_user if pub is not None else p.bytes_per_user
    click.echo(f"{done['users']} batches written to {out} ({done['bytes'] / 1e6:.1f} MB, "
               f"{per_user:,} bytes per user, {'encrypted' if pub else 'plaintext'})", err=True)


# --------------------------------------------------------------------------- shuffle
def _batch_kind(data: bytes) -> int | None:
    """The kind byte of a batch whose header parses, else None."""
    from shuffledp.protocol.wire import Header, WireError

    try:
        return Header.unpack(data).kind
    except WireError:
        return None


def _read_batch(path: Path, limit: int) -> tuple[bytes | None, str | None]:
    """A user batch: regular file only, at most ``limit + 1`` bytes read.

    Returns (data, None), or (None, reason) for an entry that is not a batch (it became a
    directory, FIFO or device since the listing, is empty, or cannot be opened).
    """
    try:
        with open_regular(path, what="--input entry") as f:
            data = read_up_to(f, limit + 1)
    except NotRegularFileError:
        return None, "unreadable" if path.is_file() else "not_a_regular_file"
    except OSError:
        return None, "unreadable"
    return (data, None) if data else (None, "empty")


def _classify_entry(path: Path) -> str | None:
    """Why a ``*.bin`` entry of ``--in-dir`` is not a batch file (a
    :data:`shuffledp.protocol.shuffler.IGNORED_REASONS` name), or None if it is a non-empty regular
    file. Opens it through :func:`shuffledp.safe_io.check_regular` (never blocks on a FIFO;
    links are followed, so a link to a device is not a regular file)."""
    try:
        size = check_regular(path, what="--input entry")
    except NotRegularFileError:
        return "unreadable" if path.is_file() else "not_a_regular_file"
    return "empty" if size == 0 else None


def _kind_name(encrypted: bool) -> str:
    return "encrypted" if encrypted else "plaintext (simulation path)"


def _flag(encrypted: bool) -> str:
    return "--encrypted" if encrypted else "--plaintext-simulation"


_WRONG_DIGEST_HINT = ("encoded under another params.json: other parameters, or another "
                      "setup (each setup draws a fresh round id)")


def _batch_files(p: Any, in_dir: str, out_path: str,
                 expected_users: int | None) -> tuple[list[Path], Counter, list[str]]:
    """The ``*.bin`` user batches of ``--in-dir``, after checking ``--out`` and the count.

    Returns (batch files, ignored entries by reason, their names): a directory, FIFO,
    socket, device (or a link to one), a dangling link, an unreadable or an empty file named
    like a batch is nobody's submission; it is skipped and counted, never read as a batch
    nor counted as a user.
    """
    if Path(out_path).suffix == ".bin" and Path(out_path).resolve().parent == \
            Path(in_dir).resolve():
        raise click.BadParameter(f"{out_path} lies in --input {in_dir}: the next run would "
                                 "read the mixed batch as a user batch", param_hint="--out")
    files: list[Path] = []
    ignored: Counter[str] = Counter()
    names: list[str] = []
    for path in sorted(Path(in_dir).glob("*.bin")):
        reason = _classify_entry(path)
        if reason is None:
            files.append(path)
        else:
            ignored[reason] += 1
            names.append(path.name)
    if not files:
        skipped = (f" ({sum(ignored.values())} entries named *.bin are not batch files: "
                   f"{_ignored_text(ignored, names)})" if ignored else "")
        raise click.ClickException(f"--input {in_dir}: no user batches (*.bin files){skipped}")
    if expected_users is not None and not len(files) <= expected_users <= p.n:
        raise click.BadParameter(
            f"got {expected_users}: must lie between the {len(files)} batches in {in_dir} and "
            f"the n = {p.n} users the parameters are provisioned for",
            param_hint="--expected-users")
    return files, ignored, names


def _ignored_text(ignored: Counter, names: list[str], most: int = 5) -> str:
    shown = ", ".join(names[:most]) + (", ..." if len(names) > most else "")
    return ", ".join(f"{k}: {v}" for k, v in sorted(ignored.items())) + f" [{shown}]"


def _shuffler_mac_key(path: str | None, encrypted: bool) -> bytes | None:
    """``--mac-key``: required on the encrypted path, optional in plaintext simulation."""
    if path is None and encrypted:
        raise click.UsageError(
            f"--mac-key is required: the analyzer authenticates the mixed batch's counts and "
            f"records with the key it shares with the shuffler (setup writes OUT/{MAC_FILE}); "
            "only --plaintext-simulation may omit it")
    return _load_mac_key(path)


def _submit_all(s: Any, p: Any, files: list[Path], encrypted: bool,
                names: list[str], quiet: bool = True) -> tuple[int, int]:
    """Read every batch (bounded) and submit it; returns (batches submitted, how many are of
    the other kind). An entry that stopped being a batch file since the listing is counted
    in ``s.report.ignored`` (its name appended to ``names``) and skipped."""
    from shuffledp.protocol.crypto import encrypted_record_bytes
    from shuffledp.protocol.wire import HEADER_SIZE, KIND_USER, KIND_USER_ENC

    limit = HEADER_SIZE + p.messages_per_user * (
        encrypted_record_bytes(p) if encrypted else p.record_bytes)
    other = KIND_USER if encrypted else KIND_USER_ENC
    from shuffledp.cli.common import progress_bar

    n_other = n_read = 0
    with progress_bar(len(files), "shuffle: reading batches", "batch", quiet) as bar:
        for k, f in enumerate(files):
            bar.update(1)
            n_read, n_other = _submit_one(s, f, k, limit, other, names, n_read, n_other)
    return n_read, n_other


def _submit_one(s: Any, f: Path, k: int, limit: int, other: int, names: list[str],
                n_read: int, n_other: int) -> tuple[int, int]:
    """Read and submit one batch file; returns the updated counts."""
    data, reason = _read_batch(f, limit)
    if data is None:  # _read_batch gives the reason whenever it gives no data
        reason = reason or "unreadable"
    if reason is not None or data is None:
        s.report.ignored[reason] += 1
        names.append(f.name)
        return n_read, n_other
    n_read += 1
    n_other += _batch_kind(data) == other
    s.submit(data, sender=k)
    return n_read, n_other


@click.command("shuffle", cls=Command)
@_params_option
@input_option(dest="input_dir", aliases=("--in-dir",),
              type=click.Path(exists=True, file_okay=False), required=True,
              help="Directory of user batches (*.bin): the command reads a set of files, so "
                   "its --input is their folder. Entries named *.bin that are not "
                   "non-empty regular files (directories, FIFOs, devices, empty files) are "
                   "skipped and counted in the report's 'ignored'.")
@out_file_option(required=True,
                 help="The mixed batch to write (one file; its report goes next to it, "
                      "OUT.report.json, unless --shuffler-report).")
@force_option(help="Replace an existing --out file.")
@click.option("--mac-key", "mac_key_path", type=click.Path(exists=True, dir_okay=False),
              default=None,
              help=f"Key shared with the analyzer only ({MAC_FILE} from `shuffledp setup`): the "
                   "mixed batch's header and records get an HMAC-SHA256 tag under it. Required "
                   "unless --plaintext-simulation (then the tag is a plain SHA-256).")
@option("--shuffler-report", "report_path",
        type=click.Path(dir_okay=False), default=None,
        help="Where to write the shuffler's report [default: OUT.report.json].")
@click.option("--expected-users", type=COUNT, default=None,
              help="Users admitted; absent ones count as dropped.")
@click.option("--memory-limit", type=COUNT, default=256, show_default=True,
              help="Approximate memory for the shuffler's data, in MiB; beyond a quarter of "
                   "it the records spill to a temporary directory next to OUT.")
@click.option("--encrypted/--plaintext-simulation", default=True, show_default=True,
              help="Expect encrypted batches (deployment path), or plaintext ones "
                   "(simulation aid only: the shuffler sees every user's shares).")
@click.option("--analyzer-pub", "analyzer_pub", type=click.Path(exists=True, dir_okay=False),
              default=None,
              help="The analyzer's public key (analyzer.pub): refuse, before mixing, a batch "
                   "that names another key or none in its header (counted as 'wrong_key', its "
                   "user dropped whole). Without it the key id is not checked.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@allow_large_option
def shuffle(params_path, input_dir, out_path, force, mac_key_path, report_path, expected_users,
            memory_limit, encrypted, analyzer_pub, quiet, allow_large):
    """Validate users' batches, drop incomplete ones, permute, write the mixed batch.

    Batches of other parameters or of another setup (round id), replays (in any record
    order), truncated and incomplete batches are rejected, each counted under a named reason
    in the report's 'rejected'; of two batches sharing an encrypted record the first kept
    stays and the later one is removed ('copied_record'). Entries of --input named *.bin
    that are not batch files are skipped and counted under 'ignored'. The mixed batch streams
    through bucket files (memory bounded by --memory-limit) and is written atomically.
    """
    from shuffledp.protocol.shuffler import Shuffler

    in_dir = input_dir
    p = _load_params(params_path, allow_large)
    files, ignored, names = _batch_files(p, in_dir, out_path, expected_users)
    mac_key = _shuffler_mac_key(mac_key_path, encrypted)
    if not encrypted:
        warn(PLAINTEXT_WARNING)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    kid = None
    if analyzer_pub is not None:
        if not encrypted:
            raise click.UsageError(f"--analyzer-pub {analyzer_pub} checks the key id of "
                                   "encrypted batches: not with --plaintext-simulation")
        from shuffledp.protocol.crypto import analyzer_key_id

        kid = analyzer_key_id(_load_public_key(analyzer_pub))
    with Shuffler(p, encrypted=encrypted, mac_key=mac_key, workdir=os.fspath(out.parent),
                  memory_limit=memory_limit << 20, analyzer_key_id=kid) as s:
        s.report.ignored.update(ignored)
        n_read, n_other = _submit_all(s, p, files, encrypted, names, quiet)
        if expected_users is not None:
            s.missing(max(0, expected_users - s.n_users_seen))
        if s.report.n_forwarded == 0:
            raise click.ClickException(_no_batch_cause(in_dir, n_read, n_other, encrypted,
                                                       s.report.to_dict(), names))
        if names:
            warn(f"skipped {len(names)} entries of {in_dir} named *.bin that are not batch "
                 f"files ({_ignored_text(s.report.ignored, names)})")
        _warn_rejected(in_dir, n_read, n_other, encrypted, s.report.rejected)
        with atomic_output(out) as fh, EstimatedProgress("shuffle: mixing", None, quiet):
            header = s.mix_to(fh)
    report = s.report.to_dict()
    report.update(path=_kind_name(encrypted), n_batch_files=n_read,
                  mixed_batch=os.fspath(out_path), digest=p.digest.hex(),
                  round_id=p.round_id.hex(), authenticated=header.keyed)
    text = json.dumps(with_schema(report, SHUFFLER_REPORT_SCHEMA))
    write_atomic(report_path or f"{out_path}.report.json", (text + "\n").encode())
    click.echo(text, err=True)


def _warn_rejected(in_dir: str, n_files: int, n_other: int, encrypted: bool,
                   rejected: dict) -> None:
    if n_other:
        warn(f"{n_other} of {n_files} batches in {in_dir} are {_kind_name(not encrypted)} "
             f"and were rejected (running with {_flag(encrypted)})")
    if rejected.get("wrong_digest"):
        warn(f"{rejected['wrong_digest']} of {n_files} batches in {in_dir} were "
             f"{_WRONG_DIGEST_HINT}, and were rejected")


def _no_batch_cause(in_dir: str, n_files: int, n_other: int, encrypted: bool,
                    report: dict, names: list[str]) -> str:
    ignored = (f"; skipped {len(names)} entries that are not batch files "
               f"({_ignored_text(Counter(report['ignored']), names)})" if names else "")
    if n_files == 0:
        return f"no user batch read from {in_dir}{ignored}"
    if n_other == n_files:
        return (f"no batch accepted: the {n_files} batches in {in_dir} are "
                f"{_kind_name(not encrypted)}; pass {_flag(not encrypted)}{ignored}")
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(report["rejected"].items()))
    hint = (f" ({n_other} are {_kind_name(not encrypted)}: pass {_flag(not encrypted)}?)"
            if n_other else "")
    if report["rejected"].get("wrong_digest"):
        hint += f" (wrong_digest: {_WRONG_DIGEST_HINT})"
    return (f"no batch accepted from {in_dir}: {n_files} batches, rejected {{{reasons}}}"
            f"{hint}{ignored}")


# --------------------------------------------------------------------------- analyze
def _load_shuffler_report(path: str, header: Any, explicit: bool) -> dict | None:
    """The shuffler's report next to the mixed batch (or ``--shuffler-report``), checked
    against the mixed batch's header counts."""
    if not explicit and not os.path.lexists(path):
        return None
    text = _read_file(path, REPORT_FILE_LIMIT, "--shuffler-report", text=True)
    rep = _json_object(text, f"shuffler report {path}")
    as_refusal("--shuffler-report", check_schema, rep, SHUFFLER_REPORT_SCHEMA,
               f"shuffler report {path}")
    for key, value in (("n_forwarded", header.n_users), ("n_dropped", header.n_dropped)):
        if rep.get(key) != value:
            raise click.ClickException(
                f"shuffler report {path} says {key}={rep.get(key)!r}, but the mixed batch's "
                f"header says {value}; refusing to release")
    return rep


def _check_mixed_header(p: Any, h: Any, size: int) -> None:
    """The header is a mixed batch of these parameters and this run, no larger than n users
    can send (:func:`shuffledp.protocol.wire.check_header`, the analyzer's own check), whose
    file length is exactly header + records + 32-byte tag (wire formats 2 to 4)."""
    from shuffledp.protocol.wire import (
        HEADER_SIZE,
        KIND_MIXED,
        KIND_MIXED_ENC,
        TAG_SIZE,
        WireError,
        check_header,
    )

    check_header(p, h, KIND_MIXED_ENC if h.encrypted else KIND_MIXED)
    if size != h.total_bytes:
        raise WireError(f"{size} bytes, the header promises {HEADER_SIZE} + {h.n_records} x "
                        f"{h.record_bytes} + {TAG_SIZE} (tag) = {h.total_bytes}")


def _mixed_batch_key(h: Any, in_path: str, key_path: str | None,
                     plaintext_simulation: bool, key: Any = None) -> Any:
    """Match the batch's kind with the flags: the analyzer key for an encrypted batch, None
    for a plaintext one (after the loud warning)."""
    if h.encrypted:
        if plaintext_simulation:
            raise click.BadParameter(f"the mixed batch {in_path} is encrypted: pass --key, not "
                                     "--plaintext-simulation", param_hint="--plaintext-simulation")
        if key_path is None:
            raise click.UsageError(f"--key is required: the mixed batch {in_path} is encrypted")
        return key if key is not None else _load_private_key(key_path)
    if not plaintext_simulation:
        raise click.UsageError(
            f"the mixed batch {in_path} is plaintext (simulation path: the shuffler saw every "
            "share); pass --plaintext-simulation to analyze it"
            + (", not --key" if key_path else ""))
    warn(PLAINTEXT_WARNING)
    return None


def _mixed_batch_mac_key(h: Any, in_path: str, mac_key_path: str | None,
                         mac_key: bytes | None = None) -> bytes | None:
    """``--mac-key``: required for an encrypted or keyed batch; a batch without a keyed tag
    is refused when one is given (anyone who edits a batch can recompute a plain SHA-256)."""
    if mac_key_path is None:
        if h.encrypted or h.keyed:
            why = ("is encrypted (deployment path): its counts and records are authenticated"
                   if h.encrypted else "is tagged")
            raise click.UsageError(
                f"--mac-key is required: the mixed batch {in_path} {why} with the key the "
                f"shuffler shares with the analyzer (setup writes OUT/{MAC_FILE})")
        return None
    mac_key = mac_key if mac_key is not None else _load_mac_key(mac_key_path)
    if not h.keyed:
        raise click.ClickException(
            f"refusing to release {in_path}: --mac-key {mac_key_path} was given but the mixed "
            "batch carries no keyed tag (its plain SHA-256 can be recomputed by anyone who "
            "edits it)")
    return mac_key


KEY_PROBE = 64  # messages decrypted to tell a wrong --key before the whole batch


def _check_key_opens(p: Any, fh: Any, h: Any, key: Any, key_path: str,
                     in_path: str) -> float | None:
    """Decrypt the first :data:`KEY_PROBE` messages, to refuse a wrong ``--key`` before the
    whole batch: refused when none opens. Returns the seconds one message took (the
    estimate behind ``analyze``'s progress bar), None for an empty batch.

    A few unreadable messages are not a wrong key: a device that encrypted to another key
    leaves its whole batch unreadable, and the analyzer leaves it out (the messages are in
    uniformly random order, so with the right key all of the first 64 fail only when nearly
    every batch is unreadable, and the release is refused then anyway).
    """
    import time

    from shuffledp.protocol.crypto import decrypt_records
    from shuffledp.protocol.wire import HEADER_SIZE

    k = min(h.n_records, KEY_PROBE)
    if k == 0:
        return None
    fh.seek(HEADER_SIZE)
    t0 = time.perf_counter()
    failed = decrypt_records(p, read_up_to(fh, k * h.record_bytes), key)[2]
    per_message = (time.perf_counter() - t0) / k
    if failed == k:
        raise click.ClickException(
            f"--key {key_path}: none of the first {k} messages of {in_path} decrypts: not the "
            "analyzer key of this run (or every device encrypted to another key); refusing "
            "to release")
    return per_message


def _refusal(in_path: str, error: Exception, mac_key_path: str | None) -> click.ClickException:
    """A one-line refusal for a WireError or ReleaseRefused."""
    hint = ""
    if mac_key_path is not None and "tag does not verify" in str(error):
        hint = f" (or --mac-key {mac_key_path} is not this run's MAC key)"
    return click.ClickException(f"refusing to release {in_path}: {error}{hint}")


@click.command("analyze", cls=Command)
@_params_option
@input_option(aliases=("--in",),
              type=click.Path(exists=True, dir_okay=False), required=True,
              help="Mixed batch written by `shuffledp shuffle`.")
@out_dir_option(writes=("estimate.npy", "raw.npy", "report.json"), required=True,
                help="Output directory: estimate.npy, raw.npy, report.json.")
@force_option()
@click.option("--key", "key_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Analyzer private key (required for encrypted batches).")
@click.option("--mac-key", "mac_key_path", type=click.Path(exists=True, dir_okay=False),
              default=None,
              help=f"Key shared with the shuffler ({MAC_FILE} from `shuffledp setup`): the mixed "
                   "batch's tag must verify under it. Required for encrypted batches; a batch "
                   "without a keyed tag is refused when it is given.")
@click.option("--shuffler-report", "report_path", type=click.Path(dir_okay=False),
              default=None, help="The shuffler's report [default: IN.report.json if present].")
@click.option("--workers", type=COUNT, default=None,
              help="Processes decrypting a large batch [default: one per CPU].")
@click.option("--plaintext-simulation", is_flag=True,
              help="Accept a plaintext mixed batch (simulation aid only).")
@click.option("--release-ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help=f"Ledger of the rounds released (a hash-chained log): a second release "
                   f"of a round is refused [default: {LEDGER_FILE} next to --params].")
@smoothing_option()
@click.option("--quiet", is_flag=True, help="No progress bar.")
@allow_large_option
def analyze(params_path, input_path, out_dir, force, key_path, mac_key_path, report_path, workers,
            plaintext_simulation, ledger_path, smoothing, quiet, allow_large):
    """Verify the mixed batch, decrypt, sum mod q, check the counts, Reconstruct; record the
    release in the release ledger; write the estimate (post-processed as `shuffledp heatmap`
    releases it, --smoothing) and report.json.

    Refuses to release (exit 1) a batch that is malformed, of another run, altered after
    the shuffler (tag), misses messages, holds fewer than n_min users whose messages all
    decrypt (a batch whose every message fails, e.g. encrypted to another key, is left out
    and counted; part of a batch failing is refused), or is of a round already released
    with other messages (--release-ledger).
    """
    from shuffledp.analyzers.heatmap.modular import release_mixed
    from shuffledp.errors import Refused
    from shuffledp.protocol.wire import WireError, read_header

    in_path = input_path
    if key_path is not None and plaintext_simulation:
        raise click.BadParameter("cannot be combined with --plaintext-simulation",
                                 param_hint="--key")
    p = _load_params(params_path, allow_large)
    ledger = _release_ledger(ledger_path, params_path)
    # the key files' kinds are checked before the batch is read
    given_key = _load_private_key(key_path) if key_path is not None else None
    given_mac = _load_mac_key(mac_key_path)
    try:
        fh = open_regular(in_path)
    except NotRegularFileError as e:
        raise click.BadParameter(str(e), param_hint="--input") from None
    try:
        with fh:
            h = read_header(fh)
            _check_mixed_header(p, h, os.fstat(fh.fileno()).st_size)
            if h.n_users < p.n_min:  # sure to be refused: say so before decrypting anything
                raise Refused(f"only {h.n_users} users contributed (the mixed batch's "
                              f"header); the noise is provisioned for n_min = {p.n_min}")
            key = _mixed_batch_key(h, in_path, key_path, plaintext_simulation, given_key)
            mac_key = _mixed_batch_mac_key(h, in_path, mac_key_path, given_mac)
            shuffler = _load_shuffler_report(report_path or f"{in_path}.report.json", h,
                                             report_path is not None)
            per_message = (_check_key_opens(p, fh, h, key, key_path, in_path)
                           if key is not None else None)
            fh.seek(0)
            # decryption dominates: the probe's rate over the processes that share it
            seconds = (None if per_message is None else
                       h.n_records * per_message / max(1, workers or os.cpu_count() or 1))
            with EstimatedProgress(f"analyze: decrypting {h.n_records:,} messages",
                                   seconds, quiet):
                release = release_mixed(p, fh, key=key, mac_key=mac_key, workers=workers,
                                        ledger=ledger, label=os.path.abspath(in_path))
    except (WireError, Refused) as e:
        raise _refusal(in_path, e, mac_key_path) from None
    if smoothing != "none":
        release = release.smoothed(method=smoothing_method(smoothing))
    _write_release(Path(out_dir), p, release, h, shuffler)


def _release_ledger(ledger_path: str | None, params_path: str) -> Any:
    """``--release-ledger``, else ``releases.jsonl`` next to ``--params``: checked to be a
    regular file (or absent) in an existing folder before anything is decrypted."""
    from shuffledp.analyzers.heatmap.release_ledger import ReleaseLedger

    path = Path(ledger_path) if ledger_path else Path(params_path).parent / LEDGER_FILE
    if not path.parent.is_dir():
        raise click.BadParameter(f"{path}: its folder does not exist",
                                 param_hint="--release-ledger")
    if os.path.lexists(path):
        try:
            check_regular(path, what="--release-ledger")
        except NotRegularFileError as e:
            raise click.BadParameter(str(e), param_hint="--release-ledger") from None
    return ReleaseLedger(path)


def _write_release(out: Path, p: Any, release: Any, h: Any, shuffler: dict | None) -> None:
    """estimate.npy, raw.npy and report.json (:meth:`HeatmapRelease.to_report` plus the wire
    path, the tag's status, the round id and the shuffler's report)."""
    out.mkdir(parents=True, exist_ok=True)
    write_npy(out / "estimate.npy", release.estimate)
    write_npy(out / "raw.npy", release.raw)
    report = release.to_report()
    report.update({
        "path": "encrypted" if h.encrypted else "plaintext simulation",
        "authenticated": bool(release.protocol["mixed_batch_authenticated"]),
        "round_id": p.round_id.hex(),
        "shuffler": shuffler,
    })
    write_report(out, report)


ROLE_COMMANDS = (setup, encode, shuffle, analyze)
