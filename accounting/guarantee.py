"""The privacy guarantee record carried by every release in the toolkit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

NOTIONS = ("pure", "approximate", "metric_emd", "discrete_emd")
MODELS = ("central", "local", "shuffle")


def _freeze(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(params or {}))


@dataclass(frozen=True)
class Guarantee:
    """A differential-privacy guarantee and where it comes from.

    Attributes
    ----------
    notion : {"pure", "approximate", "metric_emd", "discrete_emd"}
        ``pure`` is eps-DP, ``approximate`` is (eps, delta)-DP, the two metric notions are
        (alpha, delta) d_EM-DP of seed 004 (Sec. 3).
    model : {"central", "local", "shuffle"}
        Trust model in which the guarantee holds.
    epsilon : float
        epsilon for the DP notions, alpha for the metric notions (see :attr:`alpha`).
    delta : float
        delta (0 for pure DP).
    neighbour : str
        The neighbouring relation, e.g. ``"add/remove one user"`` or
        ``"replace one user (n public)"``.
    theorem : str
        Paper, section and theorem the bound rests on.
    parameters : Mapping
        The parameters that produced the guarantee (read-only).
    """

    notion: str
    model: str
    epsilon: float
    delta: float = 0.0
    neighbour: str = "add/remove one user"
    theorem: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.notion not in NOTIONS:
            raise ValueError(f"notion must be one of {NOTIONS}, got {self.notion!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        eps = float(self.epsilon)
        if not (eps >= 0 and not math.isnan(eps)):
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon!r}")
        d = float(self.delta)
        if not (0.0 <= d <= 1.0):
            raise ValueError(f"delta must be in [0, 1], got {self.delta!r}")
        if self.notion == "pure" and d != 0.0:
            raise ValueError(f"a pure guarantee has delta = 0, got delta={self.delta!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", d)
        object.__setattr__(self, "parameters", _freeze(self.parameters))

    @property
    def alpha(self) -> float:
        """alpha of a metric guarantee (same number as :attr:`epsilon`)."""
        return self.epsilon

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "notion": self.notion,
            "model": self.model,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "neighbour": self.neighbour,
            "theorem": self.theorem,
            "parameters": dict(self.parameters),
        }
