"""The privacy guarantee record carried by every release in the toolkit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

NOTIONS = ("pure", "approximate", "metric_emd", "discrete_emd")
MODELS = ("central", "local", "shuffle", "distributed")


class Neighbour(StrEnum):
    """The neighbouring relation a guarantee is stated for (one vocabulary for the toolkit).

    Attributes
    ----------
    ADD_REMOVE
        D' = D with one user added or removed (n is private).
    REPLACE_ONE
        D' = D with one user's input replaced by any other input (n public). The natural
        relation of the shuffle summation protocol of [BBGN20]_; the l1-sensitivity of a
        user's normalised level vector is 2.
    ZERO_OUT
        D' = D with one user's input replaced by the empty contribution (the user still takes
        part, n public). Sensitivity 1 per level, like ADD_REMOVE; the shuffle protocol
        under ZERO_OUT converges to the central ADD_REMOVE mechanism at the
        same epsilon as B grows ([Ghazi23]_ App. F).
    BOUNDED_EMD
        one user's m items change (m public), distance weighted by d_EM ([Imola]_ Sec. 3).
    DISCRETE_EMD
        one user's dataset changes within d_EM <= r ([Imola]_ Def. 5.1-5.2).
    SORTED_L1
        anonymized histograms at sorted-l1 distance 1: one label's count changes by one
        ([Suresh19]_ Def. 1).

    References
    ----------
    .. [BBGN20] Balle et al. (2020), "Private Summation in the Multi-Message Shuffle Model" --
       full entry in docs/references.md
    .. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps" -- full entry in
       docs/references.md
    .. [Imola] Imola et al. (preprint), "Metric Differential Privacy at the User-Level" -- full
       entry in docs/references.md
    .. [Suresh19] Suresh (2019), "Differentially private anonymized histograms" -- full entry in
       docs/references.md
    """

    ADD_REMOVE = "add/remove one user"
    REPLACE_ONE = "replace one user (n public)"
    ZERO_OUT = "zero out one user's contribution (n public)"
    BOUNDED_EMD = "change one user's m items (m public), d_EM-weighted"
    DISCRETE_EMD = "one user's dataset changed within d_EM <= r (r in the parameters)"
    SORTED_L1 = "one label's count changed by one (anonymized histogram, sorted l1 = 1)"

    @classmethod
    def parse(cls, value: Any, name: str = "neighbour") -> Neighbour:
        """A Neighbour from a member, its text, its name or a short token.

        Short tokens: ``"add_remove"``, ``"replace"``, ``"zero_out"``, ``"bounded_emd"``.
        Raises ValueError naming the accepted values otherwise.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip()
            for member in cls:
                if key in (member.value, member.name, member.name.lower(), member.token):
                    return member
        accepted = ", ".join(repr(m.token) for m in cls)
        raise ValueError(f"{name} must be one of {accepted} (or a Neighbour), got {name}={value!r}")

    @property
    def token(self) -> str:
        """Short token used on the command line and in parameter files."""
        return {"ADD_REMOVE": "add_remove", "REPLACE_ONE": "replace", "ZERO_OUT": "zero_out",
                "BOUNDED_EMD": "bounded_emd", "DISCRETE_EMD": "discrete_emd",
                "SORTED_L1": "sorted_l1"}[self.name]

    def level_sensitivity(self, B: int = 1) -> int:
        """l1-sensitivity of one user's level vector with entries >= 0 summing to <= B.

        B for ADD_REMOVE and ZERO_OUT (||z||_1 <= B), 2B for REPLACE_ONE
        (||z - z'||_1 <= ||z||_1 + ||z'||_1 <= 2B).
        """
        if self in (Neighbour.BOUNDED_EMD, Neighbour.DISCRETE_EMD, Neighbour.SORTED_L1):
            raise ValueError(f"{self.name} has no l1 level sensitivity")
        return 2 * int(B) if self is Neighbour.REPLACE_ONE else int(B)

    def implies(self, other: Neighbour) -> bool:
        """A guarantee under ``self`` also holds under ``other`` for every mechanism.

        Only the same relation qualifies: ADD_REMOVE and ZERO_OUT agree for mechanisms that
        see only the aggregate, but not in general (zeroing out is a removal plus an addition
        of an empty user when the mechanism depends on n), so no cross-relation implication
        is claimed.
        """
        return self is other


#: The one default neighbour relation of the heatmap releases (central, shuffle and federated):
#: zero-out, one user's contribution replaced by the empty one (the user still takes part, so
#: n is public; the zero-out relation of Kairouz et al. (2021), "Practical and Private (Deep)
#: Learning without Sampling or Shuffling"). Its
#: sensitivity per level is 1, the same as add/remove, so the central release's noise is that
#: of the add/remove mechanism, and the shuffle protocol, which cannot keep n private, is
#: calibrated like the central release and converges to it as B grows (``python
#: bench/like_for_like.py``). A release under zero-out may publish n; one under add/remove
#: may not. Every guarantee record names its relation.
DEFAULT_NEIGHBOUR = Neighbour.ZERO_OUT


def _freeze(params: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(params or {}))


@dataclass(frozen=True)
class Guarantee:
    """A differential-privacy guarantee and where it comes from.

    Attributes
    ----------
    notion : {"pure", "approximate", "metric_emd", "discrete_emd"}
        ``pure`` is eps-DP, ``approximate`` is (eps, delta)-DP, ``metric_emd`` is
        (alpha, delta) d_EM-DP of [Imola]_ (Def. 3.1/3.2: the output distributions of two
        neighbours are within e^{alpha d_EM} and delta), ``discrete_emd`` is the
        (eps, delta, r)-discrete d_EM-DP of [Imola]_ (Def. 5.1/5.2; ``r`` goes in
        ``parameters["r"]``).
    model : {"central", "local", "shuffle", "distributed"}
        Trust model in which the guarantee holds ("distributed": noise added by the
        clients, summed by secure aggregation, the server sees only the sum).
    epsilon : float
        epsilon for the DP notions, alpha for the metric notions (see :attr:`alpha`).
    delta : float
        delta (0 for pure DP).
    neighbour : Neighbour
        The neighbouring relation (strings are parsed with :meth:`Neighbour.parse`).
    theorem : str
        Paper, section and theorem the bound rests on.
    parameters : Mapping
        The parameters that produced the guarantee (read-only).
    notes : tuple of str
        Conditions and caveats (e.g. "holds while at least n_min users survive").
    event : PrivacyEvent or None
        The mechanism as a composable event (:mod:`shuffledp.accounting.events`), which an
        :class:`~shuffledp.accounting.composition.Accountant` composes with other releases; not
        part of ``==``. Serialised under ``"event"`` by :meth:`to_dict` when present.

    Notes
    -----
    Two guarantees compare with ``==`` field by field. :meth:`implies` is the partial order
    of strength: same notion, model and neighbour relation, and no larger epsilon or delta.
    """

    notion: str
    model: str
    epsilon: float
    delta: float = 0.0
    neighbour: Neighbour = Neighbour.ADD_REMOVE
    theorem: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    event: Any = field(default=None, compare=False)

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
        object.__setattr__(self, "neighbour", Neighbour.parse(self.neighbour))
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
            and self.neighbour.implies(other.neighbour)
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
            "neighbour": str(self.neighbour),
            "theorem": self.theorem,
            "parameters": dict(self.parameters),
            "notes": list(self.notes),
            **({} if self.event is None else {"event": self.event.to_dict()}),
        }

    def with_event(self, event: Any) -> Guarantee:
        """This guarantee carrying ``event``, whose neighbour relation must be the same."""
        if event is not None and event.neighbour is not self.neighbour:
            raise ValueError(f"the event is stated for {event.neighbour.token!r}, the "
                             f"guarantee for {self.neighbour.token!r}")
        return replace(self, event=event)
