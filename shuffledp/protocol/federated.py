"""Federated rounds under distributed DP with secure aggregation ([Bagdasaryan22]_).

The protocol side of the federated family: one round runs every client's encoder
(:func:`shuffledp.encoders.federated.noisy_vector`: one-hot or scaled vector + Polya-difference
noise, mod m) and both secure-aggregation roles per shard (:func:`shuffledp.secagg.secure_sum`,
Bonawitz et al. 2017: the server sees only the sum); the analyzer
(:mod:`shuffledp.analyzers.federated.histogram`) decodes the shards' sums and states the
release's guarantee. :func:`adaptive_histogram` (Alg. 2), :func:`flat_histogram`,
:func:`quadtree_histogram` and :func:`central_adaptive_histogram` drive several rounds over the
partition tree of :mod:`shuffledp.analyzers.federated.tree`.

Privacy and the aggregation modes (``"secagg"``, ``"plain"``, ``"simulate"``): see
:mod:`shuffledp.analyzers.federated.histogram`.

References
----------
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4), Alg. 1-2, Thm 4.2, Sec. 4-6.
.. [Cormode12] G. Cormode, C. Procopiuc, D. Srivastava, E. Shen, T. Yu, "Differentially
   Private Spatial Decompositions", ICDE 2012.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.budget import dl_epsilon_for_std, dl_std, next_query_epsilon
from shuffledp.accounting.compose import Accountant
from shuffledp.accounting.events import Sequential
from shuffledp.accounting.guarantee import Guarantee, Neighbour
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
        ``aggregation``, ``rng`` of :func:`federated_sum`.
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

    ``users`` is a sequence of (cells, weights) pairs, one per user.
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


def _simulated_shard(vecs, alive, D, eps, bound, n_min, m, nb, src) -> np.ndarray:
    """The decoded modular sum of a shard, sampled in O(D): the survivors' noise is a sum of
    k = len(alive) i.i.d. Polya(1/n_min, a) differences, i.e. exactly Polya(k/n_min, a) -
    Polya(k/n_min, a) (Polya variables with one a add their shapes)."""
    _, a = noise_parameters(eps, nb, bound)
    if isinstance(vecs, _OneHot):
        data = vecs.total(alive)
    else:
        data = np.sum([vecs[i] for i in alive], axis=0).astype(np.int64)
    s = np.mod(data + polya_difference(len(alive) / n_min, a, D, src), m)
    return decode_centred(s, m)


def federated_sum(
    vectors: Any,
    l1_bound: int,
    epsilon: float,
    *,
    shard_size: int = 10_000,
    dropout: float = 0.0,
    dropped: Any = None,
    modulus: int = 1 << 32,
    neighbour: Neighbour | str = Neighbour.ADD_REMOVE,
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
        The l1 bound that sets the sensitivity (Delta = l1_bound add/remove, 2 l1_bound
        replace).
    epsilon : float
        Budget (> 0).
    shard_size : int
        S_max: users per secure-aggregation shard (consecutive blocks of ``vectors``).
    dropout : float in [0, 1)
        Planned dropout fraction: the noise is set for n_min = ceil((1 - dropout) S).
    dropped : array_like of bool or int, shape (n,), optional
        Simulated dropouts. Booleans: True drops before sending the masked input. Integers:
        the secure-aggregation round in which the user drops (0 advertise keys, 1 share
        keys, 2 masked input, 3 unmasking) or -1 for none; users dropping in round 3 sent
        their masked input and are in the sum.
    modulus : int
        m of the modular sum (2 .. 2^62).
    neighbour : Neighbour or str
        ADD_REMOVE or REPLACE_ONE.
    aggregation : {"secagg", "plain", "simulate"}
        Real secure aggregation (default), the same modular sum computed directly, or the
        shard's noise sum sampled directly (same law; module docstring).
    rng : None, SecureRandom, int or Generator
        Noise randomness: None the secure generator (a private release); a seed: research.
    progress : callable, optional
        Called with 1 after each shard (a progress bar's ``update``).

    Raises
    ------
    FederatedRefused
        A shard with fewer survivors than n_min.
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
    agg = v.choice("aggregation", aggregation, ("secagg", "plain", "simulate"))
    nb = Neighbour.parse(neighbour)
    delta, _ = noise_parameters(eps, nb, bound)
    n = len(vecs)
    when = _drop_rounds(dropped, n)
    gone = (when >= 0) & (when <= 2)
    src = noise_source(rng)
    total = np.zeros(D, dtype=np.int64)
    shards = []
    for lo in range(0, n, S):
        idx = np.arange(lo, min(lo + S, n))
        n_min = max(1, math.ceil((1 - drop) * idx.size))
        alive = [k for k, i in enumerate(idx) if not gone[i]]
        if len(alive) < n_min:
            raise FederatedRefused(
                f"shard {len(shards)}: {len(alive)} of {idx.size} clients survived, fewer "
                f"than n_min={n_min} the noise was set for (dropout={drop}); not released")
        info: dict[str, Any] = {"clients": int(idx.size), "survivors": len(alive),
                                "n_min": n_min,
                                "dropped_by_round": [int((when[idx] == k).sum())
                                                     for k in range(4)]}
        if agg == "simulate":
            total += _simulated_shard(vecs, idx[alive], D, eps, bound, n_min, m, nb, src)
            shards.append(info)
            if progress is not None:
                progress(1)
            continue
        noisy = [noisy_vector(vecs[i], eps, bound, n_min, m, neighbour=nb, rng=src)
                 for i in idx]
        if agg == "secagg":
            res = secure_sum(noisy, m, threshold=max(2, min(n_min, idx.size)),
                             dropouts={k: set(np.flatnonzero(when[idx] == k).tolist())
                                       for k in range(4)})
            s = res.total
            info.update(server_seconds=res.server_seconds,
                        client_seconds_mean=res.client_seconds_mean,
                        bytes_up_per_client=res.bytes_up_per_client)
        else:
            s = np.sum([noisy[k] for k in alive], axis=0) % m
        total += decode_centred(s, m)
        shards.append(info)
        if progress is not None:  # e.g. a progress bar's update: one shard done
            progress(1)
    draws = 2 * D * (len(shards) if agg == "simulate" else n)
    return federated_release(total, shards, epsilon=eps, neighbour=nb, draws=draws,
                             parameters={"length": int(D), "l1_bound": bound,
                                         "shard_size": S, "dropout": drop, "modulus": m,
                                         "sensitivity": delta, "aggregation": agg},
                             seeded=is_seeded(rng))


def adaptive_histogram(
    rows: Any,
    cols: Any,
    depth: int,
    epsilon: float,
    *,
    users_per_query: int | None = None,
    shard_size: int = 10_000,
    c: float = 0.5,
    b: float = 2.0,
    dropout: float = 0.0,
    dropout_rate: float = 0.0,
    modulus: int = 1 << 32,
    aggregation: str = "secagg",
    max_queries: int = 30,
    threshold: float | None = None,
    schedule: str = "eq9",
    neighbour: Neighbour | str = Neighbour.ADD_REMOVE,
    eq7: str = "printed",
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
        As in :func:`shuffledp.analyzers.federated.histogram.federated_histogram` (dropout is the
        planned fraction the noise is over-provisioned for).
    c, b : float
        Calibration of eq. 7 and expansion parameter of eq. 9.
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
        ADD_REMOVE (sensitivity 1 of a one-hot report) or REPLACE_ONE (2).
    eq7 : {"printed", "shards"}
        sigma~ of eq. 7 as printed, c (U/T) sqrt(ceil(S_max/U)) (a factor of 1 once
        U >= S_max), or as its text explains it, the k = ceil(U/S_max) shards' noise
        accumulating: c (U/T) / sqrt(k) (docs/errata.md row 11, :func:`eq7_target`).
    rng : None, SecureRandom, int or Generator
        Noise (secure when None). Sampling of users and dropouts uses a numpy Generator
        seeded from ``rng`` when it is a seed, else fresh entropy (public choices).
    progress : callable, optional
        Called with 1 after each secure-aggregation shard of every sub-query.
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
    noise = noise_source(rng)
    public = as_generator(rng if is_seeded(rng) else None)
    tree = PartitionTree(L)
    acc = Accountant()
    rem = eps_total
    rounds: list[dict] = []
    counts: dict = {}
    while rem > 1e-12 * eps_total:
        vec = tree.vector_nodes()
        T = len(vec)
        sigma = eq7_target(c, U, T, shard_size, eq7)
        eps_q = _query_epsilon(eps_total, rem, sigma, b, max_q, sched, len(rounds))
        rem = rem - eps_q if eps_q < rem else 0.0
        users = public.choice(n, size=U, replace=False)
        cells = tree.report_index(r[users], cc[users])
        dropped = public.random(U) < rate
        hist = federated_histogram(cells, T, eps_q, shard_size=shard_size, dropout=dropout,
                                   dropped=dropped, modulus=modulus, aggregation=aggregation,
                                   neighbour=nb, rng=noise, progress=progress)
        acc.compose(hist.guarantee.event)  # sequential: every round sees the same users
        counts = {node: int(hist.counts[i]) for i, node in enumerate(vec)}
        rounds.append(_round_record(eps_q, sigma, T, len(tree.nodes), U, hist))
        if rem > 0:
            tree.update(counts, sigma if fixed is None else fixed)
    # basic composition over the rounds by the accountant: the schedule spends eps_total
    # (the last round takes the remainder), so the sum is eps_total up to rounding
    eps_sum, delta_sum = acc.basic()
    if not math.isclose(eps_sum, eps_total, rel_tol=1e-9):  # pragma: no cover - schedule bug
        raise AssertionError(f"rounds spent {eps_sum!r}, not epsilon={eps_total!r}")
    g = Guarantee(notion="approximate", model="distributed", epsilon=eps_total,
                  delta=delta_sum,
                  neighbour=nb, theorem=THEOREM,
                  parameters={"depth": L, "queries": len(rounds),
                              "epsilons": [x["epsilon"] for x in rounds],
                              "users_per_query": U, "shard_size": shard_size, "c": c, "b": b,
                              "dropout": dropout, "aggregation": aggregation,
                              "schedule": sched, "threshold": fixed, "eq7": eq7},
                  notes=hist.guarantee.notes,
                  event=Sequential(steps=tuple(e for e, k in acc.events for _ in range(k)),
                                   neighbour=nb))
    return AdaptiveRelease(estimate=_tree_estimate(tree, counts), counts=counts, tree=tree,
                           rounds=rounds, guarantee=g)


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
        "epsilon": eps_q, "sigma_target": sigma, "vector_length": T,
        "tree_nodes": tree_nodes, "users": U,
        "survivors": int(sum(s["survivors"] for s in hist.shards)),
        "shards": len(hist.shards), "delta": hist.guarantee.delta,
        "secagg_server_seconds": float(sum(s.get("server_seconds", 0.0)
                                           for s in hist.shards)),
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
    """The flat one-hot baseline ([Bagdasaryan22]_ Sec. 5.1): Alg. 1 on all 4^L pixels with
    the whole budget; returns the normalised density (negative counts clipped)."""
    side = 1 << v.bounded_count("depth", depth, 1, 12)
    cells = np.asarray(rows) * side + np.asarray(cols)
    hist = federated_histogram(cells, side * side, epsilon, **kwargs)
    d = np.maximum(hist.counts, 0).astype(float).reshape(side, side)
    return d / d.sum() if d.sum() > 0 else np.full(d.shape, 1.0 / d.size)


def quadtree_histogram(rows: Any, cols: Any, depth: int, epsilon: float,
                       **kwargs: Any) -> np.ndarray:
    """Non-adaptive quadtree with the geometric budget ([Cormode12]_), each level through
    :func:`shuffledp.analyzers.federated.histogram.federated_histogram` (``kwargs`` go there)."""
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
    """:func:`shuffledp.analyzers.federated.tree.adaptive_histogram` with central noise.

    Every sub-query is one shard holding all U sampled users, no dropout, and its noise sum
    is sampled directly (``aggregation="simulate"``): Polya(1, a) - Polya(1, a) per entry,
    which is exactly DL(a), a = e^{-eps_q} ([Bagdasaryan22]_ Thm 4.2 with one share), i.e.
    a trusted server adding discrete Laplace noise to the true counts. The thresholds of
    eq. 7 see one shard (sqrt(ceil(S/U)) = 1). ``kwargs``: ``users_per_query``, ``c``,
    ``b``, ``max_queries`` of the adaptive algorithm. The guarantee names the central model.
    """
    n = np.asarray(rows).size
    bad = {"shard_size", "dropout", "dropout_rate", "aggregation"} & set(kwargs)
    if bad:
        raise TypeError(f"central_adaptive_histogram fixes {sorted(bad)}, got {kwargs!r}")
    U = kwargs.get("users_per_query") or max(n, 2)
    rel = adaptive_histogram(rows, cols, depth, epsilon, shard_size=max(int(U), 2),
                             aggregation="simulate", rng=rng, **kwargs)
    g = dataclasses.replace(rel.guarantee, model="central",
                            theorem="Bagdasaryan et al., PoPETs 2022, Alg. 2 with central "
                                    "discrete Laplace noise per sub-query, basic composition")
    return dataclasses.replace(rel, guarantee=g)



__all__ = ["adaptive_histogram", "central_adaptive_histogram", "federated_histogram",
           "federated_locations", "federated_sum", "flat_histogram", "quadtree_histogram"]
