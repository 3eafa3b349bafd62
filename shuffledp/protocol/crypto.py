"""Cryptography of the shuffle protocol: keys, per-message encryption, MAC key, SipHash.

- Secure randomness (:class:`~shuffledp.randomness.SecureRandom`) lives in
  :mod:`shuffledp.randomness`.
- Encryption of every message to the analyzer (deployment path): a fresh ephemeral X25519 key
  per message, HKDF-SHA256 ([RFC5869]_) of the shared secret, ChaCha20-Poly1305 with the
  parameter digest, round id and coordinate as associated data (layout in
  :mod:`shuffledp.protocol.wire`). The key stays per message, at 32 of the 52 + s bytes: a key
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
.. [RFC5869] H. Krawczyk, P. Eronen, "HMAC-based Extract-and-Expand Key Derivation Function
   (HKDF)", RFC 5869, 2010.
.. [SipHash12] J.-P. Aumasson, D. J. Bernstein, "SipHash: a fast short-input PRF",
   INDOCRYPT 2012.
"""

from __future__ import annotations

import hmac
import os
from typing import TYPE_CHECKING

import numba
import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from shuffledp.protocol.wire import ENC_OVERHEAD, WireError

if TYPE_CHECKING:  # annotations only: protocol_params imports the accounting, which imports us
    from shuffledp.protocol.params import ProtocolParams

# --------------------------------------------------------------------------------------
# keys and encryption to the analyzer (deployment path)
# --------------------------------------------------------------------------------------
def generate_mac_key() -> bytes:
    """A fresh 32-byte key for the mixed batch's tag (shared by shuffler and analyzer only)."""
    return os.urandom(32)

_NONCE = bytes(12)
_INFO = b"shuffledp/2 message key"
_ZERO_SALT = bytes(32)


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


def _message_key(shared: bytes, eph_pub: bytes, recipient_pub: bytes) -> bytes:
    """HKDF-SHA256 ([RFC5869]_, zero salt, 32-byte output) of the X25519 shared secret."""
    prk = hmac.digest(_ZERO_SALT, shared, "sha256")
    return hmac.digest(prk, _INFO + eph_pub + recipient_pub + b"\x01", "sha256")


def associated_data_prefix(params: ProtocolParams) -> bytes:
    """AEAD associated data before the coordinate: parameter digest || round id."""
    return params.digest + params.round_id


def encrypted_record_bytes(params: ProtocolParams) -> int:
    """Bytes of one encrypted message: 4 (coordinate) + 32 (ephemeral key) + share + 16 (tag)."""
    return ENC_OVERHEAD + params.share_bytes


def encrypt_records(
    params: ProtocolParams, records: np.ndarray, analyzer_public: X25519PublicKey | bytes
) -> bytes:
    """Encrypt packed plaintext messages one by one (fresh ephemeral X25519 key per message).

    Returns the concatenated encrypted records (layout in :mod:`shuffledp.protocol.wire`); the
    associated data binds each message to the parameters, the round and its coordinate.
    """
    pub = (
        X25519PublicKey.from_public_bytes(analyzer_public)
        if isinstance(analyzer_public, bytes)
        else analyzer_public
    )
    pub_raw = public_bytes(pub)
    r64 = np.asarray(records).astype(np.uint64)
    sb = np.uint64(params.share_bits)
    coords = (r64 >> sb).astype("<u4")
    sbytes = params.share_bytes
    mask = (np.uint64(1) << sb) - np.uint64(1)
    shares = (r64 & mask).astype("<u8").view(np.uint8).reshape(-1, 8)[:, :sbytes].tobytes()
    ad = associated_data_prefix(params)
    out = bytearray()
    for a, w in zip(_chunks(coords.tobytes(), 4), _chunks(shares, sbytes), strict=True):
        eph = X25519PrivateKey.generate()
        eph_pub = public_bytes(eph)
        key = _message_key(eph.exchange(pub), eph_pub, pub_raw)
        out += a + eph_pub + ChaCha20Poly1305(key).encrypt(_NONCE, w, ad + a)
    return bytes(out)


def _chunks(b: bytes, k: int):
    return (b[i : i + k] for i in range(0, len(b), k))


def open_records(
    raw: bytes, record_bytes: int, share_bytes: int, ad_prefix: bytes, key: X25519PrivateKey
) -> tuple[np.ndarray, np.ndarray, int]:
    """Decrypt whole encrypted records: (coordinates, shares, n_failed), the core loop.

    Picklable arguments only, so process pools can run it on chunks
    (:func:`shuffledp.protocol.analyzer_input.accumulate_mixed`).
    """
    pub_raw = public_bytes(key)
    k = len(raw) // record_bytes
    coords = np.empty(k, dtype=np.int64)
    shares = np.empty(k, dtype=np.int64)
    failed = good = 0
    for i in range(k):
        rec = raw[i * record_bytes : (i + 1) * record_bytes]
        a, eph_pub, ct = rec[:4], rec[4:36], rec[36:]
        try:
            shared = key.exchange(X25519PublicKey.from_public_bytes(eph_pub))
            w = ChaCha20Poly1305(_message_key(shared, eph_pub, pub_raw)).decrypt(
                _NONCE, ct, ad_prefix + a)
        except Exception:  # InvalidTag, or an invalid point: a tampered message
            failed += 1
            continue
        coords[good] = int.from_bytes(a, "little")
        shares[good] = int.from_bytes(w[:share_bytes], "little")
        good += 1
    return coords[:good], shares[:good], failed


def decrypt_records(
    params: ProtocolParams, data: bytes | np.ndarray, analyzer_private: X25519PrivateKey | bytes
) -> tuple[np.ndarray, np.ndarray, int]:
    """Decrypt encrypted messages; returns (coordinates, shares, n_failed).

    A message whose tag does not verify (tampered, wrong key, another run, or moved to
    another coordinate) is counted in ``n_failed`` and dropped, never summed.
    """
    rb = encrypted_record_bytes(params)
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if len(raw) % rb:
        raise WireError(f"encrypted data is not a whole number of {rb}-byte records")
    return open_records(raw, rb, params.share_bytes, associated_data_prefix(params),
                        as_private_key(analyzer_private))



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
