"""Federated histograms under distributed DP with secure aggregation ([Bagdasaryan22]_ Alg. 1).

Users (one cell each, out of D) are split into shards of at most S_max clients. In every
shard each client runs :func:`shuffledp.encoders.federated.client_update` (one-hot vector +
Polya-difference noise, mod m) and the shard is summed by secure aggregation
(:func:`shuffledp.secagg.secure_sum`, Bonawitz et al. 2017: the server sees only the sum).
The sums of the survivors are decoded to the centred representative in (-m/2, m/2] and
added over shards.

Privacy (eps, distributed model, the user-level relation of ``neighbour``): each shard's
noise is calibrated for n_min = ceil((1 - dropout) S) survivors (the *planned* dropout
fraction, [Bagdasaryan22]_ Sec. 4 "Handling dropouts"; errata row 6); a shard that ends with
fewer survivors is refused (``FederatedRefused``), never released with less noise. Shards
hold disjoint users, so they compose in parallel (eps in total). The Polya tables are exact
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
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4), Alg. 1, Thm 4.2, Sec. 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.events import polya_sum_event
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.accounting.summation import SAMPLER_TV_MAX
from shuffledp.errors import Refused
from shuffledp.randomness import SEEDED_NOTE

THEOREM = ("Bagdasaryan et al., PoPETs 2022, Thm 4.2 (distributed discrete Laplace from "
           "Polya differences, modulo clipping as post-processing), shards in parallel, "
           "noise over-provisioned for the planned dropout")


class FederatedRefused(Refused):
    """A shard ended with fewer survivors than its noise was calibrated for."""


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
        bytes per client.
    """

    counts: np.ndarray
    guarantee: Guarantee
    shards: list = field(default_factory=list)


def sampler_delta(epsilon: float, draws: int) -> float:
    """delta charged to the Polya tables: (1 + e^eps) draws SAMPLER_TV_MAX (a mechanism within
    total variation tau of an eps-DP one is (eps, (1 + e^eps) tau)-DP)."""
    eps = v.positive("epsilon", epsilon)
    return (1.0 + math.exp(min(eps, 700.0))) * v.count("draws", draws) * SAMPLER_TV_MAX


def decode_centred(sums: np.ndarray, modulus: int) -> np.ndarray:
    """The centred representative in (-m/2, m/2] of each modular sum (int64)."""
    s = np.asarray(sums, dtype=np.int64)
    return np.where(s > modulus // 2, s - modulus, s)


def federated_release(
    counts: np.ndarray,
    shards: list,
    *,
    epsilon: float,
    neighbour: Neighbour,
    draws: int,
    parameters: dict[str, Any],
    seeded: bool,
) -> FederatedHistogram:
    """The release of one federated round: the decoded counts with their guarantee.

    ``draws`` Polya draws were made in all (for :func:`sampler_delta`); ``parameters`` must
    hold ``length`` (D) and ``sensitivity``. Shards hold disjoint users and each draws the
    full DL(a): parallel composition of one event, i.e. the event itself.
    """
    eps = v.positive("epsilon", epsilon)
    g = Guarantee(notion="approximate", model="distributed", epsilon=eps,
                  delta=sampler_delta(eps, draws), neighbour=neighbour,
                  theorem=THEOREM, parameters=dict(parameters),
                  notes=(SEEDED_NOTE,) if seeded else ())
    g = g.with_event(polya_sum_event([eps], [parameters["sensitivity"]],
                                     [parameters["length"]], g.delta, neighbour,
                                     "distributed"))
    return FederatedHistogram(counts=counts, guarantee=g, shards=shards)


__all__ = ["FederatedHistogram", "FederatedRefused", "decode_centred", "federated_release",
           "sampler_delta"]
