"""Fig. 1-2 of [Ghazi23]_ on synthetic mixtures (App. E.3): ours vs Laplace vs top-t%.

Runs the sweep itself (:func:`shuffledp.sweep.run_sweep`, the code behind
``shuffledp sweep --figure 1/2/2-grid``) with the presets of ``shuffledp.sweep.PRESETS`` and
prints, per (value, method), the mean and the 95% Student-t interval of EMD, KL, CC and SIM
over the runs, with the neighbour relation of every line.

Run: python bench/fig1_2.py [--runs R] [--part eps|n|grid|all] [--side N] [--none] [--out DIR]

Settings of [Ghazi23]_ Sec. 4 and App. E.1 (the presets): the central algorithm (Alg. 1-2,
released as ``shuffledp heatmap`` does, ``--smoothing auto``; ``--none`` adds Alg. 2's output
as printed) against the Laplace baseline and its top-1% / 0.1% / 0.01% variants, every one
central under add/remove (the baselines' relation: like for like), n = 200 users of the
synthetic mixture, w = 20, metrics on heatmaps filtered on both sides with sigma = 2 px per
256 px of side (the paper does not state its sigma; ``shuffledp.sweep.SIGMA_NOTE``):

* Fig. 1, epsilon in {0.1, 0.5, 1, 2, 5, 10} at Delta = 256 (``--part eps``; the paper
  averages 60 runs, ``--runs 60``);
* Fig. 2, n in {50, 100, 200, 300, 400, 500} at epsilon = 10 (``--part n``, 10 runs in the
  paper);
* Fig. 2 (resolution), Delta in {64, 128, 256} at epsilon = 10, n = 200 (``--part grid``).

The default here is 3 runs; ``--side 64`` runs the eps and n parts at the presets' quick size.
Every run uses the same data set (``data_seed``) and independent noise seeded from ``--seed``
and the run's key, as the sweep does.

References
----------
.. [Ghazi23] Ghazi et al. (2023), "Differentially private heatmaps" -- full entry in
   docs/references.md
"""

from __future__ import annotations

import argparse
import tempfile
from typing import Any

import numpy as np

from shuffledp.grid import Grid
from shuffledp.sweep import PRESETS, SIGMA_NOTE, SweepConfig, read_runs, run_sweep, t_interval

KEYS = ("emd", "kl", "cc", "sim")


def base_config(figure: str, side: int, smoothing: str) -> SweepConfig:
    """The preset's fixed parameters (as ``shuffledp sweep --figure`` builds them)."""
    fig = PRESETS[figure]
    return SweepConfig(grid=Grid(side, side), n=fig["n"], epsilon=fig.get("epsilon", 1.0),
                       sigma=2.0, sigma_scales=True, smoothing=smoothing,
                       neighbour=fig["neighbour"])


def _value(row: dict, param: str) -> Any:
    return int(row["grid"].split("x")[0]) if param == "grid" else row[param]


def table(name: str, param: str, values: list, rows: list, runs: int) -> None:
    """Mean and 95% t-interval per (value, method) of this sweep's rows."""
    print(f"\n== {name}: mean +/- 95% t half-width over {runs} runs ==")
    print(f"{name:>6s} {'method':>16s} {'neighbour':>11s} " +
          " ".join(f"{k.upper():>17s}" for k in KEYS))
    labels = sorted({(r["model"], "smoothing=auto" in r["key"]) for r in rows
                     if r["param"] == param})
    for value in values:
        for model, smoothed in labels:
            sel = [r for r in rows if r["param"] == param and r["model"] == model
                   and ("smoothing=auto" in r["key"]) == smoothed and _value(r, param) == value
                   and r["repeat"] < runs]
            if not sel:
                continue
            label = ("ours" if smoothed else "ours (Alg. 2)") if model == "central" else model
            cells = []
            for k in KEYS:
                mean, low, _ = t_interval([float(r[k]) for r in sel])
                cells.append(f"{mean:8.4f} +/-{mean - low:7.4f}")
            nb = sel[0]["neighbour"].split(" ")[0]
            print(f"{value!s:>6s} {label:>16s} {nb:>11s} " + " ".join(cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--part", default="all", choices=["eps", "n", "grid", "all"])
    ap.add_argument("--side", type=int, default=256,
                    help="grid side of the eps and n parts (default 256, the paper's)")
    ap.add_argument("--none", action="store_true",
                    help="also run Alg. 2's output as printed (--smoothing none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None,
                    help="keep the runs here (resumable); default: a temporary directory")
    a = ap.parse_args()
    print(SIGMA_NOTE)
    smoothings = ["auto", "none"] if a.none else ["auto"]
    parts = {"eps": ("1", "epsilon"), "n": ("2", "n"), "grid": ("2-grid", "grid")}
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or tmp
        for part, (figure, param) in parts.items():
            if a.part not in (part, "all"):
                continue
            fig = PRESETS[figure]
            for sm in smoothings:
                models = fig["models"] if sm == "auto" else ["central"]
                if param == "grid":
                    for g in fig["values"]:  # one point per grid
                        side = int(g.split("x")[0])
                        run_sweep("grid", [g], out, repeats=a.runs, seed=a.seed,
                                  base=base_config(figure, side, sm), models=models)
                else:
                    run_sweep(param, fig["values"], out, repeats=a.runs, seed=a.seed,
                              base=base_config(figure, a.side, sm), models=models)
            values = ([int(g.split("x")[0]) for g in fig["values"]] if param == "grid"
                      else fig["values"])
            table(part, param, values, read_runs(out), a.runs)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
