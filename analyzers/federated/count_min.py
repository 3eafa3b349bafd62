"""Count-Min sketch encoding of a quadtree level ([Bagdasaryan22]_ Sec. 5.1 and Sec. 6.2).

The "CM-sketch based" baseline of [Bagdasaryan22]_ Table 1: instead of a one-hot vector over
the 4^l cells of quadtree level l, each user reports a Count-Min sketch ([Cormode05]_) of her
cell at that level: ``depth`` rows of ``width`` counters, a one in row j at column h_j(cell),
sent as one vector of width x depth entries (2,000 x 20 = 40,000 in the paper). The sketch of
the sum is the sum of the sketches, so it goes through the same distributed Polya noise and
secure aggregation as a one-hot vector (Alg. 1).

Sensitivity. One user's sketch has exactly ``depth`` ones (one per row), so its l1 norm is
``depth``: removing or zeroing a user changes the sum by ``depth`` in l1, replacing her by
up to 2 ``depth`` ("we increase the sensitivity of each report proportional to the sketch's
depth", Sec. 6.2). :func:`sketch_sensitivity` computes it on worst-case neighbours.

The hash functions h_j(x) = ((a_j x + b_j) mod p) mod width, p = 2^31 - 1, are the
pairwise-independent family of [Cormode05]_; (a_j, b_j) are public parameters of the protocol
drawn from a public seed (they depend on no user's data).

Estimates. ``"min"`` is the Count-Min estimate min_j S[j, h_j(x)] ([Cormode05]_ Sec. 3): with
no noise it never underestimates, but the minimum of ``depth`` noisy counters is biased down by
about 1.9 noise standard deviations at depth 20. ``"median"`` (the count-median of
[Charikar02]_ for signed noise) and ``"mean"`` (the collision-debiased mean,
(mean_j S[j, h_j(x)] - N / width) width / (width - 1)) are offered for comparison; all three
are post-processing.

References
----------
.. [Bagdasaryan22] Bagdasaryan et al. (2022), "Towards sparse federated analytics", Sec. 5.1
   ("Count-min sketch hierarchical encoding"), Sec. 6.2, Table 1 -- full entry in
   docs/references.md
.. [Cormode05] Cormode and Muthukrishnan (2005), "An improved data stream summary: the
   count-min sketch and its applications", Sec. 3 -- full entry in docs/references.md
.. [Charikar02] Charikar, Chen and Farach-Colton (2002), "Finding frequent items in data
   streams" -- full entry in docs/references.md
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from shuffledp import _validation as v
from shuffledp.accounting.guarantee import Neighbour

#: the Mersenne prime of the hash family (keys must be below it)
PRIME = (1 << 31) - 1


@dataclass(frozen=True)
class CountMinSketch:
    """A public Count-Min sketch layout: ``depth`` rows of ``width`` counters and the row hashes.

    Attributes
    ----------
    width : int
        Counters per row (the paper's 2,000), >= 2.
    depth : int
        Rows (the paper's 20), >= 1.
    a, b : tuple of int
        The hash coefficients, h_j(x) = ((a_j x + b_j) mod p) mod width with p = 2^31 - 1,
        1 <= a_j < p, 0 <= b_j < p.

    Raises
    ------
    ValueError
        If a size is below its minimum or the coefficients do not match ``depth`` and the
        ranges above.
    TypeError
        If a size is not an integer.

    References
    ----------
    [Cormode05]_ Sec. 3 (the sketch and its pairwise-independent hashes).
    """

    width: int
    depth: int
    a: tuple[int, ...]
    b: tuple[int, ...]

    def __post_init__(self) -> None:
        v.count("width", self.width, 2)
        d = v.count("depth", self.depth)
        a, b = tuple(int(x) for x in self.a), tuple(int(x) for x in self.b)
        if len(a) != d or len(b) != d:
            raise ValueError(f"a and b must hold depth={d} coefficients each, got "
                             f"{len(a)} and {len(b)}")
        if not all(1 <= x < PRIME for x in a) or not all(0 <= x < PRIME for x in b):
            raise ValueError(f"hash coefficients must satisfy 1 <= a < {PRIME} and "
                             f"0 <= b < {PRIME}, got a={a!r:.60}, b={b!r:.60}")
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)

    @classmethod
    def from_seed(cls, width: int = 2000, depth: int = 20,
                  seed: int | None = None) -> CountMinSketch:
        """The sketch whose hash coefficients are drawn from the public ``seed``.

        Parameters
        ----------
        width : int, default 2000
            Counters per row ([Bagdasaryan22]_ Sec. 6.2).
        depth : int, default 20
            Rows ([Bagdasaryan22]_ Sec. 6.2).
        seed : int, optional
            Public seed of the hash coefficients (the layout is public; no noise comes from
            it). Default: a fresh 63-bit seed from the operating system's secure source, so
            that no two deployments share a layout by accident; read it back from
            :attr:`a` and :attr:`b` or pass it explicitly to reproduce a layout.

        Returns
        -------
        CountMinSketch
            The layout.

        Raises
        ------
        ValueError
            If a size is below its minimum or ``seed`` is negative.
        TypeError
            If an argument is not an integer.

        References
        ----------
        [Cormode05]_ Sec. 3.
        """
        d = v.count("depth", depth)
        if seed is None:
            seed = secrets.randbits(63)
        g = np.random.default_rng(v.count("seed", seed, 0))
        return cls(width=v.count("width", width, 2), depth=d,
                   a=tuple(int(x) for x in g.integers(1, PRIME, d)),
                   b=tuple(int(x) for x in g.integers(0, PRIME, d)))

    @property
    def size(self) -> int:
        """Entries of one report: width x depth."""
        return self.width * self.depth

    def columns(self, keys: np.ndarray) -> np.ndarray:
        """h_j(key) for every key and row: int64 array of shape (len(keys), depth).

        Parameters
        ----------
        keys : numpy.ndarray of int
            Non-negative keys below 2^31 - 1.

        Returns
        -------
        numpy.ndarray
            Column of each key in each row.

        Raises
        ------
        ValueError
            If a key is negative, not below 2^31 - 1 or not an integer.
        """
        k = _keys(keys)
        a = np.asarray(self.a, dtype=np.int64)
        b = np.asarray(self.b, dtype=np.int64)
        return ((k[:, None] * a[None, :] + b[None, :]) % PRIME) % self.width

    def positions(self, keys: np.ndarray) -> np.ndarray:
        """The flat indices of each key's ``depth`` ones in the width x depth report vector
        (row j occupies entries j width .. (j + 1) width - 1): shape (len(keys), depth).

        Parameters
        ----------
        keys : numpy.ndarray of int
            Non-negative keys below 2^31 - 1.

        Returns
        -------
        numpy.ndarray
            Indices in 0 .. width x depth - 1, one per row, increasing along a key's row.

        Raises
        ------
        ValueError
            As :meth:`columns`.
        """
        return self.columns(keys) + np.arange(self.depth, dtype=np.int64)[None, :] * self.width

    def encode(self, key: int) -> np.ndarray:
        """One user's report: the 0/1 vector of width x depth entries with a one at
        :meth:`positions` of ``key`` (l1 norm exactly ``depth``).

        Parameters
        ----------
        key : int
            The user's key (her cell at the level), 0 <= key < 2^31 - 1.

        Returns
        -------
        numpy.ndarray of int64, shape (width x depth,)
            The report.

        Raises
        ------
        ValueError
            As :meth:`columns`.
        """
        x = np.zeros(self.size, dtype=np.int64)
        x[self.positions(np.array([key]))[0]] = 1
        return x

    def estimate(self, sums: np.ndarray, keys: np.ndarray, method: str = "min",
                 total: float | None = None) -> np.ndarray:
        """The estimated count of each key from a (noisy) summed sketch.

        Parameters
        ----------
        sums : numpy.ndarray, shape (width x depth,)
            The summed reports (decoded, signed).
        keys : numpy.ndarray of int
            The keys to estimate.
        method : {"min", "median", "mean"}
            min_j, median_j, or the collision-debiased mean over the rows of
            S[j, h_j(key)] (module docstring).
        total : float, optional
            "mean" only: N, the number of reports (default: the mean of the row sums of
            ``sums``, itself a noisy estimate of N).

        Returns
        -------
        numpy.ndarray of float
            One estimate per key.

        Raises
        ------
        ValueError
            If ``sums`` does not have width x depth entries, ``method`` is unknown, or a key
            is invalid.

        References
        ----------
        [Cormode05]_ Sec. 3 (min); [Charikar02]_ (median).
        """
        s = np.asarray(sums)
        if s.shape != (self.size,):
            raise ValueError(f"sums must have width x depth = {self.size} entries, got shape "
                             f"{s.shape}")
        method = v.choice("method", method, ("min", "median", "mean"))
        vals = s[self.positions(keys)].astype(float)
        if method == "min":
            return vals.min(axis=1)
        if method == "median":
            return np.median(vals, axis=1)
        n = (float(s.reshape(self.depth, self.width).sum(axis=1).mean()) if total is None
             else v.real("total", total))
        return (vals.mean(axis=1) - n / self.width) * self.width / (self.width - 1)


def _keys(keys: object) -> np.ndarray:
    k = np.asarray(keys)
    if k.ndim != 1 or not np.issubdtype(k.dtype, np.integer):
        raise ValueError(f"keys must be a 1-d integer array, got shape {k.shape}, dtype "
                         f"{k.dtype}")
    if k.size and (int(k.min()) < 0 or int(k.max()) >= PRIME):
        raise ValueError(f"keys must be in 0..{PRIME - 1}, got {int(k.min())}..{int(k.max())}")
    return k.astype(np.int64)


def sketch_sensitivity(sketch: CountMinSketch, keys: np.ndarray,
                       neighbour: Neighbour | str) -> int:
    """The l1 sensitivity of the summed sketch over the key domain ``keys``, computed on the
    worst-case neighbours: max_x ||s(x)||_1 (add/remove, zero-out: a user's report removed or
    zeroed) or max_{x, x'} ||s(x) - s(x')||_1 (replace-one), by enumeration.

    Parameters
    ----------
    sketch : CountMinSketch
        The layout.
    keys : numpy.ndarray of int
        The domain (every cell a user may report).
    neighbour : Neighbour or str
        ``"add_remove"``, ``"zero_out"`` or ``"replace"``.

    Returns
    -------
    int
        The sensitivity: ``depth`` for add/remove and zero-out; for replace-one 2 ``depth``
        minus twice the fewest rows in which two distinct keys collide (2 ``depth`` unless
        every pair of keys shares a column somewhere).

    Raises
    ------
    ValueError
        If ``keys`` is empty or invalid, or the relation is not one of the three.

    References
    ----------
    [Bagdasaryan22]_ Sec. 6.2 (sensitivity scaled by the sketch's depth).
    """
    pos = sketch.positions(_keys(keys))
    if pos.shape[0] == 0:
        raise ValueError("keys must hold at least one key, got 0")
    nb = Neighbour.parse(neighbour)
    if nb in (Neighbour.ADD_REMOVE, Neighbour.ZERO_OUT):
        return int(max(np.unique(row).size for row in pos))  # the ones of one report
    if nb is not Neighbour.REPLACE_ONE:
        raise ValueError(f"neighbour must be add_remove, zero_out or replace, got "
                         f"{nb.token!r}")
    if pos.shape[0] == 1:
        return 0
    cols = pos  # distinct rows occupy disjoint index ranges: compare row by row
    best = 0
    for i in range(cols.shape[0]):  # O(K^2 depth) pairs, for the small domains of tests
        shared = (cols[i + 1:] == cols[i][None, :]).sum(axis=1)
        if shared.size:
            best = max(best, int(2 * (sketch.depth - shared.min())))
    return best


__all__ = ["PRIME", "CountMinSketch", "sketch_sensitivity"]
