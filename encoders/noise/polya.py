"""Polya (negative binomial) noise with real shape, its two-sided difference, and an exact-table
integer sampler driven by uniform 64-bit words.

Definitions ([Bagdasaryan22]_ Sec. 4, Def. 4.1 and Thm 4.2):

- Polya(s, a), shape s > 0 (real), a in (0, 1):
  P(X = k) = Gamma(s + k) / (Gamma(s) k!) * a^k * (1 - a)^s, k = 0, 1, ...
- Infinite divisibility: a sum of independent Polya(s_j, a) is Polya(sum_j s_j, a), and
  Polya(1, a) is the geometric distribution (1 - a) a^k on {0, 1, ...}.
- Hence if each of n users adds X_j - Y_j with X_j, Y_j i.i.d. Polya(1/n, a), the total
  noise is Geom(a) - Geom(a), i.e. exactly the discrete Laplace DL(a) with pmf
  (1 - a)/(1 + a) a^|k| ([Bagdasaryan22]_ Thm 4.2, eqs. 3-4). The parameter a must carry the
  l1-sensitivity of the *scaled, rounded* vector, a = exp(-eps_i / Delta_i) (the text of
  [Ghazi23]_ App. F writes exp(-eps_i); see docs/errata.md).
- Dropout over-provisioning ([Bagdasaryan22]_ Sec. 4): with s = 1 / n_min the total is at
  least DL(a) as long as at least n_min users contribute.

Sampler
-------
:class:`PolyaTable` holds the distribution function of Polya(s, a) as 128-bit fixed-point
thresholds ``T_k = 2^128 - ceil(2^128 S_k)`` with ``S_k = sum_{j > k} p_j`` computed in exact
integer arithmetic (192 fractional bits; p_0 = (1 - a)^s by mpmath at 256 bits, then the
recursion p_{k+1} = p_k a (s + k) / (k + 1) with s and a taken as the exact rationals their
floats represent, each step rounded down). A sample is ``X = #{k : T_k <= U}`` for U uniform
on [0, 2^128) built from two words (the second is read only when the first does not already
decide X = 0, which is the common case for the small shapes of the protocol). The table stops
at the first K with a provable tail sum_{j > K} p_j <= 2^-120; that mass is moved to X = 0.
The total variation between the sampled law and Polya(s, a) is then at most
:attr:`PolyaTable.tv_bound` = 2 (2^-120 + (K + 2) 2^-127 + (K + 2)^2 2^-190), at most
:data:`SAMPLER_TV_MAX` ~ 2.5e-31 for any table built (K <= 2^24);
(times 1/p_0 in the last term when s > 1);
``tests/test_polya.py`` checks the implied pmf against an independent mpmath evaluation.
No floating-point Gamma/Poisson draw is involved, so the same words give the same integers on
every platform. A guide table per threshold list (the cutpoint method: the bucket of U's high
word bounds the search) makes the search one or two steps. The shuffle encoder's per-user
noise (:class:`_DifferenceDraws`) inverts the same tables with the same law but reads U in
another order: 8 leading bits per sample first (most samples stop there at 0), then one word
for each sample that goes on, so a coordinate costs ~0.55 words instead of ~2.3.

Randomness: every sampler takes ``rng``: a :class:`~shuffledp.randomness.SecureRandom`
or ``None`` (the cryptographically secure generator: deployment), or a seed / numpy Generator
(reproducible research runs only).

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Sparse Federated Analytics"
   -- full entry in docs/references.md
.. [Ghazi23] Ghazi et al. (2023), "DP Heatmaps" -- full entry in docs/references.md
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate

import mpmath
import numba
import numpy as np
from scipy.special import gammaln

from shuffledp import _validation as v
from shuffledp.accounting.summation import POLYA_MAX_TABLE, POLYA_TAIL_BITS, SAMPLER_TV_MAX  # noqa: F401
from shuffledp.randomness import RngLike, SecureRandom, run_stream_kernel, word_source

_PREC = 192  # fractional bits of the exact pmf
# the table limits and the total-variation charge they imply are the accountant's
# (shuffledp.accounting.summation charges SAMPLER_TV_MAX per draw in every delta split)
_TAIL_BITS = POLYA_TAIL_BITS
_MAX_TABLE = POLYA_MAX_TABLE


def _check_shape_a(shape: float, a: float) -> tuple[float, float]:
    s = v.positive("shape", shape)
    af = v.interval("a", float(a) if isinstance(a, np.floating) else a, 0.0, 1.0)
    return s, af


def _check_a_array(a: float | np.ndarray) -> np.ndarray:
    a_arr = np.asarray(a, dtype=float)
    bad = ~((a_arr > 0) & (a_arr < 1))
    if np.any(bad):
        raise ValueError(f"a must be in (0, 1), got a={a_arr[bad].flat[0]!r}")
    return a_arr


@dataclass(frozen=True, eq=False)
class PolyaTable:
    """128-bit fixed-point distribution table of Polya(shape, a) (see module docstring).

    Attributes
    ----------
    shape, a : float
    hi, lo : ndarray of uint64, shape (K,)
        High and low words of the thresholds T_0 <= T_1 <= ... <= T_{K-1}.
    tv_bound : float
        Upper bound on the total variation distance between a sample and Polya(shape, a).
    """

    shape: float
    a: float
    hi: np.ndarray
    lo: np.ndarray
    tv_bound: float

    @property
    def size(self) -> int:
        return int(self.hi.size)

    def thresholds(self) -> list[int]:
        """The thresholds T_k as Python integers (for exact checks)."""
        return [(int(h) << 64) | int(l) for h, l in zip(self.hi, self.lo, strict=True)]

    def implied_pmf(self) -> list[Fraction]:
        """The exact law of the sampler: P(X = k) for k = 0..K as Fractions (sums to 1)."""
        t = [0, *self.thresholds(), 1 << 128]
        return [Fraction(t[k + 1] - t[k], 1 << 128) for k in range(len(t) - 1)]


@functools.lru_cache(maxsize=64)
def polya_table(shape: float, a: float) -> PolyaTable:
    """The exact-table sampler of Polya(shape, a) (cached per (shape, a))."""
    s, af = _check_shape_a(shape, a)
    sn, sd = Fraction(s).as_integer_ratio()
    an, ad = Fraction(af).as_integer_ratio()
    one = 1 << _PREC
    with mpmath.workprec(_PREC + 64):
        p0 = mpmath.power(1 - mpmath.mpf(an) / ad, mpmath.mpf(sn) / sd)
        p = int(mpmath.floor(p0 * one))
    ps = [p]
    # ratio p_{k+1}/p_k = a (s + k)/(k + 1); for k >= s - 1 it is <= rho_k = a max(1, (s+k)/(k+1))
    # and non-increasing in k when s >= 1, <= a when s < 1, so tail(k) <= p_k rho/(1 - rho).
    tail_cap = one >> _TAIL_BITS
    k = 0
    while True:
        for _ in range(256):
            p = p * an * (sn + k * sd) // (ad * sd * (k + 1))
            k += 1
            ps.append(p)
        if k >= s - 1:
            # rho = num / den; stop when (p + 1) rho <= tail_cap (1 - rho)
            num = an * max(sn + k * sd, sd * (k + 1))
            den = ad * sd * (k + 1)
            if num < den and (p + 1) * num <= tail_cap * (den - num):
                break
        if k > _MAX_TABLE:
            raise ValueError(
                f"Polya(shape={s!r}, a={af!r}) needs a table of more than {_MAX_TABLE} entries; "
                "a is too close to 1 (increase epsilon or lower the sensitivity)"
            )
    # S_k = sum_{j > k} p_j for k = 0..K-1 (exact integers), thresholds 2^128 - ceil(S_k/2^64)
    tails = list(accumulate(reversed(ps[1:])))[::-1]
    while tails and tails[-1] == 0:  # entries whose whole tail floored to 0 never fire
        tails.pop()
    shift = _PREC - 128
    full = 1 << 128
    th = [full - ((t + (1 << shift) - 1) >> shift) for t in tails]
    mask = (1 << 64) - 1
    hi = np.fromiter((t >> 64 for t in th), dtype=np.uint64, count=len(th))
    lo = np.fromiter((t & mask for t in th), dtype=np.uint64, count=len(th))
    K = len(ps)
    # floors in the recursion: p_k is low by < (k + 1) 2^-192 when every ratio is <= 1;
    # quantisation of each threshold: < 2^-128; tail: <= 2^-120.
    # (for s > 1 the floors can grow by at most 1 / p_0 before the mode, hence the factor)
    growth = 1.0 / min(1.0, ps[0] / one) if ps[0] else math.inf
    tv = 2.0 * (2.0**-_TAIL_BITS + (K + 2) * 2.0**-127 + (K + 2) ** 2 * 2.0**-190 * growth)
    return PolyaTable(s, af, hi, lo, tv)


_GUIDE_BITS = 16  # at most 2^16 guide buckets per table (and at most about 4 per threshold)


def _guide(hi: np.ndarray) -> tuple[np.ndarray, int]:
    """Guide table of one threshold list (the cutpoint method of Chen and Asau).

    The range [T_0 hi, 2^64) of the high word is cut into at most 2^_GUIDE_BITS buckets of
    2^shift values; entry g is #{k : hi_k < hi_0 + g 2^shift} (the last entry is K). For a
    high word u in bucket g every threshold before entry g is below U and every one from
    entry g + 1 on is above it, so the search for X = #{k : T_k <= U} is confined to
    [guide[g], guide[g + 1]]: the same X as a search of the whole table, in about one step
    instead of log2 K.
    """
    if hi.size == 0:
        return np.zeros(1, dtype=np.int32), 0
    bits = min(_GUIDE_BITS, (4 * hi.size - 1).bit_length())
    base = int(hi[0])
    span = (1 << 64) - base
    shift = max(0, (span - 1).bit_length() - bits)
    nb = ((span - 1) >> shift) + 1
    # base + g 2^shift < 2^64 for every g < nb
    bounds = np.uint64(base) + (np.arange(nb, dtype=np.uint64) << np.uint64(shift))
    g = np.empty(nb + 1, dtype=np.int32)  # K <= 2^24
    g[:nb] = np.searchsorted(hi, bounds, side="left")
    g[nb] = hi.size
    return g, shift


@functools.lru_cache(maxsize=64)
def _table_guide(shape: float, a: float) -> tuple[np.ndarray, int]:
    """The guide of ``polya_table(shape, a)``, built once."""
    return _guide(polya_table(shape, a).hi)


class _TableSet:
    """Several :class:`PolyaTable` concatenated, with their guide tables, for the kernels."""

    def __init__(self, tables: list[PolyaTable]) -> None:
        self.sizes = np.array([t.size for t in tables], dtype=np.int64)
        self.offs = np.r_[0, np.cumsum(self.sizes)[:-1]].astype(np.int64)
        self.t_hi = np.concatenate([t.hi for t in tables]) if tables else np.empty(0, np.uint64)
        self.t_lo = np.concatenate([t.lo for t in tables]) if tables else np.empty(0, np.uint64)
        guides = [_table_guide(t.shape, t.a) for t in tables]
        self.g_shift = np.array([sh for _, sh in guides], dtype=np.uint64)
        gs = np.array([g.size for g, _ in guides], dtype=np.int64)
        self.g_offs = np.r_[0, np.cumsum(gs)[:-1]].astype(np.int64)
        self.guide = (np.concatenate([g for g, _ in guides]) if tables
                      else np.empty(0, np.int32))

    def args(self) -> tuple[np.ndarray, ...]:
        return (self.offs, self.sizes, self.t_hi, self.t_lo, self.g_offs, self.g_shift,
                self.guide)


@numba.njit(cache=True, nogil=True, inline="always")
def _first_at_least(t_hi, o, lo, hi, u_hi):  # pragma: no cover - compiled
    """The first k in [lo, hi) with t_hi[o + k] >= u_hi (hi if none): binary search of a
    table's sorted high words."""
    while lo < hi:
        mid = (lo + hi) // 2
        if t_hi[o + mid] < u_hi:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True, inline="always")
def _invert(u_hi, buf, pos, o, K, go, sh, t_hi, t_lo, guide):  # pragma: no cover - compiled
    """X = #{k : T_k <= (u_hi, lo word)} for a table with t_hi[o] <= u_hi; reads the low
    word at ``pos``. Returns (X, pos after the low word), or (-1, pos) if ``buf`` ran out."""
    if pos >= buf.size:
        return -1, pos
    u_lo = buf[pos]
    g = go + np.int64((u_hi - t_hi[o]) >> sh)  # (int64 + uint64 would be a float)
    lo_i = guide[g]
    hi_i = guide[g + 1]
    while lo_i < hi_i:
        mid = (lo_i + hi_i) // 2
        th = t_hi[o + mid]
        if th < u_hi or (th == u_hi and t_lo[o + mid] <= u_lo):
            lo_i = mid + 1
        else:
            hi_i = mid
    return lo_i, pos + 1


@numba.njit(cache=True, nogil=True)
def _table_kernel(buf, i0, out, which, offs, sizes, t_hi, t_lo, g_offs, g_shift,
                  guide):  # pragma: no cover - compiled
    """X = #{k : T_k <= U} with U = (hi word, lo word); lo read only when needed."""
    nb = buf.size
    pos = 0
    for i in range(i0, out.size):
        start = pos
        if pos >= nb:
            return i, start
        u_hi = buf[pos]
        pos += 1
        w = which[i]
        o = offs[w]
        K = sizes[w]
        if K == 0 or u_hi < t_hi[o]:
            out[i] = 0
            continue
        x, pos = _invert(u_hi, buf, pos, o, K, g_offs[w], g_shift[w], t_hi, t_lo, guide)
        if x < 0:
            return i, start
        out[i] = x
    return out.size, pos


def _sample_tables(tables: list[PolyaTable], which: np.ndarray, rng: RngLike | SecureRandom
                   ) -> np.ndarray:
    ts = _TableSet(tables)
    out = np.empty(which.size, dtype=np.int64)
    run_stream_kernel(_table_kernel, out.size, word_source(rng), out, which, *ts.args(),
                      words_per_sample=1.1)
    return out


_LEAD_BITS = 8  # leading bits of U a sample of the split sampler reads in its first pass


@numba.njit(cache=True, nogil=True)
def _lead_scan(lead, c0, slow):  # pragma: no cover - compiled
    """Step 1 of the split sampler (:class:`_DifferenceDraws`): sample i (of n = 2m; X_a for
    i = a < m, Y_a for i = m + a) has the leading byte A_i = lead[i]; X_i = 0 when
    A_i < c0[a], the c_0 of coordinate a's table (then U_i < T_0). The indices of the other
    samples are written to ``slow`` in order; returns their number. Branch free, one flat
    loop per half."""
    m = c0.size
    ns = 0
    for half in range(2):
        base = half * m
        for a in range(m):
            slow[ns] = a + base
            ns += np.int64(lead[a + base] >= c0[a])
    return ns


@numba.njit(cache=True, nogil=True)
def _tail_fill(words, slow, lead, row, seg, seg_table, offs, sizes, t_hi, t_lo, g_offs,
               g_shift, guide, ties):  # pragma: no cover - compiled
    """Step 2: slow sample j reads words[j]; its X is added to (Y subtracted from) ``row``.
    A sample whose high word ties with a threshold's is left to :func:`_tie_fill`: its j is
    written to ``ties`` (in order). Returns the number of ties. ``slow`` is increasing, so
    the samples of each run of coordinates sharing a table (``seg``, ``seg_table``) come
    together and the table's constants are read once per run. No position depends on an
    earlier sample's value, so the loads of successive samples overlap."""
    m = row.size
    nt = 0
    ns = slow.size
    j = 0
    for half in range(2):
        base = half * m
        sign = np.int64(1 - 2 * half)
        for s in range(seg_table.size):
            end = seg[s + 1] + base
            w = seg_table[s]
            o = offs[w]
            K = sizes[w]
            t0 = t_hi[o] if K else np.uint64(0)
            go = g_offs[w]
            sh = g_shift[w]
            while j < ns and slow[j] < end:
                i = slow[j]
                u_hi = (np.uint64(lead[i]) << np.uint64(56)) | (words[j] >> np.uint64(8))
                j += 1
                if K == 0 or u_hi < t0:
                    continue  # X = 0 (A_i equalled T_0's leading byte)
                g = go + np.int64((u_hi - t0) >> sh)
                lo_i = guide[g]
                hi_i = guide[g + 1]
                # an empty bucket gives X = lo_i, and t_hi[lo_i] lies past the bucket (no tie)
                if lo_i < hi_i:
                    lo_i = _first_at_least(t_hi, o, lo_i, hi_i, u_hi)
                    if lo_i < K and t_hi[o + lo_i] == u_hi:
                        ties[nt] = j - 1
                        nt += 1
                        continue
                row[i - base] += sign * np.int64(lo_i)
    return nt


@numba.njit(cache=True, nogil=True)
def _tie_fill(extra, ties, words, slow, lead, row, which, offs, sizes, t_hi, t_lo
              ):  # pragma: no cover - compiled
    """Step 3: tie t (slow sample j = ties[t]) completes U's low word from extra[t] and
    counts the thresholds with its high word that do not exceed U."""
    m = row.size
    for t in range(ties.size):
        j = ties[t]
        i = slow[j]
        u_hi = (np.uint64(lead[i]) << np.uint64(56)) | (words[j] >> np.uint64(8))
        u_lo = (words[j] << np.uint64(56)) | (extra[t] >> np.uint64(8))
        a = i if i < m else i - m
        w = which[a]
        o = offs[w]
        K = sizes[w]
        x = _first_at_least(t_hi, o, 0, K, u_hi)
        while x < K and t_hi[o + x] == u_hi and t_lo[o + x] <= u_lo:
            x += 1
        if i < m:
            row[a] += x
        else:
            row[a] -= x


class _DifferenceDraws:
    """X - Y with X, Y i.i.d. Polya(shape, a) per coordinate, the tables built once: one
    user's noise share in the encoder, by a split inversion of the exact tables.

    The law is exactly that of :func:`polya_difference` (X = #{k : T_k <= U} with U
    uniform on [0, 2^128) and the same 128-bit tables); the words are read in another
    order, so that the common sample X = 0 costs 8 bits instead of a 64-bit word (and the
    values differ from ``polya_difference`` for the same seed). With n = 2 size samples
    (the X of every coordinate, then the Y), from one stream of 64-bit words:

    1. ceil(n / 8) words, as little-endian bytes, give sample i its byte A_i, the top 8
       bits of U_i. If A_i is below c_0, the top 8 bits of T_0, then U_i < T_0 and X_i = 0
       (about 86% of the samples at the protocol's settings).
    2. The next n_s words go to the n_s other samples, in order: with W the word of sample
       i, U_i's high word is A_i 2^56 + (W >> 8), and X_i follows from it (guide table,
       then a short search on the high words) unless a threshold has the same high word.
    3. The next n_t words go to those n_t tied samples, in order: with W' the word of the
       sample, U_i's low word is (W mod 2^8) 2^56 + (W' >> 8), compared exactly with the
       thresholds' low words. (The low 8 bits of W' are not used.)

    Exactness: U_i = A_i 2^120 + (W >> 8) 2^64 + (W mod 2^8) 2^56 + (W' >> 8) is made of
    128 distinct bits of the stream. The A_i are i.i.d. uniform bytes; which samples reach
    step 2 depends on the A's alone, and which reach step 3 on the A's and W's alone; each
    step's words come after all the earlier steps' words and are handed out in order. So
    given what decided who reads them, they are i.i.d. uniform and independent of it: the
    U_i are i.i.d. uniform on [0, 2^128), and each X_i is decided exactly from the bits it
    read. ``tests/test_polya.py`` checks the kernels against the plain inversion of the
    same U on random and on crafted (tie) inputs.
    """

    def __init__(self, shape: float, a: float | np.ndarray, size: int) -> None:
        _check_shape_a(shape, 0.5)
        self.size = _size(size)
        tables, which = _tables_for(shape, a, self.size)
        self.tables = _TableSet(tables)
        self.which = which.astype(np.int64)
        # runs of coordinates sharing a table (the levels of a pyramid)
        if which.size:
            cut = np.flatnonzero(np.diff(which)) + 1
            self.seg = np.r_[0, cut, self.size].astype(np.int64)
        else:
            self.seg = np.zeros(1, np.int64)
        self.seg_table = self.which[self.seg[:-1]]
        # c_0 per table (256: an empty table, every sample is 0)
        self.lead0 = np.array([int(t.hi[0]) >> (64 - _LEAD_BITS) if t.size else 256
                               for t in tables], dtype=np.int64)
        # c_0 of each coordinate's table (the per-sample bound of step 1)
        self.lead_at = self.lead0[self.which].astype(np.uint16)
        self._scratch = threading.local()

    def add_to(self, row: np.ndarray, rng: RngLike | SecureRandom) -> None:
        """Add one draw to the int64 vector ``row`` (length ``size``) in place, reading
        ceil(2 size / 8) + n_s + n_t words of ``rng``
        (:func:`~shuffledp.randomness.word_source`) as the class docstring says."""
        if row.shape != (self.size,) or row.dtype != np.int64:
            raise ValueError(f"row must be an int64 vector of length {self.size}, got "
                             f"{row.dtype} {row.shape}")
        n = 2 * self.size
        words = word_source(rng)
        lead = np.asarray(words((n + 7) // 8), dtype="<u8").view(np.uint8)
        sc = self._scratch
        if getattr(sc, "n", -1) != n:
            sc.slow, sc.ties, sc.n = np.empty(n, np.int64), np.empty(n, np.int64), n
        ns = _lead_scan(lead, self.lead_at, sc.slow)
        slow = sc.slow[:ns]
        w = np.asarray(words(ns), dtype=np.uint64)
        nt = _tail_fill(w, slow, lead, row, self.seg, self.seg_table,  # type: ignore[call-arg]
                        *self.tables.args(), sc.ties)
        if nt:  # about 2^-50 per sample at the protocol's settings
            ta = self.tables
            _tie_fill(np.asarray(words(nt), dtype=np.uint64), sc.ties[:nt], w, slow, lead,
                      row, self.which, ta.offs, ta.sizes, ta.t_hi, ta.t_lo)

    def draw(self, rng: RngLike | SecureRandom) -> np.ndarray:
        """One vector X - Y of length ``size`` (int64), as :meth:`add_to`."""
        out = np.zeros(self.size, dtype=np.int64)
        self.add_to(out, rng)
        return out


def _tables_for(shape: float, a: float | np.ndarray, size: int) -> tuple[list, np.ndarray]:
    a_arr = _check_a_array(a)
    if a_arr.ndim == 0:
        return [polya_table(shape, float(a_arr))], np.zeros(size, dtype=np.int64)
    flat = np.broadcast_to(a_arr, (size,)) if a_arr.size != size else a_arr.ravel()
    uniq, which = np.unique(flat, return_inverse=True)
    return [polya_table(shape, float(x)) for x in uniq], which.ravel().astype(np.int64)


def polya(
    shape: float, a: float | np.ndarray, size: int, rng: RngLike | SecureRandom = None
) -> np.ndarray:
    """i.i.d. Polya(shape, a) variables (int64) from the exact table ([Bagdasaryan22]_ Def. 4.1).

    Parameters
    ----------
    shape : float
        Real shape s > 0 (1/n for n users' shares of one geometric variable).
    a : float or ndarray
        In (0, 1); an array of length ``size`` gives a per-coordinate a.
    size : int
    rng : SecureRandom, seed, Generator or None
        ``None`` or a SecureRandom: the cryptographically secure generator (deployment);
        a seed or Generator: reproducible research randomness.

    Returns
    -------
    ndarray of int64, shape (size,)

    Raises
    ------
    ValueError
        If ``shape`` is not a finite positive number, ``a`` is outside (0, 1) or an array of
        another length, or ``size`` is not an integer >= 0.

    References
    ----------
    [Bagdasaryan22]_ Def. 4.1; the exact-table sampler is described in the module docstring.
    """
    _check_shape_a(shape, 0.5)
    size = _size(size)
    tables, which = _tables_for(shape, a, size)
    return _sample_tables(tables, which, rng)


def polya_difference(
    shape: float, a: float | np.ndarray, size: int, rng: RngLike | SecureRandom = None
) -> np.ndarray:
    """X - Y with X, Y i.i.d. Polya(shape, a): one user's share of two-sided discrete Laplace.

    With shape = 1/n the sum over n users is DL(a) ([Bagdasaryan22]_ Thm 4.2). X and Y come
    from the exact table (:class:`PolyaTable`); the total variation to the ideal difference is
    at most ``2 * polya_table(shape, a).tv_bound`` per coordinate.

    Parameters
    ----------
    shape, a, size, rng
        As :func:`polya`.

    Returns
    -------
    ndarray of int64, shape (size,)

    Raises
    ------
    ValueError
        As :func:`polya`.

    References
    ----------
    [Bagdasaryan22]_ Thm 4.2 (n shares of shape 1/n sum to DL(a)); used per coordinate in
    [Ghazi23]_ App. F, step 3.
    """
    _check_shape_a(shape, 0.5)
    size = _size(size)
    tables, which = _tables_for(shape, a, size)
    xy = _sample_tables(tables, np.concatenate([which, which]), rng)
    return xy[:size] - xy[size:]


def _size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise ValueError(f"size must be an integer >= 0, got size={size!r}")
    return int(size)


def polya_pmf(k: np.ndarray, shape: float, a: float) -> np.ndarray:
    """Exact P(X = k) for X ~ Polya(shape, a) ([Bagdasaryan22]_ eq. 1), via log-gamma.

    Parameters
    ----------
    k : array_like of int
        The points (negative ones have probability 0).
    shape : float
        Real shape s > 0.
    a : float
        In (0, 1).

    Returns
    -------
    ndarray of float64, shape of ``k``

    Raises
    ------
    ValueError
        If ``shape`` is not a finite positive number or ``a`` is outside (0, 1).

    References
    ----------
    [Bagdasaryan22]_ eq. 1 and Def. 4.1.
    """
    s, a = _check_shape_a(shape, a)
    k = np.asarray(k)
    kk = np.maximum(k, 0).astype(float)
    logp = gammaln(s + kk) - gammaln(s) - gammaln(kk + 1) + kk * math.log(a) + s * math.log1p(-a)
    return np.where(k >= 0, np.exp(logp), 0.0)


def polya_difference_sum_pmf(
    n: int, shape: float, a: float, support: int
) -> tuple[np.ndarray, np.ndarray]:
    """pmf of sum_{j=1}^n (X_j - Y_j), X_j, Y_j i.i.d. Polya(shape, a), by explicit convolution.

    The one-sided pmf is truncated at ``support`` (choose it so a^support is negligible) and
    convolved n times; used to verify [Bagdasaryan22]_ Thm 4.2 exactly rather than by reading
    it.

    Parameters
    ----------
    n : int
        Number of users, >= 1.
    shape : float
        Real shape s > 0 of each Polya variable.
    a : float
        In (0, 1).
    support : int
        Truncation point of the one-sided pmf, >= 0.

    Returns
    -------
    k, pmf : ndarray
        Integer support -n*support..n*support and the probabilities.

    Raises
    ------
    ValueError
        If ``n`` < 1, ``support`` < 0, ``shape`` is not a finite positive number or ``a`` is
        outside (0, 1).

    References
    ----------
    [Bagdasaryan22]_ Thm 4.2 (what the convolution verifies).
    """
    if int(support) < 0:
        raise ValueError(f"support must be >= 0, got support={support!r}")
    if int(n) < 1:
        raise ValueError(f"n must be >= 1, got n={n!r}")
    one = polya_pmf(np.arange(int(support) + 1), shape, a)
    total = np.array([1.0])
    for _ in range(int(n)):
        total = np.convolve(total, one)
    diff = np.convolve(total, total[::-1])
    half = total.size - 1
    return np.arange(-half, half + 1), diff
