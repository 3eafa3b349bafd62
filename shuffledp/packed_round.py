"""Old import path (before 0.2), kept for one release: see :mod:`shuffledp.protocol.packed`."""

from shuffledp._compat import forward

__getattr__, __dir__ = forward(__name__, "shuffledp.protocol.packed")
