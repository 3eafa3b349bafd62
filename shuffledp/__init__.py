"""shuffledp: differential privacy in the shuffle model.

The flagship is the private heatmap of Ghazi et al. (AAAI 2023), run in the central model or
as a multi-message shuffle protocol. Subpackages: :mod:`shuffledp.encoders` (user side),
:mod:`shuffledp.analyzers` (server side), :mod:`shuffledp.accounting` (privacy accounting).
"""

from shuffledp.grid import Grid
from shuffledp.users import UserDistributions

__version__ = "0.1.0"
__all__ = ["Grid", "UserDistributions", "__version__"]
