"""``shuffledp figure 3``: the example heatmaps of [Ghazi23]_ Fig. 3, for any input.

An evaluation, not a private release: for each epsilon it draws, side by side, the true
heatmap (no privacy), the Laplace baseline, the baseline keeping the top t% cells and the
private heatmap of Alg. 1-2, all Gaussian-filtered with the same sigma (Sec. 2.3), one row
per epsilon (the paper: epsilon = 1 top, 5 bottom, t = 0.01%). Every mechanism is run with
fresh noise, under add/remove (the baselines' relation), on the same users; the figure, its
caption and ``report.json`` say it is an evaluation that shows non-private data.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially Private Heatmaps"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click

from shuffledp.cli.common import (
    NONNEGATIVE,
    PERCENT,
    POSITIVE,
    SEED,
    Command,
    allow_large_option,
    grid_option,
    heatmap_memory,
    n_option,
    out_dir_option,
    refuse_if_large,
    w_option,
    write_report,
)

#: the figures this command draws
FIGURES = ("3",)

#: what the figure and its report say they are
EVALUATION_LABEL = ("evaluation, not a private release: shows the true (non-private) heatmap "
                    "and several releases on the same users")


@click.command("figure", cls=Command)
@click.argument("number", type=click.Choice(FIGURES), metavar="NUMBER")
@click.option("--input", "input_path", type=click.Path(dir_okay=False), default=None,
              help="CSV with columns user_id,x,y[,weight] (x, y in [0,1)); default: built-in "
                   "synthetic Gaussian-mixture users (Ghazi et al. (AAAI 2023), App. E.3).")
@click.option("--format", "fmt", type=click.Choice(["csv", "snap"]), default="csv",
              show_default=True, help="Input format; snap = SNAP check-ins (tab separated).")
@click.option("--bbox", default=None,
              help="SNAP only: LAT_MIN,LAT_MAX,LON_MIN,LON_MAX mapped onto [0,1)^2.")
@n_option(default=2000, help="Users of the built-in synthetic data set (ignored with --input).")
@click.option("--data-seed", type=SEED, default=None,
              help="Generate another synthetic data set from this seed (not the noise's).")
@grid_option(default="256")
@click.option("--epsilon", "epsilon", type=POSITIVE, multiple=True, default=(1.0, 5.0),
              show_default=True, help="One row per epsilon (repeatable; Fig. 3: 1 and 5).")
@w_option()
@click.option("--top-percent", "top_percent", type=PERCENT, default=0.01, show_default=True,
              help="The thresholding baseline keeps the top t% cells (Fig. 3: 0.01).")
@click.option("--sigma", type=NONNEGATIVE, default=2.0, show_default=True,
              help="Gaussian filter sigma in pixels (Sec. 2.3).")
@click.option("--seed", type=SEED, default=None,
              help="Seed all noise (reproducible figure); default: fresh OS entropy.")
@out_dir_option(default="out")
@click.option("--quiet", is_flag=True, help="No progress messages.")
@allow_large_option
def figure(number, input_path, fmt, bbox, n, data_seed, grid, epsilon, w, top_percent, sigma,
           seed, out_dir, quiet, allow_large) -> None:
    """Draw a figure of Ghazi et al. (AAAI 2023) on any input (an evaluation, not a release).

    ``shuffledp figure 3``: for each --epsilon a row of Gaussian-filtered heatmaps, true (no
    privacy) | Laplace baseline | Laplace top-t% | ours (Alg. 1-2, central, add/remove),
    written to OUT/figure3.png with OUT/report.json (every release's guarantee, the CC and
    SIM of each panel against the truth, and the label "evaluation, not a private release").
    """
    import numpy as np

    from shuffledp.cli.heatmap import _check_input_options, _count_points, _load_table

    epsilons = tuple(epsilon)  # one row each
    box = _check_input_options(input_path, fmt, bbox, None)
    n_points = _count_points(input_path, n)
    refuse_if_large(f"figure {number} on --grid {grid}",
                    memory_bytes=heatmap_memory(grid.n_pixels, n_points, 3),
                    allow_large=allow_large)

    def say(msg: str) -> None:
        if not quiet:
            click.echo(msg, err=True)

    say(f"figure {number}: {EVALUATION_LABEL}")
    table, source = _load_table(input_path, fmt, box, n, data_seed)
    users = table.to_users(grid)
    rngs: list[Any] = ([None] * (3 * len(epsilons)) if seed is None else
                       [np.random.default_rng(s)
                        for s in np.random.SeedSequence(seed).spawn(3 * len(epsilons))])
    rows, records = _rows(users, epsilons, w, top_percent, sigma, rngs, say)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    origin = "lower" if fmt == "snap" else "upper"
    caption = [f"Ghazi et al. (AAAI 2023) Fig. 3 on {Path(source).name if input_path else source}"
               f": {users.n_users} users, {grid} grid, Gaussian filter {sigma:g} px",
               f"{EVALUATION_LABEL}; all central model, add/remove neighbours"
               + ("" if seed is None else f"; --seed {seed}: reproducible noise")]
    _draw(out / "figure3.png", rows, caption, origin)
    report = {
        "figure": number,
        "release": EVALUATION_LABEL,
        "input": source,
        "n_users": users.n_users,
        "grid": {"width": grid.width, "height": grid.height},
        "sigma": sigma,
        "w": w,
        "top_percent": top_percent,
        "seed": seed,
        "columns": ["true (no privacy)", "Laplace", f"Laplace top {top_percent:g}%", "ours"],
        "rows": records,
    }
    write_report(out, report)
    say(f"wrote {out / 'figure3.png'} and {out / 'report.json'} ({EVALUATION_LABEL})")


def _rows(users: Any, epsilons: tuple[float, ...], w: int, top_percent: float, sigma: float,
          rngs: list[Any], say: Any) -> tuple[list[tuple[str, list]], list[dict]]:
    """The panels of every row and what the report says of them."""
    from shuffledp.analyzers.heatmap.baselines import laplace_baseline
    from shuffledp.analyzers.heatmap.central import central_heatmap
    from shuffledp.analyzers.heatmap.metrics import cc, sim
    from shuffledp.analyzers.heatmap.release import normalise
    from shuffledp.analyzers.heatmap.render import gaussian_heatmap

    aggregate = users.aggregate()
    h_true = gaussian_heatmap(normalise(aggregate), sigma)

    def row(i: int, eps: float) -> tuple[tuple[str, list], dict]:
        say(f"epsilon = {eps:g}: Laplace, Laplace top {top_percent:g}%, ours")
        releases = {
            "Laplace": laplace_baseline(aggregate, eps, rng=rngs[3 * i]),
            f"Laplace top {top_percent:g}%": laplace_baseline(aggregate, eps, rng=rngs[3 * i + 1],
                                                              top_percent=top_percent),
            "ours": central_heatmap(users, eps, w=w, neighbour="add_remove",
                                    rng=rngs[3 * i + 2]),
        }
        panels = [("true (no privacy)", h_true)]
        record: dict[str, Any] = {"epsilon": eps, "panels": {}}
        for name, rel in releases.items():
            h = gaussian_heatmap(rel.estimate, sigma)
            m = {"cc": cc(h_true, h), "sim": sim(h_true, h)}
            panels.append((f"{name}: CC {m['cc']:.2f}", h))
            record["panels"][name] = {"metrics": m, "guarantee": rel.guarantee.to_dict()}
        return (f"epsilon = {eps:g}", panels), record

    # rows in parallel threads (HiGHS, the noise sampler and the filter release the GIL);
    # each row has its own noise streams, so the result does not depend on the order
    with ThreadPoolExecutor(max(1, min(len(epsilons), os.cpu_count() or 1))) as pool:
        done = list(pool.map(row, range(len(epsilons)), epsilons))
    return [r for r, _ in done], [rec for _, rec in done]


def _draw(path: Path, rows: list[tuple[str, list]], caption: list[str], origin: str) -> None:
    """One render_png strip per row (its caption the row's epsilon), stacked under the
    figure's caption, written atomically."""
    from PIL import Image, ImageDraw

    from shuffledp.analyzers.heatmap.render import render_png
    from shuffledp.safe_io import atomic_path

    with tempfile.TemporaryDirectory() as tmp:
        strips = []
        for k, (title, panels) in enumerate(rows):
            p = render_png(Path(tmp) / f"row{k}.png", panels, caption=[title], origin=origin)
            with Image.open(p) as im:
                strips.append(im.convert("RGB"))
    line_h, pad = 16, 8
    head = pad + line_h * len(caption)
    width = max(s.width for s in strips)
    canvas = Image.new("RGB", (width, head + sum(s.height for s in strips)), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for i, line in enumerate(caption):
        draw.text((pad, pad + i * line_h), line, fill=(0, 0, 0))
    y = head
    for s in strips:
        canvas.paste(s, (0, y))
        y += s.height
    with atomic_path(path, suffix=".png") as tmp_path:
        canvas.save(tmp_path, format="PNG")
