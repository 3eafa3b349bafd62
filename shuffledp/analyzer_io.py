"""Old import path (before 0.2), kept for one release.

Moved to :mod:`shuffledp.analyzers.heatmap.modular`.
"""

from shuffledp._compat import forward

__getattr__, __dir__ = forward(__name__, "shuffledp.analyzers.heatmap.modular")
