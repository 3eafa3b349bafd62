"""Point data for the heatmap experiments: synthetic mixtures, CSV files, SNAP check-ins.

Every loader returns a :class:`PointTable` of weighted points in [0, 1)^2 labelled by user;
:meth:`PointTable.to_users` snaps them to a grid (x -> column, y -> row, see
:mod:`shuffledp.grid`) and normalises each user's weights into a distribution.

* :func:`synthetic_mixture`: the synthetic data of [Ghazi23]_ App. E.3 (the built-in default,
  200 users).
* :func:`load_csv`: ``user_id,x,y[,weight]`` files.
* :func:`load_snap`: the SNAP location check-in format (Gowalla, Brightkite; [Ghazi23]_
  Sec. 4) with a latitude/longitude bounding box.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "DP Heatmaps", App. E.3, Sec. 4
   -- full entry in docs/references.md
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

import numpy as np

from shuffledp import _validation as v
from shuffledp.grid import Grid
from shuffledp.safe_io import MAX_TABLE_BYTES, open_regular, read_rows
from shuffledp.users import UserDistributions

__all__ = ["BUILTIN_DATA_SEED", "PointTable", "load_csv", "load_snap", "population_image",
           "sample_pixels", "synthetic_mixture"]

#: Generator seed that *defines* the built-in synthetic data set (the users' points, public
#: test data). It is never used for a release's noise, which draws fresh entropy.
BUILTIN_DATA_SEED = 0


@dataclass(frozen=True, eq=False)
class PointTable:
    """Weighted points in [0, 1)^2, each labelled with its user.

    Attributes
    ----------
    user : ndarray, shape (n,)
        User label of each point (any hashable values, e.g. ints or strings).
    x, y : ndarray of float64, shape (n,)
        Coordinates in [0, 1); x becomes the column, y the row of a grid.
    weight : ndarray of float64, shape (n,)
        Non-negative finite weights; every user has a positive total.
    info : Mapping
        Provenance (source, generator parameters, lines read, points dropped, ...).

    The arrays are copied and made read-only. Construction validates everything and raises
    ValueError naming the field and the first offending point.
    """

    user: np.ndarray
    x: np.ndarray
    y: np.ndarray
    weight: np.ndarray
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        user = np.array(self.user).ravel()
        n = user.size
        if n == 0:
            raise ValueError("a PointTable needs at least one point, got user of length 0")
        cols = {"user": user}
        for name in ("x", "y", "weight"):
            try:
                arr = np.array(getattr(self, name), dtype=np.float64).ravel()
            except (TypeError, ValueError) as exc:
                raise TypeError(
                    f"{name} must be numeric, got {name}={getattr(self, name)!r:.80}"
                ) from exc
            if arr.size != n:
                raise ValueError(
                    f"user, x, y and weight must have the same length; len(user)={n}, "
                    f"len({name})={arr.size}"
                )
            cols[name] = arr
        for name in ("x", "y"):
            v = cols[name]
            bad = ~((v >= 0.0) & (v < 1.0))
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"{name} must be in [0, 1) (and not NaN); "
                    f"point {k} has {name}={float(v[k])!r}"
                )
        w = cols["weight"]
        bad = ~(np.isfinite(w) & (w >= 0))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"weight must be finite and >= 0; point {k} has weight={float(w[k])!r}"
            )
        labels, inverse = np.unique(user, return_inverse=True)
        totals = np.bincount(inverse.ravel(), weights=w, minlength=labels.size)
        if not (totals > 0).all():
            lab = labels[int(np.flatnonzero(~(totals > 0))[0])]
            lab = lab.item() if isinstance(lab, np.generic) else lab
            raise ValueError(
                f"user {lab!r} has zero total weight; every user needs positive total weight"
            )
        for name, arr in cols.items():
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "info", MappingProxyType(dict(self.info)))

    @property
    def n_points(self) -> int:
        return int(self.x.size)

    @property
    def n_users(self) -> int:
        return int(np.unique(self.user).size)

    def __len__(self) -> int:
        return self.n_points

    def to_users(self, grid: Grid) -> UserDistributions:
        """Snap to ``grid`` and group into per-user distributions (weights normalised per user).

        Users appear in order of first appearance; see
        :meth:`shuffledp.users.UserDistributions.from_points`.
        """
        if not isinstance(grid, Grid):
            raise TypeError(f"grid must be a Grid, got grid={grid!r}")
        return UserDistributions.from_points(grid, self.user, self.x, self.y, self.weight)


# --------------------------------------------------------------------------- synthetic data


def synthetic_mixture(
    n_users: int = 200,
    n_clusters: int = 20,
    points_per_user: int = 5,
    *,
    std_range: tuple[float, float] = (0.005, 0.05),
    mean_margin: float = 0.05,
    rng: Any = 0,
) -> PointTable:
    """Users drawing points from a random 2-D Gaussian mixture ([Ghazi23]_ App. E.3).

    The mixture is uniform over ``n_clusters`` Gaussians with random means and covariances:

    * mean ~ Uniform([m, 1 - m]^2) with ``m = mean_margin``;
    * covariance ``R(theta) diag(s1^2, s2^2) R(theta)^T`` with ``theta ~ Uniform[0, pi)`` and
      the standard deviations ``s1, s2`` log-uniform in ``std_range`` (units of the unit
      square; the defaults give clusters from about 1 to 13 pixels wide on a 256 grid).

    Each of the ``n_users`` users draws ``points_per_user`` i.i.d. points from the mixture
    (a fresh component per point), all with weight 1, so a user's distribution is uniform over
    its few points. Points falling outside [0, 1)^2 are redrawn from the same component
    (rejection sampling), so every component keeps its intended weight. The paper controls the
    sparsity of the aggregate with the number of clusters and of samples; here that is
    ``n_clusters`` and ``points_per_user``.

    Parameters
    ----------
    n_users, n_clusters, points_per_user : int
        All >= 1.
    std_range : (float, float)
        ``0 < low <= high``: range of the per-axis standard deviations.
    mean_margin : float
        In [0, 0.5): keeps cluster centres away from the border.
    rng : None, int or numpy.random.Generator
        Seed or generator (``np.random.default_rng(rng)``); the default 0 makes the built-in
        data set reproducible.

    Returns
    -------
    PointTable
        User labels ``0..n_users-1``; ``info`` records the generator, its parameters and the
        mixture (``means``, ``covariances`` as nested lists).

    Raises
    ------
    ValueError
        If a count is not an integer >= 1, ``std_range`` is not a pair with
        ``0 < low <= high`` (finite), or ``mean_margin`` is outside [0, 0.5).
    TypeError
        If a count is not an integer, or ``rng`` is not a seed or Generator.
    """
    n_users = v.count("n_users", n_users, 1)
    n_clusters = v.count("n_clusters", n_clusters, 1)
    points_per_user = v.count("points_per_user", points_per_user, 1)
    try:
        lo, hi = (float(v) for v in std_range)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"std_range must be a pair of floats, got std_range={std_range!r}"
        ) from exc
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise ValueError(
            f"std_range must satisfy 0 < low <= high (finite), got std_range={std_range!r}"
        )
    m = float(mean_margin)
    if not (0.0 <= m < 0.5):
        raise ValueError(f"mean_margin must be in [0, 0.5), got mean_margin={mean_margin!r}")
    gen = np.random.default_rng(rng)

    means = gen.uniform(m, 1.0 - m, size=(n_clusters, 2))
    theta = gen.uniform(0.0, np.pi, size=n_clusters)
    stds = np.exp(gen.uniform(np.log(lo), np.log(hi), size=(n_clusters, 2)))
    cos, sin = np.cos(theta), np.sin(theta)
    rot = np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2)  # (k, 2, 2)
    chol = rot * stds[:, None, :]  # R diag(s): cov = chol chol^T
    cov = chol @ np.swapaxes(chol, 1, 2)

    n = n_users * points_per_user
    comp = gen.integers(0, n_clusters, size=n)
    pts = np.empty((n, 2))
    todo = np.arange(n)
    for _ in range(10_000):
        z = gen.standard_normal((todo.size, 2))
        cand = means[comp[todo]] + np.einsum("nij,nj->ni", chol[comp[todo]], z)
        ok = ((cand >= 0.0) & (cand < 1.0)).all(axis=1)
        pts[todo[ok]] = cand[ok]
        todo = todo[~ok]
        if todo.size == 0:
            break
    else:  # pragma: no cover - needs a component almost entirely outside the square
        raise RuntimeError("rejection sampling did not converge; reduce std_range")

    info = {
        "source": "synthetic_mixture",
        "paper": "Ghazi et al., Differentially Private Heatmaps, AAAI 2023, App. E.3",
        "n_users": n_users,
        "n_clusters": n_clusters,
        "points_per_user": points_per_user,
        "std_range": (lo, hi),
        "mean_margin": m,
        "means": means.tolist(),
        "covariances": cov.tolist(),
    }
    return PointTable(
        user=np.repeat(np.arange(n_users), points_per_user),
        x=pts[:, 0],
        y=pts[:, 1],
        weight=np.ones(n),
        info=info,
    )


# --------------------------------------------------------------------------- CSV


_CSV_REQUIRED = ("user_id", "x", "y")
_CSV_OPTIONAL = ("weight",)


def population_image(side: int = 1024, *, n_districts: int = 60,
                     spread: tuple[float, float] = (0.01, 0.08), background: float = 0.4,
                     rng: Any = 0) -> np.ndarray:
    """A synthetic population-density image: a public stand-in for the population heatmaps
    users are sampled from in [Bagdasaryan22]_ Sec. 6.1 (a 1024 x 1024 crop; one user per
    unit of luminosity).

    The map has land and water (a smooth random field thresholded so that about 70% is
    land), a residential background on land (a share ``background`` of the mass) with a
    street grid of denser lines, and ``n_districts`` Gaussian districts with Zipf(1) weights
    and standard deviations log-uniform in ``spread`` (fractions of the side; dense
    downtowns, many small neighbourhoods), all on land. The density is normalised to sum 1;
    zero on water.

    Parameters
    ----------
    side : int
        Width and height in pixels, 16 <= side <= 4096.
    n_districts : int
        >= 1.
    spread : (float, float)
        Range of the districts' standard deviations, fractions of the side, 0 < low <= high.
    background : float
        Share of the mass in the residential background, in [0, 1].
    rng : None, int or Generator
        The map's seed (the data, not any noise); default 0, a fixed public map.

    Returns
    -------
    ndarray, shape (side, side)
        Non-negative, sums to 1.

    Raises
    ------
    ValueError
        If ``side`` is outside [16, 4096], ``n_districts`` < 1, ``spread`` is not
        ``0 < low <= high`` (finite) or ``background`` is outside [0, 1].
    TypeError
        If ``side`` or ``n_districts`` is not an integer.

    References
    ----------
    .. [Bagdasaryan22] Bagdasaryan et al. (2022), "Sparse Federated Analytics", Sec. 6.1
       -- full entry in docs/references.md
    """
    side = v.bounded_count("side", side, 16, 4096)
    k = v.count("n_districts", n_districts)
    lo, hi = (float(x) for x in spread)
    if not (0 < lo <= hi < math.inf):
        raise ValueError(f"spread must satisfy 0 < low <= high, got spread={spread!r}")
    background = v.interval("background", background, 0.0, 1.0, open_low=False,
                            open_high=False)
    gen = np.random.default_rng(rng)
    t = (np.arange(side) + 0.5) / side

    def bumps(m: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        c, sd = gen.uniform(0, 1, (m, 2)), np.exp(gen.uniform(np.log(lo), np.log(hi), m))
        gy = np.exp(-0.5 * ((t[None, :] - c[:, :1]) / sd[:, None]) ** 2)
        gx = np.exp(-0.5 * ((t[None, :] - c[:, 1:]) / sd[:, None]) ** 2)
        return gy, gx

    gy, gx = bumps(12, 0.08, 0.25)  # land: a smooth field above its 30% quantile
    field = np.einsum("ki,kj->ij", gy * gen.uniform(0.5, 1.5, (12, 1)), gx)
    land = field > np.quantile(field, 0.3)
    street = np.zeros(side)
    street[:: max(side // 64, 2)] = 1.0
    img = 0.2 + 0.3 * (street[:, None] + street[None, :])
    gy, gx = bumps(k, lo, hi)
    w = 1.0 / np.arange(1, k + 1)
    w = w / w.sum() / (gy.sum(axis=1) * gx.sum(axis=1))  # district i holds w_i of the mass
    img = (img / img.sum() * background
           + np.einsum("ki,kj->ij", gy * w[:, None], gx) * (1.0 - background))
    img = np.where(land, img, 0.0)
    return img / img.sum()


def sample_pixels(density: Any, n: int, rng: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` users' pixels (rows, cols) drawn i.i.d. from a density image (one location per
    user, as [Bagdasaryan22]_ Sec. 6.1 samples users from a population heatmap).

    Parameters
    ----------
    density : array_like, 2D
        Non-negative weights per pixel (any positive total; normalised here).
    n : int
        Number of users (>= 1).
    rng : None, int or numpy.random.Generator
        Seed or Generator of the draw (default: fresh entropy).

    Returns
    -------
    (ndarray, ndarray)
        Row and column index of each user's pixel, int64, shape (n,) each.

    Raises
    ------
    ValueError
        If ``density`` is not a 2D array of finite non-negative numbers with a positive
        total, or ``n`` < 1.
    TypeError
        If ``n`` is not an integer.
    """
    d = v.nonnegative_array("density", density, ndim=2)
    total = d.sum()
    if not total > 0:
        raise ValueError(f"density must have a positive total, got sum={total!r}")
    n = v.count("n", n)
    idx = np.random.default_rng(rng).choice(d.size, size=n, p=(d / total).ravel())
    return idx // d.shape[1], idx % d.shape[1]


def _open_text(path: str, **kwargs: Any) -> io.TextIOWrapper:
    """Open a regular file as text: the check and the read use one descriptor (no race with a
    path swapped for a FIFO or device between them)."""
    return io.TextIOWrapper(open_regular(path), **kwargs)


def _parse_float(text: str, column: str, line: int, path: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{path}, line {line}: {column} is not a number: {text!r}") from None


def load_csv(path: str | os.PathLike[str], *, limit: int = MAX_TABLE_BYTES) -> PointTable:
    """Read points from a CSV file with header ``user_id,x,y[,weight]``.

    Columns may come in any order; ``weight`` defaults to 1. ``user_id`` is kept as a string.
    Blank lines are skipped. Line numbers in error messages are 1-based physical lines of the
    file (the header is line 1). The file is read through :func:`shuffledp.safe_io.read_rows`
    (regular files only, at most ``limit`` bytes).

    Parameters
    ----------
    path : path-like
        The CSV file (UTF-8, an optional byte-order mark).
    limit : int
        Largest file accepted, in bytes.

    Returns
    -------
    PointTable
        One point per record; ``info`` holds ``source="csv"``, the path and the number of
        records.

    Raises
    ------
    shuffledp.safe_io.UnsafeFileError
        If the path is not a regular file (FIFO, device, directory), is larger than
        ``limit`` or is not UTF-8 (a ``ValueError``).
    ValueError
        For an empty file, a missing or unknown column (named), a duplicate column, a row with
        the wrong number of fields, an empty user_id, a non-numeric value, NaN or a coordinate
        outside [0, 1), a negative or non-finite weight (each naming the line and value), a file
        without records, or a user whose weights sum to zero.
    """
    p = os.fspath(path)
    users: list[str] = []
    xs: list[float] = []
    ys: list[float] = []
    ws: list[float] = []
    with read_rows(p, limit=limit, header="required", columns=_CSV_REQUIRED,
                   optional=_CSV_OPTIONAL) as table:
        header = cast("list[str]", table.header)  # header="required": set, or it raised
        cols = (*(header.index(h) for h in _CSV_REQUIRED),
                header.index("weight") if "weight" in header else None)
        for line, row in table:
            uid, x, y, w = _csv_record(row, line, header, cols, p)
            users.append(uid)
            xs.append(x)
            ys.append(y)
            ws.append(w)
    if not users:
        raise ValueError(f"{p}: no records after the header")
    return PointTable(
        user=np.array(users, dtype=object),
        x=np.array(xs),
        y=np.array(ys),
        weight=np.array(ws),
        info={"source": "csv", "path": p, "n_records": len(users)},
    )


def _csv_record(row: list[str], line: int, header: list[str], cols: tuple,
                p: str) -> tuple[str, float, float, float]:
    """(user_id, x, y, weight) of one non-blank row, checked; errors name the line.

    ``cols`` holds the indices of user_id, x, y and weight (None when absent) in ``header``.
    """
    iu, ix, iy, iw = cols
    if len(row) != len(header):
        raise ValueError(
            f"{p}, line {line}: expected {len(header)} fields ({','.join(header)}), "
            f"got {len(row)}: {','.join(row)!r}"
        )
    uid = row[iu].strip()
    if not uid:
        raise ValueError(f"{p}, line {line}: empty user_id")
    x = _parse_float(row[ix], "x", line, p)
    y = _parse_float(row[iy], "y", line, p)
    for name, val, raw in (("x", x, row[ix]), ("y", y, row[iy])):
        if not (0.0 <= val < 1.0):
            raise ValueError(
                f"{p}, line {line}: {name} must be in [0, 1) (and not NaN), "
                f"got {name}={raw.strip()!r}"
            )
    w = 1.0
    if iw is not None:
        w = _parse_float(row[iw], "weight", line, p)
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(
                f"{p}, line {line}: weight must be finite and >= 0, "
                f"got weight={row[iw].strip()!r}"
            )
    return uid, x, y, w


# --------------------------------------------------------------------------- SNAP check-ins


def _iv_bbox(bbox: Any) -> tuple[float, float, float, float]:
    try:
        vals = tuple(float(v) for v in bbox)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"bbox must be (lat_min, lat_max, lon_min, lon_max), got bbox={bbox!r}"
        ) from exc
    if len(vals) != 4 or not all(math.isfinite(v) for v in vals):
        raise ValueError(
            "bbox must be four finite numbers (lat_min, lat_max, lon_min, lon_max), "
            f"got bbox={bbox!r}"
        )
    lat_min, lat_max, lon_min, lon_max = vals
    if not lat_min < lat_max:
        raise ValueError(f"bbox needs lat_min < lat_max, got bbox={bbox!r}")
    if not lon_min < lon_max:
        raise ValueError(f"bbox needs lon_min < lon_max, got bbox={bbox!r}")
    return lat_min, lat_max, lon_min, lon_max


def load_snap(
    path: str | os.PathLike[str],
    bbox: tuple[float, float, float, float],
    *,
    since: str | None = None,
    until: str | None = None,
) -> PointTable:
    """Read SNAP location check-ins (Gowalla, Brightkite) inside a bounding box.

    Each line is ``user<TAB>time<TAB>latitude<TAB>longitude<TAB>location_id`` ([Ghazi23]_
    Sec. 4 uses snap.stanford.edu/data/loc-Gowalla.html and loc-Brightkite.html). Check-ins
    with ``lat_min <= lat < lat_max`` and ``lon_min <= lon < lon_max`` are kept, with weight 1,
    and mapped to

    * ``x = (lon - lon_min) / (lon_max - lon_min)`` (column 0 is the western edge),
    * ``y = (lat - lat_min) / (lat_max - lat_min)`` (row 0 is the **southern** edge).

    So north is the *last* row: draw with ``render_png(..., origin="lower")`` (or flip rows)
    to get north up. Check-ins outside the box (or outside the time window) are dropped and
    counted in ``info``.

    Parameters
    ----------
    path : path-like
        The text file (uncompressed).
    bbox : (lat_min, lat_max, lon_min, lon_max)
        Finite, with ``lat_min < lat_max`` and ``lon_min < lon_max``; e.g. the paper's
        continental US box is ``(0, 50, -135, -60)``.
    since, until : str, optional
        Keep check-ins with ``since <= time < until``, comparing the ISO-8601 timestamps of the
        file (e.g. ``"2010-01-01T00:00:00Z"``) as strings.

    Returns
    -------
    PointTable
        ``info`` has ``lines``, ``kept``, ``dropped_outside_bbox``, ``dropped_outside_time``.

    Raises
    ------
    ValueError
        For a malformed line (not 5 tab-separated fields, empty user, non-numeric or NaN
        latitude/longitude), naming the line number, or when no check-in is inside the box.
    """
    p = os.fspath(path)
    lat_min, lat_max, lon_min, lon_max = _iv_bbox(bbox)
    for name, val in (("since", since), ("until", until)):
        if val is not None and not isinstance(val, str):
            raise TypeError(f"{name} must be an ISO-8601 string or None, got {name}={val!r}")
    users: list[str] = []
    lats: list[float] = []
    lons: list[float] = []
    n_lines = outside = out_time = 0
    with _open_text(p, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            n_lines += 1
            uid, when, lat, lon = _snap_record(text, line_no, p)
            if (since is not None and when < since) or (until is not None and when >= until):
                out_time += 1
                continue
            if not (lat_min <= lat < lat_max and lon_min <= lon < lon_max):
                outside += 1
                continue
            users.append(uid)
            lats.append(lat)
            lons.append(lon)
    if not users:
        raise ValueError(
            f"{p}: no check-in inside bbox={(lat_min, lat_max, lon_min, lon_max)} "
            f"({n_lines} lines, {outside} outside the box, {out_time} outside the time window)"
        )
    lat_a = np.array(lats)
    lon_a = np.array(lons)
    # clip guards the rounding of (v - lo) / (hi - lo) for v just below hi
    below_one = np.nextafter(1.0, 0.0)
    x = np.minimum((lon_a - lon_min) / (lon_max - lon_min), below_one)
    y = np.minimum((lat_a - lat_min) / (lat_max - lat_min), below_one)
    return PointTable(
        user=np.array(users, dtype=object),
        x=x,
        y=y,
        weight=np.ones(x.size),
        info={
            "source": "snap",
            "path": p,
            "bbox": (lat_min, lat_max, lon_min, lon_max),
            "orientation": "x = longitude (west -> east), y = latitude; row 0 = south (lat_min)",
            "lines": n_lines,
            "kept": len(users),
            "dropped_outside_bbox": outside,
            "dropped_outside_time": out_time,
            "since": since,
            "until": until,
        },
    )


def _snap_record(text: str, line_no: int, p: str) -> tuple[str, str, float, float]:
    """(user, time, latitude, longitude) of one non-blank SNAP line, checked; errors name
    the line."""
    fields = text.split("\t")
    if len(fields) != 5:
        raise ValueError(
            f"{p}, line {line_no}: expected 5 tab-separated fields "
            "(user, time, latitude, longitude, location_id), "
            f"got {len(fields)}: {text[:80]!r}"
        )
    uid, when, lat_s, lon_s, _loc = fields
    if not uid.strip():
        raise ValueError(f"{p}, line {line_no}: empty user field")
    try:
        lat = float(lat_s)
        lon = float(lon_s)
    except ValueError:
        raise ValueError(
            f"{p}, line {line_no}: latitude/longitude must be numbers, "
            f"got latitude={lat_s!r}, longitude={lon_s!r}"
        ) from None
    if not (math.isfinite(lat) and math.isfinite(lon)):
        raise ValueError(
            f"{p}, line {line_no}: latitude/longitude must be finite, "
            f"got latitude={lat_s!r}, longitude={lon_s!r}"
        )
    return uid.strip(), when, lat, lon
