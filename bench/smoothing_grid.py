"""The default release (``--smoothing auto``) against Alg. 2 as printed and the baselines.

Data the toolkit's defaults were not chosen on, one location per user:

* ``population``: users drawn from a population-weighted density (Zipf-weighted districts on a
  residential background with streets and water, :func:`shuffledp.datasets.population_image`,
  a fresh map per trial);
* ``elongated``: users along 6 elongated clusters (standard deviations 12:1, random
  orientation, population weights Zipf(1): roads and coastlines);
* ``spike``: every user in one pixel.

For every eps in {0.1, 0.2, 0.5, 1, 2, 5, 10} and n in {50, 100, 200, 500, 1000, 2000, 5000,
10000} it runs ``--trials`` (default 12) independent draws of data and noise, and prints the
mean and the 95% normal interval of EMD, KL, CC and SIM ([Ghazi23]_ Sec. 4, on heatmaps after
the Gaussian filter of Sec. 2.3 with ``--sigma`` px on both sides) for: ours (the default
release: ``budget="auto"`` with n declared public, smoothed), ours ``--smoothing none``
(Reconstruct's output on the same split), ``today`` (the default this one replaced: the
printed split and the earlier top-down rule, :func:`today_default`), ``today none`` (Alg. 1-2
as printed), the Laplace baseline and its top-1% / top-0.1% variants, all central under
add/remove (the baselines' relation). Per point and metric it says whether ours wins, ties or
loses against the three baselines (a win needs the paired 95% interval of the trial-by-trial
difference to exclude 0 in our favour against each of the three, a loss against any one) and
against ``today``, and the EMD ratios ours / Alg. 2 on the same split and ours / Alg. 2 as
printed (target <= 1.05). The spike part also prints the share of the estimate within one
pixel of the spike (target >= 70% at eps = 1, n = 200). The summary counts the points won,
tied and lost per metric, and the points where ours beats every baseline on all four means.

    python bench/smoothing_grid.py [--side 64] [--trials 12] [--data population,elongated]
        [--eps 0.1,1,10] [--n 50,200] [--spike-side 256] [--method posterior|density]

Runs every point in a process pool (all cores). ``--side 256`` is the paper's resolution
(exact EMD of dense 256x256 maps takes seconds: hours for the whole grid).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import argparse
import os
import zlib
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from shuffledp import datasets
from shuffledp.analyzers.heatmap.baselines import laplace_baseline
from shuffledp.analyzers.heatmap.central import central_heatmap
from shuffledp.analyzers.heatmap.metrics import all_metrics
from shuffledp.analyzers.heatmap.release import normalise
from shuffledp.analyzers.heatmap.render import gaussian_heatmap
from shuffledp.grid import Grid
from shuffledp.users import UserDistributions

EPS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
NS = (50, 100, 200, 500, 1000, 2000, 5000, 10000)
METHODS = ("ours", "ours none", "today", "today none", "laplace", "top_1%", "top_0.1%")
BASELINES = ("laplace", "top_1%", "top_0.1%")
KEYS = ("emd", "kl", "cc", "sim")
HIGHER = {"cc", "sim"}


def elongated_density(side: int, rng: np.random.Generator, k: int = 6) -> np.ndarray:
    """k Gaussian clusters with standard deviations s and s / 12 (s log-uniform in
    [0.05, 0.25] of the side), random orientation and centre, Zipf(1) weights."""
    t = (np.arange(side) + 0.5) / side
    yy, xx = np.meshgrid(t, t, indexing="ij")
    img = np.zeros((side, side))
    for i in range(k):
        cy, cx = rng.uniform(0.1, 0.9, 2)
        s = np.exp(rng.uniform(np.log(0.05), np.log(0.25)))
        th = rng.uniform(0, np.pi)
        u = (yy - cy) * np.cos(th) + (xx - cx) * np.sin(th)
        v = -(yy - cy) * np.sin(th) + (xx - cx) * np.cos(th)
        g = np.exp(-0.5 * ((u / s) ** 2 + (v / (s / 12)) ** 2))
        img += g / g.sum() / (i + 1)
    return img / img.sum()


def _today_split(mass, y, b, t=2.0, k=1.0):
    rows, cols = y.shape
    parent = ((np.arange(rows) // 2)[:, None] * mass.shape[1]
              + (np.arange(cols) // 2)[None, :]).ravel()
    z = np.maximum(y.ravel() - t * b, 0.0)
    s = np.bincount(parent, weights=z, minlength=mass.size)[parent]
    nch = np.bincount(parent, minlength=mass.size)[parent]
    lam = s * s / (s * s + (k * b) ** 2)
    share = np.divide(z, s, out=np.zeros_like(z), where=s > 0)
    return (mass.ravel()[parent] * (lam * share + (1.0 - lam) / nch)).reshape(rows, cols)


def today_default(rel) -> np.ndarray:
    """The default this session replaced, for comparison (run it on a release with the
    printed budget split): the start level's shares mixed with the even split, then one split
    per level in proportion to max(y - 2b, 0) (each level's own counts only), then the start
    level's picture with weight min(1/2, 0.5 sqrt(2 N_0) b_0 / T)."""
    from shuffledp.analyzers.heatmap.smoothing import _background
    counts, scales, start = list(rel.levels), rel.noise_scales(), rel.parameters["start_level"]
    y0 = counts[0]
    total = float(y0.sum())
    pos = np.maximum(y0, 0.0)
    lam0 = total ** 2 / (total ** 2 + 2.0 * y0.size * scales[0] ** 2) if total > 0 else 0.0
    mass = lam0 * (pos / pos.sum() if pos.sum() > 0 else 0 * pos) + (1 - lam0) / y0.size
    for y, b in zip(counts[1:], scales[1:]):
        mass = _today_split(mass, y, float(b))
    dens = mass / mass.sum()
    f = min(0.5, 0.5 * np.sqrt(2.0 * y0.size) * scales[0] / total) if total > 0 else 0.5
    return (1 - f) * dens + f * _background(pos + scales[0], rel.grid, start)


def make_users(kind: str, side: int, n: int, seed: int) -> UserDistributions:
    """n users, one pixel each, of the data set ``kind`` (a fresh map per seed)."""
    grid = Grid(side, side)
    rng = np.random.default_rng(seed)
    if kind == "spike":
        return UserDistributions.from_pixels(grid, np.arange(n), np.full(n, spike_pixel(side)))
    if kind == "population":
        dens = datasets.population_image(side, rng=int(rng.integers(2**31)))
    elif kind == "elongated":
        dens = elongated_density(side, rng)
    else:
        raise ValueError(f"unknown data set {kind!r}")
    r, c = datasets.sample_pixels(dens, n, rng=rng)
    return UserDistributions.from_pixels(grid, np.arange(n), r * side + c)


def spike_pixel(side: int) -> int:
    """The spike's pixel: off every level's cell boundary symmetry (row side/3+1, col side/2+3)."""
    return (side // 3 + 1) * side + side // 2 + 3


def baseline_estimates(agg: np.ndarray, eps: float, seed: int) -> dict[str, np.ndarray]:
    """The three baselines of one trial (one Laplace draw, seeded ``seed + 2``): plain, and
    thresholded to its top 1% and 0.1%."""
    return {"laplace": laplace_baseline(agg, eps, rng=seed + 2).estimate,
            "top_1%": laplace_baseline(agg, eps, rng=seed + 2, top_percent=1.0).estimate,
            "top_0.1%": laplace_baseline(agg, eps, rng=seed + 2, top_percent=0.1).estimate}


def one_point(args: tuple) -> tuple:
    """Every method's metrics at one (data, eps, n) over the trials, and the spike shares."""
    kind, side, eps, n, trials, sigma, method = args
    grid = Grid(side, side)
    out: dict[str, list] = {m: [] for m in METHODS}
    within = []
    for t in range(trials):
        seed = zlib.crc32(repr((kind, eps, n, t)).encode()) % 2**31
        users = make_users(kind, side, n, seed)
        agg = users.aggregate()
        truth = gaussian_heatmap(normalise(agg), sigma)
        rel = central_heatmap(users, eps, neighbour="add_remove", public_n=n, rng=seed + 1)
        paper = central_heatmap(users, eps, neighbour="add_remove", budget="paper",
                                rng=seed + 1)
        sm = rel.smoothed(method=method)
        ests = {"ours": sm.estimate, "ours none": rel.estimate,
                "today": today_default(paper), "today none": paper.estimate,
                **baseline_estimates(agg, eps, seed)}
        for m, e in ests.items():
            r = all_metrics(truth, gaussian_heatmap(e, sigma), grid)
            out[m].append([r[k] for k in KEYS])
        if kind == "spike":
            p = spike_pixel(side)
            r0, c0 = divmod(p, side)
            within.append(float(sm.estimate[r0 - 1:r0 + 2, c0 - 1:c0 + 2].sum()))
    return kind, eps, n, {m: np.array(v) for m, v in out.items()}, within


def ci(a: np.ndarray) -> tuple[float, float]:
    """Mean and 95% normal half-width."""
    half = 1.96 * a.std(ddof=1) / np.sqrt(a.size) if a.size > 1 else float("nan")
    return float(a.mean()), float(half)


def verdict(ours: np.ndarray, other: np.ndarray, higher: bool) -> str:
    """"win", "tie" or "loss" of ours against other on one metric: the paired differences
    (same data, trial by trial) have a 95% normal interval that excludes 0 in our favour
    (win) or against us (loss); otherwise a tie."""
    d = (ours - other) * (1.0 if higher else -1.0)  # > 0: ours better
    mu, half = ci(d)
    if mu - half > 0:
        return "win"
    if mu + half < 0:
        return "loss"
    return "tie"


def against_baselines(res: dict, j: int, k: str) -> str:
    """A win needs a win against all three baselines, a loss a loss against any."""
    vs = [verdict(res["ours"][:, j], res[b][:, j], k in HIGHER) for b in BASELINES]
    return "loss" if "loss" in vs else "win" if all(x == "win" for x in vs) else "tie"


def report(kind: str, eps: float, n: int, res: dict, within: list, table: dict,
           ratios: list) -> None:
    print(f"\n{kind}  eps={eps:g}  n={n}")
    print(f"  {'method':10s}" + "".join(f"{k.upper():>18s}" for k in KEYS))
    for m in METHODS:
        cells = [ci(res[m][:, j]) for j in range(len(KEYS))]
        print(f"  {m:10s}" + "".join(f"{mu:10.4f} +/-{h:6.4f}" for mu, h in cells))
    r_same = res["ours"][:, 0].mean() / res["ours none"][:, 0].mean()
    r_today = res["ours"][:, 0].mean() / res["today none"][:, 0].mean()
    ratios.append((kind, eps, n, r_same, r_today))
    line_b, line_t = [], []
    for j, k in enumerate(KEYS):
        vb = against_baselines(res, j, k)
        vt = verdict(res["ours"][:, j], res["today"][:, j], k in HIGHER)
        table["baselines"][k][vb] += 1
        table["today"][k][vt] += 1
        line_b.append(f"{k} {vb}")
        line_t.append(f"{k} {vt}")
    def better(m: str, j: int, k: str) -> bool:
        o, x = res["ours"][:, j].mean(), res[m][:, j].mean()
        return bool(o > x) if k in HIGHER else bool(o < x)

    table["all_mean"] += all(better(b, j, k) for b in BASELINES for j, k in enumerate(KEYS))
    table["all_ci"] += all(x.endswith("win") for x in line_b)
    table["today_mean"] += all(better("today", j, k) for j, k in enumerate(KEYS))
    print("  against all three baselines: " + ", ".join(line_b))
    print("  against today's default:     " + ", ".join(line_t))
    print(f"  EMD ours / Alg. 2 same split = {r_same:.3f}; / Alg. 2 printed split = "
          f"{r_today:.3f} (target <= 1.05)")
    if within:
        w = np.array(within)
        print(f"  spike: share within 1 px = {w.mean():.3f} +/- "
              f"{1.96 * w.std(ddof=1) / np.sqrt(w.size):.3f} (min {w.min():.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--spike-side", type=int, default=None,
                    help="grid of the spike part (default --side; the target is stated at "
                         "256x256: --data spike --eps 1 --spike-side 256)")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--sigma", type=float, default=None,
                    help="heatmap filter in px (default 2 px at 256, scaled with the side)")
    ap.add_argument("--data", default="population,elongated,spike")
    ap.add_argument("--eps", default=",".join(f"{e:g}" for e in EPS))
    ap.add_argument("--n", default=",".join(str(n) for n in NS))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--method", choices=("density", "posterior"), default="posterior",
                    help="ours = HeatmapRelease.smoothed(method=...): the count posterior "
                         "(the default) or the pyramid density (the previous default)")
    a = ap.parse_args()
    eps = [float(x) for x in a.eps.split(",")]
    ns = [int(x) for x in a.n.split(",")]
    jobs = []
    for kind in a.data.split(","):
        side = (a.spike_side or a.side) if kind == "spike" else a.side
        sigma = a.sigma if a.sigma is not None else 2.0 * side / 256
        pts = [(e, n) for e in eps for n in ns] if kind != "spike" else \
            [(e, n) for e in eps for n in (200,)]
        jobs += [(kind, side, e, n, a.trials, sigma, a.method) for e, n in pts]
    print(f"{len(jobs)} points x {a.trials} trials; ours = smoothed(method={a.method!r}); "
          f"grid {a.side} "
          f"(spike {a.spike_side or a.side}); "
          f"heatmap filter sigma = 2 px per 256 px of side; central, add/remove (ours with n "
          f"declared public for the budget rule); means with 95% normal intervals; win/loss "
          f"= the paired 95% interval excludes 0")
    table: dict = {w: {k: {"win": 0, "tie": 0, "loss": 0} for k in KEYS}
                   for w in ("baselines", "today")}
    table.update(all_mean=0, all_ci=0, today_mean=0)
    ratios: list = []
    with ProcessPoolExecutor(a.workers) as pool:
        for kind, e, n, res, within in pool.map(one_point, jobs):
            report(kind, e, n, res, within, table, ratios)
    for what, title in (("baselines", "ours against all three baselines (Laplace, top-1%, "
                                      "top-0.1%)"),
                        ("today", "ours against today's default")):
        print(f"\n== {title}: points won / tied / lost of {len(jobs)} ==")
        for k in KEYS:
            c = table[what][k]
            print(f"  {k.upper():4s} {c['win']:4d} / {c['tie']:4d} / {c['loss']:4d}")
    print(f"\n== all four metrics at once: ours beats all three baselines on the means at "
          f"{table['all_mean']} of {len(jobs)} points, with paired 95% intervals at "
          f"{table['all_ci']}; beats today's default on all four means at "
          f"{table['today_mean']} ==")
    same = np.array([r[3] for r in ratios])
    today = np.array([r[4] for r in ratios])
    print(f"\n== EMD ours / Alg. 2 on the same split: {same.min():.2f}-{same.max():.2f}, "
          f"above 1.05 at {(same > 1.05).sum()} of {same.size}; / Alg. 2 on the printed split "
          f"(today's --smoothing none): {today.min():.2f}-{today.max():.2f}, above 1.05 at "
          f"{(today > 1.05).sum()} ==")
    for kind, e, n, r1, r2 in ratios:
        if r1 > 1.05 or r2 > 1.05:
            print(f"  {kind} eps={e:g} n={n}: {r1:.3f} / {r2:.3f}")


if __name__ == "__main__":
    main()
