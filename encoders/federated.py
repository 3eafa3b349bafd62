"""The device of federated histograms ([Bagdasaryan22]_ Alg. 1, ClientUpdate).

A client encodes its location as a one-hot vector over the D cells, adds X - Y with X, Y
i.i.d. Polya(1 / n_min, e^{-eps / Delta}) per cell, and reduces mod m ("modulo clipping").
The sum of n_min surviving clients' noise is exactly discrete Laplace with parameter
e^{-eps/Delta}; more survivors add independent Polya noise on top, which is post-processing
of that eps-DP release *when both neighbours have the same participants* (replace-one,
zero-out). Under add/remove the joining user's own share changes that extra noise, which
:mod:`shuffledp.analyzers.federated.population` charges (the protocol then passes a
calibrated ``epsilon`` and a public n_min here). Fewer than n_min survivors are refused by
the analyzer (the noise would fall short of the calibration). The mod-m reduction commutes
with the modular sum (post-processing), so the release is eps-DP for any m
([Bagdasaryan22]_ Thm 4.2). Delta is the l1 sensitivity of one user's vector under the
neighbour relation: l1_bound (add/remove or zero-out a user), 2 l1_bound (replace).

Noise is drawn by the exact Polya table sampler of :mod:`shuffledp.encoders.noise.polya` from the
cryptographically secure generator unless ``rng`` is a seed (research simulation).

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Sparse Federated Analytics", Alg. 1, Thm 4.2
   -- full entry in docs/references.md
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.budget import dl_parameter, share_shape
from shuffledp.accounting.guarantee import Neighbour
from shuffledp.encoders.noise.polya import polya_difference
from shuffledp.randomness import RngLike, SecureRandom, noise_source


def noise_parameters(epsilon: float, neighbour: Neighbour | str,
                     l1_bound: int = 1) -> tuple[int, float]:
    """(Delta, a = e^{-eps / Delta}) for vectors of l1 norm at most ``l1_bound``:
    Delta = l1_bound (add/remove or zero out a user) or 2 l1_bound (replace one user).

    Parameters
    ----------
    epsilon : float
        The noise's privacy parameter, > 0.
    neighbour : Neighbour or str
        ``"add_remove"``, ``"replace"`` or ``"zero_out"``.
    l1_bound : int
        Largest l1 norm of one user's vector, >= 1.

    Returns
    -------
    (int, float)
        Delta and the Polya/discrete-Laplace parameter a in (0, 1).

    Raises
    ------
    ValueError
        If ``epsilon`` is not a finite positive number, ``l1_bound`` < 1, or ``neighbour``
        is another relation (e.g. ``"bounded_emd"``) or unknown.
    TypeError
        If ``l1_bound`` is not an integer.

    References
    ----------
    [Bagdasaryan22]_ Alg. 1 and Thm 4.2 (a = e^{-eps / Delta}).
    """
    nb = Neighbour.parse(neighbour)
    if nb not in (Neighbour.ADD_REMOVE, Neighbour.REPLACE_ONE, Neighbour.ZERO_OUT):
        raise ValueError(f"neighbour must be add_remove, replace or zero_out, got "
                         f"neighbour={nb.token!r}")
    bound = v.count("l1_bound", l1_bound)
    delta = 2 * bound if nb is Neighbour.REPLACE_ONE else bound
    # rounded toward 1 where the float would lose more than eps (dl_parameter)
    return delta, dl_parameter(v.positive("epsilon", epsilon), delta)


def noisy_vector(x: np.ndarray, epsilon: float, l1_bound: int, n_min: int, modulus: int, *,
                 neighbour: Neighbour | str = Neighbour.ADD_REMOVE,
                 rng: RngLike | SecureRandom = None) -> np.ndarray:
    """ModuloClip(x + X - Y, m), X, Y ~ Polya(1/n_min, e^{-eps/Delta}) per entry
    ([Bagdasaryan22]_ Alg. 1 ClientUpdate); x a non-negative integer vector of l1 norm at
    most ``l1_bound``.

    Parameters
    ----------
    x : ndarray of int, 1D
        The user's non-negative integer vector.
    epsilon : float
        The noise's privacy parameter, > 0.
    l1_bound : int
        Bound on the l1 norm of ``x`` (sets Delta).
    n_min : int
        Fewest clients whose noise must sum to discrete Laplace, >= 1.
    modulus : int
        The modulus m >= 2.
    neighbour : Neighbour or str
        As :func:`noise_parameters`.
    rng : SecureRandom, int, numpy.random.Generator or None
        Source of the noise (None: the secure generator).

    Returns
    -------
    ndarray of int64
        Entries in [0, m).

    Raises
    ------
    ValueError
        If ``x`` is not a 1D non-negative integer vector or its l1 norm exceeds
        ``l1_bound``, or a parameter is out of range (as :func:`noise_parameters`).
    TypeError
        If a count is not an integer.

    References
    ----------
    [Bagdasaryan22]_ Alg. 1 (ClientUpdate, ModuloClip) and Thm 4.2.
    """
    x = np.asarray(x)
    if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer) or (x < 0).any():
        raise ValueError(f"x must be a 1-d non-negative integer vector, got {x!r:.60}")
    bound = v.count("l1_bound", l1_bound)
    if int(x.sum()) > bound:
        raise ValueError(f"x has l1 norm {int(x.sum())} above l1_bound={bound}")
    n_min = v.count("n_min", n_min)
    m = v.count("modulus", modulus, 2)
    _, a = noise_parameters(epsilon, neighbour, bound)
    return np.mod(x.astype(np.int64) + polya_difference(share_shape(n_min), a, x.size, rng), m)


def client_update(cell: int, n_cells: int, epsilon: float, n_min: int, modulus: int, *,
                  neighbour: Neighbour | str = Neighbour.ADD_REMOVE,
                  rng: RngLike | SecureRandom = None) -> np.ndarray:
    """One client's vector: ModuloClip(one_hot(cell) + X - Y, m) ([Bagdasaryan22]_ Alg. 1).

    Under add/remove a deployment passes the public plan's n_min and the calibrated noise
    epsilon (:func:`shuffledp.analyzers.federated.population.add_remove_noise`'s
    ``noise_epsilon``), not the release's epsilon: the joining user's own share is paid from
    the difference.

    Parameters
    ----------
    cell : int
        The client's cell, 0 <= cell < n_cells.
    n_cells : int
        The number of cells D >= 1.
    epsilon, n_min, modulus, neighbour, rng
        As :func:`noisy_vector` (with ``l1_bound=1``).

    Returns
    -------
    ndarray of int64, shape (n_cells,)
        Entries in [0, m).

    Raises
    ------
    ValueError, TypeError
        If ``cell`` is outside 0..n_cells-1, or as :func:`noisy_vector`.

    References
    ----------
    [Bagdasaryan22]_ Alg. 1 (ClientUpdate).
    """
    d = v.count("n_cells", n_cells)
    x = np.zeros(d, dtype=np.int64)
    x[v.bounded_count("cell", cell, 0, d - 1)] = 1
    return noisy_vector(x, epsilon, 1, n_min, modulus, neighbour=neighbour, rng=rng)


def device_update(cell: int, n_cells: int, epsilon: float, n_min: int, modulus: int, *,
                  neighbour: Neighbour | str = Neighbour.ADD_REMOVE,
                  source: SecureRandom | None = None, rng: object = None) -> np.ndarray:
    """Deployment path of :func:`client_update`: the noise comes from the secure generator
    (``source``, a fresh SecureRandom by default). A seed is refused: ``rng`` exists only to
    reject it with a clear message (use :func:`client_update` for research simulations).

    Parameters
    ----------
    cell, n_cells, epsilon, n_min, modulus, neighbour
        As :func:`client_update`.
    source : SecureRandom, optional
        The secure source (default: a fresh one).
    rng : None
        Must be None.

    Returns
    -------
    ndarray of int64, shape (n_cells,)

    Raises
    ------
    ValueError
        If ``rng`` is not None, or as :func:`client_update`.
    TypeError
        If ``source`` is not a SecureRandom, or as :func:`client_update`.

    References
    ----------
    [Bagdasaryan22]_ Alg. 1 (ClientUpdate).
    """
    if rng is not None:
        raise ValueError(f"device_update is the deployment path and draws its noise from the "
                         f"secure generator; it refuses a seed, got rng={rng!r} (use "
                         "client_update for reproducible research runs)")
    if source is not None and not isinstance(source, SecureRandom):
        raise TypeError(f"source must be a SecureRandom, got source={source!r}")
    return client_update(cell, n_cells, epsilon, n_min, modulus, neighbour=neighbour,
                         rng=source if source is not None else SecureRandom())


def encode_locations(cells: Any, weights: Any, n_cells: int, gamma: int, *,
                     rounding: str = "systematic",
                     rng: RngLike | SecureRandom = None) -> tuple[np.ndarray, int]:
    """A multi-location user's integer vector and its l1 bound ([Bagdasaryan22]_ Sec. 5.7).

    Weights are normalised to sum 1 (weighted normalisation), scaled by gamma and rounded
    stochastically to integers, unbiased entry by entry:

    * ``"independent"`` (the paper): each entry up with probability its fractional part;
      the l1 norm can reach gamma + d (d = ``n_cells``), the bound returned;
    * ``"systematic"`` (default): one uniform U, entry j gets floor(C_j + U) - floor(C_{j-1}
      + U) with C_j the cumulative scaled weights; every entry is still its floor or ceiling
      with the right probability, and the total is exactly gamma, so the bound is gamma (no
      (1 + d/gamma) noise blow-up).

    Parameters
    ----------
    cells : array_like of int, 1D
        The user's cells, each in 0..n_cells-1 (repeats add up).
    weights : array_like of float, 1D
        Their non-negative weights (same length, not all zero).
    n_cells : int
        The number of cells d >= 1.
    gamma : int
        The scale gamma >= 1.
    rounding : {"systematic", "independent"}
        The stochastic rounding rule.
    rng : SecureRandom, int, numpy.random.Generator or None
        Source of the rounding's randomness (None: the secure generator).

    Returns
    -------
    (vector, l1_bound)
        The integer vector (int64, shape (n_cells,)) and the bound on its l1 norm.

    Raises
    ------
    ValueError
        If ``cells`` and ``weights`` are not non-empty 1D arrays of one length, a cell is
        outside 0..n_cells-1, a weight is negative or non-finite, all weights are zero,
        ``rounding`` is unknown, or a count is < 1.
    TypeError
        If a count is not an integer.

    References
    ----------
    [Bagdasaryan22]_ Sec. 5.7 (multiple locations per user).
    """
    d = v.count("n_cells", n_cells)
    g = v.count("gamma", gamma)
    rounding = v.choice("rounding", rounding, ("systematic", "independent"))
    c = np.asarray(cells)
    w = np.asarray(weights, dtype=float)
    if c.ndim != 1 or c.size == 0 or c.shape != w.shape or not np.issubdtype(c.dtype,
                                                                              np.integer):
        raise ValueError("cells and weights must be non-empty 1-d arrays of one length "
                         f"(integer cells), got shapes {c.shape}, {w.shape}")
    if (c < 0).any() or (c >= d).any():
        raise ValueError(f"cells must be in 0..{d - 1}, got {int(c.min())}..{int(c.max())}")
    if not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError("weights must be finite, >= 0 and not all 0")
    dense = np.bincount(c, weights=w, minlength=d)
    scaled = dense / dense.sum() * g
    u = noise_source(rng)
    draw = (u.uint64(1)[0] / 2.0**64) if isinstance(u, SecureRandom) else u.random()
    if rounding == "systematic":
        cum = np.floor(np.cumsum(scaled) + draw)
        x = np.diff(np.concatenate([[np.floor(draw)], cum])).astype(np.int64)
        x[-1] += g - int(x.sum())  # float rounding of the cumulative sum: total exactly gamma
        return x, g
    fl = np.floor(scaled)
    ups = (u.uint64(d) / 2.0**64) if isinstance(u, SecureRandom) else u.random(d)
    return (fl + (ups < scaled - fl)).astype(np.int64), g + d


__all__ = ["client_update", "device_update", "encode_locations", "noise_parameters",
           "noisy_vector"]
