"""Lazy public names (PEP 562): a package's public names are imported on first use, so that
``import shuffledp`` and ``shuffledp --help`` do not pay for scipy, numba and cryptography."""

from __future__ import annotations

import importlib
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
