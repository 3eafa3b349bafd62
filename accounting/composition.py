"""One accountant for every release a deployment makes.

:class:`Accountant` collects events (:mod:`shuffledp.accounting.events`) -- sequentially,
k times, or in parallel over disjoint users -- and answers epsilon(delta) and
delta(epsilon) by three methods, each a valid upper bound:

``basic``
    (sum eps_j, sum delta_j) of the releases' certified pairs ([DRV10]_; Dwork, McSherry,
    Nissim, Smith 2006). Always available; the only one for metric (d_EM) events.
``advanced``
    [KOV15]_ Thm 3.5 with heterogeneous epsilons: for any delta~ in (0, 1],
    eps = min{sum eps_j, sum eps_j tanh(eps_j/2) + sqrt(2 sum eps_j^2 ln(e + sqrt(sum
    eps_j^2)/delta~)), sum eps_j tanh(eps_j/2) + sqrt(2 sum eps_j^2 ln(1/delta~))} at
    delta = 1 - (1 - delta~) prod (1 - delta_j); delta~ is what the target delta leaves.
``pld``
    The product of the events' dominating pairs, by convolution of their privacy loss
    distributions (:mod:`shuffledp.accounting.pld`; [KJH20]_, [DGKKM22]_) with pessimistic
    discretisation on a grid of ``discretization`` (default 1e-4), tails truncated
    pessimistically where a Chernoff bound leaves at most 1e-30, and a proven bound on the
    numerical error of every product charged to delta (an FFT's rounding is absolute, about
    1e-16 of the largest mass per grid point; uncharged, it made the epsilon at
    delta = 1e-14 of 365 x DL(0.5) too small by 0.14). The FFTs are tilted by the Chernoff
    exponent of the question asked (epsilon at delta, or delta at epsilon), which keeps that
    bound near 1e-10 of the answer's delta. Available when every event has a dominating
    pair that fits the grid.

Every method uses only what the events' parameters prove (:meth:`PrivacyEvent.certified
<shuffledp.accounting.events.PrivacyEvent.certified>` is derived or verified), so the
smallest of them is a valid answer: the answer's ``epsilon`` is that smallest, and
``method`` names it. Events must share one neighbour relation (``ValueError`` naming both
otherwise) and one notion.

References
----------
.. [DRV10] Dwork et al. (2010), "Boosting and Differential Privacy", Thm III.3 -- full entry in
   docs/references.md
.. [KOV15] Kairouz et al. (2015), "The Composition Theorem for Differential Privacy", Thm 3.5 --
   full entry in docs/references.md
.. [KJH20] Koskela et al. (2020), "Computing Tight Differential Privacy Guarantees Using FFT" --
   full entry in docs/references.md
.. [DGKKM22] Doroshenko et al. (2022), "Connect the Dots" -- full entry in docs/references.md
.. [MM18] Meiser and Mohammadi (2018), "Tight on Budget? Tight Bounds for r-Fold Approximate
   Differential ..." -- full entry in docs/references.md
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shuffledp import _validation as v
from shuffledp.accounting.events import (
    DEFAULT_DISCRETIZATION,
    Parallel,
    PrivacyEvent,
    check_same_neighbour,
    check_same_notion,
    event_notion,
)
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.accounting.pld import NoPLD, chernoff_tilt
from shuffledp.safe_io import read_regular_text

METHODS = ("pld", "advanced", "basic")


@dataclass(frozen=True)
class Composition:
    """The answer of an :class:`Accountant`.

    Attributes
    ----------
    epsilon, delta : float
        The composed guarantee: the smallest epsilon among the methods that apply at
        ``delta`` (for :meth:`Accountant.epsilon`), or the delta at ``epsilon``
        (:meth:`Accountant.delta`).
    method : {"pld", "advanced", "basic"}
        Which method gave it.
    basic : (float, float)
        (sum eps_j, sum delta_j).
    advanced : (float, float) or None
        Advanced composition at the same delta (None when the target delta is used up by the
        events' own deltas, or for metric events).
    pld : (float, float) or None
        PLD composition (None when some event has no dominating pair).
    releases : int
        Number of releases composed (counting repetitions).
    neighbour : Neighbour
    discretization : float
        The PLD grid.
    curves : tuple of str
        How each distinct event entered the PLD ("exact", "dominating pair", ...).
    notes : tuple of str
    pld_error : float or None
        The bound on the PLD's numerical error (FFT rounding, truncation) charged to its
        delta at the answer (already included in ``pld``).
    """

    epsilon: float
    delta: float
    method: str
    basic: tuple[float, float]
    advanced: tuple[float, float] | None
    pld: tuple[float, float] | None
    releases: int
    neighbour: Neighbour
    discretization: float
    curves: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    notion: str = "approximate"
    pld_error: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon, "delta": self.delta, "method": self.method,
            "basic": list(self.basic),
            "advanced": None if self.advanced is None else list(self.advanced),
            "pld": None if self.pld is None else list(self.pld),
            "releases": self.releases, "neighbour": str(self.neighbour),
            "notion": self.notion,
            "discretization": self.discretization, "curves": list(self.curves),
            "notes": list(self.notes), "pld_error": self.pld_error,
        }

    def guarantee(self, model: str, theorem: str = "", **parameters: Any) -> Guarantee:
        """This composition as a :class:`Guarantee` of the given model."""
        notion = self.notion
        if notion == "approximate" and self.delta == 0.0:
            notion = "pure"
        return Guarantee(
            notion=notion, model=model, epsilon=self.epsilon, delta=self.delta,
            neighbour=self.neighbour,
            theorem=theorem or f"composition of {self.releases} releases ({self.method}; "
                               "shuffledp.accounting.composition)",
            parameters={"composition": self.to_dict(), **parameters}, notes=self.notes)


@dataclass
class Accountant:
    """Composes events; answers epsilon(delta) and delta(epsilon).

    Parameters
    ----------
    discretization : float, default 1e-4
        PLD grid interval (pessimistic rounding; smaller is tighter and slower).

    Examples
    --------
    >>> from shuffledp.accounting.events import DiscreteLaplace
    >>> acc = Accountant()
    >>> acc.compose(DiscreteLaplace(parameter=0.1), times=100)  # doctest: +SKIP
    >>> acc.epsilon(1e-6).method  # doctest: +SKIP
    'pld'
    """

    discretization: float = DEFAULT_DISCRETIZATION
    _entries: list[tuple[PrivacyEvent, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        h = v.positive("discretization", self.discretization)
        if h > 0.1:
            raise ValueError(f"discretization must be <= 0.1, got discretization={h!r}")
        self.discretization = h

    # ------------------------------------------------------------------- building
    @property
    def neighbour(self) -> Neighbour | None:
        return self._entries[0][0].neighbour if self._entries else None

    @property
    def releases(self) -> int:
        return sum(k for _, k in self._entries)

    @property
    def events(self) -> tuple[tuple[PrivacyEvent, int], ...]:
        return tuple(self._entries)

    def compose(self, event: PrivacyEvent, times: int = 1) -> Accountant:
        """Add ``event`` run ``times`` times in sequence (self-composition)."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"event must be a PrivacyEvent, got {event!r}")
        times = v.count("times", times, 1)
        if self._entries:
            first = self._entries[0][0]
            check_same_neighbour(first.neighbour, event.neighbour)
            check_same_notion(first, event)
        for i, (e, k) in enumerate(self._entries):
            if e == event:
                self._entries[i] = (e, k + times)
                return self
        self._entries.append((event, times))
        return self

    def compose_parallel(self, events: list[PrivacyEvent], times: int = 1) -> Accountant:
        """Add events run on disjoint sets of users (parallel composition)."""
        evs = tuple(events)
        if not evs:
            raise ValueError("compose_parallel needs at least one event, got []")
        return self.compose(Parallel(branches=evs, neighbour=evs[0].neighbour), times)

    def extend(self, other: Accountant) -> Accountant:
        for e, k in other._entries:
            self.compose(e, k)
        return self

    # ------------------------------------------------------------------- answers
    def _need(self) -> None:
        if not self._entries:
            raise ValueError("nothing to compose: the accountant holds no event")

    def _neighbour(self) -> Neighbour:
        """The neighbour relation of the events held (refused when there is none)."""
        self._need()
        return self._entries[0][0].neighbour

    def basic(self) -> tuple[float, float]:
        """(sum eps_j, min(1, sum delta_j)) over every release."""
        self._need()
        eps = math.fsum(e.certified()[0] * k for e, k in self._entries)
        delta = math.fsum(e.certified()[1] * k for e, k in self._entries)
        return eps, min(1.0, delta)

    def _notion(self) -> str:
        return event_notion(self._entries[0][0])

    def advanced(self, delta: float) -> tuple[float, float] | None:
        """[KOV15]_ Thm 3.5 at total ``delta`` (None when the events' deltas use it up)."""
        self._need()
        if self._notion() != "approximate":
            return None
        if any(e.certified()[1] >= 1.0 for e, _ in self._entries):
            return None  # a vacuous release (delta = 1): nothing to compose
        log_keep = math.fsum(k * math.log1p(-e.certified()[1]) for e, k in self._entries)
        # 1 - (1 - dt) prod(1 - d_j) = delta  <=>  1 - dt = (1 - delta) / prod(1 - d_j)
        keep = math.exp(log_keep)
        dt = 1.0 - (1.0 - delta) / keep if keep > 0 else -1.0
        if not dt > 0:
            return None
        s1 = math.fsum(k * e.certified()[0] for e, k in self._entries)
        s2 = math.fsum(k * e.certified()[0] ** 2 for e, k in self._entries)
        lin = math.fsum(k * e.certified()[0] * math.tanh(e.certified()[0] / 2.0)
                        for e, k in self._entries)
        a = lin + math.sqrt(2.0 * s2 * math.log(math.e + math.sqrt(s2) / dt))
        b = lin + math.sqrt(2.0 * s2 * math.log(1.0 / dt))
        return min(s1, a, b), delta

    def _views(self, tilt: float | None) -> tuple[list[Any] | None, str]:
        """The entries' PLD views, or (None, why) when some entry has none."""
        views = []
        for e, _ in self._entries:
            try:
                view = e.pld(self.discretization, tilt)
            except NoPLD as exc:
                return None, f"PLD not used: {e.describe()}: {exc}; basic/advanced composition only"
            if view is None:
                return None, ("PLD not used: some event has no dominating pair (or the notion "
                              "is a metric one); basic/advanced composition only")
            views.append(view)
        return views, ""

    def _tilt(self, views: list[Any], *, eps: float | None = None,
              delta: float | None = None) -> float:
        """The Chernoff exponent of the question, from the entries' moment bounds."""
        ks = [k for _, k in self._entries]

        def log_mgf(lam: float) -> float:
            return math.fsum(k * w.pld.log_mgf(lam) for w, k in zip(views, ks, strict=True))

        if eps is not None:
            return chernoff_tilt(log_mgf, eps=eps)
        if delta is None:
            raise ValueError("_tilt needs eps or delta, got eps=None and delta=None")
        return chernoff_tilt(log_mgf, log_delta=math.log(delta))

    def _pld(self, *, eps: float | None = None, delta: float | None = None
             ) -> tuple[Any, tuple[str, ...], str]:
        """(composed PLD or None, curves, note): the product of every entry's pair, its FFTs
        tilted for the question (epsilon at ``delta`` or delta at ``eps``)."""
        if self._notion() != "approximate":
            return None, (), ("PLD not used: some event has no dominating pair (or the notion "
                              "is a metric one); basic/advanced composition only")
        views, why = self._views(None)
        if views is None:
            return None, (), why
        tilt = self._tilt(views, eps=eps, delta=delta)
        views, why = self._views(tilt)
        if views is None:
            return None, (), why
        total = None
        curves = []
        try:
            for (e, k), view in zip(self._entries, views, strict=True):
                p = view.pld.self_compose(k, tilt)
                curves.append(f"{e.describe()} x{k}: {view.curve}")
                total = p if total is None else total.compose(p, tilt)
        except NoPLD as exc:
            return None, (), f"PLD not used: {exc}; basic/advanced composition only"
        return total, tuple(curves), ""

    def _no_eps_note(self, p: Any, delta: float) -> str:
        """Why the PLD gives no finite epsilon at ``delta``: the cause, named."""
        inf = p.infinity_mass()
        if inf > delta:
            causes = []
            for e, k in self._entries:
                tau = getattr(e, "hiding_mass", None)
                if tau is not None and tau() > 0:
                    causes.append(f"{e.describe()} x{k}: hiding charge (1 + e^eps) tv = "
                                  f"{tau():.3g} per release")
                elif e.certified()[1] > 0:
                    causes.append(f"{e.describe()} x{k}: delta {e.certified()[1]:.3g} per "
                                  "release")
            return (f"PLD: no finite epsilon at delta={delta:g}: the composed pair's infinity "
                    f"mass is {inf:.3g} > delta ({'; '.join(causes) or 'its events'})")
        return (f"PLD: no finite epsilon at delta={delta:g}: the bound on the numerical error "
                f"of the composition ({p.error_at(p.max_loss()):.3g} at the largest loss) "
                "does not leave room for it")

    def epsilon(self, delta: float) -> Composition:
        """The smallest epsilon (over the methods) at which the composition is
        (epsilon, delta)-DP."""
        self._need()
        delta = v.probability("delta", delta)
        basic = self.basic()
        adv = self.advanced(delta)
        p, curves, why = self._pld(delta=delta)
        pld = None
        err = None
        notes: list[str] = [why] if why else []
        if p is not None:
            eps = float(p.epsilon(delta))
            if math.isfinite(eps):
                pld = (eps, delta)
                err = p.error_at(eps)
            else:
                notes.append(self._no_eps_note(p, delta))
        cands = []
        if pld is not None:
            cands.append(("pld", pld[0]))
        if adv is not None:
            cands.append(("advanced", adv[0]))
        if basic[1] <= delta:
            cands.append(("basic", basic[0]))
        if not cands:
            why = f" ({'; '.join(notes)})" if notes else ""
            raise ValueError(
                f"no method certifies the composition at delta={delta:g}: the releases' own "
                f"deltas add up to {basic[1]:.3g} and the PLD gives no finite epsilon{why}")
        method, eps = min(cands, key=lambda c: (c[1], METHODS.index(c[0])))
        return Composition(epsilon=eps, delta=delta, method=method, basic=basic, advanced=adv,
                           pld=pld, releases=self.releases, neighbour=self._neighbour(),
                           discretization=self.discretization, curves=curves,
                           notes=tuple(notes), notion=self._notion(), pld_error=err)

    def delta(self, epsilon: float) -> Composition:
        """The smallest delta (over the methods) at which the composition is
        (epsilon, delta)-DP."""
        self._need()
        eps = v.real("epsilon", epsilon)
        if eps < 0:
            raise ValueError(f"epsilon must be >= 0, got epsilon={epsilon!r}")
        basic = self.basic()
        cands = []
        if basic[0] <= eps:
            cands.append(("basic", basic[1]))
        p, curves, why = self._pld(eps=eps)
        pld = None
        err = None
        notes = [why] if why else []
        if p is not None:
            pld = (eps, min(1.0, float(p.delta(eps))))
            err = p.error_at(eps)
            cands.append(("pld", pld[1]))
        adv = self._advanced_delta(eps)
        if adv is not None:
            cands.append(("advanced", adv[1]))
        if not cands:
            cands.append(("basic", 1.0))
        method, d = min(cands, key=lambda c: (c[1], METHODS.index(c[0])))
        return Composition(epsilon=eps, delta=d, method=method, basic=basic, advanced=adv,
                           pld=pld, releases=self.releases, neighbour=self._neighbour(),
                           discretization=self.discretization, curves=curves,
                           notes=tuple(notes), notion=self._notion(), pld_error=err)

    def _advanced_delta(self, eps: float) -> tuple[float, float] | None:
        """Smallest delta on a log grid whose advanced epsilon is <= eps."""
        if self._notion() != "approximate":
            return None
        best = None
        for j in range(0, 301):
            d = 10.0 ** (-j / 10.0)
            a = self.advanced(d)
            if a is None or a[0] > eps:
                break
            best = (eps, d)
        return best


def check_parallel_groups(spec: Mapping[str, Any], base: str | os.PathLike[str] = "."
                          ) -> None:
    """Refuse the ``parallel`` groups of a composition spec that are visibly not disjoint.

    Parallel composition (the worst branch, not the sum) is valid only when every user's
    data reaches one branch. A spec asserts that; this check refuses, with a ValueError
    naming the group, what the spec itself shows to be false:

    * a branch with ``count`` other than 1 (its copies are the same release, on the same
      users: list them in sequence, or put the count on the group);
    * the same report twice in one group (one release is not its own disjoint branch);
    * two reports in one group that read the same ``input`` (the same data source, seed
      included, is the same users).

    Groups nested in groups are checked the same way.

    Parameters
    ----------
    spec : Mapping
        The composition spec (its ``releases`` list; anything else is left to the spec
        reader, :func:`shuffledp.accounting.ledger.accountant_from_spec`).
    base : str or path-like
        Directory the spec's report paths are relative to.

    Raises
    ------
    ValueError
        A ``parallel`` group shows that its branches share users (see above); the message
        names the group.

    References
    ----------
    [DRV10]_ (composition); parallel composition needs disjoint users, as above.
    """
    releases = spec.get("releases") if isinstance(spec, Mapping) else None
    if not isinstance(releases, list):
        return
    root = Path(base)

    def report_input(path: Path) -> str | None:
        try:
            data = json.loads(read_regular_text(path, 64 << 20, what="report"))
        except (OSError, ValueError):
            return None  # the reader refuses it with its own message
        src = data.get("input") if isinstance(data, Mapping) else None
        return src if isinstance(src, str) and src else None

    def group(items: list[Any], where: str) -> None:
        paths: dict[Path, int] = {}
        inputs: dict[str, int] = {}
        for j, b in enumerate(items):
            if not isinstance(b, Mapping):
                continue
            here = f"{where}[{j}]"
            count = b.get("count", 1)
            if count != 1:
                raise ValueError(
                    f"{here}: count={count!r} inside a parallel group repeats one release on "
                    "the same users, and parallel composition needs disjoint users; list the "
                    "releases in sequence or put the count on the group")
            if "parallel" in b and isinstance(b["parallel"], list):
                group(b["parallel"], f"{here}.parallel")
            if "report" not in b:
                continue
            path = (root / str(b["report"])).resolve()
            if path in paths:
                raise ValueError(
                    f"{here}: report {str(b['report'])!r} is already branch "
                    f"{where}[{paths[path]}] of this parallel group: one release on one set "
                    "of users is not two disjoint branches")
            paths[path] = j
            src = report_input(path)
            if src is not None:
                if src in inputs:
                    raise ValueError(
                        f"{here}: its report reads input {src!r}, like branch "
                        f"{where}[{inputs[src]}] of this parallel group: the same data are "
                        "the same users, not disjoint ones")
                inputs[src] = j

    def walk(items: list[Any], where: str) -> None:
        for i, item in enumerate(items):
            if isinstance(item, Mapping) and isinstance(item.get("parallel"), list):
                group(item["parallel"], f"{where}[{i}].parallel")

    walk(releases, "releases")


def compose(events: list[tuple[PrivacyEvent, int]] | list[PrivacyEvent], delta: float, *,
            discretization: float = DEFAULT_DISCRETIZATION) -> Composition:
    """Compose a list of events (or (event, times) pairs) and return epsilon(delta).

    Parameters
    ----------
    events : list of PrivacyEvent or of (PrivacyEvent, int)
        The releases, each run once or ``times`` times in sequence.
    delta : float
        Target delta, in (0, 1).
    discretization : float
        Grid step of the PLD composition (<= 0.1).

    Returns
    -------
    Composition
        The smallest certified epsilon at ``delta`` over basic, advanced and PLD
        composition, with each method's answer.

    Raises
    ------
    TypeError
        An item is not a PrivacyEvent (or a pair with one).
    ValueError
        ``events`` is empty, the events' neighbour relations or notions differ, an argument
        is out of range, or no method certifies a finite epsilon at ``delta``.

    References
    ----------
    [DRV10]_ Thm III.3, [KOV15]_ Thm 3.5 (advanced composition); [KJH20]_, [DGKKM22]_
    (PLD composition); [MM18]_.
    """
    acc = Accountant(discretization)
    for item in events:
        if isinstance(item, tuple):
            acc.compose(item[0], item[1])
        else:
            acc.compose(item)
    return acc.epsilon(delta)


__all__ = ["METHODS", "Accountant", "Composition", "check_parallel_groups", "compose"]
