"""PrivHist: pure-DP release of an anonymized histogram in time sublinear in n ([Suresh19]_).

The algorithm boxes of [Suresh19]_ (PrivHist, PrivHist-LowPrivacy, PrivHist-HighPrivacy),
run on the prevalence form so that no step touches the n items one by one:

1. N = max(n + Z_a, 0), Z_a ~ G(e^-eps1) (the geometric mechanism, App. A).
2. T = ceil(sqrt(N min(eps, 1))), M = ceil(max(2 ln(N e^eps2), 1) / eps2) (the box's T and M;
   App. D substitutes T = sqrt(N), M = 2 log(N e^eps2) / eps2). M fake labels are added at
   T and T + 1, then Z_b ~ G(e^-eps2) labels move from T to T + 1:
   phi^b_{T+1} = phi^a_{T+1} + Z_b, phi^b_T = phi^a_T - Z_b. (The box prints
   phi^b_T = phi^b_T - Z_b, a slip: see docs/errata.md.) The result is cut at T into a low
   part (cumulative prevalences phi^{bs}_{r+} = max(0, sum_{s=r}^T phi^b_s), r <= T) and a
   high part (labels above T, the deficit of a negative phi^b_{T+1} removed from the
   smallest counts), :func:`split_histogram`.
3. G(e^-eps2) noise on each of the T low cumulative prevalences.
4. G(e^-eps2) noise on each sorted count of the high part (about n / T + M of them).
5. eps > 1: PrivHist-LowPrivacy (isotonic regression, rounding, removal of the fake labels).
6. eps <= 1: PrivHist-HighPrivacy: counts above 2N are moved to 2N, boundaries S (all of
   1..T, a geometric grid T (1 + q)^i up to T', the noisy high counts above T', and 2N), each
   prevalence split linearly between its two neighbouring boundaries, Laplace noise of scale
   1 / (eps3 (s_i - s_{i-1})) on the smoothed cumulative prevalence at s_i, weighted
   isotonic regression (weights (s_i - s_{i-1})^2), rounding.

Exact noise. Every geometric variable is the exact discrete Laplace sampler of [CKS20]_
(:func:`shuffledp.encoders.noise.laplace.discrete_laplace_for`, parameter exp(-s/t) with
s/t <= eps_i). The Laplace of step H4 runs on an integer query: d_i phi^{v}_{s_i+} =
d_i phi^u_{s_i+} + sum_{s_{i-1} < j < s_i} phi^u_j (j - s_{i-1}) (d_i = s_i - s_{i-1}) is an
integer whose value moves by exactly 1 (one coordinate) between neighbours. It is scaled by a
power of two R (``resolution``), receives DL noise of sensitivity R (so the release converges
to the paper's Laplace as R grows, and R = 1 is the geometric mechanism) and is divided by
R d_i with correctly rounded integer division: the float is a function of the noisy integer
only, so no floating-point artefact carries the true value ([Mironov12]_).

Privacy. N is eps1-DP; (H^cs, H^cl) is eps2-DP given N by the dataset-dependent composition
of [Suresh19]_ Thm 3 / Lemma 8 (checked exactly on small histograms in the tests); the
high-privacy output is eps3-DP given (N, H^cl) (Lemma 9); the rest is post-processing. The
release is (eps1 + eps2 [+ eps3])-DP under the relation of [Suresh19]_ Def. 1
(:attr:`~shuffledp.accounting.guarantee.Neighbour.SORTED_L1`).

References
----------
.. [Suresh19] Suresh (2019), "Differentially private anonymized histograms", algorithm boxes
   PrivHist, PrivHist-LowPrivacy, PrivHist-HighPrivacy; App. C (privacy), App. C.1.3 (budget
   split), App. D (T, M, T', q) -- full entry in docs/references.md
.. [CKS20] Canonne et al. (2020), "The discrete Gaussian for DP", Alg. 2 -- full entry in
   docs/references.md
.. [Mironov12] Mironov (2012), "Least significant bits for DP" -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy.optimize import isotonic_regression

from shuffledp import _validation as v
from shuffledp.accounting.composition import Accountant
from shuffledp.accounting.events import DiscreteLaplace, EpsDelta, Sequential
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.analyzers.privhist.histogram import AnonHistogram, as_histogram
from shuffledp.encoders.noise.laplace import discrete_laplace_for, dl_rational
from shuffledp.randomness import SEEDED_NOTE, RngLike, SecureRandom, is_seeded, noise_source

THEOREM = (
    "Suresh, Differentially private anonymized histograms, NeurIPS 2019: PrivHist, Thm 1, "
    "App. C (Lemmas 7-9, dataset-dependent composition Thm 3); geometric noise by the exact "
    "discrete Laplace sampler of Canonne, Kamath and Steinke, NeurIPS 2020, Alg. 2"
)
DEFAULT_RESOLUTION = 1 << 20
SPLITS = ("lean", "paper", "practical")
REGIMES = ("auto", "paper", "low", "high")

#: ``regime="auto"`` runs PrivHist-HighPrivacy only while eps * sqrt(N) < this (N the
#: released noisy count, so the choice is a function of an eps1-DP output and the public
#: eps: adaptive composition, the total stays eps). Measured on Zipf(1, 1.5), uniform and
#: geometric data at n in {1e4, 1e5}, eps in {0.1, 0.3, 1, 3} (``bench/privhist_error.py``):
#: HighPrivacy wins only at eps sqrt(n) ~ 10 (n = 1e4, eps = 0.1), LowPrivacy from ~30 up.
HIGH_PRIVACY_LOAD = 20.0


# ----------------------------------------------------------------------------- parameters


def budget_split(epsilon: float, split: Any = "paper", *,
                 high: bool | None = None) -> tuple[float, float, float]:
    """(eps1, eps2, eps3) for a total ``epsilon``.

    ``high`` says whether PrivHist-HighPrivacy runs (it spends eps3); default eps <= 1,
    the PrivHist box's switch.

    ``"lean"`` (the default of :func:`privhist`): eps1 = eps/20 (N only sets T and M, which
    tolerate a noisy N) and the rest to eps2 (eps3 unused) or split evenly between eps2 and
    eps3; measured 5-20% more accurate than ``"practical"`` on Zipf data at eps in {1, 3}.
    ``"paper"``: eps1 = eps2 = eps3 = eps/3 at every eps, as the PrivHist box prints it
    ("Parameters: eps1 = eps2 = eps3 = eps/3"). When PrivHist-LowPrivacy runs (the box's
    switch: eps > 1) eps3 is not used, so the release spends eps1 + eps2 = 2 eps/3 and its
    guarantee states 2 eps/3 (:func:`privhist` records ``eps3_unspent``); ``"lean"`` and
    ``"practical"`` spend the whole eps there. ``"practical"``: [Suresh19]_ App. C.1.3's
    remark, eps1 = eps/10 and the rest to eps2 (eps > 1, eps3 unused) or split evenly between
    eps2 and eps3 (eps <= 1). A 3-tuple is used as given: eps1, eps2 > 0, eps3 >= 0 (> 0 when
    eps <= 1) and eps1 + eps2 + eps3 <= eps.

    Parameters
    ----------
    epsilon : float
        Total budget, > 0.
    split : {"lean", "paper", "practical"} or (eps1, eps2, eps3)
        The rule, or the three budgets.
    high : bool, optional
        Whether PrivHist-HighPrivacy runs (default: epsilon <= 1).

    Returns
    -------
    tuple of float
        (eps1, eps2, eps3): for N, the split, and the high-privacy step (0 when unused).

    Raises
    ------
    TypeError
        If ``epsilon`` or a budget of a tuple ``split`` is not a real number.
    ValueError
        If ``epsilon`` is not positive, ``split`` is an unknown name or not a 3-tuple, a
        budget is out of range, or the three sum to more than ``epsilon``.

    References
    ----------
    [Suresh19]_ PrivHist box and App. C.1.3 (budget split).
    """
    eps = v.positive("epsilon", epsilon)
    high = eps <= 1 if high is None else bool(high)
    if isinstance(split, str):
        v.choice("split", split, SPLITS)
        if split == "paper":  # as printed, whether or not eps3 is used
            return (eps / 3, eps / 3, eps / 3)
        f = 20 if split == "lean" else 10
        if not high:
            return eps / f, eps * (f - 1) / f, 0.0
        return eps / f, eps * (f - 1) / (2 * f), eps * (f - 1) / (2 * f)
    try:
        e1, e2, e3 = split
    except (TypeError, ValueError):
        raise ValueError(
            f"split must be one of {SPLITS} or a tuple (eps1, eps2, eps3), got split={split!r}"
        ) from None
    e1 = v.positive("eps1", e1)
    e2 = v.positive("eps2", e2)
    e3 = v.positive("eps3", e3) if high else v.interval("eps3", e3, 0, math.inf,
                                                        open_low=False)
    if e1 + e2 + e3 > eps * (1 + 1e-12):
        raise ValueError(
            f"eps1 + eps2 + eps3 must be <= epsilon, got split={split!r}, epsilon={epsilon!r}"
        )
    return e1, e2, e3


def _split_parameters(N: int, epsilon: float, eps2: float) -> tuple[int, int]:
    """(T, M) of PrivHist step 2: T = ceil(sqrt(N min(eps, 1))), M = ceil(max(2 ln(N e^eps2),
    1) / eps2)."""
    N = v.count("N", N, 1)
    eps = v.positive("epsilon", epsilon)
    e2 = v.positive("eps2", eps2)
    T = math.isqrt(N - 1) + 1 if eps >= 1 else max(1, math.ceil(math.sqrt(N * eps)))
    M = math.ceil(max(2 * (math.log(N) + e2), 1.0) / e2)
    return T, M


# ----------------------------------------------------------------------------- steps 2-4


@dataclass(frozen=True, eq=False)
class SplitHistograms:
    """The two parts of PrivHist step 2(c) (before or after the noise of steps 3-4).

    Attributes
    ----------
    low_cumulative : ndarray of int64, length T
        phi_{r+} of the low part for r = 1..T.
    high_counts : ndarray of int64
        Sorted counts (largest first) of the high part.
    """

    low_cumulative: np.ndarray
    high_counts: np.ndarray


def split_histogram(h: AnonHistogram, T: int, M: int, z_b: int) -> SplitHistograms:
    """Steps 2(a)-(c) of PrivHist for a given Z_b = ``z_b`` (deterministic).

    M fake labels at T and at T + 1, then phi^b_{T+1} = phi^a_{T+1} + Z_b and
    phi^b_T = phi^a_T - Z_b (the corrected step 2(b)); cut at T.

    Parameters
    ----------
    h : AnonHistogram
        The histogram.
    T : int
        The split count, >= 1.
    M : int
        Fake labels added at T and T + 1, >= 0.
    z_b : int
        The noise Z_b of step 2(b).

    Returns
    -------
    SplitHistograms
        (H^cs, H^cl): the cumulative prevalences of counts 1..T and the sorted counts above T.

    Raises
    ------
    TypeError
        If ``h`` is not a histogram or ``T``/``M`` not an integer.
    ValueError
        If ``T`` < 1 or ``M`` < 0.

    References
    ----------
    [Suresh19]_ PrivHist steps 2(a)-(c), App. D (T, M).
    """
    h = as_histogram("h", h)
    T = v.count("T", T, 1)
    M = v.count("M", M, 0)
    z_b = int(z_b)
    r = np.arange(1, T + 1)
    above = int(h.cumulative([T + 1])[0])
    low = np.maximum(0, h.cumulative(r) - above + (M - z_b))
    # high part: counts >= T + 1, with phi^b_{T+1} = phi_{T+1} + M + Z_b possibly negative
    first = int(np.searchsorted(h.counts, T + 1))
    counts = h.counts[first:]
    phi = h.prevalences[first:].copy()
    if counts.size and counts[0] == T + 1:
        phi[0] += M + z_b
    else:
        counts = np.concatenate([[T + 1], counts])
        phi = np.concatenate([[M + z_b], phi])
    cum = np.maximum(0, np.cumsum(phi))
    phi = np.diff(np.concatenate([[0], cum]))
    high = np.repeat(counts[::-1], phi[::-1])
    return SplitHistograms(low.astype(np.int64), high.astype(np.int64))


def geometric(epsilon: float, size: int, rng: Any) -> np.ndarray:
    """``size`` i.i.d. G(e^-eps) variables (exact DL, sensitivity 1).

    Parameters
    ----------
    epsilon : float
        The budget, > 0.
    size : int
        Number of variables, >= 0.
    rng : SecureRandom or numpy.random.Generator
        The randomness source (from :func:`shuffledp.randomness.noise_source`).

    Returns
    -------
    numpy.ndarray of int64, shape (size,)
        The noise.

    Raises
    ------
    TypeError
        If ``epsilon`` is not a real number.
    ValueError
        If ``epsilon`` is not positive.

    References
    ----------
    [Suresh19]_ (the geometric mechanism of PrivHist); [CKS20]_ Alg. 2 (exact sampling).
    """
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    return discrete_laplace_for(epsilon, 1, int(size), rng)


def _noisy_split(h: AnonHistogram, T: int, M: int, eps2: float, rng: Any) -> SplitHistograms:
    """Steps 2-4 of PrivHist: (H^cs, H^cl), eps2-DP given (T, M) ([Suresh19]_ Lemma 8)."""
    z_b = int(geometric(eps2, 1, rng)[0])
    part = split_histogram(h, T, M, z_b)
    low = part.low_cumulative + geometric(eps2, part.low_cumulative.size, rng)
    high = part.high_counts + geometric(eps2, part.high_counts.size, rng)
    return SplitHistograms(low, high)


# ----------------------------------------------------------------------------- low privacy


def _remove_closest(h: AnonHistogram, x: int, m: int) -> AnonHistogram:
    """Remove ``m`` labels whose counts are closest to ``x`` (ties: the smaller count first)."""
    order = np.lexsort((h.counts, np.abs(h.counts - x)))
    phi = h.prevalences[order]
    before = np.cumsum(phi) - phi
    take = np.clip(m - before, 0, phi)
    left = h.prevalences.copy()
    left[order] -= take
    return AnonHistogram._trusted(h.counts, left)


def _from_cumulative(r: np.ndarray, cum: np.ndarray) -> AnonHistogram:
    """Histogram on the increasing counts ``r`` with non-increasing cumulative prevalences."""
    phi = cum - np.concatenate([cum[1:], [0]])
    return AnonHistogram._trusted(np.asarray(r, np.int64), phi.astype(np.int64))


def _add(h1: AnonHistogram, h2: AnonHistogram) -> AnonHistogram:
    if len(h1) == 0 or len(h2) == 0:
        return h2 if len(h1) == 0 else h1
    return AnonHistogram.from_prevalences(np.concatenate([h1.counts, h2.counts]),
                                          np.concatenate([h1.prevalences, h2.prevalences]))


def _low_privacy(noisy: SplitHistograms, T: int, M: int) -> AnonHistogram:
    """PrivHist-LowPrivacy (L1-L4): post-processing of the noisy split."""
    mono = isotonic_regression(noisy.low_cumulative.astype(float), increasing=False).x
    cum = np.round(np.maximum(mono, 0)).astype(np.int64)
    low = _from_cumulative(np.arange(1, T + 1), cum)
    high = AnonHistogram.from_counts(np.maximum(noisy.high_counts, T + 1)) \
        if noisy.high_counts.size else AnonHistogram.empty()
    both = _add(low, high)
    return _remove_closest(_remove_closest(both, T + 1, M), T, M)


# ----------------------------------------------------------------------------- high privacy


def _high_thresholds(N: int, eps3: float) -> tuple[int, float]:
    """(T', q) of PrivHist-HighPrivacy H2(a): T' = ceil(10 sqrt(N / eps3) / 3),
    q = max(ln(1/eps3), 1) / sqrt(N eps3) (the ``max`` keeps q > 0 at eps3 = 1)."""
    t_prime = math.ceil(10 * math.sqrt(N / eps3) / 3)
    q = max(math.log(1 / eps3), 1.0) / math.sqrt(N * eps3)
    return t_prime, q


def _boundaries(N: int, T: int, eps3: float, high_noisy: np.ndarray) -> np.ndarray:
    """The boundary set S of H2 (sorted, within [1, 2N]); a function of public values only."""
    t_prime, q = _high_thresholds(N, eps3)
    i_max = max(0, math.floor(math.log(max(t_prime / T, 1.0)) / math.log1p(q)))
    grid = np.floor(T * np.exp(np.arange(i_max + 1) * math.log1p(q))).astype(np.int64)
    big = high_noisy[high_noisy >= t_prime]
    s = np.concatenate([np.arange(1, T + 1), grid, big, [2 * N]])
    return np.unique(np.clip(s, 1, 2 * N)).astype(np.int64)


def _smoothed_queries(h: AnonHistogram, S: np.ndarray, N: int) -> list[int]:
    """The integers Q_i = d_i phi^v_{s_i+} of H1 + H3 (exact Python ints).

    Counts above 2N are moved to 2N (H1); a label of count j in (s_{i-1}, s_i] adds
    j - s_{i-1} to Q_i and d_k = s_k - s_{k-1} to every Q_k with s_k <= j (s_0 = 0).
    Between neighbours exactly one Q_i moves, by 1.
    """
    S = np.asarray(S, dtype=np.int64)
    j = np.minimum(h.counts, 2 * N)
    prev = np.concatenate([[0], S[:-1]])
    d = S - prev
    i = np.searchsorted(S, j, side="left")
    partial = np.zeros(S.size, dtype=np.int64)
    inside = j < S[i]
    np.add.at(partial, i[inside], h.prevalences[inside] * (j[inside] - prev[i[inside]]))
    tails = AnonHistogram.from_prevalences(j, h.prevalences).cumulative(S)
    return [int(a) * int(b) + int(c) for a, b, c in zip(d, tails, partial)]


def _high_privacy(h: AnonHistogram, high_noisy: np.ndarray, T: int, N: int, eps3: float,
                 resolution: int, rng: Any) -> tuple[AnonHistogram, int]:
    """PrivHist-HighPrivacy (H1-H6); eps3-DP given (N, H^cl). Returns (histogram, |S|)."""
    S = _boundaries(N, T, eps3, high_noisy)
    d = np.diff(np.concatenate([[0], S]))
    Q = _smoothed_queries(h, S, N)
    noise = discrete_laplace_for(eps3, resolution, S.size, rng)
    w = np.array([(resolution * q + int(z)) / (resolution * int(di))
                  for q, z, di in zip(Q, noise, d)])
    x = isotonic_regression(w, weights=d.astype(float) ** 2, increasing=False).x
    cum = np.round(np.maximum(x, 0)).astype(np.int64)
    return _from_cumulative(S, cum), int(S.size)


# ----------------------------------------------------------------------------- the release


@dataclass(frozen=True, eq=False)
class PrivHistRelease:
    """A PrivHist output with its guarantee.

    Attributes
    ----------
    histogram : AnonHistogram
        The private anonymized histogram H (prevalence form).
    total : int
        N, the private estimate of the number of items n.
    guarantee : Guarantee
        Pure central DP under :attr:`Neighbour.SORTED_L1`.
    parameters : Mapping
        Regime, budget split (nominal and effective), T, M, resolution, |S|, randomness.
    """

    histogram: AnonHistogram
    total: int
    guarantee: Guarantee
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))


def _privhist_steps(spent: list[float]) -> Sequential:
    """PrivHist's steps as one event: N by the geometric mechanism (DL, sensitivity 1: its
    exact pair), the split (steps 2-4, eps2-DP given N, [Suresh19]_ Lemma 8) and, in the
    high-privacy regime, H4 (eps3-DP, Lemma 9) as pure events; ``spent`` holds the effective
    epsilons of the exact samplers."""
    nb = Neighbour.SORTED_L1
    steps: list = [DiscreteLaplace(parameter=spent[0], neighbour=nb,
                                   label="PrivHist step 1: N (geometric mechanism)"),
                   EpsDelta(epsilon=spent[1], neighbour=nb,
                            label="PrivHist steps 2-4 (Suresh 2019, Lemma 8)")]
    if len(spent) > 2:
        steps.append(EpsDelta(epsilon=spent[2], neighbour=nb,
                              label="PrivHist-HighPrivacy H4 (Suresh 2019, Lemma 9)"))
    return Sequential(steps=tuple(steps), neighbour=nb, label="PrivHist")


def _effective(eps: float, sensitivity: int) -> float:
    s, t = dl_rational(eps, sensitivity)
    return sensitivity * s / t


def privhist(
    h: AnonHistogram,
    epsilon: float,
    *,
    split: Any = "lean",
    regime: str = "auto",
    resolution: int = DEFAULT_RESOLUTION,
    rng: RngLike | SecureRandom = None,
) -> PrivHistRelease:
    """Release an anonymized histogram and the item count under pure epsilon-DP ([Suresh19]_).

    Parameters
    ----------
    h : AnonHistogram
        The histogram in prevalence form (may be empty).
    epsilon : float
        Total budget, > 0.
    split : {"lean", "paper", "practical"} or (eps1, eps2, eps3)
        Budget split, see :func:`budget_split`.
    regime : {"auto", "paper", "low", "high"}
        Which post-processing runs. "auto" (default): PrivHist-HighPrivacy only while
        eps * sqrt(N) < :data:`HIGH_PRIVACY_LOAD` for the released noisy N (with the named
        splits eps1 does not depend on the regime, so the choice is made after N is
        released; the total stays eps). "paper": the PrivHist box's switch (HighPrivacy when
        eps <= 1). "low" / "high" force PrivHist-LowPrivacy / -HighPrivacy at any eps (both
        are private at any eps: the switch only concerns accuracy). The paper's algorithm is
        ``split="paper", regime="paper"``; the defaults are the most accurate variant
        measured (``bench/privhist_error.py``: they beat noisy sorted counts + isotonic
        regression on Zipf data at eps in {0.3, 1, 3}, where the paper's configuration loses
        by up to 2.7x at eps >= 1). A tuple ``split`` with ``regime="auto"`` uses the
        paper's switch.
    resolution : int, default 2^20
        R, power of two: the high-privacy Laplace is DL of sensitivity R on the R-scaled
        integer query (R = 1 gives the geometric mechanism). Unused when eps > 1.
    rng : None, SecureRandom, int or Generator
        ``None``: the cryptographically secure generator (a private release); a seed or a
        Generator: reproducible evaluation, marked as such in the guarantee notes.

    Returns
    -------
    PrivHistRelease

    Raises
    ------
    TypeError
        If ``h`` is not a histogram or a number argument has the wrong type.
    ValueError
        If ``epsilon`` is not positive, ``split`` or ``regime`` is unknown or out of range
        (:func:`budget_split`), or ``resolution`` is not a power of two in [1, 2^40].

    References
    ----------
    [Suresh19]_ PrivHist, PrivHist-LowPrivacy, PrivHist-HighPrivacy, App. C (privacy), App. D;
    [CKS20]_ Alg. 2 (exact discrete Laplace, not the floating-point one [Mironov12]_ attacks).
    """
    h = as_histogram("h", h)
    eps = v.positive("epsilon", epsilon)
    regime = v.choice("regime", regime, REGIMES)
    adaptive = regime == "auto" and isinstance(split, str)
    if regime in ("paper", "auto"):
        high = eps <= 1
    else:
        high = regime == "high"
    e1, e2, e3 = budget_split(eps, split, high=high)
    R = v.bounded_count("resolution", resolution, 1, 1 << 40)
    if R & (R - 1):
        raise ValueError(f"resolution must be a power of two, got resolution={resolution!r}")
    seeded = is_seeded(rng)
    src = noise_source(rng)
    N = max(h.n + int(geometric(e1, 1, src)[0]), 0)
    if adaptive:  # choose the regime from the released N (eps1 is the same either way)
        high = eps * math.sqrt(N) < HIGH_PRIVACY_LOAD
        if split == "paper":  # the rest split as the box would, eps1 already spent
            e2, e3 = ((eps - e1) / 2, (eps - e1) / 2) if high else (eps - e1, 0.0)
        else:
            e1b, e2, e3 = budget_split(eps, split, high=high)
            assert e1b == e1
    params: dict[str, Any] = {
        "mechanism": "PrivHist", "regime": "high_privacy" if high else "low_privacy",
        "split": split if isinstance(split, str) else "custom",
        "regime_rule": (f"eps * sqrt(N) < {HIGH_PRIVACY_LOAD:g}" if adaptive
                        else "eps <= 1 (the PrivHist box)" if regime in ("paper", "auto")
                        else f"forced {regime}"),
        "eps1": e1, "eps2": e2, "eps3": e3 if high else 0.0,
        "eps3_unspent": 0.0 if high else e3,
        "noise": "discrete_laplace_exact", "randomness": "seeded" if seeded else "secure",
    }
    spent = [_effective(e1, 1), _effective(e2, 1)]
    if N == 0:
        out = AnonHistogram.empty()
    else:
        T, M = _split_parameters(N, eps, e2)
        noisy = _noisy_split(h, T, M, e2, src)
        params.update(T=T, M=M)
        if high:
            out, n_s = _high_privacy(h, noisy.high_counts, T, N, e3, R, src)
            params.update(resolution=R, n_boundaries=n_s)
        else:
            out = _low_privacy(noisy, T, M)
    if high:
        spent.append(_effective(e3, R))
    steps = _privhist_steps(spent)
    params["epsilon_effective"] = Accountant().compose(steps).basic()[0]
    guarantee = Guarantee(
        notion="pure", model="central", epsilon=e1 + e2 + (e3 if high else 0.0),
        neighbour=Neighbour.SORTED_L1, theorem=THEOREM, parameters=params,
        notes=(SEEDED_NOTE,) if seeded else (), event=steps,
    )
    return PrivHistRelease(out, int(N), guarantee, params)
