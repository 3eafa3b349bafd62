"""The device of federated histograms ([Bagdasaryan22]_ Alg. 1, ClientUpdate).

A client encodes its location as a one-hot vector over the D cells, adds X - Y with X, Y
i.i.d. Polya(1 / n_min, e^{-eps / Delta}) per cell, and reduces mod m ("modulo clipping").
The sum of n_min surviving clients' noise is exactly discrete Laplace with parameter
e^{-eps/Delta}; more survivors add independent Polya noise on top, which is post-processing
of that eps-DP release. Fewer than n_min survivors are refused by the analyzer (the noise
would fall short of the calibration). The mod-m reduction commutes with the modular sum
(post-processing), so the release is eps-DP for any m ([Bagdasaryan22]_ Thm 4.2). Delta is
the l1 sensitivity of one user's one-hot vector under the neighbour relation: 1 (add/remove
a user), 2 (replace).

Noise is drawn by the exact Polya table sampler of :mod:`shuffledp.encoders.polya` from the
cryptographically secure generator unless ``rng`` is a seed (research simulation).

References
----------
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4), Alg. 1, Thm 4.2.
"""

from __future__ import annotations

import math

import numpy as np

from shuffledp import _validation as v
from shuffledp._rng import RngLike
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.crypto import SecureRandom
from shuffledp.encoders.polya import polya_difference


def noise_parameters(epsilon: float, neighbour: Neighbour | str) -> tuple[int, float]:
    """(Delta, a = e^{-eps / Delta}) for one-hot vectors under ``neighbour``."""
    nb = Neighbour.parse(neighbour)
    if nb not in (Neighbour.ADD_REMOVE, Neighbour.REPLACE_ONE):
        raise ValueError(f"neighbour must be add/remove or replace-one, got {nb.name}")
    delta = 2 if nb is Neighbour.REPLACE_ONE else 1
    return delta, math.exp(-v.positive("epsilon", epsilon) / delta)


def client_update(cell: int, n_cells: int, epsilon: float, n_min: int, modulus: int, *,
                  neighbour: Neighbour | str = Neighbour.ADD_REMOVE,
                  rng: RngLike | SecureRandom = None) -> np.ndarray:
    """One client's vector: ModuloClip(one_hot(cell) + X - Y, m) ([Bagdasaryan22]_ Alg. 1)."""
    d = v.count("n_cells", n_cells)
    cell = v.bounded_count("cell", cell, 0, d - 1)
    n_min = v.count("n_min", n_min)
    m = v.count("modulus", modulus, 2)
    _, a = noise_parameters(epsilon, neighbour)
    x = polya_difference(1.0 / n_min, a, d, rng)
    x[cell] += 1
    return np.mod(x, m)


__all__ = ["client_update", "noise_parameters"]
