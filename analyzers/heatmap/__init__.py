"""The heatmap family, server side: exact modular sums and the release (:mod:`.modular`),
Reconstruct (:mod:`.reconstruct`), the central mechanism (:mod:`.central`), dense EMD
aggregation and the sparse/dense choice (:mod:`.dense`), baselines (:mod:`.baselines`), the
release record (:mod:`.release`), metrics (:mod:`.metrics`) and rendering (:mod:`.render`).

Before 0.2 ``shuffledp.analyzers.heatmap`` was the rendering module; its names are
re-exported here for one release. The dense names load on first use (PEP 562), so importing
this package does not pay for the solvers.
"""

from shuffledp._lazy import lazy_names
from shuffledp.analyzers.heatmap.render import COLORMAP, gaussian_heatmap, render_png

_LAZY = {name: "shuffledp.analyzers.heatmap.dense"
         for name in ("choose_algorithm", "dense_heatmap")}
__getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)

__all__ = ["COLORMAP", "choose_algorithm", "dense_heatmap", "gaussian_heatmap", "render_png"]
