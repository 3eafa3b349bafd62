"""Uniform 64-bit words: the only randomness the exact noise samplers consume.

Every integer noise sampler of the toolkit (:func:`shuffledp.encoders.noise.discrete_laplace`,
:func:`shuffledp.encoders.polya.polya_difference`) is a deterministic function of a stream of
i.i.d. uniform 64-bit words. Where the words come from decides what the output is good for:

* :class:`~shuffledp.encoders.sharing.SecureRandom` (ChaCha20 keyed from ``os.urandom``): the
  deployment path (device encoders, central releases made without a seed). No seed exists.
* a numpy ``Generator`` (``rng`` seed): reproducible research runs. A release made this way is
  *not* private against anyone who knows or can guess the seed, and reports say so.

:func:`run_stream_kernel` feeds a compiled kernel that consumes a variable number of words per
sample. When the buffer runs out in the middle of a sample, the kernel reports where that
sample started; the driver keeps the unused words (including those the unfinished sample
already read), appends fresh ones and restarts the sample there. Each sample is thus the same
function of one contiguous piece of a single infinite word stream, so the output law does not
depend on buffer sizes (no conditioning on "the sample fitted in the buffer").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shuffledp._rng import RngLike, as_generator
from shuffledp.crypto import SecureRandom

WordSource = Callable[[int], np.ndarray]


def secure_words(source: SecureRandom | None = None) -> WordSource:
    """Word source backed by the cryptographically secure generator (deployment path)."""
    src = source if source is not None else SecureRandom()
    if not isinstance(src, SecureRandom):
        raise TypeError(f"source must be a SecureRandom, got source={source!r}")

    def draw(n: int) -> np.ndarray:
        return src.uint64(n)

    return draw


def generator_words(rng: RngLike) -> WordSource:
    """Word source backed by a numpy Generator (research path, reproducible from a seed)."""
    g = as_generator(rng)

    def draw(n: int) -> np.ndarray:
        return g.integers(0, np.iinfo(np.uint64).max, size=int(n), dtype=np.uint64,
                          endpoint=True)

    return draw


def word_source(rng: RngLike | SecureRandom, *, secure_if_none: bool = True) -> WordSource:
    """Words from ``rng``: a SecureRandom, a seed / Generator (research), or None.

    ``None`` means fresh entropy: the secure generator when ``secure_if_none`` (the default),
    else a numpy Generator seeded from the OS.
    """
    if isinstance(rng, SecureRandom):
        return secure_words(rng)
    if rng is None and secure_if_none:
        return secure_words()
    return generator_words(rng)


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
    release is a reproducible evaluation, not a private release."""
    return rng is not None and not isinstance(rng, SecureRandom)


def noise_source(
    rng: RngLike | SecureRandom, secure: SecureRandom | None = None
) -> SecureRandom | np.random.Generator:
    """One randomness source for a whole run.

    ``None``: ``secure`` (or a fresh :class:`SecureRandom`); a SecureRandom: itself; a seed or
    Generator: one numpy Generator, so successive draws of the run continue one stream
    instead of restarting it.
    """
    if rng is None:
        return secure if secure is not None else SecureRandom()
    if isinstance(rng, SecureRandom):
        return rng
    return as_generator(rng)
