"""Thin re-exports at the import paths of before 0.2 (kept for one release).

An old module is a stub whose attribute lookups go to the module(s) that now hold its names;
importing it warns once with a :class:`DeprecationWarning` naming the new path.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def forward(old: str, *new: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the stub ``old`` over the modules ``new``."""
    warnings.warn(f"{old} moved to {' and '.join(new)}; the old path goes away in 0.3",
                  DeprecationWarning, stacklevel=3)

    def __getattr__(name: str) -> Any:
        for target in new:
            mod = importlib.import_module(target)
            if hasattr(mod, name):
                return getattr(mod, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({n for t in new for n in dir(importlib.import_module(t))})

    return __getattr__, __dir__
