r"""Exact optimal transport on a finite metric space: the one earth-mover's distance solver.

Every exact earth-mover's (1-Wasserstein) distance of the package goes through
:func:`transport_cost`:

.. math::

    W(p, q) = \min_{\gamma \ge 0,\ \gamma 1 = p,\ \gamma^T 1 = q}
        \sum_{x, y} \gamma(x, y)\, c(x, y)

between two mass vectors of equal total on k points, for a ground cost ``c`` given either as
a dense matrix or as one of two structured metrics whose sparse form makes the same problem
much smaller:

* a dense ``(k, k)`` cost matrix (:func:`shuffledp.encoders.metric.spaces.emd_histograms`,
  :func:`~shuffledp.encoders.metric.spaces.emd_datasets`): the transport problem on the
  supports of ``p`` and ``q``, a min-cost flow on the complete bipartite graph, started from
  the north-west corner basis (Dantzig, "Linear Programming and Extensions", 1963, Ch. 14);
* :class:`GridL1`, the l1 distance between the cells of a grid in cell steps (the heatmap
  EMD, :func:`shuffledp.analyzers.heatmap.metrics.emd`): every plan can be routed as unit
  steps between 4-neighbours at the same cost, so W is the min-cost flow with supplies
  ``p - q`` on the 4-neighbour grid graph with unit arc costs (Ling and Okada 2007, Sec. 3),
  about 4 k arcs instead of k^2; a grid with one row or column is a path, where W is the
  closed form ``sum_i |prefix_i(p - q)|`` (Vallender 1973);
* :class:`TreeMetric`, the path length in a tree with the points as leaves (the product space
  B x C of Imola et al., :func:`shuffledp.analyzers.metric.freq.product_emd`): W is the
  closed form ``sum_e length(e) |(p - q)(subtree below e)|`` (Evans and Matsen 2012, Sec. 2).

Which exact solver runs is chosen by the size of the problem (``method="auto"``, measured by
``python bench/emd_timing.py``, which prints the ratios in one run):

* a dense cost matrix goes to POT's ``ot.emd2`` (Flamary et al. 2021), the network simplex of
  Bonneel et al. (2011) in C++, once the transport problem on the supports has at least
  :data:`POT_MIN_ARCS` arcs (1.5-2x faster than ours from 300 to 2,000 points, measured
  in one run on a shared 2-core machine); below that the fixed cost of its Python wrapper
  (~0.1 ms) makes ours as fast or faster;
* a sparse :class:`GridL1` problem is solved as a transport problem with the l1 cost matrix
  between the cells of two supports: those of ``p`` and ``q`` (the l1 distance is a metric
  on the cells, so this is the definition of W), or, when that is at most
  :data:`SUPPORT_DIFF_FACTOR` of the size (``p`` and ``q`` share much of their mass), those
  of ``(p - q)+`` and ``(p - q)-``. The second is exact too: an optimal grid flow with
  supplies ``p - q`` decomposes into paths from cells of surplus to cells of deficit (Ahuja,
  Magnanti and Orlin 1993, Sec. 3.5; cycles cost >= 0), each no cheaper than the l1 distance
  of its ends, the length of a shortest grid path; so the flow's optimum is the transport
  cost of ``(p - q)+`` onto ``(p - q)-``. It is used while that problem has at most
  ``SUPPORT_ARCS_FACTOR (height width)^1.5`` arcs (and :data:`SUPPORT_MAX_ARCS`): the grid
  flow's cost grows as the number of cells to the power 1.5, the transport problem's about
  linearly in its arcs (the crossover, ``bench/emd_timing.py --crossover``, lies at 0.15-0.4
  on 48x48 to 256x256 grids). Sparse 1,000-point aggregates fall on the transport side (as
  fast as POT on the supports of p and q, which it then is; 1.5-2x faster than the grid flow
  at 128x128, 3-12x at 256x256), Gaussian-filtered heatmaps (every cell non-zero) on the
  grid side, where our solver is much faster than any transport formulation (POT on the
  supports of two filtered 64x64 maps: 10-46 s against 0.02-0.04 s);
* if POT's solver stops before optimality (its ``numItermax``, set to :data:`POT_ITER_PER_NODE`
  pivots per node) or reports an infeasible problem, the same problem is solved again by our
  network simplex: no value is returned from a solve that did not finish.

The grid flow starts from a spanning tree lifted from the optimal tree of the same problem
on the grid of 2x2 blocks, solved the same way down to a side below
:data:`MULTISCALE_MIN_SIDE` (a multiscale start, as in the coarse-to-fine transport solvers
of Merigot 2011 and Schmitzer 2016): any spanning tree of the grid is a feasible basis, so
the start changes the number and size of the pivots, not the optimum (filtered 256x256
heatmaps: ~28,000 pivots instead of ~150,000, and 8-10x less time than from the centre comb).

The two flow problems are solved by one primal network simplex (:func:`_network_simplex`,
compiled with numba): a spanning-tree basis with parent pointers, depths and child lists,
node potentials, Dantzig pricing over blocks of sqrt(m) arcs (the block search of LEMON), and
the leaving arc of a strongly feasible tree (the last blocking arc in cycle order from the
join, Cunningham 1976), which rules out cycling. The starting tree is primal feasible (comb or
north-west corner), so no artificial arcs or big-M costs are needed. An arc enters when its
reduced cost is below ``-1e-12 max(c)``: with integer costs (the grid) pricing is exact, and
otherwise the result is within ``1e-12 max(c)`` times the mass of the optimum.

References
----------
.. [Dantzig63] G. B. Dantzig, "Linear Programming and Extensions", Princeton University
   Press, 1963, Ch. 14 (the transportation problem, north-west corner rule) and Ch. 17
   (the network simplex).
.. [Cunningham76] W. H. Cunningham, "A network simplex method", Mathematical Programming
   11:105-116, 1976 (strongly feasible trees).
.. [LO07] H. Ling, K. Okada, "An Efficient Earth Mover's Distance Algorithm for Robust
   Histogram Comparison", IEEE TPAMI 29(5):840-853, 2007 (EMD-L1, Sec. 3).
.. [Vallender73] S. S. Vallender, "Calculation of the Wasserstein distance between
   probability distributions on the line", Theory Probab. Appl. 18:784-786, 1973.
.. [EM12] S. N. Evans, F. A. Matsen, "The phylogenetic Kantorovich-Rubinstein metric for
   environmental sequence samples", J. R. Stat. Soc. B 74(3):569-592, 2012 (Sec. 2).
.. [BvdPPH11] N. Bonneel, M. van de Panne, S. Paris, W. Heidrich, "Displacement
   Interpolation Using Lagrangian Mass Transport", ACM Transactions on Graphics 30(6):158,
   2011 (Sec. 6, the network simplex that POT's ``ot.emd2`` runs).
.. [POT21] R. Flamary, N. Courty, A. Gramfort, et al., "POT: Python Optimal Transport",
   Journal of Machine Learning Research 22(78):1-8, 2021.
.. [Merigot11] Q. Merigot, "A Multiscale Approach to Optimal Transport", Computer Graphics
   Forum 30(5):1583-1592, 2011.
.. [Schmitzer16] B. Schmitzer, "A Sparse Multiscale Algorithm for Dense Optimal Transport",
   Journal of Mathematical Imaging and Vision 56(2):238-259, 2016.
.. [AMO93] R. K. Ahuja, T. L. Magnanti, J. B. Orlin, "Network Flows: Theory, Algorithms,
   and Applications", Prentice Hall, 1993, Sec. 3.5 (flow decomposition).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

#: solvers: "auto" (the fastest exact one for the problem's size, module docstring), our
#: network simplex, POT's ``ot.emd2`` on the transport problem, or HiGHS on our flow as an LP
#: (a reference; slower by one to two orders of magnitude)
METHODS = ("auto", "network_simplex", "pot", "highs")
#: "auto" hands a dense transport problem to POT from this many arcs (k_p k_q on the supports;
#: below it POT's per-call overhead of ~0.1 ms loses, ``bench/emd_timing.py --small``)
POT_MIN_ARCS = 400
#: a GridL1 problem goes to the transport problem between the supports of (p - q)+ and
#: (p - q)- when that has at most this fraction of the arcs between the supports of p and q,
#: else between the supports of p and q (same optimum; per instance either runs up to ~1.5x
#: faster than the other, so the smaller one is taken only when it is much smaller)
SUPPORT_DIFF_FACTOR = 0.5
#: "auto" solves a GridL1 problem as that transport problem while it has at most
#: SUPPORT_ARCS_FACTOR (height width)^1.5 arcs...
SUPPORT_ARCS_FACTOR = 0.3
#: ... and at most this many (its cost matrix and POT's arc arrays take ~40 bytes per arc)
SUPPORT_MAX_ARCS = 4_000_000
#: POT's pivot limit is this many per node, at least 10^6 (optimal solves took 5-8 per node
#: on dense and grid-l1 problems of 300 to 4,000 nodes)
POT_ITER_PER_NODE = 1000
#: the grid flow starts from the optimal tree of the half-size grid (recursively) while both
#: sides are at least this long; below, from the centre comb (``_grid_network_simplex``)
MULTISCALE_MIN_SIDE = 32
#: relative tolerance of the equal-mass check: |sum p - sum q| <= MASS_TOL max(1, sum |p|)
MASS_TOL = 1e-9
#: an arc enters the basis when its reduced cost is below -PRICING_TOL max(cost)
PRICING_TOL = 1e-12

__all__ = ["METHODS", "MULTISCALE_MIN_SIDE", "POT_ITER_PER_NODE", "POT_MIN_ARCS",
           "SUPPORT_ARCS_FACTOR", "SUPPORT_DIFF_FACTOR", "SUPPORT_MAX_ARCS", "GridL1",
           "TreeMetric", "transport_cost"]


# ----------------------------------------------------------------------------- structured costs
@dataclass(frozen=True)
class GridL1:
    """The l1 ground metric between the cells of a ``height`` x ``width`` grid, in cell steps.

    Cell (r, c) is point ``r width + c``; the cost of (r, c) -> (r', c') is
    ``|r - r'| + |c - c'|``. Callers rescale (the heatmap EMD divides by the longer side).

    Parameters
    ----------
    height, width : int
        The grid's rows and columns, integers >= 1 (a ``ValueError`` names the other).
    """

    height: int
    width: int

    def __post_init__(self) -> None:
        for name in ("height", "width"):
            val = getattr(self, name)
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"GridL1 {name} must be an integer >= 1, got {name}={val!r}")

    @property
    def k(self) -> int:
        """Number of points (cells)."""
        return int(self.height) * int(self.width)


@dataclass(frozen=True, eq=False)
class TreeMetric:
    """Path length in a weighted tree whose first ``k`` nodes are the points.

    Attributes
    ----------
    parent : ndarray of int, shape (N,)
        ``parent[x] > x`` for every node but the root, the last node, whose parent is -1
        (children are numbered before their parents).
    length : ndarray of float, shape (N,)
        Length of the edge from ``x`` to its parent (>= 0; the root's entry is ignored).
    k : int
        The points are nodes ``0 .. k-1`` (usually the leaves).
    """

    parent: np.ndarray
    length: np.ndarray
    k: int

    def __post_init__(self) -> None:
        par = np.asarray(self.parent)
        ln = np.asarray(self.length, dtype=np.float64)
        if par.ndim != 1 or par.size < 1 or par.dtype.kind not in "iu":
            raise ValueError(f"TreeMetric parent must be a non-empty 1-D integer array, got "
                             f"shape {par.shape} dtype {par.dtype}")
        n = par.size
        if ln.shape != (n,) or not np.all(np.isfinite(ln)) or np.any(ln[:-1] < 0):
            raise ValueError(f"TreeMetric length must be {n} finite lengths >= 0, got "
                             f"shape {ln.shape}")
        idx = np.arange(n - 1)
        bad = par[:-1] <= idx
        if par[-1] != -1 or bad.any() or np.any(par[:-1] >= n):
            x = int(np.argmax(bad)) if bad.any() else n - 1
            raise ValueError(f"TreeMetric parent must satisfy x < parent[x] < {n} and "
                             f"parent[{n - 1}] = -1 (the root last); parent[{x}]={int(par[x])}")
        if not (isinstance(self.k, (int, np.integer)) and 1 <= self.k <= n):
            raise ValueError(f"TreeMetric k must be an integer in [1, {n}], got k={self.k!r}")
        par = par.astype(np.int64)   # read-only copies: the metric cannot change under a cache
        ln = ln.copy()
        par.setflags(write=False)
        ln.setflags(write=False)
        object.__setattr__(self, "parent", par)
        object.__setattr__(self, "length", ln)


# ----------------------------------------------------------------------------- the flow solver
# The network simplex, in the order of one pivot: the starting tree (_init_tree), the entering
# arc (_entering_arc), the cycle and its leaving arc (_join, _leaving_arc), the flow change
# (_augment), the basis exchange (_exchange, with _detach/_attach on the child lists) and the
# potentials below the moved subtree (_update_subtree); _network_simplex runs the loop. All
# compiled by numba (their bodies are not seen by coverage). A tree is kept as parent, pred
# (the tree arc to the parent), dirn (+1: that arc points node -> parent, -1: parent -> node),
# depth and doubly linked child lists (first_child, next_sib, prev_sib).
# The pieces are inlined into the loop at numba's IR level (inline="always"): as separate
# calls the filtered 256x256 heatmap EMD took ~12% longer.
_njit = nb.njit(cache=True, nogil=True, inline="always")


@_njit
def _attach(x, p, first_child, next_sib, prev_sib):  # pragma: no cover
    """Make x the first child of p."""
    fc = first_child[p]
    next_sib[x] = fc
    prev_sib[x] = -1
    if fc >= 0:
        prev_sib[fc] = x
    first_child[p] = x


@_njit
def _detach(x, p, first_child, next_sib, prev_sib):  # pragma: no cover
    """Remove x from the child list of its parent p."""
    ps = prev_sib[x]
    ns = next_sib[x]
    if ps >= 0:
        next_sib[ps] = ns
    else:
        first_child[p] = ns
    if ns >= 0:
        prev_sib[ns] = ps


@_njit
def _init_tree(cost, parent, pred, dirn, in_tree, depth, pi, first_child, next_sib, prev_sib,
               stack):  # pragma: no cover
    """Child lists of the starting tree, then depths and potentials from the root down.

    The potentials make every tree arc's reduced cost zero: pi[x] = pi[parent] - dirn c(pred).
    """
    root = -1
    for x in range(parent.size):
        p = parent[x]
        if p < 0:
            root = x
            continue
        in_tree[pred[x]] = True
        _attach(x, p, first_child, next_sib, prev_sib)
    top = 0
    stack[0] = root
    while top >= 0:
        x = stack[top]
        top -= 1
        c = first_child[x]
        while c >= 0:
            depth[c] = depth[x] + 1
            pi[c] = pi[x] - dirn[c] * cost[pred[c]]
            top += 1
            stack[top] = c
            c = next_sib[c]


@_njit
def _entering_arc(tail, head, cost, in_tree, pi, nxt, block, tol):  # pragma: no cover
    """Block search (Dantzig pricing over blocks of ``block`` arcs, cyclically from ``nxt``).

    Returns the arc of most negative reduced cost c + pi[tail] - pi[head] in the first block
    that has one below -tol (-1 if none: optimal), its reduced cost and where to resume.
    """
    m = tail.size
    best = -1
    best_rc = -tol
    cnt = 0
    checked = 0
    while checked < m:
        a = nxt
        nxt += 1
        if nxt == m:
            nxt = 0
        checked += 1
        if not in_tree[a]:
            rc = cost[a] + pi[tail[a]] - pi[head[a]]
            if rc < best_rc:
                best_rc = rc
                best = a
        cnt += 1
        if cnt >= block:
            if best >= 0:
                break
            cnt = 0
    return best, best_rc, nxt


@_njit
def _join(i, j, parent, depth):  # pragma: no cover
    """The first common ancestor of i and j: where the cycle of arc i -> j closes."""
    while i != j:
        if depth[i] > depth[j]:
            i = parent[i]
        elif depth[j] > depth[i]:
            j = parent[j]
        else:
            i = parent[i]
            j = parent[j]
    return i


@_njit
def _leaving_arc(i, j, join, parent, pred, dirn, flow):  # pragma: no cover
    """The blocking arc of the cycle of arc i -> j with the least flow (strongly feasible).

    Along the cycle (i -> j, up from j to the join, down to i) the backward arcs lose flow:
    those pointing up on the i side, down on the j side. Ties go to the last one in cycle
    order from the join (Cunningham 1976), so the tree stays strongly feasible. Returns the
    flow change delta, the node whose pred arc leaves, and its side (1: i's, 2: j's).
    """
    delta = np.inf
    u_out = -1
    side = 0
    x = i
    while x != join:
        if dirn[x] == 1:
            f = flow[pred[x]]
            if f < delta:
                delta = f
                u_out = x
                side = 1
        x = parent[x]
    x = j
    while x != join:
        if dirn[x] == -1:
            f = flow[pred[x]]
            if f <= delta:
                delta = f
                u_out = x
                side = 2
        x = parent[x]
    return delta, u_out, side


@_njit
def _augment(e, i, j, join, delta, parent, pred, dirn, flow):  # pragma: no cover
    """Push delta around the cycle of arc e = i -> j."""
    if delta <= 0:
        return
    flow[e] += delta
    x = i
    while x != join:
        flow[pred[x]] -= dirn[x] * delta
        x = parent[x]
    x = j
    while x != join:
        flow[pred[x]] += dirn[x] * delta
        x = parent[x]


@_njit
def _exchange(e, i, j, u_out, side, parent, pred, dirn, flow, in_tree, first_child, next_sib,
              prev_sib, path):  # pragma: no cover
    """Arc e enters, pred[u_out] leaves; the path from e's end on u_out's side up to u_out
    is re-hung (parent pointers reversed), so that end now hangs from the other by e.

    Returns the root of the moved subtree and its new parent.
    """
    leaving = pred[u_out]
    flow[leaving] = 0.0
    in_tree[leaving] = False
    in_tree[e] = True
    if side == 1:
        root, other, new_dir = i, j, 1
    else:
        root, other, new_dir = j, i, -1
    k = 0
    x = root
    while True:
        path[k] = x
        k += 1
        if x == u_out:
            break
        x = parent[x]
    for t in range(k):
        _detach(path[t], parent[path[t]], first_child, next_sib, prev_sib)
    for t in range(k - 1, 0, -1):
        x = path[t]
        y = path[t - 1]
        pred[x] = pred[y]
        dirn[x] = -dirn[y]
        parent[x] = y
    parent[root] = other
    pred[root] = e
    dirn[root] = new_dir
    for t in range(k):
        _attach(path[t], parent[path[t]], first_child, next_sib, prev_sib)
    return root, other


@_njit
def _update_subtree(root, other, shift, depth, pi, first_child, next_sib,
                    stack):  # pragma: no cover
    """Depths below the new parent ``other``, potentials shifted by one amount (the moved
    subtree keeps its internal reduced costs)."""
    top = 0
    stack[0] = root
    depth[root] = depth[other] + 1
    while top >= 0:
        x = stack[top]
        top -= 1
        pi[x] += shift
        c = first_child[x]
        while c >= 0:
            depth[c] = depth[x] + 1
            top += 1
            stack[top] = c
            c = next_sib[c]


@nb.njit(cache=True, nogil=True)  # nogil: solves run in parallel threads
def _network_simplex(tail, head, cost, parent, pred, dirn, flow, tol):  # pragma: no cover
    """Primal network simplex for uncapacitated min-cost flow from a feasible spanning tree.

    ``tail``, ``head``, ``cost`` (length m) are the arcs; the starting basis is the spanning
    tree given by ``parent`` (the root has -1), ``pred`` (the tree arc joining each node to its
    parent) and ``dirn`` (+1 if that arc points node -> parent, -1 if parent -> node), and
    ``flow`` (length m) is a feasible flow carried by the tree arcs. ``parent``, ``pred``,
    ``dirn`` and ``flow`` are updated in place. Returns the optimal cost and the number of
    pivots.
    """
    n = parent.size
    m = tail.size
    in_tree = np.zeros(m, np.bool_)
    depth = np.zeros(n, np.int64)
    pi = np.zeros(n)
    first_child = np.full(n, -1, np.int64)
    next_sib = np.full(n, -1, np.int64)
    prev_sib = np.full(n, -1, np.int64)
    stack = np.empty(n, np.int64)
    path = np.empty(n, np.int64)
    _init_tree(cost, parent, pred, dirn, in_tree, depth, pi, first_child, next_sib, prev_sib,
               stack)
    block = max(10, int(np.sqrt(m)))
    nxt = 0
    npiv = 0
    while True:
        e, _, nxt = _entering_arc(tail, head, cost, in_tree, pi, nxt, block, tol)
        if e < 0:
            break
        npiv += 1
        i = tail[e]
        j = head[e]
        join = _join(i, j, parent, depth)
        delta, u_out, side = _leaving_arc(i, j, join, parent, pred, dirn, flow)
        _augment(e, i, j, join, delta, parent, pred, dirn, flow)
        root, other = _exchange(e, i, j, u_out, side, parent, pred, dirn, flow, in_tree,
                                first_child, next_sib, prev_sib, path)
        # e's reduced cost becomes 0: the moved subtree's potentials shift by the same amount
        shift = pi[other] - dirn[root] * cost[e] - pi[root]
        _update_subtree(root, other, shift, depth, pi, first_child, next_sib, stack)
    total = 0.0
    for a in range(m):
        total += flow[a] * cost[a]
    return total, npiv


@nb.njit(cache=True, nogil=True)
def _tree_cost(parent, length, d):  # pragma: no cover - compiled by numba
    """sum over non-root nodes x of length[x] |d(subtree of x)|; children precede parents."""
    n = parent.size
    sub = np.zeros(n)
    sub[:d.size] = d
    total = 0.0
    for x in range(n - 1):
        total += length[x] * abs(sub[x])
        sub[parent[x]] += sub[x]
    return total


def _tree_from_subtree_sums(sub, up, down, parent):
    """pred, dirn and flow of a tree whose arcs carry each subtree's net supply.

    ``sub[x]`` is the supply of the subtree of x; ``up[x]`` / ``down[x]`` the arc x -> parent
    / parent -> x (-1 if absent). The subtree's surplus leaves by ``up``, its deficit enters by
    ``down``; rounding-level flows of the wrong sign are set to 0.
    """
    use_up = ((sub > 0) & (up >= 0)) | (down < 0)
    pred = np.where(use_up, up, down)
    dirn = np.where(use_up, 1, -1).astype(np.int64)
    pred[parent < 0] = -1
    dirn[parent < 0] = 0
    return pred, dirn, np.maximum(np.where(use_up, sub, -sub), 0.0)


@functools.lru_cache(maxsize=8)
def _grid_arcs(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Arcs of the 4-neighbour grid: 2k and 2k + 1 are the two directions of edge k
    (horizontal edges row by row first, then vertical ones); read-only."""
    idx = np.arange(height * width, dtype=np.int64).reshape(height, width)
    a = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    b = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    tail = np.empty(2 * a.size, np.int64)
    head = np.empty(2 * a.size, np.int64)
    tail[0::2], tail[1::2] = a, b
    head[0::2], head[1::2] = b, a
    tail.setflags(write=False)
    head.setflags(write=False)
    return tail, head


def _grid_comb(d: np.ndarray, height: int, width: int):
    """The comb tree rooted at the centre cell with the flow of supplies d.

    The spine is the centre column c0 = width // 2, rooted at row r0 = height // 2; every row
    hangs from its spine cell, to the left and to the right. Its depth is about
    (height + width) / 2, half that of a comb rooted at a corner, which shortens the cycles and
    moved subtrees of every pivot (``network_simplex`` 1.2-1.7x faster than from the corner
    comb on 64x64 to 256x256 aggregates and heatmaps, with 2-20% fewer pivots).
    Edge k joins cells a < b: horizontal edges r (width - 1) + c join (r, c) and (r, c + 1),
    vertical edges height (width - 1) + r width + c join (r, c) and (r + 1, c); arc 2k is
    a -> b, arc 2k + 1 is b -> a.
    """
    n = height * width
    s = d.reshape(height, width)
    r0, c0 = height // 2, width // 2
    sub = np.empty((height, width))   # the supply of each cell's subtree
    sub[:, c0 + 1:] = s[:, :c0:-1].cumsum(axis=1)[:, ::-1]   # right arms, summed from the end
    sub[:, :c0] = s[:, :c0].cumsum(axis=1)                     # left arms
    rows = s.sum(axis=1)
    sub[:r0, c0] = rows[:r0].cumsum()                          # spine above the root
    sub[r0 + 1:, c0] = rows[:r0:-1].cumsum()[::-1]             # spine below the root
    sub[r0, c0] = rows.sum()
    r, c = np.divmod(np.arange(n), width)
    right, left = c > c0, c < c0
    below, above = (c == c0) & (r > r0), (c == c0) & (r < r0)
    # the edge to the parent, and whether the cell is its edge's a (smaller index) end
    edge = np.select([right, left, below, above],
                     [r * (width - 1) + c - 1, r * (width - 1) + c,
                      height * (width - 1) + (r - 1) * width + c,
                      height * (width - 1) + r * width + c], -1)
    parent = np.select([right, left, below, above],
                       [np.arange(n) - 1, np.arange(n) + 1, np.arange(n) - width,
                        np.arange(n) + width], -1)
    is_a = left | above
    up = np.where(is_a, 2 * edge, 2 * edge + 1)     # cell -> parent
    down = np.where(is_a, 2 * edge + 1, 2 * edge)   # parent -> cell
    pred, dirn, f = _tree_from_subtree_sums(sub.ravel(), up, down, parent)
    flow = np.zeros(4 * n - 2 * (height + width))
    tree = parent >= 0
    flow[pred[tree]] = f[tree]
    return parent.astype(np.int64), pred, dirn, flow


@nb.njit(cache=True, nogil=True)
def _lift_tree(coarse_parent, d, height, width):  # pragma: no cover - compiled by numba
    """The starting tree of the grid flow on ``height`` x ``width`` cells lifted from a
    spanning tree of the grid of 2x2 blocks (``coarse_parent``, block (R, C) is cell
    R ceil(width / 2) + C, holding cells 2R..2R+1 x 2C..2C+1), with the flow of supplies d.

    Each block's cells are joined by a comb (its row edges and the edge down its first
    column), each coarse tree edge by the first fine edge across it (in the blocks' first row
    or first column); that is ``height width - 1`` edges joining every cell, a spanning tree.
    It is re-rooted at the centre cell by a breadth-first search; pred, dirn and flow are
    those of :func:`_tree_from_subtree_sums` (each arc carries its subtree's net supply).
    """
    n = height * width
    wc = (width + 1) // 2
    nbr = np.full(4 * n, -1, np.int64)
    nbr_edge = np.full(4 * n, -1, np.int64)
    deg = np.zeros(n, np.int64)
    nv = height * (width - 1)   # the first vertical edge
    for x in range(n):
        r, c = divmod(x, width)
        if c % 2 == 1:
            continue
        for t in range(2):
            if t == 0 and c + 1 < width:   # the row edge (r, c) - (r, c + 1)
                y, e = x + 1, r * (width - 1) + c
            elif t == 1 and r % 2 == 0 and r + 1 < height:   # (r, c) - (r + 1, c)
                y, e = x + width, nv + x
            else:
                continue
            nbr[4 * x + deg[x]], nbr_edge[4 * x + deg[x]] = y, e
            nbr[4 * y + deg[y]], nbr_edge[4 * y + deg[y]] = x, e
            deg[x] += 1
            deg[y] += 1
    for xc in range(coarse_parent.size):
        pc = coarse_parent[xc]
        if pc < 0:
            continue
        lo, hi = min(xc, pc), max(xc, pc)
        rl, cl = divmod(lo, wc)
        rh = hi // wc
        if rl == rh:   # side by side: the edge (2R, 2C + 1) - (2R, 2C + 2)
            x = 2 * rl * width + 2 * cl + 1
            y, e = x + 1, 2 * rl * (width - 1) + 2 * cl + 1
        else:          # one above the other: the edge (2R + 1, 2C) - (2R + 2, 2C)
            x = (2 * rl + 1) * width + 2 * cl
            y, e = x + width, nv + x
        nbr[4 * x + deg[x]], nbr_edge[4 * x + deg[x]] = y, e
        nbr[4 * y + deg[y]], nbr_edge[4 * y + deg[y]] = x, e
        deg[x] += 1
        deg[y] += 1
    root = (height // 2) * width + width // 2
    parent = np.full(n, -2, np.int64)
    edge = np.full(n, -1, np.int64)
    order = np.empty(n, np.int64)
    parent[root] = -1
    order[0] = root
    head, tail_ = 0, 1
    while head < tail_:
        x = order[head]
        head += 1
        for t in range(deg[x]):
            y = nbr[4 * x + t]
            if parent[y] == -2:
                parent[y] = x
                edge[y] = nbr_edge[4 * x + t]
                order[tail_] = y
                tail_ += 1
    sub = d.copy()
    for t in range(n - 1, 0, -1):
        x = order[t]
        sub[parent[x]] += sub[x]
    pred = np.full(n, -1, np.int64)
    dirn = np.zeros(n, np.int64)
    flow = np.zeros(4 * n - 2 * (height + width))
    for t in range(1, n):
        x = order[t]
        up = 2 * edge[x] + (0 if x < parent[x] else 1)   # arc 2k runs from the smaller end
        if sub[x] > 0:     # the subtree's surplus leaves by the arc x -> parent
            pred[x], dirn[x] = up, 1
            flow[up] = sub[x]
        else:              # its deficit enters by the arc parent -> x
            pred[x], dirn[x] = up ^ 1, -1
            flow[up ^ 1] = -sub[x]
    return parent, pred, dirn, flow


def _grid_network_simplex(d: np.ndarray, height: int, width: int) -> tuple[float, np.ndarray]:
    """The grid flow with supplies ``d`` by our network simplex, started multiscale.

    The supplies summed over 2x2 blocks are the same problem on the half-size grid; its
    optimal tree, solved so recursively down to a side below :data:`MULTISCALE_MIN_SIDE` (there
    from the centre comb), is lifted by :func:`_lift_tree` to the starting tree here. Any
    spanning tree of the grid is a feasible basis (every edge has both arc directions and
    no capacity), so the start only changes the pivots, not the optimum: on 256x256 heatmaps
    ~5x fewer pivots, each moving smaller subtrees, than from the comb
    (``bench/emd_timing.py``). Returns the optimal cost (cell steps) and the final tree's
    parent pointers.
    """
    tail, head = _grid_arcs(height, width)
    if min(height, width) < MULTISCALE_MIN_SIDE:
        parent, pred, dirn, flow = _grid_comb(d, height, width)
    else:
        hc, wc = (height + 1) // 2, (width + 1) // 2
        padded = np.zeros((2 * hc, 2 * wc))
        padded[:height, :width] = d.reshape(height, width)
        _, coarse = _grid_network_simplex(padded.reshape(hc, 2, wc, 2).sum(axis=(1, 3)).ravel(),
                                          hc, wc)
        parent, pred, dirn, flow = _lift_tree(coarse, d, height, width)
    total, _ = _network_simplex(tail, head, np.ones(tail.size), parent, pred, dirn, flow,
                                PRICING_TOL)
    return float(total), parent


def _northwest_corner(a: np.ndarray, b: np.ndarray):
    """The north-west corner basis of the transport problem from masses a to masses b.

    Nodes 0..na-1 are the sources, na..na+nb-1 the sinks, arc i nb + j goes from source i to
    sink j. The staircase of na + nb - 1 cells is a spanning tree rooted at source 0: each cell
    after the first brings in one new row or column, whose node hangs from the cell's other end.
    """
    na, nb_ = a.size, b.size
    n = na + nb_
    parent = np.full(n, -1, np.int64)
    up = np.full(n, -1, np.int64)
    down = np.full(n, -1, np.int64)
    order = np.empty(n, np.int64)
    order[0], order[1] = 0, na
    parent[na], down[na] = 0, 0
    i = j = 0
    ra, rb = a[0], b[0]
    for t in range(2, n):
        if (ra < rb and i < na - 1) or j == nb_ - 1:
            rb -= ra
            i += 1
            ra = a[i]
            parent[i], up[i] = na + j, i * nb_ + j   # new row: source i -> sink j
            order[t] = i
        else:
            ra -= rb
            j += 1
            rb = b[j]
            parent[na + j], down[na + j] = i, i * nb_ + j   # new column: source i -> sink j
            order[t] = na + j
    supply = np.concatenate([a, -b])
    sub = supply.copy()
    for x in order[:0:-1]:   # children before parents
        sub[parent[x]] += sub[x]
    return parent, *_tree_from_subtree_sums(sub, up, down, parent)


def _min_cost_flow(tail, head, cost, parent, pred, dirn, flow, supply, method: str) -> float:
    """Our network simplex (``method="network_simplex"``) or HiGHS on the flow problem."""
    if method == "network_simplex":
        tol = PRICING_TOL * float(cost.max()) if cost.size else 0.0
        total, _ = _network_simplex(tail, head, cost, parent, pred, dirn, flow, tol)
        return float(total)
    n = supply.size
    m = tail.size
    arcs = np.arange(m)
    inc = sp.csc_matrix((np.concatenate([np.ones(m), -np.ones(m)]),
                         (np.concatenate([tail, head]), np.concatenate([arcs, arcs]))),
                        shape=(n, m))
    # the balance constraints are dependent; drop the root's to keep HiGHS's presolve happy
    res = linprog(cost, A_eq=inc[1:], b_eq=supply[1:], bounds=(0, None), method="highs-ipm")
    if res.status != 0:  # pragma: no cover - the problem is always feasible and bounded
        raise RuntimeError(f"transport linear programme failed: {res.message}")
    return float(res.fun)


# ----------------------------------------------------------------------------- POT
@functools.cache
def _pot() -> Any:
    """POT's ``ot`` module, imported on first use (the import costs ~1 s, mostly scipy.stats,
    which ``import shuffledp`` should not pay); None if POT is not installed."""
    try:
        import ot
    except ImportError:  # pragma: no cover - POT is a dependency of the package
        return None
    return ot


def _pot_max_iter(n_nodes: int) -> int:
    """POT's pivot limit for a transport problem of ``n_nodes`` nodes (it fits a C int)."""
    return min(max(10**6, POT_ITER_PER_NODE * n_nodes), 2**31 - 1)


def _pot_transport(a: np.ndarray, b: np.ndarray, cost: np.ndarray,
                   max_iter: int | None = None) -> tuple[float | None, str]:
    """POT's exact network simplex on the transport problem from ``a`` to ``b``.

    ``a`` and ``b`` are > 0 with equal totals up to :data:`MASS_TOL` and ``cost`` is their
    C-contiguous float64 ``(a.size, b.size)`` cost matrix. POT scales ``b`` to the total of
    ``a`` itself but checks the totals to 1.5e-6 and the supplies' balance to 1e-8, both in
    absolute terms, so masses whose totals are not within 1e-6 of 1 and 1e-12 of each other
    are normalised to total 1 and the cost scaled back by the total of ``a``; distributions
    already normalised are
    passed as they are (the network simplex's path, and so its time, changes with the last
    bits of the masses: POT on rounding-level different copies of one problem took up to
    1.3x longer or shorter). Returns ``(value, "")``, or ``(None, why)`` when POT is not
    installed or its solver did not report an optimum (result code 1): the pivot limit
    ``max_iter`` (default ``POT_ITER_PER_NODE`` per node) was reached, or it found the
    problem infeasible. POT's own warning about it is left as it is.
    """
    ot = _pot()
    if ot is None:  # pragma: no cover - POT is a dependency of the package
        return None, "POT (the ot package) is not installed"
    it = _pot_max_iter(a.size + b.size) if max_iter is None else int(max_iter)
    total, total_b = float(a.sum()), float(b.sum())
    if abs(total - 1.0) <= 1e-6 and abs(total - total_b) <= 1e-12:
        val, log = ot.emd2(a, b, cost, numItermax=it, log=True)
        total = 1.0
    else:
        val, log = ot.emd2(a / total, b / total_b, cost, numItermax=it, log=True)
    code = int(log.get("result_code", -1))
    val = float(val)
    if code != 1 or not np.isfinite(val):
        reason = log.get("warning") or f"result code {code}"
        return None, (f"POT's ot.emd2 did not reach the optimum ({reason}; numItermax={it}, "
                      f"{a.size} x {b.size} transport problem)")
    return val * total, ""


# ----------------------------------------------------------------------------- the solvers
def _transport(a: np.ndarray, b: np.ndarray, cost: np.ndarray, method: str) -> float:
    """The transport problem from masses ``a`` > 0 to ``b`` > 0 of equal totals (up to
    :data:`MASS_TOL`; ``b`` counts as scaled to the total of ``a``) with the
    ``(a.size, b.size)`` cost matrix ``cost``, by ``method`` (``"auto"``: POT from
    :data:`POT_MIN_ARCS` arcs, ours below it or when POT does not reach the optimum)."""
    if a.size == 1:  # the only coupling sends the one source's mass to every sink
        return float(cost[0] @ b) * (a[0] / b.sum())
    if b.size == 1:
        return float(cost[:, 0] @ a)
    if method == "pot" or (method == "auto" and a.size * b.size >= POT_MIN_ARCS):
        val, why = _pot_transport(a, b, np.ascontiguousarray(cost, dtype=np.float64))
        if val is not None:
            return val
        if method == "pot":
            raise RuntimeError(f"method='pot': {why}; method='auto' or 'network_simplex' "
                               f"solves it with the package's own network simplex")
        method = "network_simplex"
    if method == "auto":
        method = "network_simplex"
    b = b * (a.sum() / b.sum())
    na, nb_ = a.size, b.size
    tail = np.repeat(np.arange(na, dtype=np.int64), nb_)
    head = np.tile(np.arange(na, na + nb_, dtype=np.int64), na)
    parent, pred, dirn, f = _northwest_corner(a, b)
    flow = np.zeros(tail.size)
    flow[pred[1:]] = f[1:]   # source 0 is the root
    return _min_cost_flow(tail, head, np.ascontiguousarray(cost, dtype=np.float64).ravel(),
                          parent, pred, dirn, flow, np.concatenate([a, -b]), method)


@nb.njit(cache=True, nogil=True)
def _l1_costs(src, dst, width):  # pragma: no cover - compiled by numba
    """l1 distances in cell steps between the cells ``src`` and ``dst`` of a grid ``width``
    cells wide: a C-contiguous float64 ``(src.size, dst.size)`` matrix (compiled: ~10x
    faster than the same in numpy, whose temporaries cost ~8% of POT's solve at 256x256)."""
    out = np.empty((src.size, dst.size))
    rd = dst // width
    cd = dst - rd * width
    for i in range(src.size):
        rs = src[i] // width
        cs = src[i] - rs * width
        for j in range(dst.size):
            out[i, j] = abs(rs - rd[j]) + abs(cs - cd[j])
    return out


def _grid_supports(a: np.ndarray, b: np.ndarray):
    """The transport problem of a GridL1 pair: (sources, sinks, source masses, sink masses)
    on the supports of ``(p - q)+`` and ``(p - q)-``, or on those of ``p`` and ``q`` unless
    the first has at most :data:`SUPPORT_DIFF_FACTOR` of its arcs (or the masses are
    signed); None if ``p - q`` is 0 up to the mass tolerance."""
    d = a - b
    pos, neg = np.flatnonzero(d > 0), np.flatnonzero(d < 0)
    if pos.size == 0 or neg.size == 0:
        return None
    if a.min() >= 0 and b.min() >= 0:
        sp_, sq_ = np.flatnonzero(a), np.flatnonzero(b)
        if pos.size * neg.size > SUPPORT_DIFF_FACTOR * sp_.size * sq_.size:
            return sp_, sq_, a[sp_], b[sq_]
    return pos, neg, d[pos], -d[neg]


def _grid_cost(a: np.ndarray, b: np.ndarray, h: int, w: int, method: str) -> float:
    """W between ``a`` and ``b`` on the ``h`` x ``w`` grid with l1 cost (2-D grids)."""
    d = a - b
    if method in ("auto", "pot"):
        problem = _grid_supports(a, b)
        if problem is None:   # p - q is within the mass tolerance of 0
            return 0.0
        src, dst, ma, mb = problem
        arcs = src.size * dst.size
        if method == "pot" and arcs > SUPPORT_MAX_ARCS:
            raise ValueError(
                f"method='pot' solves a GridL1 problem as a transport problem between "
                f"supports, here {src.size} x {dst.size} = {arcs} arcs > "
                f"SUPPORT_MAX_ARCS={SUPPORT_MAX_ARCS}; use method='auto' or "
                f"'network_simplex' (the grid flow)")
        if method == "pot" or arcs <= min(SUPPORT_MAX_ARCS, SUPPORT_ARCS_FACTOR * (h * w) ** 1.5):
            return _transport(ma, mb, _l1_costs(src, dst, w), method)
        method = "network_simplex"
    if method != "highs":
        return _grid_network_simplex(d, h, w)[0]
    tail, head = _grid_arcs(h, w)
    parent, pred, dirn, flow = _grid_comb(d, h, w)
    return _min_cost_flow(tail, head, np.ones(tail.size), parent, pred, dirn, flow, d, method)


# ----------------------------------------------------------------------------- the entry point
def _masses(name: str, arr: Any, k: int, signed: bool) -> np.ndarray:
    a = np.asarray(arr, dtype=np.float64)
    if a.size != k or a.ndim not in (1, 2):
        raise ValueError(f"{name} must hold one mass per point ({k}), got shape {a.shape}")
    a = a.ravel()
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite; {name}[{int(np.argmin(np.isfinite(a)))}] "
                         f"is not")
    if not signed and np.any(a < 0):
        i = int(np.argmax(a < 0))
        raise ValueError(f"{name} must be >= 0 with a dense cost matrix; "
                         f"{name}[{i}]={float(a[i])!r}")
    return a


def transport_cost(p: Any, q: Any, cost: Any, *, method: str = "auto") -> float:
    r"""Exact optimal transport cost between masses ``p`` and ``q`` of equal total.

    .. math::

        W(p, q) = \min_{\gamma \ge 0,\ \gamma 1 = p,\ \gamma^T 1 = q}
            \sum_{x, y} \gamma(x, y)\, c(x, y)

    Parameters
    ----------
    p, q : array_like, shape (k,) (or (height, width) for :class:`GridL1`)
        Finite masses with equal totals (up to :data:`MASS_TOL` relative; a smaller mismatch
        is removed by scaling ``q``'s side to ``p``'s total). With a dense cost they must be
        >= 0 (zero masses are dropped). With a structured metric (:class:`GridL1`,
        :class:`TreeMetric`) they may be signed: the result is then the
        Kantorovich-Rubinstein norm of ``p - q``, the cost of moving its positive part onto its
        negative part.
    cost : ndarray of shape (k, k), GridL1 or TreeMetric
        The ground cost (any non-negative matrix, not necessarily a metric), or a structured
        metric (module docstring).
    method : {"auto", "network_simplex", "pot", "highs"}
        Solver (a tree has a closed form and ignores it); all are exact:

        * ``"auto"`` (default): the fastest for the problem's size (module docstring): POT's
          ``ot.emd2`` on dense transport problems of at least :data:`POT_MIN_ARCS` arcs and
          on sparse :class:`GridL1` supplies, our network simplex otherwise or when POT does
          not reach the optimum;
        * ``"network_simplex"``: our network simplex on the supports (dense) or on the grid
          graph (:class:`GridL1`);
        * ``"pot"``: POT's ``ot.emd2`` on the transport problem on the supports (for
          :class:`GridL1` those of ``p`` and ``q`` or of ``(p - q)+`` and ``(p - q)-``,
          module docstring; at most :data:`SUPPORT_MAX_ARCS` arcs);
        * ``"highs"``: our flow problem as an LP through :func:`scipy.optimize.linprog`
          (HiGHS interior point with crossover, a reference).

    Returns
    -------
    float
        W(p, q) in the unit of ``cost`` (cell steps for :class:`GridL1`).

    Raises
    ------
    ValueError
        If a mass vector has the wrong size, non-finite entries, negative entries with a
        dense cost, if the totals differ, if the cost matrix is not square, finite and >= 0,
        on an unknown ``method``, or with ``method="pot"`` on a :class:`GridL1` problem above
        :data:`SUPPORT_MAX_ARCS` arcs (each message names the argument and the value).
    RuntimeError
        With ``method="pot"``, if POT's solver stops before the optimum (pivot limit
        ``POT_ITER_PER_NODE`` per node, or a reported infeasibility): no inexact value is
        returned (``"auto"`` solves the problem again with our network simplex instead).

    References
    ----------
    See the module docstring: [Dantzig63]_, [Cunningham76]_, [LO07]_, [Vallender73]_, [EM12]_,
    [BvdPPH11]_, [POT21]_, [AMO93]_, [Merigot11]_, [Schmitzer16]_.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got method={method!r}")
    structured = isinstance(cost, (GridL1, TreeMetric))
    if not structured:
        c = np.asarray(cost, dtype=np.float64)
        if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] == 0:
            raise ValueError(f"cost must be a square (k, k) matrix, a GridL1 or a TreeMetric, "
                             f"got shape {c.shape}")
        if not (c.min() >= 0 and np.isfinite(c.max())):   # NaN fails the first test
            i, j = np.unravel_index(int(np.argmax(~(np.isfinite(c) & (c >= 0)))), c.shape)
            raise ValueError(f"cost must be finite and >= 0, got cost[{i}, {j}]={float(c[i, j])!r}")
        k = c.shape[0]
    else:
        k = cost.k
    a = _masses("p", p, k, structured)
    b = _masses("q", q, k, structured)
    sa, sb = a.sum(), b.sum()
    if abs(sa - sb) > MASS_TOL * max(1.0, np.abs(a).sum()):
        raise ValueError(f"p and q must have the same total mass, got sum(p)={sa!r} and "
                         f"sum(q)={sb!r}")
    if isinstance(cost, TreeMetric):
        return float(_tree_cost(cost.parent, cost.length, a - b))
    if isinstance(cost, GridL1):
        d = a - b
        if not np.any(d):
            return 0.0
        h, w = int(cost.height), int(cost.width)
        if h == 1 or w == 1:
            return float(np.abs(np.cumsum(d)[:-1]).sum())
        return _grid_cost(a, b, h, w, method)
    sa_, sb_ = np.flatnonzero(a), np.flatnonzero(b)
    if sa_.size == 0:
        return 0.0
    sub = c if sa_.size == k and sb_.size == k else c[np.ix_(sa_, sb_)]
    return _transport(a[sa_], b[sb_], sub, method)
