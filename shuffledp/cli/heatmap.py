"""``shuffledp heatmap``: the private heatmap of [Ghazi23]_ end to end.

Alg. 1 in the central model, the App. F summation protocol in the shuffle model (simulation
path, or the Dask backend), on built-in synthetic users (App. E.3) or a CSV / SNAP file, next
to the Laplace baselines; writes the estimate, the rendered heatmaps and ``report.json``.
Heavy modules (numpy's neighbours scipy, numba, the protocol) are imported inside the
command, so that ``shuffledp --help`` stays fast.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from shuffledp.accounting.guarantee import DEFAULT_NEIGHBOUR
from shuffledp.cli.common import (
    NONNEGATIVE,
    PERCENT,
    POSITIVE,
    SEED,
    UNIT,
    B_option,
    Command,
    allow_large_option,
    as_refusal,
    as_usage_error,
    delta_option,
    epsilon_option,
    force_option,
    grid_option,
    heatmap_memory,
    n_option,
    out_dir_option,
    parse_bbox,
    refuse_if_large,
    smoothing_method,
    smoothing_option,
    w_option,
    warn,
    write_npy,
    write_report,
)

#: Size of the built-in data set. Ghazi et al. (AAAI 2023) Sec. 4 use 200 users per 256x256
#: cell; on this synthetic mixture (20 clusters, 5 points per user) 200 users leave most
#: pixels empty and an eps = 1 release shows ~10 dots (CC ~0.15). With 2,000 users the
#: default run shows the clusters (CC ~0.7 against ~0.5 for the Laplace baseline,
#: ``python bench/first_run.py``); ``--n 200`` is the paper's size.
SYNTHETIC_USERS = 2000

#: ``--metrics fast`` computes the exact EMD (the slow metric, seconds per 256x256 heatmap)
#: for ours and the Laplace baseline only; ``full`` for every baseline.
METRIC_SETS = ("fast", "full", "none")


class _Progress:
    """Stage messages on stderr with elapsed time (quiet with --quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            click.echo(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", err=True)


@click.command("heatmap", cls=Command)
@click.option("--input", "input_path", type=click.Path(dir_okay=False), default=None,
              help="CSV with columns user_id,x,y[,weight] (x, y in [0,1)); default: built-in "
                   "synthetic Gaussian-mixture users (Ghazi et al. (AAAI 2023), App. E.3).")
@click.option("--format", "fmt", type=click.Choice(["csv", "snap"]), default="csv",
              show_default=True, help="Input format; snap = SNAP check-ins (tab separated).")
@click.option("--bbox", default=None,
              help="SNAP only: LAT_MIN,LAT_MAX,LON_MIN,LON_MAX mapped onto [0,1)^2.")
@n_option(default=None,
          help=f"Number of users of the built-in synthetic data set [default: "
               f"{SYNTHETIC_USERS}]; with --input the users are those of the file.")
@click.option("--data-seed", type=SEED, default=None,
              help="Generate another synthetic data set from this seed (not the noise's)  "
                   "[default: the built-in data set]")
@grid_option(default="256")
@epsilon_option(default=1.0)
@w_option()
@click.option("--model", type=click.Choice(["central", "shuffle"]), default="central",
              show_default=True,
              help="central: Alg. 1 with the noise added once to the true sum; shuffle: the "
                   "App. F summation protocol simulated end to end (--B, --delta).")
@click.option("--algorithm", type=click.Choice(["sparse", "dense", "auto"]), default="sparse",
              show_default=True,
              help="Central model: sparse = Ghazi et al. (AAAI 2023) Alg. 1-2 (error "
                   "~sqrt(k)/(eps n) on k-sparse data); dense = their App. D.1 (snap to level "
                   "floor(log2 sqrt(eps n)), Laplace noise, EMD projection; ~1/sqrt(eps n) "
                   "whatever the data); auto = the one with the smaller error bound, chosen "
                   "from public numbers only (--public-n, epsilon, the grid, --sparsity): no "
                   "privacy spent. The shuffle protocol runs the sparse algorithm only.")
@click.option("--public-n", "public_n", type=click.IntRange(min=1), default=None,
              help="--algorithm dense/auto: a public number of users for the level and the "
                   "choice. Required under add_remove (n is private there); default the "
                   "data's n under replace and zero_out (n public).")
@click.option("--sparsity", type=click.IntRange(min=1), default=None,
              help="--algorithm auto: public prior on the number of occupied cells k "
                   "[default: the number of pixels, no sparsity assumed].")
@B_option(default=256, help="Shuffle model: scaling factor B.")
@click.option("--rounding", type=click.Choice(["largest_remainder", "floor"]),
              default="largest_remainder", show_default=True,
              help="Shuffle model: how a user's level vector is scaled by B and rounded. "
                   "largest_remainder keeps every level summing to exactly B; floor is "
                   "Ghazi et al. (AAAI 2023) App. F's rounding (loses up to one unit per "
                   "non-zero cell, so the error falls visibly as B grows, Fig. 13).")
@delta_option(default=1e-5, help="Shuffle model: delta of the (epsilon, delta) guarantee.")
@click.option("--sigma", type=NONNEGATIVE, default=2.0, show_default=True,
              help="Gaussian filter sigma in pixels for the heatmaps and metrics "
                   "(Ghazi et al. (AAAI 2023), Sec. 2.3).")
@click.option("--top-percent", "top_percent", type=PERCENT, multiple=True,
              default=(1.0, 0.1), show_default=True,
              help="Thresholding baselines to run (repeatable).")
@click.option("--neighbour", type=click.Choice(["zero_out", "add_remove", "replace"]),
              default=DEFAULT_NEIGHBOUR.token, show_default=True,
              help="Neighbour relation of the guarantee, one default for both models: zero_out "
                   "(one user's contribution emptied, n public; sensitivity 1 per level, so the "
                   "shuffle protocol converges to the central release as B grows), add_remove "
                   "(central only: n private, the same noise) or replace (sensitivity 2).")
@click.option("--seed", type=SEED, default=None,
              help="Seed all noise (research: the report then says 'reproducible evaluation, "
                   "not a private release'); default: fresh OS entropy.")
@out_dir_option(writes=("estimate.npy", "heatmap.png", "report.json"), default="out")
@force_option()
@click.option("--metrics", "metric_set", type=click.Choice(METRIC_SETS), default="fast",
              show_default=True,
              help="fast: KL, CC, SIM, MSE, L1 for all, exact EMD for ours and the Laplace "
                   "baseline; full: exact EMD for every baseline too (slow: seconds per "
                   "256x256 heatmap); none: no metrics.")
@click.option("--no-metrics", is_flag=True, help="Same as --metrics none.")
@smoothing_option()
@click.option("--quiet", is_flag=True, help="No progress messages.")
@click.option("--backend", type=click.Choice(["local", "dask"]), default="local",
              show_default=True, help="Shuffle model: run in this process or on Dask "
              '(pip install "shuffledp[dask]").')
@click.option("--scheduler", default=None,
              help="--backend dask: scheduler ADDRESS (default: a LocalCluster, one worker "
                   "per core).")
@allow_large_option
@click.option("--evaluate/--release", "evaluate", default=None,
              help="--evaluate: an evaluation run, not a private release: also writes the "
                   "exact (non-private) heatmap, the Laplace baselines (further releases on "
                   "the same users), metrics against the truth and the number of users. "
                   "--release: a private release: writes only the estimate, its picture and "
                   "its guarantee. Default: --evaluate on the built-in synthetic data, "
                   "--release with --input or --budget-ledger.")
@click.option("--budget-ledger", "budget_ledger", type=click.Path(dir_okay=False), default=None,
              help="Charge this private release to a budget ledger before anything is "
                   "written: refused (exit 1, nothing written) if all the ledger's releases "
                   "would compose past its total. Concurrent runs are serialised by a lock; "
                   "the ledger is a hash-chained log (FILE, FILE.head, FILE.lock) whose "
                   "edited or deleted entries are refused. See shuffledp account compose.")
@click.option("--budget-epsilon", "budget_epsilon", type=POSITIVE, default=None,
              help="Total epsilon of a new --budget-ledger.")
@click.option("--budget-delta", "budget_delta", type=UNIT, default=None,
              help="Total delta of a new --budget-ledger.")
@click.pass_context
def heatmap(ctx, input_path, fmt, bbox, n, data_seed, grid, epsilon, w, model, B, rounding,
            delta, sigma, top_percent, neighbour, seed, out_dir, force, metric_set, no_metrics,
            smoothing, quiet, backend, scheduler, allow_large, evaluate=None, budget_ledger=None,
            budget_epsilon=None, budget_delta=None, algorithm="sparse", public_n=None,
            sparsity=None) -> None:
    """Private heatmap of users' distributions (Ghazi et al., AAAI 2023).

    A private release (--release; the default with --input or --budget-ledger) writes
    OUT/estimate.npy (float64, shape (height, width), non-negative, sums to 1),
    OUT/heatmap.png (the estimate) and OUT/report.json (its guarantee and parameters; not the
    number of users, which is private under add/remove). An evaluation (--evaluate; the
    default on the built-in synthetic data) also shows the true heatmap and the Laplace
    baseline (true | baseline | ours) with metrics, and says it is not a private release.
    Without --seed every noise draw comes from fresh OS entropy; with --seed two runs are
    identical (a reproducible evaluation, not a private release).
    """
    from shuffledp.analyzers.heatmap.release import HeatmapRelease

    t_start = time.perf_counter()
    progress = _Progress(quiet)
    _check_model_options(model, neighbour, backend, scheduler)
    _check_algorithm_options(algorithm, model, neighbour, public_n, sparsity)
    box = _check_input_options(input_path, fmt, bbox, n)
    evaluate = _check_mode(ctx, evaluate, input_path, seed, budget_ledger)
    ledger = _open_ledger(budget_ledger, budget_epsilon, budget_delta)
    n = SYNTHETIC_USERS if n is None else n
    n_points = _count_points(input_path, n)
    what = (f"--n {n} ({n_points:,} points)" if input_path is None
            else f"--input {input_path} ({n_points:,} lines)")
    refuse_if_large(
        f"{what} on --grid {grid}",
        memory_bytes=heatmap_memory(grid.n_pixels, n_points,
                                    1 + len(top_percent) if evaluate else 0),
        allow_large=allow_large)
    progress(_mode_message(evaluate, seed, input_path))

    progress("loading data")
    table, source = _load_table(input_path, fmt, box, n, data_seed)
    users = table.to_users(grid)
    if evaluate:
        progress(f"{users.n_users} users on a {grid} grid")

    rngs = _noise_rngs(seed, 2 + len(top_percent))
    progress(f"running the {model} mechanism (epsilon={epsilon}, w={w})")
    t_ours = time.perf_counter()
    choice = None
    if model == "central" and algorithm != "sparse":
        ours, choice = _central_by_algorithm(algorithm, users, grid, epsilon, w,
                                             neighbour or "add_remove", public_n, sparsity,
                                             rngs[0], progress)
    elif model == "central":  # well under a second at the default size: no bar
        from shuffledp.analyzers.heatmap.central import central_heatmap

        # --smoothing none: Alg. 1-2 as printed (the printed budget split); auto: the split
        # of shuffledp.accounting.budget.auto_level_budgets (public numbers only)
        ours = central_heatmap(users, epsilon, w=w, neighbour=neighbour, rng=rngs[0],
                               budget="paper" if smoothing == "none" else "auto")
    else:
        # the central path's rule: --smoothing none runs Alg. 1-2 as printed
        ours = _shuffle_release(users, source, grid, epsilon, delta, B, w, neighbour, rngs[0],
                                n_points, len(top_percent) if evaluate else -1, allow_large,
                                backend, scheduler, quiet=quiet, rounding=rounding,
                                budget="paper" if smoothing == "none" else "auto")
    if smoothing != "none" and ours.parameters.get("mechanism") != "DenseEMDAgg":
        # the dense algorithm's output is already a dense map
        ours = ours.smoothed(method=smoothing_method(smoothing))
    seconds_ours = time.perf_counter() - t_ours
    receipt = None
    if ledger is not None:  # charged before anything is written; refused: nothing is
        receipt = _charge_ledger(ledger, budget_ledger, ours, out_dir, progress)

    from shuffledp.analyzers.heatmap.render import gaussian_heatmap

    h_ours = gaussian_heatmap(ours.estimate, sigma)
    out = Path(out_dir)
    report = ours.to_report()
    report.update({"mode": "evaluation" if evaluate else "release", "w": w, "sigma": sigma,
                   "seed": seed, "algorithm": _algorithm_record(algorithm, ours, choice)})
    if not evaluate:
        report.update({
            "input": _public_source(input_path, data_seed),
            "released": "estimate.npy; heatmap.png (the estimate with a Gaussian filter of "
                        f"sigma={sigma} px: post-processing); this report. Nothing else was "
                        "computed from the data (no true heatmap, baseline, metric, user or "
                        "point count, or timing).",
            "budget_ledger": None if receipt is None else receipt.to_dict(),
        })
        _write_outputs(out, np.asarray(ours.estimate, dtype=np.float64),
                       [("ours (private release)\n" + _guarantee_line(ours.guarantee), h_ours)],
                       report, caption=_release_caption(ours, grid, sigma, seed)
                       + _SHAPES_NOTE[smoothing],
                       axes=_map_axes(fmt, box))
        progress(f"wrote {out / 'estimate.npy'}, {out / 'report.json'}, "
                 f"{out / 'heatmap.png'} ({report['release']})")
        return

    aggregate = users.aggregate()
    baselines = _baselines(aggregate, epsilon, top_percent, rngs[1:])

    from shuffledp.analyzers.heatmap.release import normalise

    truth = normalise(aggregate)
    h_truth = gaussian_heatmap(truth, sigma)
    h_base = gaussian_heatmap(baselines["laplace"].estimate, sigma)

    if no_metrics:
        metric_set = "none"
    metrics = _heatmap_metrics(metric_set, grid, sigma, h_truth, h_ours, h_base, baselines,
                               quiet, progress)

    report.update({
        "release": (HeatmapRelease.REPRODUCIBLE if seed is not None
                    else HeatmapRelease.EVALUATION),
        "evaluation": EVALUATION_NOTE,
        "n_users": users.n_users,
        "n_points": int(table.x.size),
        "input": source,
        "seconds": time.perf_counter() - t_start,
        "seconds_mechanism": seconds_ours,
        "metrics_on": f"Gaussian-filtered heatmaps (sigma={sigma} px), truth = normalised "
                      "non-private aggregate",
        "metrics": metrics,
        "metric_set": metric_set,
        "baselines": {name: rel.guarantee.to_dict() for name, rel in baselines.items()},
    })
    _write_outputs(out, np.asarray(ours.estimate, dtype=np.float64),
                   [("true (non-private)\nno guarantee: the data itself", h_truth),
                    (_panel_title("Laplace baseline", metrics.get("laplace")) + "\n"
                     + _guarantee_line(baselines["laplace"].guarantee), h_base),
                    (_panel_title("ours", metrics.get("ours")) + "\n"
                     + _guarantee_line(ours.guarantee), h_ours)],
                   report, caption=_caption(ours, users.n_users, grid, sigma, source, seed)
                   + _SHAPES_NOTE[smoothing],
                   axes=_map_axes(fmt, box))
    progress(f"wrote {out / 'estimate.npy'}, {out / 'report.json'}, {out / 'heatmap.png'} "
             f"({report['release']})")
    if not quiet and metrics:
        _print_metrics(metrics, metric_set)


#: What an evaluation run's report says it is.
EVALUATION_NOTE = (
    "an evaluation run, not a private release: besides the estimate (whose guarantee is "
    "stated) it writes the exact non-private heatmap, the Laplace baselines (further "
    "releases on the same users, not charged to any budget), metrics against the truth and "
    "the numbers of users and points. Private release: --release (the default with --input "
    "or --budget-ledger)")


def _check_mode(ctx: click.Context, evaluate: bool | None, input_path: str | None,
                seed: int | None, ledger: str | None) -> bool:
    """Whether the run is an evaluation: --evaluate, or the built-in data without --release
    or --budget-ledger. An evaluation is never charged to a ledger (usage error), nor is a
    seeded run; a release refuses the evaluation-only options given explicitly."""
    if ledger is not None and evaluate:
        raise click.UsageError(
            f"--evaluate --budget-ledger {ledger}: an evaluation writes the true heatmap and "
            "baselines, which no ledger charge covers; drop --evaluate to charge a private "
            "release")
    if ledger is not None and seed is not None:
        raise click.UsageError(
            f"--seed {seed} --budget-ledger {ledger}: seeded noise is not a private release; "
            "drop --seed to charge one")
    if evaluate is None:
        evaluate = input_path is None and ledger is None
    if not evaluate:
        def given(name: str) -> bool:
            return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE

        options = []
        if given("metric_set") and ctx.params["metric_set"] != "none":
            options.append(f"--metrics {ctx.params['metric_set']}")
        if given("top_percent"):
            options.append(" ".join(f"--top-percent {t:g}" for t in ctx.params["top_percent"]))
        if options:
            why = ("--release" if given("evaluate")
                   else "--budget-ledger" if ledger is not None else "--input")
            raise click.UsageError(
                f"{' '.join(options)}: metrics and baselines compare with the true heatmap, "
                f"which a private release ({why}) does not compute; add --evaluate for an "
                "evaluation run" + (" (without --budget-ledger)" if ledger else ""))
    return bool(evaluate)


def _mode_message(evaluate: bool, seed: int | None, input_path: str | None) -> str:
    noise = ("all noise from fresh OS entropy" if seed is None
             else f"--seed {seed}: reproducible noise")
    if evaluate:
        data = "built-in synthetic data" if input_path is None else f"--input {input_path}"
        return (f"evaluation on {data}, not a private release ({noise}): also writes the true "
                "heatmap, the Laplace baselines and metrics")
    if seed is not None:
        return f"--seed {seed}: reproducible evaluation, not a private release (release layout)"
    return f"private release ({noise}): writes only the estimate and its guarantee"


def _public_source(input_path: str | None, data_seed: int | None) -> str:
    """The input as the operator named it, without anything computed from the data."""
    if input_path is not None:
        return str(input_path)
    from shuffledp import datasets

    seed = datasets.BUILTIN_DATA_SEED if data_seed is None else data_seed
    return f"built-in synthetic mixture (data seed {seed})"


#: what the shapes in our panel are (one caption line): the sparse estimate's coarse cells,
#: and the smoothing's Gaussian blobs
_SHAPES_NOTE = {
    "auto": ["faint rectangles: a coarse cell's mass,", "  spread evenly over the cell;",
             "round blobs: --smoothing auto", "  (post-processing)"],
    "density": ["faint rectangles: a coarse cell's mass,", "  spread evenly over the cell;",
                "round blobs: --smoothing density", "  (post-processing)"],
    "none": ["faint rectangles: a coarse cell's mass,", "  spread evenly over the cell",
             "  (--smoothing none: Alg. 2 as is)"],
}


def _release_caption(release: Any, grid: Any, sigma: float, seed: int | None) -> list[str]:
    """Short lines (one panel wide): the guarantee, the grid and the filter, nothing else."""
    g = release.guarantee
    delta = "" if g.delta == 0 else f", delta = {g.delta:.2g}"
    kind = "pure eps-DP" if g.notion == "pure" else "(eps, delta)-DP"
    what = ("private release" if seed is None
            else f"--seed {seed}: reproducible, not a private release")
    return [f"{what}: {g.model} model",
            f"{kind}, epsilon = {g.epsilon:g}{delta}",
            f"neighbours: {g.neighbour.value}",
            f"{grid} grid; Gaussian filter {sigma:g} px (post-processing)"]


def _check_model_options(model: str, neighbour: str | None, backend: str,
                         scheduler: str | None) -> None:
    """--neighbour add_remove has no shuffle protocol (n must be public); --backend dask and
    --scheduler belong to --model shuffle."""
    if model == "shuffle" and neighbour == "add_remove":
        raise click.BadParameter(
            "the shuffle protocol needs n public: use replace or zero_out, got add_remove",
            param_hint="--neighbour")
    if (backend == "dask" or scheduler) and model != "shuffle" or scheduler and backend != "dask":
        raise click.UsageError(f"--backend {backend} --scheduler {scheduler!r}: the dask "
                               "backend (and --scheduler) need --model shuffle --backend dask")


def _check_algorithm_options(algorithm: str, model: str, neighbour: str | None,
                             public_n: int | None, sparsity: int | None) -> None:
    """--algorithm dense/auto: central model only, and a public n under add_remove."""
    if algorithm != "sparse" and model == "shuffle":
        raise click.UsageError(
            f"--algorithm {algorithm} --model shuffle: the shuffle protocol (Ghazi et al. "
            "App. F) implements the sparse algorithm only; the dense algorithm (App. D.1) "
            "is not supported in the shuffle model. Use --model central, or --algorithm "
            "sparse")
    if algorithm == "sparse" and (public_n is not None or sparsity is not None):
        raise click.UsageError("--public-n and --sparsity belong to --algorithm dense/auto")
    if algorithm == "dense" and sparsity is not None:
        raise click.UsageError("--sparsity belongs to --algorithm auto")
    if algorithm != "sparse" and public_n is None and (neighbour or "add_remove") == "add_remove":
        raise click.UsageError(
            f"--algorithm {algorithm} under add_remove needs --public-n N: the level "
            "floor(log2 sqrt(eps n)) and the choice must come from a public n, and n is "
            "private under add_remove (or use --neighbour replace / zero_out, where n is "
            "public)")


def _central_by_algorithm(algorithm: str, users: Any, grid: Any, epsilon: float, w: int,
                          neighbour: str, public_n: int | None, sparsity: int | None,
                          rng: Any, progress: Any) -> tuple[Any, Any]:
    """The dense release, or auto's choice (from public numbers only) and its release."""
    from shuffledp.analyzers.heatmap.central import central_heatmap
    from shuffledp.analyzers.heatmap.dense import choose_algorithm, dense_heatmap

    n_pub = users.n_users if public_n is None else public_n  # public: checked above
    choice = None
    if algorithm == "auto":
        choice = as_usage_error(choose_algorithm, grid, n_pub, epsilon, k=sparsity, w=w,
                                neighbour=neighbour)
        progress(f"--algorithm auto: {choice.reason}")
        algorithm = choice.algorithm
    if algorithm == "sparse":
        return central_heatmap(users, epsilon, w=w, neighbour=neighbour, rng=rng), choice
    return dense_heatmap(users, epsilon, n_public=n_pub, neighbour=neighbour, rng=rng), choice


def _algorithm_record(algorithm: str, release: Any, choice: Any) -> dict[str, Any]:
    """What ran and, for --algorithm auto, why (public numbers only)."""
    ran = "dense" if release.parameters.get("mechanism") == "DenseEMDAgg" else "sparse"
    out: dict[str, Any] = {"requested": algorithm, "ran": ran}
    if choice is not None:
        out.update({"reason": choice.reason, "sparse_bound": choice.sparse_bound,
                    "dense_bound": choice.dense_bound, "sparsity_prior": choice.k,
                    "n_public": choice.n_public})
    return out


def _open_ledger(path: str | None, epsilon: float | None, delta: float | None) -> Any:
    """The --budget-ledger to charge (created with --budget-epsilon/--budget-delta), or None."""
    if path is not None:
        from shuffledp.accounting.ledger import BudgetLedger

        return as_usage_error(BudgetLedger.open, path, epsilon, delta)
    if epsilon is not None or delta is not None:
        raise click.UsageError("--budget-epsilon/--budget-delta need --budget-ledger FILE")
    return None


def _charge_ledger(ledger: Any, path: str, ours: Any, out_dir: str, progress: Any) -> Any:
    """Charge the release to the ledger (atomic, under its lock) and return the receipt;
    refused (exit 1) if the budget would be exceeded or the ledger does not verify."""
    receipt = as_refusal(f"--budget-ledger {path}", ledger.charge,
                         ours.guarantee.event or _plain_event(ours.guarantee),
                         f"heatmap --out {out_dir}")
    spent = receipt.composition
    progress(f"budget ledger {path}: entry {receipt.entry}; {spent.releases} releases "
             f"compose to epsilon={spent.epsilon:.6g} at delta={spent.delta:g} "
             f"({spent.method}; total {ledger.epsilon:g}); head {receipt.head[:16]}")
    return receipt


def _baselines(aggregate: np.ndarray, epsilon: float, top_percent: Any,
               rngs: list) -> dict[str, Any]:
    """The Laplace baseline and its top-t% thresholdings (Ghazi et al. Sec. 4), one noise
    stream each."""
    from shuffledp.analyzers.heatmap.baselines import laplace_baseline

    baselines = {"laplace": laplace_baseline(aggregate, epsilon, rng=rngs[0])}
    for t, rng in zip(top_percent, rngs[1:]):
        baselines[f"laplace_top_{t:g}%"] = laplace_baseline(
            aggregate, epsilon, rng=rng, top_percent=t)
    return baselines


def _print_metrics(metrics: dict[str, Any], metric_set: str) -> None:
    """The metrics table on stderr."""
    click.echo(f"{'':24s}{'EMD':>10s}{'KL':>10s}{'CC':>8s}{'SIM':>8s}", err=True)
    for name, m in metrics.items():
        e = "-" if m["emd"] is None else f"{m['emd']:.4f}"
        click.echo(f"{name:24s}{e:>10s}{m['kl']:10.4f}{m['cc']:8.3f}{m['sim']:8.3f}",
                   err=True)
    if metric_set == "fast" and len(metrics) > 2:
        click.echo("(EMD of the top-t% baselines: --metrics full)", err=True)


def _heatmap_metrics(metric_set: str, grid: Any, sigma: float, h_truth: np.ndarray,
                     h_ours: np.ndarray, h_base: np.ndarray, baselines: dict, quiet: bool,
                     progress: Any) -> dict[str, Any]:
    """Metrics of ours and every baseline against the true heatmap, under a progress bar
    (the exact EMD solves take seconds each on a 256x256 grid)."""
    if metric_set == "none":
        return {}
    from shuffledp.analyzers.heatmap.metrics import all_metrics
    from shuffledp.analyzers.heatmap.render import gaussian_heatmap
    from shuffledp.cli.common import progress_bar

    progress(f"metrics against the non-private heatmap (--metrics {metric_set})")
    from concurrent.futures import ThreadPoolExecutor

    names = ["ours", *baselines]
    heatmaps = {"ours": h_ours, "laplace": h_base}
    for name in names:
        if name not in heatmaps:
            heatmaps[name] = gaussian_heatmap(baselines[name].estimate, sigma)
    # the exact EMD solves release the GIL (numba nogil): one thread per heatmap, up to the
    # cores (--metrics full: every baseline's EMD at once on a machine with the cores)
    with progress_bar(len(names), "metrics", "heatmap", quiet) as bar, \
            ThreadPoolExecutor(max(1, min(len(names), os.cpu_count() or 1))) as pool:
        def one(name: str) -> dict[str, Any]:
            with_emd = metric_set == "full" or name in ("ours", "laplace")
            m = all_metrics(h_truth, heatmaps[name], grid, emd=with_emd)
            bar.update(1)
            return m

        futures = {name: pool.submit(one, name) for name in names}
        return {name: f.result() for name, f in futures.items()}


def _panel_title(name: str, m: dict[str, Any] | None) -> str:
    if not m:
        return name
    emd = "" if m.get("emd") is None else f"  EMD {m['emd']:.3f}"
    return f"{name}: CC {m['cc']:.2f}{emd}"


def _caption(release: Any, n_users: int, grid: Any, sigma: float, source: str,
             seed: int | None) -> list[str]:
    """The guarantee, the data and what the metrics compare, for the figure's header."""
    g = release.guarantee
    delta = "" if g.delta == 0 else f", delta = {g.delta:.2g}"
    kind = "pure eps-DP" if g.notion == "pure" else "(eps, delta)-DP"
    data = "built-in synthetic mixture" if source.startswith("synthetic") else "input"
    lines = [
        f"ours: {g.model} model, {kind}, epsilon = {g.epsilon:g}{delta}; neighbours: "
        f"{g.neighbour.value} (each panel states its own guarantee)",
        f"{n_users} users ({data}), {grid} grid; heatmaps with a Gaussian filter, sigma = "
        f"{sigma:g} px; CC (1 = perfect) and EMD (0 = perfect) against the true heatmap",
    ]
    lines.append("evaluation run, not a private release: the true heatmap and a second "
                 "release (the Laplace baseline) are shown" + (
                     "" if seed is None else f"; --seed {seed}: reproducible noise"))
    return lines


def _guarantee_line(g: Any) -> str:
    """A panel's own guarantee, one short line: model, notion, epsilon (delta), neighbours."""
    kind = "pure eps-DP" if g.notion == "pure" else "(eps, delta)-DP"
    delta = "" if g.delta == 0 else f", d={g.delta:.1g}"
    return f"{g.model}, {kind}, eps={g.epsilon:g}{delta}, {g.neighbour.token}"


def _map_axes(fmt: str, box: Any) -> dict[str, Any]:
    """Drawing geometry: y grows upward (north up), with the SNAP box's longitude and
    latitude as axes, or the unit square's x and y."""
    if fmt == "snap" and box is not None:
        lat_min, lat_max, lon_min, lon_max = box
        return {"origin": "lower", "extent": (lon_min, lon_max, lat_min, lat_max),
                "axis_labels": ("longitude", "latitude")}
    return {"origin": "lower", "extent": (0.0, 1.0, 0.0, 1.0), "axis_labels": ("x", "y")}


def _plain_event(guarantee: Any) -> Any:
    from shuffledp.accounting.events import EpsDelta

    return EpsDelta.from_guarantee(guarantee)


def _check_input_options(input_path: str | None, fmt: str, bbox: str | None,
                         n: int | None) -> Any:
    """--bbox only (and always) with SNAP input; --n is the synthetic data's size."""
    box = parse_bbox(bbox)
    if box is not None and fmt != "snap":
        raise click.BadParameter("only valid with --format snap", param_hint="--bbox")
    if input_path is not None and fmt == "snap" and box is None:
        raise click.BadParameter("is required with --format snap", param_hint="--bbox")
    if input_path is not None and n is not None:
        warn(f"--n {n} is ignored with --input (the users are those of {input_path})")
    return box


def _shuffle_release(users: Any, source: str, grid: Any, epsilon: float, delta: float, B: int,
                     w: int, neighbour: str | None, rng: Any, n_points: int, n_baselines: int,
                     allow_large: bool, backend: str = "local",
                     scheduler: str | None = None, quiet: bool = True,
                     rounding: str = "largest_remainder", budget: str = "auto") -> Any:
    """Derive the protocol (refused, exit 1, if none fits), check its size, run it."""
    from shuffledp.cli.common import as_refusal
    from shuffledp.protocol.params import derive_params
    from shuffledp.protocol.runner import shuffle_heatmap

    if users.n_users < 2:
        raise click.ClickException(
            f"--model shuffle needs at least 2 users, {source} has {users.n_users}")
    params = as_refusal(
        f"no shuffle protocol for --epsilon {epsilon} --delta {delta} --B {B} with "
        f"{users.n_users} users on --grid {grid}",
        derive_params, grid, users.n_users, epsilon=epsilon, delta=delta, B=B, w=w,
        neighbour=neighbour, rounding=rounding, budget=budget)
    refuse_if_large(
        f"--model shuffle --grid {grid} --B {B} with {users.n_users} users",
        memory_bytes=heatmap_memory(grid.n_pixels, n_points, 1 + n_baselines,
                                    params.messages_per_user, params.m),
        messages_per_user=params.messages_per_user, allow_large=allow_large)
    if backend == "local":
        from shuffledp.cli.common import progress_bar

        with progress_bar(users.n_users, "shuffle protocol", "user", quiet) as bar:
            return shuffle_heatmap(users, epsilon=epsilon, delta=delta, B=B, w=w, rng=rng,
                                   params=params, progress=bar.update)
    from shuffledp.protocol.dask_backend import connect, require_dask

    try:
        require_dask()
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    client = as_refusal(f"--backend dask --scheduler {scheduler!r}", connect, scheduler)
    with client:
        return shuffle_heatmap(users, epsilon=epsilon, delta=delta, B=B, w=w, rng=rng,
                               params=params, backend="dask", client=client)


def _count_points(input_path: str | None, n_users: int) -> int:
    """Points the run will hold: synthetic users x 5, or the input's line count (an upper
    bound, read without loading the file); checks --input is a regular file."""
    from shuffledp.safe_io import NotRegularFileError, count_lines

    if input_path is None:
        return n_users * 5
    try:
        return count_lines(input_path)
    except NotRegularFileError as e:
        raise click.BadParameter(str(e), param_hint="--input") from None


def _load_table(input_path: str | None, fmt: str, box: Any, n_users: int,
                data_seed: int | None):
    """The PointTable and a description of its source; loader errors name --input."""
    from shuffledp import datasets

    if input_path is None:
        if data_seed is None:
            data_seed = datasets.BUILTIN_DATA_SEED
        table = datasets.synthetic_mixture(n_users=n_users, rng=data_seed)
        return table, f"synthetic_mixture(n_users={n_users}, rng={data_seed})"
    try:
        if fmt == "csv":
            return datasets.load_csv(input_path), str(input_path)
        return datasets.load_snap(input_path, bbox=box), str(input_path)
    except UnicodeDecodeError as e:
        raise click.ClickException(
            f"--input {input_path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise click.ClickException(f"--input {input_path}: malformed CSV: {e}") from None


def _write_outputs(out: Path, estimate: np.ndarray, panels: list,
                   report: dict[str, Any], caption: list[str] | None = None,
                   axes: dict[str, Any] | None = None) -> None:
    """estimate.npy, heatmap.png and report.json, each written to a fresh file and renamed
    into place (never through a FIFO or link planted at the name, never half-written)."""
    from shuffledp.analyzers.heatmap.render import render_png
    from shuffledp.safe_io import atomic_path

    out.mkdir(parents=True, exist_ok=True)
    write_npy(out / "estimate.npy", estimate)
    with atomic_path(out / "heatmap.png", suffix=".png") as tmp:
        render_png(tmp, panels, caption=caption, colorbar=True, **(axes or {}))
    write_report(out, report)


def _noise_rngs(seed: int | None, k: int) -> list[np.random.Generator | None]:
    """k independent noise sources: seeded generators, or None (each mechanism draws fresh
    OS entropy) without a seed."""
    if seed is None:
        return [None] * k
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(k)]
