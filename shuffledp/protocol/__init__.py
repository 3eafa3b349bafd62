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

The package imports none of its modules when it loads (the encoders import the contract
modules, and the runner imports the encoders): import each from its module.
"""

from __future__ import annotations
