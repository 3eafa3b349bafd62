"""Adaptive hierarchical histograms ([Bagdasaryan22]_ Sec. 5, Alg. 2) over secure aggregation.

The map is a 2^L x 2^L grid; a partition tree holds nodes (level, row, col), the root
(0, 0, 0) always present, children being quadrants. Nodes may be partially split and
orphaned (Sec. 5.6): a user reports at the deepest node present on her cell's root path
(longest matching prefix), so every node with fewer than four children present owns the
pixels whose deepest present ancestor it is, and the vector of a sub-query has one entry per
such node.

Each sub-query q ([Bagdasaryan22]_ Alg. 2):

1. sigma~_q = c (U/T) sqrt(ceil(S_max/U)) with T the vector length (eq. 7, as printed,
   :func:`shuffledp.accounting.budget.target_std`);
2. eps~_q = phi(sigma~_q) (eq. 8), eps_q = gamma(eps_rem, eps~_q) (eq. 9: all the rest
   when b eps~_q > eps_rem, which ends the loop);
3. U users sampled without replacement report their node through
   :func:`shuffledp.analyzers.federated.federated_histogram` (Alg. 1, shards of S_max through
   secure aggregation, Polya noise calibrated to eps_q);
4. UpdateTree: a node whose noisy count exceeds sigma~_q is split (its four children are
   added, up to level L); a non-root node whose count is at most sigma~_q / 4 is collapsed
   (deleted; its descendants stay, orphaned).

Privacy: basic composition by :class:`~shuffledp.accounting.compose.Accountant` over the
rounds' events, sum_q eps_q = eps_total exactly (the last query takes the
remainder) and delta = sum_q delta_q (the guarantee's event is the rounds' ``Sequential``
event, which the accountant composes more tightly with other releases), each delta_q the
Polya tables' charge of :func:`shuffledp.analyzers.federated.sampler_delta` (below 1e-20);
each sub-query is (eps_q, delta_q)-DP by Thm 4.2 with shards of disjoint users, and the tree
depends only on earlier releases (post-processing). The release is the last sub-query's
histogram, spread uniformly over each node's owned pixels and normalised.

References
----------
.. [Bagdasaryan22] E. Bagdasaryan, P. Kairouz, S. Mellem, A. Gascon, K. Bonawitz, D. Estrin,
   M. Gruteser, "Towards Sparse Federated Analytics: Location Heatmaps under Distributed
   Differential Privacy with Secure Aggregation", PoPETs 2022(4), Sec. 5, Alg. 2, eqs. 7-9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp._rng import RngLike, as_generator
from shuffledp.accounting.budget import dl_epsilon_for_std, next_query_epsilon, target_std
from shuffledp.accounting.compose import Accountant
from shuffledp.accounting.events import Sequential
from shuffledp.accounting.guarantee import Guarantee, Neighbour
from shuffledp.analyzers.federated import federated_histogram
from shuffledp.crypto import SecureRandom
from shuffledp.encoders.words import is_seeded, noise_source

Node = tuple[int, int, int]
THEOREM = ("Bagdasaryan et al., PoPETs 2022, Alg. 2: adaptive hierarchical histograms, "
           "basic composition over sub-queries, each sub-query Alg. 1 + Thm 4.2")


@dataclass
class PartitionTree:
    """Nodes (level, row, col) of a quaternary partition of a 2^depth x 2^depth grid."""

    depth: int
    nodes: set = field(default_factory=lambda: {(0, 0, 0)})

    @staticmethod
    def node_id(lvl: Any, r: Any, c: Any) -> Any:
        """A unique integer per node: (4^lvl - 1) / 3 + r 2^lvl + c (vectorised)."""
        return ((np.left_shift(1, 2 * np.asarray(lvl)) - 1) // 3
                + np.asarray(r) * np.left_shift(1, np.asarray(lvl)) + np.asarray(c))

    def report_ids(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """:meth:`node_id` of the deepest present node on each pixel's root path."""
        present = np.array(sorted(self.node_id(*n) for n in self.nodes), dtype=np.int64)
        best = np.zeros(np.asarray(rows).size, dtype=np.int64)
        for lvl in range(1, self.depth + 1):
            s = self.depth - lvl
            ids = self.node_id(lvl, np.asarray(rows) >> s, np.asarray(cols) >> s)
            best = np.where(np.isin(ids, present), ids, best)
        return best

    def report_nodes(self, rows: np.ndarray, cols: np.ndarray) -> list[Node]:
        """The deepest present node on each pixel's root path (longest matching prefix)."""
        lookup = {int(self.node_id(*n)): n for n in self.nodes}
        return [lookup[int(i)] for i in self.report_ids(rows, cols)]

    def report_index(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Index into :meth:`vector_nodes` of each pixel's reporting node."""
        vec = np.array([self.node_id(*n) for n in self.vector_nodes()], dtype=np.int64)
        order = np.argsort(vec)
        return order[np.searchsorted(vec[order], self.report_ids(rows, cols))]

    def vector_nodes(self) -> list[Node]:
        """Nodes with fewer than four children present (one vector entry each), sorted."""
        def kids(n: Node) -> int:
            lvl, r, c = n
            return sum((lvl + 1, 2 * r + i, 2 * c + j) in self.nodes
                       for i in (0, 1) for j in (0, 1))
        return sorted(n for n in self.nodes if kids(n) < 4)

    def update(self, counts: dict, threshold: float) -> None:
        """Alg. 2 UpdateTree: split above ``threshold``, collapse at or below a quarter."""
        for node, count in counts.items():
            lvl, r, c = node
            if count > threshold and lvl < self.depth:
                self.nodes |= {(lvl + 1, 2 * r + i, 2 * c + j) for i in (0, 1) for j in (0, 1)}
            elif count <= threshold / 4 and node != (0, 0, 0):
                self.nodes.discard(node)

    def owner_map(self) -> np.ndarray:
        """(2^depth, 2^depth) array: index into :meth:`vector_nodes` of each pixel's owner."""
        side = 1 << self.depth
        rr, cc = np.divmod(np.arange(side * side), side)
        return self.report_index(rr, cc).reshape(side, side)


@dataclass(frozen=True)
class AdaptiveRelease:
    """Output of :func:`adaptive_histogram`.

    Attributes
    ----------
    estimate : ndarray (2^L, 2^L)
        Normalised density (the last sub-query's counts, clipped at 0, spread uniformly
        over each node's owned pixels).
    counts : dict
        Node -> noisy count of the last sub-query.
    tree : PartitionTree
        The partition the last sub-query used.
    rounds : list of dict
        Per sub-query: eps, sigma_target, vector length, tree size, users, survivors,
        SecAgg seconds.
    guarantee : Guarantee
    """

    estimate: np.ndarray
    counts: dict
    tree: PartitionTree
    rounds: list
    guarantee: Guarantee


def eq7_target(c: float, users: int, cells: int, s_max: int, form: str = "printed") -> float:
    """sigma~ of [Bagdasaryan22]_ eq. 7: ``"printed"`` is
    :func:`shuffledp.accounting.budget.target_std`, c (U/T) sqrt(ceil(S_max/U));
    ``"shards"`` is the text's meaning, the per-shard target when k = ceil(U/S_max) shards'
    noise adds up: c (U/T) / sqrt(k). The two agree when U = S_max."""
    base = target_std(c, users, cells, s_max)
    if v.choice("form", form, ("printed", "shards")) == "printed":
        return base
    return c * users / cells / math.sqrt(math.ceil(users / s_max))


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
        As in :func:`shuffledp.analyzers.federated.federated_histogram` (dropout is the
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
        eps_q = (eps_total / max_q if sched == "even"
                 else next_query_epsilon(rem, dl_epsilon_for_std(sigma), b))
        if len(rounds) + 1 >= max_q:
            eps_q = rem
        rem = rem - eps_q if eps_q < rem else 0.0
        users = public.choice(n, size=U, replace=False)
        cells = tree.report_index(r[users], cc[users])
        dropped = public.random(U) < rate
        hist = federated_histogram(cells, T, eps_q, shard_size=shard_size, dropout=dropout,
                                   dropped=dropped, modulus=modulus, aggregation=aggregation,
                                   neighbour=nb, rng=noise, progress=progress)
        acc.compose(hist.guarantee.event)  # sequential: every round sees the same users
        counts = {node: int(hist.counts[i]) for i, node in enumerate(vec)}
        rounds.append({
            "epsilon": eps_q, "sigma_target": sigma, "vector_length": T,
            "tree_nodes": len(tree.nodes), "users": U,
            "survivors": int(sum(s["survivors"] for s in hist.shards)),
            "shards": len(hist.shards), "delta": hist.guarantee.delta,
            "secagg_server_seconds": float(sum(s.get("server_seconds", 0.0)
                                               for s in hist.shards)),
        })
        if rem > 0:
            tree.update(counts, sigma if fixed is None else fixed)
    owners = tree.owner_map()
    vec = tree.vector_nodes()
    mass = np.array([max(counts.get(node, 0), 0) for node in vec], dtype=float)
    pix = np.bincount(owners.ravel(), minlength=len(vec)).astype(float)
    dens = (mass / np.maximum(pix, 1))[owners]
    est = dens / dens.sum() if dens.sum() > 0 else np.full(dens.shape, 1.0 / dens.size)
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
    return AdaptiveRelease(estimate=est, counts=counts, tree=tree, rounds=rounds, guarantee=g)


def flat_histogram(rows: Any, cols: Any, depth: int, epsilon: float, **kwargs: Any
                   ) -> np.ndarray:
    """The flat one-hot baseline ([Bagdasaryan22]_ Sec. 5.1): Alg. 1 on all 4^L pixels with
    the whole budget; returns the normalised density (negative counts clipped)."""
    side = 1 << v.bounded_count("depth", depth, 1, 12)
    cells = np.asarray(rows) * side + np.asarray(cols)
    hist = federated_histogram(cells, side * side, epsilon, **kwargs)
    d = np.maximum(hist.counts, 0).astype(float).reshape(side, side)
    return d / d.sum() if d.sum() > 0 else np.full(d.shape, 1.0 / d.size)


def mse(estimate: np.ndarray, truth: np.ndarray) -> float:
    """Mean squared error of two normalised densities ([Bagdasaryan22]_ App. A)."""
    return float(np.mean((np.asarray(estimate) - np.asarray(truth)) ** 2))


__all__ = ["AdaptiveRelease", "PartitionTree", "adaptive_histogram", "flat_histogram", "mse"]
