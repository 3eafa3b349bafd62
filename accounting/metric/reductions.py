"""BoundedEMDReduction ([Imola]_ Sec. 5, Alg. 3, Thm 5.3) and discrete d_EM group privacy.

Thm 5.3: if the bounded mechanism is (alpha, delta)-bounded d_EM-DP (local or central) with

    alpha = eps / ((1 + sqrt 2) r + (3 / s) ln(1/delta)),

then sampling s items with replacement from every user's dataset and running the mechanism
is (eps, 2 delta, r)-discrete d_EM-DP (Def. 5.1 / 5.2) in the same model. The inverse
direction gives eps = alpha ((1 + sqrt 2) r + (3/s) ln(1/delta)), and the smallest s that
reaches a given (eps, alpha, r, delta) is s = 3 ln(1/delta) / (eps/alpha - (1 + sqrt 2) r).

Fact 5.1 (group privacy, Lemma A.2): a pair at distance d is protected with eps ceil(d/r);
the delta factor is printed differently in Fact 5.1 and Table 1, see
:func:`_discrete_group_privacy`.

References
----------
.. [Imola] Imola et al. (preprint), "Metric Differential Privacy at the User-Level" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee, Neighbour

_C = 1.0 + math.sqrt(2.0)
MODELS = ("local", "central")


@dataclass(frozen=True)
class ReductionBound:
    """Parameters of BoundedEMDReduction ([Imola]_ Thm 5.3).

    Attributes
    ----------
    epsilon : float
        eps of the (eps, 2 delta, r)-discrete d_EM-DP guarantee.
    alpha : float
        alpha the bounded mechanism must satisfy ((alpha, delta)-bounded d_EM-DP).
    r : float
        Distance threshold of the discrete notion, in (0, 1].
    s : int
        Samples per user.
    delta : float
        delta of the bounded mechanism; the output guarantee has 2 delta.
    model : {"local", "central"}
    guarantee : Guarantee
    """

    epsilon: float
    alpha: float
    r: float
    s: int
    delta: float
    model: str
    guarantee: Guarantee | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        return {
            "epsilon": self.epsilon, "alpha": self.alpha, "r": self.r, "s": self.s,
            "delta": self.delta, "delta_out": 2 * self.delta, "model": self.model,
            "guarantee": None if self.guarantee is None else self.guarantee.to_dict(),
        }


def _denominator(r: float, s: int, delta: float) -> float:
    return _C * r + 3.0 / s * math.log(1.0 / delta)


def reduction_alpha(epsilon: float, r: float, s: int, delta: float,
                    model: str = "local") -> ReductionBound:
    """alpha = eps / ((1 + sqrt 2) r + (3/s) ln(1/delta)) needed for (eps, 2 delta, r).

    Parameters
    ----------
    epsilon : float
        Target eps of the discrete d_EM-DP guarantee (> 0).
    r : float
        Distance threshold in (0, 1].
    s : int
        Samples drawn with replacement from every user's dataset (>= 1).
    delta : float
        In (0, 1/2) (the output has 2 delta).
    model : {"local", "central"}

    Returns
    -------
    ReductionBound
        alpha, with the parameters and the output's guarantee.

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range (``r`` in (0, 1], ``delta`` in (0, 1/2), ``s`` an
        integer >= 1, ``model`` "local" or "central").

    References
    ----------
    [Imola]_ Thm 5.3.
    """
    eps, r, s, delta, model = _iv(epsilon, "epsilon", r, s, delta, model)
    alpha = eps / _denominator(r, s, delta)
    return _result(eps, alpha, r, s, delta, model)


def reduction_epsilon(alpha: float, r: float, s: int, delta: float,
                      model: str = "local") -> ReductionBound:
    """Inverse of :func:`reduction_alpha`: eps = alpha ((1 + sqrt 2) r + (3/s) ln(1/delta)).

    Parameters
    ----------
    alpha : float
        alpha of the bounded mechanism (> 0).
    r : float
        Distance threshold in (0, 1].
    s : int
        Samples per user (>= 1).
    delta : float
        In (0, 1/2) (the output has 2 delta).
    model : {"local", "central"}

    Returns
    -------
    ReductionBound
        eps of the (eps, 2 delta, r)-discrete d_EM-DP guarantee, with the parameters.

    Raises
    ------
    TypeError, ValueError
        An argument is out of its range (``r`` in (0, 1], ``delta`` in (0, 1/2), ``s`` an
        integer >= 1, ``model`` "local" or "central").

    References
    ----------
    [Imola]_ Thm 5.3.
    """
    alpha, r, s, delta, model = _iv(alpha, "alpha", r, s, delta, model)
    eps = alpha * _denominator(r, s, delta)
    return _result(eps, alpha, r, s, delta, model)


def reduction_samples(epsilon: float, alpha: float, r: float, delta: float) -> int:
    """Smallest s with reduction_alpha(eps, r, s, delta).alpha >= alpha.

    s = ceil(3 ln(1/delta) / (eps/alpha - (1 + sqrt 2) r)); requires eps/alpha > (1+sqrt 2) r.

    Parameters
    ----------
    epsilon : float
        Target eps (> 0).
    alpha : float
        alpha of the bounded mechanism (> 0).
    r : float
        Distance threshold in (0, 1].
    delta : float
        In (0, 1/2).

    Returns
    -------
    int
        The number of samples s per user.

    Raises
    ------
    ValueError
        An argument is out of its range, or eps/alpha <= (1 + sqrt 2) r (no s reaches
        ``alpha``).

    References
    ----------
    [Imola]_ Thm 5.3.
    """
    eps = v.positive("epsilon", epsilon)
    alpha = v.positive("alpha", alpha)
    r = _iv_r(r)
    delta = _iv_delta(delta)
    room = eps / alpha - _C * r
    if room <= 0:
        raise ValueError(
            f"alpha={alpha} cannot be reached for epsilon={eps}, r={r}: even s -> infinity "
            f"gives alpha = eps/((1+sqrt 2) r) = {eps / (_C * r):.6g}"
        )
    s = max(1, math.ceil(3.0 * math.log(1.0 / delta) / room))
    while eps / _denominator(r, s, delta) < alpha:  # guard the ceil against rounding
        s += 1
    return s


def _discrete_group_privacy(epsilon: float, delta: float, r: float, d: float) -> tuple[
        float, float]:
    """(eps k, delta') for a pair at d_EM distance d, k = ceil(d/r) ([Imola]_ Fact 5.1).

    Chaining Lemma A.2 k - 1 times gives delta' = delta sum_{j<k} e^{j eps}. Fact 5.1 prints
    delta exp(k) and Table 1 prints delta exp(eps k); the largest of the three (capped at 1)
    is returned, so the value is valid whichever reading is taken.
    """
    eps = v.positive("epsilon", epsilon)
    delta = _iv_delta(delta)
    r = _iv_r(r)
    d = v.real("d", d)
    if not (0.0 <= d <= 1.0):
        raise ValueError(f"d must be in [0, 1], got d={d!r}")
    k = max(1, math.ceil(d / r - 1e-12))
    chain = delta * sum(math.exp(j * eps) for j in range(k))  # Lemma A.2 applied k - 1 times
    printed = delta * max(math.exp(k), math.exp(eps * k))
    return eps * k, min(1.0, max(chain, printed))


def _result(eps, alpha, r, s, delta, model) -> ReductionBound:
    g = Guarantee(
        notion="discrete_emd", model=model, epsilon=eps, delta=min(1.0, 2.0 * delta),
        neighbour=Neighbour.DISCRETE_EMD,
        theorem=("Imola et al., Metric Differential Privacy at the User-Level, Thm 5.3 "
                 "(BoundedEMDReduction, Alg. 3)"),
        parameters={"r": r, "s": s, "alpha": alpha, "delta_bounded": delta},
    )
    return ReductionBound(epsilon=eps, alpha=alpha, r=r, s=s, delta=delta, model=model,
                          guarantee=g)


def _iv_r(r) -> float:
    r = v.real("r", r)
    if not (0.0 < r <= 1.0):
        raise ValueError(f"r must be in (0, 1], got r={r!r}")
    return r


def _iv_delta(delta) -> float:
    delta = v.probability("delta", delta)
    if delta >= 0.5:
        raise ValueError(f"delta must be in (0, 0.5) (the output has 2 delta), got "
                         f"delta={delta!r}")
    return delta


def _iv(x, name, r, s, delta, model):
    x = v.positive(name, x)
    r = _iv_r(r)
    s = v.count("s", s, 1)
    delta = _iv_delta(delta)
    model = v.choice("model", model, MODELS)
    return x, r, s, delta, model
