"""The record every heatmap release carries: estimate, guarantee and parameters.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from shuffledp.accounting.guarantee import Guarantee
from shuffledp.analyzers.heatmap.posterior import (
    CONSISTENCY,
    LATTICE_SD,
    LEAF_BLUR,
    LEAF_PRIOR_RATIO,
    ORIENTATIONS,
    ORIENTED_BLUR,
    TENSOR_BLUR,
    count_posterior,
)
from shuffledp.analyzers.heatmap.smoothing import (
    BACKGROUND,
    CONFIDENCE,
    THRESHOLD,
    level_sums,
    pyramid_density,
)
from shuffledp.grid import Grid


@dataclass(frozen=True, eq=False)
class HeatmapRelease:
    """A private heatmap estimate with its privacy guarantee.

    Attributes
    ----------
    grid : Grid
    estimate : ndarray, shape (height, width)
        The normalised non-negative estimate a_hat = s_hat / ||s_hat||_1 (Alg. 1, line 10);
        uniform if s_hat is identically zero.
    raw : ndarray, shape (height, width)
        s_hat, the non-negative reconstruction in user-mass units before normalisation.
    guarantee : Guarantee
    parameters : Mapping
        Mechanism parameters (epsilon split, w, start level, noise, B, ...).
    protocol : Mapping
        Protocol figures for shuffle-model releases (B, q, r, m, messages and bits per user,
        n_users, n_dropped); empty for central releases.
    levels : tuple of ndarray
        The noisy level counts (user units) of the measured levels ``start_level..L`` that
        Reconstruct ran on (released with the estimate: they are the mechanism's output);
        empty for the baselines and for releases built without them. :meth:`smoothed` reads
        its density off them.
    """

    grid: Grid
    estimate: np.ndarray
    raw: np.ndarray
    guarantee: Guarantee
    parameters: Mapping[str, Any] = field(default_factory=dict)
    protocol: Mapping[str, Any] = field(default_factory=dict)
    levels: tuple[np.ndarray, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        object.__setattr__(self, "protocol", MappingProxyType(dict(self.protocol)))
        object.__setattr__(self, "levels", tuple(np.asarray(c, dtype=float)
                                                 for c in self.levels))

    PRIVATE = "private"
    REPRODUCIBLE = "reproducible evaluation, not a private release"
    #: what ``shuffledp heatmap --evaluate`` (fresh noise, but the truth and baselines
    #: written next to the estimate) says it is
    EVALUATION = "evaluation, not a private release"

    def noise_scales(self) -> list[float]:
        """The Laplace scale of each measured level's count noise in user units:
        ``Delta / eps_i`` with ``Delta`` the neighbour relation's level sensitivity of one user
        (1, or 2 under replace-one) and ``eps_i`` the level budgets of ``parameters``
        (``level_epsilons_effective`` when recorded, else ``level_epsilons``).

        Returns
        -------
        list of float
            One scale per measured level, ``start_level..top_level``.

        Raises
        ------
        ValueError
            If the release records no level budgets (a baseline) or its neighbour relation
            has no l1 level sensitivity.

        References
        ----------
        [Ghazi23]_ Alg. 1 (Laplace noise of scale 1/eps_i per level, add/remove).
        """
        eps = self.parameters.get("level_epsilons_effective",
                                  self.parameters.get("level_epsilons"))
        if not eps:
            raise ValueError("this release records no level budgets (level_epsilons): only "
                             "the pyramid mechanisms (central or shuffle) can be smoothed")
        sens = self.guarantee.neighbour.level_sensitivity(1)
        return [float(sens) / float(e) for e in eps]

    def smoothed(self, *, method: str = "posterior") -> HeatmapRelease:
        """This release post-processed into the posterior mean of every pixel's count,
        checked level by level against the coarser counts (``method="posterior"``, the
        default: :func:`shuffledp.analyzers.heatmap.posterior.count_posterior`, the
        hierarchical least-squares estimates of all levels under an empirical-Bayes prior
        centred on the pyramid density, concentrated on one point's location posterior
        where :func:`shuffledp.analyzers.heatmap.sparsity.point_mass_fit` finds the release
        to be one point mass), or into that density itself (``method="density"``,
        :func:`shuffledp.analyzers.heatmap.smoothing.pyramid_density`, the previous default).
        No privacy cost: a function of the release alone (its noisy level counts, or the level
        sums of ``raw``, and the public noise scales).

        ``levels`` are used when the release carries them; otherwise the level sums of
        ``raw`` stand in for them. ``raw`` stays Reconstruct's s_hat (``--smoothing none``);
        ``parameters["smoothing"]`` records the rule, its constants and the noise scales.

        Parameters
        ----------
        method : {"density", "posterior"}
            The post-processing (see above).

        Returns
        -------
        HeatmapRelease
            The same release with ``estimate`` replaced.

        Raises
        ------
        ValueError
            If the release records no level budgets or start level (a baseline), or
            ``method`` is not one of the two.

        References
        ----------
        [Ghazi23]_ Alg. 1-2 (the noisy pyramid and Reconstruct).
        """
        if method not in ("density", "posterior"):
            raise ValueError(f"method must be 'density' or 'posterior', got method={method!r}")
        scales = self.noise_scales()
        start = self.parameters.get("start_level")
        if start is None:
            raise ValueError("this release records no start_level: only the pyramid "
                             "mechanisms (central or shuffle) can be smoothed")
        source = "noisy level counts"
        counts: Any = self.levels
        if not counts:
            counts, source = level_sums(self.raw, self.grid, int(start)), "level sums of raw"
        if method == "posterior":
            est, record = count_posterior(counts, self.grid, int(start), scales)
            rule = ("when pixel_sd <= lattice_sd, or sd_ratio <= leaf_prior_ratio (then "
                    "with the prior centred on the least-squares leaf clipped at 0 and "
                    "blurred by leaf_blur px, where its structure tensor has a coherent "
                    "orientation also by oriented_blur px along and across it (weight: the "
                    "coherence), a = 0: prior_centre; also, blurred by leaf_blur px only, "
                    "when pixel_sd <= "
                    "lattice_sd and sd_ratio <= leaf_prior_ratio but the density-centred "
                    "leaf's cell totals differ from some coarser level's estimates by more "
                    "than consistency: centre_switched), every pixel's count "
                    "estimated by its posterior mean (otherwise the pyramid density): the "
                    "hierarchical "
                    "least-squares estimate of all levels (Hay et al. 2010) under Laplace "
                    "noise of its variance, with a negative binomial prior whose mean is the "
                    "estimated total times the pyramid density mixed with the uniform map "
                    "(prior_uniform_share) and whose size is prior_dispersion, both chosen by "
                    "the marginal likelihood of the estimates; then at every coarser level "
                    "whose cell totals differ from its estimates by a mean squared "
                    "discrepancy (in variances) above consistency (levels_refitted), the "
                    "cells' posterior means under the same prior fitted on that level, handed "
                    "down to the children in proportion to their estimates; where one chain of "
                    "cells stands signal noise sds out (point_mass), mixed with that point's "
                    "location posterior by weight * (1 - hedge), weight the posterior "
                    "probability of one point mass against a share >= off_share of the users "
                    "off the chain (prior: prior); the pyramid "
                    "density: ")
            extra = {"method": "count_posterior", **record, "lattice_sd": LATTICE_SD,
                     "leaf_prior_ratio": LEAF_PRIOR_RATIO, "leaf_blur": LEAF_BLUR,
                     "oriented_blur": ORIENTED_BLUR, "orientations": ORIENTATIONS,
                     "tensor_blur": TENSOR_BLUR,
                     "consistency": CONSISTENCY}
        else:
            est = pyramid_density(counts, self.grid, int(start), scales)
            rule, extra = "", {"method": "pyramid_density"}
        params = {**self.parameters, "smoothing": {
            **extra, "source": source, "threshold": THRESHOLD,
            "confidence": CONFIDENCE, "background": BACKGROUND, "noise_scales": scales,
            "rule": rule + "every cell's count combined with its subtree's by "
                    "inverse-variance weights (bottom up); then top down from the start "
                    "level a parent's mass goes to its children in proportion to "
                    "max(z - threshold * pi0 * s, 0) (pi0: the "
                    "level's share of cells with no mass, twice its share of negative "
                    "estimates; s: the estimate's noise scale), mixed with the even split with "
                    "weight S^2 / (S^2 + confidence^2 mean(s^2)) on the counts (S: the sum "
                    "of the thresholded children); then mixed with the start level's "
                    "estimates spread over their cells with weight "
                    "min(1/2, background * relative noise of the estimated total)"}}
        return dataclasses.replace(self, estimate=est, parameters=params)

    def to_report(self) -> dict[str, Any]:
        """The fields every ``report.json`` of a heatmap release starts with.

        ``shuffledp heatmap`` and ``shuffledp analyze`` both write this record, each adding
        its own keys (metrics and baselines; the shuffler's report and the wire path).

        Returns
        -------
        dict
            ``model``, ``release``, ``epsilon``, ``delta``, ``neighbour`` (the relation in
            words), ``grid`` (``{"width", "height"}``), ``guarantee``
            (:meth:`Guarantee.to_dict`), ``parameters`` and ``protocol`` (empty for a central
            release), as plain dicts. ``release`` is :attr:`REPRODUCIBLE` when the noise was
            drawn from a caller's seed (``parameters["randomness"] == "seeded"``), else
            :attr:`PRIVATE`.
        """
        g = self.guarantee
        return {
            "model": g.model,
            "release": (self.REPRODUCIBLE if self.parameters.get("randomness") == "seeded"
                        else self.PRIVATE),
            "epsilon": g.epsilon,
            "delta": g.delta,
            "neighbour": str(g.neighbour),
            "grid": {"width": self.grid.width, "height": self.grid.height},
            "guarantee": g.to_dict(),
            "parameters": dict(self.parameters),
            "protocol": dict(self.protocol),
        }


def normalise(raw: np.ndarray) -> np.ndarray:
    """s / ||s||_1 for a non-negative array; the uniform distribution if s is all zero.

    Parameters
    ----------
    raw : array_like
        A non-negative array (not checked; negative entries are kept as they are).

    Returns
    -------
    numpy.ndarray
        Float array of the same shape summing to 1.

    Raises
    ------
    ValueError
        If ``raw`` cannot be converted to a float array (from numpy).

    References
    ----------
    [Ghazi23]_ Alg. 1 (the output s_hat / ||s_hat||_1).
    """
    raw = np.asarray(raw, dtype=float)
    total = raw.sum()
    if total > 0:
        return raw / total
    return np.full(raw.shape, 1.0 / raw.size)
