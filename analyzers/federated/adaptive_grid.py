"""The Adaptive Grid of [Qardaji13]_, the layout and the post-processing of its two queries.

[Bagdasaryan22]_ Table 1 runs it as a "partially interactive" baseline under distributed DP
(Sec. 6.2): a first query counts the users on a uniform m1 x m1 grid (m1 = 10) with budget
alpha eps; each first-level cell i is then divided into an n_i x n_i sub-grid,

    n_i = ceil( sqrt( N'_i (1 - alpha) eps / c2 ) ),                   ([Qardaji13]_, AG)

N'_i the first query's noisy count of the cell (n_i = 1 when N'_i <= 0), and a second query
counts the users on all sub-cells with budget (1 - alpha) eps. Both queries are one-hot
histograms (sensitivity 1 per query, [Bagdasaryan22]_ Alg. 1); the rounds compose to eps.

The paper follows [Qardaji13]_'s guidelines with alpha = 0.5 and c2 = 10 (Sec. 6.2);
[Qardaji13]_ itself recommends c = 10 for its uniform grid and c2 = c / 2 = 5 here, and a first
grid of m1 = max(10, ceil(sqrt(N eps / c) / 4)). The defaults follow [Bagdasaryan22]_ (alpha
0.5, c2 10, m1 10); the others are arguments.

Constrained inference ([Qardaji13]_ AG, [Hay10]_): each first-level count v and the sum
S of its n^2 sub-cells are two estimates of the same total; the inverse-variance average
v' = (v / var1 + S / (n^2 var2)) / (1 / var1 + 1 / (n^2 var2)) replaces it, and each sub-cell
gets (v' - S) / n^2 added (with Laplace variances proportional to 1/eps^2 this is their
(alpha^2 n^2 v + (1 - alpha)^2 S) / (alpha^2 n^2 + (1 - alpha)^2)). Post-processing.

Cells of an m x m grid on an s x s image have edges ceil(i s / m), so that pixel x is in
cell floor(x m / s) exactly (integer arithmetic; sizes differ by at most one pixel).

References
----------
.. [Qardaji13] Qardaji, Yang and Li (2013), "Differentially private grids for geospatial
   data", the Adaptive Grids (AG) method -- full entry in docs/references.md
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards sparse federated analytics", Sec. 6.2,
   Table 1 -- full entry in docs/references.md
.. [Hay10] Hay et al. (2010), "Boosting accuracy through consistency" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Guarantee


def subgrid_sizes(noisy_counts: Any, epsilon: float, *, alpha: float = 0.5,
                  c2: float = 10.0, max_size: int | None = None) -> np.ndarray:
    """n_i = ceil(sqrt(N'_i (1 - alpha) eps / c2)), at least 1 (and at most ``max_size``).

    Parameters
    ----------
    noisy_counts : array_like of float
        N'_i, the first query's noisy counts (any sign).
    epsilon : float
        The total budget eps (> 0) of both queries.
    alpha : float in (0, 1), default 0.5
        The first query's share of the budget.
    c2 : float, default 10
        The constant of [Qardaji13]_'s rule (the paper's 10; [Qardaji13]_'s c / 2 = 5).
    max_size : int, optional
        Cap on n_i (a sub-cell is at least one pixel).

    Returns
    -------
    numpy.ndarray of int64
        One n_i per first-level cell.

    Raises
    ------
    ValueError
        If ``epsilon`` or ``c2`` is not positive, ``alpha`` is outside (0, 1), a count is not
        finite, or ``max_size`` < 1.
    TypeError
        If ``max_size`` is not an integer.

    References
    ----------
    [Qardaji13]_ (AG); [Bagdasaryan22]_ Sec. 6.2.
    """
    n = np.asarray(noisy_counts, dtype=float)
    if not np.all(np.isfinite(n)):
        raise ValueError("noisy_counts must be finite")
    eps = v.positive("epsilon", epsilon)
    a = v.interval("alpha", alpha, 0.0, 1.0)
    c = v.positive("c2", c2)
    size = np.ceil(np.sqrt(np.maximum(n, 0.0) * (1.0 - a) * eps / c)).astype(np.int64)
    size = np.maximum(size, 1)
    if max_size is not None:
        size = np.minimum(size, v.count("max_size", max_size))
    return size


def _cell(x: np.ndarray, m: Any, s: Any) -> np.ndarray:
    """floor(x m / s): the cell of pixel x on an m-cell split of s pixels (edges ceil(i s/m))."""
    return (x * m) // s


def _edge(i: Any, m: Any, s: Any) -> Any:
    """ceil(i s / m)."""
    return -((-i * s) // m)


@dataclass(frozen=True)
class AdaptiveGridLayout:
    """The two grids of an Adaptive Grid run on a side x side image.

    Attributes
    ----------
    side : int
        Pixels per axis (>= 1).
    first : int
        m1: the first grid is m1 x m1 (1 <= m1 <= side).
    sizes : tuple of int
        n_i per first-level cell in row-major order (m1^2 entries, each 1 <= n_i <= the
        cell's smaller extent), or empty before the second query is planned.

    Raises
    ------
    ValueError
        If a size is out of range or ``sizes`` has the wrong length.
    TypeError
        If a size is not an integer.

    References
    ----------
    [Qardaji13]_ (AG).
    """

    side: int
    first: int
    sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        s = v.count("side", self.side)
        m = v.bounded_count("first", self.first, 1, s)
        sizes = tuple(int(x) for x in self.sizes)
        if sizes:
            if len(sizes) != m * m:
                raise ValueError(f"sizes must hold first^2 = {m * m} entries, got {len(sizes)}")
            ext = self.extents()
            bad = [i for i, n in enumerate(sizes) if not 1 <= n <= ext[i]]
            if bad:
                raise ValueError(f"sizes[{bad[0]}]={sizes[bad[0]]} is outside 1..{ext[bad[0]]} "
                                 "(the cell's smaller extent)")
        object.__setattr__(self, "sizes", sizes)

    def extents(self) -> np.ndarray:
        """The smaller pixel extent of each first-level cell (row-major), int64.

        Returns
        -------
        numpy.ndarray
            m1^2 extents.
        """
        i = np.arange(self.first)
        w = _edge(i + 1, self.first, self.side) - _edge(i, self.first, self.side)
        return np.minimum(w[:, None], w[None, :]).ravel()

    def with_sizes(self, sizes: Any) -> AdaptiveGridLayout:
        """This layout with the second grid's ``sizes`` capped at each cell's extent.

        Parameters
        ----------
        sizes : array_like of int
            n_i per first-level cell (>= 1).

        Returns
        -------
        AdaptiveGridLayout
            The planned layout.

        Raises
        ------
        ValueError
            If ``sizes`` has the wrong length or an entry < 1.
        """
        n = np.minimum(np.asarray(sizes, dtype=np.int64), self.extents())
        return AdaptiveGridLayout(self.side, self.first, tuple(int(x) for x in n))

    @property
    def first_length(self) -> int:
        """m1^2, the first query's vector length."""
        return self.first * self.first

    @property
    def second_length(self) -> int:
        """sum_i n_i^2, the second query's vector length (0 before it is planned)."""
        return int(sum(n * n for n in self.sizes))

    def first_index(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Each pixel's first-level cell (row-major index in 0..m1^2 - 1).

        Parameters
        ----------
        rows, cols : numpy.ndarray of int
            Pixels in 0..side - 1.

        Returns
        -------
        numpy.ndarray of int64
            The cells.
        """
        r, c = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        return _cell(r, self.first, self.side) * self.first + _cell(c, self.first, self.side)

    def second_index(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Each pixel's sub-cell: offset of its first-level cell i (sum of n_j^2 over j < i)
        plus its row-major position in cell i's n_i x n_i sub-grid.

        Parameters
        ----------
        rows, cols : numpy.ndarray of int
            Pixels in 0..side - 1.

        Returns
        -------
        numpy.ndarray of int64
            Indices in 0..second_length - 1.

        Raises
        ------
        ValueError
            If the second grid is not planned (``sizes`` empty).
        """
        if not self.sizes:
            raise ValueError("the second grid is not planned: call with_sizes first")
        r, c = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        m, s = self.first, self.side
        ri, ci = _cell(r, m, s), _cell(c, m, s)
        r0, c0 = _edge(ri, m, s), _edge(ci, m, s)
        h, w = _edge(ri + 1, m, s) - r0, _edge(ci + 1, m, s) - c0
        n = np.asarray(self.sizes, dtype=np.int64)
        k = ri * m + ci
        off = np.concatenate([[0], np.cumsum(n * n)])[:-1]
        nk = n[k]
        return off[k] + _cell(r - r0, nk, h) * nk + _cell(c - c0, nk, w)

    def density(self, second_counts: Any) -> np.ndarray:
        """The pixel density of sub-cell counts: each clipped count spread evenly over the
        sub-cell's pixels, normalised (uniform when no count is positive).

        Parameters
        ----------
        second_counts : array_like of float, shape (second_length,)
            Counts per sub-cell.

        Returns
        -------
        numpy.ndarray, shape (side, side)
            The normalised density.

        Raises
        ------
        ValueError
            If the length is not ``second_length`` or the second grid is not planned.
        """
        x = np.asarray(second_counts, dtype=float)
        if x.shape != (self.second_length,):
            raise ValueError(f"second_counts must have {self.second_length} entries, got "
                             f"shape {x.shape}")
        rr, cc = np.indices((self.side, self.side))
        owner = self.second_index(rr.ravel(), cc.ravel())
        pix = np.bincount(owner, minlength=x.size).astype(float)
        mass = np.maximum(x, 0.0)
        d = (mass / np.maximum(pix, 1.0))[owner].reshape(self.side, self.side)
        return d / d.sum() if d.sum() > 0 else np.full(d.shape, 1.0 / d.size)


def constrained_inference(first_counts: Any, second_counts: Any,
                          layout: AdaptiveGridLayout, var_first: float,
                          var_second: float) -> np.ndarray:
    """The sub-cell counts made consistent with the first grid by inverse-variance weighting.

    Parameters
    ----------
    first_counts : array_like of float, shape (m1^2,)
        The first query's noisy counts v_i.
    second_counts : array_like of float, shape (second_length,)
        The second query's noisy counts u_ij.
    layout : AdaptiveGridLayout
        The planned layout.
    var_first, var_second : float
        Per-entry noise variance of the two queries (> 0).

    Returns
    -------
    numpy.ndarray of float, shape (second_length,)
        u_ij + (v'_i - S_i) / n_i^2 with S_i = sum_j u_ij and
        v'_i = (v_i / var1 + S_i / (n_i^2 var2)) / (1 / var1 + 1 / (n_i^2 var2)).

    Raises
    ------
    ValueError
        If a shape does not match the layout or a variance is not positive.

    References
    ----------
    [Qardaji13]_ (AG, constrained inference); [Hay10]_.
    """
    v1 = np.asarray(first_counts, dtype=float)
    u = np.asarray(second_counts, dtype=float)
    if v1.shape != (layout.first_length,) or u.shape != (layout.second_length,):
        raise ValueError(f"first_counts and second_counts must have {layout.first_length} and "
                         f"{layout.second_length} entries, got {v1.shape} and {u.shape}")
    a, b = v.positive("var_first", var_first), v.positive("var_second", var_second)
    n2 = np.asarray(layout.sizes, dtype=np.int64) ** 2
    owner = np.repeat(np.arange(n2.size), n2)
    s = np.bincount(owner, weights=u, minlength=n2.size)
    vs = n2 * b
    fused = (v1 / a + s / vs) / (1.0 / a + 1.0 / vs)
    return u + ((fused - s) / n2)[owner]


def first_grid_size(users: int, epsilon: float, c: float = 10.0, side: int | None = None
                    ) -> int:
    """[Qardaji13]_'s first grid: m1 = max(10, ceil(sqrt(N eps / c) / 4)) (capped at ``side``).

    [Bagdasaryan22]_ fixes m1 = 10; this is the original rule, for comparison.

    Parameters
    ----------
    users : int
        N (a public number of users).
    epsilon : float
        Total budget (> 0).
    c : float, default 10
        [Qardaji13]_'s constant.
    side : int, optional
        The image side (cap).

    Returns
    -------
    int
        m1.

    Raises
    ------
    ValueError
        If an argument is out of range.
    TypeError
        If ``users`` or ``side`` is not an integer.

    References
    ----------
    [Qardaji13]_ (AG).
    """
    n = v.count("users", users)
    m = max(10, math.ceil(math.sqrt(n * v.positive("epsilon", epsilon)
                                    / v.positive("c", c)) / 4))
    return m if side is None else min(m, v.count("side", side))


@dataclass(frozen=True)
class AdaptiveGridRelease:
    """An Adaptive Grid release under distributed DP.

    Attributes
    ----------
    estimate : numpy.ndarray, shape (side, side)
        The normalised density (after constrained inference).
    layout : AdaptiveGridLayout
        The two grids (the second planned from the first query's noisy counts).
    first_counts : numpy.ndarray
        The first query's noisy counts (m1^2).
    second_counts : numpy.ndarray
        The second query's counts after constrained inference (sum of n_i^2).
    communication : int
        m1^2 + sum_i n_i^2: the sum of the two vector sizes ([Bagdasaryan22]_ Table 1's
        measure).
    guarantee : Guarantee
        The two queries composed (alpha eps + (1 - alpha) eps).
    """

    estimate: np.ndarray
    layout: AdaptiveGridLayout
    first_counts: np.ndarray
    second_counts: np.ndarray
    communication: int
    guarantee: Guarantee


__all__ = ["AdaptiveGridLayout", "AdaptiveGridRelease", "constrained_inference",
           "first_grid_size", "subgrid_sizes"]
