"""Import path of the analyzer's input loop in the first 0.2 layout, kept for one release.

Moved to :mod:`shuffledp.analyzers.heatmap.modular` (``accumulate_mixed``, ``release_mixed``,
``MixedBatchResult``), next to the sums it feeds.
"""

from shuffledp._compat import forward

__getattr__, __dir__ = forward(__name__, "shuffledp.analyzers.heatmap.modular")
