"""A from-the-text RFC 9180 base-mode HPKE (DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
ChaCha20-Poly1305), written only from the RFC's pseudocode with HMAC, X25519 and the AEAD as
primitives. Tests use it as "another standard HPKE library on a device": our records must
open with it, and what it seals must open on our analyzer.

References
----------
.. [RFC9180] R. Barnes, K. Bhargavan, B. Lipp, C. Wood, "Hybrid Public Key Encryption",
   RFC 9180, 2022, Sec. 4 (LabeledExtract/Expand), 4.1 (DHKEM), 5.1 (KeySchedule), 6.1.
"""

from __future__ import annotations

import hmac

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

KEM_ID, KDF_ID, AEAD_ID = 0x0020, 0x0001, 0x0003
SUITE_KEM = b"KEM" + KEM_ID.to_bytes(2, "big")
SUITE = b"HPKE" + KEM_ID.to_bytes(2, "big") + KDF_ID.to_bytes(2, "big") + AEAD_ID.to_bytes(2, "big")


def _extract(salt: bytes, ikm: bytes) -> bytes:
    return hmac.digest(salt or bytes(32), ikm, "sha256")


def _expand(prk: bytes, info: bytes, n: int) -> bytes:
    out, t, i = b"", b"", 1
    while len(out) < n:
        t = hmac.digest(prk, t + info + bytes([i]), "sha256")
        out += t
        i += 1
    return out[:n]


def labeled_extract(suite: bytes, salt: bytes, label: bytes, ikm: bytes) -> bytes:
    return _extract(salt, b"HPKE-v1" + suite + label + ikm)


def labeled_expand(suite: bytes, prk: bytes, label: bytes, info: bytes, n: int) -> bytes:
    return _expand(prk, n.to_bytes(2, "big") + b"HPKE-v1" + suite + label + info, n)


def _raw(pub: X25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization as s

    return pub.public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)


def _shared_secret(dh: bytes, enc: bytes, pk_r: bytes) -> bytes:
    prk = labeled_extract(SUITE_KEM, b"", b"eae_prk", dh)
    return labeled_expand(SUITE_KEM, prk, b"shared_secret", enc + pk_r, 32)


def _key_schedule(shared: bytes, info: bytes) -> tuple[bytes, bytes]:
    psk_id_hash = labeled_extract(SUITE, b"", b"psk_id_hash", b"")
    info_hash = labeled_extract(SUITE, b"", b"info_hash", info)
    context = b"\x00" + psk_id_hash + info_hash  # mode_base
    secret = labeled_extract(SUITE, shared, b"secret", b"")
    return (labeled_expand(SUITE, secret, b"key", context, 32),
            labeled_expand(SUITE, secret, b"base_nonce", context, 12))


def seal(pk_r: bytes, info: bytes, aad: bytes, pt: bytes) -> bytes:
    """SealBase: enc || ct (sequence number 0, so the nonce is base_nonce)."""
    eph = X25519PrivateKey.generate()
    enc = _raw(eph.public_key())
    dh = eph.exchange(X25519PublicKey.from_public_bytes(pk_r))
    key, nonce = _key_schedule(_shared_secret(dh, enc, pk_r), info)
    return enc + ChaCha20Poly1305(key).encrypt(nonce, pt, aad)


def open_(sk_r: X25519PrivateKey, info: bytes, aad: bytes, enc_ct: bytes) -> bytes:
    """OpenBase of enc || ct; raises InvalidTag when it does not open."""
    enc, ct = enc_ct[:32], enc_ct[32:]
    dh = sk_r.exchange(X25519PublicKey.from_public_bytes(enc))
    key, nonce = _key_schedule(_shared_secret(dh, enc, _raw(sk_r.public_key())), info)
    return ChaCha20Poly1305(key).decrypt(nonce, ct, aad)
