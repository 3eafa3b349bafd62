"""The user side of the shuffle-model heatmap protocol ([Ghazi23]_ App. F, "Each user j").

For user j with distribution p_j over the leaf pixels:

1. y^j = [P_start p_j, ..., P_L p_j]: the user's mass in every cell of the measured levels
   (unscaled level counts, :func:`shuffledp.pyramid.level_counts` of p_j), computed sparsely.
2. z^j = round(B y^j) per level (:func:`scale_round`, "Scale and round" below).
3. z'^j = z^j + X - Y with X, Y i.i.d. Polya(1/n_min, a_i) per coordinate of level i,
   a_i = exp(-eps_i / Delta_i) ([Bagdasaryan22]_ Thm 4.2; App. F slips fixed: calibrated to the
   scaled sensitivity, two-sided, over-provisioned for dropouts).
4. Split & Mix of the *noisy* z'^j into r additive shares over Z_q (:func:`share`,
   "Additive sharing" below; the App. F slip splits z^j).
5. Messages (a, w^b_a) for a in [0, m), b in [0, r): :func:`messages` packs them as
   ``(a << share_bits) | w``; :func:`frame_messages` frames them as a wire batch, encrypted to
   the analyzer on the deployment path.

The deployment entry point :func:`encode_user` draws everything, the noise included, from the
cryptographically secure generator and refuses a seed. The research functions
(:func:`noisy_vectors`, :func:`encode_shares`) take ``rng`` for the noise (None = secure);
shares always come from the secure generator.

Scale and round
---------------
A user's level-i vector y_i (the user's mass in each level-i cell) is non-negative and sums
to 1. It is scaled by the integer B and rounded to an integer vector z_i ([Ghazi23]_ App. F
"Scaled & round"):

``"floor"``
    z_i = floor(B y_i) coordinate-wise, as written in App. F. Entries are >= 0 and
    B - (support - 1) <= sum z_i <= B: up to one unit of mass per occupied cell is lost.
``"largest_remainder"``
    Hamilton's method: floor, then give the B - sum floor(B y_i) missing units to the cells
    with the largest fractional parts (ties to the lower cell index). Every level sums to
    exactly B, and |z_ik - B y_ik| < 1 per cell. This is the default.

Sensitivities (exact; the tests check them exhaustively on small grids and show they are
attained). Both rules give a non-negative z_i with sum z_i <= B, so

- add/remove one user: ||z_i||_1 <= B, attained (e.g. a user at one pixel): Delta_i = B;
- replace one user (n public, the neighbour notion of the summation protocol behind App. F,
  [BBGN20]_): ||z_i - z'_i||_1 <= ||z_i||_1 + ||z'_i||_1 <= 2B, attained by two
  users at distinct cells: Delta_i = 2B.

The discrete Laplace noise of level i must therefore use a = exp(-eps_i / Delta_i) (the
App. F text writes exp(-eps_i), a slip: see docs/errata.md).

Additive sharing
----------------
Split & Mix of [Ghazi23]_ App. F (after [BBGN20]_; with the slip fixed: the *noisy* vector
z' is split): w^1, ..., w^{r-1} i.i.d. uniform on Z_q^m and w^r = z' - w^1 - ... - w^{r-1}
(mod q). Any r - 1 of the r shares are i.i.d. uniform and independent of z'; all r sum to z'
mod q.

Randomness: :class:`~shuffledp.randomness.SecureRandom` is a ChaCha20 keystream (RFC 8439
cipher from ``cryptography``) keyed with 32 bytes from ``os.urandom`` and re-keyed every 2^30
bytes, the same construction as the kernel's getrandom and OpenBSD's arc4random. Uniform
integers in [0, q) use Lemire's multiply-shift with rejection ([Lemire19]_): exactly uniform,
no modulo bias. Never a numpy Generator. When q^3 < 2^55 and r - 1 is 3, 5, 6 or more than 7
(where it saves keystream words), three shares come from one 64-bit word (Lemire's method on
[0, q^3), its base-q digits: [BrackettRozinsky24]_), two keystream words for three shares
instead of three.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "DP Heatmaps", App. F -- full entry in docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Sparse Federated Analytics", Thm 4.2
   -- full entry in docs/references.md
.. [BBGN20] Balle et al. (2020), "Private Summation in the Shuffle Model", Split & Mix
   -- full entry in docs/references.md
.. [Lemire19] Lemire (2019), "Fast Random Integer Generation" -- full entry in docs/references.md
.. [BrackettRozinsky24] Brackett-Rozinsky and Lemire (2024), "Batched Ranged Random Integer
   Generation", the batched multiply-shift -- full entry in docs/references.md
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numba
import numpy as np

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.accounting.summation import check_rounding, check_scale
from shuffledp.encoders.noise.polya import _DifferenceDraws
from shuffledp.protocol.crypto import analyzer_key_id, encrypt_records, encrypted_record_bytes
from shuffledp.protocol.params import ProtocolParams
from shuffledp.protocol.wire import KIND_USER, KIND_USER_ENC, Header, encode_batch
from shuffledp.randomness import (
    RngLike,
    SecureRandom,
    UserStreams,
    check_modulus,
    noise_source,
)
from shuffledp.users import UserDistributions


# --------------------------------------------------------------------------- scale and round
def sensitivity(B: int, neighbour: str = "replace") -> int:
    """l1-sensitivity Delta_i of one scaled, rounded level vector (same for both rules).

    ``neighbour`` is a :class:`~shuffledp.accounting.guarantee.Neighbour` or its token:
    2B for replace-one (n public), B for zero-out and add/remove.

    Parameters
    ----------
    B : int
        The scaling factor B >= 1.
    neighbour : str or Neighbour
        The neighbouring relation (``"replace"``, ``"add_remove"``, ``"zero_out"``).

    Returns
    -------
    int
        Delta_i.

    Raises
    ------
    ValueError
        If ``B`` is not a valid scale or ``neighbour`` is not a known relation.

    References
    ----------
    [Ghazi23]_ App. F (scale and round); the sensitivity analysis is in the module docstring.
    """
    return Neighbour.parse(neighbour).level_sensitivity(check_scale(B))


def level_entries(
    users, start: int, B: int, rounding: str = "largest_remainder"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparse z^j = round(B y^j) of every user on levels ``start..L``, vectorised.

    y^j_i is user j's mass in each level-i cell; each user's level vector is scaled by B and
    rounded with ``rounding`` (:func:`scale_round`, one group per user and level).

    Parameters
    ----------
    users : UserDistributions
        The users' distributions (their grid fixes L).
    start : int
        First measured level.
    B : int
        The scaling factor B >= 1.
    rounding : {"floor", "largest_remainder"}
        The rounding rule.

    Returns
    -------
    user, coordinate, value : ndarray of int64
        One entry per (user, occupied cell) with a non-zero value; ``coordinate`` is the flat
        index over levels start..L (level-major, row-major within a level, as
        :func:`shuffledp.pyramid.flatten`). Per user and level the values sum to B (largest
        remainder) or at most B (floor).

    Raises
    ------
    ValueError
        If ``B`` or ``rounding`` is invalid, or ``start`` is not a level of the users' grid.

    References
    ----------
    [Ghazi23]_ App. F, "Each user j", steps 1-2.
    """
    B = check_scale(B)
    check_rounding(rounding)
    grid = users.grid
    L = grid.depth
    grid._check_level(start)
    uid = users.user_index()
    rows = users.pixels // grid.width
    cols = users.pixels % grid.width
    n_lev = L - start + 1
    k = uid.size
    sizes = np.asarray([grid.level_size(i) for i in range(start, L + 1)], dtype=np.int64)
    offs = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
    m = int(sizes.sum())
    lev = np.repeat(np.arange(n_lev, dtype=np.int64), k)
    shift = (L - (start + lev)).astype(np.int64)
    ncols = np.asarray([grid.level_shape(i)[1] for i in range(start, L + 1)], dtype=np.int64)
    r_all = np.tile(rows, n_lev) >> shift
    c_all = np.tile(cols, n_lev) >> shift
    coord = offs[lev] + r_all * ncols[lev] + c_all
    key = np.tile(uid, n_lev).astype(np.int64) * m + coord
    ukey, inv = np.unique(key, return_inverse=True)
    mass = np.bincount(inv.ravel(), weights=np.tile(users.weights, n_lev), minlength=ukey.size)
    u_of = ukey // m
    c_of = ukey % m
    level_of = np.searchsorted(offs, c_of, side="right") - 1
    z = scale_round(mass, B, rounding, groups=u_of * n_lev + level_of)
    keep = z != 0
    return u_of[keep], c_of[keep], z[keep]


def scale_round(
    values: np.ndarray,
    B: int,
    rounding: str = "largest_remainder",
    groups: np.ndarray | None = None,
) -> np.ndarray:
    """Scale non-negative masses by B and round to int64 ([Ghazi23]_ App. F).

    Parameters
    ----------
    values : ndarray, 1D, float
        Non-negative masses; each group should sum to 1 (one user's level vector).
    B : int
        Scaling factor B >= 1.
    rounding : {"floor", "largest_remainder"}
    groups : ndarray of int, optional
        Group label of every entry (e.g. user * n_levels + level); entries of one group must
        be contiguous and groups in increasing order. With ``largest_remainder`` every group
        is rounded to sum exactly B. ``None`` means one group.

    Returns
    -------
    ndarray of int64, same shape as ``values``.

    Raises
    ------
    ValueError
        If ``B`` or ``rounding`` is invalid, ``values`` is not 1D or holds a negative or
        non-finite entry, or ``groups`` has another shape or decreases.

    References
    ----------
    [Ghazi23]_ App. F, "Scaled & round"; Hamilton's largest-remainder method for the default.
    """
    B = check_scale(B)
    check_rounding(rounding)
    v = np.asarray(values, dtype=float)
    if v.ndim != 1:
        raise ValueError(f"values must be 1D, got shape {v.shape}")
    if v.size and not (np.all(np.isfinite(v)) and v.min() >= 0):
        raise ValueError("values must be finite and >= 0")
    x = v * B
    # Snap values within 1e-9 of an integer to it, so that the result does not depend on the
    # order in which floating-point masses were summed (sparse vs dense measurement). Each
    # snapped entry moves by < 1e-9, so with fewer than 1e9 entries sum(floor) <= B still holds.
    xr = np.rint(x)
    x = np.where(np.abs(x - xr) <= 1e-9, xr, x)
    z = np.floor(x)
    if rounding == "floor" or v.size == 0:
        return z.astype(np.int64)
    frac = x - z
    zi = z.astype(np.int64)
    if groups is None:
        g = np.zeros(v.size, dtype=np.int64)
    else:
        g = np.asarray(groups, dtype=np.int64)
        if g.shape != v.shape:
            raise ValueError(f"groups must have shape {v.shape}, got {g.shape}")
        if g.size > 1 and np.any(np.diff(g) < 0):
            raise ValueError("groups must be non-decreasing (contiguous groups in order)")
    # group boundaries
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[starts, g.size])
    gid = np.repeat(np.arange(starts.size), sizes)
    deficit = B - np.add.reduceat(zi, starts)
    # The masses of a group sum to 1 up to float error, so 0 <= deficit <= group size.
    deficit = np.clip(deficit, 0, sizes)
    # Hamilton: within each group, the `deficit` entries with largest fractional part get +1;
    # ties go to the lower position (stable order).
    order = np.lexsort((np.arange(v.size), -frac, gid))
    rank = np.arange(v.size) - np.repeat(starts, sizes)  # rank within group, in sorted order
    bump = rank < np.repeat(deficit, sizes)
    zi[order[bump]] += 1
    return zi


# --------------------------------------------------------------------------- additive sharing
_MAX_R = 1 << 20  # shares per coordinate; keeps a user's r q-bounded shares summable in int64


def _check_r(r: int) -> int:
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 2 <= r <= _MAX_R:
        raise ValueError(f"r must be an integer in [2, 2^20], got r={r!r}")
    return int(r)


def share(values: np.ndarray, q: int, r: int, source: SecureRandom | None = None) -> np.ndarray:
    """Split integer vector(s) into r additive shares over Z_q ([Ghazi23]_ App. F, Split & Mix).

    Parameters
    ----------
    values : ndarray of int, shape (m,) or (n, m)
        The noisy vector z' (any integers; reduced mod q). 2D input shares every row.
    q : int
        Modulus, 2 <= q <= 2^32.
    r : int
        Number of shares, 2 <= r <= 2^20.
    source : SecureRandom, optional
        Cryptographically secure source (a fresh one if omitted).

    Returns
    -------
    ndarray of uint32, shape (r, m) or (n, r, m)
        ``shares[..., b, a]`` is w^{b+1}_a; rows 0..r-2 are uniform, the last completes the sum:
        sum_b shares[..., b, a] = values[..., a] (mod q).

    Raises
    ------
    ValueError
        If ``q`` is outside [2, 2^32], ``r`` is not an integer in [2, 2^20], or ``values`` is
        not 1D or 2D.
    TypeError
        If ``values`` is not an integer array.

    References
    ----------
    [Ghazi23]_ App. F, Split & Mix (after [BBGN20]_); uniform draws by [Lemire19]_, three
    to a 64-bit word when q^3 < 2^55 by [BrackettRozinsky24]_.
    """
    q = check_modulus(q)
    r = _check_r(r)
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
    vi = np.ascontiguousarray(v, dtype=np.int64)
    out = np.empty((n, r, m), dtype=np.uint32)
    run = _ShareRun(q, r, src)
    for u in range(n):
        _share_rows(vi[u], r, run, out[u], None)
    return out[0] if squeeze else out


# ----------------------------------------------------------------------------- share kernels
# Both kernels draw the r - 1 uniform shares of _BLOCK coordinates at a time from one buffer
# of keystream words. A whole block's (r - 1) _BLOCK words are assigned to the shares in a
# fixed order (word b _BLOCK + i to share b of coordinate i) and the values
# floor(w q / 2^32) are taken, a loop the compiler vectorises. A word rejected by Lemire's
# test (low half of w q below t = 2^32 mod q) is replaced by the next accepted word after
# the block, in order (rare: the block is patched after the vectorised pass). A short last
# block, or every block when rejections are frequent, is drawn by sequential rejection. All
# give i.i.d. uniform shares: given the positions of the rejected words (which decide what
# goes where and nothing else), the accepted words are i.i.d. uniform over the accepted set
# and each maps to a uniform value in [0, q) ([Lemire19]_). When the buffer runs out the kernel
# returns the first coordinate it did not finish and the driver refills the buffer with
# fresh words (the unread words are dropped; which ones depends on the rejections only).
# The sum s of each coordinate's r - 1 shares is kept, and the last share (v - s) mod q is
# computed in a second, branch-free pass over the finished coordinates (:func:`_last_share`).
_BLOCK = 64


class _ShareRun:
    """The constants and the word buffer of one sharing run (one per thread); ``summed``:
    the shares are only summed (:func:`share_sums`, :func:`encode_sums`), which draws them
    three to a word where that saves keystream (:func:`_dice_plan`)."""

    def __init__(self, q: int, r: int, src: SecureRandom, blocks: int = 128, *,
                 summed: bool = False) -> None:
        self.src = src
        self.q = q
        self.sums = np.empty(blocks * _BLOCK, dtype=np.uint64)
        self.dice, tdice = _dice_plan(q, r) if summed else (False, 0)
        if self.dice:  # three shares to a 64-bit word: see "three shares to a word" below
            need = blocks * -(-(r - 1) // 3) * _BLOCK
            mean_rej = need * tdice / 2.0**64
            words = need + int(mean_rej + 8.0 * mean_rej**0.5) + 64
            self.raw = np.empty(2 * words, dtype=np.uint32)
            self.buf = self.raw.view("<u8")
            self.t = np.uint64(tdice)
            self.rowmin = np.empty(-(-(r - 1) // 3), dtype=np.uint64)
            return
        t = (1 << 32) % q
        need = blocks * (r - 1) * _BLOCK
        # slack: the mean number of rejections before need accepted words, 8 standard
        # deviations and 64 more
        mean_rej = need * t / (2.0**32 - t)
        self.buf = np.empty(need + int(mean_rej + 8.0 * mean_rej**0.5) + 64, dtype=np.uint32)
        # q = 2^32 does not fit a uint32: then w q / 2^32 = w and nothing is rejected
        self.qm = np.uint32(q % (1 << 32))
        self.t = np.uint64(t)
        # the fast path pays off while a block rarely holds a rejected word
        self.fast = q < 1 << 32 and t * (r - 1) * _BLOCK < 2**32 // 8
        self.raw = self.buf

    def args(self) -> tuple:
        self.src.fill_uint32(self.raw)
        return self.qm, self.t, self.fast, self.buf, self.sums

    def dice_args(self) -> tuple:
        self.src.fill_uint32(self.raw)
        return self.t, self.buf, self.sums, self.rowmin


@numba.njit(cache=True, nogil=True, inline="always")
def _mod1(v, q, invq):  # pragma: no cover - compiled
    """v mod q in [0, q) for an int64 v: a float quotient corrected once each way when
    |v| < 2^52 (then within one of the true quotient), the integer remainder otherwise."""
    lim = np.int64(1) << np.int64(52)
    if -lim < v < lim:
        rem = v - np.int64(np.float64(v) * invq) * q
        rem += q * np.int64(rem < 0)
        rem -= q * np.int64(rem >= q)
        return rem
    return v % q


@numba.njit(cache=True, nogil=True)
def _mod(x, q, out):  # pragma: no cover - compiled
    """out = x mod q in [0, q) for a 1D int64 x (out may be x)."""
    invq = 1.0 / np.float64(q)
    lim = np.int64(1) << np.int64(52)
    small = True
    for i in range(x.size):
        small &= (-lim < x[i]) & (x[i] < lim)
    if small:  # the float quotient of every entry is within one: a branch-free loop
        for i in range(x.size):
            v = x[i]
            rem = v - np.int64(np.float64(v) * invq) * q
            rem += q * np.int64(rem < 0)
            rem -= q * np.int64(rem >= q)
            out[i] = rem
        return out
    for i in range(x.size):
        out[i] = _mod1(x[i], q, invq)
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _last1(s, v, q, invq, keep):  # pragma: no cover - compiled
    """The last share (v - s) mod q for s < 2^52 and v in [0, q), plus ``keep`` s."""
    d = np.int64(np.float64(s) * invq)
    rem = s - d * q
    rem += q * np.int64(rem < 0)
    rem -= q * np.int64(rem >= q)
    return v - rem + q * np.int64(v < rem) + keep * s


@numba.njit(cache=True, nogil=True)
def _last_share(sums, z, q, total, acc):  # pragma: no cover - compiled
    """sums[i] (the sum s of r - 1 shares) <- the last share (z[i] - s) mod q; or with
    ``total``, acc[i] += s + last, the sum of all r shares (< r q < 2^52). s < 2^52
    (r <= 2^20) and, but for huge |z[i]|, z[i] too: float quotients within one of the true
    ones, one correction each way. When every |z[i]| < 2^52 (always, but for absurd inputs)
    the loop has no branch, so it vectorises."""
    invq = 1.0 / np.float64(q)
    keep = np.int64(total)
    lim = np.int64(1) << np.int64(52)
    small = True
    for i in range(z.size):
        small &= (-lim < z[i]) & (z[i] < lim)
    if small:
        if total:
            for i in range(sums.size):
                zi = z[i]
                v = zi - np.int64(np.float64(zi) * invq) * q
                v += q * np.int64(v < 0)
                v -= q * np.int64(v >= q)
                acc[i] += _last1(np.int64(sums[i]), v, q, invq, 1)
            return
        for i in range(sums.size):
            zi = z[i]
            v = zi - np.int64(np.float64(zi) * invq) * q
            v += q * np.int64(v < 0)
            v -= q * np.int64(v >= q)
            sums[i] = _last1(np.int64(sums[i]), v, q, invq, 0)
        return
    for i in range(sums.size):
        x = _last1(np.int64(sums[i]), _mod1(z[i], q, invq), q, invq, keep)
        if total:
            acc[i] += x
        else:
            sums[i] = x


@numba.njit(cache=True, nogil=True)
def _slow_block(buf, pos, c, rm1, qm, t, s, out, a, store):  # pragma: no cover - compiled
    """One block by sequential rejection from buf[pos]; returns the new position, or -1 if
    the buffer ran out. q = 2^32 is qm = 0 (w q / 2^32 = w, nothing rejected)."""
    mask = np.uint64(0xFFFFFFFF)
    q64 = np.uint64(qm)
    nb = buf.size
    j = pos
    for i in range(c):
        acc = np.uint64(0)
        b = 0
        while b < rm1:
            if j >= nb:
                return -1
            w = np.uint64(buf[j])
            p = w * q64 if qm != 0 else w << np.uint64(32)
            j += 1
            if (p & mask) >= t:
                h = p >> np.uint64(32)
                if store:
                    out[b, a + i] = h
                acc += h
                b += 1
        s[i] = acc
    return j


@numba.njit(cache=True, nogil=True)
def _fast_blocks(buf, pos, nblk, rm1, qm, t, sums, out, a, store):  # pragma: no cover
    """The fast path on up to ``nblk`` whole blocks from buf[pos] (sums[i] for block
    coordinate i, shares of coordinate a + i into ``out`` when ``store``); stops at the
    first block holding a rejected word. Returns the
    number of blocks done. The constant trip count _BLOCK lets the compiler vectorise.
    A block with a rejected word is left with every word counted (see _patch_block)."""
    mask = np.uint64(0xFFFFFFFF)
    q64 = np.uint64(qm)
    need = rm1 * _BLOCK
    for k in range(nblk):
        s = sums[k * _BLOCK: (k + 1) * _BLOCK]
        for i in range(_BLOCK):
            s[i] = 0
        mn = mask
        # unsigned indices: no negative-index wraparound test, so the loops vectorise
        oa = np.uint64(a + k * _BLOCK)
        for b in range(rm1):
            base = np.uint64(pos + k * need + b * _BLOCK)
            if store:
                ob = out[b]
                for i in range(np.uint64(_BLOCK)):
                    p = np.uint64(buf[base + i]) * q64
                    h = p >> np.uint64(32)
                    ob[oa + i] = h
                    s[i] += h
                    mn = min(mn, p & mask)
            else:
                for i in range(np.uint64(_BLOCK)):
                    p = np.uint64(buf[base + i]) * q64
                    s[i] += p >> np.uint64(32)
                    mn = min(mn, p & mask)
        if mn < t:
            return k
    return nblk


@numba.njit(cache=True, nogil=True)
def _fast_sums32(buf, pos, nblk, rm1, qm, t, sums):  # pragma: no cover - compiled
    """:func:`_fast_blocks` without storing the shares when a coordinate's r - 1 shares sum
    below 2^32 ((r - 1)(q - 1) < 2^32): the same words, sums and stopping block, with the
    sums and the low halves of w q (a 32-bit multiply) in 32-bit lanes, twice as many per
    vector."""
    q64 = np.uint64(qm)
    q32 = np.uint32(qm)
    t32 = np.uint32(t)
    need = rm1 * _BLOCK
    s32 = np.empty(_BLOCK, np.uint32)
    for k in range(nblk):
        for i in range(_BLOCK):
            s32[i] = 0
        mn = np.uint32(0xFFFFFFFF)
        for b in range(rm1):
            base = np.uint64(pos + k * need + b * _BLOCK)
            for i in range(np.uint64(_BLOCK)):
                x = buf[base + i]
                s32[i] += np.uint32((np.uint64(x) * q64) >> np.uint64(32))
                mn = min(mn, np.uint32(x * q32))  # the low half: w q mod 2^32
        s = sums[k * _BLOCK: (k + 1) * _BLOCK]
        for i in range(_BLOCK):
            s[i] = s32[i]
        if mn < t32:
            return k
    return nblk


@numba.njit(cache=True, nogil=True)
def _patch_block(buf, pos, rm1, qm, t, s, out, a, store):  # pragma: no cover - compiled
    """A whole block the fast path found a rejected word in (s holds its sums with every
    word counted): each rejected word is replaced, in order, by the next accepted word
    after the block. Returns the position after the last word read, or -1 if the buffer
    ran out."""
    mask = np.uint64(0xFFFFFFFF)
    q64 = np.uint64(qm)
    nb = buf.size
    j = pos + rm1 * _BLOCK  # spare words
    for b in range(rm1):
        # most rows hold no rejected word: find those with a vectorised pass and skip them
        base = np.uint64(pos + b * _BLOCK)
        mn = mask
        for i in range(np.uint64(_BLOCK)):
            mn = min(mn, (np.uint64(buf[base + i]) * q64) & mask)
        if mn >= t:
            continue
        for i in range(_BLOCK):
            p = np.uint64(buf[pos + b * _BLOCK + i]) * q64
            if (p & mask) >= t:
                continue
            s[i] -= p >> np.uint64(32)
            while True:
                if j >= nb:
                    return -1
                p = np.uint64(buf[j]) * q64
                j += 1
                if (p & mask) >= t:
                    break
            h = p >> np.uint64(32)
            s[i] += h
            if store:
                out[b, a + i] = h
    return j


@numba.njit(cache=True, nogil=True)
def _draw_blocks(z, a0, q, rm1, qm, t, fast, buf, sums, out, acc, store):  # pragma: no cover
    """Draw the r - 1 uniform shares of coordinates a0.. and with ``store`` write all r
    into ``out`` (r, m), else add the sum of each coordinate's r shares into ``acc``.
    Returns the first coordinate not done (the buffer ran out or ``sums`` is full).
    ``fast`` is False when q = 2^32 (qm = 0) or rejections are frequent; a last block of
    fewer than _BLOCK coordinates always takes the sequential path."""
    m = z.size
    nb = buf.size
    need = rm1 * _BLOCK
    pos = 0
    a = a0
    while a < m and a - a0 + _BLOCK <= sums.size:
        if fast:
            nblk = min((m - a) // _BLOCK, (sums.size - (a - a0)) // _BLOCK, (nb - pos) // need)
            if store or rm1 * (np.uint64(qm) - np.uint64(1)) >= np.uint64(1 << 32):
                k = _fast_blocks(buf, pos, nblk, rm1, qm, t, sums[a - a0:], out, a, store)
            else:
                k = _fast_sums32(buf, pos, nblk, rm1, qm, t, sums[a - a0:])
            pos += k * need
            a += k * _BLOCK
            if a >= m or a - a0 + _BLOCK > sums.size:
                break
        c = min(_BLOCK, m - a)
        if fast and c == _BLOCK and pos + need <= nb:  # the fast path stopped on a rejection
            pos = _patch_block(buf, pos, rm1, qm, t, sums[a - a0: a - a0 + c], out, a, store)
        else:
            pos = _slow_block(buf, pos, c, rm1, qm, t, sums[a - a0: a - a0 + c], out, a, store)
        if pos < 0:
            break
        a += c
    n = a - a0
    _last_share(sums[:n], z[a0:a], q, not store, acc[a0:a] if not store else acc)
    if store:
        last = out[rm1]
        for i in range(n):
            last[a0 + i] = sums[i]
    return a


# ------------------------------------------------------------------ three shares to a word
# For q^3 < 2^55 (and r - 1 where it saves words: :func:`_dice_plan`) a 64-bit word (two
# keystream words) gives three shares:
# the digits of floor(W q^3 / 2^64) in base q, by three multiply-shift steps, the word
# accepted when the final remainder W q^3 mod 2^64 is at least 2^64 mod q^3. That is
# Lemire's method on [0, q^3) ([Lemire19]_), so the three digits are i.i.d. uniform on
# [0, q) ([BrackettRozinsky24]_). A word is rejected with probability below
# q^3 / 2^64 < 2^-9. Blocks of _BLOCK coordinates as above: word
# g _BLOCK + i gives shares 3g, 3g + 1, 3g + 2 of coordinate i (the digits past share r - 2
# of a last row are not used); a rejected word is replaced by the next accepted word after
# the block; a short block, by accepted words in order, ceil((r - 1) / 3) to a coordinate.
_LO32 = np.uint64(0xFFFFFFFF)
_SH32 = np.uint64(32)


def _dice_plan(q: int, r: int) -> tuple[bool, int]:
    """Whether shares mod q are drawn three to a 64-bit word, and 2^64 mod q^3: when q^3 <
    2^55 (a row of _BLOCK words rarely holds a rejected one) and that needs at most 0.85
    of the keystream words one word a share does."""
    rm1 = r - 1
    use = q**3 < 1 << 55 and 2 * -(-rm1 // 3) <= 0.85 * rm1
    return use, ((1 << 64) % q**3 if use else 0)


@numba.njit(cache=True, nogil=True, inline="always")
def _digit(hi, lo, q64):  # pragma: no cover - compiled
    """The next base-q digit of the 64-bit fraction (hi 2^32 + lo) / 2^64 and the fraction
    left: hi, lo < 2^32 and q64 < 2^32 zero-extended, so each product is one 32 x 32 -> 64
    multiply (vectorised)."""
    a = lo * q64
    b = hi * q64 + (a >> _SH32)
    return b >> _SH32, b & _LO32, a & _LO32


@numba.njit(cache=True, nogil=True, inline="always")
def _dice3(w, q64):  # pragma: no cover - compiled
    """Three base-q digits of floor(w q^3 / 2^64) (most significant first) and
    w q^3 mod 2^64, which Lemire's test compares with 2^64 mod q^3."""
    d0, hi, lo = _digit(w >> _SH32, w & _LO32, q64)
    d1, hi, lo = _digit(hi, lo, q64)
    d2, hi, lo = _digit(hi, lo, q64)
    return d0, d1, d2, (hi << _SH32) | lo


@numba.njit(cache=True, nogil=True, inline="always")
def _used(b, rm1, d0, d1, d2):  # pragma: no cover - compiled
    """The sum of the digits shares b, b + 1, b + 2 < r - 1 use."""
    x = d0
    if b + 1 < rm1:
        x += d1
    if b + 2 < rm1:
        x += d2
    return x


@numba.njit(cache=True, nogil=True)
def _dice_fast(buf, pos, nblk, rm1, q64, t, sums, rowmin):  # pragma: no cover - compiled
    """:func:`_fast_blocks` three shares to a word, the shares summed only: up to ``nblk``
    whole blocks from buf[pos]; stops at the first block holding a rejected word (left
    with every word's digits counted and ``rowmin`` each row's least remainder). Returns
    the blocks done."""
    q64 = np.uint64(np.uint32(q64))  # known < 2^32 here: 32 x 32 -> 64 vector multiplies
    rows = (rm1 + 2) // 3
    need = rows * _BLOCK
    for kk in range(nblk):
        s = sums[kk * _BLOCK: (kk + 1) * _BLOCK]
        for i in range(_BLOCK):
            s[i] = 0
        low = np.uint64(0xFFFFFFFFFFFFFFFF)
        for g in range(rows):
            base = np.uint64(pos + kk * need + g * _BLOCK)
            # masks for the digits a last row does not use
            m1 = _LO32 * np.uint64(3 * g + 1 < rm1)
            m2 = _LO32 * np.uint64(3 * g + 2 < rm1)
            mn = np.uint64(0xFFFFFFFFFFFFFFFF)
            for i in range(np.uint64(_BLOCK)):
                d0, d1, d2, rem = _dice3(buf[base + i], q64)
                s[i] += d0 + (d1 & m1) + (d2 & m2)
                mn = min(mn, rem)
            rowmin[g] = mn
            low = min(low, mn)
        if low < t:
            return kk
    return nblk


@numba.njit(cache=True, nogil=True, inline="always")
def _next_accepted(buf, j, q64, t):  # pragma: no cover - compiled
    """The digits of the first accepted word from buf[j] and the position after it
    (j = -1: the buffer ran out)."""
    while j < buf.size:
        d0, d1, d2, rem = _dice3(buf[j], q64)
        j += 1
        if rem >= t:
            return d0, d1, d2, j
    return np.uint64(0), np.uint64(0), np.uint64(0), -1


@numba.njit(cache=True, nogil=True)
def _dice_patch(buf, pos, rm1, q64, t, s, rowmin):  # pragma: no cover - compiled
    """:func:`_patch_block` for :func:`_dice_fast`: each rejected word of the block is
    replaced, in order, by the next accepted word after the block. Returns the position
    after the last word read, or -1 if the buffer ran out."""
    rows = (rm1 + 2) // 3
    j = pos + rows * _BLOCK
    for g in range(rows):
        if rowmin[g] >= t:  # most rows hold no rejected word
            continue
        for i in range(_BLOCK):
            d0, d1, d2, rem = _dice3(buf[pos + g * _BLOCK + i], q64)
            if rem >= t:
                continue
            s[i] -= _used(3 * g, rm1, d0, d1, d2)
            d0, d1, d2, j = _next_accepted(buf, j, q64, t)
            if j < 0:
                return -1
            s[i] += _used(3 * g, rm1, d0, d1, d2)
    return j


@numba.njit(cache=True, nogil=True)
def _dice_slow(buf, pos, c, rm1, q64, t, s):  # pragma: no cover - compiled
    """One block of c coordinates from the accepted words of buf[pos:] in order,
    ceil((r - 1) / 3) to a coordinate; returns the position after the last word read, or
    -1 if the buffer ran out."""
    j = pos
    for i in range(c):
        s[i] = 0
        for b in range(0, rm1, 3):
            d0, d1, d2, j = _next_accepted(buf, j, q64, t)
            if j < 0:
                return -1
            s[i] += _used(b, rm1, d0, d1, d2)
    return j


@numba.njit(cache=True, nogil=True)
def _dice_blocks(z, a0, q, rm1, t, buf, sums, rowmin, acc):  # pragma: no cover - compiled
    """:func:`_draw_blocks` three shares to a word (:func:`_dice_fast`) for summed runs:
    the sum of each coordinate's r shares is added into ``acc``; ``buf`` holds uint64
    words."""
    m = z.size
    nb = buf.size
    q64 = np.uint64(q)
    need = (rm1 + 2) // 3 * _BLOCK
    pos = 0
    a = a0
    while a < m and a - a0 + _BLOCK <= sums.size:
        nblk = min((m - a) // _BLOCK, (sums.size - (a - a0)) // _BLOCK, (nb - pos) // need)
        kb = _dice_fast(buf, pos, nblk, rm1, q64, t, sums[a - a0:], rowmin)
        pos += kb * need
        a += kb * _BLOCK
        if a >= m or a - a0 + _BLOCK > sums.size:
            break
        c = min(_BLOCK, m - a)
        s = sums[a - a0: a - a0 + c]
        if c == _BLOCK and pos + need <= nb:  # the fast path stopped on a rejection
            pos = _dice_patch(buf, pos, rm1, q64, t, s, rowmin)
        else:
            pos = _dice_slow(buf, pos, c, rm1, q64, t, s)
        if pos < 0:
            break
        a += c
    _last_share(sums[:a - a0], z[a0:a], q, True, acc[a0:a])
    return a


def _share_rows(z: np.ndarray, r: int, run: _ShareRun, out: np.ndarray | None,
                acc: np.ndarray | None) -> None:
    """Share one user's int64 vector ``z`` (mod q): store the r shares in ``out`` (r, m)
    or add them into ``acc``."""
    m = z.size
    o = _NO_OUT if out is None else out
    s = _NO_ACC if acc is None else acc
    a = 0
    while a < m:
        if run.dice:  # summed runs only (out is None)
            a = _dice_blocks(z, a, run.q, r - 1, *run.dice_args(), s)  # type: ignore[call-arg]
        else:
            a = _draw_blocks(z, a, run.q, r - 1, *run.args(), o, s,  # type: ignore[call-arg]
                             out is not None)


_NO_OUT = np.empty((0, 0), dtype=np.uint32)
_NO_ACC = np.empty(0, dtype=np.int64)


def share_sums(z: np.ndarray, q: int, r: int, source: SecureRandom, acc: np.ndarray) -> int:
    """Split each row of ``z`` into r shares (as :func:`share`) and add every share mod q
    into ``acc``, without storing the shares (the simulation path's analyzer sum).

    Parameters
    ----------
    z : ndarray of int, shape (k, m)
        The noisy vectors z' of k users.
    q : int
        Modulus, 2 <= q <= 2^32.
    r : int
        Shares per coordinate, 2 <= r <= 2^20.
    source : SecureRandom
        The secure source of the r - 1 uniform shares (one per thread).
    acc : ndarray of int64, shape (m,)
        Running sums mod q, updated in place.

    Returns
    -------
    int
        Messages summed, k r m.

    Raises
    ------
    ValueError
        If ``q`` or ``r`` is invalid or the shapes do not match.

    References
    ----------
    [Ghazi23]_ App. F, Split & Mix; uniform draws by [Lemire19]_, three to a 64-bit word
    when q^3 < 2^55 by [BrackettRozinsky24]_.
    """
    q = check_modulus(q)
    r = _check_r(r)
    v = np.asarray(z)
    if v.ndim != 2 or acc.shape != (v.shape[1],) or acc.dtype != np.int64:
        raise ValueError(f"z must be (k, m) and acc an int64 array of shape (m,), got "
                         f"{v.shape} and {acc.dtype} {acc.shape}")
    k, m = v.shape
    vi = np.ascontiguousarray(v, dtype=np.int64)
    run = _ShareRun(q, r, source, summed=True)
    # each user adds < r q to a coordinate: reduce before int64 could overflow
    every = max(1, (1 << 62) // (r * q))
    _mod(acc, q, acc)
    for j in range(k):
        if j and j % every == 0:
            _mod(acc, q, acc)
        _share_rows(vi[j], r, run, None, acc)
    _mod(acc, q, acc)
    return k * r * m


def reconstruct_shares(shares: np.ndarray, q: int) -> np.ndarray:
    """sum_b shares[..., b, :] mod q as int64 (exact integer arithmetic).

    Parameters
    ----------
    shares : ndarray of unsigned int, shape (..., r, m)
        Shares as :func:`share` returns them (values below q <= 2^32, so r < 2^32 shares
        cannot overflow uint64).
    q : int
        The modulus.

    Returns
    -------
    ndarray of int64, shape (..., m)
        The shared vector mod q.

    Raises
    ------
    ValueError
        If ``q`` is outside [2, 2^32] or ``shares`` has fewer than two dimensions.

    References
    ----------
    [Ghazi23]_ App. F, Split & Mix: all r shares sum to z' mod q.
    """
    q = check_modulus(q)
    s = np.asarray(shares)
    if s.ndim < 2:
        raise ValueError(f"shares must have shape (..., r, m), got shape {s.shape}")
    q = check_modulus(q)
    s = np.asarray(shares)
    return (s.sum(axis=-2, dtype=np.uint64) % np.uint64(q)).astype(np.int64)


# --------------------------------------------------------------------------- the device
def _check(params: ProtocolParams) -> None:
    if not isinstance(params, ProtocolParams):
        raise TypeError(f"params must be a ProtocolParams, got {type(params).__name__}")
    params.check_supported()


def _rounded_levels(
    params: ProtocolParams, users: UserDistributions, select: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparse z^j = round(B y^j) of many users at once (steps 1-2).

    Returns
    -------
    user, coordinate, value : ndarray of int64
        One entry per (user, occupied measured cell); ``user`` indexes ``select`` (or all
        users), ``coordinate`` is the flat index in [0, m), ``value`` >= 0. Per user and
        level the values sum to B (largest remainder) or at most B (floor).
    """
    _check(params)
    if users.grid != params.grid:
        raise ValueError(f"users are on grid {users.grid}, params on grid {params.grid}")
    if select is not None:
        users = users.subset(np.asarray(select, dtype=np.int64))
    return level_entries(users, params.start, params.B, params.rounding)


def noisy_vectors(
    params: ProtocolParams,
    users: UserDistributions,
    select: np.ndarray | None = None,
    rng: RngLike | SecureRandom | UserStreams = None,
    *,
    noise: bool = True,
) -> np.ndarray:
    """Dense z'^j = z^j + (X - Y) for the selected users, shape (len(select), m), int64 (step 3).

    The Polya noise comes from the exact table sampler
    (:func:`shuffledp.encoders.noise.polya.polya_difference`): ``rng=None`` or a SecureRandom draws
    it from the cryptographically secure generator; a seed or Generator makes a reproducible
    research run. ``noise=False`` returns z^j (for tests and diagnostics only; not private).

    Parameters
    ----------
    params : ProtocolParams
        The protocol's parameters (grid, levels, B, rounding, noise, m).
    users : UserDistributions
        The users, on ``params.grid``.
    select : ndarray of int, optional
        Positions of the users to encode (default: all, in order).
    rng : SecureRandom, UserStreams, int, numpy.random.Generator or None
        Source of the Polya noise (None: the secure generator). A
        :class:`~shuffledp.randomness.UserStreams` gives user ``select[j]`` its own stream,
        so a user's noise does not depend on which other users are encoded with it.
    noise : bool
        Add the noise (False only for tests and diagnostics).

    Returns
    -------
    ndarray of int64, shape (len(select), m)

    Raises
    ------
    TypeError
        If ``params`` is not a ProtocolParams, or ``rng`` is not a valid source.
    ValueError
        If the users' grid differs from ``params.grid``, or ``params`` is not supported.

    References
    ----------
    [Ghazi23]_ App. F, step 3; the noise of [Bagdasaryan22]_ Thm 4.2 calibrated to
    Delta_i (see the module docstring).
    """
    _check(params)
    return _noisy_rows(params, users, select, rng, None, noise=noise,
                       draws=_cached_draws(params) if noise else None)


def _noise_draws(params: ProtocolParams) -> _DifferenceDraws:
    return _DifferenceDraws(params.polya_shape, params.coordinate_a(), params.m)


def _noisy_rows(params: ProtocolParams, users: UserDistributions, select: np.ndarray | None,
                rng: RngLike | SecureRandom | UserStreams, secure: SecureRandom | None,
                *, noise: bool = True, draws: _DifferenceDraws | None = None) -> np.ndarray:
    """z'^j of the selected users; with :class:`UserStreams` user j's noise comes from its
    own stream (keyed by its index in ``users``), else all from one stream in order."""
    n_sel = users.n_users if select is None else len(select)
    u, c, z = _rounded_levels(params, users, select)
    out = np.zeros((n_sel, params.m), dtype=np.int64)
    np.add.at(out, (u, c), z)
    if not noise:
        return out
    d = draws if draws is not None else _noise_draws(params)
    for j, src in enumerate(_noise_sources(rng, secure, select, n_sel)):
        d.add_to(out[j], src)
    return out


def _noise_sources(rng: RngLike | SecureRandom | UserStreams, secure: SecureRandom | None,
                   select: np.ndarray | None, n_sel: int
                   ) -> Iterator[SecureRandom | np.random.Generator]:
    """The noise source of each selected user in turn: with :class:`UserStreams` user j's
    own stream (keyed by its index in the population), else one stream for all in order."""
    if isinstance(rng, UserStreams):
        ids = np.arange(n_sel) if select is None else np.asarray(select, dtype=np.int64)
        sec = secure if secure is not None or rng.seeded else SecureRandom()
        for j in range(n_sel):
            yield rng.stream(int(ids[j]), sec)  # type: ignore[arg-type]
    else:
        src = noise_source(rng, secure)
        for _ in range(n_sel):
            yield src


def encode_shares(
    params: ProtocolParams,
    users: UserDistributions,
    select: np.ndarray | None = None,
    rng: RngLike | SecureRandom | UserStreams = None,
    source: SecureRandom | None = None,
) -> np.ndarray:
    """Steps 1-4 for the selected users: shares of shape (len(select), r, m), uint32.

    ``shares[j, b, a]`` is w^{b+1}_a of user j; message (a, shares[j, b, a]). Shares always
    come from ``source`` (a SecureRandom); the noise from ``rng`` (see :func:`noisy_vectors`).

    Parameters
    ----------
    params, users, select, rng
        As :func:`noisy_vectors`.
    source : SecureRandom, optional
        The secure source of the shares (and of the noise when ``rng`` is None).

    Returns
    -------
    ndarray of uint32, shape (len(select), r, m)

    Raises
    ------
    TypeError, ValueError
        As :func:`noisy_vectors` and :func:`share`.

    References
    ----------
    [Ghazi23]_ App. F, steps 1-4.
    """
    _check(params)
    src = source if source is not None else SecureRandom()
    z = _noisy_rows(params, users, select, rng, src, draws=_cached_draws(params))
    return share(z, params.q, params.r, src)


def encode_sums(
    params: ProtocolParams,
    users: UserDistributions,
    select: np.ndarray | None,
    rng: RngLike | SecureRandom | UserStreams = None,
    source: SecureRandom | None = None,
) -> tuple[np.ndarray, int]:
    """Steps 1-4 for the selected users with their shares summed mod q as they are drawn.

    What an analyzer sums from these users' messages, without holding their r m shares: one
    user at a time (its z^j, noise and shares in one row of m), memory O(m). With a
    :class:`~shuffledp.randomness.UserStreams` each user's
    noise comes from its own stream, so the sums of any split of the users add up (mod q) to
    the sums of all of them, bit for bit.

    Parameters
    ----------
    params, users, select, rng
        As :func:`noisy_vectors`.
    source : SecureRandom, optional
        The secure source of the shares (and of the noise when ``rng`` is None).

    Returns
    -------
    tuple of (ndarray of int64, int)
        The m sums mod q and the number of messages they hold (len(select) r m).

    Raises
    ------
    TypeError, ValueError
        As :func:`noisy_vectors` and :func:`share`.

    References
    ----------
    [Ghazi23]_ App. F, steps 1-4 and the analyzer's sums.
    """
    _check(params)
    src = source if source is not None else SecureRandom()
    d = _cached_draws(params)
    q, r, m = params.q, params.r, params.m
    if select is None:
        select = np.arange(users.n_users)
    n_sel = len(select)
    # one user at a time, in one row that stays in cache: z^j, its noise, its shares summed
    if users.grid != params.grid:
        raise ValueError(f"users are on grid {users.grid}, params on grid {params.grid}")
    u, c, z = level_entries(users.subset(np.asarray(select, dtype=np.int64)), params.start,
                            params.B, params.rounding)  # (params checked above)
    bounds = np.searchsorted(u, np.arange(n_sel + 1))  # entries come grouped by user
    run = _ShareRun(q, r, src, summed=True)
    row = np.empty(m, dtype=np.int64)
    acc = np.zeros(m, dtype=np.int64)
    every = max(1, (1 << 62) // (r * q))  # each user adds < r q per coordinate
    for j, noise_src in enumerate(_noise_sources(rng, src, select, n_sel)):
        if j and j % every == 0:
            _mod(acc, q, acc)
        row[:] = 0
        row[c[bounds[j]:bounds[j + 1]]] = z[bounds[j]:bounds[j + 1]]  # distinct cells
        d.add_to(row, noise_src)
        _share_rows(row, r, run, None, acc)
    _mod(acc, q, acc)
    return acc, n_sel * r * m


_DRAWS: dict[tuple, _DifferenceDraws] = {}
_DRAWS_LOCK = threading.Lock()


def _cached_draws(params: ProtocolParams) -> _DifferenceDraws:
    """The noise tables of ``params`` (built once per Polya shape and a-vector, per process;
    the a-vector is a_i repeated over the level sizes, so those two tuples key it). Built
    under a lock: encoder threads starting together wait for one build instead of each
    building the same tables (mostly Python work, serialised by the GIL)."""
    key = (float(params.polya_shape), tuple(float(x) for x in params.level_a),
           tuple(params.level_sizes))
    d = _DRAWS.get(key)
    if d is None:
        with _DRAWS_LOCK:
            d = _DRAWS.get(key)
            if d is None:
                if len(_DRAWS) > 16:
                    _DRAWS.clear()
                d = _DRAWS[key] = _noise_draws(params)
    return d


def messages(params: ProtocolParams, shares: np.ndarray) -> np.ndarray:
    """Pack one user's shares (r, m) into r*m messages ``(a << share_bits) | w`` (step 5).

    Order is coordinate-major within each share row; the shuffler permutes anyway. Returns
    uint32 when messages fit in 32 bits, else uint64 (the wire packs them into
    ``params.record_bytes`` bytes each).

    Parameters
    ----------
    params : ProtocolParams
        The protocol's parameters (r, m, share_bits, record_bits).
    shares : ndarray, shape (r, m)
        One user's shares (each below q).

    Returns
    -------
    ndarray of uint32 or uint64, shape (r * m,)

    Raises
    ------
    TypeError
        If ``params`` is not a ProtocolParams.
    ValueError
        If ``shares`` does not have shape (r, m), or ``params`` is not supported.

    References
    ----------
    [Ghazi23]_ App. F, step 5: messages (a, w^b_a).
    """
    _check(params)
    s = np.asarray(shares)
    if s.shape != (params.r, params.m):
        raise ValueError(f"shares must have shape (r, m) = {(params.r, params.m)}, got {s.shape}")
    dt = np.uint32 if params.record_bits <= 32 else np.uint64
    coord = (np.arange(params.m, dtype=np.uint64) << np.uint64(params.share_bits)).astype(dt)
    return (coord[None, :] | s.astype(dt)).ravel()


def encode_user(
    params: ProtocolParams,
    pixels: np.ndarray,
    weights: np.ndarray,
    *,
    source: SecureRandom | None = None,
    rng: object = None,
) -> np.ndarray:
    """One user's complete message vector (r*m packed messages) from (pixels, weights).

    Deployment path: the Polya noise and the shares are drawn from the cryptographically
    secure generator (``source``, a fresh SecureRandom by default). A seed is refused:
    ``rng`` exists only to reject it with a clear message.

    Parameters
    ----------
    params : ProtocolParams
        The protocol's parameters.
    pixels : ndarray of int
        Flat pixel indices of the user's points on ``params.grid``.
    weights : ndarray of float
        Non-negative weights of those points (normalised to sum 1).
    source : SecureRandom, optional
        The secure source (default: a fresh one).
    rng : None
        Must be None.

    Returns
    -------
    ndarray of uint32 or uint64, shape (r * m,)
        The packed messages (:func:`messages`).

    Raises
    ------
    ValueError
        If ``rng`` is not None, a pixel is off the grid, a weight is negative or non-finite,
        or the weights sum to zero.
    TypeError
        If ``source`` is not a SecureRandom or ``params`` not a ProtocolParams.

    References
    ----------
    [Ghazi23]_ App. F, "Each user j", steps 1-5.
    """
    if rng is not None:
        raise ValueError(
            f"encode_user is the deployment path and draws all randomness from the secure "
            f"generator; it refuses a seed, got rng={rng!r} (use noisy_vectors/encode_shares "
            "for reproducible research runs)"
        )
    if source is not None and not isinstance(source, SecureRandom):
        raise TypeError(f"source must be a SecureRandom, got source={source!r}")
    _check(params)
    users = UserDistributions.from_pixels(
        params.grid, np.zeros(np.size(pixels), dtype=np.int64), pixels, weights
    )
    src = source if source is not None else SecureRandom()
    sh = encode_shares(params, users, None, src, src)[0]
    return messages(params, sh)


def frame_messages(
    params: ProtocolParams, records: np.ndarray, analyzer_public: bytes | None = None
) -> bytes:
    """One user's packed messages as a wire batch (header + records).

    With ``analyzer_public`` (the analyzer's raw 32-byte X25519 key) every message is
    encrypted to the analyzer (deployment path); without it the batch is plaintext, a
    simulation aid only (whoever relays it reads every share), its records written in
    ascending order (the canonical order the shuffler requires).

    Parameters
    ----------
    params : ProtocolParams
        The protocol's parameters (record size, digest).
    records : ndarray of uint32 or uint64
        Packed messages (:func:`messages`).
    analyzer_public : bytes, optional
        The analyzer's raw 32-byte X25519 public key.

    Returns
    -------
    bytes
        A wire batch: header then records (encrypted when a key is given).

    Raises
    ------
    ValueError
        If ``analyzer_public`` is not a valid 32-byte X25519 public key.

    References
    ----------
    [Ghazi23]_ App. F, step 5 (the messages sent to the shuffler).
    """
    if analyzer_public is None:
        # canonical order (ascending): the shuffler refuses any other (see "Canonical user
        # batches" in shuffledp.protocol.wire)
        h = Header(KIND_USER, params.record_bytes, params.digest, records.size)
        return encode_batch(h, np.sort(np.asarray(records).reshape(-1)))
    return sealed_batch(params, encrypt_records(params, records, analyzer_public),
                        analyzer_public)


def sealed_batch(params: ProtocolParams, body: bytes, analyzer_public: bytes) -> bytes:
    """An encrypted user batch: the header, naming the analyzer key the records are sealed to
    (its id: a shuffler that knows the key refuses a batch sealed to another one before
    mixing, ``wrong_key``), then ``body``, whole encrypted records.

    Parameters
    ----------
    params : ProtocolParams
        The round's record (digest and encrypted record size).
    body : bytes
        The records sealed by :func:`shuffledp.protocol.crypto.encrypt_records`.
    analyzer_public : bytes
        The analyzer's raw 32-byte X25519 public key they are sealed to.

    Returns
    -------
    bytes
        Header then ``body``.

    Raises
    ------
    ValueError
        If ``analyzer_public`` is not a valid key.

    References
    ----------
    [Ghazi23]_ App. F, step 5 (the messages sent to the shuffler).
    """
    rb = encrypted_record_bytes(params)
    return encode_batch(Header(KIND_USER_ENC, rb, params.digest, len(body) // rb,
                               key_id=analyzer_key_id(analyzer_public)), body)


def user_batch(
    params: ProtocolParams,
    pixels: np.ndarray,
    weights: np.ndarray,
    *,
    analyzer_public: bytes | None = None,
    source: SecureRandom | None = None,
) -> bytes:
    """The device's whole job: (pixels, weights) -> wire-ready bytes for the shuffler.

    :func:`encode_user` (secure randomness only, no seed) then :func:`frame_messages`;
    pass the analyzer's public key to encrypt every message (the deployment path).

    Parameters
    ----------
    params, pixels, weights, source
        As :func:`encode_user`.
    analyzer_public : bytes, optional
        As :func:`frame_messages`.

    Returns
    -------
    bytes
        The wire batch.

    Raises
    ------
    ValueError, TypeError
        As :func:`encode_user` and :func:`frame_messages`.

    References
    ----------
    [Ghazi23]_ App. F, "Each user j".
    """
    return frame_messages(params, encode_user(params, pixels, weights, source=source),
                          analyzer_public)
