"""Budget splits.

Per-level split of [Ghazi23]_: the proof of Thm 3.1 sets
eps_i = gamma^|i - q| * eps / Z with Z = sum_i gamma^|i - q|; Sec. 4 "Implementation details"
uses gamma = 1/sqrt(2), w = 20, q = floor(log2 sqrt(w)) and does not measure levels i < q.
Noise <-> budget conversions and dropout over-provisioning of [Bagdasaryan22]_.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps", Thm 3.1, Sec. 4 --
   full entry in docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics", Sec. 4,
   Sec. 5.3-5.4, eqs. 5, 7-9 -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from shuffledp import _validation as v
from shuffledp.grid import start_level  # noqa: F401  (re-exported: one computation, on the grid)

#: Declared dropout fraction when none is given (shuffle protocol: ``summation_parameters``,
#: :func:`shuffledp.protocol.params.derive_params`, ``shuffledp setup`` and ``shuffledp
#: account summation``). The noise is planned for n_min = ceil((1 - 0.05) n) users, so up to
#: n - n_min lost or removed users do not make the release refused; when all n are present
#: the summed noise has Polya shape n / n_min, variance about 1.053 times that of dropout 0
#: (standard deviation +2.6%), and r (computed for n_min users) may grow by one share near a
#: threshold of its formula. Below n = 20 the ceiling leaves n_min = n (no headroom).
DEFAULT_DROPOUT = 0.05  # defined here, a light module: CLI option defaults read it

DEFAULT_GAMMA = 1.0 / math.sqrt(2.0)

#: The adaptive federated histogram's calibration (``adaptive_histogram`` and ``shuffledp
#: federated`` read these; defined here, a light module). c of eq. 7 of Bagdasaryan et al.
#: (2022), "Towards Sparse Federated Analytics", Sec. 5: the split threshold is the target
#: noise std sigma~ = c (U/T) / sqrt(ceil(U / S_max)) (eq. 7 read as its text explains it,
#: ``"shards"``; docs/errata.md). c is public (it costs no privacy) and chosen by a
#: documented rule: c = 0.05 reproduces the paper's Table 1 communication, and on the
#: bench's data sets it stays within the measured range that ``python bench/federated_c.py``
#: prints (error / non-private error against c on two population images).
DEFAULT_EQ7_C = 0.05
#: eq. 7's shard factor as the text means it (the k shards' noise adds up).
DEFAULT_EQ7 = "shards"
#: Planned dropout fraction of the federated rounds (each shard's noise over-provisioned for
#: it, Bagdasaryan et al. Sec. 4).
DEFAULT_FEDERATED_DROPOUT = 0.1


# start_level lives with the grid (one computation of the measured levels)
def level_budgets(
    epsilon: float, start: int, top: int, gamma: float = DEFAULT_GAMMA
) -> np.ndarray:
    """Per-level budgets eps_i for the measured levels ``start..top`` (inclusive).

    eps_i = eps * gamma^|i - start| / Z, Z = sum_{i=start}^{top} gamma^|i - start|, so the
    budgets sum to eps (basic composition, [Ghazi23]_ proof of Thm 3.1).

    Parameters
    ----------
    epsilon : float
        Total budget eps of the release (finite, > 0).
    start, top : int
        First and last measured level (0 <= start <= top).
    gamma : float
        Geometric decay of the budgets away from ``start`` (finite, > 0).

    Returns
    -------
    ndarray of shape (top - start + 1,)
        ``out[k]`` is the budget of level ``start + k``; their exact sum is <= eps.

    Raises
    ------
    ValueError
        ``epsilon`` or ``gamma`` is not a finite number > 0, or not 0 <= start <= top.

    References
    ----------
    [Ghazi23]_ Thm 3.1 (proof) and Sec. 4, "Implementation details".
    """
    eps = float(epsilon)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be a finite number > 0, got epsilon={epsilon!r}")
    g = float(gamma)
    if not (g > 0 and math.isfinite(g)):
        raise ValueError(f"gamma must be a finite number > 0, got gamma={gamma!r}")
    if not (0 <= int(start) <= int(top)):
        raise ValueError(f"need 0 <= start <= top, got start={start!r}, top={top!r}")
    weights = g ** np.abs(np.arange(int(start), int(top) + 1) - int(start), dtype=float)
    return exact_at_most(eps * weights / weights.sum(), eps)


def exact_at_most(budgets: np.ndarray, epsilon: float) -> np.ndarray:
    """The budgets with the largest lowered by as many ulps as needed for their exact
    (rational) sum, and their float sum, to be at most ``epsilon``.

    A float split can exceed eps by a few ulps, and a float sum that is <= eps does not make
    the exact sum so; basic composition is over the exact sum. The numbers are compared as
    exact rationals (every float is one), so after this the composed budget is at most eps
    exactly.

    Parameters
    ----------
    budgets : array_like of float
        A split of ``epsilon`` (positive, finite).
    epsilon : float
        The total it must not exceed.

    Returns
    -------
    ndarray
        A copy of ``budgets``, its largest entry lowered by the fewest ulps that make the
        exact and the float sum at most ``epsilon``; the input is not changed.

    Raises
    ------
    TypeError
        ``epsilon`` is not a real number.
    ValueError
        ``epsilon`` is not a finite number > 0, or ``budgets`` is not a non-empty 1-D
        array of finite numbers > 0.

    References
    ----------
    [Ghazi23]_ Thm 3.1 (proof: basic composition over the levels).
    """
    eps = v.positive("epsilon", epsilon)
    try:
        out = np.array(budgets, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"budgets must be a non-empty 1-D array of finite numbers > 0, "
                         f"got budgets={budgets!r}") from None
    if out.ndim != 1 or out.size == 0 or not (np.isfinite(out) & (out > 0)).all():
        raise ValueError(f"budgets must be a non-empty 1-D array of finite numbers > 0, "
                         f"got budgets={budgets!r}")
    cap = Fraction(eps)
    k = int(np.argmax(out))
    while sum(map(Fraction, out.tolist())) > cap or float(out.sum()) > eps:
        out[k] = math.nextafter(float(out[k]), 0.0)
    return out


#: The default budget split of the central heatmap (``central_heatmap(budget="auto")``):
#: :func:`auto_level_budgets`. "paper" is :func:`level_budgets` as printed.
BUDGET_RULES = ("auto", "paper")
#: Load scale of :func:`leaf_share`: the load ``d = eps n / N`` at which the leaf level gets
#: half the budget.
LEAF_LOAD_SCALE = 0.5
#: Budget scale of :func:`leaf_share`: above eps = 4 the load is counted eps / 4 times ...
LEAF_EPS_SCALE = 4.0
#: ... for a share of at most 0.65 (:func:`leaf_share`).
LEAF_EPS_SHARE_MAX = 0.65
#: The most of the budget the leaf level ever gets: the coarse levels keep >= 3%.
LEAF_SHARE_MAX = 0.97


def _load_share(d: float) -> float:
    """s(d) = d^2 / (d^2 + LEAF_LOAD_SCALE^2)."""
    return d * d / (d * d + LEAF_LOAD_SCALE ** 2)


def leaf_share(epsilon: float, n_pixels: int, n_public: int | None = None) -> float:
    """The leaf level's share of the budget under the ``"auto"`` rule, from public numbers.

    ``p = min(0.97, max(s(d), min(0.65, s(d max(1, eps / 4)))))`` with
    ``s(x) = x^2 / (x^2 + 0.5^2)`` and ``d = eps n / N`` (``N`` pixels, ``n`` a public number
    of users; ``p = 0`` when ``n`` is not public). ``d`` is the signal-to-noise ratio of an
    average pixel's count under Laplace(1/eps) noise: when it is of order one or more the
    pixel-level counts carry the picture and the coarse levels, which only guide the mass,
    need little of the budget. Up to eps = 4 the rule is ``s(d)``. Above, the load is
    counted eps / 4 times, for a share of at most 0.65: at eps 5-10 the leaf's noise
    (Laplace scale ``1 / (p eps)``, below half a user from ``p`` = 0.4 on at eps = 5, 0.2 at
    eps = 10) resolves single users on sparse maps, as the top-t% baselines' does, while the
    coarse levels keep ``(1 - p) eps`` >= 0.35 eps in all (1.75 at eps = 5) for placing the
    mass. Below a share of about 0.09 (64x64) the printed split gives the leaf more
    (:func:`auto_level_budgets` then keeps it).

    How the constants were chosen (``python bench/smoothing_grid.py``, 64x64, population,
    elongated and one-pixel-spike data; the default release must keep its EMD <= 1.05x that
    of Alg. 1-2 as printed at every point and beat the three baselines where it can):

    * The load scale 0.5 is set by EMD at eps <= 2. On population data at ``d`` of about 0.5
      (eps = 1, n = 2000; eps = 0.5, n = 5000) the EMD ratio is 0.99-1.05 with it; load
      scales 0.25 or 0.16 (more on the leaf) win some KL/CC losses but put the ratio at
      1.1-1.7 there and on elongated data at eps 0.5-5 (6 trials per point): the coarse
      levels' share is what keeps EMD down.
    * The one-pixel spike of 200 users at eps 0.5-2 (``d`` 0.02-0.1) wins or ties every
      metric up to ``p`` = 0.45 and loses from ``p`` = 0.6 on to the top-0.1% baseline on KL
      and SIM (eps = 2, p = 0.6: KL 0.108 against 0.070, SIM 0.898 against 0.933; at
      eps = 0.5 also EMD), with EMD 1.3-1.4x Alg. 1-2 as printed; there ``s(d)`` <= 0.04,
      so it keeps the printed split (0.09 on the leaf).
    * At eps = 10, n = 200 (``d`` = 0.49) the spike's EMD against Alg. 1-2 as printed rises
      with ``p``: 0.94x at 0.49 (the load rule), 0.88x at 0.55, 0.87x at 0.65, 0.95x at
      0.75, 1.15x at 0.87 (48 trials), while population and elongated data at eps = 10,
      n = 100-200 win all four metrics from ``p`` = 0.65 on (CC ties or loses at 0.55): hence
      the cap 0.65 of the eps term. The eps scale 4 (the eps term starts above eps = 4)
      leaves eps <= 4 as before; at eps = 5 it gives the spike ``p`` = 0.27 (wins all four,
      48 trials; ``p`` = 0.7 loses KL and SIM).

    Full grid (``python bench/smoothing_grid.py --side 64 --trials 12``, 119 points), this
    rule against ``s(d)`` alone: all four means better than the three baselines at 64
    points (60), with every paired 95% interval clear at 50 (46); losses KL 20 (23), CC 29
    (32), SIM 13 (15), EMD 2 (2); EMD 0.03-1.02x Alg. 1-2 as printed (unchanged). An
    uncapped eps term, ``s(d sqrt(1 + (eps / 4)^2))``, won at 67 points but put the spike at
    eps = 10 at 1.15x. Details and the 128x128 check: docs/errata.md ("The default budget
    split").

    Parameters
    ----------
    epsilon : float
        Total budget, finite and > 0.
    n_pixels : int
        Pixels of the grid, >= 1.
    n_public : int, optional
        A public number of users (the data's own under zero-out or replace-one neighbours,
        where n is not protected; a declared one under add/remove); ``None``: not public.

    Returns
    -------
    float
        The leaf share p in [0, 0.97].

    Raises
    ------
    TypeError, ValueError
        If an argument is not a number of the stated range.

    References
    ----------
    [Ghazi23]_ Thm 3.1 (any split that sums to eps is eps-DP by basic composition).
    """
    eps = v.positive("epsilon", epsilon)
    n_pix = v.count("n_pixels", n_pixels, 1)
    d = 0.0 if n_public is None else eps * v.count("n_public", n_public, 0) / n_pix
    boost = min(LEAF_EPS_SHARE_MAX, _load_share(d * max(1.0, eps / LEAF_EPS_SCALE)))
    return float(min(LEAF_SHARE_MAX, max(_load_share(d), boost)))


def auto_level_budgets(epsilon: float, start: int, top: int, n_pixels: int,
                       n_public: int | None = None,
                       gamma: float = DEFAULT_GAMMA) -> np.ndarray:
    """Per-level budgets of the ``"auto"`` rule: more on the leaf level when it pays.

    The leaf level ``top`` gets ``p = leaf_share(eps, n_pixels, n_public)`` of eps when
    that is more than its share under :func:`level_budgets`, and the levels
    ``start..top - 1`` split the rest as :func:`level_budgets` does (gamma-decay from
    ``start``); otherwise the result is :func:`level_budgets` itself. A function of public
    numbers only, so the mechanism stays the same eps-DP mechanism with another split
    (basic composition: the budgets sum to at most eps).

    Parameters
    ----------
    epsilon : float
        Total budget (finite, > 0).
    start, top : int
        First and last measured level (0 <= start <= top).
    n_pixels : int
        Pixels of the grid.
    n_public : int, optional
        A public number of users (see :func:`leaf_share`).
    gamma : float
        Decay of the coarse levels' budgets (finite, > 0).

    Returns
    -------
    ndarray of shape (top - start + 1,)
        ``out[k]`` is the budget of level ``start + k``; their exact sum is <= eps.

    Raises
    ------
    TypeError, ValueError
        As :func:`level_budgets` and :func:`leaf_share`.

    References
    ----------
    [Ghazi23]_ Thm 3.1 (proof: basic composition over the levels) and Sec. 4.
    """
    paper = level_budgets(epsilon, start, top, gamma)
    p = leaf_share(epsilon, n_pixels, n_public)
    if int(top) == int(start) or p <= paper[-1] / float(epsilon):
        return paper
    eps = float(epsilon)
    return exact_at_most(
        np.append(level_budgets(eps * (1.0 - p), start, int(top) - 1, gamma), eps * p), eps)


# ---------------------------------------------------------------------------------------
# [Bagdasaryan22] (PoPETs 2022): noise <-> budget conversions of the adaptive
# hierarchical histogram (Sec. 5.3-5.4, eqs. 5, 7, 8, 9) and dropout over-provisioning
# (Sec. 4). Discrete Laplace DL(beta), beta = e^{-eps/Delta}, has variance 2 beta/(1-beta)^2.
# ---------------------------------------------------------------------------------------
def dl_std(epsilon: float, sensitivity: float = 1.0) -> float:
    """sigma = tau(eps, Delta) = sqrt(2 beta) / (1 - beta), beta = e^{-eps/Delta}
    ([Bagdasaryan22]_ eq. 5).

    The standard deviation of discrete Laplace noise that is eps-DP for l1-sensitivity Delta.
    Evaluated with expm1 so that small eps/Delta keeps full precision.

    Parameters
    ----------
    epsilon : float
        Pure epsilon of the noise (finite, > 0).
    sensitivity : float
        l1-sensitivity Delta of the query (finite, > 0).

    Returns
    -------
    float
        The noise's standard deviation sigma.

    Raises
    ------
    TypeError, ValueError
        ``epsilon`` or ``sensitivity`` is not a finite number > 0.

    References
    ----------
    [Bagdasaryan22]_ eq. 5.
    """
    eps = v.positive("epsilon", epsilon)
    delta_s = v.positive("sensitivity", sensitivity)
    x = eps / delta_s
    return math.sqrt(2.0 * math.exp(-x)) / (-math.expm1(-x))


def dl_epsilon_for_std(sigma: float, sensitivity: float = 1.0) -> float:
    """eps~ = phi(sigma) = -Delta ln((sigma^2 + 1 - sqrt(2 sigma^2 + 1)) / sigma^2)
    ([Bagdasaryan22]_ eq. 8).

    Inverse of :func:`dl_std`. Evaluated in the cancellation-free form
    eps = Delta log1p((1 + sqrt(2 sigma^2 + 1)) / sigma^2), which is the same number
    because (sigma^2 + 1)^2 - (2 sigma^2 + 1) = sigma^4.

    Parameters
    ----------
    sigma : float
        Standard deviation of the discrete Laplace noise (finite, > 0).
    sensitivity : float
        l1-sensitivity Delta of the query (finite, > 0).

    Returns
    -------
    float
        The pure epsilon of that noise for sensitivity Delta.

    Raises
    ------
    TypeError, ValueError
        ``sigma`` or ``sensitivity`` is not a finite number > 0.

    References
    ----------
    [Bagdasaryan22]_ eq. 8.
    """
    s = v.positive("sigma", sigma)
    delta_s = v.positive("sensitivity", sensitivity)
    s2 = s * s
    return delta_s * math.log1p((1.0 + math.sqrt(2.0 * s2 + 1.0)) / s2)


def target_std(c: float, users: int, cells: int, s_max: int) -> float:
    """sigma~ = tau_target(c, U, T, S_max) = c (U/T) sqrt(ceil(S_max / U)) ([Bagdasaryan22]_ eq. 7).

    Parameters
    ----------
    c : float
        Calibration parameter (> 0, typically < 1).
    users : int
        U, users in the sub-query.
    cells : int
        T, cells (length of the aggregated vector).
    s_max : int
        Largest secure-aggregation shard.

    Notes
    -----
    Eq. 7 is printed with ceil(S_max / U); with U > S_max that factor is 1. The text motivates
    the factor by "noise variance accumulation when the number of users exceeds the limit on
    one shard", which would suggest ceil(U / S_max); we implement the equation as printed.

    Returns
    -------
    float
        The target standard deviation sigma~ of the sub-query's summed noise.

    Raises
    ------
    TypeError, ValueError
        ``c`` is not a finite number > 0, or ``users``, ``cells`` or ``s_max`` is not an
        integer >= 1.

    References
    ----------
    [Bagdasaryan22]_ eq. 7.
    """
    c = v.positive("c", c)
    for name, val in (("users", users), ("cells", cells), ("s_max", s_max)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {name}={val!r}")
    return c * users / cells * math.sqrt(math.ceil(s_max / users))


def next_query_epsilon(eps_remaining: float, eps_tilde: float, b: float) -> float:
    """eps = gamma(eps_rem, eps~) of [Bagdasaryan22]_ eq. 9: eps~ if b eps~ <= eps_rem, else
    eps_rem.

    Parameters
    ----------
    eps_remaining : float
        Budget left, eps_rem (finite, > 0).
    eps_tilde : float
        Budget the next query asks for, eps~ (finite, > 0).
    b : float
        Safety factor b (finite, > 0): the full eps~ is spent only if b eps~ fits.

    Returns
    -------
    float
        The next query's epsilon.

    Raises
    ------
    TypeError, ValueError
        An argument is not a finite number > 0.

    References
    ----------
    [Bagdasaryan22]_ eq. 9.
    """
    rem = v.positive("eps_remaining", eps_remaining)
    et = v.positive("eps_tilde", eps_tilde)
    bb = v.positive("b", b)
    return et if bb * et <= rem else rem


def dl_parameter(epsilon: float, sensitivity: int) -> float:
    """The discrete Laplace parameter a = exp(-eps / Delta), rounded toward 1 until the
    floating-point a itself is eps-DP at sensitivity Delta: -Delta ln(a) <= eps exactly.

    ``math.exp`` rounds to nearest, so its a is below the true exp(-eps / Delta) about half
    the time, and DL(a) then loses up to Delta ulp(a) / a more than eps (5e-14 at
    Delta = 512). The check is made on the float's exact value in 60-digit decimal
    arithmetic; one step up (1 ulp) is all it ever takes.

    Parameters
    ----------
    epsilon : float
        The level's budget, finite and > 0.
    sensitivity : int
        The l1 sensitivity Delta, >= 1.

    Returns
    -------
    float
        a in (0, 1) with -Delta ln(a) <= eps (and a at most 2 ulp above exp(-eps / Delta)).

    Raises
    ------
    TypeError, ValueError
        If ``epsilon`` is not a finite number > 0, ``sensitivity`` not an integer >= 1, or
        eps / Delta is so small that no float a < 1 is eps-DP.

    References
    ----------
    [Bagdasaryan22]_ Thm 4.2 (the sum of Polya differences is DL(a) with
    a = exp(-eps / Delta)).
    """
    eps = v.positive("epsilon", epsilon)
    sens = v.count("sensitivity", sensitivity, 1)
    a = math.exp(-eps / sens)
    with localcontext() as ctx:
        ctx.prec = 60
        for _ in range(4):
            if a < 1.0 and -Decimal(sens) * Decimal(a).ln() <= Decimal(eps):
                return a
            a = math.nextafter(a, 1.0)
    raise ValueError(f"no float a < 1 is epsilon={epsilon!r}-DP at sensitivity={sensitivity!r}"
                     " (eps / Delta below the float resolution near 1)")


def sum_up(values: Sequence[float]) -> float:
    """The exact sum of floats, rounded up to a float: the least float >= the sum.

    A guarantee that claims the sum of its parts (e.g. the level budgets of a basic
    composition) must not claim less than they add up to; ``float(sum(values))`` is below
    the exact sum for some inputs (by about 1 ulp).

    Parameters
    ----------
    values : sequence of float
        Finite numbers.

    Returns
    -------
    float
        The least float that is >= the exact sum.

    Raises
    ------
    ValueError
        If a value is not finite.

    References
    ----------
    [Ghazi23]_ proof of Thm 3.1 (basic composition over the levels: eps = sum eps_i).
    """
    vals = [float(x) for x in values]
    if not all(math.isfinite(x) for x in vals):
        raise ValueError(f"values must be finite, got {vals!r}")
    exact = sum((Fraction(x) for x in vals), Fraction(0))
    s = float(exact)
    while Fraction(s) < exact:
        s = math.nextafter(s, math.inf)
    return s


def share_shape(n_min: int) -> float:
    """The Polya shape of one user's noise share: the least float s with n_min s >= 1.

    Any n_min users' shares then sum to Polya differences of shape n_min s >= 1, discrete
    Laplace plus independent noise. The float 1 / n_min is below 1 / n_min for some n_min
    (3, 6, 7, 49, 950, ...): their sum would be a shade less than DL.

    Parameters
    ----------
    n_min : int
        The fewest users whose shares sum in a release, >= 1.

    Returns
    -------
    float
        1 / n_min, or the next float up when n_min (1 / n_min as a float) < 1 exactly.

    Raises
    ------
    TypeError, ValueError
        If ``n_min`` is not an integer >= 1.

    References
    ----------
    [Bagdasaryan22]_ Thm 4.2 and Sec. 4, "Handling dropouts".
    """
    n = v.count("n_min", n_min, 1)
    s = 1.0 / n
    while Fraction(s) * n < 1:
        s = math.nextafter(s, 1.0)
    return s


def polya_shape(shard_size: int, dropout: float = 0.0) -> float:
    """Polya shape 1 / n_min, n_min = ceil((1 - dropout) S) ([Bagdasaryan22]_ Sec. 4,
    "Handling dropouts").

    ``dropout`` is the dropout *fraction* (the 0.95 in Alg. 1's constants is a slip for
    0.05, see docs/errata.md). Any n_min or more surviving users then sum to at least
    discrete Laplace noise.

    Parameters
    ----------
    shard_size : int
        Users S of the secure-aggregation shard (>= 1).
    dropout : float
        Fraction of users that may drop out, in [0, 1).

    Returns
    -------
    float
        The Polya shape 1 / n_min of each user's noise share (:func:`share_shape`: rounded
        up where the float 1 / n_min is below it).

    Raises
    ------
    TypeError
        ``dropout`` is not a number.
    ValueError
        ``shard_size`` is not an integer >= 1, ``dropout`` is not in [0, 1), or it leaves no
        user (n_min < 1).

    References
    ----------
    [Bagdasaryan22]_ Sec. 4, "Handling dropouts".
    """
    if isinstance(shard_size, bool) or not isinstance(shard_size, (int, np.integer)) \
            or shard_size < 1:
        raise ValueError(f"shard_size must be an integer >= 1, got shard_size={shard_size!r}")
    try:
        d = float(dropout)
    except (TypeError, ValueError):
        raise TypeError(f"dropout must be a real number, got dropout={dropout!r}") from None
    if not (0.0 <= d < 1.0):
        raise ValueError(f"dropout must be in [0, 1), got dropout={dropout!r}")
    n_min = math.ceil((1.0 - d) * int(shard_size) - 1e-9)
    if n_min < 1:
        raise ValueError(f"dropout={dropout} leaves no user of shard_size={shard_size}")
    return share_shape(n_min)
