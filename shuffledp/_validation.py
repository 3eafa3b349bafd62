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


def real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {name}={value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} must be a number, got {name}={value!r}")
    return v


def positive(name: str, value: Any, *, finite: bool = True) -> float:
    """A real number ``> 0`` (finite unless ``finite=False``)."""
    v = real(name, value)
    if not v > 0 or (finite and math.isinf(v)):
        kind = "a finite number > 0" if finite else "a number > 0"
        raise ValueError(f"{name} must be {kind}, got {name}={value!r}")
    return v


def probability(name: str, value: Any, *, closed_low: bool = False,
                closed_high: bool = False) -> float:
    """A real number in (0, 1), with optionally closed ends."""
    v = real(name, value)
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
    v = real(name, value)
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
