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
- SipHash-2-4 ([SipHash12]_), the keyed hash the shuffler uses to send copies of one
  encrypted record to the same bucket.

References
----------
.. [Lemire19] D. Lemire, "Fast Random Integer Generation in an Interval", ACM TOMACS 29(1),
   2019.
.. [RFC9180] R. Barnes, K. Bhargavan, B. Lipp, C. Wood, "Hybrid Public Key Encryption",
   RFC 9180, 2022, Sec. 4 (DHKEM), 5.1 (key schedule), 6.1 (single-shot Seal/Open), 8.1
   (input limits and ``info``).
.. [RFC5869] H. Krawczyk, P. Eronen, "HMAC-based Extract-and-Expand Key Derivation Function
   (HKDF)", RFC 5869, 2010.
.. [SipHash12] J.-P. Aumasson, D. J. Bernstein, "SipHash: a fast short-input PRF",
   INDOCRYPT 2012.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numba
import numpy as np
from cryptography.hazmat.primitives import hpke, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from shuffledp.protocol.wire import WireError

if TYPE_CHECKING:  # annotations only: protocol_params imports the accounting, which imports us
    from shuffledp.protocol.params import ProtocolParams

# --------------------------------------------------------------------------------------
# keys and encryption to the analyzer (deployment path)
# --------------------------------------------------------------------------------------
def generate_mac_key() -> bytes:
    """A fresh 32-byte key for the mixed batch's tag (shared by shuffler and analyzer only)."""
    return os.urandom(32)

#: HPKE info label; the full info is this || digest || round id || coordinate (message_info)
INFO_LABEL = b"shuffledp/3 hpke message\x00"
#: the KEMs an analyzer key can use: name -> (cryptography KEM, bytes of enc)
KEM_X25519 = "x25519"
KEM_HYBRID = "mlkem768-x25519"
KEMS = (KEM_X25519, KEM_HYBRID)
_ENC_BYTES = {KEM_X25519: 32, KEM_HYBRID: 1120}
_SUITES: dict[str, hpke.Suite] = {}


def hpke_suite(kem: str = KEM_X25519) -> hpke.Suite:
    """The HPKE suite of ``kem`` with HKDF-SHA256 and ChaCha20-Poly1305 ([RFC9180]_)."""
    if kem not in _ENC_BYTES:
        raise ValueError(f"kem must be one of {KEMS}, got kem={kem!r}")
    if kem not in _SUITES:
        k = hpke.KEM.X25519 if kem == KEM_X25519 else hpke.KEM.MLKEM768_X25519
        _SUITES[kem] = hpke.Suite(k, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
    return _SUITES[kem]


def enc_bytes(kem: str = KEM_X25519) -> int:
    """Bytes of HPKE's encapsulated key ``enc``: 32 for X25519, 1,120 for the hybrid."""
    hpke_suite(kem)
    return _ENC_BYTES[kem]


def generate_hybrid_key() -> hpke.MLKEM768X25519PrivateKey:
    """A fresh ML-KEM-768 + X25519 hybrid private key (post-quantum option, see module doc)."""
    from cryptography.hazmat.primitives.asymmetric import mlkem

    return hpke.MLKEM768X25519PrivateKey(mlkem.MLKEM768PrivateKey.generate(),
                                         X25519PrivateKey.generate())


def generate_analyzer_key() -> X25519PrivateKey:
    """A fresh X25519 key pair for the analyzer (keep the private key on the analyzer)."""
    return X25519PrivateKey.generate()


def public_bytes(key: X25519PublicKey | X25519PrivateKey) -> bytes:
    """Raw 32-byte public key."""
    pub = key.public_key() if isinstance(key, X25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private_bytes(key: X25519PrivateKey) -> bytes:
    """Raw 32-byte private key (store securely)."""
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def as_private_key(key: X25519PrivateKey | bytes) -> X25519PrivateKey:
    """An X25519 private key from a key object or its 32 raw bytes."""
    if isinstance(key, X25519PrivateKey):
        return key
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return X25519PrivateKey.from_private_bytes(bytes(key))
    raise ValueError(
        f"key must be an X25519 private key or its 32 raw bytes, got "
        f"{f'{len(key)} bytes' if isinstance(key, (bytes, bytearray)) else type(key).__name__}"
    )


def associated_data_prefix(params: ProtocolParams) -> bytes:
    """The context bound to every message before its coordinate: digest || round id.

    With HPKE it enters ``info`` (:func:`message_info`), not an AEAD's associated data.
    """
    return params.digest + params.round_id


def message_info(ad_prefix: bytes, coordinate: bytes) -> bytes:
    """HPKE ``info`` of one message: label || digest || round id || 4-byte LE coordinate."""
    return INFO_LABEL + ad_prefix + coordinate


def encrypted_record_bytes(params: ProtocolParams, kem: str = KEM_X25519) -> int:
    """Bytes of one encrypted message: 4 (coordinate) + enc (32) + share + 16 (tag)."""
    return 4 + enc_bytes(kem) + params.share_bytes + 16


def encrypt_records(
    params: ProtocolParams, records: np.ndarray, analyzer_public, kem: str = KEM_X25519
) -> bytes:
    """Encrypt packed plaintext messages one by one (HPKE single-shot Seal, base mode).

    Returns the concatenated encrypted records (layout in :mod:`shuffledp.protocol.wire`); ``info``
    binds each message to the parameters, the round and its coordinate (:func:`message_info`).
    ``analyzer_public`` is the analyzer's X25519 public key (object or 32 raw bytes), or a
    hybrid public key with ``kem="mlkem768-x25519"``.
    """
    suite = hpke_suite(kem)
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
    """Decrypt whole encrypted records: (coordinates, shares, n_failed), the core loop.

    Picklable arguments only, so process pools can run it on chunks
    (:func:`shuffledp.analyzers.heatmap.modular.accumulate_mixed`).
    """
    open_ = hpke_suite(kem).decrypt
    info = INFO_LABEL + ad_prefix
    mv = memoryview(raw)
    k = len(raw) // record_bytes
    coords = np.empty(k, dtype=np.int64)
    shares = np.empty(k, dtype=np.int64)
    failed = good = 0
    for i in range(k):
        o = i * record_bytes
        a = raw[o : o + 4]
        try:
            w = open_(mv[o + 4 : o + record_bytes], key, info + a)
        except Exception:  # InvalidTag, or an invalid point: a tampered message
            failed += 1
            continue
        coords[good] = int.from_bytes(a, "little")
        shares[good] = int.from_bytes(w[:share_bytes], "little")
        good += 1
    return coords[:good], shares[:good], failed


def decrypt_records(
    params: ProtocolParams, data: bytes | np.ndarray, analyzer_private, kem: str = KEM_X25519
) -> tuple[np.ndarray, np.ndarray, int]:
    """Decrypt encrypted messages; returns (coordinates, shares, n_failed).

    A message that does not open (tampered, wrong key, another run, or moved to another
    coordinate: ``info`` differs, so the key schedule gives another key) is counted in
    ``n_failed`` and dropped, never summed.
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
    """SipHash-2-4 under a 16-byte ``key`` of each row of a 2D uint8 array (uint64 per row)."""
    if not isinstance(key, bytes) or len(key) != 16:
        raise ValueError(f"key must be 16 bytes, got {key!r}")
    r = np.ascontiguousarray(rows, dtype=np.uint8)
    if r.ndim != 2:
        raise ValueError(f"rows must be 2D, got shape {r.shape}")
    k0, k1 = (np.uint64(int.from_bytes(key[i : i + 8], "little")) for i in (0, 8))
    return _siphash_rows(r, k0, k1)
