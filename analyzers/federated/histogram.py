"""Federated histograms under distributed DP with secure aggregation ([Bagdasaryan22]_ Alg. 1).

Users (one cell each, out of D) are split into shards of at most S_max clients. In every
shard each client runs :func:`shuffledp.encoders.federated.client_update` (one-hot vector +
Polya-difference noise, mod m) and the shard is summed by secure aggregation
(:func:`shuffledp.secagg.secure_sum`, Bonawitz et al. 2017: the server sees only the sum).
The sums of the survivors are decoded to the centred representative in (-m/2, m/2] and
added over shards.

Privacy (eps, distributed model, the user-level relation of ``neighbour``). Replace-one and
zero-out keep the set of participants (n public): each shard's noise is calibrated for
n_min = ceil((1 - dropout) S) survivors (the *planned* dropout fraction, [Bagdasaryan22]_
Sec. 4 "Handling dropouts"; errata row 6), and k >= n_min survivors' noise is DL(a) plus
independent extra noise whose law is the same for both neighbours (post-processing); a shard
that ends with fewer survivors is refused (``FederatedRefused``), never released with less
noise. Add/remove (n private) needs a public shard plan and charges the joining user's own
noise share, and a shard with fewer than n_min survivors is topped up to n_min shares by the
publisher instead of refused (a refusal would depend on n; real secure aggregation keeps a
threshold of more than two thirds of a shard's clients, ``ShardPlan.secagg_threshold``):
:mod:`shuffledp.analyzers.federated.population` (errata row 13). Shards hold
disjoint users, so they compose in parallel (eps in total). The Polya tables are exact
up to ``SAMPLER_TV_MAX`` per draw (:mod:`shuffledp.encoders.noise.polya`), so the release is
within total variation tau = (draws) x SAMPLER_TV_MAX of the ideal eps-DP mechanism and is
(eps, (1 + e^eps) tau)-DP (the same charge as :func:`shuffledp.accounting.summation.delta_split`;
delta < 2e-21 at 10^5 clients x 10^4 entries): reported as such, never as pure eps.

``aggregation="plain"`` computes the same modular sums of the same survivors' vectors
directly (the paper's own simulation): the vectors, noise and release are identical, only
the cryptography is skipped. ``aggregation="simulate"`` samples each shard's total noise
directly, Polya(k/n_min, a) - Polya(k/n_min, a) for k survivors (Polya shapes add), which
has exactly the law of the k clients' noise sum, in O(D) per shard instead of O(S D): for
large research sweeps. The default and every private release use real secure aggregation.

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards sparse federated analytics", Alg. 1, Thm
   4.2, Sec. 4 -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.events import EpsDelta, polya_sum_event
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.accounting.summation import SAMPLER_TV_MAX
from shuffledp.errors import Refused
from shuffledp.randomness import SEEDED_NOTE

THEOREM = ("Bagdasaryan et al., PoPETs 2022, Thm 4.2 (distributed discrete Laplace from "
           "Polya differences, modulo clipping as post-processing), shards in parallel, "
           "noise over-provisioned for the planned dropout")
THEOREM_ADD_REMOVE = (
    "Bagdasaryan et al., PoPETs 2022, Thm 4.2 on a public shard plan (max_users, shard = id "
    "mod K, Polya shape 1/n_min), the joining user's own noise share charged by the Renyi "
    "divergence of Polya(1, a) against Polya(1 + 1/n_min, a) (van Erven and Harremoes 2014, "
    "Thm 9; Canonne, Kamath and Steinke 2020, Prop. 12), a shard with fewer than n_min "
    "survivors topped up to n_min shares by the publisher, shards in parallel")
THEOREM_CENTRAL = ("discrete Laplace mechanism (Ghosh, Roughgarden and Sundararajan 2012) "
                   "added once per entry by a trusted server, as Polya(1, a) - Polya(1, a) "
                   "(Bagdasaryan et al., PoPETs 2022, Thm 4.2 with one share)")
#: per-shard entries that count users or follow their number (the evaluation's view): a
#: release under add/remove (n private) must not publish them (:func:`public_shards`); the
#: SecAgg+ graph, threshold and bytes are chosen from the shard's clients, and the top-up
#: from its survivors
PRIVATE_SHARD_KEYS = ("clients", "survivors", "dropped_by_round", "server_seconds",
                      "client_seconds_mean", "top_up_shares", "bytes_up_per_client",
                      "secagg_graph", "secagg_degree", "secagg_threshold")


class FederatedRefused(Refused):
    """A shard ended with fewer survivors than its noise was calibrated for (under add/remove:
    than real secure aggregation can unmask; short shards are otherwise topped up)."""


@dataclass(frozen=True)
class FederatedHistogram:
    """Output of :func:`federated_histogram`.

    Attributes
    ----------
    counts : ndarray of int64, shape (D,)
        Noisy counts (sum over shards of the centred modular sums).
    guarantee : Guarantee
    shards : list of dict
        Per shard: clients, survivors, n_min, and for secure aggregation its timings and
        bytes per client. Under add/remove the counts and timings are the evaluation's view,
        not part of the release: publish :func:`public_shards`.
    """

    counts: np.ndarray
    guarantee: Guarantee
    shards: list = field(default_factory=list)


def sampler_delta(epsilon: float, draws: int) -> float:
    """delta charged to the Polya tables: (1 + e^eps) draws SAMPLER_TV_MAX (a mechanism within
    total variation tau of an eps-DP one is (eps, (1 + e^eps) tau)-DP).

    Parameters
    ----------
    epsilon : float
        The round's epsilon, > 0 (e^eps is capped at e^700).
    draws : int
        Number of Polya draws made (>= 1).

    Returns
    -------
    float
        (1 + e^eps) draws SAMPLER_TV_MAX (not capped at 1).

    Raises
    ------
    TypeError
        If ``epsilon`` is not a real number or ``draws`` not an integer.
    ValueError
        If ``epsilon`` is not positive and finite or ``draws`` < 1.

    References
    ----------
    [Bagdasaryan22]_ Sec. 4 (the Polya noise of the distributed discrete Laplace); the
    statistical-distance-to-(eps, delta) step is that of Balle et al., CCS 2020.
    """
    eps = v.positive("epsilon", epsilon)
    return (1.0 + math.exp(min(eps, 700.0))) * v.count("draws", draws) * SAMPLER_TV_MAX


def decode_centred(sums: np.ndarray, modulus: int, low: int | None = None) -> np.ndarray:
    """The centred representative of each modular sum: ((s + low) mod m) - low, int64, exact.

    The one decoder of every modular sum in the toolkit (the federated rounds and the
    shuffle heatmap's analyzer). Each value is mapped to its representative in
    [-low, m - low); the default low = (m - 1) // 2 gives the symmetric window
    (-m/2, m/2], i.e. s if s <= m // 2 else s - m.

    Parameters
    ----------
    sums : numpy.ndarray
        Sums mod ``modulus`` (any integers; reduced mod m).
    modulus : int
        The modulus m >= 1.
    low : int, optional
        How far below zero the window reaches, 0 <= low < m (default (m - 1) // 2; the
        shuffle heatmap passes ``ProtocolParams.decode_low``, its headroom below zero).

    Returns
    -------
    numpy.ndarray of int64
        Each sum's representative in [-low, m - low).

    Raises
    ------
    ValueError
        If ``modulus`` < 1 or ``low`` is outside [0, m).
    OverflowError
        If a sum does not fit in int64 (from numpy).

    References
    ----------
    [Bagdasaryan22]_ Alg. 1 (the server decodes the modular sum); Ghazi et al. (2023),
    "Differentially Private Heatmaps", App. F (the shuffle analyzer's decoding).
    """
    m = v.count("modulus", modulus, 1)
    lo = (m - 1) // 2 if low is None else v.count("low", low, 0)
    if lo >= m:
        raise ValueError(f"low must be in [0, modulus), got low={low!r} with modulus={m}")
    s = np.asarray(sums, dtype=np.int64)
    return (s + lo) % m - lo


def federated_release(
    counts: np.ndarray,
    shards: list,
    *,
    epsilon: float,
    neighbour: Neighbour,
    draws: int,
    parameters: dict[str, Any],
    seeded: bool,
    share: Any = None,
    model: str = "distributed",
) -> FederatedHistogram:
    """The release of one federated round: the decoded counts with their guarantee.

    ``draws`` Polya draws were made in all (for :func:`sampler_delta`; under add/remove the
    public bound, not the actual count); ``parameters`` must hold ``length`` (D) and
    ``sensitivity``. Shards hold disjoint users and each draws the full DL(a): parallel
    composition of one event, i.e. the event itself.

    ``share`` (an :class:`~shuffledp.analyzers.federated.population.AddRemoveNoise`) is
    required under add/remove and refused otherwise: the noise was calibrated at its
    ``noise_epsilon`` and the release is (epsilon, e^{eps_noise} delta_1 + sampler)-DP
    (:mod:`shuffledp.analyzers.federated.population`), stated with an
    :class:`~shuffledp.accounting.events.EpsDelta` event.

    ``model="central"``: one DL(a) per entry added by a trusted server to the exact sum of
    the participants; its law does not depend on n, so no share charge (``share`` refused).

    Parameters
    ----------
    counts : numpy.ndarray
        The decoded noisy counts.
    shards : list of dict
        Per-shard descriptions (see :func:`public_shards` for what may be published).
    epsilon : float
        The round's epsilon, > 0.
    neighbour : Neighbour or str
        The neighbour relation of the guarantee.
    draws : int
        Polya draws made in all (>= 1); under add/remove the public bound.
    parameters : dict
        The mechanism's parameters; must hold ``length`` and ``sensitivity``.
    seeded : bool
        True when the randomness was seeded (a reproducible evaluation, noted as such).
    share : AddRemoveNoise, optional
        Required with ``neighbour`` add/remove and ``model="distributed"``; refused otherwise.
    model : {"distributed", "central"}
        Who adds the noise.

    Returns
    -------
    FederatedHistogram
        ``counts``, ``shards`` and the (epsilon, delta) guarantee with its accounting event.

    Raises
    ------
    TypeError
        If ``epsilon`` is not a real number or ``draws`` not an integer.
    ValueError
        On a bad ``epsilon``, ``draws``, ``neighbour`` or ``model``; on a missing ``share``
        under distributed add/remove, a ``share`` that spends more than ``epsilon``, or a
        ``share`` given where none applies.
    KeyError
        If ``parameters`` lacks ``sensitivity`` or ``length`` (outside distributed add/remove).

    References
    ----------
    [Bagdasaryan22]_ Alg. 1, Thm 4.2, Sec. 4.
    """
    eps = v.positive("epsilon", epsilon)
    nb = Neighbour.parse(neighbour)
    model = v.choice("model", model, ("distributed", "central"))
    tv_delta = sampler_delta(eps, draws)
    notes: tuple[str, ...] = (SEEDED_NOTE,) if seeded else ()
    if nb is Neighbour.ADD_REMOVE and model == "distributed":
        if share is None:
            raise ValueError("an add/remove federated release needs the charge of the joining "
                             "user's noise share (share=add_remove_noise(...)), got share=None")
        if share.noise_epsilon + share.share_epsilon > eps * (1 + 1e-12):
            raise ValueError(f"share spends {share.noise_epsilon + share.share_epsilon!r} > "
                             f"epsilon={eps!r}")
        delta = min(1.0, share.certified_delta + tv_delta)
        floor = parameters.get("secagg_floor")
        # the fewest survivors a topped-up shard's sum can hold: SecAgg unmasks >= 2, a shard
        # of the planned size >= secagg_floor; without SecAgg one survivor's sum is seen
        worst = share.server_view_epsilon(2 if floor else 1)
        planned = share.server_view_epsilon(floor) if floor else worst
        notes = (
            f"add/remove: the noise and the shard layout depend only on public numbers "
            f"(max_users, shard_size, dropout: n_min={share.n_min} survivors per shard); "
            "holds for every data set of at most max_users users and every dropout pattern: "
            "a shard with k < n_min survivors is topped up by the publisher with n_min - k "
            "noise shares, so the published noise never holds fewer than n_min (whether a "
            "shard was topped up follows n and is not published)",
            *((f"secure aggregation unmasks a shard of c clients only with at least "
               "max(2, floor(2c/3) + 1, min(n_min, the 2^-40 binomial quantile of its "
               f"survivors at the planned dropout)) survivors (secagg_floor={floor} for a "
               "shard of the planned size); a round with a shard below it is refused "
               "(FederatedRefused, or SecAggAborted when the clients leave during "
               "unmasking), and that refusal is not covered (its probability depends on "
               "the shard's size)",) if floor else ()),
            f"the joining user's own noise share is charged: eps_share="
            f"{share.share_epsilon:.4g}, noise calibrated at eps_noise="
            f"{share.noise_epsilon:.4g}",
            "the secure-aggregation server sees who takes part and a shard's sum before its "
            "top-up: against it the protection is the zero-out one, eps_noise="
            f"{share.noise_epsilon:.4g} for a shard of at least n_min survivors, eps_noise + "
            "Delta ln(n_min / k) (pure) for one topped up from k survivors: at most "
            f"{worst:.4g} (k = {2 if floor else 1})"
            + (f", {planned:.4g} for a shard of the planned size (k >= secagg_floor)"
               if floor else ""),
        ) + notes
        g = Guarantee(notion="approximate", model="distributed", epsilon=eps, delta=delta,
                      neighbour=nb, theorem=THEOREM_ADD_REMOVE,
                      parameters={**parameters, **share.to_dict(), "top_up": True,
                                  "server_view_epsilon_max": worst,
                                  "server_view_epsilon_planned": planned}, notes=notes)
        g = g.with_event(EpsDelta(epsilon=eps, delta=delta, neighbour=nb,
                                  label="federated round, add/remove (joining share charged)"))
        return FederatedHistogram(counts=counts, guarantee=g, shards=shards)
    if share is not None:
        raise ValueError(f"share is the add/remove charge of a distributed round; "
                         f"neighbour={nb.token!r}, model={model!r} needs none")
    g = Guarantee(notion="approximate", model=model, epsilon=eps,
                  delta=tv_delta, neighbour=nb,
                  theorem=THEOREM if model == "distributed" else THEOREM_CENTRAL,
                  parameters=dict(parameters), notes=notes)
    g = g.with_event(polya_sum_event([eps], [parameters["sensitivity"]],
                                     [parameters["length"]], g.delta, nb, model))
    return FederatedHistogram(counts=counts, guarantee=g, shards=shards)


def public_shards(hist: FederatedHistogram) -> list[dict]:
    """The per-shard entries a release may publish: all of them when n is public
    (replace-one, zero-out), without :data:`PRIVATE_SHARD_KEYS` under add/remove.

    Parameters
    ----------
    hist : FederatedHistogram
        A release of :func:`federated_release`.

    Returns
    -------
    list of dict
        Copies of the shard entries, with :data:`PRIVATE_SHARD_KEYS` removed under add/remove.

    Raises
    ------
    AttributeError
        If ``hist`` has no ``guarantee`` or ``shards`` (not a FederatedHistogram).

    References
    ----------
    [Bagdasaryan22]_ Sec. 4 (under add/remove the number of participants is private).
    """
    if hist.guarantee.neighbour is not Neighbour.ADD_REMOVE:
        return [dict(s) for s in hist.shards]
    return [{k: x for k, x in s.items() if k not in PRIVATE_SHARD_KEYS} for s in hist.shards]


__all__ = ["PRIVATE_SHARD_KEYS", "FederatedHistogram", "FederatedRefused", "decode_centred",
           "federated_release", "public_shards", "sampler_delta"]
