"""Scale-and-round of a user's level vectors ([Ghazi23]_ App. F "Scaled & round").

A user's level-i vector y_i (the user's mass in each level-i cell) is non-negative and sums
to 1. It is scaled by the integer B and rounded to an integer vector z_i:

``"floor"``
    z_i = floor(B y_i) coordinate-wise, as written in App. F. Entries are >= 0 and
    B - (support - 1) <= sum z_i <= B: up to one unit of mass per occupied cell is lost.
``"largest_remainder"``
    Hamilton's method: floor, then give the B - sum floor(B y_i) missing units to the cells
    with the largest fractional parts (ties to the lower cell index). Every level sums to
    exactly B, and |z_ik - B y_ik| < 1 per cell. This is the default.

Sensitivities (exact; ``tests/test_rounding.py`` checks them exhaustively on small grids and
shows they are attained). Both rules give a non-negative z_i with sum z_i <= B, so

- add/remove one user: ||z_i||_1 <= B, attained (e.g. a user at one pixel): Delta_i = B;
- replace one user (n public, the neighbour notion of the summation protocol behind App. F,
  [BBGN20]_): ||z_i - z'_i||_1 <= ||z_i||_1 + ||z'_i||_1 <= 2B, attained by two
  users at distinct cells: Delta_i = 2B.

The discrete Laplace noise of level i must therefore use a = exp(-eps_i / Delta_i) (the
App. F text writes exp(-eps_i), a slip: see docs/errata.md).

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
.. [BBGN20] B. Balle, J. Bell, A. Gascon, K. Nissim, "Private Summation in the Multi-Message
   Shuffle Model", CCS 2020. arXiv:2002.00817.
"""

from __future__ import annotations

import numpy as np

from shuffledp.accounting.guarantee import Neighbour
from shuffledp.accounting.summation import ROUNDING_RULES, check_rounding, check_scale  # noqa: F401


def sensitivity(B: int, neighbour: str = "replace") -> int:
    """l1-sensitivity Delta_i of one scaled, rounded level vector (same for both rules).

    ``neighbour`` is a :class:`~shuffledp.accounting.guarantee.Neighbour` or its token:
    2B for replace-one (n public), B for zero-out and add/remove.
    """

    return Neighbour.parse(neighbour).level_sensitivity(check_scale(B))


def level_entries(
    users, start: int, B: int, rounding: str = "largest_remainder"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparse z^j = round(B y^j) of every user on levels ``start..L``, vectorised.

    y^j_i is user j's mass in each level-i cell; each user's level vector is scaled by B and
    rounded with ``rounding`` (:func:`scale_round`, one group per user and level).

    Returns
    -------
    user, coordinate, value : ndarray of int64
        One entry per (user, occupied cell) with a non-zero value; ``coordinate`` is the flat
        index over levels start..L (level-major, row-major within a level, as
        :func:`shuffledp.pyramid.flatten`). Per user and level the values sum to B (largest
        remainder) or at most B (floor).
    """
    B = check_scale(B)
    check_rounding(rounding)
    grid = users.grid
    L = grid.depth
    grid._check_level(start)
    uid = users.user_index()
    rows = users.pixels // grid.width
    cols = users.pixels % grid.width
    n_lev = L - start + 1
    k = uid.size
    sizes = np.asarray([grid.level_size(i) for i in range(start, L + 1)], dtype=np.int64)
    offs = np.r_[0, np.cumsum(sizes)[:-1]].astype(np.int64)
    m = int(sizes.sum())
    lev = np.repeat(np.arange(n_lev, dtype=np.int64), k)
    shift = (L - (start + lev)).astype(np.int64)
    ncols = np.asarray([grid.level_shape(i)[1] for i in range(start, L + 1)], dtype=np.int64)
    r_all = np.tile(rows, n_lev) >> shift
    c_all = np.tile(cols, n_lev) >> shift
    coord = offs[lev] + r_all * ncols[lev] + c_all
    key = np.tile(uid, n_lev).astype(np.int64) * m + coord
    ukey, inv = np.unique(key, return_inverse=True)
    mass = np.bincount(inv.ravel(), weights=np.tile(users.weights, n_lev), minlength=ukey.size)
    u_of = ukey // m
    c_of = ukey % m
    level_of = np.searchsorted(offs, c_of, side="right") - 1
    z = scale_round(mass, B, rounding, groups=u_of * n_lev + level_of)
    keep = z != 0
    return u_of[keep], c_of[keep], z[keep]


def scale_round(
    values: np.ndarray,
    B: int,
    rounding: str = "largest_remainder",
    groups: np.ndarray | None = None,
) -> np.ndarray:
    """Scale non-negative masses by B and round to int64 ([Ghazi23]_ App. F).

    Parameters
    ----------
    values : ndarray, 1D, float
        Non-negative masses; each group should sum to 1 (one user's level vector).
    B : int
        Scaling factor B >= 1.
    rounding : {"floor", "largest_remainder"}
    groups : ndarray of int, optional
        Group label of every entry (e.g. user * n_levels + level); entries of one group must
        be contiguous and groups in increasing order. With ``largest_remainder`` every group
        is rounded to sum exactly B. ``None`` means one group.

    Returns
    -------
    ndarray of int64, same shape as ``values``.
    """
    B = check_scale(B)
    check_rounding(rounding)
    v = np.asarray(values, dtype=float)
    if v.ndim != 1:
        raise ValueError(f"values must be 1D, got shape {v.shape}")
    if v.size and not (np.all(np.isfinite(v)) and v.min() >= 0):
        raise ValueError("values must be finite and >= 0")
    x = v * B
    # Snap values within 1e-9 of an integer to it, so that the result does not depend on the
    # order in which floating-point masses were summed (sparse vs dense measurement). Each
    # snapped entry moves by < 1e-9, so with fewer than 1e9 entries sum(floor) <= B still holds.
    xr = np.rint(x)
    x = np.where(np.abs(x - xr) <= 1e-9, xr, x)
    z = np.floor(x)
    if rounding == "floor" or v.size == 0:
        return z.astype(np.int64)
    frac = x - z
    zi = z.astype(np.int64)
    if groups is None:
        g = np.zeros(v.size, dtype=np.int64)
    else:
        g = np.asarray(groups, dtype=np.int64)
        if g.shape != v.shape:
            raise ValueError(f"groups must have shape {v.shape}, got {g.shape}")
        if g.size > 1 and np.any(np.diff(g) < 0):
            raise ValueError("groups must be non-decreasing (contiguous groups in order)")
    # group boundaries
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[starts, g.size])
    gid = np.repeat(np.arange(starts.size), sizes)
    deficit = B - np.add.reduceat(zi, starts)
    # The masses of a group sum to 1 up to float error, so 0 <= deficit <= group size.
    deficit = np.clip(deficit, 0, sizes)
    # Hamilton: within each group, the `deficit` entries with largest fractional part get +1;
    # ties go to the lower position (stable order).
    order = np.lexsort((np.arange(v.size), -frac, gid))
    rank = np.arange(v.size) - np.repeat(starts, sizes)  # rank within group, in sorted order
    bump = rank < np.repeat(deficit, sizes)
    zi[order[bump]] += 1
    return zi
