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
   :func:`shuffledp.protocol.federated.federated_histogram` (Alg. 1, shards of S_max through
   secure aggregation, Polya noise calibrated to eps_q);
4. UpdateTree: a node whose noisy count exceeds sigma~_q is split (its four children are
   added, up to level L); a non-root node whose count is at most sigma~_q / 4 is collapsed
   (deleted; its descendants stay, orphaned).

Privacy: basic composition by :class:`~shuffledp.accounting.composition.Accountant` over the
rounds' events (under add/remove each round also pays for the joining user's own noise share,
:mod:`shuffledp.analyzers.federated.population`, on top of the noise eqs. 8-9 ask for; eq. 7's
U is then the public ``max_users``), sum_q eps_q = eps_total exactly (the last query takes the
remainder) and delta = sum_q delta_q (the guarantee's event is the rounds' ``Sequential``
event, which the accountant composes more tightly with other releases), each delta_q the
Polya tables' charge of :func:`shuffledp.analyzers.federated.histogram.sampler_delta` (below 1e-20);
each sub-query is (eps_q, delta_q)-DP by Thm 4.2 with shards of disjoint users, and the tree
depends only on earlier releases (post-processing). The release is the last sub-query's
histogram, spread uniformly over each node's owned pixels and normalised.

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards sparse federated analytics", Sec. 5, Alg. 2,
   eqs. 7-9 -- full entry in docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.budget import target_std
from shuffledp.accounting.guarantee import Guarantee, Neighbour

Node = tuple[int, int, int]
THEOREM = ("Bagdasaryan et al., PoPETs 2022, Alg. 2: adaptive hierarchical histograms, "
           "basic composition over sub-queries, each sub-query Alg. 1 + Thm 4.2")


@dataclass
class PartitionTree:
    """Nodes (level, row, col) of a quaternary partition of a 2^depth x 2^depth grid.

    Parameters
    ----------
    depth : int
        L: the grid is 2^L x 2^L.
    nodes : set of (level, row, col), default {(0, 0, 0)}
        The nodes of the partition (the root alone at first).

    References
    ----------
    [Bagdasaryan22]_ Sec. 5, Alg. 2 (the adaptive quaternary partition).
    """

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
        Per sub-query: eps (charged), noise_epsilon, sigma_target, vector length, tree size,
        users, survivors, SecAgg seconds (add/remove: the noise shares the publisher added to
        short shards). Under add/remove the users, survivors, seconds and top-ups are the
        evaluation's view, not part of the release: publish :meth:`public_rounds`.
    guarantee : Guarantee
    """

    estimate: np.ndarray
    counts: dict
    tree: PartitionTree
    rounds: list
    guarantee: Guarantee

    def public_rounds(self) -> list[dict]:
        """The per-round records a release may publish: all of them when n is public
        (replace-one, zero-out), without :data:`PRIVATE_ROUND_KEYS` under add/remove."""
        if self.guarantee.neighbour is not Neighbour.ADD_REMOVE:
            return [dict(r) for r in self.rounds]
        return [{k: x for k, x in r.items() if k not in PRIVATE_ROUND_KEYS}
                for r in self.rounds]


#: round entries that count users (n, or survivors and timings that follow it)
PRIVATE_ROUND_KEYS = ("users", "survivors", "secagg_server_seconds", "top_up_shares")


def eq7_target(c: float, users: int, cells: int, s_max: int, form: str = "printed") -> float:
    """sigma~ of [Bagdasaryan22]_ eq. 7: ``"printed"`` is
    :func:`shuffledp.accounting.budget.target_std`, c (U/T) sqrt(ceil(S_max/U));
    ``"shards"`` is the text's meaning, the per-shard target when k = ceil(U/S_max) shards'
    noise adds up: c (U/T) / sqrt(k). The two agree when U = S_max.

    Parameters
    ----------
    c : float
        The constant c of eq. 7, > 0.
    users : int
        U, the number of users, >= 1.
    cells : int
        T, the number of cells (leaves), >= 1.
    s_max : int
        S_max, the largest shard, >= 1.
    form : {"printed", "shards"}
        Which reading of eq. 7.

    Returns
    -------
    float
        The target noise standard deviation sigma~.

    Raises
    ------
    TypeError
        If ``c`` is not a real number.
    ValueError
        If ``c`` is not positive, ``users``, ``cells`` or ``s_max`` is not an integer >= 1, or
        ``form`` is not one of the two.

    References
    ----------
    [Bagdasaryan22]_ Sec. 5, eq. 7.
    """
    base = target_std(c, users, cells, s_max)
    if v.choice("form", form, ("printed", "shards")) == "printed":
        return base
    return c * users / cells / math.sqrt(math.ceil(users / s_max))


def mse(estimate: np.ndarray, truth: np.ndarray) -> float:
    """Mean squared error of two normalised densities ([Bagdasaryan22]_ App. A).

    Parameters
    ----------
    estimate, truth : numpy.ndarray
        Two normalised densities of the same (or broadcastable) shape.

    Returns
    -------
    float
        The mean of the squared differences.

    Raises
    ------
    ValueError
        If the shapes do not broadcast (from numpy).

    References
    ----------
    [Bagdasaryan22]_ App. A.
    """
    return float(np.mean((np.asarray(estimate) - np.asarray(truth)) ** 2))


__all__ = ["PRIVATE_ROUND_KEYS", "THEOREM", "AdaptiveRelease", "PartitionTree", "eq7_target",
           "mse"]
