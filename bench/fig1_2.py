"""Trends of Fig. 1-2 of [Ghazi23]_ on synthetic mixtures (App. E.3): ours vs Laplace vs top-t%.

Runs the sweep itself (:func:`shuffledp.sweep.run_sweep`, the code behind
``shuffledp sweep --figure 1/2``) with the presets of ``shuffledp.cli.sweep.FIGURES``, and
prints the mean of every (value, method) over the repeats as a table.

Run: python bench/fig1_2.py [--runs R] [--part eps|n|grid|all] [--side N] [--out DIR]

Settings that reproduce [Ghazi23]_ Fig. 1-2 (Sec. 4): the central algorithm (Alg. 1-2,
replace-one, smoothed as ``shuffledp heatmap`` releases it) against the Laplace baseline and
its top-1% / top-0.1% variants, n = 200 users of the synthetic mixture, w = 20, metrics on
Gaussian-filtered heatmaps (sigma = 2 px at 256x256) against the normalised aggregate, on a
256x256 grid:

* Fig. 1, epsilon in {0.1, 0.5, 1, 2, 5, 10}:
  ``shuffledp sweep --figure 1 --full --seed 0 --out DIR`` (10 repeats), here ``--part eps``;
* Fig. 2, n in {50, 100, 200, 350, 500} at epsilon = 1:
  ``shuffledp sweep --figure 2 --full --seed 0 --out DIR``, here ``--part n``.

``--part grid`` adds the grid sweep {64, 128, 256} at epsilon = 1, n = 200 (sigma scaled
with the grid, 2 px at 256). The default here is 3 repeats (``--runs 10`` is ``--full``);
every repeat uses the same data set (``data_seed``) and independent noise seeded from
``--seed`` and the run's key, as the sweep does. ``--side 64`` runs the eps and n parts at
the presets' quick 64x64 size. Targets (eps = 1, n = 200, grid 256): our EMD <= 0.5 x
Laplace's; ours max/min over grids {64, 128, 256} <= 1.5 while the baseline grows.

References
----------
.. [Ghazi23] B. Ghazi, J. He, K. Kohlhoff, R. Kumar, P. Manurangsi, V. Navalpakkam,
   N. Valliappan, "Differentially Private Heatmaps", AAAI 2023. arXiv:2211.13454.
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from shuffledp.cli.sweep import FIGURES
from shuffledp.grid import Grid
from shuffledp.sweep import SweepConfig, read_runs, run_sweep

#: printed name of each sweep model
LABELS = {"central": "ours", "laplace": "laplace", "top_1%": "top_1%", "top_0.1%": "top_0.1%"}


def base_config(figure: str, side: int) -> SweepConfig:
    """The preset's fixed parameters (as ``shuffledp sweep --figure`` builds them)."""
    fig = FIGURES[figure]
    return SweepConfig(grid=Grid(side, side), n=fig["n"], epsilon=fig.get("epsilon", 1.0),
                       sigma=2.0 * side / 256, smoothing=fig["smoothing"])


def table(name: str, param: str, values, out: str, runs: int) -> None:
    """Mean metrics per (value, method) of the rows of ``out`` for this sweep."""
    rows = read_runs(out)
    print(f"\n== {name} (mean of {runs} runs) ==")
    print(f"{name:>6s} {'method':>9s} {'EMD':>8s} {'KL':>8s} {'CC':>7s} {'SIM':>7s}")
    for value in values:
        for model, label in LABELS.items():
            sel = [r for r in rows if r["param"] == param and r["model"] == model
                   and _value(r, param) == value and r["repeat"] < runs]
            mean = {k: float(np.mean([r[k] for r in sel])) for k in ("emd", "kl", "cc", "sim")}
            print(f"{value!s:>6s} {label:>9s} {mean['emd']:8.4f} {mean['kl']:8.3f} "
                  f"{mean['cc']:7.3f} {mean['sim']:7.3f}", flush=True)


def _value(row: dict, param: str):
    return int(row["grid"].split("x")[0]) if param == "grid" else row[param]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--part", default="all", choices=["eps", "n", "grid", "all"])
    ap.add_argument("--side", type=int, default=256,
                    help="grid side of the eps and n parts (default 256, the paper's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None,
                    help="keep the runs here (resumable); default: a temporary directory")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or tmp
        models = list(LABELS)
        if a.part in ("eps", "all"):
            fig = FIGURES["1"]
            run_sweep("epsilon", fig["values"], out, repeats=a.runs, seed=a.seed,
                      base=base_config("1", a.side), models=models)
            table("eps", "epsilon", fig["values"], out, a.runs)
        if a.part in ("n", "all"):
            fig = FIGURES["2"]
            run_sweep("n", fig["values"], out, repeats=a.runs, seed=a.seed,
                      base=base_config("2", a.side), models=models)
            table("n", "n", fig["values"], out, a.runs)
        if a.part in ("grid", "all"):
            sides = [64, 128, 256]
            for side in sides:  # one point per grid: sigma scales with the side
                run_sweep("grid", [Grid(side, side)], out, repeats=a.runs, seed=a.seed,
                          base=base_config("2", side), models=models)
            table("grid", "grid", sides, out, a.runs)


if __name__ == "__main__":
    main()
