"""Command-line interface: ``shuffledp heatmap``, ``shuffledp account``, role commands.

Every library ValueError/TypeError becomes a one-line ``Error: ...`` with a non-zero exit code;
no traceback reaches the user.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np


def _friendly(fn):
    """Turn library input errors into click errors (message, exit status 1, no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, TypeError, OSError, KeyError) as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


class _Progress:
    """Stage messages on stderr with elapsed time (quiet with --quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            click.echo(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", err=True)


def _grid_type(value: str):
    from shuffledp.grid import Grid

    try:
        return Grid.parse(value)
    except (ValueError, TypeError) as exc:
        raise click.BadParameter(str(exc), param_hint="--grid") from exc


def _positive(name: str, value: float) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise click.BadParameter(f"must be a finite number > 0, got {value!r}", param_hint=name)
    return value


def _parse_bbox(value: str | None) -> tuple[float, float, float, float] | None:
    if value is None:
        return None
    try:
        parts = tuple(float(v) for v in value.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 4:
        raise click.BadParameter(
            f"must be LAT_MIN,LAT_MAX,LON_MIN,LON_MAX, got {value!r}", param_hint="--bbox"
        )
    return parts  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shuffledp")
def main() -> None:
    """shuffledp: differential privacy in the shuffle model."""


@main.command()
@click.option("--input", "input_path", type=click.Path(dir_okay=False), default=None,
              help="CSV with columns user_id,x,y[,weight] (x, y in [0,1)); default: built-in "
                   "synthetic Gaussian-mixture users (seed 000, App. E.3).")
@click.option("--format", "fmt", type=click.Choice(["csv", "snap"]), default="csv",
              show_default=True, help="Input format; snap = SNAP check-ins (tab separated).")
@click.option("--bbox", default=None,
              help="SNAP only: LAT_MIN,LAT_MAX,LON_MIN,LON_MAX mapped onto [0,1)^2.")
@click.option("--users", "n_users", type=int, default=200, show_default=True,
              help="Number of synthetic users (ignored with --input).")
@click.option("--grid", "grid", default="256", show_default=True,
              help="N (an N x N grid) or WIDTHxHEIGHT.")
@click.option("--eps", type=float, default=1.0, show_default=True, help="Privacy budget epsilon.")
@click.option("--w", "w", type=int, default=20, show_default=True,
              help="Children kept per level by Reconstruct.")
@click.option("--model", type=click.Choice(["central", "shuffle"]), default="central",
              show_default=True)
@click.option("--B", "B", type=int, default=256, show_default=True,
              help="Shuffle model: scaling factor B.")
@click.option("--delta", type=float, default=1e-5, show_default=True,
              help="Shuffle model: delta of the (eps, delta) guarantee.")
@click.option("--sigma", type=float, default=2.0, show_default=True,
              help="Gaussian filter sigma in pixels for the heatmaps and metrics (Sec. 2.3).")
@click.option("--top-percent", "top_percent", type=float, multiple=True, default=(1.0, 0.1),
              show_default=True, help="Thresholding baselines to run (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the research RNG.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out",
              show_default=True, help="Output directory.")
@click.option("--no-metrics", is_flag=True, help="Skip metrics (and the EMD solves).")
@click.option("--quiet", is_flag=True, help="No progress messages.")
@_friendly
def heatmap(input_path, fmt, bbox, n_users, grid, eps, w, model, B, delta, sigma, top_percent,
            seed, out_dir, no_metrics, quiet) -> None:
    """Private heatmap of users' distributions (Ghazi et al., AAAI 2023).

    Writes OUT/estimate.npy (float64, shape (height, width), non-negative, sums to 1),
    OUT/report.json and OUT/heatmap.png (true | baseline | ours).
    """
    from shuffledp.grid import Grid

    t_start = time.perf_counter()
    progress = _Progress(quiet)
    grid_obj: Grid = _grid_type(grid)
    _positive("--eps", eps)
    if w < 1:
        raise click.BadParameter(f"must be an integer >= 1, got {w}", param_hint="--w")
    if sigma < 0 or not math.isfinite(sigma):
        raise click.BadParameter(f"must be >= 0, got {sigma!r}", param_hint="--sigma")
    if seed < 0:
        raise click.BadParameter(f"must be >= 0, got {seed}", param_hint="--seed")
    for t in top_percent:
        if not (0 < t <= 100):
            raise click.BadParameter(f"must be in (0, 100], got {t!r}", param_hint="--top-percent")
    if model == "shuffle":
        if B < 1:
            raise click.BadParameter(f"must be an integer >= 1, got {B}", param_hint="--B")
        if not (0 < delta < 1):
            raise click.BadParameter(f"must be in (0, 1), got {delta!r}", param_hint="--delta")
    box = _parse_bbox(bbox)
    if box is not None and fmt != "snap":
        raise click.BadParameter("only valid with --format snap", param_hint="--bbox")

    from shuffledp import datasets

    progress("loading data")
    if input_path is None:
        if n_users < 1:
            raise click.BadParameter(f"must be >= 1, got {n_users}", param_hint="--users")
        table = datasets.synthetic_mixture(n_users=n_users, rng=seed)
        source = f"synthetic_mixture(n_users={n_users}, rng={seed})"
    elif fmt == "csv":
        table = datasets.load_csv(input_path)
        source = str(input_path)
    else:
        if box is None:
            raise click.BadParameter("is required with --format snap", param_hint="--bbox")
        table = datasets.load_snap(input_path, bbox=box)
        source = str(input_path)
    users = table.to_users(grid_obj)
    progress(f"{users.n_users} users on a {grid_obj} grid")

    seeds = np.random.SeedSequence(seed).spawn(2 + len(top_percent))
    progress(f"running the {model} mechanism (eps={eps}, w={w})")
    t_ours = time.perf_counter()
    if model == "central":
        from shuffledp.analyzers.central import central_heatmap

        ours = central_heatmap(users, eps, w=w, rng=np.random.default_rng(seeds[0]))
    else:
        from shuffledp.protocol import shuffle_heatmap

        ours = shuffle_heatmap(users, epsilon=eps, delta=delta, B=B, w=w,
                               rng=np.random.default_rng(seeds[0]))
    seconds_ours = time.perf_counter() - t_ours

    from shuffledp.analyzers.baselines import laplace_baseline

    aggregate = users.aggregate()
    baselines = {"laplace": laplace_baseline(aggregate, eps, rng=np.random.default_rng(seeds[1]))}
    for t, ss in zip(top_percent, seeds[2:]):
        baselines[f"laplace_top_{t:g}%"] = laplace_baseline(
            aggregate, eps, rng=np.random.default_rng(ss), top_percent=t)

    from shuffledp.analyzers.heatmap import gaussian_heatmap, render_png
    from shuffledp.release import normalise

    truth = normalise(aggregate)
    h_truth = gaussian_heatmap(truth, sigma)
    h_ours = gaussian_heatmap(ours.estimate, sigma)
    h_base = gaussian_heatmap(baselines["laplace"].estimate, sigma)

    metrics: dict[str, Any] = {}
    if not no_metrics:
        from shuffledp.analyzers.metrics import all_metrics

        progress("metrics against the non-private aggregate (exact EMD)")
        metrics["ours"] = all_metrics(h_truth, h_ours, grid_obj)
        for name, rel in baselines.items():
            progress(f"metrics of baseline {name}")
            hb = h_base if name == "laplace" else gaussian_heatmap(rel.estimate, sigma)
            metrics[name] = all_metrics(h_truth, hb, grid_obj)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "estimate.npy", np.asarray(ours.estimate, dtype=np.float64))
    render_png(out / "heatmap.png", [("true", h_truth), ("baseline (Laplace)", h_base),
                                     ("ours", h_ours)])
    report = {
        "model": model,
        "epsilon": ours.guarantee.epsilon,
        "delta": ours.guarantee.delta,
        "guarantee": ours.guarantee.to_dict(),
        "grid": {"width": grid_obj.width, "height": grid_obj.height},
        "n_users": users.n_users,
        "n_points": int(table.x.size),
        "input": source,
        "w": w,
        "sigma": sigma,
        "seed": seed,
        "seconds": time.perf_counter() - t_start,
        "seconds_mechanism": seconds_ours,
        "metrics_on": f"Gaussian-filtered heatmaps (sigma={sigma} px), truth = normalised "
                      "non-private aggregate",
        "metrics": metrics,
        "baselines": {name: rel.guarantee.to_dict() for name, rel in baselines.items()},
    }
    if ours.protocol:
        report["protocol"] = dict(ours.protocol)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
    progress(f"wrote {out / 'estimate.npy'}, {out / 'report.json'}, {out / 'heatmap.png'}")
    if not quiet and metrics:
        click.echo(f"{'':24s}{'EMD':>10s}{'KL':>10s}{'CC':>8s}{'SIM':>8s}", err=True)
        for name, m in metrics.items():
            click.echo(f"{name:24s}{m['emd']:10.4f}{m['kl']:10.4f}{m['cc']:8.3f}{m['sim']:8.3f}",
                       err=True)


def _register() -> None:
    from shuffledp.cli_account import account
    from shuffledp.cli_roles import ROLE_COMMANDS

    main.add_command(account)
    for command in ROLE_COMMANDS:
        main.add_command(command)


_register()


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    if hasattr(o, "items"):
        return dict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
