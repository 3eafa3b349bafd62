"""Data-driven post-processings of the noisy pyramid tried against the default release's
remaining losses: what each lead changes in the verdicts.

Every lead is a function of the released level counts and the public noise scales only
(post-processing, no privacy cost); each replaces one step of
:func:`shuffledp.analyzers.heatmap.posterior.count_posterior` and keeps the rest (the level
check and the sparsity test):

* ``sure centre``: the blurred-leaf prior's bandwidth chosen per release among
  :data:`BANDWIDTHS` by an unbiased risk estimate instead of the fixed ``LEAF_BLUR``. For a
  linear smoother ``K`` of the least-squares leaf ``z`` (unbiased for the users' histogram
  ``x``, covariance ``C`` known from the public scales),
  ``E||K z - x||^2 = E||K z - z||^2 - tr C + 2 tr(K C)`` (Stein's unbiased risk estimate
  in its linear form, exact for any noise distribution). ``C`` of the hierarchical
  least-squares leaf depends only on the level of two pixels' deepest common cell
  (:func:`tree_covariances`), so ``tr(K C)`` of a separable Gaussian blur is a sum over
  levels of products of per-axis block sums (:func:`blur_trace`);
* ``sure smoother``: that risk-chosen blur of the clipped leaf as the leaf estimate itself
  (no posterior), wherever the default takes the posterior;
* ``background``: the default estimate mixed with the next coarser level's least-squares
  estimates spread over their cells (weight 0.1: a data-derived floor for KL);
* ``always leaf``: the blurred-leaf centre wherever the sd ratio is within the gate, whatever
  the level check says (the adopted rule switches only where the density-centred leaf
  fails it);
* ``level cv``: at the same points the centre (pyramid density or blurred leaf) chosen by
  how well each, built without the next coarser level, predicts that level's noisy counts
  (independent noise; unbiased up to a constant).

The leads' blurred-leaf centres are isotropic (``LEAF_BLUR``); ``default`` is the current
:func:`~shuffledp.analyzers.heatmap.posterior.count_posterior` (docs/errata.md quotes a run
made before its centre between the gates became the oriented blur).

For each lead and point it prints the verdicts against the three baselines (as
``bench/smoothing_grid.py``: ``W`` win, ``t`` tie, ``L`` loss per EMD, KL, CC, SIM; same
data, seeds and metrics, imported from it) of the default and the lead, the EMD ratio to
Alg. 2 as printed, and per lead the verdicts gained and lost. With ``--bandwidths`` it also
prints, per point, the bandwidth the risk estimate picks and the one that minimises the
squared error to the truth.

    python bench/smoothing_leads.py [--trials 12] [--leads sure centre,always leaf]
        [--points losses|controls|all] [--bandwidths]

Runs points in a process pool (all cores). 64x64 only (the covariance formula assumes a
square grid of side a power of two).

References
----------
.. [Stein81] Stein (1981), "Estimation of the mean of a multivariate normal distribution"
   -- full entry in docs/references.md
.. [Hay10] Hay et al. (2010), "Boosting the accuracy of DP histograms through consistency"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import argparse
import os
import sys
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoothing_grid as sg  # noqa: E402

from shuffledp.analyzers.heatmap import posterior as post  # noqa: E402
from shuffledp.analyzers.heatmap.central import central_heatmap  # noqa: E402
from shuffledp.analyzers.heatmap.metrics import all_metrics  # noqa: E402
from shuffledp.analyzers.heatmap.release import normalise  # noqa: E402
from shuffledp.analyzers.heatmap.render import gaussian_heatmap  # noqa: E402
from shuffledp.analyzers.heatmap.smoothing import (  # noqa: E402
    _background,
    level_sums,
    pyramid_density,
)
from shuffledp.analyzers.heatmap.sparsity import concentrate, point_mass_fit  # noqa: E402
from shuffledp.grid import Grid  # noqa: E402

#: the bandwidths (Gaussian sd, px) the risk estimate chooses among
BANDWIDTHS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
LEADS = ("sure centre", "sure smoother", "background", "always leaf", "level cv")
#: the default's losses against the baselines on the 64x64 grid (12 trials) before this study
LOSSES = [("population", 1.0, 500), *[("population", 2.0, n) for n in (50, 100, 200, 500,
                                                                       1000, 2000)],
          *[("population", 5.0, n) for n in (50, 100, 200, 500)], ("population", 10.0, 50),
          *[("elongated", e, n) for e in (0.5, 1.0, 2.0, 5.0) for n in (50, 200, 1000, 2000)],
          ("elongated", 10.0, 50), ("spike", 0.1, 200)]
#: points the default wins where a lead could cost something
CONTROLS = [("elongated", 2.0, 10000), ("elongated", 5.0, 1000), ("elongated", 2.0, 5000),
            ("population", 1.0, 10000), ("population", 2.0, 5000), ("population", 5.0, 1000),
            ("elongated", 10.0, 200), ("population", 10.0, 200)]


def tree_covariances(variances: list[float]) -> list[float]:
    """``c[l]``: the covariance of two leaf pixels of the hierarchical least-squares leaf
    whose deepest common cell is at level ``l`` (``l = 0`` the start level; the last entry
    is a pixel's variance; pixels in different start cells are uncorrelated). ``variances``
    are the final estimates' variances per level (one number per level: a square grid of
    side a power of two, four children per cell). A cell's total is the sum of its pixels,
    so its variance ``S_l = 4 S_{l+1} + (m_l^2 - 4 m_{l+1}^2) c_l`` with ``m_l`` pixels per
    cell."""
    s = [float(v) for v in variances]
    c = [0.0] * len(s)
    c[-1] = s[-1]
    m_next = 1
    for lev in range(len(s) - 2, -1, -1):
        m = 4 * m_next
        c[lev] = (s[lev] - 4.0 * s[lev + 1]) / (m * m - 4.0 * m_next * m_next)
        m_next = m
    return c


def _kernel(n: int, h: float) -> np.ndarray:
    """The per-axis matrix of ``posterior._blur`` (dense; each source's weights sum to 1)."""
    x = np.arange(n, dtype=float)
    k = np.exp(-(x[:, None] - x[None, :]) ** 2 / (2.0 * h * h))
    return k / k.sum(axis=0, keepdims=True)


def blur_trace(shape: tuple[int, int], h: float, c: list[float]) -> float:
    """``tr(K C)`` for the separable blur ``K`` of sd ``h`` and the tree covariance ``c``
    (:func:`tree_covariances`): ``C = sum_l (c_l - c_{l-1}) B_l`` with ``B_l`` the indicator
    of sharing a level-``l`` cell, and ``tr(K B_l)`` the product over the two axes of the
    kernel's sums within blocks of the cells' side."""
    kr, kc = _kernel(shape[0], h), _kernel(shape[1], h)
    top = len(c) - 1
    out = 0.0
    for lev in range(len(c)):
        shift = top - lev
        br, bc = np.arange(shape[0]) >> shift, np.arange(shape[1]) >> shift
        t = float((kr * (br[:, None] == br[None, :])).sum()) \
            * float((kc * (bc[:, None] == bc[None, :])).sum())
        out += (c[lev] - (c[lev - 1] if lev > 0 else 0.0)) * t
    return out


def sure_risks(z: np.ndarray, variances: list[float], hs=BANDWIDTHS) -> np.ndarray:
    """The unbiased estimate of ``E||K_h z - x||^2`` for every bandwidth ``h`` in ``hs``."""
    c = tree_covariances(variances)
    tr_c = z.size * c[-1]
    return np.array([float(((post._blur(z, h) - z) ** 2).sum()) - tr_c
                     + 2.0 * blur_trace(z.shape, h, c) for h in hs])


def _finish(q, levels, fin, fvar, prior_lv, total, grid, start, scales):
    """count_posterior's level check, hand-down and sparsity test, from the leaf ``q``."""
    sums, disc = post._level_fit(q, fin, fvar, grid, start)
    est, _ = post._checked_leaf(q, sums, disc, fin, fvar, prior_lv, total, start,
                                post.UNIFORM_SHARES)
    return concentrate(est / est.sum(), point_mass_fit(levels, grid, start, scales))


def _centred(fin, fvar, total, h):
    centre = post._blur(np.maximum(fin[-1], 0.0), h)
    centre = centre / centre.sum()
    return post._posterior_means(fin[-1], fvar[-1], centre, total, (0.0,))[0]


def lead_estimate(lead: str, levels, grid: Grid, start: int, scales) -> np.ndarray:
    """The release post-processed by the default with one step replaced by ``lead``."""
    levels = [np.asarray(x, dtype=float) for x in levels]
    scales = [float(x) for x in scales]
    if lead == "default":
        return post.count_posterior(levels, grid, start, scales)[0]
    fin, fvar = post._two_pass(levels, np.asarray(scales))
    pmap = pyramid_density(levels, grid, start, scales)
    prior_lv = level_sums(pmap, grid, start)
    total = max(float(fin[0].sum()), 1.0)
    pixel_sd = float(np.sqrt(fvar[-1].mean()))
    ratio = pixel_sd * float(np.sum(1.0 / np.asarray(scales))) / np.sqrt(2.0)
    variances = [float(v.mean()) for v in fvar]
    lattice, gated = pixel_sd <= post.LATTICE_SD, ratio <= post.LEAF_PRIOR_RATIO

    def density_centred():
        return post._posterior_means(fin[-1], fvar[-1], prior_lv[-1], total,
                                     post.UNIFORM_SHARES)[0]

    def rejected(q):
        return max(post._discrepancies(q, fin, fvar, grid, start)) > post.CONSISTENCY

    if lead == "background":
        est = post.count_posterior(levels, grid, start, scales)[0]
        k = 1 if len(levels) > 1 else 0
        bg = _background(np.maximum(fin[k], 0.0) + np.sqrt(fvar[k] / 2.0), grid, start + k)
        return 0.9 * est + 0.1 * bg
    if not gated:
        q = density_centred() if lattice else pmap * total
        return _finish(q, levels, fin, fvar, prior_lv, total, grid, start, scales)
    if lead == "sure centre":
        h = BANDWIDTHS[int(np.argmin(sure_risks(fin[-1], variances)))]
        q = density_centred() if lattice else None
        if q is None or rejected(q):
            q = _centred(fin, fvar, total, h)
    elif lead == "sure smoother":
        h = BANDWIDTHS[int(np.argmin(sure_risks(fin[-1], variances)))]
        q = np.maximum(post._blur(np.maximum(fin[-1], 0.0), h), 1e-12)
        q = q / q.sum() * total
    elif lead == "always leaf":
        q = _centred(fin, fvar, total, post.LEAF_BLUR)
    elif lead == "level cv":
        q = density_centred() if lattice else _centred(fin, fvar, total, post.LEAF_BLUR)
        if lattice:
            q = _level_cv(levels, grid, start, scales, q, fin, fvar, total)
    else:
        raise ValueError(f"unknown lead {lead!r}")
    return _finish(q, levels, fin, fvar, prior_lv, total, grid, start, scales)


def _level_cv(levels, grid, start, scales, q_density, fin, fvar, total):
    """The centre whose leaf, built without level depth - 1, predicts that level's noisy
    counts better (squared error; the level's noise is independent of the rest)."""
    k = len(levels) - 2
    held = list(scales)
    held[k] = 1e9  # the level's weight in the least-squares estimate ~ 0
    f2, v2 = post._two_pass(levels, np.asarray(held))
    t2 = max(float(f2[0].sum()), 1.0)
    pm = level_sums(pyramid_density(levels[:k] + [levels[k] * 0.0] + levels[k + 1:], grid,
                                    start, held), grid, start)[-1]
    cands = [post._posterior_means(f2[-1], v2[-1], pm, t2, post.UNIFORM_SHARES)[0],
             _centred(f2, v2, t2, post.LEAF_BLUR)]
    err = [float(((level_sums(c, grid, start)[k] - levels[k]) ** 2).sum()) for c in cands]
    return q_density if err[0] <= err[1] else _centred(fin, fvar, total, post.LEAF_BLUR)


def one_point(args: tuple) -> tuple:
    kind, eps, n, trials, leads, bandwidths = args
    side = 64
    grid, sigma = Grid(side, side), 2.0 * side / 256
    out: dict[str, list] = {m: [] for m in ("default", *leads, "today none", *sg.BASELINES)}
    picks = []
    for t in range(trials):
        seed = zlib.crc32(repr((kind, eps, n, t)).encode()) % 2**31
        users = sg.make_users(kind, side, n, seed)
        agg = users.aggregate()
        truth = gaussian_heatmap(normalise(agg), sigma)
        rel = central_heatmap(users, eps, neighbour="add_remove", public_n=n, rng=seed + 1)
        paper = central_heatmap(users, eps, neighbour="add_remove", budget="paper",
                                rng=seed + 1)
        start, scales = int(rel.parameters["start_level"]), rel.noise_scales()
        ests = {m: lead_estimate(m, rel.levels, grid, start, scales)
                for m in ("default", *leads)}
        ests.update({"today none": paper.estimate, **sg.baseline_estimates(agg, eps, seed)})
        for m, e in ests.items():
            r = all_metrics(truth, gaussian_heatmap(e, sigma), grid)
            out[m].append([r[k] for k in sg.KEYS])
        if bandwidths:
            fin, fvar = post._two_pass([np.asarray(x, float) for x in rel.levels],
                                       np.asarray(scales))
            risk = sure_risks(fin[-1], [float(v.mean()) for v in fvar])
            true = [float(((post._blur(fin[-1], h) - agg) ** 2).sum()) for h in BANDWIDTHS]
            picks.append((BANDWIDTHS[int(np.argmin(risk))],
                          BANDWIDTHS[int(np.argmin(true))]))
    return kind, eps, n, {m: np.array(v) for m, v in out.items()}, picks


def verdicts(res: dict, who: str) -> str:
    out = ""
    for j, k in enumerate(sg.KEYS):
        vs = [sg.verdict(res[who][:, j], res[b][:, j], k in sg.HIGHER) for b in sg.BASELINES]
        out += "L" if "loss" in vs else "W" if all(x == "win" for x in vs) else "t"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--leads", default=",".join(LEADS))
    ap.add_argument("--points", choices=("losses", "controls", "all"), default="all")
    ap.add_argument("--bandwidths", action="store_true",
                    help="also print the risk estimate's bandwidth against the truth's")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    leads = [x.strip() for x in a.leads.split(",")]
    if any(x not in LEADS for x in leads):
        raise SystemExit(f"--leads must be among {LEADS}, got {a.leads!r}")
    pts = {"losses": LOSSES, "controls": CONTROLS, "all": LOSSES + CONTROLS}[a.points]
    jobs = [(k, e, n, a.trials, leads, a.bandwidths) for k, e, n in pts]
    rank = {"L": 0, "t": 1, "W": 2}
    tally = {m: [0, 0, 0.0] for m in leads}
    print(f"{len(jobs)} points x {a.trials} trials, 64x64; verdicts against the three "
          f"baselines per EMD KL CC SIM (W win, t tie, L loss; paired 95% intervals); "
          f"EMD ratio = ours / Alg. 2 as printed")
    with ProcessPoolExecutor(a.workers) as pool:
        for kind, e, n, res, picks in pool.map(one_point, jobs):
            alg2 = res["today none"][:, 0].mean()
            base = verdicts(res, "default")
            line = f"{kind:10s} eps={e:<4g} n={n:<6d} default {base} " \
                   f"({res['default'][:, 0].mean() / alg2:.2f})"
            for m in leads:
                v = verdicts(res, m)
                ratio = res[m][:, 0].mean() / alg2
                tally[m][0] += sum(rank[y] > rank[x] for x, y in zip(base, v, strict=True))
                tally[m][1] += sum(rank[y] < rank[x] for x, y in zip(base, v, strict=True))
                tally[m][2] = max(tally[m][2], ratio)
                line += f" | {m} {v} ({ratio:.2f})"
            print(line, flush=True)
            if picks:
                print("    bandwidth picked by the risk estimate / by the truth: "
                      + ", ".join(f"{p:g}/{q:g}" for p, q in picks))
    print("\n== per lead: (point, metric) verdicts better / worse than the default; "
          "largest EMD ratio to Alg. 2 as printed ==")
    for m, (b, w, r) in tally.items():
        print(f"  {m:14s} better {b:3d}  worse {w:3d}  EMD ratio <= {r:.2f}")


if __name__ == "__main__":
    main()
