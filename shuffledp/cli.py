"""Command-line interface: ``shuffledp heatmap``, ``shuffledp account``, role commands.

Every library ValueError/TypeError becomes a one-line ``Error: ...`` with a non-zero exit code
(2 for a bad option value, 1 for a refusal; :mod:`shuffledp.cli_common`); no traceback reaches
the user.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from shuffledp.cli_common import (
    allow_large_option,
    heatmap_memory,
    refuse_if_large,
)
from shuffledp.cli_common import (
    friendly as _friendly,
)


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


RELEASE_SEEDED = "reproducible evaluation, not a private release"
RELEASE_PRIVATE = "private"


@main.command()
@click.option("--input", "input_path", type=click.Path(dir_okay=False), default=None,
              help="CSV with columns user_id,x,y[,weight] (x, y in [0,1)); default: built-in "
                   "synthetic Gaussian-mixture users (Ghazi et al. 2023, App. E.3).")
@click.option("--format", "fmt", type=click.Choice(["csv", "snap"]), default="csv",
              show_default=True, help="Input format; snap = SNAP check-ins (tab separated).")
@click.option("--bbox", default=None,
              help="SNAP only: LAT_MIN,LAT_MAX,LON_MIN,LON_MAX mapped onto [0,1)^2.")
@click.option("--users", "n_users", type=int, default=200, show_default=True,
              help="Number of synthetic users (ignored with --input).")
@click.option("--data-seed", type=int, default=0, show_default=True,
              help="Seed of the built-in synthetic data set (not of the noise).")
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
@click.option("--neighbour", type=click.Choice(["add_remove", "zero_out", "replace"]),
              default=None,
              help="Neighbour relation of the guarantee: central add_remove (default), zero_out "
                   "or replace; shuffle replace (default) or zero_out (n public).")
@click.option("--seed", type=int, default=None,
              help="Seed all noise (research: the report then says 'reproducible evaluation, "
                   "not a private release'); default: fresh OS entropy.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out",
              show_default=True, help="Output directory.")
@click.option("--no-metrics", is_flag=True, help="Skip metrics (and the EMD solves).")
@click.option("--quiet", is_flag=True, help="No progress messages.")
@allow_large_option
@_friendly
def heatmap(input_path, fmt, bbox, n_users, data_seed, grid, eps, w, model, B, delta, sigma,
            top_percent, neighbour, seed, out_dir, no_metrics, quiet, allow_large) -> None:
    """Private heatmap of users' distributions (Ghazi et al., AAAI 2023).

    Writes OUT/estimate.npy (float64, shape (height, width), non-negative, sums to 1),
    OUT/report.json and OUT/heatmap.png (true | baseline | ours). Without --seed every noise
    draw comes from fresh OS entropy (a private release); with --seed two runs are identical
    (a reproducible evaluation, not a private release).
    """
    from shuffledp.grid import Grid

    t_start = time.perf_counter()
    progress = _Progress(quiet)
    grid_obj: Grid = _grid_type(grid)
    _check_heatmap_options(eps, w, sigma, seed, data_seed, top_percent, model, B, delta, n_users,
                           neighbour)
    box = _parse_bbox(bbox)
    if box is not None and fmt != "snap":
        raise click.BadParameter("only valid with --format snap", param_hint="--bbox")
    if input_path is not None and fmt == "snap" and box is None:
        raise click.BadParameter("is required with --format snap", param_hint="--bbox")
    n_points = _count_points(input_path, n_users)
    what = (f"--users {n_users} ({n_points:,} points)" if input_path is None
            else f"--input {input_path} ({n_points:,} lines)")
    refuse_if_large(
        f"{what} on --grid {grid_obj}",
        memory_bytes=heatmap_memory(grid_obj.n_pixels, n_points, 1 + len(top_percent)),
        allow_large=allow_large)
    release_kind = RELEASE_PRIVATE if seed is None else RELEASE_SEEDED
    progress("no --seed: all noise from fresh OS entropy (private release)" if seed is None
             else f"--seed {seed}: {RELEASE_SEEDED}")

    progress("loading data")
    table, source = _load_table(input_path, fmt, box, n_users, data_seed)
    users = table.to_users(grid_obj)
    progress(f"{users.n_users} users on a {grid_obj} grid")

    rngs = _noise_rngs(seed, 2 + len(top_percent))
    progress(f"running the {model} mechanism (eps={eps}, w={w})")
    t_ours = time.perf_counter()
    if model == "central":
        from shuffledp.analyzers.central import central_heatmap

        ours = central_heatmap(users, eps, w=w, neighbour=neighbour or "add_remove",
                               rng=rngs[0])
    else:
        from shuffledp.protocol import shuffle_heatmap
        from shuffledp.protocol_params import derive_params

        if users.n_users < 2:
            raise click.ClickException(
                f"--model shuffle needs at least 2 users, {source} has {users.n_users}")
        try:
            params = derive_params(grid_obj, users.n_users, epsilon=eps, delta=delta, B=B, w=w,
                                   neighbour=neighbour or "replace")
        except (ValueError, TypeError, ArithmeticError) as e:
            raise click.ClickException(
                f"no shuffle protocol for --eps {eps} --delta {delta} --B {B} with "
                f"{users.n_users} users on --grid {grid_obj}: {e}") from None
        refuse_if_large(
            f"--model shuffle --grid {grid_obj} --B {B} with {users.n_users} users",
            memory_bytes=heatmap_memory(grid_obj.n_pixels, n_points, 1 + len(top_percent),
                                        params.messages_per_user, params.m),
            messages_per_user=params.messages_per_user, allow_large=allow_large)
        ours = shuffle_heatmap(users, epsilon=eps, delta=delta, B=B, w=w, rng=rngs[0],
                               params=params)
    seconds_ours = time.perf_counter() - t_ours

    from shuffledp.analyzers.baselines import laplace_baseline

    aggregate = users.aggregate()
    baselines = {"laplace": laplace_baseline(aggregate, eps, rng=rngs[1])}
    for t, rng in zip(top_percent, rngs[2:]):
        baselines[f"laplace_top_{t:g}%"] = laplace_baseline(
            aggregate, eps, rng=rng, top_percent=t)

    from shuffledp.analyzers.heatmap import gaussian_heatmap
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

    report = {
        "model": model,
        "release": release_kind,
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
    out = Path(out_dir)
    _write_outputs(out, np.asarray(ours.estimate, dtype=np.float64),
                   [("true", h_truth), ("baseline (Laplace)", h_base), ("ours", h_ours)],
                   json.dumps(report, indent=2, default=_json_default) + "\n")
    progress(f"wrote {out / 'estimate.npy'}, {out / 'report.json'}, {out / 'heatmap.png'} "
             f"({'private release' if seed is None else RELEASE_SEEDED})")
    if not quiet and metrics:
        click.echo(f"{'':24s}{'EMD':>10s}{'KL':>10s}{'CC':>8s}{'SIM':>8s}", err=True)
        for name, m in metrics.items():
            click.echo(f"{name:24s}{m['emd']:10.4f}{m['kl']:10.4f}{m['cc']:8.3f}{m['sim']:8.3f}",
                       err=True)


def _check_heatmap_options(eps: float, w: int, sigma: float, seed: int | None, data_seed: int,
                           top_percent: tuple[float, ...], model: str, B: int, delta: float,
                           n_users: int, neighbour: str | None = None) -> None:
    """Option values that are wrong whatever the data (usage errors, exit status 2)."""
    _positive("--eps", eps)
    if model == "shuffle" and neighbour == "add_remove":
        raise click.BadParameter(
            "the shuffle protocol needs n public: use replace or zero_out, got add_remove",
            param_hint="--neighbour")
    if w < 1:
        raise click.BadParameter(f"must be an integer >= 1, got {w}", param_hint="--w")
    if sigma < 0 or not math.isfinite(sigma):
        raise click.BadParameter(f"must be >= 0, got {sigma!r}", param_hint="--sigma")
    for name, value in (("--seed", seed), ("--data-seed", data_seed)):
        if value is not None and value < 0:
            raise click.BadParameter(f"must be >= 0, got {value}", param_hint=name)
    if n_users < 1:
        raise click.BadParameter(f"must be >= 1, got {n_users}", param_hint="--users")
    for t in top_percent:
        if not (0 < t <= 100):
            raise click.BadParameter(f"must be in (0, 100], got {t!r}", param_hint="--top-percent")
    if model == "shuffle":
        if B < 1:
            raise click.BadParameter(f"must be an integer >= 1, got {B}", param_hint="--B")
        if not (0 < delta < 1):
            raise click.BadParameter(f"must be in (0, 1), got {delta!r}", param_hint="--delta")


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


def _load_table(input_path: str | None, fmt: str, box: Any, n_users: int, data_seed: int):
    """The PointTable and a description of its source; loader errors name --input."""
    from shuffledp import datasets

    if input_path is None:
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


def _write_outputs(out: Path, estimate: np.ndarray, panels: list, report_text: str) -> None:
    """estimate.npy, heatmap.png and report.json, each written to a fresh file and renamed
    into place (never through a FIFO or link planted at the name, never half-written)."""
    from shuffledp.analyzers.heatmap import render_png
    from shuffledp.safe_io import write_atomic

    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.save(buf, estimate)
    write_atomic(out / "estimate.npy", buf.getvalue())
    tmp = out / f".heatmap.{os.urandom(6).hex()}.png"
    try:
        render_png(tmp, panels)
        os.replace(tmp, out / "heatmap.png")
    finally:
        tmp.unlink(missing_ok=True)
    write_atomic(out / "report.json", report_text.encode())


def _noise_rngs(seed: int | None, k: int) -> list[np.random.Generator | None]:
    """k independent noise sources: seeded generators, or None (each mechanism draws fresh
    OS entropy) without a seed."""
    if seed is None:
        return [None] * k
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(k)]


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
