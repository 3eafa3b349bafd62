"""The shuffle protocol: what the parties agree on and the roles that move the messages.

Contract (every party, imported by encoders and analyzers as well):

- :mod:`~shuffledp.protocol.params` -- :class:`ProtocolParams`, :func:`derive_params`;
- :mod:`~shuffledp.protocol.wire` -- the binary wire format;
- :mod:`~shuffledp.protocol.crypto` -- keys, per-message encryption, MAC key, SipHash.

Roles (import the layers below them, never imported by them):

- :mod:`~shuffledp.protocol.shuffler` -- the streaming shuffler;
- :mod:`~shuffledp.protocol.packed` -- plaintext rounds over the bit-packed wire layouts;
- :mod:`~shuffledp.protocol.runner` -- the three roles in one process (research runs);
- :mod:`~shuffledp.protocol.dask_backend` -- the Dask backend;
- :mod:`~shuffledp.protocol.federated` -- federated rounds: client encoders, secure
  aggregation per shard, the adaptive multi-round drivers.

``shuffledp.protocol`` was a module (the runner) before 0.2; its names still resolve here
for one release (lazily: the package is also imported by the encoders, which the runner
needs, so it must not import the runner when it loads).
"""

from __future__ import annotations

import importlib
from typing import Any

_OLD_RUNNER_NAMES = frozenset({"shuffle_heatmap", "simulate_sums", "user_batches"})


def __getattr__(name: str) -> Any:
    if name in _OLD_RUNNER_NAMES:
        return getattr(importlib.import_module("shuffledp.protocol.runner"), name)
    raise AttributeError(f"module 'shuffledp.protocol' has no attribute {name!r}")
