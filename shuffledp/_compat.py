"""Module-level name resolution (PEP 562): lazy public names, and the old import paths.

* :func:`lazy_names`: a package's public names are imported on first use, so that
  ``import shuffledp`` and ``shuffledp --help`` do not pay for scipy, numba and cryptography.
* :func:`forward`: thin re-exports at the import paths of before 0.2 (kept for one release).
  An old module is a stub whose attribute lookups go to the module(s) that now hold its
  names; importing it warns once with a :class:`DeprecationWarning` naming the new path.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, namespace: dict[str, Any], table: dict[str, str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``table`` maps each lazy name to the
    module that defines it; a name is imported on first use and cached in ``namespace`` (the
    package's ``globals()``)."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__


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
