"""Cryptography of the shuffle protocol: keys, per-message encryption, MAC key, SipHash.

- Secure randomness (:class:`~shuffledp.randomness.SecureRandom`) lives in
  :mod:`shuffledp.randomness`.
- Encryption of every message to the analyzer (deployment path): HPKE ([RFC9180]_) in base
  mode, suite DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / ChaCha20-Poly1305 (KEM 0x0020, KDF
  0x0001, AEAD 0x0003), single-shot ``Seal`` to the analyzer's X25519 key: a fresh
  ephemeral key per message (the 32-byte ``enc``), so any standard HPKE library on a device
  produces our messages. The single-shot API of ``cryptography`` has no AAD argument, so the
  context is bound through ``info`` ([RFC9180]_ Sec. 8.1), which enters the key schedule:
  ``info = b"shuffledp/3 hpke message" || 0x00 || parameter digest (16) || round id || the
  4-byte coordinate``, and ``aad`` is empty. A record of another run, round or coordinate
  derives another key and fails to open. A device using another RFC 9180 library must pass
  exactly this ``info`` (:func:`message_info`) and an empty ``aad`` to ``SealBase`` /
  ``Seal``. Layout in :mod:`shuffledp.protocol.wire`: 4 (coordinate) + 32 (enc) + s + 16 (tag) =
  52 + s bytes per message, the same as the earlier ECIES construction (HPKE adds no byte:
  its base nonce is derived, not sent). The post-quantum hybrid KEM ML-KEM-768 + X25519
  (``kem="mlkem768-x25519"``, draft-ietf-hpke-pq as implemented by ``cryptography``) has a
  1,120-byte ``enc``: 1,140 + s bytes per message (22x for s = 5); it is offered by
  :func:`encrypt_records` / :func:`decrypt_records` and measured by
  ``bench/serve_load.py``, but the batch header stores the record size in one byte, so the
  hybrid records do not yet travel in wire batches.
  The key stays per message: a key
  shared by one user's r m messages (per batch) would be a label in every ciphertext that
  both the shuffler and the analyzer see, so either could group a user's messages and sum
  her shares, undoing the mixing that the split-and-mix analysis rests on. Deriving
  per-message keys from one batch key does not help: the analyzer needs the batch key to
  decrypt, so it learns which messages share it. A shorter honest saving would be the
  4-byte coordinate, implied by position in a coordinate-major layout as on the plaintext
  path (:mod:`shuffledp.protocol.packed`); not implemented here.
- The mixed batch's MAC key (HMAC-SHA256 over the batch, shared by shuffler and analyzer).
- Key files (:func:`encode_key_file`, :func:`read_key_file`): every key a command reads or
  writes is a typed text file whose first line names its kind, so a MAC key given where
  the analyzer's public key belongs (or the private key where a device expects the public
  one) is refused with an error that names both, instead of being used as 32 raw bytes.
  Format version 1 (:data:`KEY_FILE_VERSION`)::

      -----BEGIN SHUFFLEDP ANALYZER PUBLIC KEY-----
      Version: 1
      Algorithm: X25519
      Key-Id: 5c1e0b7f2a9d4e63

      <base64 of the raw key: 32 bytes>
      -----END SHUFFLEDP ANALYZER PUBLIC KEY-----

  The kinds (:data:`KEY_KINDS`) are ``ANALYZER PRIVATE KEY`` (X25519, 32 bytes, kept by the
  analyzer), ``ANALYZER PUBLIC KEY`` (X25519, 32 bytes, given to devices) and ``MAC KEY``
  (HMAC-SHA256, 32 bytes, shared by the shuffler and the analyzer only). ``Key-Id`` is the
  first 8 bytes, in hex, of SHA-256(``b"shuffledp key id\x00"`` || algorithm || public key)
  for both halves of an analyzer key pair (so ``analyzer.key`` and ``analyzer.pub`` show the
  same id and a mismatched pair is visible), and of SHA-256(``b"shuffledp key id\x00"`` ||
  ``b"HMAC-SHA256"`` || key) for a MAC key (64 bits of a hash of 256 random bits: it names
  the key without revealing it). A reader recomputes it, so a corrupted or edited key is
  refused. The untyped files of before (32 raw bytes) are refused with a message saying
  so: their kind cannot be checked. Devices that speak HPKE with another library take the
  raw public key from the base64 line (or from the shuffler's ``/hpke_config``).
- SipHash-2-4 ([SipHash12]_), the keyed hash the shuffler uses to send copies of one
  encrypted record to the same bucket.

References
----------
.. [Lemire19] Lemire (2019), "Fast Random Integer Generation in an Interval"
   -- full entry in docs/references.md
.. [RFC9180] Barnes et al. (2022), "Hybrid Public Key Encryption" (RFC 9180), Sec. 4, 5.1, 6.1, 8.1
   -- full entry in docs/references.md
.. [RFC5869] Krawczyk and Eronen (2010), "HKDF" (RFC 5869) -- full entry in docs/references.md
.. [SipHash12] Aumasson and Bernstein (2012), "SipHash: a fast short-input PRF"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from typing import TYPE_CHECKING

import numba
import numpy as np
from cryptography.hazmat.primitives import hpke, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from shuffledp.protocol.wire import WireError
from shuffledp.safe_io import UnsafeFileError, read_regular

if TYPE_CHECKING:  # annotations only: protocol_params imports the accounting, which imports us
    from shuffledp.protocol.params import ProtocolParams

# --------------------------------------------------------------------------------------
# keys and encryption to the analyzer (deployment path)
# --------------------------------------------------------------------------------------
def generate_mac_key() -> bytes:
    """A fresh 32-byte key for the mixed batch's tag (shared by shuffler and analyzer only).

    Returns
    -------
    bytes
        32 bytes from the operating system's CSPRNG.
    """
    return os.urandom(32)

#: HPKE info label; the full info is this || digest || round id || coordinate (message_info)
INFO_LABEL = b"shuffledp/3 hpke message\x00"
#: the KEMs an analyzer key can use: name -> (cryptography KEM, bytes of enc)
KEM_X25519 = "x25519"
KEM_HYBRID = "mlkem768-x25519"
KEMS = (KEM_X25519, KEM_HYBRID)
_ENC_BYTES = {KEM_X25519: 32, KEM_HYBRID: 1120}
_SUITES: dict[str, hpke.Suite] = {}


def _hpke_suite(kem: str = KEM_X25519) -> hpke.Suite:
    """The HPKE suite of ``kem`` with HKDF-SHA256 and ChaCha20-Poly1305 ([RFC9180]_)."""
    if kem not in _ENC_BYTES:
        raise ValueError(f"kem must be one of {KEMS}, got kem={kem!r}")
    if kem not in _SUITES:
        k = hpke.KEM.X25519 if kem == KEM_X25519 else hpke.KEM.MLKEM768_X25519
        _SUITES[kem] = hpke.Suite(k, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
    return _SUITES[kem]


def _enc_bytes(kem: str = KEM_X25519) -> int:
    """Bytes of HPKE's encapsulated key ``enc``: 32 for X25519, 1,120 for the hybrid."""
    _hpke_suite(kem)
    return _ENC_BYTES[kem]


def generate_hybrid_key() -> hpke.MLKEM768X25519PrivateKey:
    """A fresh ML-KEM-768 + X25519 hybrid private key (post-quantum option, see module doc).

    Returns
    -------
    cryptography.hazmat.primitives.hpke.MLKEM768X25519PrivateKey
        The hybrid private key (its public key encrypts with ``kem="mlkem768-x25519"``).
    """
    from cryptography.hazmat.primitives.asymmetric import mlkem

    return hpke.MLKEM768X25519PrivateKey(mlkem.MLKEM768PrivateKey.generate(),
                                         X25519PrivateKey.generate())


def generate_analyzer_key() -> X25519PrivateKey:
    """A fresh X25519 key pair for the analyzer (keep the private key on the analyzer).

    Returns
    -------
    X25519PrivateKey
        The private key (:func:`public_bytes` gives the public half).
    """
    return X25519PrivateKey.generate()


def public_bytes(key: X25519PublicKey | X25519PrivateKey) -> bytes:
    """Raw 32-byte public key.

    Parameters
    ----------
    key : X25519PublicKey or X25519PrivateKey
        A public key, or a private key whose public half is wanted.

    Returns
    -------
    bytes
        The 32 raw bytes of the public key.

    Raises
    ------
    TypeError
        If ``key`` is not an X25519 key object.
    """
    if not isinstance(key, (X25519PublicKey, X25519PrivateKey)):
        raise TypeError(f"key must be an X25519 key, got {type(key).__name__}")
    pub = key.public_key() if isinstance(key, X25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private_bytes(key: X25519PrivateKey) -> bytes:
    """Raw 32-byte private key (store securely).

    Parameters
    ----------
    key : X25519PrivateKey
        The analyzer's private key.

    Returns
    -------
    bytes
        The 32 raw bytes of the private key.

    Raises
    ------
    TypeError
        If ``key`` is not an X25519 private key.
    """
    if not isinstance(key, X25519PrivateKey):
        raise TypeError(f"key must be an X25519 private key, got {type(key).__name__}")
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def as_private_key(key: X25519PrivateKey | bytes) -> X25519PrivateKey:
    """An X25519 private key from a key object or its 32 raw bytes.

    Parameters
    ----------
    key : X25519PrivateKey or bytes
        A key object (returned as is) or its 32 raw bytes.

    Returns
    -------
    X25519PrivateKey
        The key object.

    Raises
    ------
    ValueError
        If ``key`` is neither a key object nor 32 bytes.
    """
    if isinstance(key, X25519PrivateKey):
        return key
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return X25519PrivateKey.from_private_bytes(bytes(key))
    raise ValueError(
        f"key must be an X25519 private key or its 32 raw bytes, got "
        f"{f'{len(key)} bytes' if isinstance(key, (bytes, bytearray)) else type(key).__name__}"
    )


# --------------------------------------------------------------------------------------
# typed key files
# --------------------------------------------------------------------------------------
#: format version of key files; a reader refuses any other
KEY_FILE_VERSION = 1
KEY_ANALYZER_PRIVATE = "ANALYZER PRIVATE KEY"
KEY_ANALYZER_PUBLIC = "ANALYZER PUBLIC KEY"
KEY_MAC = "MAC KEY"
#: kind -> (algorithm, bytes of the raw key, what it is, in messages)
KEY_KINDS = {
    KEY_ANALYZER_PRIVATE: ("X25519", 32, "the analyzer's private key"),
    KEY_ANALYZER_PUBLIC: ("X25519", 32, "the analyzer's public key"),
    KEY_MAC: ("HMAC-SHA256", 32, "the shuffler-analyzer MAC key"),
}
#: largest key file read (a version-1 file of a 32-byte key has about 200 bytes)
KEY_FILE_MAX_BYTES = 4096
_KEY_ID_LABEL = b"shuffledp key id\x00"
_BEGIN, _END, _DASHES = "-----BEGIN SHUFFLEDP ", "-----END SHUFFLEDP ", "-----"
_HINTS = {
    KEY_ANALYZER_PUBLIC: "analyzer.pub, written by `shuffledp setup`",
    KEY_ANALYZER_PRIVATE: "analyzer.key, written by `shuffledp setup`",
    KEY_MAC: "mac.key, written by `shuffledp setup`",
}


class KeyFileError(ValueError):
    """A key file that is not of the expected kind, version or content (the message names
    the file, what it holds and what was expected)."""


def _check_kind(kind: str) -> tuple[str, int, str]:
    if kind not in KEY_KINDS:
        raise ValueError(f"kind must be one of {tuple(KEY_KINDS)}, got kind={kind!r}")
    return KEY_KINDS[kind]


def key_id(kind: str, raw: bytes) -> str:
    """The 16-hex-digit ``Key-Id`` of a key of ``kind`` (see the module docstring).

    Both halves of an analyzer key pair have the id of the public key.

    Parameters
    ----------
    kind : str
        One of :data:`KEY_KINDS`.
    raw : bytes
        The raw key (32 bytes for every kind of version 1).

    Returns
    -------
    str
        16 lowercase hex digits (the first 8 bytes of a SHA-256 over label, algorithm, key).

    Raises
    ------
    ValueError
        If ``kind`` is not one of :data:`KEY_KINDS` or ``raw`` has the wrong length.
    """
    algorithm, size, what = _check_kind(kind)
    raw = bytes(raw)
    if len(raw) != size:
        raise ValueError(f"{what} has {size} bytes, got {len(raw)}")
    if kind == KEY_ANALYZER_PRIVATE:
        raw = public_bytes(X25519PrivateKey.from_private_bytes(raw))
    return hashlib.sha256(_KEY_ID_LABEL + algorithm.encode() + raw).digest()[:8].hex()


def analyzer_key_id(public: X25519PublicKey | X25519PrivateKey | bytes) -> bytes:
    """The 8-byte id of an analyzer X25519 key that encrypted user batches carry.

    The raw bytes of :func:`key_id` of the public key (the same id whichever half is given):
    a user batch names the key its messages are sealed to, so the shuffler can refuse a
    batch sealed to another key before mixing (``wrong_key``).

    Parameters
    ----------
    public : X25519PublicKey, X25519PrivateKey or bytes
        The analyzer's key (object, or the 32 raw bytes of the public key).

    Returns
    -------
    bytes
        8 bytes.

    Raises
    ------
    ValueError
        If raw bytes are not 32 long.
    """
    raw = public if isinstance(public, (bytes, bytearray)) else public_bytes(public)
    return bytes.fromhex(key_id(KEY_ANALYZER_PUBLIC, bytes(raw)))


def _check_public_key(raw: bytes) -> bytes:
    """``raw`` if it is a usable X25519 public key (32 bytes, not a low-order point)."""
    if len(raw) != 32:
        raise ValueError(f"an X25519 public key has 32 bytes, got {len(raw)}")
    try:
        X25519PrivateKey.generate().exchange(X25519PublicKey.from_public_bytes(bytes(raw)))
    except ValueError:
        raise ValueError("not a usable X25519 public key (a low-order point)") from None
    return bytes(raw)


def encode_key_file(kind: str, raw: bytes) -> bytes:
    """The bytes of a version-1 key file holding ``raw``, a key of ``kind``.

    Parameters
    ----------
    kind : str
        One of :data:`KEY_KINDS` (:data:`KEY_ANALYZER_PRIVATE`, :data:`KEY_ANALYZER_PUBLIC`,
        :data:`KEY_MAC`).
    raw : bytes
        The raw key (32 bytes for every kind of version 1).

    Returns
    -------
    bytes
        ASCII text, ending with a newline (format in the module docstring).

    Raises
    ------
    ValueError
        If ``kind`` is not one of :data:`KEY_KINDS` or ``raw`` has the wrong length.
    """
    algorithm = _check_kind(kind)[0]
    kid = key_id(kind, raw)
    body = base64.b64encode(bytes(raw)).decode()
    return (f"{_BEGIN}{kind}{_DASHES}\nVersion: {KEY_FILE_VERSION}\nAlgorithm: {algorithm}\n"
            f"Key-Id: {kid}\n\n{body}\n{_END}{kind}{_DASHES}\n").encode()


def _file_kind(first_line: str) -> str | None:
    if first_line.startswith(_BEGIN) and first_line.endswith(_DASHES):
        return first_line[len(_BEGIN):-len(_DASHES)]
    return None


def _wrong_kind(source: str, got: str, want: str) -> KeyFileError:
    got_what, want_what = KEY_KINDS[got][2], KEY_KINDS[want][2]
    msg = f"{source}: holds {got_what} ({got}), not {want_what}; pass {_HINTS[want]}"
    if got == KEY_ANALYZER_PRIVATE and want == KEY_ANALYZER_PUBLIC:
        msg += " (the private key must stay with the analyzer, never on a device)"
    return KeyFileError(msg)


def decode_key_file(data: bytes, kind: str, *, source: str = "key file") -> bytes:
    """The raw key of a key file, after checking its kind, version, algorithm and id.

    Parameters
    ----------
    data : bytes
        The file's content.
    kind : str
        The kind the caller expects (one of :data:`KEY_KINDS`).
    source : str
        How to name the file in errors (e.g. ``"--analyzer-pub run/mac.key"``).

    Returns
    -------
    bytes
        The raw key (a usable X25519 point for a public key).

    Raises
    ------
    KeyFileError
        Another kind of key (naming both), an untyped raw key of the earlier format, another
        format version, a malformed file, or a ``Key-Id`` that does not match the key.
    """
    algorithm, size, what = _check_kind(kind)
    if not data.startswith(_BEGIN.encode()):
        if len(data) == 32:
            raise KeyFileError(
                f"{source}: 32 raw bytes without a type header (the untyped key files of "
                f"before key file format {KEY_FILE_VERSION}): whether it is {what} cannot be "
                "checked; run `shuffledp setup` again to write typed key files")
        raise KeyFileError(f"{source}: not a shuffledp key file (expected {what}, a text "
                           f"file starting with '{_BEGIN}{kind}{_DASHES}')")
    try:
        lines = data.decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise KeyFileError(f"{source}: not a shuffledp key file (non-ASCII bytes)") from None
    got = _file_kind(lines[0])
    if got not in KEY_KINDS:
        raise KeyFileError(f"{source}: unknown key kind in {lines[0]!r:.80} (expected {what})")
    if got != kind:
        raise _wrong_kind(source, got, kind)
    headers: dict[str, str] = {}
    i = 1
    while i < len(lines) and lines[i].strip():
        name, sep, value = lines[i].partition(":")
        if not sep:
            raise KeyFileError(f"{source}: malformed header line {i + 1}: {lines[i]!r:.80}")
        headers[name.strip().lower()] = value.strip()
        i += 1
    version = headers.get("version")
    if version != str(KEY_FILE_VERSION):
        raise KeyFileError(
            f"{source}: key file format version {version!r} (this reader knows version "
            f"{KEY_FILE_VERSION}{'; upgrade shuffledp' if version and version.isdigit() else ''})")
    if headers.get("algorithm") != algorithm:
        raise KeyFileError(f"{source}: algorithm {headers.get('algorithm')!r}, {what} is "
                           f"{algorithm}")
    rest = [ln.strip() for ln in lines[i:] if ln.strip()]
    if len(rest) < 2 or rest[-1] != f"{_END}{kind}{_DASHES}":
        raise KeyFileError(f"{source}: truncated key file (no '{_END}{kind}{_DASHES}' line)")
    try:
        raw = base64.b64decode("".join(rest[:-1]), validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(f"{source}: the key is not valid base64") from None
    if len(raw) != size:
        raise KeyFileError(f"{source}: {len(raw)} key bytes, {what} has {size}")
    if kind == KEY_ANALYZER_PUBLIC:
        try:
            _check_public_key(raw)
        except ValueError as e:
            raise KeyFileError(f"{source}: {e}") from None
    if headers.get("key-id") != key_id(kind, raw):
        raise KeyFileError(f"{source}: Key-Id {headers.get('key-id')!r} does not match the key "
                           f"({key_id(kind, raw)}): the file is corrupt or was edited")
    return raw


def read_key_file(path: str | os.PathLike, kind: str, *, what: str = "") -> bytes:
    """:func:`decode_key_file` of a regular file of at most :data:`KEY_FILE_MAX_BYTES`.

    Parameters
    ----------
    path : str or os.PathLike
        The key file.
    kind : str
        The kind expected, one of :data:`KEY_KINDS`.
    what : str, optional
        What the file is for (e.g. ``"--key"``), prefixed to error messages.

    Returns
    -------
    bytes
        The raw key.

    Raises
    ------
    KeyFileError
        As :func:`decode_key_file`.
    shuffledp.safe_io.UnsafeFileError
        Not a regular file (a FIFO, a device...), unreadable or too large.
    """
    label = f"{what} {os.fspath(path)}" if what else os.fspath(path)
    try:
        data = read_regular(path, KEY_FILE_MAX_BYTES, what=what)
    except UnsafeFileError as e:
        if "more than the" in str(e):
            raise KeyFileError(f"{label}: larger than any key file "
                               f"({KEY_FILE_MAX_BYTES} bytes at most)") from None
        raise
    return decode_key_file(data, kind, source=label)


def associated_data_prefix(params: ProtocolParams) -> bytes:
    """The context bound to every message before its coordinate: digest || round id.

    With HPKE it enters ``info`` (:func:`message_info`), not an AEAD's associated data.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters.

    Returns
    -------
    bytes
        ``params.digest`` followed by ``params.round_id``.

    Raises
    ------
    TypeError
        If ``params`` has no bytes ``digest`` and ``round_id`` (not a ProtocolParams).
    """
    digest, rid = getattr(params, "digest", None), getattr(params, "round_id", None)
    if not isinstance(digest, bytes) or not isinstance(rid, bytes):
        raise TypeError(f"params must be a ProtocolParams, got {type(params).__name__}")
    return params.digest + params.round_id


def message_info(ad_prefix: bytes, coordinate: bytes) -> bytes:
    """HPKE ``info`` of one message: label || digest || round id || 4-byte LE coordinate.

    Parameters
    ----------
    ad_prefix : bytes
        :func:`associated_data_prefix` of the run.
    coordinate : bytes
        The message's 4-byte little-endian coordinate field.

    Returns
    -------
    bytes
        :data:`INFO_LABEL` || ``ad_prefix`` || ``coordinate`` ([RFC9180]_ Sec. 8.1).

    Raises
    ------
    ValueError
        If ``coordinate`` is not 4 bytes.
    """
    if len(coordinate) != 4:
        raise ValueError(f"coordinate must be 4 bytes, got {bytes(coordinate)!r}")
    return INFO_LABEL + ad_prefix + coordinate


def encrypted_record_bytes(params: ProtocolParams, kem: str = KEM_X25519) -> int:
    """Bytes of one encrypted message: 4 (coordinate) + enc (32) + share + 16 (tag).

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters (its ``share_bytes``).
    kem : str, default "x25519"
        One of :data:`KEMS` (enc is 1,120 bytes for the hybrid).

    Returns
    -------
    int
        Bytes per encrypted record.

    Raises
    ------
    ValueError
        If ``kem`` is not one of :data:`KEMS`.
    """
    return 4 + _enc_bytes(kem) + params.share_bytes + 16


def encrypt_records(
    params: ProtocolParams, records: np.ndarray, analyzer_public, kem: str = KEM_X25519
) -> bytes:
    """Encrypt packed plaintext messages one by one (HPKE single-shot Seal, base mode).

    Returns the concatenated encrypted records (layout in :mod:`shuffledp.protocol.wire`); ``info``
    binds each message to the parameters, the round and its coordinate (:func:`message_info`).
    ``analyzer_public`` is the analyzer's X25519 public key (object or 32 raw bytes), or a
    hybrid public key with ``kem="mlkem768-x25519"``.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters.
    records : numpy.ndarray
        Packed plaintext messages (coordinate << share_bits | share).
    analyzer_public : X25519PublicKey, bytes or hybrid public key
        The analyzer's public key.
    kem : str, default "x25519"
        One of :data:`KEMS`.

    Returns
    -------
    bytes
        The encrypted records, :func:`encrypted_record_bytes` each.

    Raises
    ------
    ValueError
        If ``kem`` is not one of :data:`KEMS` or ``analyzer_public`` bytes are not 32.
    """
    suite = _hpke_suite(kem)
    pub = (
        X25519PublicKey.from_public_bytes(bytes(analyzer_public))
        if isinstance(analyzer_public, (bytes, bytearray))
        else analyzer_public
    )
    r64 = np.asarray(records).astype(np.uint64)
    sb = np.uint64(params.share_bits)
    coords = (r64 >> sb).astype("<u4")
    sbytes = params.share_bytes
    mask = (np.uint64(1) << sb) - np.uint64(1)
    shares = (r64 & mask).astype("<u8").view(np.uint8).reshape(-1, 8)[:, :sbytes].tobytes()
    info = INFO_LABEL + associated_data_prefix(params)
    seal = suite.encrypt
    out = bytearray()
    for a, w in zip(_chunks(coords.tobytes(), 4), _chunks(shares, sbytes), strict=True):
        out += a
        out += seal(w, pub, info + a)
    return bytes(out)


def _chunks(b: bytes, k: int):
    return (b[i : i + k] for i in range(0, len(b), k))


def open_records(
    raw: bytes, record_bytes: int, share_bytes: int, ad_prefix: bytes, key,
    kem: str = KEM_X25519,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Decrypt whole encrypted records: (coordinates, shares, n_failed).

    :func:`open_records_detailed` with the failed messages counted.

    Parameters
    ----------
    raw, record_bytes, share_bytes, ad_prefix, key, kem
        As :func:`open_records_detailed`.

    Returns
    -------
    tuple of (numpy.ndarray, numpy.ndarray, int)
        Coordinates and shares (int64) of the messages that opened; the number that did not.

    Raises
    ------
    ValueError
        If ``kem`` is not one of :data:`KEMS`.
    """
    c, s, failed = open_records_detailed(raw, record_bytes, share_bytes, ad_prefix, key, kem)
    return c, s, int(failed.size)


def open_records_detailed(
    raw: bytes, record_bytes: int, share_bytes: int, ad_prefix: bytes, key,
    kem: str = KEM_X25519,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decrypt whole encrypted records, the core loop: (coordinates, shares, failed).

    ``failed`` holds the clear coordinate field of every message that did not open (int64),
    so the analyzer can tell a whole batch encrypted to another key (r failures at every
    coordinate) from part of one. Picklable arguments only, so process pools can run it on
    chunks (:func:`shuffledp.analyzers.heatmap.modular.accumulate_mixed`).

    Parameters
    ----------
    raw : bytes
        Whole encrypted records (a trailing partial record is ignored).
    record_bytes : int
        Bytes per encrypted record (:func:`encrypted_record_bytes`).
    share_bytes : int
        Bytes of a share in the plaintext.
    ad_prefix : bytes
        :func:`associated_data_prefix` of the run.
    key : private key
        The analyzer's private key (X25519, or the hybrid key with ``kem`` the hybrid).
    kem : str, default "x25519"
        One of :data:`KEMS`.

    Returns
    -------
    tuple of numpy.ndarray
        Coordinates and shares of the messages that opened; coordinates of those that did not.

    Raises
    ------
    ValueError
        If ``kem`` is not one of :data:`KEMS`.
    """
    open_ = _hpke_suite(kem).decrypt
    info = INFO_LABEL + ad_prefix
    mv = memoryview(raw)
    k = len(raw) // record_bytes
    coords = np.empty(k, dtype=np.int64)
    shares = np.empty(k, dtype=np.int64)
    failed = np.empty(k, dtype=np.int64)
    nf = good = 0
    for i in range(k):
        o = i * record_bytes
        a = raw[o : o + 4]
        try:
            w = open_(mv[o + 4 : o + record_bytes], key, info + a)
        except Exception:  # InvalidTag, or an invalid point: a tampered message
            failed[nf] = int.from_bytes(a, "little")
            nf += 1
            continue
        coords[good] = int.from_bytes(a, "little")
        shares[good] = int.from_bytes(w[:share_bytes], "little")
        good += 1
    return coords[:good], shares[:good], failed[:nf]


def decrypt_records(
    params: ProtocolParams, data: bytes | np.ndarray, analyzer_private, kem: str = KEM_X25519
) -> tuple[np.ndarray, np.ndarray, int]:
    """Decrypt encrypted messages; returns (coordinates, shares, n_failed).

    A message that does not open (tampered, wrong key, another run, or moved to another
    coordinate: ``info`` differs, so the key schedule gives another key) is counted in
    ``n_failed`` and dropped, never summed.

    Parameters
    ----------
    params : ProtocolParams
        The run's parameters.
    data : bytes or numpy.ndarray
        Encrypted records.
    analyzer_private : X25519PrivateKey, bytes or hybrid private key
        The analyzer's private key.
    kem : str, default "x25519"
        One of :data:`KEMS`.

    Returns
    -------
    tuple of (numpy.ndarray, numpy.ndarray, int)
        Coordinates and shares of the messages that opened; the number that did not.

    Raises
    ------
    WireError
        If ``data`` is not a whole number of records.
    ValueError
        If ``kem`` is not one of :data:`KEMS` or the X25519 key is not 32 bytes.
    """
    rb = encrypted_record_bytes(params, kem)
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if len(raw) % rb:
        raise WireError(f"encrypted data is not a whole number of {rb}-byte records")
    key = as_private_key(analyzer_private) if kem == KEM_X25519 else analyzer_private
    return open_records(raw, rb, params.share_bytes, associated_data_prefix(params), key, kem)


# --------------------------------------------------------------------------------------
# SipHash-2-4
# --------------------------------------------------------------------------------------
@numba.njit(inline="always")
def _rotl(x, b):  # pragma: no cover - compiled
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@numba.njit(inline="always")
def _sipround(v0, v1, v2, v3):  # pragma: no cover - compiled
    v0 += v1
    v1 = _rotl(v1, 13)
    v1 ^= v0
    v0 = _rotl(v0, 32)
    v2 += v3
    v3 = _rotl(v3, 16)
    v3 ^= v2
    v0 += v3
    v3 = _rotl(v3, 21)
    v3 ^= v0
    v2 += v1
    v1 = _rotl(v1, 17)
    v1 ^= v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@numba.njit(cache=True, nogil=True)
def _siphash_rows(rows, k0, k1):  # pragma: no cover - compiled
    """SipHash-2-4 of every row of a 2D uint8 array ([SipHash12]_)."""
    n, length = rows.shape
    out = np.empty(n, dtype=np.uint64)
    eight = np.uint64(8)
    for i in range(n):
        v0 = k0 ^ np.uint64(0x736F6D6570736575)
        v1 = k1 ^ np.uint64(0x646F72616E646F6D)
        v2 = k0 ^ np.uint64(0x6C7967656E657261)
        v3 = k1 ^ np.uint64(0x7465646279746573)
        full = length - length % 8
        for off in range(0, full, 8):
            m = np.uint64(0)
            for b in range(8):
                m |= np.uint64(rows[i, off + b]) << (eight * np.uint64(b))
            v3 ^= m
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
            v0 ^= m
        last = np.uint64(length & 0xFF) << np.uint64(56)
        for b in range(length - full):
            last |= np.uint64(rows[i, full + b]) << (eight * np.uint64(b))
        v3 ^= last
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0 ^= last
        v2 ^= np.uint64(0xFF)
        for _ in range(4):
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        out[i] = v0 ^ v1 ^ v2 ^ v3
    return out


def siphash24(key: bytes, rows: np.ndarray) -> np.ndarray:
    """SipHash-2-4 under a 16-byte ``key`` of each row of a 2D uint8 array ([SipHash12]_).

    Parameters
    ----------
    key : bytes
        16-byte key.
    rows : numpy.ndarray
        2D uint8 array; each row is one input.

    Returns
    -------
    numpy.ndarray
        One uint64 per row.

    Raises
    ------
    ValueError
        If ``key`` is not 16 bytes or ``rows`` is not 2D.
    """
    if not isinstance(key, bytes) or len(key) != 16:
        raise ValueError(f"key must be 16 bytes, got {key!r}")
    r = np.ascontiguousarray(rows, dtype=np.uint8)
    if r.ndim != 2:
        raise ValueError(f"rows must be 2D, got shape {r.shape}")
    k0, k1 = (np.uint64(int.from_bytes(key[i : i + 8], "little")) for i in (0, 8))
    return _siphash_rows(r, k0, k1)
