"""The heatmap family, server side: exact modular sums and the release (:mod:`.modular`),
Reconstruct (:mod:`.reconstruct`), the central mechanism (:mod:`.central`), baselines
(:mod:`.baselines`), the release record (:mod:`.release`), metrics (:mod:`.metrics`) and
rendering (:mod:`.render`).

Before 0.2 ``shuffledp.analyzers.heatmap`` was the rendering module; its names are
re-exported here for one release.
"""

from shuffledp.analyzers.heatmap.render import COLORMAP, gaussian_heatmap, render_png

__all__ = ["COLORMAP", "gaussian_heatmap", "render_png"]
