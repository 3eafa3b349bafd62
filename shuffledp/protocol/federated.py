"""Federated rounds under distributed DP with secure aggregation ([Bagdasaryan22]_).

The protocol side of the federated family: one round runs every client's encoder
(:func:`shuffledp.encoders.federated.noisy_vector`: one-hot or scaled vector + Polya-difference
noise, mod m) and both secure-aggregation roles per shard (:func:`shuffledp.secagg.secure_sum`,
Bonawitz et al. 2017: the server sees only the sum); the analyzer
(:mod:`shuffledp.analyzers.federated.histogram`) decodes the shards' sums and states the
release's guarantee. :func:`adaptive_histogram` (Alg. 2), :func:`flat_histogram`,
:func:`quadtree_histogram` and :func:`central_adaptive_histogram` drive several rounds over the
partition tree of :mod:`shuffledp.analyzers.federated.tree`.

Privacy and the aggregation modes (``"secagg"``, ``"plain"``, ``"simulate"``, ``"central"``):
see :mod:`shuffledp.analyzers.federated.histogram`. Under add/remove (n private) nothing the
noise depends on may be a function of n: the shards and each client's Polya shape come from a
public :class:`~shuffledp.analyzers.federated.population.ShardPlan` (``max_users``), the
joining user's own noise share is charged (:mod:`shuffledp.analyzers.federated.population`),
a shard with fewer than n_min survivors is topped up to n_min noise shares by the publisher
(from the run's noise source: the secure generator of a private release) instead of refused,
eq. 7 of the adaptive algorithm uses a public number of users, and the per-shard counts and
top-ups are the evaluation's view, not part of the release
(:func:`shuffledp.analyzers.federated.histogram.public_shards`).

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards Sparse Federated Analytics",
   Alg. 1-2, Thm 4.2, Sec. 4-6 -- full entry in docs/references.md
.. [Cormode12] Cormode et al. (2012), "Differentially Private Spatial Decompositions"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.budget import (
    DEFAULT_EQ7,
    DEFAULT_EQ7_C,
    DEFAULT_FEDERATED_DROPOUT,
    dl_epsilon_for_std,
    dl_std,
    next_query_epsilon,
)
from shuffledp.accounting.composition import Accountant
from shuffledp.accounting.events import Sequential, polya_sum_event
from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR, Guarantee, Neighbour
from shuffledp.analyzers.federated.baselines import (
    geometric_budget,
    normalise_density,
    tree_least_squares,
)
from shuffledp.analyzers.federated.histogram import (
    FederatedHistogram,
    FederatedRefused,
    decode_centred,
    federated_release,
)
from shuffledp.analyzers.federated.population import (
    DEFAULT_SHARE_DELTA,
    ShardPlan,
    add_remove_noise,
    joining_share_epsilon,
)
from shuffledp.analyzers.federated.tree import THEOREM, AdaptiveRelease, PartitionTree, eq7_target
from shuffledp.encoders.federated import encode_locations, noise_parameters, noisy_vector
from shuffledp.encoders.noise.polya import polya_difference
from shuffledp.randomness import RngLike, SecureRandom, as_generator, is_seeded, noise_source
from shuffledp.secagg import secure_sum


def _iv(cells: Any, n_cells: int) -> np.ndarray:
    d = v.count("n_cells", n_cells)
    c = np.asarray(cells)
    if c.ndim != 1 or c.size == 0 or not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"cells must be a non-empty 1-d integer array (one cell per user), "
                         f"got shape {c.shape}, dtype {c.dtype}")
    bad = (c < 0) | (c >= d)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"cells[{i}]={int(c[i])} is outside 0..{d - 1}")
    return c.astype(np.int64)


def federated_histogram(
    cells: Any,
    n_cells: int,
    epsilon: float,
    **kwargs: Any,
) -> FederatedHistogram:
    """eps-DP histogram of the users' cells: one-hot vectors through :func:`federated_sum`.

    Parameters
    ----------
    cells : array_like of int, shape (n,)
        Each user's cell in 0..D-1.
    n_cells : int
        D.
    epsilon : float
        Budget of this histogram (> 0).
    **kwargs
        ``shard_size``, ``dropout``, ``dropped``, ``modulus``, ``neighbour``,
        ``max_users``, ``user_ids``, ``delta``, ``aggregation``, ``rng`` of
        :func:`federated_sum` (add/remove needs ``max_users``).

    Returns
    -------
    FederatedHistogram
        The noisy counts per cell, the shards' records and the guarantee.

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent (a cell outside 0..D-1, epsilon <= 0, or
        an argument of :func:`federated_sum`).
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min (replace-one, zero-out; under add/remove it
        is topped up instead, and refused only below real SecAgg's threshold
        :meth:`~shuffledp.analyzers.federated.population.ShardPlan.secagg_threshold`), or
        (add/remove) an n_min too small to pay for the joining user's noise share.
    """
    c = _iv(cells, n_cells)
    return federated_sum(_OneHot(c, int(n_cells)), 1, epsilon, **kwargs)


class _OneHot:
    """The users' one-hot vectors, built one at a time (n x D never held in memory)."""

    def __init__(self, cells: np.ndarray, d: int) -> None:
        self.cells, self.d = cells, d

    def __len__(self) -> int:
        return self.cells.size

    def __getitem__(self, i: int) -> np.ndarray:
        x = np.zeros(self.d, dtype=np.int64)
        x[self.cells[i]] = 1
        return x

    def total(self, idx: np.ndarray) -> np.ndarray:
        return np.bincount(self.cells[idx], minlength=self.d).astype(np.int64)


def federated_locations(
    users: Any,
    n_cells: int,
    epsilon: float,
    *,
    gamma: int = 1000,
    rounding: str = "systematic",
    **kwargs: Any,
) -> tuple[np.ndarray, FederatedHistogram]:
    """Multi-location users ([Bagdasaryan22]_ Sec. 5.7): weighted normalisation, scaling by
    gamma, unbiased randomized rounding (:func:`shuffledp.encoders.federated.encode_locations`),
    :func:`federated_sum` with the rounding's l1 bound; returns (counts / gamma, release).

    Parameters
    ----------
    users : sequence of (cells, weights) pairs
        One pair per user: her cells in 0..D-1 and their non-negative weights.
    n_cells : int
        D.
    epsilon : float
        Budget (> 0).
    gamma : int, default 1000
        Scaling of the normalised weights before rounding.
    rounding : str, default "systematic"
        Randomized rounding of :func:`shuffledp.encoders.federated.encode_locations`.
    **kwargs
        Further arguments of :func:`federated_sum` (``rng`` also drives the rounding).

    Returns
    -------
    tuple of (numpy.ndarray, FederatedHistogram)
        The estimated location counts (counts / gamma) and the release.

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent (no users, a user not a (cells, weights)
        pair, bad weights or cells, or an argument of :func:`federated_sum`).
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min (replace-one, zero-out; under add/remove it
        is topped up instead, and refused only below real SecAgg's threshold
        :meth:`~shuffledp.analyzers.federated.population.ShardPlan.secagg_threshold`), or
        (add/remove) an n_min too small to pay for the joining user's noise share.
    """
    rng = kwargs.pop("rng", None)
    src = noise_source(rng)
    vecs, bound = [], 0
    for j, pair in enumerate(users):
        try:
            cells, weights = pair
        except (TypeError, ValueError):
            raise ValueError(f"users[{j}] must be a (cells, weights) pair") from None
        x, bound = encode_locations(cells, weights, n_cells, gamma, rounding=rounding,
                                    rng=src)
        vecs.append(x)
    if not vecs:
        raise ValueError("users must hold at least one user, got 0")
    rel = federated_sum(vecs, bound, epsilon, rng=src if rng is not None else None, **kwargs)
    return rel.counts / gamma, rel


def _drop_rounds(dropped: Any, n: int) -> np.ndarray:
    """Round (0-3) in which each user drops, -1 for none, from ``dropped`` (bool or int)."""
    if dropped is None:
        return np.full(n, -1, dtype=np.int64)
    d = np.asarray(dropped)
    if d.shape != (n,):
        raise ValueError(f"dropped must have shape ({n},), got {d.shape}")
    if d.dtype == bool:
        return np.where(d, 2, -1).astype(np.int64)
    if not np.issubdtype(d.dtype, np.integer):
        raise ValueError(f"dropped must be booleans or rounds in -1..3, got dtype {d.dtype}")
    if ((d < -1) | (d > 3)).any():
        bad = int(d[(d < -1) | (d > 3)][0])
        raise ValueError(f"dropped must be booleans or rounds in -1..3, got dropped={bad}")
    return d.astype(np.int64)


def _simulated_shard(vecs, alive, D, eps, bound, n_min, m, nb, src, top_up=0) -> np.ndarray:
    """The decoded modular sum of a shard, sampled in O(D): the survivors' noise is a sum of
    k = len(alive) i.i.d. Polya(1/n_min, a) differences, i.e. exactly Polya(k/n_min, a) -
    Polya(k/n_min, a) (Polya variables with one a add their shapes); with the publisher's
    ``top_up`` shares (add/remove, k < n_min) the shape is (k + top_up) / n_min."""
    _, a = noise_parameters(eps, nb, bound)
    shape = (len(alive) + top_up) / n_min
    s = np.mod(_data_sum(vecs, alive, D) + polya_difference(shape, a, D, src), m)
    return decode_centred(s, m)


def _top_up(s: np.ndarray, shares: int, eps, bound, n_min, m, nb, src) -> np.ndarray:
    """The publisher's top-up of a short shard's modular sum: ``shares`` more X - Y, X, Y ~
    Polya(1/n_min, a), drawn at once as Polya(shares/n_min, a) - Polya(shares/n_min, a) (the
    same law) from the run's noise source (the secure generator of a private release)."""
    if not shares:
        return s
    _, a = noise_parameters(eps, nb, bound)
    return np.mod(s + polya_difference(shares / n_min, a, s.size, src), m)


def _data_sum(vecs: Any, idx: Any, D: int) -> np.ndarray:
    if len(idx) == 0:
        return np.zeros(D, dtype=np.int64)
    if isinstance(vecs, _OneHot):
        return vecs.total(np.asarray(idx, dtype=np.int64))
    return np.sum([vecs[i] for i in idx], axis=0).astype(np.int64)


def _layout(n: int, S: int, drop: float, nb: Neighbour, max_users: Any, user_ids: Any
            ) -> tuple[list[np.ndarray], list[int], ShardPlan | None]:
    """(users of each shard, n_min of each shard, the public plan or None).

    Add/remove: the public :class:`ShardPlan` (user id mod K, one n_min for all). Otherwise
    (n public): consecutive blocks of S users, n_min = ceil((1 - dropout) size).
    """
    if nb is Neighbour.ADD_REMOVE:
        if max_users is None:
            raise ValueError(
                "neighbour='add_remove' needs a public bound on the population declared before "
                "the data: pass max_users=N (the shards and every client's noise are planned "
                "for it; n itself is private), got max_users=None; or use neighbour='zero_out' "
                "or 'replace' (n public)")
        plan = ShardPlan(max_users, S, drop)
        shard_of = plan.assign(user_ids, n)
        groups = [np.flatnonzero(shard_of == j) for j in range(plan.shards)]
        return groups, [plan.n_min] * plan.shards, plan
    if max_users is not None or user_ids is not None:
        raise ValueError(f"max_users and user_ids plan an add/remove round; neighbour="
                         f"{nb.token!r} keeps n public, got max_users={max_users!r}")
    groups = [np.arange(lo, min(lo + S, n)) for lo in range(0, n, S)]
    return groups, [max(1, math.ceil((1 - drop) * g.size - 1e-9)) for g in groups], None


def federated_sum(
    vectors: Any,
    l1_bound: int,
    epsilon: float,
    *,
    shard_size: int = 10_000,
    dropout: float = 0.0,
    dropped: Any = None,
    modulus: int = 1 << 32,
    neighbour: Neighbour | str = DEFAULT_NEIGHBOUR,
    max_users: int | None = None,
    user_ids: Any = None,
    delta: float | None = None,
    aggregation: str = "secagg",
    rng: RngLike | SecureRandom = None,
    progress: Any = None,
) -> FederatedHistogram:
    """eps-DP sum of the users' integer vectors by Polya noise and secure aggregation per shard.

    Parameters
    ----------
    vectors : sequence of 1-d non-negative integer arrays (one length D)
        The users' encoded vectors, each of l1 norm at most ``l1_bound``.
    l1_bound : int
        The l1 bound that sets the sensitivity (Delta = l1_bound add/remove and zero-out,
        2 l1_bound replace).
    epsilon : float
        Budget (> 0).
    shard_size : int
        S_max: users per secure-aggregation shard (replace/zero-out: consecutive blocks of
        ``vectors``; add/remove: the public plan of ``max_users``).
    dropout : float in [0, 1)
        Planned dropout fraction: the noise is set for n_min = ceil((1 - dropout) S)
        (add/remove: of each shard's planned floor(N / K) users, :class:`ShardPlan`; a shard
        left with k < n_min survivors is then topped up with n_min - k shares by the
        publisher, recorded as the shard's ``top_up_shares``).
    dropped : array_like of bool or int, shape (n,), optional
        Simulated dropouts. Booleans: True drops before sending the masked input. Integers:
        the secure-aggregation round in which the user drops (0 advertise keys, 1 share
        keys, 2 masked input, 3 unmasking) or -1 for none; users dropping in round 3 sent
        their masked input and are in the sum.
    modulus : int
        m of the modular sum (2 .. 2^62).
    neighbour : Neighbour or str
        ZERO_OUT (default, :data:`~shuffledp.accounting.guarantee.DEFAULT_NEIGHBOUR`: n
        public, the shard sizes and counts of users may be released), ADD_REMOVE (n
        private; needs ``max_users``) or REPLACE_ONE.
    max_users : int, optional
        Add/remove only, required there: N, the public bound on the population the shards
        and the noise are planned for, declared before the data.
    user_ids : array_like of int, shape (n,), optional
        Add/remove only: each user's id, a non-negative integer fixed by her own identity
        (default 0..n-1, the position in a public roster); user id i is in shard i mod K.
    delta : float, optional
        Add/remove only: the delta spent on the joining user's own noise share (default
        :data:`~shuffledp.analyzers.federated.population.DEFAULT_SHARE_DELTA`); the release's
        delta adds the sampler's charge.
    aggregation : {"secagg", "secagg_complete", "plain", "simulate", "central"}
        Real secure aggregation (default; ``"secagg"`` runs SecAgg+ on a sparse random graph
        tolerating the planned ``dropout`` and 5% corrupted clients, :func:`shuffledp.secagg.
        secure_sum` with ``graph="sparse"``, and ``"secagg_complete"`` the full protocol where
        every pair of a shard's clients agrees a key), the same modular sum computed directly, the
        shard's noise sum sampled directly (same law; module docstring), or the central
        model: a trusted server adds DL(a) once per entry to the exact sum (no shards, no
        dropout; the guarantee names the central model).
    rng : None, SecureRandom, int or Generator
        Noise randomness: None the secure generator (a private release); a seed: research.
    progress : callable, optional
        Called with 1 after each shard (a progress bar's ``update``).

    Returns
    -------
    FederatedHistogram
        The noisy sum per coordinate, the shards' records and the guarantee.

    Raises
    ------
    ValueError
        If ``vectors`` is empty or ragged, or an argument is out of range or inconsistent
        (e.g. ``delta`` or ``user_ids`` outside add/remove, ``aggregation="central"`` with
        shards).
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min (replace-one, zero-out; under add/remove it
        is topped up instead, and refused only below real SecAgg's threshold
        :meth:`~shuffledp.analyzers.federated.population.ShardPlan.secagg_threshold`), or
        (add/remove) an n_min too small to pay for the joining user's noise share.
    """
    vecs = vectors if isinstance(vectors, _OneHot) else [np.asarray(x) for x in vectors]
    if not len(vecs):
        raise ValueError("vectors must hold at least one user, got 0")
    D = vecs[0].size
    if not isinstance(vecs, _OneHot) and any(x.shape != (D,) for x in vecs):
        raise ValueError("vectors must be 1-d arrays of one length")
    eps = v.positive("epsilon", epsilon)
    bound = v.count("l1_bound", l1_bound)
    S = v.count("shard_size", shard_size, 2)
    drop = v.interval("dropout", dropout, 0.0, 1.0, open_low=False)
    m = v.bounded_count("modulus", modulus, 2, 1 << 62)
    agg = v.choice("aggregation", aggregation, ("secagg", "secagg_complete", "plain", "simulate",
                                                "central"))
    nb = Neighbour.parse(neighbour)
    sens, _ = noise_parameters(eps, nb, bound)
    if delta is not None and nb is not Neighbour.ADD_REMOVE:
        raise ValueError(f"delta is the add/remove charge of the joining user's noise share; "
                         f"neighbour={nb.token!r} spends none, got delta={delta!r}")
    n = len(vecs)
    when = _drop_rounds(dropped, n)
    gone = (when >= 0) & (when <= 2)
    src = noise_source(rng)
    params = {"length": int(D), "l1_bound": bound, "shard_size": S, "dropout": drop,
              "modulus": m, "sensitivity": sens, "aggregation": agg}
    if agg == "central":
        return _central_sum(vecs, D, eps, bound, m, nb, gone, max_users, user_ids, src,
                            params, is_seeded(rng))
    groups, n_mins, plan = _layout(n, S, drop, nb, max_users, user_ids)
    share = None
    eps_noise = eps
    if plan is not None:
        d_share = DEFAULT_SHARE_DELTA if delta is None else v.probability("delta", delta)
        share = add_remove_noise(eps, d_share, bound, plan.n_min, int(D))
        eps_noise = share.noise_epsilon
        params.update(plan.to_dict())
    total = np.zeros(D, dtype=np.int64)
    shards = []
    secagg = agg in ("secagg", "secagg_complete")
    if plan is not None and secagg:
        params["secagg_floor"] = plan.secagg_floor
    for j, (idx, n_min) in enumerate(zip(groups, n_mins, strict=True)):
        alive = [k for k, i in enumerate(idx) if not gone[i]]
        top = 0
        # real SecAgg unmasks at least its threshold; under add/remove it follows the shard's
        # own clients (ShardPlan.secagg_threshold), a private number like the shard's size
        unmask = (plan.secagg_threshold(idx.size) if plan is not None and secagg
                  else min(n_min, idx.size))
        if plan is not None and secagg and len(alive) < unmask:
            raise FederatedRefused(
                f"shard {j}: {len(alive)} of {idx.size} clients survived, fewer than the "
                f"{unmask} secure aggregation unmasks in a shard of that size (secagg_threshold; "
                f"n_min={n_min}); not released (this refusal is not covered by the add/remove "
                "guarantee)")
        if len(alive) < n_min:
            if plan is None:  # n public: the refusal depends on the dropouts only
                raise FederatedRefused(
                    f"shard {j}: {len(alive)} of {idx.size} clients survived, fewer "
                    f"than n_min={n_min} the noise was set for (dropout={drop}); not released")
            top = plan.top_up(len(alive))  # add/remove: the publisher tops up, no refusal
        info: dict[str, Any] = {"shard": j, "clients": int(idx.size), "survivors": len(alive),
                                "n_min": n_min,
                                "dropped_by_round": [int((when[idx] == k).sum())
                                                     for k in range(4)]}
        if plan is not None:
            info["top_up_shares"] = top
        if agg == "simulate":
            total += _simulated_shard(vecs, idx[alive], D, eps_noise, bound, n_min, m, nb, src,
                                      top)
        else:
            noisy = [noisy_vector(vecs[i], eps_noise, bound, n_min, m, neighbour=nb, rng=src)
                     for i in idx]
            if secagg:
                drops = {k: set(np.flatnonzero(when[idx] == k).tolist()) for k in range(4)}
                res = (secure_sum(noisy, m, graph="sparse", min_clients=unmask,
                                  dropouts=drops) if agg == "secagg" else
                       secure_sum(noisy, m, threshold=max(2, unmask), dropouts=drops))
                s = res.total
                info.update(server_seconds=res.server_seconds,
                            client_seconds_mean=res.client_seconds_mean,
                            bytes_up_per_client=res.bytes_up_per_client,
                            secagg_graph=res.graph, secagg_degree=res.degree,
                            secagg_threshold=res.threshold)
            else:
                s = (np.sum([noisy[k] for k in alive], axis=0) % m if alive
                     else np.zeros(D, dtype=np.int64))
            total += decode_centred(_top_up(np.asarray(s, dtype=np.int64), top, eps_noise,
                                            bound, n_min, m, nb, src), m)
        shards.append(info)
        if progress is not None:  # e.g. a progress bar's update: one shard done
            progress(1)
    # the Polya tables' charge: one per draw; under add/remove from the public bound (at most
    # max_users clients and one top-up per shard draw), so that the stated delta does not
    # depend on n
    per = len(groups) if agg == "simulate" else (plan.max_users + plan.shards
                                                 if plan is not None else n)
    return federated_release(total, shards, epsilon=eps, neighbour=nb, draws=2 * D * per,
                             parameters=params, seeded=is_seeded(rng), share=share)


def _central_sum(vecs, D, eps, bound, m, nb, gone, max_users, user_ids, src, params,
                 seeded) -> FederatedHistogram:
    """The central model: the exact sum of the users who take part plus one DL(a) per entry
    (Polya(1, a) - Polya(1, a)), a = e^{-eps / Delta}; the noise law does not depend on n, so
    the guarantee is eps under every relation (plus the sampler's charge)."""
    if max_users is not None or user_ids is not None:
        raise ValueError("aggregation='central' has no shards: max_users and user_ids plan "
                         f"shards, got max_users={max_users!r}")
    alive = np.flatnonzero(~gone)
    _, a = noise_parameters(eps, nb, bound)
    data = _data_sum(vecs, alive, D)
    total = data + polya_difference(1.0, a, D, src)
    rel = federated_release(total, [{"shard": 0, "clients": len(vecs),
                                     "survivors": int(alive.size), "n_min": 1}],
                            epsilon=eps, neighbour=nb, draws=2 * D, parameters=params,
                            seeded=seeded, share=None, model="central")
    return rel


def adaptive_histogram(
    rows: Any,
    cols: Any,
    depth: int,
    epsilon: float,
    *,
    users_per_query: int | None = None,
    shard_size: int = 10_000,
    c: float = DEFAULT_EQ7_C,
    b: float = 2.0,
    dropout: float = DEFAULT_FEDERATED_DROPOUT,
    dropout_rate: float = 0.0,
    modulus: int = 1 << 32,
    aggregation: str = "simulate",
    max_queries: int = 30,
    threshold: float | None = None,
    schedule: str = "eq9",
    neighbour: Neighbour | str = DEFAULT_NEIGHBOUR,
    max_users: int | None = None,
    user_ids: Any = None,
    delta: float | None = None,
    eq7: str = DEFAULT_EQ7,
    rng: RngLike | SecureRandom = None,
    progress: Any = None,
) -> AdaptiveRelease:
    """[Bagdasaryan22]_ Alg. 2 on users' pixels (rows, cols) of a 2^depth grid.

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's pixel.
    depth : int
        L: the finest level (grid 2^L x 2^L), 1 <= L <= 12.
    epsilon : float
        eps_total, spent by basic composition over the sub-queries.
    users_per_query : int, optional
        U, users sampled (without replacement) per sub-query; default all.
    shard_size, dropout, modulus, aggregation
        As in :func:`federated_sum` (dropout is the planned fraction the noise is
        over-provisioned for, default
        :data:`~shuffledp.accounting.budget.DEFAULT_FEDERATED_DROPOUT` = 0.1;
        ``aggregation`` defaults to ``"simulate"``, each shard's noise sum drawn from its
        exact law, as ``shuffledp federated``; ``"secagg"`` runs the real protocol,
        ``"central"`` is the central baseline).
    c, b : float
        Calibration of eq. 7 (default :data:`~shuffledp.accounting.budget.DEFAULT_EQ7_C` =
        0.05, the value the CLI uses; a public constant, no privacy cost; its measured range
        on two data sets: ``python bench/federated_c.py``) and expansion parameter of eq. 9.
    dropout_rate : float in [0, 1)
        Simulated fraction of clients that drop before sending their masked input.
    max_queries : int
        Safety cap; the last query allowed takes the whole remaining budget.
    threshold : float, optional
        Ablations of [Bagdasaryan22]_ Table 3: a fixed split threshold (collapse at a quarter
        of it) instead of the adaptive sigma~_q of eq. 7.
    schedule : {"eq9", "even"}
        The budget schedule of eqs. 8-9 (default), or eps_total / (L + 1) per sub-query over
        L + 1 sub-queries (Table 3's "fixed eps").
    neighbour : Neighbour or str
        ZERO_OUT (default, :data:`~shuffledp.accounting.guarantee.DEFAULT_NEIGHBOUR`; n
        public, sensitivity 1 of a one-hot report), ADD_REMOVE (n private, sensitivity 1;
        needs ``max_users`` or ``users_per_query``) or REPLACE_ONE (2).
    max_users : int, optional
        Add/remove: N, the public bound on the population the shards and the noise are
        planned for, and eq. 7's number of users; required unless ``users_per_query`` is
        given. With
        ``users_per_query`` each sub-query holds U public slots: a neighbour's sample differs
        from the other's by at most one replaced user (couple the two samples), so each
        sub-query is calibrated for replace-one (sensitivity 2) and is then eps_q-DP under
        add/remove by the joint convexity of the hockey-stick divergence.
    delta : float, optional
        Add/remove without ``users_per_query``: the total delta spent on the joining user's
        noise share, split evenly over ``max_queries`` (default ``max_queries`` times
        :data:`~shuffledp.analyzers.federated.population.DEFAULT_SHARE_DELTA`).
    eq7 : {"shards", "printed"}, default :data:`~shuffledp.accounting.budget.DEFAULT_EQ7`
        sigma~ of eq. 7 as printed, c (U/T) sqrt(ceil(S_max/U)) (a factor of 1 once
        U >= S_max), or as its text explains it, the k = ceil(U/S_max) shards' noise
        accumulating: c (U/T) / sqrt(k) (docs/errata.md row 11, :func:`eq7_target`).
    rng : None, SecureRandom, int or Generator
        Noise (secure when None). Sampling of users and dropouts uses a numpy Generator
        seeded from ``rng`` when it is a seed, else fresh entropy (public choices).
    progress : callable, optional
        Called with 1 after each secure-aggregation shard of every sub-query.

    Returns
    -------
    AdaptiveRelease
        The normalised density, the sub-queries' records and the composed guarantee.

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent (depth outside 1..12, epsilon <= 0,
        an unknown schedule, eq7 or aggregation, user_ids without max_users, ...).
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min (replace-one, zero-out; under add/remove it
        is topped up instead, and refused only below real SecAgg's threshold
        :meth:`~shuffledp.analyzers.federated.population.ShardPlan.secagg_threshold`), or
        (add/remove) an n_min too small to pay for the joining user's noise share.
    """
    L, r, cc = _check_pixels(rows, cols, depth)
    eps_total = v.positive("epsilon", epsilon)
    n = r.size
    U = n if users_per_query is None else v.bounded_count("users_per_query",
                                                          users_per_query, 2, n)
    c = v.positive("c", c)
    b = v.positive("b", b)
    rate = v.interval("dropout_rate", dropout_rate, 0.0, 1.0, open_low=False)
    max_q = v.count("max_queries", max_queries)
    sched = v.choice("schedule", schedule, ("eq9", "even"))
    nb = Neighbour.parse(neighbour)
    v.choice("eq7", eq7, ("printed", "shards"))
    if sched == "even":
        max_q = min(max_q, L + 1)
    fixed = None if threshold is None else v.positive("threshold", threshold)
    round_kw, U_pub = _round_plan(nb, users_per_query, U, max_users, delta, max_q, aggregation)
    if user_ids is not None and "max_users" not in round_kw:
        raise ValueError(f"user_ids place users in the shards of an add/remove plan "
                         f"(max_users); this run has none, got user_ids={user_ids!r:.60}")
    uid = np.arange(n) if user_ids is None else np.asarray(user_ids)
    S_eq7 = max(U_pub, 2) if aggregation == "central" else shard_size
    plan = (ShardPlan(round_kw["max_users"], shard_size, dropout) if "max_users" in round_kw
            else None)
    noise = noise_source(rng)
    public = as_generator(None if rng is None or isinstance(rng, SecureRandom) else rng)
    tree = PartitionTree(L)
    acc = Accountant()
    rem = eps_total
    rounds: list[dict] = []
    counts: dict = {}
    released = tree  # the partition the last completed round used
    notes: tuple[str, ...] = ()
    server_view = ({"server_view_epsilon_max": 0.0, "server_view_epsilon_planned": 0.0}
                   if plan is not None else {})
    while rem > 1e-12 * eps_total:
        vec = tree.vector_nodes()
        T = len(vec)
        sigma = eq7_target(c, U_pub, T, S_eq7, eq7)
        eps_q = _query_epsilon(eps_total, rem, sigma, b, max_q, sched, len(rounds))
        if plan is not None:  # add/remove: the round also pays for the joining user's share
            charged = _with_share(eps_q, rem, T, plan.n_min, round_kw["delta"])
            if charged is None:
                if not rounds:
                    add_remove_noise(rem, round_kw["delta"], 1, plan.n_min, T)  # refuses
                notes = (f"stopped with {rem:.4g} of the budget unspent: it cannot pay for "
                         f"the joining user's noise share over {T} cells",)
                break
            eps_q = charged
        rem = rem - eps_q if eps_q < rem else 0.0
        users = public.choice(n, size=U, replace=False)
        cells = tree.report_index(r[users], cc[users])
        dropped = public.random(U) < rate
        ids = {"user_ids": uid[users]} if "max_users" in round_kw else {}
        hist = federated_histogram(cells, T, eps_q, shard_size=shard_size, dropout=dropout,
                                   dropped=dropped, modulus=modulus, aggregation=aggregation,
                                   rng=noise, progress=progress, **round_kw, **ids)
        if nb is Neighbour.ADD_REMOVE and users_per_query is not None:
            hist = _sampled_as_add_remove(hist)
        acc.compose(hist.guarantee.event)  # sequential: every round sees the same users
        for key in server_view:  # the server sees every round's sum: basic composition
            server_view[key] += float(hist.guarantee.parameters.get(key, 0.0))
        counts = {node: int(hist.counts[i]) for i, node in enumerate(vec)}
        rounds.append(_round_record(eps_q, sigma, T, len(tree.nodes), U, hist))
        released = tree
        if rem > 0:
            tree = PartitionTree(L, set(tree.nodes))
            tree.update(counts, sigma if fixed is None else fixed)
    # basic composition over the rounds by the accountant: the schedule spends eps_total
    # (the last round takes the remainder), so the sum is eps_total up to rounding, unless
    # an add/remove run stopped because the rest could not pay for the joining share
    eps_sum, delta_sum = acc.basic()
    if not (math.isclose(eps_sum, eps_total, rel_tol=1e-9)
            or (notes and eps_sum < eps_total)):  # pragma: no cover - schedule bug
        raise AssertionError(f"rounds spent {eps_sum!r}, not epsilon={eps_total!r}")
    g = Guarantee(notion="approximate", model="distributed",
                  epsilon=eps_sum if notes else eps_total, delta=delta_sum,
                  neighbour=nb, theorem=THEOREM,
                  parameters={"depth": L, "queries": len(rounds),
                              "epsilons": [x["epsilon"] for x in rounds],
                              "users_per_query": users_per_query, "eq7_users": U_pub,
                              "max_users": max_users, "shard_size": shard_size, "c": c,
                              "b": b, "dropout": dropout, "aggregation": aggregation,
                              "schedule": sched, "threshold": fixed, "eq7": eq7,
                              **({"top_up": True} if plan is not None else {}),
                              **server_view},
                  notes=hist.guarantee.notes + notes + (
                      (f"against the secure-aggregation server, over all {len(rounds)} "
                       "sub-queries (basic composition of each round's bound above): at "
                       f"most {server_view['server_view_epsilon_max']:.4g}, "
                       f"{server_view['server_view_epsilon_planned']:.4g} for shards of the "
                       "planned size",) if server_view else ()),
                  event=Sequential(steps=tuple(e for e, k in acc.events for _ in range(k)),
                                   neighbour=nb))
    tree = released
    return AdaptiveRelease(estimate=_tree_estimate(tree, counts), counts=counts, tree=tree,
                           rounds=rounds, guarantee=g)


def _round_plan(nb: Neighbour, users_per_query: int | None, U: int, max_users: int | None,
                delta: float | None, max_q: int, aggregation: str) -> tuple[dict, int]:
    """(keyword arguments of every sub-query, eq. 7's public number of users).

    Add/remove keeps n out of every noise parameter: with ``users_per_query`` the U slots are
    public and each round is calibrated for replace-one (:func:`adaptive_histogram`);
    without it the rounds run on the public plan of ``max_users``, which is also eq. 7's U,
    each with delta / max_queries for the joining user's share.
    """
    if nb is not Neighbour.ADD_REMOVE:
        if max_users is not None or delta is not None:
            raise ValueError(f"max_users and delta plan add/remove rounds; neighbour="
                             f"{nb.token!r} keeps n public, got max_users={max_users!r}, "
                             f"delta={delta!r}")
        return {"neighbour": nb}, U
    if users_per_query is not None:
        if delta is not None:
            raise ValueError(f"with users_per_query the rounds are calibrated for replace-one "
                             f"and spend no share delta, got delta={delta!r}")
        return {"neighbour": Neighbour.REPLACE_ONE}, U
    if max_users is None:
        raise ValueError(
            "neighbour='add_remove' needs a public number of users for the shards, the noise "
            "and eq. 7: pass max_users=N (declared before the data) or users_per_query, got "
            "max_users=None; or use neighbour='zero_out' or 'replace' (n public)")
    N = v.count("max_users", max_users, 2)
    if aggregation == "central":
        if delta is not None:
            raise ValueError(f"the central model spends no share delta, got delta={delta!r}")
        return {"neighbour": nb}, N
    total = max_q * DEFAULT_SHARE_DELTA if delta is None else v.probability("delta", delta)
    return {"neighbour": nb, "max_users": N, "delta": total / max_q}, N


def _with_share(eps_noise: float, rem: float, T: int, n_min: int, delta: float
                ) -> float | None:
    """The charge of an add/remove round whose schedule (eqs. 8-9) asks for noise at
    ``eps_noise``: eps_noise plus the joining user's share over T cells
    (:func:`~shuffledp.analyzers.federated.population.joining_share_epsilon` at
    delta e^{-eps_noise}). The whole remainder when that reaches it or would leave less than
    twice this round's share for the next (the round is then the last, its noise calibrated
    to what is left); None when not even the remainder pays for the share."""
    if eps_noise < rem:
        share = joining_share_epsilon(n_min, math.exp(-eps_noise), T,
                                      delta * math.exp(-eps_noise))[0]
        cost = (eps_noise + share) * (1.0 + 1e-6)
        if cost + 2.0 * share < rem:
            return cost
    try:
        add_remove_noise(rem, delta, 1, n_min, T)
    except FederatedRefused:
        return None
    return rem


def _sampled_as_add_remove(hist: FederatedHistogram) -> FederatedHistogram:
    """A sub-query on U sampled slots, calibrated for replace-one, restated under add/remove:
    the samples of two add/remove neighbours couple so that they differ by at most one
    replaced user, and the hockey-stick divergence is jointly convex, so the replace-one
    curve holds for the pair (the event keeps the replace-one noise, sensitivity 2)."""
    g = hist.guarantee
    p = g.parameters
    nb = Neighbour.ADD_REMOVE
    event = polya_sum_event([g.epsilon], [p["sensitivity"]], [p["length"]], g.delta, nb,
                            g.model)
    g2 = dataclasses.replace(
        g, neighbour=nb,
        notes=g.notes + ("add/remove through a fixed number U of sampled slots: the two "
                         "neighbours' samples couple to differ by one replaced user, so the "
                         "round is calibrated for replace-one (sensitivity 2)",),
        event=event)
    return dataclasses.replace(hist, guarantee=g2)


def _check_pixels(rows: Any, cols: Any, depth: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(L, rows, cols): the depth in 1..12 and one pixel per user of the 2^L x 2^L grid."""
    L = v.bounded_count("depth", depth, 1, 12)
    side = 1 << L
    r = np.asarray(rows)
    cc = np.asarray(cols)
    if r.shape != cc.shape or r.ndim != 1 or r.size == 0:
        raise ValueError(f"rows and cols must be 1-d arrays of one length, got shapes "
                         f"{r.shape} and {cc.shape}")
    for name, a in (("rows", r), ("cols", cc)):
        if not np.issubdtype(a.dtype, np.integer) or (a < 0).any() or (a >= side).any():
            raise ValueError(f"{name} must be integers in 0..{side - 1} (depth={L})")
    return L, r, cc


def _query_epsilon(eps_total: float, rem: float, sigma: float, b: float, max_q: int,
                   sched: str, done: int) -> float:
    """The next sub-query's budget: eqs. 8-9 of [Bagdasaryan22]_ (the budget whose discrete
    Laplace has standard deviation sigma, expanded by b, from what remains), or
    eps_total / max_q (``"even"``); the last query allowed takes the remainder."""
    eps_q = (eps_total / max_q if sched == "even"
             else next_query_epsilon(rem, dl_epsilon_for_std(sigma), b))
    if done + 1 >= max_q:
        eps_q = rem
    return eps_q


def _round_record(eps_q: float, sigma: float, T: int, tree_nodes: int, U: int,
                  hist: FederatedHistogram) -> dict:
    """What a release reports of one sub-query."""
    return {
        "epsilon": eps_q, "noise_epsilon": hist.guarantee.parameters.get("noise_epsilon", eps_q),
        "sigma_target": sigma, "vector_length": T,
        "tree_nodes": tree_nodes, "users": U,
        "survivors": int(sum(s["survivors"] for s in hist.shards)),
        "shards": len(hist.shards), "delta": hist.guarantee.delta,
        "secagg_server_seconds": float(sum(s.get("server_seconds", 0.0)
                                           for s in hist.shards)),
        **({"top_up_shares": int(sum(s["top_up_shares"] for s in hist.shards))}
           if hist.shards and "top_up_shares" in hist.shards[0] else {}),
    }


def _tree_estimate(tree: PartitionTree, counts: dict) -> np.ndarray:
    """The pixel distribution: each leaf's clipped count spread evenly over its pixels,
    normalised (uniform when every count is <= 0)."""
    owners = tree.owner_map()
    vec = tree.vector_nodes()
    mass = np.array([max(counts.get(node, 0), 0) for node in vec], dtype=float)
    pix = np.bincount(owners.ravel(), minlength=len(vec)).astype(float)
    dens = (mass / np.maximum(pix, 1))[owners]
    return dens / dens.sum() if dens.sum() > 0 else np.full(dens.shape, 1.0 / dens.size)


def flat_histogram(rows: Any, cols: Any, depth: int, epsilon: float, **kwargs: Any
                   ) -> np.ndarray:
    """The flat one-hot baseline ([Bagdasaryan22]_ Sec. 5.1): Alg. 1 on all 4^L pixels.

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's pixel.
    depth : int
        L, 1 <= L <= 12 (grid 2^L x 2^L).
    epsilon : float
        The whole budget (> 0).
    **kwargs
        Arguments of :func:`federated_histogram`.

    Returns
    -------
    numpy.ndarray
        The normalised density, shape (2^L, 2^L) (negative counts clipped; uniform if none
        is positive).

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent (depth outside 1..12, or an argument of
        :func:`federated_histogram`).
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min (replace-one, zero-out; under add/remove it
        is topped up instead, and refused only below real SecAgg's threshold
        :meth:`~shuffledp.analyzers.federated.population.ShardPlan.secagg_threshold`), or
        (add/remove) an n_min too small to pay for the joining user's noise share.
    """
    side = 1 << v.bounded_count("depth", depth, 1, 12)
    cells = np.asarray(rows) * side + np.asarray(cols)
    hist = federated_histogram(cells, side * side, epsilon, **kwargs)
    d = np.maximum(hist.counts, 0).astype(float).reshape(side, side)
    return d / d.sum() if d.sum() > 0 else np.full(d.shape, 1.0 / d.size)


def quadtree_histogram(rows: Any, cols: Any, depth: int, epsilon: float,
                       **kwargs: Any) -> np.ndarray:
    """Non-adaptive quadtree with the geometric budget ([Cormode12]_).

    Each level goes through :func:`federated_histogram` (``kwargs`` go there); the levels
    are combined by weighted least squares over the tree.

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's pixel.
    depth : int
        L, 1 <= L <= 12.
    epsilon : float
        The whole budget (> 0), split geometrically over the L + 1 levels.
    **kwargs
        Arguments of :func:`federated_histogram`.

    Returns
    -------
    numpy.ndarray
        The normalised density, shape (2^L, 2^L).

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent (depth outside 1..12, or an argument of
        :func:`federated_histogram`).
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min (replace-one, zero-out; under add/remove it
        is topped up instead, and refused only below real SecAgg's threshold
        :meth:`~shuffledp.analyzers.federated.population.ShardPlan.secagg_threshold`), or
        (add/remove) an n_min too small to pay for the joining user's noise share.
    """
    L = v.bounded_count("depth", depth, 1, 12)
    r, c = np.asarray(rows), np.asarray(cols)
    budgets = geometric_budget(epsilon, L)
    levels, variances = [], []
    for lvl in range(L + 1):
        s = L - lvl
        side = 1 << lvl
        cells = (r >> s) * side + (c >> s)
        rel = federated_histogram(cells, side * side, float(budgets[lvl]), **kwargs)
        shards = len(rel.shards)
        levels.append(rel.counts.reshape(side, side))
        variances.append(shards * dl_std(float(budgets[lvl])) ** 2)
    return normalise_density(tree_least_squares(levels, variances))


def central_adaptive_histogram(rows: Any, cols: Any, depth: int, epsilon: float,
                               rng: RngLike | SecureRandom = None, **kwargs: Any
                               ) -> AdaptiveRelease:
    """:func:`adaptive_histogram` with central noise.

    Every sub-query adds DL(a), a = e^{-eps_q / Delta}, once per entry to the exact counts
    (``aggregation="central"``: Polya(1, a) - Polya(1, a), [Bagdasaryan22]_ Thm 4.2 with one
    share), i.e. a trusted server; the noise law does not depend on n. The thresholds of
    eq. 7 see one shard (sqrt(ceil(S/U)) = 1). ``kwargs``: ``users_per_query``, ``c``,
    ``b``, ``max_queries``, ``neighbour``, ``max_users`` (add/remove: eq. 7's public U) of
    the adaptive algorithm. The guarantee names the central model.

    Parameters
    ----------
    rows, cols : array_like of int
        Each user's pixel.
    depth : int
        L, 1 <= L <= 12.
    epsilon : float
        eps_total (> 0).
    rng : None, SecureRandom, int or Generator
        Noise randomness (secure when None).
    **kwargs
        As above.

    Returns
    -------
    AdaptiveRelease
        As :func:`adaptive_histogram`, under the central model.

    Raises
    ------
    ValueError
        If an argument is out of range or inconsistent (as :func:`adaptive_histogram`).
    TypeError
        If a count is not an integer.
    FederatedRefused
        A shard with fewer survivors than n_min (replace-one, zero-out; under add/remove it
        is topped up instead, and refused only below real SecAgg's threshold
        :meth:`~shuffledp.analyzers.federated.population.ShardPlan.secagg_threshold`), or
        (add/remove) an n_min too small to pay for the joining user's noise share.
    """
    bad = {"shard_size", "dropout", "dropout_rate", "aggregation"} & set(kwargs)
    if bad:
        raise TypeError(f"central_adaptive_histogram fixes {sorted(bad)}, got {kwargs!r}")
    rel = adaptive_histogram(rows, cols, depth, epsilon, aggregation="central", rng=rng,
                             **kwargs)
    g = dataclasses.replace(rel.guarantee, model="central",
                            theorem="Bagdasaryan et al., PoPETs 2022, Alg. 2 with central "
                                    "discrete Laplace noise per sub-query, basic composition")
    return dataclasses.replace(rel, guarantee=g)



__all__ = ["adaptive_histogram", "central_adaptive_histogram", "federated_histogram",
           "federated_locations", "federated_sum", "flat_histogram", "quadtree_histogram"]
