"""Is there any leaf share at which the default release wins where it loses? The split frontier.

``python bench/smoothing_grid.py`` leaves the default release (the pyramid mechanism of
[Ghazi23]_ Alg. 1-2 with ``budget="auto"``, smoothed by ``HeatmapRelease.smoothed()``) behind
the Laplace, top-1% or top-0.1% baseline ([Ghazi23]_ Sec. 4) on KL, CC or SIM at some
(data, eps, n). ``bench/smoothing_oracle.py`` puts those losses on the measurement: the leaf
level gets too small a share of eps. This bench asks the direct question: at each such
point, is there ANY leaf share p at which the smoothed release wins all four metrics (EMD,
KL, CC, SIM) against the three baselines AND keeps its EMD <= 1.05x that of Alg. 2 as
printed (Reconstruct's output on the printed split, ``budget="paper"``, no smoothing)? If no
p does at a point, the two conditions cannot both hold there for this family of splits,
whatever rule (of public numbers, or privately measured, in one round or two) picks p.

The family: the leaf level (the finest, ``top``) gets ``p eps``, the coarse levels
``start..top - 1`` split ``(1 - p) eps`` with the printed gamma-decay, exactly as
:func:`shuffledp.accounting.budget.auto_level_budgets` builds its split
(:func:`split_budgets`; both pass through ``exact_at_most``). The shares tried are the
printed split's own leaf share (``printed``: ``budget="paper"``), the auto rule's (``auto``:
``budget="auto"`` with n public, the default) and 0.1, 0.2, ..., 0.9 (``--shares``). The
library has no public argument for a custom split; for the numeric shares the bench
replaces, inside its own worker processes only, the name ``auto_level_budgets`` that
``central_heatmap`` calls (:func:`leaf_share_fixed`; restored on exit), so the release is the
library's own: same noise sampler and seed, same Reconstruct, the split recorded in
``parameters["level_epsilons"]`` and its effective budgets, which ``.smoothed()`` reads as the
public noise scales. The first trial of every point checks that the recorded split is the
one asked for and that :func:`shuffledp.analyzers.heatmap.central.noisy_counts` with it and
the same seed gives the release's level counts bit for bit; at start-up it checks that
:func:`split_budgets` at the auto rule's share is the auto rule's split.

Data, seeds, baselines, metrics (on heatmaps after the Gaussian filter of Sec. 2.3, sigma
2 px per 256 px of side, on both sides) and verdicts are imported from
``bench/smoothing_grid.py``: per trial the same users and the same noise seed for every p
(paired across shares as well as against the baselines); a win on a metric needs the paired
95% normal interval of the trial-by-trial difference to exclude 0 in our favour against each
of the three baselines, a loss is a loss against any one. Per point it prints one row per p:
the smoothed release's means, its verdicts (``W`` win, ``t`` tie, ``L`` loss; EMD, KL, CC,
SIM), the EMD ratio to Alg. 2 as printed on the same trials (mean over mean, with a
delta-method 95% half-width), the unsmoothed output's verdicts on the same split, and
``*`` where all four means beat every baseline's. The summary line per point gives the
shares where all four are won (intervals; and on the means), the shares where the EMD ratio
is <= 1.05, and whether the two sets meet. ``--oracle`` adds, per p, the verdicts of
``bench/smoothing_oracle.py``'s oracle (the best member of its post-processing family per
trial and metric, read off the truth: a bound, not a release) on the same releases, and the
oracle's EMD over Alg. 2 as printed.

    python bench/split_frontier.py [--trials 12] [--points 0,3,8] [--shares printed,auto,0.5]
        [--oracle]

Points run as (point, trial) jobs in a process pool (all cores).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from smoothing_grid import (  # noqa: E402  (the grid bench's data, metrics and verdicts)
    BASELINES,
    HIGHER,
    KEYS,
    against_baselines,
    baseline_estimates,
    make_users,
    spike_pixel,
)

from shuffledp.accounting.budget import (  # noqa: E402
    DEFAULT_GAMMA,
    auto_level_budgets,
    exact_at_most,
    level_budgets,
)
from shuffledp.analyzers.heatmap import central  # noqa: E402
from shuffledp.analyzers.heatmap.central import (  # noqa: E402
    central_heatmap,
    measured_levels,
    noisy_counts,
)
from shuffledp.analyzers.heatmap.metrics import all_metrics  # noqa: E402
from shuffledp.analyzers.heatmap.release import normalise  # noqa: E402
from shuffledp.analyzers.heatmap.render import gaussian_heatmap  # noqa: E402
from shuffledp.grid import Grid  # noqa: E402

#: (data, eps, n): the points where the default release loses (docs/errata.md, 64x64).
POINTS = (
    ("population", 2.0, 500),
    ("population", 5.0, 100),
    ("population", 10.0, 50),
    ("population", 1.0, 500),
    ("elongated", 2.0, 200),
    ("elongated", 5.0, 100),
    ("elongated", 10.0, 50),
    ("elongated", 1.0, 500),
    ("spike", 0.1, 200),
)
SHARES = ("printed", "auto", *(f"{k / 10:g}" for k in range(1, 10)))
EMD_TARGET = 1.05
W = 20  # central_heatmap's default w (sets the start level)


def split_budgets(epsilon: float, start: int, top: int, p: float,
                  gamma: float = DEFAULT_GAMMA) -> np.ndarray:
    """The leaf level ``top`` gets ``p epsilon``, levels ``start..top - 1`` split the rest by
    the printed gamma-decay: the construction of ``auto_level_budgets`` with p given."""
    eps = float(epsilon)
    return exact_at_most(np.append(level_budgets(eps * (1.0 - p), start, top - 1, gamma),
                                   eps * p), eps)


@contextmanager
def leaf_share_fixed(p: float) -> Iterator[None]:
    """Within this process, ``central_heatmap(budget="auto")`` releases with leaf share p.

    A monkeypatch, for this bench only: ``central_heatmap`` takes no custom split, and its
    ``"auto"`` branch calls the module-level name ``central.auto_level_budgets`` (imported
    there by name). That name is pointed at :func:`split_budgets` with share ``p`` for the
    duration of the ``with`` block and restored afterwards; nothing else of the release
    changes (the record's ``budget_rule`` still reads "auto", its ``level_epsilons`` and
    ``leaf_share`` are the split actually used)."""
    original = central.auto_level_budgets

    def fixed(epsilon, start, top, n_pixels, n_public=None, gamma=DEFAULT_GAMMA):
        return split_budgets(epsilon, start, top, p, gamma)

    central.auto_level_budgets = fixed
    try:
        yield
    finally:
        central.auto_level_budgets = original


def release(users, eps: float, n: int, share: str, seed: int):
    """The central release (add/remove, n declared public, noise seed ``seed + 1`` as the
    grid bench) with the split named by ``share``."""
    if share == "printed":
        return central_heatmap(users, eps, neighbour="add_remove", budget="paper",
                               rng=seed + 1)
    if share == "auto":
        return central_heatmap(users, eps, neighbour="add_remove", public_n=n, rng=seed + 1)
    with leaf_share_fixed(float(share)):
        return central_heatmap(users, eps, neighbour="add_remove", public_n=n, rng=seed + 1)


def check_release(rel, users, eps: float, share: str, seed: int) -> None:
    """The recorded split is the one asked for, and the library's noisy_counts with it and
    the same seed gives the release's level counts bit for bit."""
    start, top = int(rel.parameters["start_level"]), int(rel.parameters["top_level"])
    want = (level_budgets(eps, start, top) if share == "printed" else
            auto_level_budgets(eps, start, top, users.grid.n_pixels, users.n_users)
            if share == "auto" else split_budgets(eps, start, top, float(share)))
    got = np.asarray(rel.parameters["level_epsilons"])
    assert np.array_equal(got, want), f"split {share}: recorded {got}, wanted {want}"
    again = noisy_counts(users, want, start, neighbour="add_remove", rng=seed + 1)
    assert all(np.array_equal(a, b) for a, b in zip(again, rel.levels, strict=True)), \
        f"split {share}: level counts not reproduced by noisy_counts"


def oracle_scores(rel, sm, truth, sigma: float, grid: Grid) -> dict:
    """bench/smoothing_oracle.py's family of post-processings of ``rel``, scored."""
    import smoothing_oracle as so  # heavy: only with --oracle

    from shuffledp.analyzers.heatmap.posterior import hierarchical_estimates
    start = int(rel.parameters["start_level"])
    fin, fvar = hierarchical_estimates(list(rel.levels), grid, start, rel.noise_scales())
    leaf, var = fin[-1], fvar[-1]
    total = max(float(fin[0].sum()), 1.0)
    dens = rel.smoothed(method="density").estimate
    fam = so.family(leaf, var, total, {"dens": dens, "ls1.5": so.blur(so.nonneg(leaf), 1.5)},
                    {"post": sm, "dens": dens, "alg2": rel.estimate})
    return so.score(truth, fam, sigma, grid)


def one_trial(args: tuple) -> tuple:
    """Metrics of every share (smoothed and not), the baselines and the spike share for one
    (point, trial); with ``oracle`` also the oracle family's scores per share."""
    kind, side, eps, n, t, sigma, shares, oracle = args
    grid = Grid(side, side)
    seed = zlib.crc32(repr((kind, eps, n, t)).encode()) % 2**31  # the grid bench's
    users = make_users(kind, side, n, seed)
    agg = users.aggregate()
    truth = gaussian_heatmap(normalise(agg), sigma)

    def metrics(e: np.ndarray) -> list[float]:
        r = all_metrics(truth, gaussian_heatmap(e, sigma), grid)
        return [r[k] for k in KEYS]

    base = {b: metrics(e) for b, e in baseline_estimates(agg, eps, seed).items()}
    sm_m, raw_m, leaf, within, orc = {}, {}, {}, {}, {}
    for s in dict.fromkeys(("printed", *shares)):
        rel = release(users, eps, n, s, seed)
        if t == 0:
            check_release(rel, users, eps, s, seed)
        sm = rel.smoothed().estimate
        sm_m[s], raw_m[s] = metrics(sm), metrics(rel.estimate)
        leaf[s] = float(rel.parameters["leaf_share"])
        if kind == "spike":
            r0, c0 = divmod(spike_pixel(side), side)
            within[s] = float(sm[r0 - 1:r0 + 2, c0 - 1:c0 + 2].sum())
        if oracle and s in shares:
            orc[s] = oracle_scores(rel, sm, truth, sigma, grid)
    return kind, eps, n, t, base, sm_m, raw_m, leaf, within, orc


def ratio_ci(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """mean(a) / mean(b) over paired trials and its delta-method 95% half-width."""
    r = a.mean() / b.mean()
    half = 1.96 * np.std(a - r * b, ddof=1) / np.sqrt(a.size) / b.mean() if a.size > 1 \
        else float("nan")
    return float(r), float(half)


def verdicts(ours: np.ndarray, base: dict) -> list[str]:
    """Per metric: win / tie / loss against all three baselines (the grid bench's rule)."""
    res = {"ours": ours, **base}
    return [against_baselines(res, j, k) for j, k in enumerate(KEYS)]


def means_beat(ours: np.ndarray, base: dict) -> bool:
    """All four means better than every baseline's."""
    m = ours.mean(axis=0)
    return all((m[j] > base[b][:, j].mean()) if k in HIGHER else (m[j] < base[b][:, j].mean())
               for b in BASELINES for j, k in enumerate(KEYS))


def letters(v: list[str]) -> str:
    return "".join({"win": "W", "tie": "t", "loss": "L"}[x] for x in v)


def report(kind: str, eps: float, n: int, trials: list, shares: list[str],
           oracle: bool, side: int) -> str:
    """Print the point's table; return its summary line."""
    trials = sorted(trials, key=lambda r: r[3])
    base = {b: np.array([r[4][b] for r in trials]) for b in BASELINES}
    sm = {s: np.array([r[5][s] for r in trials]) for s in trials[0][5]}
    raw = {s: np.array([r[6][s] for r in trials]) for s in trials[0][6]}
    leaf = trials[0][7]
    printed_emd = raw["printed"][:, 0]
    print(f"\n{kind}  eps={eps:g}  n={n}  (d = eps n / N = {eps * n / side**2:.3f} on "
          f"{side}x{side}; {len(trials)} trials)")
    for b in BASELINES:
        mu = base[b].mean(axis=0)
        print(f"  {b:9s} {'':6s}" + "".join(f"{x:9.4f}" for x in mu))
    mu = raw["printed"].mean(axis=0)
    print(f"  {'Alg.2 prn':9s} {leaf['printed']:6.3f}" + "".join(f"{x:9.4f}" for x in mu)
          + f"  {letters(verdicts(raw['printed'], base))}")
    print(f"  {'share':9s} {'p':>6s}" + "".join(f"{k.upper():>9s}" for k in KEYS)
          + "  smooth  EMD/printed      raw" + ("  oracle  EMD/prn" if oracle else "")
          + ("  within1px" if kind == "spike" else ""))
    won, won_means, emd_ok, won_oracle = [], [], [], []
    for s in shares:
        v = verdicts(sm[s], base)
        r, h = ratio_ci(sm[s][:, 0], printed_emd)
        star = "*" if means_beat(sm[s], base) else " "
        line = (f"  {s:9s} {leaf[s]:6.3f}" + "".join(f"{x:9.4f}" for x in sm[s].mean(axis=0))
                + f"  {letters(v)}{star}  {r:5.3f}+/-{h:5.3f}  {letters(verdicts(raw[s], base))}")
        if oracle:
            from smoothing_oracle import oracle as best  # noqa: PLC0415  (only with --oracle)
            o = np.stack([best([tr[9][s] for tr in trials], j, k)[0]
                          for j, k in enumerate(KEYS)], axis=1)
            vo = verdicts(o, base)
            line += f"  {letters(vo)} {o[:, 0].mean() / printed_emd.mean():5.3f}"
            if all(x == "win" for x in vo):
                won_oracle.append(s)
        if kind == "spike":
            w = np.array([tr[8][s] for tr in trials])
            line += f"  {w.mean():.3f}"
        print(line)
        label = f"{s}({leaf[s]:.2f})" if s in ("printed", "auto") else s
        if all(x == "win" for x in v):
            won.append(label)
        if star == "*":
            won_means.append(label)
        if r <= EMD_TARGET:
            emd_ok.append(label)
    both = [x for x in won if x in emd_ok]
    both_means = [x for x in won_means if x in emd_ok]
    return (f"{kind} eps={eps:g} n={n}: all four won at {{{', '.join(won)}}} (on the means "
            f"{{{', '.join(won_means)}}}); EMD <= {EMD_TARGET}x printed at "
            f"{{{', '.join(emd_ok)}}}; both: {{{', '.join(both)}}} (means: "
            f"{{{', '.join(both_means)}}}) -> "
            f"{'FEASIBLE at ' + ', '.join(both) if both else 'none'}"
            + (f"; oracle wins all four at {{{', '.join(won_oracle)}}}" if oracle else ""))


def parse_point(text: str) -> tuple[str, float, int]:
    """An index into :data:`POINTS`, or ``data:eps:n`` (eps a float, n an int, as the grid
    bench's seeds need them)."""
    if ":" not in text:
        return POINTS[int(text)]
    kind, e, n = text.split(":")
    if kind not in ("population", "elongated", "spike"):
        raise ValueError(f"--points: unknown data set {kind!r} in {text!r}")
    return kind, float(e), int(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--points", default="",
                    help="comma-separated indices into POINTS (default: all) or other points "
                         "as data:eps:n (e.g. population:0.1:200); POINTS: "
                         + "; ".join(f"{i} {k} eps={e:g} n={n}"
                                     for i, (k, e, n) in enumerate(POINTS)))
    ap.add_argument("--shares", default=",".join(SHARES),
                    help="leaf shares: 'printed', 'auto' and numbers in (0, 1)")
    ap.add_argument("--side", type=int, default=64)
    ap.add_argument("--oracle", action="store_true",
                    help="also the oracle of bench/smoothing_oracle.py per share (slow)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    shares = [s.strip() for s in a.shares.split(",") if s.strip()]
    for s in shares:
        if s not in ("printed", "auto") and not 0.0 < float(s) < 1.0:
            raise ValueError(f"--shares entries must be 'printed', 'auto' or in (0, 1), got {s!r}")
    pts = [parse_point(x) for x in a.points.split(",")] if a.points else list(POINTS)
    sigma = 2.0 * a.side / 256
    # the family's construction at the auto rule's share is the auto rule's split
    start, top = measured_levels(Grid(a.side, a.side), W)
    for _, e, n in pts:
        auto = auto_level_budgets(e, start, top, a.side * a.side, n)
        p = float(auto[-1] / e)
        if p > level_budgets(e, start, top)[-1] / e:
            assert np.array_equal(split_budgets(e, start, top, p), auto), (e, n)
    print(f"{len(pts)} points x {a.trials} trials, grid {a.side}, heatmap sigma {sigma:g} px; "
          f"central add/remove, n public for the auto rule; same data and seeds as "
          f"bench/smoothing_grid.py. Per share p (leaf level's share of eps, coarse levels "
          f"the rest by the printed decay): smoothed means, verdicts vs all three baselines "
          f"(W/t/L on EMD KL CC SIM, paired 95%; * = all four means beat every baseline), "
          f"EMD smoothed / Alg. 2 as printed (target <= {EMD_TARGET}), verdicts of the "
          f"unsmoothed output on that split.")
    jobs = [(k, a.side, e, n, t, sigma, shares, a.oracle)
            for k, e, n in pts for t in range(a.trials)]
    t0 = time.time()
    done: dict = {}
    summary = []
    with ProcessPoolExecutor(a.workers) as pool:
        for res in pool.map(one_trial, jobs):
            key = res[:3]
            done.setdefault(key, []).append(res)
            if len(done[key]) == a.trials:
                summary.append(report(*key, done.pop(key), shares, a.oracle, a.side))
    print(f"\n== summary ({a.trials} trials; {time.time() - t0:.0f} s) ==")
    for line in summary:
        print("  " + line)


if __name__ == "__main__":
    main()
