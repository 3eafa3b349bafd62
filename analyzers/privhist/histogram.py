"""Anonymized histograms: prevalence and sorted-count forms, sorted-l1 distance, loader.

An anonymized histogram is the multiset of counts of a label-count dataset ([Suresh19]_
Sec. 2). Two equivalent forms are used:

* the *prevalence form* {(r, phi_r) : phi_r > 0}, phi_r the number of labels seen exactly r
  times (compact: a 70-million-item password list has a few thousand distinct counts);
* the *sorted-count form* n_(1) >= n_(2) >= ... (one entry per label).

The distance is the sorted l1 (earth mover's) distance of [Suresh19]_ Lemma 1,
l1(h1, h2) = sum_i |n_(i)(h1) - n_(i)(h2)| (zero-padded), computed here on the prevalence form
in time linear in the number of distinct counts. Two histograms are neighbours when their
distance is 1 ([Suresh19]_ Def. 1): one label's count differs by one.

References
----------
.. [Suresh19] Suresh (2019), "Differentially private anonymized histograms", Lemma 1, Def. 1, eq.
   (3) -- full entry in docs/references.md
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_COUNT = 1 << 52  # counts and prevalences stay exact in int64 sums and float64


def _integer_array(name: str, value: Any) -> np.ndarray:
    """A 1-D int64 array of integers in [1, 2^52] (non-integers, negatives and zero refused)."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:  # pragma: no cover - ragged input
        raise TypeError(
            f"{name} must be a 1-D array of integers, got {name}={value!r:.80}"
        ) from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integers, got shape {arr.shape}")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                 or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must be a 1-D array of integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"{name} must hold integers; {name}[{k}]={arr[k]!r}")
    out = arr.astype(np.int64)
    bad = (out < 1) | (out > MAX_COUNT)
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(f"{name} must hold integers in [1, 2^52]; {name}[{k}]={arr[k]!r}")
    return out


@dataclass(frozen=True, eq=False)
class AnonHistogram:
    """An anonymized histogram in prevalence form.

    Attributes
    ----------
    counts : ndarray of int64
        The distinct counts r, strictly increasing, each >= 1.
    prevalences : ndarray of int64
        phi_r > 0, the number of labels with count r (same length as ``counts``).

    Build with :meth:`from_prevalences` (any order, repeated counts are merged) or
    :meth:`from_counts` (one count per label). The empty histogram has no entries.
    """

    counts: np.ndarray
    prevalences: np.ndarray

    @classmethod
    def from_prevalences(cls, counts: Any, prevalences: Any) -> AnonHistogram:
        """Histogram from pairs (r, phi_r); pairs with the same r are added up."""
        r = _integer_array("counts", counts)
        phi = _integer_array("prevalences", prevalences)
        if r.size != phi.size:
            raise ValueError(
                f"counts and prevalences must have the same length, got {r.size} and {phi.size}"
            )
        uniq, inv = np.unique(r, return_inverse=True)
        merged = np.zeros(uniq.size, dtype=np.int64)
        np.add.at(merged, inv.ravel(), phi)
        return cls._trusted(uniq, merged)

    @classmethod
    def from_counts(cls, counts: Any) -> AnonHistogram:
        """Histogram of a list of per-label counts (the sorted-count form in any order)."""
        r = _integer_array("counts", counts)
        uniq, phi = np.unique(r, return_counts=True)
        return cls._trusted(uniq, phi.astype(np.int64))

    @classmethod
    def empty(cls) -> AnonHistogram:
        return cls._trusted(np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def _trusted(cls, counts: np.ndarray, prevalences: np.ndarray) -> AnonHistogram:
        """No checks: counts strictly increasing >= 1, prevalences > 0 (internal use)."""
        keep = prevalences > 0
        c = np.ascontiguousarray(counts[keep], dtype=np.int64)
        p = np.ascontiguousarray(prevalences[keep], dtype=np.int64)
        c.flags.writeable = False
        p.flags.writeable = False
        return cls(c, p)

    @property
    def n(self) -> int:
        """Number of items, sum_r r phi_r."""
        return int(sum(int(r) * int(p) for r, p in zip(self.counts, self.prevalences)))

    @property
    def support(self) -> int:
        """Number of labels, sum_r phi_r."""
        return int(self.prevalences.sum())

    def __len__(self) -> int:
        return int(self.counts.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AnonHistogram):
            return NotImplemented
        return (np.array_equal(self.counts, other.counts)
                and np.array_equal(self.prevalences, other.prevalences))

    def __repr__(self) -> str:
        pairs = ", ".join(f"{r}: {p}" for r, p in zip(self.counts[:8], self.prevalences[:8]))
        more = ", ..." if len(self) > 8 else ""
        return f"AnonHistogram({{{pairs}{more}}})"

    def sorted_counts(self) -> np.ndarray:
        """The sorted-count form n_(1) >= n_(2) >= ... (length :attr:`support`)."""
        return np.repeat(self.counts[::-1], self.prevalences[::-1])

    def cumulative(self, r: Any) -> np.ndarray:
        """phi_{r+} = number of labels with count >= r, for each entry of ``r``."""
        tail = np.concatenate([np.cumsum(self.prevalences[::-1])[::-1], [0]])
        return tail[np.searchsorted(self.counts, np.asarray(r), side="left")]


def sorted_l1(h1: AnonHistogram, h2: AnonHistogram) -> int:
    """Sorted l1 distance sum_i |n_(i)(h1) - n_(i)(h2)| ([Suresh19]_ Lemma 1).

    Runs on the prevalence forms: the sorted-count sequences are run-length encoded, the
    runs are cut at the union of their boundaries and each piece contributes
    length * |difference|. Time O(len(h1) + len(h2)).

    Parameters
    ----------
    h1, h2 : AnonHistogram
        The two histograms.

    Returns
    -------
    int
        The sorted l1 distance (exact).

    Raises
    ------
    TypeError
        If ``h1`` or ``h2`` is not an AnonHistogram.

    References
    ----------
    [Suresh19]_ eq. (3) (the sorted l1 distance) and Lemma 1.
    """
    for name, h in (("h1", h1), ("h2", h2)):
        if not isinstance(h, AnonHistogram):
            raise TypeError(f"{name} must be an AnonHistogram, got {name}={h!r:.80}")
    ends1 = np.cumsum(h1.prevalences[::-1])
    ends2 = np.cumsum(h2.prevalences[::-1])
    cuts = np.union1d(ends1, ends2)
    if cuts.size == 0:
        return 0
    starts = np.concatenate([[0], cuts[:-1]])
    lengths = cuts - starts

    def values(h: AnonHistogram, ends: np.ndarray) -> np.ndarray:
        vals = np.concatenate([h.counts[::-1], [0]])
        return vals[np.searchsorted(ends, starts, side="right")]

    diff = np.abs(values(h1, ends1) - values(h2, ends2))
    return int(sum(int(a) * int(b) for a, b in zip(lengths, diff)))


def _parse_line(text: str, lineno: int, source: str) -> tuple[int, int]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 2 or any(p == "" for p in parts):
        raise ValueError(
            f"{source}, line {lineno}: expected 'count' or 'count,prevalence', got {text!r}"
        )
    values = []
    for what, p in zip(("count", "prevalence"), parts):
        try:
            x = int(p)
        except ValueError:
            raise ValueError(
                f"{source}, line {lineno}: {what} must be a positive integer, got {p!r}"
            ) from None
        if not 1 <= x <= MAX_COUNT:
            raise ValueError(
                f"{source}, line {lineno}: {what} must be an integer in [1, 2^52], got {p!r}"
            )
        values.append(x)
    return values[0], values[1] if len(values) == 2 else 1


def parse_frequency_list(lines: Iterable[str], source: str = "input") -> AnonHistogram:
    """Histogram from lines ``count`` (one label) or ``count,prevalence`` (phi labels).

    Blank lines and lines starting with ``#`` are skipped; the two forms may be mixed and
    repeated counts are added up. Errors name ``source`` and the 1-based line number.

    Parameters
    ----------
    lines : iterable of str
        The lines of the list.
    source : str, default "input"
        Name of the input, for the error messages.

    Returns
    -------
    AnonHistogram
        The histogram.

    Raises
    ------
    ValueError
        On a malformed line, a count or prevalence outside [1, 2^52], or a list with no count
        line.

    References
    ----------
    [Suresh19]_ Def. 1 (the anonymized histogram in prevalence form).
    """
    acc: dict[int, int] = {}
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        r, phi = _parse_line(text, lineno, source)
        acc[r] = acc.get(r, 0) + phi
    if not acc:
        raise ValueError(f"{source}: the frequency list is empty (no count lines)")
    counts = np.fromiter(acc.keys(), dtype=np.int64, count=len(acc))
    prevalences = np.fromiter(acc.values(), dtype=np.int64, count=len(acc))
    order = np.argsort(counts)
    return AnonHistogram._trusted(counts[order], prevalences[order])


def load_frequency_list(path: str | os.PathLike[str]) -> AnonHistogram:
    """Read a frequency list file (see :func:`parse_frequency_list`).

    Parameters
    ----------
    path : path-like
        The file, UTF-8 text.

    Returns
    -------
    AnonHistogram
        The histogram.

    Raises
    ------
    OSError
        If the file cannot be read.
    ValueError
        If it is not UTF-8 or not a valid frequency list (:func:`parse_frequency_list`).

    References
    ----------
    [Suresh19]_ Def. 1.
    """
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as fh:
            return parse_frequency_list(fh, source=p)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p}: not a UTF-8 text file ({exc.reason})") from None


def write_frequency_list(h: AnonHistogram, path: str | os.PathLike[str]) -> None:
    """Write ``h`` as ``count,prevalence`` lines (readable by :func:`load_frequency_list`).

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    path : path-like
        The file to write (replaced if it exists).

    Raises
    ------
    OSError
        If the file cannot be written.
    AttributeError
        If ``h`` is not an AnonHistogram.

    References
    ----------
    [Suresh19]_ Def. 1 (prevalence form: one ``count,prevalence`` line per distinct count).
    """
    with open(os.fspath(path), "w", encoding="utf-8") as fh:
        for r, phi in zip(h.counts, h.prevalences):
            fh.write(f"{int(r)},{int(phi)}\n")


def as_histogram(name: str, value: Any) -> AnonHistogram:
    """``value`` if it is an AnonHistogram, else a TypeError naming ``name``.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        The value to check.

    Returns
    -------
    AnonHistogram
        ``value``.

    Raises
    ------
    TypeError
        If ``value`` is not an AnonHistogram.

    References
    ----------
    [Suresh19]_ Def. 1.
    """
    if not isinstance(value, AnonHistogram):
        raise TypeError(
            f"{name} must be an AnonHistogram (AnonHistogram.from_counts / from_prevalences), "
            f"got {name}={value!r:.80}"
        )
    return value


__all__ = [
    "AnonHistogram",
    "as_histogram",
    "load_frequency_list",
    "parse_frequency_list",
    "sorted_l1",
    "write_frequency_list",
]
