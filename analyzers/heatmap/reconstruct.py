"""Reconstruct ([Ghazi23]_ Alg. 2) with the O(w L)-variable linear program of Sec. 4.

Given noisy level counts for the measured levels ``start..L``:

1. S_start = every cell of level ``start`` (levels below are not measured, Sec. 4
   "Implementation details"); for i > start, T_i = children(S_{i-1}) and S_i = the
   min(w, |T_i|) cells of T_i with the largest noisy values (Alg. 2, lines 3-7).
2. y_hat = y'|_S, i.e. zero outside S (line 8), with y'_i = cell_side(i) * counts_i.
3. s_hat = argmin_{s >= 0} ||y_hat - P s||_1 (line 9).

The LP in line 9 has one variable per pixel. Because y_hat vanishes outside S and P s >= 0,
mass placed anywhere inside a *left-out* child v in T_i \\ S_i costs
x_v * sum_{j >= i} cell_side(j) on the unselected cells containing it, whatever its position,
and adds x_v to the same selected ancestors. So the LP reduces exactly to one variable per
left-out child plus one per selected leaf (O(w L) variables):

    min  sum_{u in S} t_u + sum_v c_v x_v
    s.t. -t_u <= y_hat_u - side(u) * sum_{v below u} x_v <= t_u,   x, t >= 0,

solved with SciPy's HiGHS. The mass of a left-out cell is spread evenly over its pixels by
default, or put on its centre pixel (any placement inside the cell attains the same LP value).

Which minimiser. The LP is highly degenerate: every left-out child of a level costs the same
per unit of mass and feeds the same selected ancestors, so the optimum fixes only how much
mass goes below each selected cell, not to which left-out child. A simplex solver returns a
vertex, which puts all of it into one arbitrary child. Alg. 2 (and the utility bound of
[Ghazi23]_ Thm 3.1) allows any minimiser, so the choice is ours, and by default
(``tie_break="measured"``) a second LP picks, among the minimisers, the one whose left-out
masses are closest in l1 to the noisy counts y'_v of those children clipped at zero. Those
counts were measured and released anyway (line 8 only zeroes them in the objective), so this
is post-processing and costs no privacy. ``tie_break="solver"`` returns HiGHS's vertex (the
behaviour before this choice was made). ``python bench/reconstruct_tiebreak.py`` measures
both on population-weighted data from several regions and on SNAP-format check-ins.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.sparse

from shuffledp.grid import Grid

DEFAULT_TIE_BREAK = "measured"


@dataclass(frozen=True)
class ReconstructResult:
    """Output of :func:`reconstruct_details`.

    Attributes
    ----------
    estimate : ndarray (height, width)
        s_hat, non-negative.
    selected : list of ndarray
        Flat indices of S_i for each measured level (index k is level start + k).
    n_variables : int
        LP variables (left-out children plus selected leaves).
    lp_objective : float
        Optimal value of the reduced LP (equals ||y_hat - P s_hat||_1 over measured levels,
        up to the solver's tolerance, whichever minimiser ``tie_break`` chose).
    tie_break : str
        "measured" or "solver": how the minimiser was chosen (see the module notes).
    """

    estimate: np.ndarray
    selected: list
    n_variables: int
    lp_objective: float
    tie_break: str = DEFAULT_TIE_BREAK


def _iv(counts: Sequence[np.ndarray], grid: Grid, start: int, w: int) -> list[np.ndarray]:
    if not isinstance(grid, Grid):
        raise TypeError(f"grid must be a shuffledp.Grid, got grid={grid!r}")
    if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1:
        raise ValueError(f"w must be an integer >= 1, got w={w!r}")
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)):
        raise TypeError(f"start must be an integer, got start={start!r}")
    if not (0 <= start <= grid.depth):
        raise ValueError(f"start must be in 0..{grid.depth} for grid {grid}, got start={start!r}")
    expected = grid.depth - start + 1
    if len(counts) != expected:
        raise ValueError(
            f"counts must hold {expected} levels ({start}..{grid.depth}) for grid {grid}, "
            f"got {len(counts)}"
        )
    out = []
    for k, c in enumerate(counts):
        a = np.asarray(c, dtype=float)
        shape = grid.level_shape(start + k)
        if a.shape != shape:
            raise ValueError(
                f"counts[{k}] (level {start + k}) must have shape {shape}, got {a.shape}"
            )
        if not np.isfinite(a).all():
            raise ValueError(f"counts[{k}] (level {start + k}) contains NaN or infinite values")
        out.append(a)
    return out


def _children(parents: np.ndarray, shape_parent: tuple[int, int], shape_child: tuple[int, int]):
    """Flat indices of the existing children of ``parents`` (flat indices at the parent level)."""
    pr, pc = np.divmod(parents, shape_parent[1])
    rows = (2 * pr)[:, None] + np.array([0, 0, 1, 1])[None, :]
    cols = (2 * pc)[:, None] + np.array([0, 1, 0, 1])[None, :]
    ok = (rows < shape_child[0]) & (cols < shape_child[1])
    return (rows * shape_child[1] + cols)[ok]


def _solve(c, a_ub, b_ub, **options):
    res = scipy.optimize.linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs",
                                 options=options)
    if res.status != 0:
        raise RuntimeError(f"Reconstruct LP failed: HiGHS status {res.status}: {res.message}")
    return res


TIE_BREAKS = ("measured", "solver")


def _second_stage(lp: tuple, opt: float, n_var: int, n_lo: int,
                  lo_counts: np.ndarray) -> np.ndarray:
    """Among the minimisers of line 9, the one closest in l1 to the left-out measurements.

    Solves  min sum_v u_v  s.t. the first-stage constraints, c^T z <= opt + tol and
    u_v >= |x_v - max(y'_v, 0)| for every left-out child v (y'_v its noisy count, which the
    analyzer already holds: post-processing). tol = 1e-9 max(1, opt) and HiGHS's primal
    feasibility tolerance is tightened to 1e-10, so the returned point is a minimiser to
    about 1e-9 relative.
    """
    c, a_ub, b_ub = lp
    n_all = c.size
    tol = 1e-9 * max(1.0, abs(opt))
    target = np.maximum(lo_counts, 0.0)
    pick = scipy.sparse.csr_matrix(
        (np.ones(n_lo), (np.arange(n_lo), np.arange(n_lo))), shape=(n_lo, n_all)
    )
    eye = scipy.sparse.identity(n_lo, format="csr")
    a2 = scipy.sparse.vstack(
        [
            scipy.sparse.hstack([a_ub, scipy.sparse.csr_matrix((a_ub.shape[0], n_lo))]),
            scipy.sparse.hstack([scipy.sparse.csr_matrix(c[None, :]),
                                 scipy.sparse.csr_matrix((1, n_lo))]),
            scipy.sparse.hstack([pick, -eye]),
            scipy.sparse.hstack([-pick, -eye]),
        ],
        format="csr",
    )
    b2 = np.concatenate([b_ub, [opt + tol], target, -target])
    c2 = np.concatenate([np.zeros(n_all), np.ones(n_lo)])
    res = _solve(c2, a2, b2, primal_feasibility_tolerance=1e-10)
    return np.maximum(res.x[:n_var], 0.0)


def reconstruct_details(
    counts: Sequence[np.ndarray], grid: Grid, start: int, w: int, *, placement: str = "uniform",
    tie_break: str = DEFAULT_TIE_BREAK,
) -> ReconstructResult:
    """Alg. 2 of [Ghazi23]_ with the details needed by tests and benchmarks; see module doc.

    ``placement`` ("uniform" or "centre") says where the mass of a left-out cell goes: spread
    evenly over its pixels or on its centre pixel. Both attain the same LP optimum.
    ``tie_break`` ("measured", default, or "solver") says which minimiser of the LP is
    returned (module notes, "Which minimiser").

    Parameters
    ----------
    counts : sequence of numpy.ndarray
        ``counts[k]``: the noisy, unscaled counts of level start + k, shape
        ``grid.level_shape(start + k)``, for every level ``start..grid.depth``.
    grid : Grid
        The pixel grid.
    start : int
        First measured level, in 0..grid.depth.
    w : int
        Children kept per level, >= 1.
    placement : {"uniform", "centre"}
        Where the mass of a left-out cell goes inside it.
    tie_break : {"measured", "solver"}
        Which minimiser of the LP is returned.

    Returns
    -------
    ReconstructResult
        ``estimate`` (height, width), the ``selected`` cells per level, the LP's size
        ``n_variables`` and optimum ``lp_objective``, and the ``tie_break`` used.

    Raises
    ------
    TypeError
        If ``grid`` is not a Grid or ``start`` not an integer.
    ValueError
        On an unknown ``placement`` or ``tie_break``, ``w`` < 1, ``start`` outside the grid's
        levels, a wrong number or shape of ``counts``, or NaN/infinite counts.
    RuntimeError
        If the HiGHS LP solver fails.

    References
    ----------
    [Ghazi23]_ Alg. 2 and Sec. 4 (the reduced LP).
    """
    if placement not in ("uniform", "centre"):
        raise ValueError(f"placement must be 'uniform' or 'centre', got placement={placement!r}")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got tie_break={tie_break!r}")
    counts = _iv(counts, grid, start, w)
    n_meas = grid.depth - start + 1
    sides = np.array([grid.cell_side(start + k) for k in range(n_meas)])
    shapes = [grid.level_shape(start + k) for k in range(n_meas)]
    selected, left_out = _select(counts, shapes, w)
    lp = _reduced_lp(counts, sides, shapes, selected, left_out)
    res = _solve(lp.c, lp.a_ub, lp.b_ub)
    x = np.maximum(res.x[:lp.n_var], 0.0)
    if tie_break == "measured" and lp.n_lo:
        lo_counts = np.concatenate([counts[k].ravel()[lo] for k, lo in enumerate(left_out)])
        x = _second_stage((lp.c, lp.a_ub, lp.b_ub), float(res.fun), lp.n_var, lp.n_lo,
                          lo_counts)
    est = _place(x, lp, grid, start, shapes, placement)
    return ReconstructResult(
        estimate=est.reshape(grid.height, grid.width),
        selected=selected,
        n_variables=int(lp.n_var),
        lp_objective=float(res.fun),
        tie_break=tie_break,
    )


def _select(counts: list[np.ndarray], shapes: list[tuple[int, int]],
            w: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Alg. 2 lines 3-7 of [Ghazi23]_: the selected cells S_k and the left-out T_k \\ S_k.

    S_0 is every cell of the first measured level; T_k = children(S_{k-1}) and S_k its
    min(w, |T_k|) cells with the largest noisy counts, ties towards the smaller flat index.
    """
    selected: list[np.ndarray] = [np.arange(shapes[0][0] * shapes[0][1])]
    left_out: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    for k in range(1, len(shapes)):
        t = _children(selected[-1], shapes[k - 1], shapes[k])
        vals = counts[k].ravel()[t]
        if t.size > w:
            # top-w by value; ties broken towards the smaller flat index (deterministic)
            order = np.lexsort((t, -vals))
            keep = np.zeros(t.size, dtype=bool)
            keep[order[:w]] = True
        else:
            keep = np.ones(t.size, dtype=bool)
        selected.append(np.sort(t[keep]))
        left_out.append(t[~keep])
    return selected, left_out


@dataclass(frozen=True)
class _ReducedLP:
    """min c^T (x, t) s.t. a_ub (x, t) <= b_ub; x: the left-out children (the first n_lo
    variables, level-major) then the selected leaves, each with its level and flat cell."""

    c: np.ndarray
    a_ub: scipy.sparse.csr_matrix
    b_ub: np.ndarray
    var_level: np.ndarray
    var_cell: np.ndarray
    n_lo: int
    n_var: int


def _reduced_lp(counts: list[np.ndarray], sides: np.ndarray, shapes: list[tuple[int, int]],
                selected: list[np.ndarray], left_out: list[np.ndarray]) -> _ReducedLP:
    """Alg. 2 line 9 with one variable per left-out child and per selected leaf (module doc).

    Rows are the selected cells, level-major, with y_hat_u = side(u) * count_u; a left-out
    child costs sum_{j >= k} side_j per unit of mass and counts towards its selected
    ancestors at the levels above it, a selected leaf towards itself and its ancestors.
    """
    n_meas = len(shapes)
    # Rows: the selected cells, level-major. Row id lookup per level.
    row_offset = np.cumsum([0] + [s.size for s in selected])
    n_rows = int(row_offset[-1])
    row_lookup = []
    for k, s in enumerate(selected):
        lut = np.full(shapes[k][0] * shapes[k][1], -1, dtype=np.int64)
        lut[s] = row_offset[k] + np.arange(s.size)
        row_lookup.append(lut)
    y_hat = np.concatenate([counts[k].ravel()[selected[k]] * sides[k] for k in range(n_meas)])
    row_side = np.concatenate([np.full(s.size, sides[k]) for k, s in enumerate(selected)])

    # Variables: left-out children at every level, then selected leaves.
    var_level = np.concatenate(
        [np.full(lo.size, k) for k, lo in enumerate(left_out)]
        + [np.full(selected[-1].size, n_meas - 1)]
    ).astype(np.int64)
    var_cell = np.concatenate(left_out + [selected[-1]]).astype(np.int64)
    n_lo = sum(lo.size for lo in left_out)
    n_var = var_cell.size
    tail = np.cumsum(sides[::-1])[::-1]  # tail[k] = sum_{j >= k} side_j
    cost_x = np.zeros(n_var)
    cost_x[:n_lo] = tail[var_level[:n_lo]]

    # Membership: a left-out child counts towards its selected ancestors at the levels above
    # it; a selected leaf counts towards itself and its ancestors.
    rr, cc = np.divmod(var_cell, np.array([shapes[k][1] for k in var_level]))
    own = np.zeros(n_var, dtype=np.int64)
    own[n_lo:] = 1
    row_parts: list[np.ndarray] = []
    col_parts: list[np.ndarray] = []
    for k in range(n_meas):
        has = var_level + own > k
        shift = var_level[has] - k
        anc = (rr[has] >> shift) * shapes[k][1] + (cc[has] >> shift)
        rows = row_lookup[k][anc]
        if (rows < 0).any():  # pragma: no cover - structural invariant
            raise AssertionError("a variable's ancestor is not selected")
        row_parts.append(rows)
        col_parts.append(np.flatnonzero(has))
    a_rows = np.concatenate(row_parts)
    a_cols = np.concatenate(col_parts)
    pa = scipy.sparse.csr_matrix(
        (row_side[a_rows], (a_rows, a_cols)), shape=(n_rows, n_var)
    )  # (P s)|_S as a function of x
    eye = scipy.sparse.identity(n_rows, format="csr")
    a_ub = scipy.sparse.vstack(
        [scipy.sparse.hstack([-pa, -eye]), scipy.sparse.hstack([pa, -eye])], format="csr"
    )
    b_ub = np.concatenate([-y_hat, y_hat])
    c = np.concatenate([cost_x, np.ones(n_rows)])
    return _ReducedLP(c, a_ub, b_ub, var_level, var_cell, int(n_lo), int(n_var))


def _place(x: np.ndarray, lp: _ReducedLP, grid: Grid, start: int,
           shapes: list[tuple[int, int]], placement: str) -> np.ndarray:
    """The flat pixel estimate: each selected leaf's mass on its pixel, each left-out cell's
    spread evenly over its pixels (``"uniform"``) or on its centre pixel (``"centre"``)."""
    n_lo, n_var, var_level, var_cell = lp.n_lo, lp.n_var, lp.var_level, lp.var_cell
    est = np.zeros(grid.n_pixels)
    leaf_vars = slice(n_lo, n_var)
    np.add.at(est, var_cell[leaf_vars], x[leaf_vars])
    for k in range(1, len(shapes)):
        m = var_level[:n_lo] == k
        if not m.any():
            continue
        cells = var_cell[:n_lo][m]
        if placement == "centre":
            cr, ccol = grid.cell_centers(start + k)
            pix = cr.ravel()[cells] * grid.width + ccol.ravel()[cells]
            np.add.at(est, pix, x[:n_lo][m])
        else:  # uniform over the cell's pixels
            level = start + k
            dens = np.zeros(shapes[k][0] * shapes[k][1])
            np.add.at(dens, cells, x[:n_lo][m])
            dens = dens.reshape(shapes[k]) / grid.cell_pixel_counts(level)
            side = 1 << (grid.depth - level)
            up = np.repeat(np.repeat(dens, side, axis=0), side, axis=1)
            est += up[: grid.height, : grid.width].ravel()
    return est


def reconstruct(
    counts: Sequence[np.ndarray], grid: Grid, start: int, w: int, *, placement: str = "uniform",
    tie_break: str = DEFAULT_TIE_BREAK,
) -> np.ndarray:
    """Reconstruct s_hat from noisy level counts ([Ghazi23]_ Alg. 2; Sec. 4 LP with O(wL) vars).

    Parameters
    ----------
    counts : sequence of ndarray
        ``counts[k]`` holds the noisy, *unscaled* counts P_i s + nu_i of level i = start + k,
        shape ``grid.level_shape(i)``, for every level ``start..grid.depth``.
    grid : Grid
    start : int
        First measured level (levels below are not measured).
    w : int
        Number of children kept per level.
    placement : {"uniform", "centre"}
        Where the mass of a left-out cell goes inside it.
    tie_break : {"measured", "solver"}
        Which minimiser of the LP: closest to the left-out cells' noisy counts (default), or
        the solver's vertex.

    Returns
    -------
    ndarray, shape (height, width)
        The non-negative minimiser s_hat of ||y_hat - P s||_1 (not normalised).

    Raises
    ------
    TypeError
        If ``grid`` is not a Grid or ``start`` not an integer.
    ValueError
        On an unknown ``placement`` or ``tie_break``, ``w`` < 1, ``start`` outside the grid's
        levels, a wrong number or shape of ``counts``, or NaN/infinite counts.
    RuntimeError
        If the HiGHS LP solver fails.

    References
    ----------
    [Ghazi23]_ Alg. 2 and Sec. 4 (the reduced LP with O(wL) variables).
    """
    return reconstruct_details(counts, grid, start, w, placement=placement,
                               tie_break=tie_break).estimate


def _effective_start(grid: Grid, w: int) -> int:
    """floor(log2 sqrt(w)) capped at the grid's leaf level (:meth:`Grid.measured_levels`)."""
    return grid.measured_levels(w)[0]


