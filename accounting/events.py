"""Privacy events: what a release *is*, so that an accountant can compose releases.

A :class:`~shuffledp.accounting.guarantee.Guarantee` is a finished (epsilon, delta). An event
describes the mechanism behind it -- discrete Laplace at a given parameter and sensitivity,
n shuffled eps0-LDP reports, the Polya-sum shuffle heatmap -- so that several releases can be
composed far more tightly than by adding their epsilons
(:mod:`shuffledp.accounting.composition`). Every event is a frozen dataclass that validates on
construction and serialises to a plain dict (:meth:`PrivacyEvent.to_dict`,
:func:`event_from_dict`), which is how it travels inside ``report.json``.

Each event answers two questions:

* :meth:`PrivacyEvent.certified` -- the (epsilon, delta) the release is *proven* to satisfy,
  derived from the mechanism's parameters (see "What is certified" below). Basic and
  advanced composition use it.
* :meth:`PrivacyEvent.pld` -- a privacy loss distribution (PLD) of a *dominating pair*
  (P, Q): two distributions such that, for every pair of neighbouring inputs D, D' and every
  epsilon, H_{e^eps}(M(D) || M(D')) <= H_{e^eps}(P || Q), in both directions. Dominating
  pairs compose: the product of the pairs dominates the adaptive composition of the
  mechanisms ([ZDW22]_ Thm 10), which is what makes PLD composition valid. Every PLD is
  built by :mod:`shuffledp.accounting.pld` with pessimistic discretisation (losses rounded
  up onto the grid, so hockey-stick divergences are upper bounds, [MM18]_) and a proven
  bound on its numerical error.

What is certified
-----------------
An event never certifies a number its parameters do not prove. Where a closed form or an
exact computation exists the pair is *derived* (discrete Laplace: (Delta t, 0); the heatmap:
(sum eps_i, (1 + e^eps) tv)); where the release states an epsilon found by a numerical
search (shuffled reports, the discrete Gaussian), the stated (epsilon, delta) is *verified*
on construction against a certified upper estimate of the pair's hockey-stick divergence at
that epsilon, and refused with a ValueError naming the field and the value when the
parameters do not prove it. A ``delta`` left out (None) is derived. An event read back from
``report.json`` or a composition spec goes through the same constructor, so an edited or
inconsistent record is refused, never composed. :class:`EpsDelta` is the one event whose
stated pair *is* its parameter (a release known only by its guarantee).

Which pair each event uses (``curve`` in :meth:`PrivacyEvent.pld`):

``DiscreteLaplace``
    The exact pair (DL(0), DL(Delta)) for every dimension: a vector of independent DL(t)
    noise under an integer shift of l1 norm at most Delta is dominated by the shift Delta on
    one coordinate (proof in :class:`DiscreteLaplace`; checked by exact enumeration of every
    shift in the tests), and that shift is attained, so the pair is tight.
``DiscreteGaussian``
    Scalar query: the exact pair. Otherwise the (eps, delta) pair of its verified guarantee.
``PolyaSum``
    The heatmap (shuffle, distributed or central model): one ``DiscreteLaplace`` per pyramid
    level (the n-fold sum of Polya differences is exactly discrete Laplace, [Bagdasaryan22]_
    Thm 4.2), composed, mixed with weight tau' = (1 + e^{eps*}) tv (the release's delta) on
    two disjoint atoms of infinite privacy loss, for the statistical distance tv of the real
    view from the ideal sum (proof in :class:`PolyaSum`). tau' is charged as PLD infinity
    mass per release (additive in the composition), never multiplied by e^{eps_total}.
``ShuffledLDP``
    n shuffled eps0-LDP reports: the stronger-clone / variation-ratio pair ([FMT23]_
    Lemma 3.2) or the clones pair ([FMT21]_ Lemma 3.3); the shuffled output of *any*
    neighbouring data sets is a post-processing of it, for every epsilon at once. Its curve
    is computed by the toolkit's certified divergence and discretised by Connect-the-Dots.
``ShuffledKRR``
    k-RR (k >= 3): the exact privacy-blanket pair of
    :mod:`shuffledp.accounting.amplification.krr_shuffle`
    (a post-processing argument, so again one pair for every data set). k = 2 (binary RR):
    the stronger-clone pair, used for composition. The exact worst case of
    :mod:`shuffledp.accounting.amplification.binary_rr` is a maximum over data sets m taken
    *per epsilon*; no single data set is proven worst for every epsilon in both directions,
    and a deployment's data sets change from release to release, so that per-epsilon maximum
    is not a dominating pair. It can certify the event's single-release pair (used by basic
    and advanced composition), not its PLD.
``EpsDelta``
    Any (eps, delta)-DP release (PrivHist steps, metric releases with notion metric_emd are
    *not* composed by PLD): the pair of [KOV15]_, which makes PLD composition of such events
    the optimal composition of (eps, delta) mechanisms.
``Parallel``
    Events on disjoint sets of users: one user's data reaches one branch only, so the
    branches' curves are combined by their pointwise maximum (each evaluated on the whole
    grid, its infinity mass included), made convex and discretised by Connect-the-Dots.

References
----------
.. [KOV15] Kairouz et al. (2015), "The Composition Theorem for Differential Privacy", Thm 2.1, Thm
   2.4, Thm 3.5 -- full entry in docs/references.md
.. [ZDW22] Zhu et al. (2022), "Optimal Accounting of Differential Privacy via Characteristic
   Function", Def. 7, Thm 10 -- full entry in docs/references.md
.. [DGKKM22] Doroshenko et al. (2022), "Connect the Dots", Alg. 1 -- full entry in
   docs/references.md
.. [MM18] Meiser and Mohammadi (2018), "Tight on Budget? Tight Bounds for r-Fold Approximate
   Differential ..." -- full entry in docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics", Thm 4.2 -- full
   entry in docs/references.md
.. [FMT21] Feldman et al. (2021), "Hiding Among the Clones", Lemma 3.3, Thm 3.1 -- full entry in
   docs/references.md
.. [FMT23] Feldman et al. (2023), "Stronger Privacy Amplification by Shuffling for Renyi and
   Approximate ...", Lemma 3.2 -- full entry in docs/references.md
.. [BBGN20] Balle et al. (2020), "Private Summation in the Multi-Message Shuffle Model" -- full
   entry in docs/references.md
.. [CKS20] Canonne et al. (2020), "The Discrete Gaussian for Differential Privacy", Thm 14, Cor. 13
   -- full entry in docs/references.md
.. [Blackwell53] D. Blackwell, "Equivalent Comparisons of Experiments", Ann. Math. Statist.
   24(2), 1953 (a dichotomy dominates another for every hockey-stick divergence iff the
   other is a post-processing of it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting import pld as _pld
from shuffledp.accounting.amplification import _binary_core
from shuffledp.accounting.amplification._common import (
    REDUCTIONS,
    _blanket_cached,
    _blanket_divergence,
    _divergence,
    _iv_d,
    _iv_k,
    _iv_shuffle,
    _mixture_cached,
    clones_formula,
    clones_validity_limit,
    default_tail,
    krr_default_tail,
)
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.accounting.pld import PLD, NoPLD
from shuffledp.accounting.zcdp import zcdp_delta

#: default PLD discretisation interval (the accountant's ``discretization``)
DEFAULT_DISCRETIZATION = 1e-4
#: a curve point whose upper divergence is below this ends a curve's grid (rest -> infinity)
CURVE_FLOOR = 1e-15
#: the shuffle pairs' curves are computed at every 8th grid point, chords in between
_CURVE_STRIDE = 8
#: relative tolerance between a stated delta and the one its parameters give, where both
#: are closed forms of the same numbers (float rounding only)
STATED_RTOL = 1e-12

_REGISTRY: dict[str, type[PrivacyEvent]] = {}


def _register(cls: type[PrivacyEvent]) -> type[PrivacyEvent]:
    _REGISTRY[cls.kind] = cls
    return cls


@dataclass(frozen=True)
class PLDView:
    """A PLD of a dominating pair and how it was obtained.

    Attributes
    ----------
    pld : shuffledp.accounting.pld.PLD
    curve : str
        ``"exact"`` (the mechanism's own pair), ``"dominating pair"`` (a pair every
        neighbouring input is a post-processing of), ``"pure pair"`` / ``"(eps, delta) pair"``
        ([KOV15]_), or a description of a combination.
    """

    pld: PLD
    curve: str


@dataclass(frozen=True)
class PrivacyEvent:
    """Base of every event: the neighbour relation it is stated for, and a label.

    Attributes
    ----------
    kind : str
        The event's type name in :meth:`to_dict` records (a class attribute).
    notion : str
        The guarantee notion its (epsilon, delta) refers to (a class attribute).
    neighbour : Neighbour
        The neighbour relation the pair is stated for.
    label : str
        Free text naming the release.
    """

    kind: ClassVar[str] = "event"
    #: the guarantee notion the event's (epsilon, delta) refers to
    notion: ClassVar[str] = "approximate"
    if TYPE_CHECKING:
        # every concrete event declares these as its last fields (with defaults, after its
        # own parameters): declared here for the type checker only, so that the dataclass
        # field order of the subclasses is theirs
        neighbour: Neighbour
        label: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "neighbour", Neighbour.parse(self.neighbour))

    # -- what every event answers -------------------------------------------------------
    def certified(self) -> tuple[float, float]:
        """The (epsilon, delta) the mechanism's parameters prove (derived or verified)."""
        raise NotImplementedError

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView | None:
        """PLD of a dominating pair, or None when none is known (basic composition only).

        ``tilt`` is the exponential tilt of any FFT composition inside the event
        (:func:`shuffledp.accounting.pld.convolve`). Raises
        :class:`~shuffledp.accounting.pld.NoPLD` (a ValueError naming the cause) when the
        pair exists but cannot be computed on this grid.
        """
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
    """Rebuild an event from :meth:`PrivacyEvent.to_dict` (validates and verifies like the
    constructor: a record whose stated numbers its parameters do not prove is refused).

    Parameters
    ----------
    data : Mapping
        A record with a ``"type"`` key naming the event class and its fields (composite
        events' ``levels``/``branches``/``steps`` as lists of such records).

    Returns
    -------
    PrivacyEvent
        The event, validated.

    Raises
    ------
    ValueError
        ``data`` is not a mapping with a known ``"type"``, has unknown fields, a composite
        field that is not a list, or values its class refuses (including a stated pair its
        parameters do not prove).
    TypeError
        A field has the wrong type for its class.

    References
    ----------
    [ZDW22]_ Def. 7 (the dominating pair each event stands for).
    """
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
            if not isinstance(val, (list, tuple)):
                raise ValueError(f"{kind} event: {f.name} must be a list of events, got "
                                 f"{f.name}={val!r}")
            kwargs[f.name] = tuple(event_from_dict(e) for e in val)
    return cls(**kwargs)


# ----------------------------------------------------------------------- discretised curves
def pld_from_curve(delta_at: Callable[[float], float], h: float, eps_top: float,
                   floor: float = CURVE_FLOOR, label: str = "curve") -> PLD:
    """Symmetric pessimistic PLD of a mirror-symmetric pair from upper estimates of its
    curve (:func:`shuffledp.accounting.pld.from_curve`).

    ``delta_at(eps)`` returns an upper estimate of the larger of the two directions'
    hockey-stick divergences at eps >= 0; ``eps_top`` bounds the finite losses. The curve is
    evaluated on 0, h, 2h, ... up to the first point where it is <= ``floor`` or the first
    point >= ``eps_top`` -- including that point, where the estimate is the pair's infinity
    mass (it is *not* forced to 0) -- and is flat from there on.

    Parameters
    ----------
    delta_at : callable
        eps -> an upper estimate of the pair's hockey-stick curve at eps >= 0, in [0, 1].
    h : float
        Grid step of the losses.
    eps_top : float
        Upper bound on the finite losses.
    floor : float
        The curve is cut (flat) from the first point where it is <= ``floor``.
    label : str
        Names the pair in messages.

    Returns
    -------
    PLD
        The pessimistic PLD (Connect-the-Dots of the convex chain of the estimates).

    Raises
    ------
    ValueError
        An estimate is not a number in [0, 1].

    References
    ----------
    [DGKKM22]_ Alg. 1.
    """
    return PLD(_pld.from_curve(delta_at, h, eps_top, floor=floor, label=label))


def _iv_h(h: float) -> float:
    h = v.positive("discretization", h)
    if h > 0.1:
        raise ValueError(f"discretization must be <= 0.1, got discretization={h!r}")
    return h


def _iv_tilt(tilt: float | None) -> float | None:
    if tilt is None:
        return None
    t = v.real("tilt", tilt)
    if not 0.0 <= t <= 64.0:
        raise ValueError(f"tilt must be in [0, 64], got tilt={tilt!r}")
    return t


# ----------------------------------------------------------------------- concrete events
@_register
@dataclass(frozen=True)
class DiscreteLaplace(PrivacyEvent):
    """Integer query plus DL noise P(Z = z) proportional to exp(-parameter |z|) per coordinate.

    Attributes
    ----------
    parameter : float
        t > 0 (the noise's a = e^{-t}); pure epsilon is sensitivity * t.
    sensitivity : int
        l1-sensitivity Delta of the integer query under ``neighbour`` (>= 1).
    dimension : int
        Number of coordinates (the pair does not depend on it, see below).
    neighbour : Neighbour
    label : str

    Notes
    -----
    *The exact pair of the vector mechanism.* Let X = (X_1..X_m) be i.i.d. DL(t) and s an
    integer shift with ||s||_1 <= Delta. The pair (X, X + s) is dominated, for every
    hockey-stick divergence and in both directions, by the scalar pair (DL(0), DL(Delta)),
    which a shift Delta e_1 attains; so (DL(0), DL(Delta)) is the exact dominating pair.

    Proof. DL is symmetric, so signs and the order of coordinates do not matter: take
    s_i >= 0. It suffices to merge two coordinates, (s_1, s_2) into s_1 + s_2 (then the
    others: a pair dominated in one block stays dominated after a product with a common
    block, [Blackwell53]_ / [ZDW22]_ Thm 10; a shift below Delta is the marginal of the pair
    (s, Delta - s), a post-processing). With a = e^{-t} and Z = clip(X, 0, s), the loss of
    the scalar pair (DL(0), DL(s)) is t (s - 2Z), and under DL(0) P(Z = 0) = 1/(1 + a),
    P(Z = z) = (1 - a) a^z / (1 + a) for 0 < z < s, P(Z = s) = a^s / (1 + a). For the
    two-coordinate pair the loss is t (Delta - 2S), S = Z_1 + Z_2 and Delta = s_1 + s_2: both
    pairs have the losses t (Delta - 2k), k = 0..Delta. Write p_k = P(Z = k) for the merged
    pair, r_k = P(S = k), and W = e^{-L} (increasing in k). Then r_0 = 1/(1 + a)^2 < p_0,
    r_Delta = a^Delta/(1 + a)^2 < p_Delta, and for 0 < k < Delta,
    r_k = a^k/(1 + a)^2 C_k with C_k = sum_{z_1 + z_2 = k} w_1(z_1) w_2(z_2), w(0) = w(s) = 1,
    w(z) = 1 - a inside; the sum has at least two terms, the first and the last each with a
    factor 1 (an end of one coordinate), so C_k >= 2 (1 - a) >= (1 - a)(1 + a), i.e.
    r_k >= p_k = (1 - a) a^k / (1 + a). Both laws have E[W] = 1 (a full-support pair), so
    D(c) = E_p[(c - W)_+] - E_r[(c - W)_+] vanishes at both ends of the support, and its
    slope F_p - F_r is positive, then decreases (r_k >= p_k) to -(p_Delta - r_Delta) < 0:
    D >= 0 everywhere. As H_alpha = alpha E_P[(1/alpha - W)_+], the merged pair's curve is
    above the two-coordinate one for every alpha; the other direction follows from the
    symmetry x -> s - x of both pairs. (tests/accounting check this by exact enumeration of
    every shift for Delta <= 7.)
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

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView:
        h = _iv_h(discretization)
        return PLDView(PLD(_dl_law(self.parameter, self.sensitivity, h)), "exact")


@lru_cache(maxsize=64)
def _dl_law(t: float, sensitivity: int, h: float) -> Any:
    return _pld.discrete_laplace(t, sensitivity, h)


@_register
@dataclass(frozen=True)
class DiscreteGaussian(PrivacyEvent):
    """Integer query plus discrete Gaussian noise N_Z(0, sigma^2) per coordinate ([CKS20]_).

    ``epsilon``/``delta`` are the release's pair, verified on construction: for a scalar
    query against the exact pair's hockey-stick divergence, for a vector query (integer
    shifts of l1 norm <= Delta have l2 norm <= Delta) against the zCDP conversion of
    rho = Delta^2 / (2 sigma^2) ([CKS20]_ Thm 14, Cor. 13). ``delta=None`` derives it.
    A scalar query uses the exact pair in the PLD; otherwise the verified (epsilon, delta)
    pair.

    Attributes
    ----------
    sigma : float
        Scale of the discrete Gaussian (> 0).
    sensitivity : int
        l1-sensitivity Delta of the integer query (>= 1).
    dimension : int
        Number of coordinates (>= 1).
    epsilon : float
        The release's epsilon.
    delta : float or None
        The release's delta (None: derived from the parameters at ``epsilon``).
    neighbour : Neighbour
        The neighbour relation the pair is stated for.
    label : str
        Free text naming the release.
    """

    kind: ClassVar[str] = "discrete_gaussian"
    sigma: float = 1.0
    sensitivity: int = 1
    dimension: int = 1
    epsilon: float = 1.0
    delta: float | None = None
    neighbour: Neighbour = Neighbour.ADD_REMOVE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "sigma", v.positive("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", v.count("sensitivity", self.sensitivity, 1))
        object.__setattr__(self, "dimension", v.count("dimension", self.dimension, 1))
        _iv_pair(self, derive=self._proven_delta)

    def _proven_delta(self, eps: float, stated: float | None = None) -> float:
        if self.dimension == 1:
            return _dg_delta(self.sigma, self.sensitivity, eps)
        return zcdp_delta(eps, self.sensitivity ** 2 / (2.0 * self.sigma ** 2))

    def _proof(self) -> str:
        return ("the exact discrete Gaussian pair" if self.dimension == 1 else
                "the zCDP conversion of rho = sensitivity^2 / (2 sigma^2)")

    def certified(self) -> tuple[float, float]:
        return self.epsilon, _derived_delta(self)

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView:
        h = _iv_h(discretization)
        if self.dimension == 1:
            return PLDView(PLD(_dg_law(self.sigma, self.sensitivity, h)), "exact")
        return PLDView(PLD(_pld.pure_pair(self.epsilon, _derived_delta(self), h)),
                       "(eps, delta) pair")


@lru_cache(maxsize=32)
def _dg_law(sigma: float, sensitivity: int, h: float) -> Any:
    return _pld.discrete_gaussian(sigma, sensitivity, h)


def _dg_delta(sigma: float, sensitivity: int, eps: float) -> float:
    """Upper bound on H_{e^eps}(N_Z(0, sigma^2) || N_Z(Delta, sigma^2)) (either direction:
    the pair is symmetric), from the exact pmfs: sum over x < x* of P(x)(1 - e^{eps - l(x)})
    with l(x) = (Delta^2 - 2 Delta x) / (2 sigma^2), plus a bound on the far tail."""
    d = sensitivity
    s2 = sigma * sigma
    T = int(math.ceil(sigma * math.sqrt(2 * math.log(1e40)))) + d + 1
    x = np.arange(-T, T + d + 1).astype(float)
    w = np.exp(-x * x / (2 * s2))
    tail = _pld._gauss_tail(T + 1, s2)
    Z = float(np.sum(w))  # a lower bound of the normaliser: masses are rounded up
    loss = (d * d - 2 * d * x) / (2 * s2)
    keep = loss > eps
    val = float(np.sum(w[keep] * -np.expm1(eps - loss[keep]))) / Z
    return (val + tail / Z) * (1 + 1e-12) + 1e-300


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
        model): split-and-mix hiding plus the noise sampler's tables.
    delta : float or None
        The release's delta, (1 + e^{eps*}) tv ([BBGN20]_) with eps* the sum of the levels'
        epsilons: derived when None; a stated value that differs from it beyond float
        rounding (relative 1e-12) is refused. (A release plans delta and sets
        tv = delta / (1 + e^{eps*}); the stated delta is then the exact number.)
    model : str
        "shuffle", "distributed" or "central" (documentation only).

    Notes
    -----
    *The hiding charge.* Let (P, Q) be the ideal views (the noisy sums) on two neighbours,
    dominated by the composed levels' pair (Pbar, Qbar), which is eps*-DP; the real views
    P', Q' are within total variation tv of P, Q. Then with tau' = (1 + e^{eps*}) tv, for
    every alpha >= 0,

        H_alpha(P' || Q') <= (1 - tau') H_alpha(Pbar || Qbar) + tau',

    the curve of the pair ((1 - tau') Pbar + tau' [top], (1 - tau') Qbar + tau' [bottom]),
    whose extra atoms carry an infinite loss. Proof: for alpha in [1, e^{eps*}],
    H_alpha(P'||Q') = sup_S P'(S) - alpha Q'(S) <= H_alpha(P||Q) + (1 + alpha) tv
    <= H_alpha(Pbar||Qbar) + (1 + alpha) tv. An eps*-DP pair is dominated by randomized
    response ([KOV15]_ Thm 2.4), whose curve is (e^{eps*} - alpha)_+ / (1 + e^{eps*}), so
    1 - H_alpha(Pbar||Qbar) >= (1 + alpha) / (1 + e^{eps*}), i.e.
    (1 + alpha) tv <= tau' (1 - H_alpha(Pbar||Qbar)), which is the claim. For alpha >
    e^{eps*}, H_alpha(P'||Q') <= H_{e^{eps*}}(P'||Q') <= tau' (the ideal curve vanishes at
    e^{eps*}). For alpha < 1, both sides obey the mirror identity H_alpha(A||B) = 1 - alpha +
    alpha H_{1/alpha}(B||A), and the argument above holds with the roles of P and Q swapped.
    The constant cannot be lowered for every eps*-DP ideal pair: at alpha = 1 with
    randomized response the condition reads 2 tv <= tau' 2 / (1 + e^{eps*}). So the charge
    equals the release's own delta; it replaces (1 + e^{eps*}) tv / (1 - tanh(eps*/2)),
    which was (1 + e^{eps*}) / 2 times larger.
    """

    kind: ClassVar[str] = "polya_sum"
    levels: tuple[DiscreteLaplace, ...] = ()
    tv: float = 0.0
    delta: float | None = None
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
        v.choice("model", self.model, ("shuffle", "distributed", "central"))
        derived = self._derived_delta()
        if self.delta is None:
            object.__setattr__(self, "delta", derived)
            return
        d = v.real("delta", self.delta)
        if not 0.0 <= d <= 1.0:
            raise ValueError(f"delta must be in [0, 1], got delta={self.delta!r}")
        if abs(d - derived) > STATED_RTOL * derived:
            raise ValueError(
                f"polya_sum event: delta={self.delta!r} does not match its parameters: "
                f"(1 + e^eps) tv = {derived:.6g} with eps={self.epsilon:.6g} (the levels) and "
                f"tv={self.tv!r}; refusing an inconsistent event")
        object.__setattr__(self, "delta", d)

    @property
    def epsilon(self) -> float:
        return math.fsum(e.epsilon for e in self.levels)

    def certified(self) -> tuple[float, float]:
        return self.epsilon, _derived_delta(self)

    def _derived_delta(self) -> float:
        """(1 + e^{eps*}) tv, rounded up, at most 1 (log space: no overflow at any eps*)."""
        if self.tv == 0.0:
            return 0.0
        log_tau = math.log(self.tv) + _log1pexp(self.epsilon)
        return min(1.0, math.exp(min(log_tau, 0.0)) * (1.0 + 16 * _pld.U))

    def hiding_mass(self) -> float:
        """tau' = (1 + e^{eps*}) tv, the release's delta: the infinity mass charged per
        release (see the class notes)."""
        return _derived_delta(self)

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView:
        h = _iv_h(discretization)
        tilt = _iv_tilt(tilt)
        views = [e.pld(h) for e in self.levels]
        pld = views[0].pld
        for w in views[1:]:
            pld = pld.compose(w.pld, tilt)
        curve = "+".join(sorted({w.curve for w in views}))
        tau = self.hiding_mass()
        if tau > 0:
            pld = pld.with_infinity(tau)
            curve += " + hiding"
        return PLDView(pld, curve)


def _log1pexp(x: float) -> float:
    """log(1 + e^x) without overflow."""
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


@_register
@dataclass(frozen=True)
class ShuffledLDP(PrivacyEvent):
    """n shuffled reports of an eps0-LDP (or alpha0 d_X-DP with distance d) randomizer.

    ``epsilon``/``delta`` are the release's pair (e.g. from
    :func:`shuffledp.accounting.amplification.clones.shuffle_ldp`), verified on construction:
    some certified bound on (n, eps0, d) -- the exact divergence of the variation-ratio or
    clones pair, or the closed form of [FMT21]_ Thm 3.1 within its condition -- must give a
    delta at ``epsilon`` no larger than ``delta`` (``delta=None`` derives it). ``reduction``
    picks the dominating pair used for composition ("variation-ratio", the tighter, or
    "clones").

    Attributes
    ----------
    n : int
        Users (reports shuffled).
    eps0 : float
        Local epsilon (or alpha0) of each report.
    d : float
        Metric distance of the neighbouring inputs (1 for eps0-LDP).
    epsilon : float
        The release's epsilon.
    delta : float or None
        The release's delta (None: derived).
    reduction : {"variation-ratio", "clones"}
        Dominating pair used for composition.
    neighbour : Neighbour
        The neighbour relation the pair is stated for.
    label : str
        Free text naming the release.
    """

    kind: ClassVar[str] = "shuffled_ldp"
    n: int = 2
    eps0: float = 1.0
    d: float = 1.0
    epsilon: float = 1.0
    delta: float | None = None
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
        _iv_pair(self, derive=self._proven_delta)

    def _proven_delta(self, eps: float, stated: float | None = None) -> float:
        return _shuffle_upper(self.n, self.eps0, self.d, eps, stated)

    def _proof(self) -> str:
        return (f"the variation-ratio and clones pairs and the closed form for n={self.n}, "
                f"eps0={self.eps0!r}, d={self.d!r}")

    def certified(self) -> tuple[float, float]:
        return self.epsilon, _derived_delta(self)

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView:
        return PLDView(PLD(_clone_law(self.n, self.eps0, self.d, self.reduction,
                                      _iv_h(discretization))), "dominating pair")


@_register
@dataclass(frozen=True)
class ShuffledKRR(PrivacyEvent):
    """n shuffled k-ary randomized-response reports (binary RR for k = 2).

    ``epsilon``/``delta``: the release's pair, verified on construction against the
    privacy-blanket pair (k >= 3), the general eps0-LDP bounds (k-RR is eps0-LDP), and for
    k = 2 the exact worst case over data sets of
    :mod:`shuffledp.accounting.amplification.binary_rr` (n <= 2e5; computed only when the
    cheaper bounds do not prove the pair). ``delta=None`` derives it. Composition uses the
    privacy-blanket pair (k >= 3) or the stronger-clone pair (k = 2), see the module notes.

    Attributes
    ----------
    n : int
        Users (reports shuffled).
    k : int
        Domain size of the randomized response (>= 2).
    eps0 : float
        Local epsilon of each report.
    epsilon : float
        The release's epsilon.
    delta : float or None
        The release's delta (None: derived).
    neighbour : Neighbour
        The neighbour relation the pair is stated for.
    label : str
        Free text naming the release.
    """

    kind: ClassVar[str] = "shuffled_krr"
    n: int = 2
    k: int = 2
    eps0: float = 1.0
    epsilon: float = 1.0
    delta: float | None = None
    neighbour: Neighbour = Neighbour.REPLACE_ONE
    label: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        n, eps0, _ = _iv_shuffle(self.n, self.eps0, 0.5)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "eps0", eps0)
        object.__setattr__(self, "k", _iv_k(self.k))
        _iv_pair(self, derive=self._proven_delta)

    def _proven_delta(self, eps: float, stated: float | None = None) -> float:
        best = _shuffle_upper(self.n, self.eps0, 1.0, eps, stated)
        if self.k >= 3 and (stated is None or best > stated):
            best = min(best, _krr_upper(self.n, self.k, self.eps0, eps, stated))
        if self.k == 2 and stated is not None and best > stated:
            best = min(best, _binary_rr_upper(self.n, self.eps0, eps))
        return best

    def _proof(self) -> str:
        extra = ("the exact worst case of shuffled binary RR" if self.k == 2 else
                 f"the {self.k}-RR privacy blanket")
        return (f"the general shuffle bounds and {extra} for n={self.n}, k={self.k}, "
                f"eps0={self.eps0!r}")

    def certified(self) -> tuple[float, float]:
        return self.epsilon, _derived_delta(self)

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView:
        h = _iv_h(discretization)
        if self.k == 2:
            return PLDView(PLD(_clone_law(self.n, self.eps0, 1.0, "variation-ratio", h)),
                           "dominating pair")
        return PLDView(PLD(_krr_law(self.n, self.k, self.eps0, h)), "dominating pair")


@_register
@dataclass(frozen=True)
class EpsDelta(PrivacyEvent):
    """Any release known only by its (epsilon, delta) (or pure epsilon) guarantee.

    The stated pair is the event's only parameter (there is no mechanism to check it
    against): it enters every method as stated, so it must come from a proven guarantee.
    ``notion`` "approximate" composes by PLD through the [KOV15]_ pair; "metric_emd" and
    "discrete_emd" (d_EM-DP of [Imola]) compose by basic composition only (alpha adds up).

    Attributes
    ----------
    epsilon : float
        Stated epsilon (finite, >= 0).
    delta : float
        Stated delta, in [0, 1).
    guarantee_notion : {"approximate", "metric_emd", "discrete_emd"}
        The notion the pair refers to ("pure" is read as "approximate").
    neighbour : Neighbour
        The neighbour relation the pair is stated for.
    label : str
        Free text naming the release.
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
        return self.epsilon, _derived_delta(self)

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView | None:
        if self.guarantee_notion != "approximate":
            return None
        h = _iv_h(discretization)
        if self.epsilon > 700:
            raise NoPLD(f"epsilon={self.epsilon:g} > 700: the (eps, delta) pair's e^eps "
                        "overflows double precision")
        return PLDView(PLD(_pld.pure_pair(self.epsilon, _derived_delta(self), h)),
                       "pure pair" if self.delta == 0 else "(eps, delta) pair")

    @classmethod
    def from_guarantee(cls, g: Any, label: str = "") -> EpsDelta:
        return cls(epsilon=g.epsilon, delta=g.delta, guarantee_notion=g.notion,
                   neighbour=g.neighbour, label=label or g.theorem[:80])


@_register
@dataclass(frozen=True)
class Parallel(PrivacyEvent):
    """Events run on disjoint sets of users (one user's data reaches one branch).

    Attributes
    ----------
    branches : tuple of PrivacyEvent
        The events, one neighbour relation and one notion.
    neighbour : Neighbour
        The neighbour relation the pair is stated for.
    label : str
        Free text naming the release.
    """

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

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView | None:
        h = _iv_h(discretization)
        tilt = _iv_tilt(tilt)
        if len(set(self.branches)) == 1:
            return self.branches[0].pld(h, tilt)
        maybe = [e.pld(h, tilt) for e in self.branches]
        views = [w for w in maybe if w is not None]
        if len(views) < len(maybe):
            return None
        plds = [w.pld for w in views]
        top = max(p.max_loss() for p in plds)
        j_top = max(1, math.ceil(top / h - 1e-9))
        grid = np.max([p.delta_on_grid(j_top) for p in plds], axis=0)
        # where the curve is small the vectorised sums' cancellation allowance dominates:
        # there (at most 2000 points, the last first) the direct sums are tighter
        small = np.flatnonzero(grid < 1e-9)[::-1][:2000]
        for j in small:
            grid[j] = min(grid[j], max(p.delta(j * h) for p in plds))

        def worst(eps: float) -> float:
            j = round(eps / h)
            if abs(j * h - eps) <= 1e-9 * h and 0 <= j <= j_top:
                return float(grid[j])
            return max(p.delta(eps) for p in plds)

        # every curve is >= its infinity mass: the grid stops at the largest one (or the
        # largest finite loss, where the curves are evaluated too); beyond is the infinity
        # mass of the combined pair
        floor = max(CURVE_FLOOR, max(p.infinity_mass() for p in plds))
        pld = pld_from_curve(worst, h, top, floor=floor, label="parallel branches")
        return PLDView(pld, "max of branches")


@_register
@dataclass(frozen=True)
class Sequential(PrivacyEvent):
    """Steps run one after the other on the same users (one release made of several
    mechanisms, e.g. PrivHist's steps or the federated tree's rounds); later steps may
    depend on earlier outputs (adaptive composition).

    Attributes
    ----------
    steps : tuple of PrivacyEvent
        The events in order, one neighbour relation and one notion.
    neighbour : Neighbour
        The neighbour relation the pair is stated for.
    label : str
        Free text naming the release.
    """

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

    def pld(self, discretization: float = DEFAULT_DISCRETIZATION,
            tilt: float | None = None) -> PLDView | None:
        h = _iv_h(discretization)
        tilt = _iv_tilt(tilt)
        maybe = [e.pld(h, tilt) for e in self.steps]
        views = [w for w in maybe if w is not None]
        if len(views) < len(maybe):
            return None
        pld = views[0].pld
        for w in views[1:]:
            pld = pld.compose(w.pld, tilt)
        return PLDView(pld, "+".join(sorted({w.curve for w in views})))


# ----------------------------------------------------------------------- helpers
def _shuffle_tails(stated: float | None) -> tuple[float, ...]:
    """Binomial tail masses tried: the bound modules' default for a stated delta (the
    computation that certified it, usually remembered), then the composition's (1e-16)."""
    tails = [default_tail(stated)] if stated is not None and stated > 0 else []
    return tuple(tails + [1e-16])


def _shuffle_upper(n: int, eps0: float, d: float, eps: float, stated: float | None) -> float:
    """The smallest certified upper estimate of delta(eps) for n shuffled eps0-LDP (d_X)
    reports over the variation-ratio and clones pairs (exact divergences) and the closed
    form of [FMT21]_ Thm 3.1 (d = 1, within its condition). 0 at eps >= eps0 d (shuffling
    is post-processing of the eps0 d-DP reports)."""
    if eps >= eps0 * d:
        return 0.0
    best = math.inf
    for red in REDUCTIONS:
        for tail in _shuffle_tails(stated):
            try:
                mix = _mixture_cached(n, eps0, d, tail, red)
            except ValueError:
                continue
            best = min(best, _divergence(mix, eps)[1])
            if stated is not None and best <= stated:
                return best
    if d == 1.0 and stated is not None and 0 < stated < 1:
        if eps0 <= clones_validity_limit(n, stated) and clones_formula(n, eps0, stated) <= eps:
            best = min(best, stated)
    return best


def _krr_upper(n: int, k: int, eps0: float, eps: float, stated: float | None) -> float:
    """Upper estimate of delta(eps) from the exact k-RR blanket pair (k >= 3)."""
    if eps >= eps0:
        return 0.0
    best = math.inf
    tails = [krr_default_tail(stated, eps0)] if stated is not None and stated > 0 else []
    for t in tails + [1e-16 * 2.0 / (math.exp(eps0) + 1.0)]:
        try:
            bl = _blanket_cached(n, k, eps0, t)
        except ValueError:
            continue
        best = min(best, _blanket_divergence(bl, eps)[1])
        if stated is not None and best <= stated:
            break
    return best


@lru_cache(maxsize=64)
def _binary_rr_upper(n: int, eps0: float, eps: float) -> float:
    """Upper estimate of the exact worst case of shuffled binary RR at eps (n <= 2e5)."""
    if n > _binary_core.MAX_N:
        return math.inf
    return _binary_core.worst_case(n, eps0, eps)[1]


@lru_cache(maxsize=16)
def _clone_law(n: int, eps0: float, d: float, reduction: str, h: float) -> Any:
    """The clones / variation-ratio pair's law (cached: it depends on the pair only)."""
    mix = _mixture_cached(n, eps0, d, 1e-16, reduction)
    return _pld.from_curve(lambda e: _divergence(mix, e)[1], h, mix.ad,
                           label=f"{reduction} pair", stride=_CURVE_STRIDE)


@lru_cache(maxsize=16)
def _krr_law(n: int, k: int, eps0: float, h: float) -> Any:
    """The k-RR privacy-blanket pair's law (cached)."""
    tail = 1e-16 * 2.0 / (math.exp(eps0) + 1.0)
    bl = _blanket_cached(n, k, eps0, tail)
    return _pld.from_curve(lambda e: _blanket_divergence(bl, e)[1], h, eps0,
                           floor=max(CURVE_FLOOR, 4 * tail * (math.exp(eps0) + 1)),
                           label=f"{k}-RR blanket pair", stride=_CURVE_STRIDE)


def event_notion(e: PrivacyEvent) -> str:
    return getattr(e, "event_notion", e.notion)


def check_same_neighbour(a: Neighbour, b: Neighbour, what: str = "events") -> None:
    """Refuse to compose events stated for different neighbour relations.

    Parameters
    ----------
    a, b : Neighbour
        The relations of the two events.
    what : str
        What is composed, for the message.

    Raises
    ------
    ValueError
        ``a`` and ``b`` differ.

    References
    ----------
    [ZDW22]_ Thm 10 (dominating pairs compose for one neighbour relation).
    """
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


def _derived_delta(e: Any) -> float:
    """``e.delta``, which :func:`_iv_pair` set on construction (refused if it is missing)."""
    if e.delta is None:
        raise ValueError(f"{type(e).kind} event: delta is not set, got delta=None")
    return float(e.delta)


def _iv_pair(e: Any, derive: Callable[..., float] | None = None) -> None:
    """Check (and, with ``derive``, verify or derive) an event's ``epsilon`` and ``delta``.

    ``derive(eps, stated)`` returns a certified upper estimate of the mechanism's delta at
    eps; a stated delta below it is refused (the parameters do not prove it), a missing
    one (None) is set to it.
    """
    kind = type(e).kind
    eps = v.real("epsilon", e.epsilon)
    if not (eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be finite and >= 0, got epsilon={e.epsilon!r}")
    object.__setattr__(e, "epsilon", eps)
    if e.delta is None:
        if derive is None:
            raise ValueError(f"{kind} event: delta must be given, got delta=None")
        d = float(derive(eps, None))
        if not d < 1.0:
            raise ValueError(f"{kind} event: its parameters prove no delta below 1 at "
                             f"epsilon={eps!r}")
        object.__setattr__(e, "delta", float(d))
        return
    d = v.real("delta", e.delta)
    if not 0.0 <= d < 1.0:
        raise ValueError(f"delta must be in [0, 1), got delta={e.delta!r}")
    object.__setattr__(e, "delta", d)
    if derive is not None:
        proven = float(derive(eps, d))
        if not proven <= d:
            raise ValueError(
                f"{kind} event: epsilon={e.epsilon!r}, delta={e.delta!r} is not implied by "
                f"its parameters: {e._proof()} give delta <= {proven:.6g} at that epsilon; "
                "refusing an event whose stated guarantee its parameters do not prove")


def polya_sum_event(level_epsilons: Sequence[float], sensitivities: Sequence[int],
                    dimensions: Sequence[int], delta: float, neighbour: Neighbour | str,
                    model: str = "shuffle") -> PolyaSum:
    """The :class:`PolyaSum` event of a release whose per-level noise sums to DL(e^{-eps_i /
    Delta_i}) and whose delta is (1 + e^eps) tau ([BBGN20]_; the sampler's and split-and-mix's
    statistical distances), eps = sum eps_i: tv = delta / (1 + e^eps).

    Parameters
    ----------
    level_epsilons : sequence of float
        eps_i of each level.
    sensitivities : sequence of int
        l1-sensitivity Delta_i of each level.
    dimensions : sequence of int
        Cells m_i of each level.
    delta : float
        The release's delta, (1 + e^eps) tau.
    neighbour : Neighbour or str
        The relation the release is stated for.
    model : str
        "shuffle" or "central" (recorded on the event).

    Returns
    -------
    PolyaSum
        The release's event.

    Raises
    ------
    ValueError
        The sequences differ in length, ``neighbour`` is not a relation, or a level's
        parameters are out of range (checked by :class:`DiscreteLaplace` and
        :class:`PolyaSum`).

    References
    ----------
    [Bagdasaryan22]_ Thm 4.2 (Polya differences sum to DL); [BBGN20]_ (split-and-mix).
    """
    nb = Neighbour.parse(neighbour)
    levels = tuple(DiscreteLaplace(parameter=float(e) / int(s), sensitivity=int(s),
                                   dimension=int(m), neighbour=nb)
                   for e, s, m in zip(level_epsilons, sensitivities, dimensions, strict=True))
    eps = math.fsum(e.epsilon for e in levels)
    d = float(delta)
    tv = math.exp(math.log(d) - _log1pexp(eps)) if d > 0 else 0.0
    return PolyaSum(levels=levels, tv=tv, delta=d, model=model, neighbour=nb)


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
    "NoPLD",
    "PLDView",
    "Parallel",
    "PolyaSum",
    "PrivacyEvent",
    "ShuffledKRR",
    "ShuffledLDP",
    "Sequential",
    "check_same_neighbour",
    "event_from_dict",
    "pld_from_curve",
    "polya_sum_event",
]
