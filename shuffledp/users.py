"""Users' inputs: one sparse distribution over leaf pixels per user ([Ghazi23]_ Sec. 2.3).

Stored in compressed-sparse-row form: user j owns entries ``indptr[j]:indptr[j+1]`` of
``pixels`` (flat index row * width + col) and ``weights`` (non-negative, summing to 1 per user).
Duplicate pixels of a user are merged.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "DP Heatmaps", Alg. 1 -- full entry in docs/references.md
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shuffledp.grid import Grid


def _py(v: object) -> object:
    """A numpy scalar as the plain Python value (for readable error messages)."""
    return v.item() if isinstance(v, np.generic) else v


@dataclass(frozen=True, eq=False)
class UserDistributions:
    """n users' distributions over the pixels of ``grid``.

    Build with :meth:`from_points` or :meth:`from_pixels`; both validate and normalise.

    Attributes
    ----------
    grid : Grid
        The pixel grid.
    indptr : ndarray of int64, shape (n + 1,)
        User ``j``'s entries are ``pixels[indptr[j]:indptr[j + 1]]`` (CSR layout).
    pixels : ndarray of int64
        Flat (row-major) pixel index of each entry.
    weights : ndarray of float64
        Probability of each entry; each user's weights sum to 1.
    user_ids : tuple
        The users' labels in order (empty when the users are unlabelled).
    """

    grid: Grid
    indptr: np.ndarray
    pixels: np.ndarray
    weights: np.ndarray
    user_ids: tuple = ()

    @property
    def n_users(self) -> int:
        return int(self.indptr.size - 1)

    def __len__(self) -> int:
        return self.n_users

    def user(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(pixels, weights) of user ``j``."""
        a, b = int(self.indptr[j]), int(self.indptr[j + 1])
        return self.pixels[a:b], self.weights[a:b]

    def aggregate(self) -> np.ndarray:
        """s = sum_j p_j as a (height, width) float64 array (Alg. 1, line 3)."""
        s = np.bincount(self.pixels, weights=self.weights, minlength=self.grid.n_pixels)
        return s.reshape(self.grid.height, self.grid.width)

    def user_index(self) -> np.ndarray:
        """For every stored entry, the index of the user it belongs to."""
        return np.repeat(np.arange(self.n_users), np.diff(self.indptr))

    def subset(self, users: np.ndarray) -> UserDistributions:
        """The distributions of the users at positions ``users`` (in that order)."""
        users = np.asarray(users, dtype=np.int64)
        starts, stops = self.indptr[users], self.indptr[users + 1]
        lengths = stops - starts
        idx = np.repeat(starts - np.cumsum(np.r_[0, lengths[:-1]]), lengths) + np.arange(
            lengths.sum()
        )
        ids = tuple(self.user_ids[u] for u in users) if self.user_ids else ()
        return UserDistributions(
            self.grid, np.r_[0, np.cumsum(lengths)], self.pixels[idx], self.weights[idx], ids
        )

    @classmethod
    def from_pixels(
        cls,
        grid: Grid,
        user: np.ndarray,
        pixels: np.ndarray,
        weights: np.ndarray | None = None,
    ) -> UserDistributions:
        """Group (user, pixel, weight) records into normalised per-user distributions.

        ``user`` may hold any hashable labels; users appear in order of first appearance.
        Raises ValueError for negative or non-finite weights and for a user whose total weight
        is zero (an empty user cannot occur here: every user has at least one record).
        """
        pixels = np.asarray(pixels, dtype=np.int64).ravel()
        n = pixels.size
        if n == 0:
            raise ValueError("no records: at least one user with one point is needed")
        if weights is None:
            weights = np.ones(n)
        weights = np.asarray(weights, dtype=float).ravel()
        user = np.asarray(user).ravel()
        if not (user.size == n == weights.size):
            raise ValueError(
                f"user, pixels and weights must have the same length, got "
                f"{user.size}, {n}, {weights.size}"
            )
        bad = ~np.isfinite(weights) | (weights < 0)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"weight must be finite and >= 0; record {k} (user {_py(user[k])!r}) has "
                f"weight={float(weights[k])!r}"
            )
        if ((pixels < 0) | (pixels >= grid.n_pixels)).any():
            k = int(np.flatnonzero((pixels < 0) | (pixels >= grid.n_pixels))[0])
            raise ValueError(
                f"pixel index out of range for grid {grid}: record {k} has {int(pixels[k])}"
            )
        labels, first, inverse = np.unique(user, return_index=True, return_inverse=True)
        order_of_label = np.argsort(np.argsort(first, kind="stable"), kind="stable")
        uid = order_of_label[inverse]
        n_users = labels.size
        # merge duplicate (user, pixel) pairs
        key = uid.astype(np.int64) * grid.n_pixels + pixels
        ukey, kinv = np.unique(key, return_inverse=True)
        w = np.bincount(kinv, weights=weights, minlength=ukey.size)
        u_of = ukey // grid.n_pixels
        px = ukey % grid.n_pixels
        totals = np.bincount(u_of, weights=w, minlength=n_users)
        zero = ~(totals > 0)
        if zero.any():
            j = int(np.flatnonzero(zero)[0])
            raise ValueError(
                f"user {_py(labels[np.argsort(first)][j])!r} has zero total weight; "
                "every user needs positive total weight"
            )
        keep = w > 0
        u_of, px, w = u_of[keep], px[keep], w[keep]
        w = w / totals[u_of]
        indptr = np.r_[0, np.cumsum(np.bincount(u_of, minlength=n_users))].astype(np.int64)
        ids = tuple(labels[np.argsort(first, kind="stable")].tolist())
        return cls(grid, indptr, px.astype(np.int64), w, ids)

    @classmethod
    def from_points(
        cls,
        grid: Grid,
        user: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        weights: np.ndarray | None = None,
    ) -> UserDistributions:
        """Snap points in [0, 1)^2 to ``grid`` (x -> column, y -> row) and group by user."""
        return cls.from_pixels(grid, user, grid.points_to_pixels(x, y), weights)
