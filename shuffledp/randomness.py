"""Randomness: the one home for every random value the toolkit draws.

Two kinds of source, and nothing else:

* :class:`SecureRandom` (ChaCha20 keystream, RFC 8439 cipher from ``cryptography``, keyed with
  32 bytes from ``os.urandom``, re-keyed every 2^30 bytes and after ``fork``): the only source
  of shares, permutations, bucket labels, SecAgg masks and, on the deployment path, noise
  words. No seed exists. Uniform integers below a bound use Lemire's multiply-shift with
  rejection ([Lemire19]_); :func:`secure_shuffle` is Fisher-Yates ([Knuth97]_) on top of it.
* a numpy ``Generator`` from a seed (:data:`RngLike`, :func:`as_generator`): reproducible
  research runs. A release made this way is *not* private against anyone who knows or can
  guess the seed; its guarantee carries :data:`SEEDED_NOTE` (:func:`is_seeded`).

Uniform 64-bit words
--------------------

Every integer noise sampler of the toolkit
(:func:`shuffledp.encoders.noise.laplace.discrete_laplace`,
:func:`shuffledp.encoders.noise.polya.polya_difference`) is a deterministic function of a stream of
i.i.d. uniform 64-bit words. Where the words come from decides what the output is good for:

* :class:`SecureRandom` (ChaCha20 keyed from ``os.urandom``): the deployment path (device
  encoders, central releases made without a seed). No seed exists.
* a numpy ``Generator`` (``rng`` seed): reproducible research runs. A release made this way is
  *not* private against anyone who knows or can guess the seed, and reports say so.

:func:`run_stream_kernel` feeds a compiled kernel that consumes a variable number of words per
sample. When the buffer runs out in the middle of a sample, the kernel reports where that
sample started; the driver keeps the unused words (including those the unfinished sample
already read), appends fresh ones and restarts the sample there. Each sample is thus the same
function of one contiguous piece of a single infinite word stream, so the output law does not
depend on buffer sizes (no conditioning on "the sample fitted in the buffer").

References
----------
.. [Lemire19] Lemire (2019), "Fast Random Integer Generation" -- full entry in docs/references.md
.. [Knuth97] Knuth (1997), "TAOCP Vol. 2", Sec. 3.4.2, Alg. P -- full entry in docs/references.md
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numba
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from shuffledp import _validation as v

RngLike = int | np.random.Generator | np.random.SeedSequence | None
SEEDED_NOTE = "reproducible evaluation, not a private release (noise drawn from a seed)"


# --------------------------------------------------------------------------------------
# research generators from seeds
# --------------------------------------------------------------------------------------
def as_generator(rng: RngLike, name: str = "rng") -> np.random.Generator:
    """A numpy Generator from a seed, SeedSequence, Generator or None (fresh OS entropy).

    Parameters
    ----------
    rng : int, numpy.random.SeedSequence, numpy.random.Generator or None
        A non-negative seed, a SeedSequence, a Generator (returned as is) or None.
    name : str
        How to name the argument in error messages.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    ValueError
        If ``rng`` is a negative integer.
    TypeError
        If ``rng`` is of any other type (a bool, a float, a string, ...).
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise ValueError(f"{name} seed must be >= 0, got {name}={rng!r}")
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"{name} must be None, a non-negative int seed, a SeedSequence or a numpy Generator, "
        f"got {name}={rng!r}"
    )


# --------------------------------------------------------------------------------------
# the cryptographically secure source
# --------------------------------------------------------------------------------------
_REKEY_BYTES = 1 << 30


def check_modulus(q: int) -> int:
    """Validate the modulus 2 <= q <= 2^32 (shares are stored as uint32 or uint64).

    Parameters
    ----------
    q : int
        The modulus.

    Returns
    -------
    int
        ``q`` as a Python int.

    Raises
    ------
    ValueError
        If ``q`` is not an integer in [2, 2^32].
    """
    return v.bounded_count("q", q, 2, 1 << 32)


class SecureRandom:
    """Cryptographically secure bytes and integers (ChaCha20 keystream keyed from os.urandom).

    Not reproducible by design: there is no seed. Thread-unsafe; use one per thread. Fork-safe:
    a child process that inherits an instance re-keys from os.urandom on its first draw, so
    parent and child never emit the same stream (the classic fork-duplicated-RNG flaw).
    :meth:`for_testing` builds a *deterministic* stream from a fixed key, for statistical tests
    with a fixed false-failure rate only; never use it to produce real shares.

    Takes no parameters: the key and nonce come from ``os.urandom``.

    Attributes
    ----------
    _used : int
        Keystream bytes drawn since the last re-key (re-keyed every 2^30 bytes).
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

    def fill_uint32(self, out: np.ndarray) -> np.ndarray:
        """Fill a contiguous uint32 array in place with i.i.d. uniform words; returns it.

        The same keystream as :meth:`uint32` (the cipher encrypts zeros), written straight
        into ``out`` without an intermediate bytes object; the cipher call releases the GIL,
        so threads with one SecureRandom each draw in parallel.
        """
        if out.dtype != np.uint32 or out.ndim != 1 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a contiguous 1D uint32 array, got {out.dtype} "
                             f"shape {out.shape}")
        n = 4 * out.size
        if self._used + n > _REKEY_BYTES or (self._key is None and os.getpid() != self._pid):
            self._rekey()
        self._used += n
        zeros = getattr(self, "_zeros", None)
        if zeros is None or zeros.size < n:
            zeros = self._zeros = np.zeros(max(n, 1 << 16), dtype=np.uint8)
        # a stream cipher writes exactly len(input) bytes, straight into ``out``
        self._enc.update_into(zeros[:n].data, out.view(np.uint8).data)
        return out

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


# --------------------------------------------------------------------------------------
# secure permutation
# --------------------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True, inline="always")
def _lemire_below(words, pos, bound):  # pragma: no cover - compiled
    """(j uniform in [0, bound), the next word position) by Lemire's method from the 32-bit
    ``words[pos:]`` ([Lemire19]_; rejection, unbiased), or (-1, pos) if the words ran out."""
    mask = np.uint64(0xFFFFFFFF)
    nw = words.size
    while pos < nw:
        p = np.uint64(words[pos]) * bound
        pos += 1
        low = p & mask
        if low >= bound:
            return np.int64(p >> np.uint64(32)), pos
        t = (np.uint64(1) << np.uint64(32)) % bound
        if low >= t:
            return np.int64(p >> np.uint64(32)), pos
    return np.int64(-1), pos


@numba.njit(cache=True, nogil=True)
def _fisher_yates(idx, i, words):  # pragma: no cover - compiled
    """Continue Fisher-Yates on ``idx`` from position i downwards with random ``words``.

    j uniform in [0, i] by Lemire's method (:func:`_lemire_below`). Returns the position
    reached (0 when done) so the caller can resupply words.
    """
    pos = 0
    while i > 0:
        j, pos = _lemire_below(words, pos, np.uint64(i + 1))
        if j < 0:
            return i
        tmp = idx[i]
        idx[i] = idx[j]
        idx[j] = tmp
        i -= 1
    return 0


def secure_shuffle(values: np.ndarray, source: SecureRandom | None = None) -> None:
    """Permute a 1D array in place, uniformly at random, from a cryptographically secure source.

    Fisher-Yates ([Knuth97]_ Sec. 3.4.2, Alg. P) with j ~ U{0..i} drawn by Lemire's unbiased
    multiply-shift rejection ([Lemire19]_) from :class:`SecureRandom` (ChaCha20 keyed by
    os.urandom).

    Parameters
    ----------
    values : ndarray, 1D
        The array to permute in place (at most 2^32 elements).
    source : SecureRandom, optional
        The random source (default: a fresh one).

    Raises
    ------
    ValueError
        If ``values`` is not 1D or has more than 2^32 elements.
    """
    if values.ndim != 1:
        raise ValueError(f"values must be 1D, got shape {values.shape}")
    n = values.size
    if n > 1 << 32:
        raise ValueError(f"at most 2^32 elements can be shuffled, got {n}")
    src = source if source is not None else SecureRandom()
    i = n - 1
    while i > 0:
        i = int(_fisher_yates(values, i, src.uint32(i + 64)))


def secure_permutation(n: int, source: SecureRandom | None = None) -> np.ndarray:
    """A uniformly random permutation of 0..n-1 (int64) from the secure source.

    Parameters
    ----------
    n : int
        Length of the permutation, 0 <= n <= 2^32.
    source : SecureRandom, optional
        The random source (default: a fresh one).

    Returns
    -------
    ndarray of int64, shape (n,)

    Raises
    ------
    ValueError
        If ``n`` is negative or larger than 2^32.
    """
    n = v.bounded_count("n", n, 0, 1 << 32)
    p = np.arange(n, dtype=np.int64)
    secure_shuffle(p, source)
    return p




# --------------------------------------------------------------------------------------
# SipHash-2-4 (bucket labels of encrypted records)
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# uniform 64-bit words for the exact noise samplers
# --------------------------------------------------------------------------------------
WordSource = Callable[[int], np.ndarray]


def _secure_words(source: SecureRandom | None = None) -> WordSource:
    """Word source backed by the cryptographically secure generator (deployment path)."""
    src = source if source is not None else SecureRandom()
    if not isinstance(src, SecureRandom):
        raise TypeError(f"source must be a SecureRandom, got source={source!r}")

    def draw(n: int) -> np.ndarray:
        return src.uint64(n)

    return draw


def _generator_words(rng: RngLike) -> WordSource:
    """Word source backed by a numpy Generator (research path, reproducible from a seed)."""
    g = as_generator(rng)
    if type(g.bit_generator) in _RAW_IS_UINT64:
        # the same words as the integers() call below, without its range handling
        return g.bit_generator.random_raw

    def draw(n: int) -> np.ndarray:
        return g.integers(0, np.iinfo(np.uint64).max, size=int(n), dtype=np.uint64,
                          endpoint=True)

    return draw


#: bit generators whose raw output is their full-range uint64 (MT19937's is 32 bits)
_RAW_IS_UINT64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.SFC64, np.random.Philox)


def word_source(rng: RngLike | SecureRandom, *, secure_if_none: bool = True) -> WordSource:
    """Words from ``rng``: a SecureRandom, a seed / Generator (research), or None.

    ``None`` means fresh entropy: the secure generator when ``secure_if_none`` (the default),
    else a numpy Generator seeded from the OS.

    Parameters
    ----------
    rng : SecureRandom, int, numpy.random.SeedSequence, numpy.random.Generator or None
        Where the words come from.
    secure_if_none : bool
        Whether ``None`` means the secure generator (else a fresh numpy Generator).

    Returns
    -------
    callable
        ``draw(n) -> ndarray of uint64, shape (n,)``: n i.i.d. uniform 64-bit words.

    Raises
    ------
    ValueError, TypeError
        As :func:`as_generator`, for an invalid seed.
    """
    if isinstance(rng, SecureRandom):
        return _secure_words(rng)
    if rng is None and secure_if_none:
        return _secure_words()
    return _generator_words(rng)


def run_stream_kernel(
    kernel: Callable[..., tuple[int, int]],
    n_samples: int,
    words: WordSource,
    *args: object,
    words_per_sample: float = 8.0,
) -> None:
    """Drive ``kernel(buf, i0, *args) -> (i_next, pos)`` until all samples are done.

    The kernel fills samples ``i0, i0 + 1, ...`` reading words from ``buf``; it returns the
    first sample it could not finish (``n_samples`` when done) and the buffer position where
    that sample started. Unused words carry over to the next call (see module docstring).

    Parameters
    ----------
    kernel : callable
        A compiled sampler ``kernel(buf, i0, *args) -> (i_next, pos)``.
    n_samples : int
        Number of samples the kernel must fill.
    words : callable
        Word source (:func:`word_source`).
    *args
        Passed to ``kernel`` after ``buf`` and ``i0`` (typically the output array and the
        distribution's parameters).
    words_per_sample : float
        Expected words one sample consumes (sizes each request).

    Raises
    ------
    RuntimeError
        If the kernel makes no progress on 2^26 words (a kernel bug, never seen).
    """
    i = 0
    carry = np.empty(0, dtype=np.uint64)
    while i < n_samples:
        need = int((n_samples - i) * words_per_sample) + 64
        buf = np.concatenate([carry, np.asarray(words(need), dtype=np.uint64)])
        i_next, pos = kernel(buf, i, *args)
        if i_next == i and pos == 0 and buf.size > (1 << 26):
            raise RuntimeError("noise sampler made no progress on 2^26 words")  # pragma: no cover
        carry = buf[pos:]
        i = int(i_next)


def is_seeded(rng: object) -> bool:
    """True when ``rng`` makes a run reproducible (a seed or a numpy Generator): such a
    release is a reproducible evaluation, not a private release.

    Parameters
    ----------
    rng : object
        What the caller passed as its ``rng``.

    Returns
    -------
    bool
        False for None and a :class:`SecureRandom`, True for anything else.

    Raises
    ------
    Nothing
        Any object is accepted (it is validated where it is used).
    """
    return rng is not None and not isinstance(rng, SecureRandom)


def noise_source(
    rng: RngLike | SecureRandom, secure: SecureRandom | None = None
) -> SecureRandom | np.random.Generator:
    """One randomness source for a whole run.

    ``None``: ``secure`` (or a fresh :class:`SecureRandom`); a SecureRandom: itself; a seed or
    Generator: one numpy Generator, so successive draws of the run continue one stream
    instead of restarting it.

    Parameters
    ----------
    rng : SecureRandom, int, numpy.random.SeedSequence, numpy.random.Generator or None
        The run's ``rng`` argument.
    secure : SecureRandom, optional
        The secure source to use when ``rng`` is None.

    Returns
    -------
    SecureRandom or numpy.random.Generator

    Raises
    ------
    ValueError, TypeError
        As :func:`as_generator`, for an invalid seed.
    """
    if rng is None:
        return secure if secure is not None else SecureRandom()
    if isinstance(rng, SecureRandom):
        return rng
    return as_generator(rng)


# --------------------------------------------------------------------------------------
# counter-based streams: one per user, whatever the partition of the work
# --------------------------------------------------------------------------------------
class UserStreams:
    """One independent noise stream per user index, the same whatever the partition.

    A run's seed is turned into one root ``numpy.random.SeedSequence``; user j's stream is
    its child with spawn key ``root.spawn_key + (j,)`` (what ``root.spawn`` gives as the
    j-th child), driving a PCG64 generator. The stream of user j depends only on the seed
    and j, so a run split over any number of threads, processes or Dask workers draws the
    same noise for every user and gives bit-identical sums. Without a seed (``rng=None`` or
    a :class:`SecureRandom`) every stream is the caller's cryptographically secure source
    (nothing is reproducible, by design).

    Parameters
    ----------
    rng : None, SecureRandom, int, numpy.random.SeedSequence or numpy.random.Generator
        The run's ``rng``: None or a SecureRandom for secure streams; a non-negative seed,
        a SeedSequence (its children are the streams) or a Generator (one 128-bit root
        entropy is drawn from it once) for reproducible ones.

    Attributes
    ----------
    root : numpy.random.SeedSequence or None
        The root of the seeded streams; None for secure ones.

    Raises
    ------
    ValueError
        If ``rng`` is a negative seed.
    TypeError
        If ``rng`` is of any other type.
    """

    __slots__ = ("root",)

    def __init__(self, rng: RngLike | SecureRandom = None) -> None:
        root: np.random.SeedSequence | None
        if rng is None or isinstance(rng, SecureRandom):
            root = None
        elif isinstance(rng, np.random.SeedSequence):
            root = rng
        elif isinstance(rng, np.random.Generator):
            root = np.random.SeedSequence(int.from_bytes(rng.bytes(16), "little"))
        else:
            as_generator(rng)  # the same checks (and messages) as every seeded path
            root = np.random.SeedSequence(int(rng))
        self.root = root

    @property
    def seeded(self) -> bool:
        """True when the streams are reproducible (derived from a seed)."""
        return self.root is not None

    def stream(self, j: int, secure: SecureRandom) -> SecureRandom | np.random.Generator:
        """User ``j``'s source: its PCG64 child stream when seeded, else ``secure``.

        Parameters
        ----------
        j : int
            The user's index in the population (not its position in a partition).
        secure : SecureRandom
            The secure source to return when the streams are not seeded (one per thread).

        Returns
        -------
        SecureRandom or numpy.random.Generator
            Where user j's noise words come from.
        """
        if self.root is None:
            return secure
        r = self.root
        child = np.random.SeedSequence(r.entropy, spawn_key=(*r.spawn_key, int(j)),
                                       pool_size=r.pool_size)
        return np.random.Generator(np.random.PCG64(child))

    def __getstate__(self) -> dict:
        return {"root": self.root}

    def __setstate__(self, state: dict) -> None:
        self.root = state["root"]

    def __repr__(self) -> str:
        return f"UserStreams({'secure' if self.root is None else self.root.entropy!r})"
