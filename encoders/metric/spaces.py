"""Finite metric spaces with a normalised metric, and the earth-mover's distance between datasets.

Metric DP at the user level ([Imola]_ Sec. 2-3) measures a change of a user's dataset K by
d_EM(K~, K~'), the earth-mover's (1-Wasserstein) distance between the normalised histograms,
over an item metric d_X bounded by 1. This module provides the item domains used by the
mechanisms of :mod:`shuffledp.encoders.metric.mechanisms`:

* :func:`from_matrix`: any finite domain given by a distance matrix;
* :func:`grid_space`: the cells of an h x w grid with Euclidean (l2) or l1 distance between
  cell centres, divided by the diameter;
* :func:`sphere_space`: points on a sphere (latitude, longitude in degrees) with the
  great-circle distance divided by pi (half a great circle, the largest possible distance);
* :func:`product_space`: B x C of [Imola]_ Sec. 6.2: distance 1 between different clusters b,
  r d_C(c, c') inside a cluster (the paper's case: d_C the discrete metric, so r).

Items are integer indices 0..k-1 into the domain. d_EM is computed exactly, between two
normalised histograms and between two datasets, by the package's one transport solver
(:func:`shuffledp.encoders.metric.transport.transport_cost`, a network simplex on the
transport problem restricted to the supports).

References
----------
.. [Imola] Imola et al. (preprint), "Metric DP at the User-Level", Sec. 2-3, 6.2
   -- full entry in docs/references.md
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shuffledp import _validation as v
from shuffledp.encoders.metric.transport import transport_cost
from shuffledp.randomness import RngLike, as_generator

#: tolerance of the metric checks (distances are float64 computations of exact quantities)
METRIC_TOL = 1e-12
#: triangle inequality: every triple is checked up to this many points, else a sample
MAX_FULL_TRIANGLE = 400
TRIANGLE_SAMPLE = 200_000


@dataclass(frozen=True)
class MetricSpace:
    """A finite domain {0, ..., k-1} with a metric bounded by 1.

    Attributes
    ----------
    distances : ndarray, shape (k, k)
        d_X(x, y), symmetric, zero diagonal, positive off the diagonal, <= 1 (read-only).
    name : str
        Short description (kind and parameters).
    coords : ndarray or None
        Coordinates of the points where they exist (grid centres in cell units, (lat, lon)).
    scale : float
        Distance in the original unit that corresponds to 1 (the normaliser).
    row_regular : bool
        Every row of ``distances`` is a permutation of the first one (the same multiset of
        distances from every point). Then exp(-alpha0 d_X(x, .)) has the same normaliser for
        every x and the exponential mechanism with score -alpha0 d_X is alpha0 d_X-DP
        (see :class:`~shuffledp.encoders.metric.mechanisms.ExponentialMechanism`).
    """

    distances: np.ndarray
    name: str = "finite"
    coords: np.ndarray | None = field(default=None, compare=False)
    scale: float = 1.0

    @property
    def k(self) -> int:
        """Number of points."""
        return int(self.distances.shape[0])

    @property
    def row_regular(self) -> bool:
        rows = np.sort(self.distances, axis=1)
        return bool(np.array_equal(rows, np.broadcast_to(rows[0], rows.shape)))

    @property
    def min_distance(self) -> float:
        """Smallest distance between two different points (inf for k = 1)."""
        if self.k == 1:
            return float("inf")
        off = self.distances[~np.eye(self.k, dtype=bool)]
        return float(off.min())

    def items(self, name: str, value) -> np.ndarray:
        """``value`` as a 1-D int64 array of indices into the domain (error names ``name``)."""
        return _as_items(name, value, self.k)


def _as_items(name: str, value, k: int) -> np.ndarray:
    """A non-empty 1-D int64 array of integers in [0, k); the first bad entry is quoted."""
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of item indices, "
                         f"got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{name} must hold integer item indices, got dtype {arr.dtype}")
    bad = (arr < 0) | (arr >= k)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name} must hold items of the domain 0..{k - 1}; "
                         f"{name}[{i}]={int(arr[i])} is outside")
    return arr.astype(np.int64, copy=False)


# ----------------------------------------------------------------------------- validation
def check_metric(d: np.ndarray, *, name: str = "distances", rng: RngLike = None) -> None:
    """Raise ValueError unless ``d`` is a metric bounded by 1 (triangle checked on a sample).

    Checks: square finite matrix, symmetric, zero diagonal, positive off the diagonal (points
    are distinct), max <= 1 (normalised), and d(x, z) <= d(x, y) + d(y, z) on every triple
    when k <= MAX_FULL_TRIANGLE, else on TRIANGLE_SAMPLE random triples drawn from ``rng``
    (default fresh OS entropy, so a crafted matrix cannot target a fixed sample; pass a seed
    for a reproducible check). The message names the first violation.

    Parameters
    ----------
    d : ndarray, shape (k, k)
        The distance matrix.
    name : str
        How to name the matrix in error messages.
    rng : int, numpy.random.Generator or None
        Source of the sampled triples when k > MAX_FULL_TRIANGLE.

    Raises
    ------
    ValueError
        If ``d`` is not a non-empty square finite matrix, or is not symmetric, has a non-zero
        diagonal, a non-positive off-diagonal entry, an entry above 1, or a triangle
        violation (each named with its indices and values).
    TypeError
        If ``rng`` is not a seed or Generator (when a sample is drawn).

    References
    ----------
    [Imola]_ Sec. 2: the mechanisms assume a metric d_X on the domain, normalised to
    diameter 1.
    """
    if d.ndim != 2 or d.shape[0] != d.shape[1] or d.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty square matrix, got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{name} must be finite")
    k = d.shape[0]
    asym = np.abs(d - d.T)
    if asym.max() > METRIC_TOL:
        i, j = (int(t) for t in np.unravel_index(int(np.argmax(asym)), d.shape))
        raise ValueError(f"{name} must be symmetric; {name}[{i}, {j}]={d[i, j]!r} but "
                         f"{name}[{j}, {i}]={d[j, i]!r}")
    if np.any(np.diag(d) != 0):
        i = int(np.argmax(np.diag(d) != 0))
        raise ValueError(f"{name} must have a zero diagonal; {name}[{i}, {i}]={d[i, i]!r}")
    off = d + np.eye(k)
    if np.any(off <= 0):
        i, j = (int(t) for t in np.argwhere(off <= 0)[0])
        raise ValueError(f"{name} must be > 0 between distinct points; "
                         f"{name}[{i}, {j}]={d[i, j]!r}")
    if d.max() > 1.0 + METRIC_TOL:
        i, j = (int(t) for t in np.unravel_index(int(np.argmax(d)), d.shape))
        raise ValueError(f"{name} must be normalised (max distance <= 1); "
                         f"{name}[{i}, {j}]={d[i, j]!r} (divide by the diameter)")
    _check_triangle(d, name, rng)


def _check_triangle(d: np.ndarray, name: str, rng: RngLike) -> None:
    k = d.shape[0]
    if k <= MAX_FULL_TRIANGLE:
        for y in range(k):  # d[x, z] <= d[x, y] + d[y, z] for all x, z
            excess = d - (d[:, y][:, None] + d[y, :][None, :])
            if excess.max() > METRIC_TOL:
                x, z = np.unravel_index(int(np.argmax(excess)), d.shape)
                _triangle_error(d, name, int(x), y, int(z))
        return
    g = as_generator(rng)
    x, y, z = g.integers(0, k, size=(3, TRIANGLE_SAMPLE))
    excess = d[x, z] - d[x, y] - d[y, z]
    if excess.max() > METRIC_TOL:
        i = int(np.argmax(excess))
        _triangle_error(d, name, int(x[i]), int(y[i]), int(z[i]))


def _triangle_error(d: np.ndarray, name: str, x: int, y: int, z: int) -> None:
    raise ValueError(
        f"{name} violates the triangle inequality: d({x}, {z})={d[x, z]!r} > "
        f"d({x}, {y}) + d({y}, {z})={d[x, y] + d[y, z]!r}")


# ----------------------------------------------------------------------------- constructors
def from_matrix(distances, *, normalise: bool = False, name: str = "finite") -> MetricSpace:
    """A metric space from a distance matrix.

    Parameters
    ----------
    distances : array_like, shape (k, k)
        The metric. Must be bounded by 1 unless ``normalise``.
    normalise : bool, default False
        Divide by the largest distance (the diameter) first.
    name : str
        A label for the space (in its ``name``).

    Returns
    -------
    MetricSpace
        The space, with ``scale`` the diameter divided out (1 when not normalised).

    Raises
    ------
    ValueError
        If ``distances`` is not a 2D array of finite non-negative numbers, or is not a
        metric bounded by 1 (see :func:`check_metric`).

    References
    ----------
    [Imola]_ Sec. 2 (finite metric domains).
    """
    d = v.nonnegative_array("distances", distances, ndim=2)
    scale = 1.0
    if normalise and d.max() > 0:
        scale = float(d.max())
        d = d / scale
    check_metric(d)
    d.setflags(write=False)
    return MetricSpace(d, name=name, scale=scale)


def grid_space(height: int, width: int, norm: str = "l2") -> MetricSpace:
    """Cells of a height x width grid (row-major index), distance between centres / diameter.

    Parameters
    ----------
    height, width : int
        Grid size (at least 2 cells in total).
    norm : {"l2", "l1"}
        Euclidean or Manhattan distance between cell centres (in cell units).

    Returns
    -------
    MetricSpace
        ``height * width`` points; ``coords`` holds (row, column) and ``scale`` the diameter
        in cell units.

    Raises
    ------
    ValueError
        If a size is < 1, the grid has fewer than 2 cells, or ``norm`` is unknown.
    TypeError
        If a size is not an integer.

    References
    ----------
    [Imola]_ Sec. 3 (locations on a grid as a metric domain).
    """
    h = v.count("height", height)
    w = v.count("width", width)
    norm = v.choice("norm", norm, ("l2", "l1"))
    if h * w < 2:
        raise ValueError(f"the grid needs at least 2 cells, got height={h}, width={w}")
    rr, cc = np.divmod(np.arange(h * w), w)
    dy = np.abs(rr[:, None] - rr[None, :]).astype(np.float64)
    dx = np.abs(cc[:, None] - cc[None, :]).astype(np.float64)
    d = np.hypot(dy, dx) if norm == "l2" else dy + dx
    scale = float(d.max())
    d = d / scale
    d.setflags(write=False)
    coords = np.stack([rr, cc], axis=1)
    return MetricSpace(d, name=f"grid {h}x{w} {norm}", coords=coords, scale=scale)


def _great_circle(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Central angle in radians between points given in degrees (haversine form, stable)."""
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dl = np.radians(np.asarray(lon2) - np.asarray(lon1))
    a = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2.0 * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def sphere_space(lat, lon, *, radius: float = 1.0) -> MetricSpace:
    """Points on a sphere, great-circle distance divided by pi radius (half a great circle).

    Parameters
    ----------
    lat, lon : array_like of float
        Latitudes in [-90, 90] and longitudes in [-180, 360) in degrees; the points must be
        distinct.
    radius : float, default 1
        Sphere radius in the caller's unit (3958.8 for miles on Earth); ``scale`` is then
        pi radius, the unit distance in that unit (the paper's location example normalises
        by the largest surface distance on Earth, [Imola]_ Sec. 3).

    Returns
    -------
    MetricSpace
        The points; ``coords`` holds (lat, lon) and ``scale`` pi radius.

    Raises
    ------
    ValueError
        If ``lat`` and ``lon`` are not of one length >= 2, a coordinate is out of range or
        not finite, ``radius`` is not a finite positive number, or two points coincide.

    References
    ----------
    [Imola]_ Sec. 3 (the location example).
    """
    la = np.asarray(lat, dtype=np.float64).ravel()
    lo = np.asarray(lon, dtype=np.float64).ravel()
    if la.shape != lo.shape or la.size < 2:
        raise ValueError(f"lat and lon must be 1-D of equal length >= 2, got shapes "
                         f"{np.shape(lat)} and {np.shape(lon)}")
    for nm, arr, lim in (("lat", la, (-90.0, 90.0)), ("lon", lo, (-180.0, 360.0))):
        bad = ~np.isfinite(arr) | (arr < lim[0]) | (arr > lim[1])
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{nm} must be in [{lim[0]}, {lim[1]}] degrees; "
                             f"{nm}[{i}]={arr[i]!r}")
    r = v.positive("radius", radius)
    d = _great_circle(la[:, None], lo[:, None], la[None, :], lo[None, :]) / np.pi
    d = np.minimum(d, 1.0)
    np.fill_diagonal(d, 0.0)
    d = 0.5 * (d + d.T)
    check_metric(d, name="great-circle distances (duplicate points?)")
    d.setflags(write=False)
    return MetricSpace(d, name=f"sphere ({la.size} points)", coords=np.stack([la, lo], 1),
                       scale=float(np.pi * r))


def product_space(s: int, t: int, r: float, inner: MetricSpace | None = None) -> MetricSpace:
    """B x C of [Imola]_ Sec. 6.2: s clusters of t items; item (b, c) has index b t + c.

    d((b, c), (b', c')) = 1 if b != b' (Hamming on B), r d_C(c, c') if b = b', with d_C the
    discrete metric (the paper's case) unless ``inner`` gives a metric on C (t points, <= 1).

    Parameters
    ----------
    s : int
        |B|, number of clusters (>= 1).
    t : int
        |C|, items per cluster (>= 1, s t >= 2).
    r : float
        Within-cluster scale, in (0, 1].
    inner : MetricSpace, optional
        A metric on C with t points (default: the discrete metric).

    Returns
    -------
    MetricSpace
        s t points, item (b, c) at index b t + c.

    Raises
    ------
    ValueError
        If ``s`` or ``t`` < 1, s t < 2, ``r`` is outside (0, 1], or ``inner`` is not a
        MetricSpace of t points.
    TypeError
        If ``s`` or ``t`` is not an integer.

    References
    ----------
    [Imola]_ Sec. 6.2.
    """
    s = v.count("s", s)
    t = v.count("t", t)
    r = v.interval("r", r, 0.0, 1.0, open_high=False)
    if s * t < 2:
        raise ValueError(f"the product space needs s t >= 2 points, got s={s}, t={t}")
    if inner is None:
        dc = 1.0 - np.eye(t)
    else:
        if not isinstance(inner, MetricSpace) or inner.k != t:
            raise ValueError(f"inner must be a MetricSpace with t={t} points, got {inner!r:.60}")
        dc = np.asarray(inner.distances)
    same = np.kron(np.eye(s), r * dc)
    diff = np.kron(1.0 - np.eye(s), np.ones((t, t)))
    d = same + diff
    check_metric(d)
    d.setflags(write=False)
    return MetricSpace(d, name=f"product B x C (s={s}, t={t}, r={r:g})")


# ----------------------------------------------------------------------------- d_EM
def emd_datasets(space: MetricSpace, K, K2) -> float:
    """d_EM between the normalised histograms of two datasets of equal size ([Imola]_ Lemma 2.1).

    d_EM(K~, K2~) is the optimal transport cost between the two normalised histograms
    (:func:`emd_histograms`). By the Birkhoff-von Neumann theorem an optimal coupling of two
    empirical distributions with m points each is a permutation, so this also equals
    min over pi of (1/m) sum_i d(x_i, y_pi(i)) (the assignment problem).

    Parameters
    ----------
    space : MetricSpace
        The domain.
    K, K2 : array_like of int, 1D
        The two datasets as item indices (equal, non-zero sizes).

    Returns
    -------
    float
        d_EM(K~, K2~) in [0, 1].

    Raises
    ------
    ValueError
        If the datasets differ in size (use :func:`emd_histograms`) or hold items outside
        the domain.
    TypeError
        If a dataset holds non-integer items.

    References
    ----------
    [Imola]_ Lemma 2.1.
    """
    a = space.items("K", K)
    b = space.items("K2", K2)
    if a.size != b.size:
        raise ValueError(f"K and K2 must have the same size (bounded d_EM), got |K|={a.size}, "
                         f"|K2|={b.size}; use emd_histograms for datasets of different sizes")
    return transport_cost(np.bincount(a, minlength=space.k) / a.size,
                          np.bincount(b, minlength=space.k) / b.size, space.distances)


def histogram(space: MetricSpace, K) -> np.ndarray:
    """The normalised histogram K~ of a dataset (length k, sums to 1).

    Parameters
    ----------
    space : MetricSpace
        The domain.
    K : array_like of int, 1D
        The dataset as item indices (non-empty).

    Returns
    -------
    ndarray of float64, shape (k,)

    Raises
    ------
    ValueError
        If ``K`` is empty, not 1D, or holds an item outside the domain.
    TypeError
        If ``K`` holds non-integer items.

    References
    ----------
    [Imola]_ Sec. 2 (the normalised histogram K~).
    """
    a = space.items("K", K)
    return np.bincount(a, minlength=space.k) / a.size


def _as_distribution(name: str, p, k: int) -> np.ndarray:
    arr = v.nonnegative_array(name, p)
    if arr.shape != (k,):
        raise ValueError(f"{name} must have shape ({k},) (one mass per point), got {arr.shape}")
    total = arr.sum()
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"{name} must sum to 1 (a normalised histogram), got sum={total!r}")
    return arr


def emd_histograms(space: MetricSpace, p, q) -> float:
    """d_EM between two normalised histograms: the exact optimal transport cost.

    minimise sum_{x, y} C(x, y) d(x, y) subject to row sums p, column sums q, C >= 0, solved
    on the supports of p and q by :func:`shuffledp.encoders.metric.transport.transport_cost`.

    Parameters
    ----------
    space : MetricSpace
        The domain.
    p, q : array_like of float, shape (k,)
        Non-negative masses summing to 1.

    Returns
    -------
    float
        The optimal transport cost, in [0, 1].

    Raises
    ------
    ValueError
        If ``p`` or ``q`` has another shape, a negative or non-finite entry, or does not sum
        to 1 (within 1e-9).

    References
    ----------
    [Imola]_ Sec. 2 (d_EM between normalised histograms).
    """
    p = _as_distribution("p", p, space.k)
    q = _as_distribution("q", q, space.k)
    return transport_cost(p, q, space.distances)
