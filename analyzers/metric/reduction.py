"""BoundedEMDReduction ([Imola]_ Alg. 3, Thm 5.3): bounded mechanisms on unbounded data.

Users hold datasets of different (private) sizes. Every user's dataset is replaced by s
items drawn uniformly *with replacement* from it, so all users hold exactly s items and
any mechanism that is (alpha, delta)-bounded d_EM-DP (Def. 3.2: equal-size datasets) can
run on the samples. By Thm 5.3 the composition is (eps, 2 delta, r)-discrete d_EM-DP
(Def. 5.1 / 5.2) in the same model, with

    eps = alpha ((1 + sqrt 2) r + (3 / s) ln(1 / delta))

(:func:`shuffledp.accounting.metric.reductions.reduction_epsilon`). The mechanism is any callable
that takes the (n, s) sample array and returns a release carrying a
:class:`~shuffledp.accounting.guarantee.Guarantee` with neighbour
``Neighbour.BOUNDED_EMD``: its (alpha, delta) is read from that record, never assumed.

Sampling draws from the cryptographically secure generator unless ``rng`` is a seed or a
numpy Generator (research).

References
----------
.. [Imola] Imola et al. (preprint), "Metric DP at the user-level", Alg. 3, Thm 5.3, Def. 5.1-5.2 --
   full entry in docs/references.md
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.accounting.metric.reductions import ReductionBound, reduction_epsilon
from shuffledp.randomness import RngLike, SecureRandom, noise_source


@dataclass(frozen=True)
class ReductionRelease:
    """Output of :func:`bounded_emd_reduction`.

    Attributes
    ----------
    inner : Any
        The bounded mechanism's release on the samples.
    sizes : ndarray of int64, shape (n,)
        The users' dataset sizes (private: not part of the release; kept for evaluation).
    bound : ReductionBound
        The Thm 5.3 parameters (eps, alpha, r, s, delta, model).
    guarantee : Guarantee
        (eps, 2 delta, r)-discrete d_EM-DP, ``Neighbour.DISCRETE_EMD``.
    """

    inner: Any
    sizes: np.ndarray
    bound: ReductionBound
    guarantee: Guarantee


def sample_with_replacement(datasets: Sequence[Any], s: int,
                            rng: RngLike | SecureRandom = None) -> np.ndarray:
    """(n, s) items: s uniform draws with replacement from each user's dataset ([Imola]_ Alg. 3).

    ``datasets[j]`` is a non-empty 1-d sequence of item indices (any sizes).

    Parameters
    ----------
    datasets : sequence of array_like
        Each user's items: a non-empty 1-d integer array (at most 2^32 items).
    s : int
        Draws per user, >= 1.
    rng : None, SecureRandom, int or Generator
        ``None``: secure randomness. A seed or Generator: reproducible evaluation.

    Returns
    -------
    numpy.ndarray of int64, shape (n, s)
        The draws, one row per user.

    Raises
    ------
    TypeError
        If ``s`` is not an integer.
    ValueError
        If ``s`` < 1, ``datasets`` is empty, or a dataset is not a non-empty 1-d integer array
        or holds more than 2^32 items.

    References
    ----------
    [Imola]_ Alg. 3 (BoundedEMDReduction's sampling step).
    """
    s = v.count("s", s)
    rows = []
    for j, d in enumerate(datasets):
        a = np.asarray(d)
        if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"datasets[{j}] must be a non-empty 1-d array of item indices, "
                             f"got {d!r:.60}")
        rows.append(a.astype(np.int64))
    if not rows:
        raise ValueError("datasets must hold at least one user, got 0")
    sizes = np.array([r.size for r in rows], dtype=np.int64)
    if sizes.max() > 1 << 32:
        raise ValueError(f"a dataset of {int(sizes.max())} items is too large (max 2^32)")
    bounds = np.repeat(sizes, s)
    src = noise_source(rng)
    if isinstance(src, SecureRandom):
        idx = src.below_any(bounds).astype(np.int64)
    else:
        idx = src.integers(0, bounds)
    offsets = np.repeat(np.concatenate([[0], np.cumsum(sizes)[:-1]]), s)
    return np.concatenate(rows)[offsets + idx].reshape(len(rows), s)


def bounded_emd_reduction(
    datasets: Sequence[Any],
    s: int,
    mechanism: Callable[[np.ndarray], Any],
    *,
    r: float,
    delta: float,
    rng: RngLike | SecureRandom = None,
) -> ReductionRelease:
    """Run a bounded d_EM-DP mechanism on s samples per user ([Imola]_ Alg. 3, Thm 5.3).

    Parameters
    ----------
    datasets : sequence of array_like
        Each user's items (1-d, any size >= 1).
    s : int
        Samples per user (>= 1).
    mechanism : callable
        ``mechanism(samples)`` with samples of shape (n, s); must return an object with a
        ``guarantee`` attribute: an (alpha, delta_m)-bounded d_EM-DP record
        (``Neighbour.BOUNDED_EMD``).
    r : float
        Distance threshold of the discrete guarantee, in (0, 1].
    delta : float
        delta of Thm 5.3, in (0, 1/2); the mechanism's own delta_m must not exceed it (a pure
        mechanism is (alpha, delta)-bounded for every delta). The output has 2 delta.
    rng : None, SecureRandom, int or Generator
        Randomness of the sampling; ``None`` is the secure generator.

    Raises
    ------
    TypeError
        If ``mechanism`` is not callable.
    ValueError
        Bad input, or a mechanism whose release is not a bounded d_EM-DP guarantee or whose
        delta exceeds ``delta``.

    Returns
    -------
    ReductionRelease
        The inner mechanism's release, the dataset sizes, the Thm 5.3 bound and the discrete
        d_EM-DP guarantee (epsilon of Thm 5.3, 2 delta).

    References
    ----------
    [Imola]_ Alg. 3, Thm 5.3, Def. 5.1-5.2.
    """
    if not callable(mechanism):
        raise TypeError(f"mechanism must be callable, got mechanism={mechanism!r:.60}")
    samples = sample_with_replacement(datasets, s, rng)
    inner = mechanism(samples)
    g = getattr(inner, "guarantee", None)
    if not isinstance(g, Guarantee) or g.neighbour is not Neighbour.BOUNDED_EMD:
        raise ValueError(f"mechanism must return a release with a bounded d_EM-DP guarantee "
                         f"(neighbour {Neighbour.BOUNDED_EMD.name}), got guarantee={g!r:.120}")
    if g.delta > delta:
        raise ValueError(f"the mechanism's delta={g.delta!r} exceeds delta={delta!r}")
    bound = reduction_epsilon(g.epsilon, r, s, delta, g.model)
    if bound.guarantee is None:  # pragma: no cover - reduction_epsilon always attaches one
        raise AssertionError("reduction_epsilon returned a bound without a guarantee")
    sizes = np.array([np.asarray(d).size for d in datasets], dtype=np.int64)
    out = Guarantee(
        notion=bound.guarantee.notion, model=g.model, epsilon=bound.epsilon,
        delta=bound.guarantee.delta, neighbour=Neighbour.DISCRETE_EMD,
        theorem=bound.guarantee.theorem,
        parameters={**bound.guarantee.parameters, "inner_theorem": g.theorem},
        notes=g.notes,
    )
    return ReductionRelease(inner=inner, sizes=sizes, bound=bound, guarantee=out)


__all__ = ["ReductionRelease", "bounded_emd_reduction", "sample_with_replacement"]
