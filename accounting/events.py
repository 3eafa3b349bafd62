"""Privacy events: what a release *is*, so that an accountant can compose releases.

A :class:`~shuffledp.accounting.guarantee.Guarantee` is a finished (epsilon, delta). An event
describes the mechanism behind it -- discrete Laplace at a given parameter and sensitivity,
n shuffled eps0-LDP reports, the Polya-sum shuffle heatmap -- so that several releases can be
composed far more tightly than by adding their epsilons
(:mod:`shuffledp.accounting.compose`). Every event is a frozen dataclass that validates on
construction and serialises to a plain dict (:meth:`PrivacyEvent.to_dict`,
:func:`event_from_dict`), which is how it travels inside ``report.json``.

Each event answers two questions:

* :meth:`PrivacyEvent.certified` -- the (epsilon, delta) the release states. Basic and
  advanced composition use it.
* :meth:`PrivacyEvent.pld` -- a privacy loss distribution (PLD) of a *dominating pair*
  (P, Q): two distributions such that, for every pair of neighbouring inputs D, D' and every
  epsilon, H_{e^eps}(M(D) || M(D')) <= H_{e^eps}(P || Q), in both directions. Dominating
  pairs compose: the product of the pairs dominates the adaptive composition of the
  mechanisms ([ZDW22]_ Thm 10), which is what makes PLD composition valid. Every PLD here is
  built by dp_accounting ([DGKKM22]_, [KJH20]_) with pessimistic discretisation (losses
  rounded up onto a grid of ``discretization``, so hockey-stick divergences are upper
  bounds, [MM18]_).

Which pair each event uses (``curve`` in :meth:`PrivacyEvent.pld`):

``DiscreteLaplace``
    Scalar query (``dimension=1``) or l1-sensitivity 1: the exact pair (DL(0), DL(Delta)).
    A vector query with integer l1-sensitivity Delta > 1: the worst shift may be spread over
    coordinates and no single shift is *proven* worst here, so the pure
    (Delta t)-DP pair of [KOV15]_ (randomized response) is used: any eps-DP mechanism is a
    post-processing of it.
``DiscreteGaussian``
    Scalar query: the exact pair. Otherwise the (eps, delta) pair of its certified guarantee.
``PolyaSum``
    The heatmap (shuffle, distributed or central model): one ``DiscreteLaplace`` per pyramid
    level (the n-fold sum of Polya differences is exactly discrete Laplace, [Bagdasaryan22]_
    Thm 4.2), composed, plus the statistical distance tau of the real view from that ideal
    sum (split-and-mix hiding and the noise sampler's tables). With eps* the ideal pure
    epsilon, the real release is dominated by the ideal pair mixed with weight
    tau' = (1 + e^{eps*}) tau / (1 - tanh(eps*/2)) on two disjoint atoms (an infinite privacy
    loss): for alpha = e^eps in [1, e^{eps*}],
    H_alpha(real) <= H_alpha(ideal) + (1 + alpha) tau <= (1 - tau') H_alpha(ideal) + tau'
    because H_alpha(ideal) <= TV(ideal) <= tanh(eps*/2); above e^{eps*} the real divergence is
    at most its value at e^{eps*}, <= tau'. So tau' is charged as PLD infinity mass per
    release (additive in the composition), never multiplied by e^{eps_total}.
``ShuffledLDP``
    n shuffled eps0-LDP reports: the stronger-clone / variation-ratio pair ([FMT23]_
    Lemma 3.2) or the clones pair ([FMT21]_ Lemma 3.3); the shuffled output of *any*
    neighbouring data sets is a post-processing of it, for every epsilon at once. Its curve
    is computed by the toolkit's certified divergence and discretised by Connect-the-Dots.
``ShuffledKRR``
    k-RR (k >= 3): the exact privacy-blanket pair of
    :mod:`shuffledp.accounting.shuffle_ldp.krr_shuffle`
    (a post-processing argument, so again one pair for every data set). k = 2 (binary RR):
    the blanket pair for k = 2 is the stronger-clone pair, used for composition. The exact
    worst case of :mod:`shuffledp.accounting.shuffle_ldp.binary_rr` is a maximum over data sets m
    taken
    *per epsilon*; no single data set is proven worst for every epsilon in both directions,
    and a deployment's data sets change from release to release, so that per-epsilon maximum
    is not a dominating pair. It gives the event's certified single-release epsilon (used by
    basic and advanced composition), not its PLD.
``EpsDelta``
    Any (eps, delta)-DP release (PrivHist steps, metric releases with notion metric_emd are
    *not* composed by PLD): the pair of [KOV15]_, which makes PLD composition of such events
    the optimal composition of (eps, delta) mechanisms.
``Parallel``
    Events on disjoint sets of users: one user's data reaches one branch only, so the
    branches' curves are combined by their pointwise maximum, discretised by
    Connect-the-Dots (valid because each branch's curve is convex in e^eps).

References
----------
.. [KOV15] P. Kairouz, S. Oh, P. Viswanath, "The Composition Theorem for Differential
   Privacy", ICML 2015, Thm 2.1 (the (eps, delta) dominating pair), Thm 3.5.
.. [ZDW22] Y. Zhu, J. Dong, Y.-X. Wang, "Optimal Accounting of Differential Privacy via
   Characteristic Function", AISTATS 2022, Def. 7 and Thm 10 (dominating pairs compose).
.. [DGKKM22] V. Doroshenko, B. Ghazi, P. Kamath, R. Kumar, P. Manurangsi, "Connect the Dots:
   Tighter Discrete Approximations of Privacy Loss Distributions", PETS 2022, Alg. 1.
.. [KJH20] A. Koskela, J. Jaelkoe, A. Honkela, "Computing Tight Differential Privacy
   Guarantees Using FFT", AISTATS 2020.
.. [MM18] S. Meiser, E. Mohammadi, "Tight on Budget? Tight Bounds for r-Fold Approximate
   Differential Privacy", CCS 2018 (privacy buckets; pessimistic rounding).
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4), Thm 4.2.
.. [FMT21] V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones", FOCS 2021,
   Lemma 3.3.
.. [FMT23] V. Feldman, A. McMillan, K. Talwar, "Stronger Privacy Amplification by Shuffling
   for Renyi and Approximate Differential Privacy", SODA 2023, Lemma 3.2.
.. [BBGN20] B. Balle, J. Bell, A. Gascon, K. Nissim, "Private Summation in the Multi-Message
   Shuffle Model", CCS 2020 (statistical distance to (eps, delta): delta = (1 + e^eps) tau).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.accounting.shuffle_ldp._common import (
    REDUCTIONS,
    _blanket,
    _blanket_divergence,
    _divergence,
    _iv_d,
    _iv_k,
    _iv_shuffle,
    _mixture,
)

#: default PLD discretisation interval (the accountant's ``discretization``)
DEFAULT_DISCRETIZATION = 1e-4
#: a curve point whose upper divergence is below this ends a curve's grid (rest -> infinity)
CURVE_FLOOR = 1e-15

_REGISTRY: dict[str, type[PrivacyEvent]] = {}


def _register(cls: type[PrivacyEvent]) -> type[PrivacyEvent]:
    _REGISTRY[cls.kind] = cls
    return cls


@dataclass(frozen=True)
class PLDView:
    """A PLD of a dominating pair and how it was obtained.

    Attributes
    ----------
    pld : dp_accounting PrivacyLossDistribution
    curve : str
        ``"exact"`` (the mechanism's own pair), ``"dominating pair"`` (a pair every
        neighbouring input is a post-processing of), ``"pure pair"`` / ``"(eps, delta) pair"``
        ([KOV15]_), or a description of a combination.
    """

    pld: Any
    curve: str


@dataclass(frozen=True)
class PrivacyEvent:
    """Base of every event: the neighbour relation it is stated for, and a label."""

    kind: ClassVar[str] = "event"
    #: the guarantee notion the event's (epsilon, delta) refers to
    notion: ClassVar[str] = "approximate"

    def __post_init__(self) -> None:
        object.__setattr__(self, "neighbour", Neighbour.parse(self.neighbour))

    # -- what every event answers -------------------------------------------------------
    def certified(self) -> tuple[float, float]:
        """The (epsilon, delta) this release states (used by basic and advanced composition)."""
        raise NotImplementedError

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView | None:
        """PLD of a dominating pair, or None when none is known (basic composition only)."""
        raise NotImplementedError

    # -- serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.kind}
        for f in fields(self):
            val = getattr(self, f.name)
            if isinstance(val, Neighbour):
                val = val.token
            elif isinstance(val, PrivacyEvent):
                val = val.to_dict()
            elif isinstance(val, tuple) and val and isinstance(val[0], PrivacyEvent):
                val = [e.to_dict() for e in val]
            elif isinstance(val, tuple):
                val = list(val)
            out[f.name] = val
        return out

    def describe(self) -> str:
        eps, delta = self.certified()
        return f"{self.kind}(eps={eps:.6g}, delta={delta:.3g})"


def event_from_dict(data: Mapping[str, Any]) -> PrivacyEvent:
    """Rebuild an event from :meth:`PrivacyEvent.to_dict` (validates like the constructor)."""
    if not isinstance(data, Mapping) or "type" not in data:
        raise ValueError(f"an event must be a mapping with a 'type' key, got {data!r}")
    kind = data["type"]
    if kind not in _REGISTRY:
        raise ValueError(f"unknown event type {kind!r}; known: {sorted(_REGISTRY)}")
    cls = _REGISTRY[kind]
    kwargs = {k: val for k, val in data.items() if k != "type"}
    names = {f.name for f in fields(cls)}
    unknown = set(kwargs) - names
    if unknown:
        raise ValueError(f"{kind} event has no field(s) {sorted(unknown)}")
    for f in fields(cls):
        val = kwargs.get(f.name)
        if f.name in ("levels", "branches", "steps") and val is not None:
            kwargs[f.name] = tuple(event_from_dict(e) for e in val)
    return cls(**kwargs)


# ----------------------------------------------------------------------- discretised curves
def _dp():
    from dp_accounting.pld import pld_pmf, privacy_loss_distribution

    return privacy_loss_distribution, pld_pmf


def convexify(alphas: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """Smallest raise of ``deltas`` that makes the points convex in alpha (left to right).

    Upper estimates of a convex curve can be non-convex by their rounding; raising a point
    keeps every estimate an upper bound. Each point is raised to at least the line through
    the two before it.
    """
    d = np.array(deltas, dtype=float)
    for i in range(2, d.size):
        slope = (d[i - 1] - d[i - 2]) / (alphas[i - 1] - alphas[i - 2])
        d[i] = max(d[i], d[i - 1] + slope * (alphas[i] - alphas[i - 1]))
    return d


def pld_from_curve(delta_at: Callable[[float], float], h: float, eps_top: float,
                   floor: float = CURVE_FLOOR, label: str = "curve") -> Any:
    """Symmetric pessimistic PLD of a mirror-symmetric pair from upper estimates of its curve.

    ``delta_at(eps)`` returns an upper estimate of H_{e^eps}(P || Q) = H_{e^eps}(Q || P) for
    eps >= 0; the loss is bounded by ``eps_top`` (delta(eps_top) = 0). The grid is
    0, h, 2h, ... until the estimate drops below ``floor`` or reaches ``eps_top``; the
    estimate there becomes the infinity mass. Negative epsilons follow from the mirror
    identity H_{e^-e}(P||Q) = 1 - e^-e + e^-e H_{e^e}(Q||P). The points are made convex in
    e^eps (:func:`convexify`) and turned into a PLD by Connect-the-Dots ([DGKKM22]_ Alg. 1):
    its hockey-stick curve interpolates the points linearly in e^eps, hence lies above the
    true (convex) curve everywhere. Raises ValueError when the estimates cannot be made a
    valid curve (a number that cannot be proven is refused).
    """
    _, pld_pmf = _dp()
    pld_mod, _ = _dp()
    vals: list[float] = []
    j = 0
    top = max(1, math.ceil(eps_top / h))
    while True:
        e = j * h
        d = 0.0 if j >= top else float(delta_at(e))
        if not (math.isfinite(d) and d >= 0):
            raise ValueError(f"{label}: no certified divergence at eps={e:.6g} (got {d!r})")
        vals.append(min(d, 1.0))
        if d <= floor or j >= top:
            break
        j += 1
        if j > 2_000_000:
            raise ValueError(f"{label}: the curve needs more than 2e6 grid points at h={h}")
    pos = np.array(vals)
    ks = np.arange(pos.size)
    # mirror: eps = -k h for k = K..1
    neg_k = ks[1:][::-1]
    neg = 1.0 - np.exp(-neg_k * h) + np.exp(-neg_k * h) * pos[1:][::-1]
    eps_idx = np.concatenate([-neg_k, ks])
    deltas = np.concatenate([neg, pos])
    alphas = np.exp(eps_idx * h)
    deltas = np.minimum(convexify(alphas, deltas), 1.0)
    if np.any(np.diff(deltas) > 1e-15):
        raise ValueError(f"{label}: the curve's upper estimates are not non-increasing "
                         "after convexification; refusing to build a PLD")
    deltas = np.minimum.accumulate(deltas)
    pmf = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(
        h, int(eps_idx[0]), int(eps_idx[-1]), deltas)
    return pld_mod.PrivacyLossDistribution(pmf)


def _iv_h(h: float) -> float:
    h = v.positive("discretization", h)
    if h > 0.1:
        raise ValueError(f"discretization must be <= 0.1, got discretization={h!r}")
    return h


# ----------------------------------------------------------------------- concrete events
@_register
@dataclass(frozen=True)
class DiscreteLaplace(PrivacyEvent):
    """Integer query plus DL noise P(Z = z) proportional to exp(-parameter |z|).

    Attributes
    ----------
    parameter : float
        t > 0 (the noise's a = e^{-t}); pure epsilon is sensitivity * t.
    sensitivity : int
        l1-sensitivity of the integer query under ``neighbour`` (>= 1).
    dimension : int
        Number of coordinates; 1 (or sensitivity 1) uses the exact pair.
    neighbour : Neighbour
    label : str
    """

    kind: ClassVar[str] = "discrete_laplace"
    parameter: float = 1.0
    sensitivity: int = 1
    dimension: int = 1
    neighbour: Neighbour = Neighbour.ADD_REMOVE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "parameter", v.positive("parameter", self.parameter))
        object.__setattr__(self, "sensitivity", v.count("sensitivity", self.sensitivity, 1))
        object.__setattr__(self, "dimension", v.count("dimension", self.dimension, 1))

    @classmethod
    def from_a(cls, a: float, sensitivity: int = 1, **kw: Any) -> DiscreteLaplace:
        """From the noise's ratio a = e^{-t} in (0, 1)."""
        a = v.probability("a", a)
        return cls(parameter=-math.log(a), sensitivity=sensitivity, **kw)

    @property
    def epsilon(self) -> float:
        return self.sensitivity * self.parameter

    def certified(self) -> tuple[float, float]:
        return self.epsilon, 0.0

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView:
        h = _iv_h(discretization)
        pld_mod, _ = _dp()
        if self.dimension == 1 or self.sensitivity == 1:
            return PLDView(pld_mod.from_discrete_laplace_mechanism(
                self.parameter, sensitivity=self.sensitivity, pessimistic_estimate=True,
                value_discretization_interval=h), "exact")
        return PLDView(_pure_pld(self.epsilon, 0.0, h), "pure pair")


@_register
@dataclass(frozen=True)
class DiscreteGaussian(PrivacyEvent):
    """Integer query plus discrete Gaussian noise N_Z(0, sigma^2) ([CKS20] of zcdp).

    ``epsilon``/``delta`` are the certified pair of the release (e.g. from
    :func:`shuffledp.accounting.zcdp.zcdp_delta`). A scalar query with integer sensitivity
    uses the exact pair; otherwise the (epsilon, delta) pair.
    """

    kind: ClassVar[str] = "discrete_gaussian"
    sigma: float = 1.0
    sensitivity: int = 1
    dimension: int = 1
    epsilon: float = 1.0
    delta: float = 1e-6
    neighbour: Neighbour = Neighbour.ADD_REMOVE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "sigma", v.positive("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", v.count("sensitivity", self.sensitivity, 1))
        object.__setattr__(self, "dimension", v.count("dimension", self.dimension, 1))
        _iv_pair(self)

    def certified(self) -> tuple[float, float]:
        return self.epsilon, self.delta

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView:
        h = _iv_h(discretization)
        pld_mod, _ = _dp()
        if self.dimension == 1:
            return PLDView(pld_mod.from_discrete_gaussian_mechanism(
                self.sigma, sensitivity=self.sensitivity, pessimistic_estimate=True,
                value_discretization_interval=h), "exact")
        return PLDView(_pure_pld(self.epsilon, self.delta, h), "(eps, delta) pair")


@_register
@dataclass(frozen=True)
class PolyaSum(PrivacyEvent):
    """The heatmap release: per-level discrete Laplace sums, plus hiding distance ``tv``.

    Attributes
    ----------
    levels : tuple of DiscreteLaplace
        One per measured pyramid level (the sum over users is exactly DL, [Bagdasaryan22]_
        Thm 4.2), composed sequentially (every user contributes to every level).
    tv : float
        Statistical distance of the real view from the ideal noisy sum (0 in the central
        model): split-and-mix hiding plus the noise sampler's tables. The release's delta is
        (1 + e^eps) tv ([BBGN20]_).
    delta : float
        The release's certified delta (basic composition).
    model : str
        "shuffle", "distributed" or "central" (documentation only).
    """

    kind: ClassVar[str] = "polya_sum"
    levels: tuple[DiscreteLaplace, ...] = ()
    tv: float = 0.0
    delta: float = 0.0
    model: str = "shuffle"
    neighbour: Neighbour = Neighbour.REPLACE_ONE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        levels = tuple(self.levels)
        if not levels or not all(isinstance(e, DiscreteLaplace) for e in levels):
            raise ValueError(f"levels must be a non-empty sequence of DiscreteLaplace events, "
                             f"got levels={self.levels!r}")
        for e in levels:
            if e.neighbour is not self.neighbour:
                raise ValueError(f"every level must be stated for {self.neighbour.token!r}, "
                                 f"got a level for {e.neighbour.token!r}")
        object.__setattr__(self, "levels", levels)
        tv = v.real("tv", self.tv)
        if not 0.0 <= tv < 1.0:
            raise ValueError(f"tv must be in [0, 1), got tv={self.tv!r}")
        object.__setattr__(self, "tv", tv)
        d = v.real("delta", self.delta)
        if not 0.0 <= d <= 1.0:
            raise ValueError(f"delta must be in [0, 1], got delta={self.delta!r}")
        object.__setattr__(self, "delta", d)
        v.choice("model", self.model, ("shuffle", "distributed", "central"))

    @property
    def epsilon(self) -> float:
        return math.fsum(e.epsilon for e in self.levels)

    def certified(self) -> tuple[float, float]:
        return self.epsilon, self.delta

    def hiding_mass(self) -> float:
        """tau' = (1 + e^eps*) tv / (1 - tanh(eps*/2)): the infinity mass charged per release."""
        if self.tv == 0.0:
            return 0.0
        e = self.epsilon
        if e > 700:
            return 1.0
        return min(1.0, (1.0 + math.exp(e)) * self.tv / (1.0 - math.tanh(e / 2.0)))

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView:
        h = _iv_h(discretization)
        views = [e.pld(h) for e in self.levels]
        pld = views[0].pld
        for w in views[1:]:
            pld = pld.compose(w.pld)
        curve = "+".join(sorted({w.curve for w in views}))
        tau = self.hiding_mass()
        if tau > 0:
            pld = _with_infinity(pld, tau)
            curve += " + hiding"
        return PLDView(pld, curve)


@_register
@dataclass(frozen=True)
class ShuffledLDP(PrivacyEvent):
    """n shuffled reports of an eps0-LDP (or alpha0 d_X-DP with distance d) randomizer.

    ``epsilon``/``delta`` are the release's certified pair (from
    :func:`shuffledp.accounting.shuffle_ldp.clones.shuffle_ldp`); ``reduction`` picks the
    dominating pair
    used for composition ("variation-ratio", the tighter, or "clones").
    """

    kind: ClassVar[str] = "shuffled_ldp"
    n: int = 2
    eps0: float = 1.0
    d: float = 1.0
    epsilon: float = 1.0
    delta: float = 0.0
    reduction: str = "variation-ratio"
    neighbour: Neighbour = Neighbour.REPLACE_ONE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()

        n, eps0, _ = _iv_shuffle(self.n, self.eps0, 0.5)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "eps0", eps0)
        object.__setattr__(self, "d", _iv_d(self.d))
        v.choice("reduction", self.reduction, REDUCTIONS)
        _iv_pair(self)

    def certified(self) -> tuple[float, float]:
        return self.epsilon, self.delta

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView:
        return PLDView(_clone_pld(self.n, self.eps0, self.d, self.reduction,
                                  _iv_h(discretization)), "dominating pair")


@_register
@dataclass(frozen=True)
class ShuffledKRR(PrivacyEvent):
    """n shuffled k-ary randomized-response reports (binary RR for k = 2).

    ``epsilon``/``delta``: the release's certified pair (for k = 2 possibly the exact worst
    case over data sets of :mod:`shuffledp.accounting.shuffle_ldp.binary_rr`). Composition uses the
    privacy-blanket pair (k >= 3) or the stronger-clone pair (k = 2), see the module notes.
    """

    kind: ClassVar[str] = "shuffled_krr"
    n: int = 2
    k: int = 2
    eps0: float = 1.0
    epsilon: float = 1.0
    delta: float = 0.0
    neighbour: Neighbour = Neighbour.REPLACE_ONE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()

        n, eps0, _ = _iv_shuffle(self.n, self.eps0, 0.5)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "eps0", eps0)
        object.__setattr__(self, "k", _iv_k(self.k))
        _iv_pair(self)

    def certified(self) -> tuple[float, float]:
        return self.epsilon, self.delta

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView:
        h = _iv_h(discretization)
        if self.k == 2:
            return PLDView(_clone_pld(self.n, self.eps0, 1.0, "variation-ratio", h),
                           "dominating pair")
        return PLDView(_krr_pld(self.n, self.k, self.eps0, h), "dominating pair")


@_register
@dataclass(frozen=True)
class EpsDelta(PrivacyEvent):
    """Any release known only by its (epsilon, delta) (or pure epsilon) guarantee.

    ``notion`` "approximate" composes by PLD through the [KOV15]_ pair; "metric_emd" and
    "discrete_emd" (d_EM-DP of [Imola]) compose by basic composition only (alpha adds up).
    """

    kind: ClassVar[str] = "eps_delta"
    epsilon: float = 1.0
    delta: float = 0.0
    guarantee_notion: str = "approximate"
    neighbour: Neighbour = Neighbour.ADD_REMOVE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        _iv_pair(self)
        gn = "approximate" if self.guarantee_notion == "pure" else self.guarantee_notion
        v.choice("guarantee_notion", gn, ("approximate", "metric_emd", "discrete_emd"))
        object.__setattr__(self, "guarantee_notion", gn)

    @property
    def event_notion(self) -> str:
        return self.guarantee_notion

    def certified(self) -> tuple[float, float]:
        return self.epsilon, self.delta

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView | None:
        if self.guarantee_notion != "approximate":
            return None
        h = _iv_h(discretization)
        return PLDView(_pure_pld(self.epsilon, self.delta, h),
                       "pure pair" if self.delta == 0 else "(eps, delta) pair")

    @classmethod
    def from_guarantee(cls, g: Any, label: str = "") -> EpsDelta:
        return cls(epsilon=g.epsilon, delta=g.delta, guarantee_notion=g.notion,
                   neighbour=g.neighbour, label=label or g.theorem[:80])


@_register
@dataclass(frozen=True)
class Parallel(PrivacyEvent):
    """Events run on disjoint sets of users (one user's data reaches one branch)."""

    kind: ClassVar[str] = "parallel"
    branches: tuple[PrivacyEvent, ...] = ()
    neighbour: Neighbour = Neighbour.ADD_REMOVE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        _iv_children(self, "branches", "parallel branches")

    @property
    def event_notion(self) -> str:
        return event_notion(self.branches[0])

    def certified(self) -> tuple[float, float]:
        pairs = [e.certified() for e in self.branches]
        return max(p[0] for p in pairs), max(p[1] for p in pairs)

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView | None:
        h = _iv_h(discretization)
        if len(set(self.branches)) == 1:
            return self.branches[0].pld(h)
        views = [e.pld(h) for e in self.branches]
        if any(w is None for w in views):
            return None
        plds = [w.pld for w in views]
        top = max(_max_loss(p) for p in plds)

        def worst(eps: float) -> float:
            return max(float(p.get_delta_for_epsilon(eps)) for p in plds)

        # every curve is >= its infinity mass: the grid stops at the largest one (or the
        # largest finite loss); what lies beyond is charged as infinity mass
        floor = max(CURVE_FLOOR, max(_inf_mass(p) for p in plds))
        pld = pld_from_curve(worst, h, top, floor=floor, label="parallel branches")
        return PLDView(pld, "max of branches")


@_register
@dataclass(frozen=True)
class Sequential(PrivacyEvent):
    """Steps run one after the other on the same users (one release made of several
    mechanisms, e.g. PrivHist's steps or the federated tree's rounds); later steps may
    depend on earlier outputs (adaptive composition)."""

    kind: ClassVar[str] = "sequential"
    steps: tuple[PrivacyEvent, ...] = ()
    neighbour: Neighbour = Neighbour.ADD_REMOVE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        _iv_children(self, "steps", "sequential steps")

    @property
    def event_notion(self) -> str:
        return event_notion(self.steps[0])

    def certified(self) -> tuple[float, float]:
        pairs = [e.certified() for e in self.steps]
        return math.fsum(p[0] for p in pairs), min(1.0, math.fsum(p[1] for p in pairs))

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION) -> PLDView | None:
        h = _iv_h(discretization)
        views = [e.pld(h) for e in self.steps]
        if any(w is None for w in views):
            return None
        pld = views[0].pld
        for w in views[1:]:
            pld = pld.compose(w.pld)
        return PLDView(pld, "+".join(sorted({w.curve for w in views})))


# ----------------------------------------------------------------------- helpers
@lru_cache(maxsize=16)
def _clone_pld(n: int, eps0: float, d: float, reduction: str, h: float) -> Any:
    """PLD of the clones / variation-ratio pair (cached: it depends on the pair only)."""
    mix = _mixture(n, eps0, d, 1e-16, reduction)
    return pld_from_curve(lambda e: _divergence(mix, e)[1], h, mix.ad, label=f"{reduction} pair")


@lru_cache(maxsize=16)
def _krr_pld(n: int, k: int, eps0: float, h: float) -> Any:
    """PLD of the k-RR privacy-blanket pair (cached)."""
    tail = 1e-16 * 2.0 / (math.exp(eps0) + 1.0)
    bl = _blanket(n, k, eps0, tail)
    return pld_from_curve(lambda e: _blanket_divergence(bl, e)[1], h, eps0,
                          floor=max(CURVE_FLOOR, 4 * tail * (math.exp(eps0) + 1)),
                          label=f"{k}-RR blanket pair")


def event_notion(e: PrivacyEvent) -> str:
    return getattr(e, "event_notion", e.notion)


def check_same_neighbour(a: Neighbour, b: Neighbour, what: str = "events") -> None:
    """Refuse to compose events stated for different neighbour relations."""
    if a is not b:
        raise ValueError(f"cannot compose {what} with different neighbour relations: "
                         f"{a.token!r} ({a.value}) and {b.token!r} ({b.value})")


def check_same_notion(a: PrivacyEvent, b: PrivacyEvent) -> None:
    na, nb = event_notion(a), event_notion(b)
    if na != nb:
        raise ValueError(f"cannot compose a {na} event with a {nb} event")


def _iv_children(owner: PrivacyEvent, name: str, what: str) -> None:
    """Check a composite event's children (``branches`` or ``steps``) and freeze them as a
    tuple: a non-empty sequence of events of one neighbour relation and one notion."""
    given = getattr(owner, name)
    items = tuple(given)
    if not items or not all(isinstance(e, PrivacyEvent) for e in items):
        raise ValueError(f"{name} must be a non-empty sequence of events, got {name}={given!r}")
    for e in items:
        check_same_neighbour(owner.neighbour, e.neighbour, what)
        check_same_notion(items[0], e)
    object.__setattr__(owner, name, items)


def _iv_pair(e: Any) -> None:
    eps = v.real("epsilon", e.epsilon)
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be finite and >= 0, got epsilon={e.epsilon!r}")
    d = v.real("delta", e.delta)
    if not 0.0 <= d < 1.0:
        raise ValueError(f"delta must be in [0, 1), got delta={e.delta!r}")
    object.__setattr__(e, "epsilon", eps)
    object.__setattr__(e, "delta", d)


def _pure_pld(eps: float, delta: float, h: float) -> Any:
    from dp_accounting.pld import common

    pld_mod, _ = _dp()
    return pld_mod.from_privacy_parameters(
        common.DifferentialPrivacyParameters(eps, delta), value_discretization_interval=h)


def _pmfs(pld: Any) -> list[Any]:
    return [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]


def _inf_mass(pld: Any) -> float:
    return max(p._infinity_mass for p in _pmfs(pld))


def _max_loss(pld: Any) -> float:
    out = 0.0
    for p in _pmfs(pld):
        d = p.to_dense_pmf()
        nz = np.flatnonzero(d._probs > 0)
        if nz.size:
            out = max(out, (d._lower_loss + int(nz[-1])) * d._discretization)
    return out


def _with_infinity(pld: Any, tau: float) -> Any:
    """The PLD of the pair ((1 - tau) P + tau [top], (1 - tau) Q + tau [bottom])."""
    pld_mod, pld_pmf = _dp()
    out = []
    for p in _pmfs(pld):
        d = p.to_dense_pmf()
        out.append(pld_pmf.DensePLDPmf(d._discretization, d._lower_loss,
                                       (1.0 - tau) * d._probs,
                                       (1.0 - tau) * d._infinity_mass + tau,
                                       d._pessimistic_estimate))
    return pld_mod.PrivacyLossDistribution(out[0], None if len(out) == 1 else out[1])


def polya_sum_event(level_epsilons: Sequence[float], sensitivities: Sequence[int],
                    dimensions: Sequence[int], delta: float, neighbour: Neighbour | str,
                    model: str = "shuffle") -> PolyaSum:
    """The :class:`PolyaSum` event of a release whose per-level noise sums to DL(e^{-eps_i /
    Delta_i}) and whose delta is (1 + e^eps) tau ([BBGN20]_; the sampler's and split-and-mix's
    statistical distances), eps = sum eps_i: tv = delta / (1 + e^eps)."""
    nb = Neighbour.parse(neighbour)
    levels = tuple(DiscreteLaplace(parameter=float(e) / int(s), sensitivity=int(s),
                                   dimension=int(m), neighbour=nb)
                   for e, s, m in zip(level_epsilons, sensitivities, dimensions, strict=True))
    eps = math.fsum(float(e) for e in level_epsilons)
    tv = float(delta) / (1.0 + math.exp(min(eps, 700.0)))
    return PolyaSum(levels=levels, tv=tv, delta=float(delta), model=model, neighbour=nb)


def sequence(events: Sequence[PrivacyEvent]) -> tuple[PrivacyEvent, ...]:
    """Validate a sequence of events (non-empty, all PrivacyEvent)."""
    ev = tuple(events)
    if not ev or not all(isinstance(e, PrivacyEvent) for e in ev):
        raise TypeError(f"expected a non-empty sequence of PrivacyEvent, got {events!r}")
    return ev


__all__ = [
    "CURVE_FLOOR",
    "DEFAULT_DISCRETIZATION",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "EpsDelta",
    "PLDView",
    "Parallel",
    "PolyaSum",
    "PrivacyEvent",
    "ShuffledKRR",
    "ShuffledLDP",
    "Sequential",
    "check_same_neighbour",
    "convexify",
    "event_from_dict",
    "pld_from_curve",
    "polya_sum_event",
]
