"""The Delta1 x Delta2 grid and its pyramid of levels ([Ghazi23]_ Sec. 3.1, Def. 3.1).

A grid of ``width`` columns and ``height`` rows is embedded in the smallest 2^L x 2^L square
of pixels that holds it (L = ceil(log2 max(width, height))). Level i has cells of
2^(L-i) x 2^(L-i) pixels, clipped to the grid; cells that would lie wholly outside the grid do
not exist. Level 0 is the single root cell, level L the pixels. Every level-i cell is the union
of its (up to four) children at level i + 1, which is the tree Reconstruct walks.

Geometry: a point (x, y) in [0, 1)^2 falls in column floor(x * width) and row
floor(y * height). Distances (EMD ground metric, pyramid scales) are measured with square
pixels and the grid's longer side of length 1, so pixel (r, c) and (r', c') are
(|r - r'| + |c - c'|) / max(width, height) apart. For a 2^l x 2^l grid this is exactly the
unit-square metric of [Ghazi23]_ and the level-i scale is 2^-i.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "DP Heatmaps", Sec. 4 -- full entry in docs/references.md
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from shuffledp import _validation as v


def start_level(w: int) -> int:
    """First measured level q = floor(log2 sqrt(w)) ([Ghazi23]_ Sec. 4, "Implementation
    details"), in exact integer arithmetic: the largest q with 4^q <= w.

    Parameters
    ----------
    w : int
        The number of points each user contributes (w >= 1).

    Returns
    -------
    int
        q >= 0.

    Raises
    ------
    ValueError
        If ``w`` is not an integer >= 1 (a bool is refused).
    """
    if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1:
        raise ValueError(f"w must be an integer >= 1, got w={w!r}")
    q = 0
    while 4 ** (q + 1) <= int(w):
        q += 1
    return q


@dataclass(frozen=True)
class Grid:
    """A ``width`` x ``height`` pixel grid with its pyramid of levels ``0..depth``.

    Attributes
    ----------
    width, height : int
        Number of columns and rows (any positive integers, e.g. 320 x 240).
    """

    width: int
    height: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "width", v.count("width", self.width))
        object.__setattr__(self, "height", v.count("height", self.height))

    @classmethod
    def parse(cls, spec: str | int) -> Grid:
        """Parse ``"N"`` (an N x N grid) or ``"WIDTHxHEIGHT"``."""
        if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
            return cls(int(spec), int(spec))
        text = str(spec).strip().lower()
        m = re.fullmatch(r"(\d+)(?:x(\d+))?", text)
        if m is None:
            raise ValueError(f"grid must be N or WIDTHxHEIGHT (e.g. 256 or 320x240), got {spec!r}")
        w = int(m.group(1))
        h = int(m.group(2)) if m.group(2) is not None else w
        if w < 1 or h < 1:
            raise ValueError(f"grid must be at least 1x1, got {spec!r}")
        return cls(w, h)

    def __str__(self) -> str:
        return f"{self.width}x{self.height}"

    @property
    def n_pixels(self) -> int:
        return self.width * self.height

    @property
    def depth(self) -> int:
        """L: the leaf level; 2^L is the side of the enclosing square."""
        return int(max(self.width, self.height) - 1).bit_length()

    @property
    def n_levels(self) -> int:
        return self.depth + 1

    def measured_levels(self, w: int) -> tuple[int, int]:
        """(start, top) of the levels a mechanism with top-w measures: start =
        min(floor(log2 sqrt(w)), L) (tiny grids measure only their leaves), top = L.

        The one place the toolkit computes them (central, shuffle, accounting, Reconstruct).
        """
        return min(start_level(w), self.depth), self.depth

    def level_shape(self, level: int) -> tuple[int, int]:
        """(rows, columns) of level ``level``: ceil(height / 2^(L-i)), ceil(width / 2^(L-i))."""
        self._check_level(level)
        side = 1 << (self.depth - level)
        return (-(-self.height // side), -(-self.width // side))

    def level_size(self, level: int) -> int:
        r, c = self.level_shape(level)
        return r * c

    def cell_side(self, level: int) -> float:
        """Side of a level-``level`` cell (unclipped), in units of the grid's longer side.

        This is the scale of the level in the pyramidal transform P (2^-i on a 2^l x 2^l grid).
        """
        self._check_level(level)
        return float(1 << (self.depth - level)) / max(self.width, self.height)

    def cell_pixel_counts(self, level: int) -> np.ndarray:
        """Number of grid pixels inside each level-``level`` cell (clipped), shape level_shape."""
        side = 1 << (self.depth - self._check_level(level))
        rows, cols = self.level_shape(level)
        rh = np.minimum(side, self.height - side * np.arange(rows))
        cw = np.minimum(side, self.width - side * np.arange(cols))
        return np.outer(rh, cw)

    def cell_centers(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """Leaf row and column of the pixel at (or just before) the centre of each clipped cell.

        Returns two int arrays of shape ``level_shape(level)``.
        """
        side = 1 << (self.depth - self._check_level(level))
        rows, cols = self.level_shape(level)
        r0 = side * np.arange(rows)
        c0 = side * np.arange(cols)
        rh = np.minimum(side, self.height - r0)
        cw = np.minimum(side, self.width - c0)
        rc = r0 + (rh - 1) // 2
        cc = c0 + (cw - 1) // 2
        shape = (rows, cols)
        return np.broadcast_to(rc[:, None], shape), np.broadcast_to(cc[None, :], shape)

    def points_to_pixels(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Flat pixel index ``row * width + col`` of points in [0, 1)^2 (x -> column, y -> row).

        Raises ValueError naming the first offending point if any coordinate is NaN or outside
        [0, 1).
        """
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        for name, coord in (("x", x), ("y", y)):
            bad = ~((coord >= 0.0) & (coord < 1.0))
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                value = float(coord.flat[k])
                raise ValueError(
                    f"{name} must be in [0, 1) (and not NaN); point {k} has {name}={value!r}"
                )
        col = np.minimum((x * self.width).astype(np.int64), self.width - 1)
        row = np.minimum((y * self.height).astype(np.int64), self.height - 1)
        return row * self.width + col

    def _check_level(self, level: int) -> int:
        if not (0 <= int(level) <= self.depth):
            raise ValueError(f"level must be in 0..{self.depth} for grid {self}, got {level!r}")
        return int(level)
