"""Parameters of the shuffle-model summation protocol behind the heatmap ([Ghazi23]_ App. F).

Each user j holds the level vectors of her pyramid measurement (levels start..L, unscaled
counts P_i p_j, each summing to 1), scales them by B, rounds them to integers with a rule that
keeps each level's entries in [0, B] and its sum <= B ("floor") or exactly B
("largest_remainder"), adds per coordinate Polya(1/n_min, a_i) - Polya(1/n_min, a_i) noise,
splits the noisy vector into r additive shares over Z_q and sends one message
(coordinate, share) per share. The analyzer sums mod q per coordinate and decodes the
representative in the window [-decode_low, q - 1 - decode_low].

What is fixed here (with the slips of the App. F text corrected, see docs/errata.md):

* Sensitivity. The l1-sensitivity of the scaled, rounded level-i vector is
  Delta_i = B (add/remove one user) or Delta_i = 2B (replace one user, n public: the
  neighbour notion of the summation protocol of [BBGN20]_ that App. F uses), for both rounding
  rules (entries >= 0 and level sum <= B).
* Noise. a_i = exp(-eps_i / Delta_i) -- NOT e^{-eps_i} as printed in App. F. The sum over
  n_min users of Polya(1/n_min, a) - Polya(1/n_min, a) is exactly DL(a) ([Bagdasaryan22]_
  Thm 4.2 and eq. 4), P(Z = k) = (1 - a)/(1 + a) a^{|k|}, which is eps_i-DP for
  sensitivity Delta_i. The per-level budgets eps_i follow the split of [Ghazi23]_ (proof of
  Thm 3.1) and add up to eps by basic composition.
* Dropouts ([Bagdasaryan22]_ Sec. 4): the Polya shape is 1/n_min with
  n_min = ceil((1 - dropout) n), so any >= n_min surviving users still contribute at least
  DL(a_i). If more users drop out the guarantee is void (the protocol must then release
  nothing).
* Modulus with headroom. App. F sets q = B n, but a cell holding all the mass then sums to
  B n = 0 mod q and negative noise wraps. Here every true sum lies in [0, n B]; with t the
  smallest integer such that m P(|noise| > t) <= wrap_target (per coordinate tail, union over
  the m coordinates), q = n B + 2 t + 1 and decode_low = t ("shifted" window, the minimal q),
  or q = 2 (n B + t) + 1 and decode_low = n B + t ("centred" window). The tail of DL(a) is
  exact: P(|Z| > t) = 2 a^{t+1} / (1 + a). With dropout > 0 and all n users present the noise
  is X - Y with X, Y ~ NegBin(n / n_min, a) and P(|X - Y| > t) <= 2 P(X > t) is used.
  Wrap-around costs accuracy, never privacy (reduction mod q is post-processing).
* Number of shares (App. F, quoting [BBGN20]_ Cor. 6 and Lemma 5.2):
  r = ceil((2 ln(e^eps + 1) + 2 ln(m/delta) + ln q) / ln n + 1), recomputed here with the q
  actually used (with headroom) and with n_min in place of n (fewest users whose messages
  are mixed; conservative).
* Communication: r m messages of ceil(log2(m q)) bits (App. F, "Communication").

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps" -- full entry in
   docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics" -- full entry in
   docs/references.md
.. [BBGN20] Balle et al. (2020), "Private Summation in the Multi-Message Shuffle Model" -- full
   entry in docs/references.md
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.budget import (
    BUDGET_RULES,
    DEFAULT_DROPOUT,
    DEFAULT_GAMMA,
    auto_level_budgets,
    dl_parameter,
    level_budgets,
    share_shape,
    start_level,
    sum_up,
)
from shuffledp.accounting.events import polya_sum_event
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR, Guarantee, Neighbour
from shuffledp.grid import Grid

ROUNDING_RULES = ("floor", "largest_remainder")
#: the exact Polya sampler's table (:mod:`shuffledp.encoders.noise.polya`) stops once the
#: remaining tail is provably <= 2^-POLYA_TAIL_BITS, and holds at most POLYA_MAX_TABLE entries
POLYA_TAIL_BITS = 120
POLYA_MAX_TABLE = 1 << 24
#: Bound on the total variation of one table draw for any shape <= 1 (tables are capped at
#: POLYA_MAX_TABLE entries): 2 (2^-120 + (K + 2) 2^-127 + (K + 2)^2 2^-190) at K = 2^24;
#: every delta split charges it per draw.
SAMPLER_TV_MAX = 2.0 * (2.0**-POLYA_TAIL_BITS + (POLYA_MAX_TABLE + 2) * 2.0**-127
                        + (POLYA_MAX_TABLE + 2) ** 2 * 2.0**-190)


def check_rounding(rounding: str) -> str:
    """Validate a rounding rule name.

    Parameters
    ----------
    rounding : str
        "floor" or "largest_remainder" (the rules that keep a level's entries in [0, B]).

    Returns
    -------
    str
        ``rounding``, checked.

    Raises
    ------
    ValueError
        ``rounding`` is not one of :data:`ROUNDING_RULES`.

    References
    ----------
    [Ghazi23]_ App. F (scaling and rounding of the level vectors; see the module notes).
    """
    if rounding not in ROUNDING_RULES:
        raise ValueError(f"rounding must be one of {ROUNDING_RULES}, got rounding={rounding!r}")
    return rounding


def check_scale(B: int) -> int:
    """Validate the integer scaling factor B >= 1.

    Parameters
    ----------
    B : int
        Scale of the level vectors before rounding (an integer >= 1).

    Returns
    -------
    int
        ``B``, checked.

    Raises
    ------
    TypeError, ValueError
        ``B`` is not an integer >= 1.

    References
    ----------
    [Ghazi23]_ App. F (the scale B).
    """
    return v.count("B", B, 1)


#: largest modulus the protocol record and wire format accept (ProtocolParams: q <= 2^32)
MAX_Q = 1 << 32
#: largest message, ceil(log2 m) + ceil(log2 q) bits (one unsigned 64-bit word on the wire)
MAX_RECORD_BITS = 64
NEIGHBOURS = ("replace", "zero_out", "add_remove")  # tokens of Neighbour
DECODINGS = ("shifted", "centred")




@dataclass(frozen=True)
class SummationParameters:
    """Everything the shuffle summation protocol needs, with its privacy guarantee.

    Attributes
    ----------
    n, n_min : int
        Users provisioned for, and fewest survivors for which the guarantee holds.
    epsilon, delta : float
        Target (eps, delta) of the release.
    B : int
        Scaling factor.
    m : int
        Number of coordinates (sum of the measured level sizes).
    level_sizes : tuple of int
        m_i of every measured level (first = start level).
    levels : tuple of int or None
        Pyramid level index of every measured level (None when built from level_sizes).
    rounding, neighbour, decoding : str
    dropout : float
    level_epsilons : tuple of float
        eps_i (sum <= epsilon).
    level_sensitivities : tuple of int
        Delta_i (B or 2B).
    dl_parameters : tuple of float
        a_i = exp(-eps_i / Delta_i), rounded toward 1 where the float would lose more than
        eps_i (:func:`~shuffledp.accounting.budget.dl_parameter`): the total noise per
        coordinate of level i is DL(a_i).
    polya_shape : float
        1 / n_min, rounded up where the float is below it
        (:func:`~shuffledp.accounting.budget.share_shape`): every user draws
        Polya(polya_shape, a_i) - Polya(polya_shape, a_i).
    level_noise_std : tuple of float
        Standard deviation of DL(a_i), sqrt(2 a_i) / (1 - a_i) ([Bagdasaryan22]_ eq. 5).
    headroom : int
        t: the noise stays in [-t, t] on every coordinate except with prob. wrap_probability.
    q : int
        Modulus.
    decode_low : int
        A sum s mod q decodes to ((s + decode_low) mod q) - decode_low.
    r : int
        Shares per coordinate.
    messages_per_user, bits_per_message, bits_per_user : int
        r m, ceil(log2(m q)), r m ceil(log2(m q)).
    wrap_target, wrap_probability : float
        Requested and achieved union bound on any coordinate leaving the decoding window.
    delta_parts : dict
        How delta is spent.
    guarantee : Guarantee
    notes : tuple of str
    gamma : float
        Decay of the per-level budget the split used.
    budget_rule : {"auto", "paper"}
        The rule of the per-level split (:data:`~shuffledp.accounting.budget.BUDGET_RULES`):
        ``"paper"`` as printed, ``"auto"``
        :func:`~shuffledp.accounting.budget.auto_level_budgets` with n public.
    """

    n: int
    n_min: int
    epsilon: float
    delta: float
    B: int
    m: int
    level_sizes: tuple[int, ...]
    levels: tuple[int, ...] | None
    rounding: str
    neighbour: str
    decoding: str
    dropout: float
    level_epsilons: tuple[float, ...]
    level_sensitivities: tuple[int, ...]
    dl_parameters: tuple[float, ...]
    polya_shape: float
    level_noise_std: tuple[float, ...]
    headroom: int
    q: int
    decode_low: int
    r: int
    messages_per_user: int
    bits_per_message: int
    bits_per_user: int
    wrap_target: float
    wrap_probability: float
    delta_parts: dict = field(default_factory=dict, compare=False)
    guarantee: Guarantee | None = field(default=None, compare=False)
    notes: tuple[str, ...] = ()
    gamma: float = DEFAULT_GAMMA
    budget_rule: str = "auto"

    @property
    def start(self) -> int | None:
        """First measured pyramid level (None when built from level_sizes)."""
        return None if self.levels is None else self.levels[0]

    def coordinate_level(self) -> np.ndarray:
        """Index (into the measured levels) of every one of the m coordinates."""
        return np.repeat(np.arange(len(self.level_sizes)), self.level_sizes)

    def to_dict(self) -> dict:
        out = {}
        for k in (
            "n", "n_min", "epsilon", "delta", "B", "m", "level_sizes", "levels", "rounding",
            "neighbour", "decoding", "dropout", "level_epsilons", "level_sensitivities",
            "dl_parameters", "polya_shape", "level_noise_std", "headroom", "q", "decode_low",
            "r", "messages_per_user", "bits_per_message", "bits_per_user", "wrap_target",
            "wrap_probability", "budget_rule",
        ):
            val = getattr(self, k)
            out[k] = list(val) if isinstance(val, tuple) else val
        out["delta_parts"] = dict(self.delta_parts)
        out["notes"] = list(self.notes)
        out["guarantee"] = None if self.guarantee is None else self.guarantee.to_dict()
        return out


# --------------------------------------------------------------------------- tails
def _dl_tail(a: float, t: int) -> float:
    """P(|Z| > t) for Z ~ DL(a): 2 a^{t+1} / (1 + a) (exact; 0 when a underflowed to 0)."""
    if a == 0.0:
        return 0.0
    return math.exp(math.log(2.0) + (t + 1) * math.log(a) - math.log1p(a))


def _noise_tail(a: float, t: int, shape: float = 1.0) -> float:
    """Upper bound on P(|X - Y| > t), X, Y iid NegBin(shape, a) (exact for shape = 1).

    shape = 1 is DL(a) (exact formula); otherwise 2 P(X > t) (union bound).
    """
    if shape == 1.0:
        return _dl_tail(a, t)
    from scipy.stats import nbinom  # on first use: scipy.stats takes ~0.4 s to import

    return min(1.0, 2.0 * float(nbinom.sf(t, shape, 1.0 - a)))


def _headroom(a: float, log_a: float, shape: float, target: float, t_max: int) -> int:
    """Smallest integer t >= 0 with _noise_tail(a, t, shape) <= target; ValueError if > t_max.

    ``log_a`` = ln a = -eps_i / Delta_i is passed exactly (ln of a rounded a is 0 once
    eps_i / Delta_i < 1e-16). The DL(a) tail 2 a^{t+1}/(1+a) is a lower bound of the tail
    for every shape >= 1 (NegBin(shape) dominates the geometric), so its t starts the search
    and decides the refusal without evaluating any tail when even it exceeds ``t_max``.
    """
    # 2 a^{t+1}/(1+a) <= target  <=>  (t+1) ln a <= ln(target (1+a)/2)
    t_dl = math.log(target * (1.0 + a) / 2.0) / log_a - 1.0
    if not t_dl <= t_max:
        raise _HeadroomError(t_dl)
    t = max(0, math.ceil(t_dl))
    if _noise_tail(a, t, shape) > target:  # shape > 1: gallop, then bisect, up to t_max
        lo, step = t, 1
        while _noise_tail(a, t, shape) > target:
            if t >= t_max:
                raise _HeadroomError(t_max + 1)
            lo, t = t, min(t_max, t + step)
            step *= 2
        while t - lo > 1:
            mid = (lo + t) // 2
            lo, t = (lo, mid) if _noise_tail(a, mid, shape) <= target else (mid, t)
    while t > 0 and _noise_tail(a, t - 1, shape) <= target:
        t -= 1
    return t


class _HeadroomError(ValueError):
    """The noise needs more headroom than a modulus <= MAX_Q leaves."""

    def __init__(self, t: float) -> None:
        super().__init__(t)
        self.t = t


def _headroom_limit(nB: int, decoding: str) -> int:
    """Largest headroom t whose modulus stays <= MAX_Q (shifted or centred layout)."""
    if decoding == "shifted":  # q = n B + 2 t + 1
        return (MAX_Q - 1 - nB) // 2
    return (MAX_Q - 1) // 2 - nB  # q = 2 (n B + t) + 1


def _check_wire_limits(m: int, q: int) -> None:
    """ProtocolParams' limits on the modulus and the message size, as one-line errors."""
    if q > MAX_Q:
        raise ValueError(f"q must be <= 2^32, got q={q}; lower B or n")
    bits = max(1, (m - 1).bit_length()) + (q - 1).bit_length()
    if bits > MAX_RECORD_BITS:
        raise ValueError(
            f"messages need {bits} bits > {MAX_RECORD_BITS} (ceil(log2 m) + ceil(log2 q) with "
            f"m={m}, q={q}); lower q or the grid"
        )


def shares_needed(epsilon: float, delta: float, m: int, q: int, n: int) -> int:
    """r of [Ghazi23]_ App. F ([BBGN20]_ Cor. 6 / Lemma 5.2).

    r = ceil((2 ln(e^eps + 1) + 2 ln(m/delta) + ln q) / ln n + 1), with ln(e^eps + 1)
    evaluated as eps + log1p(e^{-eps}).

    Parameters
    ----------
    epsilon : float
        Epsilon of the summation (> 0).
    delta : float
        Delta left to split-and-mix, in (0, 1).
    m : int
        Coordinates summed (>= 1).
    q : int
        Modulus (>= 2).
    n : int
        Users whose messages are mixed (>= 2; the protocol passes n_min).

    Returns
    -------
    int
        The number r of additive shares per coordinate.

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range.

    References
    ----------
    [Ghazi23]_ App. F; [BBGN20]_ Cor. 6 and Lemma 5.2.
    """
    epsilon = v.positive("epsilon", epsilon)
    delta = v.probability("delta", delta)
    m = v.count("m", m, 1)
    q = v.count("q", q, 2)
    n = v.count("n", n, 2)
    # ln(m/delta) = ln m - ln delta: m/delta overflows for tiny delta
    num = 2.0 * (epsilon + math.log1p(math.exp(-epsilon))) + 2.0 * (math.log(m) - math.log(delta))
    num += math.log(q)
    return math.ceil(num / math.log(n) + 1.0)


def delta_split(epsilon: float, delta: float, n: int, m: int) -> tuple[float, float]:
    """(delta_mix, delta_sampler): the part of delta left to split-and-mix, and the part
    charged to the Polya sampler.

    The Polya noise comes from exact tables whose law is within ``SAMPLER_TV_MAX`` of the
    ideal per draw (:mod:`shuffledp.encoders.noise.polya`; two draws per coordinate, at most n
    users, m coordinates). If a mechanism is (eps, delta_mix)-DP and another is within total
    variation tau of it on every input, the latter is (eps, delta_mix + (1 + e^eps) tau)-DP;
    here tau <= 2 n m SAMPLER_TV_MAX by coupling.

    Parameters
    ----------
    epsilon : float
        Epsilon of the release.
    delta : float
        Total delta of the release.
    n : int
        Users (each draws two Polya variates per coordinate).
    m : int
        Coordinates.

    Returns
    -------
    tuple of float
        (delta_mix, delta_sampler), summing to ``delta``.

    Raises
    ------
    ValueError
        The sampler's part (1 + e^eps) tau is not below delta / 2.

    References
    ----------
    [Ghazi23]_ App. F (split-and-mix delta); the total-variation charge is the one of
    :class:`~shuffledp.accounting.events.PolyaSum` (see its notes).
    """
    tau = 2.0 * n * m * SAMPLER_TV_MAX
    delta_sampler = (1.0 + math.exp(min(float(epsilon), 700.0))) * tau
    if not delta_sampler < delta / 2:
        raise ValueError(
            f"the noise sampler's total variation, (1 + e^epsilon) * {tau:.3g} = "
            f"{delta_sampler:.3g} (n={n}, m={m}), is not below delta / 2 for "
            f"epsilon={epsilon!r}, delta={delta!r}: increase delta or lower epsilon"
        )
    return delta - delta_sampler, delta_sampler


# --------------------------------------------------------------------------- main entry
def summation_parameters(
    *,
    n: int,
    epsilon: float,
    delta: float,
    B: int,
    grid=None,
    level_sizes: Sequence[int] | None = None,
    w: int = 20,
    gamma: float = DEFAULT_GAMMA,
    rounding: str = "largest_remainder",
    neighbour: Neighbour | str = DEFAULT_NEIGHBOUR,
    dropout: float = DEFAULT_DROPOUT,
    wrap_target: float = 1e-12,
    decoding: str = "shifted",
    budget: str = "auto",
) -> SummationParameters:
    """Derive q, r, noise and communication of the App. F shuffle heatmap protocol.

    Parameters
    ----------
    n : int
        Users provisioned for (>= 2; public).
    epsilon : float
        Total epsilon (> 0), split over the measured levels by the rule ``budget``
        ([Ghazi23]_ proof of Thm 3.1: any split summing to eps, basic composition).
    delta : float
        In (0, 1): spent on the split-and-mix hiding of [BBGN20]_.
    B : int
        Scaling factor (>= 1).
    grid : Grid or str, optional
        The heatmap grid (``Grid`` or ``"WIDTHxHEIGHT"``); measured levels are
        start..L with start = min(floor(log2 sqrt(w)), L) ([Ghazi23]_ Sec. 4).
    level_sizes : sequence of int, optional
        Alternative to ``grid``: the sizes m_i of the measured levels, first one weighted
        gamma^0.
    w : int, default 20
        Reconstruct's top-w; fixes the start level (grid only).
    gamma : float, default 1/sqrt(2)
        Decay of the per-level budget.
    rounding : {"largest_remainder", "floor"}
    neighbour : Neighbour or {"zero_out", "replace", "add_remove"}, default DEFAULT_NEIGHBOUR
        ``zero_out`` is the toolkit's one default
        (:data:`~shuffledp.accounting.guarantee.DEFAULT_NEIGHBOUR`). ``replace``: replace one
        user's input, n public (Delta_i = 2B; the notion of [BBGN20]_). ``zero_out``: one
        user's input replaced by nothing, the user still sends her noise shares, n public
        (Delta_i = B). ``add_remove`` is refused (``ValueError``):
        the Polya shape 1/n_min depends on n, so one user more or less changes every user's
        noise law.
    dropout : float, default :data:`DEFAULT_DROPOUT` (0.05)
        Declared dropout fraction in [0, 1); n_min = ceil((1 - dropout) n) must be >= 2.
        The noise is planned for n_min users ([Bagdasaryan22]_ Sec. 4), so a release with
        fewer is refused; 0 plans for exactly n (one lost user then refuses the round).
    wrap_target : float, default 1e-12
        Bound on the probability that the noise pushes any coordinate out of the decoding
        window (union bound over the m coordinates).
    decoding : {"shifted", "centred"}
        Decoding window [-t, q - 1 - t] (minimal q) or centred (q = 2 (n B + t) + 1).
    budget : {"auto", "paper"}, default "auto"
        The split of eps over the measured levels, the same rule and default as
        ``central_heatmap(budget=...)``: ``"paper"`` eps_i = eps gamma^i / Z as printed
        ([Ghazi23]_ Sec. 4); ``"auto"``
        :func:`~shuffledp.accounting.budget.auto_level_budgets` with the grid's pixels
        (the finest level's size with ``level_sizes``) and n, public under both relations
        the protocol supports, so the leaf level gets more of eps when eps n / N is large.
        Either split sums to at most eps.

    Returns
    -------
    SummationParameters
        q, r, the level noise, the decoding window, the message sizes and the
        :class:`~shuffledp.accounting.guarantee.Guarantee` (with its ``PolyaSum`` event).

    Raises
    ------
    TypeError
        ``level_sizes`` is not a sequence of integers, or an integer argument is not one.
    ValueError
        An argument is out of its range, ``budget`` is not "auto" or "paper", both or
        neither of ``grid`` and ``level_sizes`` are given, n_min < 2, a level budget
        underflows, the noise needs a modulus above 2^32 (:data:`MAX_Q`) or a message
        above :data:`MAX_RECORD_BITS` bits, or the sampler's part of delta is not below
        delta / 2 (:func:`delta_split`).

    References
    ----------
    [Ghazi23]_ App. F, Thm 3.1 and Sec. 4; [BBGN20]_ Cor. 6 and Lemma 5.2;
    [Bagdasaryan22]_ Thm 4.2, eq. 4 and Sec. 4.
    """
    n, eps, delta, B, sizes, levels, gamma, rounding, neighbour, dropout, wrap_target, \
        decoding = _iv_summation(n, epsilon, delta, B, grid, level_sizes, w, gamma, rounding,
                                 neighbour, dropout, wrap_target, decoding)
    budget = v.choice("budget", budget, BUDGET_RULES)
    nbr = Neighbour.parse(neighbour)  # already parsed by _iv_summation: typed here
    m = int(sum(sizes))
    n_min = _minimum_users(n, dropout)
    budgets, sens, a, std = _level_noise(eps, gamma, sizes, nbr, B, budget, n)
    shape = n / n_min  # all n present: noise per coordinate is NegBin(n/n_min, a) differences
    t, q, low = _modulus(n, B, m, eps, budgets, sens, a, shape, wrap_target, decoding)
    margin = min(low, q - 1 - low - n * B)  # = t in both layouts
    wrap = min(1.0, sum(mi * _noise_tail(ai, margin, shape) for mi, ai in zip(sizes, a,
                                                                               strict=True)))
    delta_mix, delta_sampler = delta_split(eps, delta, n, m)
    r = shares_needed(eps, delta_mix, m, q, n_min)
    bits_msg = (m * q - 1).bit_length()  # ceil(log2(m q))
    notes = _notes(n_min, t, wrap, nbr)
    g = _guarantee(delta, nbr, budgets, sens, sizes, a, notes,
                   {"n": n, "n_min": n_min, "B": B, "m": m, "q": q, "r": r,
                    "rounding": rounding, "dropout": dropout, "budget_rule": budget,
                    "leaf_share": budgets[-1] / eps})
    return SummationParameters(
        n=n, n_min=n_min, epsilon=eps, delta=delta, B=B, m=m, level_sizes=tuple(sizes),
        levels=levels, rounding=rounding, neighbour=neighbour, decoding=decoding,
        dropout=dropout, level_epsilons=budgets, level_sensitivities=sens, dl_parameters=a,
        polya_shape=share_shape(n_min), level_noise_std=std, headroom=t, q=q, decode_low=low, r=r,
        messages_per_user=r * m, bits_per_message=bits_msg, bits_per_user=r * m * bits_msg,
        wrap_target=wrap_target, wrap_probability=wrap,
        delta_parts={"split_and_mix": delta_mix, "noise_sampler": delta_sampler}, gamma=gamma,
        guarantee=g, notes=tuple(notes), budget_rule=budget,
    )


def _minimum_users(n: int, dropout: float) -> int:
    """n_min = ceil((1 - dropout) n), the users the noise is planned for ([Bagdasaryan22]_
    Sec. 4: over-provision the noise for the declared dropout fraction); ValueError if < 2."""
    n_min = math.ceil((1.0 - dropout) * n - 1e-9)
    if n_min < 2:
        raise ValueError(
            f"dropout={dropout} leaves n_min = ceil((1 - dropout) n) = {n_min} < 2 users "
            f"for n={n}"
        )
    return n_min


def _level_noise(eps: float, gamma: float, sizes: tuple[int, ...], neighbour: Neighbour,
                 B: int, budget: str, n: int) -> tuple[tuple[float, ...], tuple[int, ...],
                                                       tuple[float, ...], tuple[float, ...]]:
    """The budget split and each level's discrete Laplace: (eps_i, Delta_i, a_i, std_i).

    eps_i by the rule ``budget`` over the measured levels, summing to at most eps
    ([Ghazi23]_ proof of Thm 3.1): ``"paper"`` proportional to gamma^i, ``"auto"``
    :func:`auto_level_budgets` with N = the finest level's size (the grid's pixels) and the
    public n (zero-out and replace-one: the only relations the protocol supports); Delta_i
    the scaled level vector's sensitivity under ``neighbour`` (entries
    in [0, B], level sum <= B under both rounding rules); a_i = exp(-eps_i / Delta_i) and
    std_i = sqrt(2 a_i) / (1 - a_i), the standard deviation of DL(a_i).
    """
    top = len(sizes) - 1
    split = (auto_level_budgets(eps, 0, top, sizes[-1], n, gamma) if budget == "auto"
             else level_budgets(eps, 0, top, gamma))
    budgets = tuple(float(e) for e in split)  # exact sum <= eps (exact_at_most)
    if not min(budgets) > 0:
        raise ValueError(f"a level budget underflows to 0 (or is not a number) with "
                         f"epsilon={eps!r}, gamma={gamma!r} over {len(sizes)} levels")
    sens_one = neighbour.level_sensitivity(B)
    sens = tuple(sens_one for _ in sizes)
    # a_i = exp(-eps_i / Delta_i): NOT e^{-eps_i} (slip in [Ghazi23] App. F, docs/errata.md)
    # rounded toward 1 where the float would lose more than eps_i (dl_parameter)
    a = tuple(dl_parameter(e, s) for e, s in zip(budgets, sens, strict=True))
    std = tuple(math.sqrt(2.0 * ai) / (1.0 - ai) for ai in a)
    return budgets, sens, a, std


def _modulus(n: int, B: int, m: int, eps: float, budgets: tuple[float, ...],
             sens: tuple[int, ...], a: tuple[float, ...], shape: float, wrap_target: float,
             decoding: str) -> tuple[int, int, int]:
    """The search for q: (headroom t, modulus q, decode_low).

    t >= 1 is the smallest headroom with P(|noise_i| > t) <= wrap_target / m on every level
    (a union bound over the m coordinates gives the wrap target); then q = n B + 2 t + 1 with
    the window [-t, q - 1 - t] (``"shifted"``) or q = 2 (n B + t) + 1 centred. ValueError
    when q would exceed 2^32 or a message its bit budget (ProtocolParams' limits).
    """
    per_coord = wrap_target / m
    # ProtocolParams' limits: q <= 2^32 and a headroom t >= 1 (decode_low >= 1)
    t_max = _headroom_limit(n * B, decoding)
    if t_max < 1:
        _check_wire_limits(m, n * B + 3 if decoding == "shifted" else 2 * (n * B + 1) + 1)
    try:
        t = max(_headroom(ai, -e / s, shape, per_coord, t_max)
                for ai, e, s in zip(a, budgets, sens, strict=True))
    except _HeadroomError as exc:
        raise ValueError(
            f"the noise needs headroom t >= {exc.t:.4g} > {t_max}, so q would exceed 2^32 "
            f"(epsilon={eps!r} is too small for B={B}, n={n}, wrap_target={wrap_target!r}); "
            f"raise epsilon or wrap_target, or lower B or n"
        ) from None
    t = max(t, 1)
    if decoding == "shifted":
        q = n * B + 2 * t + 1
        low = t
    else:
        q = 2 * (n * B + t) + 1
        low = n * B + t
    _check_wire_limits(m, q)
    return t, q, low


def _notes(n_min: int, t: int, wrap: float, neighbour: Neighbour) -> list[str]:
    """The conditions the guarantee holds under, as the release states them."""
    notes = [
        f"holds while at least n_min={n_min} users' messages are all delivered "
        "(Bagdasaryan et al., PoPETs 2022, Sec. 4); with fewer survivors the noise is below "
        "DL(a_i) and nothing may be released",
        "r from App. F ([BBGN20] Cor. 6 / Lemma 5.2) recomputed with the modulus q with "
        "headroom and with n_min users",
        f"modulus has headroom t={t}: all sums decode exactly except with probability "
        f"<= {wrap:.3g} (wrap-around affects accuracy only)",
    ]
    if neighbour is Neighbour.ADD_REMOVE:
        notes.append("add/remove: the number of messages reveals the number of users; "
                     "[BBGN20]'s split-and-mix analysis is for a fixed, public n")
    return notes


def _guarantee(delta: float, neighbour: Neighbour, budgets: tuple[float, ...],
               sens: tuple[int, ...], sizes: tuple[int, ...], a: tuple[float, ...],
               notes: list[str], record: dict) -> Guarantee:
    """The guarantee assembly: (sum eps_i, delta)-shuffle DP with its composable event.

    ``record`` holds the protocol's numbers (n, n_min, B, m, q, r, rounding, dropout, the
    budget rule and the leaf level's share of eps); the
    event is, per level, DL(a_i) at sensitivity Delta_i, plus the statistical distance
    delta / (1 + e^eps) of split-and-mix and the sampler tables.
    """
    g = Guarantee(
        notion="approximate", model="shuffle", epsilon=sum_up(budgets), delta=delta,
        neighbour=neighbour,
        theorem=(
            "Ghazi et al., Differentially Private Heatmaps, AAAI 2023, App. F with Balle et "
            "al., CCS 2020, Cor. 6/Lemma 5.2 (split-and-mix, delta); distributed discrete "
            "Laplace from Polya differences (Bagdasaryan et al., PoPETs 2022, Thm 4.2, eq. 4) "
            "per level, eps_i split of Ghazi et al. proof of Thm 3.1 (basic composition)"
        ),
        parameters={**record, "level_epsilons": list(budgets), "dl_parameters": list(a)},
        notes=tuple(notes),
    )
    return g.with_event(polya_sum_event(budgets, sens, sizes, delta, neighbour, "shuffle"))


def _iv_summation(n, epsilon, delta, B, grid, level_sizes, w, gamma, rounding, neighbour,
                  dropout, wrap_target, decoding):
    n = v.count("n", n, 2)
    eps = v.positive("epsilon", epsilon)
    delta = v.probability("delta", delta)
    B = v.count("B", B, 1)
    gamma = v.positive("gamma", gamma)
    rounding = v.choice("rounding", rounding, ROUNDING_RULES)
    neighbour = Neighbour.parse(neighbour)
    if neighbour in (Neighbour.BOUNDED_EMD, Neighbour.DISCRETE_EMD):
        raise ValueError(
            f"neighbour must be one of {NEIGHBOURS}, got neighbour={neighbour.token!r}"
        )
    if neighbour is Neighbour.ADD_REMOVE:
        # every user's Polya shape is 1/n_min with n_min planned from n: a neighbour with one
        # user more or less changes the noise law of every coordinate, not only that user's
        # contribution, so no add/remove guarantee follows from the per-level DL calibration
        raise ValueError(
            "neighbour='add_remove' is refused for the shuffle summation protocol: the noise "
            "shape 1/n_min is planned from n, so adding or removing a user changes every "
            "user's noise and the stated guarantee would not hold; use 'replace' or "
            "'zero_out' (n public), or the federated release with a public population bound "
            "(shuffledp federated --max-users) for add/remove"
        )
    decoding = v.choice("decoding", decoding, DECODINGS)
    dropout = v.probability("dropout", dropout, closed_low=True)
    wrap_target = v.probability("wrap_target", wrap_target)
    if (grid is None) == (level_sizes is None):
        raise ValueError(
            f"give exactly one of grid and level_sizes, got grid={grid!r}, "
            f"level_sizes={level_sizes!r}"
        )
    levels = None
    if grid is not None:

        if not isinstance(grid, Grid):
            try:
                grid = Grid.parse(grid)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"grid must be a Grid or 'WIDTHxHEIGHT', got grid={grid!r}: "
                                 f"{exc}") from None
        w = v.count("w", w, 1)
        start = min(start_level(w), grid.depth)
        levels = tuple(range(start, grid.depth + 1))
        sizes = tuple(grid.level_size(i) for i in levels)
    else:
        if isinstance(level_sizes, (str, bytes)) or not isinstance(level_sizes, Sequence):
            raise TypeError(f"level_sizes must be a sequence of integers, got "
                            f"level_sizes={level_sizes!r}")
        if len(level_sizes) == 0:
            raise ValueError("level_sizes must not be empty, got level_sizes=[]")
        sizes = tuple(v.count(f"level_sizes[{k}]", s, 1) for k, s in enumerate(level_sizes))
    return (n, eps, delta, B, sizes, levels, gamma, rounding, neighbour, dropout, wrap_target,
            decoding)
