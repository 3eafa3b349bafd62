"""The (scaled) pyramidal transform P of [Ghazi23]_ Sec. 3.1, without dense matrices.

P stacks, for every level i, the level-i partition map P_i (sum of the pixels in each cell)
scaled by the level's cell side (2^-i on a 2^l x 2^l grid). Here a pyramid is a list of 2D
arrays, one per level, of shape ``grid.level_shape(i)``; the unscaled counts P_i s are
computed by repeated 2 x 2 pooling (O(pixels) time and memory) and the scale is applied
separately, so noise can be calibrated on counts.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "DP Heatmaps", Sec. 3.1 -- full entry in docs/references.md
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shuffledp.grid import Grid


def _as_image(grid: Grid, values: np.ndarray) -> np.ndarray:
    a = np.asarray(values)
    if a.shape == (grid.n_pixels,):
        a = a.reshape(grid.height, grid.width)
    if a.shape != (grid.height, grid.width):
        raise ValueError(
            f"values must have shape ({grid.height}, {grid.width}) or ({grid.n_pixels},) "
            f"for grid {grid}, got shape {a.shape}"
        )
    return a


def pool2(a: np.ndarray) -> np.ndarray:
    """Sum 2 x 2 blocks of a 2D array; odd trailing rows/columns form their own (clipped) cells.

    Parameters
    ----------
    a : ndarray, shape (rows, cols)
        The level to pool (integer dtypes stay exact).

    Returns
    -------
    ndarray, shape (ceil(rows / 2), ceil(cols / 2))
        The next coarser level, in the dtype of ``a``.

    Raises
    ------
    ValueError
        If ``a`` is not two-dimensional.
    """
    a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"a must be a 2D array, got shape {a.shape}")
    rows, cols = a.shape
    if rows % 2:
        a = np.concatenate([a, np.zeros((1, cols), dtype=a.dtype)], axis=0)
    if cols % 2:
        a = np.concatenate([a, np.zeros((a.shape[0], 1), dtype=a.dtype)], axis=1)
    r2, c2 = a.shape[0] // 2, a.shape[1] // 2
    return a.reshape(r2, 2, c2, 2).sum(axis=(1, 3))


def level_counts(grid: Grid, values: np.ndarray, start: int = 0) -> list[np.ndarray]:
    """Unscaled level sums P_i s for levels ``start..L`` (list index k is level start + k).

    Works for integer and float inputs; integer inputs stay exact integers.

    Parameters
    ----------
    grid : Grid
        The pixel grid.
    values : ndarray, shape (height, width) or (n_pixels,)
        One value per pixel (row-major when flat).
    start : int
        First level returned, 0 <= start <= ``grid.depth``.

    Returns
    -------
    list of ndarray
        ``grid.depth - start + 1`` arrays, coarsest first; entry k has
        ``grid.level_shape(start + k)``.

    Raises
    ------
    ValueError
        If ``values`` has another shape, or ``start`` is not a level of ``grid``.
    """
    a = _as_image(grid, values)
    grid._check_level(start)
    out = [a]
    for _ in range(grid.depth - start):
        out.append(pool2(out[-1]))
    out.reverse()
    return out


def transform(grid: Grid, values: np.ndarray, start: int = 0) -> list[np.ndarray]:
    """Scaled pyramidal transform: level i of P s is ``cell_side(i) * P_i s`` (Def. 3.1).

    Parameters
    ----------
    grid, values, start
        As :func:`level_counts`.

    Returns
    -------
    list of ndarray of float
        The scaled levels ``start..L``, coarsest first.

    Raises
    ------
    ValueError
        As :func:`level_counts`.
    """
    counts = level_counts(grid, values, start)
    return [grid.cell_side(start + k) * np.asarray(c, dtype=float) for k, c in enumerate(counts)]


def transform_l1(grid: Grid, values: np.ndarray, start: int = 0) -> float:
    """||P s||_1 over levels ``start..L``.

    Parameters
    ----------
    grid, values, start
        As :func:`level_counts`.

    Returns
    -------
    float
        The sum of the absolute values of :func:`transform`.

    Raises
    ------
    ValueError
        As :func:`level_counts`.
    """
    return float(sum(np.abs(level).sum() for level in transform(grid, values, start)))


def flatten(levels: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate a pyramid into one coordinate vector (level-major, row-major).

    Parameters
    ----------
    levels : sequence of ndarray
        The levels, coarsest first (as :func:`level_counts` returns them).

    Returns
    -------
    ndarray, 1D
        All entries, level after level, each level row-major.

    Raises
    ------
    ValueError
        If ``levels`` is empty.
    """
    return np.concatenate([np.ravel(a) for a in levels])


def unflatten(grid: Grid, vector: np.ndarray, start: int = 0) -> list[np.ndarray]:
    """Inverse of :func:`flatten` for levels ``start..L``.

    Parameters
    ----------
    grid : Grid
        The pixel grid.
    vector : ndarray, 1D
        :func:`n_coordinates` entries.
    start : int
        First level held in ``vector``.

    Returns
    -------
    list of ndarray
        The levels ``start..L`` (views into ``vector``), coarsest first.

    Raises
    ------
    ValueError
        If ``vector`` has fewer or more entries than the levels need, or ``start`` is not
        a level of ``grid``.
    """
    grid._check_level(start)
    v = np.asarray(vector)
    out, pos = [], 0
    for i in range(start, grid.depth + 1):
        shape = grid.level_shape(i)
        size = shape[0] * shape[1]
        if pos + size > v.size:
            raise ValueError(f"vector too short for levels {start}..{grid.depth} of grid {grid}")
        out.append(v[pos : pos + size].reshape(shape))
        pos += size
    if pos != v.size:
        raise ValueError(f"vector has {v.size} entries, levels {start}..{grid.depth} need {pos}")
    return out


def n_coordinates(grid: Grid, start: int = 0) -> int:
    """m = sum of the level sizes over levels ``start..L``.

    Parameters
    ----------
    grid : Grid
        The pixel grid.
    start : int
        First level counted.

    Returns
    -------
    int
        The number of coordinates of a pyramid of levels ``start..L``.

    Raises
    ------
    ValueError
        If ``start`` is not a level of ``grid``.
    """
    grid._check_level(start)
    return sum(grid.level_size(i) for i in range(start, grid.depth + 1))
