"""``shuffledp metric``: metric DP at the user level from the command line ([Imola]_).

Subcommands
-----------
freq       FreqEstLocal (Alg. 4) with GKRR on B x C, local (Thm 6.6) or central (Cor. 6.8),
           next to the user-level k-RR baseline
           (:func:`shuffledp.analyzers.metric.user_level.user_level_krr`)
itemwise   PrivEMDItemWise (Alg. 2) with GKRR on B x C: the shuffled released items
linear     PrivEMDLinear (Alg. 1): the average distance to a city over a CSV of
           ``user_id,x,y`` points snapped to a grid, Laplace or Gaussian, next to the
           user-level Laplace baseline

``freq`` and ``itemwise`` read ``--input``, a CSV of ``user_id,item`` lines (an optional
header ``user_id,item``; items are indices b t + c of B x C, 0 <= item < s t; every user
must hold the same number m of items, the bounded setting) and write ``OUT/release.json``
(the release and its guarantee; ``itemwise`` also ``OUT/outputs.npy``) and
``OUT/report.json`` (the guarantee, the baseline's, and the errors against the non-private
answer, computed from the input without noise: evaluation only). The item parameter comes
from ``--alpha0`` or, with ``--target-alpha``, the largest alpha0 whose Thm 4.4 alpha does
not exceed the target.

Errors follow :mod:`shuffledp.cli.common`: an option value out of range is a usage error
(exit 2), a bad input file or a refused release (the Thm 4.4 bound not valid) exits 1 with
one line, never a traceback.

References
----------
.. [Imola] Imola et al. (preprint), "Metric Differential Privacy at the User-Level"
   -- full entry in docs/references.md
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

from shuffledp.accounting.metric.shuffle import DEFAULT_MAX_DELTA_OUT, emd_itemwise_alpha0
from shuffledp.cli.common import (
    COUNT,
    POSITIVE,
    SEED,
    UNIT,
    UNIT_CLOSED_HIGH,
    Group,
    Real,
    as_refusal,
    delta_option,
    force_option,
    grid_option,
    json_default,
    out_dir_option,
    write_npy,
    write_report,
)

EVALUATION_NOTE = ("errors are computed from the input without noise: evaluation only, do "
                   "not publish them with the release")
F = Callable[..., Any]


# --------------------------------------------------------------------------- input
def load_user_items(path: str, k: int) -> tuple[np.ndarray, list[str]]:
    """(n, m) item array and the user ids (first-appearance order) of a ``user_id,item`` CSV.

    Raises ValueError naming ``--input``, the line and the value for a malformed line, an
    item outside 0..k-1, users of unequal size or an empty file.
    """
    from shuffledp.safe_io import open_regular

    users: dict[str, list[int]] = {}
    with open_regular(path, what="--input") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        for lineno, row in enumerate(csv.reader(text), start=1):
            if not row or (lineno == 1 and [c.strip() for c in row] == ["user_id", "item"]):
                continue
            if len(row) != 2:
                raise ValueError(f"--input {path} line {lineno}: expected 'user_id,item', got "
                                 f"{','.join(row)[:60]!r}")
            try:
                item = int(row[1].strip())
            except ValueError:
                raise ValueError(f"--input {path} line {lineno}: item must be an integer, got "
                                 f"{row[1][:40]!r}") from None
            if not 0 <= item < k:
                raise ValueError(f"--input {path} line {lineno}: item {item} is outside the "
                                 f"domain 0..{k - 1} (s t = {k})")
            users.setdefault(row[0].strip(), []).append(item)
    if not users:
        raise ValueError(f"--input {path}: no 'user_id,item' lines")
    sizes = {uid: len(items) for uid, items in users.items()}
    m = next(iter(sizes.values()))
    odd = [uid for uid, size in sizes.items() if size != m]
    if odd:
        raise ValueError(f"--input {path}: every user must hold the same number of items "
                         f"(bounded d_EM-DP); user {next(iter(sizes))!r} has {m}, user "
                         f"{odd[0]!r} has {sizes[odd[0]]}")
    return np.array(list(users.values()), dtype=np.int64), list(users)


# --------------------------------------------------------------------------- options
def _common_options(fn: F) -> F:
    options = [
        click.option("--input", "input_path", type=click.Path(dir_okay=False), required=True,
                     help="CSV of 'user_id,item' lines (item = b t + c in 0..s t - 1)."),
        click.option("--s", "s", type=COUNT, required=True, help="Clusters |B|."),
        click.option("--t", "t", type=COUNT, required=True, help="Items per cluster |C|."),
        click.option("--r", "r", type=Real(0.0, 1.0, closed_high=True), required=True,
                     help="Within-cluster distance, in (0, 1]."),
        delta_option(default=1e-9, help="delta of Thm 4.3, in (0, 1)."),
        click.option("--model", type=click.Choice(["local", "central"]), default="central",
                     show_default=True,
                     help="local: each user shuffles her items; central: the server shuffles "
                          "all m n."),
        click.option("--alpha0", type=POSITIVE, default=None,
                     help="Item-level parameter of GKRR."),
        click.option("--target-alpha", "target_alpha", type=POSITIVE, default=None,
                     help="Use the largest alpha0 whose Thm 4.4 alpha is <= this."),
        click.option("--max-delta-out", "max_delta_out", type=UNIT_CLOSED_HIGH,
                     default=DEFAULT_MAX_DELTA_OUT, show_default=True,
                     help="Largest delta' accepted (above it the release is refused)."),
        click.option("--seed", type=SEED, default=None,
                     help="Reproducible evaluation (not a private release)."),
        out_dir_option(writes=("release.json", "report.json"), required=True),
        force_option(),
    ]
    for opt in reversed(options):
        fn = opt(fn)
    return fn


def _check_alpha(alpha0: float | None, target_alpha: float | None) -> None:
    if (alpha0 is None) == (target_alpha is None):
        raise click.UsageError(f"give exactly one of --alpha0 and --target-alpha, got "
                               f"--alpha0={alpha0} --target-alpha={target_alpha}")


def _write_json(path: Path, record: dict[str, Any]) -> None:
    from shuffledp.safe_io import write_atomic

    write_atomic(path, (json.dumps(record, indent=2, default=json_default) + "\n").encode())


def _errors(s: int, t: int, r: float, estimate: np.ndarray, truth: np.ndarray) -> dict:
    from shuffledp.analyzers.metric.freq import product_emd

    diff = estimate - truth
    return {"emd": product_emd(s, t, r, estimate, truth), "l1": float(np.abs(diff).sum()),
            "linf": float(np.abs(diff).max())}


# --------------------------------------------------------------------------- commands
@click.group("metric", cls=Group)
def metric() -> None:
    """Metric DP at the user level (Imola et al.): frequency, item-wise and linear releases."""


@metric.command("freq")
@_common_options
@click.option("--baseline-epsilon", "baseline_epsilon", type=POSITIVE, default=None,
              help="Budget of the user-level baselines (k-RR, Hadamard response)  "
                   "[default: alpha r]")
@click.option("--mechanism", type=click.Choice(["auto", "gkrr", "hadamard"]), default="auto",
              show_default=True,
              help="The release: FreqEstLocal with GKRR (d_EM-DP), user-level Hadamard "
                   "response of one sampled item at epsilon = alpha r (local model only), or "
                   "auto: the one with the smaller d_EM error simulated on public synthetic "
                   "data of the same shape (Hadamard response wins most of Imola et al. "
                   "Table 2(b)'s local settings; GKRR at small k, small r or large n).")
def freq_cmd(input_path, s, t, r, delta, model, alpha0, target_alpha, max_delta_out, seed,
             out_dir, force, baseline_epsilon, mechanism):
    """Frequencies under user-level metric DP: FreqEstLocal with GKRR (Imola et al., Alg. 4)
    or Hadamard response, whichever is more accurate for the parameters (--mechanism)."""
    from shuffledp.analyzers.metric.freq import choose_freq_mechanism, freq_est_local
    from shuffledp.analyzers.metric.user_level import user_level_krr
    from shuffledp.randomness import noise_source

    _check_alpha(alpha0, target_alpha)
    if mechanism == "hadamard" and model != "local":
        raise click.BadParameter("Hadamard response is a local mechanism: use --model local",
                                 param_hint="--mechanism")
    t0 = time.perf_counter()
    users, _ = load_user_items(input_path, s * t)
    n, m = users.shape
    what = f"no release for --model {model} with n={n}, m={m}"
    if mechanism == "auto":
        choice = as_refusal(what, choose_freq_mechanism, n, m, s, t, r, delta, model,
                            alpha0=alpha0, target_alpha=target_alpha,
                            baseline_epsilon=baseline_epsilon, max_delta_out=max_delta_out)
    else:
        choice = {"choice": mechanism, "predicted_emd": {}, "rule": f"--mechanism {mechanism}"}
    chosen = choice["choice"]
    rng = noise_source(seed)
    rel = as_refusal(what, freq_est_local,
                     users, s, t, r, delta, model, alpha0=alpha0, target_alpha=target_alpha,
                     baseline_epsilon=baseline_epsilon,
                     baseline="hadamard" if model == "local" else None,
                     max_delta_out=max_delta_out, rng=rng)
    eps_b = baseline_epsilon if baseline_epsilon is not None else rel.guarantee.alpha * r
    krr = user_level_krr(users, s * t, eps_b, rng=rng)
    truth = np.bincount(users.ravel(), minlength=s * t) / users.size
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hr = rel.baseline
    record, guarantee, name = _chosen_release(chosen, rel, krr)
    _write_json(out / "release.json", record)
    errors = {"gkrr": _errors(s, t, r, rel.estimate, truth),
              "baseline": _errors(s, t, r, krr.estimate, truth)}
    if hr is not None:
        errors["hadamard"] = _errors(s, t, r, hr.estimate, truth)
    report = {
        "mechanism": name,
        "release": "reproducible evaluation" if seed is not None else "private",
        "n": n, "m": m, "k": s * t, "model": model, "alpha0": rel.alpha0,
        "guarantee": guarantee.to_dict(),
        "choice": {"mechanism": chosen, **choice,
                   "guarantees": {"gkrr": rel.guarantee.to_dict(),
                                  **({"hadamard": hr.guarantee.to_dict()} if hr else {})}},
        "baseline": {"mechanism": "user-level k-RR of one sampled item",
                     "guarantee": krr.guarantee.to_dict()},
        "errors": errors,
        "seconds": time.perf_counter() - t0,
        "notes": [EVALUATION_NOTE,
                  "only the chosen mechanism's output is in release.json; the others ran "
                  "on the same data for the errors above (evaluation)"],
    }
    write_report(out, report)
    e = report["errors"]
    hr_txt = f", Hadamard response {e['hadamard']['emd']:.4g}" if "hadamard" in e else ""
    click.echo(f"n={n} m={m} alpha={rel.guarantee.alpha:.4g} delta'={rel.guarantee.delta:.3g}; "
               f"d_EM error GKRR {e['gkrr']['emd']:.4g}{hr_txt}, k-RR baseline (eps="
               f"{krr.epsilon:.4g}) {e['baseline']['emd']:.4g}; released: {name} "
               f"({choice['rule']}); wrote {out}/release.json and report.json")


def _chosen_release(chosen: str, rel: Any, krr: Any) -> tuple[dict, Any, str]:
    """(release.json record, guarantee, name) of the released mechanism: FreqEstLocal with
    GKRR (its k-RR baseline alongside) or the user-level Hadamard response."""
    if chosen == "gkrr":
        return ({**rel.to_dict(), "baseline": krr.to_dict()}, rel.guarantee,
                "FreqEstLocal with GKRR")
    hr = rel.baseline
    return ({"mechanism": "user-level Hadamard response of one sampled item", **hr.to_dict()},
            hr.guarantee, "user-level Hadamard response of one sampled item")


@metric.command("itemwise")
@_common_options
def itemwise_cmd(input_path, s, t, r, delta, model, alpha0, target_alpha, max_delta_out, seed,
                 out_dir, force):
    """PrivEMDItemWise with GKRR (Imola et al., Alg. 2): the shuffled released items."""
    from shuffledp.analyzers.metric.itemwise import priv_emd_itemwise
    from shuffledp.encoders.metric.mechanisms import GKRR

    _check_alpha(alpha0, target_alpha)
    t0 = time.perf_counter()
    users, _ = load_user_items(input_path, s * t)
    n, m = users.shape
    what = f"no release for --model {model} with n={n}, m={m}"
    if target_alpha is not None:
        alpha0 = as_refusal(what, emd_itemwise_alpha0, target_alpha, m, delta, model,
                            n if model == "central" else None,
                            max_delta_out=max_delta_out).alpha0
    mech = as_refusal(what, GKRR, s, t, r, alpha0)
    rel = as_refusal(what, priv_emd_itemwise, users, mech, delta, model,
                     max_delta_out=max_delta_out, rng=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_npy(out / "outputs.npy", rel.outputs)
    _write_json(out / "release.json", rel.to_dict())
    truth = np.bincount(users.ravel(), minlength=s * t) / users.size
    hist = rel.histogram(s * t)
    report = {
        "mechanism": "PrivEMDItemWise with GKRR",
        "release": "reproducible evaluation" if seed is not None else "private",
        "n": n, "m": m, "k": s * t, "model": model, "alpha0": mech.alpha0,
        "guarantee": rel.guarantee.to_dict(),
        "composition_alpha": rel.composition_alpha,
        "errors": {"histogram": _errors(s, t, r, hist, truth),
                   "debiased": _errors(s, t, r, mech.debias(hist), truth)},
        "seconds": time.perf_counter() - t0,
        "notes": [EVALUATION_NOTE],
    }
    write_report(out, report)
    click.echo(f"n={n} m={m} alpha={rel.guarantee.alpha:.4g} (composition "
               f"{rel.composition_alpha:.4g}) delta'={rel.guarantee.delta:.3g}; wrote "
               f"{out}/outputs.npy, release.json and report.json")


def load_user_points(path: str, grid: Any) -> np.ndarray:
    """(n, m) cell indices of a ``user_id,x,y`` CSV snapped to ``grid`` (equal m per user)."""
    from shuffledp.datasets import load_csv
    from shuffledp.safe_io import NotRegularFileError

    try:
        table = load_csv(path)
    except NotRegularFileError as e:
        raise click.BadParameter(str(e), param_hint="--input") from None
    if not np.all(table.weight == 1.0):
        raise ValueError(f"--input {path}: the linear query averages unweighted points; "
                         "drop the weight column or set every weight to 1")
    cells = grid.points_to_pixels(table.x, table.y)
    ids, inverse = np.unique(table.user.astype(str), return_inverse=True)
    sizes = np.bincount(inverse)
    if sizes.min() != sizes.max():
        short, long = int(np.argmin(sizes)), int(np.argmax(sizes))
        raise ValueError(f"--input {path}: every user must hold the same number of points "
                         f"(bounded d_EM-DP); user {str(ids[short])!r} has {sizes[short]}, user "
                         f"{str(ids[long])!r} has {sizes[long]}")
    order = np.argsort(inverse, kind="stable")
    return cells[order].reshape(ids.size, int(sizes[0]))


def _point(text: str) -> tuple[float, float]:
    try:
        x, y = (float(p) for p in text.split(","))
    except ValueError:
        raise click.BadParameter(f"expected X,Y in [0, 1), got {text!r}") from None
    if not (0 <= x < 1 and 0 <= y < 1):
        raise click.BadParameter(f"expected X,Y in [0, 1), got {text!r}")
    return x, y


@metric.command("linear")
@click.option("--input", "input_path", type=click.Path(dir_okay=False), required=True,
              help="CSV 'user_id,x,y' (x, y in [0, 1)); every user the same number of points.")
@grid_option(default="16", help="Snap points to this grid: N (N x N) or WIDTHxHEIGHT; "
                                 "d_X is the Euclidean distance between cell centres over "
                                 "the diameter.")
@click.option("--city", type=str, default="0.5,0.5", show_default=True,
              help="X,Y of the city: the query is the mean distance to its cell.")
@click.option("--alpha", type=POSITIVE, required=True, help="d_EM-DP parameter alpha.")
@click.option("--noise", type=click.Choice(["laplace", "gaussian"]), default="laplace",
              show_default=True, help="laplace: (alpha, 0); gaussian: (alpha, --delta).")
@click.option("--delta", type=UNIT, default=None, help="delta of the Gaussian variant.")
@click.option("--model", type=click.Choice(["local", "central"]), default="central",
              show_default=True,
              help="local: each user randomizes her own answer; central: the server adds the "
                   "noise once to the users' average.")
@click.option("--baseline-epsilon", "baseline_epsilon", type=POSITIVE, default=None,
              help="Budget of the user-level Laplace baseline  [default: alpha]")
@click.option("--seed", type=SEED, default=None,
              help="Reproducible evaluation (not a private release).")
@out_dir_option(writes=("release.json", "report.json"), required=True)
@force_option()
def linear_cmd(input_path, grid, city, alpha, noise, delta, model, baseline_epsilon, seed,
               out_dir, force):
    """PrivEMDLinear (Imola et al., Alg. 1): the average distance to a city."""
    from shuffledp.analyzers.metric.linear import priv_emd_linear, query_value, user_level_linear
    from shuffledp.encoders.metric.spaces import grid_space

    cx, cy = _point(city)
    if noise == "gaussian" and delta is None:
        raise click.UsageError("--noise gaussian needs --delta in (0, 1)")
    if noise == "laplace" and delta is not None:
        raise click.UsageError(f"--delta={delta} applies to --noise gaussian only")
    t0 = time.perf_counter()
    if grid.n_pixels < 2:
        raise click.UsageError(f"--grid must have at least 2 cells, got --grid {grid}")
    users = load_user_points(input_path, grid)
    space = grid_space(grid.height, grid.width)
    f = space.distances[:, int(grid.points_to_pixels(np.array([cx]), np.array([cy]))[0])]
    n, m = users.shape
    what = f"no release for --model {model} with n={n}, m={m}"
    rel = as_refusal(what, priv_emd_linear, users, space, f, alpha, model, noise=noise,
                     delta=delta, rng=seed)
    eps_b = alpha if baseline_epsilon is None else baseline_epsilon
    base = as_refusal(what, user_level_linear, users, space.k, f, eps_b, model, rng=seed)
    truth = float(query_value(users, space, f)[0])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "release.json", rel.to_dict())
    err = {"metric": abs(float(rel.estimate[0]) - truth),
           "baseline": abs(float(base.estimate[0]) - truth)}
    report = {
        "mechanism": f"PrivEMDLinear ({noise})",
        "release": "reproducible evaluation" if seed is not None else "private",
        "query": f"mean distance to the cell of ({cx}, {cy}), in grid diameters",
        "n": n, "m": m, "grid": str(grid), "model": model,
        "estimate": float(rel.estimate[0]), "guarantee": rel.guarantee.to_dict(),
        "baseline": {"mechanism": "user-level Laplace (replace a whole dataset)",
                     "estimate": float(base.estimate[0]),
                     "guarantee": base.guarantee.to_dict()},
        "errors": err, "truth": truth,
        "seconds": time.perf_counter() - t0,
        "notes": [EVALUATION_NOTE],
    }
    write_report(out, report)
    click.echo(f"n={n} m={m} estimate {rel.estimate[0]:.5g} (alpha={alpha:g}, {noise}); "
               f"error {err['metric']:.3g} vs user-level baseline (eps={eps_b:g}) "
               f"{err['baseline']:.3g}; wrote {out}/release.json and report.json")


__all__ = ["load_user_items", "load_user_points", "metric"]
