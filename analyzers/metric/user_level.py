"""User-level baselines of the frequency-estimation experiments: the release record
(:class:`BaselineRelease`) and user-level k-ary randomized response (:func:`user_level_krr`);
Hadamard response is in :mod:`shuffledp.analyzers.metric.hadamard_response`.

References
----------
.. [Imola] Imola et al. (preprint), "Metric DP at the user-level", Sec. 6 (the user-level
   baselines) -- full entry in docs/references.md
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.analyzers.metric.itemwise import as_user_items
from shuffledp.encoders.metric.mechanisms import GKRR, one_item_per_user
from shuffledp.randomness import (
    SEEDED_NOTE,
    RngLike,
    SecureRandom,
    is_seeded,
    noise_source,
    word_source,
)


@dataclass(frozen=True)
class BaselineRelease:
    """Output of :func:`user_level_krr`.

    Attributes
    ----------
    estimate : ndarray, shape (k,)
        Unbiased estimate of K~ (may have negative entries; sums to 1).
    reports : ndarray, shape (k,)
        Histogram (counts) of the n k-RR reports.
    epsilon : float
        Per-user budget of the k-RR.
    guarantee : Guarantee
        epsilon-DP, local model, replacement of one user's dataset.
    """

    estimate: np.ndarray
    reports: np.ndarray
    epsilon: float
    guarantee: Guarantee

    def to_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "reports": self.reports, "epsilon": self.epsilon,
                "guarantee": self.guarantee.to_dict()}


def iv_user_level(users: Any, k: int, epsilon: float) -> tuple[np.ndarray, int, float]:
    """Checked arguments of a user-level baseline: (items of shape (n, m), k >= 2, eps > 0)."""
    k = v.count("k", k, 2)
    eps = v.positive("epsilon", epsilon)
    return as_user_items(users, k), k, eps


def user_level_krr(users: Any, k: int, epsilon: float,
                   rng: RngLike | SecureRandom = None) -> BaselineRelease:
    """The user-level DP baseline: one sampled item per user through epsilon-k-RR.

    Parameters
    ----------
    users : array_like, shape (n, m)
        Item indices 0..k-1 (every user holds m items).
    k : int
        Domain size (>= 2).
    epsilon : float
        Per-user budget (the whole budget goes to the one report).
    rng : None, SecureRandom, int or Generator
        None: the secure generator (a private release); a seed: research run.

    Returns
    -------
    BaselineRelease
        The unbiased estimate (v - q) / (p - q) with p, q the exact k-RR probabilities of
        the integer weights, and an epsilon-DP local guarantee (replace one user).

    Raises
    ------
    TypeError
        If ``users`` does not hold integers, ``k`` is not an integer or ``epsilon`` not a real
        number.
    ValueError
        If ``users`` is ragged, empty or holds items outside 0..k-1, ``k`` < 2, or ``epsilon``
        is not positive.

    References
    ----------
    [Imola]_ Sec. 6 (the user-level baselines, Lemma 6.4).
    """
    items, k, eps = iv_user_level(users, k, epsilon)
    n, m = items.shape
    rng = noise_source(rng)
    krr = GKRR(k, 1, 1.0, eps)
    reports = krr.sample(one_item_per_user(items, word_source(rng)), rng=rng)
    counts = np.bincount(reports, minlength=k)
    p, _, q = krr.probabilities()
    estimate = (counts / n - q) / (p - q)
    notes = (SEEDED_NOTE,) if is_seeded(rng) else ()
    g = Guarantee(notion="pure", model="local", epsilon=eps, delta=0.0,
                  neighbour=Neighbour.REPLACE_ONE, theorem=BASELINE_THEOREM,
                  parameters={"k": k, "m": m, "n": n, "mechanism": "k-RR of one sampled item"},
                  notes=("each user's report depends on her dataset only through one "
                         "uniformly sampled item",) + notes)
    return BaselineRelease(estimate=estimate, reports=counts, epsilon=eps, guarantee=g)

BASELINE_THEOREM = (
    "user-level k-RR baseline (substitute for Imola et al. Lemma 6.4): one uniformly sampled "
    "item per user through k-randomised response (Kairouz et al. 2016), epsilon-LDP")


__all__ = ["BASELINE_THEOREM", "BaselineRelease", "user_level_krr"]
