"""Masks for secure aggregation: uniform vectors over Z_m expanded from a 32-byte seed.

The seed keys ChaCha20 (``cryptography``; nonce = 16 zero bytes, the key is used for one
mask only) whose keystream is read as little-endian uint64 words. A word x is kept when
x < floor(2^64 / m) m and mapped to x mod m, so every kept value is exactly uniform on Z_m;
rejected words (probability < m / 2^64 each) are replaced by words from further along the
same stream, so the mask is a deterministic function of the seed and both parties of a pair
expand the same vector. One keystream pass per mask, vectorised with numpy.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

_NONCE = bytes(16)
MAX_MODULUS = 1 << 62


def expand(seed: bytes, length: int, modulus: int) -> np.ndarray:
    """A uniform vector in Z_modulus^length (int64) determined by the 32-byte ``seed``.

    Parameters
    ----------
    seed : bytes
        The 32-byte ChaCha20 key; the same seed always gives the same vector.
    length : int
        The vector's length.
    modulus : int
        m, 2 <= m <= 2^62; every entry is uniform on ``0 .. m - 1``.

    Returns
    -------
    numpy.ndarray
        ``length`` int64 values in ``[0, modulus)``.

    Raises
    ------
    ValueError
        ``seed`` is not 32 bytes or ``modulus`` is outside [2, 2^62].
    """
    if len(seed) != 32:
        raise ValueError(f"seed must be 32 bytes, got {len(seed)}")
    if not (2 <= modulus <= MAX_MODULUS):
        raise ValueError(f"modulus must be in [2, 2^62], got modulus={modulus!r}")
    enc = Cipher(algorithms.ChaCha20(seed, _NONCE), mode=None).encryptor()
    limit = np.uint64((1 << 64) // modulus * modulus - 1)  # accept x <= limit
    m = np.uint64(modulus)
    out = np.empty(0, dtype=np.uint64)
    need = length
    while need > 0:
        words = np.frombuffer(enc.update(bytes(8 * (need + 8))), dtype=np.uint64)
        kept = words[words <= limit]
        out = np.concatenate([out, kept[:need]])
        need = length - out.size
    return (out % m).astype(np.int64)


__all__ = ["MAX_MODULUS", "expand"]
