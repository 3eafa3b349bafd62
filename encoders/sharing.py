"""Additive secret sharing over Z_q from a cryptographically secure generator.

Split & Mix of [Ghazi23]_ App. F (after [BBGN20]_; with the slip fixed: the
*noisy* vector z' is split): w^1, ..., w^{r-1} i.i.d. uniform on Z_q^m and
w^r = z' - w^1 - ... - w^{r-1} (mod q). Any r - 1 of the r shares are i.i.d. uniform and
independent of z'; all r sum to z' mod q.

Randomness: :class:`SecureRandom` is a ChaCha20 keystream (RFC 8439 cipher from
``cryptography``) keyed with 32 bytes from ``os.urandom`` and re-keyed every 2^30 bytes, the
same construction as the kernel's getrandom and OpenBSD's arc4random. Uniform integers in
[0, q) use Lemire's multiply-shift with rejection ([Lemire19]_): exactly uniform, no modulo
bias. Never a numpy Generator.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
.. [BBGN20] B. Balle, J. Bell, A. Gascon, K. Nissim, "Private Summation in the Multi-Message
   Shuffle Model", CCS 2020. arXiv:2002.00817.
.. [Lemire19] D. Lemire, "Fast Random Integer Generation in an Interval", ACM TOMACS 29(1),
   2019.
"""

from __future__ import annotations

import numba
import numpy as np

from shuffledp.randomness import SecureRandom, check_modulus


def share(values: np.ndarray, q: int, r: int, source: SecureRandom | None = None) -> np.ndarray:
    """Split integer vector(s) into r additive shares over Z_q ([Ghazi23]_ App. F, Split & Mix).

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
