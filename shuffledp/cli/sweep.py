"""``shuffledp sweep``: one parameter over a list, shuffle and central side by side, plots.

``shuffledp sweep --param B --values 1,16,256 --repeats 3 --out DIR`` runs
:func:`shuffledp.sweep.run_sweep` on the built-in synthetic users (Gaussian mixture of
[Ghazi23]_ App. E.3) and writes ``DIR/runs.csv`` and ``DIR/runs.jsonl`` (one row per run,
flushed as it finishes; rerunning skips the runs already there) and, with matplotlib
(``pip install "shuffledp[plot]"``), ``DIR/metrics.png`` and, for a B sweep,
``DIR/bits_per_user.png`` (the paper's bits, the plaintext and the encrypted batch per
user) and ``DIR/utility_vs_bits.png`` (every metric against the bits per user, one point
per B: [Ghazi23]_ Fig. 12 and 13 together), with 95% Student-t bands.

Presets (paper setting: n = 50, epsilon = 5, delta = 1e-5, w = 20):

``--figure 12``  bits per user vs B in {1, 2, 4, ..., 1024} ([Ghazi23]_ Fig. 12) on the
                 paper's 320x240 grid, 3 repeats, no exact EMD (the bits do not depend on
                 the noise; about a minute); ``--full``: 20 repeats.
``--figure 13``  every metric vs B in {1, 4, 16, 64, 256, 1024}, central as B = inf
                 ([Ghazi23]_ Fig. 13), with App. F's floor rounding (``--rounding
                 largest_remainder`` keeps every level at exactly B, and the trend in B
                 vanishes); shuffle and central both zero-out (like for like); small default
                 80x60 grid, 10 repeats (about 10 s); ``--full``: the paper's 320x240 grid
                 and 20 repeats.
``--figure 1``   every metric vs epsilon in {0.1, 0.5, 1, 2, 5, 10} for the central
                 algorithm against the Laplace and top-1% / 0.1% / 0.01% baselines
                 ([Ghazi23]_ Sec. 4, Fig. 1), n = 200, all add/remove; 64x64 grid and 3
                 repeats, ``--full``: the paper's 256x256 and 60 runs.
``--figure 2``   the same against n in {50, 100, 200, 300, 400, 500} at epsilon = 10 (Fig. 2
                 and App. E.1), ``--full``: 256x256 and 10 runs; ``--figure 2-grid``: against
                 the grid, Delta in {64, 128, 256}, at epsilon = 10 and n = 200. Both release
                 the central algorithm smoothed as ``shuffledp heatmap`` does
                 (``--smoothing none``: Reconstruct's output as is).

Every preset states its neighbour relation (``--neighbour`` overrides it for the shuffle and
central models; the baselines are add/remove only and a sweep mixing them with another
relation is refused) and filters the heatmaps with sigma = 2 px per 256 px of side, scaled
with the grid (``shuffledp.sweep.SIGMA_NOTE``: the paper does not state its sigma).

``--input FILE`` (``user_id,x,y[,weight]`` CSV, or ``--format snap --bbox ...`` check-ins)
replaces the synthetic users: ``--n`` of the file's users are drawn (default: all of them).

``--param dropout`` sweeps the fraction of users who drop out of the shuffle protocol (the
noise is planned for the survivors); ``--models`` picks the models to run (default
``shuffle,central``; also ``laplace``, ``top_1%``, ``top_0.1%``).

Options given explicitly override the preset. Without ``--seed`` every run draws fresh OS
entropy; ``--seed`` makes the sweep reproducible research (the rows say so).

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from shuffledp.cli.common import (
    COUNT,
    NONNEGATIVE,
    SEED,
    B_option,
    Command,
    allow_large_option,
    as_refusal,
    as_usage_error,
    delta_option,
    epsilon_option,
    grid_option,
    heatmap_memory,
    n_option,
    out_dir_option,
    parse_bbox,
    refuse_if_large,
    w_option,
)

PAPER = {"n": 50, "epsilon": 5.0, "delta": 1e-5, "grid": "320x240"}
#: the presets' names (their settings: shuffledp.sweep.config.PRESETS, read when the command
#: runs so that --help stays fast)
FIGURE_NAMES = ["1", "2", "2-grid", "12", "13"]
DEFAULTS = {"grid": "80x60", "n": 50, "epsilon": 5.0, "delta": 1e-5, "B": 256, "repeats": 3,
            "dropout": 0.0, "models": ["shuffle", "central"], "rounding": "largest_remainder",
            "emd": True, "smoothing": "none", "neighbour": "zero_out", "sigma_scales": False}


def _settings(figure: str | None, full: bool, given: dict[str, Any]) -> dict[str, Any]:
    """The preset (or the defaults) overridden by the options given on the command line."""
    if full and figure is None:
        raise click.UsageError("--full only applies to a preset: add --figure 1, 2, 12 or 13")
    if figure is None:
        if given["param"] is None or given["values"] is None:
            raise click.UsageError("give --param and --values, or a preset with --figure")
        base = dict(DEFAULTS)
    else:
        from shuffledp.sweep.config import PRESETS

        fig = PRESETS[figure]
        for opt in ("param", "values"):
            if given[opt] is not None:
                raise click.UsageError(f"--figure {figure} sets --{opt}; drop --{opt} "
                                       f"{given[opt]} or the preset")
        base = {**DEFAULTS, **PAPER, "param": fig["param"], "values": fig["values"],
                "repeats": fig["full_repeats" if full else "repeats"],
                "grid": fig["full_grid" if full else "grid"],
                **{k: fig[k] for k in ("n", "epsilon", "models", "rounding", "emd",
                                       "smoothing", "neighbour", "sigma_scales") if k in fig}}
    return {**base, **{k: x for k, x in given.items() if x is not None}}


def _values(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    return [t.strip() for t in text.split(",") if t.strip()]


@click.command("sweep", cls=Command)
@click.option("--param", type=click.Choice(["B", "epsilon", "n", "grid", "w", "dropout"]),
              default=None, help="The parameter to sweep.")
@click.option("--values", default=None,
              help="Comma-separated values of --param, e.g. 1,16,256 or 64x48,128x96.")
@click.option("--repeats", type=COUNT, default=None,
              help="Independent runs per point and model [default: 3; presets: see above].")
@click.option("--figure", type=click.Choice(FIGURE_NAMES), default=None,
              help="Preset of Ghazi et al. (AAAI 2023): 1 = metrics vs epsilon, 2 = vs n and "
                   "2-grid = vs the grid at epsilon = 10 (central vs baselines, all add/remove), "
                   "12 = bits per user vs B, 13 = metrics vs B (shuffle and central, both "
                   "zero-out).")
@click.option("--neighbour", type=click.Choice(["replace", "zero_out", "add_remove"]),
              default=None,
              help="Neighbour relation of the shuffle and central releases (one for both; "
                   "the baselines are add/remove only) [default: zero_out, the toolkit's "
                   "one default; --figure 1/2: add_remove; --figure 12/13: zero_out].")
@click.option("--models", default=None,
              help="Comma-separated models: shuffle, central, laplace, top_1%, top_0.1% "
                   "[default: shuffle,central; --figure 1/2: the central ones].")
@click.option("--rounding", type=click.Choice(["largest_remainder", "floor"]), default=None,
              help="Shuffle model's scale-and-round rule [default: largest_remainder; "
                   "--figure 13: floor, Ghazi et al. App. F's, whose error falls with B].")
@click.option("--smoothing", type=click.Choice(["auto", "density", "none"]), default=None,
              help="Post-process the shuffle / central releases as `shuffledp heatmap` does "
                   "(auto: the count posterior; density: the pyramid density) [default: "
                   "none; --figure 1/2: auto].")
@click.option("--emd/--no-emd", "emd", default=None,
              help="Solve the exact EMD in every run [default: yes; --figure 12, which is "
                   "about bits per user: no, the EMD column is NaN].")
@click.option("--dropout", type=click.FloatRange(0.0, 1.0, max_open=True), default=None,
              help="Shuffle model: fraction of users who drop out, when not swept "
                   "[default: 0].")
@click.option("--full", is_flag=True,
              help="With --figure: the paper's size (grid and number of runs, above).")
@grid_option(default=None, help="Grid, N or WIDTHxHEIGHT [default: 80x60; --figure 12 and "
                                "--full: 320x240].")
@n_option(low=2, default=None, help="Users of the synthetic data set [default: 50].")
@epsilon_option(default=None, help="Target epsilon [default: 5].")
@delta_option(default=None, help="Shuffle model: target delta [default: 1e-5].")
@B_option(default=None, help="Shuffle model: scaling factor B when not swept [default: 256].")
@w_option()
@click.option("--sigma", type=NONNEGATIVE, default=2.0, show_default=True,
              help="Gaussian filter (pixels) before the metrics; 0 = raw distributions. "
                   "Presets: pixels of a 256-pixel side, scaled with the grid (Ghazi et al. "
                   "do not state theirs).")
@click.option("--data-seed", type=SEED, default=2023, show_default=True,
              help="Seed of the built-in synthetic data set (not of the noise).")
@click.option("--seed", type=SEED, default=None,
              help="Seed all noise (reproducible research, not private releases); default: "
                   "fresh OS entropy for every run.")
@click.option("--input", "input_path", type=click.Path(dir_okay=False, exists=True),
              default=None,
              help="user_id,x,y[,weight] CSV (or --format snap check-ins) instead of the "
                   "built-in synthetic users; --n (default: every user of the file) users are "
                   "drawn from it, seeded by --data-seed.")
@click.option("--format", "fmt", type=click.Choice(["csv", "snap"]), default="csv",
              show_default=True, help="Format of --input.")
@click.option("--bbox", default=None,
              help="With --format snap: LAT_MIN,LAT_MAX,LON_MIN,LON_MAX of the region.")
@out_dir_option(required=True)
@click.option("--no-plot", is_flag=True, help="Write the CSV/JSON only.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@allow_large_option
def sweep(param, values, repeats, figure, neighbour, models, rounding, smoothing, emd, dropout,
          full, grid,
          n, epsilon, delta, B, w,
          sigma, data_seed, seed, input_path, fmt, bbox, out_dir, no_plot, quiet,
          allow_large) -> None:
    """Sweep one parameter; shuffle and central side by side (Ghazi et al., AAAI 2023).

    Writes OUT/runs.csv and OUT/runs.jsonl (every run: parameters, guarantee, bits and bytes
    per user, timings, metrics; rerunning skips the runs already there) and PNG plots with
    95% t-interval bands when matplotlib is installed.
    """
    from shuffledp import sweep as sw

    box, n_input = _input(input_path, fmt, bbox)
    if n_input is not None and n is None and param != "n":
        n = n_input
    s = _settings(figure, full, {"param": param, "values": _values(values),
                                 "repeats": repeats, "grid": grid, "n": n,
                                 "epsilon": epsilon, "delta": delta, "B": B,
                                 "dropout": dropout, "models": _values(models),
                                 "rounding": rounding, "emd": emd, "smoothing": smoothing,
                                 "neighbour": neighbour})
    g = s["grid"]
    base = as_usage_error(
        sw.SweepConfig, grid=sw.parse_value("grid", g) if isinstance(g, str) else g,
        n=s["n"], epsilon=s["epsilon"], delta=s["delta"], B=s["B"], w=w, sigma=sigma,
        data_seed=data_seed, dropout=s["dropout"], rounding=s["rounding"], emd=s["emd"],
        smoothing=s["smoothing"], neighbour=s["neighbour"], sigma_scales=s["sigma_scales"],
        input=input_path, input_format=fmt, bbox=box)
    try:
        sw.check_models(s["models"])
    except (ValueError, TypeError) as exc:
        raise click.BadParameter(str(exc), param_hint="--models") from None
    try:
        runs = sw.plan(s["param"], s["values"], s["repeats"], base, s["models"])
    except (ValueError, TypeError) as exc:
        hint = "--neighbour/--models" if "like for like" in str(exc) else "--values"
        raise click.BadParameter(str(exc), param_hint=hint) from None
    if n_input is not None:
        too_many = sorted({r.config.n for r in runs if r.config.n > n_input})
        if too_many:
            raise click.BadParameter(f"--input {input_path} has {n_input} users, fewer than "
                                     f"n={too_many[-1]}", param_hint="--n/--values")
    _check_sizes(runs, allow_large)
    if not quiet:
        mech = [m for m in s["models"] if m in ("shuffle", "central")]
        rest = [m for m in s["models"] if m not in mech]
        filt = sw.SIGMA_NOTE if base.sigma_scales else f"heatmap filter sigma = {sigma:g} px"
        click.echo(f"neighbour relation: {base.neighbour} for {mech}"
                   + (f", add_remove for the baselines {rest}" if rest else "")
                   + f"; {filt}", err=True)
    bar = _Bar(quiet)
    records = sw.run_sweep(s["param"], s["values"], out_dir, repeats=s["repeats"], base=base,
                           seed=seed, models=s["models"], on_plan=bar.start,
                           on_run=bar.update)
    bar.close()
    out = Path(out_dir)
    click.echo(f"{len(records)} runs written to {out / sw.CSV_NAME} and "
               f"{out / sw.JSONL_NAME} ({bar.skipped} already there, skipped)")
    if s["param"] == "B":
        _bits_table(sw.read_runs(out))
    if no_plot:
        return
    try:
        for path in sw.plot(out, s["param"]):
            click.echo(f"wrote {path}")
    except ImportError:
        click.echo(sw.PLOT_HINT, err=True)


def _input(input_path: str | None, fmt: str, bbox: str | None) -> tuple[Any, int | None]:
    """The parsed --bbox and the number of users of --input (None without --input); loader
    errors exit with one line naming --input."""
    from shuffledp import sweep as sw
    box = parse_bbox(bbox)
    if (box is not None) != (input_path is not None and fmt == "snap"):
        raise click.BadParameter("needed with --input and --format snap, and only then",
                                 param_hint="--bbox")
    if input_path is None:
        return box, None
    from shuffledp.safe_io import NotRegularFileError

    try:
        table = sw.load_input(input_path, fmt, box)
    except NotRegularFileError as exc:  # a usage error (exit 2) naming the option
        raise click.BadParameter(str(exc), param_hint="--input") from None
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"--input {input_path}: {exc}") from None
    return box, table.n_users


def _check_sizes(runs: list[Any], allow_large: bool) -> None:
    """Refuse (exit 1) before running anything: a point no shuffle protocol supports, or one
    whose messages per user or memory would be absurd (unless --allow-large)."""
    from shuffledp.protocol.params import derive_params

    seen = set()
    for run in runs:
        c = run.config
        key = (run.model == "shuffle", c.grid, c.n, c.epsilon, c.delta, c.B, c.w, c.dropout,
               c.rounding, c.neighbour)
        if key in seen:
            continue
        seen.add(key)
        what = f"--grid {c.grid} --n {c.n} --epsilon {c.epsilon:g} --delta {c.delta:g} --B {c.B}"
        params = (as_refusal(f"no shuffle protocol for {what} --dropout {c.dropout:g}",
                             derive_params, c.grid, c.n, epsilon=c.epsilon, delta=c.delta,
                             B=c.B, w=c.w, dropout=c.dropout, rounding=c.rounding,
                             neighbour=c.neighbour)
                  if run.model == "shuffle" else None)
        refuse_if_large(
            what, memory_bytes=heatmap_memory(
                c.grid.n_pixels, 5 * c.n, 1, params.messages_per_user if params else 0,
                params.m if params else 0),
            messages_per_user=params.messages_per_user if params else None,
            allow_large=allow_large)


class _Bar:
    """A tqdm progress bar with ETA over the runs to do (nothing with --quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.bar, self.skipped = quiet, None, 0

    def start(self, todo: int, skipped: int) -> None:
        self.skipped = skipped
        if not self.quiet:
            from tqdm import tqdm

            from shuffledp.cli.common import SafeStream

            self.bar = tqdm(total=todo, unit="run", desc="sweep", dynamic_ncols=True,
                            file=SafeStream())

    def update(self, record: Any) -> None:
        if self.bar is not None:
            value = getattr(record, record.param)
            self.bar.set_postfix_str(f"{record.model} {record.param}="
                                     f"{'inf' if value is None else value}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _bits_table(rows: list[dict[str, Any]]) -> None:
    """Bits per user (the paper's count) and wire bytes per user at each B."""
    seen = {}
    for r in rows:
        if r["model"] == "shuffle" and r["param"] == "B":
            seen[(r["B"], r["grid"], r["n"], r["epsilon"], r["delta"])] = r
    if not seen:
        return
    from shuffledp.sweep.plot import wire_bytes

    click.echo(f"{'B':>6} {'grid':>9} {'n':>5} {'eps':>5} {'delta':>7} {'msgs/user':>10} "
               f"{'bits/user':>12} {'MB (bits/8e6)':>13} {'plain MB':>9} {'encrypted MB':>12}")
    for (b, grid, n, eps, delta), r in sorted(seen.items()):
        wire = wire_bytes(r)
        enc = "-" if wire is None else f"{wire['encrypted_bytes_per_user'] / 1e6:.3f}"
        click.echo(f"{b:>6} {grid:>9} {n:>5} {eps:>5g} {delta:>7g} "
                   f"{r['messages_per_user']:>10} {r['bits_per_user']:>12} "
                   f"{r['bits_per_user'] / 8e6:>13.3f} {r['bytes_per_user'] / 1e6:>9.3f} "
                   f"{enc:>12}")
    click.echo("plain MB: the plaintext batch (simulation path); encrypted MB: what a device "
               "uploads (deployment path: each message carries its HPKE encapsulation and tag)")
