"""Old import path (before 0.2), kept for one release.

Moved to :mod:`shuffledp.protocol.crypto`, :mod:`shuffledp.randomness`.
"""

from shuffledp._compat import forward

__getattr__, __dir__ = forward(__name__, "shuffledp.protocol.crypto", "shuffledp.randomness")
