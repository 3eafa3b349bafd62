"""Additive secret sharing over Z_q from a cryptographically secure generator.

Split & Mix of seed 000, App. F (after Balle et al., CCS 2020; with the slip fixed: the
*noisy* vector z' is split): w^1, ..., w^{r-1} i.i.d. uniform on Z_q^m and
w^r = z' - w^1 - ... - w^{r-1} (mod q). Any r - 1 of the r shares are i.i.d. uniform and
independent of z'; all r sum to z' mod q.

Randomness: :class:`SecureRandom` is a ChaCha20 keystream (RFC 8439 cipher from
``cryptography``) keyed with 32 bytes from ``os.urandom`` and re-keyed every 2^30 bytes, the
same construction as the kernel's getrandom and OpenBSD's arc4random. Uniform integers in
[0, q) use Lemire's multiply-shift with rejection ("Fast random integer generation in an
interval", ACM TOMACS 2019): exactly uniform, no modulo bias. Never a numpy Generator.
"""

from __future__ import annotations

import os

import numba
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

_REKEY_BYTES = 1 << 30


def check_modulus(q: int) -> int:
    """Validate the modulus 2 <= q <= 2^32 (shares are stored as uint32 or uint64)."""
    if isinstance(q, bool) or not isinstance(q, (int, np.integer)):
        raise TypeError(f"q must be an integer, got q={q!r}")
    if not (2 <= q <= 1 << 32):
        raise ValueError(f"q must be in [2, 2^32], got q={q!r}")
    return int(q)


class SecureRandom:
    """Cryptographically secure bytes and integers (ChaCha20 keystream keyed from os.urandom).

    Not reproducible by design: there is no seed. Thread-unsafe; use one per thread. Fork-safe:
    a child process that inherits an instance re-keys from os.urandom on its first draw, so
    parent and child never emit the same stream (the classic fork-duplicated-RNG flaw).
    :meth:`for_testing` builds a *deterministic* stream from a fixed key, for statistical tests
    with a fixed false-failure rate only; never use it to produce real shares.
    """

    def __init__(self) -> None:
        self._key: bytes | None = None
        self._epoch = 0
        self._rekey()

    @classmethod
    def for_testing(cls, seed: int) -> SecureRandom:
        """Deterministic ChaCha20 stream keyed by ``seed`` (tests only: not secret)."""
        obj = cls.__new__(cls)
        obj._key = int(seed).to_bytes(32, "little")
        obj._epoch = 0
        obj._rekey()
        return obj

    def _rekey(self) -> None:
        self._pid = os.getpid()
        if self._key is None:
            key = os.urandom(32)
            # 4-byte little-endian block counter (start at 0: a random start could overflow the
            # 32-bit counter before the re-key) || 12-byte random nonce
            nonce = bytes(4) + os.urandom(12)
        else:
            key = self._key
            nonce = bytes(4) + self._epoch.to_bytes(12, "little")  # counter 0, nonce = epoch
            self._epoch += 1
        self._enc = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
        self._used = 0

    def bytes(self, n: int) -> bytes:
        """n secure random bytes."""
        n = int(n)
        if n < 0:
            raise ValueError(f"n must be >= 0, got n={n!r}")
        if self._used + n > _REKEY_BYTES or (self._key is None and os.getpid() != self._pid):
            self._rekey()
        self._used += n
        return self._enc.update(bytes(n))

    def uint32(self, n: int) -> np.ndarray:
        """n i.i.d. uniform uint32 values."""
        return np.frombuffer(self.bytes(4 * int(n)), dtype=np.uint32)

    def uint64(self, n: int) -> np.ndarray:
        """n i.i.d. uniform uint64 values."""
        return np.frombuffer(self.bytes(8 * int(n)), dtype=np.uint64)

    def below(self, q: int, n: int) -> np.ndarray:
        """n i.i.d. uniform integers in [0, q) as uint64, 2 <= q <= 2^32, without modulo bias.

        Lemire's method: for x uniform on [0, 2^32), p = x * q; accept unless the low 32 bits
        of p are below t = 2^32 mod q; the value is p >> 32. Each accepted value is exactly
        uniform; the rejection rate is t / 2^32 < q / 2^32.
        """
        q = check_modulus(q)
        n = int(n)
        if n < 0:
            raise ValueError(f"n must be >= 0, got n={n!r}")
        if q & (q - 1) == 0:  # power of two: take the top bits, no rejection needed
            shift = np.uint32(32 - (q.bit_length() - 1))
            if q == 1 << 32:
                return self.uint32(n).astype(np.uint64)
            return (self.uint32(n) >> shift).astype(np.uint64)
        t = np.uint64((1 << 32) % q)
        qq = np.uint64(q)
        mask = np.uint64(0xFFFFFFFF)
        out = np.empty(n, dtype=np.uint64)
        filled = 0
        while filled < n:
            need = n - filled
            extra = need + 16 + int(need * (int(t) / 2**32) * 2)
            p = self.uint32(extra).astype(np.uint64) * qq
            good = (p & mask) >= t
            v = (p[good] >> np.uint64(32))[:need]
            out[filled : filled + v.size] = v
            filled += v.size
        return out

    def below_any(self, bounds: np.ndarray) -> np.ndarray:
        """One uniform integer in [0, b) for each entry b of ``bounds`` (1 <= b <= 2^32), unbiased.

        Lemire's method with per-entry thresholds; rejected entries are redrawn.
        """
        b = np.asarray(bounds, dtype=np.uint64).ravel()
        if b.size and (b.min() < 1 or b.max() > (1 << 32)):
            raise ValueError("bounds must be in [1, 2^32]")
        out = np.empty(b.size, dtype=np.uint64)
        todo = np.arange(b.size)
        t_all = (np.uint64(1 << 32) % b) if b.size else b
        mask = np.uint64(0xFFFFFFFF)
        while todo.size:
            p = self.uint32(todo.size).astype(np.uint64) * b[todo]
            good = (p & mask) >= t_all[todo]
            out[todo[good]] = p[good] >> np.uint64(32)
            todo = todo[~good]
        return out


def share(values: np.ndarray, q: int, r: int, source: SecureRandom | None = None) -> np.ndarray:
    """Split integer vector(s) into r additive shares over Z_q (seed 000, App. F, Split & Mix).

    Parameters
    ----------
    values : ndarray of int, shape (m,) or (n, m)
        The noisy vector z' (any integers; reduced mod q). 2D input shares every row.
    q : int
        Modulus, 2 <= q <= 2^32.
    r : int
        Number of shares, r >= 2.
    source : SecureRandom, optional
        Cryptographically secure source (a fresh one if omitted).

    Returns
    -------
    ndarray of uint32, shape (r, m) or (n, r, m)
        ``shares[..., b, a]`` is w^{b+1}_a; rows 0..r-2 are uniform, the last completes the sum:
        sum_b shares[..., b, a] = values[..., a] (mod q).
    """
    q = check_modulus(q)
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 2:
        raise ValueError(f"r must be an integer >= 2, got r={r!r}")
    src = source if source is not None else SecureRandom()
    v = np.asarray(values)
    if not np.issubdtype(v.dtype, np.integer):
        raise TypeError(f"values must be integers, got dtype {v.dtype}")
    squeeze = v.ndim == 1
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2:
        raise ValueError(f"values must be 1D or 2D, got shape {v.shape}")
    n, m = v.shape
    vm = np.mod(v.astype(np.int64), q).astype(np.uint32)
    out = np.empty((n, r, m), dtype=np.uint32)
    need = n * (r - 1) * m
    t = (1 << 32) % q
    while True:
        # slack: expected rejections are need * t / 2^32; 8 standard deviations + 64 more
        mean_rej = need * t / 2.0**32
        extra = int(mean_rej + 8.0 * mean_rej**0.5) + 64
        buf = src.uint32(need + extra)
        if _share_kernel(vm, np.uint64(q), np.uint64(t), buf, out) >= 0:
            break
    return out[0] if squeeze else out


@numba.njit(cache=True, nogil=True)
def _share_kernel(vm, q, t, buf, out):  # pragma: no cover - compiled
    """Fused Lemire draws + last share; returns words consumed, or -1 if ``buf`` ran out."""
    n, r, m = out.shape
    pos = 0
    nb = buf.size
    mask = np.uint64(0xFFFFFFFF)
    for u in range(n):
        for a in range(m):
            acc = np.uint64(0)
            for b in range(r - 1):
                while True:
                    if pos >= nb:
                        return -1
                    p = np.uint64(buf[pos]) * q
                    pos += 1
                    if (p & mask) >= t:
                        break
                w = p >> np.uint64(32)
                out[u, b, a] = w
                acc += w
            out[u, r - 1, a] = (np.uint64(vm[u, a]) + q - acc % q) % q
    return pos


def reconstruct_shares(shares: np.ndarray, q: int) -> np.ndarray:
    """sum_b shares[..., b, :] mod q as int64 (exact integer arithmetic)."""
    q = check_modulus(q)
    s = np.asarray(shares)
    return (s.sum(axis=-2, dtype=np.uint64) % np.uint64(q)).astype(np.int64)
