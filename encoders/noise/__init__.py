"""Exact integer noise samplers: discrete Laplace (:mod:`.laplace`), Polya and its
differences (:mod:`.polya`), discrete Gaussian (:mod:`.gaussian`).

Before 0.2 ``shuffledp.encoders.noise`` was the discrete Laplace module; its names are
re-exported here for one release.
"""

from shuffledp.encoders.noise.laplace import (
    DL_DENOMINATOR_BITS,
    discrete_laplace,
    discrete_laplace_exact,
    discrete_laplace_for,
    discrete_laplace_parameter,
    discrete_laplace_pmf,
    dl_rational,
)

__all__ = ["DL_DENOMINATOR_BITS", "discrete_laplace", "discrete_laplace_exact",
           "discrete_laplace_for", "discrete_laplace_parameter", "discrete_laplace_pmf",
           "dl_rational"]
