"""Amplification by shuffling for metric DP: PrivEMDItemWise ([Imola]_ Sec. 4.2).

PrivEMDItemWise ([Imola]_ Alg. 2) applies an (alpha0, 0) d_X-DP randomizer to every item and
releases the shuffled multiset. With N the number of shuffled items, Thm 4.3 bounds the
privacy loss between two item vectors whose distance vector v = (d_X(x_i, x_i'))_i has
||v||_0 = x0 and ||v||_1 = x1 by

    h(N; x0, x1) = x0 ln(1 + (e^{alpha0 x1/x0} - 1)/(e^{alpha0 x1/x0} + 1)
                          * (8 sqrt(e^{alpha0} ln(4 x0/delta)) / sqrt(N) + 8 e^{alpha0} / N)),

with delta-part delta e^{h}; it holds only while alpha0 < ln(N / (16 ln(4N/delta)))
(Thm 4.3, stated with the number of shuffled items N inside the logarithm; this is the more
conservative reading of the condition).

delta' can be far larger than delta, up to and beyond 1. A bound is issued as valid only
when delta' <= ``max_delta_out`` (default :data:`DEFAULT_MAX_DELTA_OUT` = 1e-3); above the
cap it is reported as vacuous and carries no :class:`Guarantee`. Every logarithm of a ratio
with delta is taken in log space (ln(4N/delta) = ln(4N) - ln(delta)), so any delta in (0, 1)
down to the smallest subnormal is handled.

Thm 4.4: PrivEMDItemWise is (alpha, delta')-bounded d_EM-DP with

    local   (N = m):    alpha = sup_{w in (0,1]} h(m;  m, m w) / w,  delta' = delta e^{h(m; m, m)}
    central (N = m n):  alpha = sup_{w in (0,1]} h(mn; m, m w) / w,  delta' = delta e^{h(mn; m, m)}

Closed form of the supremum (derived here, checked numerically in the tests): with
K = 8 sqrt(e^{alpha0} ln(4m/delta)/N) + 8 e^{alpha0}/N and (e^y - 1)/(e^y + 1) = tanh(y/2),
h(N; m, m w)/w = m f(alpha0 w)/w with f(y) = ln(1 + K tanh(y/2)) concave and f(0) = 0, so
f(y)/y is non-increasing and the supremum is the limit w -> 0:

    alpha = m alpha0 K / 2.

App. B.4.2 of the paper writes exp(-eps0) inside the final alpha; the theorem statement
(and the clones analysis it generalises) has exp(+alpha0), which is what is used here.

Used here from [Imola]_: Alg. 2, Thm 4.3, Thm 4.4, eqs. (6)-(7).

References
----------
.. [Imola] Imola et al. (preprint), "Metric Differential Privacy at the User-Level" -- full entry in
   docs/references.md
.. [FDM19] Fernandes et al. (2019), "Generalised Differential Privacy for Text Document Processing"
   -- full entry in docs/references.md
.. [DRV10] Dwork et al. (2010), "Boosting and Differential Privacy" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee, Neighbour

MODELS = ("local", "central")
#: default cap on delta' = delta e^{h}: above it the bound is vacuous (not valid)
DEFAULT_MAX_DELTA_OUT = 1e-3


def _log_over_delta(x: float, delta: float) -> float:
    """ln(x / delta) without forming x / delta (which overflows for tiny delta)."""
    return math.log(x) - math.log(delta)


def _K(alpha0: float, N: float, x0: float, delta: float) -> float:
    """8 sqrt(e^{alpha0} ln(4 x0/delta)) / sqrt(N) + 8 e^{alpha0} / N (Thm 4.3)."""
    root = math.sqrt(math.exp(alpha0) * _log_over_delta(4.0 * x0, delta) / N)
    return 8.0 * root + 8.0 * math.exp(alpha0) / N


def _h(N: int, x0: float, x1: float, alpha0: float, delta: float) -> float:
    """h(N; x0, x1) of [Imola]_ Thm 4.3/4.4 (privacy loss for ||v||_0 = x0, ||v||_1 = x1).

    Parameters
    ----------
    N : int
        Number of shuffled items.
    x0 : float
        ||v||_0, number of changed items (1 <= x0 <= N).
    x1 : float
        ||v||_1, total distance moved (0 <= x1 <= x0 since d_X <= 1).
    alpha0 : float
        d_X-DP parameter of the item randomizer.
    delta : float
        In (0, 1).
    """
    N = v.count("N", N, 1)
    x0 = v.positive("x0", x0)
    x1 = v.real("x1", x1)
    if not (0.0 <= x1 <= x0):
        raise ValueError(f"x1 must be in [0, x0={x0}] (d_X <= 1), got x1={x1!r}")
    if x0 > N:
        raise ValueError(f"x0 must be <= N={N}, got x0={x0!r}")
    alpha0 = _iv_alpha0(alpha0)
    delta = v.probability("delta", delta)
    return x0 * math.log1p(math.tanh(alpha0 * x1 / x0 / 2.0) * _K(alpha0, N, x0, delta))


def thm43_validity_limit(N: int, delta: float) -> float:
    """ln(N / (16 ln(4N/delta))): Thm 4.3 needs alpha0 strictly below this.

    Computed as ln N - ln 16 - ln(ln(4N) - ln delta), finite for every delta in (0, 1)
    (the direct form overflows 4N/delta and fails for delta below ~1e-308). A value <= 0
    means that no alpha0 > 0 qualifies (N <= 16 ln(4N/delta)); callers then refuse.

    Parameters
    ----------
    N : int
        Items shuffled together (>= 1): m (local) or m n (central).
    delta : float
        delta of Thm 4.3, in (0, 1).

    Returns
    -------
    float
        The limit on alpha0 (may be <= 0).

    Raises
    ------
    TypeError, ValueError
        ``N`` is not an integer >= 1 or ``delta`` is not in (0, 1).

    References
    ----------
    [Imola]_ Thm 4.3.
    """
    N = v.count("N", N, 1)
    delta = v.probability("delta", delta)
    return math.log(N) - math.log(16.0) - math.log(_log_over_delta(4.0 * N, delta))


@dataclass(frozen=True)
class ItemwiseBound:
    """(alpha, delta') bounded d_EM-DP of PrivEMDItemWise ([Imola]_ Thm 4.4).

    Attributes
    ----------
    alpha : float
        sup_w h(N; m, m w)/w (= m alpha0 K / 2).
    alpha0 : float
        Item-level d_X-DP parameter.
    delta : float
        The delta fed into Thm 4.3.
    delta_out : float
        delta' = delta e^{h(N; m, m)} (may be >= 1).
    model : {"local", "central"}
    m : int
        Items per user.
    n : int or None
        Users (central model).
    N : int
        Shuffled items (m or m n).
    condition_ok : bool
        alpha0 < ln(N / (16 ln(4N/delta))) (Thm 4.3).
    vacuous : bool
        delta_out >= 1 or delta_out > max_delta_out: the delta part says nothing useful.
    valid : bool
        condition_ok and not vacuous.
    validity_limit : float
        ln(N / (16 ln(4N/delta))).
    composition_alpha : float
        m alpha0: basic composition over the m items ([FDM19]_, quoted in
        [Imola]_ Sec. 1.1.1); advanced composition does not improve it in the worst case
        (see :func:`composition_alpha`).
    max_delta_out : float
        The cap on delta_out that was applied.
    guarantee : Guarantee or None
        None when not valid: a guarantee is never issued with a vacuous delta'.
    notes : tuple of str
    """

    alpha: float
    alpha0: float
    delta: float
    delta_out: float
    model: str
    m: int
    n: int | None
    N: int
    condition_ok: bool
    vacuous: bool
    valid: bool
    validity_limit: float
    composition_alpha: float
    max_delta_out: float = DEFAULT_MAX_DELTA_OUT
    guarantee: Guarantee | None = field(default=None, compare=False)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in (
            "alpha", "alpha0", "delta", "delta_out", "model", "m", "n", "N", "condition_ok",
            "vacuous", "valid", "validity_limit", "composition_alpha", "max_delta_out")}
        out["delta_out"] = _finite_or_none(self.delta_out)
        out["notes"] = list(self.notes)
        out["guarantee"] = None if self.guarantee is None else self.guarantee.to_dict()
        return out


def _finite_or_none(x: float):
    return x if math.isfinite(x) else None


def _alpha_delta(alpha0: float, m: int, N: int, delta: float) -> tuple[float, float]:
    K = _K(alpha0, N, m, delta)
    alpha = m * alpha0 * K / 2.0
    log_delta = math.log(delta)
    growth = m * math.log1p(math.tanh(alpha0 / 2.0) * K)
    # delta' must not be understated. log_dout carries the rounding of log, sqrt, exp, tanh
    # and log1p: an absolute error of a few ulps of its terms' magnitude, which exp turns into
    # a relative error of the same size (at delta = 1e-300, |log delta| = 691: up to ~1e-13,
    # far more than exp's own ulp). Add 16 ulps of the terms' magnitude, then round up.
    slack = 16.0 * 2.0 ** -52 * (abs(log_delta) + abs(growth) + 1.0)
    log_dout = log_delta + growth + slack
    dout = math.nextafter(math.exp(log_dout), math.inf) if log_dout < 700 else math.inf
    return alpha, dout


def _delta_out_check(dout: float, delta: float, cap: float) -> tuple[bool, str | None]:
    """(vacuous, note) for delta' = ``dout`` against the cap ``cap``."""
    if not dout < 1.0:
        return True, f"delta' = delta e^h = {dout:.3g} >= 1: the guarantee is vacuous"
    if dout > cap:
        return True, (f"delta' = delta e^h = {dout:.3g} exceeds max_delta_out={cap:g}: "
                      "the guarantee is vacuous (lower alpha0 or delta, or raise "
                      "max_delta_out)")
    if dout > 1e3 * delta:
        return False, f"delta' = {dout:.3g} is {dout / delta:.3g} times the input delta"
    return False, None


def emd_itemwise(
    alpha0: float,
    m: int,
    delta: float,
    model: str = "local",
    n: int | None = None,
    *,
    max_delta_out: float = DEFAULT_MAX_DELTA_OUT,
    strict: bool = False,
) -> ItemwiseBound:
    """Privacy of PrivEMDItemWise for a given item parameter alpha0 ([Imola]_ Thm 4.4).

    Parameters
    ----------
    alpha0 : float
        (alpha0, 0) d_X-DP parameter of the item randomizer (> 0).
    m : int
        Items per user (public, bounded setting).
    delta : float
        delta of Thm 4.3, in (0, 1); the output's delta is delta' = delta e^{h(N; m, m)}.
    model : {"local", "central"}
        Local: each user shuffles her own m items (N = m). Central: the server shuffles all
        m n items (N = m n).
    n : int, optional
        Number of users; required for the central model, ignored (must be None or 1...) for
        the local model.
    max_delta_out : float, default 1e-3
        Largest delta' accepted, in (0, 1]; above it the bound is vacuous (``valid=False``,
        no guarantee).
    strict : bool, default False
        Raise ValueError instead of returning ``valid=False`` when the Thm 4.3 condition
        fails or delta' is vacuous.

    Returns
    -------
    ItemwiseBound
        alpha and delta', their validity, notes and (when valid) the guarantee.

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range (``alpha0`` in (0, 700], ``model`` "local" or
        "central", ``n`` required for "central"); with ``strict``, the bound is not valid.

    References
    ----------
    [Imola]_ Thm 4.3 and Thm 4.4.
    """
    alpha0, m, delta, model, n, N = _iv_itemwise(alpha0, m, delta, model, n)
    cap = v.probability("max_delta_out", max_delta_out, closed_high=True)
    alpha, dout = _alpha_delta(alpha0, m, N, delta)
    limit = thm43_validity_limit(N, delta)
    cond = alpha0 < limit
    vacuous, dnote = _delta_out_check(dout, delta, cap)
    notes: list[str] = []
    if not cond:
        notes.append(
            f"Thm 4.3 condition fails: needs alpha0 < ln(N/(16 ln(4N/delta))) = {limit:.6g} "
            f"with N={N}, got alpha0={alpha0}"
        )
    if dnote is not None:
        notes.append(dnote)
    valid = cond and not vacuous
    if strict and not valid:
        raise ValueError("; ".join(notes))
    g = None
    if valid:
        g = Guarantee(
            notion="metric_emd", model=model, epsilon=alpha, delta=dout,
            neighbour=Neighbour.BOUNDED_EMD,
            theorem="Imola-Roy Chowdhury-Chaudhuri, Metric DP at the user level, Thm 4.4 "
                    "(via Thm 4.3), alpha = sup_w h/w = m alpha0 K/2",
            parameters={"alpha0": alpha0, "m": m, "n": n, "N": N, "delta": delta,
                        "max_delta_out": cap},
        )
    return ItemwiseBound(
        alpha=alpha, alpha0=alpha0, delta=delta, delta_out=dout, model=model, m=m, n=n, N=N,
        condition_ok=cond, vacuous=vacuous, valid=valid, validity_limit=limit,
        composition_alpha=m * alpha0, max_delta_out=cap, guarantee=g, notes=tuple(notes),
    )


def _alpha_sup_numeric(alpha0: float, m: int, delta: float, model: str = "local",
                      n: int | None = None, grid: int = 2000) -> float:
    """sup over a log grid of w in [1e-9, 1] of h(N; m, m w)/w (check of the closed form)."""
    alpha0, m, delta, model, n, N = _iv_itemwise(alpha0, m, delta, model, n)
    best = 0.0
    for k in range(grid + 1):
        w = 10.0 ** (-9.0 * k / grid)
        best = max(best, _h(N, m, m * w, alpha0, delta) / w)
    return best


# --------------------------------------------------------------------------- inverse
@dataclass(frozen=True)
class ItemwiseInverse:
    """The largest alpha0 whose Thm 4.4 alpha does not exceed a target.

    Attributes
    ----------
    target_alpha : float
    alpha0 : float
        Largest alpha0 found (bisection; alpha(alpha0) <= target is verified).
    bound : ItemwiseBound
        Thm 4.4 evaluated at ``alpha0``.
    limited_by : {"target", "validity", "delta_out"}
        What stopped alpha0 from growing.
    composition_alpha0 : float
        target / m (basic composition).
    asymptotic_alpha0 : float
        Eq. (6) (local) or (7) (central) of [Imola]_; nan outside their ranges.
    asymptotic_alpha : float
        Thm 4.4 alpha actually obtained at ``asymptotic_alpha0`` (nan if not computable).
    """

    target_alpha: float
    alpha0: float
    bound: ItemwiseBound
    limited_by: str
    composition_alpha0: float
    asymptotic_alpha0: float
    asymptotic_alpha: float

    def to_dict(self) -> dict:
        return {
            "target_alpha": self.target_alpha,
            "alpha0": self.alpha0,
            "alpha": self.bound.alpha,
            "delta_out": _finite_or_none(self.bound.delta_out),
            "valid": self.bound.valid,
            "limited_by": self.limited_by,
            "composition_alpha0": self.composition_alpha0,
            "asymptotic_alpha0": _finite_or_none(self.asymptotic_alpha0),
            "asymptotic_alpha": _finite_or_none(self.asymptotic_alpha),
            "bound": self.bound.to_dict(),
        }


def emd_itemwise_alpha0(
    target_alpha: float,
    m: int,
    delta: float,
    model: str = "local",
    n: int | None = None,
    *,
    max_delta_out: float = DEFAULT_MAX_DELTA_OUT,
    rtol: float = 1e-10,
) -> ItemwiseInverse:
    """Largest alpha0 with Thm 4.4 alpha <= target_alpha (errs on the safe side).

    alpha(alpha0) = m alpha0 K(alpha0)/2 and delta'(alpha0) are increasing in alpha0, so
    bisection on alpha0 in (0, hi) keeps a lower end that is verified to satisfy
    alpha <= target, the Thm 4.3 condition and delta' <= max_delta_out (default 1e-3;
    delta' < 1 always); the lower end is returned. ``hi`` starts at the validity limit (the
    condition is strict) and the bracket is checked before bisecting. The returned bound is
    valid (never vacuous).

    Parameters
    ----------
    target_alpha : float
        The alpha the release must reach (> 0).
    m : int
        Items per user.
    delta : float
        delta of Thm 4.3, in (0, 1).
    model : {"local", "central"}
    n : int, optional
        Number of users (required for "central").
    max_delta_out : float
        Largest delta' accepted, in (0, 1].
    rtol : float
        Relative width of the final bisection bracket.

    Returns
    -------
    ItemwiseInverse
        alpha0 and the bound :func:`emd_itemwise` gives for it.

    Raises
    ------
    ValueError
        If an argument is out of range, or no alpha0 > 0 satisfies the constraints (the
        Thm 4.3 condition has no room, or max_delta_out <= delta); the message names the
        best reachable value.

    References
    ----------
    [Imola]_ Thm 4.3 and Thm 4.4.
    """
    target = v.positive("target_alpha", target_alpha)
    _, m, delta, model, n, N = _iv_itemwise(1.0, m, delta, model, n)
    max_dout = v.probability("max_delta_out", max_delta_out, closed_high=True)
    rtol = v.positive("rtol", rtol)
    limit = thm43_validity_limit(N, delta)
    if limit <= 0:
        raise ValueError(
            f"target_alpha={target} cannot be reached: Thm 4.3 needs alpha0 < "
            f"ln(N/(16 ln(4N/delta))) = {limit:.6g} <= 0 for N={N}, delta={delta}; "
            f"increase m or n (need N > 16 ln(4N/delta))"
        )
    if max_dout <= delta:
        raise ValueError(
            f"max_delta_out={max_dout} cannot be reached: delta' = delta e^h > delta={delta} "
            f"for every alpha0 > 0 (best reachable: just above {delta})"
        )

    def ok(a0: float) -> bool:
        al, dout = _alpha_delta(a0, m, N, delta)
        return al <= target and not _delta_out_check(dout, delta, max_dout)[0] and a0 < limit

    lo, hi = 0.0, limit
    # bracket check: alpha -> 0 and delta' -> delta as alpha0 -> 0
    probe = min(limit / 2.0, target / m)
    while not ok(probe):
        probe /= 2.0
        if probe < 1e-300:
            raise ValueError(f"target_alpha={target} cannot be reached (no alpha0 > 0 found)")
    lo = probe
    if ok(math.nextafter(limit, 0.0)):
        lo = math.nextafter(limit, 0.0)
    else:
        while hi - lo > rtol * lo:
            mid = 0.5 * (lo + hi)
            if ok(mid):
                lo = mid
            else:
                hi = mid
    bound = emd_itemwise(lo, m, delta, model, n, max_delta_out=max_dout)
    if not bound.valid:  # pragma: no cover - ok(lo) holds
        raise ValueError(f"no valid alpha0 found for target_alpha={target}: {bound.notes}")
    al_hi, dout_hi = _alpha_delta(hi, m, N, delta)
    if al_hi > target:
        limited = "target"
    elif _delta_out_check(dout_hi, delta, max_dout)[0]:
        limited = "delta_out"
    else:
        limited = "validity"
    a_asym = asymptotic_alpha0(target, m, delta, model, n)
    a_asym_alpha = math.nan
    if math.isfinite(a_asym) and a_asym > 0:
        a_asym_alpha = _alpha_delta(a_asym, m, N, delta)[0]
    return ItemwiseInverse(
        target_alpha=target, alpha0=lo, bound=bound, limited_by=limited,
        composition_alpha0=target / m, asymptotic_alpha0=a_asym,
        asymptotic_alpha=a_asym_alpha,
    )


def asymptotic_alpha0(alpha: float, m: int, delta: float, model: str = "local",
                      n: int | None = None) -> float:
    """Eq. (6) (local) / eq. (7) (central) of [Imola]_: the suggested alpha0 for a target.

    With L = sqrt(m ln(4 m e^alpha / delta)) and s = alpha (local) or alpha sqrt(n) (central):
    alpha0 = s / (32 L) if s <= 32 L; 2 ln(s / (16 L)) if 32 L < s < m (local) or m sqrt(n)
    (central); nan otherwise (outside the stated ranges). These are asymptotic
    recommendations: check them with :func:`emd_itemwise`.

    Parameters
    ----------
    alpha : float
        Target alpha (> 0).
    m : int
        Items per user.
    delta : float
        In (0, 1).
    model : {"local", "central"}
    n : int, optional
        Number of users (required for "central").

    Returns
    -------
    float
        The suggested alpha0, or nan outside the stated ranges.

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range.

    References
    ----------
    [Imola]_ eqs. (6) and (7).
    """
    alpha = v.positive("alpha", alpha)
    _, m, delta, model, n, _N = _iv_itemwise(1.0, m, delta, model, n)
    L = math.sqrt(m * (_log_over_delta(4.0 * m, delta) + alpha))
    s = alpha if model == "local" else alpha * math.sqrt(n)
    cap = m if model == "local" else m * math.sqrt(n)
    if s <= 32.0 * L:
        return s / (32.0 * L)
    if s < cap:
        return 2.0 * math.log(s / (16.0 * L))
    return math.nan


# --------------------------------------------------------------------------- composition
@dataclass(frozen=True)
class CompositionBound:
    """Composition baselines for releasing m alpha0 d_X-DP items ([Imola]_ Sec. 4.2).

    Attributes
    ----------
    alpha : float
        m alpha0: the d_EM alpha from basic composition (sup over the moved fraction w).
    advanced_epsilon_full : float
        Advanced composition ([DRV10]_, heterogeneous form) for all m items
        moved by distance 1 (||v||_1 = m):
        min(m alpha0, alpha0 sqrt(2 m ln(1/delta)) + m alpha0 (e^{alpha0} - 1)).
    advanced_alpha : float
        sup over w of the better of the two bounds divided by w; attained at a single moved
        item (||v||_1 = 1), where advanced composition is no better than basic, so it equals
        m alpha0: composition cannot give the 1/sqrt(m) factor ("Comparison with
        Composition", [Imola]_ Sec. 4.2).
    """

    alpha: float
    advanced_epsilon_full: float
    advanced_alpha: float


def composition_alpha(alpha0: float, m: int, delta: float) -> CompositionBound:
    """Basic and advanced composition baselines (see :class:`CompositionBound`).

    Parameters
    ----------
    alpha0 : float
        d_X-DP parameter of the item randomizer, in (0, 700].
    m : int
        Items per user (>= 1).
    delta : float
        delta of advanced composition, in (0, 1).

    Returns
    -------
    CompositionBound
        m alpha0 (basic) and the advanced-composition alphas.

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range.

    References
    ----------
    [DRV10]_ Thm III.3 (advanced composition), the baseline of [Imola]_ Sec. 4.
    """
    alpha0 = _iv_alpha0(alpha0)
    m = v.count("m", m, 1)
    delta = v.probability("delta", delta)

    def adv(k: float) -> float:  # k = ||v||_1 >= ||v||_2^2 when every v_i <= 1
        return min(k * alpha0, alpha0 * math.sqrt(2.0 * k * math.log(1.0 / delta))
                   + k * alpha0 * math.expm1(alpha0))

    # alpha(w) = adv(m w) / w. adv(k)/k is non-increasing in k, so the supremum over
    # w >= 1/m is at k = 1 (one item moved by distance 1); below 1/m a single item moves by
    # m w < 1 and basic composition gives m alpha0 exactly.
    best = max(m * alpha0, m * adv(1.0))
    return CompositionBound(alpha=m * alpha0, advanced_epsilon_full=adv(float(m)),
                            advanced_alpha=best)


# --------------------------------------------------------------------------- validation
def _iv_alpha0(alpha0) -> float:
    a = v.positive("alpha0", alpha0)
    if a > 700:
        raise ValueError(f"alpha0 must be <= 700 (e^alpha0 overflows), got alpha0={alpha0!r}")
    return a


def _iv_itemwise(alpha0, m, delta, model, n):
    alpha0 = _iv_alpha0(alpha0)
    m = v.count("m", m, 1)
    delta = v.probability("delta", delta)
    model = v.choice("model", model, MODELS)
    if model == "central":
        if n is None:
            raise ValueError("n is required for the central model, got n=None")
        n = v.count("n", n, 1)
        N = m * n
    else:
        if n is not None:
            n = v.count("n", n, 1)
        N = m
    return alpha0, m, delta, model, n, N
