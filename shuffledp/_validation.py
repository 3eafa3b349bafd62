"""Argument checks: the one validation vocabulary of the toolkit.

Every public function validates its arguments with these helpers (in the manner of SciPy's
``_clean_inputs`` helpers) before doing any work. Every check raises ``TypeError`` (wrong kind
of value) or ``ValueError`` (out of range) with a message that names the argument and repeats
the offending value, e.g. ``delta must be in (0, 1), got delta=1.5``.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np


def count(name: str, value: Any, low: int = 1) -> int:
    """An integer ``>= low`` (bool and non-integral floats are refused; 1e5 as float is ok)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {name}={value!r}")
    if isinstance(value, Integral):
        v = int(value)
    elif isinstance(value, Real) and math.isfinite(float(value)) and float(value).is_integer():
        v = int(float(value))
    else:
        raise TypeError(f"{name} must be an integer, got {name}={value!r}")
    if v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {name}={value!r}")
    return v


def _float(name: str, value: Any) -> float:
    """float(value) for a real number (bool refused); NaN passes, for the caller's range check."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {name}={value!r}")
    return float(value)


def real(name: str, value: Any) -> float:
    """A real number that is not NaN."""
    v = _float(name, value)
    if math.isnan(v):
        raise ValueError(f"{name} must be a number, got {name}={value!r}")
    return v


def positive(name: str, value: Any, *, finite: bool = True) -> float:
    """A real number ``> 0`` (finite unless ``finite=False``)."""
    v = _float(name, value)
    if not v > 0 or (finite and math.isinf(v)):
        kind = "a finite number > 0" if finite else "a number > 0"
        raise ValueError(f"{name} must be {kind}, got {name}={value!r}")
    return v


def probability(name: str, value: Any, *, closed_low: bool = False,
                closed_high: bool = False) -> float:
    """A real number in (0, 1), with optionally closed ends."""
    v = _float(name, value)
    ok_low = v >= 0 if closed_low else v > 0
    ok_high = v <= 1 if closed_high else v < 1
    if not (ok_low and ok_high):
        lo = "[" if closed_low else "("
        hi = "]" if closed_high else ")"
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {name}={value!r}")
    return v


def choice(name: str, value: Any, options: tuple[str, ...]) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {name}={value!r}")
    return str(value)


def interval(name: str, value: Any, low: float, high: float, *, open_low: bool = True,
             open_high: bool = True) -> float:
    """A real number in the interval (low, high), ends closed on request; NaN is refused."""
    v = _float(name, value)
    ok = (v > low if open_low else v >= low) and (v < high if open_high else v <= high)
    if not ok:
        lo = "(" if open_low else "["
        hi = ")" if open_high else "]"
        raise ValueError(f"{name} must be in {lo}{low}, {high}{hi}, got {name}={value!r}")
    return v


def bounded_count(name: str, value: Any, low: int, high: int) -> int:
    """An integer in [low, high] (see :func:`count`)."""
    v = count(name, value, low)
    if v > high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {name}={value!r}")
    return v


def nonnegative_array(name: str, value: Any, *, ndim: int | None = None) -> np.ndarray:
    """A non-empty float64 array of finite, non-negative entries (a copy).

    ``ndim=2`` also requires a (height, width) array. The first bad entry is quoted with its
    index, e.g. ``aggregate must be finite; aggregate[3, 4]=nan``.
    """
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        kind = "a numeric 2-D array" if ndim == 2 else "a numeric array"
        raise TypeError(f"{name} must be {kind}, got {name}={value!r:.80}") from exc
    if arr.size == 0 or arr.ndim == 0 or (ndim is not None and arr.ndim != ndim):
        shape = "a non-empty 2-D (height, width) array" if ndim == 2 else "a non-empty array"
        raise ValueError(f"{name} must be {shape}, got shape {arr.shape}")
    for bad, what in ((~np.isfinite(arr), "finite"), (arr < 0, "non-negative")):
        if bad.any():
            k = tuple(int(i) for i in np.argwhere(bad)[0])
            at = ", ".join(map(str, k))
            raise ValueError(f"{name} must be {what}; {name}[{at}]={float(arr[k])!r}")
    return arr
