"""The federated family, server side: the release of one round and its refusal
(:mod:`.histogram`), the adaptive partition tree (:mod:`.tree`) and the central and local
baselines (:mod:`.baselines`). The rounds themselves (client encoders, secure aggregation)
are protocol: :mod:`shuffledp.protocol.federated`.

Before 0.2 ``shuffledp.analyzers.federated`` was one module that also ran the rounds; its
names resolve here for one release (the round functions lazily, from the protocol).
"""

from __future__ import annotations

import importlib
from typing import Any

from shuffledp.analyzers.federated.histogram import (
    FederatedHistogram,
    FederatedRefused,
    sampler_delta,
)

_MOVED_TO_PROTOCOL = frozenset({"federated_histogram", "federated_locations", "federated_sum"})


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_PROTOCOL:
        return getattr(importlib.import_module("shuffledp.protocol.federated"), name)
    raise AttributeError(f"module 'shuffledp.analyzers.federated' has no attribute {name!r}")


__all__ = ["FederatedHistogram", "FederatedRefused", "sampler_delta"]
