"""The privacy guarantee record carried by every release in the toolkit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

NOTIONS = ("pure", "approximate", "metric_emd", "discrete_emd")
MODELS = ("central", "local", "shuffle")

#: Neighbour relations used across the toolkit (free text is accepted too).
REPLACE_ONE = "replace one user (n public)"
ADD_REMOVE_ONE = "add/remove one user"
BOUNDED_EMD = "change one user's m items (m public), d_EM-weighted"


def _freeze(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(params or {}))


@dataclass(frozen=True)
class Guarantee:
    """A differential-privacy guarantee and where it comes from.

    Attributes
    ----------
    notion : {"pure", "approximate", "metric_emd", "discrete_emd"}
        ``pure`` is eps-DP, ``approximate`` is (eps, delta)-DP, ``metric_emd`` is
        (alpha, delta) d_EM-DP of seed 004 (Def. 3.1/3.2: the output distributions of two
        neighbours are within e^{alpha d_EM} and delta), ``discrete_emd`` is the
        (eps, delta, r)-discrete d_EM-DP of seed 004 (Def. 5.1/5.2; ``r`` goes in
        ``parameters["r"]``).
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
    notes : tuple of str
        Conditions and caveats (e.g. "holds while at least n_min users survive").

    Notes
    -----
    Two guarantees compare with ``==`` field by field. :meth:`implies` is the partial order
    of strength: same notion, model and neighbour relation, and no larger epsilon or delta.
    """

    notion: str
    model: str
    epsilon: float
    delta: float = 0.0
    neighbour: str = ADD_REMOVE_ONE
    theorem: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.notion not in NOTIONS:
            raise ValueError(f"notion must be one of {NOTIONS}, got {self.notion!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        try:
            eps = float(self.epsilon)
            d = float(self.delta)
        except (TypeError, ValueError):
            raise TypeError(
                f"epsilon and delta must be numbers, got epsilon={self.epsilon!r}, "
                f"delta={self.delta!r}"
            ) from None
        if not (eps >= 0 and not math.isnan(eps)):
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon!r}")
        if not (0.0 <= d <= 1.0):
            raise ValueError(f"delta must be in [0, 1], got {self.delta!r}")
        if self.notion == "pure" and d != 0.0:
            raise ValueError(f"a pure guarantee has delta = 0, got delta={self.delta!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", d)
        object.__setattr__(self, "parameters", _freeze(self.parameters))
        object.__setattr__(self, "notes", tuple(str(s) for s in self.notes))

    @property
    def alpha(self) -> float:
        """alpha of a metric guarantee (same number as :attr:`epsilon`)."""
        return self.epsilon

    @property
    def is_vacuous(self) -> bool:
        """True when delta = 1 or epsilon is infinite (the guarantee says nothing)."""
        return self.delta >= 1.0 or math.isinf(self.epsilon)

    def implies(self, other: Guarantee) -> bool:
        """True if ``self`` is at least as strong as ``other``.

        Requires the same notion, model and neighbour relation; then (eps, delta) implies
        (eps', delta') whenever eps <= eps' and delta <= delta'. A pure guarantee also
        implies an approximate one of the same model and neighbour relation.
        """
        notions_ok = self.notion == other.notion or (
            self.notion == "pure" and other.notion == "approximate"
        )
        return (
            notions_ok
            and self.model == other.model
            and self.neighbour == other.neighbour
            and self.epsilon <= other.epsilon
            and self.delta <= other.delta
        )

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
            "notes": list(self.notes),
        }
