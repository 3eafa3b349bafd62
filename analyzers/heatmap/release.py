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
from shuffledp.analyzers.heatmap.render import (
    SMOOTHING_WEIGHT,
    auto_bandwidth,
    auto_floor,
    smooth_estimate,
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
    """

    grid: Grid
    estimate: np.ndarray
    raw: np.ndarray
    guarantee: Guarantee
    parameters: Mapping[str, Any] = field(default_factory=dict)
    protocol: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        object.__setattr__(self, "protocol", MappingProxyType(dict(self.protocol)))

    PRIVATE = "private"
    REPRODUCIBLE = "reproducible evaluation, not a private release"
    #: what ``shuffledp heatmap --evaluate`` (fresh noise, but the truth and baselines
    #: written next to the estimate) says it is
    EVALUATION = "evaluation, not a private release"

    def smoothed(self, bandwidth: float | None = None) -> HeatmapRelease:
        """This release post-processed by
        :func:`shuffledp.analyzers.heatmap.render.smooth_estimate` (no privacy cost: a function of
        the release alone); the bandwidth defaults to
        :func:`~shuffledp.analyzers.heatmap.render.auto_bandwidth` of the released total
        ``raw.sum()`` and epsilon. ``parameters["smoothing"]`` records what was done; ``raw``
        stays Reconstruct's s_hat."""

        n_hat = float(np.asarray(self.raw).sum())
        if bandwidth is None:
            bandwidth = auto_bandwidth(self.grid.height, self.grid.width, n_hat,
                                       self.guarantee.epsilon)
        floor = auto_floor(n_hat, self.guarantee.epsilon)
        est = smooth_estimate(self.estimate, bandwidth, floor=floor)
        params = {**self.parameters, "smoothing": {
            "bandwidth_px": float(bandwidth), "weight": SMOOTHING_WEIGHT, "floor": floor,
            "rule": "(1 - weight - floor) a + weight * GaussianFilter(a, bandwidth) + "
                    "floor / N; bandwidth = max side / sqrt(released total * epsilon), "
                    "clipped to [1, side / 8]; floor = 4 / sqrt(released total * epsilon), "
                    "clipped to [0.02, 0.45]"}}
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
