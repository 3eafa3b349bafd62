"""Old import path (before 0.2), kept for one release.

Moved to :mod:`shuffledp.accounting.shuffle_ldp.clones`,
:mod:`shuffledp.accounting.shuffle_ldp._common`.
"""

from shuffledp._compat import forward

__getattr__, __dir__ = forward(
    __name__,
    "shuffledp.accounting.shuffle_ldp.clones",
    "shuffledp.accounting.shuffle_ldp._common",
)
